"""Replica catch-up by segment copy: a far-behind replica copies sealed segment files instead of replaying them.

Policy (leader, every ``retention_check_ms``). A replica is *far behind* when it lacks at least one whole
sealed segment: its next index is at or below the first index of the newest sealed segment the leader has
applied. Then the leader exports its sealed segments (from the log start to the end of that segment, index
S) as files on a worker thread (``SegmentedLog.export_segment``: the stored entries verbatim, never
re-serialized), and makes a *catch-up snapshot* at S whose manifest lists them (index and offset ranges,
last term, size, crc32c). Raft's compaction point moves to S while the leader keeps the segments, so the
Raft core sends every replica that needs entries up to S this small manifest (InstallSnapshot) instead of
the entries; replicas within a segment of the leader keep getting AppendEntries.

Follower. The node's delivery path holds back an InstallSnapshot whose manifest lists files (the core never
sees it until the copy is done, so no "snapshot pending" state enters the sans-IO core). The copier fetches
the files it lacks over the peer transport (request kind ``REQUEST_SEGMENT_CHUNK``) from the leader, or
another replica, in chunks of ``CHUNK_BYTES``: each chunk carries its crc32c and is fsynced with a progress
record (``storage.SegmentFileReceiver``), so a dropped connection or a restart resumes at the last verified
chunk; a corrupt chunk is fetched again. The rate is kept under ``NodeConfig.move_bandwidth_bytes_per_s``.
When every file is in place and verified, the held message is stepped into the core: it restores the
snapshot, and the storage adapter adopts the files (``install_segments``) instead of emptying the log. The
replica acknowledges S, and the leader replicates the tail after S with AppendEntries (as a learner until
the controller promotes it).

Leader bookkeeping. A replica left in Raft's SNAPSHOT state that has fetched nothing for
``snapshot_idle_s`` is reported to the core as a failed snapshot (etcd's ReportSnapshot), so the leader
sends the snapshot again; the copier resumes from what it already holds. The leader reports a copy (partition
status "copy", move progress) for exactly the replicas that still need the snapshot (``scheduler.snapshot_peers``,
:meth:`CatchupManager.leader_progress`); the rebalancer promotes none of them, and judges the others by lag.

Modules: :mod:`._leader` (the leader's side), :mod:`._follower` (the copier), :mod:`._shared` (progress,
counters, the chunk's wire format, ``install_segments``, where the work runs); this
module's :class:`CatchupManager` is the one object the node holds.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Collection, Mapping
from functools import partial
from pathlib import Path

from multiraft import raft
from multiraft.node.replicas.partition import PartitionView
from multiraft.node.replicas.raft_log import SegmentRef
from multiraft.node.scheduler.scheduler import RaftGroup, Scheduler
from storage import SegmentedLog, SegmentFileReceiver

from ._follower import CatchupFollower, manifest_to_copy
from ._follower import _Job as _Job  # driven directly by the unit tests and benchmarks/catchup_bench.py
from ._leader import SNAPSHOT_IDLE_S, CatchupLeader, ExportedSegment
from ._shared import (
    CATCHUP_REQUEST_KINDS,
    CHUNK_BYTES,
    REQUEST_SEGMENT_CHUNK,
    Call,
    CatchupProgress,
    CatchupRuntime,
    CatchupStats,
    install_segments,
)

__all__ = [
    "CatchupManager",
    "CatchupProgress",
    "CatchupStats",
    "REQUEST_SEGMENT_CHUNK",
    "CATCHUP_REQUEST_KINDS",
    "CHUNK_BYTES",
    "install_segments",
]


class CatchupManager:
    """Both sides of catch-up for one node; created by the node, runs on its event loop and scheduler. It
    routes the node's calls to the leader's side or the copier, which share its counters and its tasks."""

    def __init__(
        self,
        *,
        node_id: int,
        data_dir: str | os.PathLike[str],
        scheduler: Scheduler,
        call: Call,
        disconnect: Callable[[int], None],
        views_by_group: Mapping[int, PartitionView],
        bandwidth_bytes_per_s: float,
        chunk_bytes: int = CHUNK_BYTES,
        snapshot_idle_s: float = SNAPSHOT_IDLE_S,
    ) -> None:
        self.node_id = node_id
        root = Path(data_dir) / "catchup"
        self.stats = CatchupStats()
        self._views = views_by_group
        self._runtime = CatchupRuntime(scheduler)
        self._leader = CatchupLeader(
            node_id=node_id,
            root=root,
            runtime=self._runtime,
            views_by_group=views_by_group,
            stats=self.stats,
            snapshot_idle_s=snapshot_idle_s,
        )
        self._follower = CatchupFollower(
            node_id=node_id,
            root=root,
            runtime=self._runtime,
            call=call,
            disconnect=disconnect,
            views_by_group=views_by_group,
            stats=self.stats,
            bandwidth_bytes_per_s=bandwidth_bytes_per_s,
            chunk_bytes=chunk_bytes,
        )

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Clear stale exports and resume copies a previous run left unfinished (event loop)."""
        self._runtime.attached = loop
        self._leader.clear_exports()
        self._follower.resume()
        self._leader.start_expiry()

    async def stop(self) -> None:
        await self._runtime.stop()

    def progress(self) -> list[CatchupProgress]:
        """Copies into this node (follower side), one per partition, most recent state (event loop)."""
        return self._follower.progress()

    def leader_progress(self, group_id: int, catching_up: Collection[int]) -> dict[int, tuple[int, int]]:
        """The replicas of ``group_id`` copying from this node as leader, with (bytes copied, bytes total)
        (scheduler thread); see :meth:`CatchupLeader.leader_progress`."""
        return self._leader.leader_progress(group_id, catching_up)

    def leader_check(self, group: RaftGroup) -> None:
        """Housekeeping of one partition group led here (scheduler thread)."""
        self._leader.leader_check(group)

    async def serve(self, from_node: int, kind: int, body: bytes) -> tuple[int, bytes]:
        """A segment-chunk request from a peer catching up (event loop)."""
        return await self._leader.serve_chunk(from_node, body)

    def intercept(self, from_node: int, messages: list[tuple[int, raft.Message]]) -> list[tuple[int, raft.Message]]:
        """Hold back InstallSnapshot messages whose manifest lists segment files (follower), and route append
        rejections of groups led here to the leader's side on the scheduler thread; pass everything else."""
        passed: list[tuple[int, raft.Message]] | None = None
        for position, (group_id, message) in enumerate(messages):
            if message.type is raft.MessageType.APP_RESP and message.reject and group_id in self._views:
                # Decided on the scheduler thread: the view learns of a new leadership later than the core does.
                if passed is None:
                    passed = list(messages[:position])
                self._runtime.scheduler.submit(partial(self._leader.check_rejection, group_id, message))
                continue
            manifest = manifest_to_copy(message)
            if manifest is not None:
                if passed is None:
                    passed = list(messages[:position])
                self._follower.on_snapshot(group_id, message, manifest)
                continue
            if passed is not None:
                passed.append((group_id, message))
        return messages if passed is None else passed

    # ------------------------------------------------------------------------------------------------
    # The unit tests and benchmarks/catchup_bench.py drive one side directly through these names.

    @property
    def _loop(self) -> asyncio.AbstractEventLoop | None:
        return self._runtime.attached

    @_loop.setter
    def _loop(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self._runtime.attached = loop

    @property
    def _corrupt_left(self) -> int:
        return self._follower.corrupt_left

    @_corrupt_left.setter
    def _corrupt_left(self, chunks: int) -> None:
        self._follower.corrupt_left = chunks

    @property
    def _preparing(self) -> dict[int, set[int]]:
        return self._leader.preparing

    @property
    def _exports(self) -> dict[tuple[int, int, int], ExportedSegment]:
        return self._leader.exports

    async def _copy_file(self, job: _Job, ref: SegmentRef, receiver: SegmentFileReceiver) -> None:
        await self._follower.copy_file(job, ref, receiver)

    async def _exported(self, group_id: int, plog: SegmentedLog, base: int, last: int) -> ExportedSegment:
        return await self._leader.exported(group_id, plog, base, last)
