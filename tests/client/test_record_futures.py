"""The futures and callbacks of ``Producer.send()`` records, without a cluster: one shared outcome per batch,
per-record results, errors and order."""

from __future__ import annotations

import random
from concurrent.futures import Future, wait

import pytest

from multiraft.errors import RequestTimeoutError
from rpc.client._accumulator import ProducerBatch, RecordAccumulator, record_size
from rpc.client._futures import record_metadata
from rpc.client._records import RecordMetadata

UNLIMITED = 1 << 30


def make() -> RecordAccumulator:
    return RecordAccumulator(
        batch_bytes=1 << 20,
        buffer_bytes=1 << 24,
        linger_s=0.005,
        delivery_timeout_s=60.0,
        max_block_s=1.0,
        rng=random.Random(7),
    )


def drain_all(acc: RecordAccumulator) -> list[ProducerBatch]:
    batches, _ = acc.drain(0.0, lambda tp: 1_000, force=True)
    return batches


Outcome = tuple[RecordMetadata | None, BaseException | None]


def send(
    acc: RecordAccumulator, count: int, calls: list[tuple[int, Outcome]] | None = None, *, partition: int = 0
) -> list[Future[RecordMetadata]]:
    futures = []
    for i in range(count):
        value = b"v%d" % i
        callback = None
        if calls is not None:

            def callback(metadata: RecordMetadata | None, error: BaseException | None, i: int = i) -> None:
                calls.append((i, (metadata, error)))

        futures.append(
            acc.append(
                "t", partition, 4, UNLIMITED, value, None, None, 1_000 + i, record_size(value, None, None), callback
            )[1]
        )
    return futures


def test_each_record_future_resolves_to_its_own_offset_and_timestamp() -> None:
    acc = make()
    futures = send(acc, 3)
    assert not any(f.done() for f in futures) and all(f.running() for f in futures)
    (batch,) = drain_all(acc)
    batch.complete(40, False, None)
    assert [f.result(0) for f in futures] == [RecordMetadata("t", 0, 40 + i, 1_000 + i, False) for i in range(3)]
    assert all(f.done() and not f.running() and f.exception(0) is None for f in futures)


def test_a_topic_with_append_time_reports_the_leaders_time_for_every_record() -> None:
    acc = make()
    futures = send(acc, 2)
    (batch,) = drain_all(acc)
    batch.complete(0, True, 77)
    assert [(f.result().timestamp_ms, f.result().duplicate) for f in futures] == [(77, True), (77, True)]


def test_send_callbacks_run_once_each_in_record_order_with_their_metadata() -> None:
    acc = make()
    calls: list[tuple[int, Outcome]] = []
    send(acc, 5, calls)
    assert calls == []  # nothing before the batch is acknowledged
    (batch,) = drain_all(acc)
    batch.complete(10, False, None)
    assert [i for i, _ in calls] == [0, 1, 2, 3, 4]
    assert [outcome for _, outcome in calls] == [(RecordMetadata("t", 0, 10 + i, 1_000 + i), None) for i in range(5)]


def test_a_failed_batch_fails_every_record_future_and_callback_with_its_error() -> None:
    acc = make()
    calls: list[tuple[int, Outcome]] = []
    futures = send(acc, 3, calls)
    (batch,) = drain_all(acc)
    error = RequestTimeoutError("gone")
    batch.fail(error)
    assert [outcome for _, outcome in calls] == [(None, error)] * 3
    for future in futures:
        assert future.exception(0) is error
        with pytest.raises(RequestTimeoutError):
            future.result(0)


def test_split_parts_complete_their_own_records_callbacks_in_order() -> None:
    acc = make()
    calls: list[tuple[int, Outcome]] = []
    futures = send(acc, 4, calls)
    (batch,) = drain_all(acc)
    first, second = batch.split()
    second.complete(100, False, None)  # a later part may be answered first
    assert [i for i, _ in calls] == [2, 3] and not futures[0].done() and futures[2].done()
    first.fail(RequestTimeoutError("late"))
    assert [i for i, _ in calls] == [2, 3, 0, 1]
    assert [f.result().offset for f in futures[2:]] == [100, 101]
    assert all(isinstance(f.exception(), RequestTimeoutError) for f in futures[:2])


