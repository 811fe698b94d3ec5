"""The gRPC front door as a node builds it (``GrpcFrontDoor``), over fake services: the listener's limits from
the node config hold before any handler runs, and request bytes that do not parse are an INVALID_ARGUMENT
naming ``request`` (gRPC alone would answer UNKNOWN)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from multiraft.config.node import NodeConfig
from multiraft.errors import ResourceExhaustedError
from multiraft.node.services import FetchResult
from rpc.proto import multiraft_pb2 as pb
from rpc.proto import multiraft_pb2_grpc as pb_grpc
from rpc.proto.status import from_proto_error, from_rpc_error
from rpc.server.front_door import GrpcFrontDoor
from tests.rpc.test_isolation import FaultyServices

CORRUPT = b"\xff\xff\xff"


class Waiting(FaultyServices):
    """Subscriptions that push one result and then wait until the test ends."""

    async def subscribe(self, topic: str, partition: int, offset: int, max_bytes: int) -> AsyncIterator[FetchResult]:
        yield FetchResult(b"", 0, 0, 0)
        await asyncio.Event().wait()


def _front_door(
    tmp_path: Path, scenario: Callable[[grpc.aio.Channel, str], Coroutine[Any, Any, Any]], **keys: Any
) -> Any:
    config = replace(NodeConfig(node_id=1, data_dir=str(tmp_path), client_address="127.0.0.1:0"), **keys).validate()
    services = Waiting()

    async def run() -> Any:
        door = GrpcFrontDoor(config)
        await door.start(
            SimpleNamespace(data=services, offsets=services, admin=services, security=services, groups=None)
        )  # type: ignore[arg-type]
        try:
            async with grpc.aio.insecure_channel(
                f"127.0.0.1:{door.port}", options=[("grpc.max_send_message_length", -1)]
            ) as channel:
                return await scenario(channel, f"127.0.0.1:{door.port}")
        finally:
            await door.stop()

    return asyncio.run(asyncio.wait_for(run(), 60))


@pytest.mark.parametrize(
    "method",
    [
        "/multiraft.v1.Log/Fetch",
        "/multiraft.v1.Log/ListOffsets",
        "/multiraft.v1.Log/CommitOffsets",
        "/multiraft.v1.Admin/Metadata",
        "/multiraft.v1.Admin/ListGroups",
        "/multiraft.v1.Admin/DrainNode",
    ],
)
def test_request_bytes_that_do_not_parse_are_an_invalid_argument_naming_the_request(
    tmp_path: Path, method: str
) -> None:
    async def scenario(channel: grpc.aio.Channel, address: str) -> tuple[grpc.aio.AioRpcError, bytes]:
        call = channel.unary_unary(method)
        try:
            await call(CORRUPT, timeout=10)
        except grpc.aio.AioRpcError as exc:
            failure = exc
        else:
            raise AssertionError("corrupt bytes were served")
        answer = await channel.unary_unary("/multiraft.v1.Admin/ListGroups")(b"", timeout=10)
        return failure, answer

    failure, answer = _front_door(tmp_path, scenario)

    assert failure.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert from_rpc_error(failure).metadata["field"] == "request"
    assert pb.ListGroupsResponse.FromString(answer).groups == ["g"], "the next request is served"


def test_streams_given_bytes_that_do_not_parse_end_with_invalid_argument(tmp_path: Path) -> None:
    async def scenario(channel: grpc.aio.Channel, address: str) -> tuple[Any, list[bytes]]:
        produce = channel.stream_stream("/multiraft.v1.Log/ProduceStream")
        good = pb.ProduceRequest(topic="t", batch=b"b").SerializeToString()
        answers: list[bytes] = []
        try:
            async for answer in produce(iter([good, CORRUPT, good]), timeout=10):
                answers.append(answer)
        except grpc.aio.AioRpcError as exc:
            failure: Any = exc
        subscribed = [item async for item in channel.unary_stream("/multiraft.v1.Log/Subscribe")(CORRUPT, timeout=10)]
        return (failure, subscribed), answers

    (failure, subscribed), answers = _front_door(tmp_path, scenario)

    assert len(answers) == 1, "the batch before the corrupt item was answered"
    assert failure.code() == grpc.StatusCode.INVALID_ARGUMENT
    (item,) = [pb.FetchResponse.FromString(raw) for raw in subscribed]
    assert from_proto_error(item.error).metadata["field"] == "request"


def test_a_request_above_max_request_bytes_is_refused_resource_exhausted_before_parsing(tmp_path: Path) -> None:
    async def scenario(channel: grpc.aio.Channel, address: str) -> grpc.StatusCode:
        stub = pb_grpc.LogStub(channel)
        try:
            await stub.Produce(pb.ProduceRequest(topic="t", batch=b"x" * (2 << 20)), timeout=10)
        except grpc.aio.AioRpcError as exc:
            return exc.code()
        raise AssertionError("served")

    code = _front_door(tmp_path, scenario, max_batch_bytes=1024, max_request_bytes=1 << 20)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_calls_beyond_max_concurrent_rpcs_are_refused_resource_exhausted_and_the_rest_go_on(tmp_path: Path) -> None:
    async def scenario(channel: grpc.aio.Channel, address: str) -> tuple[grpc.aio.AioRpcError, int]:
        stub = pb_grpc.LogStub(channel)
        streams = [stub.Subscribe(pb.SubscribeRequest(topic="t"), timeout=20) for _ in range(2)]
        for stream in streams:
            await stream.read()  # each is being served
        try:
            await stub.InitProducer(pb.InitProducerRequest(), timeout=10)
            raise AssertionError("a third call was served")
        except grpc.aio.AioRpcError as exc:
            refused = exc
        streams[0].cancel()
        for _ in range(100):  # the server notices the cancel
            try:
                answer = await stub.InitProducer(pb.InitProducerRequest(), timeout=10)
                break
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.05)
        streams[1].cancel()
        return refused, answer.producer_id

    refused, producer_id = _front_door(tmp_path, scenario, max_concurrent_rpcs=2)
    assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    error = from_rpc_error(refused)
    assert isinstance(error, ResourceExhaustedError) and error.retriable, "the client retries later"
    assert producer_id == 17


def test_client_connections_beyond_max_client_connections_are_closed_and_the_first_goes_on(tmp_path: Path) -> None:
    async def scenario(channel: grpc.aio.Channel, address: str) -> tuple[grpc.StatusCode, int]:
        stub = pb_grpc.LogStub(channel)
        await stub.InitProducer(pb.InitProducerRequest(), timeout=10)  # the one connection allowed
        options = [("grpc.use_local_subchannel_pool", 1)]  # a connection of its own
        async with grpc.aio.insecure_channel(address, options=options) as second:
            try:
                await pb_grpc.LogStub(second).InitProducer(pb.InitProducerRequest(), timeout=5)
                code = grpc.StatusCode.OK
            except grpc.aio.AioRpcError as exc:
                code = exc.code()
        answer = await stub.InitProducer(pb.InitProducerRequest(), timeout=10)
        return code, answer.producer_id

    code, producer_id = _front_door(tmp_path, scenario, max_client_connections=1)
    assert code == grpc.StatusCode.UNAVAILABLE
    assert producer_id == 17
