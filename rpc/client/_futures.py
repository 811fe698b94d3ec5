"""What ``Producer.send()`` hands back: one shared outcome per batch, and per record a light
:class:`concurrent.futures.Future` that is only a view of it.

A stock Future builds its own ``threading.Condition`` and is completed one by one (a lock, a notify and a
:class:`RecordMetadata` per record), which made up most of ``send()``'s cost. The records of one batch are
acknowledged together, so the batch keeps one :class:`BatchOutcome`: completing it records the batch's base
offset once, under one lock, and wakes its waiters once. A :class:`RecordFuture` holds only the outcome and its
record's index; its :class:`RecordMetadata` is built when asked for (``result()``, a callback). Per-record state
(done callbacks, ``concurrent.futures.wait`` waiters) is created only for the futures a caller watches.

``send(callback=...)`` callbacks are kept per batch in record order and called in that order, with the
record's metadata or error, once its batch is done.

A batch split after a leader refused it as too large shares its outcome with its parts, each completing its
own range of records, so a future may see its siblings finish before it does: it waits in a loop until its
own range is done.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FuturesTimeoutError
from concurrent.futures._base import FINISHED, RUNNING
from types import MethodType
from typing import Any, NamedTuple

from multiraft.logging import get_logger
from rpc.client._records import RecordMetadata

__all__ = ["BatchOutcome", "Callback", "RecordFuture", "record_metadata", "same_callback"]

log = get_logger(__name__)

Callback = Callable[[RecordMetadata | None, BaseException | None], object]

# RecordMetadata is a frozen dataclass; its __init__ sets each field through object.__setattr__, twice the cost
# of its slots' own setters, and acknowledging send() records builds one per record.
_new = object.__new__
_fields: dict[str, Any] = dict(vars(RecordMetadata))  # its slots' descriptors
_set_topic = _fields["topic"].__set__
_set_partition = _fields["partition"].__set__
_set_offset = _fields["offset"].__set__
_set_timestamp = _fields["timestamp_ms"].__set__
_set_duplicate = _fields["duplicate"].__set__


def record_metadata(topic: str, partition: int, offset: int, timestamp_ms: int, duplicate: bool) -> RecordMetadata:
    """``RecordMetadata(topic, partition, offset, timestamp_ms, duplicate)``, built faster."""
    metadata: RecordMetadata = _new(RecordMetadata)
    _set_topic(metadata, topic)
    _set_partition(metadata, partition)
    _set_offset(metadata, offset)
    _set_timestamp(metadata, timestamp_ms)
    _set_duplicate(metadata, duplicate)
    return metadata


def same_callback(callback: Callback | None, other: Callback | None) -> bool:
    """Whether two callbacks are one: the same object, or the same method of the same object (``obj.method``
    makes a new bound method at every call)."""
    return callback is other or (type(callback) is MethodType and callback == other)


class _Done(NamedTuple):
    """Records ``[lo, hi)`` of an outcome: written from ``base_offset`` (-1: where is unknown), or failed."""

    lo: int
    hi: int
    base_offset: int
    duplicate: bool
    append_time_ms: int | None
    error: BaseException | None


class BatchOutcome:
    """The results of one batch's records (and of the parts it may be split into)."""

    __slots__ = ("callbacks", "condition", "done", "partition", "timestamps", "topic", "watched")

    def __init__(self, topic: str, partition: int, timestamps: list[int]) -> None:
        self.topic = topic
        self.partition = partition
        self.timestamps = timestamps  # the batch's own list: every record's CreateTime, by index
        self.condition = threading.Condition()
        self.done: list[_Done] = []  # the ranges completed so far (one, unless the batch was split)
        # send(callback=...) in record order, run-length encoded: (first record, its callback or None) each time the
        # callback changes. A tuple and a bound method kept per record until its batch is done made the garbage
        # collector's passes over them cost more than the rest of send().
        self.callbacks: list[tuple[int, Callback | None]] = []
        self.watched: dict[int, RecordFuture] = {}  # futures with done callbacks or waiters, by record index

    def add_callback(self, index: int, callback: Callback | None) -> None:
        """Record ``index`` (the next one) is to be called back with ``callback`` (None: not at all)."""
        runs = self.callbacks
        if runs:
            if not same_callback(callback, runs[-1][1]):
                runs.append((index, callback))
        elif callback is not None:
            runs.append((index, callback))

    def _callback_runs(self, lo: int, hi: int) -> list[tuple[range, Callback]]:
        """The records of ``[lo, hi)`` to call back, as ranges sharing one callback, in record order."""
        runs, end = self.callbacks, len(self.timestamps)
        picked = []
        for k, (start, callback) in enumerate(runs):
            stop = runs[k + 1][0] if k + 1 < len(runs) else end
            first, last = max(start, lo), min(stop, hi)
            if callback is not None and first < last:
                picked.append((range(first, last), callback))
        return picked

    def range_of(self, index: int) -> _Done | None:
        for done in self.done:
            if done.lo <= index < done.hi:
                return done
        return None

    def metadata(self, index: int, done: _Done) -> RecordMetadata:
        base = done.base_offset
        offset = base + index - done.lo if base >= 0 else -1
        timestamp = done.append_time_ms if done.append_time_ms is not None else self.timestamps[index]
        return record_metadata(self.topic, self.partition, offset, timestamp, done.duplicate)

    def complete(self, lo: int, hi: int, base_offset: int, duplicate: bool, append_time_ms: int | None) -> None:
        """Records ``[lo, hi)`` were written at ``base_offset`` onwards (-1: at offsets no longer known)."""
        self._finish(_Done(lo, hi, base_offset, duplicate, append_time_ms, None))

    def fail(self, lo: int, hi: int, error: BaseException) -> None:
        self._finish(_Done(lo, hi, -1, False, None, error))

    def _finish(self, done: _Done) -> None:
        lo, hi = done.lo, done.hi
        with self.condition:
            self.done.append(done)
            self.condition.notify_all()
            watched = [self.watched.pop(i) for i in sorted(self.watched) if lo <= i < hi] if self.watched else []
            for future in watched:
                for waiter in future.waiters:
                    if done.error is None:
                        waiter.add_result(future)
                    else:
                        waiter.add_exception(future)
        if self.callbacks:
            self._call_back(done)
        for future in watched:
            for fn in future.done_callbacks:
                try:
                    fn(future)
                except Exception as exc:
                    log.exception("a future's done callback raised", error=repr(exc))

    def _call_back(self, done: _Done) -> None:
        """The ``send()`` callbacks of records ``[done.lo, done.hi)``, in record order (once per record: the
        metadata is built here, inline, as this runs for every record sent with a callback)."""
        lo, hi, error = done.lo, done.hi, done.error
        runs = self._callback_runs(lo, hi)
        if error is not None:
            for indexes, callback in runs:
                for _ in indexes:
                    try:
                        callback(None, error)
                    except Exception as exc:
                        log.exception("a send() callback raised", error=repr(exc))
            return
        topic, partition, timestamps = self.topic, self.partition, self.timestamps
        base, append_time, duplicate = done.base_offset, done.append_time_ms, done.duplicate
        delta = base - lo  # offset of record ``index``: index + delta (base -1: offsets unknown)
        new, metadata_class = _new, RecordMetadata
        set_topic, set_partition, set_offset, set_timestamp, set_duplicate = (
            _set_topic,
            _set_partition,
            _set_offset,
            _set_timestamp,
            _set_duplicate,
        )
        for indexes, callback in runs:
            for index in indexes:
                metadata = new(metadata_class)
                set_topic(metadata, topic)
                set_partition(metadata, partition)
                set_offset(metadata, index + delta if base >= 0 else -1)
                set_timestamp(metadata, timestamps[index] if append_time is None else append_time)
                set_duplicate(metadata, duplicate)
                try:
                    callback(metadata, None)
                except Exception as exc:
                    log.exception("a send() callback raised", error=repr(exc))


