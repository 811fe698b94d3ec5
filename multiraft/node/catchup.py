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
status "copy", move progress) for exactly the replicas that still need the snapshot (:func:`snapshot_peers`,
:meth:`CatchupManager.leader_progress`); the rebalancer promotes none of them, and judges the others by lag.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import struct
import time
from collections.abc import Callable, Collection, Coroutine
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from multiraft import raft
from multiraft.errors import MultiraftError, UnavailableError
from multiraft.logging import get_logger
from multiraft.node.partition import PartitionMachine, PartitionView
from multiraft.node.raftlog import SegmentRef, SnapshotManifest, decode_manifest
from multiraft.node.scheduler import Group, Scheduler, loop_completion
from storage import (
    ChunkChecksumError,
    SegmentedLog,
    SegmentFileError,
    SegmentFileReceiver,
    StorageError,
    read_segment_file_chunk,
)

__all__ = [
    "CatchupManager",
    "CatchupProgress",
    "CatchupStats",
    "REQUEST_SEGMENT_CHUNK",
    "REQUEST_CATCHUP_STATUS",
    "CATCHUP_REQUEST_KINDS",
    "CHUNK_BYTES",
    "install_segments",
    "snapshot_peers",
]

log = get_logger(__name__)

REQUEST_SEGMENT_CHUNK = 20  # peer request kinds (multiraft.node.transport REQUEST frames)
REQUEST_CATCHUP_STATUS = 21
CATCHUP_REQUEST_KINDS = frozenset({REQUEST_SEGMENT_CHUNK, REQUEST_CATCHUP_STATUS})
CHUNK_BYTES = 1 << 20
_MAX_CHUNK_BYTES = 8 << 20
_MAX_HELD = 16
_SNAPSHOT_IDLE_S = 10.0
_CHUNK_TIMEOUT_S = 10.0
_MAX_ATTEMPTS = 30  # per chunk: transport failures and checksum mismatches together
_ATTEMPTS_PER_SOURCE = 3
_BACKOFF_START_S = 0.05
_BACKOFF_MAX_S = 2.0
_GROUP_WAIT_S = 30.0  # a replica created by metadata the node has not applied yet
_INSTALL_WAIT_S = 15.0
_POLL_S = 0.05
_EXPORT_IDLE_S = 600.0
_SENDING_IDLE_S = 30.0
_CHUNK_REPLY = struct.Struct("<IQ")  # crc32c of the chunk, size of the whole file
_MANIFEST_PREFIX = b'{"v": 1, "next_offset"'  # encode_manifest's first bytes: a cheap filter before parsing
_MESSAGE_FILE = "snapshot.msg"
_STATUS_OK = 0
_STATUS_ERROR = 1
_DEBUG_CORRUPT = "MULTIRAFT_DEBUG_CATCHUP_CORRUPT_CHUNKS"  # copier: corrupt the first N chunks it receives
_DEBUG_DROP = "MULTIRAFT_DEBUG_CATCHUP_DROP_EVERY"  # copier: drop the source connection during every Nth fetch

T = TypeVar("T")
Call = Callable[[int, int, bytes, float], Coroutine[Any, Any, tuple[int, bytes]]]


@dataclass
class CatchupProgress:
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

    def as_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "group_id": self.group_id,
            "snapshot_index": self.snapshot_index,
            "source": self.source,
            "state": self.state,
            "bytes_copied": self.bytes_copied,
            "bytes_total": self.bytes_total,
            "segments_done": self.segments_done,
            "segments_total": self.segments_total,
            "rate_bytes_s": round(self.rate_bytes_s, 1),
            "eta_s": round(self.eta_s, 2),
            "chunk_retries": self.chunk_retries,
            "reconnects": self.reconnects,
            "resumed_bytes": self.resumed_bytes,
        }


@dataclass
class CatchupStats:
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


@dataclass
class _Export:
    path: Path
    file_bytes: int
    crc: int
    used: float


@dataclass
class _Job:
    group_id: int
    message: raft.Message
    manifest: SnapshotManifest
    progress: CatchupProgress
    task: asyncio.Task[None] | None = None
    throttle_start: float = 0.0
    throttled_bytes: int = 0

    @property
    def index(self) -> int:
        assert self.message.snapshot is not None
        return self.message.snapshot.meta.index


