"""Consumer groups on a real 3-node cluster over raw gRPC (``service Groups``): membership, assignment,
commit fencing, description, listing, deletion and coordinator failover."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from multiraft.consumer_groups import JoinReply as CoordinatorJoinReply
from multiraft.consumer_groups import MemberSubscription, Subscription, assign_for_leader, topics_without_racks
from multiraft.tools.launcher import cluster_down, cluster_up
from rpc.client._cluster import ClusterClient
from rpc.proto import multiraft_pb2 as pb
from rpc.proto import multiraft_pb2_grpc as pb_grpc
from rpc.proto.status import from_rpc_error
from tests.integration._helpers import FAST, FAST_GROUPS, Cluster

pytestmark = pytest.mark.integration

SESSION_MS = 10_000
REBALANCE_MS = 20_000


@pytest.fixture(scope="module")
def groups_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    info = cluster_up(tmp_path_factory.mktemp("groups") / "cluster", 3, {**FAST, **FAST_GROUPS})
    cluster = Cluster(info, ClusterClient(info.bootstrap, request_timeout_s=30))
    try:
        cluster.create_topic("gt", partitions=6, replication_factor=3)
        yield cluster
    finally:
        cluster.client.close()
        cluster_down(info.directory)


def _groups(cluster: Cluster, node_id: int) -> Any:
    address = cluster.info.nodes[node_id].client_address
    return pb_grpc.GroupsStub(cluster.client.channel(address))


def _reason(call: Any) -> str:
    with pytest.raises(grpc.RpcError) as raised:
        call()
    return from_rpc_error(raised.value).reason


def _join(
    stub: Any, group: str, member_id: str, topics: list[str], protocol: str = "range", session_ms: int = SESSION_MS
) -> Any:
    request = pb.JoinGroupRequest(
        group=group,
        member_id=member_id,
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=REBALANCE_MS,
        protocols=[protocol],
        subscription=pb.GroupSubscription(topics=topics, owned_generation=-1),
        client_id="it",
    )
    return stub.JoinGroup(request, timeout=REBALANCE_MS / 1000 + 10)


def _first_join(stub: Any, group: str, topics: list[str]) -> Any:
    """Join as a new member: the first answer is MEMBER_ID_REQUIRED with the id to join with."""
    with pytest.raises(grpc.RpcError) as raised:
        _join(stub, group, "", topics)
    error = from_rpc_error(raised.value)
    assert error.reason == "MEMBER_ID_REQUIRED"
    return error.metadata["member_id"]


def _assignments(reply: Any, partitions: dict[str, int]) -> list[pb.MemberAssignment]:
    """The leader's assignment of a JoinGroup reply, computed as a client would (multiraft.consumer_groups)."""
    members = tuple(
        MemberSubscription(m.member_id, m.group_instance_id or None, Subscription(tuple(m.subscription.topics)))
        for m in reply.members
    )
    joined = CoordinatorJoinReply(
        reply.member_id, reply.generation, reply.protocol_type, reply.protocol_name, reply.leader_id, False, members
    )
    plan = assign_for_leader(joined, topics_without_racks(partitions))
    return [
        pb.MemberAssignment(member_id=m, partitions=[pb.TopicPartition(topic=t, partition=p) for t, p in sorted(tps)])
        for m, tps in plan
    ]


def _sync(stub: Any, group: str, member_id: str, generation: int, assignments: list[Any] = ()) -> Any:  # type: ignore[assignment]
    request = pb.SyncGroupRequest(group=group, member_id=member_id, generation=generation, assignments=assignments)
    return stub.SyncGroup(request, timeout=REBALANCE_MS / 1000 + 10)


def _heartbeat(stub: Any, group: str, member_id: str, generation: int) -> None:
    stub.Heartbeat(pb.GroupHeartbeatRequest(group=group, member_id=member_id, generation=generation), timeout=30)


def _heartbeat_until_rebalance(stub: Any, group: str, member_id: str, generation: int) -> None:
    """Heartbeat (as a member does every interval) until told the group rebalances."""
    for _ in range(200):
        try:
            _heartbeat(stub, group, member_id, generation)
        except grpc.RpcError as exc:
            assert from_rpc_error(exc).reason == "REBALANCE_IN_PROGRESS"
            return
        time.sleep(0.1)
    raise AssertionError("the group never rebalanced")


