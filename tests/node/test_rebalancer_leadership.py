"""The rebalancer plans and drives moves only while its node leads the controller, and stops at once when it
does not (issue 23: a rebalancer on a node that had lost the controller went on planning a move and sent
``SetPartitionReplicas`` to the new leader, which refused it: "peer node 2 may not forward ...")."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from multiraft import controller as ctl
from multiraft.errors import NotLeaderError
from multiraft.node.cluster.directory import Directory
from multiraft.node.cluster.rebalancer import CAUGHT_UP_ENTRIES, OwnController, Rebalancer, RebalanceSettings
from multiraft.node.vocabulary.controller import ControllerBody, ControllerOutcome, ControllerRequest
from multiraft.node.vocabulary.status import PartitionStatus
from tests.controller._helpers import cluster, create_topic
from tests.node._fakes import FakeController, FakeLiveness, FakeStatus, directory, status

TWO_MOVES = RebalanceSettings(rebalance_interval_ms=100, replica_replace_after_ms=1_000, max_concurrent_moves=2)


def node_3_dead_under_five_partitions() -> ctl.ClusterState:
    state = cluster(4)
    return create_topic(state, "t", 5, 3, nodes=[state.nodes[n] for n in (1, 2, 3)])


def node_3_dead() -> FakeLiveness:
    return FakeLiveness(states={3: "dead"}, gone={3: 5.0})


class StatusThatSeesTheControllerMove(FakeStatus):
    """Answers caught-up learners; while it is asked, the loop learns that node 2 now leads the controller."""

    def __init__(self, found: Directory) -> None:
        super().__init__()
        self.found = found

    async def partition_status(self, partitions: Sequence[ctl.PartitionState]) -> dict[int, PartitionStatus]:
        self.found.set_controller_leader(2)
        return {p.group_id: status(p.group_id, lag={4: 0}, acked=(1, 2, 4), entries=10) for p in partitions}


class BlockedController(FakeController):
    """Takes commands and never answers them (a controller proposal that waits for a commit)."""

    def __init__(self) -> None:
        super().__init__()
        self.cancelled = 0

    async def call(self, body: ControllerBody, *, timeout_s: float = 15.0) -> ControllerOutcome:
        self.calls.append(body)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        raise AssertionError("unreachable")


def test_a_rebalancer_that_loses_the_controller_mid_round_proposes_and_plans_nothing_more() -> None:
    async def scenario() -> None:
        found = directory(node_3_dead_under_five_partitions(), node_id=1, controller_leader=1)
        controller = FakeController(found)
        reb = Rebalancer(TWO_MOVES, found, node_3_dead(), FakeStatus(), controller)
        await reb.round()
        assert len(reb.snapshot()) == 2 and len(controller.calls) == 2, "two learners added on the leader"

        # Next round: the learners are caught up, but node 2 leads the controller by the time their status
        # is in (the listener is not wired here: the round must see it by itself).
        reb = Rebalancer(TWO_MOVES, found, node_3_dead(), StatusThatSeesTheControllerMove(found), controller)
        found.set_controller_leader(1)
        await reb.round()  # adopts the two learners, then asks their status
        assert len(controller.calls) == 2, f"no promotion proposed off the leader: {controller.calls[2:]}"
        assert reb.snapshot() == [], "its moves are dropped, for node 2 to rebuild"

    asyncio.run(scenario())


def test_a_change_of_controller_leader_cancels_a_round_waiting_on_a_proposal_at_once() -> None:
    async def scenario() -> None:
        found = directory(node_3_dead_under_five_partitions(), node_id=1, controller_leader=1)
        controller = BlockedController()
        reb = Rebalancer(TWO_MOVES, found, node_3_dead(), FakeStatus(), controller)
        found.on_controller_leader(reb.controller_leader_changed)  # as the node wires it
        round_ = asyncio.create_task(reb.round())
        for _ in range(100):  # bounded: a few loop turns reach the first proposal
            if controller.calls:
                break
            await asyncio.sleep(0)
        assert len(controller.calls) == 1 and reb.snapshot(), "the round waits on its first learner"

        found.set_controller_leader(2)
        assert reb.snapshot() == [], "the moves are dropped as soon as the loop learns of the new leader"
        await asyncio.wait_for(round_, 1.0)  # without the cancel it would wait on the proposal for ever
        assert controller.cancelled == 1 and len(controller.calls) == 1, "nothing else is proposed"

    asyncio.run(scenario())


def test_a_node_that_loses_and_regains_the_controller_between_rounds_starts_from_the_state() -> None:
    async def scenario() -> None:
        found = directory(node_3_dead_under_five_partitions(), node_id=1, controller_leader=1)
        stat = FakeStatus()
        reb = Rebalancer(TWO_MOVES, found, node_3_dead(), stat, FakeController(found))
        found.on_controller_leader(reb.controller_leader_changed)
        await reb.round()
        planned = {m.group_id for m in reb.snapshot()}
        assert len(planned) == 2

        found.set_controller_leader(2)
        found.set_controller_leader(1)
        assert reb.snapshot() == [], "what it tracked under its last tenure is gone"
        await reb.round()  # rebuilt from the learners in the state (adopted), not remembered
        assert {m.group_id for m in reb.snapshot()} == planned
        assert all(m.phase != "promoting" for m in reb.snapshot())

    asyncio.run(scenario())


def test_a_refusal_from_its_own_controller_replica_stops_the_round() -> None:
    async def scenario() -> None:
        found = directory(node_3_dead_under_five_partitions(), node_id=1, controller_leader=1)
        controller = FakeController(found)
        # The scheduler thread's Raft group no longer leads; the loop has not heard yet.
        controller.errors.append(NotLeaderError("not the controller leader", leader_id=2))
        reb = Rebalancer(TWO_MOVES, found, node_3_dead(), FakeStatus(), controller)
        await reb.round()
        assert len(controller.calls) == 1, f"nothing proposed after the refusal: {controller.calls[1:]}"
        assert reb.snapshot() == []

    asyncio.run(scenario())


def test_the_rebalancers_commands_run_on_its_own_controller_replica_and_are_never_forwarded() -> None:
    async def scenario() -> None:
        asked: list[tuple[ControllerRequest, float]] = []

        async def local(request: ControllerRequest, timeout_s: float) -> object:
            asked.append((request, timeout_s))
            if len(asked) > 1:
                raise NotLeaderError("not the controller leader", leader_id=2)
            return None

        own = OwnController(local)
        command = ctl.SetPartitionReplicas("t", 0, (1, 2, 4), (), 1, (1, 2, 3), (4,))
        assert await own.call(command, timeout_s=2.0) == ControllerOutcome()
        assert asked == [(ControllerRequest(command), 2.0)] and not asked[0][0].forwarded
        try:
            await own.call(command)
        except NotLeaderError as exc:
            assert exc.leader_id == 2, "the refusal reaches the rebalancer as it is, not retried elsewhere"
        else:
            raise AssertionError("a refusal of the local replica must not be hidden")

    asyncio.run(scenario())


def test_a_leader_that_keeps_the_controller_finishes_its_moves() -> None:
    """The checks do not get in the way of an uninterrupted leader (the first test's control)."""

    async def scenario() -> None:
        found = directory(node_3_dead_under_five_partitions(), node_id=1, controller_leader=1)
        controller = FakeController(found)
        stat = FakeStatus()
        reb = Rebalancer(TWO_MOVES, found, node_3_dead(), stat, controller)
        found.on_controller_leader(reb.controller_leader_changed)
        await reb.round()
        for move in reb.snapshot():
            stat.statuses[move.group_id] = status(move.group_id, lag={4: CAUGHT_UP_ENTRIES}, acked=(1, 2, 4))
        await reb.round()
        moved = [p for p in found.cluster.topics["t"].partitions if 4 in p.replicas and 3 not in p.replicas]
        assert len(moved) == 2, "both learners promoted and node 3's replicas removed in the round"
        assert len(controller.calls) == 6, "add, promote, remove: one command each per move"

    asyncio.run(scenario())
