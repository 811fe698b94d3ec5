"""The Raft protocol state machine of one replica (modelled on etcd-io/raft's raft.go, written afresh).

Sans-IO: the only inputs are ticks, messages, proposals and the application's reports; the outputs are queued
messages, read states and the log/commit state that :class:`~multiraft.raft.RawNode` turns into a Ready.

:class:`Raft` is one class, as etcd's raft struct is. It owns the objects that keep state of their own and calls
them, never the reverse: the log (:mod:`._log`), the progress tracker with its flow control and quorum arithmetic
(:mod:`._tracker`), and the read-index queue (:mod:`._readonly`); configurations come from the pure functions of
:mod:`.confchange` and :mod:`._conf_entries`. The class reads top to bottom: construction from storage; role
transitions; ticks (timeouts, CheckQuorum); elections and votes; dispatch of messages by role; proposals; the
leader's side of replication; the follower's; read-index; configuration changes; leadership transfer; recovery
of a lost log; quiescence; the application's reports.
"""

from __future__ import annotations

import logging
from enum import IntEnum
from typing import Any, Protocol

import structlog

from ._conf_entries import conf_after, conf_as_of
from ._log import RaftLog
from ._quorum import VoteResult
from ._readonly import ReadOnly, ReadState
from ._tracker import Progress, ProgressState, ProgressTracker
from .codec import encode_conf_change
from .confchange import ConfChange, ConfState, apply_conf_change
from .config import RaftConfig
from .errors import (
    ConfChangePending,
    IndexCompactedError,
    InvalidRequestError,
    NotLeader,
    ProposalDropped,
    RaftStorageError,
    SnapshotTemporarilyUnavailableError,
)
from .messages import Entry, EntryKind, HardState, Message, MessageType, Snapshot, entries_size
from .storage import Storage

__all__ = ["Raft", "Role", "ReadState", "RandomSource"]

# Rendered and time-stamped by the node, never here; a stdlib logger underneath keeps stdout clean unconfigured.
_log = structlog.wrap_logger(logging.getLogger(__name__))

APP = MessageType.APP
APP_RESP = MessageType.APP_RESP
VOTE = MessageType.VOTE
VOTE_RESP = MessageType.VOTE_RESP
PRE_VOTE = MessageType.PRE_VOTE
PRE_VOTE_RESP = MessageType.PRE_VOTE_RESP
SNAP = MessageType.SNAP
HEARTBEAT = MessageType.HEARTBEAT
HEARTBEAT_RESP = MessageType.HEARTBEAT_RESP
TIMEOUT_NOW = MessageType.TIMEOUT_NOW
READ_INDEX = MessageType.READ_INDEX
READ_INDEX_RESP = MessageType.READ_INDEX_RESP
TRANSFER_LEADER = MessageType.TRANSFER_LEADER

# Messages whose meaning depends on this node's durable state (its vote, term or log): they go out only after
# the Ready that carries that state has been persisted.
_AFTER_PERSIST = frozenset({APP_RESP, VOTE, VOTE_RESP, PRE_VOTE_RESP})


class RandomSource(Protocol):
    """The injected source of randomness; ``random.Random(seed)`` satisfies it."""

    def randrange(self, start: int, stop: int, /) -> int: ...


class Role(IntEnum):
    """A replica's role in its group."""

    FOLLOWER = 0
    CANDIDATE = 1
    LEADER = 2
    PRE_CANDIDATE = 3


