"""The controller leader's healing and balancing loop, driven by the member-list (event loop).

Every ``rebalance_interval_ms`` the node that leads the controller group:

1. advances each replica move in flight by one step (:func:`multiraft.controller.replica_move_step`): the new
   replica is added as a learner; it is promoted to voter only once its leader reports it caught up; then the
   replica it replaces is removed. Each step is a conditional ``SetPartitionReplicas``, so a step planned
   from a stale view fails (ASSIGNMENT_CHANGED) instead of undoing someone else's change;
2. picks up moves it did not start (a learner left by a previous controller leader, or a partition with more
   voters than its replication factor after a move was cut short) and finishes them, except a learner on a
   node that has died or is draining, which is dropped: a draining node is given no new replica, and a move
   towards a node that starts draining is aborted while its replica is still a learner;
3. plans new moves while fewer than ``max_concurrent_moves`` are in flight, at most one per partition:
   first replacements for replicas on nodes the member-list has declared dead (or that left) for
   ``replica_replace_after_ms`` (:func:`~multiraft.controller.plan_repair`), then moves off draining nodes
   and towards even replica counts (:func:`~multiraft.controller.plan_rebalance`);
A move that shows no progress for ``move_stall_s`` (its learner neither copies nor catches up, say because
its leader reports nothing of it) is aborted, its learner dropped, and its partition left out of planning
for as long again: a stuck move must not hold one of the ``max_concurrent_moves`` slots forever.

4. once nothing is moving, spreads preferred leaders (:func:`~multiraft.controller.plan_preferred_leaders`);
   partition leaders then hand leadership to them (``PartitionMachine`` housekeeping).

Placement is pure (``multiraft.controller.placement``); this module only feeds it the member-list's view
and turns plans into commands. Moves live in memory: a new controller leader rebuilds them from the state
(step 2), so nothing is lost when the controller fails over mid-move.

Only the controller leader plans or drives a move, and a node that stops leading stops at once: a round
checks before each planning step and each command that its node still leads (as the loop has learnt it) and
that it has led without a break since the round began; a change of controller leader cancels a round in
flight (:meth:`Rebalancer.controller_leader_changed`), and the moves in memory are dropped, for the next
leader to rebuild. The commands go to this node's own controller replica only (:class:`OwnController`),
which refuses them unless its Raft group leads (the scheduler thread's view, ahead of the loop's): they are
never forwarded, so a node that has just lost the controller cannot act for the one that leads now.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from multiraft import controller as ctl
from multiraft.errors import MultiraftError, NotLeaderError
from multiraft.logging import get_logger
from multiraft.node.protocols import ClusterView, ControllerClient, Liveness, PartitionStatusSource
from multiraft.node.replicas.capacity import RoomLedger
from multiraft.node.threads import LoopOwned
from multiraft.node.vocabulary.controller import ControllerBody, ControllerOutcome, ControllerRequest
from multiraft.node.vocabulary.status import PartitionStatus

__all__ = [
    "Rebalancer",
    "RebalanceSettings",
    "MoveProgress",
    "OwnController",
    "CAUGHT_UP_ENTRIES",
    "MOVE_STALL_S",
]

log = get_logger(__name__)

CAUGHT_UP_ENTRIES = 64
"""A learner this close to its leader's last index is promoted: the rest arrives within a heartbeat or two,
and producers keep the tail moving, so waiting for exactly zero could wait forever under load."""
_PREFERRED_CHANGES_PER_ROUND = 8
MOVE_STALL_S = 120.0
"""A move whose learner shows no progress this long is aborted and its partition planned again later. A copy
reports its bytes every chunk and a catching-up learner's lag shrinks, so only a move that is stuck waits
this long (a copy resumes after a dropped connection within seconds)."""


_PHASE_RANK = {"adding": 0, "copying": 1, "catching_up": 2, "promoting": 3, "removing": 4}


@dataclass
class MoveProgress:
    """One replica move in flight, as ``multiraft status`` shows it."""

    move: ctl.ReplicaMove
    group_id: int
    started: float = field(default_factory=time.monotonic)
    phase: str = "adding"  # adding, copying, catching_up, promoting, removing
    bytes_copied: int = 0
    bytes_total: int = 0
    eta_seconds: float = 0.0
    progressed_at: float = field(default_factory=time.monotonic)  # last time the learner got anywhere
    _best: tuple[int, int, int] = (0, 0, -(2**62))  # (phase rank, bytes copied, -lag) at progressed_at

    def note(self, lag: int | None, now: float) -> None:
        """Record where the move is; a further phase, more bytes copied or a smaller lag is progress."""
        mark = (_PHASE_RANK.get(self.phase, 0), self.bytes_copied, -lag if lag is not None else -(2**62))
        if mark > self._best:
            self._best, self.progressed_at = mark, now

    def sample(self, copied: int, total: int) -> None:
        self.bytes_copied, self.bytes_total = max(0, copied), max(0, total)
        elapsed = time.monotonic() - self.started
        rate = self.bytes_copied / elapsed if elapsed > 0 else 0.0
        remaining = max(0, self.bytes_total - self.bytes_copied)
        self.eta_seconds = remaining / rate if rate > 0 else 0.0


@dataclass(frozen=True, slots=True)
class RebalanceSettings:
    """The node config fields rebalancing uses (``NodeConfig``: units and defaults there)."""

    rebalance_interval_ms: int
    replica_replace_after_ms: int
    max_concurrent_moves: int
    move_stall_s: float = MOVE_STALL_S


class OwnController(LoopOwned):
    """The rebalancer's ``ControllerClient``: runs a command on this node's own controller replica, which
    answers NotLeaderError unless its Raft group leads. Never forwarded: a peer may not ask the leader for
    ``SetPartitionReplicas``, and a node that no longer leads must not act for the one that does."""

    def __init__(self, local: Callable[[ControllerRequest, float], Awaitable[object]]) -> None:
        self._local = local

    async def call(self, body: ControllerBody, *, timeout_s: float = 5.0) -> ControllerOutcome:
        return ControllerOutcome.of(await self._local(ControllerRequest(body), timeout_s))


class _NotLeadingError(Exception):
    """This node stopped leading the controller (or lost and regained it) since the round began."""


def _takes_replicas(state: ctl.ClusterState, node_id: int) -> bool:
    """Whether ``node_id`` may be given a new replica: registered and active (not draining, not removed)."""
    node = state.nodes.get(node_id)
    return node is not None and node.state is ctl.NodeState.ACTIVE


class Rebalancer(LoopOwned):
    """See the module docstring. ``run()`` is a task of the node; it acts only on the controller leader."""

    def __init__(
        self,
        settings: RebalanceSettings,
        cluster: ClusterView,
        liveness: Liveness,
        status: PartitionStatusSource,
        controller: ControllerClient,
        room: RoomLedger | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.room = room  # what each node can still store: no replica moves to a node without room
        self._cluster = cluster
        self._liveness = liveness
        self._status = status
        self._controller = controller
        self.moves: dict[int, MoveProgress] = {}  # group id -> move
        self._clock = clock
        self._stalled_until: dict[int, float] = {}  # group id -> when a stalled move's partition may move again
        self._changes = 0  # controller leader changes seen (controller_leader_changed): a round's tenure
        self._round: asyncio.Task[None] | None = None  # the round in flight, cancelled when leadership goes
        # What the last idle round looked at (the state by identity, the rest by value), per step: planning
        # is pure, so the same inputs plan nothing again, and 10,000 partitions cost a walk each per round.
        self._idle: dict[str, tuple[ctl.ClusterState, object]] = {}

    def _unchanged(self, step: str, state: ctl.ClusterState, inputs: object) -> bool:
        """True if ``step`` found nothing to do in a round with this very state and these inputs."""
        last = self._idle.get(step)
        return last is not None and last[0] is state and last[1] == inputs

    def _note(self, step: str, state: ctl.ClusterState, inputs: object, idle: bool) -> None:
        if idle:
            self._idle[step] = (state, inputs)
        else:
            self._idle.pop(step, None)

    async def run(self) -> None:
        interval = self.settings.rebalance_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await self.round()
            except MultiraftError as exc:
                # The controller timed out mid-round: the next round starts from the state.
                log.info("rebalancing round cut short", error=str(exc))
            except Exception:
                log.exception("rebalancing round failed")

    # ---------------------------------------------------------------------------------- leading or not

    def controller_leader_changed(self, leader_id: int) -> None:
        """The loop learnt a new controller leader (``Directory.on_controller_leader``): a round in flight
        began under another, so it stops at once; a node that does not lead drops its moves."""
        self._changes += 1
        round_ = self._round
        if round_ is not None and not round_.done():
            round_.cancel()
        if leader_id != self._cluster.node_id:
            self._step_down()

    def _leading(self) -> bool:
        return self._cluster.controller_leader == self._cluster.node_id

    def _check_leading(self, tenure: int) -> None:
        """Raise _NotLeadingError unless this node has led the controller without a break since ``tenure``."""
        if not self._leading() or self._changes != tenure:
            raise _NotLeadingError

    def _step_down(self) -> None:
        """Forget the moves in flight: the next controller leader rebuilds them from the state."""
        if self.moves:
            log.info("not the controller leader; its replica moves are left to the next one", moves=len(self.moves))
        self.moves.clear()
        self._idle.clear()

    # ----------------------------------------------------------------------------------------- a round

    async def round(self) -> None:
        """One round, on the controller leader only; cut short (its moves dropped) when leadership goes."""
        if not self._leading():
            self._step_down()
            return
        task = self._round = asyncio.get_running_loop().create_task(self._lead(self._changes))
        try:
            await asyncio.wait((task,))
        finally:
            if not task.done():
                task.cancel()  # this round's caller was cancelled (the node stops)
            self._round = None
        if task.cancelled():
            return  # leadership changed mid-round (controller_leader_changed dropped the moves if it went)
        try:
            task.result()
        except _NotLeadingError:
            self._step_down()

    async def _lead(self, tenure: int) -> None:
        view = self._cluster
        state = view.cluster
        dead = self.dead_nodes(state)
        live_active = [n for n in state.nodes_in_state(ctl.NodeState.ACTIVE) if self._liveness.is_live(n.node_id)]
        await self._advance(state, dead, tenure)
        state = view.cluster
        await self._adopt(state, dead, tenure)
        self._check_leading(tenure)
        state = view.cluster
        self._plan(state, dead, live_active)
        if self.moves:
            await self._advance(view.cluster, dead, tenure)
        elif not self._any_learners(view.cluster):
            await self._balance_preferred_leaders(view.cluster, live_active, tenure)

    def _any_learners(self, state: ctl.ClusterState) -> bool:
        if self._unchanged("learners", state, None):
            return False
        found = any(p.learners for p in state.groups().values())
        self._note("learners", state, None, not found)
        return found

    def dead_nodes(self, state: ctl.ClusterState) -> set[int]:
        """Registered nodes the member-list has declared dead, or seen leave, at least replace_after ago."""
        after = self.settings.replica_replace_after_ms / 1000
        dead = set()
        for node_id in state.nodes:
            gone = self._liveness.gone_for(node_id)
            if gone is not None and gone >= after:
                dead.add(node_id)
        return dead

    def _plan(self, state: ctl.ClusterState, dead: set[int], live_active: list[ctl.NodeInfo]) -> None:
        budget = self.settings.max_concurrent_moves - len(self.moves)
        if budget <= 0:
            return
        room: dict[int, ctl.NodeRoom] | None = None
        stranded: dict[int, tuple[int, ...]] | None = None
        if self.room is not None:  # no replica goes to a node whose room is unknown (or short)
            room = self.room.room(state, [n.node_id for n in live_active])
            stranded = self.room.stranded()
        now = self._clock()
        for group_id in [g for g, until in self._stalled_until.items() if until <= now]:
            del self._stalled_until[group_id]
        suspect = any(self._liveness.is_suspect(n) for n in state.nodes)
        inputs = (dead, live_active, room, stranded, set(self._stalled_until), set(self.moves), suspect)
        if self._unchanged("plan", state, inputs):
            return
        busy = set(self.moves) | set(self._stalled_until) | {p.group_id for p in state.groups().values() if p.learners}
        planned: list[ctl.ReplicaMove] = []
        for move in ctl.plan_repair(state, dead, live_active, room, stranded):
            group_id = state.partition(move.topic, move.partition).group_id
            if group_id not in busy and len(planned) < budget:
                planned.append(move)
                busy.add(group_id)
        if len(planned) < budget and not suspect:
            # Balancing waits while a node is suspect: its replicas may be about to need repair instead.
            for move in ctl.plan_rebalance(state, live_active, budget - len(planned), room):
                group_id = state.partition(move.topic, move.partition).group_id
                if group_id not in busy:
                    planned.append(move)
                    busy.add(group_id)
        self._note("plan", state, inputs, not planned)
        for move in planned:
            group_id = state.partition(move.topic, move.partition).group_id
            self.moves[group_id] = MoveProgress(move, group_id, progressed_at=self._clock())
            log.info(
                "replica move planned",
                topic=move.topic,
                partition=move.partition,
                from_node=move.from_node or 0,
                to_node=move.to_node,
                replaces=move.replaces or 0,
                reason="repair" if move.from_node is None else "rebalance",
            )

    async def _adopt(self, state: ctl.ClusterState, dead: set[int], tenure: int) -> None:
        """Finish what a previous controller leader (or a cut-short move) left half done."""
        self._check_leading(tenure)
        inputs = (set(self.moves), dead)
        if self._unchanged("adopt", state, inputs):
            return
        adopted = False
        for p in state.groups().values():
            if p.group_id in self.moves:
                continue
            if p.learners:
                learner = p.learners[0]
                if learner in dead or not _takes_replicas(state, learner):
                    # Left by a previous leader towards a node that has since died or started draining: not a
                    # move to finish; the learner is dropped and the partition planned again.
                    adopted = True
                    learners = tuple(n for n in p.learners if n != learner)
                    await self._propose(
                        ctl.SetPartitionReplicas(
                            p.topic, p.partition, p.replicas, learners, p.preferred_leader, p.replicas, p.learners
                        ),
                        tenure,
                    )
                    log.info("dropped a learner left on a node that takes no replicas", topic=p.topic,
                             partition=p.partition, node=learner)  # fmt: skip
                    continue
                leaving = self._excess_replica(state, p, dead, exclude=learner)
                move = ctl.ReplicaMove(p.topic, p.partition, leaving, learner)
                self.moves[p.group_id] = MoveProgress(move, p.group_id, progressed_at=self._clock())
                log.info("adopted a replica move in flight", topic=p.topic, partition=p.partition, to_node=learner)
                adopted = True
                continue
            wanted = state.topics[p.topic].replication_factor
            if len(p.replicas) > wanted:
                leaving = self._excess_replica(state, p, dead)
                if leaving is not None:
                    keep = tuple(r for r in p.replicas if r != leaving)
                    preferred = p.preferred_leader if p.preferred_leader in keep else keep[0]
                    adopted = True
                    await self._propose(
                        ctl.SetPartitionReplicas(
                            p.topic, p.partition, keep, p.learners, preferred, p.replicas, p.learners
                        ),
                        tenure,
                    )
        self._note("adopt", state, inputs, not adopted)

    def _excess_replica(
        self, state: ctl.ClusterState, p: ctl.PartitionState, dead: set[int], exclude: int | None = None
    ) -> int | None:
        """Which replica to drop when a partition has one too many: dead, then draining, then the busiest."""
        wanted = state.topics[p.topic].replication_factor
        if len(p.replicas) + (1 if exclude is not None else 0) <= wanted:
            return None
        counts = state.replica_counts()

        def rank(n: int) -> tuple[int, int, int, int]:
            node = state.nodes.get(n)
            draining = node is not None and node.state is not ctl.NodeState.ACTIVE
            return (n not in dead, not draining, -counts.get(n, 0), n)

        candidates = [r for r in p.replicas if r != exclude]
        return min(candidates, key=rank) if candidates else None

    async def _advance(self, state: ctl.ClusterState, dead: set[int], tenure: int) -> None:
        if not self.moves:
            return
        groups = [p for p in (state.group(g) for g in self.moves) if p is not None]
        status = await self._status.partition_status(groups)
        self._check_leading(tenure)
        for group_id, progress in list(self.moves.items()):
            move = progress.move
            p = state.group(group_id)
            if p is None:
                del self.moves[group_id]  # the topic was deleted
                continue
            if move.to_node in dead or move.to_node not in state.nodes:
                await self._abort(p, progress, tenure)
                continue
            if not _takes_replicas(state, move.to_node) and move.to_node not in p.replicas:
                # A draining node gets no new replica: a move towards it that is not yet a voter is undone
                # (else the drain waits for it, and its replicas then have to move off again).
                await self._abort(p, progress, tenure, "target node is draining")
                continue
            step = ctl.replica_move_step(state, move)
            if step is None:
                del self.moves[group_id]
                log.info(
                    "replica move done",
                    topic=move.topic,
                    partition=move.partition,
                    to_node=move.to_node,
                    seconds=round(time.monotonic() - progress.started, 2),
                )
                continue
            if move.to_node in p.learners:
                found = status.get(group_id)
                caught_up = self._caught_up(progress, found)
                progress.note(found.lag.get(move.to_node) if found is not None else None, self._clock())
                if not caught_up:
                    if self._clock() - progress.progressed_at >= self.settings.move_stall_s:
                        await self._abort(p, progress, tenure, "no progress for move_stall_s")
                        self._stalled_until[group_id] = self._clock() + self.settings.move_stall_s
                    continue
                progress.phase = "promoting"
            elif move.to_node in p.replicas:
                progress.phase = "removing"
            else:
                progress.phase = "adding"
            if not await self._propose(step, tenure):
                del self.moves[group_id]  # lost a race with another change: replanned from the new state

    def _caught_up(self, progress: MoveProgress, status: PartitionStatus | None) -> bool:
        """Update the move's copy progress from its leader's report; True once the learner is caught up."""
        to_node = progress.move.to_node
        if status is None:
            progress.phase = "adding"  # no leader answered: nothing is known of the learner yet
            return False
        copy = status.copies.get(to_node)  # segment copy progress, when the leader reports one
        if copy is not None:
            progress.phase = "copying"
            progress.sample(copy[0], copy[1])
            return False
        lag = status.lag.get(to_node)
        if lag is None:
            progress.phase = "adding"  # the leader has not added it to the group yet
            return False
        entries = max(1, status.entries)
        behind = min(lag, entries)
        progress.sample(int(status.size_bytes * (entries - behind) / entries), status.size_bytes)
        progress.phase = "catching_up"
        acked = to_node in status.acked or status.entries == 0
        return acked and lag <= CAUGHT_UP_ENTRIES and status.leader != 0

    async def _abort(
        self, p: ctl.PartitionState, progress: MoveProgress, tenure: int, reason: str = "target node is gone"
    ) -> None:
        """The node a replica was moving to died, or the move is stuck: drop it as a learner; the move is
        replanned."""
        del self.moves[p.group_id]
        to_node = progress.move.to_node
        log.warning(
            "replica move aborted",
            reason=reason,
            topic=p.topic,
            partition=p.partition,
            to_node=to_node,
            phase=progress.phase,
            idle_s=round(self._clock() - progress.progressed_at, 1),
        )
        if to_node in p.learners:
            learners = tuple(n for n in p.learners if n != to_node)
            await self._propose(
                ctl.SetPartitionReplicas(
                    p.topic, p.partition, p.replicas, learners, p.preferred_leader, p.replicas, p.learners
                ),
                tenure,
            )

    async def _balance_preferred_leaders(
        self, state: ctl.ClusterState, live_active: list[ctl.NodeInfo], tenure: int
    ) -> None:
        if self._unchanged("leaders", state, live_active):
            return
        changes = ctl.plan_preferred_leaders(state, live_active)
        self._note("leaders", state, live_active, not changes)
        for change in changes[:_PREFERRED_CHANGES_PER_ROUND]:
            p = state.partition(change.topic, change.partition)
            await self._propose(
                ctl.SetPartitionReplicas(
                    p.topic, p.partition, p.replicas, p.learners, change.to_node, p.replicas, p.learners
                ),
                tenure,
            )

    async def _propose(self, command: ctl.SetPartitionReplicas, tenure: int) -> bool:
        """Run ``command`` on the controller; False if it was refused. Raises _NotLeadingError, before or instead of
        it, once this node no longer leads."""
        self._check_leading(tenure)
        try:
            await self._controller.call(command, timeout_s=5.0)
        except NotLeaderError as exc:
            # This node's controller replica no longer leads (the scheduler thread knew before the loop).
            log.info("replica change refused: not the controller leader", topic=command.topic, error=str(exc))
            raise _NotLeadingError from exc
        except MultiraftError as exc:
            log.info("replica change refused", topic=command.topic, partition=command.partition, error=str(exc))
            return False
        return True

    # ------------------------------------------------------------------------------------------ reading

    def snapshot(self) -> list[MoveProgress]:
        return sorted(self.moves.values(), key=lambda m: m.group_id)
