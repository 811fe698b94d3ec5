"""The peer transport: one connection per peer carries every group's messages; bad frames close only the
connection that sent them."""

from __future__ import annotations

import asyncio
import struct

import pytest

from multiraft import raft
from multiraft.node.transport import PeerTransport


class Inbox:
    def __init__(self) -> None:
        self.messages: list[tuple[int, int, raft.Message]] = []
        self.unreachable: list[int] = []
        self.arrived = asyncio.Event()

    def deliver(self, from_node: int, messages: list[tuple[int, raft.Message]]) -> None:
        self.messages += [(from_node, group, message) for group, message in messages]
        self.arrived.set()

    async def wait_for(self, count: int, timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout):
            while len(self.messages) < count:
                self.arrived.clear()
                await self.arrived.wait()


def _transport(node_id: int, inbox: Inbox, cluster: str = "test", max_frame: int = 1 << 20) -> PeerTransport:
    return PeerTransport(
        node_id=node_id,
        cluster_id=cluster,
        listen="127.0.0.1:0",
        deliver=inbox.deliver,
        on_unreachable=inbox.unreachable.append,
        max_frame_bytes=max_frame,
    )


def _append(to: int, frm: int, payload: bytes) -> raft.Message:
    entry = raft.Entry(5, 2, raft.EntryKind.DATA, 0, payload)
    return raft.Message(
        type=raft.MessageType.APP, to=to, sender=frm, term=2, log_term=2, index=4, entries=[entry], commit=4
    )


async def _send_until_delivered(
    sender: PeerTransport, to: int, batch: list[tuple[int, raft.Message]], inbox: Inbox
) -> None:
    before = len(inbox.messages)
    async with asyncio.timeout(5):
        while len(inbox.messages) == before:
            sender.send(to, batch)  # the first sends go while the connection is being dialled
            await asyncio.sleep(0.02)


def test_every_group_s_messages_to_a_peer_travel_in_one_frame() -> None:
    async def scenario() -> None:
        inbox1, inbox2 = Inbox(), Inbox()
        one, two = _transport(1, inbox1), _transport(2, inbox2)
        await one.start()
        await two.start()
        one.set_peer(2, f"127.0.0.1:{two.port}")
        try:
            batch = [(group, _append(2, 1, b"payload-%d" % group)) for group in (7, 8, 9)]
            await _send_until_delivered(one, 2, batch, inbox2)
            await asyncio.sleep(0.1)  # let any batch sent while dialling arrive
            frames_before, received_before = one.stats.frames_out, len(inbox2.messages)
            one.send(2, batch)
            await inbox2.wait_for(received_before + 3)
            assert one.stats.frames_out == frames_before + 1
            received = [(group, bytes(m.entries[0].payload)) for frm, group, m in inbox2.messages[-3:]]
            assert received == [(7, b"payload-7"), (8, b"payload-8"), (9, b"payload-9")]
            assert all(frm == 1 for frm, _, _ in inbox2.messages)
        finally:
            await one.stop()
            await two.stop()

    asyncio.run(scenario())


async def _raw_frames(port: int, frames: list[bytes]) -> bool:
    """Send raw bytes on a fresh connection; True if the peer closed it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for frame in frames:
        writer.write(frame)
    await writer.drain()
    try:
        async with asyncio.timeout(3):
            closed = await reader.read(1) == b""
    except TimeoutError:
        closed = False
    writer.close()
    return closed


def _hello(node_id: int, cluster: str) -> bytes:
    body = struct.pack("<HQH", 1, node_id, len(cluster)) + cluster.encode()
    return struct.pack("<IB", len(body) + 1, 1) + body


@pytest.mark.parametrize(
    "frames",
    [
        [_hello(5, "another-cluster")],
        [b"\x05\x00\x00\x00\x02hello"],  # a RAFT frame before any hello
        [_hello(5, "test"), struct.pack("<IB", 6, 2) + b"\x01\x00\x00\x00\x99"],  # a message cut short
        [_hello(5, "test"), struct.pack("<IB", 13, 2) + struct.pack("<II", 7, 4) + b"junk"],  # undecodable
        [_hello(5, "test"), struct.pack("<I", 2**31)],  # a frame above the size limit
    ],
    ids=["foreign cluster", "no hello", "truncated message", "garbage message", "oversized frame"],
)
def test_a_bad_frame_closes_only_its_own_connection(frames: list[bytes]) -> None:
    async def scenario() -> None:
        inbox1, inbox2 = Inbox(), Inbox()
        one, two = _transport(1, inbox1), _transport(2, inbox2)
        await one.start()
        await two.start()
        one.set_peer(2, f"127.0.0.1:{two.port}")
        try:
            await _send_until_delivered(one, 2, [(1, _append(2, 1, b"before"))], inbox2)
            assert await _raw_frames(two.port, frames)
            assert two.stats.bad_frames >= (0 if frames[0].startswith(b"\x05") else 1)
            await _send_until_delivered(one, 2, [(1, _append(2, 1, b"after"))], inbox2)
            assert bytes(inbox2.messages[-1][2].entries[0].payload) == b"after"
        finally:
            await one.stop()
            await two.stop()

    asyncio.run(scenario())


def test_a_restarted_peer_is_dialled_again_and_reported_unreachable_meanwhile() -> None:
    async def scenario() -> None:
        inbox1, inbox2 = Inbox(), Inbox()
        one, two = _transport(1, inbox1), _transport(2, inbox2)
        await one.start()
        await two.start()
        port = two.port
        one.set_peer(2, f"127.0.0.1:{port}")
        try:
            await _send_until_delivered(one, 2, [(1, _append(2, 1, b"one"))], inbox2)
            await two.stop()
            async with asyncio.timeout(5):
                while 2 not in inbox1.unreachable:
                    one.send(2, [(1, _append(2, 1, b"lost"))])
                    await asyncio.sleep(0.05)
            inbox3 = Inbox()
            three = PeerTransport(
                node_id=2, cluster_id="test", listen=f"127.0.0.1:{port}", deliver=inbox3.deliver,
                on_unreachable=inbox3.unreachable.append,
            )  # fmt: skip
            await three.start()
            try:
                await _send_until_delivered(one, 2, [(1, _append(2, 1, b"again"))], inbox3)
            finally:
                await three.stop()
        finally:
            await one.stop()

    asyncio.run(scenario())


def test_a_request_gets_its_response_on_the_same_connections() -> None:
    async def scenario() -> None:
        inbox1, inbox2 = Inbox(), Inbox()

        async def answer(from_node: int, kind: int, body: bytes) -> tuple[int, bytes]:
            return 0, b"%d:%d:" % (from_node, kind) + body

        one = _transport(1, inbox1)
        two = PeerTransport(
            node_id=2, cluster_id="test", listen="127.0.0.1:0", deliver=inbox2.deliver,
            on_unreachable=inbox2.unreachable.append, handle_request=answer,
        )  # fmt: skip
        await one.start()
        await two.start()
        one.set_peer(2, f"127.0.0.1:{two.port}")
        try:
            assert await one.call(2, 7, b"ping", timeout_s=5) == (0, b"1:7:ping")
        finally:
            await one.stop()
            await two.stop()

    asyncio.run(scenario())
