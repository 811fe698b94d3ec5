"""The durable log behind a group, as the core sees it, and an in-memory reference implementation.

The core only *reads* storage through :class:`Storage`; the application writes to it while it handles a
:class:`~multiraft.raft.Ready` (snapshot, then entries, then hard state) and compacts it after snapshots.
:class:`MutableStorage` names those writes so that one conformance suite (``tests/raft/storage_conformance.py``)
and the simulation harness run unchanged against any implementation.

Indexes: a storage holds the snapshot at ``first_index() - 1`` (whose term :meth:`Storage.term` still answers)
and the entries ``first_index() .. last_index()``. An empty storage has first index 1 and last index 0.

A group is born from :func:`bootstrap`: every initial member starts from the same snapshot at index 1, term 1,
that holds the initial configuration. Nodes added later start empty and receive a snapshot from the leader (the
log never starts at index 1), so every replica learns its configuration from a snapshot plus the CONFIG entries
after it.

Configuration on restart. Storage reports the configuration *as of the snapshot*
(:meth:`Storage.initial_state`); RawNode itself folds the CONFIG entries between the snapshot and the
``applied`` index the application gives it, so a storage never needs to know what the application applied, and
a restart at any applied index starts with the configuration of that index. Reading those entries is what a
storage with a long log after its snapshot wants to avoid: :meth:`Storage.conf_checkpoint` may answer with a
configuration it recorded at a later index, and RawNode folds only the entries after that one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .confchange import ConfState
from .errors import CompactionBeyondSnapshotError, IndexCompactedError, IndexUnavailableError, SnapshotOutOfDateError
from .messages import Entry, HardState, Snapshot, SnapshotMeta

__all__ = ["Storage", "MutableStorage", "MemoryStorage", "bootstrap", "BOOTSTRAP_INDEX", "limit_size"]

BOOTSTRAP_INDEX = 1
"""Index and term of the snapshot every initial member of a group starts from."""


def bootstrap(conf_state: ConfState) -> tuple[HardState, Snapshot]:
    """The hard state and snapshot an initial member of a new group starts from (apply both to empty storage)."""
    snapshot = Snapshot(SnapshotMeta(BOOTSTRAP_INDEX, BOOTSTRAP_INDEX, conf_state), b"")
    return HardState(term=BOOTSTRAP_INDEX, vote=0, commit=BOOTSTRAP_INDEX), snapshot


def limit_size(entries: list[Entry], max_size: int) -> list[Entry]:
    """The longest prefix of ``entries`` whose payloads total at most ``max_size`` bytes, but never empty."""
    if len(entries) <= 1:
        return entries
    size = len(entries[0].payload)
    for n in range(1, len(entries)):
        size += len(entries[n].payload)
        if size > max_size:
            return entries[:n]
    return entries


class Storage(Protocol):
    """Read access to a group's durable log. Implementations raise only :class:`RaftStorageError` subclasses."""

    def initial_state(self) -> tuple[HardState, ConfState]:
        """The saved hard state, and the configuration as of the snapshot (``snapshot().meta.conf_state``).

        Never the configuration of a later index: RawNode applies the CONFIG entries after the snapshot up to
        its ``applied`` index itself (see the module docstring).
        """
        ...

    def conf_checkpoint(self, index: int) -> tuple[int, ConfState]:
        """``(c, configuration as of c)`` for some ``c`` with ``snapshot index <= c <= index``.

        RawNode calls it once when it starts with ``applied`` past the snapshot, then folds the CONFIG entries
        in ``(c, applied]`` read from the log. The snapshot's index and configuration are always a correct
        answer (:class:`MemoryStorage` gives them); a storage that records the configuration as entries are
        applied answers with a later ``c`` so that a restart reads no entries.
        """
        ...

    def entries(self, lo: int, hi: int, max_size: int) -> list[Entry]:
        """Entries ``[lo, hi)``, cut to :func:`limit_size` ``max_size`` (at least one entry when lo < hi).

        Raises :class:`IndexCompactedError` if ``lo < first_index()`` and :class:`IndexUnavailableError` if
        ``hi > last_index() + 1``.
        """
        ...

    def term(self, index: int) -> int:
        """Term of the entry at ``index``, for ``first_index() - 1 <= index <= last_index()``.

        Raises :class:`IndexCompactedError` below that range and :class:`IndexUnavailableError` above it.
        """
        ...

    def first_index(self) -> int:
        """Index of the first entry that may be read (the snapshot index + 1)."""
        ...

    def last_index(self) -> int:
        """Index of the last entry (the snapshot index if there are none)."""
        ...

    def snapshot(self) -> Snapshot:
        """The most recent snapshot; may raise :class:`SnapshotTemporarilyUnavailableError`."""
        ...


