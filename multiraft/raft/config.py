"""Configuration of one Raft replica: timings in ticks, flow-control limits in messages and bytes.

One :class:`RaftConfig` may be shared by every group a node hosts: it holds the node id, never a group id.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from .errors import RaftConfigError

__all__ = ["RaftConfig"]

MiB = 1024 * 1024


@dataclass(frozen=True)
class RaftConfig:
    """Settings of a replica. Call :meth:`validate` (RawNode does) to check them."""

    id: int = field(metadata={"unit": "node id", "doc": "This node's id; > 0. Required."})
    election_tick: int = field(
        default=10,
        metadata={
            "unit": "ticks",
            "doc": "A follower that hears nothing from a leader for a random time in [election_tick, "
            "2 * election_tick) campaigns; a CheckQuorum leader steps down after election_tick ticks without "
            "hearing a majority, and a leadership transfer is aborted after it. Must exceed heartbeat_tick.",
        },
    )
    heartbeat_tick: int = field(
        default=1, metadata={"unit": "ticks", "doc": "A leader sends heartbeats every heartbeat_tick ticks."}
    )
    pre_vote: bool = field(
        default=True,
        metadata={
            "unit": "flag",
            "doc": "Run a pre-vote before raising the term, so that a node that rejoins after a partition does "
            "not depose a healthy leader.",
        },
    )
    check_quorum: bool = field(
        default=True,
        metadata={
            "unit": "flag",
            "doc": "A leader steps down when it has not heard from a quorum for election_tick ticks, and "
            "followers that heard from a leader within election_tick ticks ignore vote requests (leader lease).",
        },
    )
    max_size_per_msg: int = field(
        default=1 * MiB,
        metadata={
            "unit": "bytes",
            "doc": "Payload bytes per append message; a message always carries at least one entry.",
        },
    )
    max_entries_per_msg: int = field(default=1024, metadata={"unit": "entries", "doc": "Entries per append message."})
    max_inflight_msgs: int = field(
        default=256,
        metadata={
            "unit": "messages",
            "doc": "Append messages sent to one follower and not yet acknowledged (replicate state).",
        },
    )
    max_inflight_bytes: int = field(
        default=64 * MiB,
        metadata={
            "unit": "bytes",
            "doc": "Payload bytes sent to one follower and not yet acknowledged (replicate state).",
        },
    )
    max_committed_size_per_ready: int = field(
        default=64 * MiB,
        metadata={
            "unit": "bytes",
            "doc": "Payload bytes of committed entries in one Ready; at least one entry is always handed out.",
        },
    )
    max_uncommitted_bytes: int = field(
        default=256 * MiB,
        metadata={
            "unit": "bytes",
            "doc": "Payload bytes a leader holds proposed but not committed; beyond it propose() raises "
            "ProposalDropped (backpressure).",
        },
    )
    quiesce: bool = field(
        default=True,
        metadata={
            "unit": "flag",
            "doc": "An idle leader whose followers are all caught up stops heartbeating and tells them to stop "
            "ticking (see RawNode.quiescent).",
        },
    )

    def validate(self) -> None:
        """Raise :class:`RaftConfigError` naming the first field that is out of range."""
        for f in fields(self):
            value = getattr(self, f.name)
            if f.metadata.get("unit") == "flag":
                if not isinstance(value, bool):
                    raise RaftConfigError(f"RaftConfig.{f.name} must be a bool, got {value!r}")
            elif not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise RaftConfigError(
                    f"RaftConfig.{f.name} must be a positive int ({f.metadata['unit']}), got {value!r}"
                )
        if self.election_tick <= self.heartbeat_tick:
            raise RaftConfigError(
                f"RaftConfig.election_tick must be greater than heartbeat_tick "
                f"({self.election_tick} <= {self.heartbeat_tick})"
            )
