"""The scheduler: one thread that owns the log store and every Raft group of the node, and drives them in
rounds.

Each round:

1. take what arrived (messages from peers, proposals, commands) and step it into the groups;
2. tick the groups that are awake (quiescent groups cost nothing), every ``tick_ms``;
3. collect a Ready from every group that has one;
4. send each Ready's ``messages`` now: a leader's appends travel while it writes its own copy;
5. write every group's snapshot, entries, hard state and applied index into ONE LMDB transaction;
6. sync once: one commit, fsynced, for every partition in the round (group commit); a round that only
   moves commit and applied indexes writes and syncs nothing: they ride with the next sync
   (:mod:`multiraft.node.scheduler.deferred_indexes`);
7. send each Ready's ``persisted_messages`` (acks, votes), which may only follow the fsync;
8. apply committed entries (offsets, high watermarks, answers to producers) and advance.

The groups it drives are :class:`RaftGroup` objects (:mod:`multiraft.node.replicas.raft_group`), each with its
replica as state machine. A replica proposes on its own group, which joins the next round through the
:class:`Wakeups` it shares with this scheduler; the round applies what commits and runs the proposals'
completions. The replicas never call back up into the scheduler.

A round that does not fit (the disk, the LMDB map or the segment slots are full) is rolled back and each of
its Readies is written on its own: those that fit go on, the others stay outstanding and are written again
every ``_FULL_RETRY_S``, as a slow disk would delay them (Raft retransmits meanwhile, and the store reports
the condition so that the node refuses new writes). Only other storage failures (I/O errors) stop the node.

Why a thread of its own: an LMDB write transaction belongs to the thread that began it, and the Raft core
reads its storage while it steps messages; so the store and the cores live together on this thread. The
asyncio loop (gRPC, peer connections) runs on another and keeps receiving while this one waits on fsync,
which releases the GIL. The two meet only in :mod:`multiraft.node.threads`' hand-offs, built on
:meth:`Scheduler.submit` (loop -> scheduler) and ``loop.call_soon_threadsafe`` (scheduler -> loop), and in the
peer transport's ``post``, which writes a round's messages on idle peer connections from this thread itself
(:mod:`multiraft.node.peer.link`).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from multiraft import raft, trace
from multiraft.errors import StorageFailureError, UnavailableError
from multiraft.logging import get_logger
from multiraft.node.replicas.raft_group import Completion, RaftGroup, StateMachine, Wakeups
from multiraft.node.scheduler.deferred_indexes import DeferredIndexes, lazy
from multiraft.node.scheduler.reads import LinearizableReads
from multiraft.node.scheduler.term_guard import TermGuard
from multiraft.node.scheduler.tracing import trace_persisted
from multiraft.node.threads import SchedulerOwned, ThreadOwner
from storage import CorruptionError, LogStore, StorageConfig, StorageError, StorageFullError

__all__ = [
    "Scheduler",
    "RaftGroup",
    "StateMachine",
    "Completion",
    "Outbox",
    "DamageHandler",
    "Wakeups",
    "damaged_index",
]

log = get_logger(__name__)

_FULL_RETRY_S = 1.0  # how often Readies that did not fit are written again

DamageHandler = Callable[[RaftGroup, int], None]
"""(group, damaged index): repair a replica whose stored entry failed its check; the scheduler has already
taken the group out (scheduler thread)."""


def damaged_index(exc: BaseException) -> int | None:
    """The index of the damaged entry behind ``exc`` (a storage CorruptionError, perhaps wrapped), or None."""
    seen: BaseException | None = exc
    for _ in range(8):  # causes chain a few levels at most
        if seen is None:
            return None
        if isinstance(seen, CorruptionError):
            return seen.index
        seen = seen.__cause__
    return None


class Outbox(Protocol):
    """Where the scheduler hands messages for the network (implemented on the loop side)."""

    def send(self, batches: dict[int, list[tuple[int, raft.Message]]]) -> None: ...


class Scheduler(SchedulerOwned):
    """Owns the store and the groups; call :meth:`submit` from any thread to hand it work."""

    def __init__(
        self,
        *,
        store_opener: Callable[[], LogStore],
        tick_ms: int,
        outbox: Outbox,
        max_payload_bytes: int = StorageConfig().max_payload_bytes,
        terms_dir: str | None = None,
    ) -> None:
        self._store_opener = store_opener
        self._terms_dir = terms_dir  # where the TermGuard's file lives (None: no guard, in unit tests)
        self._tick_s = tick_ms / 1000
        self._outbox = outbox
        self._inbox: collections.deque[Callable[[], None]] = collections.deque()
        self._wakeup = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="multiraft-scheduler", daemon=True)
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self.store: LogStore | None = None
        self.term_guard: TermGuard | None = None  # the terms each group reached, kept outside the store
        self.owner = ThreadOwner("scheduler")  # what lives here says so in its type (multiraft.node.threads)
        self.groups: dict[int, RaftGroup] = {}
        # Shared with every group it drives: a group that proposes joins them itself (RaftGroup.propose).
        self.wakeups = Wakeups(self.owner, max_payload_bytes)  # max: what the store's append accepts
        self._awake = self.wakeups.awake  # groups to tick (not quiescent)
        self._touched = self.wakeups.touched  # groups that may have a Ready
        self._periodic: list[tuple[float, float, Callable[[], None]]] = []  # (interval, next due, action)
        self.rounds = 0
        self.syncs = 0
        self._parked: list[tuple[RaftGroup, raft.Ready]] = []  # Readies that did not fit, outstanding in their group
        self._deferred = DeferredIndexes(self.owner)  # commit and applied indexes that wait for the next sync
        self._retry_at = 0.0
        self.storage_full = ""  # why the last write did not fit, while Readies wait for room ("" otherwise)
        # Set by the store: a group whose entries fail their check is handed over for repair, not fatal.
        self.on_damage: DamageHandler | None = None
        self.reads = LinearizableReads(self.owner)
        self.every(0.25, self.reads.expire)

    # ------------------------------------------------------------------------------------ thread plumbing

    def start(self, on_started: Callable[[], None]) -> None:
        """Start the thread; ``on_started`` runs on it once the store is open (to load groups)."""
        self._on_started = on_started
        self._thread.start()
        self._started.wait()
        if self._failure is not None:
            raise self._failure

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stopping = True
        self._wakeup.set()
        self._thread.join(timeout_s)

    def submit(self, work: Callable[[], None]) -> None:
        """Run ``work`` on the scheduler thread before its next round (thread-safe)."""
        self._inbox.append(work)
        self._wakeup.set()

    def every(self, interval_s: float, action: Callable[[], None]) -> None:
        """Run ``action`` on the scheduler thread about every ``interval_s``."""
        self._periodic.append((interval_s, time.monotonic() + interval_s, action))

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        self.owner.bind()
        try:
            if self._terms_dir is not None:
                self.term_guard = TermGuard.open(self._terms_dir, self.owner)
            self.store = self._store_opener()
            self._on_started()
            if self.store.writes_pending:  # what loading wrote stands alone too (see _discard_if_full)
                self.store.sync()
        except BaseException as exc:
            self._failure = exc
            self._started.set()
            return
        self._started.set()
        next_tick = time.monotonic() + self._tick_s
        try:
            while not self._stopping:
                timeout = max(0.0, next_tick - time.monotonic())
                if self._parked:  # Readies waiting for room are retried on their own schedule
                    timeout = min(timeout, max(0.0, self._retry_at - time.monotonic()))
                if not self._inbox and not self._touched:
                    self._wakeup.wait(timeout)
                self._wakeup.clear()
                self._drain_inbox()
                now = time.monotonic()
                if now >= next_tick:
                    self._tick()
                    self._flush_deferred()
                    next_tick = max(next_tick + self._tick_s, now)  # skip missed ticks, don't burst
                    self._run_periodic(now)
                self._round()
        except BaseException as exc:  # the node cannot go on without its scheduler; say why loudly
            log.exception("scheduler stopped on an error", error=repr(exc))
            self._failure = exc
        finally:
            for group in self.groups.values():
                group.fail_pending(UnavailableError("the node is shutting down"))
            if self.store is not None:
                try:
                    self.store.close()
                except StorageError as exc:
                    log.error("closing the log store failed", error=str(exc))

    def _drain_inbox(self) -> None:
        inbox = self._inbox
        while inbox:
            work = inbox.popleft()
            try:
                work()
            except (StorageError, raft.RaftStorageError, StorageFailureError) as exc:
                if not self._discard_if_full(exc, work):
                    raise  # a failed write leaves the store's transaction unusable: the node cannot go on
            except raft.RaftError as exc:
                log.warning("raft refused work", work=repr(work), error=repr(exc))
            except Exception as exc:  # one request's failure (input, or a bug it hit) is only its own
                log.exception("work failed; the scheduler goes on", work=repr(work), error=repr(exc))

    def _run_periodic(self, now: float) -> None:
        for position, (interval, due, action) in enumerate(self._periodic):
            if now >= due:
                self._periodic[position] = (interval, now + interval, action)
                try:
                    action()
                except (StorageError, raft.RaftStorageError) as exc:
                    if not self._discard_if_full(exc, action):
                        raise

    def _discard_if_full(self, exc: BaseException, work: object) -> bool:
        """Work between rounds that did not fit in storage: roll back its writes (each round syncs its own,
        so the transaction holds nothing else) and go on; it runs again when it next comes. False for any
        other storage failure."""
        if not _is_full(exc):
            return False
        self._rollback()
        for group in self.groups.values():
            group.storage.reload()
        log.warning("work did not fit in storage; its writes are discarded", work=repr(work), error=str(exc))
        return True

    # ----------------------------------------------------------------------------------------------- groups

    def add_group(self, group: RaftGroup) -> None:
        group.join(self.wakeups)
        self.groups[group.group_id] = group
        self.touch(group)

    def remove_group(self, group_id: int) -> RaftGroup | None:
        group = self.groups.pop(group_id, None)
        self._awake.discard(group_id)
        self._touched.discard(group_id)
        if group is not None:
            group.fail_pending(UnavailableError("the partition was removed from this node"))
        return group

    def touch(self, group: RaftGroup) -> None:
        """The group got input: check it for a Ready this round and tick it while it is awake."""
        self._touched.add(group.group_id)
        self._awake.add(group.group_id)

    def deliver(self, messages: Sequence[tuple[int, raft.Message]]) -> None:
        """Step messages from a peer into their groups (scheduler thread)."""
        groups = self.groups
        for group_id, message in messages:
            group = groups.get(group_id)
            if group is None:
                continue  # a group this node has not created yet, or just deleted: Raft will retry
            try:
                group.raw.step(message)
            except raft.RaftError as exc:
                if not self.report_damage(group, exc):
                    log.debug("message refused", group=group_id, error=repr(exc))
                continue
            self.touch(group)

    def read(self, group: RaftGroup, serve: Callable[[], Any], completion: Completion) -> None:
        """Serve ``serve()`` once a quorum confirmed this leader and the apply reached the read's index."""
        self.reads.start(group, serve, completion)
        self.touch(group)  # the ReadIndex broadcast and the ReadState come with the group's next Ready

    def report_damage(self, group: RaftGroup, exc: BaseException) -> bool:
        """Hand a group whose stored entry failed its check to the repair (before the next round); False if
        ``exc`` is no such damage or nothing repairs it."""
        index = damaged_index(exc)
        handler = self.on_damage
        if index is None or handler is None or self.groups.get(group.group_id) is not group:
            return False
        log.error("a stored entry failed its check; repairing the replica", group=group.group_id, index=index)
        # Out of the rounds at once (its Ready may be half handled); the repair opens it again.
        del self.groups[group.group_id]
        self._awake.discard(group.group_id)
        group.fail_pending(UnavailableError("the replica is repairing a damaged log"))
        self.submit(lambda: handler(group, index))
        return True

    # ------------------------------------------------------------------------------------------------ round

    def _tick(self) -> None:
        groups = self.groups
        asleep = []
        for group_id in self._awake:
            group = groups.get(group_id)
            if group is None or group.raw.quiescent:
                asleep.append(group_id)
                continue
            group.raw.tick()
            self._touched.add(group_id)
        self._awake.difference_update(asleep)

    def _round(self) -> None:
        groups = self.groups
        readies: list[tuple[RaftGroup, raft.Ready]] = []
        for group_id in self._touched:
            group = groups.get(group_id)
            try:
                if group is not None and group.raw.has_ready():
                    readies.append((group, group.raw.ready()))
            except raft.RaftStorageError as exc:  # a stored entry failed its check: repair, or stop as before
                if group is None or not self.report_damage(group, exc):
                    raise
        self._touched.clear()
        retried: list[tuple[RaftGroup, raft.Ready]] = []
        if self._parked and time.monotonic() >= self._retry_at:
            retried = [(group, ready) for group, ready in self._parked if groups.get(group.group_id) is group]
            self._parked = []
        if not readies and not retried:
            return
        self.rounds += 1
        must_sync = any(ready.must_sync for _, ready in readies)
        if must_sync:
            self._send(readies, persisted=False)
        assert self.store is not None
        if self.store.writes_pending:
            # What work between rounds wrote is synced on its own, so that a round that does not fit can be
            # rolled back alone (and that work's writes, if they do not fit, are discarded alone).
            try:
                self._sync()
            except StorageError as exc:
                if not self._discard_if_full(exc, "writes of work between rounds"):
                    raise
        written = retried + readies
        try:
            self._persist(written)
        except (StorageError, raft.RaftStorageError) as exc:  # the Raft adapter reports storage failures as its own
            if not _is_full(exc):
                self._storage_failed(written, exc)
                return
            unsent = set() if must_sync else {id(ready) for _, ready in readies}
            written = self._persist_what_fits(written, exc, unsent)
        if trace.ON:
            trace_persisted(written)
        if not self._parked and self.storage_full:
            log.info("storage has room again; the writes that waited are durable")
            self.storage_full = ""
        # Without a sync nothing waits between the two kinds of messages: one batch, so one write per peer.
        again = {id(ready) for _, ready in retried}
        self._send([pair for pair in written if id(pair[1]) not in again], persisted=True, unpersisted=not must_sync)
        self._send([pair for pair in written if id(pair[1]) in again], persisted=True)
        for group, ready in written:
            if self.groups.get(group.group_id) is not group:
                continue  # removed by an entry applied earlier in this round (its topic deleted): its log is closed
            try:
                self._apply(group, ready)
            except (StorageError, raft.RaftStorageError) as exc:
                if not self.report_damage(group, exc):
                    raise
                continue  # the group is being rebuilt from its repaired log
            group.raw.advance(ready)
            if ready.read_states or self.reads.waiting(group.group_id):
                self.reads.after_apply(group, ready.read_states)
            self.touch(group)
        if self.store.writes_pending:
            # What applying wrote (retention, snapshots, new replicas) is made durable now, on its own, so
            # that work between rounds starts from an empty transaction and can be rolled back alone.
            self._sync()

    def _persist_what_fits(
        self, readies: list[tuple[RaftGroup, raft.Ready]], exc: BaseException, unsent: set[int]
    ) -> list[tuple[RaftGroup, raft.Ready]]:
        """After a round that did not fit: roll it back, then write each Ready alone (synced); park those that
        still do not fit, outstanding, for a later round."""
        self._undo(readies)
        if len(readies) == 1:
            self._park(readies, exc, unsent)
            return []
        written = []
        for pair in readies:
            try:
                self._persist([pair], force_sync=True)
            except (StorageError, raft.RaftStorageError) as again:
                if not _is_full(again):
                    self._storage_failed([pair], again)
                self._undo([pair])
                self._park([pair], again, unsent)
            else:
                written.append(pair)
        return written

    def _undo(self, readies: list[tuple[RaftGroup, raft.Ready]]) -> None:
        self._rollback()
        for group, _ in readies:
            group.storage.reload()

    def _park(self, readies: list[tuple[RaftGroup, raft.Ready]], exc: BaseException, unsent: set[int]) -> None:
        # Messages not sent before the write may go before it is durable (only persisted_messages must wait).
        self._send([pair for pair in readies if id(pair[1]) in unsent], persisted=False)
        if not self.storage_full:
            log.warning(
                "a write did not fit in storage; it waits and is retried",
                groups=[group.group_id for group, _ in readies],
                error=str(exc),
                retry_s=_FULL_RETRY_S,
            )
        self.storage_full = f"storage: a write did not fit ({exc}); retried every {_FULL_RETRY_S:g} s"
        self._parked.extend(readies)
        self._retry_at = time.monotonic() + _FULL_RETRY_S

    def _send(self, readies: list[tuple[RaftGroup, raft.Ready]], *, persisted: bool, unpersisted: bool = False) -> None:
        """Hand each Ready's ``messages`` (``persisted=False``) or ``persisted_messages`` to the outbox, or
        both in that order (``unpersisted=True`` too), as one batch per peer."""
        batches: dict[int, list[tuple[int, raft.Message]]] = {}
        for group, ready in readies:
            if unpersisted and persisted:
                messages: Sequence[raft.Message] = [*ready.messages, *ready.persisted_messages]
            else:
                messages = ready.persisted_messages if persisted else ready.messages
            for message in messages:
                batch = batches.get(message.to)
                if batch is None:
                    batches[message.to] = batch = []
                batch.append((group.group_id, message))
        if batches:
            self._outbox.send(batches)

    def _persist(self, readies: list[tuple[RaftGroup, raft.Ready]], *, force_sync: bool = False) -> None:
        must_sync = force_sync or any(ready.must_sync for _, ready in readies)
        if not must_sync and all(lazy(ready) for _, ready in readies):
            for group, ready in readies:  # only commit and applied indexes: they wait for the next sync
                self._deferred.defer(group, ready)
            return
        self._deferred.write(self.groups)  # first: the Readies' own writes are newer
        if self.term_guard is not None:  # first, so that a recorded term is never below a stored one
            self.term_guard.record(
                {group.group_id: ready.hard_state.term for group, ready in readies if ready.hard_state is not None}
            )
        for group, ready in readies:
            storage = group.storage
            if ready.snapshot is not None:
                storage.apply_snapshot(ready.snapshot)
            if ready.entries:
                storage.append(ready.entries)
            if ready.hard_state is not None:
                storage.set_hard_state(ready.hard_state)
            if ready.committed_entries:
                storage.set_applied(ready.committed_entries[-1].index, ready.conf_state)
        if must_sync:
            self._sync()

    def _sync(self) -> None:
        """One LMDB commit, fsynced, with the deferred commit and applied indexes in it."""
        assert self.store is not None
        self._deferred.write(self.groups)
        self.store.sync()
        self._deferred.synced()
        self.syncs += 1

    def _rollback(self) -> None:
        assert self.store is not None
        self.store.rollback()
        self._deferred.rolled_back()

    def _flush_deferred(self) -> None:
        """Deferred indexes, and what was written after a round's sync (a replica dropped, a topic's log
        deleted), wait at most a tick when no other write comes: an idle node must not keep a dropped
        replica's log in its store until the next Raft round, nor bring it back after a crash."""
        assert self.store is not None
        if (self._deferred or self.store.writes_pending) and not self._parked:
            try:
                self._sync()
            except (StorageError, raft.RaftStorageError) as exc:
                if not self._discard_if_full(exc, "deferred indexes and writes after a round"):
                    raise

    def _storage_failed(
        self, readies: list[tuple[RaftGroup, raft.Ready]], exc: StorageError | raft.RaftStorageError
    ) -> None:
        # Nothing of the round is durable: drop it, answer the producers, and let Raft retry from its state.
        log.error("storage failed; the round is discarded", error=str(exc))
        self._rollback()
        error = StorageFailureError(f"storage failed: {exc}")
        for group, ready in readies:
            group.fail_pending(error)
            group.raw.advance(ready)  # the core must not wait forever on this Ready
        raise exc

    def _apply(self, group: RaftGroup, ready: raft.Ready) -> None:
        if ready.soft_state is not None:
            previous = group.role
            group.leader_id, group.role = ready.soft_state.leader_id, ready.soft_state.role
            if previous is raft.Role.LEADER and group.role is not raft.Role.LEADER:
                group.fail_pending(group.not_leader(group.leader_id))
            group.machine.on_role_change(group, ready.soft_state)
        if ready.snapshot is not None:
            group.machine.on_snapshot(group, ready.snapshot)
        committed = ready.committed_entries
        if not committed:
            return
        results = group.machine.apply(group, committed)
        pending = group.pending
        if not pending:
            return
        for entry in committed:
            waiting = pending.pop(entry.index, None)
            if waiting is None:
                continue
            if waiting.term != entry.term:  # another leader's entry took this index: ours was lost
                waiting.completion(None, group.not_leader(group.leader_id))
            else:
                result = results.get(entry.index)
                if isinstance(result, BaseException):
                    waiting.completion(None, result)
                else:
                    waiting.completion(result, None)


def _is_full(exc: BaseException) -> bool:
    """The failure, or one it was raised from, is a full disk, map or segment pool (not an I/O error)."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, StorageFullError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
