"""A consumer group's partitions with their owner, committed offset, log end and lag (``group describe`` and
``status``), as ``kafka-consumer-groups --describe`` shows them.

A partition is listed when the current generation assigns it or the group committed an offset for it (a
Spark query's monitoring group, or a group whose members are gone, has only the latter). Lag is the log end
(high watermark) minus the committed offset; unknown ("-") where nothing is committed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from multiraft.errors import UnknownTopicError

if TYPE_CHECKING:
    from multiraft import Admin, GroupDescription, GroupMemberInfo, PartitionInfo, TopicInfo

__all__ = [
    "PartitionLag",
    "GroupLag",
    "group_lag",
    "member_lags",
    "partition_lags",
    "log_ends",
    "high_watermarks",
    "leader_answered",
]


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int | None
    log_end: int | None
    """The high watermark; None when the topic is gone."""
    member: GroupMemberInfo | None
    """The member the current generation assigns the partition to; None when none does."""

    @property
    def lag(self) -> int | None:
        if self.committed is None or self.log_end is None:
            return None
        return max(0, self.log_end - self.committed)


@dataclass(frozen=True, slots=True)
class GroupLag:
    """A group's description with its partitions' lag (what ``describe`` prints)."""

    description: GroupDescription
    partitions: tuple[PartitionLag, ...]

    @property
    def total_lag(self) -> int | None:
        known = [p.lag for p in self.partitions if p.lag is not None]
        return sum(known) if known else None


def partition_lags(
    description: GroupDescription,
    committed: Mapping[tuple[str, int], int],
    ends: Mapping[tuple[str, int], int],
) -> list[PartitionLag]:
    """Every partition assigned or committed, sorted, with its owner and lag."""
    owners: dict[tuple[str, int], GroupMemberInfo] = {}
    for member in description.members:
        for tp in member.assignment:
            owners[(tp.topic, tp.partition)] = member
    keys = sorted({*owners, *((t, p) for t, p in committed)})
    return [PartitionLag(t, p, committed.get((t, p)), ends.get((t, p)), owners.get((t, p))) for t, p in keys]


def member_lags(description: GroupDescription, partitions: Iterable[PartitionLag]) -> dict[str, int | None]:
    """Per member id: the lag summed over its partitions (None when none of them has a known lag)."""
    found: dict[str, int | None] = {m.member_id: None for m in description.members}
    for row in partitions:
        if row.member is None or row.lag is None:
            continue
        found[row.member.member_id] = (found.get(row.member.member_id) or 0) + row.lag
    return found


def log_ends(admin: Admin, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """The high watermark of each partition whose leader answered (those of deleted topics, and those no
    leader answered for in the node's bound, are left out: their lag is unknown, not measured against 0)."""
    by_topic: dict[str, set[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, set()).add(partition)
    ends: dict[tuple[str, int], int] = {}
    for topic, wanted in sorted(by_topic.items()):
        try:
            # One bounded call per topic: the node asks every leader at once and leaves out one that does
            # not answer, where a ListOffsets per partition would wait for a leaderless one until the deadline.
            described = admin.describe_topic(topic)
        except UnknownTopicError:
            continue
        ends.update(high_watermarks(described, wanted))
    return ends


def high_watermarks(topic: TopicInfo, wanted: Iterable[int] | None = None) -> dict[tuple[str, int], int]:
    """(topic, partition) -> high watermark of the partitions (``wanted``: those only) whose leader answered."""
    chosen = None if wanted is None else set(wanted)
    return {
        (topic.name, p.partition): p.high_watermark
        for p in topic.partitions
        if leader_answered(p) and (chosen is None or p.partition in chosen)
    }


def leader_answered(partition: PartitionInfo) -> bool:
    """Whether a leader answered for the partition: without its live status a description has no term (and
    a high watermark of 0, the leader the node last heard of), which must not read as an empty partition."""
    return partition.leader_epoch > 0


def group_lag(admin: Admin, description: GroupDescription) -> GroupLag:
    """``description`` with its committed offsets, log ends and lag, asked of the cluster."""
    committed = {(tp.topic, tp.partition): offset for tp, offset in admin.group_offsets(description.group).items()}
    rows = partition_lags(description, committed, {})
    ends = log_ends(admin, ((r.topic, r.partition) for r in rows))
    return GroupLag(description, tuple(partition_lags(description, committed, ends)))
