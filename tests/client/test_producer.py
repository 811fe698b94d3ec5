"""The Producer against a real 3-node cluster: partitioning, batching, flush, compression, callbacks, errors."""

from __future__ import annotations

import itertools
import threading
import time
from collections import defaultdict
from concurrent.futures import Future
from datetime import UTC, datetime

import crc32c
import pytest

from multiraft import (
    Consumer,
    Producer,
    ProducerError,
    RecordMetadata,
    RecordTooLargeError,
    TopicPartition,
    UnknownPartitionError,
    UnknownTopicError,
)
from rpc.proto import multiraft_pb2 as pb
from storage import Compression, iter_batches
from tests.integration._helpers import Cluster, fetch_all

pytestmark = pytest.mark.integration


def _stored_batches(cluster: Cluster, topic: str, partition: int) -> list[tuple[int, int, int, int, Compression]]:
    """(producer_id, base_sequence, record_count, base_offset, codec) of each batch in the partition."""
    request = pb.FetchRequest(topic=topic, partition=partition, offset=0, max_bytes=64 << 20)
    response = cluster.client.call_leader(topic, partition, lambda stub, timeout: stub.Fetch(request, timeout=timeout))
    return [
        (h.producer_id, h.base_sequence, h.record_count, h.base_offset, h.codec)
        for h, _ in iter_batches(response.batches)
    ]


def test_keyed_records_land_on_crc32c_of_the_key_modulo_the_partition_count_in_send_order(
    shared_cluster: Cluster,
) -> None:
    shared_cluster.create_topic("keyed", partitions=4, replication_factor=3)
    sent: list[tuple[bytes, bytes, Future[RecordMetadata]]] = []
    with Producer(shared_cluster.bootstrap, linger_ms=2, batch_bytes=4096) as producer:
        for i in range(3_000):
            key, value = b"customer-%d" % (i % 37), b"event-%d" % i
            sent.append((key, value, producer.send("keyed", value, key=key)))
        producer.flush(30)
        assert producer.partition_for("keyed", "customer-5") == crc32c.crc32c(b"customer-5") % 4
    for key, _value, future in sent:
        assert future.result().partition == crc32c.crc32c(key) % 4
    stored = {p: fetch_all(shared_cluster.client, "keyed", p) for p in range(4)}
    for partition, records in stored.items():
        assert [offset for offset, _ in records] == list(range(len(records)))
        expected = [v for k, v, _ in sent if crc32c.crc32c(k) % 4 == partition]
        assert [value for _, value in records] == expected  # every record once, in send order
    offsets = {(f.result().partition, f.result().offset): v for _, v, f in sent}
    assert all(dict(stored[p])[o] == v for (p, o), v in offsets.items())


