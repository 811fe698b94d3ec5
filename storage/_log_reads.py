"""Reads and lookups of a segmented log: entries for Raft, record batches by offset for consumers, and
the offset and time indexes (binary searches over the entries' own headers)."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import Any

import lmdb

from storage import _format as fmt
from storage._entries import KIND_AT, Entry, EntryKind, ReadResult
from storage._log_core import LogCore, SyncedView
from storage.batch import first_offset_at_or_after, read_header
from storage.errors import BeforeLogStartError, BeyondLogEndError, CorruptionError, StorageArgumentError

__all__ = ["LogReads"]


class LogReads(LogCore):
    """Raft's entry reads (owner thread) and consumers' reads and lookups (*any thread*, synced data)."""

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        """Entries with index in [lo, hi), stopping before ``max_bytes`` of payload (but at least one)."""
        self._check_open()
        if lo < self.first_index():
            raise BeforeLogStartError(f"index {lo} of {self.name} was compacted (first is {self.first_index()})")
        if hi > self.last_index() + 1:
            raise BeyondLogEndError(f"index {hi - 1} is beyond the last index {self.last_index()} of {self.name}")
        if lo > hi:
            raise StorageArgumentError(f"lo {lo} > hi {hi}")
        out: list[Entry] = []
        size = 0
        with self._store._read_txn() as txn:
            for key, value in self._iter_values(txn, self._segments, lo, hi):
                payload_size = len(value) - fmt.ENTRY_HEADER_SIZE
                if out and max_bytes is not None and size + payload_size > max_bytes:
                    break
                size += payload_size
                term, kind, timestamp_ms, _, _, _ = fmt.ENTRY_HEADER.unpack_from(value)
                index = fmt.INDEX_KEY.unpack(key)[0]
                out.append(Entry(index, term, EntryKind(kind), timestamp_ms, bytes(value[fmt.ENTRY_HEADER_SIZE :])))
        return out

    def scrub(self, lo: int, max_bytes: int) -> tuple[int, int, int | None]:
        """Check the CRC of the entries from ``lo`` on, about ``max_bytes`` of them (at least one), without
        copying them: (the next index to check, bytes checked, the first damaged index or None). A damaged
        entry (CRC mismatch, or missing) ends the walk; past the last index nothing is checked."""
        self._check_open()
        lo = max(lo, self.first_index())
        hi = self.last_index() + 1
        if lo >= hi:
            return lo, 0, None
        checked = 0
        index = lo
        with self._store._read_txn() as txn:
            try:
                for _, value in self._iter_values(txn, self._segments, lo, hi):
                    checked += len(value)
                    index += 1
                    if checked >= max_bytes:
                        break
            except CorruptionError as exc:
                return index, checked, exc.index if exc.index is not None else index
        return index, checked, None

    def first_damaged(self, lo: int, hi: int) -> int | None:
        """The first index in [lo, hi) whose entry fails its CRC or is missing, or None."""
        while lo < hi:
            lo, _, damaged = self.scrub(lo, 64 << 20)
            if damaged is not None:
                return damaged if damaged < hi else None
            if lo >= self.last_index() + 1:
                return None
        return None

    # ------------------------------------------------------------------------------ reads for consumers

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None) -> ReadResult:
        """Record batches from the one containing ``offset`` on, as stored (*any thread*, synced data only).

        Stops before ``max_bytes`` (but returns at least one batch) and before any batch that reaches
        ``max_offset`` (the high watermark). Raises :class:`BeforeLogStartError` below the log start and
        :class:`BeyondLogEndError` beyond its end.
        """
        if max_bytes < 1:
            raise StorageArgumentError(f"max_bytes must be >= 1, got {max_bytes}")
        with self._store._reading(self) as (txn, view):
            start, end = view.start_offset, view.end_offset
            if offset < start:
                raise BeforeLogStartError(f"offset {offset} of {self.name} was deleted (log starts at {start})")
            if offset > end:
                raise BeyondLogEndError(f"offset {offset} is beyond the end {end} of {self.name}")
            limit = end if max_offset is None else min(max_offset, end)
            if offset >= limit:
                return ReadResult(b"", 0, offset, start, end)
            entry_index = self._index_of_offset(txn, view, offset)
            parts: list[memoryview] = []
            total = 0
            next_offset = offset
            last_index = view.segments[-1].last_index
            for _, value in self._iter_values(txn, view.segments, entry_index, last_index + 1):
                if value[KIND_AT] != EntryKind.DATA:
                    continue
                batch_end = fmt.next_offset_of(value)
                if batch_end > limit:
                    break  # a batch is visible only once all of it is below the limit
                batch = value[fmt.ENTRY_HEADER_SIZE :]
                if parts and total + len(batch) > max_bytes:
                    break
                if not parts and not read_header(batch).base_offset <= offset < batch_end:
                    raise CorruptionError(
                        f"entry does not hold offset {offset}", path=str(self._store._data_file), index=entry_index
                    )
                parts.append(batch)
                total += len(batch)
                next_offset = batch_end
            return ReadResult(b"".join(parts), len(parts), next_offset, start, end)

    def _first_index_where(
        self, txn: lmdb.Transaction, record: fmt.SegmentRecord, reached: Callable[[Any], bool]
    ) -> int | None:
        """Binary search of a segment: the first index whose header satisfies ``reached`` (which must be
        monotonic along the segment), or None. Probes read headers only; callers CRC-check what they serve."""
        db = self._store._slot(record.slot)
        lo, hi = record.base_index, record.last_index + 1
        while lo < hi:
            middle = (lo + hi) // 2
            value = txn.get(fmt.INDEX_KEY.pack(middle), db=db)
            if value is None or len(value) < fmt.ENTRY_HEADER_SIZE:
                raise CorruptionError(f"entry missing from {self.name}", path=str(self._store._data_file), index=middle)
            if reached(value):
                hi = middle
            else:
                lo = middle + 1
        return lo if lo <= record.last_index else None

    def _index_of_offset(self, txn: lmdb.Transaction, view: SyncedView, offset: int) -> int:
        """Index of the data entry whose batch holds ``offset``: the first entry whose next offset is past it."""
        segments = view.segments
        position = max(bisect.bisect_right(segments, offset, key=lambda r: r.base_offset) - 1, 0)
        for record in segments[position:]:
            if record.next_offset <= offset:
                continue  # no record at or after offset here (e.g. a segment of no-ops)
            found = self._first_index_where(txn, record, lambda value: fmt.next_offset_of(value) > offset)
            if found is not None:
                return found
            raise CorruptionError(
                f"segment of {self.name} has no batch for offset {offset}", path=str(self._store._data_file)
            )
        raise BeyondLogEndError(f"offset {offset} is beyond the end of {self.name}")

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """Offset of the first record whose timestamp is >= ``timestamp_ms``, or None if there is none
        (*any thread*, synced data only).

        Like Kafka's time index: the first segment whose largest record timestamp reaches the target, then
        the first entry there whose running maximum does, then that batch's timestamp column.
        """
        with self._store._reading(self) as (txn, view):
            for record in view.segments:
                if record.max_record_timestamp_ms < timestamp_ms or record.entry_count == 0:
                    continue
                index = self._first_index_where(txn, record, lambda value: fmt.max_record_ts_of(value) >= timestamp_ms)
                if index is None:
                    continue
                for _, value in self._iter_values(txn, view.segments, index, index + 1):
                    if value[KIND_AT] == EntryKind.DATA:
                        found = first_offset_at_or_after(value[fmt.ENTRY_HEADER_SIZE :], timestamp_ms)
                        if found is not None:
                            return found
                raise CorruptionError(
                    f"time lookup in {self.name} found no record at or after {timestamp_ms}",
                    path=str(self._store._data_file),
                    index=index,
                )
            return None

    def synced_offsets(self) -> tuple[int, int]:
        """(log start offset, log end offset) of the synced log (*any thread*)."""
        self._check_open()
        view = self._view
        if view is None:
            return 0, 0
        return view.start_offset, view.end_offset
