"""RemoteController: a metadata request runs on the controller leader, wherever it is.

It runs locally when this node leads, is sent as a typed CONTROLLER request to the leader otherwise, comes back
as the leader's outcome or as the same error class the leader raised, and is retried while leadership moves
until its deadline. The peer side (``serve``) passes a request on to the leader once, and no further.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import pytest

from multiraft import controller as ctl
from multiraft import errors
from multiraft.errors import (
    MultiraftError,
    NotLeaderError,
    RequestTimeoutError,
    TopicExistsError,
    UnavailableError,
    UnknownTopicError,
)
from multiraft.node.cluster.controller_client import CONTROLLER_TIMEOUT_S, RemoteController
from multiraft.node.peer.messages import (
    STATUS_ERROR,
    STATUS_OK,
    RequestKind,
    decode_controller_request,
    encode_controller_outcome,
    encode_error,
)
from multiraft.node.vocabulary.controller import ControllerOutcome, ControllerRequest, CreateTopicRequest
from tests.controller._helpers import cluster

SELF, LEADER, OTHER = 1, 2, 3
SHORT_S = 0.3  # a deadline for requests that are meant to time out


@dataclass
class View:
    node_id: int = SELF
    controller_leader: int = 0
    cluster: ctl.ClusterState = field(default_factory=lambda: cluster(3))


Answer = tuple[int, bytes] | BaseException


@dataclass
class Call:
    to_node: int
    kind: int
    request: ControllerRequest
    timeout_s: float


@dataclass
class FakePeers:
    """A PeerCaller that records calls and plays scripted answers (the last one repeats)."""

    answers: list[Answer] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    on_call: Callable[[Call], None] | None = None

    async def call(self, to_node: int, kind: int, body: bytes, timeout_s: float) -> tuple[int, bytes]:
        call = Call(to_node, kind, decode_controller_request(body), timeout_s)
        self.calls.append(call)
        if self.on_call is not None:
            self.on_call(call)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def connected(self, node_id: int) -> bool:
        return True


@dataclass
class FakeLocal:
    """This node's controller replica: records requests and returns (or raises) scripted outcomes."""

    outcomes: list[object] = field(default_factory=list)
    requests: list[tuple[ControllerRequest, float]] = field(default_factory=list)

    async def __call__(self, request: ControllerRequest, timeout_s: float) -> object:
        self.requests.append((request, timeout_s))
        outcome = self.outcomes.pop(0) if len(self.outcomes) > 1 else self.outcomes[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


def ok(outcome: ControllerOutcome) -> tuple[int, bytes]:
    return STATUS_OK, encode_controller_outcome(outcome)


def failed(error: MultiraftError) -> tuple[int, bytes]:
    return STATUS_ERROR, encode_error(error)


def client(
    view: View,
    local: FakeLocal | None = None,
    peers: FakePeers | None = None,
    live: Callable[[], set[int]] = set,
) -> RemoteController:
    return RemoteController(
        view, local or FakeLocal([None]), peers or FakePeers([ok(ControllerOutcome())]), live, random.Random(7)
    )


def run(coroutine: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    return asyncio.run(coroutine())


async def timed(awaitable: Awaitable[Any]) -> tuple[Any, float]:
    loop = asyncio.get_running_loop()
    start = loop.time()
    try:
        return await awaitable, loop.time() - start
    except MultiraftError as exc:
        return exc, loop.time() - start


TOPIC = ctl.Topic("orders", (), {})
DELETE = ctl.DeleteTopic("orders")


# ------------------------------------------------------------------------------------------------ call()


def test_the_controller_leader_runs_a_request_locally_and_sends_nothing() -> None:
    local, peers = FakeLocal([TOPIC]), FakePeers([ok(ControllerOutcome())])
    remote = client(View(controller_leader=SELF), local, peers)

    outcome = run(lambda: remote.call(DELETE, timeout_s=5.0))

    assert outcome == ControllerOutcome(topic="orders")
    assert peers.calls == []
    [(request, timeout_s)] = local.requests
    assert request == ControllerRequest(DELETE)
    assert 0 < timeout_s <= 5.0


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        (TOPIC, ControllerOutcome(topic="orders")),
        (ctl.NodeInfo(4, "a", "b", "c", "", 1.0, ctl.NodeState.ACTIVE), ControllerOutcome(node_id=4)),
        (ctl.ProducerIdBlock(1000, 50), ControllerOutcome(producer_ids=(1000, 50))),
        (ctl.PartitionState("orders", 0, 9, (1, 2)), ControllerOutcome(group_id=9)),
        (None, ControllerOutcome()),
    ],
    ids=["topic", "node", "producer ids", "partition", "nothing"],
)
def test_a_local_outcome_is_reduced_to_what_a_requester_needs(outcome: object, expected: ControllerOutcome) -> None:
    remote = client(View(controller_leader=SELF), FakeLocal([outcome]))
    assert run(lambda: remote.call(DELETE, timeout_s=5.0)) == expected


