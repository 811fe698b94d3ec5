"""The multiraft Spark source: batch and micro-batch reads against a real 3-node cluster and a local Spark."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from pyspark.sql.streaming.datasource import ReadAllAvailable
from structlog.testing import capture_logs

from multiraft import Admin, ConfigError, Producer
from spark_connector import _source as source_module
from spark_connector._source import (
    DataLossError,
    MultiraftBatchReader,
    MultiraftStreamReader,
    OffsetRange,
    _ReadSettings,
    read_range,
    source_schema,
)
from tests.integration._helpers import Cluster

pytestmark = pytest.mark.spark

Spark = Any


def produce(
    bootstrap: str,
    topic: str,
    partition: int,
    values: list[bytes],
    *,
    headers: list[Any] | None = None,
    timestamp_ms: int | None = None,
) -> None:
    with Producer(bootstrap) as producer:
        producer.send_batch(topic, values, partition=partition, headers=headers, timestamps=timestamp_ms).result(30)


def values_for(topic: str, partition: int, count: int, first: int = 0) -> list[bytes]:
    return [b"%s-%d-%d" % (topic.encode(), partition, i) for i in range(first, first + count)]


def reader(spark: Spark, bootstrap: str, **options: str) -> Any:
    read = spark.read.format("multiraft").option("bootstrap", bootstrap)
    for key, value in options.items():
        read = read.option(key, value)
    return read.load()


def stream(spark: Spark, bootstrap: str, **options: str) -> Any:
    read = spark.readStream.format("multiraft").option("bootstrap", bootstrap)
    for key, value in options.items():
        read = read.option(key, value)
    return read.load()


def wait_for_log_start(bootstrap: str, topic: str, partition: int, timeout_s: float = 30.0) -> int:
    """Retention runs on the leader every retention_check_ms: wait (bounded) until it dropped a segment."""
    deadline = time.monotonic() + timeout_s
    with Admin(bootstrap) as admin:
        while time.monotonic() < deadline:
            start = admin.list_offsets(topic, "earliest", [partition])[partition]
            if start > 0:
                return start
            time.sleep(0.1)
    raise AssertionError(f"{topic}/{partition}: retention did not move the log start within {timeout_s}s")


@pytest.fixture(scope="module")
def orders(shared_cluster: Cluster) -> Iterator[str]:
    """Topic ``orders``: 3 partitions holding 50, 30 and 20 records."""
    shared_cluster.create_topic("orders", 3, 3)
    for partition, count in enumerate((50, 30, 20)):
        produce(shared_cluster.bootstrap, "orders", partition, values_for("orders", partition, count))
    yield "orders"


# ------------------------------------------------------------------------------------------ batch


def test_batch_read_returns_every_record_with_the_kafka_schema(
    spark: Spark, shared_cluster: Cluster, orders: str
) -> None:
    df = reader(spark, shared_cluster.bootstrap, subscribe=orders)
    assert df.schema == source_schema({})
    rows = df.collect()
    assert sorted((r.partition, r.offset, bytes(r.value)) for r in rows) == sorted(
        (p, i, v) for p, n in enumerate((50, 30, 20)) for i, v in enumerate(values_for(orders, p, n))
    )
    assert {r.topic for r in rows} == {orders}
    assert {r.timestampType for r in rows} == {0}
    assert all(r.key is None for r in rows)
    assert abs(rows[0].timestamp.timestamp() - time.time()) < 600


def test_batch_read_honours_starting_and_ending_offsets(spark: Spark, shared_cluster: Cluster, orders: str) -> None:
    df = reader(
        spark,
        shared_cluster.bootstrap,
        subscribe=orders,
        startingOffsets='{"orders": {"0": 10, "1": -2, "2": 5}}',
        endingOffsets='{"orders": {"0": 20, "1": 3, "2": -1}}',
    )
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    want = [(0, o) for o in range(10, 20)] + [(1, o) for o in range(3)] + [(2, o) for o in range(5, 20)]
    assert got == want


def test_min_partitions_splits_ranges_without_changing_the_rows(
    spark: Spark, shared_cluster: Cluster, orders: str
) -> None:
    df = reader(spark, shared_cluster.bootstrap, assign='{"orders": [0, 1]}', minPartitions="8")
    assert df.rdd.getNumPartitions() >= 8
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(50)] + [(1, o) for o in range(30)]


def test_include_headers_and_keys(spark: Spark, shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("with-headers", 1, 3)
    with Producer(shared_cluster.bootstrap) as producer:
        producer.send_batch(
            "with-headers",
            [b"v0", b"v1", b"v2"],
            keys=[b"k0", None, b"k2"],
            headers=[{"trace": b"abc", "n": None}, None, [("dup", b"1"), ("dup", b"2")]],
            partition=0,
        ).result(30)
    plain = reader(spark, shared_cluster.bootstrap, subscribe="with-headers")
    assert "headers" not in plain.columns
    rows = reader(spark, shared_cluster.bootstrap, subscribe="with-headers", includeHeaders="true").orderBy("offset")
    got = [
        (r.key, bytes(r.value), [(h.key, None if h.value is None else bytes(h.value)) for h in r.headers or []])
        for r in rows.collect()
    ]
    assert got == [
        (bytearray(b"k0"), b"v0", [("trace", b"abc"), ("n", None)]),
        (None, b"v1", []),
        (bytearray(b"k2"), b"v2", [("dup", b"1"), ("dup", b"2")]),
    ]


def test_starting_timestamp_skips_older_records(spark: Spark, shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("timed", 2, 3)
    old, new = 1_700_000_000_000, 1_700_000_100_000
    for partition in (0, 1):
        produce(shared_cluster.bootstrap, "timed", partition, [b"old"] * 5, timestamp_ms=old)
        produce(shared_cluster.bootstrap, "timed", partition, [b"new"] * 3, timestamp_ms=new)
    rows = reader(spark, shared_cluster.bootstrap, subscribe="timed", startingTimestamp=str(new - 1)).collect()
    assert sorted((r.partition, r.offset, bytes(r.value)) for r in rows) == [
        (p, o, b"new") for p in (0, 1) for o in (5, 6, 7)
    ]
    assert {int(r.timestamp.timestamp() * 1000) for r in rows} == {new}
    later = reader(spark, shared_cluster.bootstrap, subscribe="timed", startingTimestamp=str(new + 1)).count()
    assert later == 0


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({}, "subscribe"),
        ({"subscribe": "a", "assign": '{"a": [0]}'}, "subscribe"),
        ({"subscribe": "orders", "startingOffsets": "{bad json"}, "startingOffsets"),
        ({"subscribe": "orders", "startingOffsets": '{"orders": {"0": -7}}'}, "startingOffsets"),
        ({"subscribe": "orders", "endingOffsets": '{"orders": {"0": 10}}'}, "endingOffsets"),
        ({"subscribe": "orders", "endingOffsets": '{"orders": {"0": 999, "1": -1, "2": -1}}'}, "endingOffsets"),
        ({"subscribe": "orders", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"subscribe": "orders", "minPartitions": "0"}, "minPartitions"),
        ({"subscribe": "orders", "maxOffsetsPerTrigger": "10"}, "maxOffsetsPerTrigger"),
        ({"subscribePattern": "(unclosed"}, "subscribePattern"),
        ({"assign": '{"no-such-topic": [0]}'}, "assign"),
        ({"subscribe": "orders", "subscibe": "typo"}, "subscibe"),
        ({"subscribe": "ordres"}, r"subscribe: topic 'ordres' does not exist \(did you mean orders\?\)"),
    ],
)
def test_bad_options_fail_with_an_error_naming_the_option(
    spark: Spark, shared_cluster: Cluster, orders: str, options: dict[str, str], named: str
) -> None:
    with pytest.raises(Exception, match=named):
        reader(spark, shared_cluster.bootstrap, **options).collect()


def test_bad_include_headers_fails_when_the_schema_is_asked(spark: Spark, shared_cluster: Cluster) -> None:
    with pytest.raises(Exception, match="includeHeaders"):
        reader(spark, shared_cluster.bootstrap, subscribe="orders", includeHeaders="yes")
    with pytest.raises(ConfigError, match="includeHeaders"):
        source_schema({"includeHeaders": "yes"})


# ------------------------------------------------------------------- subscriptions that name nothing


def batch_plan(bootstrap: str, **options: str) -> list[OffsetRange]:
    """What the driver plans for ``spark.read`` (no SparkSession needed)."""
    planned = MultiraftBatchReader({"bootstrap": bootstrap, **options}, source_schema({})).partitions()
    return [p for p in planned if isinstance(p, OffsetRange)]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "ordres"}, r"^subscribe: topic 'ordres' does not exist \(did you mean orders\?\); existing"),
        ({"subscribe": "orders, nope,zilch"}, r"^subscribe: topics 'nope', 'zilch' do not exist;"),
        ({"assign": '{"orders": [0], "order": [1]}'}, r"^assign: topic 'order' does not exist \(did you mean orders"),
        ({"assign": '{"orders": [0, 3]}'}, r"^assign: partition orders/3 does not exist: topic 'orders' has 3 part"),
    ],
)
def test_a_subscription_naming_what_does_not_exist_fails_planning(
    shared_cluster: Cluster, orders: str, options: dict[str, str], message: str
) -> None:
    """A typo used to read 0 rows with nothing logged, in batch and streaming queries alike."""
    with pytest.raises(ConfigError, match=message):
        batch_plan(shared_cluster.bootstrap, **options)
    stream_reader = MultiraftStreamReader({"bootstrap": shared_cluster.bootstrap, **options}, source_schema({}))
    try:
        with pytest.raises(ConfigError, match=message):
            stream_reader.initialOffset()
    finally:
        stream_reader.stop()


def test_a_pattern_matching_nothing_waits_and_says_so(
    shared_cluster: Cluster, orders: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As in Kafka, a pattern may match topics not created yet: no error, but a warning (once per stream)."""
    bootstrap = shared_cluster.bootstrap
    # A query run earlier in this process may have configured logging with cached loggers: a fresh one goes
    # through capture_logs' processors.
    monkeypatch.setattr(source_module, "log", structlog.get_logger(source_module.__name__))
    with capture_logs() as logs:
        assert batch_plan(bootstrap, subscribePattern="nothing-.*") == []
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == [
        "subscribePattern matches no topic: the batch read returns no rows"
    ]
    stream_reader = MultiraftStreamReader(
        {"bootstrap": bootstrap, "subscribePattern": "nothing-.*", "startingOffsets": "earliest"}, source_schema({})
    )
    try:
        with capture_logs() as logs:
            start = stream_reader.initialOffset()
            assert stream_reader.latestOffset(start, ReadAllAvailable()) == {}
        assert [e["event"] for e in logs if e["log_level"] == "warning"] == [
            "subscribePattern matches no topic yet; the stream waits"
        ]
        shared_cluster.create_topic("nothing-yet", 1, 3)
        assert stream_reader.latestOffset(start, ReadAllAvailable()) == {"nothing-yet": {"0": 0}}
    finally:
        stream_reader.stop()


