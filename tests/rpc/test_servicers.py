"""The gRPC servicers over fake services, on a real in-process server on 127.0.0.1.

The servicers only translate: a service's MultiraftError travels as its gRPC status with an ErrorInfo the
client turns back into the same class; anything unexpected answers INTERNAL and the server keeps serving;
streams and per-partition answers carry errors in their items and go on; requests that are wrong on their
face are refused before they reach a service.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from multiraft.errors import (
    InvalidArgumentError,
    LeaderNotAvailableError,
    MultiraftError,
    NotEnoughReplicasError,
    NotLeaderError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    TopicExistsError,
    UnknownTopicError,
)
from multiraft.node.services import (
    DrainProgress,
    FetchResult,
    NodeDescription,
    PartitionDescription,
    ProduceAck,
    TopicDescription,
    UnansweredPartition,
)
from rpc.proto import multiraft_pb2 as pb
from rpc.proto import multiraft_pb2_grpc as pb_grpc
from rpc.proto.status import from_proto_error, from_rpc_error
from rpc.server.admin_servicer import AdminServicer
from rpc.server.consumer_groups_servicer import ConsumerGroupsServicer
from rpc.server.log_servicer import LogServicer
from rpc.server.security_servicer import SecurityServicer

TIMEOUT_S = 10.0


# ----------------------------------------------------------------------------------------- fake services


@dataclass
class FakeData:
    """A DataService whose answers are scripted per method: a value, an exception, or a callable."""

    produce_answer: ProduceAck | BaseException = field(default_factory=lambda: ProduceAck(0, 0, 0))
    fetch_answer: FetchResult | BaseException = field(default_factory=lambda: FetchResult(b"", 0, 0, 0))
    offsets: dict[int, int | BaseException] = field(default_factory=dict)
    partitions: int = 0
    subscription: Sequence[FetchResult | BaseException] = ()
    begin_produce: Callable[[str, int, bytes, int], asyncio.Future[ProduceAck]] | None = None
    calls: list[tuple[Any, ...]] = field(default_factory=list)

    async def produce(self, topic: str, partition: int, batch: bytes, timeout_ms: int) -> ProduceAck:
        self.calls.append(("produce", topic, partition, batch, timeout_ms))
        return _answer(self.produce_answer)

    async def fetch(
        self, topic: str, partition: int, offset: int, max_bytes: int, max_wait_ms: int, min_bytes: int
    ) -> FetchResult:
        self.calls.append(("fetch", topic, partition, offset))
        return _answer(self.fetch_answer)

    async def subscribe(self, topic: str, partition: int, offset: int, max_bytes: int) -> AsyncIterator[FetchResult]:
        self.calls.append(("subscribe", topic, partition, offset))
        for item in self.subscription:
            yield _answer(item)

    def partition_count(self, topic: str) -> int:
        self.calls.append(("partition_count", topic))
        return self.partitions

    def list_offset(self, topic: str, partition: int, spec: str, timestamp_ms: int = 0) -> int:
        self.calls.append(("list_offset", topic, partition, spec, timestamp_ms))
        return _answer(self.offsets[partition])

    async def init_producer(self) -> tuple[int, int]:
        return 17, 0


@dataclass
class FakeOffsets:
    groups: list[str] = field(default_factory=list)
    unanswered: list[UnansweredPartition] = field(default_factory=list)

    async def list_groups(self) -> tuple[list[str], list[UnansweredPartition]]:
        return self.groups, self.unanswered


@dataclass
class FakeAdmin:
    cluster_id: str = "cluster-1"
    controller_leader: int = 0
    nodes: list[NodeDescription] = field(default_factory=list)
    topics: list[TopicDescription] = field(default_factory=list)
    drain: DrainProgress = field(default_factory=lambda: DrainProgress(0, 0))
    calls: list[tuple[Any, ...]] = field(default_factory=list)

    def metadata(self, topics: Iterable[str]) -> tuple[list[NodeDescription], list[TopicDescription]]:
        self.calls.append(("metadata", list(topics)))
        return self.nodes, self.topics

    async def drain_node(self, node_id: int, *, force: bool = False) -> DrainProgress:
        self.calls.append(("drain_node", node_id, force) if force else ("drain_node", node_id))
        return self.drain

    async def undrain_node(self, node_id: int) -> None:
        self.calls.append(("undrain_node", node_id))

    async def remove_node(self, node_id: int) -> None:
        self.calls.append(("remove_node", node_id))

    async def create_topic(self, name: str, partitions: int, rf: int, configs: dict[str, str]) -> TopicDescription:
        self.calls.append(("create_topic", name))
        raise TopicExistsError(f"topic {name} exists", topic=name)


def _answer(value: Any) -> Any:
    if isinstance(value, BaseException):
        raise value
    return value


@dataclass
class Stubs:
    log: pb_grpc.LogStub
    admin: pb_grpc.AdminStub
    security: pb_grpc.SecurityStub
    groups: pb_grpc.GroupsStub


@asynccontextmanager
async def serving(
    data: FakeData | None = None,
    admin: FakeAdmin | None = None,
    offsets: FakeOffsets | None = None,
    security: Any = None,
    groups: Any = None,
) -> AsyncIterator[Stubs]:
    offsets = offsets or FakeOffsets()
    server = grpc.aio.server()
    pb_grpc.add_LogServicer_to_server(LogServicer(data or FakeData(), offsets), server)  # type: ignore[arg-type]
    pb_grpc.add_AdminServicer_to_server(AdminServicer(admin or FakeAdmin(), offsets), server)  # type: ignore[arg-type]
    if security is not None:
        pb_grpc.add_SecurityServicer_to_server(SecurityServicer(security), server)
    if groups is not None:
        pb_grpc.add_GroupsServicer_to_server(ConsumerGroupsServicer(groups), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield Stubs(
                pb_grpc.LogStub(channel),
                pb_grpc.AdminStub(channel),
                pb_grpc.SecurityStub(channel),
                pb_grpc.GroupsStub(channel),
            )
    finally:
        await server.stop(grace=None)


def run(scenario: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    return asyncio.run(asyncio.wait_for(scenario(), 60))


async def rpc_error(call: Any) -> grpc.aio.AioRpcError:
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        return exc
    raise AssertionError("the call succeeded")


PRODUCE = pb.ProduceRequest(topic="orders", partition=1, batch=b"batch", timeout_ms=500, sequence=9)


# ------------------------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (UnknownTopicError("no topic orders", topic="orders"), grpc.StatusCode.NOT_FOUND),
        (
            NotLeaderError("not the leader", leader_id=3, leader_address="10.0.0.3:9092"),
            grpc.StatusCode.FAILED_PRECONDITION,
        ),
        (RecordTooLargeError("batch of 9 bytes exceeds 4", max_bytes=4), grpc.StatusCode.INVALID_ARGUMENT),
        (NotEnoughReplicasError("1 of 3 in sync"), grpc.StatusCode.UNAVAILABLE),
        (OffsetOutOfRangeError("offset 9 beyond 4", high_watermark=4), grpc.StatusCode.OUT_OF_RANGE),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, MultiraftError) else "",
)
def test_a_service_error_travels_as_its_status_and_comes_back_as_the_same_class(
    error: MultiraftError, code: grpc.StatusCode
) -> None:
    async def scenario() -> grpc.aio.AioRpcError:
        async with serving(FakeData(produce_answer=error)) as stubs:
            return await rpc_error(stubs.log.Produce(PRODUCE, timeout=TIMEOUT_S))

    failure = run(scenario)

    assert failure.code() == code
    assert failure.details() == error.message
    back = from_rpc_error(failure)
    assert type(back) is type(error)
    assert (back.message, back.metadata) == (error.message, error.metadata)


def test_a_not_leader_error_keeps_the_leader_to_retry_on() -> None:
    async def scenario() -> grpc.aio.AioRpcError:
        data = FakeData(fetch_answer=NotLeaderError("moved", leader_id=3, leader_address="10.0.0.3:9092"))
        async with serving(data) as stubs:
            return await rpc_error(stubs.log.Fetch(pb.FetchRequest(topic="orders", partition=0), timeout=TIMEOUT_S))

    back = from_rpc_error(run(scenario))
    assert isinstance(back, NotLeaderError)
    assert (back.leader_id, back.leader_address) == (3, "10.0.0.3:9092")


def test_an_admin_error_travels_the_same_way() -> None:
    async def scenario() -> grpc.aio.AioRpcError:
        async with serving() as stubs:
            request = pb.CreateTopicRequest(name="orders", partitions=1, replication_factor=1)
            return await rpc_error(stubs.admin.CreateTopic(request, timeout=TIMEOUT_S))

    failure = run(scenario)
    assert failure.code() == grpc.StatusCode.ALREADY_EXISTS
    back = from_rpc_error(failure)
    assert type(back) is TopicExistsError and back.metadata == {"topic": "orders"}


def test_an_unexpected_exception_answers_internal_and_the_server_keeps_serving() -> None:
    data = FakeData(fetch_answer=RuntimeError("disk on fire"))

    async def scenario() -> tuple[grpc.aio.AioRpcError, pb.FetchResponse]:
        async with serving(data) as stubs:
            request = pb.FetchRequest(topic="orders", partition=0, offset=5)
            failure = await rpc_error(stubs.log.Fetch(request, timeout=TIMEOUT_S))
            data.fetch_answer = FetchResult(b"records", 12, 2, 12)
            return failure, await stubs.log.Fetch(request, timeout=TIMEOUT_S)

    failure, response = run(scenario)

    assert failure.code() == grpc.StatusCode.INTERNAL
    back = from_rpc_error(failure)
    assert type(back) is MultiraftError and back.reason == "INTERNAL"
    assert "Fetch" in back.message and "disk on fire" in back.message
    assert (response.topic, response.partition, response.batches) == ("orders", 0, b"records")
    assert (response.high_watermark, response.log_start_offset, response.next_offset) == (12, 2, 12)


# ---------------------------------------------------------------------------------------------- ListOffsets


def test_list_offsets_answers_a_failed_partition_in_the_response_and_the_others_succeed() -> None:
    data = FakeData(offsets={0: 10, 1: NotLeaderError("moved", leader_id=2), 2: 12})

    async def scenario() -> pb.ListOffsetsResponse:
        async with serving(data) as stubs:
            request = pb.ListOffsetsRequest(topic="orders", partitions=[0, 1, 2], spec=pb.LATEST)
            return await stubs.log.ListOffsets(request, timeout=TIMEOUT_S)

    response = run(scenario)

    assert response.topic == "orders"
    assert [(o.partition, o.offset, o.HasField("error")) for o in response.offsets] == [
        (0, 10, False),
        (1, -1, True),
        (2, 12, False),
    ]
    error = from_proto_error(response.offsets[1].error)
    assert isinstance(error, NotLeaderError) and error.leader_id == 2
    assert response.offsets[1].error.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
    assert [c[3] for c in data.calls if c[0] == "list_offset"] == ["latest"] * 3


def test_list_offsets_of_no_partitions_lists_every_partition_of_the_topic() -> None:
    data = FakeData(offsets={0: 0, 1: 7}, partitions=2)

    async def scenario() -> pb.ListOffsetsResponse:
        async with serving(data) as stubs:
            request = pb.ListOffsetsRequest(topic="orders", spec=pb.TIMESTAMP, timestamp_ms=1234)
            return await stubs.log.ListOffsets(request, timeout=TIMEOUT_S)

    response = run(scenario)
    assert [(o.partition, o.offset) for o in response.offsets] == [(0, 0), (1, 7)]
    assert ("list_offset", "orders", 1, "timestamp", 1234) in data.calls


def test_list_offsets_without_a_spec_is_an_invalid_argument_naming_spec() -> None:
    data = FakeData(offsets={0: 0})

    async def scenario() -> grpc.aio.AioRpcError:
        async with serving(data) as stubs:
            request = pb.ListOffsetsRequest(topic="orders", partitions=[0])
            return await rpc_error(stubs.log.ListOffsets(request, timeout=TIMEOUT_S))

    failure = run(scenario)
    assert failure.code() == grpc.StatusCode.INVALID_ARGUMENT
    back = from_rpc_error(failure)
    assert isinstance(back, InvalidArgumentError) and back.field == "spec"
    assert data.calls == []


# -------------------------------------------------------------------------------------------- ProduceStream


class LastFirst:
    """begin_produce that holds every batch until the last one arrives, then settles them last first."""

    def __init__(self, outcomes: list[ProduceAck | BaseException]) -> None:
        self.outcomes = outcomes
        self.futures: list[asyncio.Future[ProduceAck]] = []
        self.requests: list[tuple[str, int, bytes, int]] = []

    def __call__(self, topic: str, partition: int, batch: bytes, timeout_ms: int) -> asyncio.Future[ProduceAck]:
        loop = asyncio.get_running_loop()
        self.requests.append((topic, partition, batch, timeout_ms))
        self.futures.append(loop.create_future())
        if len(self.futures) == len(self.outcomes):
            loop.call_soon(self._settle, list(zip(self.futures, self.outcomes, strict=True))[::-1])
        return self.futures[-1]

    @classmethod
    def _settle(cls, pending: list[tuple[asyncio.Future[ProduceAck], ProduceAck | BaseException]]) -> None:
        """Settle the first of ``pending`` now and the rest on later loop turns."""
        (future, outcome), rest = pending[0], pending[1:]
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
        if rest:
            asyncio.get_running_loop().call_soon(cls._settle, rest)


def test_produce_stream_answers_in_request_order_and_a_failed_batch_does_not_end_it() -> None:
    outcomes: list[ProduceAck | BaseException] = [
        ProduceAck(0, 100, 0),
        NotEnoughReplicasError("1 of 3 in sync"),
        RuntimeError("bug"),
        ProduceAck(5, 101, 0, duplicate=True),
        ProduceAck(9, 102, 0),
    ]
    producer = LastFirst(outcomes)
    data = FakeData()
    data.begin_produce = producer

    async def scenario() -> list[pb.ProduceResponse]:
        requests = [
            pb.ProduceRequest(topic="orders", partition=1, batch=bytes([i]), timeout_ms=100 + i, sequence=i + 1)
            for i in range(len(outcomes))
        ]
        async with serving(data) as stubs:
            call = stubs.log.ProduceStream(iter(requests), timeout=TIMEOUT_S)
            responses = [response async for response in call]
            assert await call.code() == grpc.StatusCode.OK
            return responses

    responses = run(scenario)

    assert [r.sequence for r in responses] == [1, 2, 3, 4, 5]
    assert producer.requests == [("orders", 1, bytes([i]), 100 + i) for i in range(5)]
    ok = [(r.sequence, r.base_offset, r.log_append_time_ms, r.duplicate) for r in responses if not r.HasField("error")]
    assert ok == [(1, 0, 100, False), (4, 5, 101, True), (5, 9, 102, False)]
    assert type(from_proto_error(responses[1].error)) is NotEnoughReplicasError
    assert responses[2].error.reason == "INTERNAL" and "bug" in responses[2].error.message


# ------------------------------------------------------------------------------------------------ Subscribe


def test_subscribe_pushes_results_and_ends_with_an_error_item_when_the_service_raises() -> None:
    data = FakeData(
        subscription=[
            FetchResult(b"first", 3, 0, 3),
            FetchResult(b"second", 6, 0, 6),
            NotLeaderError("leadership moved", leader_id=2),
        ]
    )

    async def scenario() -> tuple[list[pb.FetchResponse], grpc.StatusCode]:
        async with serving(data) as stubs:
            call = stubs.log.Subscribe(pb.SubscribeRequest(topic="orders", partition=4, offset=0), timeout=TIMEOUT_S)
            items = [item async for item in call]
            return items, await call.code()

    items, code = run(scenario)

    assert code == grpc.StatusCode.OK
    assert [(i.batches, i.next_offset, i.HasField("error")) for i in items] == [
        (b"first", 3, False),
        (b"second", 6, False),
        (b"", 0, True),
    ]
    assert all((i.topic, i.partition) == ("orders", 4) for i in items)
    error = from_proto_error(items[-1].error)
    assert isinstance(error, NotLeaderError) and error.leader_id == 2


def test_subscribe_answers_an_unexpected_exception_as_internal_and_the_server_keeps_serving() -> None:
    # As every other handler (module docstring): logged and answered INTERNAL, here as the stream's last item
    # (as ProduceStream answers one) or as the call's INTERNAL status; not gRPC's bare UNKNOWN.
    data = FakeData(subscription=[FetchResult(b"first", 3, 0, 3), RuntimeError("bug in the service")])

    async def scenario() -> tuple[list[pb.FetchResponse], MultiraftError | None, pb.FetchResponse]:
        async with serving(data) as stubs:
            call = stubs.log.Subscribe(pb.SubscribeRequest(topic="orders", partition=4), timeout=TIMEOUT_S)
            items: list[pb.FetchResponse] = []
            failure: MultiraftError | None = None
            try:
                async for item in call:
                    items.append(item)
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.INTERNAL, exc.code()
                failure = from_rpc_error(exc)
            data.fetch_answer = FetchResult(b"next", 1, 0, 1)
            return items, failure, await stubs.log.Fetch(pb.FetchRequest(topic="orders"), timeout=TIMEOUT_S)

    items, failure, after = run(scenario)

    assert items[0].batches == b"first"
    if failure is None:
        assert len(items) == 2 and items[1].HasField("error")
        failure = from_proto_error(items[1].error)
    assert type(failure) is MultiraftError and failure.reason == "INTERNAL"
    assert "bug in the service" in failure.message
    assert after.batches == b"next"


def test_subscribe_to_an_unknown_topic_answers_one_error_item() -> None:
    data = FakeData(subscription=[UnknownTopicError("no topic nope", topic="nope")])

    async def scenario() -> list[pb.FetchResponse]:
        async with serving(data) as stubs:
            call = stubs.log.Subscribe(pb.SubscribeRequest(topic="nope"), timeout=TIMEOUT_S)
            return [item async for item in call]

    [item] = run(scenario)
    assert type(from_proto_error(item.error)) is UnknownTopicError


# -------------------------------------------------------------------------------------------------- admin


@pytest.mark.parametrize("node_id", [0, -1])
@pytest.mark.parametrize("method", ["DrainNode", "UndrainNode", "RemoveNode"])
def test_a_node_id_below_one_is_an_invalid_argument_and_never_reaches_the_service(method: str, node_id: int) -> None:
    admin = FakeAdmin()
    request = getattr(pb, f"{method}Request")(node_id=node_id)

    async def scenario() -> grpc.aio.AioRpcError:
        async with serving(admin=admin) as stubs:
            return await rpc_error(getattr(stubs.admin, method)(request, timeout=TIMEOUT_S))

    failure = run(scenario)

    assert failure.code() == grpc.StatusCode.INVALID_ARGUMENT
    back = from_rpc_error(failure)
    assert isinstance(back, InvalidArgumentError) and back.field == "node_id"
    assert "node_id" in back.message
    assert admin.calls == []


def test_drain_undrain_and_remove_of_a_valid_node_reach_the_service() -> None:
    admin = FakeAdmin(drain=DrainProgress(replicas_left=3, leaders_left=1))

    async def scenario() -> pb.DrainNodeResponse:
        async with serving(admin=admin) as stubs:
            drained = await stubs.admin.DrainNode(pb.DrainNodeRequest(node_id=4), timeout=TIMEOUT_S)
            await stubs.admin.DrainNode(pb.DrainNodeRequest(node_id=6, force=True), timeout=TIMEOUT_S)
            await stubs.admin.UndrainNode(pb.UndrainNodeRequest(node_id=6), timeout=TIMEOUT_S)
            await stubs.admin.RemoveNode(pb.RemoveNodeRequest(node_id=5), timeout=TIMEOUT_S)
            return drained

    drained = run(scenario)
    assert (drained.replicas_left, drained.leaders_left, drained.safe_to_stop) == (3, 1, False)
    assert admin.calls == [("drain_node", 4), ("drain_node", 6, True), ("undrain_node", 6), ("remove_node", 5)]


def test_metadata_carries_the_cluster_id_and_controller_from_the_admin_service() -> None:
    admin = FakeAdmin(
        cluster_id="c-42",
        controller_leader=3,
        nodes=[NodeDescription(3, "10.0.0.3:9092", "10.0.0.3:9093", "r1", "alive", 2.0)],
        topics=[
            TopicDescription(
                "orders",
                (PartitionDescription(0, 3, (3, 1), (3,), 3, 10, 2, 7, learners=(2,), replica_lag={1: 4}),),
                {"retention.ms": "-1"},
                2,
            )
        ],
    )

    async def scenario() -> pb.MetadataResponse:
        async with serving(admin=admin) as stubs:
            return await stubs.admin.Metadata(pb.MetadataRequest(topics=["orders"]), timeout=TIMEOUT_S)

    response = run(scenario)

    assert (response.cluster_id, response.controller_id) == ("c-42", 3)
    assert admin.calls == [("metadata", ["orders"])]
    [node] = response.nodes
    assert (node.node_id, node.client_address, node.rack, node.state, node.capacity) == (
        3,
        "10.0.0.3:9092",
        "r1",
        "alive",
        2.0,
    )
    [topic] = response.topics
    assert (topic.name, topic.replication_factor, dict(topic.configs)) == ("orders", 2, {"retention.ms": "-1"})
    [partition] = topic.partitions
    assert (partition.leader, list(partition.replicas), list(partition.in_sync_replicas)) == (3, [3, 1], [3])
    assert (partition.high_watermark, partition.log_start_offset, partition.leader_epoch) == (10, 2, 7)
    assert (list(partition.learners), dict(partition.replica_lag)) == ([2], {1: 4})


def test_list_groups_answers_the_offsets_service() -> None:
    async def scenario() -> pb.ListGroupsResponse:
        async with serving(offsets=FakeOffsets(["a", "b"])) as stubs:
            return await stubs.admin.ListGroups(pb.ListGroupsRequest(), timeout=TIMEOUT_S)

    assert list(run(scenario).groups) == ["a", "b"]


def test_list_groups_names_the_offsets_partitions_that_did_not_answer_beside_the_groups_that_did() -> None:
    wedged = LeaderNotAvailableError("__consumer_offsets/4 (replicas 2,3): no leader elected", partition=4)
    offsets = FakeOffsets(["a"], [UnansweredPartition(4, wedged)])

    async def scenario() -> pb.ListGroupsResponse:
        async with serving(offsets=offsets) as stubs:
            return await stubs.admin.ListGroups(pb.ListGroupsRequest(), timeout=TIMEOUT_S)

    response = run(scenario)
    assert list(response.groups) == ["a"]
    ((missing),) = response.unavailable
    assert (missing.topic, missing.partition, missing.error.reason) == ("__consumer_offsets", 4, "LEADER_NOT_AVAILABLE")
    assert "no leader elected" in missing.error.message
