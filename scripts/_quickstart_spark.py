"""The quickstart's Spark job: two Structured Streaming queries over the topic ``events``.

* ``raw_events``: parse the JSON events and append them to Parquet (file sink, exactly once through its
  ``_spark_metadata`` log and the checkpoint).
* ``events_per_minute``: count events per one-minute event-time window, page and action, with a watermark,
  in append mode, and write each finished window to the topic ``events_per_minute`` (the multiraft sink,
  exactly once per micro-batch). Append mode emits a window once, after the watermark passes its end.
  Update mode is not an option: Spark accepts it only for sinks that declare ``SupportsStreamingUpdateAsAppend``,
  which Python data sources (PySpark 4.3) do not.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _quickstart_events import EVENT_SCHEMA_DDL

__all__ = [
    "TRANSIENT_ERRORS",
    "activate",
    "ParquetCheck",
    "QueryProgress",
    "check_parquet",
    "new_progress",
    "offsets_total",
    "output_to",
    "start_queries",
    "start_session",
]

# Failures of a query that say the machine was too busy, not that anything is wrong: PySpark 4.3 gives a new
# Python worker a fixed 10 s to connect back to the JVM, which a loaded 2-core machine can miss. A query that
# fails so is restarted from its checkpoint (which keeps its output exactly once).
TRANSIENT_ERRORS = ("Python worker failed to connect back", "Timed out while waiting for the Python worker")


@contextlib.contextmanager
def output_to(log_path: Path) -> Iterator[None]:
    """Point file descriptors 1 and 2 at ``log_path`` for the duration (child processes inherit them)."""
    with log_path.open("ab") as log:
        saved = os.dup(1), os.dup(2)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def start_session(workdir: Path) -> Any:
    """The connector's local SparkSession (:func:`spark_connector.local_session`), whose JVM (and the Python
    workers it starts) write their output to workdir/spark.log.

    The JVM inherits file descriptors 1 and 2 when it is launched, so they point at the log while the session
    starts: Spark's start-up banner and warnings, and the workers' log lines, stay off the console. The console
    of the quickstart writes to a duplicate of the terminal taken before (see quickstart.py), so the progress
    bar keeps running meanwhile.
    """
    from spark_connector import local_session

    with output_to(workdir / "spark.log"):
        return local_session("multiraft-quickstart")


def activate(spark: Any) -> Any:
    """Make ``spark`` the active session of the calling thread and register the connector with it.

    The session may have been started in another thread; Spark looks data sources up through the thread's
    active session, and ``writeStream.format("multiraft")`` fails with DATA_SOURCE_NOT_FOUND otherwise.
    """
    from pyspark.sql import SparkSession

    import spark_connector

    active = SparkSession.builder.getOrCreate()  # the existing session, now active in this thread
    assert active is spark or active.sparkContext is spark.sparkContext
    spark_connector.register(active)
    return active


def start_queries(
    spark: Any,
    bootstrap: str,
    *,
    workdir: Path,
    end_ms: int,
    watermark_delay_ms: int,
    max_offsets_per_trigger: int,
    security: dict[str, str] | None = None,
) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """The two queries, as functions that start them: (raw_events, events_per_minute).

    Calling one again after its query failed restarts it from its checkpoint, where it resumes exactly once.
    """
    from pyspark.sql import functions as sf

    def source() -> Any:
        # Each query has its own source and checkpoint: they progress, and recover, independently.
        return (
            spark.readStream.format("multiraft")
            .option("bootstrap", bootstrap)
            .options(**(security or {}))
            .option("subscribe", "events")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
            .load()
        )

    def parsed(records: Any) -> Any:
        return records.select(
            sf.from_json(sf.col("value").cast("string"), EVENT_SCHEMA_DDL).alias("event"),
            "partition",
            "offset",
        ).select("event.*", "partition", "offset")

    def raw() -> Any:
        return (
            parsed(source())
            .where(sf.col("event_id").isNotNull())  # drops the end-of-stream marker, which is not an event
            .writeStream.format("parquet")
            .queryName("raw_events")
            .option("path", str(workdir / "output" / "events.parquet"))
            .option("checkpointLocation", str(workdir / "checkpoints" / "raw_events"))
            .outputMode("append")
            .start()
        )

    counts = (
        parsed(source())
        .withWatermark("ts", f"{watermark_delay_ms // 1000} seconds")
        # This filter drops the marker while letting it move the watermark. It must name the event-time
        # column: Spark pushes any other filter below withWatermark, and the marker would never be seen there.
        .where(sf.col("ts") < sf.timestamp_millis(sf.lit(end_ms)))
        .groupBy(sf.window("ts", "1 minute"), "page", "action")
        .count()
    )

    def per_minute() -> Any:
        return (
            counts.select(
                sf.concat_ws("|", sf.date_format("window.start", "yyyy-MM-dd'T'HH:mm"), "page", "action").alias("key"),
                sf.to_json(
                    sf.struct(
                        sf.col("window.start").alias("window_start"),
                        sf.col("window.end").alias("window_end"),
                        "page",
                        "action",
                        sf.col("count").alias("events"),
                    )
                ).alias("value"),
            )
            .writeStream.format("multiraft")
            .queryName("events_per_minute")
            .option("bootstrap", bootstrap)
            .options(**(security or {}))
            .option("topic", "events_per_minute")
            .option("checkpointLocation", str(workdir / "checkpoints" / "events_per_minute"))
            .outputMode("append")
            .start()
        )

    return raw, per_minute


@dataclass(frozen=True, slots=True)
class QueryProgress:
    """One finished micro-batch, from Spark's progress report."""

    batch_id: int
    input_rows: int
    output_rows: int  # -1 when the sink does not report it
    end_offsets_total: int  # sum of the next offsets to read over every partition: records read so far
    watermark_ms: int | None
    dropped_late: int


