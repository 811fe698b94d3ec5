"""The Raft algorithm, sans-IO: one :class:`RawNode` per group, driven by tick/step/propose/ready/advance.

Every topic-partition is its own Raft group, so thousands of RawNodes live in one process. The core does no I/O
(no sockets, files, clocks, threads or global randomness): time is ticks, randomness comes from an injected
seeded generator, storage sits behind the :class:`Storage` protocol, and payloads are opaque bytes that are never
copied. It imports nothing of ours (``tests/test_layering.py``). The design follows etcd-io/raft (progress
tracker, in-flight window, unstable log, Ready/advance); the code is our own.

Owner: whoever drives a RawNode, one thread at a time (nothing here is thread-safe); in the node runtime, the
scheduler thread (``multiraft.node.scheduler``).

Public modules (their names are re-exported here):

* :mod:`.rawnode`: :class:`RawNode`, :class:`Ready` (the handling order of its fields), quiescence rules.
* :mod:`.messages`: :class:`Entry`, :class:`Message`, :class:`HardState`, :class:`Snapshot`.
* :mod:`.confchange`: configuration changes (joint consensus plus one-voter changes; why both),
  :func:`apply_conf_change`.
* :mod:`.storage`: the :class:`Storage` protocol, :class:`MemoryStorage`, :func:`bootstrap`.
* :mod:`.codec`: the binary wire format (zero-copy payloads; :class:`DecodeError` on bad input).
* :mod:`.config`: :class:`RaftConfig`. :mod:`.errors`: the error hierarchy.

Private modules, behind RawNode. The state machine is one class that owns the objects with state of their own and
calls them; none of them calls back:

* :mod:`._raft`: ``Raft``, one replica's protocol: roles, ticks and CheckQuorum, elections, replication (leader
  and follower sides), read-index, configuration changes, leadership transfer, recovery of a lost log,
  quiescence.
* :mod:`._log`: ``RaftLog``, storage plus the unstable tail, with the commit and apply indexes.
* :mod:`._tracker`: ``ProgressTracker``, the tracked configuration and the leader's ``Progress`` per replica with
  its in-flight window (flow control). :mod:`._quorum`: majority and joint-majority arithmetic.
* :mod:`._readonly`: ``ReadOnly``, the leader's queue of read-index requests and their confirmations.
* :mod:`._conf_entries`: the configuration read back from CONFIG entries (after one, as of an index).
"""

from __future__ import annotations

from .codec import (
    WIRE_VERSION,
    decode_conf_change,
    decode_conf_state,
    decode_hard_state,
    decode_message,
    decode_snapshot_meta,
    encode_conf_change,
    encode_conf_state,
    encode_hard_state,
    encode_message,
    encode_message_buffers,
    encode_snapshot_meta,
)
from .confchange import (
    ConfChange,
    ConfChangeSingle,
    ConfChangeTransition,
    ConfChangeType,
    ConfState,
    apply_conf_change,
)
from .config import RaftConfig
from .errors import (
    CompactionBeyondSnapshotError,
    ConfChangePending,
    DecodeError,
    EncodeError,
    IndexCompactedError,
    IndexUnavailableError,
    InvalidConfChangeError,
    InvalidRequestError,
    LogInvariantError,
    NotLeader,
    ProposalDropped,
    RaftCodecError,
    RaftConfigError,
    RaftError,
    RaftStorageError,
    SnapshotOutOfDateError,
    SnapshotTemporarilyUnavailableError,
    UsageError,
)
from .messages import (
    UNKNOWN_VOTE,
    Entry,
    EntryKind,
    HardState,
    Message,
    MessageType,
    Snapshot,
    SnapshotMeta,
    entries_size,
)
from .rawnode import ProgressStatus, RandomSource, RawNode, ReadState, Ready, Role, SoftState, Status
from .storage import BOOTSTRAP_INDEX, MemoryStorage, MutableStorage, Storage, bootstrap, limit_size

__all__ = [
    # driving a group
    "RawNode",
    "Ready",
    "RaftConfig",
    "RandomSource",
    "SoftState",
    "ReadState",
    "Role",
    "Status",
    "ProgressStatus",
    # log and messages
    "Entry",
    "EntryKind",
    "HardState",
    "UNKNOWN_VOTE",
    "Message",
    "MessageType",
    "Snapshot",
    "SnapshotMeta",
    "entries_size",
    # configuration
    "ConfState",
    "ConfChange",
    "ConfChangeSingle",
    "ConfChangeType",
    "ConfChangeTransition",
    "apply_conf_change",
    # storage
    "Storage",
    "MutableStorage",
    "MemoryStorage",
    "bootstrap",
    "BOOTSTRAP_INDEX",
    "limit_size",
    # wire format
    "WIRE_VERSION",
    "encode_message",
    "encode_message_buffers",
    "decode_message",
    "encode_conf_change",
    "decode_conf_change",
    "encode_conf_state",
    "decode_conf_state",
    "encode_hard_state",
    "decode_hard_state",
    "encode_snapshot_meta",
    "decode_snapshot_meta",
    # errors
    "RaftError",
    "NotLeader",
    "ProposalDropped",
    "ConfChangePending",
    "InvalidRequestError",
    "RaftConfigError",
    "InvalidConfChangeError",
    "RaftCodecError",
    "DecodeError",
    "EncodeError",
    "UsageError",
    "LogInvariantError",
    "RaftStorageError",
    "IndexCompactedError",
    "IndexUnavailableError",
    "CompactionBeyondSnapshotError",
    "SnapshotOutOfDateError",
    "SnapshotTemporarilyUnavailableError",
]
