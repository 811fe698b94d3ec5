"""The write path of a segmented log: append (with Raft's suffix replacement), roll and truncate."""

from __future__ import annotations

from collections.abc import Sequence

import lmdb

from storage import _format as fmt
from storage._entries import KINDS, EntryKind, EntryLike
from storage._lmdb import storage_error
from storage._log_core import LogCore
from storage.batch import read_header
from storage.errors import BatchFormatError, BeforeLogStartError, CorruptionError, EntryTooLargeError, InvalidEntryError

__all__ = ["LogWrites"]


class LogWrites(LogCore):
    """Append, roll and truncate (owner thread)."""

    # ------------------------------------------------------------------------------------------- append

    def append(self, entries: Sequence[EntryLike]) -> None:
        """Append entries in one transaction; durable after :meth:`sync`.

        The first entry may overwrite a suffix of the log (Raft conflict resolution): entries from its index on
        are replaced. Entries must have consecutive indexes and non-decreasing terms, no lower than the term of
        the entry before them. A data entry's payload must be a record batch; the log writes its base offset.
        Nothing is written if any entry is invalid. If writing fails part-way (the map or disk is full), the
        log answers as before the call and the store must be rolled back (see :class:`TransactionFailedError`).
        """
        self._check_open()
        if not entries:
            return
        first = entries[0].index
        self._validate(entries, first)
        with self._writing(first) as txn:
            if first <= self.last_index():
                self.truncate_suffix(first)
            self._write_entries(txn, entries)
            self._last_term = entries[-1].term

    def _write_entries(self, txn: lmdb.Transaction, entries: Sequence[EntryLike]) -> None:
        store = self._store
        segment_bytes, segment_ms = self._segment_bytes, self._segment_ms
        record = self._segments[-1]
        data_db = store._slot(record.slot)
        (slot, base_index, last_index, base_offset, next_offset, first_ts, max_ts, max_record_ts, size, count) = (
            record.slot,
            record.base_index,
            record.last_index,
            record.base_offset,
            record.next_offset,
            record.first_timestamp_ms,
            record.max_timestamp_ms,
            record.max_record_timestamp_ms,
            record.size_bytes,
            record.entry_count,
        )
        try:
            for entry in entries:
                payload = entry.payload
                timestamp_ms = entry.timestamp_ms
                value_size = fmt.ENTRY_HEADER_SIZE + len(payload)
                if count and (
                    size + value_size > segment_bytes
                    or (timestamp_ms > 0 and first_ts > 0 and timestamp_ms - first_ts >= segment_ms)
                ):
                    self._segments[-1] = fmt.SegmentRecord(
                        slot, base_index, last_index, base_offset, next_offset, first_ts, max_ts, max_record_ts,
                        size, count,
                    )  # fmt: skip
                    self._write_segment_record(txn, self._segments[-1])
                    new = self._new_segment(entry.index, next_offset)
                    slot, base_index, base_offset = new.slot, new.base_index, new.base_offset
                    first_ts = max_ts = max_record_ts = -1
                    size = count = 0
                    data_db = store._slot(slot)
                key = fmt.INDEX_KEY.pack(entry.index)
                if entry.kind == EntryKind.DATA:
                    batch = read_header(payload)
                    base = next_offset
                    next_offset += batch.record_count
                    max_record_ts = max(max_record_ts, batch.max_timestamp)
                    value = fmt.build_value(
                        key, entry.term, entry.kind, timestamp_ms, payload,
                        base_offset=base, next_offset=next_offset, max_record_ts=max_record_ts,
                    )  # fmt: skip
                else:
                    value = fmt.build_value(
                        key, entry.term, entry.kind, timestamp_ms, payload,
                        base_offset=None, next_offset=next_offset, max_record_ts=max_record_ts,
                    )  # fmt: skip
                if not txn.put(key, value, db=data_db, append=True):
                    raise CorruptionError(
                        "segment holds an entry past the log's end", path=str(store._data_file), index=entry.index
                    )
                if timestamp_ms > 0:
                    if first_ts < 0:
                        first_ts = timestamp_ms
                    max_ts = max(max_ts, timestamp_ms)
                size += value_size
                count += 1
                last_index = entry.index
            self._segments[-1] = fmt.SegmentRecord(
                slot, base_index, last_index, base_offset, next_offset, first_ts, max_ts, max_record_ts, size, count
            )
            self._write_segment_record(txn, self._segments[-1])
        except lmdb.Error as exc:
            raise storage_error(exc, store._data_file, last_index + 1) from exc

    def _validate(self, entries: Sequence[EntryLike], first: int) -> None:
        limit = self._store.config.max_entry_bytes
        if first < self.first_index():
            raise InvalidEntryError(
                f"entry {first} is before the first index {self.first_index()} of {self.name} (compacted)"
            )
        if first > self.last_index() + 1:
            raise InvalidEntryError(
                f"entry {first} would leave a gap after the last index {self.last_index()} of {self.name}"
            )
        previous_term = self.term(first - 1)
        expected = first
        for entry in entries:
            if entry.index != expected:
                raise InvalidEntryError(f"entry indexes must be consecutive: expected {expected}, got {entry.index}")
            if entry.term < previous_term:
                raise InvalidEntryError(
                    f"entry {entry.index} has term {entry.term}, lower than the term {previous_term} before it"
                )
            if entry.kind not in KINDS:
                raise InvalidEntryError(f"entry {entry.index} has unknown kind {entry.kind!r}")
            if entry.timestamp_ms < 0:
                raise InvalidEntryError(f"entry {entry.index} has a negative timestamp")
            size = fmt.ENTRY_HEADER_SIZE + len(entry.payload)
            if size > limit:
                raise EntryTooLargeError(f"entry {entry.index} is {size} bytes; max_entry_bytes is {limit}")
            if entry.kind == EntryKind.DATA:
                try:
                    batch = read_header(entry.payload)
                except BatchFormatError as exc:
                    raise InvalidEntryError(f"entry {entry.index} is not a record batch: {exc}") from exc
                if batch.length != len(entry.payload):
                    raise InvalidEntryError(
                        f"entry {entry.index}: batch length {batch.length} != payload length {len(entry.payload)}"
                    )
            previous_term = entry.term
            expected += 1

    def roll(self) -> None:
        """Seal the active segment now (if it holds entries); the next entry starts a new one."""
        self._check_open()
        active = self._segments[-1]
        if active.entry_count:
            with self._writing(active.last_index + 1):
                self._new_segment(active.last_index + 1, active.next_offset)

    # ---------------------------------------------------------------------------------------- truncate

    def truncate_suffix(self, from_index: int) -> None:
        """Remove entries with index >= ``from_index`` (Raft replaces a conflicting suffix)."""
        self._check_open()
        if from_index > self.last_index():
            return
        if from_index <= self._compaction_index:
            raise BeforeLogStartError(f"cannot truncate from {from_index}: compacted up to {self._compaction_index}")
        with self._writing(from_index) as txn:
            while len(self._segments) > 1 and self._segments[-1].base_index >= from_index:
                self._remove_segment_record(txn, self._segments.pop())
            record = self._segments[-1]
            if record.base_index >= from_index:  # the only segment is emptied: keep it, empty
                self._remove_segment_record(txn, self._segments.pop())
                self._new_segment(record.base_index, record.base_offset)
            elif record.last_index >= from_index:  # a segment that ends before the cut stays as it is
                self._segments[-1] = self._truncate_segment(txn, record, from_index)
            self._last_term = self._read_last_term()

    def _truncate_segment(self, txn: lmdb.Transaction, record: fmt.SegmentRecord, from_index: int) -> fmt.SegmentRecord:
        data_db = self._store._slot(record.slot)
        cursor = txn.cursor(db=data_db)
        if cursor.set_key(fmt.INDEX_KEY.pack(from_index)):
            while cursor.delete():
                pass
        # Recompute the segment's stats from the headers that remain (truncations are rare, at the tail).
        first_ts = max_ts = max_record_ts = -1
        next_offset = record.base_offset
        size = count = 0
        for raw_key, value in txn.cursor(db=data_db).iternext():
            key = bytes(raw_key)
            if not fmt.value_crc_ok(key, value):
                index = fmt.INDEX_KEY.unpack(key)[0]
                raise CorruptionError(
                    f"entry CRC mismatch in {self.name}", path=str(self._store._data_file), index=index
                )
            header = fmt.EntryHeader._make(fmt.ENTRY_HEADER.unpack_from(value))
            next_offset, max_record_ts = header.next_offset, header.max_record_ts
            if header.timestamp_ms > 0:
                first_ts = header.timestamp_ms if first_ts < 0 else first_ts
                max_ts = max(max_ts, header.timestamp_ms)
            size += len(value)
            count += 1
        truncated = fmt.SegmentRecord(
            record.slot, record.base_index, from_index - 1, record.base_offset, next_offset, first_ts, max_ts,
            max_record_ts, size, count,
        )  # fmt: skip
        self._write_segment_record(txn, truncated)
        return truncated
