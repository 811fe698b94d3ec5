"""The node's trace hooks that look into Raft messages and Readies (see :mod:`multiraft.trace`); called only
while tracing is on, so that the scheduler and the peer path keep one line each."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from multiraft import raft, trace

__all__ = ["trace_peer_messages", "trace_persisted"]


class _Group(Protocol):
    group_id: int

    @property
    def is_leader(self) -> bool: ...


def trace_peer_messages(messages: Sequence[tuple[int, raft.Message]]) -> None:
    """Appends arriving at a follower (``append_received``, per entry) and successful append responses
    arriving at a leader (``ack_received``, for the entry they acknowledge up to)."""
    for group_id, message in messages:
        if message.type is raft.MessageType.APP:
            for entry in message.entries:
                if entry.kind is raft.EntryKind.DATA:
                    trace.event("append_received", trace.entry_key(group_id, entry.index))
        elif message.type is raft.MessageType.APP_RESP and not message.reject:
            trace.entries_upto("ack_received", group_id, message.index)


def trace_persisted(written: Iterable[tuple[_Group, raft.Ready]]) -> None:
    """Entries a round made durable: ``leader_persisted`` on the leader, ``follower_persisted`` elsewhere."""
    for group, ready in written:
        stage = "leader_persisted" if group.is_leader else "follower_persisted"
        for entry in ready.entries:
            if entry.kind is raft.EntryKind.DATA:
                trace.event(stage, trace.entry_key(group.group_id, entry.index))
