"""Operator actions on nodes, and who may ask the controller for them, on a real 3-node cluster.

* A drain can be taken back: with every node draining no topic can be placed (NOT_ENOUGH_REPLICAS), and the
  drains survive a restart; undraining makes the nodes active again and topics can be created, and that too
  survives a restart. A drain that would leave fewer active nodes than a topic's replication factor is
  refused unless forced.
* A peer connection (a raw socket that says HELLO as an unknown node) may not forward controller operations
  that only the controller leader's node proposes, nor change internal topics or another node: each is
  refused with NOT_ALLOWED, the node keeps serving and the cluster state is unchanged.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import replace

import pytest

from multiraft import Admin
from multiraft import controller as ctl
from multiraft.errors import (
    DrainRefusedError,
    MultiraftError,
    NotEnoughReplicasError,
    OperationNotAllowedError,
    RequestTimeoutError,
)
from multiraft.node.peer import messages as pm
from multiraft.node.peer.transport import PROTOCOL_VERSION, FrameType
from multiraft.node.replicas.offsets import OFFSETS_TOPIC
from multiraft.node.vocabulary.controller import ControllerOutcome, ControllerRequest, CreateTopicRequest
from rpc.proto import multiraft_pb2 as pb
from tests.integration._helpers import Cluster

pytestmark = pytest.mark.integration

STRANGER = 99
_FRAME_HEAD = struct.Struct("<IB")
_CALL_HEAD = struct.Struct("<QB")


def _node_states(admin: Admin) -> dict[int, str]:
    return {n.node_id: n.state for n in admin.describe_cluster().nodes}


def _registered(admin: Admin) -> list[tuple[int, str, bool]]:
    """Each node's id, client address and whether it is an active node (liveness aside)."""
    return [
        (n.node_id, n.client_address, n.state not in ("draining", "removed")) for n in admin.describe_cluster().nodes
    ]


