"""The producer's accumulator without a cluster: batching, linger, capacity, the sticky partitioner and
back-pressure."""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import Future, as_completed, wait
from concurrent.futures import TimeoutError as FuturesTimeout

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multiraft.errors import ProducerError, RecordTooLargeError, RequestTimeoutError
from rpc.client._accumulator import ProducerBatch, RecordAccumulator, record_size
from rpc.client._records import RecordMetadata
from storage import Compression, decode_batches, read_header

UNLIMITED = 1 << 30


def make(
    *, batch_bytes: int = 1 << 20, buffer_bytes: int = 1 << 24, linger_s: float = 0.005, max_block_s: float = 1.0
) -> RecordAccumulator:
    return RecordAccumulator(
        batch_bytes=batch_bytes,
        buffer_bytes=buffer_bytes,
        linger_s=linger_s,
        delivery_timeout_s=60.0,
        max_block_s=max_block_s,
        rng=random.Random(7),
    )


def append(acc: RecordAccumulator, value: bytes, *, partition: int | None = 0, partitions: int = 4) -> int:
    size = record_size(value, None, None)
    partition, _future = acc.append("t", partition, partitions, UNLIMITED, value, None, None, 1_000, size)
    return partition


def drain_all(acc: RecordAccumulator) -> list[ProducerBatch]:
    batches, _ = acc.drain(time.monotonic(), lambda tp: 1_000, force=True)
    return batches


@settings(max_examples=60, deadline=None)
@given(
    records=st.lists(st.tuples(st.integers(0, 3), st.binary(max_size=300)), max_size=200),
    batch_bytes=st.integers(64, 2_000),
)
def test_batching_keeps_each_partitions_records_in_send_order_within_the_size_limit(
    records: list[tuple[int, bytes]], batch_bytes: int
) -> None:
    acc = make(batch_bytes=batch_bytes)
    for partition, value in records:
        append(acc, value, partition=partition)
    batches = drain_all(acc)
    for partition in range(4):
        sent = [v for b in batches if b.tp.partition == partition for v in b.values]
        assert sent == [v for p, v in records if p == partition]
    for batch in batches:
        assert batch.record_count == 1 or batch.size <= batch_bytes
    assert sum(b.reserved for b in batches) == acc.pool.capacity - acc.pool.available


def test_a_batch_waits_for_linger_unless_it_is_full_or_flushed() -> None:
    acc = make(batch_bytes=1_000, linger_s=10.0)
    append(acc, b"x" * 10)
    now = time.monotonic()
    batches, next_at = acc.drain(now, lambda tp: 5)
    assert batches == [] and next_at is not None and next_at > now + 9
    batches, _ = acc.drain(now + 10.5, lambda tp: 5)
    assert [b.values for b in batches] == [[b"x" * 10]]

    for _ in range(20):  # about 1 000 bytes: the batch closes when full, linger or not
        append(acc, b"y" * 40)
    batches, _ = acc.drain(time.monotonic(), lambda tp: 5)
    assert batches and batches[0].size >= 900

    append(acc, b"z")
    pending = acc.begin_flush()
    try:
        batches, _ = acc.drain(time.monotonic(), lambda tp: 5)
    finally:
        acc.end_flush()
    assert batches[-1].values[-1] == b"z" and pending


def test_the_sender_takes_no_more_batches_of_a_partition_than_it_has_room_for() -> None:
    acc = make(batch_bytes=100)
    for _ in range(10):
        append(acc, b"v" * 80)  # one record per batch
    first, _ = acc.drain(time.monotonic(), lambda tp: 2, force=True)
    assert len(first) == 2
    rest, _ = acc.drain(time.monotonic(), lambda tp: 0, force=True)
    assert rest == []
    rest, _ = acc.drain(time.monotonic(), lambda tp: 100, force=True)
    assert len(rest) == 8
    assert [b.values for b in first + rest] == [[b"v" * 80]] * 10


def test_null_keys_stick_to_one_partition_until_its_batch_is_sent_then_move_on() -> None:
    acc = make()
    chosen = {append(acc, b"v", partition=None, partitions=6) for _ in range(50)}
    assert len(chosen) == 1  # one batch is still filling: every record joins it
    seen = list(chosen)
    for _ in range(60):
        drain_all(acc)  # the sticky batch is sent ...
        now_on = {append(acc, b"v", partition=None, partitions=6) for _ in range(5)}
        assert len(now_on) == 1
        assert now_on != {seen[-1]}  # ... so the next record goes elsewhere
        seen.extend(now_on)
    assert set(seen) == set(range(6))


def test_a_full_sticky_batch_sends_the_next_record_elsewhere() -> None:
    acc = make(batch_bytes=200)
    first = append(acc, b"a" * 150, partition=None, partitions=3)
    second = append(acc, b"b" * 150, partition=None, partitions=3)
    assert first != second


