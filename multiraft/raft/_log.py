"""The replica's log: durable entries in Storage plus an in-memory tail not yet handed to storage (as etcd's raftLog).

Index bookkeeping: ``applied <= applying <= committed <= last_index()``. ``applying`` is the last committed
entry handed out in a Ready; ``applied`` catches up in ``advance``.
"""

from __future__ import annotations

from collections.abc import Sequence

from .errors import IndexCompactedError, IndexUnavailableError, LogInvariantError, SnapshotTemporarilyUnavailableError
from .messages import Entry, Snapshot
from .storage import Storage, limit_size

__all__ = ["RaftLog", "Unstable"]


class Unstable:
    """Entries (and possibly a snapshot) not yet persisted. ``entries[i].index == offset + i``."""

    __slots__ = ("entries", "offset", "snapshot")

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.entries: list[Entry] = []
        self.snapshot: Snapshot | None = None

    def stable_to(self, index: int, term: int) -> bool:
        """Entries up to ``index`` (whose term was ``term``) are durable; False if the log changed meanwhile."""
        position = index - self.offset
        if position < 0 or position >= len(self.entries) or self.entries[position].term != term:
            return False
        del self.entries[: position + 1]
        self.offset = index + 1
        return True

    def stable_snapshot_to(self, index: int) -> bool:
        if self.snapshot is not None and self.snapshot.meta.index == index:
            self.snapshot = None
            return True
        return False

    def restore(self, snapshot: Snapshot) -> None:
        self.offset = snapshot.meta.index + 1
        self.entries = []
        self.snapshot = snapshot

    def truncate_and_append(self, entries: Sequence[Entry]) -> None:
        after = entries[0].index
        offset = self.offset
        if after == offset + len(self.entries):
            self.entries.extend(entries)
        elif after <= offset:
            # Replace the whole unstable tail; the log before it comes from storage.
            self.offset = after
            self.entries = list(entries)
        else:
            del self.entries[after - offset :]
            self.entries.extend(entries)


