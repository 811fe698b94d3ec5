"""Idle scale: what N idle partition replicas per node cost (creation, CPU and memory at rest, full restart).

    python benchmarks/idle_bench.py --partitions 1000 --json
    python benchmarks/idle_bench.py --partitions 10000 --json --out benchmarks/results/idle.json

One fresh local 3-node cluster (the launcher of scripts/cluster, default node settings except the limits an
N-partition topic needs: max_topic_partitions, max_request_items and max_concurrent_streams raised to N when
N is above them). Then, in order:

  baseline   each node's CPU (share of one core) over --window seconds and its USS, with no user topic
  create     CreateTopic of N partitions at RF 3 (N replicas on every node): the call's time, the time
             until DescribeTopic reports a leader for every partition (each leader answers for itself), and
             until leadership is balanced (leaders per node steady and within 0.1 % of an even share)
  at rest    after --settle seconds: CPU over --window seconds and USS, per node
  restart    every node stopped (SIGTERM), then all started again: the time until every node serves, until
             every partition has a leader again, and until leadership is balanced again
  at rest    after the restart, as above

CPU is utime + stime from /proc/<pid>/stat; USS is Private_Clean + Private_Dirty of /proc/<pid>/smaps_rollup
(memory the process alone holds: LMDB's shared file pages are not counted). The output is one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _results import emit  # noqa: E402  # benchmarks/ (this script's directory)

from multiraft.tools.launcher import ClusterInfo, cluster_down, cluster_up, start_node, stop_node, wait_serving  # noqa: E402

_TICKS = os.sysconf("SC_CLK_TCK")
_POLL_S = 1.0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime (fields 14 and 15 of stat)


def uss_mib(pid: int) -> float:
    kib = 0
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith(("Private_Clean:", "Private_Dirty:")):
            kib += int(line.split()[1])
    return round(kib / 1024, 1)


def rest_cost(info: ClusterInfo, window: float) -> dict[str, Any]:
    pids = {f"node{n.node_id}": n.pid for n in info.nodes.values()}
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    began = time.monotonic()
    time.sleep(window)
    elapsed = time.monotonic() - began
    share = {name: round((cpu_seconds(pid) - before[name]) / elapsed, 4) for name, pid in pids.items()}
    uss = {name: uss_mib(pid) for name, pid in pids.items()}
    return {
        "core_share": share,
        "max_core_share": max(share.values()),
        "uss_mib": uss,
        "max_uss_mib": max(uss.values()),
        "window_s": round(elapsed, 1),
    }


def leaderless(bootstrap: str, topic: str, timeout_s: float) -> tuple[int, int]:
    """(partitions without a leader, partitions) as DescribeTopic reports them now."""
    from multiraft import Admin

    with Admin(bootstrap, request_timeout_s=timeout_s) as admin:
        described = admin.describe_topic(topic)
    return sum(1 for p in described.partitions if not p.leader), len(described.partitions)


def wait_all_leaders(bootstrap: str, topic: str, began: float, timeout_s: float) -> dict[str, Any]:
    """Poll DescribeTopic until every partition has a leader; seconds since ``began`` and the polls' trace."""
    trace: list[tuple[float, int]] = []
    deadline = began + timeout_s
    while time.monotonic() < deadline:
        try:
            missing, _total = leaderless(bootstrap, topic, 30.0)
        except Exception as exc:  # a node still starting: poll again
            trace.append((round(time.monotonic() - began, 2), -1))
            print(f"  describe failed: {type(exc).__name__}", file=sys.stderr)
            time.sleep(_POLL_S)
            continue
        trace.append((round(time.monotonic() - began, 2), missing))
        if missing == 0:
            return {"all_leaders_s": round(time.monotonic() - began, 2), "trace": trace[-20:]}
        print(f"  {missing} partitions without a leader at {trace[-1][0]} s", file=sys.stderr)
        time.sleep(_POLL_S)
    return {"all_leaders_s": None, "timed_out_after_s": timeout_s, "trace": trace[-20:]}


def create_topic(bootstrap: str, args: argparse.Namespace) -> bool:
    """Create the topic; True if the client retried the call and found it created by its first attempt."""
    from multiraft import Admin
    from multiraft.errors import TopicExistsError

    with Admin(bootstrap, request_timeout_s=args.timeout) as admin:
        try:
            admin.create_topic("idle", partitions=args.partitions, replication_factor=3)
        except TopicExistsError:
            return True
    return False


def leaders_per_node(bootstrap: str) -> dict[str, int]:
    from multiraft import Admin

    with Admin(bootstrap, request_timeout_s=30.0) as admin:
        cluster = admin.describe_cluster()
    return {f"node{load.node_id}": load.leaders for load in cluster.loads}


