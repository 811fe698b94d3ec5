"""The values the core exchanges with the application and with its peers: entries, messages, states, snapshots.

Payloads are opaque ``bytes`` or 1-D byte ``memoryview`` objects that the core never copies or inspects: the
same object a leader receives in :meth:`~multiraft.raft.RawNode.propose` is the one it hands to storage, puts in
append messages and returns as a committed entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from .confchange import ConfState

__all__ = [
    "EntryKind",
    "Entry",
    "HardState",
    "UNKNOWN_VOTE",
    "SnapshotMeta",
    "Snapshot",
    "MessageType",
    "Message",
    "entries_size",
]


class EntryKind(IntEnum):
    """What an entry carries. The core treats DATA and CONTROL alike, as opaque application entries."""

    DATA = 0
    CONFIG = 1  # an encoded ConfChange (see codec.encode_conf_change)
    NOOP = 2  # the empty entry a new leader appends to commit entries of earlier terms
    CONTROL = 3


@dataclass(frozen=True, slots=True)
class Entry:
    """One log entry. ``timestamp_ms`` is the leader's wall clock at propose time (0 = unknown)."""

    index: int
    term: int
    kind: EntryKind
    timestamp_ms: int
    payload: bytes | memoryview


def entries_size(entries: Sequence[Entry]) -> int:
    """Payload bytes of ``entries``: the measure every size limit of the core uses."""
    return sum([len(e.payload) for e in entries])


UNKNOWN_VOTE = (1 << 63) - 1
"""A vote this replica may have cast in its term but no longer knows: it votes for nobody else in that term."""


@dataclass(frozen=True, slots=True)
class HardState:
    """What must be durable before a node speaks: current term, vote in that term (0 = none, UNKNOWN_VOTE = some
    candidate, not known which: lost with a disk), commit index."""

    term: int = 0
    vote: int = 0
    commit: int = 0


@dataclass(frozen=True, slots=True)
class SnapshotMeta:
    """The last index and term a snapshot covers, and the configuration in force at that index."""

    index: int = 0
    term: int = 0
    conf_state: ConfState = field(default_factory=ConfState)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Application state up to ``meta.index``; ``data`` is produced and consumed by the application only."""

    meta: SnapshotMeta = field(default_factory=SnapshotMeta)
    data: bytes = b""

    @property
    def index(self) -> int:
        return self.meta.index

    @property
    def term(self) -> int:
        return self.meta.term

    def is_empty(self) -> bool:
        return self.meta.index == 0


class MessageType(IntEnum):
    """Messages between the replicas of one group (the wire type byte)."""

    APP = 0  # leader -> follower: entries after (index, log_term), and the leader's commit
    APP_RESP = 1  # follower -> leader: index = last matching index, or a rejection with a hint
    VOTE = 2  # candidate -> voter: (index, log_term) = candidate's last entry
    VOTE_RESP = 3
    PRE_VOTE = 4  # like VOTE for term + 1, without changing anyone's term
    PRE_VOTE_RESP = 5
    SNAP = 6  # leader -> follower: install ``snapshot``
    HEARTBEAT = 7  # leader -> follower: commit, read-index round in ``context``, ``quiesce`` flag
    HEARTBEAT_RESP = 8  # follower -> leader: echoes ``context``; also wakes a quiescent leader
    TIMEOUT_NOW = 9  # leader -> transfer target: campaign now, ignoring leases
    READ_INDEX = 10  # follower -> leader: a read request, ``context`` is the requester's key
    READ_INDEX_RESP = 11  # leader -> follower: ``index`` is the read index for ``context``
    TRANSFER_LEADER = 12  # follower -> leader: transfer leadership to node ``index``


@dataclass(slots=True, kw_only=True)
class Message:
    """One message between replicas. The core never mutates a message after creating it; neither should others.

    Field use by type: ``index``/``log_term`` are the previous entry of an APP, the last entry of a (PRE_)VOTE,
    the acknowledged index of an APP_RESP (with ``reject_hint``/``log_term`` the follower's hint on rejection),
    the read index of READ_INDEX_RESP and the target node of TRANSFER_LEADER. Messages forwarded to the leader
    (READ_INDEX, TRANSFER_LEADER) carry term 0.
    """

    type: MessageType
    to: int
    sender: int
    term: int = 0
    log_term: int = 0
    index: int = 0
    commit: int = 0
    entries: Sequence[Entry] = ()
    reject: bool = False
    reject_hint: int = 0
    snapshot: Snapshot | None = None
    context: bytes = b""
    quiesce: bool = False  # HEARTBEAT only: the leader goes quiet; a caught-up follower stops ticking
    leader_transfer: bool = False  # (PRE_)VOTE only: campaign caused by TIMEOUT_NOW, which overrides leases
    # APP_RESP rejections only: the sender lost entries it had acknowledged (a damaged disk it is repairing), so
    # the leader must lower its match index to ``reject_hint`` (if ``log_term`` agrees there) and probe again.
    log_lost: bool = False