def _kept_prefix(plog: SegmentedLog, files: tuple[SegmentRef, ...]) -> int:
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
    kept = _kept_prefix(plog, files)
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


class CatchupManager:
    """Both sides of catch-up for one node; created by the node, runs on its event loop and scheduler."""

    def __init__(
        self,
        *,
        node_id: int,
        data_dir: str | os.PathLike[str],
        scheduler: Scheduler,
        call: Call,
        disconnect: Callable[[int], None],
        views_by_group: dict[int, PartitionView],
        bandwidth_bytes_per_s: float,
        chunk_bytes: int = CHUNK_BYTES,
        snapshot_idle_s: float = _SNAPSHOT_IDLE_S,
    ) -> None:
        self.node_id = node_id
        self._root = Path(data_dir) / "catchup"
        self._scheduler = scheduler
        self._call = call
        self._disconnect = disconnect
        self._views = views_by_group
        self.bandwidth_bytes_per_s = bandwidth_bytes_per_s  # 0 = unlimited
        self.chunk_bytes = chunk_bytes
        self.snapshot_idle_s = snapshot_idle_s
        self.stats = CatchupStats()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._jobs: dict[int, _Job] = {}
        self._exports: dict[tuple[int, int, int], _Export] = {}
        self._export_lock = asyncio.Lock()
        # group -> the replicas its catch-up snapshot, being exported, is for (scheduler thread)
        self._preparing: dict[int, set[int]] = {}
        self._pending_since: dict[tuple[int, int], float] = {}  # (group, peer) in SNAPSHOT state since (scheduler)
        self._served_at: dict[tuple[int, int], float] = {}  # (group, peer) -> last chunk served (loop)
        self._sending: dict[int, dict[int, tuple[int, int, float]]] = {}  # group -> peer -> (copied, total, at)
        self._held: dict[int, list[raft.Message]] = {}  # group -> rejections held while preparing (scheduler)
        self._corrupt_left = int(os.environ.get(_DEBUG_CORRUPT, "0") or 0)
        self._drop_every = int(os.environ.get(_DEBUG_DROP, "0") or 0)
        self._fetches = 0

    # ------------------------------------------------------------------------------------------ lifecycle

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Clear stale exports and resume copies a previous run left unfinished (event loop)."""
        self._loop = loop
        shutil.rmtree(self._root / "export", ignore_errors=True)
        imports = self._root / "import"
        for directory in sorted(imports.iterdir()) if imports.is_dir() else []:
            message_file = directory / _MESSAGE_FILE
            try:
                message = raft.decode_message(message_file.read_bytes())
                group_id = int(directory.name)
            except (OSError, ValueError, raft.DecodeError) as exc:
                log.warning("discarding an unreadable catch-up copy", directory=str(directory), error=str(exc))
                shutil.rmtree(directory, ignore_errors=True)
                continue
            if message.snapshot is not None:
                log.info("resuming a catch-up copy", group=group_id, snapshot_index=message.snapshot.meta.index)
                self._on_snapshot(group_id, message, decode_manifest(message.snapshot.data))
        self._spawn(self._expire_exports())

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def progress(self) -> list[CatchupProgress]:
        """Copies into this node (follower side), one per partition, most recent state (event loop)."""
        return [job.progress for job in self._jobs.values()]

    def leader_progress(self, group_id: int, catching_up: Collection[int]) -> dict[int, tuple[int, int]]:
        """The replicas of ``group_id`` that are catching up from this node (as leader) by a snapshot, each with
        (bytes copied, bytes total) as its copier reported them in its latest chunk request, or (0, 0) before
        its first one or when that is older than ``_SENDING_IDLE_S`` (scheduler thread).

        Listed: ``catching_up`` (from :func:`snapshot_peers`: the Raft core has a snapshot in flight to them or
        they lack compacted entries) and the replicas a catch-up snapshot is being prepared for. Nobody else,
        however recent their last fetch: once the core has the snapshot acknowledged the copy is over, and the
        rebalancer judges the replica by its lag (it promotes no learner that is listed here).
        """
        now = time.monotonic()
        fetched = self._sending.get(group_id, {})  # replaced on the event loop, never mutated: safe to read here
        peers = set(catching_up) | self._preparing.get(group_id, set())
        peers.discard(self.node_id)
        progress: dict[int, tuple[int, int]] = {}
        for peer in sorted(peers):
            copied, total, at = fetched.get(peer, (0, 0, 0.0))
            progress[peer] = (copied, total) if now - at < _SENDING_IDLE_S else (0, 0)
        return progress

    def status_json(self) -> dict[str, Any]:
        return {
            "copies": [p.as_json() for p in self.progress()],
            "stats": self.stats.__dict__.copy(),
        }

    def _spawn(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        assert self._loop is not None
        task = self._loop.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _on_scheduler(self, work: Callable[[], T]) -> T:
        """Run ``work`` on the scheduler thread and wait for its result."""
        assert self._loop is not None
        future: asyncio.Future[T] = self._loop.create_future()
        settle = loop_completion(self._loop, future)

        def run() -> None:
            try:
                result = work()
            except BaseException as exc:  # handed back to the awaiting coroutine, which decides
                settle(None, exc)
                return
            settle(result, None)

        self._scheduler.submit(run)
        return await future

    # ------------------------------------------------------------------------------------ leader side

    def leader_check(self, group: Group) -> None:
        """Housekeeping of one partition group (scheduler thread): re-send idle catch-up snapshots, and make
        one when a replica is far behind (see the module docstring)."""
        machine = group.machine
        if not isinstance(machine, PartitionMachine):
            return
        group_id = group.group_id
        if group.raw.role is not raft.Role.LEADER:
            return
        status = group.raw.status()
        now = time.monotonic()
        pending = False
        for peer, progress in status.progress.items():
            key = (group_id, peer)
            if peer == self.node_id or not progress.pending_snapshot:
                self._pending_since.pop(key, None)
                continue
            pending = True
            since = self._pending_since.setdefault(key, now)
            if now - max(since, self._served_at.get(key, 0.0)) > self.snapshot_idle_s:
                log.info("catch-up snapshot idle; sending it again", group=group_id, peer=peer)
                group.raw.report_snapshot(peer, False)
                self._scheduler.touch(group)
                self._pending_since.pop(key, None)
                self.stats.snapshots_resent += 1
        if pending or group_id in self._preparing:
            return  # one catch-up snapshot at a time: moving it under a copy would strand the copier
        newest_base = self._catchup_base(group, machine)
        if newest_base is None:
            return
        far = [
            peer
            for peer, progress in status.progress.items()
            # Only replicas that answer: exporting for a dead one would keep a copy of the log on disk for nothing.
            if peer != self.node_id
            and progress.recent_active
            and progress.next <= newest_base
            and progress.match < newest_base
        ]
        if far:
            self._start_prepare(group, machine, far)

    def _catchup_base(self, group: Group, machine: PartitionMachine) -> int | None:
        """First index of the newest sealed, applied segment not yet behind a snapshot: a replica that needs
        it or anything before it is far behind. None if there is no such segment."""
        applied = group.storage.applied_index()
        eligible = [s for s in machine.log.segments()[:-1] if s.entry_count and s.last_index <= applied]
        if not eligible or eligible[-1].last_index <= group.storage.snapshot().meta.index:
            return None
        return eligible[-1].base_index

    def _start_prepare(self, group: Group, machine: PartitionMachine, peers: list[int]) -> None:
        plog = machine.log
        applied = group.storage.applied_index()
        eligible = [s for s in plog.segments()[:-1] if s.entry_count and s.last_index <= applied]
        start = plog.compaction_point()
        wanted = [(s.base_index, s.last_index, s.base_offset, s.next_offset, plog.term(s.last_index)) for s in eligible]
        group_id = group.group_id
        self._preparing[group_id] = set(peers)
        log.info(
            "replica far behind: preparing a catch-up snapshot",
            group=group_id,
            peers=peers,
            snapshot_index=wanted[-1][1],
            segments=len(wanted),
        )
        assert self._loop is not None
        self._loop.call_soon_threadsafe(lambda: self._spawn(self._prepare(group_id, plog, start, wanted)))

    def _check_rejection(self, group_id: int, message: raft.Message) -> None:
        """A replica rejected an append (scheduler thread). If its hint shows it far behind, hold the rejection
        until the catch-up snapshot exists: the core then answers it with InstallSnapshot instead of streaming
        every entry (it would start streaming at once, before any periodic check could step in)."""
        group = self._scheduler.groups.get(group_id)
        machine = group.machine if group is not None else None
        if group is None or group.raw.role is not raft.Role.LEADER or not isinstance(machine, PartitionMachine):
            self._scheduler.deliver([(group_id, message)])
            return
        if group_id in self._preparing:
            self._preparing[group_id].add(message.sender)
            held = self._held.setdefault(group_id, [])
            held[:] = [*held[-(_MAX_HELD - 1) :], message]
            return
        newest_base = self._catchup_base(group, machine)
        if newest_base is not None and message.reject_hint + 1 <= newest_base:
            self._held[group_id] = [message]
            self._start_prepare(group, machine, [message.sender])
            return
        self._scheduler.deliver([(group_id, message)])

    def _release_held(self, group_id: int) -> None:
        """Hand the core the rejections held while a catch-up snapshot was made (scheduler thread)."""
        held = self._held.pop(group_id, [])
        if held:
            self._scheduler.deliver([(group_id, message) for message in held])

    async def _prepare(
        self, group_id: int, plog: SegmentedLog, start: tuple[int, int], wanted: list[tuple[int, int, int, int, int]]
    ) -> None:
        try:
            refs = []
            for base, last, base_offset, next_offset, last_term in wanted:
                export = await self._exported(group_id, plog, base, last)
                refs.append(SegmentRef(base, last, base_offset, next_offset, last_term, export.file_bytes, export.crc))
        except Exception as exc:  # whatever failed, held rejections must be released: catch everything here
            log.warning("catch-up export failed; trying again later", group=group_id, error=repr(exc))
            self._scheduler.submit(partial(self._make_snapshot, group_id, (0, 0), ()))
            return
        self._scheduler.submit(partial(self._make_snapshot, group_id, start, tuple(refs)))

    def _make_snapshot(self, group_id: int, start: tuple[int, int], refs: tuple[SegmentRef, ...]) -> None:
        """Scheduler thread: make the snapshot if nothing changed meanwhile; always release held rejections."""
        try:
            self._make_snapshot_now(group_id, start, refs)
        finally:
            self._preparing.pop(group_id, None)
            self._release_held(group_id)

    def _make_snapshot_now(self, group_id: int, start: tuple[int, int], refs: tuple[SegmentRef, ...]) -> None:
        if not refs:
            return
        group = self._scheduler.groups.get(group_id)
        if group is None or group.raw.role is not raft.Role.LEADER or not isinstance(group.machine, PartitionMachine):
            return
        machine, plog = group.machine, group.machine.log
        sealed = {(s.base_index, s.last_index) for s in plog.segments()[:-1]}
        if plog.compaction_point() != start or any((r.base_index, r.last_index) not in sealed for r in refs):
            return  # retention moved the log start meanwhile: the next check starts over
        index = refs[-1].last_index
        if index <= group.storage.snapshot().meta.index or index > group.storage.applied_index():
            return
        producers = machine.save_producers()  # covers the index: restarts replay only entries after it
        manifest = SnapshotManifest(refs[-1].next_offset, producers=producers, files=refs, start=start)
        group.storage.snapshot_for_catchup(index, manifest)
        self._scheduler.touch(group)
        self.stats.snapshots_prepared += 1
        log.info(
            "catch-up snapshot made",
            group=group_id,
            snapshot_index=index,
            segments=len(refs),
            bytes=sum(r.file_bytes for r in refs),
        )

    async def _exported(self, group_id: int, plog: SegmentedLog, base: int, last: int) -> _Export:
        """The file of a sealed segment, exported once (worker thread) and kept while copies use it."""
        key = (group_id, base, last)
        async with self._export_lock:
            found = self._exports.get(key)
            if found is not None and found.path.exists():
                found.used = time.monotonic()
                return found
            path = self._root / "export" / str(group_id) / f"{base}-{last}.seg"
            path.parent.mkdir(parents=True, exist_ok=True)
            assert self._loop is not None
            info = await self._loop.run_in_executor(None, plog.export_segment, base, path)
            if info.last_index != last:
                path.unlink(missing_ok=True)
                raise SegmentFileError(f"segment {base} of {plog.name} ends at {info.last_index}, not {last}")
            export = _Export(path, info.file_bytes, info.crc, time.monotonic())
            self._exports[key] = export
            self.stats.segments_exported += 1
            return export

    async def _expire_exports(self) -> None:
        while True:
            await asyncio.sleep(60)
            now = time.monotonic()
            for key, export in list(self._exports.items()):
                if now - export.used > _EXPORT_IDLE_S:
                    del self._exports[key]
                    export.path.unlink(missing_ok=True)

    async def serve(self, from_node: int, kind: int, body: bytes) -> tuple[int, bytes]:
        """A peer request of one of ``CATCHUP_REQUEST_KINDS`` (event loop)."""
        if kind == REQUEST_CATCHUP_STATUS:
            return _STATUS_OK, json.dumps(self.status_json()).encode()
        try:
            return _STATUS_OK, await self._serve_chunk(from_node, json.loads(body))
        except (MultiraftError, StorageError, OSError, ValueError, KeyError, TypeError) as exc:
            return _STATUS_ERROR, str(exc).encode()

    async def _serve_chunk(self, from_node: int, request: dict[str, Any]) -> bytes:
        group_id, base, last, crc = int(request["g"]), int(request["b"]), int(request["l"]), int(request["c"])
        offset, length = int(request["o"]), min(int(request["n"]), _MAX_CHUNK_BYTES)
        view = self._views.get(group_id)
        if view is None:
            raise UnavailableError(f"node {self.node_id} holds no replica of group {group_id}")
        export = await self._exported(group_id, view.log, base, last)
        if export.crc != crc:
            raise UnavailableError(f"segment {base}..{last} here has crc {export.crc:#010x}, not {crc:#010x}")
        assert self._loop is not None
        data, chunk_crc = await self._loop.run_in_executor(None, read_segment_file_chunk, export.path, offset, length)
        now = time.monotonic()
        self._served_at[(group_id, from_node)] = now
        copied, total = request.get("p", [0, 0])
        peers = dict(self._sending.get(group_id, {}))
        peers[from_node] = (int(copied) + len(data), int(total), now)
        self._sending[group_id] = peers
        self.stats.chunks_served += 1
        self.stats.bytes_served += len(data)
        return _CHUNK_REPLY.pack(chunk_crc, export.file_bytes) + data

    # ---------------------------------------------------------------------------------- follower side

    def intercept(self, from_node: int, messages: list[tuple[int, raft.Message]]) -> list[tuple[int, raft.Message]]:
        """Hold back InstallSnapshot messages whose manifest lists segment files (follower), and route append
        rejections of groups led here through :meth:`_check_rejection` (leader); pass everything else."""
        passed: list[tuple[int, raft.Message]] | None = None
        for position, (group_id, message) in enumerate(messages):
            if message.type is raft.MessageType.APP_RESP and message.reject and group_id in self._views:
                # Decided on the scheduler thread: the view learns of a new leadership later than the core does.
                if passed is None:
                    passed = list(messages[:position])
                self._scheduler.submit(partial(self._check_rejection, group_id, message))
                continue
            snapshot = message.snapshot
            if (
                message.type is raft.MessageType.SNAP
                and snapshot is not None
                and bytes(snapshot.data[: len(_MANIFEST_PREFIX)]) == _MANIFEST_PREFIX
            ):
                manifest = decode_manifest(bytes(snapshot.data))
                if manifest.files:
                    if passed is None:
                        passed = list(messages[:position])
                    self._on_snapshot(group_id, message, manifest)
                    continue
            if passed is not None:
                passed.append((group_id, message))
        return messages if passed is None else passed

    def _on_snapshot(self, group_id: int, message: raft.Message, manifest: SnapshotManifest) -> None:
        assert message.snapshot is not None
        index = message.snapshot.meta.index
        job = self._jobs.get(group_id)
        if job is not None and job.task is not None and not job.task.done():
            if index < job.index or (index == job.index and message.term <= job.message.term):
                return  # the same snapshot again (the leader re-sent it), or an older one
            if index == job.index:
                job.message = message  # a new leader sent the same snapshot: step its message when done
                self._save_message(job)
                return
            job.task.cancel()
        view = self._views.get(group_id)
        progress = CatchupProgress(
            view.topic if view is not None else "",
            view.partition if view is not None else -1,
            group_id,
            index,
            message.sender,
        )
        job = _Job(group_id, message, manifest, progress)
        self._jobs[group_id] = job
        if view is not None:
            view.catchup = progress
        job.task = self._spawn(self._run(job))

    def _job_dir(self, group_id: int) -> Path:
        return self._root / "import" / str(group_id)

    def _save_message(self, job: _Job) -> None:
        directory = self._job_dir(job.group_id)
        directory.mkdir(parents=True, exist_ok=True)
        temporary = directory / (_MESSAGE_FILE + ".tmp")
        temporary.write_bytes(raft.encode_message(job.message))
        temporary.replace(directory / _MESSAGE_FILE)

    async def _run(self, job: _Job) -> None:
        progress = job.progress
        try:
            await self._copy_and_install(job)
        except asyncio.CancelledError:
            raise
        except (MultiraftError, StorageError, OSError, raft.RaftError) as exc:
            progress.state, progress.finished = "failed", time.monotonic()
            self.stats.failures += 1
            if job.group_id not in self._scheduler.groups:  # the replica was removed: nothing to resume
                shutil.rmtree(self._job_dir(job.group_id), ignore_errors=True)
            log.warning(
                "catch-up copy failed; the leader will send its snapshot again",
                group=job.group_id,
                snapshot_index=job.index,
                error=str(exc),
                bytes_copied=progress.bytes_copied,
            )

    async def _copy_and_install(self, job: _Job) -> None:
        progress, group_id, manifest = job.progress, job.group_id, job.manifest
        self._save_message(job)
        kept = await self._local_prefix(job)
        view = self._views.get(group_id)
        if view is not None:  # a copy resumed at start-up began before the partition's view existed
            progress.topic, progress.partition = view.topic, view.partition
            view.catchup = progress
        if kept is None:
            log.info("catch-up not needed: the replica has the snapshot's entries", group=group_id)
            await self._on_scheduler(lambda: self._scheduler.deliver([(group_id, job.message)]))
            self._finish(job, "done")
            return
        needed = manifest.files[kept:]
        progress.bytes_total = sum(ref.file_bytes for ref in needed)
        progress.segments_total = len(needed)
        log.info(
            "catch-up copy started",
            group=group_id,
            snapshot_index=job.index,
            source=job.message.sender,
            segments=len(needed),
            kept_segments=kept,
            bytes_total=progress.bytes_total,
        )
        assert self._loop is not None
        job.throttle_start = self._loop.time()
        staged: dict[tuple[int, int], Path] = {}
        directory = self._job_dir(group_id)
        for ref in needed:
            path = directory / f"{ref.base_index}-{ref.last_index}-{ref.crc:08x}.seg"
            receiver = SegmentFileReceiver(path, ref.file_bytes, ref.crc)
            progress.bytes_copied += receiver.received_bytes
            progress.resumed_bytes += receiver.resumed_from
            if receiver.resumed_from:
                log.info("resuming a segment copy", group=group_id, segment=ref.base_index, at=receiver.resumed_from)
            await self._copy_file(job, ref, receiver)
            staged[(ref.base_index, ref.last_index)] = path
            progress.segments_done += 1
            self.stats.segments_copied += 1
        progress.state = "installing"
        await self._install(job, staged)

    async def _local_prefix(self, job: _Job) -> int | None:
        """How many listed segments the local log has already (None: it needs no copy at all)."""
        assert self._loop is not None
        deadline = self._loop.time() + _GROUP_WAIT_S
        index, term = job.index, job.message.snapshot.meta.term if job.message.snapshot else 0

        def look() -> tuple[bool, int | None]:
            group = self._scheduler.groups.get(job.group_id)
            if group is None or not isinstance(group.machine, PartitionMachine):
                return False, None
            if group.raw.status().commit >= index or _term_or_none(group, index) == term:
                return True, None
            return True, _kept_prefix(group.machine.log, job.manifest.files)

        while True:
            exists, kept = await self._on_scheduler(look)
            if exists:
                return kept
            if self._loop.time() > deadline:
                raise UnavailableError(f"group {job.group_id} does not exist on node {self.node_id}")
            await asyncio.sleep(0.2)

    async def _copy_file(self, job: _Job, ref: SegmentRef, receiver: SegmentFileReceiver) -> None:
        assert self._loop is not None
        progress = job.progress
        for _ in range(2):  # a second pass only if the finished file fails its whole-file check
            attempts = 0
            while not receiver.complete:
                offset = receiver.received_bytes
                length = min(self.chunk_bytes, ref.file_bytes - offset)
                data, crc = await self._fetch(job, ref, offset, length)
                if self._corrupt_left > 0 and data:
                    self._corrupt_left -= 1
                    data = bytes([data[0] ^ 0xFF]) + data[1:]  # diagnostics: exercise the retry path
                try:
                    await self._loop.run_in_executor(None, receiver.write_chunk, offset, data, crc)
                except ChunkChecksumError as exc:
                    attempts += 1
                    progress.chunk_retries += 1
                    self.stats.chunk_retries += 1
                    log.warning(
                        "segment chunk failed its checksum; fetching it again", group=job.group_id, error=str(exc)
                    )
                    if attempts >= _MAX_ATTEMPTS:
                        raise
                    continue
                attempts = 0
                progress.bytes_copied += len(data)
                self.stats.bytes_copied += len(data)
                await self._throttle(job, len(data))
            try:
                await self._loop.run_in_executor(None, receiver.finish)
            except SegmentFileError as exc:
                log.warning("copied segment file is bad; copying it again", group=job.group_id, error=str(exc))
                progress.bytes_copied -= ref.file_bytes
                continue
            log.info(
                "segment copied",
                group=job.group_id,
                segment=ref.base_index,
                last_index=ref.last_index,
                bytes=ref.file_bytes,
                done=progress.segments_done + 1,
                of=progress.segments_total,
            )
            return
        raise SegmentFileError(f"segment {ref.base_index}..{ref.last_index} failed its checksum twice")

    async def _fetch(self, job: _Job, ref: SegmentRef, offset: int, length: int) -> tuple[bytes, int]:
        """One chunk, from the snapshot's sender first, then the partition's other replicas."""
        assert self._loop is not None
        view = self._views.get(job.group_id)
        others = [n for n in (view.replicas if view is not None else ()) if n not in (self.node_id, job.message.sender)]
        sources = [job.message.sender, *others]
        progress = job.progress
        request: dict[str, Any] = {
            "g": job.group_id,
            "b": ref.base_index,
            "l": ref.last_index,
            "c": ref.crc,
            "o": offset,
            "n": length,
        }
        request["p"] = [progress.bytes_copied, progress.bytes_total]
        body = json.dumps(request).encode()
        delay = _BACKOFF_START_S
        error = "no attempt"
        for attempt in range(_MAX_ATTEMPTS):
            source = sources[(attempt // _ATTEMPTS_PER_SOURCE) % len(sources)]
            self._fetches += 1
            try:
                call = self._spawn(self._call(source, REQUEST_SEGMENT_CHUNK, body, _CHUNK_TIMEOUT_S))
                if self._drop_every and self._fetches % self._drop_every == 0:
                    await asyncio.sleep(0)
                    self._disconnect(source)  # diagnostics: the connection drops with the request in flight
                status, answer = await call
            except (ConnectionError, TimeoutError) as exc:
                error = f"node {source}: {exc!r}"
                progress.reconnects += 1
                self.stats.reconnects += 1
                log.info("segment source unreachable; retrying", group=job.group_id, source=source, error=repr(exc))
            else:
                if status == _STATUS_OK and len(answer) >= _CHUNK_REPLY.size:
                    crc, file_bytes = _CHUNK_REPLY.unpack_from(answer)
                    if file_bytes == ref.file_bytes:
                        return answer[_CHUNK_REPLY.size :], crc
                    error = f"node {source} has a segment file of {file_bytes} bytes, not {ref.file_bytes}"
                else:
                    error = f"node {source}: {answer[:200].decode(errors='replace')}"
                log.info("segment source refused a chunk", group=job.group_id, source=source, error=error)
            await asyncio.sleep(delay)
            delay = min(delay * 2, _BACKOFF_MAX_S)
        raise UnavailableError(f"chunk at byte {offset} of segment {ref.base_index}: {error}")

    async def _throttle(self, job: _Job, size: int) -> None:
        """Keep the copy's average rate under the budget (a token bucket with no burst beyond one chunk)."""
        rate = self.bandwidth_bytes_per_s
        if rate <= 0:
            return
        assert self._loop is not None
        job.throttled_bytes += size
        delay = job.throttle_start + job.throttled_bytes / rate - self._loop.time()
        if delay > 0:
            await asyncio.sleep(delay)

    async def _install(self, job: _Job, staged: dict[tuple[int, int], Path]) -> None:
        """Step the held snapshot into the core with the files ready; wait until the snapshot is durable."""
        assert self._loop is not None
        group_id, index = job.group_id, job.index
        installer = partial(install_segments, staged=staged)

        def step(message: raft.Message) -> str:
            group = self._scheduler.groups.get(group_id)
            if group is None:
                return "missing"
            if group.storage.snapshot().meta.index >= index or group.raw.status().commit >= index:
                return "installed"
            assert isinstance(group.machine, PartitionMachine)
            missing = [r for r in job.manifest.files[_kept_prefix(group.machine.log, job.manifest.files) :]
                       if (r.base_index, r.last_index) not in staged]  # fmt: skip
            if missing:
                return "missing"
            group.storage.segment_installer = (index, installer)
            self._scheduler.deliver([(group_id, message)])
            return "stepped"

        def installed() -> bool:
            group = self._scheduler.groups.get(group_id)
            return group is not None and (
                group.storage.snapshot().meta.index >= index or group.raw.status().commit >= index
            )

        deadline = self._loop.time() + _INSTALL_WAIT_S
        delivered: raft.Message | None = None
        while self._loop.time() < deadline:
            if delivered is not job.message:
                delivered = job.message
                outcome = await self._on_scheduler(partial(step, delivered))
                if outcome == "installed":
                    break
                if outcome == "missing":
                    raise UnavailableError(f"group {group_id} cannot take the copied segments")
            elif await self._on_scheduler(installed):
                break
            await asyncio.sleep(_POLL_S)
        else:
            await self._on_scheduler(partial(_clear_installer, self._scheduler, group_id, index))
            raise UnavailableError(f"the snapshot at {index} was not installed in {_INSTALL_WAIT_S:g}s")
        self._finish(job, "done")
        self.stats.installs += 1
        progress = job.progress
        log.info(
            "catch-up installed",
            group=group_id,
            topic=progress.topic,
            partition=progress.partition,
            snapshot_index=index,
            bytes_copied=progress.bytes_copied,
            resumed_bytes=progress.resumed_bytes,
            chunk_retries=progress.chunk_retries,
            reconnects=progress.reconnects,
            seconds=round(time.monotonic() - progress.started, 3),
            rate_bytes_s=round(progress.rate_bytes_s),
        )

    def _finish(self, job: _Job, state: str) -> None:
        job.progress.state, job.progress.finished = state, time.monotonic()
        shutil.rmtree(self._job_dir(job.group_id), ignore_errors=True)
        view = self._views.get(job.group_id)
        if view is not None and view.catchup is job.progress:
            view.catchup = None


def snapshot_peers(status: raft.Status, first_index: int) -> set[int]:
    """The replicas a leader (``status`` of its core, ``first_index`` of its Raft storage) can bring up to date
    only with a snapshot: one is in flight to them (Raft's SNAPSHOT state), or they lack entries its Raft log
    has compacted (between a snapshot reported failed and the core sending it again)."""
    return {
        peer
        for peer, progress in status.progress.items()
        if peer != status.id and (progress.pending_snapshot or progress.match + 1 < first_index)
    }


def _term_or_none(group: Group, index: int) -> int | None:
    try:
        return group.storage.term(index)
    except raft.RaftError:
        return None


def _clear_installer(scheduler: Scheduler, group_id: int, index: int) -> None:
    group = scheduler.groups.get(group_id)
    if (
        group is not None
        and group.storage.segment_installer is not None
        and group.storage.segment_installer[0] == index
    ):
        group.storage.segment_installer = None
