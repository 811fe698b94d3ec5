"""Consumer CPU per record, per thread, A/B between code trees (issue 16's consume work).

    python benchmarks/consume_cpu.py --trees /path/to/base,/path/to/new --modes arrow,poll --rounds 3
    python benchmarks/consume_cpu.py --trees . --modes arrow --rounds 1 --py-spy out   # a flame profile too

Starts a local 3-node cluster (from this tree), writes ``--count`` records of ``--size`` random bytes to a
6-partition RF 3 topic with ``send_batch()``, then reads all of them from the earliest offset, in a fresh
process per read (``poll_arrow()`` or ``poll()``, ``fetch_max_bytes`` 16 MiB, ``max_poll_records`` 50,000:
``multiraft bench consume``'s settings), once per tree and mode per round, alternating, so that a noisy minute
hits both alike. Each read reports its wall time, its process CPU time per record (``time.process_time``:
every thread), the CPU per record of each thread (``/proc/self/task``: ``main`` decodes, ``python`` is the
fetch thread's asyncio loop, ``event_engine`` is gRPC's I/O), and minor page faults per record. The summary
gives medians over rounds. The reader's first poll is timed too, as a consumer's is.
"""

from __future__ import annotations

import argparse
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

ROOT = Path(__file__).resolve().parent.parent
TOPIC = "consume-cpu"
PARTITIONS = 6


def _thread_cpu() -> dict[str, tuple[str, float]]:
    ticks = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        out[tid] = (name, (int(fields[11]) + int(fields[12])) / ticks)
    return out


def _minor_faults() -> int:
    stat = Path("/proc/self/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[7])


def read_all(bootstrap: str, total: int, mode: str) -> dict[str, Any]:
    """In the child: read ``total`` records with one consumer, as ``multiraft bench consume`` does."""
    sys.path.insert(0, os.getcwd())  # the tree under test
    from multiraft import Consumer, TopicPartition
    from storage import decode_batches, encode_batch

    consumer = Consumer(bootstrap, fetch_max_bytes=16 << 20, max_poll_records=50_000, fetch_max_wait_ms=100)
    partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    consumer.assign(partitions, start="earliest")
    for tp in partitions:
        consumer.position(tp)
    import pyarrow.compute  # noqa: F401  # as the bench's _warm_decoder

    decode_batches(encode_batch([b"warm-up"], timestamps_ms=0), include_headers=True)
    threads, faults = _thread_cpu(), _minor_faults()
    cpu, started = time.process_time(), time.monotonic()
    got = 0
    while got < total:
        got += consumer.poll_arrow(1.0).num_rows if mode == "arrow" else len(consumer.poll(1.0))
    elapsed, cpu = time.monotonic() - started, time.process_time() - cpu
    per_thread: dict[str, float] = {}
    for tid, (name, seconds) in _thread_cpu().items():
        key = "main" if tid == str(os.getpid()) else name
        spent = seconds - threads.get(tid, (name, 0.0))[1]
        if spent:
            per_thread[key] = round(per_thread.get(key, 0.0) + spent / got * 1e6, 3)
    result = {
        "records": got,
        "seconds": round(elapsed, 4),
        "records_per_s": round(got / elapsed),
        "cpu_us_per_record": round(cpu / got * 1e6, 3),
        "threads_us_per_record": per_thread,
        "minor_faults_per_record": round((_minor_faults() - faults) / got, 3),
    }
    consumer.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trees", default=str(ROOT), help="comma-separated source trees to compare")
    parser.add_argument("--modes", default="arrow,poll", help="arrow (poll_arrow), poll, or both")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--count", type=int, default=400_000, help="records written and read (multiple of 10,000)")
    parser.add_argument("--size", type=int, default=1024, help="value bytes")
    parser.add_argument("--py-spy", default=None, help="record each read with py-spy into files with this prefix")
    parser.add_argument("--child", nargs=3, metavar=("BOOTSTRAP", "TOTAL", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(read_all(args.child[0], int(args.child[1]), args.child[2])))
        return

    sys.path.insert(0, str(ROOT))
    import pyarrow as pa

    from multiraft import Admin, Producer
    from multiraft.tools.launcher import cluster_down, cluster_up

    scratch = Path(tempfile.mkdtemp(prefix="consume-cpu-"))
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    info = cluster_up(scratch / "cluster", 3, {})
    try:
        with Admin(info.bootstrap) as admin:
            admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
            pool = [os.urandom(args.size) for _ in range(1000)]
            values = pa.array([pool[i % len(pool)] for i in range(10_000)], type=pa.binary())
            deadline = time.monotonic() + 30
            with Producer(info.bootstrap) as producer:
                for _ in range(300):  # a new topic's leaders: retry the first call until they are elected
                    try:
                        producer.send_batch(TOPIC, values.slice(0, 1)).result(10)
                        break
                    except Exception:
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.1)
                futures = [producer.send_batch(TOPIC, values) for _ in range(args.count // 10_000)]
                producer.flush(120)
                for future in futures:
                    future.result()
            total = sum(admin.list_offsets(TOPIC, "latest").values())
        for round_ in range(args.rounds):
            for mode in args.modes.split(","):
                for tree in args.trees.split(","):
                    command = [
                        sys.executable,
                        str(Path(__file__).resolve()),
                        "--child",
                        info.bootstrap,
                        str(total),
                        mode,
                    ]
                    if args.py_spy:
                        name = f"{args.py_spy}-{mode}-{Path(tree).name}-{round_}.txt"
                        command = ["py-spy", "record", "-r", "250", "-f", "raw", "-o", name, "--", *command]
                    env = {**os.environ, "PYTHONPATH": tree}
                    done = subprocess.run(
                        command, cwd=tree, env=env, capture_output=True, text=True, timeout=300, check=False
                    )
                    if done.returncode:
                        raise RuntimeError(done.stderr[-3000:])
                    result = json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])
                    runs.setdefault((mode, tree), []).append(result)
                    print(mode, tree, json.dumps(result), file=sys.stderr, flush=True)
    finally:
        cluster_down(info.directory)
        shutil.rmtree(scratch, ignore_errors=True)
    summary = {
        f"{mode} {tree}": {
            "cpu_us_per_record": statistics.median(r["cpu_us_per_record"] for r in results),
            "records_per_s": statistics.median(r["records_per_s"] for r in results),
            "runs_cpu_us_per_record": [r["cpu_us_per_record"] for r in results],
            "runs_records_per_s": [r["records_per_s"] for r in results],
        }
        for (mode, tree), results in runs.items()
    }
    print(json.dumps({"params": vars(args), "summary": summary}, indent=2))


if __name__ == "__main__":
    main()
