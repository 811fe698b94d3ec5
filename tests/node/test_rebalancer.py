"""The rebalancer in-process over fakes: which replica moves it plans, how it drives them step by step, how a
new controller leader resumes a move it did not start, and how many it runs at once."""

from __future__ import annotations

import asyncio

import pytest

from multiraft import controller as ctl
from multiraft.node.cluster.rebalancer import CAUGHT_UP_ENTRIES, Rebalancer, RebalanceSettings
from tests.controller._helpers import cluster, create_topic, run
from tests.node._fakes import FakeController, FakeLiveness, FakeStatus, directory, status

SETTINGS = RebalanceSettings(rebalance_interval_ms=100, replica_replace_after_ms=1_000, max_concurrent_moves=4)


def four_nodes_with(partitions: int, *, on: tuple[int, ...] = (1, 2, 3)) -> ctl.ClusterState:
    state = cluster(4)
    return create_topic(state, "t", partitions, 3, nodes=[state.nodes[n] for n in on])


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def rebalancer(
    state: ctl.ClusterState, liveness: FakeLiveness, settings: RebalanceSettings = SETTINGS, clock: Clock | None = None
):
    found = directory(state, node_id=1, controller_leader=1)
    stat = FakeStatus()
    controller = FakeController(found)
    reb = Rebalancer(settings, found, liveness, stat, controller, clock=clock or Clock())
    return reb, found, stat, controller


def node_3_dead() -> FakeLiveness:
    return FakeLiveness(states={3: "dead"}, gone={3: 5.0})


def test_a_replica_on_a_dead_node_is_replaced_learner_first_then_promoted_then_removed() -> None:
    async def scenario() -> None:
        reb, found, stat, _ = rebalancer(four_nodes_with(1), node_3_dead())
        await reb.round()
        p = found.cluster.partition("t", 0)
        assert (p.replicas, p.learners) == ((1, 2, 3), (4,)), "the new replica starts as a learner"
        assert reb.snapshot()[0].move.to_node == 4

        stat.statuses[p.group_id] = status(p.group_id, lag={4: CAUGHT_UP_ENTRIES + 1}, acked=(1, 2, 4), entries=500)
        await reb.round()
        assert found.cluster.partition("t", 0).learners == (4,), "not promoted while it lags"
        assert reb.snapshot()[0].phase == "catching_up"

        stat.statuses[p.group_id] = status(p.group_id, lag={4: 0}, acked=(1, 2, 4), entries=500)
        await reb.round()
        p = found.cluster.partition("t", 0)
        assert 4 in p.replicas and not p.learners

        await reb.round()
        assert sorted(found.cluster.partition("t", 0).replicas) == [1, 2, 4]
        await reb.round()
        assert reb.snapshot() == [], "the move is done"

    asyncio.run(scenario())


def test_a_learner_still_copying_segments_is_not_promoted() -> None:
    async def scenario() -> None:
        reb, found, stat, _ = rebalancer(four_nodes_with(1), node_3_dead())
        await reb.round()
        p = found.cluster.partition("t", 0)
        stat.statuses[p.group_id] = status(p.group_id, lag={4: 0}, acked=(1, 2, 4), copies={4: (10, 100)})
        await reb.round()
        (move,) = reb.snapshot()
        assert (move.phase, move.bytes_copied, move.bytes_total) == ("copying", 10, 100)
        assert found.cluster.partition("t", 0).learners == (4,)

    asyncio.run(scenario())


def test_a_new_controller_leader_resumes_a_move_its_predecessor_left_half_done() -> None:
    async def scenario() -> None:
        state = four_nodes_with(1)
        p = state.partition("t", 0)
        # The previous controller leader had added node 4 as a learner, then failed over.
        state = run(state, ctl.SetPartitionReplicas("t", 0, p.replicas, (4,), p.preferred_leader, p.replicas, ()))
        reb, found, stat, _ = rebalancer(state, node_3_dead())
        stat.statuses[p.group_id] = status(p.group_id, lag={4: 0}, acked=(1, 2, 4), entries=10)
        await reb.round()
        (move,) = reb.snapshot()
        assert (move.move.to_node, move.move.from_node) == (4, 3), "it replaces the dead replica"
        assert 4 in found.cluster.partition("t", 0).replicas

    asyncio.run(scenario())


