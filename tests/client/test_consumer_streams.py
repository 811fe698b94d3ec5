"""The consumer's streaming fetch path (one ``Subscribe`` stream per partition, rpc/client/_fetcher.py):
reading through leader kills without gaps or duplicates, bounded queues, and close() stopping everything."""

from __future__ import annotations

import threading
import time

import pytest

from multiraft import Consumer, Producer, Record, TopicPartition
from tests.integration._helpers import BackgroundProducer, Cluster, fetch_all

pytestmark = pytest.mark.integration


def _fetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "multiraft-consumer-fetch"]


def test_a_consumer_reads_through_leader_kills_without_gaps_or_duplicates(cluster: Cluster) -> None:
    cluster.create_topic("through-kills", partitions=2, replication_factor=3)
    tps = [TopicPartition("through-kills", p) for p in range(2)]
    records: list[Record] = []
    with Consumer(cluster.bootstrap, fetch_max_wait_ms=50) as consumer:
        consumer.assign(tps, start="earliest")
        writer = BackgroundProducer(cluster.client, "through-kills", partitions=2).start()
        try:
            for _ in range(2):
                deadline = time.monotonic() + 1.0
                while time.monotonic() < deadline:
                    records += consumer.poll(0.1)
                victim = cluster.leader("through-kills", 0)
                cluster.kill(victim)
                deadline = time.monotonic() + 3.0
                while time.monotonic() < deadline:
                    records += consumer.poll(0.1)
                cluster.start(victim)
        finally:
            writer.stop()
        assert writer.acked_count() > 0
        expected = {p: fetch_all(cluster.client, "through-kills", p) for p in range(2)}
        deadline = time.monotonic() + 30
        while sum(map(len, expected.values())) > len(records) and time.monotonic() < deadline:
            records += consumer.poll(0.2)
    for p in range(2):
        got = [(r.offset, r.value) for r in records if r.partition == p]
        assert got == expected[p]  # every committed record once, in order, nothing else


def test_streams_stop_reading_while_the_application_does_not_poll(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("bounded", partitions=1, replication_factor=3)
    tp = TopicPartition("bounded", 0)
    with Producer(shared_cluster.bootstrap, batch_bytes=16 * 1024, linger_ms=1) as producer:
        producer.send_batch("bounded", [b"x" * 1024] * 2_000, partition=0).result(30)
    with Consumer(shared_cluster.bootstrap, fetch_max_bytes=64 * 1024, max_poll_records=100) as consumer:
        consumer.assign([tp], start="earliest")
        first: list[Record] = []
        deadline = time.monotonic() + 20
        while not first and time.monotonic() < deadline:
            first = consumer.poll(0.5, max_records=1)  # opens the stream
        assert [r.offset for r in first] == [0]
        time.sleep(1.0)
        state = consumer._partitions[tp]
        assert state.stream is not None
        assert len(state.stream.responses) <= 2  # the stream waits: about 2 x 64 KiB queued, not 2 MB
        seen = [0]
        deadline = time.monotonic() + 20
        while len(seen) < 2_000 and time.monotonic() < deadline:
            batch = consumer.poll(0.5)
            assert len(batch) <= 100
            seen += [r.offset for r in batch]
        assert seen == list(range(2_000))


def test_close_stops_every_stream_and_the_fetch_thread(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("closing", partitions=3, replication_factor=3)
    before = len(_fetch_threads())
    consumer = Consumer(shared_cluster.bootstrap)
    consumer.assign([TopicPartition("closing", p) for p in range(3)], start="latest")
    assert consumer.poll(0.3) == []
    streams = [s.stream for s in consumer._partitions.values()]
    assert all(s is not None for s in streams)
    assert len(_fetch_threads()) == before + 1
    consumer.close()
    assert all(s is not None and s.done for s in streams)
    assert len(_fetch_threads()) == before
