"""Role transitions and elections: follower, pre-candidate, candidate and leader; campaigns and votes."""

from __future__ import annotations

from ._membership import Membership
from ._state import APP_RESP, PRE_VOTE, PRE_VOTE_RESP, VOTE, VOTE_RESP, Role
from ._tracker import Progress, VoteResult
from .errors import RaftStorageError
from .messages import EntryKind, Message

__all__ = ["Elections"]


class Elections(Membership):
    """Changing role (each change resets the term's volatile state) and winning or granting votes."""

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
        self.read_acks = {}
        self.pending_reads = []
        self.reads_awaiting_commit = []
        self.read_bcast_pending = False

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
