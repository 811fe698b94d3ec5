"""What both sides of catch-up share: progress and counters, the peer wire format of a chunk, adopting copied
files into a log, which replicas need a snapshot, and where the work runs (event loop, scheduler thread)."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from multiraft.node.peer.messages import (
    STATUS_ERROR,
    STATUS_OK,
    RequestKind,
    decode_chunk_request,
    encode_chunk_request,
)
from multiraft.node.replicas.raft_log import SegmentRef, SnapshotManifest
from multiraft.node.scheduler.scheduler import Scheduler
from multiraft.node.threads import LoopOwned, SchedulerHandoff
from multiraft.node.vocabulary.catchup import SegmentChunkRequest
from storage import SegmentedLog, SegmentFileError

__all__ = [
    "REQUEST_SEGMENT_CHUNK",
    "CATCHUP_REQUEST_KINDS",
    "CHUNK_BYTES",
    "STATUS_OK",
    "STATUS_ERROR",
    "Call",
    "CatchupProgress",
    "CatchupStats",
    "ChunkRequest",
    "encode_chunk_request",
    "decode_chunk_request",
    "encode_chunk_reply",
    "decode_chunk_reply",
    "kept_prefix",
    "install_segments",
    "CatchupRuntime",
]

REQUEST_SEGMENT_CHUNK = RequestKind.SEGMENT_CHUNK  # peer request kinds (multiraft.node.peer.transport REQUEST frames)
CATCHUP_REQUEST_KINDS = frozenset({REQUEST_SEGMENT_CHUNK})
CHUNK_BYTES = 1 << 20
_CHUNK_REPLY = struct.Struct("<IQ")  # crc32c of the chunk, size of the whole file

T = TypeVar("T")
Call = Callable[[int, int, bytes, float], Coroutine[Any, Any, tuple[int, bytes]]]


@dataclass
class CatchupProgress(LoopOwned):
    """One partition replica copying segments here (follower side); read on the event loop."""

    topic: str
    partition: int
    group_id: int
    snapshot_index: int
    source: int
    bytes_total: int = 0
    bytes_copied: int = 0  # including bytes a previous run had verified (resumed_bytes)
    resumed_bytes: int = 0
    segments_total: int = 0
    segments_done: int = 0
    chunk_retries: int = 0  # chunks fetched again after a checksum mismatch
    reconnects: int = 0  # fetches retried after the source connection failed
    state: str = "copying"  # copying, installing, done, failed
    started: float = field(default_factory=time.monotonic)
    finished: float = 0.0

    @property
    def rate_bytes_s(self) -> float:
        """Copy rate of this run (bytes resumed from an earlier run do not count)."""
        elapsed = (self.finished or time.monotonic()) - self.started
        return (self.bytes_copied - self.resumed_bytes) / elapsed if elapsed > 0 else 0.0

    @property
    def eta_s(self) -> float:
        """Seconds left at the current rate (0 when done, -1 when unknown)."""
        remaining = self.bytes_total - self.bytes_copied
        if remaining <= 0:
            return 0.0
        rate = self.rate_bytes_s
        return remaining / rate if rate > 0 else -1.0


@dataclass
class CatchupStats(LoopOwned):
    """Counters of one node, both roles."""

    snapshots_prepared: int = 0
    segments_exported: int = 0
    chunks_served: int = 0
    bytes_served: int = 0
    segments_copied: int = 0
    bytes_copied: int = 0
    chunk_retries: int = 0
    reconnects: int = 0
    installs: int = 0
    failures: int = 0
    snapshots_resent: int = 0


# ------------------------------------------------------------------------------ the chunk on the wire
# The request is a typed peer message; the reply is the chunk behind a small binary head.


ChunkRequest = SegmentChunkRequest  # typed, binary: multiraft.node.peer.messages


def encode_chunk_reply(chunk_crc: int, file_bytes: int, data: bytes) -> bytes:
    return _CHUNK_REPLY.pack(chunk_crc, file_bytes) + data


def decode_chunk_reply(answer: bytes) -> tuple[int, int, bytes] | None:
    """(crc32c of the chunk, size of the whole file, the chunk), or None if ``answer`` is too short."""
    if len(answer) < _CHUNK_REPLY.size:
        return None
    chunk_crc, file_bytes = _CHUNK_REPLY.unpack_from(answer)
    return chunk_crc, file_bytes, answer[_CHUNK_REPLY.size :]


# ------------------------------------------------------------------------------ logs and Raft progress


def kept_prefix(plog: SegmentedLog, files: tuple[SegmentRef, ...]) -> int:
    """How many of ``files`` (from the first) this log already holds: same index range, same last term (by
    Raft's log matching, the same entries)."""
    ranges = {(s.base_index, s.last_index) for s in plog.segments() if s.entry_count}
    kept = 0
    for ref in files:
        if (ref.base_index, ref.last_index) not in ranges or plog.term(ref.last_index) != ref.last_term:
            break
        kept += 1
    return kept


def install_segments(plog: SegmentedLog, manifest: SnapshotManifest, *, staged: dict[tuple[int, int], Path]) -> None:
    """Make ``plog`` hold exactly the manifest's files (scheduler thread, inside the snapshot's transaction).

    Segments the log already holds are kept; everything after them is replaced by the copied files, which
    are adopted as stored (each entry's CRC, index continuity and offsets are checked, nothing re-encoded).
    """
    files = manifest.files
    kept = kept_prefix(plog, files)
    if kept:
        if plog.first_index() < files[0].base_index:
            plog.drop_before(files[0].base_index)  # retention the replica missed
        plog.truncate_suffix(files[kept - 1].last_index + 1)
    else:
        plog.reset(manifest.start[0], manifest.start[1], files[0].base_offset)
    for ref in files[kept:]:
        path = staged.get((ref.base_index, ref.last_index))
        if path is None:
            raise SegmentFileError(f"segment {ref.base_index}..{ref.last_index} of {plog.name} was not copied")
        plog.import_segment(path)


# ------------------------------------------------------------------------------ where the work runs


class CatchupRuntime(LoopOwned):
    """Where catch-up work runs: tasks on the node's event loop (all tracked, so one ``stop`` ends both
    sides' work) and closures handed to the scheduler thread."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.attached: asyncio.AbstractEventLoop | None = None  # set by start (tests set it directly)
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self.attached is not None
        return self.attached

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = self.loop.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def on_scheduler(self, work: Callable[[], T]) -> T:
        """Run ``work`` on the scheduler thread and wait for its result."""
        return await SchedulerHandoff(self.scheduler, self.loop).run(work)
