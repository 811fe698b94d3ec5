"""Catch-up by segment copy, in one process: the snapshot manifest, adopting copied files, and the copier's
retries, resumption and throttle against a source served over a fake peer transport."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from multiraft import raft
from multiraft.node.catchup import (
    REQUEST_SEGMENT_CHUNK,
    CatchupManager,
    CatchupProgress,
    _Job,
    install_segments,
)
from multiraft.node.replicas.partition import PartitionView
from multiraft.node.replicas.raft_log import (
    RaftLogStorage,
    SegmentRef,
    SnapshotManifest,
    decode_manifest,
    encode_manifest,
)
from multiraft.node.scheduler.scheduler import Scheduler
from multiraft.node.scheduler.snapshot_peers import snapshot_peers
from storage import LogStore, SegmentedLog, SegmentFileReceiver, StorageConfig, encode_batch

GROUP = 7
SMALL = StorageConfig(segment_bytes=4096)


def _data(index: int, term: int = 1) -> raft.Entry:
    batch = encode_batch([b"record-%d" % index] * 20, timestamps_ms=1_000 + index)
    return raft.Entry(index, term, raft.EntryKind.DATA, 1_000 + index, batch)


@pytest.fixture
def leader(tmp_path: Path) -> Iterator[tuple[LogStore, RaftLogStorage]]:
    store = LogStore.open(tmp_path / "leader", SMALL)
    storage = RaftLogStorage(store.log("t", 0))
    storage.append([_data(i, 1 + i // 40) for i in range(1, 150)])
    storage.set_applied(149)
    store.sync()
    yield store, storage
    store.close()


def _refs(plog: SegmentedLog, directory: Path) -> list[tuple[SegmentRef, Path]]:
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for s in plog.segments()[:-1]:
        info = plog.export_segment(s.base_index, directory / f"{s.base_index}.seg")
        ref = SegmentRef(
            s.base_index, s.last_index, s.base_offset, s.next_offset, plog.term(s.last_index), info.file_bytes, info.crc
        )
        out.append((ref, info.path))
    return out


def _catchup_snapshot(storage: RaftLogStorage, directory: Path) -> tuple[list[tuple[SegmentRef, Path]], raft.Snapshot]:
    """Export the leader's sealed segments and take a catch-up snapshot at the end of the last one."""
    refs = _refs(storage.log, directory)
    manifest = SnapshotManifest(refs[-1][0].next_offset, files=tuple(r for r, _ in refs), start=(0, 0))
    return refs, storage.snapshot_for_catchup(refs[-1][0].last_index, manifest)


def test_manifest_round_trips_and_old_manifests_still_read() -> None:
    ref = SegmentRef(1, 10, 0, 30, 2, 4000, 0xDEADBEEF)
    manifest = SnapshotManifest(30, producers=b"{}", files=(ref,), start=(0, 0))
    assert decode_manifest(encode_manifest(manifest)) == manifest
    assert decode_manifest(encode_manifest(SnapshotManifest(12))).files == ()


def test_a_catch_up_snapshot_moves_raft_compaction_but_keeps_the_segments(
    leader: tuple[LogStore, RaftLogStorage], tmp_path: Path
) -> None:
    _, storage = leader
    plog = storage.log
    refs, snapshot = _catchup_snapshot(storage, tmp_path / "export")
    index = snapshot.meta.index
    assert snapshot.meta.index == index and storage.first_index() == index + 1
    assert plog.first_index() == 1  # consumers still read everything
    with pytest.raises(raft.IndexCompactedError):
        storage.entries(index, index + 1, 1 << 20)
    # Retention later drops the first two segments: the manifest lists only what is still there.
    plog.drop_before(refs[2][0].base_index)
    pruned = decode_manifest(storage.snapshot_at_compaction_point().data)
    assert [f.base_index for f in pruned.files] == [r.base_index for r, _ in refs[2:]]
    assert pruned.start == plog.compaction_point()


