"""Seeded random schedules over a simulated network, with Raft's safety properties checked after every step.

One seed fixes everything: cluster size, fault rates, timings, and every choice of the schedule (which message
is delivered next, which node crashes, when a Ready is persisted). Replaying a seed replays the run exactly.

Faults: message drops, duplicates, delays and reordering; partitions and healing; crashes that lose whatever a
node had taken from ready() but not yet persisted, and whatever it persisted without syncing (a Ready without
``must_sync``: a new commit index) unless a later sync covered it; crashes that also lose a durable suffix of
the log, committed entries included (a damaged disk cut back to its last good entry: the node restarts with
``recover_until`` set to its former last entry, as the runtime's repair does, until its durable log is back);
restarts from durable storage (each node's ``Disk``, in ``sim_params.py``: :class:`CrashableMemoryStorage` here,
real LMDB files in ``tests/node``); snapshots and log compaction; configuration changes (learners, promotions,
removals including the leader's, joint replacements); leadership transfers; linearizable reads. The simulated
runtime calls ``wake()`` on groups whose leader crashed or became unreachable, as the node runtime will do when
SWIM reports it,
and never ticks a quiescent group.

Checked after every step (``InvariantChecker``, in ``sim_checker.py``): election safety, log matching, leader
completeness, commit consistency, state machine safety and read safety.

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
from dataclasses import dataclass

from multiraft.raft import (
    UNKNOWN_VOTE,
    ConfState,
    Entry,
    HardState,
    Message,
    MessageType,
    NotLeader,
    ProposalDropped,
    Ready,
    Role,
    Snapshot,
)

from .harness import ReplicaHost, describe, make_config
from .sim_checker import InvariantChecker, InvariantViolationError
from .sim_client import SimClient
from .sim_network import SimNetwork
from .sim_params import Disk, DiskFactory, MemoryDisk, SimParams

LIVENESS_TICKS = 400


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
    """One seeded run: the nodes, their disks, crashes and restarts, and the schedule. Its network
    (:class:`SimNetwork`) and client (:class:`SimClient`) draw from its generator, in its order; its checker
    (:class:`InvariantChecker`) sees every step. ``disk`` makes each node's storage; ``payload`` turns a client
    payload into what is proposed (the LMDB adapter needs record batches)."""

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
        start_elections: bool = False,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.params = params or SimParams.random(self.rng)
        self.checker = InvariantChecker()
        self.now = 0
        self.steps = 0
        self.stats: Counter[str] = Counter()
        self.net = SimNetwork(self.rng, self.params, self.stats, self._lost)
        self.client = SimClient(self)
        self.hosts: dict[int, ReplicaHost] = {}
        self.new_disk = disk
        self.make_payload = payload
        self.disks: dict[int, Disk] = {}
        self.incarnation: dict[int, int] = {}
        self.persist_at: dict[int, int] = {}
        self.up: set[int] = set()
        self.trace_enabled = trace
        self.trace: deque[str] = deque(maxlen=400)
        self.liveness_ticks = -1
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
        # With start_elections, the runtime's start-up elections (multiraft.node.scheduler.startup_elections): a
        # restarted
        # replica may hold off its campaign, or campaign at once. Their own generator: other draws stay as they were.
        self.start_rng = random.Random(seed * 7907 + 23) if start_elections else None
        self.place_back_rng = random.Random(seed * 7919 + 29)  # removed nodes added back (SimClient._place_back)
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
        start = self.start_rng
        if start is not None and self.incarnation[node_id] > 1 and start.random() < 0.5:
            if start.random() < 0.7:
                host.node.delay_election(start.randrange(1, 4 * p.election_tick))
                self.stats["restarts delaying their election"] += 1
            else:
                host.node.campaign()
                self.stats["restarts campaigning at once"] += 1
        self.up.add(node_id)
        self.checker.reset_node(node_id)
        self.note(f"start {node_id} (incarnation {self.incarnation[node_id]})")

    def add_node(self, node_id: int) -> None:
        """A node a configuration change adds: it starts on an empty disk."""
        self.disks[node_id] = self.new_disk(node_id, None)
        self._start(node_id)

    def place_back(self, node_id: int) -> None:
        """A removed node is added back: the runtime dropped its old replica and starts a new one on an empty disk,
        in the highest term the node reached, its vote unknown (multiraft.node.scheduler.term_guard). A replica that
        applied its own removal was released and is an ordinary new replica; one whose removal never reached it
        is rebuilt as a lost log (it neither votes nor campaigns until it holds an entry of a later term)."""
        old = self.hosts[node_id]
        released = node_id not in old.node.conf_state.members()
        floor = self.max_term.get(node_id, 0)
        self.up.discard(node_id)
        self.persist_at.pop(node_id, None)
        fresh = self.new_disk(node_id, None)
        fresh.storage.set_hard_state(HardState(floor, UNKNOWN_VOTE, 0))
        fresh.sync()
        self.disks[node_id].close()
        self.disks[node_id] = fresh
        if released:
            self.recover_until.pop(node_id, None)
            self.stats["placed back released"] += 1
        else:
            self.recover_until[node_id] = (1, floor + 1)
            self.lost_disks.add(node_id)
            self.stats["placed back as a lost log"] += 1
        self.note(f"place back {node_id} ({'released' if released else 'as a lost log'}, recorded term {floor})")
        for other in self.up:
            if self.hosts[other].node.leader_id == node_id:
                self.hosts[other].node.wake()
        self._start(node_id)

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
                self.note(f"{node_id} lost entries {keep + 1}..{before[0]}")
        self.note(f"crash {node_id}")
        for other in self.up:
            if self.hosts[other].node.leader_id == node_id:
                self.hosts[other].node.wake()  # the runtime learns of the death from SWIM

    def _replace_disk(self, node_id: int) -> None:
        """The node's store is lost: it starts from a fresh one (bootstrapped, as the runtime does for an initial
        member) in the highest term it reached, its vote unknown, recovering until it holds an entry of a later
        term (multiraft.node.scheduler.term_guard)."""
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
        self.note(f"crash {node_id}, losing its whole disk (recorded term {floor})")
        for other in self.up:
            if self.hosts[other].node.leader_id == node_id:
                self.hosts[other].node.wake()

    def _may_lose_disk(self, node_id: int) -> bool:
        """As :meth:`_may_damage`, and every replica counts three voters or more: a group of two cannot elect
        while one of them rebuilds a lost disk (see :meth:`SimClient.change_configuration`)."""
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
        self.client.on_apply(host, entry)

    def on_snapshot_installed(self, host: ReplicaHost, snapshot: Snapshot, chain: int) -> None:
        self.stats["snapshots installed"] += 1
        self.checker.on_snapshot_installed(host, snapshot, chain)

    # --- network -----------------------------------------------------------------------------------------

    def _deliver(self, position: int) -> None:
        m = self.net.take(position, self.now, self.up)
        if m is None:
            return
        if m.quiesce:
            self.stats["quiesce heartbeats"] += 1
        host = self.hosts[m.to]
        if self.trace_enabled:
            self.note(f"deliver {describe(m)}")
        host.node.step(m)
        self.after_step(host)
        if m.type is MessageType.SNAP and m.sender in self.up:
            self.hosts[m.sender].node.report_snapshot(m.to, True)

    def _lost(self, m: Message) -> None:
        # The runtime sends snapshots out of band and reports the outcome; a lost one is a failure.
        if m.type is MessageType.SNAP and m.sender in self.up:
            self.hosts[m.sender].node.report_snapshot(m.to, False)

    def after_step(self, host: ReplicaHost) -> None:
        self.steps += 1
        self.checker.after_step(host)

    def note(self, text: str) -> None:
        if self.trace_enabled:
            self.trace.append(f"t={self.now} {text}")

    # --- one tick ----------------------------------------------------------------------------------------

    def _settle(self, budget: int = 50_000) -> None:
        rng = self.rng
        hosts = self.hosts
        for _ in range(budget):
            deliverable = self.net.deliverable(self.now)
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
                self.net.send(out, self.now)
                self.after_step(host)
            else:
                node_id = rng.choice(persist)
                host = hosts[node_id]
                out = host.persist()
                self.net.send(out, self.now)
                self.after_step(host)
        raise InvariantViolationError(f"livelock: the cluster did not settle within {budget} steps at tick {self.now}")

    def _tick(self) -> None:
        self.now += 1
        for node_id in sorted(self.up):
            node = self.hosts[node_id].node
            if not node.quiescent:
                node.tick()
                self.after_step(self.hosts[node_id])

    def _leader(self) -> ReplicaHost | None:
        best: ReplicaHost | None = None
        for node_id in sorted(self.up):
            host = self.hosts[node_id]
            if host.node.role is Role.LEADER and (best is None or host.node.term > best.node.term):
                best = host
        return best

    # --- faults and snapshots (the client's actions are SimClient's) -------------------------------------

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
            self.net.blocked = {(a, b) for a in ids for b in ids if (a in side) != (b in side)}
            self.stats["partitions"] += 1
            self.note(f"partition {sorted(side)} | {sorted(set(ids) - side)}")
            for node_id in sorted(self.up):
                node = self.hosts[node_id].node
                if node.leader_id and (node_id, node.leader_id) in self.net.blocked:
                    node.wake()
        if self.net.blocked and rng.random() < p.heal:
            self.net.blocked = set()
            self.stats["heals"] += 1
            self.note("heal")
        if p.spurious_wake and rng.random() < p.spurious_wake and self.up:
            self.hosts[rng.choice(sorted(self.up))].node.wake()

    def _snapshots(self) -> None:
        p = self.params
        if p.snapshot and self.rng.random() < p.snapshot and self.up:
            host = self.hosts[self.rng.choice(sorted(self.up))]
            if host.snapshot_and_compact(keep=self.rng.randint(0, 4)):
                self.note(f"snapshot on {host.id} at {host.state.applied_index}")

    # --- the run -----------------------------------------------------------------------------------------

    def close(self) -> None:
        for disk in self.disks.values():
            disk.close()

    def run(self) -> SimResult:
        p = self.params
        self.stats["schedules"] += 1
        for _ in range(p.ticks):
            self._faults()
            leader = self._leader()
            if leader is not None:
                self.client.act(leader)
            self._snapshots()
            self._tick()
            self._settle()
            self.client.check_reads()
        self._check_liveness()
        return SimResult(
            self.seed,
            self.stats,
            p,
            self.checker.max_committed,
            len(self.client.acked),
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
        for node_id in sorted((self.up & self.client.removed) - members):
            if all(node_id not in self.hosts[v].node.conf_state.members() for v in conf.voters if v in self.up):
                self.up.discard(node_id)
                self.note(f"replica {node_id} garbage-collected")

    def _check_liveness(self) -> None:
        self.net.blocked = set()
        self.params.drop = 0.0
        self.params.duplicate = 0.0
        self.params.slow_persist = 0.0
        for node_id in sorted(set(self.hosts) - self.up):
            self._start(node_id)
        for node_id in sorted(self.up):
            self.hosts[node_id].node.wake()
        self.note("liveness phase")
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
                self.stats["acknowledged writes"] += len(self.client.acked)
                state = set(leader.state.payloads)
                lost = [i for i, payload in self.client.acked.items() if payload not in state]
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
    sim = Simulation(seed, trace=trace, start_elections=True)
    try:
        return sim.run()
    except AssertionError as exc:
        if trace:
            sys.stderr.write("\n".join(sim.trace) + "\n")
        raise AssertionError(f"seed {seed} ({sim.params}): {exc}\n{replay_hint(seed)}") from exc
