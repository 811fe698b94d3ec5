"""Which replicas a leader can bring up to date only with a snapshot: the store asks its catch-up hook to copy
segments to exactly those (:mod:`multiraft.node.catchup`). Pure: reads a Raft status."""

from __future__ import annotations

from multiraft import raft

__all__ = ["snapshot_peers"]


def snapshot_peers(status: raft.Status, first_index: int) -> set[int]:
    """The replicas a leader (``status`` of its core, ``first_index`` of its Raft storage) can bring up to date
    only with a snapshot: one is in flight to them (Raft's SNAPSHOT state), or they lack entries its Raft log
    has compacted (between a snapshot reported failed and the core sending it again)."""
    return {
        peer
        for peer, progress in status.progress.items()
        if peer != status.id and (progress.pending_snapshot or progress.match + 1 < first_index)
    }
