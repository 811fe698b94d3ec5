"""The peer transport: one TCP connection to each peer node carries every group's Raft messages.

Frames, little-endian::

    u32 length of what follows, u8 frame type, body
    HELLO    u16 version, u64 node id, u16 length + utf-8 cluster id      (first frame on a connection)
    RAFT     repeated: u32 group id, u32 length, message (multiraft.raft codec)
    REQUEST  u64 correlation id, u8 kind, body                           (node-to-node calls, e.g. to the
    RESPONSE u64 correlation id, u8 status, body                          controller leader)

Each node dials each peer it sends to and keeps that connection for sending; the peer's own connection
carries the other direction. Everything queued for a peer in one scheduling round leaves in one frame, so
the heartbeats of all groups a peer shares with us travel together (coalesced heartbeats). A connection
that sends a malformed frame, a frame above ``max_frame_bytes`` or a foreign cluster id is closed and
logged; nothing else is affected. Dials back off exponentially while a peer is down, and messages for an
unreachable peer are dropped (Raft retransmits) and reported so the groups can probe instead of stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from multiraft.config import parse_address
from multiraft.logging import get_logger
from multiraft.raft import DecodeError, Message, decode_message, encode_message_buffers

__all__ = ["PeerTransport", "FrameType", "TransportStats", "RaftDelivery"]

log = get_logger(__name__)

PROTOCOL_VERSION = 1
_LENGTH = struct.Struct("<I")
_FRAME_HEAD = struct.Struct("<IB")
_HELLO = struct.Struct("<HQH")
_GROUP_MESSAGE = struct.Struct("<II")
_CALL_HEAD = struct.Struct("<QB")
_BACKOFF_START_S = 0.05
_BACKOFF_MAX_S = 2.0
_DIAL_TIMEOUT_S = 2.0
_HELLO_TIMEOUT_S = 5.0


class FrameType:
    HELLO = 1
    RAFT = 2
    REQUEST = 3
    RESPONSE = 4


RaftDelivery = Callable[[int, list[tuple[int, Message]]], None]
"""(from node, [(group id, message)]) for each RAFT frame received."""

RequestHandler = Callable[[int, int, bytes], Awaitable[tuple[int, bytes]]]
"""(from node, kind, body) -> (status, body) for each REQUEST frame."""


@dataclass
class TransportStats:
    frames_out: int = 0
    frames_in: int = 0
    bytes_out: int = 0
    bytes_in: int = 0
    messages_out: int = 0
    messages_in: int = 0
    dropped_messages: int = 0
    bad_frames: int = 0
    connects: int = 0


class _Peer:
    """Our outbound connection to one peer."""

    def __init__(self, node_id: int, address: str) -> None:
        self.node_id = node_id
        self.address = address
        self.writer: asyncio.StreamWriter | None = None
        self.connecting: asyncio.Task[None] | None = None
        self.backoff = _BACKOFF_START_S
        self.next_dial = 0.0


class PeerTransport:
    """Runs in the event loop; ``send`` may be called from the loop only (the scheduler hands over batches
    with ``loop.call_soon_threadsafe``)."""

    def __init__(
        self,
        *,
        node_id: int,
        cluster_id: str,
        listen: str,
        deliver: RaftDelivery,
        on_unreachable: Callable[[int], None],
        handle_request: RequestHandler | None = None,
        max_frame_bytes: int = 64 * 1024 * 1024,
        max_buffered_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self._listen = listen
        self._deliver = deliver
        self._on_unreachable = on_unreachable
        self._handle_request = handle_request
        self._max_frame = max_frame_bytes
        self._max_buffered = max_buffered_bytes
        self._peers: dict[int, _Peer] = {}
        self._server: asyncio.Server | None = None
        self._inbound: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._calls: dict[int, asyncio.Future[tuple[int, bytes]]] = {}
        self._call_peers: dict[int, int] = {}  # call id -> node it went to
        self._next_call = 1
        self._closed = False
        self.stats = TransportStats()
        self.port = 0

    # ------------------------------------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        host, port = parse_address(self._listen, "peer_address")
        self._server = await asyncio.start_server(self._accept, host, port, limit=1 << 20)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("peer transport listening", address=f"{host}:{self.port}")

    async def stop(self) -> None:
        self._closed = True
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for peer in self._peers.values():
            if peer.connecting is not None:
                peer.connecting.cancel()
            if peer.writer is not None:
                peer.writer.close()
        for writer in list(self._inbound):
            writer.close()
        for future in self._calls.values():
            if not future.done():
                future.cancel()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    def set_peer(self, node_id: int, address: str) -> None:
        """Learn or update where a peer listens; an existing connection to an old address is dropped."""
        peer = self._peers.get(node_id)
        if peer is not None and peer.address == address:
            return
        if peer is not None and peer.writer is not None:
            peer.writer.close()
        self._peers[node_id] = _Peer(node_id, address)

    def known_peers(self) -> dict[int, str]:
        return {node_id: peer.address for node_id, peer in self._peers.items()}

    def disconnect(self, node_id: int) -> None:
        """Close our connection to a peer (calls in flight on it fail); the next send dials again."""
        peer = self._peers.get(node_id)
        if peer is not None and peer.writer is not None:
            peer.writer.close()

    def connected(self, node_id: int) -> bool:
        peer = self._peers.get(node_id)
        return peer is not None and peer.writer is not None and not peer.writer.is_closing()

    # ----------------------------------------------------------------------------------------------- send

    def send(self, to_node: int, messages: Sequence[tuple[int, Message]]) -> None:
        """Queue one RAFT frame for ``to_node`` holding every (group id, message) given."""
        parts: list[bytes | memoryview] = []
        size = 0
        for group_id, message in messages:
            buffers = encode_message_buffers(message)
            length = sum(len(b) for b in buffers)
            parts.append(_GROUP_MESSAGE.pack(group_id, length))
            parts.extend(buffers)
            size += _GROUP_MESSAGE.size + length
        if self._write(to_node, FrameType.RAFT, parts, size):
            self.stats.messages_out += len(messages)
        else:
            self.stats.dropped_messages += len(messages)

    def _write(self, to_node: int, frame_type: int, parts: list[bytes | memoryview], size: int) -> bool:
        peer = self._peers.get(to_node)
        if peer is None:
            return False
        writer = peer.writer
        if writer is None or writer.is_closing():
            self._ensure_dialing(peer)
            return False
        transport = writer.transport
        if transport.get_write_buffer_size() > self._max_buffered:
            return False  # the peer is not keeping up; Raft will retransmit
        writer.writelines([_FRAME_HEAD.pack(size + 1, frame_type), *parts])
        self.stats.frames_out += 1
        self.stats.bytes_out += size + _FRAME_HEAD.size
        return True

    def _ensure_dialing(self, peer: _Peer) -> None:
        if self._closed or (peer.connecting is not None and not peer.connecting.done()):
            return
        peer.connecting = asyncio.get_running_loop().create_task(self._dial(peer))

    async def _dial(self, peer: _Peer) -> None:
        loop = asyncio.get_running_loop()
        delay = peer.next_dial - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        host, port = parse_address(peer.address, "peer address")
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), _DIAL_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            peer.next_dial = loop.time() + peer.backoff
            peer.backoff = min(peer.backoff * 2, _BACKOFF_MAX_S)
            log.debug("peer dial failed", peer=peer.node_id, address=peer.address, error=str(exc))
            self._on_unreachable(peer.node_id)
            return
        cluster = self.cluster_id.encode()
        writer.write(_FRAME_HEAD.pack(1 + _HELLO.size + len(cluster), FrameType.HELLO))
        writer.write(_HELLO.pack(PROTOCOL_VERSION, self.node_id, len(cluster)) + cluster)
        peer.writer = writer
        peer.backoff = _BACKOFF_START_S
        self.stats.connects += 1
        log.info("connected to peer", peer=peer.node_id, address=peer.address)
        self._spawn(self._watch_outbound(peer, reader, writer))

    async def _watch_outbound(self, peer: _Peer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """The outbound side only sends, except for RESPONSE frames to our REQUESTs; EOF means the peer left."""
        try:
            while True:
                frame_type, body = await self._read_frame(reader)
                if frame_type == FrameType.RESPONSE:
                    self._complete_call(body)
                else:
                    raise _BadFrameError(f"unexpected frame type {frame_type} on an outbound connection")
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        except _BadFrameError as exc:
            self.stats.bad_frames += 1
            log.warning("closing connection to peer", peer=peer.node_id, reason=str(exc))
        finally:
            writer.close()
            if peer.writer is writer:
                peer.writer = None
                self._on_unreachable(peer.node_id)
            self._fail_calls_to(peer.node_id)

    def _fail_calls_to(self, node_id: int) -> None:
        """The connection a call went out on is gone, and its answer with it: fail now, not at the timeout."""
        for call_id, to_node in list(self._call_peers.items()):
            future = self._calls.get(call_id)
            if to_node == node_id and future is not None and not future.done():
                future.set_exception(ConnectionError(f"node {node_id} closed the connection"))

    # -------------------------------------------------------------------------------------------- receive

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._inbound.add(writer)
        remote = writer.get_extra_info("peername")
        from_node = 0
        try:
            frame_type, body = await asyncio.wait_for(self._read_frame(reader), _HELLO_TIMEOUT_S)
            from_node = self._check_hello(frame_type, body)
            while True:
                frame_type, body = await self._read_frame(reader)
                if frame_type == FrameType.RAFT:
                    self._deliver(from_node, self._decode_raft(body))
                elif frame_type == FrameType.REQUEST:
                    self._spawn(self._serve_request(from_node, body, writer))
                else:
                    raise _BadFrameError(f"unexpected frame type {frame_type}")
        except (asyncio.IncompleteReadError, ConnectionError, OSError, TimeoutError):
            pass
        except _BadFrameError as exc:
            self.stats.bad_frames += 1
            log.warning("closing peer connection", remote=str(remote), peer=from_node, reason=str(exc))
        finally:
            self._inbound.discard(writer)
            writer.close()

    async def _read_frame(self, reader: asyncio.StreamReader) -> tuple[int, bytes]:
        (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
        if length < 1 or length > self._max_frame:
            raise _BadFrameError(f"frame of {length} bytes (limit {self._max_frame})")
        frame = await reader.readexactly(length)
        self.stats.frames_in += 1
        self.stats.bytes_in += length + _LENGTH.size
        return frame[0], frame[1:]

    def _check_hello(self, frame_type: int, body: bytes) -> int:
        if frame_type != FrameType.HELLO or len(body) < _HELLO.size:
            raise _BadFrameError("the first frame is not a hello")
        version, node_id, cluster_length = _HELLO.unpack_from(body)
        cluster = body[_HELLO.size : _HELLO.size + cluster_length].decode(errors="replace")
        if version != PROTOCOL_VERSION:
            raise _BadFrameError(f"protocol version {version}, we speak {PROTOCOL_VERSION}")
        if cluster != self.cluster_id:
            raise _BadFrameError(f"peer of cluster {cluster!r}, we are {self.cluster_id!r}")
        if node_id < 1 or node_id == self.node_id:
            raise _BadFrameError(f"bad peer node id {node_id}")
        return int(node_id)

    def _decode_raft(self, body: bytes) -> list[tuple[int, Message]]:
        view = memoryview(body)
        messages: list[tuple[int, Message]] = []
        position = 0
        try:
            while position < len(view):
                group_id, length = _GROUP_MESSAGE.unpack_from(view, position)
                position += _GROUP_MESSAGE.size
                if position + length > len(view):
                    raise _BadFrameError("message runs past the end of its frame")
                messages.append((group_id, decode_message(view[position : position + length])))
                position += length
        except (DecodeError, struct.error) as exc:
            raise _BadFrameError(f"undecodable message: {exc}") from exc
        self.stats.messages_in += len(messages)
        return messages

    # ------------------------------------------------------------------------------- node-to-node calls

    async def call(self, to_node: int, kind: int, body: bytes, timeout_s: float) -> tuple[int, bytes]:
        """Send a REQUEST to ``to_node`` and wait for its RESPONSE: (status, body)."""
        peer = self._peers.get(to_node)
        if peer is None:
            raise ConnectionError(f"node {to_node} is not known")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not self.connected(to_node):
            self._ensure_dialing(peer)
            if loop.time() >= deadline:
                raise TimeoutError(f"node {to_node} is unreachable")
            await asyncio.sleep(0.02)
        call_id = self._next_call
        self._next_call += 1
        future: asyncio.Future[tuple[int, bytes]] = loop.create_future()
        self._calls[call_id] = future
        self._call_peers[call_id] = to_node
        try:
            if not self._write(
                to_node, FrameType.REQUEST, [_CALL_HEAD.pack(call_id, kind), body], _CALL_HEAD.size + len(body)
            ):
                raise ConnectionError(f"node {to_node} is unreachable")
            return await asyncio.wait_for(future, max(0.0, deadline - loop.time()))
        finally:
            self._calls.pop(call_id, None)
            self._call_peers.pop(call_id, None)

    async def _serve_request(self, from_node: int, body: bytes, writer: asyncio.StreamWriter) -> None:
        if len(body) < _CALL_HEAD.size or self._handle_request is None:
            return
        call_id, kind = _CALL_HEAD.unpack_from(body)
        try:
            status, answer = await self._handle_request(from_node, kind, body[_CALL_HEAD.size :])
        except Exception as exc:  # a failed handler answers with an error; the connection lives on
            log.warning("peer request failed", peer=from_node, kind=kind, error=repr(exc))
            status, answer = 255, repr(exc).encode()
        if writer.is_closing():
            return
        head = _CALL_HEAD.pack(call_id, status)
        writer.writelines([_FRAME_HEAD.pack(1 + len(head) + len(answer), FrameType.RESPONSE), head, answer])

    def _complete_call(self, body: bytes) -> None:
        if len(body) < _CALL_HEAD.size:
            raise _BadFrameError("short response")
        call_id, status = _CALL_HEAD.unpack_from(body)
        future = self._calls.get(call_id)
        if future is not None and not future.done():
            future.set_result((status, bytes(body[_CALL_HEAD.size :])))

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


class _BadFrameError(Exception):
    pass
