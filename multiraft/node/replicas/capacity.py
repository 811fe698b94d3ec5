"""What room a node has: its low-water marks, the check that finds a resource short, and the controller
leader's ledger of every node's room (see :mod:`multiraft.node.cluster.capacity` for how reports travel).

Owner: :class:`LowWater` and :func:`shortage` are pure; :class:`RoomLedger` is shared by the controller replica
(placement, on the scheduler thread) and the rebalancer (on the loop), replaced whole, never changed in place.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from multiraft import controller as ctl
from multiraft.node.threads import ThreadShared
from multiraft.node.vocabulary.capacity import NodeCapacity
from storage import StoreCapacity

__all__ = ["LowWater", "shortage", "RoomLedger", "UNREPORTED"]

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


class RoomLedger(ThreadShared):
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
