"""A peer may forward to the controller only what a client could ask for, or what concerns the peer itself.

Peer connections are not authenticated: the node id of the HELLO is all a node knows of a peer. These tests
drive the peer service (a CONTROLLER request frame's body, as the transport hands it over) with a real
RemoteController over fakes, and check that each forbidden operation is answered with NOT_ALLOWED (or the
client path's INVALID_ARGUMENT) before anything reaches the controller replica or is passed on.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from multiraft import controller as ctl
from multiraft.errors import AuthorizationFailedError, InvalidArgumentError, MultiraftError, OperationNotAllowedError
from multiraft.node.cluster.controller_client import RemoteController
from multiraft.node.peer.messages import (
    STATUS_ERROR,
    STATUS_OK,
    RequestKind,
    decode_controller_outcome,
    decode_controller_request,
    decode_error,
    encode_controller_outcome,
    encode_controller_request,
)
from multiraft.node.replicas.offsets import OFFSETS_TOPIC
from multiraft.node.services.peer_requests import PeerService
from multiraft.node.vocabulary.controller import (
    ControllerBody,
    ControllerOutcome,
    ControllerRequest,
    CreatePartitionsRequest,
    CreateTopicRequest,
    NodeStateRequest,
)
from multiraft.security.authorizer import Authorizer
from tests.controller._helpers import cluster, create_topic, node, run
from tests.controller.strategies import any_commands, small_commands

SELF, PEER, VICTIM, STRANGER = 1, 2, 3, 99


def _state() -> ctl.ClusterState:
    state = create_topic(cluster(3), "orders", 1, 3)
    offsets = ctl.CreateTopic(
        OFFSETS_TOPIC, ctl.validate_topic_configs({}, creating=True), (((1, 2, 3), 1),), internal=True
    )
    return run(state, offsets)


@dataclass
class View:
    node_id: int = SELF
    controller_leader: int = SELF
    cluster: ctl.ClusterState = field(default_factory=_state)


@dataclass
class Local:
    """This node's controller replica: records what reached it."""

    requests: list[ControllerRequest] = field(default_factory=list)

    async def __call__(self, request: ControllerRequest, timeout_s: float) -> object:
        self.requests.append(request)
        return None


@dataclass
class Peers:
    """The leader, when this node does not lead: records what was passed on."""

    forwarded: list[tuple[int, ControllerRequest]] = field(default_factory=list)

    async def call(self, to_node: int, kind: int, body: bytes, timeout_s: float) -> tuple[int, bytes]:
        self.forwarded.append((to_node, decode_controller_request(body)))
        return STATUS_OK, encode_controller_outcome(ControllerOutcome())

    def connected(self, node_id: int) -> bool:
        return True


@dataclass
class Node:
    view: View = field(default_factory=View)
    local: Local = field(default_factory=Local)
    peers: Peers = field(default_factory=Peers)
    authorizer: Authorizer | None = None  # authorization on: forwarded client changes are checked

    def service(self) -> PeerService:
        authorizer = self.authorizer
        controller = RemoteController(
            self.view,
            self.local,
            self.peers,
            set,
            max_topic_partitions=100,
            authorizer=None if authorizer is None else lambda: authorizer,
        )
        unused: Any = None  # the CONTROLLER kind touches nothing else
        return PeerService(controller, unused, unused, unused, list, unused)

    def send(self, from_node: int, request: ControllerRequest) -> ControllerOutcome | MultiraftError:
        body = encode_controller_request(request)
        status, answer = asyncio.run(self.service().serve(from_node, RequestKind.CONTROLLER, body))
        return decode_controller_outcome(answer) if status == STATUS_OK else decode_error(answer)

    @property
    def reached(self) -> list[ControllerRequest]:
        return self.local.requests + [request for _, request in self.peers.forwarded]


def _register(node_id: int, address: str = "127.0.0.1:9999") -> ctl.RegisterNode:
    return ctl.RegisterNode(replace(node(node_id), client_address=address, peer_address=address))


