"""Consumer-group offsets: replicated in __consumer_offsets, served by any node, surviving node loss."""

from __future__ import annotations

import grpc
import pytest

from rpc.proto import multiraft_pb2 as pb
from rpc.proto.status import from_rpc_error
from tests.integration._helpers import Cluster

pytestmark = pytest.mark.integration


def _log_stub(cluster: Cluster, node_id: int) -> object:
    return cluster.client.log_stub(cluster.info.nodes[node_id].client_address)


def _commit(cluster: Cluster, node_id: int, group: str, offsets: dict[tuple[str, int], int]) -> None:
    request = pb.CommitOffsetsRequest(
        group=group,
        offsets=[pb.CommittedOffset(topic=t, partition=p, offset=o, metadata="m") for (t, p), o in offsets.items()],
    )
    _log_stub(cluster, node_id).CommitOffsets(request, timeout=30)  # type: ignore[attr-defined]


def _fetch(
    cluster: Cluster, node_id: int, group: str, partitions: tuple[tuple[str, int], ...] = ()
) -> dict[tuple[str, int], int]:
    request = pb.FetchOffsetsRequest(
        group=group, partitions=[pb.TopicPartition(topic=t, partition=p) for t, p in partitions]
    )
    response = _log_stub(cluster, node_id).FetchOffsets(request, timeout=30)  # type: ignore[attr-defined]
    return {(o.topic, o.partition): o.offset for o in response.offsets}


def test_offsets_committed_through_one_node_are_read_back_through_every_node(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("offsets-a", partitions=3, replication_factor=3)
    _commit(shared_cluster, 1, "billing", {("offsets-a", 0): 10, ("offsets-a", 2): 7})
    _commit(shared_cluster, 2, "billing", {("offsets-a", 0): 12})
    for node in (1, 2, 3):
        assert _fetch(shared_cluster, node, "billing") == {("offsets-a", 0): 12, ("offsets-a", 2): 7}
        assert _fetch(shared_cluster, node, "billing", (("offsets-a", 1), ("offsets-a", 2))) == {
            ("offsets-a", 1): -1,
            ("offsets-a", 2): 7,
        }
    admin = shared_cluster.client.admin_stub(shared_cluster.info.nodes[3].client_address)
    assert "billing" in admin.ListGroups(pb.ListGroupsRequest(), timeout=30).groups


def test_a_group_that_never_committed_reads_minus_one(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("offsets-b", partitions=1, replication_factor=3)
    assert _fetch(shared_cluster, 2, "nobody", (("offsets-b", 0),)) == {("offsets-b", 0): -1}
    assert _fetch(shared_cluster, 2, "nobody") == {}


@pytest.mark.parametrize(
    ("group", "topic", "partition", "offset", "reason", "field"),
    [
        ("g", "ghost", 0, 1, "UNKNOWN_TOPIC", None),
        ("g", "offsets-c", 5, 1, "UNKNOWN_PARTITION", None),
        ("g", "offsets-c", 0, -4, "INVALID_ARGUMENT", "offsets.offset"),
        ("", "offsets-c", 0, 1, "INVALID_ARGUMENT", "group"),
        ("g" * 300, "offsets-c", 0, 1, "INVALID_ARGUMENT", "group"),
    ],
    ids=["unknown topic", "unknown partition", "negative offset", "empty group", "long group"],
)
def test_a_bad_commit_gets_a_precise_status_and_changes_nothing(
    shared_cluster: Cluster, group: str, topic: str, partition: int, offset: int, reason: str, field: str | None
) -> None:
    if "offsets-c" not in {t.name for t in shared_cluster.client.metadata(refresh=True).topics.values()}:
        shared_cluster.create_topic("offsets-c", partitions=1, replication_factor=3)
    with pytest.raises(grpc.RpcError) as raised:
        _commit(shared_cluster, 1, group, {(topic, partition): offset})
    error = from_rpc_error(raised.value)
    assert error.reason == reason
    if field is not None:
        assert error.metadata["field"] == field
    if field != "group":
        assert _fetch(shared_cluster, 1, group) == {}


def test_offsets_of_a_deleted_topic_are_not_inherited_by_a_new_topic_of_the_same_name(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("offsets-reborn", partitions=1, replication_factor=3)
    _commit(shared_cluster, 1, "reader", {("offsets-reborn", 0): 42})
    admin = shared_cluster.client.admin_stub(shared_cluster.info.nodes[1].client_address)
    admin.DeleteTopic(pb.DeleteTopicRequest(name="offsets-reborn"), timeout=30)
    shared_cluster.create_topic("offsets-reborn", partitions=1, replication_factor=3)
    assert _fetch(shared_cluster, 2, "reader", (("offsets-reborn", 0),)) == {("offsets-reborn", 0): -1}


def test_committed_offsets_survive_losing_any_node_and_restarting_the_cluster(cluster: Cluster) -> None:
    cluster.create_topic("offsets-durable", partitions=2, replication_factor=3)
    # Enough commits for the offsets partition to snapshot and compact its log at least once.
    for offset in range(1, 1_101):
        _commit(cluster, 1 + offset % 3, "durable", {("offsets-durable", offset % 2): offset})
    expected = {("offsets-durable", 0): 1_100, ("offsets-durable", 1): 1_099}
    for victim in (1, 2, 3):
        cluster.kill(victim)
        survivor = 1 + victim % 3
        assert _fetch(cluster, survivor, "durable") == expected
        _commit(cluster, survivor, "durable", {("offsets-durable", 1): 1_099})
        cluster.start(victim)
    cluster.restart_all()
    assert _fetch(cluster, 2, "durable") == expected