def test_done_callbacks_added_before_or_after_completion_each_run_once() -> None:
    acc = make()
    futures = send(acc, 2)
    seen: list[tuple[str, int]] = []
    futures[1].add_done_callback(lambda f: seen.append(("before", f.result().offset)))
    (batch,) = drain_all(acc)
    batch.complete(7, False, None)
    futures[1].add_done_callback(lambda f: seen.append(("after", f.result().offset)))
    assert seen == [("before", 8), ("after", 8)]
    done, pending = wait(futures, timeout=0)
    assert done == set(futures) and not pending


def test_a_callback_that_raises_does_not_stop_the_others() -> None:
    acc = make()
    calls: list[int] = []

    def explode(metadata: RecordMetadata | None, error: BaseException | None) -> None:
        raise ValueError("boom")

    size = record_size(b"v", None, None)
    acc.append("t", 0, 4, UNLIMITED, b"v", None, None, 1, size, explode)
    acc.append("t", 0, 4, UNLIMITED, b"v", None, None, 1, size, lambda m, e: calls.append(m.offset if m else -2))
    (batch,) = drain_all(acc)
    batch.complete(0, False, None)
    assert calls == [1]


def test_record_metadata_is_built_as_its_constructor_builds_it() -> None:
    made = record_metadata("t", 3, 9, 1_000, True)
    assert made == RecordMetadata("t", 3, 9, 1_000, True) and hash(made) == hash(RecordMetadata("t", 3, 9, 1_000, True))
    with pytest.raises(AttributeError):
        made.offset = 1  # type: ignore[misc]


class _Counter:
    """Callbacks as bound methods: ``counter.record`` is a new object at every send(), equal to the last one."""

    def __init__(self, name: str, seen: list[tuple[str, int]]) -> None:
        self.name = name
        self.seen = seen

    def record(self, metadata: RecordMetadata | None, error: BaseException | None) -> None:
        self.seen.append((self.name, metadata.offset if metadata is not None else -1))


def test_records_sharing_a_callback_or_with_none_each_get_only_their_own_calls_in_order() -> None:
    acc = make()
    seen: list[tuple[str, int]] = []
    a, b = _Counter("a", seen), _Counter("b", seen)

    def plain(metadata: RecordMetadata | None, error: BaseException | None) -> None:
        seen.append(("plain", metadata.offset if metadata is not None else -1))

    # Record i gets callbacks[i]: runs of one method, another object's same method, a function, and none.
    callbacks = [a.record, a.record, None, None, a.record, b.record, b.record, plain, plain, None, a.record]
    size = record_size(b"v", None, None)
    for callback in callbacks:
        acc.append("t", 0, 4, UNLIMITED, b"v", None, None, 1, size, callback)
    (batch,) = drain_all(acc)
    batch.complete(10, False, None)
    expected = [
        (callback.__self__.name if isinstance(callback, type(a.record)) else "plain", 10 + i)
        for i, callback in enumerate(callbacks)
        if callback is not None
    ]
    assert seen == expected


def test_a_split_batch_calls_each_part_s_own_records_back_once_whatever_their_callbacks() -> None:
    acc = make()
    seen: list[tuple[str, int]] = []
    a, b = _Counter("a", seen), _Counter("b", seen)
    callbacks = [a.record, a.record, a.record, b.record, None, b.record]
    size = record_size(b"v", None, None)
    for callback in callbacks:
        acc.append("t", 0, 4, UNLIMITED, b"v", None, None, 1, size, callback)
    (batch,) = drain_all(acc)
    first, second = batch.split(2)  # records 0-1 and 2-5: the split falls inside a run of a.record
    second.fail(RequestTimeoutError("late"))
    assert seen == [("a", -1), ("b", -1), ("b", -1)]
    first.complete(50, False, None)
    assert seen[3:] == [("a", 50), ("a", 51)]
