"""The cluster room asks peers through the peer room's typed asks: a status leader that refuses or cannot be
reached is left out, moves the controller leader cannot give are an error, and a capacity report is kept only
from the node it names."""

from __future__ import annotations

import asyncio

import pytest

from multiraft import controller as ctl
from multiraft.errors import NotLeaderError, UnavailableError
from multiraft.node.cluster.capacity import CapacityMonitor
from multiraft.node.cluster.status import MoveReporter, StatusCollector
from multiraft.node.peer.messages import (
    STATUS_ERROR,
    STATUS_OK,
    RequestKind,
    decode_group_ids,
    encode_capacity,
    encode_error,
    encode_moves,
    encode_partition_statuses,
)
from multiraft.node.vocabulary.capacity import NodeCapacity
from multiraft.node.vocabulary.status import MoveReport
from tests.node._fakes import FakeStore, status

Answer = tuple[int, bytes] | BaseException


class Peers:
    """A PeerCaller whose answers are scripted per (node, request kind)."""

    def __init__(self, answers: dict[tuple[int, RequestKind], Answer]) -> None:
        self.answers = answers
        self.asked: list[tuple[int, int, bytes]] = []

    async def call(self, to_node: int, kind: int, body: bytes, timeout_s: float) -> tuple[int, bytes]:
        self.asked.append((to_node, kind, body))
        answer = self.answers[(to_node, RequestKind(kind))]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def connected(self, node_id: int) -> bool:
        return True


def partitions(leaders: dict[int, int]) -> list[ctl.PartitionState]:
    return [ctl.PartitionState("orders", g, g, (1, 2, 3), (), leader) for g, leader in leaders.items()]


def test_status_keeps_what_answering_leaders_report_and_leaves_out_the_others() -> None:
    peers = Peers(
        {
            (2, RequestKind.PARTITION_STATUS): (STATUS_OK, encode_partition_statuses([status(1, leader=2)])),
            (3, RequestKind.PARTITION_STATUS): (STATUS_ERROR, encode_error(NotLeaderError("not here"))),
            (4, RequestKind.PARTITION_STATUS): ConnectionError("gone"),
        }
    )
    collector = StatusCollector(1, lambda group_id: 0, FakeStore(), peers)

    found = asyncio.run(collector.partition_status(partitions({1: 2, 2: 3, 3: 4})))

    assert found == {1: status(1, leader=2)}
    assert sorted((node, decode_group_ids(body)) for node, _, body in peers.asked) == [(2, (1,)), (3, (2,)), (4, (3,))]


MOVE = MoveReport("orders", 0, 1, 2, 4, "copying", 10, 100, 3.5)


def reporter(answer: Answer) -> MoveReporter:
    return MoveReporter(1, lambda: 2, list, Peers({(2, RequestKind.MOVES): answer}))


def test_moves_come_from_the_controller_leader() -> None:
    assert asyncio.run(reporter((STATUS_OK, encode_moves([MOVE]))).moves()) == [MOVE]


def test_moves_the_controller_leader_refuses_raise_its_error() -> None:
    with pytest.raises(NotLeaderError, match="moved on"):
        asyncio.run(reporter((STATUS_ERROR, encode_error(NotLeaderError("moved on")))).moves())


def test_moves_of_an_unreachable_controller_leader_are_unavailable() -> None:
    with pytest.raises(UnavailableError, match="did not say which moves are in flight"):
        asyncio.run(reporter(TimeoutError()).moves())


def report(node_id: int) -> NodeCapacity:
    return NodeCapacity(node_id, 0, 10, 1, 1 << 30, 1 << 30, "")


def test_the_controller_leader_keeps_capacity_reports_only_from_the_node_they_name() -> None:
    peers = Peers(
        {
            (2, RequestKind.CAPACITY): (STATUS_OK, encode_capacity(report(2))),
            (3, RequestKind.CAPACITY): (STATUS_OK, encode_capacity(report(9))),  # names another node
            (4, RequestKind.CAPACITY): (STATUS_ERROR, encode_error(UnavailableError("starting"))),
            (5, RequestKind.CAPACITY): (STATUS_OK, b"\x01"),  # undecodable
            (6, RequestKind.CAPACITY): ConnectionError("gone"),
        }
    )

    async def own() -> NodeCapacity:
        return report(1)

    monitor = CapacityMonitor(1, own, peers, lambda: [2, 3, 4, 5, 6], lambda: True)
    asyncio.run(monitor.refresh())

    assert monitor.reports == {1: report(1), 2: report(2)}
