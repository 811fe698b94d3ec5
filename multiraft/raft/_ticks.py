"""Logical time: election and heartbeat timeouts, CheckQuorum, and the quiescence of idle groups."""

from __future__ import annotations

from ._elections import Elections
from ._state import HEARTBEAT_RESP, Role
from ._tracker import ProgressState
from .messages import Message

__all__ = ["Ticks"]


class Ticks(Elections):
    """What happens as ticks pass, and when a group may stop ticking (quiesce) or must start again (wake)."""

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

    # --- quiescence --------------------------------------------------------------------------------------

    def _can_quiesce(self) -> bool:
        if self.lead_transferee or self.pending_reads or self.reads_awaiting_commit or self.read_bcast_pending:
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
