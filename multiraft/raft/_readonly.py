"""Linearizable reads (ReadIndex): a leader confirms its leadership with a quorum of heartbeats, then answers."""

from __future__ import annotations

from ._state import READ_INDEX, READ_INDEX_RESP, RaftState, ReadState, Role, _ReadRequest
from .errors import NotLeader
from .messages import Message

__all__ = ["ReadOnly"]


class ReadOnly(RaftState):
    """Read-index requests: queued until the term's first commit, released once a quorum acknowledged them."""

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
            self.reads_awaiting_commit.append((requester, context))
            return
        if self.tracker.is_singleton() and self.id in self.tracker.voters:
            # We are the whole quorum (a removed leader whose config has one other voter is not).
            self._answer_read(requester, self.log.committed, context)
            return
        self.read_seq += 1
        self.pending_reads.append(_ReadRequest(self.read_seq, self.log.committed, requester, context))
        self.read_bcast_pending = True
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
        acks = self.read_acks
        self_id = self.id
        seq = self.read_seq
        confirmed = self.tracker.quorum_index(lambda node_id: seq if node_id == self_id else acks.get(node_id, 0))
        pending = self.pending_reads
        released = 0
        while released < len(pending) and pending[released].seq <= confirmed:
            request = pending[released]
            self._answer_read(request.requester, request.index, request.context)
            released += 1
        if released:
            del pending[:released]
