"""The Raft core's storage over a SegmentedLog: the Raft log *is* the partition log.

:class:`RaftLogStorage` implements :class:`multiraft.raft.MutableStorage`, so the core reads and the node
writes one replica's entries in the LMDB segmented log, and ``tests/raft/storage_conformance.py`` runs
against it as against the in-memory reference.

Payloads. A data entry's payload is a record batch. The log writes each batch's base offset into the stored
copy, but Raft sees the batch as it was proposed, with a zero base offset: every replica derives offsets
from the log itself, so the bytes that travel between replicas never depend on one replica's view. The
adapter keeps the entries it was last given (up to ``recent_bytes`` of payload) until they are applied or
compacted and hands those very objects back, so a committed entry reaches the state machine as the object
proposed (on the leader) or decoded from the wire (on a follower): no copy. Older entries are read from LMDB
and their base offset is zeroed in one copy.

Configuration. :meth:`RaftLogStorage.initial_state` reports the snapshot's configuration, as every
:class:`multiraft.raft.Storage` does; RawNode folds the CONFIG entries after it up to its ``applied`` index.
So that a restart reads no entries, :meth:`RaftLogStorage.set_applied` records the configuration at each
applied CONFIG entry (exactly, in the same transaction) and :meth:`RaftLogStorage.conf_checkpoint` answers
from that record.

Snapshots. A group's snapshot says "everything up to index I is in place". For the controller group it is
the cluster metadata at I. For a partition it marks where retention cut the log: the data before it is gone
everywhere, and a follower that needs it gets the snapshot, whose data is a small manifest (the next offset
at I, and the leader's sealed segments later replicas can copy). So a partition snapshot sits exactly at the
log's compaction point, and the adapter keeps the configuration history needed to say which configuration
was in force there. Metadata lives in the log's attributes, written in the same transaction as the entries.

Damage (``multiraft.node.scheduler.scrubber``). An entry that fails its CRC is cut off with everything after it
(:meth:`RaftLogStorage.cut_damaged_suffix`); first the last entry the log held is recorded durably, in the same
transaction, as ``raft.recover_until``, and every later open passes it to the core
(:meth:`RaftLogStorage.recover_until`), which then neither votes for a log lacking it nor campaigns until the
leader has re-sent the entries; :meth:`RaftLogStorage.clear_recovery` drops it once the log is back.

Catch-up snapshots (``multiraft.node.catchup``). For a far-behind replica the leader also makes a snapshot at
the end of a sealed segment, whose manifest lists the sealed segment files (``files``) from the log's start
to that index. Raft's compaction point moves there while the leader keeps the segments: the core then sends
the far-behind replica this small manifest instead of the entries, the replica copies the files, and
:meth:`RaftLogStorage.apply_snapshot` adopts them (``segment_installer``) instead of emptying the log.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from multiraft import raft
from multiraft.node.threads import SchedulerOwned, ThreadOwner
from storage import BeforeLogStartError, BeyondLogEndError, LogStore, SegmentedLog, StorageError
from storage import HardState as StoredHardState

__all__ = [
    "RaftLogStorage",
    "SnapshotManifest",
    "SegmentRef",
    "encode_manifest",
    "decode_manifest",
    "record_lost_suffixes",
]

_SNAPSHOT_META = "raft.snapshot"
_COMPACTED = "raft.compacted"
_SNAPSHOT_DATA = "raft.snapshot_data"
_APPLIED = "raft.applied"
_CONF_HISTORY = "raft.conf_history"
_RECOVER_UNTIL = "raft.recover_until"
_U64 = struct.Struct("<Q")
_INDEX_TERM = struct.Struct("<QQ")
_ZERO_OFFSET = bytes(8)
DEFAULT_RECENT_BYTES = 8 << 20


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """A sealed segment a catch-up snapshot lists, as the file ``SegmentedLog.export_segment`` writes."""

    base_index: int
    last_index: int
    base_offset: int
    next_offset: int
    last_term: int  # identifies the content: entries up to an index of the same term are the same (Raft)
    file_bytes: int
    crc: int  # crc32c of the file (its trailer's), checked once the copy is complete

    def as_list(self) -> list[int]:
        return [self.base_index, self.last_index, self.base_offset, self.next_offset, self.last_term,
                self.file_bytes, self.crc]  # fmt: skip


@dataclass(frozen=True, slots=True)
class SnapshotManifest:
    """The data of a partition snapshot: where the log resumes, and which sealed segments the leader has."""

    next_offset: int
    segments: tuple[tuple[int, int], ...] = ()  # (base index, last index) of sealed segments after it
    producers: bytes = b""  # the idempotent producers' state (multiraft.node.replicas.producers), at or after the index
    files: tuple[SegmentRef, ...] = ()  # catch-up: segment files covering (start index, snapshot index]
    start: tuple[int, int] = (0, 0)  # catch-up: (index, term) just before the first file
    log_start: int = 0  # DeleteRecords: records below this offset are deleted (0: none were)


def encode_manifest(manifest: SnapshotManifest) -> bytes:
    document: dict[str, Any] = {"v": 1, "next_offset": manifest.next_offset, "segments": list(manifest.segments)}
    if manifest.producers:
        document["producers"] = manifest.producers.decode()
    if manifest.files:
        document["files"] = [ref.as_list() for ref in manifest.files]
        document["start"] = list(manifest.start)
    if manifest.log_start:
        document["log_start"] = manifest.log_start
    return json.dumps(document).encode()


def decode_manifest(data: bytes) -> SnapshotManifest:
    """Parse a manifest; any other snapshot data (the controller's) reads as "resume at offset 0"."""
    try:
        document: Any = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return SnapshotManifest(0)
    if not isinstance(document, dict) or document.get("v") != 1:
        return SnapshotManifest(0)
    segments = tuple((int(s[0]), int(s[1])) for s in document.get("segments", []))
    files = tuple(SegmentRef(*(int(v) for v in ref)) for ref in document.get("files", []))
    start = document.get("start", [0, 0])
    return SnapshotManifest(
        int(document["next_offset"]),
        segments,
        str(document.get("producers", "")).encode(),
        files,
        (int(start[0]), int(start[1])),
        int(document.get("log_start", 0)),
    )


def record_lost_suffixes(store: LogStore, lost: Sequence[tuple[str, int]]) -> dict[str, tuple[int, int]]:
    """After ``storage.repair_store`` cut logs (name, former last index): record for each where it ended, with an
    upper bound of its term (a replica's term is at least that of any entry it accepted), so that its replica
    votes for no log lacking what it may have acknowledged until the leader has sent it again. Synced."""
    recorded: dict[str, tuple[int, int]] = {}
    for name, last_index in lost:
        topic, _, partition = name.rpartition("/")
        log = store.log(topic, int(partition), create=False)
        last = log.last_index()
        term = max(log.hard_state().term, log.term(last) if last else 0)
        storage = RaftLogStorage(log)
        recorded[name] = storage.record_lost_suffix(last_index, term)
        storage.forget_beyond_last()
    store.sync()
    return recorded


def _to_raft_error(exc: StorageError) -> raft.RaftStorageError:
    if isinstance(exc, BeforeLogStartError):
        return raft.IndexCompactedError(str(exc))
    if isinstance(exc, BeyondLogEndError):
        return raft.IndexUnavailableError(str(exc))
    return raft.RaftStorageError(str(exc))


class RaftLogStorage(SchedulerOwned):
    """:class:`multiraft.raft.MutableStorage` over one :class:`storage.SegmentedLog` (owner thread only)."""

    def __init__(
        self,
        log: SegmentedLog,
        *,
        recent_bytes: int = DEFAULT_RECENT_BYTES,
        term_floor: int = 0,
        released: bool = False,
        owner: ThreadOwner | None = None,
    ) -> None:
        """``term_floor``: the highest term the replica ever reached, as recorded outside the store
        (:class:`multiraft.node.scheduler.term_guard.TermGuard`); a stored hard state below it was lost (see there).
        ``released``: the node gave the replica up after applying its removal, so an empty log is a new
        replica's, not a lost one (it still starts in ``term_floor`` with its vote unknown)."""
        # The scheduler thread on a node; the offline tools read a stopped node's store on their own.
        self.owner = owner if owner is not None else ThreadOwner("scheduler")
        self.log = log
        # Set by the catch-up copier once the files of the catch-up snapshot at this index are in place.
        self.segment_installer: tuple[int, Callable[[SegmentedLog, SnapshotManifest], None]] | None = None
        self._recent_limit = recent_bytes
        self._load()
        stored_term = log.hard_state().term
        self._term_floor = term_floor if term_floor > stored_term else 0
        self.amnesiac = bool(self._term_floor) and stored_term == 0 and log.last_index() == 0 and not released
        if self.amnesiac:
            # The log was lost: no vote, no campaign, until it holds an entry of a term after any it had.
            self.record_lost_suffix(1, self._term_floor + 1)

    def reload(self) -> None:
        """Forget what is cached and read it from the log again: after the store rolled back a round's
        unsynced writes (it did not fit; the scheduler retries it later). The installer stays for the retry."""
        self._load()

    def _load(self) -> None:
        log = self.log
        meta_bytes = log.attribute(_SNAPSHOT_META)
        if meta_bytes is None:
            index, term = log.compaction_point()
            self._snapshot_meta = raft.SnapshotMeta(index, term, raft.ConfState())
        else:
            self._snapshot_meta = raft.decode_snapshot_meta(meta_bytes)
        # Entries up to the compaction point are gone for Raft; the log may still hold some of them, since it
        # drops whole segments only.
        compacted = log.attribute(_COMPACTED)
        self._compacted: tuple[int, int] = _INDEX_TERM.unpack(compacted) if compacted else log.compaction_point()
        self._snapshot_data = log.attribute(_SNAPSHOT_DATA) or b""
        history = log.attribute(_CONF_HISTORY)
        self._conf_history: list[tuple[int, bytes]] = (
            [(int(i), bytes.fromhex(c)) for i, c in json.loads(history)] if history else []
        )
        recover = log.attribute(_RECOVER_UNTIL)
        self._recover_until: tuple[int, int] = _INDEX_TERM.unpack(recover) if recover else (0, 0)
        # The entries appended last, as given (contiguous, ending at the last index), until applied or compacted.
        # In memory only: a rollback reloads (none), and a restart starts with none.
        self._recent: list[raft.Entry] = []
        self._recent_size = 0

    # ----------------------------------------------------------------------------------------------- reads

    def initial_state(self) -> tuple[raft.HardState, raft.ConfState]:
        stored = self.log.hard_state()
        if self._term_floor > stored.term:  # the store lost the hard state: the vote of that term is unknown
            return raft.HardState(self._term_floor, raft.UNKNOWN_VOTE, stored.commit), self._snapshot_meta.conf_state
        return raft.HardState(stored.term, stored.vote, stored.commit), self._snapshot_meta.conf_state

    def conf_checkpoint(self, index: int) -> tuple[int, raft.ConfState]:
        snapshot_index = self._snapshot_meta.index
        recorded = max(self.applied_index(), snapshot_index)
        if index >= recorded:
            return recorded, self.conf_state_at(recorded)
        # Below the applied index, answer at a recorded change (exact even in a history written per Ready).
        points = [at for at, _ in self._conf_history if snapshot_index < at <= index]
        at = points[-1] if points else snapshot_index
        return at, self.conf_state_at(at)

    def applied_index(self) -> int:
        """The last index the node's state machine had applied when this was persisted."""
        raw = self.log.attribute(_APPLIED)
        return _U64.unpack(raw)[0] if raw else self._snapshot_meta.index

    def conf_state_at(self, index: int) -> raft.ConfState:
        """The configuration in force at ``index`` (the snapshot's, then the CONFIG entries applied up to it), for
        ``index`` at or below the applied index."""
        conf = self._snapshot_meta.conf_state
        for at, encoded in self._conf_history:
            if at <= index and at > self._snapshot_meta.index:
                conf = raft.decode_conf_state(encoded)
        return conf

    def entries(self, lo: int, hi: int, max_size: int) -> list[raft.Entry]:
        if lo <= self._compacted[0]:
            raise raft.IndexCompactedError(f"index {lo} is at or below the compaction point {self._compacted[0]}")
        if hi > self.last_index() + 1:
            raise raft.IndexUnavailableError(f"index {hi - 1} is beyond the last index {self.last_index()}")
        if lo >= hi:
            return []
        recent = self._recent
        if recent and lo >= recent[0].index:
            start = recent[0].index
            return raft.limit_size(recent[lo - start : hi - start], max_size)
        stored_hi = min(hi, recent[0].index) if recent else hi
        stored = self._read_stored(lo, stored_hi, max_size)
        if stored_hi == hi or len(stored) < stored_hi - lo:
            return stored
        return raft.limit_size(stored + recent[: hi - stored_hi], max_size)

    def _read_stored(self, lo: int, hi: int, max_size: int) -> list[raft.Entry]:
        try:
            stored = self.log.entries(lo, hi, max_size)
        except StorageError as exc:
            raise _to_raft_error(exc) from exc
        data_kind = raft.EntryKind.DATA
        join = b"".join
        out: list[raft.Entry] = []
        for entry in stored:
            kind = raft.EntryKind(entry.kind)
            payload: bytes = entry.payload
            if kind is data_kind:  # Raft sees the batch as proposed (see the module docstring): one copy
                payload = join((_ZERO_OFFSET, memoryview(payload)[8:]))
            out.append(raft.Entry(entry.index, entry.term, kind, entry.timestamp_ms, payload))
        return out

    def term(self, index: int) -> int:
        compacted_index, compacted_term = self._compacted
        if index == compacted_index:
            return compacted_term
        if index < compacted_index:
            raise raft.IndexCompactedError(f"index {index} is below the compaction point {compacted_index}")
        try:
            return self.log.term(index)
        except StorageError as exc:
            raise _to_raft_error(exc) from exc

    def first_index(self) -> int:
        return self._compacted[0] + 1

    def last_index(self) -> int:
        return max(self.log.last_index(), self._compacted[0])

    def snapshot(self) -> raft.Snapshot:
        return raft.Snapshot(self._snapshot_meta, self._snapshot_data)

    # ---------------------------------------------------------------------------------------------- writes

    def set_hard_state(self, hard_state: raft.HardState) -> None:
        self.log.set_hard_state(StoredHardState(hard_state.term, hard_state.vote, hard_state.commit))

    def append(self, entries: Sequence[raft.Entry]) -> None:
        compacted_index = self._compacted[0]
        if entries and entries[0].index <= compacted_index:
            entries = [e for e in entries if e.index > compacted_index]
        if not entries:
            return
        if entries[0].index > self.last_index() + 1:
            raise raft.IndexUnavailableError(
                f"entry {entries[0].index} would leave a gap after the last index {self.last_index()}"
            )
        try:
            self.log.append(entries)
        except StorageError as exc:
            raise _to_raft_error(exc) from exc
        self._remember(entries)

    def _remember(self, entries: Sequence[raft.Entry]) -> None:
        recent = self._recent
        first = entries[0].index
        if recent and recent[0].index <= first <= recent[-1].index + 1:
            cut = first - recent[0].index
            if cut < len(recent):
                self._recent_size -= raft.entries_size(recent[cut:])
                del recent[cut:]
        else:
            recent.clear()
            self._recent_size = 0
        recent.extend(entries)
        self._recent_size += raft.entries_size(entries)
        if self._recent_size > self._recent_limit:
            size, drop = self._recent_size, 0
            while drop < len(recent) and size > self._recent_limit:
                size -= len(recent[drop].payload)
                drop += 1
            del recent[:drop]
            self._recent_size = size

    def _forget_through(self, index: int) -> None:
        """Stop holding the entries up to ``index`` (applied or compacted); LMDB still has them."""
        recent = self._recent
        if not recent or index < recent[0].index:
            return
        drop = min(index - recent[0].index + 1, len(recent))
        if drop == len(recent):
            recent.clear()
            self._recent_size = 0
        else:
            self._recent_size -= raft.entries_size(recent[:drop])
            del recent[:drop]

    def apply_snapshot(self, snapshot: raft.Snapshot) -> None:
        """Replace the log by the snapshot: the log resumes after its index, at the manifest's offset."""
        if snapshot.meta.index <= self._snapshot_meta.index:
            raise raft.SnapshotOutOfDateError(
                f"snapshot {snapshot.meta.index} is not newer than {self._snapshot_meta.index}"
            )
        manifest = decode_manifest(snapshot.data)
        self._recent.clear()
        self._recent_size = 0
        installer = self.segment_installer
        if manifest.files and installer is not None and installer[0] == snapshot.meta.index:
            installer[1](self.log, manifest)  # the copied segments become the log, up to the snapshot index
        else:
            self.log.reset(snapshot.meta.index, snapshot.meta.term, manifest.next_offset)
        self._conf_history = []
        self._save_snapshot(snapshot.meta, snapshot.data)
        self._set_compacted(snapshot.meta.index, snapshot.meta.term)
        self.set_applied(snapshot.meta.index)
        self.segment_installer = None  # kept until here: a round that did not fit is retried with it

    def create_snapshot(self, index: int, conf_state: raft.ConfState, data: bytes) -> raft.Snapshot:
        if index <= self._snapshot_meta.index:
            raise raft.SnapshotOutOfDateError(f"snapshot {index} is not newer than {self._snapshot_meta.index}")
        if index > self.last_index():
            raise raft.IndexUnavailableError(f"index {index} is beyond the last index {self.last_index()}")
        meta = raft.SnapshotMeta(index, self.term(index), conf_state)
        self._save_snapshot(meta, data)
        return raft.Snapshot(meta, data)

    def compact(self, index: int) -> None:
        """Forget entries up to ``index`` (which a snapshot must cover); whole segments below it are dropped."""
        if index <= self._compacted[0]:
            raise raft.IndexCompactedError(f"already compacted up to {self._compacted[0]}")
        if index > self.last_index():
            raise raft.IndexUnavailableError(f"index {index} is beyond the last index {self.last_index()}")
        if index > self._snapshot_meta.index:
            raise raft.CompactionBeyondSnapshotError(
                f"compact to {index} would drop entries after the snapshot at {self._snapshot_meta.index}"
            )
        self._set_compacted(index, self.term(index))
        self.log.drop_before(index + 1)

    def _set_compacted(self, index: int, term: int) -> None:
        self._compacted = (index, term)
        self._forget_through(index)
        self.log.set_attribute(_COMPACTED, _INDEX_TERM.pack(index, term))

    def snapshot_at_compaction_point(
        self, segments: Sequence[tuple[int, int]] = (), producers: bytes = b"", log_start: int = 0
    ) -> raft.Snapshot:
        """After retention dropped segments, make the snapshot the log's compaction point (partitions)."""
        index, term = self.log.compaction_point()
        if index <= self._snapshot_meta.index:
            current = decode_manifest(self._snapshot_data)
            if current.files and current.files[0].base_index <= index:
                # Retention dropped segments a catch-up snapshot lists: list only those still here.
                kept = tuple(ref for ref in current.files if ref.base_index > index)
                pruned = replace(
                    current,
                    files=kept,
                    start=(index, term),
                    producers=producers or current.producers,
                    log_start=max(log_start, current.log_start),
                )
                self._save_snapshot(self._snapshot_meta, encode_manifest(pruned))
            return self.snapshot()
        manifest = SnapshotManifest(self.log.start_offset(), tuple(segments), producers, log_start=log_start)
        meta = raft.SnapshotMeta(index, term, self.conf_state_at(index))
        data = encode_manifest(manifest)
        self._save_snapshot(meta, data)
        self._set_compacted(index, term)
        return raft.Snapshot(meta, data)

    def snapshot_for_catchup(self, index: int, manifest: SnapshotManifest) -> raft.Snapshot:
        """Make a catch-up snapshot at ``index`` (the end of a sealed segment the state machine applied) and
        move Raft's compaction point there; the log keeps its segments (see the module docstring)."""
        if index <= self._snapshot_meta.index:
            return self.snapshot()
        if index > self.applied_index():
            raise raft.IndexUnavailableError(f"index {index} is not applied yet ({self.applied_index()})")
        meta = raft.SnapshotMeta(index, self.term(index), self.conf_state_at(index))
        data = encode_manifest(manifest)
        self._save_snapshot(meta, data)
        self._set_compacted(index, meta.term)
        return raft.Snapshot(meta, data)

    # --------------------------------------------------------------------------------------------- damage

    def recover_until(self) -> tuple[int, int]:
        """(index, term) of the last entry before a damaged suffix was cut off, until the log is back; (0, 0)."""
        return self._recover_until

    def recovered(self) -> bool:
        """True once the stored log is as up to date as it was before the cut (see :meth:`recover_until`)."""
        index, term = self.recover_until()
        last = self.last_index()
        return index == 0 or (self.term(last), last) >= (term, index)

    def record_lost_suffix(self, index: int, term: int) -> tuple[int, int]:
        """Record (in the open transaction) that the log held entries up to (``index``, ``term``) before losing
        a suffix; an earlier, more up-to-date record stands. ``term`` may be an upper bound (the hard state's
        term): the record only has to be at least as up to date as the lost log. Returns the record kept."""
        record = max(self._recover_until, (index, term), key=lambda it: (it[1], it[0]))
        self.log.set_attribute(_RECOVER_UNTIL, _INDEX_TERM.pack(*record))
        self._recover_until = record
        return record

    def clear_recovery(self) -> None:
        self.log.set_attribute(_RECOVER_UNTIL, None)
        self._recover_until = (0, 0)

    def cut_damaged_suffix(self, index: int) -> tuple[int, int]:
        """Cut the log before the damaged entry at ``index`` (or before an earlier damaged one of the same
        segment); record the last entry it held first, in the same transaction, and return that record.

        The applied index and the configuration history move back to the cut: the entries after it come back
        from the leader and apply again. Raises :class:`multiraft.raft.IndexCompactedError` when ``index`` is at
        or below the compaction point (or the snapshot): those entries cannot come back through appends.
        """
        floor = max(self._compacted[0], self._snapshot_meta.index)
        if index <= floor:
            raise raft.IndexCompactedError(f"damaged entry {index} is at or below the compaction point {floor}")
        log = self.log
        segment_base = max((s.base_index for s in log.segments() if s.base_index <= index), default=floor + 1)
        damaged = log.first_damaged(max(segment_base, floor + 1), index)
        cut = index if damaged is None else damaged
        last = self.last_index()
        try:
            last_term = log.term(last)
        except StorageError:
            last_term = log.hard_state().term  # at least the term of any entry this log holds
        record = self.record_lost_suffix(last, last_term)
        log.truncate_suffix(cut)
        self.forget_beyond_last()
        return record

    def forget_beyond_last(self) -> None:
        """After the log lost its end: the applied index and the configuration history move back to the last
        index (the entries after it come back from the leader and apply again)."""
        last = self.last_index()
        self._recent.clear()
        self._recent_size = 0
        if self.applied_index() > last:
            self.log.set_attribute(_APPLIED, _U64.pack(last))
        kept = [item for item in self._conf_history if item[0] <= last]
        if len(kept) != len(self._conf_history):
            self._conf_history = kept
            self._save_conf_history()

    # ------------------------------------------------------------------------------- application state

    def set_applied(self, index: int, conf_state: raft.ConfState | None = None) -> None:
        """Record the applied index in the same transaction as this round's entries, and with ``conf_state``
        (a Ready's, when its committed entries changed the configuration) the configuration at each of them."""
        if conf_state is not None:  # read the previous applied index only then: this runs every round
            self._record_conf_changes(self.applied_index(), index, conf_state)
        self.log.set_attribute(_APPLIED, _U64.pack(index))
        self._forget_through(index)

    def _record_conf_changes(self, previous: int, index: int, conf_state: raft.ConfState) -> None:
        # Per CONFIG entry, not per Ready: a snapshot may later be taken at any index in between.
        lo = max(previous, self._snapshot_meta.index, self._compacted[0]) + 1
        conf = self.conf_state_at(lo - 1)
        try:
            applied = self.entries(lo, index + 1, 1 << 62) if lo <= index else []
        except raft.RaftStorageError:
            applied = []
        for entry in applied:
            if entry.kind == raft.EntryKind.CONFIG:
                try:
                    conf = raft.apply_conf_change(conf, raft.decode_conf_change(entry.payload))
                except (raft.RaftCodecError, raft.InvalidConfChangeError):
                    continue  # the core skips it too
                self._conf_history.append((entry.index, raft.encode_conf_state(conf)))
        if conf != conf_state:  # the core knows better (a snapshot installed meanwhile): trust it at ``index``
            self._conf_history.append((index, raft.encode_conf_state(conf_state)))
        self._save_conf_history()

    def _save_snapshot(self, meta: raft.SnapshotMeta, data: bytes) -> None:
        self._snapshot_meta = meta
        self._snapshot_data = data
        self.log.set_attribute(_SNAPSHOT_META, raft.encode_snapshot_meta(meta))
        self.log.set_attribute(_SNAPSHOT_DATA, data)
        # Keep the last configuration at or before the snapshot and everything after it.
        before = [item for item in self._conf_history if item[0] <= meta.index]
        self._conf_history = before[-1:] + [item for item in self._conf_history if item[0] > meta.index]
        self._save_conf_history()

    def _save_conf_history(self) -> None:
        encoded = json.dumps([[i, c.hex()] for i, c in self._conf_history]).encode()
        self.log.set_attribute(_CONF_HISTORY, encoded)
