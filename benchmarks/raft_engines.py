"""Raft engines side by side: the same 3-replica replicated-append workload on pysyncobj 0.3.17 and on ours.

    python benchmarks/raft_engines.py --json                 # 3 runs of every workload, both engines
    python benchmarks/raft_engines.py --quick                # 1 run of 2 s per workload: a smoke test
    python benchmarks/raft_engines.py --json --out benchmarks/results/raft_engines.json

Workloads (an "op" is one replicated entry holding one payload of random bytes):
  one       1 KiB payloads, one at a time: each waits until it is committed
  inflight  1 KiB payloads, --window (256) uncommitted at once
  big       256 KiB payloads, --big-window (8) uncommitted at once

Engines, each as 3 processes on 127.0.0.1:
  pysyncobj  3 SyncObj processes with a FileJournal; one @replicated ``append(payload)``, called in the leader's
             own process (no client hop). pysyncobj never fsyncs: an acknowledged entry is in the memory of a
             majority. Settings: its documented ones for each goal, both tried, the better reported:
             ``appendEntriesUseBatch=False`` ("improve single request speed") and ``True`` ("improve overall
             performance"), with a 10 ms append period, 1 MiB socket buffers and a 1 MiB batch size.
  multiraft  3 node processes started by the launcher (scripts/cluster) with their default settings; a topic of
             one partition (one Raft group), RF 3; each op is a Produce request carrying one record batch of one
             record, sent by this process over gRPC to the leader. A node acknowledges once a majority has
             fsynced the entry (group commit).

Each run measures both engines back to back, workload by workload, for --seconds each; figures are medians of
--runs runs, and the ratio (ours / pysyncobj) is computed per run and its median reported.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import queue
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _results import save_json  # benchmarks/ (this script's directory)

KIB = 1024
MB = 1_000_000
WORKLOADS: dict[str, dict[str, int]] = {
    "one": {"size": KIB, "window": 1},
    "inflight": {"size": KIB, "window": 256},
    "big": {"size": 256 * KIB, "window": 8},
}
PYSYNCOBJ_VARIANTS: dict[str, dict[str, Any]] = {
    "batch=False": {"appendEntriesUseBatch": False},
    "batch=True": {"appendEntriesUseBatch": True, "appendEntriesPeriod": 0.01, "autoTickPeriod": 0.005},
}
POOL = 16  # distinct random payloads cycled through per workload


@dataclass
class Measure:
    ops: int
    seconds: float
    size: int
    latencies_ms: list[float]

    def figures(self) -> dict[str, Any]:
        ordered = sorted(self.latencies_ms)

        def rank(q: float) -> float | None:
            if not ordered:
                return None
            return round(ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.999999) - 1))], 3)

        return {
            "ops": self.ops,
            "seconds": round(self.seconds, 3),
            "ops_per_s": round(self.ops / self.seconds, 1),
            "mb_per_s": round(self.ops * self.size / self.seconds / MB, 3),
            "p50_ms": rank(0.5),
            "p99_ms": rank(0.99),
        }


def drive(submit: Callable[[bytes, Callable[[], None]], None], size: int, window: int, seconds: float) -> Measure:
    """Keep ``window`` ops outstanding for ``seconds``; ``submit(payload, done)`` must call ``done`` once the op
    is committed (from any thread). Latency is submit-to-done."""
    payloads = [os.urandom(size) for _ in range(POOL)]
    slots = threading.Semaphore(window)
    lock = threading.Lock()
    latencies: list[float] = []
    outstanding = [0]
    all_done = threading.Event()
    all_done.set()
    started = time.perf_counter()
    deadline = started + seconds
    submitted = 0
    while time.perf_counter() < deadline:
        if not slots.acquire(timeout=1.0):
            continue
        begin = time.perf_counter()

        def done(begin: float = begin) -> None:
            elapsed = (time.perf_counter() - begin) * 1000
            with lock:
                latencies.append(elapsed)
                outstanding[0] -= 1
                if outstanding[0] == 0:
                    all_done.set()
            slots.release()

        with lock:
            outstanding[0] += 1
            all_done.clear()
        submit(payloads[submitted % POOL], done)
        submitted += 1
    if not all_done.wait(120):
        raise TimeoutError(f"{outstanding[0]} ops not committed 120 s after the end")
    return Measure(len(latencies), time.perf_counter() - started, size, latencies)


# ---------------------------------------------------------------------------------------------------- pysyncobj


def pysyncobj_node(index: int, addresses: list[str], journal: str, variant: dict[str, Any], pipe: Connection) -> None:
    """One pysyncobj replica (a spawned process): answers ``status`` and runs ``run`` workloads when leader."""
    from pysyncobj import SyncObj, SyncObjConf, replicated

    class AppendLog(SyncObj):  # type: ignore[misc]
        def __init__(self, address: str, partners: list[str], conf: Any) -> None:
            super().__init__(address, partners, conf)
            self.entries = 0
            self.bytes = 0

        @replicated  # type: ignore[untyped-decorator]
        def append(self, payload: bytes) -> int:
            self.entries += 1
            self.bytes += len(payload)
            return self.entries

    conf = SyncObjConf(
        journalFile=journal,
        sendBufferSize=2**20,
        recvBufferSize=2**20,
        appendEntriesBatchSizeBytes=2**20,  # room for a 256 KiB entry (larger ones are chunked)
        dynamicMembershipChange=False,
        **variant,
    )
    node = AppendLog(addresses[index], [a for i, a in enumerate(addresses) if i != index], conf)
    try:
        while True:
            message = pipe.recv()
            if message[0] == "stop":
                break
            if message[0] == "status":
                pipe.send({"leader": node._isLeader(), "ready": node.isReady()})
            elif message[0] == "run":
                _, size, window, seconds = message
                if not node._isLeader():
                    pipe.send(None)
                    continue

                def submit(payload: bytes, done: Callable[[], None]) -> None:
                    node.append(payload, callback=lambda _result, _error: done())

                try:  # plain values: a class of this module pickles under another name in a spawned child
                    measure = drive(submit, size, window, seconds)
                    pipe.send((measure.ops, measure.seconds, measure.size, measure.latencies_ms))
                except Exception as exc:
                    pipe.send(f"error: {exc}")
    finally:
        node.destroy()


class PySyncObjCluster:
    def __init__(self, directory: Path, variant: dict[str, Any]) -> None:
        from multiraft.tools.launcher import free_ports

        context = multiprocessing.get_context("spawn")
        addresses = [f"127.0.0.1:{port}" for port in free_ports(3)]
        self.pipes: list[Connection] = []
        self.processes: list[Any] = []
        for index in range(3):
            ours, theirs = context.Pipe()
            journal = str(directory / f"journal{index}.bin")
            process = context.Process(
                target=pysyncobj_node, args=(index, addresses, journal, variant, theirs), daemon=True
            )
            process.start()
            self.pipes.append(ours)
            self.processes.append(process)
        self.leader = self._wait_for_leader()

    def _wait_for_leader(self, timeout_s: float = 60.0) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for index, pipe in enumerate(self.pipes):
                pipe.send(("status",))
                status = pipe.recv()
                if status["leader"] and status["ready"]:
                    return index
            time.sleep(0.1)
        raise TimeoutError("pysyncobj elected no leader")

    def run(self, size: int, window: int, seconds: float) -> Measure:
        for _ in range(3):  # the leader may have moved since
            pipe = self.pipes[self.leader]
            pipe.send(("run", size, window, seconds))
            result = pipe.recv()
            if isinstance(result, str):
                raise RuntimeError(f"pysyncobj {result}")
            if result is not None:
                return Measure(*result)
            self.leader = self._wait_for_leader()
        raise RuntimeError("pysyncobj leadership kept moving")

    def stop(self) -> None:
        for pipe in self.pipes:
            with contextlib.suppress(OSError):
                pipe.send(("stop",))
        for process in self.processes:  # by PID, through the Process objects we started
            process.join(10)
            if process.is_alive():
                process.kill()
                process.join(5)


# ---------------------------------------------------------------------------------------------------- multiraft


class MultiraftCluster:
    def __init__(self, directory: Path) -> None:
        from multiraft import Admin
        from multiraft.tools.launcher import cluster_up
        from rpc.client._cluster import ClusterClient

        self.directory = directory
        self.info = cluster_up(directory, 3)
        self.client = ClusterClient(self.info.bootstrap, request_timeout_s=120)
        Admin(self.client).create_topic("engine", partitions=1, replication_factor=3)
        self.stub = self._leader_stub()

    def _leader_stub(self) -> Any:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            metadata = self.client.metadata(refresh=True)
            partition = metadata.topics["engine"].partitions[0]
            if partition.leader:
                return self.client.log_stub(metadata.nodes[partition.leader])
            time.sleep(0.1)
        raise TimeoutError("no leader for the benchmark partition")

    def run(self, size: int, window: int, seconds: float) -> Measure:
        from rpc.proto import multiraft_pb2 as pb
        from storage import encode_batch

        # Requests are built before the clock starts, as pysyncobj's payloads are: one record per entry.
        requests = [
            pb.ProduceRequest(
                topic="engine",
                partition=0,
                batch=encode_batch([os.urandom(size)], timestamps_ms=int(time.time() * 1000)),
            )
            for _ in range(POOL)
        ]
        count = [0]
        failures: list[str] = []
        # Many in flight: one ProduceStream, as the client's producer sends (requests pipelined, answers in
        # order); one at a time: a blocking unary call.
        pending: queue.Queue[Callable[[], None]] = queue.Queue()
        outgoing: queue.Queue[Any] = queue.Queue()

        def requests_iter() -> Any:
            while (item := outgoing.get()) is not None:
                yield item

        reader: threading.Thread | None = None
        if window > 1:
            responses = self.stub.ProduceStream(requests_iter(), timeout=seconds + 120)

            def read() -> None:
                for response in responses:
                    if response.HasField("error") and response.error.code:
                        failures.append(str(response.error))
                    pending.get()()

            reader = threading.Thread(target=read, daemon=True)
            reader.start()

        def submit(_payload: bytes, done: Callable[[], None]) -> None:
            request = requests[count[0] % POOL]
            count[0] += 1
            if window == 1:
                self.stub.Produce(request, timeout=60)
                done()
                return
            pending.put(done)
            outgoing.put(request)

        try:
            measure = drive(submit, size, window, seconds)
        finally:
            outgoing.put(None)
            if reader is not None:
                reader.join(30)
        if failures:
            raise RuntimeError(f"{len(failures)} produce requests failed; first: {failures[0]}")
        return measure

    def node_pids(self) -> list[int]:
        return [n.pid for n in self.info.nodes.values()]

    def stop(self) -> None:
        from multiraft.tools.launcher import cluster_down

        self.client.close()
        cluster_down(self.directory)
        for pid in self.node_pids():  # collect our children's exit status
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


# ---------------------------------------------------------------------------------------------------- main


def one_run(scratch: Path, run: int, seconds: float, workloads: list[str]) -> dict[str, Any]:
    result: dict[str, Any] = {"pysyncobj": {}, "multiraft": {}}
    for name, settings in PYSYNCOBJ_VARIANTS.items():
        directory = scratch / f"pysyncobj-{run}-{name.replace('=', '')}"
        directory.mkdir(parents=True)
        cluster = PySyncObjCluster(directory, settings)
        try:
            for workload in workloads:
                spec = WORKLOADS[workload]
                figures = cluster.run(spec["size"], spec["window"], seconds).figures()
                result["pysyncobj"].setdefault(workload, {})[name] = figures
                print(f"run {run}: pysyncobj {name} {workload}: {figures}", file=sys.stderr)
        finally:
            cluster.stop()
    ours = MultiraftCluster(scratch / f"multiraft-{run}")
    try:
        for workload in workloads:
            spec = WORKLOADS[workload]
            figures = ours.run(spec["size"], spec["window"], seconds).figures()
            result["multiraft"][workload] = figures
            print(f"run {run}: multiraft {workload}: {figures}", file=sys.stderr)
    finally:
        ours.stop()
    for workload in workloads:  # pysyncobj at its best setting for this workload, in this run
        variants = result["pysyncobj"][workload]
        best = max(variants, key=lambda v: variants[v]["mb_per_s"])
        result["pysyncobj"][workload] = {**variants[best], "setting": best, "variants": variants}
    return result


def median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 3) if present else None


def summarize(runs: list[dict[str, Any]], workloads: list[str]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for workload in workloads:
        row: dict[str, Any] = {}
        for engine in ("multiraft", "pysyncobj"):
            per_run = [run[engine][workload] for run in runs]
            row[engine] = {
                key: median([r[key] for r in per_run]) for key in ("ops_per_s", "mb_per_s", "p50_ms", "p99_ms")
            }
            row[engine]["per_run_mb_per_s"] = [r["mb_per_s"] for r in per_run]
        row["pysyncobj"]["settings"] = [run["pysyncobj"][workload]["setting"] for run in runs]
        ratios = [run["multiraft"][workload]["mb_per_s"] / run["pysyncobj"][workload]["mb_per_s"] for run in runs]
        row["ratio_mb_per_s"] = round(statistics.median(ratios), 2)
        row["per_run_ratio"] = [round(r, 2) for r in ratios]
        summary[workload] = row
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per workload, engine and setting")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated: one,inflight,big")
    parser.add_argument("--quick", action="store_true", help="1 run of 2 s per workload")
    parser.add_argument("--out", type=Path, help="also write the JSON to this file")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.seconds = 1, 2.0
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = sorted(set(workloads) - set(WORKLOADS))
    if unknown or not workloads:
        parser.error(f"--workloads: unknown {unknown}; choose from {', '.join(WORKLOADS)}")
    if args.runs < 1 or args.seconds <= 0:
        parser.error("--runs must be >= 1 and --seconds > 0")

    import psutil
    import pysyncobj  # noqa: F401  # fail early with a clear message when the bench extra is missing

    scratch = Path(tempfile.mkdtemp(prefix="raft-engines-"))
    load_start = os.getloadavg()[0]
    runs = []
    try:
        for run in range(args.runs):
            runs.append(one_run(scratch, run, args.seconds, workloads))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    from importlib.metadata import version

    result: dict[str, Any] = {
        "benchmark": "raft_engines",
        "command": "python benchmarks/raft_engines.py " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {
            "cpus": os.cpu_count(),
            "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "load_avg_1m": {"start": round(load_start, 2), "end": round(os.getloadavg()[0], 2)},
        },
        "params": {"runs": args.runs, "seconds": args.seconds, "workloads": {w: WORKLOADS[w] for w in workloads}},
        "versions": {"pysyncobj": version("pysyncobj")},
        "durability": {
            "multiraft": "acknowledged once a majority of replicas fsynced the entry",
            "pysyncobj": "acknowledged once a majority holds the entry in memory (FileJournal writes to an mmap, "
            "never fsyncs)",
        },
        "pysyncobj_variants": PYSYNCOBJ_VARIANTS,
        "summary": summarize(runs, workloads),
        "runs": runs,
    }
    text = json.dumps(result, indent=None if args.json else 2)
    save_json(result, args.out)
    if args.json:
        print(text)
    else:
        for workload, row in result["summary"].items():
            ours, theirs = row["multiraft"], row["pysyncobj"]
            print(
                f"{workload:9s} multiraft {ours['ops_per_s']:>10,.0f} ops/s {ours['mb_per_s']:>8.2f} MB/s "
                f"p50 {ours['p50_ms']} p99 {ours['p99_ms']} | pysyncobj {theirs['ops_per_s']:>9,.0f} ops/s "
                f"{theirs['mb_per_s']:>7.2f} MB/s p50 {theirs['p50_ms']} p99 {theirs['p99_ms']} | "
                f"ratio {row['ratio_mb_per_s']}x"
            )


if __name__ == "__main__":
    main()