def offsets_total(offsets: Any) -> int:
    """Sum of every offset in a source's offset JSON (``{"events": {"0": 42, ...}}``), a string or parsed."""
    if isinstance(offsets, str):
        offsets = json.loads(offsets) if offsets.strip() else {}
    if isinstance(offsets, dict):
        return sum(offsets_total(v) for v in offsets.values())
    if isinstance(offsets, list):
        return sum(offsets_total(v) for v in offsets)
    if isinstance(offsets, int | float) and not isinstance(offsets, bool):
        return int(offsets)
    return 0


def _progress(report: dict[str, Any]) -> QueryProgress:
    from datetime import datetime

    sources = report.get("sources") or [{}]
    watermark = (report.get("eventTime") or {}).get("watermark")
    watermark_ms = None
    if watermark:
        watermark_ms = int(datetime.fromisoformat(watermark.replace("Z", "+00:00")).timestamp() * 1000)
    return QueryProgress(
        batch_id=int(report["batchId"]),
        input_rows=int(report.get("numInputRows", 0)),
        output_rows=int((report.get("sink") or {}).get("numOutputRows", -1)),
        end_offsets_total=offsets_total(sources[0].get("endOffset")),
        watermark_ms=watermark_ms,
        dropped_late=sum(int(s.get("numRowsDroppedByWatermark", 0)) for s in report.get("stateOperators") or []),
    )


def new_progress(query: Any, after_batch: int) -> list[QueryProgress]:
    """The micro-batches of ``query`` finished after ``after_batch``, oldest first."""
    reports = []
    for item in query.recentProgress:
        # PySpark 4 returns StreamingQueryProgress objects (with .json); older versions returned dicts.
        report = json.loads(item.json) if hasattr(item, "json") else dict(item)
        if int(report["batchId"]) > after_batch:
            reports.append(_progress(report))
    return sorted(reports, key=lambda p: p.batch_id)


@dataclass(frozen=True, slots=True)
class ParquetCheck:
    rows: int
    distinct_event_ids: int
    distinct_offsets: int


def check_parquet(spark: Any, path: Path) -> ParquetCheck:
    """Reads the Parquet output back through Spark (which honours the sink's _spark_metadata log)."""
    from pyspark.sql import functions as sf

    row = (
        spark.read.parquet(str(path))
        .agg(
            sf.count(sf.lit(1)).alias("rows"),
            sf.count_distinct("event_id").alias("ids"),
            sf.count_distinct("partition", "offset").alias("offsets"),
        )
        .first()
    )
    return ParquetCheck(rows=int(row["rows"]), distinct_event_ids=int(row["ids"]), distinct_offsets=int(row["offsets"]))
