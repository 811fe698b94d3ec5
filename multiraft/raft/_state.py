"""The shared vocabulary and the state every layer of :class:`~multiraft.raft._raft.Raft` reads and writes.

Raft is one class assembled from a single chain of mixins, one concern each (as etcd-io/raft keeps one struct):
``RaftState`` <- ``ReadOnly`` <- ``Replication`` <- ``Membership`` <- ``Elections`` <- ``Ticks`` <- ``Raft``.
A layer calls down the chain freely; the three calls up it are declared here for the type checker only.
Nothing is delegated: every method is a method of the one Raft object, so the hot path has no extra calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Protocol

from ._log import RaftLog
from ._tracker import ProgressTracker
from .confchange import ConfState
from .messages import Message, MessageType

__all__ = ["RaftState", "Role", "ReadState", "RandomSource"]

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


@dataclass(frozen=True, slots=True)
class ReadState:
    """A linearizable read may be served once the application has applied ``index``; ``context`` is the request's."""

    index: int
    context: bytes


@dataclass(slots=True)
class _ReadRequest:
    seq: int
    index: int
    requester: int
    context: bytes


class RaftState:
    """One replica's protocol state (set up by ``Raft.__init__``), and the sending primitive every layer uses."""

    id: int
    rng: RandomSource
    election_timeout: int
    heartbeat_timeout: int
    check_quorum: bool
    pre_vote: bool
    quiesce_enabled: bool
    max_size_per_msg: int
    max_entries_per_msg: int
    max_uncommitted_bytes: int
    logger: Any

    log: RaftLog
    tracker: ProgressTracker
    msgs: list[Message]
    msgs_after_persist: list[Message]
    read_states: list[ReadState]

    term: int
    vote: int
    lead: int
    role: Role
    election_elapsed: int
    heartbeat_elapsed: int
    randomized_election_timeout: int
    lead_transferee: int
    handover_turn: int  # a removed leader's hand-overs so far: each asks the next caught-up voter
    pending_conf_index: int
    uncommitted_size: int
    committed_in_term: bool
    quiescent: bool
    needs_flush: bool

    read_seq: int
    read_acks: dict[int, int]
    pending_reads: list[_ReadRequest]  # few at a time; a deque costs 600 bytes per idle group
    reads_awaiting_commit: list[tuple[int, bytes]]
    read_bcast_pending: bool

    conf_state: ConfState
    conf_index: int
    # Recovering from a damaged disk: (index, term) of the last entry before the damage, (0, 0) when not
    # recovering. See RawNode's ``recover_until``.
    recover_until: tuple[int, int]

    if TYPE_CHECKING:
        # Defined further up the chain (Ticks, Elections, Membership).
        def wake(self, woken_by: int = 0) -> None: ...
        def become_follower(self, term: int, lead: int) -> None: ...
        def _switch_to_conf(self, conf_state: ConfState, index: int, *, quiet: bool = False) -> None: ...

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

    def _send(self, message: Message) -> None:
        if message.type in _AFTER_PERSIST:
            self.msgs_after_persist.append(message)
        else:
            self.msgs.append(message)
