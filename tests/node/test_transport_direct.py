"""Writes from the scheduler thread (``PeerTransport.post``): on an idle plain-TCP connection the posting thread
writes its frames on the socket itself; while anything of the connection waits for the loop, its frames follow
through the loop; frames of any number of writers never interleave or reorder; a failed write drops the
connection as the loop's own would; TLS connections, and ``direct_writes=False``, keep the loop's path."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from multiraft import raft
from multiraft.node.peer.frames import FrameType, TransportStats, decode_raft
from multiraft.node.peer.transport import PeerTransport
from multiraft.security.tls import make_ca, make_node_certificate
from tests.node.test_transport import Inbox, _append, _pair
from tests.node.test_transport_tls import _pair as _tls_pair
from tests.node.test_transport_tls import _tls

T = raft.MessageType
_FRAME_HEAD = struct.Struct("<IB")


def _payload(writer: int, seq: int, size: int) -> bytes:
    head = b"%d:%d:" % (writer, seq)
    return head + bytes([seq % 251]) * max(0, size - len(head))


def _batch(writer: int, seq: int, size: int, messages: int = 1) -> dict[int, list[tuple[int, raft.Message]]]:
    return {2: [(writer, _append(2, 1, _payload(writer, seq, size))) for _ in range(messages)]}


async def _in_thread(action: Callable[[], None]) -> None:
    """Run ``action`` on another thread, as the scheduler's would, while the loop goes on."""
    await asyncio.to_thread(action)


def _blocking_in_thread(action: Callable[[], None]) -> None:
    """Run ``action`` on another thread while the loop is held (it cannot react until this returns)."""
    thread = threading.Thread(target=action)
    thread.start()
    thread.join(10)


class RawPeer:
    """A peer node 1 dials: a plain socket that reads only when told (so our writes back up), and can reset."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)  # fills soon when not read
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(4)
        self.port = self.listener.getsockname()[1]
        self.conn: socket.socket | None = None

    async def accept(self) -> None:
        self.listener.settimeout(10)
        self.conn, _ = await asyncio.to_thread(self.listener.accept)
        self.conn.settimeout(10)

    def _read_exactly(self, size: int) -> bytes:
        assert self.conn is not None
        data = bytearray()
        while len(data) < size:
            chunk = self.conn.recv(min(size - len(data), 1 << 20))
            if not chunk:
                raise EOFError(f"end of stream after {len(data)} of {size} bytes")
            data += chunk
        return bytes(data)

    async def payloads(self, count: int) -> list[bytes]:
        """The payloads of the next RAFT frames, until ``count`` of them."""

        def read() -> list[bytes]:
            out: list[bytes] = []
            for _ in range(count):
                length, frame_type = _FRAME_HEAD.unpack(self._read_exactly(_FRAME_HEAD.size))
                body = self._read_exactly(length - 1)
                assert frame_type == FrameType.RAFT
                out += [bytes(m.entries[0].payload) for _, m in decode_raft(1, body, TransportStats())]
                if len(out) >= count:
                    break
            return out

        return await asyncio.to_thread(read)

    async def frames(self, count: int) -> list[tuple[int, bytes]]:
        def read() -> list[tuple[int, bytes]]:
            frames = []
            for _ in range(count):
                length, frame_type = _FRAME_HEAD.unpack(self._read_exactly(_FRAME_HEAD.size))
                frames.append((frame_type, self._read_exactly(length - 1)))
            return frames

        return await asyncio.to_thread(read)

    async def at_end(self) -> bool:
        """Whether the peer sees the end of the stream (True) rather than more bytes or silence."""
        assert self.conn is not None
        try:
            return await asyncio.to_thread(self.conn.recv, 1) == b""
        except TimeoutError:
            return False

    def reset(self) -> None:
        assert self.conn is not None
        self.conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.conn.close()

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.listener.close()


@asynccontextmanager
async def _dialling_raw_peer(
    *, max_frame: int = 1 << 20, direct_writes: bool = True
) -> AsyncIterator[tuple[PeerTransport, RawPeer, Inbox]]:
    """Node 1 connected to a raw peer 2 that has read node 1's HELLO."""
    inbox = Inbox()
    one = PeerTransport(
        node_id=1,
        cluster_id="test",
        listen="127.0.0.1:0",
        deliver=inbox.deliver,
        on_unreachable=inbox.unreachable.append,
        max_frame_bytes=max_frame,
        heartbeat_interval_s=None,
        direct_writes=direct_writes,
    )
    await one.start()
    raw = RawPeer()
    one.set_peer(2, f"127.0.0.1:{raw.port}")
    try:
        one.send(2, [(1, _append(2, 1, b"dial"))])  # dropped: it starts the dial
        await raw.accept()
        [(kind, _)] = await raw.frames(1)
        assert kind == FrameType.HELLO
        async with asyncio.timeout(10):
            while not one.connected(2):
                await asyncio.sleep(0.01)
        yield one, raw, inbox
    finally:
        await one.stop()
        raw.close()


