"""Spark sink benchmark: rows per second written by ``format("multiraft")`` to a 3-node cluster, against
baselines measured in the same run.

    python benchmarks/spark_sink_bench.py --json                 # 1,000,000 rows, 3 repetitions
    python benchmarks/spark_sink_bench.py --rows 200000 --reps 1 # a quick look

The script starts a local 3-node cluster (scripts/cluster's launcher) in a temporary directory and one local
SparkSession (``local[2]``, UI off). The input is a cached DataFrame of ``--rows`` rows with one ``value``
column of ``--value-bytes`` bytes (``--tasks`` Spark partitions), also saved as Parquet for the streaming
case. Each repetition writes into a fresh topic of 6 partitions, RF 3 (deleted afterwards), in a shuffled
order (``--seed``):

* ``multiraft batch``: ``df.write.format("multiraft")`` (idempotent producer per task, sticky partitions);
* ``multiraft stream``: ``spark.readStream.parquet`` of the same rows into ``writeStream.format("multiraft")``
  with ``trigger(availableNow=True)``: the exactly-once path (replay producers);
* ``parquet``: the cached DataFrame written to a local Parquet directory (the baseline);
* ``send_batch``: the same rows, as Arrow arrays, written with ``Producer.send_batch`` from this process,
  no Spark (what the client alone does).

Rates are rows over wall time, from the write's start to its end (planning included; the topic exists
before). The report gives each case's median and the median of the per-repetition ratios to Parquet.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _spark_common import repeat, report, summarise, timed

from multiraft import Admin, Consumer, Producer, TopicPartition
from multiraft.tools.launcher import cluster_down, cluster_up
from spark_connector import local_session

PARTITIONS = 6


def stored_rows(bootstrap: str, topic: str) -> int:
    """Records in the topic (sum of the partitions' end offsets)."""
    with Consumer(bootstrap) as consumer:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps, start="latest")
        return sum(consumer.position(tp) for tp in tps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--tasks", type=int, default=2, help="Spark partitions of the input (local[2])")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-stream", action="store_true", help="skip the writeStream case")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="spark-sink-bench-"))
    info = cluster_up(root / "cluster", 3)
    spark = None
    topics = (f"bench-{i}" for i in range(1_000_000))
    try:
        spark = local_session("spark-sink-bench", quick_jit=False)  # full JIT: measure compiled code

        # Distinct values of exactly --value-bytes bytes (the row number, padded).
        df = (
            spark.range(0, args.rows, numPartitions=args.tasks)
            .selectExpr(f"cast(lpad(cast(id as string), {args.value_bytes}, 'x') as binary) as value")
            .cache()
        )
        if df.count() != args.rows:
            raise SystemExit("the input DataFrame has the wrong size")
        input_parquet = str(root / "input.parquet")
        df.write.parquet(input_parquet)
        values = pa.array([b"%0*d" % (args.value_bytes, i) for i in range(args.rows)], type=pa.binary())

        def fresh_topic() -> str:
            topic = next(topics)
            with Admin(info.bootstrap) as admin:
                admin.create_topic(topic, partitions=PARTITIONS, replication_factor=3)
            return topic

        def check_and_drop(topic: str) -> None:
            stored = stored_rows(info.bootstrap, topic)
            if stored != args.rows:
                raise SystemExit(f"topic {topic} holds {stored} rows, expected {args.rows}")
            with Admin(info.bootstrap) as admin:
                admin.delete_topic(topic)

        def sink(writer: Any, topic: str) -> Any:
            return writer.format("multiraft").option("bootstrap", info.bootstrap).option("topic", topic)

        def multiraft_batch(topic: str) -> None:
            sink(df.write.mode("append"), topic).save()

        def multiraft_stream(topic: str) -> None:
            checkpoint = root / f"checkpoint-{topic}"
            stream = spark.readStream.schema(df.schema).parquet(input_parquet)
            query = (
                sink(stream.writeStream, topic)
                .option("checkpointLocation", str(checkpoint))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            shutil.rmtree(checkpoint, ignore_errors=True)

        def parquet(topic: str) -> None:
            df.write.mode("overwrite").parquet(str(root / "baseline.parquet"))

        def send_batch(topic: str) -> None:
            chunk = 10_000
            with Producer(info.bootstrap) as producer:
                futures = [
                    producer.send_batch(topic, values.slice(first, chunk)) for first in range(0, args.rows, chunk)
                ]
                for future in futures:
                    future.result(300)

        cases: dict[str, Callable[[str], None]] = {
            "multiraft batch": multiraft_batch,
            "parquet": parquet,
            "send_batch": send_batch,
        }
        if not args.no_stream:
            cases["multiraft stream"] = multiraft_stream
        warm = fresh_topic()
        multiraft_batch(warm)  # starts the Python workers once, untimed
        check_and_drop(warm)

        def measured(name: str) -> float:
            topic = fresh_topic()
            rate = args.rows / timed(lambda: cases[name](topic))
            if name != "parquet":
                check_and_drop(topic)
            else:
                with Admin(info.bootstrap) as admin:
                    admin.delete_topic(topic)
            return rate

        rates, ratios = repeat({name: lambda name=name: measured(name) for name in cases}, args.reps, args.seed)  # type: ignore[misc]
    finally:
        if spark is not None:
            spark.stop()
        cluster_down(root / "cluster")
        shutil.rmtree(root, ignore_errors=True)

    result = {
        "benchmark": "spark_sink",
        "rows": args.rows,
        "value_bytes": args.value_bytes,
        "tasks": args.tasks,
        "partitions": PARTITIONS,
        "replication_factor": 3,
        "reps": args.reps,
        "seed": args.seed,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "cases": summarise(rates, ratios),
    }
    report(result, args.json)


if __name__ == "__main__":
    main()
