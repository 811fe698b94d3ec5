"""What nodes report of the cluster's live state: partitions as their leaders see them, who leads which
Raft group, and the replica moves in flight (``multiraft status``, the rebalancer, the leader directory)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PartitionStatus", "LeaderAnnouncement", "MoveReport"]


@dataclass(frozen=True, slots=True)
class PartitionStatus:
    """One partition as its leader sees it (``multiraft status``, the rebalancer, under-replication)."""

    group_id: int
    leader: int
    term: int
    high_watermark: int
    log_start_offset: int
    in_sync_replicas: tuple[int, ...]
    lag: dict[int, int]  # entries behind the leader, per replica
    acked: tuple[int, ...]  # replicas that acknowledged any entry (lag alone would call an empty replica current)
    copies: dict[int, tuple[int, int]]  # replica -> (bytes copied, bytes total) of a catch-up segment copy
    size_bytes: int
    entries: int


@dataclass(frozen=True, slots=True)
class LeaderAnnouncement:
    """``leader`` leads Raft group ``group_id`` in ``term`` (a leader's broadcast)."""

    group_id: int
    leader: int
    term: int


@dataclass(frozen=True, slots=True)
class MoveReport:
    """A replica move in flight, as the controller leader tracks it."""

    topic: str
    partition: int
    group_id: int
    from_node: int  # 0 for a repair (the replica it replaces is gone)
    to_node: int
    phase: str
    bytes_copied: int
    bytes_total: int
    eta_seconds: float
