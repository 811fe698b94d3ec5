"""gRPC servicers: thin translations between protobuf messages and the node's services
(:mod:`multiraft.node.services`).

Every handler maps a :class:`multiraft.errors.MultiraftError` to its gRPC status (``rpc.proto.status``); anything
unexpected is logged with the request's shape and answered INTERNAL (a stream: its item, or its end), and the
node keeps serving. Every request is first held to the limits of :mod:`rpc.server.limits`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import wraps
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
from google.protobuf.message import Message

from multiraft import controller as ctl
from multiraft.consumer_groups import NO_GENERATION
from multiraft.errors import InvalidArgumentError, MultiraftError
from multiraft.logging import get_logger
from multiraft.node.replicas.offsets import OFFSETS_TOPIC
from multiraft.node.vocabulary.offsets import CommittedOffset
from rpc.proto import multiraft_pb2 as pb
from rpc.proto import multiraft_pb2_grpc as pb_grpc
from rpc.proto.status import to_proto_error, to_status
from rpc.server.limits import RequestLimits, Undecodable, check_request

if TYPE_CHECKING:
    from multiraft.node.services import (
        AdminService,
        ConsumerGroupsService,
        DataService,
        FetchResult,
        NodeDescription,
        OffsetsService,
        ProduceAck,
        TopicDescription,
        UnansweredPartition,
    )

__all__ = ["LogServicer", "AdminServicer"]

log = get_logger(__name__)

_STREAM_IN_FLIGHT = 128  # batches one ProduceStream may have in the node at once (back-pressure)

Request = TypeVar("Request")
Response = TypeVar("Response")
Handler = Callable[[Any, Request, grpc.aio.ServicerContext[Request, Response]], Awaitable[Response]]


def _mapped(handler: Handler[Request, Response]) -> Handler[Request, Response]:
    """Hold the request to the limits, then answer its error (if any) as a precise status: one request's
    failure, whatever it is, fails that request only."""

    @wraps(handler)
    async def wrapper(self: Any, request: Request, context: grpc.aio.ServicerContext[Request, Response]) -> Response:
        try:
            check_request(request, self._limits)  # type: ignore[arg-type]
            return await handler(self, request, context)
        except MultiraftError as exc:
            error = exc
        except Exception as exc:
            error = _unexpected(handler.__name__, request, exc)
        await context.abort_with_status(to_status(error))  # type: ignore[attr-defined]
        raise AssertionError("abort_with_status returned")  # pragma: no cover

    return wrapper


def _unexpected(method: str, request: object, exc: Exception) -> MultiraftError:
    """Log a bug met while serving ``request`` with the request's shape (never its payload), as INTERNAL."""
    log.exception("request failed unexpectedly", method=method, error=repr(exc), **_shape(request))
    return MultiraftError(f"internal error in {method}: {exc!r}")


def _shape(request: object) -> dict[str, object]:
    """The request's type, size and repeated-field counts: enough to reproduce the failure's scale."""
    if not isinstance(request, Message):
        return {"request": type(request).__name__}
    counts = {d.name: len(v) for d, v in request.ListFields() if d.is_repeated}
    return {"request": type(request).__name__, "request_bytes": request.ByteSize(), "items": counts}


def _topic_pb(topic: TopicDescription) -> pb.TopicInfo:
    return pb.TopicInfo(
        name=topic.name,
        replication_factor=topic.replication_factor,
        configs=topic.configs,
        internal=topic.internal,
        partitions=[
            pb.PartitionInfo(
                partition=p.partition,
                leader=p.leader,
                replicas=p.replicas,
                in_sync_replicas=p.in_sync_replicas,
                preferred_leader=p.preferred_leader,
                high_watermark=p.high_watermark,
                log_start_offset=p.log_start_offset,
                leader_epoch=p.leader_epoch,
                learners=p.learners,
                replica_lag=p.replica_lag,
            )
            for p in topic.partitions
        ],
    )


def _node_pb(node: NodeDescription) -> pb.NodeInfo:
    return pb.NodeInfo(
        node_id=node.node_id,
        client_address=node.client_address,
        peer_address=node.peer_address,
        rack=node.rack,
        state=node.state,
        capacity=node.capacity,
    )


