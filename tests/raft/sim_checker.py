"""Raft's safety properties, checked by the seeded simulation (``simulation.py``) after every step.

* election safety: at most one leader per term;
* log matching: an (index, term) pair always names the same entry with the same predecessor term;
* leader completeness: a new leader holds every entry any node has seen committed;
* commit consistency: no node ever regards two different entries as committed at one index;
* state machine safety: no two nodes apply different entries at one index, and snapshots agree with the
  applied history;
* read safety: a read index is never below what was committed when the read was requested (the simulation
  checks it against :attr:`InvariantChecker.max_committed`).
"""

from __future__ import annotations

from multiraft.raft import Entry, RaftStorageError, Ready, Role, Snapshot

from .harness import ReplicaHost

__all__ = ["InvariantChecker", "InvariantViolationError"]


class InvariantViolationError(AssertionError):
    pass


class InvariantChecker:
    """Raft's safety properties, checked incrementally (each step costs O(what changed))."""

    def __init__(self) -> None:
        self.leaders: dict[int, int] = {}
        self.committed: dict[int, int] = {}  # index -> term, for every index any node saw committed
        self.max_committed = 0
        self.applied: dict[int, tuple[int, bytes]] = {}
        self.chains: dict[int, int] = {}
        self.entries: dict[tuple[int, int], tuple[int, int, bytes]] = {}  # (index, term) -> (prev term, kind, payload)
        self.checked_commit: dict[int, int] = {}

    def fail(self, what: str) -> None:
        raise InvariantViolationError(what)

    # Observer hooks (called by ReplicaHost)

    def on_persist(self, host: ReplicaHost, ready: Ready) -> None:
        storage = host.storage
        for entry in ready.entries:
            try:
                prev = storage.term(entry.index - 1)
            except RaftStorageError:
                continue
            key = (entry.index, entry.term)
            value = (prev, int(entry.kind), bytes(entry.payload))
            seen = self.entries.setdefault(key, value)
            if seen != value:
                self.fail(f"log matching: node {host.id} persisted {key} as {value}, another node had {seen}")

    def on_apply(self, host: ReplicaHost, entry: Entry, chain: int) -> None:
        record = (entry.term, bytes(entry.payload))
        seen = self.applied.setdefault(entry.index, record)
        if seen != record:
            self.fail(f"state machine safety: node {host.id} applied {record} at {entry.index}, another {seen}")
        seen_chain = self.chains.setdefault(entry.index, chain)
        if seen_chain != chain:
            self.fail(f"state machine safety: node {host.id} applied a different history up to {entry.index}")
        committed_term = self.committed.get(entry.index)
        if committed_term is not None and committed_term != entry.term:
            self.fail(f"node {host.id} applied term {entry.term} at {entry.index}, committed was {committed_term}")

    def on_snapshot_installed(self, host: ReplicaHost, snapshot: Snapshot, chain: int) -> None:
        index = snapshot.meta.index
        seen = self.chains.get(index)
        if seen is not None and seen != chain:
            self.fail(f"node {host.id} installed a snapshot at {index} that disagrees with the applied history")
        committed_term = self.committed.get(index)
        if committed_term is not None and committed_term != snapshot.meta.term:
            self.fail(f"node {host.id} installed snapshot ({index}, {snapshot.meta.term}), committed {committed_term}")

    # After every step of a node

    def after_step(self, host: ReplicaHost) -> None:
        raft = host.node._raft  # white-box: the checker reads the in-memory log
        log = raft.log
        if raft.role is Role.LEADER:
            holder = self.leaders.setdefault(raft.term, host.id)
            if holder != host.id:
                self.fail(f"election safety: nodes {holder} and {host.id} both led term {raft.term}")
            if holder == host.id and self.checked_commit.get(-host.id) != raft.term:
                self.checked_commit[-host.id] = raft.term
                self._check_leader_completeness(host)
        committed = log.committed
        start = self.checked_commit.get(host.id, 0)
        if committed > start:
            record = self.committed
            for index in range(max(start + 1, log.first_index() - 1, 1), committed + 1):
                term = log.term(index)
                if term is None:
                    continue
                seen = record.setdefault(index, term)
                if seen != term:
                    self.fail(f"commit safety: node {host.id} has term {term} committed at {index}, seen {seen}")
            self.checked_commit[host.id] = committed
            self.max_committed = max(self.max_committed, committed)

    def reset_node(self, node_id: int) -> None:
        self.checked_commit.pop(node_id, None)
        self.checked_commit.pop(-node_id, None)

    def _check_leader_completeness(self, host: ReplicaHost) -> None:
        log = host.node._raft.log
        first = log.first_index()
        for index in range(max(first - 1, 1), self.max_committed + 1):
            expected = self.committed.get(index)
            if expected is not None and log.term(index) != expected:
                self.fail(
                    f"leader completeness: leader {host.id} of term {host.node.term} has term {log.term(index)} "
                    f"at {index}, committed term is {expected}"
                )
