"""Errors raised by the Raft core.

Every error the core raises on purpose derives from :class:`RaftError`::

    RaftError
    ├── NotLeader                        propose/read on a non-leader (carries the leader hint)
    ├── ProposalDropped                  the leader will not take the proposal now (transfer, limit, removal)
    │   └── ConfChangePending            an earlier configuration change is not applied yet
    ├── InvalidRequestError (ValueError) arguments that can never succeed
    │   ├── RaftConfigError              RaftConfig.validate() names the bad field
    │   └── InvalidConfChangeError       a change that does not apply to the current configuration
    ├── RaftCodecError (ValueError)      the wire format of messages, configuration changes and states
    │   ├── DecodeError                  malformed or truncated bytes (the decoder raises nothing else)
    │   └── EncodeError                  a value that does not fit the wire format (negative or too large)
    ├── UsageError (RuntimeError)        the driver broke the ready()/advance() contract
    ├── LogInvariantError (RuntimeError) the log broke an invariant (a leader overwriting committed entries,
    │                                    a commit past the last index, storage without the last term): a bug
    └── RaftStorageError                 raised by a Storage implementation
        ├── IndexCompactedError          the index is at or below the compaction point (etcd's ErrCompacted)
        ├── IndexUnavailableError        the index is above the last index (etcd's ErrUnavailable)
        ├── CompactionBeyondSnapshotError  compact() past the snapshot: entries no snapshot covers
        ├── SnapshotOutOfDateError       a snapshot not newer than the one held
        └── SnapshotTemporarilyUnavailableError  the snapshot is being produced; the leader retries later

Storage adapters map their own exceptions onto :class:`RaftStorageError` at the boundary (``raise ... from exc``).
"""

from __future__ import annotations

__all__ = [
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


class RaftError(Exception):
    """Base class of every error raised by :mod:`multiraft.raft`."""


class NotLeader(RaftError):  # noqa: N818 (name fixed by the runtime interface)
    """The node is not the leader of its group; ``leader_id`` is the last known leader, or None."""

    def __init__(self, leader_id: int | None) -> None:
        hint = f"leader is node {leader_id}" if leader_id is not None else "no leader is known"
        super().__init__(f"this node is not the leader: {hint}")
        self.leader_id = leader_id


class ProposalDropped(RaftError):  # noqa: N818 (name fixed by the runtime interface)
    """The leader refused the proposal for now; retrying later (or on the new leader) may succeed."""


class ConfChangePending(ProposalDropped):
    """A configuration change is proposed but not applied yet; only one may be in flight."""


class InvalidRequestError(RaftError, ValueError):
    """The arguments of a call are wrong and retrying will not help."""


class RaftConfigError(InvalidRequestError):
    """A :class:`~multiraft.raft.RaftConfig` field is out of range; the message names it."""


class InvalidConfChangeError(InvalidRequestError):
    """The configuration change cannot be applied to the current configuration."""


class RaftCodecError(RaftError, ValueError):
    """Base class of wire-format errors."""


class DecodeError(RaftCodecError):
    """The bytes are not a valid encoding (truncated, malformed, or of an unknown version)."""


class EncodeError(RaftCodecError):
    """A value does not fit the wire format (for example a negative index)."""


class UsageError(RaftError, RuntimeError):
    """The driver broke the ready()/advance() contract (for example a second ready() before advance())."""


class LogInvariantError(RaftError, RuntimeError):
    """The replica's log broke one of Raft's invariants; a bug in the core, a peer or a storage. Not retryable."""


class RaftStorageError(RaftError):
    """Base class of errors raised by :class:`~multiraft.raft.Storage` implementations."""


class IndexCompactedError(RaftStorageError):
    """The requested index was compacted away into a snapshot."""


class IndexUnavailableError(RaftStorageError):
    """The requested index is beyond the last index in storage."""


class CompactionBeyondSnapshotError(RaftStorageError):
    """``compact(index)`` with ``index`` above the snapshot: it would drop entries no snapshot covers."""


class SnapshotOutOfDateError(RaftStorageError):
    """The snapshot is older than the one storage already holds."""


class SnapshotTemporarilyUnavailableError(RaftStorageError):
    """Storage is producing a snapshot; the leader will try again later."""
