"""Cluster benchmark: a local 3-node cluster (separate processes) and this process as the one producer.

    python benchmarks/cluster_bench.py produce --json   # msgs/s with client-side batches, RF 3, fsync before ack
    python benchmarks/cluster_bench.py latency --json   # one message at a time, waiting for each ack
    python benchmarks/cluster_bench.py idle --json      # CPU of nodes hosting 1,000 idle partition replicas each
    python benchmarks/cluster_bench.py grpc --json      # baseline: a bare gRPC round trip to a node (same run)

Each figure is the median of --runs runs, each on a fresh cluster. CPU seconds are read from /proc for
the producer and for every node process.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from multiraft import Admin
from multiraft.tools.launcher import ClusterInfo, cluster_down, cluster_up
from rpc.client._cluster import ClusterClient
from rpc.proto import multiraft_pb2 as pb
from storage import encode_batch


def cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def _down_if_still_there(root: Path) -> None:
    """The exit-time safety net: a run that ended normally has already stopped and removed its cluster."""
    with contextlib.suppress(FileNotFoundError):
        cluster_down(root)


def start_cluster(root: Path, settings: dict[str, Any]) -> tuple[ClusterInfo, ClusterClient]:
    shutil.rmtree(root, ignore_errors=True)
    info = cluster_up(root, 3, settings)
    atexit.register(_down_if_still_there, root)
    return info, ClusterClient(info.bootstrap, request_timeout_s=120)


def leaders(client: ClusterClient, topic: str) -> dict[int, str]:
    """partition -> leader address, waiting until every partition's leader is known."""
    deadline = time.monotonic() + 30
    while True:
        metadata = client.metadata(refresh=True)
        parts = metadata.topics[topic].partitions
        if all(p.leader for p in parts) or time.monotonic() > deadline:
            return {p.partition: metadata.nodes[p.leader or p.preferred_leader] for p in parts}
        time.sleep(0.1)


