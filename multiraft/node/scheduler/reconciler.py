"""Making Raft configurations follow the controller's assignments (scheduler thread).

The controller changes a partition's replicas one step at a time (``SetPartitionReplicas``: add a learner,
promote it, remove the replica it replaces). Applying that command changes metadata only; this module turns
it into Raft configuration changes:

* On the leader of each partition group, :func:`reconcile_groups` compares the group's configuration with
  the assignment and proposes one ``ConfChange`` towards it (learners added, learners promoted, replicas
  removed). Raft accepts one change at a time (ConfChangePending), so a step that is still committing is
  simply retried on the next pass. Several voter changes at once go through joint consensus (AUTO).
* The controller group (group 0) gets every registered node as a learner, so that a node that joined a
  running cluster through the member-list receives the metadata; removed nodes are taken out again. Its
  voters stay as bootstrapped, except that a voter on a draining or removed node is swapped (one at a time,
  through joint consensus) for a caught-up learner on an active node: draining and removing voters one after
  another must never leave the metadata without a quorum.
* A node that is no longer assigned a replica drops its local copy once that has held for
  :data:`REMOVAL_GRACE_S`: the leader's removal entry may never reach the removed replica, and a replica of
  a dead node that comes back must not linger. The grace keeps a metadata replay at start-up (where an
  intermediate state may not list the node) from deleting data it is about to be given back.

A pass is cheap when nothing changes: a group whose configuration already matches its assignment is
*settled* and is looked at again only when the controller's state changes, or in the full pass every
:data:`FULL_PASS_S` (a safety net for what reaches a group's configuration without a new state, such as a
snapshot); between those, a pass visits only the unsettled groups. Ten thousand idle replicas would
otherwise cost a walk over all of them every 200 ms.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from multiraft import controller as ctl
from multiraft import raft
from multiraft.logging import get_logger
from multiraft.node.replicas.raft_group import RaftGroup
from multiraft.node.scheduler.scheduler import Scheduler
from multiraft.node.threads import SchedulerOwned

__all__ = ["Reconciler", "REMOVAL_GRACE_S", "FULL_PASS_S", "conf_change_towards"]

log = get_logger(__name__)

REMOVAL_GRACE_S = 5.0
FULL_PASS_S = 5.0  # every group is looked at again at least this often, settled or not
_VOTER_CAUGHT_UP_ENTRIES = 64  # a learner this close to the leader's last index may replace a leaving voter


def conf_change_towards(
    current: raft.ConfState, voters: tuple[int, ...], learners: tuple[int, ...]
) -> raft.ConfChange | None:
    """The single change that moves ``current`` to the wanted voters and learners, or None if it is there.

    A joint configuration is left alone: the leader leaves it by itself (AUTO transition).
    """
    if current.voters_outgoing:
        return None
    changes: list[raft.ConfChangeSingle] = []
    have_voters, have_learners = set(current.voters), set(current.learners)
    for node in voters:
        if node not in have_voters:
            changes.append(raft.ConfChangeSingle(raft.ConfChangeType.ADD_VOTER, node))
    for node in learners:
        if node not in have_learners:
            changes.append(raft.ConfChangeSingle(raft.ConfChangeType.ADD_LEARNER, node))
    wanted = set(voters) | set(learners)
    for node in sorted(have_voters | have_learners):
        if node not in wanted:
            changes.append(raft.ConfChangeSingle(raft.ConfChangeType.REMOVE_NODE, node))
    if not changes or not voters:
        return None
    return raft.ConfChange(tuple(changes))


def _promotes_a_lost_log(group: RaftGroup, change: raft.ConfChange) -> int:
    """The learner ``change`` would make a voter while it rebuilds a log it lost (0: none)."""
    learners = set(group.raw.conf_state.learners)
    promoted = [c.node_id for c in change.changes if c.type is raft.ConfChangeType.ADD_VOTER and c.node_id in learners]
    if not promoted:
        return 0
    progress = group.raw.status().progress
    return next((n for n in promoted if (pr := progress.get(n)) is not None and pr.lost_log), 0)


class Reconciler(SchedulerOwned):
    """Runs every few hundred ms on the scheduler thread (``Scheduler.every``)."""

    def __init__(
        self,
        node_id: int,
        scheduler: Scheduler,
        state: Callable[[], ctl.ClusterState],
        controller_leader: Callable[[], int],
        drop_local: Callable[[RaftGroup], None],
        publish_voters: Callable[[tuple[int, ...]], None] | None = None,
    ) -> None:
        self.owner = scheduler.owner
        self.node_id = node_id
        self.scheduler = scheduler
        self._state = state
        self._controller_leader = controller_leader
        self._drop_local = drop_local
        self._unassigned_since: dict[int, float] = {}
        self._publish_voters = publish_voters
        self._published: tuple[int, ...] | None = None
        self._settled_under: ctl.ClusterState | None = None  # the state the settled groups were checked against
        self._next_full_pass = float("-inf")
        self._unsettled: set[int] = set()  # groups to look at in the passes between full ones

    def __call__(self) -> None:
        state = self._state()
        now = time.monotonic()
        groups = self.scheduler.groups
        if state is not self._settled_under or now >= self._next_full_pass:
            self._settled_under, self._next_full_pass = state, now + FULL_PASS_S
            visit: list[int] = list(groups)
        else:
            visit = sorted(self._unsettled | {ctl.CONTROLLER_GROUP_ID})
        self._unsettled = set()
        for group_id in visit:
            group = groups.get(group_id)
            if group is None:
                continue
            if group_id == ctl.CONTROLLER_GROUP_ID:
                self._publish(group)
                if group.is_leader:
                    self._reconcile_controller(group, state)
                continue
            partition = state.group(group_id)
            if partition is None:
                continue  # a deleted topic: the node removes it when the deletion applies
            if group.is_leader:
                # Also when this node is the replica being removed: the leader proposes its own removal and
                # keeps leading until a remaining voter takes over (see multiraft.raft.confchange).
                self._propose(group, partition.replicas, partition.learners)
            elif self.node_id not in partition.members:
                self._unsettled.add(group_id)
                self._maybe_drop(group, now)
                continue
            self._unassigned_since.pop(group_id, None)
            conf = group.raw.conf_state
            if (
                self.node_id not in partition.members
                or conf_change_towards(conf, partition.replicas, partition.learners) is not None
                or conf.voters_outgoing
            ):
                self._unsettled.add(group_id)
        for group_id in [g for g in self._unassigned_since if g not in groups]:
            del self._unassigned_since[group_id]

    def _publish(self, group: RaftGroup) -> None:
        """Tell the event loop who votes in the controller group (a drain is not over while its node does)."""
        conf = group.raw.conf_state
        voters = tuple(sorted(set(conf.voters) | set(conf.voters_outgoing)))
        if self._publish_voters is not None and voters != self._published:
            self._published = voters
            self._publish_voters(voters)

    def _reconcile_controller(self, group: RaftGroup, state: ctl.ClusterState) -> None:
        conf = group.raw.conf_state
        registered = {n.node_id for n in state.nodes.values() if n.state is not ctl.NodeState.REMOVED}
        voters = self._controller_voters(group, state)
        # Every registered node that is not a voter follows as a learner.
        learners = tuple(sorted(n for n in registered | set(conf.learners) if n not in voters and n in registered))
        self._propose(group, voters, learners)

    def _controller_voters(self, group: RaftGroup, state: ctl.ClusterState) -> tuple[int, ...]:
        """The voters as they are, or with the first one on a draining or removed node swapped for the most
        caught-up learner that is active and answering (none such: as they are, until one is)."""
        voters = tuple(group.raw.conf_state.voters)
        leaving = [v for v in voters if (n := state.nodes.get(v)) is not None and n.state is not ctl.NodeState.ACTIVE]
        if not leaving:
            return voters
        status = group.raw.status()
        candidates = [
            (progress.match, -peer, peer)
            for peer, progress in status.progress.items()
            if peer not in voters
            and (n := state.nodes.get(peer)) is not None
            and n.state is ctl.NodeState.ACTIVE
            and (progress.recent_active or status.quiescent)  # a quiescent group's recent_active goes stale
            and progress.match > 0
            and status.last_index - progress.match <= _VOTER_CAUGHT_UP_ENTRIES
        ]
        if not candidates:
            return voters
        joining = max(candidates)[2]
        return tuple(sorted((set(voters) - {leaving[0]}) | {joining}))

    def _propose(self, group: RaftGroup, voters: tuple[int, ...], learners: tuple[int, ...]) -> None:
        change = conf_change_towards(group.raw.conf_state, voters, learners)
        if change is None:
            return
        rebuilding = _promotes_a_lost_log(group, change)
        if rebuilding:
            # It would be a voter that votes for nobody until its log is back (the leader hands over so that
            # it comes back): promoted now, it could leave the group without a quorum that can elect.
            log.debug(
                "configuration change waits for a learner rebuilding a lost log", group=group.group_id, node=rebuilding
            )
            self._unsettled.add(group.group_id)
            return
        try:
            group.raw.propose_conf_change(change, timestamp_ms=int(time.time() * 1000))
        except raft.RaftError as exc:
            # ConfChangePending (the previous change is not applied yet), a leadership transfer in progress,
            # or a leader that is being removed: the next pass tries again.
            log.debug("configuration change not proposed yet", group=group.group_id, error=type(exc).__name__)
            return
        log.info(
            "proposed a configuration change",
            group=group.group_id,
            changes=[(c.type.name, c.node_id) for c in change.changes],
        )
        self.scheduler.touch(group)

    def _maybe_drop(self, group: RaftGroup, now: float) -> None:
        since = self._unassigned_since.setdefault(group.group_id, now)
        if now - since < REMOVAL_GRACE_S or not self._controller_leader():
            return
        self._unassigned_since.pop(group.group_id, None)
        log.info("dropping a replica no longer assigned to this node", group=group.group_id)
        self._drop_local(group)
