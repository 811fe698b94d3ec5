"""A topic-partition replica: its Raft group's state machine, its leader duties, and the view readers use.

Applying a committed data entry moves the high watermark to the offset after its batch (the log assigned
the batch's offsets when it appended it) and answers the producer with the batch's base offset. Readers on
the event loop see a :class:`PartitionView` and read the synced log up to the high watermark, so they only
ever see committed records.

The leader also runs the partition's housekeeping, as replicated CONTROL entries so that every replica
acts at the same point of the log (``multiraft.node.control``): retention by age and size, a segment roll
when the active segment is older than segment.ms (so retention fires on idle partitions too), and handing
leadership back to the preferred leader when it is healthy and caught up.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from multiraft import raft
from multiraft.logging import get_logger
from multiraft.node.control import ControlKind, decode_control, encode_drop_before, encode_roll
from multiraft.node.scheduler import Group, Scheduler
from storage import SegmentedLog, read_header

__all__ = ["PartitionView", "PartitionMachine", "ProduceResult", "RetentionPolicy"]

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ProduceResult:
    base_offset: int
    log_append_time_ms: int


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    retention_ms: int  # -1: keep forever
    retention_bytes: int  # -1: no size limit


class PartitionView:
    """What the event loop knows of a partition replica; updated only on the loop thread."""

    def __init__(self, topic: str, partition: int, group_id: int, log_: SegmentedLog) -> None:
        self.topic = topic
        self.partition = partition
        self.group_id = group_id
        self.log = log_
        self.leader_id = 0
        self.leader_term = 0
        self.is_leader = False
        self.high_watermark = 0
        self.log_start_offset = 0
        self.replicas: tuple[int, ...] = ()
        self.removed = False
        self._advanced = asyncio.Event()

    def update(self, *, high_watermark: int, log_start_offset: int, leader_id: int, term: int, leader: bool) -> None:
        self.leader_id, self.leader_term, self.is_leader = leader_id, term, leader
        self.log_start_offset = log_start_offset
        if high_watermark != self.high_watermark:
            self.high_watermark = high_watermark
            self._wake_waiters()

    def mark_removed(self) -> None:
        self.removed = True
        self.is_leader = False
        self._wake_waiters()

    def _wake_waiters(self) -> None:
        advanced, self._advanced = self._advanced, asyncio.Event()
        advanced.set()

    async def wait_past(self, offset: int, timeout_s: float) -> None:
        """Return once the high watermark passes ``offset``, leadership changes, or ``timeout_s`` elapses."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        was_leader = self.is_leader
        while self.high_watermark <= offset and self.is_leader == was_leader and not self.removed:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            event = self._advanced
            try:
                await asyncio.wait_for(event.wait(), remaining)
            except TimeoutError:
                return