def test_no_more_than_max_concurrent_moves_run_at_once() -> None:
    async def scenario() -> None:
        settings = RebalanceSettings(100, 1_000, max_concurrent_moves=2)
        reb, found, _, controller = rebalancer(four_nodes_with(5), node_3_dead(), settings)
        await reb.round()
        assert len(reb.snapshot()) == 2
        assert sum(1 for p in found.cluster.topics["t"].partitions if p.learners) == 2
        await reb.round()  # the learners have not caught up: nothing new starts
        assert len(reb.snapshot()) == 2
        assert all(isinstance(c, ctl.SetPartitionReplicas) for c in controller.calls)

    asyncio.run(scenario())


def test_a_node_dead_for_less_than_replace_after_keeps_its_replicas() -> None:
    async def scenario() -> None:
        reb, _found, _, controller = rebalancer(four_nodes_with(1), FakeLiveness(states={3: "dead"}, gone={3: 0.5}))
        await reb.round()
        assert reb.snapshot() == [] and controller.calls == []

    asyncio.run(scenario())


def test_only_the_controller_leader_rebalances_and_a_deposed_one_forgets_its_moves() -> None:
    async def scenario() -> None:
        reb, found, _, controller = rebalancer(four_nodes_with(1), node_3_dead())
        await reb.round()
        assert reb.snapshot()
        found.set_controller_leader(2)
        calls = len(controller.calls)
        await reb.round()
        assert reb.snapshot() == [] and len(controller.calls) == calls

    asyncio.run(scenario())


def test_a_move_whose_target_died_is_aborted_and_its_learner_dropped() -> None:
    async def scenario() -> None:
        liveness = node_3_dead()
        reb, found, _, _ = rebalancer(four_nodes_with(1), liveness)
        await reb.round()
        assert found.cluster.partition("t", 0).learners == (4,)
        liveness.states[4], liveness.gone[4] = "dead", 5.0
        await reb.round()
        assert found.cluster.partition("t", 0).learners == ()
        assert reb.snapshot() == []

    asyncio.run(scenario())


def test_a_draining_node_has_its_replicas_moved_to_the_others() -> None:
    async def scenario() -> None:
        state = run(four_nodes_with(1), ctl.SetNodeState(3, ctl.NodeState.DRAINING))
        reb, _found, _, _ = rebalancer(state, FakeLiveness())
        await reb.round()
        (move,) = reb.snapshot()
        assert (move.move.from_node, move.move.to_node) == (3, 4)

    asyncio.run(scenario())


def test_a_move_towards_a_node_that_starts_draining_is_aborted_and_its_learner_dropped() -> None:
    # Seed 23052 (five nodes): moves onto node 3 were kept while node 3 drained, and its drain never ended.
    async def scenario() -> None:
        reb, found, _, _ = rebalancer(four_nodes_with(1), node_3_dead())
        await reb.round()
        assert found.cluster.partition("t", 0).learners == (4,)
        found.set_cluster(run(found.cluster, ctl.SetNodeState(4, ctl.NodeState.DRAINING)))
        await reb.round()
        assert found.cluster.partition("t", 0).learners == (), "no replica is added to a draining node"
        assert all(m.move.to_node != 4 for m in reb.snapshot())

    asyncio.run(scenario())


def test_a_new_controller_leader_drops_a_learner_left_on_a_draining_node_instead_of_adopting_it() -> None:
    async def scenario() -> None:
        state = four_nodes_with(1)
        p = state.partition("t", 0)
        # The previous controller leader had added node 4 as a learner; then node 4 was drained.
        state = run(state, ctl.SetPartitionReplicas("t", 0, p.replicas, (4,), p.preferred_leader, p.replicas, ()))
        state = run(state, ctl.SetNodeState(4, ctl.NodeState.DRAINING))
        reb, found, stat, _ = rebalancer(state, FakeLiveness())
        stat.statuses[p.group_id] = status(p.group_id, lag={4: 0}, acked=(1, 2, 3, 4), entries=10)
        await reb.round()
        p = found.cluster.partition("t", 0)
        assert (p.replicas, p.learners) == ((1, 2, 3), ()), "node 4 is neither promoted nor kept as a learner"
        assert all(m.move.to_node != 4 for m in reb.snapshot())

    asyncio.run(scenario())


