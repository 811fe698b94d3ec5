"""Spark source benchmark: rows per second from a 3-node cluster into Spark's ``noop`` sink, against the same
rows read from a local Parquet file in the same run.

    python benchmarks/spark_source_bench.py --json                 # 1,000,000 rows, 3 repetitions
    python benchmarks/spark_source_bench.py --rows 200000 --reps 1 # a quick look

The script starts a local 3-node cluster (scripts/cluster's launcher) in a temporary directory, creates a
topic of 6 partitions with RF 3, and produces ``--rows`` records of ``--value-bytes`` random bytes with
``Producer.send_batch`` (spread evenly over the partitions). One local SparkSession (``local[2]``, UI off)
then reads the topic once, untimed, and writes it to a Parquet file: the baseline reads those same rows and
columns. Every case then runs once untimed (JIT warm-up; ``--warmup N`` runs them N times), and each
repetition runs, in a shuffled order
(``--seed``):

* ``multiraft batch``: ``spark.read.format("multiraft")`` of the whole topic into ``noop``;
* ``multiraft stream``: ``spark.readStream`` with ``trigger(availableNow=True)`` into ``noop``;
* ``parquet``: ``spark.read.parquet`` of the baseline file into ``noop``.

Rates are rows over wall time, from the write's start to its end (planning included). The report gives each
case's median and the median of the per-repetition ratios to the Parquet baseline, and the CPU each case
cost per row (median over the repetitions, from ``/proc``): Spark's JVM, its Python processes (workers,
planners, a stream's source runner) and the three nodes.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _spark_common import process_cpu, repeat, report, summarise, timed

from multiraft import Admin, Producer
from multiraft.tools.launcher import cluster_down, cluster_up
from spark_connector import local_session

TOPIC = "bench"
PARTITIONS = 6


def produce(bootstrap: str, rows: int, value_bytes: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    chunk = 20_000
    with Producer(bootstrap, linger_ms=5, batch_bytes=1 << 20) as producer:
        futures = []
        for index, first in enumerate(range(0, rows, chunk)):
            count = min(chunk, rows - first)
            data = rng.integers(0, 256, size=count * value_bytes, dtype=np.uint8).tobytes()
            offsets = pa.array(np.arange(0, (count + 1) * value_bytes, value_bytes, dtype=np.int32))
            values = pa.BinaryArray.from_buffers(pa.binary(), count, [None, offsets.buffers()[1], pa.py_buffer(data)])
            futures.append(producer.send_batch(TOPIC, values, partition=index % PARTITIONS))
        for future in futures:
            future.result(300)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--min-partitions", type=int, default=0, help="minPartitions option (0: one per partition)")
    parser.add_argument("--fetch-max-bytes", type=int, default=0, help="fetchMaxBytes option (0: the default)")
    parser.add_argument("--no-stream", action="store_true", help="skip the readStream case")
    parser.add_argument(
        "--warmup", type=int, default=1, help="untimed runs of every case before the repetitions (JIT warm-up)"
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="spark-source-bench-"))
    info = cluster_up(root / "cluster", 3)
    spark = None
    try:
        with Admin(info.bootstrap) as admin:
            admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
        produce_s = timed(lambda: produce(info.bootstrap, args.rows, args.value_bytes, args.seed))

        spark = local_session("spark-source-bench", quick_jit=False)  # full JIT: measure compiled code

        def source(reader: Any) -> Any:
            reader = reader.format("multiraft").option("bootstrap", info.bootstrap).option("subscribe", TOPIC)
            if args.fetch_max_bytes:
                reader = reader.option("fetchMaxBytes", str(args.fetch_max_bytes))
            if args.min_partitions:
                reader = reader.option("minPartitions", str(args.min_partitions))
            return reader

        parquet = str(root / "baseline.parquet")
        source(spark.read).option("startingOffsets", "earliest").load().write.parquet(parquet)  # also warms up
        rows = spark.read.parquet(parquet).count()
        if rows != args.rows:
            raise SystemExit(f"the topic holds {rows} rows, expected {args.rows}")

        def multiraft_batch() -> None:
            source(spark.read).load().write.format("noop").mode("overwrite").save()

        def multiraft_stream() -> None:
            checkpoint = root / f"checkpoint-{time.monotonic_ns()}"
            query = (
                source(spark.readStream)
                .option("startingOffsets", "earliest")
                .load()
                .writeStream.format("noop")
                .option("checkpointLocation", str(checkpoint))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            processed = sum(p["numInputRows"] for p in query.recentProgress)
            if processed != rows:
                raise SystemExit(f"the stream read {processed} rows, expected {rows}")
            shutil.rmtree(checkpoint, ignore_errors=True)

        def parquet_baseline() -> None:
            spark.read.parquet(parquet).write.format("noop").mode("overwrite").save()

        cases: dict[str, Callable[[], None]] = {"multiraft batch": multiraft_batch, "parquet": parquet_baseline}
        if not args.no_stream:
            cases["multiraft stream"] = multiraft_stream
        for _ in range(args.warmup):  # untimed: the JVM compiles each path's hot code on its first runs
            for run in cases.values():
                run()
        node_pids = [node.pid for node in info.nodes.values()]
        cpu: dict[str, list[dict[str, float]]] = {name: [] for name in cases}

        def measured(name: str, run: Callable[[], None]) -> float:
            before = process_cpu(node_pids)
            seconds = timed(run)
            after = process_cpu(node_pids)
            cpu[name].append({kind: (after[kind] - before[kind]) / rows * 1e6 for kind in after})
            return rows / seconds

        load_before = os.getloadavg()
        rates, ratios = repeat(
            {name: lambda name=name, run=run: measured(name, run) for name, run in cases.items()},  # type: ignore[misc]
            args.reps,
            args.seed,
        )
    finally:
        if spark is not None:
            spark.stop()
        cluster_down(root / "cluster")
        shutil.rmtree(root, ignore_errors=True)

    result = {
        "benchmark": "spark_source",
        "rows": args.rows,
        "value_bytes": args.value_bytes,
        "partitions": PARTITIONS,
        "replication_factor": 3,
        "min_partitions": args.min_partitions or None,
        "fetch_max_bytes": args.fetch_max_bytes or None,
        "reps": args.reps,
        "warmup": args.warmup,
        "seed": args.seed,
        "produce_rows_per_s": args.rows / produce_s,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_before": load_before,
            "load_average_after": os.getloadavg(),
        },
        "cases": summarise(rates, ratios, cpu),
    }
    report(result, args.json)


if __name__ == "__main__":
    main()
