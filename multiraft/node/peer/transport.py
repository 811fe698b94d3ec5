"""The peer transport: one TCP connection to each peer node carries every group's Raft messages.

Frames, little-endian::

    u32 length of what follows (frame type included, at most max_frame_bytes), u8 frame type, body
    HELLO      u16 version, u64 node id, u16 length + utf-8 cluster id      (first frame on a connection)
    RAFT       repeated: u32 group id, u32 length, message (multiraft.raft codec)
    HEARTBEATS repeated: u32 group id, u8 flags (1 response, 2 quiesce), u64 term, u64 commit
    REQUEST    u64 correlation id, u8 kind, body                           (node-to-node calls, e.g. to the
    RESPONSE   u64 correlation id, u8 status, body                          controller leader)

Each node dials each peer it sends to and keeps that connection for sending; the peer's own connection
carries the other direction (see the docstring of :class:`PeerTransport` for why). Everything one ``send``
or ``post`` (the scheduler thread's own write, :mod:`multiraft.node.peer.link`) gets for a peer leaves in one
write, cut into frames of at most ``max_frame_bytes``; a message that cannot fit in a frame is dropped and logged.

Heartbeats are coalesced: plain heartbeats (no ReadIndex context) are held per peer and leave together once
per heartbeat interval, one HEARTBEATS frame (21 bytes per group) whatever each group's timer phase; the peer
steps it in one round, so the responses come back in one frame too. Responses are not held (CheckQuorum must
hear them within an election timeout). Heartbeats with a ReadIndex context, and their responses, go at once
in RAFT frames: a linearizable read waits for them.

The peer listener holds at most ``max_peer_connections`` connections (more are closed as they arrive), and
each connection at most ``max_peer_requests_per_connection`` REQUESTs, and ``max_frame_bytes`` of their bodies,
in service (more are answered busy at once, never queued). A frame whose handling raises unexpectedly is
dropped alone and logged.
With ``tls`` (:class:`multiraft.security.tls.PeerTls`) both directions are mutual TLS: a dialled peer's certificate
must name the node dialled (``node-<id>``), and an accepted connection's HELLO must name a node its
certificate names; a connection failing either is closed (``refused_certificates``) before any frame is used.
A connection that sends a malformed frame, a frame above ``max_frame_bytes``, a foreign cluster id or a term
or index above ``MAX_TERM_OR_INDEX`` is closed and logged; nothing else is affected. A Raft message whose
sender is not the node that said HELLO on its connection is dropped alone (counted in
``TransportStats.forged_messages``), never stepped into a group, and so are Raft messages from a node that is
not a known peer (``stranger_messages``; its REQUESTs are served: a joining node needs them). Dials back off
exponentially while a peer is down, and messages for an unreachable peer are dropped (Raft retransmits) and
reported so the groups can probe instead of stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from multiraft.config.node import parse_address
from multiraft.logging import get_logger
from multiraft.node.peer.frames import (
    CALL_HEAD,
    FRAME_HEAD,
    HELLO,
    LENGTH,
    MAX_TERM_OR_INDEX,
    PROTOCOL_VERSION,
    BadFrameError,
    Frame,
    FrameType,
    RaftDelivery,
    RequestHandler,
    TransportStats,
    batch_frames,
    count_sent,
    decode_heartbeats,
    decode_raft,
    frame_bytes,
    heartbeat_frames,
    write_response,
)
from multiraft.node.peer.link import DirectOutcome, PeerLink
from multiraft.node.threads import LoopOwned
from multiraft.raft import Message
from multiraft.security.tls import PeerTls, peer_node_names

__all__ = ["PeerTransport", "FrameType", "TransportStats", "RaftDelivery", "PROTOCOL_VERSION", "MAX_TERM_OR_INDEX"]

log = get_logger(__name__)

_BACKOFF_START_S = 0.05
_BACKOFF_MAX_S = 2.0
_DIAL_TIMEOUT_S = 2.0
_HELLO_TIMEOUT_S = 5.0
_STATUS_BUSY = 255  # not a peer_messages status: the caller decodes it as UnavailableError, and retries
_BUSY = b"busy: max_peer_requests_per_connection or max_frame_bytes of requests in service"


class PeerTransport(LoopOwned):
    """Runs in the event loop; ``send`` is called on the loop, :meth:`post` on any other thread (the scheduler's,
    which writes on plain TCP connections itself: :mod:`multiraft.node.peer.link`).

    Two connections per pair of nodes, one per direction: each node sends only on the connection it dialled,
    and reads only on the ones it accepted (except RESPONSE frames to its own REQUESTs). So there is no
    simultaneous-dial race to settle and no tie-break by node id, a node that restarts reconnects to every
    peer at once instead of waiting to be dialled, each side's backoff and failure detection concern only
    its own sending path, and an accepted connection that misbehaves can be closed without touching what
    we send. The cost is one more socket per peer, 2 * (nodes - 1) per node.

    ``heartbeat_interval_s`` is how often held heartbeats leave (None: only when :meth:`flush_heartbeats` is
    called, for tests). ``direct_writes`` False makes :meth:`post` hand every write to the loop.
    """

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
        heartbeat_interval_s: float | None = 0.1,
        max_connections: int = 256,
        max_requests_per_connection: int = 256,
        tls: PeerTls | None = None,
        direct_writes: bool = True,
    ) -> None:
        self._tls = tls
        self._direct = direct_writes and tls is None  # TLS: the bytes on the socket are the TLS object's
        self._loop: asyncio.AbstractEventLoop | None = None
        self._held_lock = threading.Lock()  # _held: posts add to it, the loop's clock flushes it
        self._stats_lock = threading.Lock()  # the outbound counters: both threads count what they write
        self.node_id = node_id
        self.cluster_id = cluster_id
        self._listen = listen
        self._deliver = deliver
        self._on_unreachable = on_unreachable
        self._handle_request = handle_request
        self._max_frame = max_frame_bytes
        self._max_buffered = max_buffered_bytes
        self._heartbeat_interval = heartbeat_interval_s
        self._max_connections = max_connections
        self._max_requests = max_requests_per_connection
        self._peers: dict[int, PeerLink] = {}
        self._held: dict[int, dict[int, Message]] = {}  # peer -> group -> heartbeat to flush
        self._server: asyncio.Server | None = None
        self._inbound: set[asyncio.StreamWriter] = set()
        self._readers: set[asyncio.Future[Any]] = set()  # the tasks reading accepted connections
        self._tasks: set[asyncio.Task[None]] = set()
        self._calls: dict[int, asyncio.Future[tuple[int, bytes]]] = {}
        self._call_peers: dict[int, int] = {}  # call id -> node it went to
        self._next_call = 1
        self._closed = False
        self.stats = TransportStats()
        self.port = 0
        # Debug network cuts (multiraft.node.debug): (peer, outgoing) -> drop this REQUEST or RESPONSE.
        self.drop_request: Callable[[int, bool], bool] | None = None

    # ------------------------------------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        host, port = parse_address(self._listen, "peer_address")
        # A handshake that never ends holds no slot of max_peer_connections: bound it like a HELLO.
        secure: dict[str, Any] = {}
        if self._tls is not None:
            secure = {"ssl": self._tls.listening_context(), "ssl_handshake_timeout": _HELLO_TIMEOUT_S}
        self._server = await asyncio.start_server(self._accept, host, port, limit=1 << 20, **secure)
        self.port = self._server.sockets[0].getsockname()[1]
        if self._heartbeat_interval:
            self._spawn(self._heartbeat_clock(self._heartbeat_interval))
        log.info("peer transport listening", address=f"{host}:{self.port}")

    async def stop(self) -> None:
        self._closed = True
        self._held.clear()
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for peer in self._peers.values():
            if peer.connecting is not None:
                peer.connecting.cancel()
            peer.close()
        for writer in list(self._inbound):
            writer.close()
        for future in self._calls.values():
            if not future.done():
                future.cancel()
        if self._readers:  # let them see the close and end, rather than be cancelled at loop shutdown
            await asyncio.wait(list(self._readers), timeout=1.0)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    def set_peer(self, node_id: int, address: str) -> None:
        """Learn or update where a peer listens; an existing connection to an old address is dropped."""
        peer = self._peers.get(node_id)
        if peer is not None and peer.address == address:
            return
        if peer is not None:
            peer.close()
        self._peers[node_id] = PeerLink(node_id, address, _BACKOFF_START_S)

    def known_peers(self) -> dict[int, str]:
        return {node_id: peer.address for node_id, peer in self._peers.items()}

    def disconnect(self, node_id: int) -> None:
        """Close our connection to a peer (calls in flight on it fail); the next send dials again."""
        peer = self._peers.get(node_id)
        if peer is not None:
            peer.close()

    def connected(self, node_id: int) -> bool:
        peer = self._peers.get(node_id)
        return peer is not None and peer.writer is not None and not peer.writer.is_closing()

    # ----------------------------------------------------------------------------------------------- send

    def send(self, to_node: int, messages: Sequence[tuple[int, Message]]) -> None:
        """Write every (group id, message) for ``to_node`` in one go: RAFT frames of at most ``max_frame_bytes``
        and the heartbeat responses among them in a HEARTBEATS frame. Plain heartbeats are held for
        :meth:`flush_heartbeats`. On the loop."""
        frames = self._frames(to_node, messages)
        if frames:
            self._write_frames(to_node, frames)

    def post(self, batches: dict[int, list[tuple[int, Message]]]) -> None:
        """:meth:`send` each peer's batch from a thread other than the loop's: written on the socket at once
        where :meth:`PeerLink.write_direct` may, else handed to the loop; in order either way."""
        for to_node, messages in batches.items():
            frames = self._frames(to_node, messages)
            if not frames:
                continue
            peer = self._peers.get(to_node)
            if peer is None:
                self._count_dropped(frames)
                continue
            with peer.lock:
                if self._direct and self._write_direct(peer, frames):
                    continue
                self._hand_over(peer, frames)

    def _frames(self, to_node: int, messages: Sequence[tuple[int, Message]]) -> list[Frame]:
        """The frames of :meth:`send`; plain heartbeats are held (any thread)."""
        frames, held, oversized = batch_frames(messages, self._max_frame)
        for group_id, message, size in oversized:
            self._drop_oversized(to_node, group_id, message, size)
        if held:
            with self._held_lock:
                self._held.setdefault(to_node, {}).update(held)
        return frames

    def flush_heartbeats(self) -> None:
        """Send the held heartbeats: one HEARTBEATS frame per peer with every group's latest."""
        with self._held_lock:
            held, self._held = self._held, {}
        for to_node, messages in held.items():
            self._write_frames(to_node, heartbeat_frames(list(messages.items()), self._max_frame))

    async def _heartbeat_clock(self, interval_s: float) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time() + interval_s
        while True:
            await asyncio.sleep(max(0.0, due - loop.time()))
            due = max(due + interval_s, loop.time())  # a late loop skips beats rather than bursting
            try:
                self.flush_heartbeats()
            except Exception as exc:  # never let one bad flush stop every group's heartbeats
                log.exception("flushing heartbeats failed", error=repr(exc))

    def _drop_oversized(self, to_node: int, group_id: int, message: Message, size: int) -> None:
        with self._stats_lock:
            self.stats.oversized_messages += 1
            self.stats.dropped_messages += 1
        log.error(
            "message too large for one peer frame, dropped; raise max_frame_bytes",
            peer=to_node,
            group=group_id,
            type=message.type.name,
            bytes=size + 1,
            max_frame_bytes=self._max_frame,
        )

    def _write_frames(self, to_node: int, frames: list[Frame]) -> bool:
        """Write whole frames in one go, after what waits handed over, or drop them all (loop)."""
        peer = self._peers.get(to_node)
        if peer is None:
            self._count_dropped(frames)
            return False
        with peer.lock:
            self._write_handed(peer)
            return self._write_now(peer, frames)

    def _write_now(self, peer: PeerLink, frames: list[Frame]) -> bool:
        writer = self._writer_for(peer)
        if writer is None:
            self._count_dropped(frames)
            return False
        writer.writelines(frame_bytes(frames)[0])
        self._count_sent(frames)
        return True

    def _write_direct(self, peer: PeerLink, frames: list[Frame]) -> bool:
        """Write on the socket from this thread (``peer.lock`` held); False if the loop must write them."""
        outcome = peer.write_direct(*frame_bytes(frames))
        if outcome == DirectOutcome.NOT_NOW:
            return False
        if outcome == DirectOutcome.FAILED:
            self._count_dropped(frames)
            if peer.writer is not None:  # as a failed write on the loop: frames lost, the connection dropped
                self._to_loop(peer.writer.transport.abort)
            return True
        self._count_sent(frames, direct=True)
        if peer.handed:  # the socket took part of it: the loop writes the rest, and what follows
            self._to_loop(lambda: self._drain(peer))
        return True

    def _hand_over(self, peer: PeerLink, frames: list[Frame]) -> None:
        """Queue frames for the loop behind what waits there (``peer.lock`` held)."""
        first = not peer.handed
        peer.handed.append(frames)
        with self._stats_lock:
            self.stats.handed_frames_out += len(frames)
        if first and not self._to_loop(lambda: self._drain(peer)):
            peer.handed.clear()
            self._count_dropped(frames)

    def _to_loop(self, action: Callable[[], None]) -> bool:
        try:
            if self._loop is not None:
                self._loop.call_soon_threadsafe(action)
                return True
        except RuntimeError:  # the loop closed: the node is stopping
            pass
        return False

    def _drain(self, peer: PeerLink) -> None:
        with peer.lock:
            self._write_handed(peer)

    def _write_handed(self, peer: PeerLink) -> None:
        """Write what was handed over, in order (loop, ``peer.lock`` held)."""
        handed, peer.handed = peer.handed, []
        for item in handed:
            if isinstance(item, list):
                self._write_now(peer, item)
                continue
            writer, rest = item
            if peer.writer is writer and not writer.is_closing():  # a frame's end only on its own connection
                writer.write(rest)

    def _count_sent(self, frames: list[Frame], *, direct: bool = False) -> None:
        with self._stats_lock:
            count_sent(self.stats, frames)
            if direct:
                self.stats.direct_frames_out += len(frames)

    def _count_dropped(self, frames: list[Frame]) -> None:
        with self._stats_lock:
            self.stats.dropped_messages += sum(frame[3] for frame in frames)

    def _writer_for(self, peer: PeerLink) -> asyncio.StreamWriter | None:
        """Our connection to ``peer`` if it can take more now (else dial it if need be)."""
        writer = peer.writer
        if writer is None or writer.is_closing():
            self._ensure_dialing(peer)
            return None
        if writer.transport.get_write_buffer_size() > self._max_buffered:
            return None  # the peer is not keeping up; Raft will retransmit
        return writer

    def _ensure_dialing(self, peer: PeerLink) -> None:
        if self._closed or (peer.connecting is not None and not peer.connecting.done()):
            return
        peer.connecting = asyncio.get_running_loop().create_task(self._dial(peer))

    async def _dial(self, peer: PeerLink) -> None:
        loop = asyncio.get_running_loop()
        delay = peer.next_dial - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        host, port = parse_address(peer.address, "peer address")
        try:
            secure = self._tls.dial_options(peer.node_id) if self._tls is not None else {}
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, **secure), _DIAL_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            self._refused_certificate(exc, peer.node_id)
            peer.next_dial = loop.time() + peer.backoff
            peer.backoff = min(peer.backoff * 2, _BACKOFF_MAX_S)
            log.debug("peer dial failed", peer=peer.node_id, address=peer.address, error=str(exc))
            self._on_unreachable(peer.node_id)
            return
        cluster = self.cluster_id.encode()
        writer.write(FRAME_HEAD.pack(1 + HELLO.size + len(cluster), FrameType.HELLO))
        writer.write(HELLO.pack(PROTOCOL_VERSION, self.node_id, len(cluster)) + cluster)
        peer.attach(writer, direct=self._direct)
        peer.backoff = _BACKOFF_START_S
        self.stats.connects += 1
        log.info("connected to peer", peer=peer.node_id, address=peer.address)
        self._spawn(self._watch_outbound(peer, reader, writer))

    async def _watch_outbound(self, peer: PeerLink, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """The outbound side only sends, except for RESPONSE frames to our REQUESTs; EOF means the peer left."""
        try:
            while True:
                frame_type, body = await self._read_frame(reader)
                if frame_type == FrameType.RESPONSE:
                    self._complete_call(body)
                else:
                    raise BadFrameError(f"unexpected frame type {frame_type} on an outbound connection")
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            self._refused_certificate(exc, peer.node_id)  # TLS 1.3: the peer refuses our certificate after "connect"
        except BadFrameError as exc:
            self.stats.bad_frames += 1
            log.warning("closing connection to peer", peer=peer.node_id, reason=str(exc))
        finally:
            if peer.detach(writer):
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
        if len(self._inbound) >= self._max_connections:
            self.stats.refused_connections += 1
            log.warning("peer listener full; closed a new connection", remote=str(writer.get_extra_info("peername")))
            writer.close()
            return
        self._inbound.add(writer)
        reading = asyncio.current_task()
        if reading is not None:
            self._readers.add(reading)
        remote = writer.get_extra_info("peername")
        from_node = 0
        try:
            frame_type, body = await asyncio.wait_for(self._read_frame(reader), _HELLO_TIMEOUT_S)
            from_node = self._check_hello(frame_type, body)
            if self._tls is not None and from_node not in peer_node_names(writer.get_extra_info("peercert")):
                self._refused_certificate(BadFrameError(f"its certificate does not name node {from_node}"), from_node)
                return
            serving: dict[asyncio.Task[None], int] = {}  # this connection's requests in service -> body bytes
            while True:
                frame_type, body = await self._read_frame(reader)
                try:
                    self._handle_frame(from_node, frame_type, body, writer, serving)
                except BadFrameError:
                    raise
                except Exception as exc:  # a bug handling one frame drops that frame only; framing is intact
                    self.stats.bad_frames += 1
                    log.exception(
                        "handling a peer frame failed; dropped it",
                        peer=from_node, frame_type=frame_type, bytes=len(body), error=repr(exc),
                    )  # fmt: skip
        except (asyncio.IncompleteReadError, ConnectionError, OSError, TimeoutError) as exc:
            self._refused_certificate(exc, from_node)
        except BadFrameError as exc:
            self.stats.bad_frames += 1
            log.warning("closing peer connection", remote=str(remote), peer=from_node, reason=str(exc))
        finally:
            self._inbound.discard(writer)
            if reading is not None:
                self._readers.discard(reading)
            writer.close()

    def _handle_frame(
        self, from_node: int, frame_type: int, body: bytes, writer: asyncio.StreamWriter, serving: dict[Any, int]
    ) -> None:
        if frame_type == FrameType.RAFT:
            messages = decode_raft(from_node, body, self.stats)
            if messages and self._known(from_node, messages):
                self._deliver(from_node, messages)
        elif frame_type == FrameType.HEARTBEATS:
            heartbeats = decode_heartbeats(self.node_id, from_node, body, self.stats)
            if heartbeats and self._known(from_node, heartbeats):
                self._deliver(from_node, heartbeats)
        elif frame_type == FrameType.REQUEST:
            # Answered at once when the connection has enough in service: tasks and bodies never pile up
            # behind a flood. One request of any size a frame holds is always served alone.
            if len(serving) >= self._max_requests or (serving and sum(serving.values()) + len(body) > self._max_frame):
                self.stats.refused_requests += 1
                write_response(writer, body, _STATUS_BUSY, _BUSY)
                return
            task = self._spawn(self._serve_request(from_node, body, writer))
            serving[task] = len(body)
            task.add_done_callback(serving.pop)
        else:
            raise BadFrameError(f"unexpected frame type {frame_type}")

    async def _read_frame(self, reader: asyncio.StreamReader) -> tuple[int, bytes]:
        (length,) = LENGTH.unpack(await reader.readexactly(LENGTH.size))
        if length < 1 or length > self._max_frame:
            raise BadFrameError(f"frame of {length} bytes (limit {self._max_frame})")
        frame = await reader.readexactly(length)
        self.stats.frames_in += 1
        self.stats.bytes_in += length + LENGTH.size
        return frame[0], frame[1:]

    def _check_hello(self, frame_type: int, body: bytes) -> int:
        if frame_type != FrameType.HELLO or len(body) < HELLO.size:
            raise BadFrameError("the first frame is not a hello")
        version, node_id, cluster_length = HELLO.unpack_from(body)
        cluster = body[HELLO.size : HELLO.size + cluster_length].decode(errors="replace")
        if version != PROTOCOL_VERSION:
            raise BadFrameError(f"protocol version {version}, we speak {PROTOCOL_VERSION}")
        if cluster != self.cluster_id:
            raise BadFrameError(f"peer of cluster {cluster!r}, we are {self.cluster_id!r}")
        if node_id < 1 or node_id == self.node_id:
            raise BadFrameError(f"bad peer node id {node_id}")
        return int(node_id)

    def _refused_certificate(self, exc: BaseException, node_id: int) -> None:
        """Count and log a peer connection refused over TLS (a failed handshake or a HELLO's node id)."""
        if isinstance(exc, ssl.SSLError | BadFrameError):
            self.stats.refused_certificates += 1
            log.warning("peer connection refused: TLS", peer=node_id, reason=str(exc))

    def _known(self, from_node: int, messages: list[tuple[int, Message]]) -> bool:
        """Whether Raft messages from ``from_node`` may reach the groups: only from a node we know as a peer
        (initial cluster, cluster state or gossip), so a stranger cannot raise a group's term or lead it."""
        if from_node in self._peers:
            return True
        self.stats.stranger_messages += len(messages)
        log.debug("dropped Raft messages from a node that is not a known peer", peer=from_node, count=len(messages))
        return False

    # ------------------------------------------------------------------------------- node-to-node calls

    async def call(self, to_node: int, kind: int, body: bytes, timeout_s: float) -> tuple[int, bytes]:
        """Send a REQUEST to ``to_node`` and wait for its RESPONSE: (status, body).

        Raises ValueError if the request cannot fit in one frame."""
        if 1 + CALL_HEAD.size + len(body) > self._max_frame:
            raise ValueError(
                f"a request of {len(body)} bytes does not fit in a peer frame (max_frame_bytes={self._max_frame})"
            )
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
            request: Frame = (
                FrameType.REQUEST,
                [CALL_HEAD.pack(call_id, kind), body],
                CALL_HEAD.size + len(body),
                0,
            )
            cut = self.drop_request is not None and self.drop_request(to_node, True)
            if not cut and not self._write_frames(to_node, [request]):  # a cut request times out, as if lost
                raise ConnectionError(f"node {to_node} is unreachable")
            return await asyncio.wait_for(future, max(0.0, deadline - loop.time()))
        finally:
            self._calls.pop(call_id, None)
            self._call_peers.pop(call_id, None)

    async def _serve_request(self, from_node: int, body: bytes, writer: asyncio.StreamWriter) -> None:
        if len(body) < CALL_HEAD.size or self._handle_request is None:
            return
        _, kind = CALL_HEAD.unpack_from(body)
        if self.drop_request is not None and self.drop_request(from_node, False):
            return
        try:
            status, answer = await self._handle_request(from_node, kind, body[CALL_HEAD.size :])
        except Exception as exc:  # a failed handler answers with an error; the connection lives on
            log.warning("peer request failed", peer=from_node, kind=kind, error=repr(exc))
            status, answer = 255, repr(exc).encode()
        if writer.is_closing() or (self.drop_request is not None and self.drop_request(from_node, True)):
            return
        if 1 + CALL_HEAD.size + len(answer) > self._max_frame:
            log.error("peer request answer too large for a frame", peer=from_node, kind=kind, bytes=len(answer))
            status = 255
            answer = f"the answer of {len(answer)} bytes exceeds max_frame_bytes ({self._max_frame})".encode()
        write_response(writer, body, status, answer)

    def _complete_call(self, body: bytes) -> None:
        if len(body) < CALL_HEAD.size:
            raise BadFrameError("short response")
        call_id, status = CALL_HEAD.unpack_from(body)
        peer = self._call_peers.get(call_id)
        if peer is not None and self.drop_request is not None and self.drop_request(peer, False):
            return
        future = self._calls.get(call_id)
        if future is not None and not future.done():
            future.set_result((status, bytes(body[CALL_HEAD.size :])))

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task
