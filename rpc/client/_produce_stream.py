"""One producer's ``ProduceStream`` call to one node (the sender's loop thread only).

Requests are written by a writer task this stream owns (grpc.aio's reader/writer style, not a request
iterator): a request iterator is consumed by a task grpc starts and nobody can end, which stays pending on the
iterator after the call fails (a node killed or paused), and is destroyed pending when collected. The stream
ends its writer, and cancels the call, however the call ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import grpc
import grpc.aio

from multiraft import trace
from multiraft.errors import ConnectionFailedError, MultiraftError, RequestTimeoutError, UnavailableError
from rpc.client._produce_request import PRODUCE_STREAM_METHOD
from rpc.proto import multiraft_pb2 as pb
from rpc.proto.status import from_rpc_error

if TYPE_CHECKING:
    from rpc.client._accumulator import ProducerBatch

__all__ = ["CONNECT_TIMEOUT_S", "NodeStream", "StreamOwner", "connect"]

CONNECT_TIMEOUT_S = 5.0


class StreamOwner(Protocol):
    """What a stream tells the sender."""

    def on_response(
        self, batch: ProducerBatch, response: pb.ProduceResponse | None, error: MultiraftError | None
    ) -> None: ...

    def on_stream_closed(self, stream: NodeStream) -> None: ...

    def streams_unsupported(self, address: str) -> None: ...


@dataclass(eq=False)
class _Sent:
    sequence: int
    batch: ProducerBatch
    sent_at: float


async def connect(channel: grpc.aio.Channel, timeout_s: float) -> bool:
    """Whether the channel gets ready within ``timeout_s``; False at once when the node refuses connections
    (a dead leader should cost one failed attempt, not a timeout)."""
    deadline = time.monotonic() + timeout_s
    state = channel.get_state(try_to_connect=True)
    while state != grpc.ChannelConnectivity.READY:
        remaining = deadline - time.monotonic()
        if state in (grpc.ChannelConnectivity.TRANSIENT_FAILURE, grpc.ChannelConnectivity.SHUTDOWN) or remaining <= 0:
            return False
        try:
            await asyncio.wait_for(channel.wait_for_state_change(state), remaining)
        except TimeoutError:
            return False
        state = channel.get_state(try_to_connect=True)
    return True


class NodeStream:
    """One ProduceStream to one node; answers come back in request order."""

    def __init__(self, owner: StreamOwner, address: str, channel: grpc.aio.Channel) -> None:
        self.address = address
        self.outstanding: deque[_Sent] = deque()
        self.closed = False
        self._owner = owner
        self._channel = channel
        self._queue: asyncio.Queue[tuple[bytes, ProducerBatch] | None] = asyncio.Queue()
        self._call: Any = None  # grpc.aio.StreamStreamCall[bytes, pb.ProduceResponse]
        self._timed_out = False
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"produce-stream-{address}")

    def send(self, sequence: int, batch: ProducerBatch, request: bytes) -> None:
        """Queue a serialized ProduceRequest (see :mod:`rpc.client._produce_request`) whose id is ``sequence``."""
        self.outstanding.append(_Sent(sequence, batch, time.monotonic()))
        self._queue.put_nowait((request, batch))

    def finish(self) -> None:
        """No more requests: the node ends the stream after the last answer."""
        self._queue.put_nowait(None)

    def give_up(self) -> None:
        """The oldest request has waited too long for its answer: break the stream."""
        if self._call is not None and not self._timed_out:
            self._timed_out = True
            self._call.cancel()

    async def _write(self, call: Any) -> None:
        """Write queued requests until :meth:`finish` (then half-close) or the call ends."""
        with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
            while True:
                item = await self._queue.get()
                if item is None:
                    await call.done_writing()
                    return
                request, batch = item
                batch.maybe_written = True
                if trace.ON:
                    trace.event("produce_written", trace.batch_key(request[batch.request_at : batch.request_at + 17]))
                await call.write(request)

    async def _run(self) -> None:
        error: MultiraftError
        if not await connect(self._channel, CONNECT_TIMEOUT_S):
            error = ConnectionFailedError(f"could not connect to {self.address}")
        else:
            # Reader/writer style; requests are written as the bytes the producer serialized.
            call = self._channel.stream_stream(
                PRODUCE_STREAM_METHOD, request_serializer=None, response_deserializer=pb.ProduceResponse.FromString
            )(None)
            self._call = call
            writer = asyncio.get_running_loop().create_task(self._write(call), name=f"produce-writer-{self.address}")
            try:
                error = await self._read(call)
            except asyncio.CancelledError:
                if not self._timed_out:
                    self._fail_outstanding(UnavailableError("the producer closed"))
                    raise
                error = RequestTimeoutError(f"no answer from {self.address} within the request timeout")
            finally:
                # However the call ended, nothing of it may outlive the stream.
                call.cancel()
                writer.cancel()
                await asyncio.gather(writer, return_exceptions=True)
        self._fail_outstanding(error)

    async def _read(self, call: Any) -> MultiraftError:
        """Hand each answer to the owner; the error that ended the stream."""
        try:
            async for response in call:
                if not self.outstanding or self.outstanding[0].sequence != response.sequence:
                    return UnavailableError(f"the produce stream to {self.address} answered out of order")
                sent = self.outstanding.popleft()
                self._owner.on_response(sent.batch, response, None)
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                self._owner.streams_unsupported(self.address)
                for sent in self.outstanding:
                    sent.batch.maybe_written = False  # the node refused the call: nothing was written
            return from_rpc_error(exc)
        return UnavailableError(f"the produce stream to {self.address} ended")

    def _fail_outstanding(self, error: MultiraftError) -> None:
        self.closed = True
        outstanding, self.outstanding = self.outstanding, deque()
        self._owner.on_stream_closed(self)
        for sent in outstanding:
            self._owner.on_response(sent.batch, None, error)