@dataclass
class PartitionMachine:
    """State machine of one partition replica (scheduler thread)."""

    topic: str
    partition: int
    group_id: int
    log: SegmentedLog
    scheduler: Scheduler
    publish: Callable[[Callable[[], None]], None]  # runs a callable on the event loop
    view: PartitionView
    preferred_leader: int = 0
    retention: RetentionPolicy = field(default_factory=lambda: RetentionPolicy(-1, -1))
    high_watermark: int = 0
    _retention_proposed_at: float = 0.0

    def start(self, group: Group) -> None:
        """Publish the state recovered from storage (the high watermark at the applied index)."""
        applied = group.storage.applied_index()
        try:
            self.high_watermark = self.log.offset_after(applied)
        except Exception:
            self.high_watermark = self.log.start_offset()
        self._publish(group)

    # ---------------------------------------------------------------------------------- StateMachine

    def apply(self, group: Group, entries: Sequence[raft.Entry]) -> dict[int, Any]:
        results: dict[int, Any] = {}
        for entry in entries:
            if entry.kind == raft.EntryKind.CONTROL:
                self._apply_control(group, entry)
        last = entries[-1].index
        if last > self.log.compaction_point()[0]:
            self.high_watermark = self.log.offset_after(last)
        if group.pending:
            data = raft.EntryKind.DATA
            for entry in entries:
                if entry.kind == data and entry.index in group.pending:
                    count = read_header(entry.payload).record_count
                    results[entry.index] = ProduceResult(self.log.offset_after(entry.index) - count, entry.timestamp_ms)
        self._publish(group)
        return results

    def on_role_change(self, group: Group, soft_state: raft.SoftState) -> None:
        self._publish(group)

    def on_snapshot(self, group: Group, snapshot: raft.Snapshot) -> None:
        self.high_watermark = self.log.start_offset()
        self._publish(group)

    def _apply_control(self, group: Group, entry: raft.Entry) -> None:
        try:
            kind, argument = decode_control(entry.payload)
        except ValueError as exc:
            log.warning("skipping a control entry this version cannot read", group=self.group_id, error=str(exc))
            return
        if kind is ControlKind.DROP_BEFORE:
            dropped = self.log.drop_before(argument)
            if dropped:
                group.storage.snapshot_at_compaction_point()
                log.info(
                    "retention dropped segments",
                    topic=self.topic,
                    partition=self.partition,
                    segments=len(dropped),
                    log_start_offset=self.log.start_offset(),
                )

    def _publish(self, group: Group) -> None:
        view, raw = self.view, group.raw
        high_watermark, log_start_offset = self.high_watermark, self.log.start_offset()
        leader_id, term, leader = raw.leader_id, raw.term, raw.role is raft.Role.LEADER
        self.publish(
            lambda: view.update(
                high_watermark=high_watermark,
                log_start_offset=log_start_offset,
                leader_id=leader_id,
                term=term,
                leader=leader,
            )
        )

    # ---------------------------------------------------------------------------------- leader duties

    def housekeeping(self, group: Group, now_ms: int) -> None:
        """Retention, segment age and preferred leadership; proposes on the leader only."""
        if not group.is_leader:
            return
        self._maybe_enforce_retention(group, now_ms)
        self._maybe_roll(group, now_ms)
        self._maybe_hand_back_leadership(group)

    def _maybe_enforce_retention(self, group: Group, now_ms: int) -> None:
        policy = self.retention
        drop_until = 0
        if policy.retention_ms >= 0:
            older = self.log.segments_older_than(policy.retention_ms, now_ms)
            if older:
                drop_until = max(drop_until, older[-1].last_index + 1)
        if policy.retention_bytes >= 0:
            over = self.log.segments_over_size(policy.retention_bytes)
            if over:
                drop_until = max(drop_until, over[-1].last_index + 1)
        # One proposal at a time: the next check sees the segments gone once it is applied.
        if drop_until and time.monotonic() - self._retention_proposed_at > 1.0:
            self._retention_proposed_at = time.monotonic()
            self.scheduler.propose(group, encode_drop_before(drop_until), _ignore, kind=raft.EntryKind.CONTROL)

    def _maybe_roll(self, group: Group, now_ms: int) -> None:
        active = self.log.segments()[-1]
        segment_ms = self.log.segment_limits[1]
        if active.entry_count and active.first_timestamp_ms > 0 and now_ms - active.first_timestamp_ms >= segment_ms:
            self.scheduler.propose(group, encode_roll(), _ignore, kind=raft.EntryKind.CONTROL)

    def _maybe_hand_back_leadership(self, group: Group) -> None:
        preferred = self.preferred_leader
        if not preferred or preferred == group.raw.id:
            return
        status = group.raw.status()
        progress = status.progress.get(preferred)
        if progress is None or progress.is_learner or not progress.recent_active:
            return
        if progress.match >= status.last_index and status.lead_transferee == 0:
            log.info("handing leadership to the preferred leader", group=self.group_id, to=preferred)
            group.raw.transfer_leader(preferred)
            self.scheduler.touch(group)


def _ignore(result: Any, error: BaseException | None) -> None:
    if error is not None:
        log.debug("housekeeping proposal failed", error=repr(error))
