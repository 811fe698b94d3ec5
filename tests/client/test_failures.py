"""The client through failures of a real 3-node cluster: leader kills, a lost quorum, node restarts."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

import pytest

from multiraft import (
    Consumer,
    Producer,
    Record,
    RecordMetadata,
    RecordTooLargeError,
    RequestTimeoutError,
    TopicPartition,
)
from tests.integration._helpers import Cluster, fetch_all

pytestmark = pytest.mark.integration

Sent = list[tuple[bytes, bytes, Future[RecordMetadata]]]


def _keep_sending(producer: Producer, topic: str, sent: Sent, stop: threading.Event) -> None:
    """About 5 000 records a second, keyed over 12 keys, until stopped (at most 100 000)."""
    for i in range(100_000):
        if stop.is_set():
            return
        key = b"k%d" % (i % 12)
        sent.append(
            (key, b"%s-%d" % (topic.encode(), i), producer.send(topic, b"%s-%d" % (topic.encode(), i), key=key))
        )
        if i % 50 == 49:
            time.sleep(0.01)


def _keep_reading(cluster: Cluster, topic: str, consumed: list[Record], stop: threading.Event) -> None:
    """Consume the topic from the start until stopped, then until nothing new arrives for a while."""
    with Consumer(cluster.bootstrap, fetch_max_wait_ms=100, request_timeout_s=5.0) as consumer:
        consumer.subscribe(topic, start="earliest")
        quiet_since = time.monotonic()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            records = consumer.poll(0.2)
            consumed.extend(records)
            if records:
                quiet_since = time.monotonic()
            # A stream re-opened after a failover waits out a back-off and a reconnect: on a loaded 2-core
            # machine that can take a few seconds, so only a long silence means caught up.
            elif stop.is_set() and time.monotonic() - quiet_since > 5.0:
                return


def test_producers_keep_writing_through_leader_kills_exactly_once_with_idempotence_at_most_once_without(
    cluster: Cluster,
) -> None:
    for topic in ("exactly-once", "at-most-once"):
        cluster.create_topic(topic, partitions=3, replication_factor=3)
    settings = {"linger_ms": 2, "batch_bytes": 4096, "request_timeout_s": 5.0, "delivery_timeout_s": 60.0}
    idempotent = Producer(cluster.bootstrap, **settings)  # type: ignore[arg-type]
    plain = Producer(cluster.bootstrap, idempotence=False, **settings)  # type: ignore[arg-type]
    assert idempotent.idempotent and not plain.idempotent
    sent: dict[str, Sent] = {"exactly-once": [], "at-most-once": []}
    stop = threading.Event()
    consumed: list[Record] = []
    threads = [
        threading.Thread(target=_keep_sending, args=(idempotent, "exactly-once", sent["exactly-once"], stop)),
        threading.Thread(target=_keep_sending, args=(plain, "at-most-once", sent["at-most-once"], stop)),
        threading.Thread(target=_keep_reading, args=(cluster, "exactly-once", consumed, stop)),
    ]
    for thread in threads:
        thread.start()
    try:
        for partition in range(3):  # kill each partition's leader in turn, mid-stream
            time.sleep(0.7)
            leader = cluster.leader("exactly-once", partition)
            cluster.kill(leader)
            time.sleep(0.8)
            cluster.start(leader)
        time.sleep(0.5)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
        idempotent.flush(60)
        plain.flush(60)
        idempotent.close(10)
        plain.close(10)

    # Idempotent: every record acknowledged, written once, in send order per partition (and so per key).
    records = sent["exactly-once"]
    assert len(records) > 1_000
    assert all(f.exception() is None for _, _, f in records)
    for partition in range(3):
        stored = [value for _, value in fetch_all(cluster.client, "exactly-once", partition)]
        expected = [v for _, v, f in records if f.result().partition == partition]
        assert stored == expected, f"exactly-once/{partition}: duplicates, losses or reordering"
        # A consumer reading through the same leader kills saw the same records, in offset order.
        read = [(r.offset, r.value) for r in consumed if r.partition == partition]
        assert read[: len(stored)] == list(enumerate(stored))[: len(read)]
    assert len(consumed) == len(records), "the consumer did not catch up after the leader kills"

    # Without idempotence: nothing written twice; every acknowledged record is there; failures are typed.
    records = sent["at-most-once"]
    acknowledged = {v for _, v, f in records if f.exception() is None}
    attempted = {v for _, v, _ in records}
    for partition in range(3):
        stored = [value for _, value in fetch_all(cluster.client, "at-most-once", partition)]
        assert len(stored) == len(set(stored)), f"at-most-once/{partition}: a record was written twice"
        assert set(stored) <= attempted
        acknowledged -= set(stored)
    assert not acknowledged, f"{len(acknowledged)} acknowledged records are missing"


def test_send_blocks_when_the_buffer_is_full_then_raises_and_undeliverable_records_time_out(
    cluster: Cluster,
) -> None:
    cluster.create_topic("stalled", partitions=1, replication_factor=3)
    producer = Producer(
        cluster.bootstrap,
        buffer_bytes=64 * 1024,
        batch_bytes=16 * 1024,
        max_block_s=0.5,
        delivery_timeout_s=2.0,
        request_timeout_s=1.0,
    )
    try:
        producer.send("stalled", b"warm-up").result(10)
        leader = cluster.leader("stalled", 0)
        for node_id in cluster.info.nodes:  # the leader alone cannot commit anything
            if node_id != leader:
                cluster.kill(node_id)
        futures: list[Future[RecordMetadata]] = []
        blocked_for = 0.0
        with pytest.raises(RequestTimeoutError, match="buffer"):
            for _ in range(1_000):  # 64 KiB of buffer holds about 60 of these
                started = time.monotonic()
                try:
                    futures.append(producer.send("stalled", b"x" * 1_000))
                finally:
                    blocked_for = time.monotonic() - started
        assert blocked_for >= 0.45
        assert 40 <= len(futures) <= 70
        for future in futures:
            with pytest.raises(RequestTimeoutError):
                future.result(30)
    finally:
        producer.close(5)


def test_committed_offsets_survive_a_consumer_restart_node_kills_and_a_cluster_restart(cluster: Cluster) -> None:
    cluster.create_topic("durable", partitions=2, replication_factor=3)
    with Producer(cluster.bootstrap) as producer:
        for i in range(40):
            producer.send("durable", b"v%d" % i, partition=i % 2)
        producer.flush(20)
    a, b = TopicPartition("durable", 0), TopicPartition("durable", 1)
    with Consumer(cluster.bootstrap, group_id="durable-group", enable_auto_commit=False) as consumer:
        consumer.assign([a, b], start="earliest")
        consumer.seek(b, 15)
        records = []
        deadline = time.monotonic() + 20
        while len(records) < 25 and time.monotonic() < deadline:
            records += consumer.poll(0.5)
        assert len(records) == 25
        consumer.commit()
    expected = {a: 20, b: 20}

    for node_id in sorted(cluster.info.nodes):  # whichever node coordinates the group, it goes down once
        cluster.kill(node_id)
        with Consumer(cluster.bootstrap, group_id="durable-group") as restarted:
            assert restarted.committed([a, b]) == expected
        cluster.start(node_id)

    with Consumer(cluster.bootstrap, group_id="durable-group", enable_auto_commit=False) as consumer:
        consumer.assign([a, b])
        consumer.commit({a: 7})
    cluster.restart_all()
    with Consumer(cluster.bootstrap, group_id="durable-group") as resumed:
        resumed.assign([a, b])
        assert resumed.committed([a, b]) == {a: 7, b: 20}
        assert resumed.position(a) == 7 and resumed.position(b) == 20
        records = []
        deadline = time.monotonic() + 20
        while len(records) < 13 and time.monotonic() < deadline:
            records += resumed.poll(0.5)
        assert [(r.partition, r.offset) for r in records] == [(0, o) for o in range(7, 20)]


def test_batches_the_leader_finds_too_large_are_split_and_a_record_too_large_fails_alone(
    cluster_factory: Callable[..., Cluster],
) -> None:
    # The nodes accept at most 4 KiB per batch, less than the topic's max.message.bytes the client knows of:
    # the leader refuses the producer's large batches, which it splits and re-sends in sequence order.
    cluster = cluster_factory(max_batch_bytes=4096)
    cluster.create_topic("split", partitions=1, replication_factor=3)
    values = [b"%04d" % i + b"." * 60 for i in range(300)]
    with Producer(cluster.bootstrap, linger_ms=100, batch_bytes=256 * 1024) as producer:
        futures = [producer.send("split", value) for value in values[:150]]
        too_large = producer.send("split", b"x" * 5_000)
        futures += [producer.send("split", value) for value in values[150:]]
        producer.flush(30)
        with pytest.raises(RecordTooLargeError):
            too_large.result()
        assert [f.result().offset for f in futures] == list(range(300))
        # Once refused, the producer knows the limit: a large record fails without a round trip.
        with pytest.raises(RecordTooLargeError):
            producer.send("split", b"y" * 5_000).result(1)
    assert [value for _, value in fetch_all(cluster.client, "split", 0)] == values