def test_a_thread_writes_its_frames_on_an_idle_connection_itself() -> None:
    async def scenario() -> None:
        async with _pair() as (one, two, inbox):
            await _in_thread(lambda: one.post(_batch(7, 1, 100, messages=3)))
            await inbox.wait_for(3)
            assert [bytes(m.entries[0].payload) for _, _, m in inbox.messages] == [_payload(7, 1, 100)] * 3
            assert (one.stats.direct_frames_out, one.stats.handed_frames_out) == (1, 0)
            assert one.stats.messages_out >= 3 and two.stats.bad_frames == 0

    asyncio.run(scenario())


def test_frames_posted_while_the_loop_has_bytes_to_write_follow_them_through_the_loop_in_order() -> None:
    async def scenario() -> None:
        async with _dialling_raw_peer() as (one, raw, _):
            big = [(1, _append(2, 1, _payload(0, n, 256 << 10))) for n in range(48)]  # 12 MiB: the buffer backs up
            one.send(2, big)
            await _in_thread(lambda: one.post(_batch(1, 1, 10)))
            await _in_thread(lambda: one.post(_batch(1, 2, 10)))
            one.send(2, [(1, _append(2, 1, _payload(2, 1, 10)))])  # the loop's own write goes after them
            assert one.stats.direct_frames_out == 0 and one.stats.handed_frames_out == 2
            received = await raw.payloads(48 + 3)
            expected = [_payload(0, n, 256 << 10) for n in range(48)]
            assert received == [*expected, _payload(1, 1, 10), _payload(1, 2, 10), _payload(2, 1, 10)]

    asyncio.run(scenario())


def test_a_write_the_socket_takes_only_in_part_is_finished_by_the_loop_before_anything_after_it() -> None:
    async def scenario() -> None:
        async with _dialling_raw_peer() as (one, raw, _):
            big = {2: [(1, _append(2, 1, _payload(0, n, 256 << 10))) for n in range(64)]}  # 16 MiB: beyond any buffer
            await _in_thread(lambda: one.post(big))
            big_frames = one.stats.direct_frames_out
            assert big_frames > 1 and one.stats.handed_frames_out == 0, "written directly, its rest by the loop"
            await _in_thread(lambda: one.post(_batch(1, 1, 10)))
            one.send(2, [(1, _append(2, 1, _payload(2, 1, 10)))])
            assert one.stats.direct_frames_out == big_frames and one.stats.handed_frames_out == 1
            received = await raw.payloads(64 + 2)
            assert received == [*(_payload(0, n, 256 << 10) for n in range(64)), _payload(1, 1, 10), _payload(2, 1, 10)]

    asyncio.run(scenario())