@pytest.mark.parametrize("already_held", [0, 2])
def test_a_follower_adopts_the_copied_segments_and_resumes_after_the_snapshot(
    leader: tuple[LogStore, RaftLogStorage], tmp_path: Path, already_held: int
) -> None:
    _, storage = leader
    plog = storage.log
    refs, snapshot = _catchup_snapshot(storage, tmp_path / "export")
    index = snapshot.meta.index
    with LogStore.open(tmp_path / "follower", SMALL) as follower_store:
        follower = RaftLogStorage(follower_store.log("t", 0))
        held_until = refs[already_held - 1][0].last_index + 5 if already_held else 0
        if held_until:  # a replica that was behind: it has some sealed segments and a partial one
            follower.append(storage.log.entries(1, held_until + 1))  # type: ignore[arg-type]
        staged = {(r.base_index, r.last_index): path for r, path in refs[already_held:]}
        follower.segment_installer = (index, lambda log, m: install_segments(log, m, staged=staged))
        follower.apply_snapshot(snapshot)
        follower_store.sync()
        assert follower.first_index() == index + 1 and follower.applied_index() == index
        assert follower.log.entries(1, index + 1) == plog.entries(1, index + 1)
        end = refs[-1][0].next_offset
        assert follower.log.read(0, 1 << 22, max_offset=end).data == plog.read(0, 1 << 22, max_offset=end).data
        tail = storage.log.entries(index + 1, plog.last_index() + 1)
        follower.append([raft.Entry(e.index, e.term, raft.EntryKind(e.kind), e.timestamp_ms, e.payload) for e in tail])
        follower_store.sync()
        assert follower.log.read(0, 1 << 22).data == plog.read(0, 1 << 22).data


# ------------------------------------------------------------------------------------------ the copier


class FakeSource:
    """The source node's CatchupManager behind a fake transport that can fail calls."""

    def __init__(self, manager: CatchupManager) -> None:
        self.manager = manager
        self.fail_calls: set[int] = set()
        self.calls = 0
        self.disconnects = 0

    async def call(self, to_node: int, kind: int, body: bytes, timeout_s: float) -> tuple[int, bytes]:
        assert to_node == 1 and kind == REQUEST_SEGMENT_CHUNK
        self.calls += 1
        if self.calls in self.fail_calls:
            raise ConnectionError("the connection to node 1 dropped")
        return await self.manager.serve(2, kind, body)

    def disconnect(self, node_id: int) -> None:
        self.disconnects += 1


def _manager(
    data_dir: Path, views: dict[int, PartitionView], source: FakeSource | None, **kwargs: Any
) -> CatchupManager:
    async def refuse(to_node: int, kind: int, body: bytes, timeout_s: float) -> tuple[int, bytes]:
        raise ConnectionError("no transport")

    kwargs.setdefault("bandwidth_bytes_per_s", 0)
    return CatchupManager(
        node_id=1 if source is None else 2,
        data_dir=data_dir,
        scheduler=cast(Scheduler, None),  # the copy itself needs no scheduler
        call=source.call if source is not None else refuse,
        disconnect=source.disconnect if source is not None else (lambda node: None),
        views_by_group=views,
        **kwargs,
    )


def _job(refs: list[SegmentRef]) -> _Job:
    meta = raft.SnapshotMeta(refs[-1].last_index, 1, raft.ConfState.of((1, 2)))
    data = encode_manifest(SnapshotManifest(refs[-1].next_offset, files=tuple(refs)))
    message = raft.Message(type=raft.MessageType.SNAP, to=2, sender=1, term=1, snapshot=raft.Snapshot(meta, data))
    progress = CatchupProgress("t", 0, GROUP, meta.index, 1, bytes_total=sum(r.file_bytes for r in refs))
    return _Job(GROUP, message, decode_manifest(data), progress)


async def _copy(copier: CatchupManager, job: _Job, directory: Path) -> list[Path]:
    copier._loop = asyncio.get_running_loop()
    job.throttle_start = copier._loop.time()
    paths = []
    for ref in job.manifest.files:
        receiver = SegmentFileReceiver(directory / f"{ref.base_index}.seg", ref.file_bytes, ref.crc)
        job.progress.bytes_copied += receiver.received_bytes
        job.progress.resumed_bytes += receiver.resumed_from
        await copier._copy_file(job, ref, receiver)
        paths.append(receiver.path)
    return paths


