"""The consumer's fetch path: one long-lived ``Subscribe`` server stream per assigned partition.

A leader pushes each partition's committed batches as they commit (``LogServicer.Subscribe``), so a
consumer that keeps one stream open per partition pays no request per batch and no thread per call.
The streams run on one background thread with its own asyncio loop and ``grpc.aio`` channels (one per
node address); the consumer's thread takes the responses from each stream's small queue.

Memory stays bounded: a stream reads another response only while its queue holds fewer than
``window`` of them, so once the application stops polling, HTTP/2 flow control stops the leader.

A stream ends on the first error: a pushed ``error`` item (``NOT_LEADER``, ``OFFSET_OUT_OF_RANGE``,
``UNAVAILABLE``...), a failed call (connection lost, node stopped) or the end of the call; the consumer
then decides whether and where to re-open it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import Any

import grpc
import grpc.aio

from multiraft import trace
from multiraft.errors import MultiraftError, UnavailableError
from multiraft.logging import get_logger
from rpc.client._aio import cancel_all_tasks
from rpc.client._cluster import CHANNEL_OPTIONS
from rpc.client._fetch_response import FetchedResponse, parse_fetch_response
from rpc.client._tls import open_aio_channel
from rpc.proto import multiraft_pb2 as pb
from rpc.proto.status import from_proto_error, from_rpc_error

__all__ = ["PartitionStream", "StreamFetcher"]

log = get_logger(__name__)

_CLOSE_TIMEOUT_S = 5.0
# No BDP probing: the HTTP/2 window stays at its initial size instead of growing to megabytes per
# stream, so a stream whose queue is full holds about one more window in the transport (grpc still
# widens the window for a message larger than it while the reader waits for that message).
# Reads of up to a few MiB (gRPC's default chunk is 8 KiB) and frames of up to 1 MiB: fewer syscalls and
# frames per pushed response (about 5 % of the consumer's CPU at 1 KiB values).
_STREAM_CHANNEL_OPTIONS = [
    *CHANNEL_OPTIONS,
    ("grpc.http2.bdp_probe", 0),
    ("grpc.experimental.tcp_read_chunk_size", 1 << 20),
    ("grpc.experimental.tcp_min_read_chunk_size", 256 << 10),
    ("grpc.experimental.tcp_max_read_chunk_size", 4 << 20),
    ("grpc.http2.max_frame_size", 1 << 20),
]
_SUBSCRIBE_METHOD = f"/{pb.DESCRIPTOR.services_by_name['Log'].full_name}/Subscribe"  # as LogStub names it


class PartitionStream:
    """One partition's ``Subscribe`` call. The consumer's thread reads ``responses`` (oldest first) and,
    once ``done`` is set and the queue is empty, ``error`` (why the stream ended)."""

    def __init__(self, fetcher: StreamFetcher, offset: int, window: int) -> None:
        self.offset = offset  # where the stream started
        self.responses: collections.deque[FetchedResponse] = collections.deque()
        self.done = False
        self.error: MultiraftError | None = None
        self._fetcher = fetcher
        self._window = window
        self._waiting = False  # the reader waits for the queue to drain (set on the loop thread)
        self._space: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._cancelled = False

    def pop(self) -> FetchedResponse | None:
        """The oldest queued response (None if there is none); lets the reader go on if it waited."""
        if not self.responses:
            return None
        response = self.responses.popleft()
        if self._waiting:
            self._fetcher.call_soon(self._wake_reader)
        return response

    def cancel(self) -> None:
        """Stop the call; nothing more is queued. Safe from any thread, more than once."""
        if self._cancelled:
            return
        self._cancelled = True
        self.responses.clear()
        self._fetcher.call_soon(self._cancel_task)

    def _stopped(self) -> bool:
        return self._cancelled

    def _wake_reader(self) -> None:
        if self._space is not None:
            self._space.set()

    def _cancel_task(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def run(self, subscribe: Any, request: pb.SubscribeRequest, notify: Callable[[], None]) -> None:
        self._space = asyncio.Event()
        call: Any = None
        try:
            if self._stopped():
                return
            call = subscribe(request)
            async for response in call:
                if response is None:  # gRPC logged why parse_fetch_response refused it, and gave None
                    self.error = UnavailableError("a pushed response could not be parsed")
                    return
                if response.error is not None:
                    self.error = from_proto_error(response.error)
                    return
                if self._stopped():
                    return
                self.responses.append(response)
                if trace.ON:
                    trace.upto("client_received", request.topic, request.partition, response.next_offset)
                notify()
                while len(self.responses) >= self._window and not self._stopped():
                    self._space.clear()
                    self._waiting = True
                    # Re-check after raising the flag: pop() on the other thread reads it after popping.
                    if len(self.responses) >= self._window:
                        await self._space.wait()
                    self._waiting = False
            if not self._stopped():
                self.error = UnavailableError("the node ended the subscription")
        except asyncio.CancelledError:
            pass
        except grpc.RpcError as exc:
            self.error = from_rpc_error(exc)
        except Exception as exc:  # never leave the consumer waiting on a stream that died silently
            log.exception("subscription failed unexpectedly", error=repr(exc))
            self.error = UnavailableError(f"subscription failed: {exc!r}")
        finally:
            if call is not None:
                call.cancel()
            self.done = True
            notify()


class StreamFetcher:
    """Runs :class:`PartitionStream` calls on a background thread (an asyncio loop with ``grpc.aio``
    channels), started on the first :meth:`open` and stopped by :meth:`close`."""

    def __init__(
        self,
        notify: Callable[[], None],
        *,
        window: int = 2,
        credentials: grpc.ChannelCredentials | None = None,
        interceptors: Sequence[Any] = (),
    ) -> None:
        self._notify = notify
        self._credentials = credentials
        self._interceptors = list(interceptors)  # the client's SCRAM token, if any
        self._window = window
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._subscribes: dict[str, Any] = {}  # address -> the Subscribe call of its channel
        self._streams: set[PartitionStream] = set()
        self._closed = False

    def connect(self, address: str) -> None:
        """Start connecting to ``address`` in the background (no call, nothing fetched), so that the first
        stream to it need not wait for the connection."""
        loop = self._start()

        def begin() -> None:
            if not self._closed:
                self._subscribe(address)
                self._channels[address].get_state(try_to_connect=True)

        loop.call_soon_threadsafe(begin)

    def _subscribe(self, address: str) -> Any:
        """The channel's ``Subscribe`` call, its responses parsed by :func:`parse_fetch_response` (no copy of
        the batches) instead of the generated stub's ``FetchResponse.FromString``."""
        subscribe = self._subscribes.get(address)
        if subscribe is None:
            channel = open_aio_channel(address, _STREAM_CHANNEL_OPTIONS, self._credentials, self._interceptors)
            self._channels[address] = channel
            subscribe = self._subscribes[address] = channel.unary_stream(
                _SUBSCRIBE_METHOD,
                request_serializer=pb.SubscribeRequest.SerializeToString,
                response_deserializer=parse_fetch_response,
            )
        return subscribe

    def open(self, address: str, request: pb.SubscribeRequest) -> PartitionStream:
        """Start streaming ``request`` from the node at ``address``."""
        loop = self._start()
        stream = PartitionStream(self, request.offset, self._window)

        def begin() -> None:
            if self._closed:
                stream.done = True
                return
            subscribe = self._subscribe(address)
            self._streams.add(stream)
            task = loop.create_task(stream.run(subscribe, request, self._notify))
            task.add_done_callback(lambda _task: self._streams.discard(stream))
            stream._task = task

        loop.call_soon_threadsafe(begin)
        return stream

    def call_soon(self, callback: Callable[[], None]) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed meanwhile
                loop.call_soon_threadsafe(callback)

    def _start(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._closed:
                raise MultiraftError("the consumer is closed")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                started = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(started.set)
                    loop.run_forever()

                self._thread = threading.Thread(target=run, name="multiraft-consumer-fetch", daemon=True)
                self._thread.start()
                started.wait()
                self._loop = loop
            return self._loop

    def close(self) -> None:
        """Cancel every stream, close the channels and stop the thread (waits for it)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if threading.current_thread() is thread:  # (a finalizer run on the fetch thread itself)
            for stream in list(self._streams):
                stream.cancel()
            loop.call_soon(loop.stop)
            return

        async def shutdown() -> None:
            await cancel_all_tasks(_CLOSE_TIMEOUT_S / 2)  # the streams' and grpc's own
            for channel in self._channels.values():
                await channel.close(None)
            self._channels.clear()
            self._subscribes.clear()
            await loop.shutdown_asyncgens()

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), loop).result(_CLOSE_TIMEOUT_S)
        except Exception as exc:
            log.warning("consumer fetch thread did not shut down cleanly", error=repr(exc))
        loop.call_soon_threadsafe(loop.stop)
        thread.join(_CLOSE_TIMEOUT_S)
        if not thread.is_alive():
            loop.close()