class RecordFuture(Future[RecordMetadata]):
    """One record's view of its batch's outcome: running from the start (a sent record cannot be cancelled),
    completed by the producer's sender thread. ``set_result``/``set_exception`` belong to the producer."""

    # Placeholders until a caller watches the future (_watch() gives it lists of its own).
    waiters: Sequence[Any] = ()
    done_callbacks: Sequence[Callable[[Future[RecordMetadata]], object]] = ()

    def __init__(self, outcome: BatchOutcome, index: int) -> None:  # no super(): no Condition of its own
        self._outcome = outcome
        self._index = index

    def _watch(self) -> list[Any]:
        """Lists of its own, and while the record is not done, a place among the watched (under the condition)."""
        if not isinstance(self.waiters, list):
            self.waiters, self.done_callbacks = [], []
        if self._outcome.range_of(self._index) is None:
            self._outcome.watched[self._index] = self
        return self.waiters

    # The attributes concurrent.futures.wait() and as_completed() read and lock.
    @property
    def _condition(self) -> threading.Condition:  # type: ignore[override]
        return self._outcome.condition

    @property
    def _state(self) -> str:  # type: ignore[override]
        return FINISHED if self._outcome.range_of(self._index) is not None else RUNNING

    @property
    def _waiters(self) -> list[Any]:  # type: ignore[override]
        return self._watch()  # wait() and as_completed() read it under the condition, then append

    def __repr__(self) -> str:
        done = self._outcome.range_of(self._index)
        state = "running" if done is None else "failed" if done.error is not None else "finished"
        return f"<RecordFuture {self._outcome.topic}/{self._outcome.partition} record {self._index} {state}>"

    def cancel(self) -> bool:
        return False

    def cancelled(self) -> bool:
        return False

    def running(self) -> bool:
        return self._outcome.range_of(self._index) is None

    def done(self) -> bool:
        return self._outcome.range_of(self._index) is not None

    def _wait(self, timeout: float | None) -> _Done:
        outcome, index = self._outcome, self._index
        done = outcome.range_of(index)
        if done is not None:
            return done
        deadline = None if timeout is None else time.monotonic() + timeout
        with outcome.condition:
            while (done := outcome.range_of(index)) is None:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise FuturesTimeoutError()
                outcome.condition.wait(remaining)
        return done

    def result(self, timeout: float | None = None) -> RecordMetadata:
        done = self._wait(timeout)
        if done.error is not None:
            raise done.error
        return self._outcome.metadata(self._index, done)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self._wait(timeout).error

    def add_done_callback(self, fn: Callable[[Future[RecordMetadata]], object]) -> None:
        outcome = self._outcome
        with outcome.condition:
            if outcome.range_of(self._index) is None:
                self._watch()
                self.done_callbacks.append(fn)  # type: ignore[attr-defined]
                return
        try:
            fn(self)
        except Exception as exc:
            log.exception("a future's done callback raised", error=repr(exc))

    def set_running_or_notify_cancel(self) -> bool:
        raise RuntimeError("a record's future is already running")

    def set_result(self, result: RecordMetadata) -> None:
        raise RuntimeError("a record's future is completed by its producer")

    def set_exception(self, exception: BaseException | None) -> None:
        raise RuntimeError("a record's future is completed by its producer")
