"""The Raft protocol state machine of one replica (modelled on etcd-io/raft's raft.go, written afresh).

Sans-IO: the only inputs are ticks, messages, proposals and the application's reports; the outputs are queued
messages, read states and the log/commit state that :class:`~multiraft.raft.RawNode` turns into a Ready.

:class:`Raft` adds construction from storage and dispatch of messages by role to one chain of mixins, a concern
each (see :mod:`._state`): ``_readonly``, ``_replication``, ``_membership``, ``_elections`` and ``_ticks``.
"""

from __future__ import annotations

import logging

import structlog

from ._log import RaftLog
from ._membership import conf_after
from ._state import (
    APP,
    APP_RESP,
    HEARTBEAT,
    HEARTBEAT_RESP,
    PRE_VOTE,
    PRE_VOTE_RESP,
    READ_INDEX,
    READ_INDEX_RESP,
    SNAP,
    TIMEOUT_NOW,
    TRANSFER_LEADER,
    VOTE,
    VOTE_RESP,
    RandomSource,
    ReadState,
    Role,
)
from ._ticks import Ticks
from ._tracker import ProgressTracker, VoteResult
from .confchange import ConfState
from .config import RaftConfig
from .errors import InvalidRequestError, RaftStorageError
from .messages import EntryKind, HardState, Message
from .storage import Storage

__all__ = ["Raft", "Role", "ReadState", "RandomSource", "conf_after"]

# Rendered and time-stamped by the node, never here; a stdlib logger underneath keeps stdout clean unconfigured.
_log = structlog.wrap_logger(logging.getLogger(__name__))


class Raft(Ticks):
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
        self.logger = _log.bind(node=config.id)

        self.log = RaftLog(storage, config.max_committed_size_per_ready)
        self.tracker = ProgressTracker(config.max_inflight_msgs, config.max_inflight_bytes)
        self.msgs = []
        self.msgs_after_persist = []
        self.read_states = []

        self.term = 0
        self.vote = 0
        self.lead = 0
        self.role = Role.FOLLOWER
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.randomized_election_timeout = self.election_timeout
        self.lead_transferee = 0
        self.handover_turn = 0
        self.pending_conf_index = 0
        self.uncommitted_size = 0
        self.committed_in_term = False
        self.quiescent = False
        self.needs_flush = False

        self.read_seq = 0
        self.read_acks = {}
        self.pending_reads = []
        self.reads_awaiting_commit = []
        self.read_bcast_pending = False
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
        conf_state = self._conf_as_of(storage, snapshot_index, snapshot_conf, self.log.applied)
        self._switch_to_conf(conf_state, self.log.applied, quiet=True)
        self.become_follower(self.term, 0)

    def _conf_as_of(self, storage: Storage, snapshot_index: int, snapshot_conf: ConfState, applied: int) -> ConfState:
        """The configuration as of ``applied``: the snapshot's (or a later checkpoint) and the CONFIG entries after."""
        index, conf_state = snapshot_index, snapshot_conf
        if applied <= index:
            return conf_state
        checkpoint, checkpoint_conf = storage.conf_checkpoint(applied)
        if not snapshot_index <= checkpoint <= applied:
            raise RaftStorageError(f"configuration checkpoint {checkpoint} is outside [{snapshot_index}, {applied}]")
        if checkpoint > index:
            index, conf_state = checkpoint, checkpoint_conf
        config_kind = EntryKind.CONFIG
        while index < applied:
            entries = storage.entries(index + 1, applied + 1, self.log.max_committed_size)
            if not entries:
                raise RaftStorageError(f"storage returned no entries in [{index + 1}, {applied}]")
            for entry in entries:
                if entry.kind == config_kind:
                    conf_state = conf_after(conf_state, entry) or conf_state
            index = entries[-1].index
        return conf_state

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

    # --- steps -------------------------------------------------------------------------------------------

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
