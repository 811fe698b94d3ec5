"""Storage engine benchmark: the segmented LMDB log against a raw fdatasync baseline measured in the same run.

    python benchmarks/storage_bench.py --json            # everything, medians of 3 runs
    python benchmarks/storage_bench.py --quick --json    # a small smoke run

Measures:
  append     append + sync after each batch (64 KiB and 1 MiB batches): MB/s, and the ratio to os.write +
             os.fdatasync of the same buffers to a plain file
  read       sequential read of 1 GiB already in the page cache through SegmentedLog.read: MB/s
  amplification  bytes written per payload byte (/proc/self/io write_bytes, and file size), one batch per
             sync and 16 batches per sync (a group commit)
  encoding   record batch body: our columnar layout against an Arrow IPC body, encode/decode rate and size
  layout     group commit of N partitions: one LMDB environment per node (ours) against one per segment;
             and space reclamation after dropping half the data
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb
import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _disk import fdatasync_p50_ms  # benchmarks/, this script's folder

from multiraft.logging import configure_logging
from storage import Entry, EntryKind, LogStore, StorageConfig, decode_batches, encode_batch

MiB = 1024 * 1024
RUNS = 3


def write_bytes() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    return 0


def make_batches(batch_bytes: int, count: int) -> list[bytes]:
    """Record batches of ~batch_bytes, 1 KiB random values (incompressible, like the issue's workloads)."""
    records = max(1, batch_bytes // 1024)
    value_size = max(1, batch_bytes // records - 12)
    pool = os.urandom(value_size * records * 4)
    batches = []
    for i in range(count):
        start = (i * 7919) % (len(pool) - value_size * records)
        values = [pool[start + j * value_size : start + (j + 1) * value_size] for j in range(records)]
        batches.append(encode_batch(values, timestamps_ms=1_700_000_000_000 + i))
    return batches


def raw_append(directory: Path, batches: list[bytes]) -> float:
    path = directory / "raw.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    started = time.perf_counter()
    for buffer in batches:
        os.write(fd, buffer)
        os.fdatasync(fd)
    elapsed = time.perf_counter() - started
    os.close(fd)
    path.unlink()
    return sum(map(len, batches)) / elapsed / MiB


def log_append(directory: Path, batches: list[bytes], per_sync: int = 1) -> dict[str, float]:
    store_dir = directory / "store"
    shutil.rmtree(store_dir, ignore_errors=True)
    store = LogStore.open(store_dir, StorageConfig())
    log = store.log("bench", 0)
    entries = [Entry(i + 1, 1, EntryKind.DATA, 1_700_000_000_000 + i, b) for i, b in enumerate(batches)]
    before = write_bytes()
    started = time.perf_counter()
    for position in range(0, len(entries), per_sync):
        log.append(entries[position : position + per_sync])
        store.sync()
    elapsed = time.perf_counter() - started
    written = write_bytes() - before
    store.close()
    payload = sum(map(len, batches))
    file_size = (store_dir / "log.lmdb" / "data.mdb").stat().st_size
    shutil.rmtree(store_dir)
    return {
        "mb_per_s": payload / elapsed / MiB,
        "write_amplification_io": written / payload,
        "write_amplification_file": file_size / payload,
    }


def median_of(runs: int, measure: Callable[[], Any]) -> Any:
    results = [measure() for _ in range(runs)]
    if isinstance(results[0], dict):
        return {key: statistics.median(r[key] for r in results) for key in results[0]}
    return statistics.median(results)


def bench_append(directory: Path, quick: bool) -> dict[str, Any]:
    """Raw and log runs alternate within each repetition, so that drift of the disk hits both alike."""
    out: dict[str, Any] = {}
    repetitions = 1 if quick else 5
    for label, size, count in (("64KiB", 64 * 1024, 300 if quick else 2000), ("1MiB", MiB, 30 if quick else 200)):
        batches = make_batches(size, count)
        runs: dict[str, list[float]] = {
            "raw": [],
            "log": [],
            "wa_io": [],
            "wa_file": [],
            "grouped": [],
            "grouped_wa": [],
        }
        for _ in range(repetitions):
            runs["raw"].append(raw_append(directory, batches))
            single = log_append(directory, batches)
            runs["log"].append(single["mb_per_s"])
            runs["wa_io"].append(single["write_amplification_io"])
            runs["wa_file"].append(single["write_amplification_file"])
            grouped = log_append(directory, batches, per_sync=16)
            runs["grouped"].append(grouped["mb_per_s"])
            runs["grouped_wa"].append(grouped["write_amplification_io"])
        ratios = [log / raw for log, raw in zip(runs["log"], runs["raw"], strict=True)]
        out[label] = {
            "batch_bytes": len(batches[0]),
            "batches": count,
            "repetitions": repetitions,
            "raw_mb_per_s": statistics.median(runs["raw"]),
            "log_mb_per_s": statistics.median(runs["log"]),
            "ratio_log_to_raw": statistics.median(ratios),
            "ratio_min_max": [min(ratios), max(ratios)],
            "write_amplification_io": statistics.median(runs["wa_io"]),
            "write_amplification_file": statistics.median(runs["wa_file"]),
            "group_commit_16_mb_per_s": statistics.median(runs["grouped"]),
            "group_commit_16_write_amplification_io": statistics.median(runs["grouped_wa"]),
        }
    return out


def bench_read(directory: Path, quick: bool) -> dict[str, float]:
    total = (64 if quick else 1024) * MiB
    batches = make_batches(MiB, 16)
    store_dir = directory / "read-store"
    shutil.rmtree(store_dir, ignore_errors=True)
    store = LogStore.open(store_dir, StorageConfig())
    log = store.log("bench", 0)
    count = total // len(batches[0]) + 1
    for start in range(0, count, 64):
        log.append(
            [
                Entry(i + 1, 1, EntryKind.DATA, 1, batches[i % len(batches)])
                for i in range(start, min(count, start + 64))
            ]
        )
        store.sync()
    end = log.next_offset()

    def read_all() -> float:
        offset, read = 0, 0
        started = time.perf_counter()
        while offset < end:
            result = log.read(offset, 8 * MiB)
            read += len(result.data)
            offset = result.next_offset
        return read / (time.perf_counter() - started) / MiB

    read_all()  # warm the page cache
    speed = median_of(RUNS, read_all)
    store.close()
    shutil.rmtree(store_dir)
    return {"bytes": float(total), "mb_per_s": speed}


def arrow_ipc_body(values: list[bytes]) -> bytes:
    batch = pa.record_batch([pa.array(values, pa.binary())], names=["value"])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def bench_encoding(quick: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for records, size in ((10, 100), (1000, 100), (1000, 1024), (100, 16 * 1024)):
        values = [os.urandom(size) for _ in range(records)]
        rounds = max(3, (20_000 if quick else 200_000) // records)
        ours = encode_batch(values, timestamps_ms=1)
        ipc = arrow_ipc_body(values)
        ours_many = ours * 50
        started = time.perf_counter()
        for _ in range(rounds):
            encode_batch(values, timestamps_ms=1)
        ours_encode = rounds * records / (time.perf_counter() - started)
        started = time.perf_counter()
        for _ in range(rounds):
            arrow_ipc_body(values)
        ipc_encode = rounds * records / (time.perf_counter() - started)
        started = time.perf_counter()
        for _ in range(max(1, rounds // 50)):
            decode_batches(ours_many)
        ours_decode = max(1, rounds // 50) * 50 * records / (time.perf_counter() - started)
        started = time.perf_counter()
        for _ in range(rounds):
            pa.ipc.open_stream(ipc).read_all()
        ipc_decode = rounds * records / (time.perf_counter() - started)
        payload = records * size
        out[f"{records}x{size}B"] = {
            "columnar_bytes_per_record_overhead": (len(ours) - payload) / records,
            "arrow_ipc_bytes_per_record_overhead": (len(ipc) - payload) / records,
            "columnar_encode_records_per_s": ours_encode,
            "arrow_ipc_encode_records_per_s": ipc_encode,
            "columnar_decode_records_per_s": ours_decode,
            "arrow_ipc_decode_records_per_s": ipc_decode,
        }
    return out


def bench_layout(directory: Path, quick: bool) -> dict[str, Any]:
    """One environment per node with named databases (ours) against one environment per segment."""
    batch = make_batches(16 * 1024, 1)[0]
    rounds = 20 if quick else 100
    out: dict[str, Any] = {}
    for partitions in (1, 8, 64):
        node_dir = directory / "layout-node"
        shutil.rmtree(node_dir, ignore_errors=True)
        store = LogStore.open(node_dir, StorageConfig())
        logs = [store.log("t", p) for p in range(partitions)]
        started = time.perf_counter()
        for r in range(rounds):
            for log in logs:
                log.append([Entry(r + 1, 1, EntryKind.DATA, 1, batch)])
            store.sync()
        per_node = rounds / (time.perf_counter() - started)
        store.close()
        shutil.rmtree(node_dir)

        seg_dir = directory / "layout-segments"
        shutil.rmtree(seg_dir, ignore_errors=True)
        seg_dir.mkdir()
        envs = [lmdb.open(str(seg_dir / f"p{p}-seg0"), map_size=1 << 34, meminit=False) for p in range(partitions)]
        started = time.perf_counter()
        for r in range(rounds):
            for env in envs:
                with env.begin(write=True) as txn:
                    txn.put(r.to_bytes(8, "big"), batch, append=True)
        per_segment = rounds / (time.perf_counter() - started)
        for env in envs:
            env.close()
        shutil.rmtree(seg_dir)
        out[f"{partitions}_partitions"] = {
            "env_per_node_rounds_per_s": per_node,
            "env_per_segment_rounds_per_s": per_segment,
            "ratio": per_node / per_segment,
            "env_per_node_mb_per_s": per_node * partitions * len(batch) / MiB,
        }
    out["space_reclamation"] = space_reclamation(directory, quick)
    return out


def _disk_mb(path: Path) -> float:
    return sum(f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file()) / MiB


class _EnvPerSegmentLog:
    """The alternative layout, just enough to measure it: each segment its own LMDB environment."""

    def __init__(self, directory: Path, segment_bytes: int) -> None:
        self.directory, self.segment_bytes = directory, segment_bytes
        self.segments: list[tuple[Path, lmdb.Environment]] = []
        self.size = 0
        self.index = 0

    def append(self, value: bytes) -> None:
        if not self.segments or self.size + len(value) > self.segment_bytes:
            path = self.directory / f"seg{self.index:012d}"
            self.segments.append((path, lmdb.open(str(path), map_size=1 << 34, meminit=False)))
            self.size = 0
        self.index += 1
        with self.segments[-1][1].begin(write=True) as txn:
            txn.put(self.index.to_bytes(8, "big"), value, append=True)
        self.size += len(value)

    def drop_oldest(self, count: int) -> None:
        for path, env in self.segments[:count]:
            env.close()
            shutil.rmtree(path)
        self.segments = self.segments[count:]

    def close(self) -> None:
        for _, env in self.segments:
            env.close()


def space_reclamation(directory: Path, quick: bool) -> dict[str, float]:
    """Write W, drop the older half, write W/2 again: the disk each layout holds at each step."""
    batches = make_batches(MiB, 4)
    total = 64 if quick else 256
    segment_bytes = 8 * MiB
    node_dir = directory / "reclaim-node"
    shutil.rmtree(node_dir, ignore_errors=True)
    store = LogStore.open(node_dir, StorageConfig(segment_bytes=segment_bytes))
    log = store.log("t", 0)
    seg_dir = directory / "reclaim-segments"
    seg_dir.mkdir()
    alternative = _EnvPerSegmentLog(seg_dir, segment_bytes)
    index = 1
    for _ in range(total):
        log.append([Entry(index, 1, EntryKind.DATA, 1, batches[index % 4])])
        alternative.append(batches[index % 4])
        index += 1
        if index % 8 == 0:
            store.sync()
    store.sync()
    result = {"written_mb": total * len(batches[0]) / MiB, "node_peak_mb": _disk_mb(node_dir),
              "segment_envs_peak_mb": _disk_mb(seg_dir)}  # fmt: skip
    dropped = log.drop_before(total // 2)
    store.sync()
    alternative.drop_oldest(len(dropped))
    result["node_after_drop_mb"] = _disk_mb(node_dir)
    result["segment_envs_after_drop_mb"] = _disk_mb(seg_dir)
    for _ in range(total // 2):
        log.append([Entry(index, 1, EntryKind.DATA, 1, batches[index % 4])])
        alternative.append(batches[index % 4])
        index += 1
        if index % 8 == 0:
            store.sync()
    store.sync()
    result["node_after_rewriting_half_mb"] = _disk_mb(node_dir)
    result["segment_envs_after_rewriting_half_mb"] = _disk_mb(seg_dir)
    result["live_mb"] = log.size_bytes() / MiB
    store.close()
    alternative.close()
    shutil.rmtree(node_dir)
    shutil.rmtree(seg_dir)
    return result


def machine(directory: Path) -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "python": platform.python_version(),
        "lmdb": ".".join(map(str, lmdb.version())),
        "fdatasync_4k_p50_ms": round(fdatasync_p50_ms(directory), 3),
        "date": time.strftime("%Y-%m-%d"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="small sizes, one run each (a smoke test)")
    parser.add_argument("--dir", default=None, help="directory on the disk to measure (default: a temp dir)")
    parser.add_argument("--only", choices=["append", "read", "encoding", "layout"], action="append")
    args = parser.parse_args()
    configure_logging("warning")  # stdout carries the JSON
    directory = Path(tempfile.mkdtemp(prefix="storage-bench-", dir=args.dir))
    try:
        result: dict[str, Any] = {"machine": machine(directory), "runs": 1 if args.quick else RUNS}
        parts = args.only or ["append", "read", "encoding", "layout"]
        if "append" in parts:
            result["append"] = bench_append(directory, args.quick)
        if "read" in parts:
            result["read"] = bench_read(directory, args.quick)
        if "encoding" in parts:
            result["encoding"] = bench_encoding(args.quick)
        if "layout" in parts:
            result["layout"] = bench_layout(directory, args.quick)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2, default=lambda v: float(v) if isinstance(v, np.floating) else str(v)))
    else:
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
