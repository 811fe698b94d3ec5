"""Catch-up copy speed: sealed segment files fetched over the peer transport, against the configured throttle.

    python benchmarks/catchup_bench.py --json            # 32 MiB partition, throttles 5, 20 MB/s and none
    python benchmarks/catchup_bench.py --quick --json    # 8 MiB, a smoke run

Two nodes' catch-up managers in one process, connected by real PeerTransports over loopback. The source
holds one partition log in 8 MiB segments (256 KiB batches); its segments are exported once (timed as
``export``). Each run copies every segment file into a fresh directory the way a far-behind replica does:
1 MiB chunks, each crc32c-checked and fsynced with its progress record, under the throttle. Reported per
throttle: the median MB/s of 3 runs (MB = 10^6 bytes, as the throttle). Baseline in the same run: the same
files copied locally with one read, write and fsync per 1 MiB chunk (the disk's ceiling for this write
pattern), and the ratio of the unthrottled copy to it. ``adopt`` is importing the copied files into a log
store (each entry's CRC checked, nothing re-encoded) and syncing it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from multiraft import raft
from multiraft.node.catchup import CatchupManager, CatchupProgress, _Job
from multiraft.node.peer.transport import PeerTransport
from multiraft.node.replicas.partition import PartitionView
from multiraft.node.replicas.raft_log import SegmentRef, SnapshotManifest, decode_manifest, encode_manifest
from multiraft.node.scheduler.scheduler import Scheduler
from storage import LogStore, SegmentFileReceiver, StorageConfig, encode_batch

MiB = 1024 * 1024
MB = 1_000_000
RUNS = 3
GROUP = 1


def build_source(directory: Path, total_bytes: int) -> LogStore:
    store = LogStore.open(directory, StorageConfig(segment_bytes=8 * MiB))
    plog = store.log("bench", 0)
    value = os.urandom(1024)
    batch = encode_batch([value] * 250, timestamps_ms=1_000)  # ~256 KiB
    entries = []
    for index in range(1, total_bytes // len(batch) + 2):
        entries.append(raft.Entry(index, 1, raft.EntryKind.DATA, 1_000 + index, batch))
    plog.append(entries)
    plog.roll()
    store.sync()
    return store


def _manager(node_id: int, root: Path, transport: PeerTransport, views: dict[int, PartitionView], rate: float) -> Any:
    return CatchupManager(
        node_id=node_id,
        data_dir=root,
        scheduler=cast(Scheduler, None),  # copying needs no scheduler
        call=transport.call,
        disconnect=transport.disconnect,
        views_by_group=views,
        bandwidth_bytes_per_s=rate,
    )


def _job(refs: list[SegmentRef]) -> _Job:
    meta = raft.SnapshotMeta(refs[-1].last_index, 1, raft.ConfState.of((1, 2)))
    data = encode_manifest(SnapshotManifest(refs[-1].next_offset, files=tuple(refs)))
    message = raft.Message(type=raft.MessageType.SNAP, to=2, sender=1, term=1, snapshot=raft.Snapshot(meta, data))
    progress = CatchupProgress("bench", 0, GROUP, meta.index, 1, bytes_total=sum(r.file_bytes for r in refs))
    return _Job(GROUP, message, decode_manifest(data), progress)


async def copy_once(copier: CatchupManager, refs: list[SegmentRef], directory: Path) -> float:
    """Copy every file; returns MB/s."""
    job = _job(refs)
    copier._loop = asyncio.get_running_loop()
    job.throttle_start = copier._loop.time()
    started = time.perf_counter()
    for ref in refs:
        receiver = SegmentFileReceiver(directory / f"{ref.base_index}.seg", ref.file_bytes, ref.crc)
        await copier._copy_file(job, ref, receiver)
    elapsed = time.perf_counter() - started
    return job.progress.bytes_total / elapsed / MB


def local_copy(paths: list[Path], directory: Path) -> float:
    """Baseline: read, write and fsync each 1 MiB chunk of the same files locally; MB/s."""
    directory.mkdir(parents=True)
    total = 0
    started = time.perf_counter()
    for path in paths:
        with path.open("rb") as source, (directory / path.name).open("wb") as out:
            while chunk := source.read(MiB):
                out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
                total += len(chunk)
    return total / (time.perf_counter() - started) / MB


async def run(total_bytes: int, throttles: list[float], work: Path) -> dict[str, Any]:
    source_store = build_source(work / "source", total_bytes)
    plog = source_store.log("bench", 0)
    views = {GROUP: PartitionView("bench", 0, GROUP, plog)}
    manager_box: dict[int, CatchupManager] = {}

    async def serve(from_node: int, kind: int, body: bytes) -> tuple[int, bytes]:
        return await manager_box[1].serve(from_node, kind, body)

    source_transport = PeerTransport(
        node_id=1, cluster_id="bench", listen="127.0.0.1:0", deliver=lambda *_: None,
        on_unreachable=lambda _: None, handle_request=serve,
    )  # fmt: skip
    copier_transport = PeerTransport(
        node_id=2, cluster_id="bench", listen="127.0.0.1:0", deliver=lambda *_: None, on_unreachable=lambda _: None
    )
    await source_transport.start()
    await copier_transport.start()
    copier_transport.set_peer(1, f"127.0.0.1:{source_transport.port}")
    source = _manager(1, work / "source", source_transport, views, 0)
    source._loop = asyncio.get_running_loop()
    manager_box[1] = source
    sealed = plog.segments()[:-1]
    started = time.perf_counter()
    refs = []
    for s in sealed:
        export = await source._exported(GROUP, plog, s.base_index, s.last_index)
        refs.append(
            SegmentRef(s.base_index, s.last_index, s.base_offset, s.next_offset, 1, export.file_bytes, export.crc)
        )
    export_s = time.perf_counter() - started
    file_bytes = sum(r.file_bytes for r in refs)
    results: dict[str, Any] = {
        "bytes": file_bytes,
        "segments": len(refs),
        "export_mb_s": round(file_bytes / export_s / MB, 1),
        "copy": [],
    }
    baseline = statistics.median(
        local_copy([p.path for p in source._exports.values()], work / f"baseline{i}") for i in range(RUNS)
    )
    results["baseline_local_copy_mb_s"] = round(baseline, 1)
    for throttle in throttles:
        speeds = []
        for attempt in range(RUNS):
            directory = work / f"copy-{throttle:g}-{attempt}"
            copier = _manager(2, work / "copier", copier_transport, {}, throttle * MB)
            speeds.append(await copy_once(copier, refs, directory))
            last_directory = directory
        results["copy"].append(
            {
                "throttle_mb_s": throttle or "unlimited",
                "median_mb_s": round(statistics.median(speeds), 1),
                "runs_mb_s": [round(s, 1) for s in speeds],
                "ratio_to_throttle": round(statistics.median(speeds) / throttle, 3) if throttle else None,
                "ratio_to_baseline": round(statistics.median(speeds) / baseline, 3),
            }
        )
    adopt = []
    for attempt in range(RUNS):
        with LogStore.open(work / f"adopt{attempt}", StorageConfig(segment_bytes=8 * MiB)) as store:
            target = store.log("bench", 0)
            started = time.perf_counter()
            for ref in refs:
                target.import_segment(last_directory / f"{ref.base_index}.seg")
            store.sync()
            adopt.append(file_bytes / (time.perf_counter() - started) / MB)
    results["adopt_mb_s"] = round(statistics.median(adopt), 1)
    await copier_transport.stop()
    await source_transport.stop()
    await asyncio.sleep(0.2)  # let the accepted connections see EOF before the loop cancels what is left
    source_store.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--quick", action="store_true", help="8 MiB instead of 32 MiB")
    parser.add_argument("--throttles", default="5,20,0", help="MB/s, comma-separated; 0 = unlimited")
    args = parser.parse_args()
    throttles = [float(t) for t in args.throttles.split(",")]
    total = (8 if args.quick else 32) * MiB
    work = Path(tempfile.mkdtemp(prefix="catchup-bench-"))
    try:
        results = asyncio.run(run(total, throttles, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["machine"] = {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()}
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{results['bytes'] / MiB:.1f} MiB in {results['segments']} segments; export {results['export_mb_s']} MB/s")
    print(f"baseline local chunked copy + fsync: {results['baseline_local_copy_mb_s']} MB/s")
    for row in results["copy"]:
        print(f"throttle {row['throttle_mb_s']}: median {row['median_mb_s']} MB/s (runs {row['runs_mb_s']})")
    print(f"adopt (import + sync): {results['adopt_mb_s']} MB/s")


if __name__ == "__main__":
    main()