class MutableStorage(Storage, Protocol):
    """The writes an application performs while handling Ready and compacting; used by the test harnesses."""

    def set_hard_state(self, hard_state: HardState) -> None:
        """Save the hard state."""
        ...

    def append(self, entries: Sequence[Entry]) -> None:
        """Append contiguous entries, first deleting any stored entry at or after ``entries[0].index``.

        Entries at or below the snapshot index are ignored.
        """
        ...

    def apply_snapshot(self, snapshot: Snapshot) -> None:
        """Replace everything with ``snapshot``; raises :class:`SnapshotOutOfDateError` if it is not newer."""
        ...

    def create_snapshot(self, index: int, conf_state: ConfState, data: bytes) -> Snapshot:
        """Record that the application's state covers everything up to ``index`` (entries stay until compact).

        Raises :class:`SnapshotOutOfDateError` if ``index`` is not above the current snapshot and
        :class:`IndexUnavailableError` if it is above the last index.
        """
        ...

    def compact(self, index: int) -> None:
        """Discard entries up to and including ``index``, which the snapshot must cover.

        Raises :class:`IndexCompactedError` if already compacted up to ``index`` or past it,
        :class:`IndexUnavailableError` if ``index`` is above the last index, and
        :class:`CompactionBeyondSnapshotError` if it is above the snapshot index (checked in that order); nothing
        changes then.
        """
        ...


class MemoryStorage:
    """The reference :class:`MutableStorage`: a list of entries after a compaction point. Not thread-safe.

    It keeps the entry objects it is given: payloads are never copied. The snapshot and the compaction point
    are separate (as in etcd): :meth:`create_snapshot` records a snapshot, :meth:`compact` drops entries up to
    at most the snapshot index, so a follower that installs the snapshot can always continue from the log.
    """

    __slots__ = ("_entries", "_hard_state", "_offset", "_offset_term", "_snapshot")

    def __init__(self) -> None:
        self._hard_state = HardState()
        self._snapshot = Snapshot()
        self._offset = 0  # index of the last compacted entry; _entries[i].index == _offset + 1 + i
        self._offset_term = 0
        self._entries: list[Entry] = []

    @classmethod
    def bootstrapped(cls, conf_state: ConfState) -> MemoryStorage:
        """A storage for an initial member of a new group (see :func:`bootstrap`)."""
        storage = cls()
        hard_state, snapshot = bootstrap(conf_state)
        storage.apply_snapshot(snapshot)
        storage.set_hard_state(hard_state)
        return storage

    # Storage

    def initial_state(self) -> tuple[HardState, ConfState]:
        return self._hard_state, self._snapshot.meta.conf_state

    def conf_checkpoint(self, index: int) -> tuple[int, ConfState]:
        meta = self._snapshot.meta
        return meta.index, meta.conf_state

    def entries(self, lo: int, hi: int, max_size: int) -> list[Entry]:
        offset = self._offset
        if lo <= offset:
            raise IndexCompactedError(f"entries from {lo}: compacted up to {offset}")
        if hi > offset + len(self._entries) + 1:
            raise IndexUnavailableError(f"entries up to {hi - 1}: last index is {offset + len(self._entries)}")
        return limit_size(self._entries[lo - offset - 1 : hi - offset - 1], max_size)

    def term(self, index: int) -> int:
        offset = self._offset
        if index <= offset:
            if index == offset:
                return self._offset_term
            raise IndexCompactedError(f"term of {index}: compacted up to {offset}")
        position = index - offset - 1
        if position >= len(self._entries):
            raise IndexUnavailableError(f"term of {index}: last index is {offset + len(self._entries)}")
        return self._entries[position].term

    def first_index(self) -> int:
        return self._offset + 1

    def last_index(self) -> int:
        return self._offset + len(self._entries)

    def snapshot(self) -> Snapshot:
        return self._snapshot

    # MutableStorage

    def hard_state(self) -> HardState:
        """The saved hard state (what :meth:`initial_state` returns)."""
        return self._hard_state

    def set_hard_state(self, hard_state: HardState) -> None:
        self._hard_state = hard_state

    def append(self, entries: Sequence[Entry]) -> None:
        if not entries:
            return
        offset = self._offset
        first = entries[0].index
        last_index = offset + len(self._entries)
        if first > last_index + 1:
            raise IndexUnavailableError(f"append at {first} leaves a gap after the last index {last_index}")
        if entries[-1].index <= offset:
            return
        if first <= offset:
            entries = entries[offset + 1 - first :]
            first = offset + 1
        del self._entries[first - offset - 1 :]
        self._entries.extend(entries)

    def apply_snapshot(self, snapshot: Snapshot) -> None:
        if snapshot.meta.index <= self._snapshot.meta.index:
            raise SnapshotOutOfDateError(
                f"snapshot at {snapshot.meta.index} is not newer than the one held at {self._snapshot.meta.index}"
            )
        self._snapshot = snapshot
        self._offset = snapshot.meta.index
        self._offset_term = snapshot.meta.term
        self._entries = []

    def create_snapshot(self, index: int, conf_state: ConfState, data: bytes) -> Snapshot:
        if index <= self._snapshot.meta.index:
            raise SnapshotOutOfDateError(
                f"snapshot at {index} is not newer than the one held at {self._snapshot.meta.index}"
            )
        self._snapshot = Snapshot(SnapshotMeta(index, self.term(index), conf_state), data)
        return self._snapshot

    def compact(self, index: int) -> None:
        if index <= self._offset:
            raise IndexCompactedError(f"compact to {index}: already compacted up to {self._offset}")
        if index > self.last_index():
            raise IndexUnavailableError(f"compact to {index}: last index is {self.last_index()}")
        if index > self._snapshot.meta.index:
            raise CompactionBeyondSnapshotError(
                f"compact to {index} would drop entries after the snapshot at {self._snapshot.meta.index}"
            )
        self._offset_term = self.term(index)
        del self._entries[: index - self._offset]
        self._offset = index
