"""Bad input gets a precise gRPC status with a stable reason, and the node goes on serving with nothing lost."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from rpc.proto import multiraft_pb2 as pb
from storage import encode_batch
from tests.integration._helpers import Cluster, fetch_all, produce

pytestmark = pytest.mark.integration


def _status(call: grpc.RpcError) -> tuple[grpc.StatusCode, str, dict[str, str]]:
    for key, value in call.trailing_metadata() or ():  # type: ignore[attr-defined]
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            info = error_details_pb2.ErrorInfo()
            status.details[0].Unpack(info)
            assert info.domain == "multiraft"
            return call.code(), info.reason, dict(info.metadata)  # type: ignore[attr-defined]
    raise AssertionError(f"no error details in {call}")


@pytest.fixture(scope="module")
def topic(shared_cluster: Cluster) -> Iterator[str]:
    shared_cluster.create_topic("checked", partitions=2, replication_factor=3, max_message_bytes="4096")
    produce(shared_cluster.client, "checked", 0, [b"first"])
    yield "checked"


def _leader_stub(cluster: Cluster, partition: int = 0) -> pb.TopicInfo:
    leader = cluster.leader("checked", partition)
    return cluster.client.log_stub(cluster.info.nodes[leader].client_address)


def _follower_stub(cluster: Cluster, partition: int = 0) -> tuple[object, int]:
    leader = cluster.leader("checked", partition)
    follower = next(n for n in cluster.info.nodes if n != leader)
    return cluster.client.log_stub(cluster.info.nodes[follower].client_address), leader


def _produce_request(partition: int = 0, batch: bytes | None = None, topic: str = "checked") -> pb.ProduceRequest:
    return pb.ProduceRequest(topic=topic, partition=partition, batch=batch or encode_batch([b"v"], timestamps_ms=1))


@pytest.mark.parametrize(
    ("request_", "code", "reason"),
    [
        (_produce_request(topic="nope"), grpc.StatusCode.NOT_FOUND, "UNKNOWN_TOPIC"),
        (_produce_request(partition=7), grpc.StatusCode.NOT_FOUND, "UNKNOWN_PARTITION"),
        (_produce_request(partition=-1), grpc.StatusCode.NOT_FOUND, "UNKNOWN_PARTITION"),
        (_produce_request(batch=b"\x00" * 80), grpc.StatusCode.INVALID_ARGUMENT, "CORRUPT_BATCH"),
        (
            _produce_request(batch=encode_batch([b"v"], timestamps_ms=1)[:-1] + b"?"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "CORRUPT_BATCH",
        ),
        (
            _produce_request(batch=encode_batch([b"x" * 5000], timestamps_ms=1)),
            grpc.StatusCode.INVALID_ARGUMENT,
            "RECORD_TOO_LARGE",
        ),
        (
            _produce_request(batch=encode_batch([b"v"], timestamps_ms=1, base_offset=9)),
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_ARGUMENT",
        ),
    ],
    ids=[
        "unknown topic",
        "partition too high",
        "negative partition",
        "garbage batch",
        "bad crc",
        "oversized",
        "base offset set",
    ],
)
def test_a_bad_produce_gets_a_precise_status_and_writes_nothing(
    shared_cluster: Cluster, topic: str, request_: pb.ProduceRequest, code: grpc.StatusCode, reason: str
) -> None:
    before = fetch_all(shared_cluster.client, topic, 0)
    with pytest.raises(grpc.RpcError) as raised:
        _leader_stub(shared_cluster).Produce(request_, timeout=10)
    got_code, got_reason, metadata = _status(raised.value)
    assert (got_code, got_reason) == (code, reason)
    if reason == "RECORD_TOO_LARGE":
        assert metadata["max_bytes"] == "4096"
    assert fetch_all(shared_cluster.client, topic, 0) == before
    produce(shared_cluster.client, topic, 1, [b"still serving"])


def test_a_follower_answers_not_leader_with_the_leader_s_id_and_address(shared_cluster: Cluster, topic: str) -> None:
    stub, leader = _follower_stub(shared_cluster)
    with pytest.raises(grpc.RpcError) as raised:
        stub.Produce(_produce_request(), timeout=10)  # type: ignore[attr-defined]
    code, reason, metadata = _status(raised.value)
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "NOT_LEADER")
    assert metadata["leader_id"] == str(leader)
    assert metadata["leader_address"] == shared_cluster.info.nodes[leader].client_address


@pytest.mark.parametrize(("offset", "reason"), [(10_000, "OFFSET_OUT_OF_RANGE"), (-5, "OFFSET_OUT_OF_RANGE")])
def test_fetching_outside_the_log_says_which_offsets_exist(
    shared_cluster: Cluster, topic: str, offset: int, reason: str
) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        _leader_stub(shared_cluster).Fetch(pb.FetchRequest(topic=topic, partition=0, offset=offset), timeout=10)
    code, got, metadata = _status(raised.value)
    assert (code, got) == (grpc.StatusCode.OUT_OF_RANGE, reason)
    assert int(metadata["log_start_offset"]) == 0 and int(metadata["high_watermark"]) >= 1


def test_a_negative_fetch_size_names_the_field(shared_cluster: Cluster, topic: str) -> None:
    request = pb.FetchRequest(topic=topic, partition=0, offset=0, max_bytes=-1)
    with pytest.raises(grpc.RpcError) as raised:
        _leader_stub(shared_cluster).Fetch(request, timeout=10)
    assert _status(raised.value)[1:] == ("INVALID_ARGUMENT", {"field": "max_bytes"})


@pytest.mark.parametrize(
    ("request_", "code", "reason"),
    [
        (
            pb.CreateTopicRequest(name="checked", partitions=1, replication_factor=1),
            grpc.StatusCode.ALREADY_EXISTS,
            "TOPIC_EXISTS",
        ),
        (
            pb.CreateTopicRequest(name="bad name!", partitions=1, replication_factor=1),
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_ARGUMENT",
        ),
        (
            pb.CreateTopicRequest(name="__internal", partitions=1, replication_factor=1),
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_ARGUMENT",
        ),
        (
            pb.CreateTopicRequest(name="t", partitions=1, replication_factor=4),
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_ARGUMENT",
        ),
        (
            pb.CreateTopicRequest(name="t", partitions=-3, replication_factor=1),
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_ARGUMENT",
        ),
        (
            pb.CreateTopicRequest(name="t", partitions=1, replication_factor=1, configs={"retention.ms": "soon"}),
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_ARGUMENT",
        ),
        (
            pb.CreateTopicRequest(name="t", partitions=1, replication_factor=1, configs={"colour": "blue"}),
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_ARGUMENT",
        ),
    ],
    ids=[
        "exists",
        "bad name",
        "internal name",
        "rf above nodes",
        "negative partitions",
        "bad config value",
        "unknown config",
    ],
)
def test_a_bad_create_topic_gets_a_precise_status(
    shared_cluster: Cluster, topic: str, request_: pb.CreateTopicRequest, code: grpc.StatusCode, reason: str
) -> None:
    stub = shared_cluster.client.admin_stub(shared_cluster.info.nodes[1].client_address)
    with pytest.raises(grpc.RpcError) as raised:
        stub.CreateTopic(request_, timeout=30)
    got_code, got_reason, metadata = _status(raised.value)
    assert (got_code, got_reason) == (code, reason)
    details = raised.value.details()  # type: ignore[attr-defined]
    if request_.replication_factor == 4:
        assert metadata.get("field") == "replication_factor" and "3 node" in details
    for key in request_.configs:
        assert key in details, f"the error does not name the config key {key}: {details}"
    assert "t" not in [t.name for t in stub.ListTopics(pb.ListTopicsRequest(), timeout=10).topics]


def test_deleting_and_describing_an_unknown_topic_say_unknown_topic(shared_cluster: Cluster) -> None:
    stub = shared_cluster.client.admin_stub(shared_cluster.info.nodes[2].client_address)
    for call in (
        lambda: stub.DeleteTopic(pb.DeleteTopicRequest(name="ghost"), timeout=10),
        lambda: stub.DescribeTopic(pb.DescribeTopicRequest(name="ghost"), timeout=10),
    ):
        with pytest.raises(grpc.RpcError) as raised:
            call()
        assert _status(raised.value)[:2] == (grpc.StatusCode.NOT_FOUND, "UNKNOWN_TOPIC")
