"""Peer benchmarks: the workloads of `multiraft bench`, run against NATS JetStream and Redis Streams.

    python benchmarks/peers/run.py                     # a table; 100k x 1 KiB, median of 3 runs
    python benchmarks/peers/run.py --json              # exactly one JSON object on stdout
    python benchmarks/peers/run.py --quick --json      # a smoke run (small N, 1 run)
    python benchmarks/peers/run.py --systems redis --count 50000 --size 100

Systems (installed if missing: Debian packages nats-server and redis-server when root, nats-py and redis by pip):
  nats   NATS JetStream: 3 nats-server processes in one cluster, JetStream with file storage, one R3 stream
  redis  Redis Streams: one redis-server with appendonly yes and appendfsync always

Workloads, each from a Python client in this process:
  produce  N messages of S bytes with many in flight: msgs/s, MB/s (MB = 10^6 bytes)
  consume  read all N back from the first: msgs/s, MB/s
  latency  one message at a time, each waiting for its acknowledgement: p50, p99, p999 in ms

Every figure is the median of --runs runs; the per-run values are kept under "runs". CPU seconds of the client
and of each server process, and bytes each server wrote to storage, are measured around every workload.
All servers listen on free 127.0.0.1 ports, keep their data in a temp dir, and are stopped by PID at the end,
on any error, and on SIGTERM.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import (
    PROCESSES,
    PeerSetupError,
    distribution_version,
    ensure_debian_packages,
    ensure_python_packages,
    install_signal_handlers,
    machine_facts,
    summarize_workload,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _disk import fdatasync_p50_ms  # benchmarks/, after sys.path

SYSTEMS = ("nats", "redis")
WORKLOADS = ("produce", "consume", "latency")
PYTHON_CLIENTS = {"nats": "nats-py>=2.6", "redis": "redis>=5"}
DEBIAN = {"nats": ("nats-server", "nats-server"), "redis": ("redis-server", "redis-server")}
OURS_ACK_GUARANTEE = (
    "multiraft (run beside these by benchmarks/peers/versus.py, with `multiraft bench`, whose JSON has the same "
    "fields) acknowledges a write once a majority of the partition's replicas have fsynced it."
)
DEFAULTS = {"count": 100_000, "size": 1024, "window": 512, "latency_samples": 5000, "consume_batch": 1000, "runs": 3}
QUICK = {"count": 10_000, "latency_samples": 1000, "runs": 1}
NATS_MAX_SIZE = 1024 * 1024 - 4096  # max_payload minus room for headers


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated: nats,redis (default: both)")
    parser.add_argument("--count", type=int, help=f"messages per produce/consume (default {DEFAULTS['count']})")
    parser.add_argument("--size", type=int, help=f"message payload in bytes (default {DEFAULTS['size']})")
    parser.add_argument("--window", type=int, help=f"acks in flight / pipeline depth (default {DEFAULTS['window']})")
    parser.add_argument(
        "--latency-samples", type=int, help=f"one-at-a-time round trips (default {DEFAULTS['latency_samples']})"
    )
    parser.add_argument(
        "--consume-batch", type=int, help=f"entries per XRANGE page (Redis) (default {DEFAULTS['consume_batch']})"
    )
    parser.add_argument("--runs", type=int, help=f"runs per system; figures are medians (default {DEFAULTS['runs']})")
    parser.add_argument("--quick", action="store_true", help="smoke run: 10k messages, 1k samples, 1 run")
    parser.add_argument("--timeout", type=float, default=600.0, help="bound on each workload, seconds (default 600)")
    parser.add_argument("--dir", default=None, help="parent of the servers' temp data dir (default: system temp)")
    args = parser.parse_args(argv)

    for key, default in DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, QUICK.get(key, default) if args.quick else default)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown or not systems:
        parser.error(f"--systems: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(SYSTEMS)}")
    args.systems = list(dict.fromkeys(systems))
    for key in ("count", "size", "window", "latency_samples", "consume_batch", "runs"):
        if getattr(args, key) < 1:
            parser.error(f"--{key.replace('_', '-')} must be at least 1, got {getattr(args, key)}")
    if "nats" in args.systems and args.size > NATS_MAX_SIZE:
        parser.error(f"--size {args.size} exceeds what one NATS message may carry here ({NATS_MAX_SIZE} bytes)")
    if args.timeout <= 0:
        parser.error("--timeout must be positive")
    return args


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def bench_system(
    name: str, binary: str, workdir: Path, params: dict[str, Any], runs: int, timeout_s: float
) -> dict[str, Any]:
    """Start one system, run every workload ``runs`` times, stop it; medians and per-run values."""
    module = importlib.import_module(f"{name}_bench")  # after the clients were installed
    version = module.check_version(binary)
    started = time.monotonic()
    load_start = _load()
    if name == "nats":
        log(f"nats: starting 3 nats-server {version} nodes")
        target = module.start_cluster(binary, version, workdir)
        client = f"nats-py {distribution_version('nats-py')}"
    else:
        log(f"redis: starting redis-server {version}")
        target = module.start_server(binary, version, workdir)
        client = f"redis-py {distribution_version('redis')}"
    startup_s = round(time.monotonic() - started, 2)
    per_run: list[dict[str, dict[str, Any]]] = []
    try:
        for index in range(runs):
            result = module.run(target, params, timeout_s)
            per_run.append(result)
            log(
                f"{name}: run {index + 1}/{runs}: "
                + ", ".join(
                    f"{w} {result[w]['msgs_per_s']:,.0f} msg/s"
                    + (f" p50 {result[w]['p50_ms']:.2f} ms" if w == "latency" else "")
                    for w in WORKLOADS
                )
            )
        description = module.describe(target, params)
    finally:
        for server in target.servers.values():
            PROCESSES.stop(server)
    workloads = {w: summarize_workload([run[w] for run in per_run], description["params"][w]) for w in WORKLOADS}
    del description["params"]
    return {
        **description,
        "client": client,
        "runs": runs,
        "workloads": workloads,
        "load_avg_1m": {"start": load_start, "end": _load()},
        "startup_s": startup_s,
        "elapsed_s": round(time.monotonic() - started, 1),
    }


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def print_table(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    params = result["params"]
    table = Table(
        title=(
            f"Peers: {params['count']:,} x {params['size']:,} B, window {params['window']}, "
            f"{params['latency_samples']:,} latency samples, median of {params['runs']} run(s)"
        )
    )
    for column in ("system", "workload", "msgs/s", "MB/s", "p50 ms", "p99 ms", "p999 ms"):
        table.add_column(column, justify="left" if column in ("system", "workload") else "right")
    for column in ("client CPU us/msg", "servers CPU us/msg", "disk B per payload B", "msgs/s per run"):
        table.add_column(column, justify="right")
    for name, system in result["systems"].items():
        for workload, figures in system["workloads"].items():
            latency = workload == "latency"
            table.add_row(
                f"{name} {system['server_version']}",
                workload,
                f"{figures['msgs_per_s']:,.0f}",
                f"{figures['mb_per_s']:.1f}",
                f"{figures['p50_ms']:.3f}" if latency else "",
                f"{figures['p99_ms']:.3f}" if latency else "",
                f"{figures['p999_ms']:.3f}" if latency else "",
                f"{figures['cpu_s']['client_us_per_msg']:.0f}",
                f"{figures['cpu_s']['servers_us_per_msg']:.0f}",
                f"{figures['disk_write_mb']['per_payload_byte']:.2f}",
                ", ".join(f"{run['msgs_per_s']:,.0f}" for run in figures["runs"]),
            )
    console = Console()
    console.print(table)
    for name, system in result["systems"].items():
        console.print(f"[bold]{name}[/bold] acknowledges: {system['ack_guarantee']}")
    console.print(f"[bold]ours[/bold]: {result['ours_ack_guarantee']}")
    machine = result["machine"]
    console.print(
        f"machine: {machine['cpus']} CPUs, {machine['memory_gib']} GiB, 4 KiB fdatasync p50 "
        f"{machine['fdatasync_4k_p50_ms']} ms at start, {machine['fdatasync_4k_p50_ms_at_end']} ms at end, "
        f"load {machine['load_avg_1m_at_start']} -> {machine['load_avg_1m_at_end']}; total {result['elapsed_s']} s"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    install_signal_handlers()
    began = time.monotonic()
    try:
        ensure_python_packages({"nats" if s == "nats" else "redis": PYTHON_CLIENTS[s] for s in args.systems})
        binaries = ensure_debian_packages({DEBIAN[s][0]: DEBIAN[s][1] for s in args.systems})
    except PeerSetupError as exc:
        log(f"error: {exc}")
        return 2

    params = {
        "count": args.count,
        "size": args.size,
        "window": args.window,
        "latency_samples": args.latency_samples,
        "consume_batch": args.consume_batch,
        "runs": args.runs,
        "quick": args.quick,
        "timeout_s": args.timeout,
        "settle": "os.sync() before each produce and latency workload; consume reads what produce just wrote",
    }
    workdir = Path(tempfile.mkdtemp(prefix="multiraft-peers-", dir=args.dir))
    try:
        result: dict[str, Any] = {
            "benchmark": "peers",
            "command": "python benchmarks/peers/run.py " + " ".join(sys.argv[1:] if argv is None else argv),
            "machine": machine_facts(workdir),
            "params": params,
            "units": {"mb_per_s": "10^6 bytes per second", "latency": "ms", "cpu_s": "CPU seconds (user+system)"},
            "ours_ack_guarantee": OURS_ACK_GUARANTEE,
            "systems": {},
        }
        for name in args.systems:
            result["systems"][name] = bench_system(
                name, binaries[DEBIAN[name][0]], workdir, params, args.runs, args.timeout
            )
        result["machine"]["load_avg_1m_at_end"] = _load()
        result["machine"]["fdatasync_4k_p50_ms_at_end"] = fdatasync_p50_ms(workdir)
    except (PeerSetupError, TimeoutError, RuntimeError) as exc:
        log(f"error: {exc}")
        return 1
    finally:
        PROCESSES.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)
    result["elapsed_s"] = round(time.monotonic() - began, 1)

    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
