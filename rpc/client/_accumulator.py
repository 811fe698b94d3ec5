"""The producer's record accumulator: per-partition batches filled by ``send()``, drained by the sender.

``send()`` only appends its (already converted) arguments to Python lists; the sender encodes a whole batch
with one :func:`storage.encode_batch` call. ``send_batch()`` queues bulk batches instead (``_bulk.py``):
slices of Arrow columns, one per wire batch, that are encoded straight from their buffers. Memory is bounded: every
record reserves its estimated size in a :class:`BufferPool` before it is queued and gives it back when its
batch is acknowledged or fails, so a producer that outruns the cluster blocks in ``send()`` and
``send_batch()`` (up to ``max_block_s``) instead of growing.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import MethodType
from typing import TYPE_CHECKING

from multiraft.errors import MultiraftError, ProducerError
from rpc.client._buffer_pool import RECORD_OVERHEAD, BufferPool, Header, record_size
from rpc.client._futures import BatchOutcome, Callback, RecordFuture
from rpc.client._produce_request import produce_request
from rpc.client._records import TopicPartition
from storage.batch import HEADER_SIZE, Compression, encode_batch_parts

if TYPE_CHECKING:
    from rpc.client._bulk import BulkBatch

__all__ = [
    "BufferPool",
    "Header",
    "ProducerBatch",
    "RecordAccumulator",
    "record_size",
    "RECORD_OVERHEAD",
]


class ProducerBatch:
    """Records for one partition, sent and acknowledged together.

    The accumulator fills the lists (keys and headers only once a record has some); once the sender takes the
    batch it gets a producer id and sequence and is encoded once. A retry sends the same bytes again, so the
    leader can recognise it. Its records' futures and callbacks share one :class:`BatchOutcome`.
    """

    __slots__ = (
        "attempts",
        "base_sequence",
        "closed",
        "created",
        "deadline",
        "done",
        "first",
        "headers",
        "keys",
        "limit",
        "maybe_written",
        "outcome",
        "outcome_unknown",
        "payload",
        "producer_epoch",
        "producer_id",
        "request",
        "request_at",
        "request_id",
        "reserved",
        "send_index",
        "size",
        "timestamps",
        "tp",
        "values",
    )

    def __init__(self, tp: TopicPartition, limit: int, created: float, deadline: float) -> None:
        self.tp = tp
        self.limit = limit
        self.created = created
        self.deadline = deadline
        self.values: list[bytes | None] = []
        self.keys: list[bytes | None] | None = None  # None while no record has a key
        self.headers: list[Sequence[Header] | None] | None = None  # None while no record has headers
        self.timestamps: list[int] = []
        self.outcome = BatchOutcome(tp.topic, tp.partition, self.timestamps)
        self.first = 0  # the index of this batch's first record in its outcome (a split's second part: > 0)
        self.size = HEADER_SIZE
        self.reserved = 0
        self.closed = False
        self.done = threading.Event()
        # Set by the sender.
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = -1
        self.payload: bytes | None = None
        # The serialized ProduceRequest carrying the batch (built once, sent by every attempt), its request id and
        # where the batch starts in it.
        self.request: bytes | None = None
        self.request_id = 0
        self.request_at = 0
        self.attempts = 0
        self.send_index = 0  # per partition, increasing with every send (the order the leader sees)
        self.maybe_written = False
        # An attempt that reached a leader ended with its outcome unknown: the batch may be in the log under its
        # sequences, whatever later attempts are answered (a refusal proves only that attempt unwritten).
        self.outcome_unknown = False

    def __repr__(self) -> str:
        return f"ProducerBatch({self.tp}, records={len(self.values)}, sequence={self.base_sequence})"

    @property
    def record_count(self) -> int:
        return len(self.values)

    @property
    def last_sequence(self) -> int:
        return self.base_sequence + self.record_count - 1

    def fits(self, size: int) -> bool:
        return not self.values or self.size + size <= self.limit

    def append(
        self,
        value: bytes | None,
        key: bytes | None,
        headers: Sequence[Header] | None,
        timestamp_ms: int,
        size: int,
        callback: Callback | None = None,
    ) -> RecordFuture:
        index = len(self.values)
        self.values.append(value)
        self.timestamps.append(timestamp_ms)
        if key is not None or self.keys is not None:
            self.add_key(index, key)
        if headers or self.headers is not None:
            self.add_headers(index, headers)
        if callback is not None or self.outcome.callbacks:
            self.outcome.add_callback(index, callback)
        self.size += size
        self.reserved += size
        return RecordFuture(self.outcome, index)

    def add_key(self, index: int, key: bytes | None) -> None:
        """Record ``index``'s key (the list is made when the first record with a key comes)."""
        if self.keys is None:
            self.keys = [None] * index
        self.keys.append(key)

    def add_headers(self, index: int, headers: Sequence[Header] | None) -> None:
        if self.headers is None:
            self.headers = [None] * index
        self.headers.append(headers)

    def set_producer(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        if (producer_id, producer_epoch, base_sequence) != (self.producer_id, self.producer_epoch, self.base_sequence):
            self.producer_id, self.producer_epoch, self.base_sequence = producer_id, producer_epoch, base_sequence
            self.payload = self.request = None

    def encode(self, compression: Compression) -> bytes:
        """The batch's bytes: encoded on first use, then the same bytes for every retry."""
        if self.payload is None:
            if self.request is not None:
                length = int.from_bytes(self.request[self.request_at + 8 : self.request_at + 12], "little")
                self.payload = self.request[self.request_at : self.request_at + length]
            else:
                self.payload = b"".join(self.encode_parts(compression))
        return self.payload

    def produce_request(self, compression: Compression, request_ids: Iterator[int], timeout_ms: int) -> bytes:
        """The serialized ProduceRequest of the batch, built (with the next of ``request_ids``) on first use, then
        the same bytes for every retry: the request id only has to tell apart the requests in flight on one
        stream, and a batch is never in flight twice."""
        if self.request is None:
            parts = [self.payload] if self.payload is not None else self.encode_parts(compression)
            self.request_id = next(request_ids)
            self.request, self.request_at = produce_request(
                self.tp.topic, self.tp.partition, parts, self.request_id, timeout_ms
            )
        return self.request

    def encode_parts(self, compression: Compression) -> list[bytes | memoryview]:
        """The batch's bytes, encoded now, as the pieces that make them up."""
        return encode_batch_parts(
            self.values,
            timestamps_ms=self.timestamps,
            keys=self.keys,
            headers=self.headers,
            compression=compression,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=self.base_sequence,
        )

    def split(self, at: int | None = None) -> tuple[ProducerBatch, ProducerBatch]:
        """Two batches of the records before and from ``at`` (default: the half), keeping their sequences (for
        a batch the leader found too large, or whose first records a replay producer already wrote)."""
        half = len(self.values) // 2 if at is None else at
        if not 0 < half < len(self.values):
            raise ValueError(f"cannot split a batch of {len(self.values)} records at {half}")
        parts = []
        for lo, hi in ((0, half), (half, len(self.values))):
            part = ProducerBatch(self.tp, self.limit, self.created, self.deadline)
            part.outcome, part.first = self.outcome, self.first + lo
            part.values, part.timestamps = self.values[lo:hi], self.timestamps[lo:hi]
            if self.keys is not None and any(k is not None for k in self.keys[lo:hi]):
                part.keys = self.keys[lo:hi]
            if self.headers is not None and any(self.headers[lo:hi]):
                part.headers = self.headers[lo:hi]
            part.attempts, part.outcome_unknown = self.attempts, self.outcome_unknown
            parts.append(part)
        first, second = parts
        first.reserved = self.reserved * half // len(self.values)
        second.reserved = self.reserved - first.reserved
        first.size = self.size * half // len(self.values)
        second.size = self.size - first.size + HEADER_SIZE
        if self.base_sequence >= 0:
            first.set_producer(self.producer_id, self.producer_epoch, self.base_sequence)
            second.set_producer(self.producer_id, self.producer_epoch, self.base_sequence + half)
        return first, second

    def complete(self, base_offset: int, duplicate: bool, append_time_ms: int | None) -> None:
        """Written at ``base_offset`` onwards (-1: written, at offsets no longer known; see the sender)."""
        self.outcome.complete(self.first, self.first + len(self.values), base_offset, duplicate, append_time_ms)
        self.done.set()

    def fail(self, error: MultiraftError) -> None:
        self.outcome.fail(self.first, self.first + len(self.values), error)
        self.done.set()


class _Queue:
    """One partition's batches waiting in the accumulator: full ones first, then the one still filling."""

    __slots__ = ("full", "open", "tp")

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.full: deque[ProducerBatch] = deque()
        self.open: ProducerBatch | None = None


class RecordAccumulator:
    """Thread-safe: any number of ``send()`` threads append, one sender drains."""

    def __init__(
        self,
        *,
        batch_bytes: int,
        buffer_bytes: int,
        linger_s: float,
        delivery_timeout_s: float,
        max_block_s: float,
        wake: Callable[[], None] = lambda: None,
        rng: random.Random | None = None,
    ) -> None:
        self.batch_bytes = batch_bytes
        self.linger_s = linger_s
        self.delivery_timeout_s = delivery_timeout_s
        self.max_block_s = max_block_s
        self._lock = threading.Lock()
        self.pool = BufferPool(buffer_bytes, self._lock)
        self.wake = wake
        self._rng = rng or random.Random()
        self._queues: dict[TopicPartition, _Queue] = {}
        self._by_topic: dict[str, dict[int, _Queue]] = {}  # the same queues
        self._sticky: dict[str, tuple[int, ProducerBatch]] = {}
        self._incomplete: set[ProducerBatch] = set()
        self._flushing = 0
        self._closed = False

    # --------------------------------------------------------------------------------------------- append

    def append(
        self,
        topic: str,
        partition: int | None,
        partitions: int,
        max_batch_bytes: int,
        value: bytes | None,
        key: bytes | None,
        headers: Sequence[Header] | None,
        timestamp_ms: int,
        size: int,
        callback: Callback | None = None,
    ) -> tuple[int, RecordFuture]:
        """Append one record; ``partition=None`` uses the sticky partition of ``topic``. Returns the partition
        and the record's future; ``callback`` is called with its metadata or error once its batch is done.

        Blocks while the buffer is full (up to ``max_block_s``), then raises :class:`RequestTimeoutError`.
        """
        pool = self.pool
        if size > pool.capacity:
            pool.check(size)
        wake = False
        with self._lock:
            if pool.available >= size and not pool.waiting and not pool.closed:
                pool.available -= size  # the common case of reserve_locked(), without the call
            else:
                pool.reserve_locked(size, self.max_block_s)
            try:
                if self._closed:
                    raise ProducerError("the producer is closed")
                batch = None
                sticky = partition is None
                if partition is not None:
                    chosen = partition
                else:
                    current = self._sticky.get(topic)
                    if current is not None and current[0] < partitions:
                        open_batch = current[1]  # not closed: still its partition's open batch
                        if not open_batch.closed and open_batch.size + size <= open_batch.limit:
                            chosen, batch = current
                    if batch is None:
                        chosen = self._sticky_partition(topic, partitions, size)
                if batch is None:
                    queue = self._queue(topic, chosen)
                    batch = queue.open
                    if batch is not None and not batch.fits(size):
                        batch.closed = True
                        queue.full.append(batch)
                        batch = queue.open = None
                        wake = True
                    if batch is None:
                        now = time.monotonic()
                        limit = min(self.batch_bytes, max_batch_bytes)
                        batch = queue.open = ProducerBatch(queue.tp, limit, now, now + self.delivery_timeout_s)
                        self._incomplete.add(batch)
                        wake = True
                    if sticky:
                        self._sticky[topic] = (chosen, batch)
                # ProducerBatch.append(), inline: this runs once per send().
                values = batch.values
                index = len(values)
                values.append(value)
                batch.timestamps.append(timestamp_ms)
                if key is not None or batch.keys is not None:
                    batch.add_key(index, key)
                if headers or batch.headers is not None:
                    batch.add_headers(index, headers)
                if callback is not None or batch.outcome.callbacks:
                    runs = batch.outcome.callbacks  # BatchOutcome.add_callback() and same_callback(), inline
                    last = runs[-1][1] if runs else None
                    if callback is not last and not (type(callback) is MethodType and callback == last):
                        runs.append((index, callback))
                batch.reserved += size
                batch.size += size
                if batch.size >= batch.limit:
                    queue = self._queue(topic, chosen)
                    batch.closed = True
                    queue.full.append(batch)
                    queue.open = None
                    wake = True
            except BaseException:
                pool.release_locked(size)
                raise
        if wake:
            self.wake()
        return chosen, RecordFuture(batch.outcome, index)

    def _queue(self, topic: str, partition: int) -> _Queue:
        """The partition's queue (by topic, then partition: no TopicPartition built per record)."""
        by_partition = self._by_topic.get(topic)
        if by_partition is None:
            by_partition = self._by_topic[topic] = {}
        queue = by_partition.get(partition)
        if queue is None:
            tp = TopicPartition(topic, partition)
            queue = by_partition[partition] = self._queues[tp] = _Queue(tp)
        return queue

    def sticky_partition(self, topic: str, partitions: int) -> int:
        """The partition a ``send_batch()`` without keys writes to: the current sticky partition, if its batch
        is still filling, else another."""
        with self._lock:
            return self._sticky_partition(topic, partitions, 0)

    def append_bulk(self, batches: Sequence[BulkBatch], sticky: int | None) -> None:
        """Queue the wire batches of one ``send_batch()`` call, in order, behind each partition's earlier
        records; ``sticky`` is the call's sticky partition (then moved on), if it used one.

        Its records reserve their buffer space all at once when they fit the buffer, so that each partition's
        share stays contiguous; otherwise batch by batch. Raises :class:`RequestTimeoutError` (buffer full for
        ``max_block_s``) or :class:`ProducerError` (closed) if nothing was queued; once some batches are
        queued, such an error fails the remaining ones through the call instead.
        """
        total = sum(batch.size - HEADER_SIZE for batch in batches)
        if total <= self.pool.capacity:
            self.pool.reserve(total, self.max_block_s)
            try:
                self._queue_bulk(batches, sticky)
            except BaseException:
                self.pool.release(total)
                raise
            return
        for index, batch in enumerate(batches):
            size = batch.size - HEADER_SIZE
            try:
                self.pool.reserve(size, self.max_block_s)
                try:
                    self._queue_bulk([batch], sticky)
                except BaseException:
                    self.pool.release(size)
                    raise
            except MultiraftError as exc:
                if index == 0:
                    raise
                batch.call.failed(exc, len(batches) - index)
                return

    def _queue_bulk(self, batches: Sequence[BulkBatch], sticky: int | None) -> None:
        with self._lock:
            if self._closed:
                raise ProducerError("the producer is closed")
            now = time.monotonic()
            for batch in batches:
                queue = self._queue(*batch.tp)
                if queue.open is not None:  # earlier records of the partition go first
                    queue.open.closed = True
                    queue.full.append(queue.open)
                    queue.open = None
                batch.created, batch.deadline = now, now + self.delivery_timeout_s
                batch.reserved = batch.size - HEADER_SIZE
                queue.full.append(batch)
                self._incomplete.add(batch)
                if batch.tp.partition == sticky:
                    self._sticky[batch.tp.topic] = (sticky, batch)  # closed: the next records move on
        self.wake()

    def _sticky_partition(self, topic: str, partitions: int, size: int) -> int:
        """Stay on the current partition while its batch is still filling, else move to another one."""
        current = self._sticky.get(topic)
        if current is not None:
            partition, batch = current
            if partition < partitions and not batch.closed and batch.fits(size):
                return partition
            previous = partition
        else:
            previous = -1
        if partitions == 1:
            return 0
        if not 0 <= previous < partitions:
            return self._rng.randrange(partitions)
        choice = self._rng.randrange(partitions - 1)  # any partition but the previous one
        return choice + 1 if choice >= previous else choice

    # ---------------------------------------------------------------------------------------------- drain

    def drain(
        self, now: float, capacity: Callable[[TopicPartition], int], *, force: bool = False
    ) -> tuple[list[ProducerBatch], float | None]:
        """Batches ready to send (full, lingered long enough, or flushing), as many per partition as
        ``capacity`` allows; and when the next open batch's linger ends (None if there is none)."""
        ready: list[ProducerBatch] = []
        next_at: float | None = None
        with self._lock:
            flush = force or self._flushing > 0 or self._closed
            for tp, queue in self._queues.items():
                if not queue.full and queue.open is None:
                    continue
                room = capacity(tp)
                while room > 0 and queue.full:
                    ready.append(queue.full.popleft())
                    room -= 1
                batch = queue.open
                if batch is None:
                    continue
                if room <= 0:
                    continue  # the sender looks again when an answer frees room
                due = batch.created + self.linger_s
                if flush or due <= now:
                    batch.closed = True
                    queue.open = None
                    ready.append(batch)
                elif next_at is None or due < next_at:
                    next_at = due
        return ready, next_at

    def expire(self, now: float) -> list[ProducerBatch]:
        """Remove and return waiting batches whose delivery timeout passed (the caller fails them)."""
        expired: list[ProducerBatch] = []
        with self._lock:
            for queue in self._queues.values():
                while queue.full and queue.full[0].deadline <= now:
                    expired.append(queue.full.popleft())
                if queue.open is not None and queue.open.deadline <= now and not queue.full:
                    queue.open.closed = True
                    expired.append(queue.open)
                    queue.open = None
        return expired

    def next_deadline(self) -> float | None:
        with self._lock:
            deadlines = [q.full[0].deadline for q in self._queues.values() if q.full]
            deadlines += [q.open.deadline for q in self._queues.values() if q.open is not None]
        return min(deadlines, default=None)

    def has_waiting(self) -> bool:
        with self._lock:
            return any(q.full or q.open is not None for q in self._queues.values())

    def take_all(self) -> list[ProducerBatch]:
        """Remove every waiting batch (a producer closing without waiting fails them)."""
        taken: list[ProducerBatch] = []
        with self._lock:
            for queue in self._queues.values():
                taken.extend(queue.full)
                queue.full.clear()
                if queue.open is not None:
                    queue.open.closed = True
                    taken.append(queue.open)
                    queue.open = None
        return taken

    def take(self, tp: TopicPartition) -> list[ProducerBatch]:
        """Remove the waiting batches of one partition (the caller fails them)."""
        with self._lock:
            queue = self._queues.get(tp)
            if queue is None:
                return []
            taken = list(queue.full)
            queue.full.clear()
            if queue.open is not None:
                queue.open.closed = True
                taken.append(queue.open)
                queue.open = None
        return taken

    # --------------------------------------------------------------------------------- completion, flush

    def release(self, batch: ProducerBatch) -> None:
        """A batch was acknowledged or failed: give its memory back."""
        with self._lock:
            self._incomplete.discard(batch)
            self.pool.release_locked(batch.reserved)
        batch.reserved = 0

    def replace(self, old: ProducerBatch, parts: Iterable[ProducerBatch]) -> None:
        """``old`` was split into ``parts`` (its memory moves with them)."""
        with self._lock:
            self._incomplete.discard(old)
            self._incomplete.update(parts)
        old.reserved = 0

    def incomplete(self) -> list[ProducerBatch]:
        with self._lock:
            return list(self._incomplete)

    def begin_flush(self) -> list[ProducerBatch]:
        """Send everything now, ignoring linger; returns the batches the flush waits for."""
        with self._lock:
            self._flushing += 1
            pending = list(self._incomplete)
        self.wake()
        return pending

    def end_flush(self) -> None:
        with self._lock:
            self._flushing -= 1

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """No more appends; waiting and blocked ``send()`` calls fail; everything waiting is sent at once."""
        with self._lock:
            self._closed = True
        self.pool.close()
        self.wake()
