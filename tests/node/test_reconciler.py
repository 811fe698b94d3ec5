"""The reconciler turns the controller's assignments into Raft configuration changes, one change at a time.

On a partition's leader it proposes the one ConfChange towards the assignment (add a learner, promote it,
remove a replica) and retries on the next pass when Raft refuses; the controller group gets every registered,
not removed node as a learner; a follower no longer assigned drops its replica only after a grace period and
only while a controller leader is known.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multiraft import controller as ctl
from multiraft import raft
from multiraft.node.scheduler import reconciler as reconfigure
from multiraft.node.scheduler.reconciler import FULL_PASS_S, REMOVAL_GRACE_S, Reconciler, conf_change_towards
from multiraft.node.scheduler.scheduler import RaftGroup, Scheduler
from multiraft.node.threads import ThreadOwner
from tests.controller._helpers import cluster, run

SELF = 1
TICK = 0.125  # exact in binary, so that clock sums land exactly on the grace
ADD_VOTER, ADD_LEARNER, REMOVE = (
    raft.ConfChangeType.ADD_VOTER,
    raft.ConfChangeType.ADD_LEARNER,
    raft.ConfChangeType.REMOVE_NODE,
)


def change(*singles: tuple[raft.ConfChangeType, int]) -> raft.ConfChange:
    return raft.ConfChange(tuple(raft.ConfChangeSingle(kind, node) for kind, node in singles))


@dataclass
class FakeRaw:
    """The RawNode surface the reconciler uses: the configuration and proposing a change to it."""

    conf_state: raft.ConfState
    refuse: list[raft.RaftError] = field(default_factory=list)  # raised by the next proposals, in order
    proposed: list[raft.ConfChange] = field(default_factory=list)
    matches: dict[int, int] = field(default_factory=dict)  # the leader's progress: peer -> match
    last_index: int = 100
    lost_logs: set[int] = field(default_factory=set)  # peers that said they rebuild a lost log

    def status(self) -> raft.Status:
        progress = {
            peer: raft.ProgressStatus(
                match,
                match + 1,
                "replicate",
                True,
                False,
                0,
                0,
                peer in self.conf_state.learners,
                0,
                peer in self.lost_logs,
            )
            for peer, match in self.matches.items()
        }
        conf = self.conf_state
        return raft.Status(
            1, 2, 1, self.last_index, self.last_index, self.last_index, raft.Role.LEADER, 1, False, 0, conf, progress
        )

    def propose_conf_change(self, change: raft.ConfChange, *, timestamp_ms: int = 0) -> None:
        if self.refuse:
            raise self.refuse.pop(0)
        self.proposed.append(change)


@dataclass
class FakeGroup:
    group_id: int
    raw: FakeRaw
    is_leader: bool = True


@dataclass
class FakeScheduler:
    groups: dict[int, FakeGroup] = field(default_factory=dict)
    touched: list[int] = field(default_factory=list)
    owner: ThreadOwner = field(default_factory=lambda: ThreadOwner("scheduler"))

    def touch(self, group: FakeGroup) -> None:
        self.touched.append(group.group_id)


class Clock:
    """Stands in for the ``time`` module inside multiraft.node.scheduler.reconciler."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return 1_700_000_000.0 + self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(reconfigure, "time", fake)
    return fake


class World:
    """A reconciler on node 1 over a fake scheduler, a controller state and a controller leader."""

    def __init__(self, state: ctl.ClusterState, *, controller_leader: int = 2) -> None:
        self.state = state
        self.controller_leader = controller_leader
        self.scheduler = FakeScheduler()
        self.dropped: list[int] = []
        self.reconciler = Reconciler(
            SELF,
            cast(Scheduler, self.scheduler),
            lambda: self.state,
            lambda: self.controller_leader,
            self._drop,
        )

    def _drop(self, group: RaftGroup) -> None:  # the store deletes the replica: it leaves the scheduler
        self.dropped.append(group.group_id)
        del self.scheduler.groups[group.group_id]

    def host(self, group_id: int, voters: tuple[int, ...], learners: tuple[int, ...] = (), **kw: Any) -> FakeGroup:
        group = FakeGroup(group_id, FakeRaw(raft.ConfState(voters, learners)), **kw)
        self.scheduler.groups[group_id] = group
        return group

    def group_of(self, partition: int = 0) -> int:
        return self.state.partition("orders", partition).group_id

    def assign(self, voters: tuple[int, ...], learners: tuple[int, ...] = (), partition: int = 0) -> None:
        self.state = run(self.state, ctl.SetPartitionReplicas("orders", partition, voters, learners, voters[0]))


def world(voters: tuple[int, ...] = (1, 2, 3), learners: tuple[int, ...] = (), nodes: int = 5, **kw: Any) -> World:
    state = run(
        cluster(nodes), ctl.CreateTopic("orders", ctl.validate_topic_configs({}, creating=True), ((voters, voters[0]),))
    )
    found = World(state, **kw)
    if learners:
        found.assign(voters, learners)
    return found


