"""A topic-partition replica: its Raft group's state machine, its leader duties, and the view readers use.

Applying a committed data entry moves the high watermark to the offset after its batch (the log assigned
the batch's offsets when it appended it) and answers the producer with the batch's base offset. Readers on
the event loop see a :class:`PartitionView` and read the synced log up to the high watermark, so they only
ever see committed records.

Idempotent producers (``multiraft.node.replicas.producers``): every replica updates the producers' state as it
applies data entries, and checkpoints it in a log attribute (and in the snapshot manifest when retention
compacts the log), so a restarted replica restores the checkpoint and replays the entries after it. The
leader checks each produced batch against that state and against what it appended but has not applied yet.

The leader also runs the partition's housekeeping, as replicated CONTROL entries so that every replica
acts at the same point of the log (``multiraft.node.replicas.control``): retention by age and size, and a segment roll
when the active segment is older than segment.ms (so retention fires on idle partitions too). DeleteRecords is
one too (TRIM): every replica moves its log start offset to the same offset, keeps it in a log attribute (and
in the snapshot manifest, for replicas that catch up from one) and drops the segments wholly below it; a segment
that straddles the offset stays, read from the new log start offset on, as in Kafka. On its own
schedule (``leader_balance_ms``) it hands leadership back to the preferred leader once that one is caught up.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from multiraft import raft, trace
from multiraft.errors import (
    InvalidArgumentError,
    MultiraftError,
    OffsetOutOfRangeError,
    ProducerError,
    UnavailableError,
)
from multiraft.logging import get_logger
from multiraft.node.replicas.control import ControlKind, decode_control, encode_drop_before, encode_roll, encode_trim
from multiraft.node.replicas.producers import ProducerStates, Verdict
from multiraft.node.replicas.raft_group import Completion, RaftGroup
from multiraft.node.replicas.raft_log import decode_manifest
from multiraft.node.threads import LoopOwned, SchedulerOwned, ThreadOwner, on_owner_thread
from multiraft.node.vocabulary.partitions import ProduceResult, RetentionPolicy
from storage import BatchHeader, SegmentedLog, SegmentInfo, read_header

__all__ = ["PartitionView", "PartitionMachine", "forget_producers_after"]

log = get_logger(__name__)


_PRODUCERS_ATTRIBUTE = "partition.producers"
_TRIMMED_ATTRIBUTE = "partition.trimmed_to"  # u64 text: the offset DeleteRecords moved the log start to
_REPLAY_CHUNK_BYTES = 8 << 20


class PartitionView(LoopOwned):
    """What the event loop knows of a partition replica; updated only on the loop thread."""

    def __init__(
        self, topic: str, partition: int, group_id: int, log_: SegmentedLog, owner: ThreadOwner | None = None
    ) -> None:
        self.owner = owner if owner is not None else ThreadOwner("event loop")  # the directory's, on a node
        self.topic = topic
        self.partition = partition
        self.group_id = group_id
        self.log = log_
        self.leader_id = 0
        self.leader_term = 0
        self.is_leader = False
        self.current = False  # leader that has applied an entry of its own term: its high watermark is final
        self.high_watermark = 0
        self.log_start_offset = 0
        self.replicas: tuple[int, ...] = ()
        self.removed = False
        self.catchup: Any = None  # multiraft.node.catchup.CatchupProgress while segments are copied here
        # Set by the store: a read that found a damaged entry hands (group id, index) to the repair (any thread).
        self.damage_hook: Callable[[int, int], None] | None = None
        # Set by the directory: told when this node starts or stops leading the partition, or its term changes.
        self.on_leadership: Callable[[PartitionView], None] | None = None
        # Readers waiting for the next change (wait_past): plain futures, woken in the loop round that
        # moves the high watermark (an Event under wait_for costs a task and two more rounds per wake-up).
        self._waiters: list[asyncio.Future[None]] = []

    def update(
        self, *, high_watermark: int, log_start_offset: int, leader_id: int, term: int, leader: bool, current: bool
    ) -> None:
        changed = leader != self.is_leader or (leader and term != self.leader_term)
        self.leader_id, self.leader_term, self.is_leader, self.current = leader_id, term, leader, current
        if changed:
            if self.on_leadership is not None:
                self.on_leadership(self)
            self._wake_waiters()  # a reader waiting on this replica learns at once that it no longer leads
        self.log_start_offset = log_start_offset
        if high_watermark != self.high_watermark:
            self.high_watermark = high_watermark
            self._wake_waiters()
            if trace.ON and leader:
                trace.upto("hw_visible", self.topic, self.partition, high_watermark)

    def report_damage(self, index: int | None) -> None:
        """A read of this replica found the entry at ``index`` damaged: have the store repair the replica."""
        hook = self.damage_hook
        if hook is not None and index is not None and not self.removed:
            hook(self.group_id, index)

    def mark_removed(self) -> None:
        self.removed = True
        self.is_leader = False
        self._wake_waiters()

    def _wake_waiters(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait_past(self, offset: int, timeout_s: float) -> None:
        """Return once the high watermark passes ``offset``, leadership changes, or ``timeout_s`` elapses."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        was_leader = self.is_leader
        while self.high_watermark <= offset and self.is_leader == was_leader and not self.removed:
            if loop.time() >= deadline:
                return
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)
            timer = loop.call_at(deadline, _release, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                if self._waiters and waiter in self._waiters:  # timed out or cancelled: not woken
                    self._waiters.remove(waiter)


def _release(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


@dataclass
class PartitionMachine(SchedulerOwned):
    """State machine of one partition replica (scheduler thread)."""

    topic: str
    partition: int
    group_id: int
    log: SegmentedLog
    owner: ThreadOwner
    publish: Callable[[Callable[[], None]], None]  # runs a callable on the event loop
    view: PartitionView
    retention: RetentionPolicy = field(default_factory=lambda: RetentionPolicy(-1, -1))
    high_watermark: int = 0
    producers: ProducerStates = field(default_factory=ProducerStates)
    trimmed_to: int = 0  # DeleteRecords: records below this offset are deleted on every replica
    _retention_proposed_at: float = 0.0
    # While the group is quiescent: ((policy, applied index, leading) it was last checked under, when a
    # time-based action (age retention, segment roll) can next fire); until then a check finds nothing to do.
    _quiet_until: tuple[tuple[RetentionPolicy, int, bool], int] | None = None
    _applied_index: int = 0
    _last_entry_ms: int = 0
    _producers_saved_at: int = 0  # the applied index the persisted producer checkpoint covers
    _leading: bool = False
    _current: bool = False  # leading, and an entry of this term is applied
    _duplicate_waiters: dict[int, list[Completion]] = field(default_factory=dict)  # index -> retries

    def start(self, group: RaftGroup) -> None:
        """Publish the state recovered from storage (the high watermark at the applied index) and restore the
        producers' state: the checkpoint, then the data entries applied after it."""
        applied = group.storage.applied_index()
        self._applied_index = applied
        saved_trim = self.log.attribute(_TRIMMED_ATTRIBUTE)
        self.trimmed_to = int(saved_trim) if saved_trim is not None else 0
        try:
            self.high_watermark = self.log.offset_after(applied)
        except Exception:
            self.high_watermark = self.log.start_offset()
        self._restore_producers(group, applied)
        self._publish(group)

    # ------------------------------------------------------------------------------ idempotent producers

    def produce(self, group: RaftGroup, batch: bytes, header: BatchHeader, completion: Completion) -> None:
        """Propose a produced batch on the leader, unless it repeats one already written or in flight."""
        producer_id = header.producer_id
        if producer_id < 0:
            index = group.propose(batch, completion)
            if trace.ON and index is not None:
                trace.event("proposed", trace.batch_key(batch), trace.entry_key(self.group_id, index))
            return
        try:
            verdict, original = self.producers.check(
                producer_id, header.producer_epoch, header.base_sequence, header.record_count
            )
        except ProducerError as exc:
            completion(None, exc)
            return
        if verdict is Verdict.DUPLICATE:
            assert original is not None
            if original.base_offset >= 0:
                completion(ProduceResult(original.base_offset, original.append_time_ms, duplicate=True), None)
            else:  # the first copy is appended but not committed yet: answer when it is
                self._duplicate_waiters.setdefault(original.entry_index, []).append(completion)
            return
        index = group.propose(batch, completion)
        if index is not None:
            self.producers.track(producer_id, header.base_sequence, header.record_count, index)
            if trace.ON:
                trace.event("proposed", trace.batch_key(batch), trace.entry_key(self.group_id, index))

    def _apply_producer_batch(self, entry: raft.Entry, header: BatchHeader) -> ProduceResult:
        base_offset = self.log.offset_after(entry.index) - header.record_count
        self.producers.apply(
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            header.record_count,
            base_offset,
            entry.index,
            entry.timestamp_ms,
        )
        return ProduceResult(base_offset, entry.timestamp_ms)

    def _restore_producers(self, group: RaftGroup, applied: int) -> None:
        covered = 0
        saved = self.log.attribute(_PRODUCERS_ATTRIBUTE)
        if saved is not None and int(saved.partition(b"\n")[0]) > applied:
            saved = None  # the log lost entries the checkpoint covers (a repair): rebuild from an earlier point
        if saved is not None:
            index, _, state = saved.partition(b"\n")
            self.producers, covered = ProducerStates.decode(state), int(index)
        else:
            snapshot = group.storage.snapshot()
            manifest = decode_manifest(snapshot.data)
            if manifest.producers:
                self.producers, covered = ProducerStates.decode(manifest.producers), snapshot.meta.index
        lo = max(covered + 1, group.storage.first_index())
        replayed = 0
        while lo <= applied:
            entries = group.storage.entries(lo, applied + 1, _REPLAY_CHUNK_BYTES)
            for entry in entries:
                if entry.kind == raft.EntryKind.DATA:
                    header = read_header(entry.payload)
                    if header.producer_id >= 0:
                        self._apply_producer_batch(entry, header)
                        replayed += 1
            lo = entries[-1].index + 1
        self._producers_saved_at = covered if not replayed else 0
        if replayed:
            log.debug("replayed producer batches", group=self.group_id, batches=replayed, since=covered)

    def save_producers(self) -> bytes:
        """Checkpoint the producers' state at the applied index (durable with the next sync)."""
        self.producers.expire(self._last_entry_ms)
        state = self.producers.encode()
        self.log.set_attribute(_PRODUCERS_ATTRIBUTE, b"%d\n%s" % (self._applied_index, state))
        self._producers_saved_at = self._applied_index
        return state

    def _settle_duplicates(self, index: int, result: ProduceResult) -> None:
        waiters = self._duplicate_waiters.pop(index, ())
        duplicate = ProduceResult(result.base_offset, result.log_append_time_ms, duplicate=True)
        for completion in waiters:
            completion(duplicate, None)

    def _fail_duplicates(self, error: MultiraftError) -> None:
        waiters, self._duplicate_waiters = self._duplicate_waiters, {}
        for completions in waiters.values():
            for completion in completions:
                completion(None, error)

    def _track_unapplied_suffix(self, group: RaftGroup) -> None:
        """A new leader: batches in its log that are not applied yet count as in flight, so that a retry of
        one (sent to the old leader, which appended it here) waits for it instead of writing it again."""
        storage = group.storage
        lo, last = self._applied_index + 1, storage.last_index()
        while lo <= last:
            entries = storage.entries(lo, last + 1, _REPLAY_CHUNK_BYTES)
            for entry in entries:
                if entry.kind == raft.EntryKind.DATA:
                    header = read_header(entry.payload)
                    if header.producer_id >= 0:
                        self.producers.track(header.producer_id, header.base_sequence, header.record_count, entry.index)
            lo = entries[-1].index + 1

    # ---------------------------------------------------------------------------------- StateMachine

    def apply(self, group: RaftGroup, entries: Sequence[raft.Entry]) -> dict[int, Any]:
        results: dict[int, Any] = {}
        pending, waiters = group.pending, self._duplicate_waiters
        data, control = raft.EntryKind.DATA, raft.EntryKind.CONTROL
        if group.is_leader and entries[-1].term == group.raw.term:
            self._current = True
        for entry in entries:
            self._applied_index = entry.index
            if entry.kind == data:
                header = read_header(entry.payload)
                if trace.ON and self._leading:
                    self._trace_applied(entry, header)
                result: ProduceResult | None = None
                if header.producer_id >= 0:
                    result = self._apply_producer_batch(entry, header)
                elif entry.index in pending:
                    result = ProduceResult(self.log.offset_after(entry.index) - header.record_count, entry.timestamp_ms)
                if result is not None:
                    results[entry.index] = result
                    if entry.index in waiters:
                        self._settle_duplicates(entry.index, result)
            elif entry.kind == control:
                trimmed = self._apply_control(group, entry)
                if trimmed is not None and entry.index in pending:
                    results[entry.index] = trimmed
        last = entries[-1]
        self._last_entry_ms = max(self._last_entry_ms, last.timestamp_ms)
        if last.index > self.log.compaction_point()[0]:
            self.high_watermark = self.log.offset_after(last.index)
        self._publish(group)
        return results

    def _trace_applied(self, entry: raft.Entry, header: BatchHeader) -> None:
        base = self.log.offset_after(entry.index) - header.record_count
        position = trace.position_key(self.topic, self.partition, base, header.record_count)
        trace.event("applied", trace.entry_key(self.group_id, entry.index), position)

    def on_role_change(self, group: RaftGroup, soft_state: raft.SoftState) -> None:
        leading = soft_state.role is raft.Role.LEADER
        self._current = False
        if leading and not self._leading:
            self._track_unapplied_suffix(group)
        elif not leading and self._leading:
            self.producers.forget_in_flight()
            self._fail_duplicates(group.not_leader(soft_state.leader_id))
        self._leading = leading
        self._publish(group)

    def on_snapshot(self, group: RaftGroup, snapshot: raft.Snapshot) -> None:
        manifest = decode_manifest(snapshot.data)
        if manifest.log_start > self.trimmed_to:
            self._set_trimmed(manifest.log_start)
        # A catch-up snapshot keeps the copied segments: the high watermark is the offset after its index.
        self.high_watermark = max(self.log.start_offset(), manifest.next_offset)
        self._applied_index = snapshot.meta.index
        self.producers = ProducerStates.decode(manifest.producers) if manifest.producers else ProducerStates()
        self.save_producers()
        self._publish(group)

    def _apply_control(self, group: RaftGroup, entry: raft.Entry) -> int | None:
        """Apply a control entry; for a TRIM, the log start offset after it (the DeleteRecords answer)."""
        try:
            kind, argument = decode_control(entry.payload)
        except ValueError as exc:
            log.warning("skipping a control entry this version cannot read", group=self.group_id, error=str(exc))
            return None
        if kind is ControlKind.DROP_BEFORE:
            self._drop_before(group, argument, "retention dropped segments")
        elif kind is ControlKind.TRIM:
            # Never past the records before this entry: the leader checked against its high watermark, which
            # is at most this, but a replica must not trust a proposal to move past what it holds.
            trimmed = min(argument, self.log.offset_after(entry.index))
            if trimmed > self.trimmed_to:
                self._set_trimmed(trimmed)
                # The segments wholly below the new start go as retention's do; one straddling it stays.
                drop_until = 0
                for segment in self.log.segments()[:-1]:
                    if segment.next_offset > trimmed:
                        break
                    drop_until = segment.last_index + 1
                if drop_until:
                    self._drop_before(group, drop_until, "deleted records dropped segments")
                log.info("records deleted", topic=self.topic, partition=self.partition, log_start_offset=trimmed)
            return self.log_start_offset(self.log.offset_after(entry.index))
        return None

    def _drop_before(self, group: RaftGroup, index: int, message: str) -> None:
        # The checkpoint must cover the dropped entries: they cannot be replayed once gone.
        producers = self.save_producers()
        dropped = self.log.drop_before(index)
        if dropped:
            group.storage.snapshot_at_compaction_point(producers=producers, log_start=self.trimmed_to)
            log.info(
                message,
                topic=self.topic,
                partition=self.partition,
                segments=len(dropped),
                log_start_offset=self.log_start_offset(),
            )

    def _set_trimmed(self, offset: int) -> None:
        self.trimmed_to = offset
        self.log.set_attribute(_TRIMMED_ATTRIBUTE, b"%d" % offset)

    def log_start_offset(self, high_watermark: int | None = None) -> int:
        """The first offset readers may ask for: the log's first record, or where DeleteRecords moved the
        start to (never past the high watermark: a replica catching up from a snapshot may know the trim
        point before it holds the records up to it)."""
        hw = self.high_watermark if high_watermark is None else high_watermark
        return max(self.log.start_offset(), min(self.trimmed_to, hw))

    @on_owner_thread
    def delete_records(self, group: RaftGroup, offset: int, completion: Completion) -> None:
        """On the leader: move the log start offset to ``offset`` on every replica (-1: the high watermark),
        through a TRIM control entry; ``completion`` gets the log start offset after it."""
        name = f"{self.topic}/{self.partition}"
        if offset < -1:
            completion(
                None,
                InvalidArgumentError(f"offset must be >= 0 (or -1: the high watermark), got {offset}", field="offset"),
            )
            return
        if not self._current:
            completion(None, UnavailableError(f"{name}: the new leader is still catching up"))
            return
        high_watermark = self.high_watermark
        target = high_watermark if offset == -1 else offset
        if target > high_watermark:
            completion(
                None,
                OffsetOutOfRangeError(
                    f"cannot delete records of {name} before offset {target}: it is beyond the high watermark "
                    f"{high_watermark}",
                    log_start_offset=self.log_start_offset(),
                    high_watermark=high_watermark,
                ),
            )
            return
        if target <= self.log_start_offset():
            completion(self.log_start_offset(), None)  # already deleted (Kafka answers the low watermark)
            return
        group.propose(encode_trim(target), completion, kind=raft.EntryKind.CONTROL)

    def _publish(self, group: RaftGroup) -> None:
        view, raw = self.view, group.raw
        high_watermark, log_start_offset = self.high_watermark, self.log_start_offset()
        leader_id, term, leader = raw.leader_id, raw.term, raw.role is raft.Role.LEADER
        current = leader and self._current
        self.publish(
            lambda: view.update(
                high_watermark=high_watermark,
                log_start_offset=log_start_offset,
                leader_id=leader_id,
                term=term,
                leader=leader,
                current=current,
            )
        )

    # ---------------------------------------------------------------------------------- leader duties

    def housekeeping(self, group: RaftGroup, now_ms: int) -> None:
        """Checkpoint the producers (every replica); retention and segment age (the leader, by proposing)."""
        quiet = group.raw.quiescent
        leading = group.is_leader
        key = (self.retention, self._applied_index, leading)
        until = self._quiet_until
        if quiet and until is not None and until[0] == key and now_ms < until[1]:
            return  # idle since the last check, and nothing comes due before until[1]
        if self._applied_index != self._producers_saved_at and len(self.producers):
            self.save_producers()
        due = _NEVER
        if leading:
            dropping = self._maybe_enforce_retention(group, now_ms)
            self._maybe_roll(group, now_ms)
            due = now_ms if dropping else self._next_due_ms(now_ms)
        self._quiet_until = (key, due) if quiet else None

    def _next_due_ms(self, now_ms: int) -> int:
        """The earliest time at which retention by age or a segment roll could act on this log as it is now
        (a later append, config change or roll changes the applied index or the policy, and so the answer)."""
        segments = self.log.segments()
        due = _NEVER
        if self.retention.retention_ms >= 0:
            cutoff = now_ms - self.retention.retention_ms
            # The expired prefix grows when its first sealed segment that has not expired does.
            waiting = next((seg for seg in segments[:-1] if seg.max_timestamp_ms > cutoff), None)
            if waiting is not None:
                due = waiting.max_timestamp_ms + self.retention.retention_ms
        active = segments[-1]
        if active.next_offset > active.base_offset and active.first_timestamp_ms > 0:
            due = min(due, active.first_timestamp_ms + self.log.segment_limits[1])
        return due

    def _maybe_enforce_retention(self, group: RaftGroup, now_ms: int) -> int:
        """Propose dropping the expired prefix; the index it drops before (0: nothing expired to drop)."""
        policy = self.retention
        drop_until = 0
        if policy.retention_ms >= 0:
            drop_until = _drop_point(self.log.segments_older_than(policy.retention_ms, now_ms))
        if policy.retention_bytes >= 0:
            drop_until = max(drop_until, _drop_point(self.log.segments_over_size(policy.retention_bytes)))
        # One proposal at a time: the next check sees the segments gone once it is applied.
        if drop_until and time.monotonic() - self._retention_proposed_at > 1.0:
            self._retention_proposed_at = time.monotonic()
            group.propose(encode_drop_before(drop_until), _ignore, kind=raft.EntryKind.CONTROL)
        return drop_until

    def _maybe_roll(self, group: RaftGroup, now_ms: int) -> None:
        active = self.log.segments()[-1]
        segment_ms = self.log.segment_limits[1]
        # Only a segment holding records needs to age out: one holding only control entries (the ROLL that
        # opened it) would be rolled again and again, and an idle partition would never go quiet.
        has_records = active.next_offset > active.base_offset
        if has_records and active.first_timestamp_ms > 0 and now_ms - active.first_timestamp_ms >= segment_ms:
            group.propose(encode_roll(), _ignore, kind=raft.EntryKind.CONTROL)

    @on_owner_thread
    def hand_back_leadership(self, group: RaftGroup, preferred: int) -> None:
        """On the leader: transfer leadership to ``preferred`` (a live, ACTIVE voter, as the controller's state
        and the member-list say) once Raft sees it active and holding every entry."""
        if not group.is_leader or preferred == group.raw.id:
            return
        status = group.raw.status()
        progress = status.progress.get(preferred)
        if progress is None or preferred not in status.conf_state.voters:
            return  # a learner, or an outgoing voter of a joint configuration: Raft would refuse the transfer
        # A quiescent leader heard every follower hold its whole log when it quiesced, and has sent nothing
        # since, so recent_active (reset by CheckQuorum, never refreshed while quiet) says nothing then.
        if not progress.recent_active and not group.raw.quiescent:
            return
        if progress.match < status.last_index or status.lead_transferee != 0:
            return
        log.info("handing leadership to the preferred leader", group=self.group_id, to=preferred)
        group.raw.transfer_leader(preferred)
        group.touch()


def forget_producers_after(log_: SegmentedLog, index: int) -> None:
    """Drop a producers checkpoint that covers entries after ``index`` (a repair cut them off): the replica then
    rebuilds the state from an earlier point and the entries that come back."""
    saved = log_.attribute(_PRODUCERS_ATTRIBUTE)
    if saved is not None and int(saved.partition(b"\n")[0]) > index:
        log_.set_attribute(_PRODUCERS_ATTRIBUTE, None)


_NEVER = 2**63 - 1  # ms: no time-based action comes due


def _drop_point(expired: Sequence[SegmentInfo]) -> int:
    """Where retention drops a prefix of expired segments (0: nothing to drop): after the last one holding
    records. Segments holding only control entries go along with older records, never on their own: each drop
    is a control entry that may open a segment, which would expire and be dropped in turn, forever."""
    for segment in reversed(expired):
        if segment.next_offset > segment.base_offset:
            return segment.last_index + 1
    return 0


def _ignore(result: Any, error: BaseException | None) -> None:
    if error is not None:
        log.debug("housekeeping proposal failed", error=repr(error))
