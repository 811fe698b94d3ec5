"""The Consumer against a real 3-node cluster: where it starts, poll and poll_arrow, seek, lag, subscribe,
resets, and committed offsets."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pyarrow as pa
import pytest

from multiraft import Consumer, InvalidArgumentError, Producer, Record, TopicPartition
from rpc.client._consumer import arrow_schema
from storage import headers_type
from tests.integration._helpers import Cluster

pytestmark = pytest.mark.integration


def produce(cluster: Cluster, topic: str, count: int, *, partition: int = 0, prefix: bytes = b"v") -> None:
    """``count`` records in several small batches (so that fetches return batches starting before a position)."""
    with Producer(cluster.bootstrap, linger_ms=1, batch_bytes=256) as producer:
        futures = [producer.send(topic, prefix + b"%d" % i, partition=partition) for i in range(count)]
        producer.flush(30)
    assert all(f.exception() is None for f in futures)


def poll_until(consumer: Consumer, count: int, *, timeout_s: float = 20.0) -> list[Record]:
    records: list[Record] = []
    deadline = time.monotonic() + timeout_s
    while len(records) < count and time.monotonic() < deadline:
        records += consumer.poll(0.5)
    return records


def test_a_consumer_starts_from_earliest_latest_an_offset_or_a_timestamp(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("starts", partitions=1, replication_factor=3)
    tp = TopicPartition("starts", 0)
    with Producer(shared_cluster.bootstrap, linger_ms=0) as producer:
        for i in range(10):
            producer.send("starts", b"old-%d" % i, partition=0, timestamp=1_000_000 + i * 1_000).result(10)
    with (
        Consumer(shared_cluster.bootstrap) as earliest,
        Consumer(shared_cluster.bootstrap) as latest,
        Consumer(shared_cluster.bootstrap) as at_offset,
        Consumer(shared_cluster.bootstrap) as at_time,
        Consumer(shared_cluster.bootstrap, auto_offset_reset="earliest") as by_default,
    ):
        earliest.assign([tp], start="earliest")
        latest.assign([tp], start="latest")
        at_offset.assign([tp], start=7)
        at_time.assign([tp], start=datetime.fromtimestamp(1_004_500 / 1000, tz=UTC))
        by_default.assign([tp])
        assert latest.position(tp) == 10
        with Producer(shared_cluster.bootstrap, linger_ms=0) as producer:
            producer.send("starts", b"new", partition=0, timestamp=2_000_000).result(10)
        assert [r.value for r in poll_until(earliest, 11)] == [b"old-%d" % i for i in range(10)] + [b"new"]
        assert [r.value for r in poll_until(latest, 1)] == [b"new"]
        assert [r.offset for r in poll_until(at_offset, 4)] == [7, 8, 9, 10]
        assert [r.offset for r in poll_until(at_time, 6)] == [5, 6, 7, 8, 9, 10]
        assert len(poll_until(by_default, 11)) == 11
        at_time.seek_to_timestamp(5_000_000)  # after every record: the end
        assert at_time.position(tp) == 11


def test_poll_arrow_returns_one_table_with_topic_and_partition_columns_from_the_position_on(
    shared_cluster: Cluster,
) -> None:
    shared_cluster.create_topic("arrow", partitions=2, replication_factor=3)
    with Producer(shared_cluster.bootstrap, linger_ms=20) as producer:  # a few large batches
        for i in range(300):
            producer.send("arrow", b"v%d" % i, key=b"k%d" % i, partition=i % 2, headers={"i": b"%d" % i})
        producer.flush(10)
    with Consumer(shared_cluster.bootstrap, max_poll_records=1_000) as consumer:
        consumer.assign([("arrow", 0), ("arrow", 1)], start="earliest")
        consumer.seek(TopicPartition("arrow", 1), 100)  # the middle of a batch: earlier records are trimmed
        tables = []
        deadline = time.monotonic() + 20
        while sum(t.num_rows for t in tables) < 200 and time.monotonic() < deadline:
            tables.append(consumer.poll_arrow(0.5))
        assert consumer.poll_arrow(0.2).num_rows == 0
    table = pa.concat_tables(tables)
    assert table.schema == arrow_schema()
    assert table.schema.names == ["topic", "partition", "offset", "timestamp", "key", "value", "headers"]
    assert table.schema.field("headers").type == headers_type()
    assert table.schema.field("timestamp").type == pa.timestamp("ms", tz="UTC")
    assert set(table.column("topic").to_pylist()) == {"arrow"}
    rows = sorted(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True))
    assert rows == [(0, o) for o in range(150)] + [(1, o) for o in range(100, 150)]
    one = table.filter(pa.compute.equal(table.column("partition"), 1)).sort_by("offset")
    assert one.column("value").to_pylist()[0] == b"v%d" % (2 * 100 + 1)
    assert one.column("headers").to_pylist()[0] == [{"key": "i", "value": b"%d" % (2 * 100 + 1)}]


def test_max_records_bounds_each_poll_and_positions_advance_exactly(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("bounded", partitions=1, replication_factor=3)
    produce(shared_cluster, "bounded", 100)
    tp = TopicPartition("bounded", 0)
    with Consumer(shared_cluster.bootstrap, max_poll_records=30) as consumer:
        consumer.assign([tp], start="earliest")
        seen: list[int] = []
        deadline = time.monotonic() + 20
        while len(seen) < 100 and time.monotonic() < deadline:
            batch = consumer.poll(0.5, max_records=30 if len(seen) % 2 else 7)
            assert len(batch) <= 30
            seen += [r.offset for r in batch]
            assert consumer.position(tp) == (seen[-1] + 1 if seen else 0)
    assert seen == list(range(100))


def test_seek_rewinds_and_skips_ahead(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("seeking", partitions=1, replication_factor=3)
    produce(shared_cluster, "seeking", 50)
    tp = TopicPartition("seeking", 0)
    with Consumer(shared_cluster.bootstrap) as consumer:
        consumer.assign([tp], start="earliest")
        assert [r.offset for r in poll_until(consumer, 50)] == list(range(50))
        consumer.seek(tp, 10)
        assert consumer.position(tp) == 10
        assert [r.offset for r in consumer.poll(5, max_records=5)] == [10, 11, 12, 13, 14]
        consumer.seek(tp, 45)
        assert [r.offset for r in poll_until(consumer, 5)] == [45, 46, 47, 48, 49]
        consumer.seek_to_beginning()
        assert consumer.poll(5, max_records=1)[0].offset == 0
        consumer.seek_to_end(tp)
        assert consumer.position(tp) == 50 and consumer.poll(0.3) == []
        with pytest.raises(InvalidArgumentError):
            consumer.seek(TopicPartition("seeking", 9), 0)


def test_lag_is_the_distance_from_the_position_to_the_high_watermark(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("lagging", partitions=2, replication_factor=3)
    produce(shared_cluster, "lagging", 40, partition=0)
    produce(shared_cluster, "lagging", 15, partition=1)
    a, b = TopicPartition("lagging", 0), TopicPartition("lagging", 1)
    with Consumer(shared_cluster.bootstrap) as consumer:
        consumer.assign([a, b], start="earliest")
        assert consumer.lag() == {a: 40, b: 15}  # before any fetch: asked of the leaders
        consumer.seek(a, 30)
        assert consumer.lag() == {a: 10, b: 15}
        poll_until(consumer, 25)
        assert consumer.lag() == {a: 0, b: 0}
        produce(shared_cluster, "lagging", 5, partition=1)
        time.sleep(0.2)
        consumer.poll(1.0, max_records=2)
        lag = consumer.lag()
        assert lag[a] == 0 and lag[b] in (3, 5)  # 3 once the fetch that returned the 2 records is seen


def test_subscribe_reads_every_partition_and_picks_up_a_topic_created_later(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("sub-a", partitions=3, replication_factor=3)
    with Producer(shared_cluster.bootstrap) as producer:
        for i in range(30):
            producer.send("sub-a", b"a%d" % i, key=b"%d" % i)
        producer.flush(10)
    with Consumer(shared_cluster.bootstrap, auto_offset_reset="earliest", metadata_max_age_s=0.2) as consumer:
        consumer.subscribe(["sub-a", "sub-later"])
        assert consumer.assignment() == {TopicPartition("sub-a", p) for p in range(3)}
        assert sorted(r.value for r in poll_until(consumer, 30)) == sorted(b"a%d" % i for i in range(30))
        shared_cluster.create_topic("sub-later", partitions=2, replication_factor=3)
        produce(shared_cluster, "sub-later", 5, partition=1, prefix=b"late")
        records = poll_until(consumer, 5)
        assert [(r.topic, r.partition, r.value) for r in records] == [("sub-later", 1, b"late%d" % i) for i in range(5)]
        assert TopicPartition("sub-later", 0) in consumer.assignment()


def test_a_position_beyond_the_log_resets_per_auto_offset_reset(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("resets", partitions=1, replication_factor=3)
    produce(shared_cluster, "resets", 10)
    tp = TopicPartition("resets", 0)
    with (
        Consumer(shared_cluster.bootstrap, auto_offset_reset="earliest") as to_earliest,
        Consumer(shared_cluster.bootstrap, auto_offset_reset="latest") as to_latest,
    ):
        to_earliest.assign([tp], start=1_000)
        to_latest.assign([tp], start=1_000)
        assert [r.offset for r in poll_until(to_earliest, 10)] == list(range(10))
        assert to_latest.poll(1.0) == []
        assert to_latest.position(tp) == 10


def test_data_removed_by_retention_resets_the_position_to_the_log_start(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic(
        "expiring", partitions=1, replication_factor=3, retention_ms="1000", segment_ms="200", segment_bytes="4096"
    )
    tp = TopicPartition("expiring", 0)
    with Producer(shared_cluster.bootstrap, linger_ms=0) as producer:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and shared_cluster.describe("expiring").partitions[0].log_start_offset == 0:
            for i in range(20):
                producer.send("expiring", b"x" * 100 + b"%d" % i)
            producer.flush(10)
            time.sleep(0.2)
    log_start = shared_cluster.describe("expiring").partitions[0].log_start_offset
    assert log_start > 0, "retention removed nothing"
    with Consumer(shared_cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp], start=0)
        first = poll_until(consumer, 1)[0]
        assert first.offset >= log_start


def test_commits_store_the_next_offset_and_a_new_consumer_of_the_group_resumes_there(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("committed", partitions=2, replication_factor=3)
    produce(shared_cluster, "committed", 20, partition=0)
    produce(shared_cluster, "committed", 20, partition=1)
    a, b = TopicPartition("committed", 0), TopicPartition("committed", 1)
    with Consumer(shared_cluster.bootstrap, group_id="g1", enable_auto_commit=False) as consumer:
        consumer.assign([a, b], start="earliest")
        assert consumer.committed([a, b]) == {a: None, b: None}
        records = consumer.poll(5, max_records=5)
        assert len(records) == 5
        consumer.commit()
        positions = {a: consumer.position(a), b: consumer.position(b)}
        assert consumer.committed([a, b]) == positions
        consumer.commit({b: 17})
        assert consumer.committed([b]) == {b: 17}
    with Consumer(shared_cluster.bootstrap, group_id="g1", auto_offset_reset="latest") as resumed:
        resumed.assign([a, b])
        assert resumed.position(a) == positions[a] and resumed.position(b) == 17
        rest = poll_until(resumed, 20 - positions[a] + 3)
        assert sorted((r.partition, r.offset) for r in rest) == [(0, o) for o in range(positions[a], 20)] + [
            (1, 17),
            (1, 18),
            (1, 19),
        ]
    # Auto-commit on close stored the positions after everything was read.
    with Consumer(shared_cluster.bootstrap, group_id="g1") as third:
        assert third.committed([a, b]) == {a: 20, b: 20}


def test_auto_commit_commits_on_poll_after_the_interval(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("auto-committed", partitions=1, replication_factor=3)
    produce(shared_cluster, "auto-committed", 10)
    tp = TopicPartition("auto-committed", 0)
    with Consumer(shared_cluster.bootstrap, group_id="g-auto", auto_commit_interval_s=1.0) as consumer:
        consumer.assign([tp], start="earliest")
        assert len(poll_until(consumer, 10)) == 10
        assert consumer.committed([tp]) == {tp: None}  # the interval has not passed
        time.sleep(1.1)
        consumer.poll(0.1)
        assert consumer.committed([tp]) == {tp: 10}


def test_committing_without_a_group_is_an_error(shared_cluster: Cluster) -> None:
    with Consumer(shared_cluster.bootstrap) as consumer, pytest.raises(InvalidArgumentError):
        consumer.commit({TopicPartition("committed", 0): 1})