# ---------------------------------------------------------------------------------- partition leaders


@pytest.mark.parametrize(
    ("conf", "assigned", "expected"),
    [
        (((1, 2, 3), ()), ((1, 2, 3), (4,)), change((ADD_LEARNER, 4))),
        (((1, 2, 3), (4,)), ((1, 2, 3, 4), ()), change((ADD_VOTER, 4))),
        (((1, 2, 3, 4), ()), ((2, 3, 4), ()), change((REMOVE, 1))),  # the leader proposes its own removal
        (((1, 2, 3, 4), ()), ((1, 2, 3), ()), change((REMOVE, 4))),
    ],
    ids=["add learner", "promote", "remove self", "remove other"],
)
def test_a_leader_proposes_the_one_change_towards_its_assignment(
    clock: Clock,
    conf: tuple[tuple[int, ...], tuple[int, ...]],
    assigned: tuple[tuple[int, ...], tuple[int, ...]],
    expected: raft.ConfChange,
) -> None:
    w = world(*assigned)
    group = w.host(w.group_of(), *conf)

    w.reconciler()

    assert group.raw.proposed == [expected]
    assert w.scheduler.touched == [group.group_id]  # so that the scheduler collects its Ready
    assert w.dropped == []


def test_a_learner_rebuilding_a_lost_log_is_promoted_only_once_its_log_is_back(clock: Clock) -> None:
    """Issue 23: a voter that votes for nobody until its log is back could leave the group unable to elect."""
    w = world((1, 2, 3, 4))
    group = w.host(w.group_of(), (1, 2, 3), (4,))
    group.raw.matches = {2: 100, 3: 100, 4: 100}
    group.raw.lost_logs = {4}

    w.reconciler()
    assert group.raw.proposed == []

    group.raw.lost_logs = set()
    clock.now += TICK
    w.reconciler()
    assert group.raw.proposed == [change((ADD_VOTER, 4))]


def test_a_leader_already_at_its_assignment_proposes_nothing(clock: Clock) -> None:
    w = world((1, 2, 3), (4,))
    group = w.host(w.group_of(), (1, 2, 3), (4,))
    w.reconciler()
    assert group.raw.proposed == [] and w.scheduler.touched == []


@pytest.mark.parametrize(
    "refusal",
    [
        raft.ConfChangePending("the previous change is not applied"),
        raft.ProposalDropped("a leadership transfer is in progress"),
    ],
    ids=lambda exc: type(exc).__name__,
)
def test_a_change_raft_refuses_is_proposed_again_on_the_next_pass(clock: Clock, refusal: raft.RaftError) -> None:
    w = world((1, 2, 3), (4,))
    group = w.host(w.group_of(), (1, 2, 3))
    group.raw.refuse.append(refusal)

    w.reconciler()
    assert group.raw.proposed == [] and w.scheduler.touched == []

    w.reconciler()
    assert group.raw.proposed == [change((ADD_LEARNER, 4))]
    assert w.scheduler.touched == [group.group_id]


def test_a_settled_group_is_looked_at_again_only_under_a_new_state_or_in_the_next_full_pass(clock: Clock) -> None:
    w = world((1, 2, 3))
    settled = w.host(w.group_of(), (1, 2, 3))
    w.reconciler()
    # Its configuration drifts without a new state (as a snapshot could make it): the passes in between skip it.
    settled.raw.conf_state = raft.ConfState((1, 2, 3, 4))
    clock.now += TICK
    w.reconciler()
    assert settled.raw.proposed == []
    clock.now += FULL_PASS_S
    w.reconciler()
    assert settled.raw.proposed == [change((REMOVE, 4))]


def test_a_new_controller_state_has_every_settled_group_looked_at_again(clock: Clock) -> None:
    w = world((1, 2, 3))
    group = w.host(w.group_of(), (1, 2, 3))
    w.reconciler()
    clock.now += TICK
    w.assign((1, 2, 3), (4,))
    w.reconciler()
    assert group.raw.proposed == [change((ADD_LEARNER, 4))]


def test_an_unsettled_group_is_looked_at_on_every_pass(clock: Clock) -> None:
    w = world((1, 2, 3), (4,))
    group = w.host(w.group_of(), (1, 2, 3), is_leader=False)  # a follower: its leader adds the learner
    w.reconciler()
    group.is_leader = True  # then it leads, the configuration not there yet
    clock.now += TICK
    w.reconciler()
    assert group.raw.proposed == [change((ADD_LEARNER, 4))]