def test_a_follower_sends_a_typed_controller_request_to_the_leader_and_decodes_its_outcome() -> None:
    local, peers = FakeLocal([TOPIC]), FakePeers([ok(ControllerOutcome(producer_ids=(100, 10)))])
    remote = client(View(controller_leader=LEADER), local, peers)
    body = CreateTopicRequest("orders", 3, 2, {"retention.ms": "-1"})

    outcome = run(lambda: remote.call(body, timeout_s=5.0))

    assert outcome == ControllerOutcome(producer_ids=(100, 10))
    assert local.requests == []
    [call] = peers.calls
    assert (call.to_node, call.kind, call.request) == (LEADER, RequestKind.CONTROLLER, ControllerRequest(body))
    assert 0 < call.timeout_s <= 5.0


@pytest.mark.parametrize(
    "error",
    [
        UnknownTopicError("no topic orders", topic="orders"),
        TopicExistsError("orders exists"),
        errors.ConfigError("retention.ms", "must be an integer"),
        errors.NotEnoughReplicasError("2 live nodes for 3 replicas", live="2"),
        errors.NodeHasReplicasError("node 4 holds 3 replicas", node_id=4),
        errors.InvalidTopicError("bad name", field="name"),
        RequestTimeoutError("the leader gave up"),
    ],
    ids=lambda error: type(error).__name__,
)
def test_the_leaders_error_comes_back_as_the_same_class_and_is_not_retried(error: MultiraftError) -> None:
    peers = FakePeers([failed(error)])
    remote = client(View(controller_leader=LEADER), peers=peers)

    raised, _ = run(lambda: timed(remote.call(DELETE, timeout_s=5.0)))

    assert type(raised) is type(error)
    assert (raised.message, raised.metadata) == (error.message, error.metadata)
    assert len(peers.calls) == 1


def test_a_not_leader_answer_is_retried_on_the_leader_the_view_learns() -> None:
    view = View(controller_leader=LEADER)

    def leadership_moves(call: Call) -> None:
        view.controller_leader = OTHER

    peers = FakePeers(
        [failed(NotLeaderError("not the controller leader", leader_id=OTHER)), ok(ControllerOutcome(node_id=5))],
        on_call=leadership_moves,
    )
    outcome = run(lambda: client(view, peers=peers).call(DELETE, timeout_s=5.0))

    assert outcome == ControllerOutcome(node_id=5)
    assert [c.to_node for c in peers.calls] == [LEADER, OTHER]
    assert all(c.request == ControllerRequest(DELETE) for c in peers.calls)


@pytest.mark.parametrize(
    "first_answer",
    [
        ConnectionError("connection refused"),
        TimeoutError(),
        failed(UnavailableError("the controller is catching up")),
        failed(errors.ConnectionFailedError("no route")),
        (STATUS_ERROR, b"\xff not an error encoding"),
    ],
    ids=["connection error", "timeout", "unavailable", "connection failed", "undecodable error"],
)
def test_an_unreachable_or_unavailable_leader_is_retried(first_answer: Answer) -> None:
    peers = FakePeers([first_answer, ok(ControllerOutcome(group_id=4))])
    outcome = run(lambda: client(View(controller_leader=LEADER), peers=peers).call(DELETE, timeout_s=5.0))
    assert outcome == ControllerOutcome(group_id=4)
    assert len(peers.calls) == 2


def test_a_local_not_leader_is_retried_on_the_new_leader() -> None:
    view = View(controller_leader=SELF)
    local = FakeLocal([NotLeaderError("lost the lead", leader_id=LEADER)])

    async def lose_leadership(request: ControllerRequest, timeout_s: float) -> object:
        view.controller_leader = LEADER
        return await local(request, timeout_s)

    peers = FakePeers([ok(ControllerOutcome(topic="orders"))])
    remote = RemoteController(view, lose_leadership, peers, set, random.Random(7))

    assert run(lambda: remote.call(DELETE, timeout_s=5.0)) == ControllerOutcome(topic="orders")
    assert len(local.requests) == 1
    assert [c.to_node for c in peers.calls] == [LEADER]


