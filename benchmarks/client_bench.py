"""Client benchmark: producer and consumer throughput of the public client (multiraft.Producer, Consumer)
against a local 3-node cluster this script starts and stops (6 partitions, RF 3, fsync before every ack).

    python benchmarks/client_bench.py --json            # 3 repetitions, 100 B and 1 KiB values
    python benchmarks/client_bench.py --quick           # 1 repetition of 1.5 s per case: under a minute

Every repetition measures, for each value size, one after the other on the same cluster:

* ``send``: ``Producer.send()`` once per record (no key: the sticky partitioner), then ``flush()``; with
  idempotence (the default) and with ``idempotence=False``;
* ``send_batch``: ``Producer.send_batch()`` of ``--call-records`` records per call: from a Python list,
  from a pyarrow array, and from pyarrow arrays with keys (grouped per partition by the producer);
* the baseline, a hand-written client: batches encoded before the clock starts (``storage.encode_batch``,
  ``batch_bytes`` each, as the producer's), written with unary ``Produce`` by one thread per partition, one
  batch in flight each;
* ``Consumer.poll()`` and ``Consumer.poll_arrow()`` (``fetch_max_bytes`` 16 MiB, ``max_poll_records``
  50,000) reading everything the ``send_batch, list`` case wrote, from the start; and their baseline, one
  thread per partition calling unary ``Fetch`` and counting records from the batch headers (no decoding).

Before the first repetition, the baseline runs once per size for twice the time of a case, untimed, and its
topic is deleted: the first writes to a fresh cluster grow its LMDB files and were slower. The cases run in
a shuffled order in each repetition (--seed), each after an ``os.sync()``, and each topic is deleted after its
case (the one the consumers read, after its repetition). Rates count records acknowledged (or read) per
second of wall time. The report gives, per case, the median over repetitions, the median of the
per-repetition ratios to the baseline measured in the same repetition, and this process's CPU time per
record (the producer's or the consumer's cost).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from multiraft import Admin, BatchMetadata, Consumer, Producer
from multiraft.tools.launcher import cluster_down, cluster_up
from rpc.client._cluster import ClusterClient
from rpc.proto import multiraft_pb2 as pb
from storage import encode_batch, iter_batches

PRODUCE_CASES = [
    "send, idempotent",
    "send, idempotence=False",
    "send_batch, list",
    "send_batch, arrow",
    "send_batch, arrow + keys",
    "baseline: unary Produce, pre-encoded",
]
CONSUME_CASES = ["poll", "poll_arrow", "baseline: unary Fetch, no decode"]
PRODUCE_BASELINE = PRODUCE_CASES[-1]
CONSUME_BASELINE = CONSUME_CASES[-1]


@dataclass
class Settings:
    partitions: int
    seconds: float  # of sending per produce case; reading stops after max_read_seconds
    call_records: int
    batch_bytes: int
    max_read_seconds: float


@dataclass
class Measure:
    records: int
    seconds: float
    cpu_s: float

    @property
    def rate(self) -> float:
        return self.records / self.seconds


def cpu_seconds() -> float:
    times = psutil.Process().cpu_times()
    return float(times.user + times.system)


class Bench:
    def __init__(self, bootstrap: str, settings: Settings) -> None:
        self.bootstrap = bootstrap
        self.settings = settings
        self.admin = Admin(bootstrap)
        self.topics: list[str] = []

    def new_topic(self) -> str:
        name = "bench-" + uuid.uuid4().hex[:10]
        self.admin.create_topic(name, partitions=self.settings.partitions, replication_factor=3)
        self.topics.append(name)
        self._wait_for_leaders(name)
        return name

    def _wait_for_leaders(self, topic: str) -> None:
        """Until every partition is led by its preferred leader (two per node): a new topic's first
        elections sometimes put more on one node for a few seconds."""
        with ClusterClient(self.bootstrap) as client:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                partitions = client.metadata(refresh=True).topics[topic].partitions
                if all(p.leader and p.leader == p.preferred_leader for p in partitions):
                    return
                time.sleep(0.1)
            if not all(p.leader for p in partitions):
                raise RuntimeError(f"{topic}: not every partition has a leader after 30 s")

    def drop_topics(self, keep: str | None = None) -> None:
        for topic in self.topics:
            if topic != keep:
                with contextlib.suppress(Exception):
                    self.admin.delete_topic(topic)
        self.topics = [keep] if keep in self.topics else []

    def close(self) -> None:
        self.admin.close()

    # ------------------------------------------------------------------------------------------ produce

    def _timed(self, body: Callable[[float], int], seconds: float) -> Measure:
        cpu = cpu_seconds()
        started = time.perf_counter()
        records = body(started + seconds)
        return Measure(records, time.perf_counter() - started, cpu_seconds() - cpu)

    def _producer(self, topic: str, **options: Any) -> Producer:
        """A producer that already has the topic's metadata, its producer id and its connections."""
        producer = Producer(self.bootstrap, batch_bytes=self.settings.batch_bytes, **options)
        for partition in range(self.settings.partitions):
            producer.send(topic, b"warm-up", partition=partition)
        producer.flush(30)
        return producer

    def send(self, topic: str, values: list[bytes], **options: Any) -> Measure:
        producer = self._producer(topic, **options)
        try:

            def body(stop_at: float) -> int:
                futures: list[Future[Any]] = []
                while time.perf_counter() < stop_at:
                    for value in values:  # 1 000 records between clock reads
                        futures.append(producer.send(topic, value))
                producer.flush()
                return sum(1 for f in futures if f.exception() is None)

            return self._timed(body, self.settings.seconds)
        finally:
            producer.close()

    def send_batch(self, topic: str, values: Any, keys: Any = None) -> Measure:
        producer = self._producer(topic)
        try:

            def body(stop_at: float) -> int:
                futures: list[Future[list[BatchMetadata]]] = []
                while time.perf_counter() < stop_at:
                    futures.append(producer.send_batch(topic, values, keys=keys))
                producer.flush()
                return sum(b.record_count for f in futures for b in f.result())

            return self._timed(body, self.settings.seconds)
        finally:
            producer.close()

    def baseline_produce(self, topic: str, values: list[bytes]) -> Measure:
        """A hand-written client: pre-encoded batches, unary Produce, one thread and one batch in flight per
        partition."""
        per_batch = max(1, self.settings.batch_bytes // (len(values[0]) + 16))
        batch = encode_batch((values * (per_batch // len(values) + 1))[:per_batch], timestamps_ms=1)
        client = ClusterClient(self.bootstrap, request_timeout_s=60)
        acked = [0] * self.settings.partitions
        warm_up = encode_batch([b"warm-up"], timestamps_ms=1)
        for partition in range(self.settings.partitions):
            request = pb.ProduceRequest(topic=topic, partition=partition, batch=warm_up)
            client.call_leader(topic, partition, lambda stub, timeout, r=request: stub.Produce(r, timeout=timeout))
        try:

            def body(stop_at: float) -> int:
                def partition_worker(partition: int) -> None:
                    request = pb.ProduceRequest(topic=topic, partition=partition, batch=batch)
                    while time.perf_counter() < stop_at:
                        client.call_leader(
                            topic, partition, lambda stub, timeout: stub.Produce(request, timeout=timeout)
                        )
                        acked[partition] += per_batch

                threads = [
                    threading.Thread(target=partition_worker, args=(p,)) for p in range(self.settings.partitions)
                ]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                return sum(acked)

            return self._timed(body, self.settings.seconds)
        finally:
            client.close()

    # ------------------------------------------------------------------------------------------ consume

    def consume(self, topic: str, expected: int, arrow: bool) -> Measure:
        consumer = Consumer(self.bootstrap, fetch_max_bytes=16 << 20, max_poll_records=50_000)
        try:

            def body(stop_at: float) -> int:
                consumer.subscribe(topic, start="earliest")
                got = 0
                while got < expected and time.perf_counter() < stop_at:
                    got += consumer.poll_arrow(1.0).num_rows if arrow else len(consumer.poll(1.0))
                return got

            return self._timed(body, self.settings.max_read_seconds)
        finally:
            consumer.close()

    def baseline_consume(self, topic: str, expected: int) -> Measure:
        """A hand-written reader: unary Fetch per partition from its own thread, counting records from the
        batch headers."""
        client = ClusterClient(self.bootstrap, request_timeout_s=60)
        ends = self.admin.list_offsets(topic, "latest")
        counts = [0] * self.settings.partitions
        try:

            def body(stop_at: float) -> int:
                def partition_worker(partition: int) -> None:
                    offset = 0
                    while offset < ends[partition] and time.perf_counter() < stop_at:
                        request = pb.FetchRequest(topic=topic, partition=partition, offset=offset, max_bytes=4 << 20)
                        response = client.call_leader(
                            topic,
                            partition,
                            lambda stub, timeout, request=request: stub.Fetch(request, timeout=timeout),
                        )
                        for header, _ in iter_batches(response.batches, verify=False):
                            counts[partition] += header.record_count
                        offset = response.next_offset

                threads = [
                    threading.Thread(target=partition_worker, args=(p,)) for p in range(self.settings.partitions)
                ]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                return sum(counts)

            measure = self._timed(body, self.settings.max_read_seconds)
            if measure.records < expected and measure.seconds < self.settings.max_read_seconds:
                raise RuntimeError(f"baseline read {measure.records} of {expected} records")
            return measure
        finally:
            client.close()


def one_repetition(bench: Bench, size: int, rng: random.Random) -> dict[str, Measure]:
    """Every case once, in a shuffled order (a case late in a repetition meets more of the disk's pending
    writeback), each after an ``os.sync()``."""
    settings = bench.settings
    values = [os.urandom(size) for _ in range(1_000)]
    call_values = (values * (settings.call_records // len(values) + 1))[: settings.call_records]
    call_keys = [b"key-%d" % i for i in range(settings.call_records)]
    arrow_values = pa.array(call_values, type=pa.binary())
    arrow_keys = pa.array(call_keys, type=pa.binary())
    listed = bench.new_topic()  # send_batch, list writes it; the consumers read it
    produce: dict[str, Callable[[], Measure]] = {
        "send, idempotent": lambda: bench.send(bench.new_topic(), values),
        "send, idempotence=False": lambda: bench.send(bench.new_topic(), values, idempotence=False),
        "send_batch, list": lambda: bench.send_batch(listed, call_values),
        "send_batch, arrow": lambda: bench.send_batch(bench.new_topic(), arrow_values),
        "send_batch, arrow + keys": lambda: bench.send_batch(bench.new_topic(), arrow_values, arrow_keys),
        PRODUCE_BASELINE: lambda: bench.baseline_produce(bench.new_topic(), values),
    }
    results: dict[str, Measure] = {}
    for case in rng.sample(list(produce), len(produce)):
        os.sync()
        results[case] = produce[case]()
        bench.drop_topics(keep=listed)  # the disk holds little more than one case's data at a time
    written = results["send_batch, list"].records + settings.partitions  # and the warm-up records
    consume: dict[str, Callable[[], Measure]] = {
        "poll": lambda: bench.consume(listed, written, arrow=False),
        "poll_arrow": lambda: bench.consume(listed, written, arrow=True),
        CONSUME_BASELINE: lambda: bench.baseline_consume(listed, written),
    }
    for case in rng.sample(list(consume), len(consume)):
        results[case] = consume[case]()
    bench.drop_topics()
    return results


def summarize(runs: list[dict[str, Measure]], size: int) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for cases, baseline in ((PRODUCE_CASES, PRODUCE_BASELINE), (CONSUME_CASES, CONSUME_BASELINE)):
        for case in cases:
            rates = [run[case].rate for run in runs]
            ratios = [run[case].rate / run[baseline].rate for run in runs]
            summary[case] = {
                "records_per_s": statistics.median(rates),
                "values_mb_per_s": statistics.median(rates) * size / 1e6,
                "ratio_to_baseline": statistics.median(ratios),
                "client_cpu_us_per_record": statistics.median(
                    run[case].cpu_s / run[case].records * 1e6 for run in runs
                ),
                "runs_records_per_s": [round(r) for r in rates],
                "runs_ratio": [round(r, 3) for r in ratios],
                "runs_records": [run[case].records for run in runs],
            }
    return summary


def print_table(results: dict[str, dict[str, Any]], repetitions: int) -> None:
    for size, summary in results.items():
        print(f"\nvalues of {size} B, median of {repetitions} repetition(s)")
        print(f"  {'case':40s} {'records/s':>12s} {'MB/s':>8s} {'ratio':>7s} {'cpu us/rec':>11s}   runs")
        for case, row in summary.items():
            print(
                f"  {case:40s} {row['records_per_s']:12,.0f} {row['values_mb_per_s']:8.1f} "
                f"{row['ratio_to_baseline']:7.2f} {row['client_cpu_us_per_record']:11.2f}   {row['runs_records_per_s']}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--quick", action="store_true", help="1 repetition of fewer records (under a minute)")
    parser.add_argument("--repetitions", type=int, default=None, help="default 3 (1 with --quick)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1024], help="value sizes in bytes")
    parser.add_argument("--seconds", type=float, default=None, help="of sending per case (default 5, 1.5 with --quick)")
    parser.add_argument("--call-records", type=int, default=10_000, help="records per send_batch() call")
    parser.add_argument("--batch-bytes", type=int, default=1_048_576, help="producer batch_bytes and baseline batch")
    parser.add_argument("--max-read-seconds", type=float, default=30.0, help="cap per consumer case")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--seed", type=int, default=1, help="of the order of the cases in each repetition")
    args = parser.parse_args()
    repetitions = args.repetitions or (1 if args.quick else 3)
    seconds = args.seconds or (1.5 if args.quick else 5.0)

    scratch = Path(tempfile.mkdtemp(prefix="client-bench-"))
    results: dict[str, dict[str, Any]] = {}
    started = time.monotonic()
    try:
        info = cluster_up(scratch / "cluster", 3, {})
        try:
            runs: dict[int, list[dict[str, Measure]]] = {size: [] for size in args.sizes}
            for size in args.sizes:  # untimed: the nodes' LMDB files grow to their working size
                warm_up = Bench(info.bootstrap, Settings(args.partitions, 2 * seconds, 1, args.batch_bytes, 0.0))
                try:
                    warm_up.baseline_produce(warm_up.new_topic(), [os.urandom(size)])
                    warm_up.drop_topics()
                finally:
                    warm_up.close()
            rng = random.Random(args.seed)
            for _ in range(repetitions):
                for size in args.sizes:  # sizes alternate within a repetition: noise hits both alike
                    settings = Settings(
                        args.partitions, seconds, args.call_records, args.batch_bytes, args.max_read_seconds
                    )
                    bench = Bench(info.bootstrap, settings)
                    try:
                        runs[size].append(one_repetition(bench, size, rng))
                    finally:
                        bench.close()
                    if not args.json:
                        print(f"repetition done: {size} B, {time.monotonic() - started:.0f}s", file=sys.stderr)
            for size in args.sizes:
                results[str(size)] = summarize(runs[size], size)
        finally:
            cluster_down(info.directory)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    document = {
        "params": {**vars(args), "repetitions": repetitions, "seconds": seconds},
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
        },
        "seconds": round(time.monotonic() - started, 1),
        "results": results,
    }
    if args.json:
        print(json.dumps(document))
    else:
        print_table(results, repetitions)
        print(f"\n{document['seconds']}s in all; load average now {document['machine']['load_average']}")


if __name__ == "__main__":
    main()
