"""Client requests are held to the node's limits before any work (issue 13): a repeated or map field with too
many items, or a string too long, is refused with INVALID_ARGUMENT naming the field and never reaches a
service; the limits are config keys whose combinations are validated."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from multiraft.config.node import NodeConfig
from multiraft.errors import ConfigError, InvalidArgumentError
from multiraft.node.services import ProduceAck
from rpc.proto import multiraft_pb2 as pb
from rpc.proto import multiraft_pb2_grpc as pb_grpc
from rpc.proto.status import from_proto_error, from_rpc_error
from rpc.server.admin_servicer import AdminServicer
from rpc.server.limits import RequestLimits, check_request
from rpc.server.log_servicer import LogServicer
from tests.rpc.test_isolation import FaultyServices
from tests.rpc.test_servicers import TIMEOUT_S, run

SMALL = RequestLimits(max_request_items=4, max_request_string_chars=300, max_stream_inflight_bytes=1024)
LONG = "x" * 301


class Recording(FaultyServices):
    """Records which service methods a request reached."""

    def __init__(self) -> None:
        super().__init__()
        self.reached: list[str] = []

    def _step(self, method: str) -> None:
        self.reached.append(method)
        super()._step(method)


async def _serve(services: Any, limits: RequestLimits) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server()
    pb_grpc.add_LogServicer_to_server(LogServicer(services, services, limits), server)
    pb_grpc.add_AdminServicer_to_server(AdminServicer(services, services, limits), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


def _call(method: str, request: Any, limits: RequestLimits = SMALL) -> tuple[grpc.aio.AioRpcError | None, list[str]]:
    services = Recording()

    async def scenario() -> grpc.aio.AioRpcError | None:
        server, port = await _serve(services, limits)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub: Any = (pb_grpc.AdminStub if hasattr(pb_grpc.AdminStub(channel), method) else pb_grpc.LogStub)(
                    channel
                )
                try:
                    await getattr(stub, method)(request, timeout=TIMEOUT_S)
                except grpc.aio.AioRpcError as exc:
                    return exc
                return None
        finally:
            await server.stop(grace=None)

    return run(scenario), services.reached


REFUSED = [
    ("ListOffsets", pb.ListOffsetsRequest(topic="t", partitions=[0] * 5, spec=pb.LATEST), "partitions"),
    ("Metadata", pb.MetadataRequest(topics=["t"] * 5), "topics"),
    ("Metadata", pb.MetadataRequest(topics=["t", LONG]), "topics"),
    ("CommitOffsets", pb.CommitOffsetsRequest(group="g", offsets=[pb.CommittedOffset(topic="t")] * 5), "offsets"),
    (
        "CommitOffsets",
        pb.CommitOffsetsRequest(group="g", offsets=[pb.CommittedOffset(topic="t", metadata=LONG)]),
        "offsets.metadata",
    ),
    ("CommitOffsets", pb.CommitOffsetsRequest(group=LONG), "group"),
    ("FetchOffsets", pb.FetchOffsetsRequest(group="g", partitions=[pb.TopicPartition(topic="t")] * 5), "partitions"),
    ("CreateTopic", pb.CreateTopicRequest(name="t", configs={str(i): "v" for i in range(5)}), "configs"),
    ("CreateTopic", pb.CreateTopicRequest(name="t", configs={"k": LONG}), "configs"),
    ("CreateTopic", pb.CreateTopicRequest(name="t", configs={LONG: "v"}), "configs"),
    ("AlterTopicConfigs", pb.AlterTopicConfigsRequest(name="t", delete=["k"] * 5), "delete"),
    ("AlterTopicConfigs", pb.AlterTopicConfigsRequest(name="t", set={str(i): "v" for i in range(5)}), "set"),
    ("Produce", pb.ProduceRequest(topic=LONG, batch=b"b"), "topic"),
    ("Fetch", pb.FetchRequest(topic=LONG), "topic"),
    ("DescribeTopic", pb.DescribeTopicRequest(name=LONG), "name"),
    ("DeleteTopic", pb.DeleteTopicRequest(name=LONG), "name"),
]


@pytest.mark.parametrize(("method", "request_", "field"), REFUSED, ids=[f"{m}-{f}" for m, _, f in REFUSED])
def test_a_request_over_a_limit_is_refused_naming_the_field_before_any_service_is_called(
    method: str, request_: Any, field: str
) -> None:
    failure, reached = _call(method, request_)

    assert failure is not None and failure.code() == grpc.StatusCode.INVALID_ARGUMENT
    error = from_rpc_error(failure)
    assert isinstance(error, InvalidArgumentError) and error.field == field
    assert reached == []


def test_a_request_at_the_limits_is_served() -> None:
    failure, reached = _call("ListOffsets", pb.ListOffsetsRequest(topic="t", partitions=[0] * 4, spec=pb.LATEST))
    assert failure is None and reached == ["list_offset"] * 4
    failure, reached = _call("Metadata", pb.MetadataRequest(topics=["t" * 300] * 4))
    assert failure is None and reached == ["metadata"]


def test_stream_items_over_a_limit_answer_errors_in_order_and_the_streams_go_on() -> None:
    services = Recording()

    async def scenario() -> tuple[list[pb.ProduceResponse], list[pb.FetchResponse]]:
        server, port = await _serve(services, SMALL)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = pb_grpc.LogStub(channel)
                requests = [pb.ProduceRequest(topic=t, batch=b"b", sequence=i) for i, t in enumerate(["t", LONG, "t"])]
                produced = [r async for r in stub.ProduceStream(iter(requests), timeout=TIMEOUT_S)]
                pushed = [r async for r in stub.Subscribe(pb.SubscribeRequest(topic=LONG), timeout=TIMEOUT_S)]
                return produced, pushed
        finally:
            await server.stop(grace=None)

    produced, pushed = run(scenario)

    assert [(r.sequence, r.error.reason) for r in produced] == [(0, ""), (1, "INVALID_ARGUMENT"), (2, "")]
    assert from_proto_error(produced[1].error).metadata["field"] == "topic"
    assert len(pushed) == 1 and from_proto_error(pushed[0].error).metadata["field"] == "topic"
    assert services.reached == ["begin_produce", "begin_produce"]


def test_a_produce_stream_stops_reading_while_its_uncommitted_bytes_fill_its_budget() -> None:
    class Pending(FaultyServices):
        def __init__(self) -> None:
            super().__init__()
            self.pending: list[asyncio.Future[ProduceAck]] = []
            self.begun = asyncio.Event()

        def begin_produce(self, *_: Any) -> asyncio.Future[ProduceAck]:
            future: asyncio.Future[ProduceAck] = asyncio.get_running_loop().create_future()
            self.pending.append(future)
            self.begun.set()
            return future

    services = Pending()

    async def scenario() -> tuple[int, int, list[int]]:
        server, port = await _serve(services, SMALL)  # 1024 bytes per stream
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                requests = [pb.ProduceRequest(topic="t", batch=b"b" * 400, sequence=i) for i in range(4)]
                call = pb_grpc.LogStub(channel).ProduceStream(iter(requests), timeout=TIMEOUT_S)
                while len(services.pending) < 2:
                    services.begun.clear()
                    await services.begun.wait()
                await asyncio.sleep(0.2)  # the stream had every chance to hand over a third batch
                held = len(services.pending)
                services.pending[0].set_result(ProduceAck(0, 0, 0))
                while len(services.pending) < 3:
                    services.begun.clear()
                    await services.begun.wait()
                after_one = len(services.pending)
                for future in services.pending[1:]:
                    future.set_result(ProduceAck(1, 0, 0))
                while len(services.pending) < 4:
                    services.begun.clear()
                    await services.begun.wait()
                services.pending[3].set_result(ProduceAck(3, 0, 0))
                answers = [r.sequence async for r in call]
                return held, after_one, answers
        finally:
            await server.stop(grace=None)

    held, after_one, answers = run(scenario)

    assert (held, after_one) == (2, 3), "two batches of 400 bytes fill a 1024-byte budget; a third waits"
    assert answers == [0, 1, 2, 3]


@given(
    items=st.integers(0, 8),
    chars=st.integers(0, 12),
    nested=st.booleans(),
)
def test_check_request_refuses_exactly_the_requests_over_a_limit(items: int, chars: int, nested: bool) -> None:
    limits = RequestLimits(max_request_items=4, max_request_string_chars=6)
    text = "é" * chars
    if nested:
        request: Any = pb.CommitOffsetsRequest(group="g", offsets=[pb.CommittedOffset(metadata=text)] * items)
        field = "offsets" if items > 4 else "offsets.metadata"
    else:
        request = pb.MetadataRequest(topics=[text] * items)
        field = "topics"
    over = items > 4 or (items > 0 and chars > 6)
    if over:
        with pytest.raises(InvalidArgumentError) as caught:
            check_request(request, limits)
        assert caught.value.field == field
    else:
        check_request(request, limits)


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"max_request_bytes": 16 * 1024 * 1024}, "max_request_bytes"),  # no room for the largest batch
        ({"max_request_items": 100}, "max_request_items"),  # below max_topic_partitions
        ({"max_request_items": 5_000, "max_topic_partitions": 100}, "max_request_items"),  # below offsets per commit
        ({"fetch_max_bytes_limit": 512 * 1024}, "fetch_max_bytes"),  # the default fetch above the ceiling
        ({"max_inflight_produce_bytes": 1024 * 1024}, "max_inflight_produce_bytes"),  # not one batch
        ({"max_stream_inflight_bytes": 1024 * 1024}, "max_stream_inflight_bytes"),
        ({"max_peer_connections": 1}, "max_peer_connections"),
        ({"max_concurrent_rpcs": 0}, "max_concurrent_rpcs"),
        ({"max_concurrent_streams": 100}, "max_concurrent_streams"),  # a consumer of a 4096-partition topic
        ({"max_request_string_chars": 100}, "max_request_string_chars"),  # below a group id's 255
    ],
)
def test_limits_that_cannot_work_together_are_refused_naming_the_key(changes: dict[str, int], key: str) -> None:
    config = replace(NodeConfig(node_id=1, data_dir="/tmp/x"), **changes)
    with pytest.raises(ConfigError) as caught:
        config.validate()
    assert caught.value.field == key


def test_the_default_limits_validate_and_leave_room_for_the_largest_batch() -> None:
    config = NodeConfig(node_id=1, data_dir="/tmp/x").validate()
    assert config.max_request_bytes >= config.max_batch_bytes + 64 * 1024
    assert config.max_request_items >= max(config.max_topic_partitions, config.max_offsets_per_commit)
    assert config.fetch_max_bytes <= config.fetch_max_bytes_limit