def _commit(cluster: Cluster, node_id: int, group: str, partition: int, **member: Any) -> None:
    stub = cluster.client.log_stub(cluster.info.nodes[node_id].client_address)
    request = pb.CommitOffsetsRequest(
        group=group, offsets=[pb.CommittedOffset(topic="gt", partition=partition, offset=5)], **member
    )
    stub.CommitOffsets(request, timeout=30)


def _describe(cluster: Cluster, node_id: int, group: str) -> Any:
    request = pb.DescribeGroupsRequest(groups=[group])
    (description,) = _groups(cluster, node_id).DescribeGroups(request, timeout=30).groups
    return description


def _form_two_member_group(cluster: Cluster, group: str) -> tuple[tuple[str, str], int, dict[str, set[int]]]:
    """Members a (through node 1) and b (through node 2) of ``group`` over topic gt's 6 partitions."""
    a_stub, b_stub = _groups(cluster, 1), _groups(cluster, 2)
    a = _first_join(a_stub, group, ["gt"])
    first = _join(a_stub, group, a, ["gt"])
    assert first.leader_id == a and first.generation >= 1
    _sync(a_stub, group, a, first.generation, _assignments(first, {"gt": 6}))
    b = _first_join(b_stub, group, ["gt"])
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        b_joined = pool.submit(_join, b_stub, group, b, ["gt"])  # parks until a rejoins
        _heartbeat_until_rebalance(a_stub, group, a, first.generation)
        a_joined = _join(a_stub, group, a, ["gt"])
        b_reply = b_joined.result(timeout=60)
    generation = a_joined.generation
    assert b_reply.generation == generation == first.generation + 1
    leader_stub = a_stub if a_joined.leader_id == a else b_stub
    leader_reply = a_joined if a_joined.leader_id == a else b_reply
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        other = b if leader_reply.member_id == a else a
        other_stub = b_stub if other == b else a_stub
        other_synced = pool.submit(_sync, other_stub, group, other, generation)
        leader_synced = _sync(
            leader_stub, group, leader_reply.member_id, generation, _assignments(leader_reply, {"gt": 6})
        )
        synced = {leader_reply.member_id: leader_synced, other: other_synced.result(timeout=60)}
    owned = {m: {tp.partition for tp in reply.assignment} for m, reply in synced.items()}
    return (a, b), generation, owned


def test_two_members_share_the_partitions_heartbeat_and_zombie_commits_are_refused(groups_cluster: Cluster) -> None:
    (a, b), generation, owned = _form_two_member_group(groups_cluster, "payments")
    assert owned[a] | owned[b] == set(range(6)) and not owned[a] & owned[b] and owned[a] and owned[b]
    _heartbeat(_groups(groups_cluster, 3), "payments", a, generation)
    _heartbeat(_groups(groups_cluster, 1), "payments", b, generation)

    mine, theirs = min(owned[a]), min(owned[b])
    _commit(groups_cluster, 3, "payments", mine, member_id=a, generation=generation)
    cases = {
        "ILLEGAL_GENERATION": {"member_id": a, "generation": generation - 1},
        "UNKNOWN_MEMBER_ID": {"member_id": "zombie", "generation": generation},
    }
    for reason, member in cases.items():
        assert _reason(lambda member=member: _commit(groups_cluster, 2, "payments", mine, **member)) == reason
    not_owned = _reason(lambda: _commit(groups_cluster, 2, "payments", theirs, member_id=a, generation=generation))
    assert not_owned == "PARTITION_NOT_OWNED"
    outside = _reason(lambda: _commit(groups_cluster, 1, "payments", mine))  # no generation: the group is active
    assert outside == "UNKNOWN_MEMBER_ID"

    described = _describe(groups_cluster, 2, "payments")
    assert (described.state, described.generation, described.protocol_name) == ("Stable", generation, "range")
    assert {m.member_id: {tp.partition for tp in m.assignment} for m in described.members} == owned
    admin = groups_cluster.client.admin_stub(groups_cluster.info.nodes[1].client_address)
    listing = admin.ListGroups(pb.ListGroupsRequest(), timeout=30)
    row = next(x for x in listing.listings if x.group == "payments")
    assert (row.state, row.protocol_type, row.members) == ("Stable", "consumer", 2)
    assert list(listing.groups) == [x.group for x in listing.listings]

    delete = _groups(groups_cluster, 3).DeleteGroups(pb.DeleteGroupsRequest(groups=["payments"]), timeout=30)
    assert delete.results[0].error.reason == "NON_EMPTY_GROUP"


