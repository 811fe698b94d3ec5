"""Linearizable reads (ReadIndex, as etcd's readOnly): the leader's queue of read requests and their confirmations.

A read is served at the leader's commit index once a quorum confirmed, after the request arrived, that this node
still leads. The leader numbers each request (``seq``), carries the latest number in the context of a heartbeat,
and each follower echoes it back: a request is confirmed once a quorum echoed a number at least its own. Before
an entry of its term commits, a new leader's commit index may lag what earlier leaders committed, so requests
wait for that first (``awaiting_commit``).

:class:`ReadOnly` only keeps this state; the :class:`~multiraft.raft._raft.Raft` that owns it decides when a
request is queued, computes the quorum, sends the heartbeats and answers the requests it releases.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ReadOnly", "ReadRequest", "ReadState"]


@dataclass(frozen=True, slots=True)
class ReadState:
    """A linearizable read may be served once the application has applied ``index``; ``context`` is the request's."""

    index: int
    context: bytes


@dataclass(slots=True)
class ReadRequest:
    """A read-index request waiting for a quorum: served at ``index`` once the heartbeats of ``seq`` are echoed."""

    seq: int
    index: int
    requester: int
    context: bytes


class ReadOnly:
    """One leader's read-index requests: queued, numbered, confirmed by a quorum's echoes, released in order."""

    __slots__ = ("acks", "awaiting_commit", "bcast_pending", "pending", "seq")

    def __init__(self) -> None:
        # Never reset: a number echoed in an earlier term must not confirm a request of a later one.
        self.seq = 0
        self.acks: dict[int, int] = {}  # node -> highest seq it echoed
        self.pending: list[ReadRequest] = []  # few at a time; a deque costs 600 bytes per idle group
        self.awaiting_commit: list[tuple[int, bytes]] = []  # (requester, context) until the term's first commit
        self.bcast_pending = False  # a heartbeat carrying ``seq`` is owed

    def reset(self) -> None:
        """Drop every request and echo (the role or term changed: requesters time out and retry)."""
        self.acks = {}
        self.pending = []
        self.awaiting_commit = []
        self.bcast_pending = False

    def has_requests(self) -> bool:
        """True while a request waits (for the term's first commit, for a heartbeat or for a quorum)."""
        return bool(self.pending or self.awaiting_commit or self.bcast_pending)

    def add_request(self, index: int, requester: int, context: bytes) -> None:
        """Queue a request to be served at ``index``; a heartbeat carrying its number is now owed."""
        self.seq += 1
        self.pending.append(ReadRequest(self.seq, index, requester, context))
        self.bcast_pending = True

    def take_awaiting_commit(self) -> list[tuple[int, bytes]]:
        """The requests that waited for the term's first commit, in arrival order; the wait is over."""
        waiting, self.awaiting_commit = self.awaiting_commit, []
        return waiting

    def recv_ack(self, sender: int, context: bytes) -> bool:
        """Record the number ``sender`` echoed (an 8-byte heartbeat context); True if it is a new, higher one."""
        seq = int.from_bytes(context, "big")
        if seq > self.acks.get(sender, 0):
            self.acks[sender] = seq
            return True
        return False

    def release(self, confirmed: int) -> Sequence[ReadRequest]:
        """Remove and return, in order, the requests numbered up to ``confirmed`` (a quorum echoed it)."""
        pending = self.pending
        released = 0
        while released < len(pending) and pending[released].seq <= confirmed:
            released += 1
        if not released:
            return ()
        requests = pending[:released]
        del pending[:released]
        return requests
