"""Log replication: proposals, the leader's appends and their acknowledgements, the follower's side, reports.

Flow control follows etcd-io/raft: a Progress per replica (probe, replicate, snapshot), an in-flight window, and
a cap on proposed but uncommitted bytes. Appends are batched: proposals mark the leader dirty and ``flush``
sends what each follower is owed. The application reports unreachable peers and snapshot outcomes here.
"""

from __future__ import annotations

from ._readonly import ReadOnly
from ._state import APP, APP_RESP, HEARTBEAT, HEARTBEAT_RESP, SNAP, TIMEOUT_NOW, Role
from ._tracker import Progress, ProgressState
from .errors import (
    IndexCompactedError,
    InvalidRequestError,
    NotLeader,
    ProposalDropped,
    SnapshotTemporarilyUnavailableError,
)
from .messages import Entry, EntryKind, Message, Snapshot, entries_size

__all__ = ["Replication"]


class Replication(ReadOnly):
    """Appending to the log, sending it to followers, counting acknowledgements and committing."""

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

    # --- sending -----------------------------------------------------------------------------------------

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
        if self.read_bcast_pending:
            self.read_bcast_pending = False
            self._bcast_heartbeat(self.read_seq.to_bytes(8, "big"))

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

    # --- leader side of replication ----------------------------------------------------------------------

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
        if len(m.context) == 8:
            seq = int.from_bytes(m.context, "big")
            if seq > self.read_acks.get(m.sender, 0):
                self.read_acks[m.sender] = seq
                self._release_confirmed_reads()

    def _maybe_commit(self) -> bool:
        log = self.log
        if log.maybe_commit(self.tracker.committed_index(), self.term):
            self.needs_flush = True
            if not self.committed_in_term:
                self.committed_in_term = True
                waiting, self.reads_awaiting_commit = self.reads_awaiting_commit, []
                for requester, context in waiting:
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

    # --- application reports -----------------------------------------------------------------------------

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