def test_records_without_a_key_stick_to_one_partition_per_batch_then_spread(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("sticky", partitions=5, replication_factor=3)
    rounds: list[set[int]] = []
    with Producer(shared_cluster.bootstrap, linger_ms=1_000) as producer:
        for round_ in range(25):
            futures = [producer.send("sticky", b"r%d-%d" % (round_, i)) for i in range(20)]
            producer.flush(10)  # the batch is sent: the next round goes to another partition
            rounds.append({f.result().partition for f in futures})
    assert all(len(partitions) == 1 for partitions in rounds), rounds
    chosen = [next(iter(partitions)) for partitions in rounds]
    assert all(a != b for a, b in itertools.pairwise(chosen)), chosen
    assert len(set(chosen)) >= 4, chosen


def test_flush_waits_until_every_record_is_acknowledged(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("flushed", partitions=3, replication_factor=3)
    with Producer(shared_cluster.bootstrap, linger_ms=60_000) as producer:
        futures = [producer.send("flushed", b"v%d" % i, key=b"%d" % i) for i in range(600)]
        time.sleep(0.3)
        assert not any(f.done() for f in futures), "linger_ms=60000 held nothing back"
        producer.flush(30)
        assert all(f.done() and f.exception() is None for f in futures)
    stored = sum(len(fetch_all(shared_cluster.client, "flushed", p)) for p in range(3))
    assert stored == 600


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_compressed_batches_round_trip_through_the_cluster(shared_cluster: Cluster, codec: str) -> None:
    topic = f"compressed-{codec}"
    shared_cluster.create_topic(topic, partitions=1, replication_factor=3)
    values = [b"%d:" % i + b"abcdefgh" * (i % 50) for i in range(2_000)]
    with Producer(shared_cluster.bootstrap, compression=codec, linger_ms=20) as producer:  # type: ignore[arg-type]
        for i, value in enumerate(values):
            producer.send(topic, value, key=b"k%d" % (i % 3), headers=[("n", b"%d" % i)])
        producer.flush(30)
    batches = _stored_batches(shared_cluster, topic, 0)
    assert {b[4] for b in batches} == {Compression[codec.upper()]}
    assert len(batches) < len(values) / 10  # batched, not one record per request
    with Consumer(shared_cluster.bootstrap) as consumer:
        consumer.assign([(topic, 0)], start="earliest")
        records = []
        deadline = time.monotonic() + 20
        while len(records) < len(values) and time.monotonic() < deadline:
            records += consumer.poll(0.5, max_records=1_000)
    assert [r.value for r in records] == values
    assert [r.key for r in records] == [b"k%d" % (i % 3) for i in range(len(values))]
    assert [r.headers for r in records] == [(("n", b"%d" % i),) for i in range(len(values))]


def test_the_callback_form_reports_the_metadata_or_the_error(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("called-back", partitions=2, replication_factor=3)
    seen: list[tuple[RecordMetadata | None, BaseException | None]] = []
    done = threading.Event()

    def callback(metadata: RecordMetadata | None, error: BaseException | None) -> None:
        seen.append((metadata, error))
        if len(seen) == 3:
            done.set()

    stamp = datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    with Producer(shared_cluster.bootstrap) as producer:
        producer.send("called-back", b"a", partition=1, timestamp=stamp, callback=callback)
        producer.send("called-back", "text", headers={"h": "x"}, partition=1, callback=callback)
        producer.send("called-back", b"c", partition=7, callback=callback)
        assert done.wait(20)
    by_value = {m.offset: m for m, e in seen if m is not None}
    assert by_value[0] == RecordMetadata("called-back", 1, 0, int(stamp.timestamp() * 1000))
    assert by_value[1].partition == 1
    errors = [e for m, e in seen if e is not None]
    assert len(errors) == 1 and isinstance(errors[0], UnknownPartitionError)


def test_a_record_above_max_message_bytes_fails_alone(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("small-messages", partitions=1, replication_factor=3, max_message_bytes="2048")
    with Producer(shared_cluster.bootstrap, linger_ms=50) as producer:
        before = [producer.send("small-messages", b"s%02d" % i + b"." * 30) for i in range(50)]
        too_big = producer.send("small-messages", b"x" * 3_000)
        after = [producer.send("small-messages", b"t%02d" % i + b"." * 30) for i in range(50)]
        producer.flush(20)
    with pytest.raises(RecordTooLargeError):
        too_big.result()
    assert [f.result().offset for f in before + after] == list(range(100))
    # The records fill several batches, each within the limit.
    assert len(_stored_batches(shared_cluster, "small-messages", 0)) >= 3


def test_sending_to_an_unknown_topic_fails_the_record_and_closing_stops_sends(shared_cluster: Cluster) -> None:
    producer = Producer(shared_cluster.bootstrap)
    future = producer.send("no-such-topic", b"v")
    with pytest.raises(UnknownTopicError):
        future.result(10)
    producer.close()
    with pytest.raises(ProducerError):
        producer.send("keyed", b"v")


def test_batches_carry_a_producer_id_and_contiguous_sequences_by_default(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("sequenced", partitions=2, replication_factor=3)
    with Producer(shared_cluster.bootstrap, linger_ms=1, batch_bytes=512) as producer:
        assert producer.idempotent
        for i in range(1_000):
            producer.send("sequenced", b"value-%d" % i, partition=i % 2)
        producer.flush(30)
    for partition in range(2):
        batches = _stored_batches(shared_cluster, "sequenced", partition)
        assert len(batches) > 1 and len({b[0] for b in batches}) == 1 and batches[0][0] >= 0
        sequences = [b[1] for b in batches]
        counts = [b[2] for b in batches]
        assert sequences == [sum(counts[:i]) for i in range(len(counts))]


def test_send_accepts_str_bytes_and_none_and_keeps_headers_in_order(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("shapes", partitions=1, replication_factor=3)
    with Producer(shared_cluster.bootstrap) as producer:
        producer.send("shapes", None, key="k")
        producer.send("shapes", "é", headers=[("a", b"1"), ("a", None), ("b", "2")])
        producer.send("shapes", bytearray(b"ba"), key=memoryview(b"mv"), timestamp=1_234)
        producer.flush(10)
        with pytest.raises(TypeError):
            producer.send("shapes", 42)  # type: ignore[arg-type]
    with Consumer(shared_cluster.bootstrap) as consumer:
        consumer.assign([TopicPartition("shapes", 0)], start=0)
        records = consumer.poll(5)
    assert [(r.key, r.value) for r in records] == [(b"k", None), (None, "é".encode()), (b"mv", b"ba")]
    assert records[1].headers == (("a", b"1"), ("a", None), ("b", b"2"))
    assert records[2].timestamp_ms == 1_234


def test_records_of_many_partitions_are_pipelined_and_all_acknowledged(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("wide", partitions=8, replication_factor=3)
    acknowledged: dict[int, list[int]] = defaultdict(list)
    with Producer(shared_cluster.bootstrap, linger_ms=0, batch_bytes=1024, max_in_flight=5) as producer:
        futures = [producer.send("wide", b"x" * 100, key=b"%d" % i) for i in range(4_000)]
        producer.flush(60)
    for future in futures:
        metadata = future.result()
        acknowledged[metadata.partition].append(metadata.offset)
    for offsets in acknowledged.values():
        assert sorted(offsets) == list(range(len(offsets)))
    assert sum(len(o) for o in acknowledged.values()) == 4_000
