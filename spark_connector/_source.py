"""The read side: ``spark.read`` and ``spark.readStream`` over multiraft topics, with Kafka-source options.

Planning happens on the driver (which partitions, which offset ranges; :class:`multiraft.client.Admin`);
each Spark task reads one offset range with a :class:`multiraft.client.Consumer` and yields Arrow record
batches decoded in bulk. A streaming query's offsets live in Spark's checkpoint, never in the cluster, so a
restarted query replays a batch with exactly the offsets it planned before.

Partitions that appear while a stream runs (a new topic matching ``subscribePattern``, or new partitions of a
topic) enter the offsets at their log start when first seen and are read from the next micro-batch on: a
partition absent from a batch's start offset is never read in that batch, which keeps planning deterministic
when Spark replays a batch after a crash.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from multiraft.client import (
    Admin,
    ConfigError,
    Consumer,
    MultiraftError,
    TopicInfo,
    TopicPartition,
    UnknownTopicError,
)
from spark_connector._source_options import (
    EARLIEST,
    LATEST,
    Offsets,
    SourceOptions,
    offsets_from_json,
    offsets_to_json,
    parse_source_options,
)
from spark_connector.errors import DataLossError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "DataLossError",
    "MultiraftBatchReader",
    "MultiraftStreamReader",
    "OffsetRange",
    "source_schema",
]

log = structlog.get_logger(__name__)

_TIMESTAMP_TYPE_KEY = "message.timestamp.type"
_POLL_STEP_S = 1.0
# Buffer one fetch ahead while Spark consumes the previous one: poll_arrow's prefetch stops only when a
# partition's buffer holds this many records.
_PREFETCH_RECORDS = 1 << 30


def source_schema(options: Mapping[str, str]) -> StructType:
    """Kafka's source schema (+ ``headers`` with includeHeaders=true)."""
    include = {k.lower(): v for k, v in options.items()}.get("includeheaders", "false").strip().lower()
    if include not in ("true", "false"):
        raise ConfigError("includeHeaders", f"must be true or false, got {options.get('includeHeaders')!r}")
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include == "true":
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


def _arrow_schema(include_headers: bool) -> pa.Schema:
    """Exactly what ``to_arrow_schema(source_schema(...), timezone="UTC")`` gives (Spark compares them)."""
    import pyarrow as pa

    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
        fields.append(pa.field("headers", pa.list_(pa.field("element", header))))
    return pa.schema(fields)


def _check_schema(schema: StructType, options: SourceOptions) -> None:
    expected = source_schema({"includeHeaders": str(options.include_headers).lower()})
    if schema != expected:
        raise ConfigError(
            "schema",
            f"the multiraft source has a fixed schema ({expected.simpleString()}); got {schema.simpleString()}",
        )


# ----------------------------------------------------------------------------------------- planning


@dataclass(frozen=True)
class _ReadSettings:
    """What a task needs besides its offset range (pickled to the executors)."""

    bootstrap: str
    fail_on_data_loss: bool
    include_headers: bool
    poll_timeout_s: float
    fetch_max_bytes: int


class OffsetRange(InputPartition):
    """One Spark task: records ``start`` (inclusive) to ``end`` (exclusive) of one topic partition."""

    def __init__(self, topic: str, partition: int, start: int, end: int, timestamp_type: int, settings: _ReadSettings):
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        self.timestamp_type = timestamp_type
        self.settings = settings

    def __repr__(self) -> str:
        return f"OffsetRange({self.topic}/{self.partition} [{self.start}, {self.end}))"


@dataclass
class _Snapshot:
    """The partitions a query reads now, with their log starts and high watermarks."""

    earliest: Offsets = field(default_factory=dict)
    latest: Offsets = field(default_factory=dict)
    timestamp_types: dict[str, int] = field(default_factory=dict)


def _timestamp_type(info: TopicInfo) -> int:
    return 1 if info.configs.get(_TIMESTAMP_TYPE_KEY) == "LogAppendTime" else 0


