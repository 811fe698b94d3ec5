"""Telling every peer which partitions this node leads, so that any node can answer Metadata (event loop).

Changes go out every ``_BROADCAST_S``; everything again every ``_FULL_BROADCAST_S``, for peers that
reconnected or missed an announcement. Receivers keep the highest term per group (``Directory``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from multiraft.node.cluster.directory import Directory
from multiraft.node.peer.messages import RequestKind, encode_leaders
from multiraft.node.peer.transport import PeerTransport
from multiraft.node.threads import LoopOwned
from multiraft.node.vocabulary.status import LeaderAnnouncement

__all__ = ["LeaderBroadcaster"]

_BROADCAST_S = 0.25
_FULL_BROADCAST_S = 5.0
_CALL_TIMEOUT_S = 2.0


class LeaderBroadcaster(LoopOwned):
    def __init__(self, directory: Directory, transport: PeerTransport) -> None:
        self._directory = directory
        self._transport = transport
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        announced: dict[int, int] = {}
        last_full = 0.0
        node_id = self._directory.node_id
        try:
            while True:
                await asyncio.sleep(_BROADCAST_S)
                led = self._directory.led_here()
                now = time.monotonic()
                if led == announced and now - last_full < _FULL_BROADCAST_S:
                    continue
                announced, last_full = led, now
                body = encode_leaders([LeaderAnnouncement(g, node_id, t) for g, t in led.items()])
                transport = self._transport
                for peer in list(transport.known_peers()):
                    if transport.connected(peer):
                        task = asyncio.get_running_loop().create_task(self._announce(peer, body))
                        self._tasks.add(task)
                        task.add_done_callback(self._tasks.discard)
        finally:
            for task in list(self._tasks):
                task.cancel()

    async def _announce(self, peer: int, body: bytes) -> None:
        with contextlib.suppress(ConnectionError, TimeoutError):
            await self._transport.call(peer, RequestKind.LEADERS, body, _CALL_TIMEOUT_S)
