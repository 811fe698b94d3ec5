"""Seeded random schedules over a simulated network, with Raft's safety properties checked after every step.

One seed fixes everything: cluster size, fault rates, timings, and every choice of the schedule (which message
is delivered next, which node crashes, when a Ready is persisted). Replaying a seed replays the run exactly.

Faults: message drops, duplicates, delays and reordering; partitions and healing; crashes that lose whatever a
node had taken from ready() but not yet persisted, and whatever it persisted without syncing (a Ready without
``must_sync``: a new commit index) unless a later sync covered it; crashes that also lose a durable suffix of
the log, committed entries included (a damaged disk cut back to its last good entry: the node restarts with
``recover_until`` set to its former last entry, as the runtime's repair does, until its durable log is back);
restarts from durable storage (each node's :class:`Disk`: :class:`CrashableMemoryStorage` here, real LMDB files
in ``tests/node``); snapshots and log compaction; membership changes (learners, promotions, removals including
the leader's, joint replacements); leadership transfers; linearizable reads. The simulated runtime calls
``wake()`` on groups whose leader crashed or became unreachable, as the node runtime will do when SWIM reports
it, and never ticks a quiescent group.

Checked after every step (``InvariantChecker``):

* election safety: at most one leader per term;
* log matching: an (index, term) pair always names the same entry with the same predecessor term;
* leader completeness: a new leader holds every entry any node has seen committed;
* commit consistency: no node ever regards two different entries as committed at one index;
* state machine safety: no two nodes apply different entries at one index, and snapshots agree with the
  applied history;
* read safety: a read index is never below what was committed when the read was requested.

At the end, the network heals and every node restarts; with a stable majority connected a leader must emerge
and a new proposal must commit and be applied by the leader and a majority of voters within ``LIVENESS_TICKS``,
and every write the client saw acknowledged must be in the leader's state.
"""

from __future__ import annotations

import os
import random
import sys
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from multiraft.raft import (
    UNKNOWN_VOTE,
    ConfChange,
    ConfChangePending,
    ConfChangeSingle,
    ConfChangeType,
    ConfState,
    Entry,
    HardState,
    InvalidConfChangeError,
    InvalidRequestError,
    Message,
    MessageType,
    MutableStorage,
    NotLeader,
    ProposalDropped,
    RaftStorageError,
    Ready,
    Role,
    Snapshot,
    bootstrap,
    decode_message,
    encode_message_buffers,
)

from .harness import CrashableMemoryStorage, ReplicaHost, describe, make_config

LIVENESS_TICKS = 400
MAX_NODE_ID = 7


class InvariantViolationError(AssertionError):
    pass


class Disk(Protocol):
    """One node's durable storage as the simulation drives it."""

    storage: MutableStorage  # what the node reads and writes (a crash may replace it: reopened from disk)

    def sync(self) -> None:
        """Make every write so far durable."""
        ...

    def crash(self) -> int:
        """Lose every write since the last sync and reopen; returns how many writes were lost."""
        ...

    def close(self) -> None: ...


DiskFactory = Callable[[int, ConfState | None], Disk]
"""(node id, initial configuration or None for a node added later) -> a fresh disk."""


class MemoryDisk:
    """A :class:`CrashableMemoryStorage` (the default disk)."""

    def __init__(self, node_id: int, conf_state: ConfState | None) -> None:
        self._memory = CrashableMemoryStorage()
        if conf_state is not None:
            hard_state, snapshot = bootstrap(conf_state)
            self._memory.apply_snapshot(snapshot)
            self._memory.set_hard_state(hard_state)
        self._memory.sync()
        self.storage: MutableStorage = self._memory

    def damage(self, keep: int) -> tuple[int, int]:
        """A damaged disk cut back after ``keep`` (durably); returns the last entry it held before."""
        return self._memory.lose_suffix(keep)

    def sync(self) -> None:
        self._memory.sync()

    def crash(self) -> int:
        return self._memory.crash()

    def close(self) -> None:
        pass


