"""Producer.send_batch(): many records per call, as Python sequences or Arrow columns, against real 3-node
clusters; and the bulk path of the accumulator on its own."""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from datetime import UTC, datetime

import crc32c
import numpy as np
import pyarrow as pa
import pytest

from multiraft import (
    BatchMetadata,
    Producer,
    ProducerError,
    RecordMetadata,
    RecordTooLargeError,
    RequestTimeoutError,
    UnknownPartitionError,
    UnknownTopicError,
)
from rpc.client._accumulator import RecordAccumulator
from rpc.client._bulk import BulkBatch, BulkCall, BulkColumns
from rpc.client._record_input import headers_column
from rpc.client._records import TopicPartition
from rpc.proto import multiraft_pb2 as pb
from storage import Compression, decode_batches, headers_type, iter_batches
from tests.integration._helpers import Cluster, fetch_all

Headers = tuple[tuple[str, bytes | None], ...]


def _stored(cluster: Cluster, topic: str, partition: int) -> pa.Table:
    """Every record of a partition, decoded with headers."""
    request = pb.FetchRequest(topic=topic, partition=partition, offset=0, max_bytes=64 << 20)
    response = cluster.client.call_leader(topic, partition, lambda stub, timeout: stub.Fetch(request, timeout=timeout))
    return decode_batches(response.batches, include_headers=True)


def _stored_batches(cluster: Cluster, topic: str, partition: int) -> list[tuple[int, int, int]]:
    """(base_offset, record_count, length) of each batch in the partition."""
    request = pb.FetchRequest(topic=topic, partition=partition, offset=0, max_bytes=64 << 20)
    response = cluster.client.call_leader(topic, partition, lambda stub, timeout: stub.Fetch(request, timeout=timeout))
    return [(h.base_offset, h.record_count, h.length) for h, _ in iter_batches(response.batches)]


def _headers(table: pa.Table) -> list[Headers]:
    return [tuple((h["key"], h["value"]) for h in row) for row in table.column("headers").to_pylist()]


def _offsets(batches: list[BatchMetadata]) -> list[tuple[int, int]]:
    """(partition, offset) of every record the batches hold, in their order."""
    return [(b.partition, b.base_offset + i) for b in batches for i in range(b.record_count)]


