"""The peer transport: one connection per peer carries every group's messages in frames no larger than the
limit; plain heartbeats wait for the heartbeat clock and leave in one frame per peer; bad frames close only
the connection that sent them."""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from multiraft import raft
from multiraft.node.peer.transport import PROTOCOL_VERSION, PeerTransport

T = raft.MessageType


class Inbox:
    def __init__(self) -> None:
        self.messages: list[tuple[int, int, raft.Message]] = []
        self.deliveries: list[list[tuple[int, raft.Message]]] = []  # one per frame received
        self.unreachable: list[int] = []
        self.arrived = asyncio.Event()

    def deliver(self, from_node: int, messages: list[tuple[int, raft.Message]]) -> None:
        self.messages += [(from_node, group, message) for group, message in messages]
        self.deliveries.append(messages)
        self.arrived.set()

    async def wait_for(self, count: int, timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout):
            while len(self.messages) < count:
                self.arrived.clear()
                await self.arrived.wait()


def _transport(
    node_id: int, inbox: Inbox, cluster: str = "test", max_frame: int = 1 << 20, heartbeat_s: float | None = None
) -> PeerTransport:
    return PeerTransport(
        node_id=node_id,
        cluster_id=cluster,
        listen="127.0.0.1:0",
        deliver=inbox.deliver,
        on_unreachable=inbox.unreachable.append,
        max_frame_bytes=max_frame,
        heartbeat_interval_s=heartbeat_s,  # None: heartbeats leave only when the test flushes them
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
        two.set_peer(1, f"127.0.0.1:{one.port}")  # Raft messages come from known peers only
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
    body = struct.pack("<HQH", PROTOCOL_VERSION, node_id, len(cluster)) + cluster.encode()
    return struct.pack("<IB", len(body) + 1, 1) + body


@pytest.mark.parametrize(
    "frames",
    [
        [_hello(5, "another-cluster")],
        [b"\x05\x00\x00\x00\x02hello"],  # a RAFT frame before any hello
        [_hello(5, "test"), struct.pack("<IB", 6, 2) + b"\x01\x00\x00\x00\x99"],  # a message cut short
        [_hello(5, "test"), struct.pack("<IB", 13, 2) + struct.pack("<II", 7, 4) + b"junk"],  # undecodable
        [_hello(5, "test"), struct.pack("<I", 2**31)],  # a frame above the size limit
        [_hello(5, "test"), struct.pack("<IB", 21, 5) + b"\x00" * 20],  # heartbeats: not whole records
        [_hello(5, "test"), struct.pack("<IB", 22, 5) + struct.pack("<IBQQ", 7, 0x80, 2, 4)],  # unknown flag
        [struct.pack("<IB", 13, 1) + struct.pack("<HQH", PROTOCOL_VERSION + 1, 5, 0)],  # a newer protocol
    ],
    ids=[
        "foreign cluster",
        "no hello",
        "truncated message",
        "garbage message",
        "oversized frame",
        "torn heartbeats",
        "heartbeat flags",
        "protocol version",
    ],
)
def test_a_bad_frame_closes_only_its_own_connection(frames: list[bytes]) -> None:
    async def scenario() -> None:
        inbox1, inbox2 = Inbox(), Inbox()
        one, two = _transport(1, inbox1), _transport(2, inbox2)
        await one.start()
        await two.start()
        one.set_peer(2, f"127.0.0.1:{two.port}")
        two.set_peer(1, f"127.0.0.1:{one.port}")  # Raft messages come from known peers only
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
        two.set_peer(1, f"127.0.0.1:{one.port}")
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
            three.set_peer(1, f"127.0.0.1:{one.port}")
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
        two.set_peer(1, f"127.0.0.1:{one.port}")  # Raft messages come from known peers only
        try:
            assert await one.call(2, 7, b"ping", timeout_s=5) == (0, b"1:7:ping")
        finally:
            await one.stop()
            await two.stop()

    asyncio.run(scenario())


@asynccontextmanager
async def _pair(*, max_frame: int = 1 << 20) -> AsyncIterator[tuple[PeerTransport, PeerTransport, Inbox]]:
    """Node 1 connected to node 2 (its first message delivered); yields (one, two, node 2's inbox)."""
    inbox1, inbox2 = Inbox(), Inbox()
    one, two = _transport(1, inbox1, max_frame=max_frame), _transport(2, inbox2, max_frame=max_frame)
    await one.start()
    await two.start()
    one.set_peer(2, f"127.0.0.1:{two.port}")
    two.set_peer(1, f"127.0.0.1:{one.port}")  # Raft messages come from known peers only
    try:
        await _send_until_delivered(one, 2, [(1, _append(2, 1, b"hello"))], inbox2)
        await asyncio.sleep(0.1)  # let any batch sent while dialling arrive
        inbox2.messages.clear()
        inbox2.deliveries.clear()
        yield one, two, inbox2
    finally:
        await one.stop()
        await two.stop()


def _heartbeat(group: int, term: int, commit: int, *, quiesce: bool = False, context: bytes = b"") -> raft.Message:
    return raft.Message(type=T.HEARTBEAT, to=2, sender=1, term=term, commit=commit, quiesce=quiesce, context=context)


def _heartbeat_response(term: int, *, context: bytes = b"") -> raft.Message:
    return raft.Message(type=T.HEARTBEAT_RESP, to=2, sender=1, term=term, context=context)


def test_a_round_larger_than_a_frame_is_cut_into_frames_that_the_peer_accepts() -> None:
    async def scenario() -> None:
        async with _pair(max_frame=1 << 20) as (one, two, inbox):
            payloads = [bytes([n]) * (300 << 10) for n in range(10)]  # 3 MiB for one peer in one round
            batch = [(group, _append(2, 1, payload)) for group, payload in enumerate(payloads, start=1)]
            frames_before = one.stats.frames_out
            one.send(2, batch)
            await inbox.wait_for(10)
            assert [bytes(m.entries[0].payload) for _, _, m in inbox.messages] == payloads
            assert [group for _, group, _ in inbox.messages] == list(range(1, 11))
            assert one.stats.frames_out - frames_before == 4, "3 appends of 300 KiB per 1 MiB frame"
            assert len(inbox.deliveries) == 4
            assert two.stats.bad_frames == 0 and one.stats.connects == 1, "the receiver kept the connection"

    asyncio.run(scenario())


def test_a_message_too_large_for_any_frame_is_dropped_alone_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        async with _pair(max_frame=1 << 20) as (one, two, inbox):
            batch = [(1, _append(2, 1, b"small")), (2, _append(2, 1, b"x" * (1 << 20))), (3, _append(2, 1, b"tail"))]
            with caplog.at_level(logging.ERROR, logger="multiraft.node.peer.transport"):
                one.send(2, batch)
                await inbox.wait_for(2)
            assert [(group, bytes(m.entries[0].payload)) for _, group, m in inbox.messages] == [
                (1, b"small"),
                (3, b"tail"),
            ]
            assert one.stats.oversized_messages == 1 and two.stats.bad_frames == 0
            errors = [str(r.msg) for r in caplog.records if r.levelno == logging.ERROR]
            assert any("max_frame_bytes" in e and ("group=2 " in e or "'group': 2," in e) for e in errors), errors

    asyncio.run(scenario())


def test_plain_heartbeats_wait_for_the_clock_and_leave_in_one_compact_frame_per_peer() -> None:
    async def scenario() -> None:
        async with _pair() as (one, _two, inbox):
            rounds = [range(1, 40), range(40, 80), range(80, 121)]  # groups whose timers fire in different rounds
            for groups in rounds:
                one.send(2, [(g, _heartbeat(g, term=3, commit=g, quiesce=g % 2 == 0)) for g in groups])
            one.send(2, [(7, _append(2, 1, b"after the heartbeats"))])
            await inbox.wait_for(1)
            assert [m.type for _, _, m in inbox.messages] == [T.APP], "the append did not wait; heartbeats did"

            bytes_before = one.stats.bytes_out
            one.flush_heartbeats()
            await inbox.wait_for(1 + 120)
            assert one.stats.heartbeat_frames_out == 1 and len(inbox.deliveries) == 2
            assert one.stats.bytes_out - bytes_before == 5 + 120 * 21, "21 bytes per group, one frame header"
            for group, (frm, received_group, beat) in zip(range(1, 121), inbox.messages[1:], strict=True):
                assert received_group == group and frm == 1
                assert (beat.type, beat.to, beat.sender, beat.term, beat.commit, beat.quiesce, beat.context) == (
                    T.HEARTBEAT, 2, 1, 3, group, group % 2 == 0, b"",
                )  # fmt: skip

            one.flush_heartbeats()  # nothing held: nothing sent
            assert one.stats.heartbeat_frames_out == 1

    asyncio.run(scenario())


def test_a_round_s_heartbeat_responses_leave_at_once_in_one_compact_frame_with_the_rest() -> None:
    async def scenario() -> None:
        async with _pair() as (one, _two, inbox):
            responses = [(g, _heartbeat_response(term=4)) for g in range(1, 101)]
            bytes_before = one.stats.bytes_out
            one.send(2, [*responses[:50], (200, _append(2, 1, b"an ack's neighbour")), *responses[50:]])
            await inbox.wait_for(101)  # no flush
            assert one.stats.heartbeat_frames_out == 1 and [len(d) for d in inbox.deliveries] == [1, 100]
            assert one.stats.bytes_out - bytes_before < 2 * 5 + 200 + 100 * 21
            assert [(g, m.type, m.term, m.sender, m.to) for _, g, m in inbox.messages[1:]] == [
                (g, T.HEARTBEAT_RESP, 4, 1, 2) for g in range(1, 101)
            ]

    asyncio.run(scenario())


def test_a_newer_heartbeat_of_a_group_replaces_the_one_held() -> None:
    async def scenario() -> None:
        async with _pair() as (one, _two, inbox):
            one.send(2, [(5, _heartbeat(5, term=3, commit=10))])
            one.send(2, [(5, _heartbeat(5, term=3, commit=12, quiesce=True))])
            one.flush_heartbeats()
            one.send(2, [(6, _append(2, 1, b"marker"))])  # the same connection: it arrives after the flush
            await inbox.wait_for(2)
            assert [(g, m.type, m.commit, m.quiesce) for _, g, m in inbox.messages] == [
                (5, T.HEARTBEAT, 12, True),
                (6, T.APP, 4, False),
            ]

    asyncio.run(scenario())


def test_read_index_heartbeats_and_their_responses_are_not_held() -> None:
    async def scenario() -> None:
        async with _pair() as (one, _two, inbox):
            read = (9).to_bytes(8, "big")
            one.send(2, [(1, _heartbeat(1, term=3, commit=5, context=read)), (2, _heartbeat_response(3, context=read))])
            await inbox.wait_for(2)  # no flush
            assert [(m.type, m.context) for _, _, m in inbox.messages] == [
                (T.HEARTBEAT, read),
                (T.HEARTBEAT_RESP, read),
            ]
            assert one.stats.heartbeat_frames_out == 0

    asyncio.run(scenario())


def test_the_heartbeat_clock_flushes_by_itself() -> None:
    async def scenario() -> None:
        inbox1, inbox2 = Inbox(), Inbox()
        one, two = _transport(1, inbox1, heartbeat_s=0.02), _transport(2, inbox2)
        await one.start()
        await two.start()
        one.set_peer(2, f"127.0.0.1:{two.port}")
        two.set_peer(1, f"127.0.0.1:{one.port}")  # Raft messages come from known peers only
        try:
            async with asyncio.timeout(5):
                while not inbox2.messages:
                    one.send(2, [(3, _heartbeat(3, term=2, commit=1))])  # dropped until connected
                    await asyncio.sleep(0.05)
            assert inbox2.messages[0][2].type is T.HEARTBEAT
        finally:
            await one.stop()
            await two.stop()

    asyncio.run(scenario())


def _raft_frame(*messages: tuple[int, raft.Message]) -> bytes:
    body = b"".join(struct.pack("<II", group, len(data)) + data for group, data in _encoded(messages))
    return struct.pack("<IB", len(body) + 1, 2) + body


def _encoded(messages: tuple[tuple[int, raft.Message], ...]) -> list[tuple[int, bytes]]:
    return [(group, raft.encode_message(message)) for group, message in messages]


def _heartbeats_frame(*beats: tuple[int, int, int, int]) -> bytes:
    body = b"".join(struct.pack("<IBQQ", *beat) for beat in beats)
    return struct.pack("<IB", len(body) + 1, 5) + body


async def _raw_session(port: int, frames: list[bytes], *, settle_s: float = 0.3) -> bool:
    """HELLO-led raw frames on a fresh connection; True if the peer closed it, False if it is still open."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"".join(frames))
    await writer.drain()
    try:
        async with asyncio.timeout(settle_s):
            closed = await reader.read(1) == b""
    except TimeoutError:
        closed = False
    writer.close()
    return closed


def test_a_raft_message_whose_sender_is_not_the_connection_s_node_is_dropped_alone() -> None:
    async def scenario() -> None:
        async with _pair() as (one, two, inbox):
            two.set_peer(5, "127.0.0.1:9")  # node 5 is a known peer, speaking through a raw socket
            forged = _append(2, 1, b"forged: node 5's connection speaking for node 1")
            own = _append(2, 5, b"node 5 for itself")
            frame = _raft_frame((3, forged), (4, own))
            assert not await _raw_session(two.port, [_hello(5, "test"), frame]), "the connection stays open"
            await inbox.wait_for(1)
            assert [(frm, group, m.sender, bytes(m.entries[0].payload)) for frm, group, m in inbox.messages] == [
                (5, 4, 5, b"node 5 for itself")
            ]
            assert two.stats.forged_messages == 1 and two.stats.bad_frames == 0

            # A frame of nothing but forged messages delivers nothing at all (not even an empty batch).
            deliveries = len(inbox.deliveries)
            assert not await _raw_session(two.port, [_hello(5, "test"), _raft_frame((3, forged))])
            assert len(inbox.deliveries) == deliveries and two.stats.forged_messages == 2

            await _send_until_delivered(one, 2, [(1, _append(2, 1, b"the real node 1"))], inbox)
            assert inbox.messages[-1][0] == 1 and inbox.messages[-1][2].sender == 1

    asyncio.run(scenario())


TOP = 2**63 - 2  # the largest term or index a peer may send: term + 1 still fits a signed 64-bit field


def _from_5(mtype: raft.MessageType, **fields: object) -> bytes:
    """A RAFT frame of one message from node 5 (the raw connection's HELLO) to node 2."""
    return _raft_frame((1, raft.Message(type=mtype, to=2, sender=5, **fields)))  # type: ignore[arg-type]


def _entry(index: int, term: int) -> raft.Entry:
    return raft.Entry(index, term, raft.EntryKind.DATA, 0, b"x")


_SNAPSHOT_AT_TOP = raft.Snapshot(raft.SnapshotMeta(2**64 - 1, 2, raft.ConfState.of([1, 2, 5])), b"")


@pytest.mark.parametrize(
    "frame",
    [
        _heartbeats_frame((1, 0, 2**64 - 1, 0)),
        _heartbeats_frame((1, 0, 3, 4), (2, 1, TOP + 1, 0)),
        _heartbeats_frame((1, 2, 3, 2**64 - 1)),
        _from_5(T.VOTE, term=TOP + 1, log_term=1, index=1),
        _from_5(T.HEARTBEAT, term=2**64 - 1),
        _from_5(T.APP, term=2, index=TOP + 1),
        _from_5(T.APP, term=2, log_term=2**64 - 1),
        _from_5(T.APP_RESP, term=2, reject=True, reject_hint=2**64 - 1),
        _from_5(T.APP, term=2, entries=[_entry(2**64 - 1, 2)]),
        _from_5(T.APP, term=2, entries=[_entry(5, 2), _entry(6, TOP + 1)]),
        _from_5(T.SNAP, term=2, snapshot=_SNAPSHOT_AT_TOP),
    ],
    ids=[
        "heartbeat term 2^64-1",
        "heartbeat response term 2^63-1",
        "heartbeat commit 2^64-1",
        "vote term 2^63-1",
        "raft heartbeat term 2^64-1",
        "append index 2^63-1",
        "append log term 2^64-1",
        "reject hint 2^64-1",
        "entry index 2^64-1",
        "entry term 2^63-1",
        "snapshot index 2^64-1",
    ],
)
def test_a_term_or_index_beyond_what_raft_can_use_is_refused_at_decode_and_closes_only_that_connection(
    frame: bytes,
) -> None:
    async def scenario() -> None:
        async with _pair() as (one, two, inbox):
            two.set_peer(5, "127.0.0.1:9")
            assert await _raw_session(two.port, [_hello(5, "test"), frame], settle_s=3.0)
            assert inbox.messages == [], "nothing of the frame was delivered"
            assert two.stats.bad_frames == 1
            await _send_until_delivered(one, 2, [(1, _append(2, 1, b"after"))], inbox)
            assert [bytes(m.entries[0].payload) for _, _, m in inbox.messages][-1] == b"after"

    asyncio.run(scenario())


def test_the_largest_usable_term_and_index_are_still_accepted() -> None:
    async def scenario() -> None:
        async with _pair() as (_one, two, inbox):
            two.set_peer(5, "127.0.0.1:9")
            vote = raft.Message(type=T.VOTE, to=2, sender=5, term=TOP, log_term=TOP, index=TOP, commit=TOP)
            frames = [_hello(5, "test"), _heartbeats_frame((1, 0, TOP, TOP)), _raft_frame((2, vote))]
            assert not await _raw_session(two.port, frames)
            await inbox.wait_for(2)
            assert [(m.type, m.term, m.commit) for _, _, m in inbox.messages] == [
                (T.HEARTBEAT, TOP, TOP),
                (T.VOTE, TOP, TOP),
            ]
            assert two.stats.bad_frames == 0
            assert raft.encode_message(raft.Message(type=T.VOTE, to=2, sender=5, term=TOP + 1)), "term + 1 encodes"

    asyncio.run(scenario())


def test_raft_messages_from_a_node_that_is_not_a_known_peer_are_dropped_but_its_requests_are_served() -> None:
    async def scenario() -> None:
        async def answer(from_node: int, kind: int, body: bytes) -> tuple[int, bytes]:
            return 0, b"%d:%d:" % (from_node, kind) + body

        inbox = Inbox()
        two = PeerTransport(
            node_id=2, cluster_id="test", listen="127.0.0.1:0", deliver=inbox.deliver,
            on_unreachable=inbox.unreachable.append, handle_request=answer, heartbeat_interval_s=None,
        )  # fmt: skip
        await two.start()
        two.set_peer(1, "127.0.0.1:9")
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", two.port)
            vote = raft.Message(type=T.VOTE, to=2, sender=99, term=50, log_term=1, index=1)
            request = struct.pack("<QB", 7, 3) + b"ping"
            writer.write(
                _hello(99, "test")
                + _raft_frame((1, vote))
                + _heartbeats_frame((1, 0, 50, 0))
                + struct.pack("<IB", len(request) + 1, 3)
                + request
            )
            async with asyncio.timeout(5):
                length, frame_type = struct.unpack("<IB", await reader.readexactly(5))
                answer_body = await reader.readexactly(length - 1)
            assert frame_type == 4 and answer_body == struct.pack("<QB", 7, 0) + b"99:3:ping"
            assert inbox.messages == [] and two.stats.stranger_messages == 2 and two.stats.bad_frames == 0
            writer.close()
        finally:
            await two.stop()

    asyncio.run(scenario())
