"""The client side of ``multiraft bench``: what runs in each producer or consumer process.

Workers are started with the ``spawn`` method, so this module keeps its imports light (no typer, no rich):
every process pays for them at start. A worker reports progress through a shared counter and its result (its
own CPU seconds, counts, latency samples) through a queue; the parent measures the nodes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import struct
import threading
import time
from array import array
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from multiprocessing.queues import Queue
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from typing import Any

__all__ = ["WorkerSpec", "WorkerResult", "run_worker", "call_records", "cpu_seconds", "STAMP"]

# e2e values start with the send time (CLOCK_MONOTONIC, the same clock in every process on the machine).
STAMP = struct.Struct("<q")
_CALL_BYTES = 4 << 20  # one send_batch() call carries about this many value bytes
_MAX_CALL_RECORDS = 10_000  # Spark's default Arrow batch: what the client is tuned for
_VALUE_POOL = 64  # send() cycles through this many distinct random values
_COUNTER_EVERY = 256  # acknowledged records between updates of the shared progress counter
_monotonic = time.monotonic


def call_records(message_size: int) -> int:
    """Records per ``send_batch()`` call: about 4 MiB of values, at most 10,000 records."""
    return max(1, min(_MAX_CALL_RECORDS, _CALL_BYTES // max(1, message_size)))


@dataclass
class WorkerSpec:
    role: str  # "produce" (send_batch or send), "latency" (one at a time), "e2e" (paced, stamped), "consume"
    index: int
    bootstrap: str
    topic: str
    message_size: int
    count: int | None  # records this worker sends or reads; None: until duration_s
    duration_s: float | None
    api: str = "batch"  # produce: "batch" (send_batch) or "send" (one send() per record)
    linger_ms: float = 5.0
    batch_bytes: int = 1 << 20
    max_in_flight: int = 5
    compression: str = "none"
    rate: float = 0.0  # e2e: records per second from this worker
    partitions: list[int] = field(default_factory=list)  # consume: the partitions this worker reads
    fetch_max_bytes: int = 16 << 20
    client: dict[str, Any] = field(default_factory=dict)  # TLS and credentials (bench --secure)


@dataclass
class WorkerResult:
    index: int
    records: int = 0  # acknowledged (or read)
    failed: int = 0
    bytes: int = 0
    cpu_s: float = 0.0  # this process, from the start signal to its last acknowledgement
    elapsed_s: float = 0.0
    first_error: str | None = None
    latencies_ms: array[float] = field(default_factory=lambda: array("d"))


def cpu_seconds() -> float:
    # Every thread of this process, to the nanosecond: os.times() counts 10 ms clock ticks, and a short read
    # can fit within one.
    return time.process_time()


def _describe(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{text} ({reason})" if reason else text


class _Tally:
    """Acknowledgements from the producer's sender thread, into this worker's result and the shared counter.

    The counter only feeds the parent's progress display: it is updated every ``_COUNTER_EVERY`` records, as
    its process-shared lock cost more per record (1.4 us) than a ``send()`` callback's own work. ``send()``
    acknowledgements are counted by the sender thread alone, without the lock (0.65 us per record with it, more
    than a quarter of the library's own cost per record), and moved into the result in the same blocks:
    :meth:`report_rest` moves the last ones."""

    def __init__(self, result: WorkerResult, counter: Synchronized[int] | None) -> None:
        self._lock = threading.Lock()
        self._result = result
        self._counter = counter  # None: the caller counts (e2e counts sends there, arrivals in the parent)
        self._unreported = 0  # acknowledged records not yet added to the counter
        self._record_acks = 0  # send() records acknowledged, not yet in the result (the sender thread's own)
        self.last_ack = time.monotonic()

    def done(self, records: int, error: BaseException | None, *, acked_at: float | None = None) -> None:
        """``records`` acknowledged (the latest at ``acked_at``, default now), or failed with ``error``."""
        with self._lock:
            if error is not None:
                self._result.failed += records
                if self._result.first_error is None:
                    self._result.first_error = _describe(error)
                return
            self._result.records += records
            self.last_ack = time.monotonic() if acked_at is None else acked_at
            self._unreported += records
            if self._unreported < _COUNTER_EVERY:
                return
            records, self._unreported = self._unreported, 0
        self._report(records)

    def report_rest(self) -> None:
        """Add what the result and the counter have not seen yet (at the end, once every record is done)."""
        acks, self._record_acks = self._record_acks, 0
        if acks:
            self.done(acks, None, acked_at=self.last_ack)
        with self._lock:
            records, self._unreported = self._unreported, 0
        self._report(records)

    def _report(self, records: int) -> None:
        if records and self._counter is not None:
            with self._counter.get_lock():
                self._counter.value += records

    def batch_callback(self, records: int) -> Callable[[Future[Any]], None]:
        def callback(future: Future[Any]) -> None:
            self.done(records, future.exception())

        return callback

    def record_callback(self, _metadata: object, error: BaseException | None) -> None:
        if error is not None:
            self.done(1, error)
            return
        self.last_ack = now = _monotonic()
        self._record_acks += 1
        if self._record_acks >= _COUNTER_EVERY:
            acks, self._record_acks = self._record_acks, 0
            self.done(acks, None, acked_at=now)


def _keep_going(spec: WorkerSpec, sent: int, deadline: float, stop: Event) -> int:
    """How many records the next step may send (0: stop)."""
    if stop.is_set():
        return 0
    if spec.count is not None:
        return spec.count - sent
    return 1 << 62 if time.monotonic() < deadline else 0


def run_worker(
    spec: WorkerSpec, counter: Synchronized[int], results: Queue[WorkerResult], ready: Event, go: Event, stop: Event
) -> None:
    """Process entry point: set up, say ready, wait for ``go``, work, put one WorkerResult on ``results``."""
    # Ctrl-C reaches the whole process group: the parent alone decides, and tells workers through ``stop``.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    result = WorkerResult(spec.index)
    try:
        runner = {"produce": _produce, "latency": _latency, "e2e": _e2e, "consume": _consume}[spec.role]
        runner(spec, counter, result, ready, go, stop)
    except Exception as exc:  # reported to the parent, which exits with it
        result.first_error = result.first_error or _describe(exc)
    finally:
        ready.set()  # a worker that failed during setup must not keep the parent waiting
        results.put(result)


def _producer(spec: WorkerSpec, linger_ms: float | None = None) -> Any:
    from multiraft import Producer

    return Producer(
        spec.bootstrap,
        linger_ms=spec.linger_ms if linger_ms is None else linger_ms,
        # A record larger than batch_bytes still goes out alone; a larger batch_bytes keeps 1 MiB values in
        # batches of their own rather than splitting hairs at the boundary.
        batch_bytes=max(spec.batch_bytes, spec.message_size + 1024),
        # The buffer bounds the memory of records waiting or in flight: send_batch() blocks when it is full.
        buffer_bytes=max(64 << 20, 4 * (spec.message_size + 1024) * call_records(spec.message_size)),
        compression=spec.compression,  # type: ignore[arg-type]  # checked by the command line
        max_in_flight=spec.max_in_flight,
        **spec.client,
    )


def _produce(
    spec: WorkerSpec, counter: Synchronized[int], result: WorkerResult, ready: Event, go: Event, stop: Event
) -> None:
    import pyarrow as pa

    producer = _producer(spec)
    tally = _Tally(result, counter)
    per_call = call_records(spec.message_size)
    try:
        # Random values, made once: generating them is not what is measured. Incompressible, so
        # --compression shows its CPU cost, not its gain.
        pool = [os.urandom(spec.message_size) for _ in range(min(per_call, _VALUE_POOL))]
        values = pa.array([pool[i % len(pool)] for i in range(per_call)], type=pa.binary())
        # One record through the whole path before the clock starts: metadata, connections, and the lazy
        # imports of the encoder (numpy, pyarrow.compute), which take a second on a busy machine.
        producer.send_batch(spec.topic, values.slice(0, 1)).result()
        ready.set()
        go.wait()
        cpu_start, started = cpu_seconds(), time.monotonic()
        deadline = started + (spec.duration_s or 0.0)
        sent = 0
        while (allowed := _keep_going(spec, sent, deadline, stop)) > 0:
            if spec.api == "send":
                count = min(allowed, 1000)  # check the clock every 1,000 records
                for i in range(count):
                    producer.send(spec.topic, pool[i % len(pool)], callback=tally.record_callback)
            else:
                count = min(allowed, per_call)
                chunk = values if count == per_call else values.slice(0, count)
                producer.send_batch(spec.topic, chunk).add_done_callback(tally.batch_callback(count))
            sent += count
        producer.flush()
        tally.report_rest()
        result.elapsed_s = tally.last_ack - started
        result.cpu_s = cpu_seconds() - cpu_start
        result.bytes = result.records * spec.message_size
    finally:
        with contextlib.suppress(Exception):
            producer.close(timeout_s=10)


def _latency(
    spec: WorkerSpec, counter: Synchronized[int], result: WorkerResult, ready: Event, go: Event, stop: Event
) -> None:
    # linger 0: a record waits for nothing but its acknowledgement.
    producer = _producer(spec, linger_ms=0)
    try:
        value = os.urandom(spec.message_size)
        for _ in range(20):  # warm the connection and the leader's path; not counted
            producer.send(spec.topic, value).result()
        ready.set()
        go.wait()
        cpu_start, started = cpu_seconds(), time.monotonic()
        deadline = started + (spec.duration_s or 0.0)
        sent = 0
        samples = result.latencies_ms
        while _keep_going(spec, sent, deadline, stop) > 0:
            begin = time.perf_counter()
            try:
                producer.send(spec.topic, value).result()
            except Exception as exc:
                result.failed += 1
                result.first_error = result.first_error or _describe(exc)
                break
            samples.append((time.perf_counter() - begin) * 1000)
            sent += 1
            with counter.get_lock():
                counter.value += 1
        result.elapsed_s = time.monotonic() - started
        result.cpu_s = cpu_seconds() - cpu_start
        result.records = sent
        result.bytes = sent * spec.message_size
    finally:
        with contextlib.suppress(Exception):
            producer.close(timeout_s=10)


def _e2e(
    spec: WorkerSpec, counter: Synchronized[int], result: WorkerResult, ready: Event, go: Event, stop: Event
) -> None:
    """Paced sends of stamped values; the parent's consumer computes the latencies. The counter counts sends."""
    producer = _producer(spec)
    tally = _Tally(result, None)
    try:
        padding = os.urandom(max(0, spec.message_size - STAMP.size))
        producer.send(spec.topic, STAMP.pack(0) + padding).result()  # warm-up; stamp 0: not a sample
        ready.set()
        go.wait()
        cpu_start, started = cpu_seconds(), time.monotonic()
        deadline = started + (spec.duration_s or 0.0)
        interval = 1.0 / spec.rate
        sent = 0
        while _keep_going(spec, sent, deadline, stop) > 0:
            due = started + sent * interval  # a fixed schedule: a slow send does not lower the offered rate
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            producer.send(spec.topic, STAMP.pack(time.monotonic_ns()) + padding, callback=tally.record_callback)
            sent += 1
            with counter.get_lock():
                counter.value += 1
        producer.flush()
        tally.report_rest()
        result.elapsed_s = time.monotonic() - started
        result.cpu_s = cpu_seconds() - cpu_start
        result.bytes = result.records * spec.message_size
    finally:
        with contextlib.suppress(Exception):
            producer.close(timeout_s=10)


def _warm_decoder() -> None:
    """The first poll would import numpy, pyarrow.compute, the batch decoder and (through pyarrow's
    ``to_numpy``) pandas: over a second on a busy machine. Do it before the clock starts, on a batch made here,
    along the consumer's own path."""
    import pyarrow.compute  # noqa: F401

    from storage import decode_batches, encode_batch

    table = decode_batches(encode_batch([b"warm-up"], timestamps_ms=0), include_headers=True)
    table.column("offset").combine_chunks().to_numpy()


def _consume(
    spec: WorkerSpec, counter: Synchronized[int], result: WorkerResult, ready: Event, go: Event, stop: Event
) -> None:
    from multiraft import Consumer, TopicPartition

    consumer = Consumer(
        spec.bootstrap,
        fetch_max_bytes=spec.fetch_max_bytes,
        max_poll_records=50_000,
        fetch_max_wait_ms=100,
        **spec.client,
    )
    try:
        assigned = [TopicPartition(spec.topic, p) for p in spec.partitions]
        consumer.assign(assigned, start="earliest")
        for tp in assigned:  # resolve "earliest" (ListOffsets to each leader) before the clock starts
            consumer.position(tp)
        _warm_decoder()
        ready.set()
        go.wait()
        cpu_start, started = cpu_seconds(), time.monotonic()
        target = spec.count or 0
        idle_since = time.monotonic()
        while result.records < target and not stop.is_set():
            table = consumer.poll_arrow(timeout_s=0.5)
            rows = table.num_rows
            if rows:
                result.records += rows
                idle_since = time.monotonic()
                with counter.get_lock():
                    counter.value += rows
            elif time.monotonic() - idle_since > 30:
                raise TimeoutError(f"read {result.records} of {target} records; nothing more for 30 s")
        result.elapsed_s = time.monotonic() - started
        result.cpu_s = cpu_seconds() - cpu_start
        result.bytes = result.records * spec.message_size
    finally:
        with contextlib.suppress(Exception):
            consumer.close()