@dataclass
class SimParams:
    """Everything a seed decides about a run besides the schedule itself."""

    nodes: int
    ticks: int
    election_tick: int
    heartbeat_tick: int
    pre_vote: bool
    check_quorum: bool
    quiesce: bool
    max_inflight_msgs: int
    max_size_per_msg: int
    max_entries_per_msg: int
    drop: float
    duplicate: float
    max_delay: int
    crash: float
    restart: float
    partition: float
    heal: float
    propose: float
    membership: float
    transfer: float
    read: float
    snapshot: float
    slow_persist: float
    spurious_wake: float
    reorder: float
    codec: bool

    @classmethod
    def random(cls, rng: random.Random) -> SimParams:
        calm = rng.random() < 0.2
        return cls(
            nodes=rng.choice((1, 3, 3, 3, 5, 5)) if rng.random() < 0.9 else 2,
            ticks=rng.randint(40, 110),
            election_tick=rng.choice((5, 8, 10)),
            heartbeat_tick=rng.choice((1, 1, 2)),
            pre_vote=rng.random() < 0.8,
            check_quorum=rng.random() < 0.8,
            quiesce=rng.random() < 0.7,
            max_inflight_msgs=rng.choice((1, 2, 4, 256)),
            max_size_per_msg=rng.choice((1, 16, 1 << 20)),
            max_entries_per_msg=rng.choice((1, 3, 1024)),
            drop=0.0 if calm else rng.choice((0.0, 0.02, 0.1, 0.2)),
            duplicate=0.0 if calm else rng.choice((0.0, 0.02, 0.1)),
            max_delay=rng.choice((0, 0, 1, 3)),
            crash=0.0 if calm else rng.choice((0.0, 0.01, 0.03)),
            restart=rng.choice((0.05, 0.2)),
            partition=0.0 if calm else rng.choice((0.0, 0.01, 0.04)),
            heal=rng.choice((0.05, 0.2)),
            propose=rng.choice((0.2, 0.5, 1.0)),
            membership=rng.choice((0.0, 0.0, 0.03, 0.08)),
            transfer=rng.choice((0.0, 0.01, 0.03)),
            read=rng.choice((0.0, 0.05, 0.2)),
            snapshot=rng.choice((0.0, 0.02, 0.1)),
            slow_persist=rng.choice((0.0, 0.1, 0.4)),
            spurious_wake=rng.choice((0.0, 0.02)),
            reorder=rng.choice((0.0, 0.0, 0.01, 0.05)),
            codec=rng.random() < 0.25,
        )


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


@dataclass(order=True)
class _InFlight:
    at: int
    seq: int
    message: Message = field(compare=False)
    sent: int = field(compare=False, default=0)  # the tick it was sent at
    duplicate: bool = field(compare=False, default=False)  # the second copy of a duplicated message


@dataclass
class _Proposal:
    node: int
    incarnation: int
    index: int
    term: int
    payload: bytes


@dataclass
class SimResult:
    seed: int
    stats: Counter[str]
    params: SimParams
    committed: int
    acked: int
    elections: int
    liveness_ticks: int
    steps: int


def as_proposed(payload: bytes) -> bytes:
    return payload


