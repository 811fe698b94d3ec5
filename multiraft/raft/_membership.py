"""Membership and leadership: configuration changes (proposed, applied, left automatically) and leader transfer."""

from __future__ import annotations

from typing import Any

from ._replication import Replication
from ._state import APP, TIMEOUT_NOW, TRANSFER_LEADER, Role
from .codec import decode_conf_change, encode_conf_change
from .confchange import ConfChange, ConfState, apply_conf_change
from .errors import ConfChangePending, InvalidConfChangeError, InvalidRequestError, NotLeader, RaftCodecError
from .messages import Entry, EntryKind, Message

__all__ = ["Membership", "conf_after"]


def conf_after(conf_state: ConfState, entry: Entry, logger: Any = None) -> ConfState | None:
    """The configuration once the CONFIG ``entry`` is applied to ``conf_state``; None if it does not apply.

    Every replica skips the same invalid entry (and logs it when given a logger), so they still agree.
    """
    try:
        return apply_conf_change(conf_state, decode_conf_change(entry.payload))
    except (RaftCodecError, InvalidConfChangeError) as exc:
        if logger is not None:
            logger.error("raft.conf_change_skipped", index=entry.index, error=str(exc))
        return None


class Membership(Replication):
    """Which replicas vote and learn, and which of them leads."""

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

    # --- configuration -----------------------------------------------------------------------------------

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

    def _tell_removed(self, before: dict[int, Any], index: int) -> None:
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