@pytest.mark.parametrize(
    ("answer", "named"),
    [
        (failed(NotLeaderError("node 2 is not the controller leader", leader_id=0)), "node 2 is not the controller"),
        (ConnectionError("connection refused"), "controller leader 2 unreachable: connection refused"),
    ],
    ids=["not leader", "unreachable"],
)
def test_retries_end_at_the_deadline_with_a_timeout_naming_the_last_error(answer: Answer, named: str) -> None:
    peers = FakePeers([answer])
    remote = client(View(controller_leader=LEADER), peers=peers)

    raised, elapsed = run(lambda: timed(remote.call(DELETE, timeout_s=SHORT_S)))

    assert isinstance(raised, RequestTimeoutError)
    assert named in raised.message
    assert SHORT_S <= elapsed < SHORT_S + 2.0
    assert 2 <= len(peers.calls) <= 100  # retried, at a bounded rate
    assert all(0 < c.timeout_s <= SHORT_S for c in peers.calls)


def test_with_no_known_leader_a_request_goes_through_a_live_peer() -> None:
    peers = FakePeers([ok(ControllerOutcome(topic="orders"))])
    remote = client(View(controller_leader=0), peers=peers, live=lambda: {4, 5})

    assert run(lambda: remote.call(DELETE, timeout_s=5.0)) == ControllerOutcome(topic="orders")

    [call] = peers.calls
    assert call.to_node in {4, 5}
    assert call.request == ControllerRequest(DELETE, forwarded=False)  # the peer passes it on, once


def test_with_no_known_leader_the_live_peers_are_tried_until_one_answers() -> None:
    peers = FakePeers([ConnectionError("down"), ConnectionError("down"), ok(ControllerOutcome(node_id=9))])
    remote = client(View(controller_leader=0), peers=peers, live=lambda: {4, 5, 6})

    assert run(lambda: remote.call(DELETE, timeout_s=5.0)) == ControllerOutcome(node_id=9)
    assert {c.to_node for c in peers.calls} <= {4, 5, 6}
    assert len(peers.calls) == 3


def test_with_no_leader_and_no_live_peer_nothing_is_sent_and_the_request_times_out() -> None:
    local, peers = FakeLocal([TOPIC]), FakePeers([ok(ControllerOutcome())])
    remote = client(View(controller_leader=0), local, peers, live=set)

    raised, _ = run(lambda: timed(remote.call(DELETE, timeout_s=SHORT_S)))

    assert isinstance(raised, RequestTimeoutError)
    assert "no leader" in raised.message
    assert peers.calls == [] and local.requests == []


# ------------------------------------------------------------------------------------------------ serve()


def test_serve_passes_a_request_from_a_peer_on_once_to_the_known_leader() -> None:
    local, peers = FakeLocal([TOPIC]), FakePeers([ok(ControllerOutcome(topic="orders"))])
    remote = client(View(controller_leader=LEADER), local, peers)

    outcome = run(lambda: remote.serve(OTHER, ControllerRequest(DELETE)))

    assert outcome == ControllerOutcome(topic="orders")
    assert local.requests == []
    [call] = peers.calls
    assert (call.to_node, call.kind) == (LEADER, RequestKind.CONTROLLER)
    assert call.request == ControllerRequest(DELETE, forwarded=True, origin=OTHER)
    assert call.timeout_s == CONTROLLER_TIMEOUT_S


def test_serve_raises_the_leaders_error_as_the_same_class() -> None:
    peers = FakePeers([failed(UnknownTopicError("no topic orders", topic="orders"))])
    remote = client(View(controller_leader=LEADER), peers=peers)
    raised, _ = run(lambda: timed(remote.serve(OTHER, ControllerRequest(DELETE))))
    assert type(raised) is UnknownTopicError
    assert raised.metadata == {"topic": "orders"}


@pytest.mark.parametrize(
    ("controller_leader", "from_node", "forwarded"),
    [
        (LEADER, OTHER, True),  # already passed on once: never a second hop
        (SELF, OTHER, False),  # this node leads
        (0, OTHER, False),  # no known leader: the local replica answers (NotLeaderError) and the sender retries
        (OTHER, OTHER, False),  # the sender is the leader this node knows: no ping-pong
    ],
    ids=["forwarded", "this node leads", "no known leader", "leader is the sender"],
)
def test_serve_runs_the_request_locally(controller_leader: int, from_node: int, forwarded: bool) -> None:
    local, peers = FakeLocal([TOPIC]), FakePeers([ok(ControllerOutcome())])
    remote = client(View(controller_leader=controller_leader), local, peers)
    request = ControllerRequest(DELETE, forwarded=forwarded)

    assert run(lambda: remote.serve(from_node, request)) == ControllerOutcome(topic="orders")

    assert peers.calls == []
    assert [r for r, _ in local.requests] == [request]


def test_serve_lets_the_local_not_leader_error_reach_the_sender() -> None:
    local = FakeLocal([NotLeaderError("not the controller leader", leader_id=0)])
    remote = client(View(controller_leader=0), local)
    raised, _ = run(lambda: timed(remote.serve(OTHER, ControllerRequest(DELETE))))
    assert isinstance(raised, NotLeaderError)
