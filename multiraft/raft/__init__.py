"""The Raft algorithm, sans-IO: one :class:`RawNode` per group, driven by tick/step/propose/ready/advance.

Every topic-partition is its own Raft group, so thousands of RawNodes live in one process. The core does no I/O
(no sockets, files, clocks, threads or global randomness): time is ticks, randomness comes from an injected
seeded generator, storage sits behind the :class:`Storage` protocol, and payloads are opaque bytes that are never
copied. The design follows etcd-io/raft (progress tracker, in-flight window, unstable log, Ready/advance); the
code is our own.

Modules:

* :mod:`.rawnode`: :class:`RawNode`, :class:`Ready` (the handling order of its fields), quiescence rules.
* :mod:`.messages`: :class:`Entry`, :class:`Message`, :class:`HardState`, :class:`Snapshot`.
* :mod:`.confchange`: membership (joint consensus plus one-voter changes; why both), :func:`apply_conf_change`.
* :mod:`.storage`: the :class:`Storage` protocol, :class:`MemoryStorage`, :func:`bootstrap`.
* :mod:`.codec`: the binary wire format (zero-copy payloads; :class:`DecodeError` on bad input).
* :mod:`.config`: :class:`RaftConfig`. :mod:`.errors`: the error hierarchy.
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
    # membership
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
