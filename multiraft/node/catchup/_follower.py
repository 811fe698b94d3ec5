"""The follower's side of catch-up: holding back an InstallSnapshot whose manifest lists segment files, copying
them in verified chunks (retries, other sources, backoff, bandwidth budget, resumption after a restart), and
stepping the snapshot into the core once they are in place (policy in :mod:`multiraft.node.catchup`)."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from multiraft import raft
from multiraft.errors import MultiraftError, UnavailableError
from multiraft.logging import get_logger
from multiraft.node.peer.messages import decode_error
from multiraft.node.replicas.partition import PartitionMachine, PartitionView
from multiraft.node.replicas.raft_log import SegmentRef, SnapshotManifest, decode_manifest
from multiraft.node.scheduler.scheduler import RaftGroup, Scheduler
from multiraft.node.threads import LoopOwned
from storage import ChunkChecksumError, SegmentFileError, SegmentFileReceiver, StorageError

from ._shared import (
    REQUEST_SEGMENT_CHUNK,
    STATUS_OK,
    Call,
    CatchupProgress,
    CatchupRuntime,
    CatchupStats,
    ChunkRequest,
    decode_chunk_reply,
    encode_chunk_request,
    install_segments,
    kept_prefix,
)

__all__ = ["CatchupFollower", "manifest_to_copy"]

log = get_logger(__name__)

_CHUNK_TIMEOUT_S = 10.0
_MAX_ATTEMPTS = 30  # per chunk: transport failures and checksum mismatches together
_ATTEMPTS_PER_SOURCE = 3
_BACKOFF_START_S = 0.05
_BACKOFF_MAX_S = 2.0
_GROUP_WAIT_S = 30.0  # a replica created by metadata the node has not applied yet
_INSTALL_WAIT_S = 15.0
_POLL_S = 0.05
_MANIFEST_PREFIX = b'{"v": 1, "next_offset"'  # encode_manifest's first bytes: a cheap filter before parsing
_MESSAGE_FILE = "snapshot.msg"
_DEBUG_CORRUPT = "MULTIRAFT_DEBUG_CATCHUP_CORRUPT_CHUNKS"  # copier: corrupt the first N chunks it receives
_DEBUG_DROP = "MULTIRAFT_DEBUG_CATCHUP_DROP_EVERY"  # copier: drop the source connection during every Nth fetch


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


def manifest_to_copy(message: raft.Message) -> SnapshotManifest | None:
    """The manifest of an InstallSnapshot that lists segment files to copy first; None for anything else."""
    snapshot = message.snapshot
    if (
        message.type is not raft.MessageType.SNAP
        or snapshot is None
        or bytes(snapshot.data[: len(_MANIFEST_PREFIX)]) != _MANIFEST_PREFIX
    ):
        return None
    manifest = decode_manifest(bytes(snapshot.data))
    return manifest if manifest.files else None


class CatchupFollower(LoopOwned):
    """Catch-up as a replica: one copy job per partition group, each copying the files its held snapshot
    lists and then installing it; jobs survive a restart in ``<data_dir>/catchup/import/<group>/``."""

    def __init__(
        self,
        *,
        node_id: int,
        root: Path,
        runtime: CatchupRuntime,
        call: Call,
        disconnect: Callable[[int], None],
        views_by_group: Mapping[int, PartitionView],
        stats: CatchupStats,
        bandwidth_bytes_per_s: float,
        chunk_bytes: int,
    ) -> None:
        self.node_id = node_id
        self._import_root = root / "import"
        self._runtime = runtime
        self._scheduler: Scheduler = runtime.scheduler
        self._call = call
        self._disconnect = disconnect
        self._views = views_by_group
        self._stats = stats
        self.bandwidth_bytes_per_s = bandwidth_bytes_per_s  # 0 = unlimited
        self.chunk_bytes = chunk_bytes
        self._jobs: dict[int, _Job] = {}
        self.corrupt_left = int(os.environ.get(_DEBUG_CORRUPT, "0") or 0)
        self._drop_every = int(os.environ.get(_DEBUG_DROP, "0") or 0)
        self._fetches = 0

    def progress(self) -> list[CatchupProgress]:
        """Copies into this node, one per partition, most recent state (event loop)."""
        return [job.progress for job in self._jobs.values()]

    def resume(self) -> None:
        """Resume the copies a previous run left unfinished (event loop, at start)."""
        imports = self._import_root
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
                self.on_snapshot(group_id, message, decode_manifest(message.snapshot.data))

    def on_snapshot(self, group_id: int, message: raft.Message, manifest: SnapshotManifest) -> None:
        """A held InstallSnapshot (event loop): start copying, unless a copy of it is already under way."""
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
        job.task = self._runtime.spawn(self._run(job))

    def _job_dir(self, group_id: int) -> Path:
        return self._import_root / str(group_id)

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
            self._stats.failures += 1
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
            await self._runtime.on_scheduler(lambda: self._scheduler.deliver([(group_id, job.message)]))
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
        job.throttle_start = self._runtime.loop.time()
        staged: dict[tuple[int, int], Path] = {}
        directory = self._job_dir(group_id)
        for ref in needed:
            path = directory / f"{ref.base_index}-{ref.last_index}-{ref.crc:08x}.seg"
            receiver = SegmentFileReceiver(path, ref.file_bytes, ref.crc)
            progress.bytes_copied += receiver.received_bytes
            progress.resumed_bytes += receiver.resumed_from
            if receiver.resumed_from:
                log.info("resuming a segment copy", group=group_id, segment=ref.base_index, at=receiver.resumed_from)
            await self.copy_file(job, ref, receiver)
            staged[(ref.base_index, ref.last_index)] = path
            progress.segments_done += 1
            self._stats.segments_copied += 1
        progress.state = "installing"
        await self._install(job, staged)

    async def _local_prefix(self, job: _Job) -> int | None:
        """How many listed segments the local log has already (None: it needs no copy at all)."""
        loop = self._runtime.loop
        deadline = loop.time() + _GROUP_WAIT_S
        index, term = job.index, job.message.snapshot.meta.term if job.message.snapshot else 0

        def look() -> tuple[bool, int | None]:
            group = self._scheduler.groups.get(job.group_id)
            if group is None or not isinstance(group.machine, PartitionMachine):
                return False, None
            if group.raw.status().commit >= index or _term_or_none(group, index) == term:
                return True, None
            return True, kept_prefix(group.machine.log, job.manifest.files)

        while True:
            exists, kept = await self._runtime.on_scheduler(look)
            if exists:
                return kept
            if loop.time() > deadline:
                raise UnavailableError(f"group {job.group_id} does not exist on node {self.node_id}")
            await asyncio.sleep(0.2)

    # ------------------------------------------------------------------------------------ copying a file

    async def copy_file(self, job: _Job, ref: SegmentRef, receiver: SegmentFileReceiver) -> None:
        """Fetch ``ref`` into ``receiver`` chunk by chunk from where it stands, until it passes its check."""
        loop = self._runtime.loop
        progress = job.progress
        for _ in range(2):  # a second pass only if the finished file fails its whole-file check
            attempts = 0
            while not receiver.complete:
                offset = receiver.received_bytes
                length = min(self.chunk_bytes, ref.file_bytes - offset)
                data, crc = await self._fetch(job, ref, offset, length)
                if self.corrupt_left > 0 and data:
                    self.corrupt_left -= 1
                    data = bytes([data[0] ^ 0xFF]) + data[1:]  # diagnostics: exercise the retry path
                try:
                    await loop.run_in_executor(None, receiver.write_chunk, offset, data, crc)
                except ChunkChecksumError as exc:
                    attempts += 1
                    progress.chunk_retries += 1
                    self._stats.chunk_retries += 1
                    log.warning(
                        "segment chunk failed its checksum; fetching it again", group=job.group_id, error=str(exc)
                    )
                    if attempts >= _MAX_ATTEMPTS:
                        raise
                    continue
                attempts = 0
                progress.bytes_copied += len(data)
                self._stats.bytes_copied += len(data)
                await self._throttle(job, len(data))
            try:
                await loop.run_in_executor(None, receiver.finish)
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
        view = self._views.get(job.group_id)
        others = [n for n in (view.replicas if view is not None else ()) if n not in (self.node_id, job.message.sender)]
        sources = [job.message.sender, *others]
        progress = job.progress
        body = encode_chunk_request(
            ChunkRequest(
                job.group_id,
                ref.base_index,
                ref.last_index,
                ref.crc,
                offset,
                length,
                progress.bytes_copied,
                progress.bytes_total,
            )
        )
        delay = _BACKOFF_START_S
        error = "no attempt"
        for attempt in range(_MAX_ATTEMPTS):
            source = sources[(attempt // _ATTEMPTS_PER_SOURCE) % len(sources)]
            self._fetches += 1
            try:
                call = self._runtime.spawn(self._call(source, REQUEST_SEGMENT_CHUNK, body, _CHUNK_TIMEOUT_S))
                if self._drop_every and self._fetches % self._drop_every == 0:
                    await asyncio.sleep(0)
                    self._disconnect(source)  # diagnostics: the connection drops with the request in flight
                status, answer = await call
            except (ConnectionError, TimeoutError) as exc:
                error = f"node {source}: {exc!r}"
                progress.reconnects += 1
                self._stats.reconnects += 1
                log.info("segment source unreachable; retrying", group=job.group_id, source=source, error=repr(exc))
            else:
                reply = decode_chunk_reply(answer) if status == STATUS_OK else None
                if reply is not None:
                    crc, file_bytes, data = reply
                    if file_bytes == ref.file_bytes:
                        return data, crc
                    error = f"node {source} has a segment file of {file_bytes} bytes, not {ref.file_bytes}"
                else:
                    error = f"node {source}: {decode_error(answer, source=f'node {source}').message}"
                log.info("segment source refused a chunk", group=job.group_id, source=source, error=error)
            await asyncio.sleep(delay)
            delay = min(delay * 2, _BACKOFF_MAX_S)
        raise UnavailableError(f"chunk at byte {offset} of segment {ref.base_index}: {error}")

    async def _throttle(self, job: _Job, size: int) -> None:
        """Keep the copy's average rate under the budget (a token bucket with no burst beyond one chunk)."""
        rate = self.bandwidth_bytes_per_s
        if rate <= 0:
            return
        job.throttled_bytes += size
        delay = job.throttle_start + job.throttled_bytes / rate - self._runtime.loop.time()
        if delay > 0:
            await asyncio.sleep(delay)

    # ------------------------------------------------------------------------------------- installing

    async def _install(self, job: _Job, staged: dict[tuple[int, int], Path]) -> None:
        """Step the held snapshot into the core with the files ready; wait until the snapshot is durable."""
        loop = self._runtime.loop
        group_id, index = job.group_id, job.index
        installer = partial(install_segments, staged=staged)

        def step(message: raft.Message) -> str:
            group = self._scheduler.groups.get(group_id)
            if group is None:
                return "missing"
            if group.storage.snapshot().meta.index >= index or group.raw.status().commit >= index:
                return "installed"
            assert isinstance(group.machine, PartitionMachine)
            missing = [r for r in job.manifest.files[kept_prefix(group.machine.log, job.manifest.files) :]
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

        deadline = loop.time() + _INSTALL_WAIT_S
        delivered: raft.Message | None = None
        while loop.time() < deadline:
            if delivered is not job.message:
                delivered = job.message
                outcome = await self._runtime.on_scheduler(partial(step, delivered))
                if outcome == "installed":
                    break
                if outcome == "missing":
                    raise UnavailableError(f"group {group_id} cannot take the copied segments")
            elif await self._runtime.on_scheduler(installed):
                break
            await asyncio.sleep(_POLL_S)
        else:
            await self._runtime.on_scheduler(partial(_clear_installer, self._scheduler, group_id, index))
            raise UnavailableError(f"the snapshot at {index} was not installed in {_INSTALL_WAIT_S:g}s")
        self._finish(job, "done")
        self._stats.installs += 1
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


def _term_or_none(group: RaftGroup, index: int) -> int | None:
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