FORBIDDEN: list[tuple[str, ControllerBody, type[MultiraftError]]] = [
    ("delete an internal topic as the system", ctl.DeleteTopic(OFFSETS_TOPIC, internal=True), OperationNotAllowedError),
    ("delete an internal topic", ctl.DeleteTopic(OFFSETS_TOPIC), OperationNotAllowedError),
    ("alter an internal topic", ctl.AlterTopicConfigs(OFFSETS_TOPIC, {"retention.ms": "1"}), OperationNotAllowedError),
    ("re-point another node", _register(VICTIM), OperationNotAllowedError),
    ("set a node's state directly", ctl.SetNodeState(VICTIM, ctl.NodeState.DRAINING), OperationNotAllowedError),
    ("move replicas", ctl.SetPartitionReplicas("orders", 0, (1,), (), 1), OperationNotAllowedError),
    ("create a placed topic", ctl.CreateTopic("placed", {}, (((1,), 1),)), OperationNotAllowedError),
    ("create another internal topic", CreateTopicRequest("__mine", 1, 1, internal=True), OperationNotAllowedError),
    ("create too many partitions", CreateTopicRequest("huge", 10**9, 1), InvalidArgumentError),
    ("create with no replicas", CreateTopicRequest("none", 1, 0), InvalidArgumentError),
    ("add partitions to an internal topic", CreatePartitionsRequest(OFFSETS_TOPIC, 99), OperationNotAllowedError),
    ("add too many partitions", CreatePartitionsRequest("orders", 10**9), InvalidArgumentError),
    ("add placed partitions", ctl.CreatePartitions("orders", 2, (((1,), 1),)), OperationNotAllowedError),
]


@pytest.mark.parametrize(("body", "error"), [(b, e) for _, b, e in FORBIDDEN], ids=[n for n, _, _ in FORBIDDEN])
@pytest.mark.parametrize("leads", [True, False], ids=["on the leader", "on a forwarder"])
def test_a_forbidden_operation_from_a_peer_is_refused_and_reaches_no_controller(
    body: ControllerBody, error: type[MultiraftError], leads: bool
) -> None:
    peer_node = Node(View(controller_leader=SELF if leads else VICTIM))
    answer = peer_node.send(PEER, ControllerRequest(body))
    assert type(answer) is error, answer
    assert peer_node.reached == []


ALLOWED: list[tuple[str, ControllerBody]] = [
    ("create a topic", CreateTopicRequest("new", 3, 3)),
    ("create the offsets topic", CreateTopicRequest(OFFSETS_TOPIC, 8, 3, internal=True)),
    ("delete a user topic", ctl.DeleteTopic("orders")),
    ("alter a user topic", ctl.AlterTopicConfigs("orders", {"retention.ms": "1000"})),
    ("add partitions to a user topic", CreatePartitionsRequest("orders", 6)),
    ("drain a node", NodeStateRequest(VICTIM, ctl.NodeState.DRAINING)),
    ("undrain a node", NodeStateRequest(VICTIM, ctl.NodeState.ACTIVE)),
    ("reserve producer ids", ctl.AllocateProducerIds(100)),
    ("register itself", _register(PEER)),
]


@pytest.mark.parametrize("body", [b for _, b in ALLOWED], ids=[n for n, _ in ALLOWED])
def test_what_a_client_could_ask_for_or_what_concerns_the_peer_itself_is_served(body: ControllerBody) -> None:
    leader = Node()
    assert leader.send(PEER, ControllerRequest(body)) == ControllerOutcome()
    assert leader.reached == [ControllerRequest(body)]


def test_a_forwarder_names_the_peer_it_serves_and_a_joining_node_may_register_through_it() -> None:
    forwarder = Node(View(node_id=VICTIM, controller_leader=SELF))
    joining = ControllerRequest(_register(4))
    assert forwarder.send(4, joining) == ControllerOutcome()
    [(to_node, passed_on)] = forwarder.peers.forwarded
    assert (to_node, passed_on) == (SELF, ControllerRequest(_register(4), forwarded=True, origin=4))

    leader = Node()
    assert leader.send(VICTIM, passed_on) == ControllerOutcome()  # node 4 could have asked for itself
    assert leader.send(STRANGER, passed_on) == ControllerOutcome()
    assert leader.reached == [passed_on, passed_on]


def test_nobody_speaks_for_a_registered_node_but_its_own_connection() -> None:
    forwarder = Node(View(node_id=VICTIM, controller_leader=SELF))
    answer = forwarder.send(STRANGER, ControllerRequest(_register(PEER)))
    assert type(answer) is OperationNotAllowedError
    leader = Node()
    for sender in (STRANGER, VICTIM, SELF):
        claim = ControllerRequest(_register(PEER), forwarded=True, origin=PEER)
        answer = leader.send(sender, claim)
        assert type(answer) is OperationNotAllowedError and f"register node {PEER}" in answer.message
    assert forwarder.reached == [] and leader.reached == []


def test_a_refused_request_leaves_the_peer_service_serving() -> None:
    leader = Node()
    service = leader.service()
    refused = encode_controller_request(ControllerRequest(ctl.DeleteTopic(OFFSETS_TOPIC, internal=True)))
    served = encode_controller_request(ControllerRequest(ctl.AllocateProducerIds(10)))

    async def both() -> tuple[int, int]:
        first, _ = await service.serve(PEER, RequestKind.CONTROLLER, refused)
        second, _ = await service.serve(PEER, RequestKind.CONTROLLER, served)
        return first, second

    assert asyncio.run(both()) == (STATUS_ERROR, STATUS_OK)