class LogServicer(pb_grpc.LogServicer):
    def __init__(self, data: DataService, offsets: OffsetsService, limits: RequestLimits | None = None) -> None:
        self._data = data
        self._offsets = offsets
        self._limits = limits or RequestLimits()

    @_mapped
    async def Produce(  # noqa: N802 - gRPC method names
        self, request: pb.ProduceRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ProduceResponse:
        ack = await self._data.produce(request.topic, request.partition, request.batch, request.timeout_ms)
        return _produce_response(request.sequence, ack)

    @_mapped
    async def Fetch(  # noqa: N802
        self, request: pb.FetchRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.FetchResponse:
        result = await self._data.fetch(
            request.topic, request.partition, request.offset, request.max_bytes, request.max_wait_ms, request.min_bytes
        )
        return _fetch_response(request.topic, request.partition, result)

    @_mapped
    async def ListOffsets(  # noqa: N802
        self, request: pb.ListOffsetsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListOffsetsResponse:
        spec = {pb.EARLIEST: "earliest", pb.LATEST: "latest", pb.TIMESTAMP: "timestamp"}.get(request.spec)
        if spec is None:
            raise _invalid("spec must be EARLIEST, LATEST or TIMESTAMP", "spec")
        partitions = list(request.partitions) or list(range(self._data.partition_count(request.topic)))
        offsets = []
        for partition in partitions:
            try:
                offset = self._data.list_offset(request.topic, partition, spec, request.timestamp_ms)
                offsets.append(pb.PartitionOffset(partition=partition, offset=offset))
            except MultiraftError as exc:
                offsets.append(pb.PartitionOffset(partition=partition, offset=-1, error=to_proto_error(exc)))
        return pb.ListOffsetsResponse(topic=request.topic, offsets=offsets)

    @_mapped
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
                    error = _unexpected("ProduceStream", pb.ProduceRequest(sequence=sequence), exc)
                    yield pb.ProduceResponse(sequence=sequence, error=to_proto_error(error))
                    continue
                finally:
                    in_flight.release()
                    budget.release(size)
                yield response
            failure = reader.exception() if reader.done() and not reader.cancelled() else None
            if isinstance(failure, Exception) and not isinstance(failure, grpc.RpcError):
                error = failure if isinstance(failure, MultiraftError) else _unexpected("ProduceStream", None, failure)
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
            yield _subscribe_error(request, _unexpected("Subscribe", request, exc))

    @_mapped
    async def InitProducer(  # noqa: N802
        self, request: pb.InitProducerRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.InitProducerResponse:
        producer_id, epoch = await self._data.init_producer()
        return pb.InitProducerResponse(producer_id=producer_id, producer_epoch=epoch)

    @_mapped
    async def CommitOffsets(  # noqa: N802
        self, request: pb.CommitOffsetsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.CommitOffsetsResponse:
        offsets = [CommittedOffset(o.topic, o.partition, o.offset, o.metadata) for o in request.offsets]
        generation = request.generation if request.HasField("generation") else NO_GENERATION
        await self._offsets.commit_offsets(
            request.group, offsets, request.member_id, generation, request.group_instance_id or None
        )
        return pb.CommitOffsetsResponse()

    @_mapped
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


class AdminServicer(pb_grpc.AdminServicer):
    def __init__(
        self,
        admin: AdminService,
        offsets: OffsetsService,
        limits: RequestLimits | None = None,
        groups: ConsumerGroupsService | None = None,
    ) -> None:
        self._admin = admin
        self._offsets = offsets
        self._limits = limits or RequestLimits()
        self._groups = groups

    @_mapped
    async def Metadata(  # noqa: N802
        self, request: pb.MetadataRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.MetadataResponse:
        nodes, topics = self._admin.metadata(request.topics)
        return pb.MetadataResponse(
            cluster_id=self._admin.cluster_id,
            controller_id=self._admin.controller_leader,
            nodes=[_node_pb(n) for n in nodes],
            topics=[_topic_pb(t) for t in topics],
        )

    @_mapped
    async def CreateTopic(  # noqa: N802
        self, request: pb.CreateTopicRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.CreateTopicResponse:
        topic = await self._admin.create_topic(
            request.name, request.partitions, request.replication_factor, dict(request.configs)
        )
        return pb.CreateTopicResponse(topic=_topic_pb(topic))

    @_mapped
    async def DeleteTopic(  # noqa: N802
        self, request: pb.DeleteTopicRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DeleteTopicResponse:
        await self._admin.delete_topic(request.name)
        return pb.DeleteTopicResponse()

    @_mapped
    async def ListTopics(  # noqa: N802
        self, request: pb.ListTopicsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListTopicsResponse:
        topics = self._admin.list_topics(include_internal=request.include_internal)
        return pb.ListTopicsResponse(topics=[_topic_pb(t) for t in topics])

    @_mapped
    async def DescribeTopic(  # noqa: N802
        self, request: pb.DescribeTopicRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DescribeTopicResponse:
        topic = await self._admin.describe_topic(request.name)
        entries = [
            pb.ConfigEntry(name=e.name, value=e.value, source=str(e.source), read_only=e.read_only)
            for e in topic.config_entries
        ]
        return pb.DescribeTopicResponse(topic=_topic_pb(topic), config_entries=entries)

    # ------------------------------------------------------------------- adding partitions (issue 25)

    @_mapped
    async def CreatePartitions(  # noqa: N802
        self, request: pb.CreatePartitionsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.CreatePartitionsResponse:
        topic = await self._admin.create_partitions(request.name, request.total)
        return pb.CreatePartitionsResponse(topic=_topic_pb(topic))

    # ---------------------------------------------------------------- end of adding partitions (issue 25)

    @_mapped
    async def AlterTopicConfigs(  # noqa: N802
        self, request: pb.AlterTopicConfigsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.AlterTopicConfigsResponse:
        topic = await self._admin.alter_topic_configs(request.name, dict(request.set), list(request.delete))
        return pb.AlterTopicConfigsResponse(topic=_topic_pb(topic))

    @_mapped
    async def DescribeCluster(  # noqa: N802
        self, request: pb.DescribeClusterRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DescribeClusterResponse:
        cluster = await self._admin.describe_cluster()
        return pb.DescribeClusterResponse(
            cluster_id=cluster.cluster_id,
            controller_id=cluster.controller_id,
            nodes=[_node_pb(n) for n in cluster.nodes],
            loads=[pb.NodeLoad(node_id=n, replicas=r, leaders=lead) for n, r, lead in cluster.loads],
            under_replicated=[pb.TopicPartition(topic=t, partition=p) for t, p in cluster.under_replicated],
            moves=[
                pb.ReplicaMove(
                    topic=m.topic,
                    partition=m.partition,
                    from_node=m.from_node,
                    to_node=m.to_node,
                    phase=m.phase,
                    bytes_copied=m.bytes_copied,
                    bytes_total=m.bytes_total,
                    eta_seconds=m.eta_seconds,
                )
                for m in cluster.moves
            ],
            partitions=cluster.partitions,
            moves_error=cluster.moves_error or "",
        )

    @_mapped
    async def ListGroups(  # noqa: N802
        self, request: pb.ListGroupsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListGroupsResponse:
        if self._groups is None:
            names, unanswered = await self._offsets.list_groups()
            return pb.ListGroupsResponse(groups=names, unavailable=_unavailable_pb(unanswered))
        listed = await self._groups.listings()
        listings = [
            pb.GroupListing(group=r.group, state=r.state, protocol_type=r.protocol_type, members=r.members)
            for r in listed.rows
        ]
        return pb.ListGroupsResponse(
            groups=[r.group for r in listed.rows], listings=listings, unavailable=_unavailable_pb(listed.unanswered)
        )

    @_mapped
    async def DrainNode(  # noqa: N802
        self, request: pb.DrainNodeRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DrainNodeResponse:
        if request.node_id <= 0:
            raise _invalid("node_id must be >= 1", "node_id")
        drain = await self._admin.drain_node(request.node_id, force=request.force)
        return pb.DrainNodeResponse(
            replicas_left=drain.replicas_left, leaders_left=drain.leaders_left, safe_to_stop=drain.safe_to_stop
        )

    @_mapped
    async def UndrainNode(  # noqa: N802
        self, request: pb.UndrainNodeRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.UndrainNodeResponse:
        if request.node_id <= 0:
            raise _invalid("node_id must be >= 1", "node_id")
        await self._admin.undrain_node(request.node_id)
        return pb.UndrainNodeResponse()

    @_mapped
    async def RemoveNode(  # noqa: N802
        self, request: pb.RemoveNodeRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.RemoveNodeResponse:
        if request.node_id <= 0:
            raise _invalid("node_id must be >= 1", "node_id")
        await self._admin.remove_node(request.node_id)
        return pb.RemoveNodeResponse()

    # --- issue 25: cluster-wide configuration ---

    @_mapped
    async def DescribeClusterConfigs(  # noqa: N802
        self, request: pb.DescribeClusterConfigsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DescribeClusterConfigsResponse:
        entries = self._admin.describe_cluster_configs(list(request.keys))
        return pb.DescribeClusterConfigsResponse(configs=[_cluster_config_pb(e) for e in entries])

    @_mapped
    async def AlterClusterConfigs(  # noqa: N802
        self, request: pb.AlterClusterConfigsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.AlterClusterConfigsResponse:
        entries = await self._admin.alter_cluster_configs(dict(request.set), list(request.delete))
        return pb.AlterClusterConfigsResponse(configs=[_cluster_config_pb(e) for e in entries])


def _cluster_config_pb(entry: ctl.ClusterConfigEntry) -> pb.ClusterConfigEntry:
    return pb.ClusterConfigEntry(
        name=entry.name, value=entry.value, source=entry.source, default_value=entry.default, doc=entry.doc
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


def _unavailable_pb(unanswered: list[UnansweredPartition]) -> list[pb.UnavailablePartition]:
    return [
        pb.UnavailablePartition(topic=OFFSETS_TOPIC, partition=u.partition, error=to_proto_error(u.error))
        for u in unanswered
    ]


def _invalid(message: str, field: str) -> MultiraftError:
    return InvalidArgumentError(message, field=field)