def test_concurrent_writers_on_one_connection_never_interleave_or_reorder_frames() -> None:
    writers, batches = 3, 40

    def post_all(one: PeerTransport, writer: int) -> None:
        for seq in range(batches):
            size = (seq * 7919 * (writer + 1)) % (384 << 10) + 16  # 16 B to 384 KiB: some back the socket up
            one.post(_batch(writer, seq, size, messages=1 + seq % 3))

    async def scenario() -> None:
        async with _pair(max_frame=4 << 20) as (one, two, inbox):
            threads = [threading.Thread(target=post_all, args=(one, w)) for w in range(writers)]
            for thread in threads:
                thread.start()
            for seq in range(batches):  # the loop writes meanwhile too: appends and held heartbeats
                one.send(2, [(99, _append(2, 1, _payload(99, seq, 1000))), (5, _heartbeat(seq))])
                one.flush_heartbeats()
                await asyncio.sleep(0)
            await asyncio.to_thread(lambda: [thread.join(30) for thread in threads])
            posted = sum(1 + seq % 3 for seq in range(batches)) * writers
            await inbox.wait_for(posted + 2 * batches, timeout=30)
            seen: dict[int, list[int]] = {}
            for _, group, message in inbox.messages:
                if message.type is T.APP:
                    writer, seq, _ = bytes(message.entries[0].payload).split(b":", 2)
                    assert int(writer) == group
                    seen.setdefault(group, []).append(int(seq))
            for writer in [*range(writers), 99]:
                assert seen[writer] == sorted(seen[writer]), f"writer {writer}'s frames were reordered"
            assert two.stats.bad_frames == 0 and one.stats.connects == 1, "no frame was cut or mixed"
            assert one.stats.direct_frames_out > 0

    asyncio.run(scenario())


def _heartbeat(commit: int) -> raft.Message:
    return raft.Message(type=T.HEARTBEAT, to=2, sender=1, term=2, commit=commit)


def test_a_failed_direct_write_drops_the_connection_and_the_next_write_dials_again() -> None:
    async def scenario() -> None:
        async with _dialling_raw_peer() as (one, raw, inbox):
            dropped = one.stats.dropped_messages
            raw.reset()  # the peer resets the connection before the loop can notice
            _blocking_in_thread(lambda: one.post(_batch(1, 1, 10)))
            _blocking_in_thread(lambda: one.post(_batch(1, 2, 10)))  # after the failure: handed, dropped on the loop
            assert one.stats.dropped_messages == dropped + 1 and one.stats.direct_frames_out == 0
            async with asyncio.timeout(10):
                while not inbox.unreachable:
                    await asyncio.sleep(0.01)
                assert inbox.unreachable == [2] and one.stats.dropped_messages == dropped + 2
                while not one.connected(2):  # a later write dials again, as after any lost connection
                    one.send(2, [(1, _append(2, 1, b"again"))])
                    await asyncio.sleep(0.02)
            assert one.stats.connects == 2

    asyncio.run(scenario())


def test_a_closed_connection_ends_for_the_peer_although_a_duplicate_of_its_socket_writes_directly() -> None:
    async def scenario() -> None:
        async with _dialling_raw_peer() as (one, raw, _):
            await _in_thread(lambda: one.post(_batch(1, 1, 10)))
            assert await raw.payloads(1) == [_payload(1, 1, 10)]
            one.disconnect(2)
            assert await raw.at_end(), "the peer must see the connection end"
            await _in_thread(lambda: one.post(_batch(1, 2, 10)))  # nothing more on the closed connection
            assert one.stats.direct_frames_out == 1

    asyncio.run(scenario())


def test_tls_connections_and_direct_writes_off_keep_the_loop_s_path(tmp_path: Path) -> None:
    ca = make_ca()

    async def over_tls() -> None:
        tls1 = _tls(tmp_path, ca, make_node_certificate(ca, 1), "n1")
        tls2 = _tls(tmp_path, ca, make_node_certificate(ca, 2), "n2")
        async with _tls_pair(tls1, tls2) as (one, _, _, inbox2):
            async with asyncio.timeout(10):
                while not inbox2.messages:
                    one.send(2, [(7, _append(2, 1, b"dial"))])
                    await asyncio.sleep(0.02)
            await asyncio.sleep(0.1)  # let any batch sent while dialling arrive
            before = len(inbox2.messages)
            await _in_thread(lambda: one.post(_batch(3, 1, 100)))
            await inbox2.wait_for(before + 1)
            assert bytes(inbox2.messages[-1][2].entries[0].payload) == _payload(3, 1, 100)
            assert one.stats.direct_frames_out == 0 and one.stats.handed_frames_out == 1

    async def switched_off() -> None:
        async with _dialling_raw_peer(direct_writes=False) as (one, raw, _):
            await _in_thread(lambda: one.post(_batch(1, 1, 10)))
            assert await raw.payloads(1) == [_payload(1, 1, 10)]
            assert one.stats.direct_frames_out == 0 and one.stats.handed_frames_out == 1

    asyncio.run(over_tls())
    asyncio.run(switched_off())