def wait_balanced(bootstrap: str, partitions: int, began: float, timeout_s: float) -> dict[str, Any]:
    """Wait until leadership has settled: the leaders per node unchanged over two polls and within 0.1 % of
    an even share (partition leaders hand leadership back to the preferred leaders every few seconds, and a
    group moving its leader is not at rest). Seconds since ``began``."""
    previous: dict[str, int] = {}
    deadline = began + timeout_s
    while time.monotonic() < deadline:
        try:
            leaders = leaders_per_node(bootstrap)
        except Exception:  # a node busy past the call's deadline: poll again
            leaders = {}
        spread = max(leaders.values()) - min(leaders.values()) if leaders else partitions
        if leaders and leaders == previous and spread <= partitions // 1000 + 1:
            return {"balanced_s": round(time.monotonic() - began, 2), "leaders": leaders}
        previous = leaders
        time.sleep(2 * _POLL_S)
    return {"balanced_s": None, "leaders": previous}


def leadership_times(info: ClusterInfo, args: argparse.Namespace, started: float) -> dict[str, Any]:
    """Seconds from ``started`` until every partition has a leader, then until leadership is balanced."""
    times = wait_all_leaders(info.bootstrap, "idle", started, args.timeout)
    times.update(wait_balanced(info.bootstrap, args.partitions, started, args.timeout))
    return times


def settled_rest(info: ClusterInfo, args: argparse.Namespace, label: str) -> dict[str, Any]:
    """Wait ``--settle`` seconds, then the cost at rest over ``--window`` seconds, with the leaders per node."""
    time.sleep(args.settle)
    rest = rest_cost(info, args.window)
    rest["leaders"] = leaders_per_node(info.bootstrap)
    print(f"{label}: {rest}", file=sys.stderr)
    return rest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    parser.add_argument("--out", type=Path, help="also write the JSON to this file")
    parser.add_argument("--partitions", type=int, default=10_000, help="partitions of the RF 3 topic")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds to wait before a rest window")
    parser.add_argument("--window", type=float, default=20.0, help="seconds of a rest window")
    parser.add_argument("--timeout", type=float, default=600.0, help="most seconds to wait for leaders")
    parser.add_argument("--no-restart", action="store_true", help="skip the full restart")
    parser.add_argument("--keep", type=Path, help="leave the cluster running in this directory (for profiling)")
    args = parser.parse_args()
    if args.partitions < 1 or args.window <= 0 or args.settle < 0:
        parser.error("--partitions >= 1, --window > 0, --settle >= 0")

    limit = max(args.partitions, 10_000)
    settings = {"max_topic_partitions": max(args.partitions, 4_096), "max_request_items": limit}
    settings["max_concurrent_streams"] = limit
    scratch = Path(tempfile.mkdtemp(prefix="idle-")) if args.keep is None else args.keep
    directory = scratch / "cluster" if args.keep is None else args.keep
    began = time.monotonic()
    load_start = os.getloadavg()[0]
    command = "python benchmarks/idle_bench.py " + " ".join(sys.argv[1:])
    result: dict[str, Any] = {"benchmark": "idle", "command": command}
    info = cluster_up(directory, 3, settings)
    try:
        time.sleep(args.settle / 2)
        result["baseline_no_topic"] = rest_cost(info, args.window)
        print(f"baseline: {result['baseline_no_topic']}", file=sys.stderr)
        started = time.monotonic()
        create: dict[str, Any] = {"create_call_s": 0.0, "create_retried": create_topic(info.bootstrap, args)}
        create["create_call_s"] = round(time.monotonic() - started, 2)
        result["create"] = create | leadership_times(info, args, started)
        print(f"create: {result['create']}", file=sys.stderr)
        result["rest"] = settled_rest(info, args, "rest")
        if not args.no_restart:
            stopping = time.monotonic()
            for node_id in info.nodes:
                stop_node(info, node_id, timeout_s=60.0)
            restart: dict[str, Any] = {"stop_s": round(time.monotonic() - stopping, 2)}
            started = time.monotonic()
            for node_id in info.nodes:
                start_node(info, node_id)
            wait_serving(info, timeout_s=args.timeout)
            restart["serving_s"] = round(time.monotonic() - started, 2)
            result["restart"] = restart | leadership_times(info, args, started)
            print(f"restart: {result['restart']}", file=sys.stderr)
            result["rest_after_restart"] = settled_rest(info, args, "rest after restart")
    finally:
        if args.keep is None:
            cluster_down(directory)
            for node in info.nodes.values():  # our children: collect their exit status
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(node.pid, 0)
            shutil.rmtree(scratch, ignore_errors=True)

    result.update(
        {
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "machine": {
                "cpus": os.cpu_count(),
                "load_avg_1m": {"start": round(load_start, 2), "end": round(os.getloadavg()[0], 2)},
            },
            "params": {
                "partitions": args.partitions,
                "replication_factor": 3,
                "nodes": 3,
                "settle_s": args.settle,
                "window_s": args.window,
                "settings": settings,
            },
            "elapsed_s": round(time.monotonic() - began, 1),
        }
    )
    emit(result, args.out, compact=args.json)


if __name__ == "__main__":
    main()
