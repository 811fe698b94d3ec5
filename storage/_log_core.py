"""The state of one segmented log and what every concern of it shares.

:class:`LogCore` is the one owner of a log's state: its segments, compaction point, hard state and the
view published for readers. The concerns (:mod:`storage._log_writes`, :mod:`storage._log_reads`,
:mod:`storage._log_retention`, :mod:`storage._log_transfer`) are mixins over it that keep no state of their
own; :class:`storage.log.SegmentedLog` puts them together.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import lmdb

from storage import _format as fmt
from storage._entries import HardState, SegmentInfo
from storage._lmdb import lmdb_errors, storage_error
from storage.errors import BeforeLogStartError, BeyondLogEndError, CorruptionError, LogClosedError, StorageArgumentError

if TYPE_CHECKING:
    from storage._store import LogStore

__all__ = ["LogCore", "SyncedView"]

_LIMITS = "storage.segment_limits"


@dataclass(frozen=True, slots=True)
class SyncedView:
    """The synced state of one log; readers in other threads use it with an LMDB snapshot of the same txn."""

    segments: tuple[fmt.SegmentRecord, ...]
    compaction_index: int
    compaction_term: int
    valid_from_txn: int

    @property
    def start_offset(self) -> int:
        return self.segments[0].base_offset

    @property
    def end_offset(self) -> int:
        return self.segments[-1].next_offset


class LogCore:
    """A log's state and the operations every concern uses: load, publish, the write wrapper, queries on
    indexes and terms, and segment bookkeeping."""

    def __init__(self, store: LogStore, name: str, log_id: int) -> None:
        self._store = store
        self.name = name
        self.log_id = log_id
        self.topic, _, partition = name.rpartition("/")
        self.partition = int(partition)
        self._segments: list[fmt.SegmentRecord] = []
        self._compaction_index = 0
        self._compaction_term = 0
        self._hard_state = HardState()
        self._last_term = 0
        self._view: SyncedView | None = None
        self._closed = False
        self._deleted = False
        self._segment_bytes = store.config.segment_bytes
        self._segment_ms = store.config.segment_ms

    def __repr__(self) -> str:
        return f"SegmentedLog({self.name!r}, first={self.first_index()}, last={self.last_index()})"

    # ------------------------------------------------------------------------------------- load / publish

    def _init_empty(self, base_index: int, base_offset: int, compaction_term: int) -> None:
        txn = self._store._mark_dirty(self)
        self._compaction_index, self._compaction_term = base_index - 1, compaction_term
        txn.put(
            fmt.log_key(b"c", self.log_id),
            fmt.COMPACTION.pack(self._compaction_index, self._compaction_term),
            db=self._store._meta,
        )
        self._segments = []
        self._new_segment(base_index, base_offset)
        self._last_term = compaction_term

    def _load(self) -> None:
        store = self._store
        with store._read_txn() as txn, lmdb_errors(store._data_file):
            raw = txn.get(fmt.log_key(b"h", self.log_id), db=store._meta)
            self._hard_state = HardState(*fmt.HARD_STATE.unpack(raw)) if raw else HardState()
            raw = txn.get(fmt.log_key(b"c", self.log_id), db=store._meta)
            if raw is None:
                raise CorruptionError(f"log {self.name} has no compaction record", path=str(store._data_file))
            self._compaction_index, self._compaction_term = fmt.COMPACTION.unpack(raw)
            prefix = fmt.log_key(b"s", self.log_id)
            cursor = txn.cursor(db=store._meta)
            if cursor.set_range(prefix):
                for key, value in cursor.iternext():
                    if key[: len(prefix)] != prefix:
                        break
                    self._segments.append(fmt.SegmentRecord.unpack(value))
            if not self._segments:
                raise CorruptionError(f"log {self.name} has no segments", path=str(store._data_file))
            limits = txn.get(fmt.log_key(b"a", self.log_id) + _LIMITS.encode(), db=store._meta)
            if limits is not None:
                self._segment_bytes, self._segment_ms = fmt.COMPACTION.unpack(limits)
        self._last_term = self._read_last_term()
        self._view = self._make_view(store._published_txn)

    @contextmanager
    def _writing(self, index: int | None = None, *, segments: bool = True) -> Iterator[lmdb.Transaction]:
        """The write transaction for one change of this log. If the change fails, the log's in-memory state is
        put back as it was before it (the transaction itself is marked failed: see LogStore._writing).
        ``segments=False`` for a change that leaves segments and compaction alone (hard state, attributes: once
        per group per round), so there is nothing to save."""
        saved = (
            (list(self._segments), self._compaction_index, self._compaction_term, self._last_term) if segments else None
        )
        hard_state = self._hard_state
        with self._store._writing() as txn:
            self._store._dirty[self.log_id] = self
            try:
                with lmdb_errors(self._store._data_file, index):
                    yield txn
            except BaseException:
                if saved is not None:
                    self._segments, self._compaction_index, self._compaction_term, self._last_term = saved
                self._hard_state = hard_state
                raise

    def _set_limits(self, segment_bytes: int, segment_ms: int) -> None:
        if segment_bytes < 1024 or segment_ms < 1:
            raise StorageArgumentError(
                f"segment_bytes must be >= 1024 and segment_ms >= 1, got {segment_bytes}, {segment_ms}"
            )
        self.set_attribute(_LIMITS, fmt.COMPACTION.pack(segment_bytes, segment_ms))
        self._segment_bytes, self._segment_ms = segment_bytes, segment_ms

    @property
    def segment_limits(self) -> tuple[int, int]:
        """(segment_bytes, segment_ms) this log rolls by."""
        return self._segment_bytes, self._segment_ms

    def _read_last_term(self) -> int:
        last = self._segments[-1]
        if last.entry_count == 0:
            if len(self._segments) > 1:
                return self._term_from_disk(self._segments[-2].last_index)
            return self._compaction_term
        return self._term_from_disk(last.last_index)

    def _make_view(self, txn_id: int) -> SyncedView:
        return SyncedView(tuple(self._segments), self._compaction_index, self._compaction_term, txn_id)

    def _publish(self, txn_id: int) -> None:
        if not self._deleted:
            self._view = self._make_view(txn_id)

    def _revert(self) -> None:
        view = self._view
        if view is None:
            self._segments = []
            self._closed = True
            return
        self._segments = list(view.segments)
        self._compaction_index, self._compaction_term = view.compaction_index, view.compaction_term
        with self._store._read_txn() as txn, lmdb_errors(self._store._data_file):
            raw = txn.get(fmt.log_key(b"h", self.log_id), db=self._store._meta)
        self._hard_state = HardState(*fmt.HARD_STATE.unpack(raw)) if raw else HardState()
        self._last_term = self._read_last_term()

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.name} is closed")
        self._store._check_open()

    # ------------------------------------------------------------------------------------------- queries

    def first_index(self) -> int:
        """Index of the first entry still in the log (last_index() + 1 when the log is empty)."""
        self._check_open()
        return self._compaction_index + 1

    def last_index(self) -> int:
        """Index of the last entry, or of the compaction point when the log holds no entries."""
        self._check_open()
        for record in reversed(self._segments):
            if record.entry_count:
                return record.last_index
        return self._compaction_index

    def next_offset(self) -> int:
        """Offset the next record appended will get."""
        self._check_open()
        return self._segments[-1].next_offset

    def start_offset(self) -> int:
        """Offset of the first record still in the log."""
        return self._segments[0].base_offset

    def compaction_point(self) -> tuple[int, int]:
        """(index, term) of the last entry removed by drop_before or a snapshot; (0, 0) if none."""
        self._check_open()
        return self._compaction_index, self._compaction_term

    def segments(self) -> list[SegmentInfo]:
        """Every segment, oldest first; all but the last are sealed."""
        self._check_open()
        last = len(self._segments) - 1
        return [SegmentInfo.of(r, i < last) for i, r in enumerate(self._segments)]

    def size_bytes(self) -> int:
        self._check_open()
        return sum(r.size_bytes for r in self._segments)

    def hard_state(self) -> HardState:
        self._check_open()
        return self._hard_state

    def set_hard_state(self, state: HardState) -> None:
        """Persist Raft's hard state with the next sync."""
        self._check_open()
        if min(state) < 0:
            raise StorageArgumentError(f"hard state fields must be >= 0: {state}")
        with self._writing(segments=False) as txn:
            txn.put(fmt.log_key(b"h", self.log_id), fmt.HARD_STATE.pack(*state), db=self._store._meta)
        self._hard_state = HardState(*state)

    def attribute(self, name: str) -> bytes | None:
        """A small value the node keeps with the log (applied index, snapshot metadata...)."""
        self._check_open()
        with self._store._read_txn() as txn, lmdb_errors(self._store._data_file):
            raw = txn.get(fmt.log_key(b"a", self.log_id) + name.encode(), db=self._store._meta)
            return None if raw is None else bytes(raw)

    def set_attribute(self, name: str, value: bytes | None) -> None:
        """Set (or, with None, remove) an attribute; durable with the next sync, atomically with appends."""
        self._check_open()
        if not name or len(name.encode()) > 400:
            raise StorageArgumentError(f"attribute name must be 1..400 bytes, got {name!r}")
        key = fmt.log_key(b"a", self.log_id) + name.encode()
        with self._writing(segments=False) as txn:
            if value is None:
                txn.delete(key, db=self._store._meta)
            else:
                txn.put(key, value, db=self._store._meta)

    def term(self, index: int) -> int:
        """Term of the entry at ``index`` (the compaction point's term at the compaction index)."""
        self._check_open()
        if index == self._compaction_index:
            return self._compaction_term
        if index < self._compaction_index:
            raise BeforeLogStartError(f"index {index} of {self.name} was compacted (first is {self.first_index()})")
        last = self.last_index()
        if index > last:
            raise BeyondLogEndError(f"index {index} is beyond the last index {last} of {self.name}")
        if index == last:
            return self._last_term
        return self._term_from_disk(index)

    def offset_after(self, index: int) -> int:
        """The log's next offset right after the entry at ``index``: where a data entry's batch ends."""
        self._check_open()
        if index == self._compaction_index:
            return self._segments[0].base_offset
        record = self._segment_for_index(index)
        with self._store._read_txn() as txn, lmdb_errors(self._store._data_file, index):
            value = txn.get(fmt.INDEX_KEY.pack(index), db=self._store._slot(record.slot))
            if value is None or index > record.last_index:
                raise BeyondLogEndError(f"index {index} is not in {self.name}")
            return fmt.next_offset_of(value)

    def _term_from_disk(self, index: int) -> int:
        record = self._segment_for_index(index)
        key = fmt.INDEX_KEY.pack(index)
        with self._store._read_txn() as txn, lmdb_errors(self._store._data_file, index):
            value = txn.get(key, db=self._store._slot(record.slot))
            if value is None:
                raise CorruptionError(f"entry missing from {self.name}", path=str(self._store._data_file), index=index)
            if not fmt.value_crc_ok(key, value):
                raise CorruptionError(
                    f"entry CRC mismatch in {self.name}", path=str(self._store._data_file), index=index
                )
            term: int = fmt.TERM_ONLY.unpack_from(value)[0]
            return term

    def _segment_for_index(self, index: int) -> fmt.SegmentRecord:
        position = bisect.bisect_right(self._segments, index, key=lambda r: r.base_index) - 1
        if position < 0:
            raise BeforeLogStartError(f"index {index} of {self.name} was compacted")
        return self._segments[position]

    def _iter_values(
        self, txn: lmdb.Transaction, segments: Sequence[fmt.SegmentRecord], lo: int, hi: int
    ) -> Iterator[tuple[bytes, Any]]:
        """(key, value) for indexes [lo, hi) across segments, each checked for continuity and CRC."""
        store = self._store
        expected = lo
        start = bisect.bisect_right(segments, lo, key=lambda r: r.base_index) - 1
        try:
            for record in segments[max(start, 0) :]:
                if expected >= hi:
                    return
                if record.entry_count == 0 or record.last_index < expected:
                    continue
                cursor = txn.cursor(db=store._slot(record.slot))
                if not cursor.set_key(fmt.INDEX_KEY.pack(expected)):
                    raise CorruptionError(f"entry missing from {self.name}", path=str(store._data_file), index=expected)
                for raw_key, value in cursor.iternext():
                    key = bytes(raw_key)
                    if expected >= hi or expected > record.last_index:
                        break
                    if fmt.INDEX_KEY.unpack(key)[0] != expected:
                        raise CorruptionError(
                            f"entry missing from {self.name}", path=str(store._data_file), index=expected
                        )
                    if not fmt.value_crc_ok(key, value):
                        raise CorruptionError(
                            f"entry CRC mismatch in {self.name}", path=str(store._data_file), index=expected
                        )
                    yield key, value
                    expected += 1
        except lmdb.Error as exc:
            raise storage_error(exc, store._data_file, expected) from exc
        if expected < hi:
            raise CorruptionError(f"entry missing from {self.name}", path=str(store._data_file), index=expected)

    def _new_segment(self, base_index: int, base_offset: int) -> fmt.SegmentRecord:
        txn = self._store._mark_dirty(self)
        record = fmt.SegmentRecord(
            slot=self._store._acquire_slot(),
            base_index=base_index,
            last_index=base_index - 1,
            base_offset=base_offset,
            next_offset=base_offset,
            first_timestamp_ms=-1,
            max_timestamp_ms=-1,
            max_record_timestamp_ms=-1,
            size_bytes=0,
            entry_count=0,
        )
        self._segments.append(record)
        self._write_segment_record(txn, record)
        return record

    def _write_segment_record(self, txn: lmdb.Transaction, record: fmt.SegmentRecord) -> None:
        txn.put(fmt.segment_key(self.log_id, record.base_index), record.pack(), db=self._store._meta)

    def _remove_segment_record(self, txn: lmdb.Transaction, record: fmt.SegmentRecord) -> None:
        txn.delete(fmt.segment_key(self.log_id, record.base_index), db=self._store._meta)
        self._store._release_slot(record.slot)

    def sync(self) -> None:
        """Make everything appended durable. Syncs the whole store: one fsync covers every log (group commit)."""
        self._check_open()
        self._store.sync()

    def _set_compaction(self, txn: lmdb.Transaction, index: int, term: int) -> None:
        self._compaction_index, self._compaction_term = index, term
        txn.put(fmt.log_key(b"c", self.log_id), fmt.COMPACTION.pack(index, term), db=self._store._meta)
