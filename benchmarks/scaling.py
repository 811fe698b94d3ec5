"""Scaling curves: produce throughput against partitions and against message size, and what idle partitions cost.

    python benchmarks/scaling.py --json --out benchmarks/results/scaling.json   # 3 runs of every point
    python benchmarks/scaling.py --quick                                        # 1 run of 2 s per point

One local 3-node cluster (the launcher of scripts/cluster, default node settings) serves every point. Each
point is ``multiraft bench produce --cluster-dir DIR --json`` run as a subprocess (one producer process,
``send_batch()``, RF 3, fsync before every ack), on a fresh topic that the bench deletes afterwards:

  partitions    1, 8, 64, 512 partitions; 1 KiB values
  message size  100 B, 1 KiB, 16 KiB, 1 MiB values; --size-partitions (6) partitions

Repetitions are interleaved (every point once, then every point again) so that a noisy minute spreads over all
points; each point's figure is the median of --runs. Then the idle cost: the nodes' CPU (share of one core)
and RSS over --idle-window seconds, first with no partitions (the baseline, same cluster), then after
creating a topic of --idle-partitions partitions at RF 3 (that many replicas on every node) and waiting
--idle-settle seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _results import save_json  # noqa: E402  # benchmarks/ (this script's directory)

from multiraft.tools.launcher import ClusterInfo, cluster_down, cluster_up  # noqa: E402  # after sys.path

PARTITIONS = [1, 8, 64, 512]
SIZES = [100, 1024, 16 * 1024, 1024 * 1024]
HEADLINE = ("msgs_per_s", "mb_per_s")


def bench_produce(directory: Path, partitions: int, size: int, seconds: float) -> dict[str, Any]:
    command = [
        sys.executable, "-m", "multiraft.tools.cli", "bench", "produce", "--cluster-dir", str(directory),
        "--partitions", str(partitions), "--message-size", str(size), "--duration", str(seconds), "--json",
    ]  # fmt: skip
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MULTIRAFT_")}
    completed = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=seconds + 300, env=environment, check=False
    )
    if completed.returncode != 0:
        raise RuntimeError(f"{' '.join(command[2:])} failed ({completed.returncode}): {completed.stderr.strip()}")
    result: dict[str, Any] = json.loads(completed.stdout)
    return result


def node_cpu(info: ClusterInfo) -> dict[str, float]:
    seconds = {}
    for node in info.nodes.values():
        times = psutil.Process(node.pid).cpu_times()
        seconds[f"node{node.node_id}"] = float(times.user + times.system)
    return seconds


def idle_cost(info: ClusterInfo, window: float) -> dict[str, Any]:
    before = node_cpu(info)
    time.sleep(window)
    after = node_cpu(info)
    share = {name: round((after[name] - before[name]) / window, 4) for name in before}
    rss = {f"node{n.node_id}": round(psutil.Process(n.pid).memory_info().rss / 2**20, 1) for n in info.nodes.values()}
    return {"core_share": share, "max_core_share": max(share.values()), "rss_mib": rss}


def point_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {key: round(statistics.median(r[key] for r in runs), 3) for key in HEADLINE}
    summary["per_run"] = {key: [r[key] for r in runs] for key in HEADLINE}
    summary["client_cpu_us_per_msg"] = statistics.median(r["cpu_s"]["client_us_per_msg"] for r in runs)
    summary["nodes_cpu_us_per_msg"] = statistics.median(r["cpu_s"]["servers_us_per_msg"] for r in runs)
    summary["load_avg_1m"] = [r["machine"]["load_avg_1m"] for r in runs]
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    parser.add_argument("--out", type=Path, help="also write the JSON to this file")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds of producing per point")
    parser.add_argument("--partitions", default=",".join(map(str, PARTITIONS)))
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--size-partitions", type=int, default=6, help="partitions for the message-size curve")
    parser.add_argument("--idle-partitions", type=int, default=1000, help="0 skips the idle measurement")
    parser.add_argument("--idle-settle", type=float, default=15.0)
    parser.add_argument("--idle-window", type=float, default=20.0)
    parser.add_argument("--quick", action="store_true", help="1 run of 2 s per point, a short idle window")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.seconds, args.idle_settle, args.idle_window = 1, 2.0, 5.0, 5.0
    partition_points = [int(p) for p in args.partitions.split(",") if p]
    size_points = [int(s) for s in args.sizes.split(",") if s]
    if args.runs < 1 or args.seconds <= 0 or any(p < 1 for p in partition_points) or any(s < 8 for s in size_points):
        parser.error("--runs >= 1, --seconds > 0, partitions >= 1 and sizes >= 8 bytes")

    points = [("partitions", p, p, 1024) for p in partition_points]
    points += [("size", s, args.size_partitions, s) for s in size_points]
    scratch = Path(tempfile.mkdtemp(prefix="scaling-"))
    directory = scratch / "cluster"
    began = time.monotonic()
    load_start = os.getloadavg()[0]
    raw: dict[tuple[str, int], list[dict[str, Any]]] = {(curve, x): [] for curve, x, _, _ in points}
    idle: dict[str, Any] = {}
    info = cluster_up(directory, 3)
    try:
        for run in range(args.runs):
            for curve, x, partitions, size in points:
                result = bench_produce(directory, partitions, size, args.seconds)
                raw[(curve, x)].append(result)
                print(
                    f"run {run + 1}/{args.runs} {curve}={x}: {result['msgs_per_s']:,.0f} msg/s "
                    f"{result['mb_per_s']:.1f} MB/s",
                    file=sys.stderr,
                )
        if args.idle_partitions:
            from multiraft import Admin

            print(f"idle: baseline, then {args.idle_partitions} partitions", file=sys.stderr)
            time.sleep(args.idle_settle / 3)  # the last bench's deleted topic is being cleaned up
            idle["baseline_no_partitions"] = idle_cost(info, args.idle_window)
            with Admin(info.bootstrap, request_timeout_s=300) as admin:
                admin.create_topic("idle", partitions=args.idle_partitions, replication_factor=3)
            time.sleep(args.idle_settle)
            idle["with_partitions"] = idle_cost(info, args.idle_window)
            idle["partitions_per_node"] = args.idle_partitions
            idle["settle_s"], idle["window_s"] = args.idle_settle, args.idle_window
    finally:
        cluster_down(directory)
        for node in info.nodes.values():  # our children: collect their exit status
            with contextlib.suppress(ChildProcessError):
                os.waitpid(node.pid, 0)
        shutil.rmtree(scratch, ignore_errors=True)

    curves: dict[str, dict[str, Any]] = {"partitions": {}, "size": {}}
    for (curve, x), runs in raw.items():
        curves[curve][str(x)] = point_summary(runs)
    result = {
        "benchmark": "scaling",
        "command": "python benchmarks/scaling.py " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {
            "cpus": os.cpu_count(),
            "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "load_avg_1m": {"start": round(load_start, 2), "end": round(os.getloadavg()[0], 2)},
        },
        "params": {
            "runs": args.runs,
            "seconds": args.seconds,
            "size_partitions": args.size_partitions,
            "partition_curve_size": 1024,
            "replication_factor": 3,
            "client": "multiraft bench produce: 1 producer process, send_batch(), linger 5 ms, batch 1 MiB",
        },
        "partitions": curves["partitions"],
        "message_size": curves["size"],
        "idle": idle,
        "elapsed_s": round(time.monotonic() - began, 1),
    }
    save_json(result, args.out)
    print(json.dumps(result, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