@pytest.mark.integration
def test_lists_and_arrow_columns_round_trip_with_keys_headers_and_timestamps(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("bulk-shapes", partitions=2, replication_factor=3)
    n = 500
    values: list[bytes | str | None] = [b"v%d" % i if i % 7 else None for i in range(n)]
    values[3] = "é-text"
    keys = [b"k%d" % i if i % 5 else None for i in range(n)]
    headers: list[object] = [None if i % 3 == 0 else [("n", b"%d" % i), ("n", None)] for i in range(n)]
    headers[1] = {"trace": "abc"}
    timestamps = [1_700_000_000_000 + i for i in range(n)]
    with Producer(shared_cluster.bootstrap) as producer:
        listed = producer.send_batch(
            "bulk-shapes", values, keys=keys, headers=headers, timestamps=timestamps, partition=0
        ).result(30)
    assert listed == [BatchMetadata("bulk-shapes", 0, 0, n, 1_700_000_000_000)]
    table = _stored(shared_cluster, "bulk-shapes", 0)
    assert table.column("value").to_pylist() == [v.encode() if isinstance(v, str) else v for v in values]
    assert table.column("key").to_pylist() == keys
    expected_headers = [(("n", b"%d" % i), ("n", None)) if i % 3 else () for i in range(n)]
    expected_headers[1] = (("trace", b"abc"),)
    assert _headers(table) == expected_headers
    assert [int(t.timestamp() * 1000) for t in table.column("timestamp").to_pylist()] == timestamps

    # The same records as Arrow columns (string values, a chunked key column, Arrow timestamps), compressed.
    arrow_values = pa.array([v.decode() if isinstance(v, bytes) else v for v in values], type=pa.string())
    arrow_keys = pa.chunked_array([pa.array(keys[:200], pa.binary()), pa.array(keys[200:], pa.binary())])
    arrow_headers = pa.array([list(h) for h in expected_headers], type=headers_type())
    stamps = pa.array(np.array(timestamps, dtype="datetime64[ms]"), type=pa.timestamp("ms", tz="UTC"))
    with Producer(shared_cluster.bootstrap, compression="zstd") as producer:
        batches = producer.send_batch(
            "bulk-shapes", arrow_values, keys=arrow_keys, headers=arrow_headers, timestamps=stamps, partition=1
        ).result(30)
    assert [(b.partition, b.base_offset, b.record_count) for b in batches] == [(1, 0, n)]
    table = _stored(shared_cluster, "bulk-shapes", 1)
    assert table.column("value").to_pylist() == [v.encode() if isinstance(v, str) else v for v in values]
    assert table.column("key").to_pylist() == keys
    assert _headers(table) == expected_headers
    assert [int(t.timestamp() * 1000) for t in table.column("timestamp").to_pylist()] == timestamps


@pytest.mark.integration
def test_one_timestamp_or_none_stamps_every_record_and_an_empty_call_resolves_at_once(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("bulk-stamps", partitions=1, replication_factor=3)
    stamp = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    with Producer(shared_cluster.bootstrap) as producer:
        assert producer.send_batch("bulk-stamps", []).result(0) == []
        before = time.time_ns() // 1_000_000
        now = producer.send_batch("bulk-stamps", [b"a", b"b"]).result(20)
        after = time.time_ns() // 1_000_000
        fixed = producer.send_batch("bulk-stamps", [b"c", b"d"], timestamps=stamp).result(20)
        producer.send_batch("bulk-stamps", (b"e", b"f"), timestamps=np.array([5, 3])).result(20)
    assert before <= now[0].timestamp_ms <= after
    assert fixed[0].timestamp_ms == int(stamp.timestamp() * 1000)
    table = _stored(shared_cluster, "bulk-stamps", 0)
    stamps = [int(t.timestamp() * 1000) for t in table.column("timestamp").to_pylist()]
    assert stamps == [now[0].timestamp_ms] * 2 + [fixed[0].timestamp_ms] * 2 + [5, 3]


@pytest.mark.integration
@pytest.mark.parametrize("idempotence", [True, False])
def test_keyed_bulk_sends_land_where_send_puts_the_same_keys_in_call_order(
    shared_cluster: Cluster, idempotence: bool
) -> None:
    topic = f"bulk-keyed-{idempotence}"
    shared_cluster.create_topic(topic, partitions=5, replication_factor=3)
    rng = random.Random(5)
    keys: list[bytes | None] = [b"customer-%d" % rng.randrange(300) for _ in range(4_000)]
    keys[10:2_500:50] = [None] * len(keys[10:2_500:50])  # null keys go to the call's sticky partition
    values = [b"event-%d" % i for i in range(len(keys))]
    with Producer(shared_cluster.bootstrap, idempotence=idempotence, batch_bytes=16 * 1024) as producer:
        singles = [producer.send(topic, b"single", key=key) for key in keys[:300] if key is not None]
        first = producer.send_batch(topic, values[:2_500], keys=keys[:2_500])
        second = producer.send_batch(topic, pa.array(values[2_500:]), keys=pa.array(keys[2_500:], pa.string()))
        batches = first.result(30) + second.result(30)
        assert all(producer.partition_for(topic, k) == crc32c.crc32c(k) % 5 for k in keys if k is not None)
    for key, future in zip([k for k in keys[:300] if k is not None], singles, strict=True):
        assert future.result().partition == crc32c.crc32c(key) % 5
    # Each call's batches are listed by partition and offset, and hold the call's records of that partition.
    for result in (first.result(), second.result()):
        assert [(b.partition, b.base_offset) for b in result] == sorted((b.partition, b.base_offset) for b in result)
    assert sum(b.record_count for b in batches) == len(values)
    stored = {partition: fetch_all(shared_cluster.client, topic, partition) for partition in range(5)}
    unkeyed = {v for k, v in zip(keys, values, strict=True) if k is None}
    (sticky,) = [p for p in range(5) if unkeyed & {value for _, value in stored[p]}]  # null keys: one partition
    targets = [crc32c.crc32c(k) % 5 if k is not None else sticky for k in keys]
    stored_offsets: set[tuple[int, int]] = set()
    for partition in range(5):
        bulk = [value for _, value in stored[partition] if value != b"single"]
        assert bulk == [v for t, v in zip(targets, values, strict=True) if t == partition]
        # The singles were sent first, so they come first.
        singles_first = stored[partition][: len(stored[partition]) - len(bulk)]
        assert [value for _, value in singles_first] == [b"single"] * len(singles_first)
        stored_offsets |= {(partition, offset) for offset, value in stored[partition] if value != b"single"}
    assert set(_offsets(batches)) == stored_offsets


@pytest.mark.integration
def test_bulk_sends_without_keys_go_to_one_sticky_partition_per_call_then_move_on(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("bulk-sticky", partitions=4, replication_factor=3)
    with Producer(shared_cluster.bootstrap) as producer:
        chosen = []
        for call in range(12):
            batches = producer.send_batch("bulk-sticky", [b"c%d-%d" % (call, i) for i in range(50)]).result(20)
            assert len({b.partition for b in batches}) == 1
            chosen.append(batches[0].partition)
    assert all(a != b for a, b in itertools.pairwise(chosen)), chosen
    assert len(set(chosen)) >= 3, chosen


@pytest.mark.integration
def test_a_bulk_send_larger_than_max_message_bytes_is_split_and_stays_in_order_and_contiguous(
    shared_cluster: Cluster,
) -> None:
    shared_cluster.create_topic("bulk-split", partitions=1, replication_factor=3, max_message_bytes="4096")
    values = [b"%05d" % i + b"." * rng_len for i, rng_len in enumerate(random.Random(3).choices(range(200), k=3_000))]
    with Producer(shared_cluster.bootstrap, linger_ms=1_000) as producer:
        early = [producer.send("bulk-split", b"early-%d" % i) for i in range(3)]
        bulk = producer.send_batch("bulk-split", values, partition=0)
        late = producer.send("bulk-split", b"late", partition=0)
        batches = bulk.result(30)
        producer.flush(30)
    assert [f.result().offset for f in early] == [0, 1, 2]
    assert late.result().offset == 3 + len(values)
    assert len(batches) > 10
    assert [b.base_offset for b in batches] == [
        3 + sum(b.record_count for b in batches[:i]) for i in range(len(batches))
    ]
    stored = fetch_all(shared_cluster.client, "bulk-split", 0)
    assert [value for _, value in stored[3:-1]] == values
    on_disk = _stored_batches(shared_cluster, "bulk-split", 0)
    assert all(length <= 4096 for _, _, length in on_disk)
    assert [(b.base_offset, b.record_count) for b in batches] == [(o, c) for o, c, _ in on_disk[1:-1]]


@pytest.mark.integration
def test_a_bulk_send_fails_with_a_typed_error_for_an_unknown_topic_partition_or_a_record_too_large(
    shared_cluster: Cluster,
) -> None:
    shared_cluster.create_topic("bulk-errors", partitions=2, replication_factor=3, max_message_bytes="2048")
    producer = Producer(shared_cluster.bootstrap)
    try:
        with pytest.raises(UnknownTopicError):
            producer.send_batch("no-such-bulk-topic", [b"a", b"b"]).result(10)
        with pytest.raises(UnknownPartitionError):
            producer.send_batch("bulk-errors", [b"a"], partition=2).result(10)
        with pytest.raises(RecordTooLargeError, match="record 2 of the batch"):
            producer.send_batch("bulk-errors", [b"a", b"b", b"x" * 3_000, b"c"], partition=0).result(10)
        with pytest.raises(ValueError, match="keys has 1 entries for 2 values"):
            producer.send_batch("bulk-errors", [b"a", b"b"], keys=[b"k"])
        with pytest.raises(TypeError):
            producer.send_batch("bulk-errors", b"not a sequence of values")
        with pytest.raises(TypeError):
            producer.send_batch("bulk-errors", pa.array([1, 2]))
        with pytest.raises(ValueError, match="timestamps"):
            producer.send_batch("bulk-errors", [b"a", b"b"], timestamps=[1])
        producer.send_batch("bulk-errors", [b"ok"], partition=0).result(10)
    finally:
        producer.close()
    with pytest.raises(ProducerError):
        producer.send_batch("bulk-errors", [b"late"])
    assert [value for _, value in fetch_all(shared_cluster.client, "bulk-errors", 0)] == [b"ok"]


@pytest.mark.integration
def test_batches_the_leader_finds_too_large_are_split_and_re_sent_in_order(
    cluster_factory: Callable[..., Cluster],
) -> None:
    cluster = cluster_factory(max_batch_bytes=4096)  # below the topic's max.message.bytes the client knows
    cluster.create_topic("bulk-refused", partitions=1, replication_factor=3)
    values = [b"%04d" % i + b"." * 60 for i in range(600)]
    with Producer(cluster.bootstrap, batch_bytes=256 * 1024) as producer:
        batches = producer.send_batch("bulk-refused", values).result(30)
    assert len(batches) > 1
    assert _offsets(batches) == [(0, offset) for offset in range(600)]
    assert [value for _, value in fetch_all(cluster.client, "bulk-refused", 0)] == values


@pytest.mark.integration
def test_idempotent_bulk_sends_survive_leader_kills_without_duplicates_or_reordering(cluster: Cluster) -> None:
    cluster.create_topic("bulk-exactly-once", partitions=3, replication_factor=3)
    producer = Producer(
        cluster.bootstrap, linger_ms=2, batch_bytes=4096, request_timeout_s=5.0, delivery_timeout_s=60.0
    )
    assert producer.idempotent
    calls: list[tuple[list[bytes], list[bytes], Future[list[BatchMetadata]]]] = []
    stop = threading.Event()

    def keep_sending() -> None:
        for call in range(2_000):
            if stop.is_set():
                return
            keys = [b"k%d" % (i % 12) for i in range(100)]
            values = [b"c%d-r%d" % (call, i) for i in range(100)]
            calls.append((keys, values, producer.send_batch("bulk-exactly-once", values, keys=keys)))
            time.sleep(0.02)

    sender = threading.Thread(target=keep_sending)
    sender.start()
    try:
        for partition in range(3):  # kill each partition's leader in turn, mid-stream
            time.sleep(0.7)
            leader = cluster.leader("bulk-exactly-once", partition)
            cluster.kill(leader)
            time.sleep(0.8)
            cluster.start(leader)
        time.sleep(0.5)
    finally:
        stop.set()
        sender.join(30)
        producer.flush(60)
        producer.close(10)
    assert len(calls) > 50
    assert all(future.exception() is None for _, _, future in calls)
    for partition in range(3):
        stored = [value for _, value in fetch_all(cluster.client, "bulk-exactly-once", partition)]
        expected = [
            value
            for keys, values, _ in calls
            for key, value in zip(keys, values, strict=True)
            if crc32c.crc32c(key) % 3 == partition
        ]
        assert stored == expected, f"bulk-exactly-once/{partition}: duplicates, losses or reordering"


# ---------------------------------------------------------------------------- the accumulator's bulk path


def _bulk(acc: RecordAccumulator, call: BulkCall, partition: int, values: list[bytes]) -> BulkBatch:
    columns = BulkColumns(pa.array(values, pa.binary()), None, None, 1_000)
    return BulkBatch(TopicPartition("t", partition), call, columns, sum(16 + len(v) for v in values))


def _accumulator(buffer_bytes: int, max_block_s: float = 0.3) -> RecordAccumulator:
    return RecordAccumulator(
        batch_bytes=buffer_bytes,
        buffer_bytes=buffer_bytes,
        linger_s=60.0,
        delivery_timeout_s=60.0,
        max_block_s=max_block_s,
        rng=random.Random(1),
    )


def test_a_bulk_call_queues_behind_the_partitions_open_batch_and_resolves_once_all_its_batches_are_done() -> None:
    acc = _accumulator(1 << 20)
    acc.append("t", 0, 2, 1 << 20, b"earlier", None, None, 1_000, 23)
    future: Future[list[BatchMetadata]] = Future()
    call = BulkCall(future, 2)
    first, second = _bulk(acc, call, 0, [b"a", b"b"]), _bulk(acc, call, 1, [b"c"])
    acc.append_bulk([first, second], None)
    ready, _ = acc.drain(time.monotonic(), lambda tp: 10)  # no linger: the open batch went ahead of the call
    assert [(b.tp.partition, b.record_count) for b in ready] == [(0, 1), (0, 2), (1, 1)]
    assert acc.pool.available == (1 << 20) - 23 - first.reserved - second.reserved
    second.complete(7, False, None)
    assert not future.done()
    left, right = first.split()  # the leader refused it as too large
    right.complete(4, True, None)
    left.complete(3, False, None)
    assert future.result(0) == [
        BatchMetadata("t", 0, 3, 1, 1_000),
        BatchMetadata("t", 0, 4, 1, 1_000, duplicate=True),
        BatchMetadata("t", 1, 7, 1, 1_000),
    ]


def test_a_bulk_call_fails_with_its_first_error_once_every_batch_is_done() -> None:
    acc = _accumulator(1 << 20)
    future: Future[list[BatchMetadata]] = Future()
    call = BulkCall(future, 2)
    first, second = _bulk(acc, call, 0, [b"a"]), _bulk(acc, call, 0, [b"b"])
    acc.append_bulk([first, second], None)
    first.fail(RequestTimeoutError("gone"))
    assert not future.done()
    second.complete(0, False, None)
    with pytest.raises(RequestTimeoutError, match="gone"):
        future.result(0)


def test_a_bulk_call_blocks_for_buffer_space_then_raises_without_queuing_anything() -> None:
    acc = _accumulator(1_000)
    acc.append("t", 0, 1, 1 << 20, b"x" * 500, None, None, 1_000, 516)
    call = BulkCall(Future(), 1)
    started = time.monotonic()
    with pytest.raises(RequestTimeoutError, match="buffer"):
        acc.append_bulk([_bulk(acc, call, 0, [b"y" * 300, b"z" * 300])], None)
    assert time.monotonic() - started >= 0.29
    assert acc.pool.available == 1_000 - 516
    assert [b.record_count for b in acc.take_all()] == [1]


def test_a_bulk_call_larger_than_the_buffer_goes_in_parts_as_acknowledgements_free_space() -> None:
    acc = _accumulator(1_000, max_block_s=10.0)
    future: Future[list[BatchMetadata]] = Future()
    call = BulkCall(future, 4)
    batches = [_bulk(acc, call, 0, [b"%d" % i * 400]) for i in range(4)]  # 1 664 bytes in all

    def acknowledge() -> None:
        offset = 0
        deadline = time.monotonic() + 10
        while offset < 4 and time.monotonic() < deadline:
            ready, _ = acc.drain(time.monotonic(), lambda tp: 10, force=True)
            for batch in ready:
                batch.complete(offset, False, None)
                acc.release(batch)
                offset += 1
            time.sleep(0.01)

    helper = threading.Thread(target=acknowledge)
    helper.start()
    acc.append_bulk(batches, None)
    helper.join(15)
    assert [b.base_offset for b in future.result(5)] == [0, 1, 2, 3]
    assert acc.pool.available == 1_000


def test_buffer_space_goes_to_waiters_in_arrival_order() -> None:
    acc = _accumulator(1_000, max_block_s=10.0)
    acc.pool.reserve(900, 1)
    large = threading.Thread(target=acc.pool.reserve, args=(800, 10))
    large.start()
    time.sleep(0.1)
    small = threading.Thread(target=acc.pool.reserve, args=(50, 10))
    small.start()
    acc.pool.release(600)  # 700 bytes free: enough for the small request, not for the large one ahead of it
    small.join(0.3)
    assert large.is_alive() and small.is_alive()
    acc.pool.release(300)
    large.join(5)
    small.join(5)
    assert not large.is_alive() and not small.is_alive()
    assert acc.pool.available == 150


def test_a_null_header_row_backed_by_entries_encodes_as_a_record_without_headers() -> None:
    entries = pa.array([{"key": "a", "value": b"1"}, {"key": "b", "value": b"2"}], type=headers_type().value_type)
    offsets = pa.array([0, 1, 2], pa.int32())
    hidden = pa.ListArray.from_arrays(offsets, entries, type=headers_type(), mask=pa.array([False, True]))
    headers = headers_column(hidden)
    assert headers.to_pylist() == hidden.to_pylist()
    future: Future[list[BatchMetadata]] = Future()
    columns = BulkColumns(pa.array([b"x", b"y"]), None, headers, 1_000)
    batch = BulkBatch(TopicPartition("t", 0), BulkCall(future, 1), columns, 100)
    decoded = decode_batches(batch.encode(Compression.NONE), include_headers=True)
    assert decoded.column("headers").to_pylist() == [[{"key": "a", "value": b"1"}], []]


def test_send_and_send_batch_metadata_types_are_exported() -> None:
    metadata = BatchMetadata("t", 1, 10, 5, 1_000)
    assert metadata.last_offset == 14 and metadata.topic_partition == TopicPartition("t", 1)
    assert not metadata.duplicate
    assert RecordMetadata("t", 1, 10, 1_000).topic_partition == metadata.topic_partition
