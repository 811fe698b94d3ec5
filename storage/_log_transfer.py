"""Segment transfer: export a sealed segment to a file, import one exported by another replica.

Import (and repair, in :mod:`storage.check`) adds stored values through :meth:`LogTransfer._append_stored_segment`,
which checks every entry before the segment becomes visible.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import lmdb

from storage import _format as fmt
from storage._entries import KINDS, EntryKind, SegmentInfo
from storage._lmdb import lmdb_errors, log
from storage._log_core import LogCore
from storage.batch import read_header
from storage.errors import (
    BatchFormatError,
    CorruptionError,
    SegmentFileError,
    SegmentNotFoundError,
    StorageArgumentError,
    StorageError,
)
from storage.segment_file import (
    SegmentFileInfo,
    iter_segment_file_values,
    read_segment_file_info,
    write_segment_file,
)

__all__ = ["LogTransfer"]


class LogTransfer(LogCore):
    """Sealed segments out to files and in from them."""

    # ------------------------------------------------------------------------------ segment files

    def export_segment(self, base_index: int, path: str | os.PathLike[str]) -> SegmentFileInfo:
        """Write the sealed segment starting at ``base_index`` to ``path`` (*any thread*, synced data).

        The file is written beside ``path`` and renamed into place, so a reader never sees half a file.
        """
        destination = Path(path)
        temporary = destination.with_name(destination.name + ".partial")
        with self._store._reading(self) as (txn, view):
            sealed = view.segments[:-1]
            position = next((i for i, r in enumerate(sealed) if r.base_index == base_index), None)
            if position is None:
                raise SegmentNotFoundError(f"{self.name} has no sealed segment starting at index {base_index}")
            record = sealed[position]
            if position == 0:
                prev_term = view.compaction_term
            else:
                prev_term = self._stored_term(txn, view.segments, base_index - 1)
            values = (value for _, value in self._iter_values(txn, view.segments, base_index, record.last_index + 1))
            try:
                with temporary.open("wb") as out:
                    size, crc = write_segment_file(out, self.name, record, prev_term, values)
                    out.flush()
                    os.fsync(out.fileno())
                temporary.replace(destination)
            except OSError as exc:
                raise SegmentFileError(f"cannot write {destination}: {exc}") from exc
        return SegmentFileInfo(
            destination, self.name, record.base_index, record.last_index, prev_term, record.base_offset,
            record.next_offset, record.first_timestamp_ms, record.max_timestamp_ms, record.max_record_timestamp_ms,
            record.entry_count, record.size_bytes, size, crc,
        )  # fmt: skip

    def _stored_term(self, txn: lmdb.Transaction, segments: Sequence[fmt.SegmentRecord], index: int) -> int:
        for _, value in self._iter_values(txn, segments, index, index + 1):
            term: int = fmt.TERM_ONLY.unpack_from(value)[0]
            return term
        raise CorruptionError(f"entry missing from {self.name}", path=str(self._store._data_file), index=index)

    def import_segment(self, path: str | os.PathLike[str]) -> SegmentInfo:
        """Add a sealed segment exported by another replica; durable with the next sync.

        The segment must continue the log (its first index is last_index() + 1, with matching term and
        offset), or the log must hold no entries, in which case it starts at the segment (what a replica
        that catches up after retention needs). Everything is checked before the segment becomes visible.
        """
        self._check_open()
        info = read_segment_file_info(path)
        last = self.last_index()
        empty = last == self._compaction_index
        if info.base_index <= self._compaction_index or (not empty and info.base_index != last + 1):
            raise SegmentFileError(
                f"segment {info.base_index}..{info.last_index} does not continue {self.name} "
                f"(entries {self.first_index()}..{last})"
            )
        if (not empty or info.base_index == last + 1) and info.prev_term != self.term(info.base_index - 1):
            raise SegmentFileError(f"segment follows term {info.prev_term}, {self.name} has {self.term(last)}")
        if not empty and info.base_offset != self.next_offset():
            raise SegmentFileError(
                f"segment starts at offset {info.base_offset}, {self.name} is at {self.next_offset()}"
            )
        values = iter_segment_file_values(info)
        record = self._append_stored_segment(info.base_index, info.prev_term, info.base_offset, values, str(info.path))
        if record.next_offset != info.next_offset:
            raise CorruptionError(
                f"segment ends at offset {record.next_offset}, header says {info.next_offset}", path=str(info.path)
            )
        log.info("segment imported", log=self.name, base_index=info.base_index, entries=info.entry_count)
        return SegmentInfo.of(record, True)

    def _append_stored_segment(
        self,
        base_index: int,
        prev_term: int,
        base_offset: int,
        values: Iterable[tuple[int, bytes | memoryview]],
        source: str,
    ) -> fmt.SegmentRecord:
        """Add stored values (checked one by one) as a sealed segment after the log's last entry; if the log
        holds no entries it is moved to start at ``base_index``. Shared by import and repair."""
        empty = self.last_index() == self._compaction_index
        rejected: StorageError | None = None
        with self._writing(base_index) as txn:
            slot = self._store._acquire_slot()
            try:
                record, last_term = self._load_values(txn, slot, base_index, prev_term, base_offset, values, source)
            except StorageError as exc:
                # A bad segment: empty its slot again, and the transaction holds nothing of it. (If LMDB failed
                # instead, the transaction is unusable, emptying the slot fails and the store must roll back.)
                self._store._release_slot(slot)
                rejected = exc
            else:
                active = self._segments[-1]
                if active.entry_count == 0:
                    self._remove_segment_record(txn, self._segments.pop())
                if empty:
                    self._set_compaction(txn, base_index - 1, prev_term)
                self._segments.append(record)
                self._write_segment_record(txn, record)
                self._new_segment(record.last_index + 1, record.next_offset)
                self._last_term = last_term
        if rejected is not None:
            raise rejected
        return record

    def _load_values(
        self,
        txn: lmdb.Transaction,
        slot: int,
        base_index: int,
        prev_term: int,
        base_offset: int,
        values: Iterable[tuple[int, bytes | memoryview]],
        data_file: str,
    ) -> tuple[fmt.SegmentRecord, int]:
        data_db = self._store._slot(slot)
        term = prev_term
        next_offset = base_offset
        first_ts = max_ts = max_record_ts = -1
        size = count = 0
        expected = base_index
        with lmdb_errors(self._store._data_file):
            for index, value in values:
                if index != expected:
                    raise CorruptionError(f"expected entry {expected}", path=data_file, index=index)
                expected += 1
                key = fmt.INDEX_KEY.pack(index)
                if not fmt.value_crc_ok(key, value):
                    raise CorruptionError("entry CRC mismatch in segment file", path=data_file, index=index)
                header = fmt.EntryHeader._make(fmt.ENTRY_HEADER.unpack_from(value))
                timestamp_ms = header.timestamp_ms
                if header.term < term or header.kind not in KINDS:
                    raise CorruptionError("entry term goes back or kind is unknown", path=data_file, index=index)
                term = header.term
                if header.kind == EntryKind.DATA:
                    try:
                        batch = read_header(value, fmt.ENTRY_HEADER_SIZE)
                    except BatchFormatError as exc:
                        raise CorruptionError(f"bad record batch: {exc}", path=data_file, index=index) from exc
                    if batch.base_offset != next_offset:
                        raise CorruptionError(
                            f"batch offset {batch.base_offset}, expected {next_offset}", path=data_file, index=index
                        )
                    next_offset += batch.record_count
                    max_record_ts = max(max_record_ts, batch.max_timestamp)
                if (header.next_offset, header.max_record_ts) != (next_offset, max_record_ts):
                    raise CorruptionError(
                        "entry header disagrees with the entries before it", path=data_file, index=index
                    )
                if timestamp_ms > 0:
                    first_ts = timestamp_ms if first_ts < 0 else first_ts
                    max_ts = max(max_ts, timestamp_ms)
                size += len(value)
                count += 1
                if not txn.put(key, value, db=data_db, append=True):
                    raise CorruptionError("segment slot is not empty", path=str(self._store._data_file), index=index)
        if not count:
            raise StorageArgumentError("a stored segment needs at least one entry")
        record = fmt.SegmentRecord(
            slot, base_index, expected - 1, base_offset, next_offset, first_ts, max_ts, max_record_ts, size, count
        )
        return record, term