def test_the_copier_retries_corrupt_chunks_and_dropped_connections(
    leader: tuple[LogStore, RaftLogStorage], tmp_path: Path
) -> None:
    _, storage = leader
    refs = [r for r, _ in _refs(storage.log, tmp_path / "expected")]
    views = {GROUP: PartitionView("t", 0, GROUP, storage.log)}
    source_manager = _manager(tmp_path / "source", views, None)
    source = FakeSource(source_manager)
    copier = _manager(tmp_path / "copier", {}, source, bandwidth_bytes_per_s=0, chunk_bytes=1500)
    copier._corrupt_left = 2  # the first two chunks arrive damaged
    source.fail_calls = {3, 7}  # and two calls lose their connection
    job = _job(refs)
    paths = asyncio.run(asyncio.wait_for(_copy_with(source_manager, copier, job, tmp_path / "in"), 30))
    assert [p.read_bytes() for p in paths] == [
        (tmp_path / "expected" / f"{r.base_index}.seg").read_bytes() for r in refs
    ]
    assert job.progress.chunk_retries == 2 and copier.stats.chunk_retries == 2
    assert job.progress.reconnects == 2
    assert job.progress.bytes_copied == job.progress.bytes_total
    assert source_manager.leader_progress(GROUP, {2})[2][1] == job.progress.bytes_total  # the leader's view of it


def test_a_finished_copy_stops_holding_the_promotion_back(
    leader: tuple[LogStore, RaftLogStorage], tmp_path: Path
) -> None:
    """Regression: the leader went on reporting a copy for 30 s after its last chunk, and the rebalancer
    promotes no learner with a copy reported, so every move by segment copy took ~30 s more."""
    _, storage = leader
    refs = [r for r, _ in _refs(storage.log, tmp_path / "expected")]
    views = {GROUP: PartitionView("t", 0, GROUP, storage.log)}
    source_manager = _manager(tmp_path / "source", views, None)
    copier = _manager(tmp_path / "copier", {}, FakeSource(source_manager), bandwidth_bytes_per_s=0)
    job = _job(refs)
    asyncio.run(asyncio.wait_for(_copy_with(source_manager, copier, job, tmp_path / "in"), 30))
    total = job.progress.bytes_total
    # While the core waits for the snapshot: the copier's own figures.
    assert source_manager.leader_progress(GROUP, {2}) == {2: (total, total)}
    # The snapshot is acknowledged: no copy any more, although the last chunk was served a moment ago.
    assert source_manager.leader_progress(GROUP, ()) == {}
    # A replica waiting for a snapshot that has fetched nothing yet is reported too (so not promoted).
    assert source_manager.leader_progress(GROUP, {3}) == {3: (0, 0)}
    source_manager._preparing[GROUP] = {4}  # a catch-up snapshot being exported for it
    assert source_manager.leader_progress(GROUP, ()) == {4: (0, 0)}


def _status(progress: dict[int, tuple[int, int]]) -> raft.Status:
    """A leader's status (node 1) with each replica's (match, pending_snapshot)."""
    return raft.Status(
        id=1,
        term=2,
        vote=1,
        commit=30,
        applied=30,
        last_index=30,
        role=raft.Role.LEADER,
        leader_id=1,
        quiescent=False,
        lead_transferee=0,
        conf_state=raft.ConfState.of((1, 2, 3)),
        progress={
            peer: raft.ProgressStatus(match, match + 1, "probe", True, False, 0, 0, False, pending)
            for peer, (match, pending) in progress.items()
        },
    )


def test_snapshot_peers_are_those_waiting_for_a_snapshot_or_behind_the_compaction_point() -> None:
    status = _status({1: (30, 0), 2: (12, 20), 3: (25, 0), 4: (3, 0), 5: (0, 0)})
    assert snapshot_peers(status, first_index=21) == {2, 4, 5}
    assert snapshot_peers(status, first_index=1) == {2}  # nothing compacted: a new replica replays entries


async def _copy_with(source_manager: CatchupManager, copier: CatchupManager, job: _Job, directory: Path) -> list[Path]:
    source_manager._loop = asyncio.get_running_loop()
    return await _copy(copier, job, directory)


def test_a_copy_interrupted_mid_file_resumes_from_the_last_verified_chunk(
    leader: tuple[LogStore, RaftLogStorage], tmp_path: Path
) -> None:
    _, storage = leader
    refs = [r for r, _ in _refs(storage.log, tmp_path / "expected")][:1]
    views = {GROUP: PartitionView("t", 0, GROUP, storage.log)}
    source_manager = _manager(tmp_path / "source", views, None)
    source = FakeSource(source_manager)
    source.fail_calls = set(range(3, 1000))  # the source goes away after two chunks, for good
    copier = _manager(tmp_path / "copier", {}, source, bandwidth_bytes_per_s=0, chunk_bytes=1000)

    async def interrupted() -> None:
        task = asyncio.ensure_future(_copy_with(source_manager, copier, _job(refs), tmp_path / "in"))
        for _ in range(200):
            await asyncio.sleep(0.01)
            if source.calls >= 4:
                break
        task.cancel()  # the node stops
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(interrupted())
    source.fail_calls = set()
    job = _job(refs)
    restarted = _manager(tmp_path / "copier", {}, source, bandwidth_bytes_per_s=0, chunk_bytes=1000)
    paths = asyncio.run(asyncio.wait_for(_copy_with(source_manager, restarted, job, tmp_path / "in"), 30))
    assert job.progress.resumed_bytes == 2000
    assert paths[0].read_bytes() == (tmp_path / "expected" / f"{refs[0].base_index}.seg").read_bytes()


