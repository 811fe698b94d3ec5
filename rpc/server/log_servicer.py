"""The data API's servicer: Produce, ProduceStream, Fetch, Subscribe, ListOffsets, producer ids, as thin
translations between protobuf and :class:`multiraft.node.services.DataService` and ``OffsetsService``
(errors answered by :mod:`rpc.server.handlers`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import grpc

from multiraft.consumer_groups import NO_GENERATION
from multiraft.errors import MultiraftError
from multiraft.node.vocabulary.offsets import CommittedOffset
from rpc.proto import multiraft_pb2 as pb
from rpc.proto import multiraft_pb2_grpc as pb_grpc
from rpc.proto.status import to_proto_error, to_status
from rpc.server.limits import RequestLimits, Undecodable, check_request

if TYPE_CHECKING:
    from multiraft.node.services import (
        DataService,
        FetchResult,
        OffsetsService,
        ProduceAck,
    )
from rpc.server.handlers import invalid, mapped, unexpected

__all__ = ["LogServicer"]

_STREAM_IN_FLIGHT = 128  # batches one ProduceStream may have in the node at once (back-pressure)


class LogServicer(pb_grpc.LogServicer):
    def __init__(self, data: DataService, offsets: OffsetsService, limits: RequestLimits | None = None) -> None:
        self._data = data
        self._offsets = offsets
        self._limits = limits or RequestLimits()

    @mapped
    async def Produce(  # noqa: N802 - gRPC method names
        self, request: pb.ProduceRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ProduceResponse:
        ack = await self._data.produce(request.topic, request.partition, request.batch, request.timeout_ms)
        return _produce_response(request.sequence, ack)

    @mapped
    async def Fetch(  # noqa: N802
        self, request: pb.FetchRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.FetchResponse:
        result = await self._data.fetch(
            request.topic, request.partition, request.offset, request.max_bytes, request.max_wait_ms, request.min_bytes
        )
        return _fetch_response(request.topic, request.partition, result)

    @mapped
    async def ListOffsets(  # noqa: N802
        self, request: pb.ListOffsetsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListOffsetsResponse:
        spec = {pb.EARLIEST: "earliest", pb.LATEST: "latest", pb.TIMESTAMP: "timestamp"}.get(request.spec)
        if spec is None:
            raise invalid("spec must be EARLIEST, LATEST or TIMESTAMP", "spec")
        partitions = list(request.partitions) or list(range(self._data.partition_count(request.topic)))
        offsets = []
        for partition in partitions:
            try:
                offset = self._data.list_offset(request.topic, partition, spec, request.timestamp_ms)
                offsets.append(pb.PartitionOffset(partition=partition, offset=offset))
            except MultiraftError as exc:
                offsets.append(pb.PartitionOffset(partition=partition, offset=-1, error=to_proto_error(exc)))
        return pb.ListOffsetsResponse(topic=request.topic, offsets=offsets)

    @mapped
    async def DeleteRecords(  # noqa: N802
        self, request: pb.DeleteRecordsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DeleteRecordsResponse:
        low_watermark = await self._data.delete_records(
            request.topic, request.partition, request.offset, request.timeout_ms
        )
        return pb.DeleteRecordsResponse(low_watermark=low_watermark)

    async def ProduceStream(  # noqa: N802
        self, request_iterator: AsyncIterator[pb.ProduceRequest], context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.ProduceResponse]:
        """Requests are handed to the node in arrival order; answers come back in the same order, a failed
        batch answering with ``error`` while the stream goes on. At most ``_STREAM_IN_FLIGHT`` batches and
        ``max_stream_inflight_bytes`` are uncommitted at once: the stream stops reading until answers free room.
        Anything unexpected outside one batch ends the stream with INTERNAL."""
        queue: asyncio.Queue[tuple[int, int, asyncio.Future[ProduceAck]] | None] = asyncio.Queue()
        in_flight = asyncio.Semaphore(_STREAM_IN_FLIGHT)
        budget = _ByteBudget(self._limits.max_stream_inflight_bytes)

        async def read() -> None:
            try:
                async for request in request_iterator:
                    if _undecodable(request):  # no sequence to answer it by: the stream ends, INVALID_ARGUMENT
                        check_request(request, self._limits)
                    size = len(request.batch)
                    await in_flight.acquire()
                    await budget.acquire(size)
                    try:
                        check_request(request, self._limits)
                        future = self._data.begin_produce(
                            request.topic, request.partition, request.batch, request.timeout_ms
                        )
                    except Exception as exc:  # answered in order like any failed batch
                        future = asyncio.get_running_loop().create_future()
                        future.set_exception(exc)
                    queue.put_nowait((request.sequence, size, future))
            finally:
                queue.put_nowait(None)

        reader = asyncio.ensure_future(read())
        try:
            while (item := await queue.get()) is not None:
                sequence, size, future = item
                try:
                    response = _produce_response(sequence, await future)
                except MultiraftError as exc:
                    yield pb.ProduceResponse(sequence=sequence, error=to_proto_error(exc))
                    continue
                except Exception as exc:
                    error = unexpected("ProduceStream", pb.ProduceRequest(sequence=sequence), exc)
                    yield pb.ProduceResponse(sequence=sequence, error=to_proto_error(error))
                    continue
                finally:
                    in_flight.release()
                    budget.release(size)
                yield response
            failure = reader.exception() if reader.done() and not reader.cancelled() else None
            if isinstance(failure, Exception) and not isinstance(failure, grpc.RpcError):
                error = failure if isinstance(failure, MultiraftError) else unexpected("ProduceStream", None, failure)
                await context.abort_with_status(to_status(error))  # type: ignore[attr-defined]
        finally:
            reader.cancel()
            with contextlib.suppress(Exception, asyncio.CancelledError):  # its failure was answered above
                await reader

    async def Subscribe(  # noqa: N802
        self, request: pb.SubscribeRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.FetchResponse]:
        """Pushes committed batches; a failure (e.g. leadership moved) ends the stream with an ``error`` item."""
        try:
            check_request(request, self._limits)
            async for result in self._data.subscribe(
                request.topic, request.partition, request.offset, request.max_bytes
            ):
                yield _fetch_response(request.topic, request.partition, result)
        except MultiraftError as exc:
            yield _subscribe_error(request, exc)
        except Exception as exc:
            yield _subscribe_error(request, unexpected("Subscribe", request, exc))

    @mapped
    async def InitProducer(  # noqa: N802
        self, request: pb.InitProducerRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.InitProducerResponse:
        producer_id, epoch = await self._data.init_producer()
        return pb.InitProducerResponse(producer_id=producer_id, producer_epoch=epoch)

    @mapped
    async def CommitOffsets(  # noqa: N802
        self, request: pb.CommitOffsetsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.CommitOffsetsResponse:
        offsets = [CommittedOffset(o.topic, o.partition, o.offset, o.metadata) for o in request.offsets]
        generation = request.generation if request.HasField("generation") else NO_GENERATION
        await self._offsets.commit_offsets(
            request.group, offsets, request.member_id, generation, request.group_instance_id or None
        )
        return pb.CommitOffsetsResponse()

    @mapped
    async def FetchOffsets(  # noqa: N802
        self, request: pb.FetchOffsetsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.FetchOffsetsResponse:
        found = await self._offsets.fetch_offsets(
            request.group, [(tp.topic, tp.partition) for tp in request.partitions]
        )
        return pb.FetchOffsetsResponse(
            offsets=[
                pb.CommittedOffset(
                    topic=o.topic,
                    partition=o.partition,
                    offset=o.offset,
                    metadata=o.metadata,
                    commit_time_ms=o.commit_time_ms,
                )
                for o in found
            ]
        )


def _undecodable(request: object) -> bool:
    return isinstance(request, Undecodable)


def _subscribe_error(request: pb.SubscribeRequest | Undecodable, error: MultiraftError) -> pb.FetchResponse:
    if isinstance(request, Undecodable):
        return pb.FetchResponse(error=to_proto_error(error))
    return pb.FetchResponse(topic=request.topic, partition=request.partition, error=to_proto_error(error))


def _produce_response(sequence: int, ack: ProduceAck) -> pb.ProduceResponse:
    return pb.ProduceResponse(
        sequence=sequence,
        base_offset=ack.base_offset,
        log_append_time_ms=ack.log_append_time_ms,
        log_start_offset=ack.log_start_offset,
        duplicate=ack.duplicate,
    )


def _fetch_response(topic: str, partition: int, result: FetchResult) -> pb.FetchResponse:
    return pb.FetchResponse(
        topic=topic,
        partition=partition,
        batches=result.batches,
        high_watermark=result.high_watermark,
        log_start_offset=result.log_start_offset,
        next_offset=result.next_offset,
    )


class _ByteBudget:
    """Bytes one stream may have uncommitted; one item larger than the whole budget still passes alone."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._used = 0
        self._freed = asyncio.Event()

    async def acquire(self, size: int) -> None:
        while self._used and self._used + size > self._limit:
            self._freed.clear()
            await self._freed.wait()
        self._used += size

    def release(self, size: int) -> None:
        self._used -= size
        self._freed.set()