def run_produce(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    info, client = start_cluster(root, {})
    try:
        Admin(client).create_topic("bench", partitions=args.partitions, replication_factor=3)
        addresses = leaders(client, "bench")
        values = [os.urandom(args.size) for _ in range(args.batch_records)]
        batch = encode_batch(values, timestamps_ms=int(time.time() * 1000))
        acked = [0] * args.partitions
        node_cpu = {n.node_id: cpu_seconds(n.pid) for n in info.nodes.values()}
        client_cpu = cpu_seconds(os.getpid())

        def worker(partition: int) -> None:
            stub = client.log_stub(addresses[partition])
            request = pb.ProduceRequest(topic="bench", partition=partition, batch=batch)
            deadline = time.monotonic() + args.duration
            in_flight: list[Any] = []
            while time.monotonic() < deadline:
                in_flight.append(stub.Produce.future(request, timeout=60))
                if len(in_flight) >= args.in_flight:
                    in_flight.pop(0).result()
                    acked[partition] += 1
            for future in in_flight:
                future.result()
                acked[partition] += 1

        started = time.monotonic()
        threads = [threading.Thread(target=worker, args=(p,)) for p in range(args.partitions)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
        messages = sum(acked) * args.batch_records
        return {
            "msgs_per_s": messages / elapsed,
            "mb_per_s": sum(acked) * len(batch) / elapsed / 1e6,
            "batch_bytes": len(batch),
            "cpu_s": {
                "client": cpu_seconds(os.getpid()) - client_cpu,
                **{f"node{n}": cpu_seconds(info.nodes[n].pid) - c for n, c in node_cpu.items()},
            },
        }
    finally:
        client.close()
        cluster_down(root)


def _percentiles(samples: list[float]) -> dict[str, float]:
    samples = sorted(samples)
    pick = lambda q: samples[min(len(samples) - 1, int(q * len(samples)))]  # noqa: E731
    return {"p50_ms": pick(0.5), "p99_ms": pick(0.99), "p999_ms": pick(0.999)}


def run_latency(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    _, client = start_cluster(root, {})
    try:
        Admin(client).create_topic("latency", partitions=1, replication_factor=3)
        stub = client.log_stub(leaders(client, "latency")[0])
        request = pb.ProduceRequest(
            topic="latency", partition=0, batch=encode_batch([os.urandom(args.size)], timestamps_ms=1)
        )
        for _ in range(100):
            stub.Produce(request, timeout=10)
        samples = []
        for _ in range(args.samples):
            started = time.perf_counter()
            stub.Produce(request, timeout=10)
            samples.append((time.perf_counter() - started) * 1000)
        return {**_percentiles(samples), "msgs_per_s": len(samples) / (sum(samples) / 1000)}
    finally:
        client.close()
        cluster_down(root)


def run_grpc_baseline(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    info, client = start_cluster(root, {})
    try:
        stub = client.admin_stub(info.nodes[1].client_address)
        for _ in range(100):
            stub.ListTopics(pb.ListTopicsRequest(), timeout=10)
        samples = []
        for _ in range(args.samples):
            started = time.perf_counter()
            stub.ListTopics(pb.ListTopicsRequest(), timeout=10)
            samples.append((time.perf_counter() - started) * 1000)
        return _percentiles(samples)
    finally:
        client.close()
        cluster_down(root)


def run_idle(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    info, client = start_cluster(root, {})
    try:
        Admin(client).create_topic("idle", partitions=args.idle_partitions, replication_factor=3)
        time.sleep(args.settle)
        before = {n.node_id: cpu_seconds(n.pid) for n in info.nodes.values()}
        time.sleep(args.window)
        usage = {n: (cpu_seconds(info.nodes[n].pid) - c) / args.window for n, c in before.items()}
        rss = {n: psutil.Process(info.nodes[n].pid).memory_info().rss / 2**20 for n in info.nodes}
        return {
            "partitions_per_node": args.idle_partitions,
            "core_share": {f"node{n}": u for n, u in usage.items()},
            "max_core_share": max(usage.values()),
            "rss_mib": {f"node{n}": r for n, r in rss.items()},
        }
    finally:
        client.close()
        cluster_down(root)


def median_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for key, value in runs[0].items():
        if isinstance(value, int | float):
            summary[key] = statistics.median(r[key] for r in runs)
        elif isinstance(value, dict) and all(isinstance(v, int | float) for v in value.values()):
            summary[key] = {k: statistics.median(r[key][k] for r in runs) for k in value}
        else:
            summary[key] = value
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["produce", "latency", "idle", "grpc"])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--size", type=int, default=1024, help="value size in bytes")
    parser.add_argument("--batch-records", type=int, default=256, help="records per client-side batch")
    parser.add_argument("--in-flight", type=int, default=4, help="unacknowledged batches per partition")
    parser.add_argument("--duration", type=float, default=15.0, help="seconds of producing per run")
    parser.add_argument("--samples", type=int, default=3000, help="one-at-a-time requests per run")
    parser.add_argument("--idle-partitions", type=int, default=1000)
    parser.add_argument("--settle", type=float, default=20.0, help="seconds before measuring idle CPU")
    parser.add_argument("--window", type=float, default=30.0, help="seconds of idle CPU measured")
    args = parser.parse_args()
    runner = {"produce": run_produce, "latency": run_latency, "idle": run_idle, "grpc": run_grpc_baseline}[args.mode]
    scratch = Path(tempfile.mkdtemp(prefix="cluster-bench-"))
    runs = []
    try:
        for index in range(args.runs):
            runs.append(runner(scratch / f"run{index}", args))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    params = {k: v for k, v in vars(args).items() if k not in ("json",)}
    result = {"mode": args.mode, "params": params, "median": median_runs(runs), "runs": runs}
    print(json.dumps(result, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