def test_an_emptied_group_is_deleted_with_its_offsets(groups_cluster: Cluster) -> None:
    stub = _groups(groups_cluster, 2)
    member = _first_join(stub, "short-lived", ["gt"])
    joined = _join(stub, "short-lived", member, ["gt"])
    _sync(stub, "short-lived", member, joined.generation, _assignments(joined, {"gt": 6}))
    _commit(groups_cluster, 1, "short-lived", 0, member_id=member, generation=joined.generation)
    stub.LeaveGroup(pb.LeaveGroupRequest(group="short-lived", member_id=member), timeout=30)
    assert _describe(groups_cluster, 3, "short-lived").state == "Empty"
    _commit(groups_cluster, 1, "short-lived", 1)  # an empty group takes commits from outside any generation

    result = stub.DeleteGroups(pb.DeleteGroupsRequest(groups=["short-lived"]), timeout=30).results[0]
    assert not result.HasField("error")
    assert _describe(groups_cluster, 1, "short-lived").state == "Dead"
    fetch = groups_cluster.client.log_stub(groups_cluster.info.nodes[3].client_address).FetchOffsets(
        pb.FetchOffsetsRequest(group="short-lived"), timeout=30
    )
    assert list(fetch.offsets) == []
    admin = groups_cluster.client.admin_stub(groups_cluster.info.nodes[2].client_address)
    assert "short-lived" not in admin.ListGroups(pb.ListGroupsRequest(), timeout=30).groups


def test_an_unknown_group_is_described_dead(groups_cluster: Cluster) -> None:
    described = _describe(groups_cluster, 1, "never-seen")
    assert (described.state, len(described.members), described.HasField("error")) == ("Dead", 0, False)


def _described_by_survivor(cluster: Cluster, node_id: int, group: str) -> Any:
    """The group's description once its new coordinator answers (it waits to be current)."""
    deadline = time.monotonic() + 60
    for _ in range(600):
        described = _describe(cluster, node_id, group)
        if not described.HasField("error") or time.monotonic() > deadline:
            return described
        time.sleep(0.1)
    raise AssertionError("the group was never described")


def test_killing_the_coordinator_keeps_the_group_on_the_new_one(groups_cluster: Cluster) -> None:
    group = "failover"
    (a, b), generation, owned = _form_two_member_group(groups_cluster, group)
    coordinator = _describe(groups_cluster, 3, group).coordinator_id  # the __consumer_offsets leader
    assert coordinator in groups_cluster.info.nodes
    groups_cluster.kill(coordinator)
    try:
        survivor = next(n for n in groups_cluster.info.nodes if n != coordinator)
        described = _described_by_survivor(groups_cluster, survivor, group)
        assert not described.HasField("error"), described.error
        assert described.coordinator_id not in (0, coordinator)
        assert (described.state, described.generation) == ("Stable", generation)
        assert {m.member_id: {tp.partition for tp in m.assignment} for m in described.members} == owned
        for member in (a, b):
            _heartbeat(_groups(groups_cluster, survivor), group, member, generation)
        _commit(groups_cluster, survivor, group, min(owned[a]), member_id=a, generation=generation)
    finally:
        groups_cluster.start(coordinator)


def test_a_member_that_stops_heartbeating_is_removed_when_its_session_ends(groups_cluster: Cluster) -> None:
    stub = _groups(groups_cluster, 1)
    member = _first_join(stub, "quiet", ["gt"])
    joined = _join(stub, "quiet", member, ["gt"], session_ms=1500)
    _sync(stub, "quiet", member, joined.generation, _assignments(joined, {"gt": 6}))
    assert [m.member_id for m in _describe(groups_cluster, 2, "quiet").members] == [member]
    deadline = time.monotonic() + 60
    for _ in range(600):  # the coordinator's periodic tick ends the session; no heartbeat comes
        described = _describe(groups_cluster, 2, "quiet")
        if not described.members or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert (described.state, list(described.members)) == ("Empty", [])
    assert _reason(lambda: _heartbeat(stub, "quiet", member, joined.generation)) == "UNKNOWN_MEMBER_ID"