class Simulation:
    """One seeded run. ``disk`` makes each node's storage; ``payload`` turns a client payload into what is
    proposed (the LMDB adapter needs record batches)."""

    def __init__(
        self,
        seed: int,
        params: SimParams | None = None,
        *,
        trace: bool = False,
        disk: DiskFactory = MemoryDisk,
        payload: Callable[[bytes], bytes] = as_proposed,
        lose_suffix: float | None = None,
        lose_disk: float | None = None,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.params = params or SimParams.random(self.rng)
        self.checker = InvariantChecker()
        self.now = 0
        self.seq = 0
        self.steps = 0
        self.network: list[_InFlight] = []
        self.link_clock: dict[tuple[int, int], int] = {}
        self.blocked: set[tuple[int, int]] = set()
        self.hosts: dict[int, ReplicaHost] = {}
        self.new_disk = disk
        self.make_payload = payload
        self.disks: dict[int, Disk] = {}
        self.link_delivered: dict[tuple[int, int], int] = {}
        self.incarnation: dict[int, int] = {}
        self.persist_at: dict[int, int] = {}
        self.up: set[int] = set()
        self.proposals: dict[tuple[int, int], _Proposal] = {}
        self.removed: set[int] = set()  # nodes whose removal was proposed (never re-added: ids are not reused)
        self.acked: dict[int, bytes] = {}
        self.reads: dict[bytes, int] = {}
        self.next_payload = 0
        self.trace_enabled = trace
        self.trace: deque[str] = deque(maxlen=400)
        self.liveness_ticks = -1
        self.stats: Counter[str] = Counter()
        # Damaged disks draw from their own generator, so that every other draw of a seed stays as it was.
        self.damage_rng = random.Random(seed * 7877 + 13)
        self.lose_suffix = self.damage_rng.choice((0.0, 0.0, 0.3, 0.7)) if lose_suffix is None else lose_suffix
        self.recover_until: dict[int, tuple[int, int]] = {}  # node -> its persisted last entry before damage
        # A whole disk lost (the store set aside): a fresh one, held by the highest term the node reached, kept
        # apart as the runtime's TermGuard keeps it. Its own generator, so other seeds' draws stay as they were.
        self.disk_rng = random.Random(seed * 7883 + 17)
        default_loss = self.disk_rng.choice((0.0, 0.0, 0.2, 0.5)) if disk is MemoryDisk else 0.0
        self.lose_disk = default_loss if lose_disk is None else lose_disk
        self.max_term: dict[int, int] = {}  # node -> the highest term any of its Readies persisted
        self.lost_disks: set[int] = set()  # nodes rebuilding a lost disk
        ids = list(range(1, self.params.nodes + 1))
        conf = self.initial_conf = ConfState.of(ids)
        for node_id in ids:
            self.disks[node_id] = disk(node_id, conf)
            self._start(node_id)

    # --- nodes -------------------------------------------------------------------------------------------

    def _start(self, node_id: int) -> None:
        p = self.params
        config = make_config(
            node_id,
            election_tick=p.election_tick,
            heartbeat_tick=p.heartbeat_tick,
            pre_vote=p.pre_vote,
            check_quorum=p.check_quorum,
            quiesce=p.quiesce,
            max_inflight_msgs=p.max_inflight_msgs,
            max_size_per_msg=p.max_size_per_msg,
            max_entries_per_msg=p.max_entries_per_msg,
        )
        self.incarnation[node_id] = self.incarnation.get(node_id, 0) + 1
        rng = random.Random(self.seed * 7919 + node_id * 104729 + self.incarnation[node_id])
        disk = self.disks[node_id]
        floor = self.recover_until.get(node_id, (0, 0))
        last = disk.storage.last_index()
        if floor[0] and (disk.storage.term(last), last) >= (floor[1], floor[0]):
            del self.recover_until[node_id]  # the durable log is back: the runtime clears its marker
            floor = (0, 0)
        host = ReplicaHost(node_id, disk.storage, config, rng, self, disk.sync, recover_until=floor)
        self.hosts[node_id] = host
        self.up.add(node_id)
        self.checker.reset_node(node_id)
        self._note(f"start {node_id} (incarnation {self.incarnation[node_id]})")

    def _crash(self, node_id: int) -> None:
        self.stats["crashes"] += 1
        if self.hosts[node_id].pending is not None:
            self.stats["crashes losing an unsynced ready"] += 1
        self.up.discard(node_id)
        self.persist_at.pop(node_id, None)
        if self.disks[node_id].crash():
            self.stats["crashes losing unsynced writes"] += 1
        disk = self.disks[node_id]
        if self.lose_disk and self.disk_rng.random() < self.lose_disk and self._may_lose_disk(node_id):
            self._replace_disk(node_id)
            return
        damage: Callable[[int], tuple[int, int]] | None = getattr(disk, "damage", None)
        if (
            damage is not None
            and self.lose_suffix
            and self.damage_rng.random() < self.lose_suffix
            and self._may_damage(node_id)
        ):
            storage = disk.storage
            first = max(storage.first_index() - 1, storage.snapshot().meta.index)  # the snapshot is state, not log
            last = storage.last_index()
            if last > first:
                keep = self.damage_rng.randint(first, last - 1)
                committed = storage.initial_state()[0].commit
                before = damage(keep)
                earlier = self.recover_until.get(node_id, (0, 0))
                self.recover_until[node_id] = max(earlier, before, key=lambda e: (e[1], e[0]))
                self.stats["crashes losing a durable suffix"] += 1
                if committed > keep:
                    self.stats["crashes losing committed entries"] += 1
                self._note(f"{node_id} lost entries {keep + 1}..{before[0]}")
        self._note(f"crash {node_id}")
        for other in self.up:
            if self.hosts[other].node.leader_id == node_id:
                self.hosts[other].node.wake()  # the runtime learns of the death from SWIM

    def _replace_disk(self, node_id: int) -> None:
        """The node's store is lost: it starts from a fresh one (bootstrapped, as the runtime does for an initial
        member) in the highest term it reached, its vote unknown, recovering until it holds an entry of a later
        term (multiraft.node.term_guard)."""
        floor = self.max_term.get(node_id, 0)
        committed = self.hosts[node_id].storage.initial_state()[0].commit
        fresh = self.new_disk(node_id, self.initial_conf if node_id <= self.params.nodes else None)
        storage = fresh.storage
        storage.set_hard_state(HardState(floor, UNKNOWN_VOTE, storage.initial_state()[0].commit))
        fresh.sync()
        self.disks[node_id].close()
        self.disks[node_id] = fresh
        self.recover_until[node_id] = (1, floor + 1)
        self.stats["crashes losing the whole disk"] += 1
        self.lost_disks.add(node_id)
        if committed > storage.last_index():
            self.stats["crashes losing committed entries"] += 1
        self._note(f"crash {node_id}, losing its whole disk (recorded term {floor})")
        for other in self.up:
            if self.hosts[other].node.leader_id == node_id:
                self.hosts[other].node.wake()

    def _may_lose_disk(self, node_id: int) -> bool:
        """As :meth:`_may_damage`, and every replica counts three voters or more: a group of two cannot elect
        while one of them rebuilds a lost disk (see :meth:`_membership`)."""
        smallest = min(len(host.node.conf_state.voters) for host in self.hosts.values())
        return self._may_damage(node_id) and smallest >= 3

    def _may_damage(self, node_id: int) -> bool:
        """Damage one disk at a time, in groups of three voters or more: a majority of damaged disks (or the
        only copy) loses committed entries whatever the protocol does, and only waits for an operator."""
        voters = self.hosts[node_id].node.conf_state.voters
        recovering = {i for i, host in self.hosts.items() if i in self.up and host.node.recovering_until}
        return len(voters) >= 3 and not (set(self.recover_until) | recovering) - {node_id}

    # Observer hooks, forwarded to the checker (plus acknowledgement tracking)

    def on_persist(self, host: ReplicaHost, ready: Ready) -> None:
        if ready.hard_state is not None:  # the runtime records it before the store (TermGuard)
            self.max_term[host.id] = max(self.max_term.get(host.id, 0), ready.hard_state.term)
        self.checker.on_persist(host, ready)

    def on_apply(self, host: ReplicaHost, entry: Entry, chain: int) -> None:
        self.checker.on_apply(host, entry, chain)
        proposal = self.proposals.pop((host.id, entry.index), None)
        if proposal is not None and proposal.incarnation == self.incarnation[host.id]:
            if entry.term == proposal.term:
                if bytes(entry.payload) != proposal.payload:
                    self.checker.fail(f"node {host.id} applied ({entry.index}, {entry.term}) with another payload")
                self.acked[entry.index] = proposal.payload

    def on_snapshot_installed(self, host: ReplicaHost, snapshot: Snapshot, chain: int) -> None:
        self.stats["snapshots installed"] += 1
        self.checker.on_snapshot_installed(host, snapshot, chain)

    # --- network -----------------------------------------------------------------------------------------

    def _send(self, messages: list[Message]) -> None:
        """Queue messages: FIFO per link (as one connection per peer), except the reordered ones."""
        p = self.params
        rng = self.rng
        for m in messages:
            if p.drop and rng.random() < p.drop:
                self.stats["messages dropped"] += 1
                self._lost(m)
                continue
            copies = 2 if p.duplicate and rng.random() < p.duplicate else 1
            for copy in range(copies):
                self.seq += 1
                link = (m.sender, m.to)
                at = self.now + (rng.randint(0, p.max_delay) if p.max_delay else 0)
                if p.reorder and rng.random() < p.reorder:
                    at += rng.randint(1, 3)  # overtaken by later messages on the same link
                else:
                    at = max(at, self.link_clock.get(link, 0))
                    self.link_clock[link] = at
                self.network.append(_InFlight(at, self.seq, m, self.now, copy > 0))

    def _deliver(self, position: int) -> None:
        flight = self.network.pop(position)
        m = flight.message
        if m.to not in self.up or (m.sender, m.to) in self.blocked:
            self._lost(m)
            return
        # Count the faults that really reached a node, not only those that were drawn.
        stats = self.stats
        link = (m.sender, m.to)
        if flight.seq < self.link_delivered.get(link, 0):
            stats["messages delivered out of order"] += 1
        else:
            self.link_delivered[link] = flight.seq
        if flight.duplicate:
            stats["duplicates delivered"] += 1
        if self.now > flight.sent:
            stats["messages delivered late"] += 1
        if self.params.codec:
            m = decode_message(b"".join(encode_message_buffers(m)))
            self.stats["messages through the codec"] += 1
        if m.quiesce:
            self.stats["quiesce heartbeats"] += 1
        host = self.hosts[m.to]
        if self.trace_enabled:
            self._note(f"deliver {describe(m)}")
        host.node.step(m)
        self._after(host)
        if m.type is MessageType.SNAP and m.sender in self.up:
            self.hosts[m.sender].node.report_snapshot(m.to, True)

    def _lost(self, m: Message) -> None:
        # The runtime sends snapshots out of band and reports the outcome; a lost one is a failure.
        if m.type is MessageType.SNAP and m.sender in self.up:
            self.hosts[m.sender].node.report_snapshot(m.to, False)

    def _after(self, host: ReplicaHost) -> None:
        self.steps += 1
        self.checker.after_step(host)

    def _note(self, text: str) -> None:
        if self.trace_enabled:
            self.trace.append(f"t={self.now} {text}")

    # --- one tick ----------------------------------------------------------------------------------------

    def _settle(self, budget: int = 50_000) -> None:
        rng = self.rng
        hosts = self.hosts
        for _ in range(budget):
            heads: dict[tuple[int, int], int] = {}
            now = self.now
            for i, f in enumerate(self.network):
                if f.at <= now:
                    heads.setdefault((f.message.sender, f.message.to), i)
            deliverable = list(heads.values())
            ready = [i for i in sorted(self.up) if hosts[i].pending is None and hosts[i].node.has_ready()]
            persist = [i for i in sorted(self.up) if hosts[i].pending is not None and self.persist_at[i] <= self.now]
            if not deliverable and not ready and not persist:
                return
            choice = rng.random()
            if deliverable and (choice < 0.5 or not (ready or persist)):
                self._deliver(rng.choice(deliverable))
            elif ready and (choice < 0.8 or not persist):
                node_id = rng.choice(ready)
                host = hosts[node_id]
                out = host.take_ready()
                slow = self.params.slow_persist and rng.random() < self.params.slow_persist
                self.persist_at[node_id] = self.now + (rng.randint(1, 2) if slow else 0)
                self._send(out)
                self._after(host)
            else:
                node_id = rng.choice(persist)
                host = hosts[node_id]
                out = host.persist()
                self._send(out)
                self._after(host)
        raise InvariantViolationError(f"livelock: the cluster did not settle within {budget} steps at tick {self.now}")

    def _tick(self) -> None:
        self.now += 1
        for node_id in sorted(self.up):
            node = self.hosts[node_id].node
            if not node.quiescent:
                node.tick()
                self._after(self.hosts[node_id])

    def _leader(self) -> ReplicaHost | None:
        best: ReplicaHost | None = None
        for node_id in sorted(self.up):
            host = self.hosts[node_id]
            if host.node.role is Role.LEADER and (best is None or host.node.term > best.node.term):
                best = host
        return best

    # --- faults and client actions -----------------------------------------------------------------------

    def _faults(self) -> None:
        p = self.params
        rng = self.rng
        if p.crash and rng.random() < p.crash and self.up:
            self._crash(rng.choice(sorted(self.up)))
        down = sorted(set(self.hosts) - self.up)
        if down and rng.random() < p.restart:
            self._start(rng.choice(down))
        if p.partition and rng.random() < p.partition:
            ids = sorted(self.hosts)
            side = {i for i in ids if rng.random() < 0.5}
            self.blocked = {(a, b) for a in ids for b in ids if (a in side) != (b in side)}
            self.stats["partitions"] += 1
            self._note(f"partition {sorted(side)} | {sorted(set(ids) - side)}")
            for node_id in sorted(self.up):
                node = self.hosts[node_id].node
                if node.leader_id and (node_id, node.leader_id) in self.blocked:
                    node.wake()
        if self.blocked and rng.random() < p.heal:
            self.blocked = set()
            self.stats["heals"] += 1
            self._note("heal")
        if p.spurious_wake and rng.random() < p.spurious_wake and self.up:
            self.hosts[rng.choice(sorted(self.up))].node.wake()

    def _client(self) -> None:
        p = self.params
        rng = self.rng
        leader = self._leader()
        if leader is None:
            return
        node = leader.node
        if rng.random() < p.propose:
            for _ in range(rng.choice((1, 1, 2, 5))):
                self.next_payload += 1
                payload = self.make_payload(f"s{self.seed}-p{self.next_payload}".encode())
                try:
                    index = node.propose(payload)
                except (NotLeader, ProposalDropped):
                    break
                self.proposals[(leader.id, index)] = _Proposal(
                    leader.id, self.incarnation[leader.id], index, node.term, payload
                )
                self._after(leader)
        if p.membership and rng.random() < p.membership:
            self._membership(leader)
        if p.transfer and rng.random() < p.transfer:
            voters = sorted(node.conf_state.voters)
            try:
                node.transfer_leader(rng.choice(voters))
            except (InvalidRequestError, NotLeader):
                pass
            self._note(f"transfer requested on {leader.id}")
            self.stats["transfers"] += 1
        if p.read and rng.random() < p.read:
            reader = rng.choice(sorted(self.up))
            context = f"r{self.seq}-{self.now}-{reader}".encode()
            self.seq += 1
            try:
                self.hosts[reader].node.read_index(context)
            except NotLeader:
                return
            self.reads[context] = self.checker.max_committed

    def _membership(self, leader: ReplicaHost) -> None:
        rng = self.rng
        conf = leader.node.conf_state
        if conf.joint:
            return
        voters, learners = list(conf.voters), list(conf.learners)
        new_ids = [i for i in range(1, MAX_NODE_ID + 1) if i not in self.hosts]
        options: list[tuple[str, ConfChange]] = []
        if new_ids:
            options.append(("add learner", ConfChange.add_learner(new_ids[0])))
        if learners:
            options.append(("promote", ConfChange.add_voter(rng.choice(learners))))
            options.append(("remove learner", ConfChange.remove_node(rng.choice(learners))))
        self.lost_disks = {i for i in self.lost_disks if i not in self.up or self.hosts[i].node.recovering_until}
        # A group of two voters, one of them rebuilding a lost disk, cannot elect: that one never knows whether
        # the other holds what it lost (docs/reliability.md). The operator shrinks such a group no further.
        if len(voters) > (3 if self.lost_disks else 1):
            options.append(("remove voter", ConfChange.remove_node(rng.choice(voters))))
            options.append(("demote", ConfChange.add_learner(rng.choice(voters))))
        if len(voters) < 3 and new_ids:
            options.append(("add voter", ConfChange.add_voter(new_ids[0])))
        if learners and voters:
            out, into = rng.choice(voters), rng.choice(learners)
            options.append(
                (
                    "replace",
                    ConfChange(
                        (
                            ConfChangeSingle(ConfChangeType.REMOVE_NODE, out),
                            ConfChangeSingle(ConfChangeType.ADD_VOTER, into),
                        )
                    ),
                )
            )
        if not options:
            return
        what, change = rng.choice(options)
        try:
            leader.node.propose_conf_change(change)
        except (ConfChangePending, InvalidConfChangeError, ProposalDropped, NotLeader):
            return
        self._note(f"membership {what}: {change}")
        self.removed.update(c.node_id for c in change.changes if c.type is ConfChangeType.REMOVE_NODE)
        self.stats[f"membership {what}"] += 1
        for single in change.changes:
            if single.node_id not in self.hosts:
                self.disks[single.node_id] = self.new_disk(single.node_id, None)
                self._start(single.node_id)

    def _snapshots(self) -> None:
        p = self.params
        if p.snapshot and self.rng.random() < p.snapshot and self.up:
            host = self.hosts[self.rng.choice(sorted(self.up))]
            if host.snapshot_and_compact(keep=self.rng.randint(0, 4)):
                self._note(f"snapshot on {host.id} at {host.state.applied_index}")

    def _check_reads(self) -> None:
        for host_id in sorted(self.up):
            host = self.hosts[host_id]
            while host.read_states:
                index, context = host.read_states.pop()
                floor = self.reads.pop(context, None)
                self.stats["reads served"] += 1
                if floor is not None and index < floor:
                    self.checker.fail(f"read {context!r} on {host_id} got index {index} < committed {floor}")

    # --- the run -----------------------------------------------------------------------------------------

    def close(self) -> None:
        for disk in self.disks.values():
            disk.close()

    def run(self) -> SimResult:
        p = self.params
        self.stats["schedules"] += 1
        for _ in range(p.ticks):
            self._faults()
            self._client()
            self._snapshots()
            self._tick()
            self._settle()
            self._check_reads()
        self._check_liveness()
        return SimResult(
            self.seed,
            self.stats,
            p,
            self.checker.max_committed,
            len(self.acked),
            len(self.checker.leaders),
            self.liveness_ticks,
            self.steps,
        )

    def _collect_removed_replicas(self) -> None:
        """Stop replicas removed from the group once every remaining voter has applied their removal.

        This is what the runtime's replica GC does. Earlier, the removed replica may still be needed (a voter
        that has not applied the change still counts it); later, without PreVote and CheckQuorum, a removed
        replica that never learned of its removal would disrupt every election.
        """
        latest = max((self.hosts[i] for i in self.up), key=lambda h: (h.node.status().applied, h.id))
        conf = latest.node.conf_state
        if conf.joint:
            return
        members = conf.members()
        for node_id in sorted((self.up & self.removed) - members):
            if all(node_id not in self.hosts[v].node.conf_state.members() for v in conf.voters if v in self.up):
                self.up.discard(node_id)
                self._note(f"replica {node_id} garbage-collected")

    def _check_liveness(self) -> None:
        self.blocked = set()
        self.params.drop = 0.0
        self.params.duplicate = 0.0
        self.params.slow_persist = 0.0
        for node_id in sorted(set(self.hosts) - self.up):
            self._start(node_id)
        for node_id in sorted(self.up):
            self.hosts[node_id].node.wake()
        self._note("liveness phase")
        self._settle()
        marker: tuple[int, int, bytes] | None = None
        for elapsed in range(1, LIVENESS_TICKS + 1):
            self._collect_removed_replicas()
            self._tick()
            self._settle()
            leader = self._leader()
            if leader is None:
                continue
            if marker is None or marker[0] != leader.id:
                payload = self.make_payload(f"s{self.seed}-liveness-{elapsed}".encode())
                try:
                    marker = (leader.id, leader.node.propose(payload), payload)
                except (NotLeader, ProposalDropped):
                    marker = None
                continue
            voters = leader.node.conf_state.voters
            index = marker[1]
            # Committed, and applied by a majority of voters (a newcomer may still be catching up slowly).
            applied = sum(1 for v in voters if v in self.up and self.hosts[v].state.applied_index >= index)
            if leader.state.applied_index >= index and applied > len(voters) // 2:
                self.liveness_ticks = elapsed
                self.stats["leaders elected"] += len(self.checker.leaders)
                self.stats["acknowledged writes"] += len(self.acked)
                state = set(leader.state.payloads)
                lost = [i for i, payload in self.acked.items() if payload not in state]
                if lost:
                    self.checker.fail(f"acknowledged writes lost at indexes {sorted(lost)[:10]}")
                return
        self.checker.fail(f"liveness: no leader committed a proposal within {LIVENESS_TICKS} ticks after healing")


def replay_hint(seed: int) -> str:
    return (
        f"replay with: RAFT_SIM_SEED={seed} RAFT_SIM_TRACE=1 .venv/bin/python -m pytest "
        f"tests/raft/test_simulation.py::test_replay_one_seed -s"
    )


def run_seed(seed: int, *, trace: bool | None = None) -> SimResult:
    """Run one seed; on a violation, re-raise with the seed, the replay command and (if tracing) the trace."""
    if trace is None:
        trace = os.environ.get("RAFT_SIM_TRACE") == "1"
    sim = Simulation(seed, trace=trace)
    try:
        return sim.run()
    except AssertionError as exc:
        if trace:
            sys.stderr.write("\n".join(sim.trace) + "\n")
        raise AssertionError(f"seed {seed} ({sim.params}): {exc}\n{replay_hint(seed)}") from exc