def _discover(admin: Admin, options: SourceOptions) -> _Snapshot:
    """List the subscribed partitions and ask their leaders for the log start and high watermark."""
    topics = {info.name: info for info in admin.list_topics()}
    wanted: dict[str, list[int]] = {}
    if options.assign is not None:
        for topic, partition in options.assign:
            info = topics.get(topic)
            if info is None:
                raise ConfigError("assign", f"topic {topic!r} does not exist")
            if partition >= len(info.partitions):
                raise ConfigError("assign", f"topic {topic!r} has {len(info.partitions)} partitions, not {partition}")
            wanted.setdefault(topic, []).append(partition)
    else:
        for name, info in sorted(topics.items()):
            # Internal topics (__consumer_offsets) are never matched by a pattern, as in Kafka.
            if not name.startswith("__") and options.matches(name):
                wanted[name] = [p.partition for p in info.partitions]
    snapshot = _Snapshot()
    for topic, partitions in wanted.items():
        try:
            earliest = admin.list_offsets(topic, "earliest", partitions)
            latest = admin.list_offsets(topic, "latest", partitions)
        except UnknownTopicError:
            continue  # deleted since it was listed
        for partition in partitions:
            snapshot.earliest[(topic, partition)] = earliest[partition]
            snapshot.latest[(topic, partition)] = latest[partition]
        snapshot.timestamp_types[topic] = _timestamp_type(topics[topic])
    return snapshot


def _offsets_for_time(admin: Admin, tps: Sequence[tuple[str, int]], times: Mapping[tuple[str, int], int]) -> Offsets:
    """First offset at or after each partition's time; the high watermark where no record is that late."""
    found: Offsets = {}
    by_query: dict[tuple[str, int], list[int]] = {}
    for topic, partition in tps:
        by_query.setdefault((topic, times[(topic, partition)]), []).append(partition)
    for (topic, when), partitions in by_query.items():
        offsets = admin.list_offsets(topic, when, partitions)
        missing = [p for p in partitions if offsets[p] < 0]
        if missing:
            offsets.update(admin.list_offsets(topic, "latest", missing))
        for partition in partitions:
            found[(topic, partition)] = offsets[partition]
    return found


def _check_covers(given: Offsets, tps: Sequence[tuple[str, int]], name: str) -> None:
    """Like Kafka: a JSON offsets option names every partition the query reads, and only those."""
    missing = sorted(set(tps) - set(given))
    if missing:
        listed = ", ".join(f"{t}/{p}" for t, p in missing[:10])
        raise ConfigError(
            name, f"names no offset for {listed}: give one for every partition read (-2 earliest, -1 latest)"
        )
    extra = sorted(set(given) - set(tps))
    if extra:
        listed = ", ".join(f"{t}/{p}" for t, p in extra[:10])
        raise ConfigError(name, f"names partitions the query does not read (or that do not exist): {listed}")


def _starting_offsets(admin: Admin, options: SourceOptions, snapshot: _Snapshot) -> Offsets:
    tps = sorted(snapshot.latest)
    if options.starting_timestamp_ms is not None:
        return _offsets_for_time(admin, tps, dict.fromkeys(tps, options.starting_timestamp_ms))
    if options.starting_by_timestamp is not None:
        _check_covers(options.starting_by_timestamp, tps, "startingOffsetsByTimestamp")
        return _offsets_for_time(admin, tps, options.starting_by_timestamp)
    if options.starting == "earliest":
        return dict(snapshot.earliest)
    if options.starting == "latest":
        return dict(snapshot.latest)
    assert isinstance(options.starting, dict)
    _check_covers(options.starting, tps, "startingOffsets")
    special = {EARLIEST: snapshot.earliest, LATEST: snapshot.latest}
    return {tp: special[o][tp] if o in special else o for tp, o in options.starting.items()}


def _report_data_loss(options: SourceOptions | _ReadSettings, message: str, **details: object) -> None:
    """Kafka's failOnDataLoss: stop with an error, or log a warning and go on."""
    if options.fail_on_data_loss:
        raise DataLossError(
            f"{message}. Set failOnDataLoss=false to skip the lost records and go on.",
            **details,
        )
    log.warning(f"{message}; skipping ahead (failOnDataLoss=false)", **details)


