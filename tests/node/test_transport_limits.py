"""The peer listener's limits (issue 13): it holds at most ``max_connections`` connections, each connection
at most ``max_requests_per_connection`` requests and a frame's worth of their bodies in service (more are
answered busy at once, no task is started for them), and a frame whose handling raises is dropped alone while
its connection goes on."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from multiraft import raft
from multiraft.node.peer.transport import PeerTransport
from tests.node.test_transport import Inbox, _append, _hello, _raft_frame

REQUEST, RESPONSE = 3, 4


def _request(call_id: int, body: bytes = b"ping") -> bytes:
    payload = struct.pack("<QB", call_id, 7) + body
    return struct.pack("<IB", len(payload) + 1, REQUEST) + payload


async def _responses(reader: asyncio.StreamReader, count: int) -> dict[int, tuple[int, bytes]]:
    """call id -> (status, body) of the next ``count`` RESPONSE frames."""
    answers: dict[int, tuple[int, bytes]] = {}
    async with asyncio.timeout(10):
        for _ in range(count):
            length, frame_type = struct.unpack("<IB", await reader.readexactly(5))
            body = await reader.readexactly(length - 1)
            assert frame_type == RESPONSE
            call_id, status = struct.unpack_from("<QB", body)
            answers[call_id] = (status, body[9:])
    return answers


@asynccontextmanager
async def _node(inbox: Inbox, **limits: int) -> AsyncIterator[tuple[PeerTransport, asyncio.Event]]:
    """Node 2, whose requests wait for the yielded event before answering."""
    release = asyncio.Event()

    async def answer(from_node: int, kind: int, body: bytes) -> tuple[int, bytes]:
        await release.wait()
        return 0, b"served:" + body

    two = PeerTransport(
        node_id=2, cluster_id="test", listen="127.0.0.1:0", deliver=inbox.deliver,
        on_unreachable=inbox.unreachable.append, handle_request=answer, heartbeat_interval_s=None, **limits,
    )  # fmt: skip
    await two.start()
    two.set_peer(5, "127.0.0.1:9")
    try:
        yield two, release
    finally:
        release.set()
        await two.stop()


def test_requests_beyond_the_per_connection_limit_are_answered_busy_at_once_and_the_rest_are_served() -> None:
    async def scenario() -> None:
        async with _node(Inbox(), max_requests_per_connection=3) as (two, release):
            reader, writer = await asyncio.open_connection("127.0.0.1", two.port)
            writer.write(_hello(5, "test") + b"".join(_request(i) for i in range(1, 11)))
            busy = await _responses(reader, 7)  # answered while the first three are still in service
            assert sorted(busy) == list(range(4, 11))
            assert all(status != 0 and b"max_peer_requests_per_connection" in body for status, body in busy.values())
            assert two.stats.refused_requests == 7
            release.set()
            served = await _responses(reader, 3)
            assert served == dict.fromkeys((1, 2, 3), (0, b"served:ping"))
            writer.write(_request(11))  # room again
            assert await _responses(reader, 1) == {11: (0, b"served:ping")}
            writer.close()

    asyncio.run(scenario())


def test_connections_beyond_the_listener_limit_are_closed_as_they_arrive_and_the_others_go_on() -> None:
    async def scenario() -> None:
        async with _node(Inbox(), max_connections=2) as (two, release):
            release.set()
            held = [await asyncio.open_connection("127.0.0.1", two.port) for _ in range(2)]
            for _, writer in held:
                writer.write(_hello(5, "test"))
            await asyncio.sleep(0.1)
            reader, writer = await asyncio.open_connection("127.0.0.1", two.port)
            async with asyncio.timeout(5):
                assert await reader.read(1) == b"", "the third connection is closed"
            assert two.stats.refused_connections == 1
            first_reader, first_writer = held[0]
            first_writer.write(_request(1))
            assert await _responses(first_reader, 1) == {1: (0, b"served:ping")}
            for _, held_writer in held:
                held_writer.close()

    asyncio.run(scenario())


def test_a_frame_whose_handling_raises_is_dropped_alone_and_its_connection_goes_on() -> None:
    async def scenario() -> None:
        inbox = Inbox()
        failures = [TypeError("'int' object is not iterable")]
        deliver = inbox.deliver

        def faulty(from_node: int, messages: list[tuple[int, raft.Message]]) -> None:
            if failures:
                raise failures.pop()
            deliver(from_node, messages)

        inbox.deliver = faulty  # type: ignore[method-assign]
        async with _node(inbox) as (two, release):
            release.set()
            reader, writer = await asyncio.open_connection("127.0.0.1", two.port)
            first, second = _append(2, 5, b"first"), _append(2, 5, b"second")
            writer.write(_hello(5, "test") + _raft_frame((1, first)) + _raft_frame((1, second)) + _request(1))
            assert await _responses(reader, 1) == {1: (0, b"served:ping")}, "the connection lives on"
            await inbox.wait_for(1)
            assert [m.entries[0].payload for _, _, m in inbox.messages] == [b"second"]
            assert two.stats.bad_frames == 1
            writer.close()

    asyncio.run(scenario())


def test_request_bodies_in_service_beyond_a_frame_s_worth_are_answered_busy_but_one_alone_is_served() -> None:
    async def scenario() -> None:
        async with _node(Inbox(), max_frame_bytes=4096) as (two, release):
            reader, writer = await asyncio.open_connection("127.0.0.1", two.port)
            body = b"x" * 1500
            writer.write(_hello(5, "test") + b"".join(_request(i, body) for i in (1, 2, 3)))
            busy = await _responses(reader, 1)  # two bodies fit in 4096 bytes, a third does not
            assert list(busy) == [3] and busy[3][0] != 0
            release.set()
            assert set(await _responses(reader, 2)) == {1, 2}
            writer.write(_request(4, b"y" * 4000))  # nothing else in service: served however large
            assert await _responses(reader, 1) == {4: (0, b"served:" + b"y" * 4000)}
            writer.close()

    asyncio.run(scenario())