STALL = RebalanceSettings(100, 1_000, max_concurrent_moves=1, move_stall_s=60.0)


def test_a_move_that_makes_no_progress_is_aborted_and_gives_its_slot_to_another_partition() -> None:
    async def scenario() -> None:
        clock = Clock()
        reb, found, _stat, _ = rebalancer(four_nodes_with(2), node_3_dead(), STALL, clock)
        await reb.round()
        (stuck,) = reb.snapshot()
        assert found.cluster.partition("t", stuck.move.partition).learners == (4,)
        clock.now += 59.0  # its leader reports nothing of the learner (the offsets groups did so before)
        await reb.round()
        assert [m.group_id for m in reb.snapshot()] == [stuck.group_id], "still within move_stall_s"
        clock.now += 2.0
        await reb.round()
        assert found.cluster.partition("t", stuck.move.partition).learners == (), "its learner is dropped"
        (other,) = reb.snapshot()
        assert other.move.partition != stuck.move.partition, "the freed slot goes to another partition"
        clock.now += 61.0
        await reb.round()  # the other move stalls too; the first partition may be planned again
        (again,) = reb.snapshot()
        assert again.move.partition == stuck.move.partition

    asyncio.run(scenario())


def test_a_slow_move_that_keeps_copying_is_never_aborted() -> None:
    async def scenario() -> None:
        clock = Clock()
        reb, found, stat, _ = rebalancer(four_nodes_with(1), node_3_dead(), STALL, clock)
        await reb.round()
        group_id = found.cluster.partition("t", 0).group_id
        for copied in range(1, 11):  # ten stall periods, a little more copied in each
            clock.now += 59.0
            stat.statuses[group_id] = status(group_id, lag={4: 0}, acked=(1, 2), copies={4: (copied, 100)})
            await reb.round()
            assert found.cluster.partition("t", 0).learners == (4,)
        for lag in (900, 800, 700):  # then it catches up by appends, its lag shrinking
            clock.now += 59.0
            stat.statuses[group_id] = status(group_id, lag={4: lag}, acked=(1, 2, 4), entries=1_000)
            await reb.round()
            assert found.cluster.partition("t", 0).learners == (4,)
        assert [m.phase for m in reb.snapshot()] == ["catching_up"]

    asyncio.run(scenario())


def test_an_idle_round_is_not_planned_again_until_the_state_or_the_member_list_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Placement is pure: the same state and member-list plan nothing again, so 10,000 partitions are not
    walked every round; a node declared dead has its replicas replaced in the next round as before."""
    calls: list[str] = []
    for name in ("plan_repair", "plan_rebalance", "plan_preferred_leaders"):
        real = getattr(ctl, name)
        monkeypatch.setattr(ctl, name, lambda *a, _real=real, _name=name, **k: calls.append(_name) or _real(*a, **k))

    async def scenario() -> None:
        state = cluster(4)
        state = create_topic(state, "t", 4, 3, nodes=list(state.nodes.values()))
        liveness = FakeLiveness()
        reb, _found, _, controller = rebalancer(state, liveness)
        await reb.round()
        assert reb.snapshot() == [] and controller.calls == [], "balanced: nothing to move"
        planned = len(calls)
        assert planned >= 2
        await reb.round()
        await reb.round()
        assert len(calls) == planned, "nothing changed: nothing planned again"
        liveness.states[3], liveness.gone[3] = "dead", 5.0
        await reb.round()
        assert len(calls) > planned
        moves = reb.snapshot()
        assert moves and all(m.move.to_node != 3 for m in moves), "the dead node's replicas are being replaced"

    asyncio.run(scenario())