@given(
    st.one_of(small_commands(), any_commands()),
    st.sampled_from([PEER, VICTIM, STRANGER]),
    st.booleans(),
    st.sampled_from([0, PEER, VICTIM, 4, STRANGER]),
)
def test_whatever_a_peer_sends_only_allowed_operations_on_its_own_behalf_reach_the_controller(
    command: ctl.Command, sender: int, forwarded: bool, origin: int
) -> None:
    request = ControllerRequest(command, forwarded, origin)
    leader = Node()
    state = leader.view.cluster
    requester = origin if forwarded and origin not in state.nodes else sender
    answer = leader.send(sender, request)
    if not leader.reached:
        assert isinstance(answer, OperationNotAllowedError | InvalidArgumentError), answer
        return
    # AlterClusterConfigs is a client's change a peer forwards (authorize_request checks its principal)
    assert isinstance(
        command,
        ctl.RegisterNode | ctl.DeleteTopic | ctl.AlterTopicConfigs | ctl.AllocateProducerIds | ctl.AlterClusterConfigs,
    )
    if isinstance(command, ctl.RegisterNode):
        assert command.node.node_id == requester
    if isinstance(command, ctl.DeleteTopic | ctl.AlterTopicConfigs):
        assert not (isinstance(command, ctl.DeleteTopic) and command.internal)
        assert not (command.name in state.topics and state.topics[command.name].internal)


# ------------------------------------------------------------------------------------------- authorization

ALICE_MAY = [
    ctl.AclBinding(
        "User:alice",
        ctl.ResourceType.TOPIC,
        "a-",
        ctl.PatternType.PREFIXED,
        ctl.AclOperation.ALL,
        ctl.AclPermission.ALLOW,
    )
]


def _guarded(view: View | None = None) -> Node:
    return Node(view or View(), authorizer=Authorizer(ALICE_MAY, ["User:admin"]))


CLIENT_CHANGES: list[tuple[str, ControllerBody]] = [
    ("create a topic", CreateTopicRequest("orders-2", 1, 1)),
    ("delete a topic", ctl.DeleteTopic("orders")),
    ("alter a topic", ctl.AlterTopicConfigs("orders", {"retention.ms": "1"})),
    ("drain a node", NodeStateRequest(VICTIM, ctl.NodeState.DRAINING)),
    ("create a user", ctl.UpsertUser("mallory", ctl.ScramCredential(b"s" * 16, 4096, b"a" * 32, b"b" * 32))),
    ("grant an ACL", ctl.CreateAcls(tuple(replace(b, principal="User:mallory") for b in ALICE_MAY))),
    ("change a cluster config", ctl.AlterClusterConfigs({"log.retention.ms": "1"})),
]


@pytest.mark.parametrize("body", [b for _, b in CLIENT_CHANGES], ids=[n for n, _ in CLIENT_CHANGES])
def test_a_forwarded_client_change_is_checked_against_the_original_principal(body: ControllerBody) -> None:
    leader = _guarded()
    refused = leader.send(PEER, ControllerRequest(body, principal="User:alice"))
    assert type(refused) is AuthorizationFailedError and "User:alice may not" in refused.message
    anonymous = leader.send(PEER, ControllerRequest(body))
    assert type(anonymous) is OperationNotAllowedError and "without the client's principal" in anonymous.message
    assert leader.reached == []
    assert leader.send(PEER, ControllerRequest(body, principal="User:admin")) == ControllerOutcome()
    assert leader.reached == [ControllerRequest(body, principal="User:admin")]


def test_what_the_principal_may_do_and_the_nodes_own_work_are_served_and_the_principal_is_passed_on() -> None:
    leader = _guarded()
    for request in (
        ControllerRequest(CreateTopicRequest("a-topic", 1, 1), principal="User:alice"),
        ControllerRequest(CreateTopicRequest(OFFSETS_TOPIC, 8, 3, internal=True)),
        ControllerRequest(ctl.AllocateProducerIds(10, "User:alice"), principal="User:alice"),
        ControllerRequest(_register(PEER)),
    ):
        assert leader.send(PEER, request) == ControllerOutcome()
    forwarder = _guarded(View(node_id=VICTIM, controller_leader=SELF))
    forwarder.send(PEER, ControllerRequest(ctl.DeleteTopic("a-topic"), principal="User:alice"))
    [(_, passed_on)] = forwarder.peers.forwarded
    assert passed_on.principal == "User:alice"
