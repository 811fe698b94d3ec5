"""The read side: ``spark.read`` and ``spark.readStream`` over multiraft topics, with Kafka-source options.

Planning happens on the driver (which partitions, which offset ranges; :class:`multiraft.Admin`);
each Spark task reads one offset range with a :class:`multiraft.Consumer` and yields Arrow record
batches decoded in bulk. A streaming query's offsets live in Spark's checkpoint, never in the cluster, so a
restarted query replays a batch with exactly the offsets it planned before.

Partitions that appear while a stream runs (a new topic matching ``subscribePattern``, or new partitions of a
topic) enter the offsets at their log start when first seen and are read from the next micro-batch on: a
partition absent from a batch's start offset is never read in that batch, which keeps planning deterministic
when Spark replays a batch after a crash.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
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

from multiraft import Admin, ConfigError, Consumer, MultiraftError, TopicPartition
from spark_connector._options import Connection, connect
from spark_connector._planning import (
    Snapshot,
    check_covers,
    discover,
    report_data_loss,
    skip_lost,
    split_limit,
    starting_offsets,
)
from spark_connector._security import Security
from spark_connector._source_options import (
    LATEST,
    Offsets,
    SourceOptions,
    check_source_names,
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

_POLL_STEP_S = 1.0
# Buffer one fetch ahead while Spark consumes the previous one: poll_arrow's prefetch stops only when a
# partition's buffer holds this many records.
_PREFETCH_RECORDS = 1 << 30


def source_schema(options: Mapping[str, str]) -> StructType:
    """Kafka's source schema (+ ``headers`` with includeHeaders=true). Spark asks for it in ``load()``, so
    a misspelt option name fails there."""
    check_source_names(options)
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
    request_timeout_s: float = 30.0
    security: Security = field(default_factory=Security)


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
        request_timeout_s=options.request_timeout_s,
        security=options.security,
    )


def _connection(options: SourceOptions) -> Connection:
    return Connection(options.bootstrap, options.connect_timeout_s, options.request_timeout_s, options.security)


# -------------------------------------------------------------------------------------------- readers


class MultiraftBatchReader(DataSourceReader):
    """``spark.read.format("multiraft")``: startingOffsets (default earliest) up to endingOffsets (latest)."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self._options = parse_source_options(options, streaming=False)
        _check_schema(schema, self._options)
        self._settings = _read_settings(self._options)

    def partitions(self) -> Sequence[InputPartition]:
        options = self._options
        with connect(_connection(options)) as admin:
            snapshot = discover(admin, options)
            start = starting_offsets(admin, options, snapshot)
        if not snapshot.latest and options.pattern is not None:
            log.warning("subscribePattern matches no topic: the batch read returns no rows", pattern=options.pattern)
        if options.ending == "latest":
            end = dict(snapshot.latest)
        else:
            assert isinstance(options.ending, dict)
            check_covers(options.ending, sorted(snapshot.latest), "endingOffsets")
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
        start = skip_lost(options, start, snapshot.earliest)
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
        self._snapshot: Snapshot | None = None
        self._target: Offsets | None = None  # AvailableNow: read no further than these offsets
        self._known: set[tuple[str, int]] = set()
        self._waiting_logged = False  # subscribePattern matched nothing, and that was logged
        self._monitored: Offsets | None = None  # last offsets committed under monitoringGroupId
        self._initial: dict[str, Any] | None = None  # initialOffset's answer, fixed once given

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_admin"] = None  # gRPC channels do not pickle, and executors do not need them
        state["_snapshot"] = None
        return state

    def _admin_client(self) -> Admin:
        if self._admin is None:
            self._admin = connect(_connection(self._options))
        return self._admin

    def _discover(self, reading: Iterable[tuple[str, int]] = (), *, check: bool = True) -> Snapshot:
        """``reading``: partitions in the query's offsets (one that is gone is data loss, not a typo)."""
        known = self._known.union(reading)
        self._snapshot = discover(self._admin_client(), self._options, known, check=check)
        if self._snapshot.latest or self._options.pattern is None:
            self._waiting_logged = False
        elif not self._waiting_logged:
            log.warning("subscribePattern matches no topic yet; the stream waits", pattern=self._options.pattern)
            self._waiting_logged = True
        return self._snapshot

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 (Spark names it)
        """Decided once per query run: Spark asks again when it reads the first batch, and a second look
        (startingOffsets=latest, or retention) could start that batch elsewhere than where it was planned."""
        if self._initial is None:
            snapshot = self._discover()
            start = starting_offsets(self._admin_client(), self._options, snapshot)
            self._known = set(start)
            self._initial = offsets_to_json(start)
            log.info("stream starts", offsets=self._initial)
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 (Spark names it)
        limit = self._options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 (Spark names it)
        # A restarted query learns its offsets later (latestOffset), which tells a typo from a deleted topic.
        self._target = dict(self._discover(check=False).latest)
        log.info("AvailableNow: reading up to", offsets=offsets_to_json(self._target))

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802 (Spark names it)
        begin = offsets_from_json(start)
        # Spark runs one micro-batch at a time: ``start`` is where the last finished batch ended. Spark calls
        # commit() for a batch only when it plans the next one, so the last batch is reported from here.
        self._monitor(begin)
        snapshot = self._discover(begin)
        target = self._target
        end: Offsets = {}
        backlog: dict[tuple[str, int], int] = {}
        lows: Offsets = {}
        for tp, offset in sorted(begin.items()):
            if tp not in snapshot.latest:
                topic, partition = tp
                report_data_loss(
                    self._options.fail_on_data_loss,
                    f"{topic}/{partition} is gone (its topic was deleted or no longer matches); records from "
                    f"offset {offset} on may not have been read",
                    topic=topic,
                    partition=partition,
                    from_offset=offset,
                )
                continue
            low = skip_lost(self._options, {tp: offset}, snapshot.earliest)[tp]
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
            take = split_limit(backlog, limit.max_rows)
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
            snapshot = self._discover(begin)  # a batch replayed after a restart: no latestOffset call before it
        timestamp_types = {t: snapshot.timestamp_types.get(t, 0) for t in topics}
        begin = {tp: offset for tp, offset in begin.items() if tp in readable}
        begin = skip_lost(self._options, begin, snapshot.earliest)
        return _plan(begin, stop, timestamp_types, self._settings, self._options.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition)

    def commit(self, end: dict[str, Any]) -> None:
        """The offsets live in Spark's checkpoint, and the log keeps records by retention only; with
        ``monitoringGroupId`` the batch's end offsets are also committed under that group (:meth:`_monitor`)."""
        self._monitor(offsets_from_json(end))

    def _monitor(self, done: Offsets) -> None:
        """Commit offsets every record before which the query has processed under ``monitoringGroupId``, for
        operators only (``multiraft group describe``); a refusal is logged, never raised."""
        group = self._options.monitoring_group_id
        if group is None or done == self._monitored:
            return
        self._monitored = dict(done)  # tried once: a refusal is not retried (nor logged) until the query moves on
        offsets = {TopicPartition(t, p): offset for (t, p), offset in done.items() if offset >= 0}
        try:
            self._admin_client().commit_group_offsets(group, offsets)
        except MultiraftError as exc:  # monitoring must never stop the query
            log.warning("could not commit the query's offsets for monitoring", group=group, error=str(exc))

    def stop(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None


# ------------------------------------------------------------------------------------------- reading


def _to_spark_batches(
    table: pa.Table, timestamp_type: int, schema: pa.Schema, include_headers: bool
) -> Iterator[pa.RecordBatch]:
    """poll_arrow's table -> Spark's Arrow schema, column by column (no per-record work).

    One Spark batch per chunk: the chunks are views of the fetched bytes, and combining them would copy every
    value. No ``pa.scalar``/``pa.repeat``: they import pandas (a second of CPU in each Python worker)."""
    import numpy as np
    import pyarrow as pa

    timestamp_us = pa.timestamp("us", tz="UTC")
    headers_type = schema.field("headers").type if include_headers else None
    for batch in table.to_batches():
        n = batch.num_rows
        columns = [
            batch.column("key"),
            batch.column("value"),
            batch.column("topic"),
            batch.column("partition"),
            batch.column("offset"),
            batch.column("timestamp").cast(timestamp_us),
            pa.array(np.full(n, timestamp_type, dtype=np.int32), type=pa.int32()),
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
        request_timeout_s=settings.request_timeout_s,
        **settings.security.client_kwargs(),
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
    report_data_loss(
        settings.fail_on_data_loss,
        f"{task.topic}/{task.partition}: offsets {start} to {end - 1} were deleted by retention before the "
        f"query read them",
        topic=task.topic,
        partition=task.partition,
        from_offset=start,
        to_offset=end,
    )