def test_a_joint_configuration_is_left_alone(clock: Clock) -> None:
    w = world((1, 2, 4))
    group = w.host(w.group_of(), (1, 2, 4))
    group.raw.conf_state = raft.ConfState(voters=(1, 2, 4), voters_outgoing=(1, 2, 3), auto_leave=True)
    w.reconciler()
    assert group.raw.proposed == [] and w.scheduler.touched == []


def test_a_group_of_a_deleted_topic_is_left_alone(clock: Clock) -> None:
    w = world((2, 3, 4))
    group = w.host(99, (1, 2, 3), is_leader=False)
    w.reconciler()
    clock.now += 10 * REMOVAL_GRACE_S
    w.reconciler()
    assert group.raw.proposed == [] and w.dropped == []


def test_a_follower_proposes_nothing(clock: Clock) -> None:
    w = world((1, 2, 3), (4,))
    group = w.host(w.group_of(), (1, 2, 3), is_leader=False)
    w.reconciler()
    assert group.raw.proposed == [] and w.dropped == []


# ------------------------------------------------------------------------------------------ conf_change_towards


def test_conf_change_towards_leaves_a_joint_configuration_alone() -> None:
    joint = raft.ConfState(voters=(1, 2, 4), voters_outgoing=(1, 2, 3))
    assert conf_change_towards(joint, (5, 6, 7), ()) is None


def test_conf_change_towards_never_proposes_a_configuration_without_voters() -> None:
    assert conf_change_towards(raft.ConfState((1, 2, 3)), (), (1,)) is None


def test_several_voter_changes_go_in_one_change_through_joint_consensus() -> None:
    found = conf_change_towards(raft.ConfState((1, 2, 3)), (1, 4, 5), ())
    assert found is not None
    assert found.transition is raft.ConfChangeTransition.AUTO
    assert set(found.changes) == {
        raft.ConfChangeSingle(ADD_VOTER, 4),
        raft.ConfChangeSingle(ADD_VOTER, 5),
        raft.ConfChangeSingle(REMOVE, 2),
        raft.ConfChangeSingle(REMOVE, 3),
    }


def _apply(current: raft.ConfState, found: raft.ConfChange) -> tuple[set[int], set[int]]:
    voters, learners = set(current.voters), set(current.learners)
    for single in found.changes:
        voters.discard(single.node_id)
        learners.discard(single.node_id)
        if single.type is ADD_VOTER:
            voters.add(single.node_id)
        elif single.type is ADD_LEARNER:
            learners.add(single.node_id)
    return voters, learners


NODE_SETS = st.sets(st.integers(1, 7), max_size=5)


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(have=st.tuples(NODE_SETS, NODE_SETS), want=st.tuples(NODE_SETS, NODE_SETS))
def test_the_change_reaches_the_wanted_configuration_and_there_is_none_once_there(
    have: tuple[set[int], set[int]], want: tuple[set[int], set[int]]
) -> None:
    current = raft.ConfState(tuple(sorted(have[0])), tuple(sorted(have[1] - have[0])))
    voters, learners = tuple(sorted(want[0])), tuple(sorted(want[1] - want[0]))
    found = conf_change_towards(current, voters, learners)
    if not voters or (set(current.voters), set(current.learners)) == (set(voters), set(learners)):
        assert found is None
        return
    assert found is not None
    assert _apply(current, found) == (set(voters), set(learners))
    assert len({single.node_id for single in found.changes}) == len(found.changes)  # one operation per node


# ----------------------------------------------------------------------------------------- controller group


def controller_world(*, removed: tuple[int, ...] = (), nodes: int = 5) -> World:
    state = cluster(nodes)
    for node_id in removed:
        state = run(state, ctl.SetNodeState(node_id, ctl.NodeState.REMOVED))
    return World(state)


def test_the_controller_group_gets_every_registered_node_as_a_learner(clock: Clock) -> None:
    w = controller_world()
    group = w.host(ctl.CONTROLLER_GROUP_ID, (1, 2, 3))
    w.reconciler()
    assert group.raw.proposed == [change((ADD_LEARNER, 4), (ADD_LEARNER, 5))]
    assert w.scheduler.touched == [ctl.CONTROLLER_GROUP_ID]


def test_a_removed_node_is_taken_out_of_the_controller_group_and_never_added(clock: Clock) -> None:
    w = controller_world(removed=(5, 6), nodes=6)
    group = w.host(ctl.CONTROLLER_GROUP_ID, (1, 2, 3), (4, 5))
    w.reconciler()
    assert group.raw.proposed == [change((REMOVE, 5))]


def test_the_controller_groups_voters_stay_as_bootstrapped(clock: Clock) -> None:
    w = controller_world(nodes=3)
    group = w.host(ctl.CONTROLLER_GROUP_ID, (1, 2, 3))
    w.reconciler()
    assert group.raw.proposed == []


