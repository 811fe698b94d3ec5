"""How much a node can still store, and how the controller leader learns it (issue 13: resource exhaustion
is refused up front).

Three resources run out: the file system under ``data_dir``, the LMDB map (``map_size_bytes``) and the
segment slots (``max_segments``, one per segment of any log). Each has a low-water mark in the node config
(:class:`LowWater`). Below any of them the node is *short*: it refuses Produce to the partitions it leads with
:class:`~multiraft.errors.InsufficientStorageError` (reads go on), and it receives no new replica.

Placement is decided by the controller leader, so it must know every node's room before it proposes a
command: a command that asks a node to open a replica it cannot store would fail on that node when applied,
and again at every replay. The leader's :class:`CapacityMonitor` asks each live peer for its
:class:`NodeCapacity` every second (peer request ``CAPACITY``); :class:`RoomLedger` turns the reports into
:class:`~multiraft.controller.NodeRoom` (replicas that still fit), counting what was assigned since a report
and what is proposed but not applied yet. A node that opens replicas anyway checks first
(:func:`shortage`) and leaves one it cannot store absent, listed in its report as ``unstorable``.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from multiraft import controller as ctl
from multiraft.logging import get_logger
from multiraft.node.peer_messages import STATUS_OK, RequestKind, decode
from storage import StoreCapacity
from storage.binary import Reader, Writer

if TYPE_CHECKING:
    from multiraft.node.protocols import PeerCaller

__all__ = [
    "LowWater",
    "NodeCapacity",
    "shortage",
    "encode_capacity",
    "decode_capacity",
    "RoomLedger",
    "CapacityMonitor",
    "UNREPORTED",
]

log = get_logger(__name__)

_POLL_S = 1.0
_ASK_TIMEOUT_S = 2.0
_SEGMENTS_PER_NEW_REPLICA = 1  # a new log starts with one segment
UNREPORTED = "its free storage has not been reported to the controller leader yet"


@dataclass(frozen=True, slots=True)
class LowWater:
    """The node config's low-water marks (units as in ``NodeConfig``)."""

    min_free_disk_bytes: int
    min_free_map_bytes: int
    min_free_segments: int


def shortage(capacity: StoreCapacity, low: LowWater, data_dir: str, *, new_segments: int = 0) -> str:
    """What is below its low-water mark ("" when nothing is), once ``new_segments`` more slots are taken."""
    if capacity.disk_free_bytes < low.min_free_disk_bytes:
        return (
            f"disk: {capacity.disk_free_bytes} bytes free in {data_dir}, below min_free_disk_bytes "
            f"{low.min_free_disk_bytes}"
        )
    if capacity.map_free_bytes < low.min_free_map_bytes:
        return (
            f"LMDB map: {capacity.map_free_bytes} of map_size_bytes {capacity.map_size_bytes} free in {data_dir}, "
            f"below min_free_map_bytes {low.min_free_map_bytes}"
        )
    if capacity.free_segments - new_segments < low.min_free_segments:
        return (
            f"segments: {capacity.free_segments} of max_segments {capacity.max_segments} free, "
            f"{low.min_free_segments} kept for rolls (min_free_segments)"
        )
    return ""