def test_send_blocks_while_the_buffer_is_full_and_raises_after_max_block() -> None:
    size = record_size(b"v" * 100, None, None)
    acc = make(buffer_bytes=3 * size, max_block_s=0.3)
    for _ in range(3):
        append(acc, b"v" * 100)
    started = time.monotonic()
    with pytest.raises(RequestTimeoutError, match="buffer"):
        append(acc, b"v" * 100)
    assert time.monotonic() - started >= 0.29


def test_a_blocked_send_continues_once_acknowledgements_free_the_buffer() -> None:
    size = record_size(b"v" * 100, None, None)
    acc = make(buffer_bytes=2 * size, max_block_s=10.0)
    append(acc, b"v" * 100)
    append(acc, b"v" * 100)
    batches = drain_all(acc)

    def acknowledge() -> None:
        time.sleep(0.2)
        for batch in batches:
            batch.complete(0, False, None)
            acc.release(batch)

    threading.Thread(target=acknowledge).start()
    started = time.monotonic()
    append(acc, b"v" * 100)
    assert 0.15 < time.monotonic() - started < 5


def test_a_record_larger_than_the_whole_buffer_fails_at_once() -> None:
    acc = make(buffer_bytes=1_000)
    with pytest.raises(RecordTooLargeError):
        append(acc, b"v" * 2_000)
    assert acc.pool.available == 1_000


def test_a_closed_accumulator_refuses_records_and_wakes_blocked_senders() -> None:
    size = record_size(b"v", None, None)
    acc = make(buffer_bytes=size, max_block_s=30.0)
    append(acc, b"v")
    errors: list[BaseException] = []

    def blocked() -> None:
        try:
            append(acc, b"v")
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=blocked)
    thread.start()
    time.sleep(0.1)
    acc.close()
    thread.join(5)
    assert len(errors) == 1 and isinstance(errors[0], ProducerError)
    with pytest.raises(ProducerError):
        append(acc, b"v")


def test_batches_past_the_delivery_timeout_expire() -> None:
    acc = make()
    append(acc, b"v")
    assert acc.expire(time.monotonic()) == []
    expired = acc.expire(time.monotonic() + 61)
    assert len(expired) == 1 and not acc.has_waiting()


def test_a_batch_encodes_once_and_a_split_keeps_order_and_sequences() -> None:
    acc = make()
    futures: list[Future[RecordMetadata]] = []
    for i in range(5):
        headers = (("trace", b"%d" % i),) if i % 2 else None
        key = b"k%d" % i if i != 3 else None
        size = record_size(b"v%d" % i, key, headers)
        futures.append(acc.append("t", 1, 4, UNLIMITED, b"v%d" % i, key, headers, 1_000 + i, size)[1])
    (batch,) = drain_all(acc)
    batch.set_producer(42, 0, 100)
    payload = batch.encode(Compression.ZSTD)
    assert batch.encode(Compression.ZSTD) is payload  # retries send the same bytes
    header = read_header(payload)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 0, 100)
    table = decode_batches(payload, include_headers=True)
    assert table.column("value").to_pylist() == [b"v%d" % i for i in range(5)]
    assert table.column("key").to_pylist() == [b"k0", b"k1", b"k2", None, b"k4"]
    assert [len(h) for h in table.column("headers").to_pylist()] == [0, 1, 0, 1, 0]

    first, second = batch.split()
    assert (first.base_sequence, second.base_sequence) == (100, 102)
    assert first.values + second.values == batch.values
    assert first.reserved + second.reserved == batch.reserved
    first.complete(10, False, None)
    second.complete(12, True, None)
    assert [f.result().offset for f in futures] == [10, 11, 12, 13, 14]
    assert [f.result().timestamp_ms for f in futures] == [1_000, 1_001, 1_002, 1_003, 1_004]
    assert [f.result().duplicate for f in futures] == [False, False, True, True, True]


def test_record_futures_share_their_batchs_condition_yet_wait_for_their_own_result() -> None:
    acc = make()
    futures = [acc.append("t", 0, 1, UNLIMITED, b"v%d" % i, None, None, 1_000, 20)[1] for i in range(4)]
    (batch,) = drain_all(acc)
    first, second = batch.split()
    assert not futures[3].cancel()  # a sent record cannot be taken back
    outcome: list[object] = []

    def wait_for_the_last() -> None:
        outcome.append(futures[3].exception(timeout=10))

    waiter = threading.Thread(target=wait_for_the_last)
    waiter.start()
    time.sleep(0.05)
    first.complete(0, False, None)  # wakes the waiter, whose own result is not there yet
    time.sleep(0.2)
    assert outcome == [] and waiter.is_alive()
    with pytest.raises(FuturesTimeout):
        futures[2].result(timeout=0.05)
    done, pending = wait(futures, timeout=0.05)
    assert done == set(futures[:2]) and pending == set(futures[2:])
    second.fail(RequestTimeoutError("gone"))
    waiter.join(5)
    assert len(outcome) == 1 and isinstance(outcome[0], RequestTimeoutError)
    assert futures[0].result(0).offset == 0
    assert set(as_completed(futures, timeout=1)) == set(futures)
    seen: list[bool] = []
    futures[0].add_done_callback(lambda f: seen.append(f.done()))
    assert seen == [True]
