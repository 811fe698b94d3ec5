"""Bulk batches of ``Producer.send_batch``: slices of Arrow columns, one per wire batch, encoded straight from
their buffers, and the call that resolves once every batch of it is acknowledged or one has failed."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, NamedTuple

from multiraft.errors import MultiraftError
from rpc.client._accumulator import ProducerBatch
from rpc.client._futures import RecordFuture
from rpc.client._records import BatchMetadata, TopicPartition
from storage.batch import HEADER_SIZE, Compression, encode_batch_parts

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pyarrow as pa

__all__ = ["BulkBatch", "BulkCall", "BulkColumns"]


class BulkColumns(NamedTuple):
    """Records of a ``send_batch()`` call as columns: binary or string Arrow arrays, a ``headers_type()``
    array, and one timestamp or an int64 array of them."""

    values: pa.Array
    keys: pa.Array | None
    headers: pa.Array | None
    timestamps: int | npt.NDArray[np.int64]

    def slice(self, start: int, stop: int) -> BulkColumns:
        """Records ``[start, stop)``, without copying."""
        timestamps = self.timestamps if isinstance(self.timestamps, int) else self.timestamps[start:stop]
        return BulkColumns(
            self.values.slice(start, stop - start),
            None if self.keys is None else self.keys.slice(start, stop - start),
            None if self.headers is None else self.headers.slice(start, stop - start),
            timestamps,
        )

    @property
    def first_timestamp(self) -> int:
        return self.timestamps if isinstance(self.timestamps, int) else int(self.timestamps[0])


class BulkCall:
    """The outcome of one ``send_batch()`` call: its future resolves once every one of its wire batches was
    acknowledged (to their :class:`BatchMetadata`, by partition and offset) or fails once all are done and at
    least one failed (with the first error)."""

    def __init__(self, future: Future[list[BatchMetadata]], batches: int) -> None:
        self.future = future
        self._lock = threading.Lock()
        self._pending = batches
        self._results: list[BatchMetadata] = []
        self._error: MultiraftError | None = None

    def split(self) -> None:
        """One of the call's batches became two."""
        with self._lock:
            self._pending += 1

    def done(self, metadata: BatchMetadata) -> None:
        with self._lock:
            self._results.append(metadata)
            self._pending -= 1
            finished = self._pending == 0
        if finished:
            self._finish()

    def failed(self, error: MultiraftError, batches: int = 1) -> None:
        with self._lock:
            if self._error is None:
                self._error = error
            self._pending -= batches
            finished = self._pending == 0
        if finished:
            self._finish()

    def _finish(self) -> None:
        if self._error is not None:
            self.future.set_exception(self._error)
        else:
            self.future.set_result(sorted(self._results, key=lambda m: (m.partition, m.base_offset)))


class BulkBatch(ProducerBatch):
    """Records of one ``send_batch()`` call for one partition: one wire batch, queued ready to send.

    It holds column slices rather than record lists and reports to its :class:`BulkCall` rather than to
    per-record futures.
    """

    __slots__ = ("call", "columns")

    def __init__(self, tp: TopicPartition, call: BulkCall, columns: BulkColumns, size: int) -> None:
        super().__init__(tp, HEADER_SIZE + size, 0.0, 0.0)
        self.call = call
        self.columns = columns
        self.size = HEADER_SIZE + size
        self.closed = True

    def __repr__(self) -> str:
        return f"BulkBatch({self.tp}, records={self.record_count}, sequence={self.base_sequence})"

    @property
    def record_count(self) -> int:
        return len(self.columns.values)

    def fits(self, size: int) -> bool:
        return False

    def append(self, *args: Any, **kwargs: Any) -> RecordFuture:
        raise TypeError("a BulkBatch takes no more records")

    def encode_parts(self, compression: Compression) -> list[bytes | memoryview]:
        columns = self.columns
        return encode_batch_parts(  # straight from the columns' buffers
            columns.values,
            timestamps_ms=columns.timestamps,
            keys=columns.keys,
            headers=columns.headers,
            compression=compression,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=self.base_sequence,
        )

    def split(self, at: int | None = None) -> tuple[ProducerBatch, ProducerBatch]:
        count = self.record_count
        half = count // 2 if at is None else at
        if not 0 < half < count:
            raise ValueError(f"cannot split a batch of {count} records at {half}")
        body = self.size - HEADER_SIZE
        first_body = body * half // count
        first = BulkBatch(self.tp, self.call, self.columns.slice(0, half), first_body)
        second = BulkBatch(self.tp, self.call, self.columns.slice(half, count), body - first_body)
        for part in (first, second):
            part.created, part.deadline, part.attempts = self.created, self.deadline, self.attempts
            part.outcome_unknown = self.outcome_unknown
        first.reserved = self.reserved * half // count
        second.reserved = self.reserved - first.reserved
        if self.base_sequence >= 0:
            first.set_producer(self.producer_id, self.producer_epoch, self.base_sequence)
            second.set_producer(self.producer_id, self.producer_epoch, self.base_sequence + half)
        self.call.split()
        return first, second

    def complete(self, base_offset: int, duplicate: bool, append_time_ms: int | None) -> None:
        topic, partition = self.tp
        timestamp = append_time_ms if append_time_ms is not None else self.columns.first_timestamp
        self.call.done(BatchMetadata(topic, partition, base_offset, self.record_count, timestamp, duplicate))
        self.done.set()

    def fail(self, error: MultiraftError) -> None:
        self.call.failed(error)
        self.done.set()
