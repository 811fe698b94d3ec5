"""Recovery benchmark: from ``kill -9`` of a node to "declared dead" and to "replication factor restored".

For each amount of data per partition, a fresh cluster of real node processes on 127.0.0.1 (member-list
``local`` profile, ``replica_replace_after_ms`` as given) gets a topic, the data is written, and one node that
is not the controller leader is killed with SIGKILL. Measured, polling every 50 ms through DescribeCluster and
DescribeTopic on a live node:

* ``declared_dead_s``: until the cluster reports the node ``dead`` (member-list failure detection);
* ``restored_s``: until every partition has its replication factor of in-sync replicas, all on live nodes
  (includes ``replica_replace_after_ms``, the copy of the data to the replacements and their promotion).

The baseline in the same run is the same cluster with no data (size 0): what detection and the move steps
cost by themselves. Medians of ``--repeats`` runs.

Then the member-list's own cost: CPU and bandwidth per node for 5 members on 127.0.0.1 and the projection to
100 and 1,000 members from the simulated network, reusing ``benchmarks/membership_bench.py``.

Usage::

    .venv/bin/python benchmarks/recovery_bench.py --json
    .venv/bin/python benchmarks/recovery_bench.py --sizes-mb 0,4 --repeats 1 --skip-membership   # quick look
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from multiraft.logging import configure_logging  # noqa: E402
from multiraft.tools.launcher import ClusterInfo, cluster_down, cluster_up, kill_node  # noqa: E402
from rpc.client._cluster import ClusterClient  # noqa: E402
from rpc.proto import multiraft_pb2 as pb  # noqa: E402
from storage import encode_batch  # noqa: E402

TOPIC = "recovery"
_POLL_S = 0.05
_VALUE = b"x" * 1000
_BATCH_RECORDS = 256  # ~256 KB batches


def _membership_bench() -> Any:
    spec = importlib.util.spec_from_file_location("membership_bench", ROOT / "benchmarks" / "membership_bench.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _describe_cluster(client: ClusterClient) -> pb.DescribeClusterResponse:
    request = pb.DescribeClusterRequest()
    response: pb.DescribeClusterResponse = client.call_any(
        lambda stub, timeout: stub.DescribeCluster(request, timeout=timeout)
    )
    return response


def _produce(client: ClusterClient, partition: int, batch: bytes) -> None:
    request = pb.ProduceRequest(topic=TOPIC, partition=partition, batch=batch)
    client.call_leader(TOPIC, partition, lambda stub, timeout: stub.Produce(request, timeout=timeout))


def _preload(client: ClusterClient, partitions: int, mb_per_partition: float) -> int:
    batch = encode_batch([_VALUE] * _BATCH_RECORDS, timestamps_ms=int(time.time() * 1000))
    batches = int(mb_per_partition * 1_000_000 / len(batch))
    written = 0
    for partition in range(partitions):
        for _ in range(batches):
            _produce(client, partition, batch)
            written += len(batch)
    return written


def _restored(client: ClusterClient, live: set[int], rf: int) -> bool:
    request = pb.DescribeTopicRequest(name=TOPIC)
    topic = client.call_any(lambda stub, timeout: stub.DescribeTopic(request, timeout=timeout)).topic
    return all(
        len(p.replicas) == rf and set(p.replicas) <= live and set(p.in_sync_replicas) == set(p.replicas) and p.leader
        for p in topic.partitions
    )


def _one_run(args: argparse.Namespace, mb: float, scratch: Path) -> dict[str, Any]:
    settings = {
        "membership_profile": "local",
        "replica_replace_after_ms": args.replace_after_ms,
        "rebalance_interval_ms": 200,
        "max_concurrent_moves": args.max_moves,
        "move_bandwidth_mb_s": args.bandwidth_mb_s,
    }
    directory = Path(tempfile.mkdtemp(dir=scratch))
    info: ClusterInfo = cluster_up(directory, args.nodes, settings)
    client = ClusterClient(info.bootstrap, request_timeout_s=30)
    try:
        request = pb.CreateTopicRequest(
            name=TOPIC,
            partitions=args.partitions,
            replication_factor=3,
            configs={"segment.bytes": str(args.segment_bytes)},
        )
        client.call_any(lambda stub, timeout: stub.CreateTopic(request, timeout=timeout))
        client.metadata(refresh=True)
        written = _preload(client, args.partitions, mb)
        described = client.call_any(
            lambda stub, timeout: stub.DescribeCluster(pb.DescribeClusterRequest(), timeout=timeout)
        )
        controller = described.controller_id
        victim = max(n for n in info.nodes if n != controller)
        live = set(info.nodes) - {victim}
        watcher = ClusterClient(info.nodes[controller].client_address, request_timeout_s=10)
        kill_node(info, victim)
        killed = time.monotonic()
        dead_s = restored_s = None
        moved_bytes = 0
        while time.monotonic() - killed < args.timeout_s:
            cluster = _describe_cluster(watcher)
            if dead_s is None:
                if any(n.node_id == victim and n.state == "dead" for n in cluster.nodes):
                    dead_s = time.monotonic() - killed
            else:
                moved_bytes = max([moved_bytes, *(m.bytes_total for m in cluster.moves)])
                if not cluster.moves and _restored(watcher, live, 3):
                    restored_s = time.monotonic() - killed
                    break
            time.sleep(_POLL_S)
        watcher.close()
        return {
            "mb_per_partition": mb,
            "bytes_written": written,
            "declared_dead_s": None if dead_s is None else round(dead_s, 3),
            "restored_s": None if restored_s is None else round(restored_s, 3),
            "largest_move_bytes_seen": moved_bytes,
        }
    finally:
        client.close()
        cluster_down(directory)
        if args.keep_dir:
            print(f"kept cluster directory {directory}", file=sys.stderr)
        else:
            shutil.rmtree(directory, ignore_errors=True)


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 3) if known else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--sizes-mb", default="0,4,16", help="data per partition, MB (0 is the baseline)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--segment-bytes", type=int, default=1 << 20, help="topic segment.bytes (sealed segments)")
    parser.add_argument("--replace-after-ms", type=int, default=1_000)
    parser.add_argument("--max-moves", type=int, default=4)
    parser.add_argument("--bandwidth-mb-s", type=float, default=0.0, help="move_bandwidth_mb_s (0 = unlimited)")
    parser.add_argument("--timeout-s", type=float, default=180.0)
    parser.add_argument("--skip-membership", action="store_true")
    parser.add_argument("--keep-dir", default="", help="run the clusters under this directory and keep them (logs)")
    parser.add_argument("--membership-window", type=float, default=10.0, help="5-node runtime window, s")
    parser.add_argument("--projection-sizes", default="100,1000")
    args = parser.parse_args()
    configure_logging("warning")
    started = time.perf_counter()
    result: dict[str, Any] = {
        "benchmark": "recovery",
        "command": " ".join([os.path.relpath(sys.executable), *sys.argv]),
        "settings": {k: v for k, v in vars(args).items() if k != "json"},
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }
    runs: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        if args.keep_dir:
            Path(args.keep_dir).mkdir(parents=True, exist_ok=True)
            scratch = args.keep_dir
        else:
            scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="recovery-bench-"))
        for mb in (float(s) for s in args.sizes_mb.split(",")):
            trials = [_one_run(args, mb, Path(scratch)) for _ in range(args.repeats)]
            runs[f"{mb:g}"] = {
                "mb_per_partition": mb,
                "declared_dead_s_median": _median([t["declared_dead_s"] for t in trials]),
                "restored_s_median": _median([t["restored_s"] for t in trials]),
                "trials": trials,
            }
            if not args.json:
                print(json.dumps(runs[f"{mb:g}"]), file=sys.stderr)
    baseline = runs.get("0", {}).get("restored_s_median")
    for entry in runs.values():
        restored = entry["restored_s_median"]
        entry["restored_ratio_to_baseline"] = round(restored / baseline, 2) if baseline and restored else None
    result["kill_to_recovery"] = runs
    if not args.skip_membership:
        bench = _membership_bench()
        result["membership_runtime_5_nodes"] = asyncio.run(bench._runtime_section(2.0, args.membership_window, 5.0))
        sizes = [int(s) for s in args.projection_sizes.split(",")]
        result["membership_projection"] = bench._projection_section(sizes, 1, warmup=30.0, window=60.0)
    result["bench_wall_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(result, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
