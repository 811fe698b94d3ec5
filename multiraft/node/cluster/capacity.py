"""How much a node can still store, and how the controller leader learns it (issue 13: resource exhaustion
is refused up front).

Three resources run out: the file system under ``data_dir``, the LMDB map (``map_size_bytes``) and the
segment slots (``max_segments``, one per segment of any log). Each has a low-water mark in the node config
(``replicas.capacity.LowWater``). Below any of them the node is *short*: it refuses Produce to the partitions it
leads with
:class:`~multiraft.errors.InsufficientStorageError` (reads go on), and it receives no new replica.

Placement is decided by the controller leader, so it must know every node's room before it proposes a
command: a command that asks a node to open a replica it cannot store would fail on that node when applied,
and again at every replay. The leader's :class:`CapacityMonitor` asks each live peer for its
:class:`~multiraft.node.vocabulary.capacity.NodeCapacity` every second (peer request ``CAPACITY``);
``replicas.capacity.RoomLedger`` turns the reports into :class:`~multiraft.controller.NodeRoom` (replicas that
still fit),
counting what was assigned since a report and what is proposed but not applied yet. A node that opens
replicas anyway checks first (``shortage``) and leaves one it cannot store absent, listed in its report
as ``unstorable``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from multiraft.logging import get_logger
from multiraft.node.peer.call import ask_capacity
from multiraft.node.threads import LoopOwned
from multiraft.node.vocabulary.capacity import NodeCapacity

if TYPE_CHECKING:
    from multiraft.node.protocols import PeerCaller

__all__ = ["CapacityMonitor"]

log = get_logger(__name__)

_POLL_S = 1.0
_ASK_TIMEOUT_S = 2.0


class CapacityMonitor(LoopOwned):
    """This node's own capacity every second (for refusing writes), and, on the controller leader, every live
    peer's (for placement). Event loop."""

    def __init__(
        self,
        node_id: int,
        local: Callable[[], Awaitable[NodeCapacity]],
        peers: PeerCaller,
        live_peers: Callable[[], list[int]],
        is_controller_leader: Callable[[], bool],
        *,
        interval_s: float = _POLL_S,
    ) -> None:
        self._node_id = node_id
        self._local = local
        self._peers = peers
        self._live_peers = live_peers
        self._is_controller_leader = is_controller_leader
        self._interval_s = interval_s
        self.own: NodeCapacity | None = None
        self.reports: Mapping[int, NodeCapacity] = {}  # replaced whole: the scheduler thread reads it

    @property
    def short(self) -> str:
        """What this node is short of ("" when nothing, or before the first check)."""
        own = self.own
        return own.short if own is not None else ""

    async def run(self) -> None:
        while True:
            try:
                await self.refresh()
            except Exception as exc:  # a failed round leaves the data a second staler; the next one retries
                log.debug("capacity check failed", error=repr(exc))
            # A new controller leader refuses placements until every live node has reported: ask again soon.
            incomplete = self._is_controller_leader() and not set(self._live_peers()) <= set(self.reports)
            await asyncio.sleep(self._interval_s / 4 if incomplete else self._interval_s)

    async def refresh(self) -> None:
        own = await self._local()
        if own.short and (self.own is None or not self.own.short):
            log.warning("storage below its low-water mark: writes are refused", short=own.short)
        elif self.own is not None and self.own.short and not own.short:
            log.info("storage back above its low-water marks: writes resume")
        self.own = own
        if not self._is_controller_leader():
            self.reports = {}
            return
        reports = {self._node_id: own}
        found = await asyncio.gather(*(self._ask(peer) for peer in self._live_peers()))
        reports.update((capacity.node_id, capacity) for capacity in found if capacity is not None)
        self.reports = reports

    async def _ask(self, peer: int) -> NodeCapacity | None:
        try:
            capacity = await ask_capacity(self._peers, peer, _ASK_TIMEOUT_S)
        except (ConnectionError, TimeoutError, ValueError):
            return None
        return capacity if capacity is not None and capacity.node_id == peer else None