def test_the_copy_rate_stays_under_the_bandwidth_budget(
    leader: tuple[LogStore, RaftLogStorage], tmp_path: Path
) -> None:
    _, storage = leader
    refs = [r for r, _ in _refs(storage.log, tmp_path / "expected")]
    total = sum(r.file_bytes for r in refs)
    budget = total / 0.5  # half a second at the budget
    views = {GROUP: PartitionView("t", 0, GROUP, storage.log)}
    source_manager = _manager(tmp_path / "source", views, None)
    copier = _manager(
        tmp_path / "copier", {}, FakeSource(source_manager), bandwidth_bytes_per_s=budget, chunk_bytes=2000
    )
    job = _job(refs)
    started = time.monotonic()
    asyncio.run(asyncio.wait_for(_copy_with(source_manager, copier, job, tmp_path / "in"), 30))
    elapsed = time.monotonic() - started
    assert elapsed >= 0.5 * 0.9
    assert job.progress.rate_bytes_s <= budget * 1.1
    assert job.progress.eta_s == 0.0


class _Raw:
    """A leader's core waiting for node 2 to answer a snapshot (the controller's or an offsets group's)."""

    role = raft.Role.LEADER

    def __init__(self, *, quiescent: bool = False) -> None:
        self.reported: list[tuple[int, bool]] = []
        self.quiescent = quiescent
        self.statuses = 0

    def status(self) -> raft.Status:
        self.statuses += 1
        return _status({1: (30, 0), 2: (0, 25), 3: (30, 0)})

    def report_snapshot(self, peer: int, ok: bool) -> None:
        self.reported.append((peer, ok))


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def monotonic(self) -> float:
        return self.now


def _checking_manager(tmp_path: Path, scheduler: Scheduler) -> CatchupManager:
    """A manager for the leader's periodic check alone: no peers to call, no views, no throttle."""
    return CatchupManager(
        node_id=1,
        data_dir=tmp_path,
        scheduler=scheduler,
        call=cast(Any, None),
        disconnect=lambda node: None,
        views_by_group={},
        bandwidth_bytes_per_s=0,
        snapshot_idle_s=10.0,
    )


def test_a_lost_raft_snapshot_of_a_group_without_segments_is_sent_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: only partition groups were checked, so a lost in-band snapshot of the controller's or an
    offsets group's state left its replica waiting for ever (the core sends nothing to a SNAPSHOT replica)."""
    from multiraft.node.catchup import _leader

    clock = _Clock()
    monkeypatch.setattr(_leader, "time", clock)
    touched: list[int] = []
    scheduler = cast(Scheduler, type("FakeScheduler", (), {"touch": lambda self, g: touched.append(g.group_id)})())
    manager = _checking_manager(tmp_path, scheduler)
    raw = _Raw()
    group = cast(Any, type("FakeGroup", (), {"group_id": 0, "raw": raw, "machine": object()})())
    manager.leader_check(group)
    clock.now += 9.0
    manager.leader_check(group)
    assert raw.reported == [], "within snapshot_idle_s the snapshot may still be on its way"
    clock.now += 2.0
    manager.leader_check(group)
    assert raw.reported == [(2, False)] and touched == [0]


def test_the_check_of_a_quiescent_leader_asks_its_core_nothing(tmp_path: Path) -> None:
    """A quiescent group's replicas all hold its whole log: nothing to re-send or prepare, and 10,000 idle
    groups checked every second must not each copy their status."""
    scheduler = cast(Scheduler, type("FakeScheduler", (), {"touch": lambda self, g: None})())
    manager = _checking_manager(tmp_path, scheduler)
    quiet, awake = _Raw(quiescent=True), _Raw()
    for group_id, raw in ((1, quiet), (2, awake)):
        group = type("FakeGroup", (), {"group_id": group_id, "raw": raw, "machine": object()})()
        manager.leader_check(cast(Any, group))
    assert (quiet.statuses, awake.statuses) == (0, 1)
