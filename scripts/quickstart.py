"""The quickstart pipeline (run it through ``scripts/quickstart``, which sets up .venv and the work directory).

1. start a local 3-node cluster (``multiraft.tools.launcher``) in the work directory;
2. create the topics ``events`` (6 partitions) and ``events_per_minute`` (3 partitions), replication factor 3;
3. produce a paced clickstream of JSON events into ``events`` from a background thread, with a progress bar;
4. run a Spark Structured Streaming job that reads ``events`` while it is written: raw events to Parquet, and
   per-minute counts per page and action back into the topic ``events_per_minute``;
5. kill -9 one node mid-stream (the one leading the most partitions) and restart it a little later;
6. check that the Parquet output, the topic ``events`` and ``events_per_minute`` each hold every event exactly
   once; print a summary; stop Spark and the cluster.

Exits 0 only if every check passed. ``--events`` / ``--seconds`` (or ``QUICKSTART_EVENTS`` / ``QUICKSTART_SECONDS``)
make a smaller run.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from _quickstart_events import TIME_SPEEDUP, Clock
from _quickstart_produce import StreamProducer, send_end_of_stream
from _quickstart_secure import (
    ADMIN,
    PRODUCER,
    SECURE_SETTINGS,
    SPARK,
    Principals,
    bootstrap_admin,
    grant,
    refusals,
)
from _quickstart_verify import VerificationError, check_events_topic, check_windows, read_topic
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from multiraft import Admin
from multiraft.tools import launcher

_NODES = 3
_PARTITIONS = 6
_WATERMARK_DELAY_MS = 5 * 60_000  # event time; TIME_SPEEDUP turns it into 10 s of real time
_KILL_AT = 0.5  # fraction of the events acknowledged before the kill: the middle of the stream
_RESTART_AFTER_S = 10.0
_DRAIN_TIMEOUT_S = 240.0  # after the last event is acknowledged: Spark must have read and written everything
_MAX_RESTARTS = 3  # per query, for TRANSIENT_ERRORS only


class QuickstartError(Exception):
    """A step failed; the message says which and why."""


@dataclass
class QueryState:
    label: str
    start: Callable[[], Any]  # starts the query (again, from its checkpoint)
    query: Any = None
    restarts: int = 0
    batches: int = 0
    last_batch: int = -1
    rows_in: int = 0
    rows_out: int = 0
    rows_out_reported: bool = True  # False once a batch did not report its sink's output rows
    read_total: int = 0
    watermark_ms: int | None = None
    dropped_late: int = 0
    batches_after_kill: int = 0


@dataclass
class Kill:
    node_id: int
    pid: int
    leads: list[int]
    at: float
    restarted_at: float = 0.0
    serving_again_at: float = 0.0


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value else default


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/quickstart",
        description="A local 3-node multiraft cluster, a live clickstream and a Spark streaming job over it, "
        "with one node killed mid-stream; checks the outputs exactly once.",
    )
    parser.add_argument(
        "--events",
        type=int,
        default=_env_int("QUICKSTART_EVENTS", 300_000),
        help="events to produce (QUICKSTART_EVENTS; default 300000)",
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=float(_env_int("QUICKSTART_SECONDS", 60)),
        help="how long producing takes (QUICKSTART_SECONDS; default 60)",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        required=True,
        help="work directory (scripts/quickstart makes a temporary one, or uses QUICKSTART_DIR)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory (or QUICKSTART_KEEP=1)")
    parser.add_argument("--no-kill", action="store_true", help="do not kill a node")
    parser.add_argument("--no-spark", action="store_true", help="cluster, producer, kill and topic checks only")
    parser.add_argument(
        "--secure",
        action="store_true",
        help="TLS on every port, SCRAM users and ACLs: a producer principal that may only write events, a Spark "
        "principal that may only read it (and write the per-minute counts)",
    )
    args = parser.parse_args(argv)
    if args.events < 1 or args.seconds <= 0:
        parser.error("--events must be >= 1 and --seconds > 0")
    return args


class Quickstart:
    def __init__(self, args: argparse.Namespace, console: Console) -> None:
        self.args = args
        self.console = console
        self.workdir: Path = args.dir.resolve()
        self.cluster: launcher.ClusterInfo | None = None
        self.spark: Any = None
        self.cluster_error: BaseException | None = None
        self.queries: list[QueryState] = []
        self.producer: StreamProducer | None = None
        self.kill: Kill | None = None
        self.principals: Principals | None = None  # --secure: who connects as whom
        self.started = time.monotonic()
        now_ms = int(time.time() * 1000)
        span_ms = int(args.seconds * 1000 * TIME_SPEEDUP)
        # The simulated traffic ends now, rounded to a minute: the per-minute windows line up with the clock.
        self.clock = Clock(t0_ms=(now_ms - span_ms) // 60_000 * 60_000, span_ms=span_ms, events=args.events)

    def say(self, message: str) -> None:
        self.console.print(f"[dim]{time.monotonic() - self.started:6.1f}s[/]  {message}")

    def as_user(self, user: str) -> dict[str, Any]:
        """Client keyword arguments of ``user`` (nothing without --secure: plaintext, anonymous)."""
        return self.principals.client(user) if self.principals is not None else {}

    # ------------------------------------------------------------------------------------------ steps

    def run(self) -> list[str]:
        self.say(f"work directory {self.workdir}")
        cluster_starting = self._cluster_up_in_background()
        if not self.args.no_spark:
            from _quickstart_spark import activate, start_session

            self.say(f"starting Spark (local[2]); its log: {self.workdir / 'spark.log'}")
            try:
                self.spark = activate(start_session(self.workdir))
            except Exception as exc:
                raise QuickstartError(
                    f"Spark did not start: {exc!r}; see {self.workdir / 'spark.log'} "
                    "(Spark needs Java 17 on PATH or in JAVA_HOME)"
                ) from exc
        cluster_starting.join()
        if self.cluster is None:
            raise QuickstartError(f"the cluster did not start: {self.cluster_error!r}")
        bootstrap = self.cluster.bootstrap
        nodes = ", ".join(f"{n.node_id} (pid {n.pid})" for n in self.cluster.nodes.values())
        self.say(f"[green]cluster up[/]: nodes {nodes}; bootstrap {bootstrap}")
        if self.principals is not None:
            acls = grant(bootstrap, self.principals)
            self.say(f"[green]TLS + SCRAM + ACLs[/]: users {PRODUCER} and {SPARK}; " + "; ".join(acls))
        with Admin(bootstrap, **self.as_user(ADMIN)) as admin:
            admin.create_topic("events", partitions=_PARTITIONS, replication_factor=_NODES)
            admin.create_topic("events_per_minute", partitions=3, replication_factor=_NODES)
        self.say("created topics [bold]events[/] (6 partitions) and [bold]events_per_minute[/] (3), replication 3")
        if self.spark is not None:
            self._start_queries(bootstrap)

        progress = Progress(
            TextColumn("[bold]producing[/] events"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            console=self.console,
        )
        task = progress.add_task("produce", total=self.args.events, rate="")

        def on_acked(records: int) -> None:
            elapsed = max(time.monotonic() - (producer.started_at or time.monotonic()), 1e-3)
            progress.update(task, advance=records, rate=f"{producer.acked / elapsed:,.0f} events/s")

        producer = StreamProducer(
            bootstrap,
            "events",
            events=self.args.events,
            seconds=self.args.seconds,
            clock=self.clock,
            on_acked=on_acked,
            client=self.as_user(PRODUCER),
        )
        self.producer = producer
        with progress:
            producer.start()
            self.say(
                f"producing {self.args.events:,} clickstream events over ~{self.args.seconds:.0f}s "
                f"(JSON, key = user id; event time spans {self.clock.span_ms // 60_000} simulated minutes)"
            )
            self._follow(until_produced=True)
        self._check_producer()
        produce_s = producer.finished_at - producer.started_at
        self.say(
            f"[green]produced[/] {producer.acked:,} events in {produce_s:.1f}s "
            f"(paced at {producer.acked / produce_s:,.0f} events/s)"
        )

        if not self.args.no_spark:
            self._drain(bootstrap)
        else:
            send_end_of_stream(bootstrap, "events", self.clock, _WATERMARK_DELAY_MS, client=self.as_user(PRODUCER))
        if self.kill is not None and self.kill.restarted_at and not self.kill.serving_again_at:
            self._wait_restarted()
        return self._verify(bootstrap, produce_s)

    def _cluster_up_in_background(self) -> threading.Thread:
        """Nodes start in their own processes: bring them up while this thread starts Spark's JVM (10-20 s).
        Spark stays on the main thread: its data source registry is looked up through the thread's session."""

        def start() -> None:
            try:
                if self.args.secure:
                    ca_file = str(self.workdir / "cluster" / "tls" / "ca.pem")
                    self.principals = Principals(ca_file)
                    with bootstrap_admin(self.principals):
                        self.cluster = launcher.cluster_up(
                            self.workdir / "cluster", _NODES, SECURE_SETTINGS, secure=True
                        )
                else:
                    self.cluster = launcher.cluster_up(self.workdir / "cluster", _NODES)
            except BaseException as exc:  # reported by the main thread
                self.cluster_error = exc

        thread = threading.Thread(target=start, name="quickstart-cluster-up", daemon=True)
        thread.start()
        return thread

    def _start_queries(self, bootstrap: str) -> None:
        from _quickstart_spark import start_queries

        max_offsets = max(2_000, self.args.events // 10)
        raw, per_minute = start_queries(
            self.spark,
            bootstrap,
            workdir=self.workdir,
            end_ms=self.clock.end_ms,
            watermark_delay_ms=_WATERMARK_DELAY_MS,
            max_offsets_per_trigger=max_offsets,
            security=self.principals.spark_options(SPARK) if self.principals is not None else {},
        )
        self.queries = [
            QueryState("raw events -> Parquet", raw),
            QueryState("per-minute counts -> events_per_minute", per_minute),
        ]
        for state in self.queries:
            state.query = state.start()
        self.say(
            f"[green]Spark streaming[/]: 2 queries on events (startingOffsets=earliest, "
            f"maxOffsetsPerTrigger={max_offsets:,}): JSON -> Parquet, and 1-minute windows (5-minute watermark) "
            "-> events_per_minute"
        )

    def _follow(self, *, until_produced: bool, done: Any = None, timeout_s: float | None = None) -> None:
        """The main loop: print each finished Spark batch, kill and restart the node, watch for failures."""
        assert self.producer is not None
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            if self.producer.error is not None:
                raise QuickstartError(f"producing failed: {self.producer.error!r}")
            self._report_batches()
            self._maybe_kill()
            if until_produced and not self.producer.is_alive():
                return
            if done is not None and done():
                return
            if deadline is not None and time.monotonic() > deadline:
                raise QuickstartError(self._stall_message(timeout_s or 0))
            time.sleep(0.5)

    def _report_batches(self) -> None:
        from _quickstart_spark import TRANSIENT_ERRORS, new_progress

        for state in self.queries:
            if not state.query.isActive:
                exception = state.query.exception()
                message = str(exception or "no error reported")
                if any(text in message for text in TRANSIENT_ERRORS) and state.restarts < _MAX_RESTARTS:
                    state.restarts += 1
                    self.say(
                        f"[yellow]{state.label}: a Python worker missed Spark's 10 s start-up deadline (busy "
                        "machine); restarting the query from its checkpoint[/]"
                    )
                    state.query = state.start()
                    continue
                raise QuickstartError(f"the Spark query '{state.label}' stopped: {message}")
            for batch in new_progress(state.query, state.last_batch):
                state.last_batch = batch.batch_id
                state.batches += 1
                state.rows_in += batch.input_rows
                state.rows_out += max(batch.output_rows, 0)
                state.rows_out_reported &= batch.output_rows >= 0
                state.read_total = max(state.read_total, batch.end_offsets_total)
                state.watermark_ms = batch.watermark_ms
                state.dropped_late = max(state.dropped_late, batch.dropped_late)
                after_kill = ""
                if self.kill is not None:
                    state.batches_after_kill += 1
                    if not self.kill.serving_again_at:
                        after_kill = f"  [yellow](node {self.kill.node_id} down)[/]"
                if batch.input_rows == 0 and batch.output_rows <= 0:
                    continue  # a no-data batch (Spark runs one when the watermark moves): nothing to show
                out = f", {batch.output_rows:,} rows out" if batch.output_rows >= 0 else ""
                self.say(
                    f"[cyan]{state.label}[/] batch {batch.batch_id}: {batch.input_rows:,} rows in{out}; "
                    f"{state.read_total:,} read so far{after_kill}"
                )

    def _maybe_kill(self) -> None:
        assert self.producer is not None and self.cluster is not None
        if self.kill is not None:
            if not self.kill.restarted_at and time.monotonic() - self.kill.at >= _RESTART_AFTER_S:
                launcher.start_node(self.cluster, self.kill.node_id)
                self.kill.restarted_at = time.monotonic()
                self.say(f"restarting node {self.kill.node_id} (same data directory)")
            elif self.kill.restarted_at and not self.kill.serving_again_at:
                node = self.cluster.nodes[self.kill.node_id]
                if launcher.node_serving(node.client_address, 0.5):
                    self.kill.serving_again_at = time.monotonic()
                    self.say(f"[green]node {self.kill.node_id} is back[/] and catching up its replicas")
            return
        if self.args.no_kill or self.producer.acked < _KILL_AT * self.args.events:
            return
        # Kill once Spark is reading too (each query finished a batch), so that the kill lands in the middle of
        # both the produced stream and the Spark job; if Spark starts slowly, kill once producing is over.
        if any(state.rows_in == 0 for state in self.queries) and self.producer.is_alive():
            return
        with Admin(self.cluster.bootstrap, **self.as_user(ADMIN)) as admin:
            leaders = [p.leader for p in admin.describe_topic("events").partitions]
        # The node leading the most partitions: the kill forces the most leader elections.
        victim = max(self.cluster.nodes, key=lambda n: (leaders.count(n), n))
        pid = self.cluster.nodes[victim].pid
        launcher.kill_node(self.cluster, victim)
        leads = [p for p, leader in enumerate(leaders) if leader == victim]
        self.kill = Kill(victim, pid, leads, time.monotonic())
        self.say(
            f"[bold red]kill -9 node {victim}[/] (pid {pid}), leader of events partitions {leads}; "
            f"the stream and the queries carry on with 2 of 3 replicas"
        )

    def _stall_message(self, timeout_s: float) -> str:
        assert self.producer is not None
        states = "; ".join(
            f"{s.label}: {s.batches} batches, {s.read_total:,} records read, watermark {s.watermark_ms}"
            for s in self.queries
        )
        return f"Spark did not finish within {timeout_s:.0f}s after producing {self.producer.acked:,} events ({states})"

    def _check_producer(self) -> None:
        assert self.producer is not None
        self.producer.join()
        if self.producer.error is not None:
            raise QuickstartError(f"producing failed: {self.producer.error!r}")
        if self.producer.acked != self.args.events:
            raise QuickstartError(f"only {self.producer.acked:,} of {self.args.events:,} events were acknowledged")

    def _drain(self, bootstrap: str) -> None:
        """Wait for Spark to read every event, then end the stream and wait for the last windows."""
        assert self.producer is not None
        events = self.producer.acked
        self.say("waiting for Spark to read the last events ...")
        self._follow(
            until_produced=False,
            done=lambda: all(s.read_total >= events for s in self.queries),
            timeout_s=_DRAIN_TIMEOUT_S,
        )
        send_end_of_stream(bootstrap, "events", self.clock, _WATERMARK_DELAY_MS, client=self.as_user(PRODUCER))
        self.say("sent the end-of-stream marker: it moves the watermark past the last window, so Spark emits it")
        # The last window ends at most a minute after the last event; the watermark passes it after the marker.
        last_window_end = self.clock.end_ms // 60_000 * 60_000 + 60_000
        raw, per_minute = self.queries

        def finished() -> bool:
            return raw.read_total >= events + 1 and (per_minute.watermark_ms or 0) >= last_window_end

        self._follow(until_produced=False, done=finished, timeout_s=_DRAIN_TIMEOUT_S)
        for state in self.queries:
            state.query.stop()
        self.say("[green]Spark queries caught up[/] and stopped")

    def _wait_restarted(self) -> None:
        assert self.kill is not None and self.cluster is not None
        launcher.wait_serving(self.cluster, [self.kill.node_id])
        self.kill.serving_again_at = time.monotonic()
        self.say(f"[green]node {self.kill.node_id} is back[/]")

    # ------------------------------------------------------------------------------------------ checks

    def _verify(self, bootstrap: str, produce_s: float) -> list[str]:
        assert self.producer is not None
        events = self.producer.acked
        failures: list[str] = []
        rows: list[tuple[str, str, bool]] = []

        if self.principals is not None:
            answers = refusals(bootstrap, self.principals)
            refused = all("NOT refused" not in answer for answer in answers)
            rows.append(("ACLs", "; ".join(answer.split(":")[0] for answer in answers), refused))
            if not refused:
                failures.append("an ACL did not hold: " + "; ".join(answers))
        topic = check_events_topic(read_topic(bootstrap, "events", client=self.as_user(ADMIN)))
        ok = topic.events == events and topic.distinct_event_ids == events and topic.markers == 1
        rows.append(
            (
                "topic events",
                f"{topic.events:,} events, {topic.distinct_event_ids:,} distinct ids (+{topic.markers} end marker)",
                ok,
            )
        )
        if not ok:
            failures.append(
                f"topic events holds {topic.events:,} events / {topic.distinct_event_ids:,} ids, expected {events:,}"
            )

        if self.spark is not None:
            from _quickstart_spark import check_parquet

            parquet = check_parquet(self.spark, self.workdir / "output" / "events.parquet")
            ok = parquet.rows == events and parquet.distinct_event_ids == events and parquet.distinct_offsets == events
            rows.append(
                (
                    "Parquet (raw events)",
                    f"{parquet.rows:,} rows, {parquet.distinct_event_ids:,} distinct event ids, "
                    f"{parquet.distinct_offsets:,} distinct offsets",
                    ok,
                )
            )
            if not ok:
                failures.append(
                    f"Parquet holds {parquet.rows:,} rows / {parquet.distinct_event_ids:,} ids, expected {events:,}"
                )

            windows = check_windows(read_topic(bootstrap, "events_per_minute", client=self.as_user(ADMIN)))
            per_minute = self.queries[1]
            # Spark reports the rows each micro-batch handed the sink: with an exactly-once sink the topic holds
            # exactly that many, even if a batch was retried.
            written = per_minute.rows_out if per_minute.rows_out_reported else windows.records
            ok = (
                windows.summed_events == events
                and windows.records == windows.distinct_keys
                and windows.records == written
            )
            reported = f" (Spark wrote {per_minute.rows_out:,})" if per_minute.rows_out_reported else ""
            rows.append(
                (
                    "topic events_per_minute",
                    f"{windows.records:,} records{reported} = {windows.distinct_keys:,} distinct (minute, page, "
                    f"action) over {windows.windows} minutes; their counts sum to {windows.summed_events:,}",
                    ok,
                )
            )
            if windows.records != written:
                failures.append(
                    f"events_per_minute holds {windows.records:,} records but Spark wrote {written:,} rows to it"
                )
            if windows.summed_events != events:
                late = f"; Spark dropped {per_minute.dropped_late:,} rows as late" if per_minute.dropped_late else ""
                failures.append(f"events_per_minute counts sum to {windows.summed_events:,}, expected {events:,}{late}")
            if windows.records != windows.distinct_keys:
                failures.append(
                    f"events_per_minute has {windows.records - windows.distinct_keys:,} duplicate records "
                    "(append mode writes each window once)"
                )

        table = Table(title="exactly-once checks", show_header=True)
        table.add_column("output")
        table.add_column("holds")
        table.add_column("", justify="center")
        for name, holds, ok in rows:
            table.add_row(name, holds, "[green]ok" if ok else "[red]WRONG")
        self.console.print(table)
        if failures:
            raise QuickstartError("; ".join(failures))

        summary = [
            f"events produced      {events:,} in {produce_s:.1f}s ({events / produce_s:,.0f} events/s), "
            "each acknowledged once fsynced on 2 of 3 replicas",
        ]
        if self.queries:
            raw, per_minute = self.queries
            restarts = raw.restarts + per_minute.restarts
            restarted = f"; {restarts} query restart(s) from checkpoint" if restarts else ""
            summary.append(
                f"Spark micro-batches  {raw.batches} (raw -> Parquet), "
                f"{per_minute.batches} (per-minute -> events_per_minute){restarted}"
            )
        if self.kill is not None:
            back = (
                f", back after {self.kill.serving_again_at - self.kill.at:.0f}s" if self.kill.serving_again_at else ""
            )
            summary.append(
                f"node killed          {self.kill.node_id} (kill -9 pid {self.kill.pid}, "
                f"led partitions {self.kill.leads}){back}"
            )
        summary.append("counts verified      every event exactly once in each output")
        kept = " (kept)" if self.args.keep else " (removed at exit; --keep keeps it)"
        summary.append(
            f"work directory       {self.workdir}{kept}: output/events.parquet, spark.log, cluster/n*/node.log"
        )
        return summary

    # ------------------------------------------------------------------------------------------ cleanup

    def close(self) -> None:
        """Stop everything this run started: Spark queries, the SparkSession, the producer, the cluster."""
        if self.producer is not None:
            self.producer.stop()
        if self.spark is not None:
            from _quickstart_spark import output_to

            # Stopping a query mid-batch makes PySpark's threads print tracebacks (a closed accumulator
            # connection, an interrupted batch) that say nothing about the outcome: send them to spark.log.
            with output_to(self.workdir / "spark.log"):
                for state in self.queries:
                    try:
                        if state.query is not None and state.query.isActive:
                            state.query.stop()
                    except Exception as exc:  # the JVM may already be gone; keep stopping the rest
                        self.console.print(f"[yellow]could not stop query {state.label}: {exc!r}")
                try:
                    self.spark.stop()
                except Exception as exc:
                    self.console.print(f"[yellow]could not stop Spark cleanly: {exc!r}")
        if self.cluster is not None:
            stopped = launcher.cluster_down(self.cluster.directory)
            self.say(f"cluster stopped (nodes {stopped})")


def _on_sigterm(_signum: int, _frame: FrameType | None) -> None:
    # scripts/quickstart forwards Ctrl-C as SIGTERM: unwind through the finally blocks, which stop everything.
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, _on_sigterm)
    # The console writes to its own duplicate of the terminal: while the SparkSession starts, descriptors 1 and 2
    # point at spark.log (see _quickstart_spark.start_session), and the progress bar must keep drawing meanwhile.
    console = Console(file=os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1), highlight=False)
    run = Quickstart(args, console)
    status = 1
    try:
        summary = run.run()
        status = 0
    except QuickstartError as exc:
        console.print(f"[bold red]quickstart failed:[/] {exc}")
    except VerificationError as exc:
        console.print(f"[bold red]quickstart failed:[/] {exc}")
    except KeyboardInterrupt:
        console.print("[yellow]interrupted; stopping Spark and the cluster")
        status = 130
    except Exception:
        console.print_exception()
        console.print("[bold red]quickstart failed[/] with the error above")
    finally:
        run.close()
    if status == 0:
        summary.append(f"elapsed              {time.monotonic() - run.started:.0f}s")
        console.print("\n[bold green]quickstart passed[/]\n" + "\n".join(f"  {line}" for line in summary))
    return status


if __name__ == "__main__":
    threading.current_thread().name = "quickstart"
    sys.exit(main())
