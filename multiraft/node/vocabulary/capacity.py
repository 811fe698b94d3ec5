"""A node's report of what it can still store (issue 13), and the new replicas that still fit on it.

The controller leader gathers the reports (:mod:`multiraft.node.cluster.capacity`) and places replicas within
them.
"""

from __future__ import annotations

from dataclasses import dataclass

from multiraft import controller as ctl

__all__ = ["NodeCapacity"]

_SEGMENTS_PER_NEW_REPLICA = 1  # a new log starts with one segment


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
