"""The multiraft sink: batch ``df.write`` round trips, schema errors, and exactly-once streaming writes when
Spark replays a micro-batch (a deleted commit, and a driver SIGKILLed in the middle of a batch)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from multiraft import Consumer, Producer, TopicPartition
from tests.integration._helpers import Cluster

pytestmark = [pytest.mark.spark, pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]


def read_topic(bootstrap: str, topic: str, partitions: int, *, expect: int | None = None) -> pa.Table:
    """Every record of the topic, read with the client Consumer (until the partitions' ends, and until
    ``expect`` records when given)."""
    tables = []
    count = 0
    deadline = time.monotonic() + 60
    with Consumer(bootstrap) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)], start="earliest")
        while time.monotonic() < deadline:
            table = consumer.poll_arrow(timeout_s=0.5)
            tables.append(table)
            count += table.num_rows
            if (expect is None or count >= expect) and not table.num_rows and not any(consumer.lag().values()):
                break
    return pa.concat_tables(tables) if tables else pa.table({})


def count_values(bootstrap: str, topic: str, partitions: int, *, expect: int | None = None) -> Counter[bytes]:
    return Counter(read_topic(bootstrap, topic, partitions, expect=expect).column("value").to_pylist())


# ---------------------------------------------------------------------------------------------- batch


def test_batch_write_round_trip_with_key_headers_partition_and_topic(spark: Any, shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("sink-a", 3, 3)
    shared_cluster.create_topic("sink-b", 2, 3)
    rows = [
        # topic (None: the option), partition (None: by key / sticky), key, value, headers
        ("sink-b", 1, "k1", b"v-explicit", [("h", b"1"), ("h", b"2")]),
        (None, None, "k2", b"v-keyed", []),
        (None, None, None, b"v-keyless", None),
        ("sink-a", 2, None, b"v-a2", [("trace", None)]),
    ]
    schema = "topic string, partition int, key string, value binary, headers array<struct<key: string, value: binary>>"
    df = spark.createDataFrame(rows, schema)
    df.write.format("multiraft").option("bootstrap", shared_cluster.bootstrap).option("topic", "sink-a").mode(
        "append"
    ).save()

    a = read_topic(shared_cluster.bootstrap, "sink-a", 3, expect=3).to_pylist()
    b = read_topic(shared_cluster.bootstrap, "sink-b", 2, expect=1).to_pylist()
    assert [(r["partition"], r["key"], r["value"], r["headers"]) for r in b] == [
        (1, b"k1", b"v-explicit", [{"key": "h", "value": b"1"}, {"key": "h", "value": b"2"}])
    ]
    by_value = {r["value"]: r for r in a}
    assert sorted(by_value) == [b"v-a2", b"v-keyed", b"v-keyless"]
    assert by_value[b"v-a2"]["partition"] == 2
    assert by_value[b"v-a2"]["headers"] == [{"key": "trace", "value": None}]
    assert by_value[b"v-keyed"]["key"] == b"k2"
    with Producer(shared_cluster.bootstrap) as producer:  # the keyed row went where the partitioner puts k2
        assert by_value[b"v-keyed"]["partition"] == producer.partition_for("sink-a", "k2")
    assert by_value[b"v-keyless"]["key"] is None


def test_batch_write_many_rows_string_values(spark: Any, shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("sink-many", 4, 3)
    n = 25_000
    df = spark.range(n).selectExpr("cast(id as string) as key", "concat('value-', cast(id as string)) as value")
    df.write.format("multiraft").mode("append").option("bootstrap", shared_cluster.bootstrap).option(
        "topic", "sink-many"
    ).option("rowsPerSend", "4000").save()
    table = read_topic(shared_cluster.bootstrap, "sink-many", 4, expect=n)
    values = Counter(table.column("value").to_pylist())
    assert len(values) == n and set(values.values()) == {1}
    assert values[b"value-1234"] == 1


@pytest.mark.parametrize(
    ("schema", "options", "message"),
    [
        ("key string", {"topic": "t"}, "needs a 'value' column"),
        ("value int", {"topic": "t"}, "column 'value' must be binary or string, not int"),
        ("value binary, key array<int>", {"topic": "t"}, "column 'key' must be binary or string"),
        ("value binary, partition string", {"topic": "t"}, "column 'partition' must be an integer"),
        ("value binary, topic int", {"topic": "t"}, "column 'topic' must be string"),
        ("value binary, headers map<string, binary>", {"topic": "t"}, "column 'headers' must be array<struct"),
        ("value binary", {}, "the 'topic' option or a 'topic' column"),
        ("value binary", {"topic": "t", "rowsPerSend": "0"}, "rowsPerSend"),
        ("value binary", {"topic": "t", "bootstrap": ""}, "bootstrap"),
        ("value binary", {"topic": "t", "rowPerSend": "5"}, "(?i)rowPerSend: unknown option: did you mean rowsPerSend"),
        # Checked on the driver: before, each task (and each retry of it) waited 30 s to find out.
        ("value binary", {"topic": "t", "connectTimeoutMs": "300"}, r"no node reachable at 127\.0\.0\.1:1 \(conn"),
    ],
)
def test_bad_schema_or_options_fail_before_writing(
    spark: Any, schema: str, options: dict[str, str], message: str
) -> None:
    df = spark.createDataFrame([], schema)
    writer = df.write.format("multiraft").mode("append").option("bootstrap", "127.0.0.1:1")
    for key, value in options.items():
        writer = writer.option(key, value)
    with pytest.raises(Exception, match=message):
        writer.save()


def test_writing_to_a_topic_that_does_not_exist_fails_before_any_task(spark: Any, shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("sink-target", 1, 3)
    df = spark.createDataFrame([(b"v",)], "value binary")
    writer = df.write.format("multiraft").mode("append").option("bootstrap", shared_cluster.bootstrap)
    with pytest.raises(Exception, match=r"topic: topic 'sink-targt' does not exist \(did you mean sink-target\?\)"):
        writer.option("topic", "sink-targt").save()


# ------------------------------------------------------------------------------------------ streaming


def _write_input(directory: Path, name: str, lines: list[str]) -> None:
    staging = directory.parent / f".{name}.tmp"
    staging.write_text("".join(f"{line}\n" for line in lines))
    staging.rename(directory / name)  # a file source must never see a half-written file


def _start_query(spark: Any, source: Path, checkpoint: Path, bootstrap: str, topic: str) -> Any:
    df = spark.readStream.format("text").option("maxFilesPerTrigger", 1).load(str(source))
    return (
        df.writeStream.format("multiraft")
        .option("bootstrap", bootstrap)
        .option("topic", topic)
        .option("rowsPerSend", "300")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def test_stream_replayed_batch_after_lost_commit_writes_nothing_twice(
    spark: Any, shared_cluster: Cluster, tmp_path: Path
) -> None:
    topic = "sink-replay-commit"
    shared_cluster.create_topic(topic, 3, 3)
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    lines = [f"a-{i}" for i in range(2_000)]
    _write_input(source, "0.txt", lines)

    query = _start_query(spark, source, checkpoint, shared_cluster.bootstrap, topic)
    query.awaitTermination(120)
    first_id = query.id
    assert count_values(shared_cluster.bootstrap, topic, 3, expect=len(lines)) == Counter(
        line.encode() for line in lines
    )

    # Spark finished batch 0 but "crashed" before recording it: on restart it runs batch 0 again.
    for name in ("0", ".0.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    query = _start_query(spark, source, checkpoint, shared_cluster.bootstrap, topic)
    query.awaitTermination(120)
    assert query.id == first_id  # the query id lives in the checkpoint: the replay uses the same producers
    assert query.lastProgress is not None
    assert (query.lastProgress["batchId"], query.lastProgress["numInputRows"]) == (0, len(lines))
    assert count_values(shared_cluster.bootstrap, topic, 3) == Counter(line.encode() for line in lines)


_KILLED_DRIVER = textwrap.dedent(
    """
    import sys, time
    from spark_connector import local_session

    source, checkpoint, bootstrap, topic, id_file = sys.argv[1:]
    spark = local_session("sink-killed-driver", conf={"spark.sql.execution.arrow.maxRecordsPerBatch": "250"})

    def slow(batches):
        for batch in batches:
            time.sleep(0.2)  # widens the batch so that the test's SIGKILL lands in its middle
            yield batch

    df = spark.readStream.format("text").load(source)
    query = (
        df.mapInArrow(slow, df.schema).writeStream.format("multiraft")
        .option("bootstrap", bootstrap).option("topic", topic).option("rowsPerSend", "300")
        .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    )
    with open(id_file, "w") as out:
        out.write(str(query.id))
    query.awaitTermination()
    """
)


def test_stream_driver_killed_mid_batch_then_restarted_writes_each_record_once(
    spark: Any, shared_cluster: Cluster, tmp_path: Path
) -> None:
    topic = "sink-replay-kill"
    shared_cluster.create_topic(topic, 3, 3)
    source, checkpoint, id_file = tmp_path / "in", tmp_path / "checkpoint", tmp_path / "query-id"
    source.mkdir()
    first = [f"k-{i:05d}" for i in range(15_000)]
    _write_input(source, "0.txt", first)

    driver = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _KILLED_DRIVER,
            str(source),
            str(checkpoint),
            shared_cluster.bootstrap,
            topic,
            str(id_file),
        ],
        cwd=ROOT,
        # Its own process group: the JVM dies with it. PySpark's worker daemon makes a group of its own, so the
        # sink task's Python worker may outlive the kill, see its input end and write its rows so far as a
        # short last run: the replay overlaps that run with a whole one (the replay producer writes its rest).
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        written = 0
        deadline = time.monotonic() + 180
        with Consumer(shared_cluster.bootstrap) as consumer:
            consumer.assign([TopicPartition(topic, p) for p in range(3)], start="earliest")
            while written < 1_000 and time.monotonic() < deadline and driver.poll() is None:
                written += consumer.poll_arrow(timeout_s=0.2).num_rows
    finally:
        os.killpg(driver.pid, signal.SIGKILL)  # the driver crashes in the middle of micro-batch 0
        driver.wait(30)
    assert 0 < written < len(first), f"the kill did not land inside the batch ({written} records written)"
    partial = count_values(shared_cluster.bootstrap, topic, 3)
    assert sum(partial.values()) < len(first) and set(partial.values()) == {1}

    query = _start_query(spark, source, checkpoint, shared_cluster.bootstrap, topic)
    query.awaitTermination(120)
    assert str(query.id) == id_file.read_text()  # same checkpoint, same query id
    expected = Counter(line.encode() for line in first)
    assert count_values(shared_cluster.bootstrap, topic, 3, expect=len(first)) == expected

    second = [f"n-{i:05d}" for i in range(1_000)]  # more input afterwards: the next batch writes normally
    _write_input(source, "1.txt", second)
    query = _start_query(spark, source, checkpoint, shared_cluster.bootstrap, topic)
    query.awaitTermination(120)
    expected.update(line.encode() for line in second)
    assert count_values(shared_cluster.bootstrap, topic, 3, expect=len(first) + len(second)) == expected


def test_stream_aggregation_replayed_with_sorted_rows_writes_nothing_twice(
    spark: Any, shared_cluster: Cluster, tmp_path: Path
) -> None:
    """After a shuffle the rows of a task may come in another order on replay: ``sortRows`` makes the
    batches the same anyway."""
    topic = "sink-replay-aggregate"
    shared_cluster.create_topic(topic, 3, 3)
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    _write_input(source, "0.txt", [f"g{i % 50}" for i in range(2_000)])

    def run() -> Any:
        counts = spark.readStream.format("text").load(str(source)).groupBy("value").count()
        query = (
            counts.selectExpr("value as key", "concat(value, '=', cast(count as string)) as value")
            .writeStream.format("multiraft")
            .outputMode("complete")
            .option("bootstrap", shared_cluster.bootstrap)
            .option("topic", topic)
            .option("sortRows", "true")
            .option("rowsPerSend", "7")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        return query

    run()
    for name in ("0", ".0.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    query = run()
    assert query.lastProgress is not None and query.lastProgress["batchId"] == 0
    expected = Counter(f"g{g}={40}".encode() for g in range(50))
    assert count_values(shared_cluster.bootstrap, topic, 3, expect=50) == expected