def test_a_subscribed_topic_deleted_under_a_running_stream_is_data_loss_not_a_typo(shared_cluster: Cluster) -> None:
    bootstrap = shared_cluster.bootstrap
    shared_cluster.create_topic("short-lived", 1, 3)
    produce(bootstrap, "short-lived", 0, [b"x"] * 3)
    options = {"bootstrap": bootstrap, "subscribe": "short-lived", "startingOffsets": "earliest"}
    failing = MultiraftStreamReader(options, source_schema({}))
    skipping = MultiraftStreamReader({**options, "failOnDataLoss": "false"}, source_schema({}))
    try:
        start = failing.initialOffset()
        assert start == skipping.initialOffset() == {"short-lived": {"0": 0}}
        with Admin(bootstrap) as admin:
            admin.delete_topic("short-lived")
        with pytest.raises(DataLossError, match="short-lived/0 is gone"):
            failing.latestOffset(start, ReadAllAvailable())
        assert skipping.latestOffset(start, ReadAllAvailable()) == {}
    finally:
        failing.stop()
        skipping.stop()


def test_a_stream_subscribed_to_a_missing_topic_fails_at_once(
    spark: Spark, shared_cluster: Cluster, orders: str, tmp_path: Any
) -> None:
    query = (
        stream(spark, shared_cluster.bootstrap, subscribe="ordres")
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        with pytest.raises(Exception, match=r"subscribe: topic 'ordres' does not exist \(did you mean orders\?\)"):
            query.awaitTermination(120)
    finally:
        query.stop()


# --------------------------------------------------------------------------------------- streaming


def test_max_offsets_per_trigger_splits_the_backlog_into_batches_of_that_size(
    spark: Spark, shared_cluster: Cluster, orders: str, tmp_path: Any
) -> None:
    seen: list[list[tuple[int, int]]] = []

    def collect(batch: Any, batch_id: int) -> None:
        seen.append(sorted((r.partition, r.offset) for r in batch.select("partition", "offset").collect()))

    query = (
        stream(spark, shared_cluster.bootstrap, subscribe=orders, startingOffsets="earliest", maxOffsetsPerTrigger="40")
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180), "the AvailableNow query did not finish"
    sizes = [len(batch) for batch in seen if batch]
    assert sizes == [40, 40, 20]
    # In proportion to the backlog (50:30:20): the first batch takes 20, 12 and 8.
    first = seen[0]
    assert [sum(1 for p, _ in first if p == q) for q in range(3)] == [20, 12, 8]
    everything = sorted(x for batch in seen for x in batch)
    assert everything == sorted((p, o) for p, n in enumerate((50, 30, 20)) for o in range(n))
    progress_rows = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert progress_rows == [40, 40, 20]


def test_subscribe_pattern_picks_up_a_topic_created_while_the_query_runs(
    spark: Spark, shared_cluster: Cluster, tmp_path: Any
) -> None:
    bootstrap = shared_cluster.bootstrap
    shared_cluster.create_topic("clicks-a", 2, 3)
    produce(bootstrap, "clicks-a", 0, [b"a0"] * 4)
    shared_cluster.create_topic("other", 1, 3)
    produce(bootstrap, "other", 0, [b"never"])
    query = (
        stream(spark, bootstrap, subscribePattern="clicks-.*", startingOffsets="earliest")
        .writeStream.format("memory")
        .queryName("clicks")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        query.processAllAvailable()
        assert spark.table("clicks").count() == 4
        shared_cluster.create_topic("clicks-b", 3, 3)
        for partition in range(3):
            produce(bootstrap, "clicks-b", partition, [b"b%d" % partition] * (partition + 1))
        produce(bootstrap, "clicks-a", 1, [b"a1"] * 2)
        query.processAllAvailable()
        rows = spark.table("clicks").select("topic", "partition", "offset", "value").collect()
    finally:
        query.stop()
    got = sorted((r.topic, r.partition, r.offset, bytes(r.value)) for r in rows)
    want = sorted(
        [("clicks-a", 0, o, b"a0") for o in range(4)]
        + [("clicks-a", 1, o, b"a1") for o in range(2)]
        + [("clicks-b", p, o, b"b%d" % p) for p in range(3) for o in range(p + 1)]
    )
    assert got == want


# ------------------------------------------------------------------------------------ data loss


@pytest.fixture(scope="module")
def retained(shared_cluster: Cluster) -> tuple[str, int, int]:
    """Topic ``retained`` (1 partition, 1 KiB segments) whose oldest segments retention has deleted."""
    bootstrap = shared_cluster.bootstrap
    shared_cluster.create_topic("retained", 1, 3, segment_bytes="1024")
    for batch in range(12):  # one ~1 KiB batch each: every batch seals a segment
        produce(bootstrap, "retained", 0, [b"%03d-%s" % (batch, b"x" * 90) for _ in range(10)])
    with Admin(bootstrap) as admin:
        admin.alter_topic_configs("retained", set={"retention.bytes": "4096"})
        log_start = wait_for_log_start(bootstrap, "retained", 0)
        end = admin.list_offsets("retained", "latest", [0])[0]
    return "retained", log_start, end


def test_fail_on_data_loss_stops_a_batch_read_naming_partition_and_offsets(
    spark: Spark, shared_cluster: Cluster, retained: tuple[str, int, int]
) -> None:
    topic, log_start, _ = retained
    with pytest.raises(Exception, match=rf"{topic}/0: offsets 0 to {log_start - 1} were deleted by retention"):
        reader(spark, shared_cluster.bootstrap, subscribe=topic, startingOffsets=f'{{"{topic}": {{"0": 0}}}}').count()


def test_fail_on_data_loss_false_skips_to_the_log_start(
    spark: Spark, shared_cluster: Cluster, retained: tuple[str, int, int]
) -> None:
    topic, log_start, end = retained
    df = reader(
        spark,
        shared_cluster.bootstrap,
        subscribe=topic,
        startingOffsets=f'{{"{topic}": {{"0": 0}}}}',
        failOnDataLoss="false",
    )
    offsets = sorted(r.offset for r in df.select("offset").collect())
    assert offsets[0] >= log_start
    assert offsets == list(range(offsets[0], end))


def test_a_stream_behind_retention_fails_or_skips_per_fail_on_data_loss(
    spark: Spark, shared_cluster: Cluster, retained: tuple[str, int, int], tmp_path: Any
) -> None:
    topic, log_start, end = retained
    start = f'{{"{topic}": {{"0": 1}}}}'
    failing = (
        stream(spark, shared_cluster.bootstrap, subscribe=topic, startingOffsets=start)
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "fail"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match=rf"{topic}/0: offsets 1 to {log_start - 1}"):
        failing.awaitTermination(120)
    skipping = (
        stream(spark, shared_cluster.bootstrap, subscribe=topic, startingOffsets=start, failOnDataLoss="false")
        .writeStream.format("memory")
        .queryName("skipping")
        .option("checkpointLocation", str(tmp_path / "skip"))
        .trigger(availableNow=True)
        .start()
    )
    assert skipping.awaitTermination(120)
    offsets = sorted(r.offset for r in spark.table("skipping").select("offset").collect())
    assert offsets[0] >= log_start
    assert offsets == list(range(offsets[0], end))


def test_a_task_whose_range_retention_deleted_meanwhile_reports_it(
    shared_cluster: Cluster, retained: tuple[str, int, int]
) -> None:
    """The executor's own check: planned before retention ran, read after."""
    topic, log_start, end = retained

    def settings(fail: bool) -> _ReadSettings:
        return _ReadSettings(shared_cluster.bootstrap, fail, False, 30.0, 1 << 20)

    with pytest.raises(DataLossError, match=rf"{topic}/0: offsets 2 to {log_start - 1}") as raised:
        list(read_range(OffsetRange(topic, 0, 2, end, 0, settings(True))))
    assert raised.value.metadata == {
        "topic": topic,
        "partition": "0",
        "from_offset": "2",
        "to_offset": str(log_start),
    }
    batches = list(read_range(OffsetRange(topic, 0, 2, end, 0, settings(False))))
    offsets = [o for b in batches for o in b.column("offset").to_pylist()]
    assert offsets == list(range(offsets[0], end)) and offsets[0] >= log_start


# ------------------------------------------------------------------------------------- failover


def test_a_leader_failover_during_a_read_is_retried_transparently(spark: Spark, cluster: Cluster) -> None:
    bootstrap = cluster.bootstrap
    cluster.create_topic("moving", 1, 3)
    values = [b"%06d" % i + b"y" * 94 for i in range(20_000)]
    produce(bootstrap, "moving", 0, values)
    leader = cluster.leader("moving", 0)
    settings = _ReadSettings(bootstrap, True, False, 60.0, 64 * 1024)  # small fetches: many round trips
    got: list[bytes] = []
    killed = False
    for batch in read_range(OffsetRange("moving", 0, 0, len(values), 0, settings)):
        got.extend(batch.column("value").to_pylist())
        if not killed:
            cluster.kill(leader)  # mid-read: the rest comes from the new leader
            killed = True
    assert killed and got == values
    cluster.leader("moving", 0, timeout_s=30, other_than=leader)  # raises unless a new leader is named
    # And through Spark, with the old leader still down.
    assert reader(spark, bootstrap, subscribe="moving").count() == len(values)
