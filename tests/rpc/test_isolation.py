"""One rule, for every RPC: handling one request can fail only that request.

Each service method behind each RPC is made to raise an unexpected exception once (a bug, as a stray
``TypeError`` would be); the request answers INTERNAL (a stream: an INTERNAL item), the same request then
succeeds, and the server keeps serving others. The table must name every method of the protocol, so a new
RPC cannot be added without its isolation being tested.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from multiraft import consumer_groups as g
from multiraft.node.services import (
    ClusterDescription,
    ConsumerGroupDescription,
    DrainProgress,
    FetchResult,
    NodeDescription,
    PartitionDescription,
    ProduceAck,
    TopicDescription,
)
from multiraft.node.vocabulary.offsets import CommittedOffset
from rpc.proto import multiraft_pb2 as pb
from rpc.proto.status import from_proto_error, from_rpc_error
from tests.rpc.test_servicers import TIMEOUT_S, Stubs, run, serving

TOPIC = TopicDescription("orders", (PartitionDescription(0, 1, (1,), (1,), 1, 5, 0, 1),), {}, 1)
NODE = NodeDescription(1, "127.0.0.1:7000", "127.0.0.1:7100", "", "alive", 1.0)


@dataclass
class FaultyServices:
    """The data, offsets and admin services at once, each method answering well unless told to fail once."""

    faults: dict[str, BaseException] = field(default_factory=dict)
    cluster_id: str = "cluster-1"
    controller_leader: int = 1

    def _step(self, method: str) -> None:
        fault = self.faults.pop(method, None)
        if fault is not None:
            raise fault

    # data
    async def produce(self, topic: str, partition: int, batch: bytes, timeout_ms: int) -> ProduceAck:
        self._step("produce")
        return ProduceAck(4, 0, 0)

    def begin_produce(self, topic: str, partition: int, batch: bytes, timeout_ms: int) -> asyncio.Future[ProduceAck]:
        self._step("begin_produce")
        future: asyncio.Future[ProduceAck] = asyncio.get_running_loop().create_future()
        future.set_result(ProduceAck(4, 0, 0))
        return future

    async def fetch(self, topic: str, partition: int, offset: int, *_: int) -> FetchResult:
        self._step("fetch")
        return FetchResult(b"records", 5, 0, 5)

    async def subscribe(self, topic: str, partition: int, offset: int, max_bytes: int) -> AsyncIterator[FetchResult]:
        self._step("subscribe")
        yield FetchResult(b"records", 5, 0, 5)

    def partition_count(self, topic: str) -> int:
        self._step("partition_count")
        return 1

    def list_offset(self, topic: str, partition: int, spec: str, timestamp_ms: int = 0) -> int:
        self._step("list_offset")
        return 5

    async def init_producer(self) -> tuple[int, int]:
        self._step("init_producer")
        return 17, 0

    # offsets
    async def commit_offsets(self, group: str, offsets: list[CommittedOffset], *member: Any) -> None:
        self._step("commit_offsets")

    async def fetch_offsets(self, group: str, partitions: list[tuple[str, int]]) -> list[CommittedOffset]:
        self._step("fetch_offsets")
        return [CommittedOffset("orders", 0, 3)]

    async def list_groups(self) -> tuple[list[str], list[Any]]:
        self._step("list_groups")
        return ["g"], []

    # groups
    async def join(self, group: str, request: Any) -> g.JoinReply:
        self._step("join")
        return g.JoinReply("m-1", 1, "consumer", "range", "m-1")

    async def sync(self, group: str, request: Any) -> g.SyncReply:
        self._step("sync")
        return g.SyncReply("m-1", 1, "consumer", "range", frozenset({("orders", 0)}))

    async def heartbeat(self, group: str, request: Any) -> None:
        self._step("heartbeat")

    async def leave(self, group: str, request: Any) -> None:
        self._step("leave")

    async def describe(self, groups: list[str]) -> list[ConsumerGroupDescription]:
        self._step("describe")
        record = g.GroupMetadataRecord("g", 1, g.GroupState.EMPTY, "consumer", None, "", (), 0)
        return [ConsumerGroupDescription(name, record, 1) for name in groups]

    async def delete(self, groups: list[str]) -> list[Any]:
        self._step("delete")
        return [None for _ in groups]

    # admin
    def metadata(self, topics: Any) -> tuple[list[NodeDescription], list[TopicDescription]]:
        self._step("metadata")
        return [NODE], [TOPIC]

    async def create_topic(self, *_: Any) -> TopicDescription:
        self._step("create_topic")
        return TOPIC

    async def delete_topic(self, name: str) -> None:
        self._step("delete_topic")

    def list_topics(self, *, include_internal: bool = False) -> list[TopicDescription]:
        self._step("list_topics")
        return [TOPIC]

    async def describe_topic(self, name: str) -> TopicDescription:
        self._step("describe_topic")
        return TOPIC

    async def alter_topic_configs(self, *_: Any) -> TopicDescription:
        self._step("alter_topic_configs")
        return TOPIC

    async def create_partitions(self, *_: Any) -> TopicDescription:
        self._step("create_partitions")
        return TOPIC

    async def describe_cluster(self) -> ClusterDescription:
        self._step("describe_cluster")
        return ClusterDescription("cluster-1", 1, (NODE,), ((1, 1, 1),), (), 1)

    async def drain_node(self, node_id: int, *, force: bool = False) -> DrainProgress:
        self._step("drain_node")
        return DrainProgress(0, 0)

    async def undrain_node(self, node_id: int) -> None:
        self._step("undrain_node")

    async def remove_node(self, node_id: int) -> None:
        self._step("remove_node")

    # issue 25: DeleteRecords, cluster configs
    async def delete_records(self, topic: str, partition: int, offset: int, timeout_ms: int = 0) -> int:
        self._step("delete_records")
        return 3

    def describe_cluster_configs(self, keys: Any = ()) -> list[Any]:
        self._step("describe_cluster_configs")
        return []

    async def alter_cluster_configs(self, *_: Any) -> list[Any]:
        self._step("alter_cluster_configs")
        return []

    # security
    def scram_first(self, client_first: str) -> tuple[str, str]:
        self._step("scram_first")
        return "session", "r=abc,s=AAAA,i=4096"

    async def upsert_user(self, name: str, credential: Any, *, create_only: bool) -> None:
        self._step("upsert_user")

    async def delete_user(self, name: str) -> None:
        self._step("delete_user")

    def list_users(self) -> list[tuple[str, int]]:
        self._step("list_users")
        return [("alice", 4096)]

    async def create_acls(self, bindings: Any) -> None:
        self._step("create_acls")

    async def delete_acls(self, filters: Any) -> list[Any]:
        self._step("delete_acls")
        return []

    def describe_acls(self, filters: Any) -> list[Any]:
        self._step("describe_acls")
        return []


Call = Callable[[Stubs], Any]


async def _unary(call: Any) -> Any:
    return await call


async def _stream(call: Any) -> list[Any]:
    return [item async for item in call]


PRODUCE = pb.ProduceRequest(topic="orders", partition=0, batch=b"b")

# RPC -> (service method that fails, how to call it, whether it streams)
CASES: dict[str, tuple[str, Call, bool]] = {
    "Produce": ("produce", lambda s: s.log.Produce(PRODUCE, timeout=TIMEOUT_S), False),
    "ProduceStream": ("begin_produce", lambda s: s.log.ProduceStream(iter([PRODUCE]), timeout=TIMEOUT_S), True),
    "Fetch": ("fetch", lambda s: s.log.Fetch(pb.FetchRequest(topic="orders"), timeout=TIMEOUT_S), False),
    "Subscribe": ("subscribe", lambda s: s.log.Subscribe(pb.SubscribeRequest(topic="orders"), timeout=TIMEOUT_S), True),
    "ListOffsets": (
        "list_offset",
        lambda s: s.log.ListOffsets(
            pb.ListOffsetsRequest(topic="orders", partitions=[0], spec=pb.LATEST), timeout=TIMEOUT_S
        ),
        False,
    ),
    "InitProducer": ("init_producer", lambda s: s.log.InitProducer(pb.InitProducerRequest(), timeout=TIMEOUT_S), False),
    "CommitOffsets": (
        "commit_offsets",
        lambda s: s.log.CommitOffsets(
            pb.CommitOffsetsRequest(group="g", offsets=[pb.CommittedOffset(topic="orders", offset=3)]),
            timeout=TIMEOUT_S,
        ),
        False,
    ),
    "FetchOffsets": (
        "fetch_offsets",
        lambda s: s.log.FetchOffsets(pb.FetchOffsetsRequest(group="g"), timeout=TIMEOUT_S),
        False,
    ),
    "Metadata": ("metadata", lambda s: s.admin.Metadata(pb.MetadataRequest(), timeout=TIMEOUT_S), False),
    "CreateTopic": (
        "create_topic",
        lambda s: s.admin.CreateTopic(pb.CreateTopicRequest(name="orders"), timeout=TIMEOUT_S),
        False,
    ),
    "DeleteTopic": (
        "delete_topic",
        lambda s: s.admin.DeleteTopic(pb.DeleteTopicRequest(name="orders"), timeout=TIMEOUT_S),
        False,
    ),
    "ListTopics": ("list_topics", lambda s: s.admin.ListTopics(pb.ListTopicsRequest(), timeout=TIMEOUT_S), False),
    "DescribeTopic": (
        "describe_topic",
        lambda s: s.admin.DescribeTopic(pb.DescribeTopicRequest(name="orders"), timeout=TIMEOUT_S),
        False,
    ),
    "AlterTopicConfigs": (
        "alter_topic_configs",
        lambda s: s.admin.AlterTopicConfigs(pb.AlterTopicConfigsRequest(name="orders"), timeout=TIMEOUT_S),
        False,
    ),
    "DescribeCluster": (
        "describe_cluster",
        lambda s: s.admin.DescribeCluster(pb.DescribeClusterRequest(), timeout=TIMEOUT_S),
        False,
    ),
    "DrainNode": ("drain_node", lambda s: s.admin.DrainNode(pb.DrainNodeRequest(node_id=2), timeout=TIMEOUT_S), False),
    "RemoveNode": (
        "remove_node",
        lambda s: s.admin.RemoveNode(pb.RemoveNodeRequest(node_id=2), timeout=TIMEOUT_S),
        False,
    ),
    "UndrainNode": (
        "undrain_node",
        lambda s: s.admin.UndrainNode(pb.UndrainNodeRequest(node_id=2), timeout=TIMEOUT_S),
        False,
    ),
    "ListGroups": ("list_groups", lambda s: s.admin.ListGroups(pb.ListGroupsRequest(), timeout=TIMEOUT_S), False),
    "CreatePartitions": (
        "create_partitions",
        lambda s: s.admin.CreatePartitions(pb.CreatePartitionsRequest(name="orders", total=2), timeout=TIMEOUT_S),
        False,
    ),
    "Authenticate": (
        "scram_first",
        lambda s: s.security.Authenticate(
            pb.AuthenticateRequest(mechanism="SCRAM-SHA-256", message="n,,n=alice,r=abc"), timeout=TIMEOUT_S
        ),
        False,
    ),
    "UpsertUser": (
        "upsert_user",
        lambda s: s.security.UpsertUser(pb.UpsertUserRequest(name="alice"), timeout=TIMEOUT_S),
        False,
    ),
    "DeleteUser": (
        "delete_user",
        lambda s: s.security.DeleteUser(pb.DeleteUserRequest(name="alice"), timeout=TIMEOUT_S),
        False,
    ),
    "ListUsers": ("list_users", lambda s: s.security.ListUsers(pb.ListUsersRequest(), timeout=TIMEOUT_S), False),
    "CreateAcls": ("create_acls", lambda s: s.security.CreateAcls(pb.CreateAclsRequest(), timeout=TIMEOUT_S), False),
    "DeleteAcls": (
        "delete_acls",
        lambda s: s.security.DeleteAcls(
            pb.DeleteAclsRequest(filters=[pb.AclFilter(principal="User:alice")]), timeout=TIMEOUT_S
        ),
        False,
    ),
    "DescribeAcls": (
        "describe_acls",
        lambda s: s.security.DescribeAcls(pb.DescribeAclsRequest(), timeout=TIMEOUT_S),
        False,
    ),
}
CASES |= {
    "JoinGroup": (
        "join",
        lambda s: s.groups.JoinGroup(pb.JoinGroupRequest(group="g", protocols=["range"]), timeout=TIMEOUT_S),
        False,
    ),
    "SyncGroup": ("sync", lambda s: s.groups.SyncGroup(pb.SyncGroupRequest(group="g"), timeout=TIMEOUT_S), False),
    "Heartbeat": (
        "heartbeat",
        lambda s: s.groups.Heartbeat(pb.GroupHeartbeatRequest(group="g"), timeout=TIMEOUT_S),
        False,
    ),
    "LeaveGroup": ("leave", lambda s: s.groups.LeaveGroup(pb.LeaveGroupRequest(group="g"), timeout=TIMEOUT_S), False),
    "DescribeGroups": (
        "describe",
        lambda s: s.groups.DescribeGroups(pb.DescribeGroupsRequest(groups=["g"]), timeout=TIMEOUT_S),
        False,
    ),
    "DeleteGroups": (
        "delete",
        lambda s: s.groups.DeleteGroups(pb.DeleteGroupsRequest(groups=["g"]), timeout=TIMEOUT_S),
        False,
    ),
}
CASES |= {  # issue 25
    "DeleteRecords": (
        "delete_records",
        lambda s: s.log.DeleteRecords(pb.DeleteRecordsRequest(topic="orders", offset=3), timeout=TIMEOUT_S),
        False,
    ),
    "DescribeClusterConfigs": (
        "describe_cluster_configs",
        lambda s: s.admin.DescribeClusterConfigs(pb.DescribeClusterConfigsRequest(), timeout=TIMEOUT_S),
        False,
    ),
    "AlterClusterConfigs": (
        "alter_cluster_configs",
        lambda s: s.admin.AlterClusterConfigs(pb.AlterClusterConfigsRequest(), timeout=TIMEOUT_S),
        False,
    ),
}
FAULTS = [RuntimeError("boom"), TypeError("'int' object is not iterable"), OverflowError("int too big to convert")]


def test_the_table_covers_every_rpc_of_the_protocol() -> None:
    methods = {m.name for service in pb.DESCRIPTOR.services_by_name.values() for m in service.methods}
    assert methods == set(CASES)


@pytest.mark.parametrize("rpc", sorted(CASES))
@pytest.mark.parametrize("fault", FAULTS, ids=lambda fault: type(fault).__name__)
def test_an_exception_in_any_handler_fails_that_request_alone_with_internal(rpc: str, fault: Exception) -> None:
    method, call, streams = CASES[rpc]
    services = FaultyServices(faults={method: fault})

    async def scenario() -> tuple[Any, Any, Any]:
        async with serving(services, services, services, security=services, groups=services) as stubs:  # type: ignore[arg-type]
            if streams:
                failed: Any = await _stream(call(stubs))
            else:
                try:
                    await _unary(call(stubs))
                except grpc.aio.AioRpcError as exc:
                    failed = exc
                else:
                    raise AssertionError(f"{rpc} succeeded though {method} raised")
            again = await (_stream(call(stubs)) if streams else _unary(call(stubs)))
            other = await stubs.admin.ListGroups(pb.ListGroupsRequest(), timeout=TIMEOUT_S)
            return failed, again, other

    failed, again, other = run(scenario)

    if streams:
        (item,) = failed
        error = from_proto_error(item.error)
        assert item.error.code == grpc.StatusCode.INTERNAL.value[0]
    else:
        assert failed.code() == grpc.StatusCode.INTERNAL
        error = from_rpc_error(failed)
    assert error.reason == "INTERNAL" and rpc in error.message and type(fault).__name__ in error.message
    if streams:
        assert len(again) == 1 and not again[0].HasField("error")
    assert list(other.groups) == ["g"]


def test_a_service_answer_the_wire_cannot_carry_fails_that_request_alone() -> None:
    class Overflowing(FaultyServices):
        async def produce(self, topic: str, partition: int, batch: bytes, timeout_ms: int) -> ProduceAck:
            return ProduceAck(2**70, 0, 0)

        def begin_produce(self, *args: Any) -> asyncio.Future[ProduceAck]:
            future: asyncio.Future[ProduceAck] = asyncio.get_running_loop().create_future()
            future.set_result(ProduceAck(2**70 if args[1] == 1 else 4, 0, 0))
            return future

    services = Overflowing()

    async def scenario() -> tuple[Any, list[Any]]:
        async with serving(services, services, services, security=services, groups=services) as stubs:  # type: ignore[arg-type]
            try:
                await stubs.log.Produce(PRODUCE, timeout=TIMEOUT_S)
            except grpc.aio.AioRpcError as exc:
                failed = exc
            requests = [pb.ProduceRequest(topic="orders", partition=p, batch=b"b", sequence=p) for p in (0, 1, 2)]
            items = [item async for item in stubs.log.ProduceStream(iter(requests), timeout=TIMEOUT_S)]
            return failed, items

    failed, items = run(scenario)

    assert failed.code() == grpc.StatusCode.INTERNAL
    assert [(i.sequence, i.error.code) for i in items] == [(0, 0), (1, grpc.StatusCode.INTERNAL.value[0]), (2, 0)]
