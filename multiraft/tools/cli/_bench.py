"""``multiraft bench produce|consume|latency|e2e``: numbers from the public client, against a cluster.

* ``produce``: throughput of ``Producer.send_batch()`` (or ``send()`` with ``--api send``) from
  ``--producers`` processes. Each first sends one record, untimed, to warm up (metadata, connections, the
  encoder's lazy imports).
* ``consume``: first writes ``--count`` records (not timed), then reads the whole topic (all of it, when
  ``--topic`` names one that already held records) from the earliest offset with ``Consumer.poll_arrow()``
  from ``--consumers`` processes.
* ``latency``: one record at a time, each waiting for its acknowledgement (``send().result()``).
* ``e2e``: records sent at ``--rate`` per second carry their send time; a consumer in this process measures
  when it sees each of them.

The cluster is ``--bootstrap`` / ``--cluster-dir`` (an existing one), or ``--local N``: a throwaway cluster of
N node processes in a temporary directory, started and stopped with the launcher ``scripts/cluster`` uses.
Client processes are started with ``spawn`` and each stops before the command returns; so does a local
cluster, on errors and on Ctrl-C too. Memory stays bounded: producers block on their buffer
(``buffer_bytes``), consumers hold one poll at a time, and only latency samples (8 bytes each) are kept.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import queue
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from multiprocessing.context import SpawnContext, SpawnProcess
from pathlib import Path
from typing import Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from multiraft import trace
from multiraft.tools.cli._bench_cluster import Target, bench_target, delete_topic, node_cpu_seconds, prepare_topic
from multiraft.tools.cli._bench_e2e import Reader, warm_up
from multiraft.tools.cli._bench_options import (
    CLIENT_PANEL,
    WORKLOAD_PANEL,
    BatchBytesOption,
    CompressionOption,
    CountOption,
    DurationOption,
    InFlightOption,
    JsonOption,
    LingerOption,
    LocalOption,
    PartitionsOption,
    ProducersOption,
    ReplicationOption,
    SecureOption,
    SizeOption,
    TopicOption,
    TraceOption,
)
from multiraft.tools.cli._bench_report import ACK_GUARANTEE, machine, percentiles, print_table
from multiraft.tools.cli._bench_trace import breakdown, format_breakdown, read_lines
from multiraft.tools.cli._bench_worker import WorkerResult, WorkerSpec, cpu_seconds, run_worker
from multiraft.tools.cli._common import err_console
from multiraft.tools.cli._options import BootstrapOption, ClusterDirOption, fail
from multiraft.tools.cli._produce import Compression

__all__ = ["bench_app", "ACK_GUARANTEE"]  # ACK_GUARANTEE: what an acknowledgement promises (_bench_report)

_MB = 1_000_000  # MB/s in decimal megabytes, as the peer benchmarks report
_READY_TIMEOUT_S = 120.0  # spawned workers import grpc and pyarrow; a loaded 2-core machine is slow at it
_STOP_TIMEOUT_S = 30.0
# Without --count or --duration: about 10 s of work for each mode on a 2-core machine.
_DEFAULT_COUNT = {"produce": 100_000, "consume": 100_000, "latency": 5_000, "e2e": 10_000}

bench_app = typer.Typer(
    help="Measure a cluster with the public client: produce and consume throughput, latency.",
    no_args_is_help=True,
)


@dataclass
class Params:
    mode: str
    local: int | None
    topic: str | None
    partitions: int
    replication_factor: int
    message_size: int
    count: int | None
    duration_s: float | None
    producers: int
    linger_ms: float
    batch_bytes: int
    max_in_flight: int
    compression: str
    api: str = "batch"
    consumers: int = 1
    rate: float = 0.0
    fetch_max_bytes: int = 16 << 20
    secure: bool = False
    trace_dir: str | None = None  # e2e: MULTIRAFT_TRACE for the nodes and clients (see multiraft.trace)


@dataclass
class _Phase:
    """What one run of the worker processes measured."""

    results: list[WorkerResult]
    wall_s: float
    client_cpu_s: float  # every worker plus this process (which runs the e2e consumer)
    node_cpu_s: dict[str, float | None] | None
    extra: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------------------------------------ the cluster


# ------------------------------------------------------------------------------------------------ workers


def _spec(params: Params, role: str, index: int, target: Target, topic: str, count: int | None) -> WorkerSpec:
    return WorkerSpec(
        role=role,
        index=index,
        bootstrap=target.bootstrap,
        client=target.client,
        topic=topic,
        message_size=params.message_size,
        count=count,
        duration_s=params.duration_s if count is None else None,
        api=params.api,
        linger_ms=params.linger_ms,
        batch_bytes=params.batch_bytes,
        max_in_flight=params.max_in_flight,
        compression=params.compression,
        fetch_max_bytes=params.fetch_max_bytes,
    )


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _progress(disable: bool) -> Progress:
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
        disable=disable,
    )


def _run_workers(
    specs: list[WorkerSpec],
    target: Target,
    description: str,
    total: int | None,
    duration_s: float | None,
    show_progress: bool,
    finished: Callable[[list[WorkerResult]], bool] | None = None,
) -> _Phase:
    """Start one spawned process per spec, wait until all are ready, start them together, show progress, and
    collect their results; then wait until ``finished(results)`` says so (bounded: the e2e consumer, on a
    thread of its own, sees the last records)."""
    context: SpawnContext = multiprocessing.get_context("spawn")
    counter = context.Value("q", 0)
    results: multiprocessing.Queue[WorkerResult] = context.Queue()
    go, stop = context.Event(), context.Event()
    readies = [context.Event() for _ in specs]
    processes: list[SpawnProcess] = [
        context.Process(
            target=run_worker,
            args=(spec, counter, results, ready, go, stop),
            name=f"bench-{spec.role}-{spec.index}",
            daemon=True,  # dies with us if we are killed hard
        )
        for spec, ready in zip(specs, readies, strict=True)
    ]
    collected: list[WorkerResult] = []
    try:
        for process in processes:
            process.start()
        deadline = time.monotonic() + _READY_TIMEOUT_S
        for ready, process in zip(readies, processes, strict=True):
            while not ready.wait(0.2):
                if not process.is_alive() or time.monotonic() > deadline:
                    raise RuntimeError(f"{process.name} did not get ready (exit code {process.exitcode})")
        if not results.empty():  # a worker failed while setting up: its result says why
            collected.append(results.get())
            raise _WorkerFailedError(collected[0].first_error or "a worker failed while setting up")
        own_cpu = cpu_seconds()
        nodes_before = node_cpu_seconds(target.node_pids)
        started = time.monotonic()
        go.set()
        with _progress(not show_progress) as progress:
            task = progress.add_task(description, total=total if total is not None else None, rate="")
            while len(collected) < len(processes):
                _show(progress, task, counter.value, started, total, duration_s)
                with contextlib.suppress(queue.Empty):
                    collected.append(results.get(timeout=0.1))
                if any(p.exitcode not in (None, 0) for p in processes) and results.empty():
                    time.sleep(0.5)  # its result may still be in the pipe
                    if results.empty():
                        raise RuntimeError("a bench worker process died; see its traceback above")
            if finished is not None:
                wait_until = time.monotonic() + 30
                while not finished(collected) and time.monotonic() < wait_until:
                    time.sleep(0.01)
            _show(progress, task, counter.value, started, total, duration_s)
        wall = time.monotonic() - started
        nodes_after = node_cpu_seconds(target.node_pids)
        main_cpu = cpu_seconds() - own_cpu
    finally:
        stop.set()
        _stop_processes(processes)
    node_cpu: dict[str, float | None] | None = None
    if nodes_before is not None and nodes_after is not None:
        node_cpu = {
            name: (None if before is None or nodes_after.get(name) is None else nodes_after[name] - before)  # type: ignore[operator]
            for name, before in nodes_before.items()
        }
    collected.sort(key=lambda r: r.index)
    failed = [r for r in collected if r.first_error]
    if failed and not any(r.records for r in collected):
        raise _WorkerFailedError(failed[0].first_error or "")
    return _Phase(collected, wall, main_cpu + sum(r.cpu_s for r in collected), node_cpu)


class _WorkerFailedError(RuntimeError):
    pass


def _show(
    progress: Progress, task: TaskID, done: int, started: float, total: int | None, duration_s: float | None
) -> None:
    elapsed = max(1e-9, time.monotonic() - started)
    if total is None and duration_s is not None:
        progress.update(
            task, completed=done, total=None, rate=f"{done / elapsed:,.0f} msg/s  {elapsed:.0f}/{duration_s:.0f} s"
        )
    else:
        progress.update(task, completed=done, rate=f"{done / elapsed:,.0f} msg/s")


def _stop_processes(processes: list[SpawnProcess]) -> None:
    """Join each worker; one that does not stop in time is terminated, then killed (by its PID)."""
    deadline = time.monotonic() + _STOP_TIMEOUT_S
    for process in processes:
        if process.pid is None:
            continue
        process.join(max(0.1, deadline - time.monotonic()))
        if process.is_alive():
            process.terminate()
            process.join(5)
        if process.is_alive():
            process.kill()
            process.join(5)


# ------------------------------------------------------------------------------------------------ the modes


def _produce_phase(params: Params, target: Target, topic: str, show: bool, label: str) -> _Phase:
    counts = _split(params.count, params.producers) if params.count is not None else [None] * params.producers
    specs = [
        _spec(params, "produce", i, target, topic, count)
        for i, count in enumerate(counts)
        if count is None or count > 0
    ]
    return _run_workers(specs, target, label, params.count, params.duration_s, show)


def _mode_produce(params: Params, target: Target, topic: str, partitions: int, show: bool) -> dict[str, Any]:
    phase = _produce_phase(params, target, topic, show, f"producing to {topic}")
    records = sum(r.records for r in phase.results)
    # Throughput over the slowest worker's time to its last acknowledgement (they start together).
    elapsed = max((r.elapsed_s for r in phase.results), default=phase.wall_s) or phase.wall_s
    return _figures(params, phase, records, elapsed)


def _mode_consume(params: Params, target: Target, topic: str, partitions: int, show: bool) -> dict[str, Any]:
    load = _produce_phase(params, target, topic, show, f"writing the records to read to {topic}")
    written = sum(r.records for r in load.results)
    from multiraft import Admin

    with Admin(target.bootstrap, **target.client) as admin:
        start = admin.list_offsets(topic, "earliest")
        end = admin.list_offsets(topic, "latest")
    available = {p: end[p] - start.get(p, 0) for p in end}
    consumers = min(params.consumers, partitions)
    owned: list[list[int]] = [list(range(partitions))[i::consumers] for i in range(consumers)]
    specs = []
    for index, mine in enumerate(owned):
        spec = _spec(params, "consume", index, target, topic, sum(available.get(p, 0) for p in mine))
        spec.partitions = mine
        specs.append(spec)
    total = sum(available.values())
    phase = _run_workers(specs, target, f"reading {topic} from the earliest offset", total, None, show)
    records = sum(r.records for r in phase.results)
    elapsed = max((r.elapsed_s for r in phase.results), default=phase.wall_s) or phase.wall_s
    figures = _figures(params, phase, records, elapsed)
    figures["written_before"] = {"records": written, "msgs_per_s": round(written / max(1e-9, load.wall_s), 1)}
    return figures


def _mode_latency(params: Params, target: Target, topic: str, partitions: int, show: bool) -> dict[str, Any]:
    counts = _split(params.count, params.producers) if params.count is not None else [None] * params.producers
    specs = [_spec(params, "latency", i, target, topic, c) for i, c in enumerate(counts) if c != 0]
    phase = _run_workers(specs, target, f"one at a time to {topic}", params.count, params.duration_s, show)
    samples = [sample for r in phase.results for sample in r.latencies_ms]
    records = sum(r.records for r in phase.results)
    elapsed = max((r.elapsed_s for r in phase.results), default=phase.wall_s) or phase.wall_s
    return {**_figures(params, phase, records, elapsed), **percentiles(samples), "samples": len(samples)}


def _mode_e2e(params: Params, target: Target, topic: str, partitions: int, show: bool) -> dict[str, Any]:
    from multiraft import Consumer, TopicPartition

    counts = _split(params.count, params.producers) if params.count is not None else [None] * params.producers
    specs = []
    for index, count in enumerate(counts):
        spec = _spec(params, "e2e", index, target, topic, count)
        spec.rate = params.rate / params.producers
        specs.append(spec)
    samples: list[float] = []
    consumer = Consumer(target.bootstrap, fetch_max_wait_ms=50, max_poll_records=10_000, **target.client)
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)], start="latest")
        for tp in consumer.assignment():
            consumer.position(tp)  # resolve "latest" now, before the first record is sent
        warm_up(consumer, target, topic, partitions)

        def all_seen(results: list[WorkerResult]) -> bool:
            return len(results) == len(specs) and len(samples) >= sum(r.records for r in results)

        with Reader(consumer, samples):
            phase = _run_workers(
                specs, target, f"end to end through {topic}", params.count, params.duration_s, show, all_seen
            )
    finally:
        consumer.close()
    records = sum(r.records for r in phase.results)
    elapsed = max((r.elapsed_s for r in phase.results), default=phase.wall_s) or phase.wall_s
    figures = {**_figures(params, phase, records, elapsed), **percentiles(samples), "samples": len(samples)}
    figures["offered_rate"] = params.rate
    figures["unseen"] = max(0, records - len(samples))
    return figures


_MODES: dict[str, Callable[[Params, Target, str, int, bool], dict[str, Any]]] = {
    "produce": _mode_produce,
    "consume": _mode_consume,
    "latency": _mode_latency,
    "e2e": _mode_e2e,
}


def _figures(params: Params, phase: _Phase, records: int, elapsed_s: float) -> dict[str, Any]:
    elapsed_s = max(elapsed_s, 1e-9)
    failed = sum(r.failed for r in phase.results)
    errors = [r.first_error for r in phase.results if r.first_error]
    nodes = phase.node_cpu_s
    nodes_total = sum(v for v in nodes.values() if v is not None) if nodes else None
    per_record = 1e6 / records if records else None
    return {
        "records": records,
        "failed": failed,
        "first_error": errors[0] if errors else None,
        "elapsed_s": round(elapsed_s, 4),
        "msgs_per_s": round(records / elapsed_s, 1),
        "mb_per_s": round(records * params.message_size / elapsed_s / _MB, 3),
        "cpu_s": {
            "client": round(phase.client_cpu_s, 3),
            "client_processes": [round(r.cpu_s, 3) for r in phase.results],
            # the same names as benchmarks/peers: "servers" are the node processes
            "servers": {k: (round(v, 3) if v is not None else None) for k, v in nodes.items()} if nodes else None,
            "servers_total": round(nodes_total, 3) if nodes_total is not None else None,
            "client_us_per_msg": round(phase.client_cpu_s * per_record, 2) if per_record else None,
            "servers_us_per_msg": round(nodes_total * per_record, 2) if per_record and nodes_total else None,
        },
    }


# ------------------------------------------------------------------------------------------------ output


def _run(params: Params, bootstrap: str | None, cluster_dir: Path | None, as_json: bool) -> None:
    if params.count is not None and params.duration_s is not None:
        fail("give --count or --duration, not both")
    if params.count is None and params.duration_s is None:
        params.count = _DEFAULT_COUNT[params.mode]
    if params.local is not None and params.replication_factor > params.local:
        fail(
            f"--replication-factor {params.replication_factor} needs at least that many nodes; "
            f"--local is {params.local}"
        )
    if params.mode == "e2e" and params.rate <= 0:
        fail("--rate must be positive")
    if params.trace_dir is not None:
        trace.configure(params.trace_dir, "bench")  # before the cluster and the workers start: they inherit it
    show = err_console.is_terminal
    # SIGTERM (a CI timeout, `kill`) unwinds like Ctrl-C: workers and a local cluster are stopped.
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    began = time.monotonic()
    try:
        with bench_target(bootstrap, cluster_dir, params.local, params.secure) as target:
            topic, partitions, created = prepare_topic(
                target.bootstrap, params.mode, params.topic, params.partitions, params.replication_factor, target.client
            )
            try:
                figures = _MODES[params.mode](params, target, topic, partitions, show)
            finally:
                if created:
                    delete_topic(target.bootstrap, topic, target.client)
    except _WorkerFailedError as exc:
        fail(f"bench {params.mode} failed: {exc}")
    finally:
        signal.signal(signal.SIGTERM, previous)
        if params.trace_dir is not None:
            trace.configure(None)
    if params.trace_dir is not None:
        figures["trace"] = breakdown(read_lines(params.trace_dir))
        err_console.print(format_breakdown(figures["trace"]), highlight=False)
    report_params = asdict(params)
    report_params.update(topic=topic, partitions=partitions, topic_created=created)
    if params.mode != "e2e":
        report_params.pop("rate")
        report_params.pop("trace_dir")
    if params.mode != "consume":
        report_params.pop("consumers")
        report_params.pop("fetch_max_bytes")
    result = {
        "benchmark": "multiraft bench",
        "mode": params.mode,
        **figures,
        "params": report_params,
        "ack_guarantee": ACK_GUARANTEE,
        "cluster": {
            "bootstrap": target.bootstrap,
            "local_nodes": params.local,
            "node_pids": target.node_pids,
        },
        "machine": machine(),
        "command": "multiraft " + " ".join(sys.argv[1:]),
        "total_s": round(time.monotonic() - began, 2),
    }
    if as_json:
        import json

        print(json.dumps(result))
    else:
        print_table(result)
    if figures["failed"]:
        fail(f"{figures['failed']:,} records failed; first: {figures['first_error']}")


def _raise_interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


# ------------------------------------------------------------------------------------------------ commands


@bench_app.command("produce")
def produce(
    bootstrap: BootstrapOption = None,
    cluster_dir: ClusterDirOption = None,
    local: LocalOption = None,
    secure: SecureOption = False,
    topic: TopicOption = None,
    partitions: PartitionsOption = 6,
    replication_factor: ReplicationOption = 3,
    message_size: SizeOption = 1024,
    count: CountOption = None,
    duration: DurationOption = None,
    producers: ProducersOption = 1,
    linger_ms: LingerOption = 5.0,
    batch_bytes: BatchBytesOption = 1 << 20,
    max_in_flight: InFlightOption = 5,
    compression: CompressionOption = Compression.NONE,
    api: str = typer.Option(
        "batch",
        "--api",
        help="batch: send_batch() of ~4 MiB per call; send: one send() per record.",
        rich_help_panel=CLIENT_PANEL,
    ),
    as_json: JsonOption = False,
) -> None:
    """Throughput: --producers processes write --count records (or for --duration) and wait for every ack."""
    if api not in ("batch", "send"):
        fail(f"--api must be 'batch' or 'send', got {api!r}")
    params = Params(
        "produce", local, topic, partitions, replication_factor, message_size, count, duration, producers,
        linger_ms, batch_bytes, max_in_flight, compression.value, api=api, secure=secure
    )  # fmt: skip
    _run(params, bootstrap, cluster_dir, as_json)


@bench_app.command("consume")
def consume(
    bootstrap: BootstrapOption = None,
    cluster_dir: ClusterDirOption = None,
    local: LocalOption = None,
    secure: SecureOption = False,
    topic: TopicOption = None,
    partitions: PartitionsOption = 6,
    replication_factor: ReplicationOption = 3,
    message_size: SizeOption = 1024,
    count: CountOption = None,
    duration: DurationOption = None,
    producers: ProducersOption = 1,
    consumers: int = typer.Option(
        1, "--consumers", min=1, max=64, help="Consumer processes (partitions split).", rich_help_panel=CLIENT_PANEL
    ),
    fetch_max_bytes: int = typer.Option(
        16 << 20, "--fetch-max-bytes", min=65536, help="Bytes per fetch round.", rich_help_panel=CLIENT_PANEL
    ),
    linger_ms: LingerOption = 5.0,
    batch_bytes: BatchBytesOption = 1 << 20,
    max_in_flight: InFlightOption = 5,
    compression: CompressionOption = Compression.NONE,
    as_json: JsonOption = False,
) -> None:
    """Read throughput: write --count records first (not timed), then read them all from the earliest offset."""
    params = Params(
        "consume", local, topic, partitions, replication_factor, message_size, count, duration, producers,
        linger_ms, batch_bytes, max_in_flight, compression.value, consumers=consumers,
        fetch_max_bytes=fetch_max_bytes, secure=secure,
    )  # fmt: skip
    _run(params, bootstrap, cluster_dir, as_json)


@bench_app.command("latency")
def latency(
    bootstrap: BootstrapOption = None,
    cluster_dir: ClusterDirOption = None,
    local: LocalOption = None,
    secure: SecureOption = False,
    topic: TopicOption = None,
    partitions: PartitionsOption = 1,
    replication_factor: ReplicationOption = 3,
    message_size: SizeOption = 1024,
    count: CountOption = None,
    duration: DurationOption = None,
    producers: ProducersOption = 1,
    compression: CompressionOption = Compression.NONE,
    as_json: JsonOption = False,
) -> None:
    """Acknowledgement latency: each producer sends one record at a time and waits for its ack (linger 0)."""
    params = Params(
        "latency", local, topic, partitions, replication_factor, message_size, count, duration, producers,
        0.0, 1 << 20, 5, compression.value, secure=secure
    )  # fmt: skip
    _run(params, bootstrap, cluster_dir, as_json)


@bench_app.command("e2e")
def e2e(
    bootstrap: BootstrapOption = None,
    cluster_dir: ClusterDirOption = None,
    local: LocalOption = None,
    secure: SecureOption = False,
    topic: TopicOption = None,
    partitions: PartitionsOption = 6,
    replication_factor: ReplicationOption = 3,
    message_size: SizeOption = 1024,
    count: CountOption = None,
    duration: DurationOption = None,
    producers: ProducersOption = 1,
    rate: float = typer.Option(
        1000.0, "--rate", help="Records per second offered, over all producers.", rich_help_panel=WORKLOAD_PANEL
    ),
    linger_ms: LingerOption = 5.0,
    batch_bytes: BatchBytesOption = 1 << 20,
    max_in_flight: InFlightOption = 5,
    compression: CompressionOption = Compression.NONE,
    trace_dir: TraceOption = None,
    as_json: JsonOption = False,
) -> None:
    """End to end: from send() to a consumer in this process seeing the record, at a fixed offered --rate.
    Producers linger 5 ms by default: at 1,000 msg/s on 2 cores a shorter linger makes more batches, which cost
    more than the wait they save. --trace DIR prints where the time goes, stage by stage."""
    params = Params(
        "e2e", local, topic, partitions, replication_factor, message_size, count, duration, producers,
        linger_ms, batch_bytes, max_in_flight, compression.value, rate=rate, secure=secure,
        trace_dir=str(trace_dir) if trace_dir is not None else None,
    )  # fmt: skip
    _run(params, bootstrap, cluster_dir, as_json)