def _skip_lost(options: SourceOptions, start: Offsets, earliest: Mapping[tuple[str, int], int]) -> Offsets:
    """Move starts that retention left behind up to the log start (or raise, per failOnDataLoss)."""
    moved = dict(start)
    for tp, offset in sorted(start.items()):
        log_start = earliest.get(tp)
        if log_start is not None and offset < log_start:
            topic, partition = tp
            _report_data_loss(
                options,
                f"{topic}/{partition}: offsets {offset} to {log_start - 1} were deleted by retention before the "
                f"query read them (the log now starts at {log_start})",
                topic=topic,
                partition=partition,
                from_offset=offset,
                to_offset=log_start,
            )
            moved[tp] = log_start
    return moved


def _plan(
    start: Offsets,
    end: Offsets,
    timestamp_types: Mapping[str, int],
    settings: _ReadSettings,
    min_partitions: int | None,
) -> list[OffsetRange]:
    """One task per partition range; with minPartitions, large ranges are cut into pieces in proportion to
    their size so that there are at least minPartitions tasks (as Kafka's KafkaOffsetRangeCalculator)."""
    ranges = [(tp, start[tp], stop) for tp, stop in sorted(end.items()) if tp in start and stop > start[tp]]
    total = sum(stop - begin for _, begin, stop in ranges)
    planned: list[OffsetRange] = []
    for (topic, partition), begin, stop in ranges:
        size = stop - begin
        pieces = 1
        if min_partitions is not None and len(ranges) < min_partitions:
            pieces = min(size, -(-size * min_partitions // total))  # ceil(size / total * minPartitions)
        for piece in range(pieces):
            lo = begin + size * piece // pieces
            hi = begin + size * (piece + 1) // pieces
            planned.append(OffsetRange(topic, partition, lo, hi, timestamp_types.get(topic, 0), settings))
    return planned


def _read_settings(options: SourceOptions) -> _ReadSettings:
    return _ReadSettings(
        bootstrap=options.bootstrap,
        fail_on_data_loss=options.fail_on_data_loss,
        include_headers=options.include_headers,
        poll_timeout_s=options.poll_timeout_s,
        fetch_max_bytes=options.fetch_max_bytes,
    )


def _split_limit(available: Mapping[tuple[str, int], int], limit: int) -> dict[tuple[str, int], int]:
    """Share ``limit`` records over partitions in proportion to their backlog (largest remainder), so that a
    batch holds exactly min(limit, backlog) records."""
    total = sum(available.values())
    if total <= limit:
        return dict(available)
    shares = {tp: n * limit // total for tp, n in available.items()}
    left = limit - sum(shares.values())
    by_remainder = sorted(available, key=lambda tp: (-(available[tp] * limit % total), tp))
    for tp in by_remainder[:left]:
        shares[tp] += 1
    return shares


# -------------------------------------------------------------------------------------------- readers


class MultiraftBatchReader(DataSourceReader):
    """``spark.read.format("multiraft")``: startingOffsets (default earliest) up to endingOffsets (latest)."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self._options = parse_source_options(options, streaming=False)
        _check_schema(schema, self._options)
        self._settings = _read_settings(self._options)

    def partitions(self) -> Sequence[InputPartition]:
        options = self._options
        with Admin(options.bootstrap) as admin:
            snapshot = _discover(admin, options)
            start = _starting_offsets(admin, options, snapshot)
        if options.ending == "latest":
            end = dict(snapshot.latest)
        else:
            assert isinstance(options.ending, dict)
            _check_covers(options.ending, sorted(snapshot.latest), "endingOffsets")
            end = {tp: snapshot.latest[tp] if o == LATEST else o for tp, o in options.ending.items()}
        for (topic, partition), stop in sorted(end.items()):
            if stop > snapshot.latest[(topic, partition)]:
                raise ConfigError(
                    "endingOffsets",
                    f"{topic}/{partition} ends at {stop}, beyond its high watermark "
                    f"{snapshot.latest[(topic, partition)]}",
                )
            if stop < start[(topic, partition)]:
                raise ConfigError(
                    "endingOffsets",
                    f"{topic}/{partition} ends at {stop}, before its starting offset {start[(topic, partition)]}",
                )
        start = _skip_lost(options, start, snapshot.earliest)
        planned = _plan(start, end, snapshot.timestamp_types, self._settings, options.min_partitions)
        log.info("planned a batch read", ranges=len(planned), records=sum(r.end - r.start for r in planned))
        return planned

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition)


class MultiraftStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("multiraft")``: micro-batches with maxOffsetsPerTrigger and AvailableNow.

    This object lives in one driver-side Python process for the whole query (its Admin connection and last
    snapshot survive between calls); ``read`` runs on executors against a pickled copy without them.
    """

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self._options = parse_source_options(options, streaming=True)
        _check_schema(schema, self._options)
        self._settings = _read_settings(self._options)
        self._admin: Admin | None = None
        self._snapshot: _Snapshot | None = None
        self._target: Offsets | None = None  # AvailableNow: read no further than these offsets
        self._known: set[tuple[str, int]] = set()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_admin"] = None  # gRPC channels do not pickle, and executors do not need them
        state["_snapshot"] = None
        return state

    def _admin_client(self) -> Admin:
        if self._admin is None:
            self._admin = Admin(self._options.bootstrap)
        return self._admin

    def _discover(self) -> _Snapshot:
        self._snapshot = _discover(self._admin_client(), self._options)
        return self._snapshot

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 (Spark names it)
        snapshot = self._discover()
        start = _starting_offsets(self._admin_client(), self._options, snapshot)
        self._known = set(start)
        log.info("stream starts", offsets=offsets_to_json(start))
        return offsets_to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 (Spark names it)
        limit = self._options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 (Spark names it)
        self._target = dict(self._discover().latest)
        log.info("AvailableNow: reading up to", offsets=offsets_to_json(self._target))

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802 (Spark names it)
        begin = offsets_from_json(start)
        snapshot = self._discover()
        target = self._target
        end: Offsets = {}
        backlog: dict[tuple[str, int], int] = {}
        lows: Offsets = {}
        for tp, offset in sorted(begin.items()):
            if tp not in snapshot.latest:
                topic, partition = tp
                _report_data_loss(
                    self._options,
                    f"{topic}/{partition} is gone (its topic was deleted or no longer matches); records from "
                    f"offset {offset} on may not have been read",
                    topic=topic,
                    partition=partition,
                    from_offset=offset,
                )
                continue
            low = _skip_lost(self._options, {tp: offset}, snapshot.earliest)[tp]
            high = snapshot.latest[tp]
            if target is not None:
                high = min(high, target.get(tp, offset))
            # A new leader's high watermark can lag behind what the old one reported: wait, never go back.
            lows[tp] = low
            backlog[tp] = max(0, high - low)
        for tp in sorted(set(snapshot.latest) - set(begin)):
            if target is not None and tp not in target:
                continue  # AvailableNow reads only what existed when it started
            # First sight: enter at the log start; the next micro-batch reads it (see the module docstring).
            end[tp] = snapshot.earliest[tp]
            if tp not in self._known:
                log.info("new partition", topic=tp[0], partition=tp[1], from_offset=end[tp])
        self._known |= set(snapshot.latest)
        if isinstance(limit, ReadAllAvailable):
            take = backlog
        elif isinstance(limit, ReadMaxRows):
            take = _split_limit(backlog, limit.max_rows)
        else:
            raise ConfigError("maxOffsetsPerTrigger", f"the multiraft source cannot honour the read limit {limit!r}")
        for tp, low in lows.items():
            end[tp] = max(begin[tp], low + take[tp])
        return offsets_to_json(end)

    def reportLatestOffset(self) -> dict[str, Any] | None:  # noqa: N802 (Spark names it)
        return None if self._snapshot is None else offsets_to_json(self._snapshot.latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, stop = offsets_from_json(start), offsets_from_json(end)
        readable = {tp for tp, offset in stop.items() if tp in begin and offset > begin[tp]}
        if not readable:
            return []
        snapshot = self._snapshot
        topics = {tp[0] for tp in readable}
        if snapshot is None or not all(tp in snapshot.earliest for tp in readable):
            snapshot = self._discover()  # a batch replayed after a restart: no latestOffset call before it
        timestamp_types = {t: snapshot.timestamp_types.get(t, 0) for t in topics}
        begin = {tp: offset for tp, offset in begin.items() if tp in readable}
        begin = _skip_lost(self._options, begin, snapshot.earliest)
        return _plan(begin, stop, timestamp_types, self._settings, self._options.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint, and the log keeps records by retention only."""

    def stop(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None


# ------------------------------------------------------------------------------------------- reading


def _to_spark_batches(
    table: pa.Table, timestamp_type: int, schema: pa.Schema, include_headers: bool
) -> Iterator[pa.RecordBatch]:
    """poll_arrow's table -> Spark's Arrow schema, column by column (no per-record work)."""
    import pyarrow as pa

    timestamp_us = pa.timestamp("us", tz="UTC")
    kind = pa.scalar(timestamp_type, pa.int32())
    headers_type = schema.field("headers").type if include_headers else None
    for batch in table.combine_chunks().to_batches():
        n = batch.num_rows
        columns = [
            batch.column("key"),
            batch.column("value"),
            batch.column("topic"),
            batch.column("partition"),
            batch.column("offset"),
            batch.column("timestamp").cast(timestamp_us),
            pa.repeat(kind, n),
        ]
        if headers_type is not None:
            columns.append(batch.column("headers").cast(headers_type))
        yield pa.RecordBatch.from_arrays(columns, schema=schema)


def _read(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    # With nothing to read Spark still runs one task, on a placeholder partition of its own.
    return read_range(partition) if isinstance(partition, OffsetRange) else iter(())


def read_range(task: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Records ``task.start`` to ``task.end`` of one partition, as Spark record batches.

    The consumer retries leader changes itself; this loop only gives up when no record arrives for
    ``pollTimeoutMs`` (an election takes a few seconds at most). A start below the log start shows as a
    jump in offsets (the consumer moves to the log start), reported per failOnDataLoss.
    """
    import numpy as np

    settings = task.settings
    schema = _arrow_schema(settings.include_headers)
    tp = TopicPartition(task.topic, task.partition)
    consumer = Consumer(
        settings.bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        fetch_max_bytes=settings.fetch_max_bytes,
        max_poll_records=_PREFETCH_RECORDS,
    )
    try:
        consumer.assign([tp], start=task.start)
        expected = task.start
        last_progress = time.monotonic()
        while expected < task.end:
            table = consumer.poll_arrow(timeout_s=_POLL_STEP_S, max_records=task.end - expected)
            if table.num_rows:
                offsets = table.column("offset").combine_chunks().to_numpy()
                if offsets[0] < expected:
                    # The consumer went back to the log start (a new leader briefly answered "out of range"
                    # for offsets it had not caught up with): drop what we already have.
                    table = table.slice(int(np.searchsorted(offsets, expected)))
                    offsets = offsets[len(offsets) - table.num_rows :]
                    if not table.num_rows:
                        consumer.seek(tp, expected)
                        continue
                first = int(offsets[0])
                if first > expected:
                    _lost(settings, task, expected, min(first, task.end))
                keep = int(np.searchsorted(offsets, task.end))
                if keep < table.num_rows:
                    table, offsets = table.slice(0, keep), offsets[:keep]
                if table.num_rows:
                    yield from _to_spark_batches(table, task.timestamp_type, schema, settings.include_headers)
                    expected = int(offsets[-1]) + 1
                else:
                    expected = task.end
                last_progress = time.monotonic()
                continue
            position = consumer.position(tp)
            if position > expected:
                _lost(settings, task, expected, min(position, task.end))
                expected = position
                last_progress = time.monotonic()
                continue
            if position < expected:
                consumer.seek(tp, expected)
            if time.monotonic() - last_progress > settings.poll_timeout_s:
                raise MultiraftError(
                    f"{task.topic}/{task.partition}: no record at offset {expected} for "
                    f"{settings.poll_timeout_s:.0f} s (reading up to {task.end}); see pollTimeoutMs",
                    topic=task.topic,
                    partition=task.partition,
                    offset=expected,
                )
    finally:
        consumer.close()


def _lost(settings: _ReadSettings, task: OffsetRange, start: int, end: int) -> None:
    _report_data_loss(
        settings,
        f"{task.topic}/{task.partition}: offsets {start} to {end - 1} were deleted by retention before the "
        f"query read them",
        topic=task.topic,
        partition=task.partition,
        from_offset=start,
        to_offset=end,
    )
