"""Streaming exactly-once: a driver SIGKILLed in the middle of a micro-batch, restarted from its checkpoint.

The query runs in a separate Python process (``python -m tests.spark.test_exactly_once ...``, the
``__main__`` block below) that owns its own SparkSession, so the test can kill the whole driver (Python, JVM
and Python workers: one process group) with SIGKILL while a batch is in flight.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark

TOPIC = "exactly-once"
PARTITIONS = 3


def _batch_ids(directory: Path) -> set[int]:
    if not directory.is_dir():
        return set()
    return {int(p.name) for p in directory.iterdir() if p.name.isdigit()}


def _start_driver(bootstrap: str, out: Path, checkpoint: Path, max_offsets: int, log: Path) -> subprocess.Popen[bytes]:
    command = [
        sys.executable,
        "-m",
        "tests.spark.test_exactly_once",
        "--bootstrap",
        bootstrap,
        "--out",
        str(out),
        "--checkpoint",
        str(checkpoint),
        "--max-offsets",
        str(max_offsets),
    ]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    with log.open("ab") as sink:
        # A session of its own: the driver's JVM and Python workers share its process group, killed as one.
        return subprocess.Popen(
            command,
            cwd=Path(__file__).parents[2],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(30)


def _produce(bootstrap: str, first: int, count: int) -> set[bytes]:
    from multiraft import Producer

    produced: set[bytes] = set()
    with Producer(bootstrap) as producer:
        for partition in range(PARTITIONS):
            values = [b"p%d-r%05d" % (partition, i) for i in range(first, first + count)]
            producer.send_batch(TOPIC, values, partition=partition).result(30)
            produced.update(values)
    return produced


def test_a_driver_killed_mid_batch_resumes_from_its_checkpoint_without_loss_or_duplicates(
    spark: Any, shared_cluster: Any, tmp_path: Path
) -> None:
    bootstrap = shared_cluster.bootstrap
    shared_cluster.create_topic(TOPIC, PARTITIONS, 3)
    produced = _produce(bootstrap, 0, 200)
    out, checkpoint, log = tmp_path / "out", tmp_path / "checkpoint", tmp_path / "driver.log"

    driver = _start_driver(bootstrap, out, checkpoint, max_offsets=30, log=log)
    try:
        # Kill once a batch is planned (its offsets are in the log) but not yet committed, after >= 2 commits.
        deadline = time.monotonic() + 240
        killed_in: int | None = None
        while time.monotonic() < deadline and driver.poll() is None:
            planned, committed = _batch_ids(checkpoint / "offsets"), _batch_ids(checkpoint / "commits")
            in_flight = planned - committed
            if len(committed) >= 2 and in_flight:
                killed_in = max(in_flight)
                _kill_group(driver)
                break
            time.sleep(0.01)
        assert killed_in is not None, f"never caught a batch in flight; driver log:\n{log.read_text()[-3000:]}"
    finally:
        if driver.poll() is None:
            _kill_group(driver)
    assert killed_in not in _batch_ids(checkpoint / "commits")

    produced |= _produce(bootstrap, 200, 100)
    driver = _start_driver(bootstrap, out, checkpoint, max_offsets=200, log=log)
    try:
        assert driver.wait(240) == 0, f"the restarted driver failed; log:\n{log.read_text()[-3000:]}"
    finally:
        if driver.poll() is None:
            _kill_group(driver)

    rows = spark.read.parquet(str(out)).select("partition", "offset", "value").collect()
    values = [bytes(r.value) for r in rows]
    assert len(values) == len(set(values)), "some records were written twice"
    assert set(values) == produced
    positions = sorted((r.partition, r.offset) for r in rows)
    assert positions == [(p, o) for p in range(PARTITIONS) for o in range(300)]


def _run_driver(argv: list[str]) -> None:
    """The query under test: multiraft -> Parquet, AvailableNow, maxOffsetsPerTrigger batches."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--max-offsets", type=int, required=True)
    args = parser.parse_args(argv)

    from spark_connector import local_session

    spark = local_session("multiraft-exactly-once")
    query = (
        spark.readStream.format("multiraft")
        .option("bootstrap", args.bootstrap)
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(args.max_offsets))
        .load()
        .writeStream.format("parquet")
        .option("path", args.out)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    _run_driver(sys.argv[1:])