def _wait(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    for _ in range(10_000):
        if check():
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    raise AssertionError(f"not reached within {timeout_s}s: {what}")


def _create_refused(admin: Admin, name: str) -> None:
    # NOT_ENOUGH_REPLICAS is retriable: the client retries it until its deadline, then raises it.
    with pytest.raises((NotEnoughReplicasError, RequestTimeoutError)):
        admin.create_topic(name, partitions=1, replication_factor=1)
    assert name not in [t.name for t in admin.list_topics()]


@pytest.mark.slow  # two full restarts and three drains: over a minute, the suite's longest single test
def test_a_drain_of_every_node_is_undone_by_undrain_and_both_survive_a_restart(cluster: Cluster) -> None:
    with Admin(cluster.client) as admin:
        for node_id in cluster.info.nodes:
            admin.drain_node(node_id)
        assert set(_node_states(admin).values()) == {"draining"}
        _create_refused(admin, "nowhere")

    cluster.restart_all()
    with Admin(cluster.client) as admin:
        assert set(_node_states(admin).values()) == {"draining"}  # a restart does not end a drain
        _create_refused(admin, "still-nowhere")
        for node_id in cluster.info.nodes:
            admin.undrain_node(node_id)
        admin.undrain_node(1)  # idempotent
        _wait(lambda: set(_node_states(admin).values()) == {"alive"}, 30, "every node active and alive")
        admin.create_topic("placed", partitions=2, replication_factor=3)
        assert {p.partition: len(p.replicas) for p in admin.describe_topic("placed").partitions} == {0: 3, 1: 3}

        # Now a topic needs all three nodes: draining one is refused, unless forced (and undone again).
        with pytest.raises(DrainRefusedError, match="placed"):
            admin.drain_node(3)
        assert _node_states(admin)[3] == "alive"
        admin.drain_node(3, force=True)
        assert _node_states(admin)[3] == "draining"
        admin.undrain_node(3)

    cluster.restart_all()
    with Admin(cluster.client) as admin:
        _wait(lambda: set(_node_states(admin).values()) == {"alive"}, 30, "every node active after the restart")
        assert [t.name for t in admin.list_topics()] == ["placed"]
        admin.create_topic("after-restart", partitions=1, replication_factor=3)


class _Peer:
    """A raw connection to a node's peer port, said HELLO on as node 99, sending CONTROLLER requests."""

    def __init__(self, address: str, cluster_id: str = "multiraft") -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        cluster = cluster_id.encode()
        hello = struct.pack("<HQH", PROTOCOL_VERSION, STRANGER, len(cluster)) + cluster
        self.sock.sendall(_FRAME_HEAD.pack(len(hello) + 1, FrameType.HELLO) + hello)
        self.call_id = 0

    def ask(self, request: ControllerRequest) -> MultiraftError | ControllerOutcome:
        self.call_id += 1
        body = _CALL_HEAD.pack(self.call_id, pm.RequestKind.CONTROLLER) + pm.encode_controller_request(request)
        self.sock.sendall(_FRAME_HEAD.pack(len(body) + 1, FrameType.REQUEST) + body)
        for _ in range(100):  # frames other than our RESPONSE (none expected) are skipped
            length, frame_type = _FRAME_HEAD.unpack(self._read(_FRAME_HEAD.size))
            frame = self._read(length - 1)
            if frame_type != FrameType.RESPONSE:
                continue
            call_id, status = _CALL_HEAD.unpack_from(frame)
            assert call_id == self.call_id
            answer = frame[_CALL_HEAD.size :]
            if status == pm.STATUS_OK:
                return pm.decode_controller_outcome(answer)
            return pm.decode_error(answer)
        raise AssertionError("no RESPONSE to the request")

    def _read(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            assert chunk, "the node closed the peer connection"
            data += chunk
        return data

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def _commit_offset(cluster: Cluster, group: str, topic: str, offset: int) -> None:
    request = pb.CommitOffsetsRequest(
        group=group, offsets=[pb.CommittedOffset(topic=topic, partition=0, offset=offset, metadata="m")]
    )
    stub = cluster.client.log_stub(cluster.info.nodes[1].client_address)
    stub.CommitOffsets(request, timeout=30)  # type: ignore[attr-defined]


def test_a_peer_may_not_forward_what_only_the_controller_leader_proposes(cluster: Cluster) -> None:
    cluster.create_topic("orders", 1, 3)
    _commit_offset(cluster, "billing", "orders", 7)  # creates __consumer_offsets
    info = cluster.info
    with Admin(cluster.client) as admin:
        nodes_before = _registered(admin)
        topics_before = admin.list_topics()
    victim = info.nodes[2]
    moved = ctl.NodeInfo(2, "127.0.0.1:1", "127.0.0.1:1", "127.0.0.1:1")
    forbidden = {
        "delete the offsets topic as the system": ctl.DeleteTopic(OFFSETS_TOPIC, internal=True),
        "delete the offsets topic": ctl.DeleteTopic(OFFSETS_TOPIC),
        "re-point another node": ctl.RegisterNode(moved),
        "drain a node behind the leader's back": ctl.SetNodeState(2, ctl.NodeState.DRAINING),
        "move replicas": ctl.SetPartitionReplicas("orders", 0, (1,), (), 1),
        "create a placed topic": ctl.CreateTopic("placed", ctl.validate_topic_configs({}, creating=True), (((1,), 1),)),
        "create an internal topic": CreateTopicRequest("__mine", 1, 1, internal=True),
    }
    for node_id, node in info.nodes.items():
        peer = _Peer(node.peer_address)
        try:
            for what, body in forbidden.items():
                answer = peer.ask(ControllerRequest(body))
                assert isinstance(answer, OperationNotAllowedError), (node_id, what, answer)
            # Claiming to pass on node 2's own request does not help a stranger either.
            claimed = ControllerRequest(ctl.RegisterNode(replace(moved)), forwarded=True, origin=2)
            assert isinstance(peer.ask(claimed), OperationNotAllowedError)
            # The connection still serves what a peer may ask for.
            assert isinstance(peer.ask(ControllerRequest(ctl.AllocateProducerIds(1))), ControllerOutcome)
        finally:
            peer.close()

    with Admin(cluster.client) as admin:
        assert _registered(admin) == nodes_before
        assert admin.list_topics() == topics_before
        assert admin.group_offsets("billing") == {("orders", 0): 7}
    assert victim.peer_address == cluster.info.nodes[2].peer_address
    cluster.create_topic("still-served", 1, 3)