def test_a_draining_controller_voter_is_swapped_for_a_caught_up_learner(clock: Clock) -> None:
    w = controller_world()
    w.state = run(w.state, ctl.SetNodeState(3, ctl.NodeState.DRAINING))
    group = w.host(ctl.CONTROLLER_GROUP_ID, (1, 2, 3), (4, 5))
    group.raw.matches = {2: 100, 3: 100, 4: 99, 5: 20}  # 5 lags too far to vote yet
    w.reconciler()
    assert group.raw.proposed == [change((ADD_VOTER, 4), (ADD_LEARNER, 3))], "3 stays a learner while it drains"


def test_a_draining_controller_voter_stays_while_no_learner_is_caught_up(clock: Clock) -> None:
    w = controller_world()
    w.state = run(w.state, ctl.SetNodeState(3, ctl.NodeState.DRAINING))
    group = w.host(ctl.CONTROLLER_GROUP_ID, (1, 2, 3), (4, 5))
    group.raw.matches = {2: 100, 3: 100, 4: 0, 5: 20}
    w.reconciler()
    assert group.raw.proposed == []


def test_a_removed_controller_voter_is_replaced_and_taken_out(clock: Clock) -> None:
    w = controller_world(removed=(2,))
    group = w.host(ctl.CONTROLLER_GROUP_ID, (1, 2, 3), (4, 5))
    group.raw.matches = {2: 100, 3: 100, 4: 100, 5: 100}
    w.reconciler()
    assert group.raw.proposed == [change((ADD_VOTER, 4), (REMOVE, 2))]


def test_every_node_publishes_who_votes_in_the_controller_group_when_it_changes(clock: Clock) -> None:
    published: list[tuple[int, ...]] = []
    w = controller_world()
    w.reconciler = Reconciler(SELF, cast(Scheduler, w.scheduler), lambda: w.state, lambda: 2, w._drop, published.append)
    group = w.host(ctl.CONTROLLER_GROUP_ID, (1, 2, 3), (4, 5), is_leader=False)
    w.reconciler()
    w.reconciler()
    group.raw.conf_state = raft.ConfState((1, 2, 4), (3, 5), voters_outgoing=(1, 2, 3))  # joint: both halves vote
    w.reconciler()
    assert published == [(1, 2, 3), (1, 2, 3, 4)]


def test_only_the_controller_leader_changes_the_controller_group(clock: Clock) -> None:
    w = controller_world()
    group = w.host(ctl.CONTROLLER_GROUP_ID, (1, 2, 3), is_leader=False)
    w.reconciler()
    clock.now += 10 * REMOVAL_GRACE_S
    w.reconciler()
    assert group.raw.proposed == [] and w.dropped == []  # the controller replica is never dropped


# ------------------------------------------------------------------------------------ unassigned replicas


def unassigned_follower(**kw: Any) -> tuple[World, FakeGroup]:
    w = world((2, 3, 4), **kw)
    return w, w.host(w.group_of(), (1, 2, 3, 4), is_leader=False)


def test_an_unassigned_follower_drops_its_replica_only_after_the_grace(clock: Clock) -> None:
    w, group = unassigned_follower()

    w.reconciler()
    clock.now += REMOVAL_GRACE_S - TICK
    w.reconciler()
    assert w.dropped == []

    clock.now += TICK
    w.reconciler()
    assert w.dropped == [group.group_id]

    clock.now += REMOVAL_GRACE_S
    w.reconciler()
    assert w.dropped == [group.group_id]  # once
    assert group.raw.proposed == []


def test_an_unassigned_follower_keeps_its_replica_while_no_controller_leader_is_known(clock: Clock) -> None:
    w, group = unassigned_follower(controller_leader=0)

    w.reconciler()
    clock.now += 10 * REMOVAL_GRACE_S
    w.reconciler()
    assert w.dropped == []

    w.controller_leader = 3
    w.reconciler()
    assert w.dropped == [group.group_id]


def test_being_assigned_again_within_the_grace_restarts_it(clock: Clock) -> None:
    w, group = unassigned_follower()

    w.reconciler()  # unassigned since t0
    clock.now += REMOVAL_GRACE_S / 2
    w.assign((2, 3, 4), (1,))  # assigned again (as a learner)
    w.reconciler()
    clock.now += TICK
    w.assign((2, 3, 4))  # and unassigned again
    w.reconciler()
    clock.now += REMOVAL_GRACE_S - TICK
    w.reconciler()  # a full grace since t0, but not since the last unassignment
    assert w.dropped == []

    clock.now += TICK
    w.reconciler()
    assert w.dropped == [group.group_id]


def test_an_assigned_follower_keeps_its_replica(clock: Clock) -> None:
    w = world((2, 3, 1))
    w.host(w.group_of(), (1, 2, 3), is_leader=False)
    w.reconciler()
    clock.now += 10 * REMOVAL_GRACE_S
    w.reconciler()
    assert w.dropped == []