class Raft:
    """One replica's protocol state. Driven by RawNode; not thread-safe."""

    def __init__(
        self,
        config: RaftConfig,
        storage: Storage,
        rng: RandomSource,
        applied: int,
        recover_until: tuple[int, int] = (0, 0),
    ) -> None:
        config.validate()
        self.id = config.id
        self.rng = rng
        self.election_timeout = config.election_tick
        self.heartbeat_timeout = config.heartbeat_tick
        self.check_quorum = config.check_quorum
        self.pre_vote = config.pre_vote
        self.quiesce_enabled = config.quiesce
        self.max_size_per_msg = config.max_size_per_msg
        self.max_entries_per_msg = config.max_entries_per_msg
        self.max_uncommitted_bytes = config.max_uncommitted_bytes
        self.logger: Any = _log.bind(node=config.id)

        self.log = RaftLog(storage, config.max_committed_size_per_ready)
        self.tracker = ProgressTracker(config.max_inflight_msgs, config.max_inflight_bytes)
        self.read_only = ReadOnly()
        self.msgs: list[Message] = []
        self.msgs_after_persist: list[Message] = []
        self.read_states: list[ReadState] = []

        self.term = 0
        self.vote = 0
        self.lead = 0
        self.role = Role.FOLLOWER
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.randomized_election_timeout = self.election_timeout
        self.lead_transferee = 0
        self.handover_turn = 0  # a removed leader's hand-overs so far: each asks the next caught-up voter
        self.pending_conf_index = 0
        self.uncommitted_size = 0
        self.committed_in_term = False
        self.quiescent = False
        self.needs_flush = False
        # Recovering from a damaged disk: (index, term) of the last entry before the damage, (0, 0) when not
        # recovering. See RawNode's ``recover_until``.
        self.recover_until = recover_until if recover_until[0] > 0 else (0, 0)

        hard_state, snapshot_conf = storage.initial_state()
        snapshot_index = self.log.applied
        if hard_state != HardState():
            self._load_state(hard_state)
        if applied > 0:
            if self.recover_until[0] and applied > self.log.last_index():
                applied = self.log.last_index()  # the entries after it come back from the leader and apply again
            if applied > self.log.last_index():
                raise InvalidRequestError(f"applied index {applied} is beyond the last index {self.log.last_index()}")
            # Applied entries were handed out as committed; a commit index below them is merely unsynced.
            self.log.committed = max(self.log.committed, applied)
            self.log.applied_to(applied)
        self.conf_state = ConfState()
        self.conf_index = snapshot_index
        conf_state = conf_as_of(storage, snapshot_index, snapshot_conf, self.log.applied, self.log.max_committed_size)
        self._switch_to_conf(conf_state, self.log.applied, quiet=True)
        self.become_follower(self.term, 0)

    def _load_state(self, hard_state: HardState) -> None:
        if self.recover_until[0] and hard_state.commit > self.log.last_index():
            # The damaged suffix held committed entries: they are committed still, but not here any more.
            hard_state = HardState(hard_state.term, hard_state.vote, self.log.last_index())
        if hard_state.commit > self.log.last_index():
            raise RaftStorageError(
                f"hard state commit {hard_state.commit} is beyond the last index {self.log.last_index()}"
            )
        # A commit index below the snapshot is merely stale (it is not synced on its own): keep the snapshot's.
        self.log.committed = max(self.log.committed, hard_state.commit)
        self.term = hard_state.term
        self.vote = hard_state.vote

    def hard_state(self) -> HardState:
        return HardState(self.term, self.vote, self.log.committed)

    def _send(self, message: Message) -> None:
        if message.type in _AFTER_PERSIST:
            self.msgs_after_persist.append(message)
        else:
            self.msgs.append(message)

    # --- role transitions (each resets the term's volatile state) ----------------------------------------

    def _reset(self, term: int) -> None:
        if self.term != term:
            self.term = term
            self.vote = 0
        self.lead = 0
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.randomized_election_timeout = self.rng.randrange(self.election_timeout, 2 * self.election_timeout)
        self.lead_transferee = 0
        self.tracker.reset_votes()
        last = self.log.last_index()
        tracker = self.tracker
        for node_id, pr in tracker.progress.items():
            fresh = Progress(last + 1, tracker.max_inflight, tracker.max_inflight_bytes, is_learner=pr.is_learner)
            if node_id == self.id:
                fresh.match = self.log.stable_last_index()
            tracker.progress[node_id] = fresh
        self.pending_conf_index = 0
        self.uncommitted_size = 0
        self.committed_in_term = False
        self.read_only.reset()

    def become_follower(self, term: int, lead: int) -> None:
        was = self.role
        self._reset(term)
        self.role = Role.FOLLOWER
        self.lead = lead
        if was is Role.LEADER:
            self.logger.info("raft.stepped_down", term=term, leader=lead)

    def _become_pre_candidate(self) -> None:
        # Neither the term nor the vote changes: a pre-vote disturbs nobody.
        self.role = Role.PRE_CANDIDATE
        self.tracker.reset_votes()
        self.lead = 0

    def _become_candidate(self) -> None:
        self._reset(self.term + 1)
        self.vote = self.id
        self.role = Role.CANDIDATE

    def _become_leader(self) -> None:
        self._reset(self.term)
        self.role = Role.LEADER
        self.lead = self.id
        pr = self.tracker.progress.get(self.id)
        if pr is not None:
            pr.become_replicate()
            pr.match = self.log.stable_last_index()
            pr.next = self.log.last_index() + 1
            pr.recent_active = True
        # No configuration change until everything before our first entry is applied (see confchange docs).
        self.pending_conf_index = self.log.last_index()
        self._append(EntryKind.NOOP, b"", 0)
        self.logger.info("raft.became_leader", term=self.term, last_index=self.log.last_index())

    # --- ticks: election and heartbeat timeouts, CheckQuorum ---------------------------------------------

    def tick(self) -> None:
        if self.quiescent:
            return
        if self.role is Role.LEADER:
            self._tick_heartbeat()
        else:
            self.election_elapsed += 1
            if self.election_elapsed >= self.randomized_election_timeout and (
                self._promotable() or self.recover_until[0]
            ):
                self.election_elapsed = 0
                self.hup()

    def delay_election(self, ticks: int) -> None:
        """Hold off this replica's next campaign for ``ticks`` ticks beyond its election timeout (0: end a delay).
        A leader, or a follower that knows its leader, is left alone (its lease must not grow); any role change
        ends the delay."""
        if self.role is Role.LEADER or self.lead:
            return
        self.election_elapsed = -ticks if ticks > 0 else max(self.election_elapsed, 0)

    def _tick_heartbeat(self) -> None:
        self.heartbeat_elapsed += 1
        self.election_elapsed += 1
        if self.election_elapsed >= self.election_timeout:
            self.election_elapsed = 0
            if self.check_quorum:
                if not self.tracker.quorum_active(self.id):
                    self.logger.info("raft.check_quorum_failed", term=self.term)
                    self.become_follower(self.term, 0)
                    return
                for node_id, pr in self.tracker.progress.items():
                    if node_id != self.id:
                        pr.recent_active = False
            if self.lead_transferee:
                self.logger.info("raft.transfer_aborted", to=self.lead_transferee, reason="election timeout")
                self.lead_transferee = 0
            else:
                self._let_a_lost_log_recover()
        if self.heartbeat_elapsed >= self.heartbeat_timeout:
            self.heartbeat_elapsed = 0
            if not self.tracker.is_voter(self.id):
                self._hand_over_after_removal()
            if self.quiesce_enabled and self._can_quiesce():
                self._quiesce()
            else:
                self._bcast_heartbeat(b"")

    # --- elections: campaigns and votes ------------------------------------------------------------------

    def _promotable(self) -> bool:
        # etcd's promotable(): only a voter of its own (applied) configuration campaigns. A learner, or a replica
        # that applied its own removal, would otherwise raise the term again and again while cut off and depose
        # a healthy leader on return (without PreVote and CheckQuorum). A new voter campaigns once it applied its
        # promotion; a removed replica that never learned of its removal still thinks it is a voter (the runtime
        # collects it once every voter applied the removal).
        return self.tracker.is_voter(self.id) and not self.log.has_pending_snapshot()

    def _has_unapplied_conf_changes(self) -> bool:
        log = self.log
        if log.applied >= log.committed:
            return False
        try:
            pending = log.slice(log.applied + 1, log.committed + 1, 1 << 62)
        except RaftStorageError:
            return True  # cannot tell: be safe and do not campaign
        return any(entry.kind == EntryKind.CONFIG for entry in pending)

    def hup(self, *, transfer: bool = False) -> None:
        """Start an election (pre-vote first unless this is a leadership transfer)."""
        if self.role is Role.LEADER:
            return
        if self._recovering():
            # Campaigning could elect a log that lost committed entries; ask the leader for them instead. No
            # leader was heard for a whole timeout: forget it, or its lease would keep refusing candidates.
            self.lead = 0
            self._announce_lost_entries()
            return
        if not self._promotable():
            self.logger.debug("raft.campaign_refused", reason="not a voter of its configuration", transfer=transfer)
            return
        if self._has_unapplied_conf_changes():
            self.logger.debug("raft.campaign_deferred", reason="unapplied configuration change")
            return
        self._campaign(pre=self.pre_vote and not transfer, transfer=transfer)

    def _campaign(self, *, pre: bool, transfer: bool) -> None:
        if pre:
            self._become_pre_candidate()
            vote_type = PRE_VOTE
            term = self.term + 1
        else:
            self._become_candidate()
            vote_type = VOTE
            term = self.term
        self.tracker.record_vote(self.id, True)
        result = self.tracker.tally_votes()
        if result is VoteResult.WON:
            if pre:
                self._campaign(pre=False, transfer=transfer)
            else:
                self._become_leader()
            return
        last_index = self.log.last_index()
        last_term = self.log.last_term()
        voters = sorted(self.tracker.voters | self.tracker.voters_outgoing)
        for node_id in voters:
            if node_id != self.id:
                self._send(
                    Message(
                        type=vote_type,
                        to=node_id,
                        sender=self.id,
                        term=term,
                        index=last_index,
                        log_term=last_term,
                        leader_transfer=transfer,
                    )
                )

    def _handle_vote_request(self, m: Message) -> None:
        if self._recovering() and not self._holds_what_we_lost(m):
            # Our log lost entries we acknowledged, some perhaps committed: judge the candidate against the log
            # we had, or a quorum counting us could elect a leader without them.
            response = VOTE_RESP if m.type is VOTE else PRE_VOTE_RESP
            self._send(Message(type=response, to=m.sender, sender=self.id, term=self.term, reject=True))
            return
        can_vote = (
            self.vote == m.sender or (self.vote == 0 and self.lead == 0) or (m.type is PRE_VOTE and m.term > self.term)
        )
        response = VOTE_RESP if m.type is VOTE else PRE_VOTE_RESP
        up_to_date = self.log.is_up_to_date(m.index, m.log_term)
        if can_vote and up_to_date:
            self._send(Message(type=response, to=m.sender, sender=self.id, term=m.term))
            if m.type is VOTE:
                self.election_elapsed = 0
                self.vote = m.sender
        else:
            if not up_to_date and self.election_elapsed < 0:
                self.election_elapsed = 0  # a delay (delay_election) gave way to a candidate that cannot win
            self._send(Message(type=response, to=m.sender, sender=self.id, term=self.term, reject=True))

    # --- steps: every message, by term and then by role --------------------------------------------------

    def step(self, m: Message) -> None:
        if self.quiescent:
            self.wake(m.sender)
        mtype = m.type
        term = m.term
        if term == 0:
            pass  # forwarded requests (READ_INDEX, TRANSFER_LEADER) are not tied to a term
        elif term > self.term:
            if mtype is VOTE or mtype is PRE_VOTE:
                in_lease = self.check_quorum and self.lead != 0 and self.election_elapsed < self.election_timeout
                if in_lease and not m.leader_transfer:
                    return  # we heard from a leader recently: do not let this candidate disrupt it
            if mtype is PRE_VOTE:
                pass  # a pre-vote never changes our term
            elif mtype is PRE_VOTE_RESP and not m.reject:
                pass  # the term is raised only when the pre-vote is won
            elif mtype is APP or mtype is HEARTBEAT or mtype is SNAP:
                self.become_follower(term, m.sender)
            else:
                self.become_follower(term, 0)
        elif term < self.term:
            if (self.check_quorum or self.pre_vote) and (mtype is HEARTBEAT or mtype is APP):
                # A stale leader (perhaps cut off and rejoining) learns the new term and steps down.
                self._send(Message(type=APP_RESP, to=m.sender, sender=self.id, term=self.term))
            elif mtype is PRE_VOTE:
                self._send(Message(type=PRE_VOTE_RESP, to=m.sender, sender=self.id, term=self.term, reject=True))
            return

        if mtype is VOTE or mtype is PRE_VOTE:
            self._handle_vote_request(m)
        elif self.role is Role.LEADER:
            self._step_leader(m)
        elif self.role is Role.FOLLOWER:
            self._step_follower(m)
        else:
            self._step_candidate(m)

    def _step_leader(self, m: Message) -> None:
        mtype = m.type
        if mtype is APP_RESP:
            self._handle_append_response(m)
        elif mtype is HEARTBEAT_RESP:
            self._handle_heartbeat_response(m)
        elif mtype is READ_INDEX:
            self._leader_read_index(m.sender, m.context)
        elif mtype is TRANSFER_LEADER:
            self.transfer_leadership(m.index, local=False)

    def _step_follower(self, m: Message) -> None:
        mtype = m.type
        if mtype is APP:
            self.election_elapsed = 0
            self.lead = m.sender
            self._handle_append(m)
        elif mtype is HEARTBEAT:
            self.election_elapsed = 0
            self.lead = m.sender
            self._handle_heartbeat(m)
        elif mtype is SNAP:
            self.election_elapsed = 0
            self.lead = m.sender
            self._handle_snapshot(m)
        elif mtype is TIMEOUT_NOW:
            self.logger.info("raft.timeout_now", term=self.term, sender=m.sender)
            self.hup(transfer=True)
        elif mtype is READ_INDEX_RESP:
            self.read_states.append(ReadState(m.index, m.context))
        elif mtype is TRANSFER_LEADER and self.lead:
            self.msgs.append(Message(type=TRANSFER_LEADER, to=self.lead, sender=self.id, index=m.index))

    def _step_candidate(self, m: Message) -> None:
        mtype = m.type
        if mtype is APP:
            self.become_follower(m.term, m.sender)
            self._handle_append(m)
        elif mtype is HEARTBEAT:
            self.become_follower(m.term, m.sender)
            self._handle_heartbeat(m)
        elif mtype is SNAP:
            self.become_follower(m.term, m.sender)
            self._handle_snapshot(m)
        elif (mtype is VOTE_RESP and self.role is Role.CANDIDATE) or (
            mtype is PRE_VOTE_RESP and self.role is Role.PRE_CANDIDATE
        ):
            self.tracker.record_vote(m.sender, not m.reject)
            result = self.tracker.tally_votes()
            if result is VoteResult.WON:
                if self.role is Role.PRE_CANDIDATE:
                    self._campaign(pre=False, transfer=False)
                else:
                    self._become_leader()
            elif result is VoteResult.LOST:
                self.become_follower(self.term, 0)

    # --- proposals ---------------------------------------------------------------------------------------

    def _append(self, kind: EntryKind, payload: bytes | memoryview, timestamp_ms: int) -> int:
        log = self.log
        index = log.last_index() + 1
        entry = Entry(index, self.term, kind, timestamp_ms, payload)
        unstable = log.unstable
        if index == unstable.offset + len(unstable.entries):
            unstable.entries.append(entry)
        else:
            log.append((entry,))
        self.needs_flush = True
        return index

    def _check_can_propose(self) -> None:
        if self.quiescent:
            self.wake()
        if self.role is not Role.LEADER:
            raise NotLeader(self.lead or None)
        if self.lead_transferee:
            raise ProposalDropped(f"leadership is being transferred to node {self.lead_transferee}")
        if not self.tracker.is_voter(self.id):
            raise ProposalDropped("this node is no longer a voter of the group; leadership is being handed over")

    def propose(self, payload: bytes | memoryview, kind: EntryKind, timestamp_ms: int) -> int:
        self._check_can_propose()
        if kind in (EntryKind.CONFIG, EntryKind.NOOP):
            raise InvalidRequestError(f"cannot propose a {kind.name} entry; use propose_conf_change for CONFIG")
        size = len(payload)
        if self.uncommitted_size and self.uncommitted_size + size > self.max_uncommitted_bytes:
            raise ProposalDropped(
                f"{self.uncommitted_size} bytes proposed and not committed (max_uncommitted_bytes "
                f"{self.max_uncommitted_bytes})"
            )
        self.uncommitted_size += size
        return self._append(kind, payload, timestamp_ms)

    def reduce_uncommitted_size(self, size: int) -> None:
        self.uncommitted_size = max(0, self.uncommitted_size - size)

    # --- leader side of replication: sending -------------------------------------------------------------
    # Flow control follows etcd-io/raft (see _tracker): a Progress per replica (probe, replicate, snapshot),
    # an in-flight window, and a cap on proposed but uncommitted bytes. Appends are batched: proposals mark the
    # leader dirty (needs_flush) and ``flush`` sends what each follower is owed.

    def flush(self) -> None:
        """Send what the leader owes its followers (appends, commit updates, read-index heartbeats)."""
        if not self.needs_flush:
            return
        self.needs_flush = False
        if self.role is not Role.LEADER:
            return
        self_id = self.id
        for node_id, pr in self.tracker.progress.items():
            if node_id != self_id:
                self._send_appends(node_id, pr)
        read_only = self.read_only
        if read_only.bcast_pending:
            read_only.bcast_pending = False
            self._bcast_heartbeat(read_only.seq.to_bytes(8, "big"))

    def _send_appends(self, to: int, pr: Progress) -> None:
        state = pr.state
        if state is ProgressState.REPLICATE:
            last = self.log.last_index()
            sent = False
            while pr.next <= last and not pr.inflights.full():
                if not self._send_append(to, pr, allow_empty=False) or pr.state is not ProgressState.REPLICATE:
                    return  # nothing sendable, or a snapshot went out instead
                sent = True
            # Commit-only append, and only when nothing is in flight: appends in flight carry the commit index
            # anyway, and an empty one that overtook them would be rejected and force a resend.
            if not sent and pr.sent_commit < self.log.committed and len(pr.inflights) == 0:
                self._send_append(to, pr, allow_empty=True)
        elif state is ProgressState.PROBE and not pr.probe_sent:
            self._send_append(to, pr, allow_empty=True)

    def _send_append(self, to: int, pr: Progress, *, allow_empty: bool) -> bool:
        log = self.log
        prev_index = pr.next - 1
        prev_term = log.term(prev_index)
        if prev_term is None:
            return self._send_snapshot(to, pr)
        last = log.last_index()
        entries: list[Entry]
        if pr.next <= last:
            try:
                entries = log.slice(pr.next, min(last + 1, pr.next + self.max_entries_per_msg), self.max_size_per_msg)
            except IndexCompactedError:
                return self._send_snapshot(to, pr)
        elif allow_empty:
            entries = []
        else:
            return False
        committed = log.committed
        self.msgs.append(
            Message(
                type=APP,
                to=to,
                sender=self.id,
                term=self.term,
                log_term=prev_term,
                index=prev_index,
                commit=committed,
                entries=entries,
            )
        )
        pr.sent_commit = committed
        if pr.state is ProgressState.REPLICATE:
            if entries:
                last_sent = entries[-1].index
                pr.inflights.add(last_sent, entries_size(entries))
                pr.next = last_sent + 1
        else:
            pr.probe_sent = True
        return True

    def _send_snapshot(self, to: int, pr: Progress) -> bool:
        if not pr.recent_active:
            return False  # the follower is probably down; a snapshot is expensive
        try:
            snapshot = self.log.snapshot()
        except SnapshotTemporarilyUnavailableError:
            return False
        if snapshot.is_empty():
            self.logger.error("raft.no_snapshot_for_compacted_log", to=to)
            return False
        pr.become_snapshot(snapshot.meta.index)
        self.msgs.append(Message(type=SNAP, to=to, sender=self.id, term=self.term, snapshot=snapshot))
        self.logger.info("raft.sending_snapshot", to=to, index=snapshot.meta.index)
        return True

    def _bcast_heartbeat(self, context: bytes, *, quiesce: bool = False) -> None:
        committed = self.log.committed
        for node_id, pr in self.tracker.progress.items():
            if node_id != self.id:
                self.msgs.append(
                    Message(
                        type=HEARTBEAT,
                        to=node_id,
                        sender=self.id,
                        term=self.term,
                        commit=min(pr.match, committed),
                        context=context,
                        quiesce=quiesce,
                    )
                )

    # --- leader side of replication: acknowledgements and commit -----------------------------------------

    def _handle_append_response(self, m: Message) -> None:
        pr = self.tracker.progress.get(m.sender)
        if pr is None:
            return
        pr.recent_active = True
        pr.lost_log = m.log_lost
        if m.reject and m.log_lost:
            if m.reject_hint < pr.match:
                # The follower lost entries it had acknowledged (a damaged disk it repairs): it holds ours up
                # to the hint at most. Lowering a match index is always safe (commit never moves back).
                agreed = m.reject_hint if self.log.term(m.reject_hint) == m.log_term else 0
                pr.match = min(pr.match, agreed)
                pr.become_probe()
                pr.next = max(pr.match, m.reject_hint) + 1
                self.needs_flush = True
                self.logger.info("raft.follower_lost_entries", follower=m.sender, match=pr.match)
                return
            if m.index == 0:
                return  # an announcement already acted on, not the answer to an append
        if m.reject:
            next_probe = m.reject_hint
            if m.log_term > 0:
                next_probe = self.log.find_conflict_by_term(m.reject_hint, m.log_term)[0]
            if pr.maybe_decrease_to(m.index, next_probe):
                if pr.state is ProgressState.REPLICATE:
                    pr.become_probe()
                self.needs_flush = True
            return
        if pr.maybe_update(m.index):
            state = pr.state
            if state is ProgressState.PROBE:
                pr.become_replicate()
            elif state is ProgressState.SNAPSHOT:
                if pr.match + 1 >= self.log.first_index():
                    pr.become_probe()
                    pr.become_replicate()
            else:
                pr.inflights.free_le(m.index)
            if m.index > self.log.committed:
                self._maybe_commit()
            self.needs_flush = True
        elif pr.state is ProgressState.PROBE and pr.match == m.index:
            # The answer to an empty probe that confirms what we knew: the follower matches, stream again.
            pr.become_replicate()
            self.needs_flush = True
        if m.sender == self.lead_transferee and pr.match == self.log.last_index():
            self.logger.info("raft.transfer_timeout_now", to=m.sender)
            self.msgs.append(Message(type=TIMEOUT_NOW, to=m.sender, sender=self.id, term=self.term))

    def _handle_heartbeat_response(self, m: Message) -> None:
        pr = self.tracker.progress.get(m.sender)
        if pr is None:
            return
        pr.recent_active = True
        pr.probe_sent = False
        last = self.log.last_index()
        if pr.state is ProgressState.REPLICATE:
            if pr.inflights.full():
                # Appends may have been lost: let one more out; a gap makes the follower reject and we probe.
                pr.inflights.free_first_one()
            if pr.match < last and pr.next > last:
                # Everything was sent but not all acknowledged: an empty append after the last entry sent is
                # accepted if the follower has it (behind the in-flight ones on a FIFO link), or rejected,
                # which starts a probe; either way lost acknowledgements or appends cannot stall replication.
                self._send_append(m.sender, pr, allow_empty=True)
        if pr.match < last or pr.state is ProgressState.PROBE or pr.sent_commit < self.log.committed:
            self.needs_flush = True
        if len(m.context) == 8 and self.read_only.recv_ack(m.sender, m.context):
            self._release_confirmed_reads()

    def _maybe_commit(self) -> bool:
        log = self.log
        if log.maybe_commit(self.tracker.committed_index(), self.term):
            self.needs_flush = True
            if not self.committed_in_term:
                self.committed_in_term = True
                for requester, context in self.read_only.take_awaiting_commit():
                    self._leader_read_index(requester, context)
            return True
        return False

    def on_persisted(self, index: int, term: int) -> None:
        """The application made entries up to ``index`` durable; a leader counts its own copy now."""
        if self.role is not Role.LEADER or self.log.term(index) != term:
            return
        pr = self.tracker.progress.get(self.id)
        if pr is not None and pr.maybe_update(index) and index > self.log.committed:
            self._maybe_commit()

    # --- follower side of replication --------------------------------------------------------------------

    def _handle_append(self, m: Message) -> None:
        log = self.log
        # Every answer says whether this replica rebuilds a lost log (the leader's Progress.lost_log); the
        # first test keeps the common case to one lookup.
        if m.index < log.committed:
            lost = bool(self.recover_until[0]) and self._recovering()
            self._send(
                Message(type=APP_RESP, to=m.sender, sender=self.id, term=self.term, index=log.committed, log_lost=lost)
            )
            return
        last_new = log.maybe_append(m.index, m.log_term, m.commit, m.entries)
        if last_new is not None:
            lost = bool(self.recover_until[0]) and self._recovering()
            self._send(
                Message(type=APP_RESP, to=m.sender, sender=self.id, term=self.term, index=last_new, log_lost=lost)
            )
            return
        # Rejection with a hint: our last index at or below the leader's probe whose term is <= the probe's
        # term, so the leader can skip a whole term of mismatching entries per round trip.
        hint_index, hint_term = log.find_conflict_by_term(min(m.index, log.last_index()), m.log_term)
        self._send(
            Message(
                type=APP_RESP,
                to=m.sender,
                sender=self.id,
                term=self.term,
                index=m.index,
                reject=True,
                reject_hint=hint_index,
                log_term=hint_term,
                log_lost=self._recovering(),
            )
        )

    def _handle_heartbeat(self, m: Message) -> None:
        log = self.log
        log.commit_to(min(m.commit, log.last_index()))
        if self._recovering():
            # The leader may believe we hold entries we lost, and then sends none: tell it (index 0: no append).
            last = log.last_index()
            self._send(
                Message(
                    type=APP_RESP,
                    to=m.sender,
                    sender=self.id,
                    term=self.term,
                    reject=True,
                    reject_hint=last,
                    log_term=log.term(last) or 0,
                    log_lost=True,
                )
            )
        elif m.quiesce and self.quiesce_enabled and log.last_index() == m.commit and log.committed == m.commit:
            self.quiescent = True  # caught up with an idle leader: sleep without answering
            return
        self.msgs.append(Message(type=HEARTBEAT_RESP, to=m.sender, sender=self.id, term=self.term, context=m.context))

    def _handle_snapshot(self, m: Message) -> None:
        snapshot = m.snapshot
        if snapshot is None:
            return
        if self._restore(snapshot):
            self.logger.info("raft.snapshot_restored", index=snapshot.meta.index, term=snapshot.meta.term)
            index = self.log.last_index()
        else:
            index = self.log.committed
        self._send(Message(type=APP_RESP, to=m.sender, sender=self.id, term=self.term, index=index))

    def _restore(self, snapshot: Snapshot) -> bool:
        meta = snapshot.meta
        log = self.log
        if meta.index <= log.committed:
            return False
        if self.role is not Role.FOLLOWER:
            # Defence in depth: only a follower installs snapshots.
            self.become_follower(self.term + 1, 0)
            return False
        if log.match_term(meta.index, meta.term):
            # We already have the snapshot's last entry: just fast-forward the commit index.
            log.commit_to(meta.index)
            return False
        log.restore(snapshot)
        self.tracker.progress = {}
        self._switch_to_conf(meta.conf_state, meta.index)
        return True

    # --- linearizable reads (ReadIndex; the queue is in _readonly) ---------------------------------------

    def read_index(self, context: bytes) -> None:
        if self.quiescent:
            self.wake()
        if self.role is Role.LEADER:
            self._leader_read_index(self.id, context)
        elif self.lead:
            self.msgs.append(Message(type=READ_INDEX, to=self.lead, sender=self.id, context=context))
        else:
            raise NotLeader(None)

    def _leader_read_index(self, requester: int, context: bytes) -> None:
        if not self.committed_in_term:
            # Our commit index may lag what earlier leaders committed until an entry of our term commits.
            self.read_only.awaiting_commit.append((requester, context))
            return
        if self.tracker.is_singleton() and self.id in self.tracker.voters:
            # We are the whole quorum (a removed leader whose config has one other voter is not).
            self._answer_read(requester, self.log.committed, context)
            return
        self.read_only.add_request(self.log.committed, requester, context)
        self.needs_flush = True

    def _answer_read(self, requester: int, index: int, context: bytes) -> None:
        if requester == self.id:
            self.read_states.append(ReadState(index, context))
        else:
            self.msgs.append(
                Message(
                    type=READ_INDEX_RESP, to=requester, sender=self.id, term=self.term, index=index, context=context
                )
            )

    def _release_confirmed_reads(self) -> None:
        read_only = self.read_only
        acks = read_only.acks
        self_id = self.id
        seq = read_only.seq
        confirmed = self.tracker.quorum_index(lambda node_id: seq if node_id == self_id else acks.get(node_id, 0))
        for request in read_only.release(confirmed):
            self._answer_read(request.requester, request.index, request.context)

    # --- configuration changes (see confchange: applied on apply, one at a time, joint when needed) ------

    def propose_conf_change(self, change: ConfChange, timestamp_ms: int) -> int:
        self._check_can_propose()
        if self.pending_conf_index > self.log.applied:
            raise ConfChangePending(
                f"the configuration change at {self.pending_conf_index} is not applied yet (applied {self.log.applied})"
            )
        apply_conf_change(self.conf_state, change)  # raises InvalidConfChangeError before anything is logged
        index = self._append(EntryKind.CONFIG, encode_conf_change(change), timestamp_ms)
        self.pending_conf_index = index
        return index

    def apply_conf_entry(self, entry: Entry) -> ConfState | None:
        """Apply a committed CONFIG entry (once, in log order); the new configuration, or None if invalid."""
        if entry.index <= self.conf_index:
            return None  # already covered by a snapshot installed meanwhile
        conf_state = conf_after(self.conf_state, entry, self.logger)
        if conf_state is None:
            self.conf_index = entry.index
            return None
        self._switch_to_conf(conf_state, entry.index)
        return conf_state

    def _switch_to_conf(self, conf_state: ConfState, index: int, *, quiet: bool = False) -> None:
        before = self.tracker.progress if self.role is Role.LEADER else {}
        self.conf_state = conf_state
        self.conf_index = index
        self.tracker.set_config(
            frozenset(conf_state.voters),
            frozenset(conf_state.voters_outgoing),
            frozenset(conf_state.learners),
            frozenset(conf_state.learners_next),
            conf_state.auto_leave,
            self.log.last_index() + 1,
        )
        if not quiet:
            self.logger.info("raft.conf_changed", index=index, voters=conf_state.voters, learners=conf_state.learners)
        if self.role is not Role.LEADER:
            return
        self._tell_removed(before, index)
        if not self.tracker.is_voter(self.id):
            self.logger.info("raft.removed_leader_hands_over", term=self.term)
            self.lead_transferee = 0
        self._maybe_commit()
        self.needs_flush = True
        if self.lead_transferee and self.lead_transferee not in self.tracker.voters:
            self.lead_transferee = 0

    def _tell_removed(self, before: dict[int, Progress], index: int) -> None:
        """Tell each replica this configuration removed that the entry removing it is committed: nothing else
        is sent to it any more, and a replica that applied its own removal can be given up by its node as one
        that nothing needs (multiraft.node.scheduler.term_guard: placed there again, it is an ordinary new replica).

        An empty append anchored at the entry, after whatever is in flight to it on the same connection, so it
        also reaches a replica whose acknowledgement of the entry came after the commit. Best effort: a replica
        that misses it is only given up more carefully."""
        committed = self.log.committed
        term = self.log.term(index)
        if term is None:
            return
        for node_id, pr in before.items():
            if node_id != self.id and node_id not in self.tracker.progress and pr.next > index:
                self.msgs.append(
                    Message(
                        type=APP,
                        to=node_id,
                        sender=self.id,
                        term=self.term,
                        log_term=term,
                        index=index,
                        commit=committed,
                    )
                )

    def _hand_over_after_removal(self) -> None:
        """A leader that is no longer a voter asks a caught-up voter to take over (TimeoutNow).

        It keeps leading until then (replicating, not proposing): stepping down at once could leave the
        remaining voters in the joint configuration, needing the vote of a node whose log is longer than theirs.
        """
        log = self.log
        last = log.last_index()
        if log.committed != last:
            return
        progress = self.tracker.progress
        caught_up = [n for n in sorted(self.tracker.voters) if (pr := progress.get(n)) is not None and pr.match == last]
        if caught_up:
            # In turn: a voter that may not campaign (one rebuilding a lost log, say) must not hold up the rest.
            to = caught_up[self.handover_turn % len(caught_up)]
            self.handover_turn += 1
            self.msgs.append(Message(type=TIMEOUT_NOW, to=to, sender=self.id, term=self.term))

    def maybe_auto_leave_joint(self) -> None:
        """A leader leaves an automatic joint configuration once the entry that entered it is applied."""
        if (
            self.role is Role.LEADER
            and self.tracker.auto_leave
            and self.tracker.joint
            and self.log.applied >= self.pending_conf_index
        ):
            index = self._append(EntryKind.CONFIG, encode_conf_change(ConfChange.leave_joint()), 0)
            self.pending_conf_index = index

    # --- leadership transfer -----------------------------------------------------------------------------

    def transfer_leader(self, target: int) -> None:
        if self.quiescent:
            self.wake()
        if self.role is Role.LEADER:
            self.transfer_leadership(target, local=True)
        elif self.lead:
            self.msgs.append(Message(type=TRANSFER_LEADER, to=self.lead, sender=self.id, index=target))
        else:
            raise NotLeader(None)

    def transfer_leadership(self, target: int, *, local: bool) -> None:
        if target not in self.tracker.voters:
            if local:
                raise InvalidRequestError(f"node {target} is not a voter of this group")
            return
        if target == self.lead_transferee:
            return
        self.lead_transferee = 0
        if target == self.id:
            return
        self.election_elapsed = 0  # the transfer is aborted after one election timeout
        self.lead_transferee = target
        self.logger.info("raft.transfer_started", to=target, term=self.term)
        pr = self.tracker.progress[target]
        if pr.match == self.log.last_index():
            self.msgs.append(Message(type=TIMEOUT_NOW, to=target, sender=self.id, term=self.term))
        else:
            self.needs_flush = True

    # --- recovery of a lost log (recover_until; see RawNode) ---------------------------------------------

    def _recovering(self) -> bool:
        """True while the log is less up to date than it was before the damage (see ``recover_until``)."""
        index, term = self.recover_until
        if not index:
            return False
        log = self.log
        last = log.last_index()
        last_term = log.term(last) or 0
        if last_term < term or (last_term == term and last < index):
            return True
        self.recover_until = (0, 0)
        self.logger.info("raft.recovered", last_index=last, term=self.term)
        return False

    def _holds_what_we_lost(self, m: Message) -> bool:
        """A candidate's log is at least as up to date as ours was before the damage: Raft's vote rule, against
        the log we acknowledged rather than the one we still have."""
        index, term = self.recover_until
        return m.log_term > term or (m.log_term == term and m.index >= index)

    def _announce_lost_entries(self) -> None:
        """Tell every voter that this log lost acknowledged entries: the leader among them lowers its match index
        and re-sends them (one that is quiescent wakes up on any message, then heartbeats carry the news)."""
        last = self.log.last_index()
        last_term = self.log.term(last) or 0
        for node_id in sorted(self.tracker.voters | self.tracker.voters_outgoing):
            if node_id != self.id:
                self._send(
                    Message(
                        type=APP_RESP,
                        to=node_id,
                        sender=self.id,
                        term=self.term,
                        reject=True,
                        reject_hint=last,
                        log_term=last_term,
                        log_lost=True,
                    )
                )

    def _let_a_lost_log_recover(self) -> None:
        """A replica rebuilding a lost log holds all of ours, yet still waits for an entry of a term later than
        any it had: one it may have reached in our own term. Only a new term gives it that, so hand leadership
        to a caught-up voter that does not wait. Without this, a group whose voters were mostly such replicas
        (say, moved back to nodes that lost them) could not elect once the leader failed."""
        last = self.log.last_index()
        progress = self.tracker.progress
        if not any(pr.lost_log and pr.match == last for node_id, pr in progress.items() if node_id != self.id):
            return
        ready = [
            n
            for n in sorted(self.tracker.voters)
            if n != self.id and (pr := progress.get(n)) is not None and pr.match == last and not pr.lost_log
        ]
        if ready and self.tracker.is_voter(self.id):
            self.logger.info("raft.transfer_for_a_lost_log", to=ready[0], term=self.term)
            self.transfer_leadership(ready[0], local=False)

    # --- quiescence (the rules are in rawnode's docstring) -----------------------------------------------

    def _can_quiesce(self) -> bool:
        if self.lead_transferee or self.read_only.has_requests():
            return False
        log = self.log
        last = log.last_index()
        if log.committed != last or log.applied != last or log.unstable.entries or log.unstable.snapshot:
            return False
        if self.tracker.joint or self.pending_conf_index > log.applied or not self.tracker.is_voter(self.id):
            return False
        self_id = self.id
        for node_id, pr in self.tracker.progress.items():
            if pr.match != last or pr.lost_log or (node_id != self_id and pr.state is not ProgressState.REPLICATE):
                return False
        return True

    def _quiesce(self) -> None:
        self._bcast_heartbeat(b"", quiesce=True)
        self.quiescent = True

    def wake(self, woken_by: int = 0) -> None:
        """Leave quiescence: tick again; a follower woken by anyone but its leader wakes the leader too."""
        if not self.quiescent:
            return
        self.quiescent = False
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        if self.role is Role.LEADER:
            # Give every follower a full election timeout to answer before CheckQuorum judges them.
            for pr in self.tracker.progress.values():
                pr.recent_active = True
        elif self.lead and woken_by != self.lead:
            self.msgs.append(Message(type=HEARTBEAT_RESP, to=self.lead, sender=self.id, term=self.term))

    # --- the application's reports -----------------------------------------------------------------------

    def report_unreachable(self, peer: int) -> None:
        if self.role is not Role.LEADER:
            return
        pr = self.tracker.progress.get(peer)
        if pr is not None and pr.state is ProgressState.REPLICATE:
            pr.become_probe()

    def report_snapshot(self, peer: int, ok: bool) -> None:
        if self.role is not Role.LEADER:
            return
        pr = self.tracker.progress.get(peer)
        if pr is None or pr.state is not ProgressState.SNAPSHOT:
            return
        if not ok:
            pr.pending_snapshot = 0
        pr.become_probe()
        # Wait for the follower's answer (or a heartbeat) before the next append.
        pr.probe_sent = True