@dataclass(frozen=True, slots=True)
class NodeCapacity:
    """One node's report of what it can still store."""

    node_id: int
    assigned: int  # replicas its applied controller state gave it when it reported (opened or not)
    free_segments: int
    reserved_segments: int  # its min_free_segments
    disk_free_bytes: int
    map_free_bytes: int
    short: str  # what is below its low-water mark, "" when nothing is
    unstorable: tuple[int, ...] = ()  # groups assigned to it that it could not open for lack of room

    def room(self, assigned_now: int, proposed: int) -> ctl.NodeRoom:
        """New replicas that still fit, given the replicas assigned to it now and those proposed to it."""
        if self.short:
            return ctl.NodeRoom(0, self.short)
        since = max(0, assigned_now - self.assigned) + proposed + len(self.unstorable)
        spare = self.free_segments - self.reserved_segments - since * _SEGMENTS_PER_NEW_REPLICA
        fits = max(0, spare // _SEGMENTS_PER_NEW_REPLICA)
        reason = (
            f"segments: room for {fits} more replica(s) ({self.free_segments} slot(s) free when reported, "
            f"{since} replica(s) placed since, {self.reserved_segments} kept for rolls: min_free_segments)"
        )
        return ctl.NodeRoom(fits, reason)


def encode_capacity(capacity: NodeCapacity) -> bytes:
    writer = Writer()
    for value in (
        capacity.node_id,
        capacity.assigned,
        capacity.free_segments,
        capacity.reserved_segments,
        capacity.disk_free_bytes,
        capacity.map_free_bytes,
    ):
        writer.i64(value)
    writer.text(capacity.short)
    writer.ints(capacity.unstorable)
    return writer.bytes()


def decode_capacity(data: bytes) -> NodeCapacity:
    def read(r: Reader) -> NodeCapacity:
        return NodeCapacity(
            r.id("node_id"),
            r.id("assigned"),
            r.id("free_segments"),
            r.id("reserved_segments"),
            r.id("disk_free_bytes"),
            r.id("map_free_bytes"),
            r.text("short"),
            r.ints("unstorable"),
        )

    return decode(data, "capacity", read)


class RoomLedger:
    """The controller leader's view of each node's room: CreateTopic placement reads and reserves it on the
    scheduler thread, the rebalancer reads it on the loop (reports and proposals are replaced whole, never
    changed in place, so neither needs a lock)."""

    def __init__(self, reports: Callable[[], Mapping[int, NodeCapacity]]) -> None:
        self._reports = reports
        self._proposed: list[tuple[int, Counter[int]]] = []  # (controller log index, replicas per node)

    def room(self, state: ctl.ClusterState, candidates: Iterable[int]) -> dict[int, ctl.NodeRoom]:
        """Room of each of ``candidates`` and every node that reported. A candidate that has not reported yet
        (a new leader's first second, a node that just joined) gets none (:data:`UNREPORTED`): a replica is
        never placed on a node that may be full."""
        reports = self._reports()
        unknown = {n: ctl.NodeRoom(0, UNREPORTED) for n in candidates if n not in reports}
        proposed: Counter[int] = Counter()
        for index, nodes in self._proposed:  # the list is replaced whole: the rebalancer reads it on the loop
            if index > state.applied_index:
                proposed.update(nodes)
        assigned = state.replica_counts()
        return unknown | {
            node_id: report.room(assigned.get(node_id, 0), proposed[node_id]) for node_id, report in reports.items()
        }

    def place_new_topic(
        self, nodes: list[ctl.NodeInfo], state: ctl.ClusterState, partitions: int, replication_factor: int
    ) -> list[tuple[tuple[int, ...], int]]:
        """:func:`multiraft.controller.place_new_topic` within each node's room. A topic that fits only once
        unreported nodes report is refused as retriable (:class:`~multiraft.controller.CapacityUnknownError`)."""
        room = self.room(state, (n.node_id for n in nodes))
        try:
            return ctl.place_new_topic(nodes, state, partitions, replication_factor, room)
        except ctl.NotEnoughStorageError:
            unknown = sorted(n for n, r in room.items() if r.reason == UNREPORTED)
            if unknown:
                raise ctl.CapacityUnknownError(unknown) from None
            raise

    def reserve(self, index: int | None, command: ctl.Command, applied_index: int) -> None:
        """Count a proposed command's new replicas until it is applied (the next reports include them)."""
        if index is None or not isinstance(command, ctl.CreateTopic | ctl.CreatePartitions):
            return
        nodes: Counter[int] = Counter(node for replicas, _ in command.assignments for node in replicas)
        self._proposed = [(i, n) for i, n in self._proposed if i > applied_index] + [(index, nodes)]

    def stranded(self) -> dict[int, tuple[int, ...]]:
        """Replicas each node was assigned but could not store (group ids), for the rebalancer to move."""
        return {node_id: report.unstorable for node_id, report in self._reports().items() if report.unstorable}


class CapacityMonitor:
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
            status, body = await self._peers.call(peer, RequestKind.CAPACITY, b"", _ASK_TIMEOUT_S)
            if status != STATUS_OK:
                return None
            capacity = decode_capacity(body)
        except (ConnectionError, TimeoutError, ValueError):
            return None
        return capacity if capacity.node_id == peer else None
