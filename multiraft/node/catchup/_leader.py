"""The leader's side of catch-up: finding far-behind replicas, exporting sealed segments, making the catch-up
snapshot, holding append rejections meanwhile, serving chunks and reporting each copy's progress (policy in
:mod:`multiraft.node.catchup`)."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from multiraft import raft
from multiraft.errors import MultiraftError, UnavailableError
from multiraft.logging import get_logger
from multiraft.node.peer.messages import encode_error
from multiraft.node.replicas.partition import PartitionMachine, PartitionView
from multiraft.node.replicas.raft_log import SegmentRef, SnapshotManifest
from multiraft.node.scheduler.scheduler import RaftGroup
from multiraft.node.threads import LoopOwned, ThreadShared
from storage import SegmentedLog, SegmentFileError, StorageError, read_segment_file_chunk

from ._shared import (
    STATUS_ERROR,
    STATUS_OK,
    CatchupRuntime,
    CatchupStats,
    decode_chunk_request,
    encode_chunk_reply,
)

__all__ = ["SNAPSHOT_IDLE_S", "CatchupLeader"]

log = get_logger(__name__)

SNAPSHOT_IDLE_S = 10.0
_MAX_CHUNK_BYTES = 8 << 20
_MAX_HELD = 16
_EXPORT_IDLE_S = 600.0
_SENDING_IDLE_S = 30.0

# A segment to export for a catch-up snapshot: base index, last index, base offset, next offset, last term.
_Wanted = tuple[int, int, int, int, int]


@dataclass
class ExportedSegment(LoopOwned):
    """A sealed segment exported as a file for copiers; ``used`` (monotonic) keeps it from expiring."""

    path: Path
    file_bytes: int
    crc: int
    used: float


class CatchupLeader(ThreadShared):
    """Catch-up as the leader of partition groups: decides who needs a catch-up snapshot, makes it, and
    serves the segment files its copiers fetch.

    Shared, fields split by thread: what decides and holds snapshots (``_preparing``, ``_pending_since``,
    ``_held``, ``leader_check``, ``check_rejection``) runs on the scheduler thread; serving chunks
    (``_served_at``, ``_sending``, ``exports``, ``serve_chunk``) on the event loop."""

    def __init__(
        self,
        *,
        node_id: int,
        root: Path,
        runtime: CatchupRuntime,
        views_by_group: Mapping[int, PartitionView],
        stats: CatchupStats,
        snapshot_idle_s: float,
    ) -> None:
        self.node_id = node_id
        self._export_root = root / "export"
        self._runtime = runtime
        self._scheduler = runtime.scheduler
        self._views = views_by_group
        self._stats = stats
        self.snapshot_idle_s = snapshot_idle_s
        self._exports: dict[tuple[int, int, int], ExportedSegment] = {}
        self._export_lock = asyncio.Lock()
        # group -> the replicas its catch-up snapshot, being exported, is for (scheduler thread)
        self._preparing: dict[int, set[int]] = {}
        self._pending_since: dict[tuple[int, int], float] = {}  # (group, peer) in SNAPSHOT state since (scheduler)
        self._served_at: dict[tuple[int, int], float] = {}  # (group, peer) -> last chunk served (loop)
        self._sending: dict[int, dict[int, tuple[int, int, float]]] = {}  # group -> peer -> (copied, total, at)
        self._held: dict[int, list[raft.Message]] = {}  # group -> rejections held while preparing (scheduler)

    @property
    def preparing(self) -> dict[int, set[int]]:
        """Group -> the replicas a catch-up snapshot is being exported for (scheduler thread)."""
        return self._preparing

    @property
    def exports(self) -> dict[tuple[int, int, int], ExportedSegment]:
        """(group, base index, last index) -> the exported file of that sealed segment."""
        return self._exports

    def clear_exports(self) -> None:
        """Exports of a previous run: nobody copies them any more (event loop, at start)."""
        shutil.rmtree(self._export_root, ignore_errors=True)

    def start_expiry(self) -> None:
        self._runtime.spawn(self._expire_exports())

    def leader_progress(self, group_id: int, catching_up: Collection[int]) -> dict[int, tuple[int, int]]:
        """The replicas of ``group_id`` that are catching up from this node (as leader) by a snapshot, each with
        (bytes copied, bytes total) as its copier reported them in its latest chunk request, or (0, 0) before
        its first one or when that is older than ``_SENDING_IDLE_S`` (scheduler thread).

        Listed: ``catching_up`` (from ``snapshot_peers``: the Raft core has a snapshot in flight to them or
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

    # ------------------------------------------------------------------- deciding and making the snapshot

    def leader_check(self, group: RaftGroup) -> None:
        """Housekeeping of one group led here (scheduler thread): re-send idle catch-up snapshots, and make
        one when a replica is far behind (see :mod:`multiraft.node.catchup`).

        Every group, not only partitions: the controller's and the offsets groups send their Raft snapshots
        in-band, and the core waits for the answer to a lost one forever (a new replica would never catch up)."""
        machine = group.machine
        group_id = group.group_id
        if group.raw.role is not raft.Role.LEADER:
            return
        if group.raw.quiescent:
            # Every replica held the whole log when the group went quiet (RawNode's rule), so none waits for a
            # snapshot or is behind; skipping the status copy keeps thousands of idle groups cheap.
            if self._pending_since:
                for key in [key for key in self._pending_since if key[0] == group_id]:
                    del self._pending_since[key]
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
                self._stats.snapshots_resent += 1
        if not isinstance(machine, PartitionMachine) or pending or group_id in self._preparing:
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

    def _catchup_base(self, group: RaftGroup, machine: PartitionMachine) -> int | None:
        """First index of the newest sealed, applied segment not yet behind a snapshot: a replica that needs
        it or anything before it is far behind. None if there is no such segment."""
        applied = group.storage.applied_index()
        eligible = [s for s in machine.log.segments()[:-1] if s.entry_count and s.last_index <= applied]
        if not eligible or eligible[-1].last_index <= group.storage.snapshot().meta.index:
            return None
        return eligible[-1].base_index

    def _start_prepare(self, group: RaftGroup, machine: PartitionMachine, peers: list[int]) -> None:
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
        self._runtime.loop.call_soon_threadsafe(
            lambda: self._runtime.spawn(self._prepare(group_id, plog, start, wanted))
        )

    def check_rejection(self, group_id: int, message: raft.Message) -> None:
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

    async def _prepare(self, group_id: int, plog: SegmentedLog, start: tuple[int, int], wanted: list[_Wanted]) -> None:
        try:
            refs = []
            for base, last, base_offset, next_offset, last_term in wanted:
                export = await self.exported(group_id, plog, base, last)
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
        manifest = SnapshotManifest(
            refs[-1].next_offset, producers=producers, files=refs, start=start, log_start=machine.trimmed_to
        )
        group.storage.snapshot_for_catchup(index, manifest)
        self._scheduler.touch(group)
        self._stats.snapshots_prepared += 1
        log.info(
            "catch-up snapshot made",
            group=group_id,
            snapshot_index=index,
            segments=len(refs),
            bytes=sum(r.file_bytes for r in refs),
        )

    # ------------------------------------------------------------------------- exported files and serving

    async def exported(self, group_id: int, plog: SegmentedLog, base: int, last: int) -> ExportedSegment:
        """The file of a sealed segment, exported once (worker thread) and kept while copies use it."""
        key = (group_id, base, last)
        async with self._export_lock:
            found = self._exports.get(key)
            if found is not None and found.path.exists():
                found.used = time.monotonic()
                return found
            path = self._export_root / str(group_id) / f"{base}-{last}.seg"
            path.parent.mkdir(parents=True, exist_ok=True)
            info = await self._runtime.loop.run_in_executor(None, plog.export_segment, base, path)
            if info.last_index != last:
                path.unlink(missing_ok=True)
                raise SegmentFileError(f"segment {base} of {plog.name} ends at {info.last_index}, not {last}")
            export = ExportedSegment(path, info.file_bytes, info.crc, time.monotonic())
            self._exports[key] = export
            self._stats.segments_exported += 1
            return export

    async def _expire_exports(self) -> None:
        while True:
            await asyncio.sleep(60)
            now = time.monotonic()
            for key, export in list(self._exports.items()):
                if now - export.used > _EXPORT_IDLE_S:
                    del self._exports[key]
                    export.path.unlink(missing_ok=True)

    async def serve_chunk(self, from_node: int, body: bytes) -> tuple[int, bytes]:
        """A ``REQUEST_SEGMENT_CHUNK`` request (event loop): (status, reply or error text)."""
        try:
            return STATUS_OK, await self._serve_chunk(from_node, body)
        except MultiraftError as exc:
            return STATUS_ERROR, encode_error(exc)
        except (StorageError, OSError) as exc:
            return STATUS_ERROR, encode_error(UnavailableError(f"segment chunk not served: {exc}"))

    async def _serve_chunk(self, from_node: int, body: bytes) -> bytes:
        request = decode_chunk_request(body)
        group_id, base, last = request.group_id, request.base_index, request.last_index
        view = self._views.get(group_id)
        if view is None:
            raise UnavailableError(f"node {self.node_id} holds no replica of group {group_id}")
        export = await self.exported(group_id, view.log, base, last)
        if export.crc != request.crc:
            raise UnavailableError(f"segment {base}..{last} here has crc {export.crc:#010x}, not {request.crc:#010x}")
        length = min(request.length, _MAX_CHUNK_BYTES)
        data, chunk_crc = await self._runtime.loop.run_in_executor(
            None, read_segment_file_chunk, export.path, request.offset, length
        )
        now = time.monotonic()
        self._served_at[(group_id, from_node)] = now
        peers = dict(self._sending.get(group_id, {}))
        peers[from_node] = (request.copied + len(data), request.total, now)
        self._sending[group_id] = peers
        self._stats.chunks_served += 1
        self._stats.bytes_served += len(data)
        return encode_chunk_reply(chunk_crc, export.file_bytes, data)