class RaftLog:
    """Storage plus the unstable tail, with the commit and apply indexes."""

    __slots__ = ("applied", "applying", "committed", "max_committed_size", "storage", "unstable")

    def __init__(self, storage: Storage, max_committed_size: int) -> None:
        self.storage = storage
        last = storage.last_index()
        self.unstable = Unstable(last + 1)
        # Everything up to the snapshot is committed and in the application's state, even when the log was
        # compacted to an earlier point (entries between the two are still readable, never re-applied).
        try:
            snapshot_index = storage.snapshot().meta.index
        except SnapshotTemporarilyUnavailableError:
            snapshot_index = 0
        start = max(storage.first_index() - 1, snapshot_index)
        self.committed = start
        self.applied = start
        self.applying = start
        self.max_committed_size = max_committed_size

    def first_index(self) -> int:
        snapshot = self.unstable.snapshot
        if snapshot is not None:
            return snapshot.meta.index + 1
        return self.storage.first_index()

    def last_index(self) -> int:
        unstable = self.unstable
        if unstable.entries:
            return unstable.offset + len(unstable.entries) - 1
        if unstable.snapshot is not None:
            return unstable.snapshot.meta.index
        return self.storage.last_index()

    def stable_last_index(self) -> int:
        """The last index that is durable (storage's last index, before any unstable tail)."""
        return self.unstable.offset - 1 if self.unstable.snapshot is None else self.storage.last_index()

    def term(self, index: int) -> int | None:
        """Term of the entry at ``index``; None if it was compacted or does not exist."""
        unstable = self.unstable
        position = index - unstable.offset
        if position >= 0:
            if position < len(unstable.entries):
                return unstable.entries[position].term
            return None
        snapshot = unstable.snapshot
        if snapshot is not None:
            return snapshot.meta.term if index == snapshot.meta.index else None
        storage = self.storage
        if index < storage.first_index() - 1:
            return None
        try:
            return storage.term(index)
        except (IndexCompactedError, IndexUnavailableError):
            return None

    def last_term(self) -> int:
        term = self.term(self.last_index())
        if term is None:
            raise LogInvariantError(f"no term for the last index {self.last_index()}")  # storage broke its contract
        return term

    def match_term(self, index: int, term: int) -> bool:
        return self.term(index) == term

    def is_up_to_date(self, last_index: int, term: int) -> bool:
        """True if a log ending at (last_index, term) is at least as up to date as ours (Raft §5.4.1)."""
        our_term = self.last_term()
        return term > our_term or (term == our_term and last_index >= self.last_index())

    def find_conflict(self, entries: Sequence[Entry]) -> int:
        """Index of the first entry whose term differs from ours (or that we lack); 0 if all match."""
        last = self.last_index()
        for entry in entries:
            if entry.index > last or self.term(entry.index) != entry.term:
                return entry.index
        return 0

    def find_conflict_by_term(self, index: int, term: int) -> tuple[int, int]:
        """The largest index <= ``index`` whose term is <= ``term``, and that term (fast backtracking hint)."""
        while index > 0:
            our_term = self.term(index)
            if our_term is None:
                return index, 0
            if our_term <= term:
                return index, our_term
            index -= 1
        return 0, 0

    def maybe_append(self, index: int, log_term: int, committed: int, entries: Sequence[Entry]) -> int | None:
        """Append a leader's entries after (index, log_term); the new last index, or None if that entry differs."""
        if self.term(index) != log_term:
            return None
        last_new = index + len(entries)
        if entries:
            conflict = self.find_conflict(entries)
            if conflict:
                if conflict <= self.committed:
                    raise LogInvariantError(f"entry {conflict} conflicts with the committed index {self.committed}")
                self.unstable.truncate_and_append(entries[conflict - index - 1 :])
        self.commit_to(min(committed, last_new))
        return last_new

    def append(self, entries: Sequence[Entry]) -> int:
        if entries:
            if entries[0].index - 1 < self.committed:
                raise LogInvariantError(f"appending at {entries[0].index} would overwrite committed {self.committed}")
            self.unstable.truncate_and_append(entries)
        return self.last_index()

    def commit_to(self, index: int) -> None:
        if index > self.committed:
            if index > self.last_index():
                raise LogInvariantError(f"commit index {index} is beyond the last index {self.last_index()}")
            self.committed = index

    def maybe_commit(self, index: int, term: int) -> bool:
        """Commit up to ``index`` if that entry is from ``term`` (Raft §5.4.2: count replicas of this term only)."""
        if index > self.committed and self.term(index) == term:
            self.committed = index
            return True
        return False

    def slice(self, lo: int, hi: int, max_size: int) -> list[Entry]:
        """Entries ``[lo, hi)``, cut to ``max_size`` payload bytes (at least one entry)."""
        if lo >= hi:
            return []
        unstable = self.unstable
        offset = unstable.offset
        if lo >= offset:
            return limit_size(unstable.entries[lo - offset : hi - offset], max_size)
        if lo < self.first_index():
            raise IndexCompactedError(f"entries from {lo}: compacted up to {self.first_index() - 1}")
        stored = self.storage.entries(lo, min(hi, offset), max_size)
        if hi <= offset or len(stored) < min(hi, offset) - lo:
            return stored
        return limit_size(stored + unstable.entries[: hi - offset], max_size)

    def has_pending_snapshot(self) -> bool:
        return self.unstable.snapshot is not None

    def next_committed_entries(self) -> list[Entry]:
        """Committed entries not yet handed out (none while a snapshot waits to be installed)."""
        if self.unstable.snapshot is not None or self.applying >= self.committed:
            return []
        return self.slice(self.applying + 1, self.committed + 1, self.max_committed_size)

    def applied_to(self, index: int) -> None:
        self.applied = max(self.applied, index)
        self.applying = max(self.applying, index)

    def restore(self, snapshot: Snapshot) -> None:
        self.committed = snapshot.meta.index
        self.unstable.restore(snapshot)

    def snapshot(self) -> Snapshot:
        if self.unstable.snapshot is not None:
            return self.unstable.snapshot
        return self.storage.snapshot()
