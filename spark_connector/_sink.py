"""The ``multiraft`` sink: ``df.write`` and ``df.writeStream`` with ``format("multiraft")``.

Columns (as Spark's Kafka sink): ``value`` (binary or string, required), ``key`` (binary or string),
``headers`` (``array<struct<key string, value binary>>``), ``topic`` (string; else the ``topic`` option) and
``partition`` (int; else ``crc32c(key) % partitions``, else a partition chosen per run of rows). Other
columns are ignored.

Each task writes its rows in bulk: Spark hands the writer Arrow record batches (``DataSourceArrowWriter``),
which are re-cut into runs of ``rowsPerSend`` rows and given to ``Producer.send_batch`` as Arrow columns; no
Python work per row.

**Exactly-once streaming.** A micro-batch Spark replays after a crash must not write its records twice. Each
task of micro-batch ``b`` of query ``q`` (Spark partition ``s``) writes through a *replay producer*
(docs/client.md): its producer id comes from the key ``spark:{q}:{s}:{b // 32768}`` and its epoch is
``b % 32768``, so every micro-batch writes under a higher epoch than the one before (fencing zombies of older
batches), and its sequences start at 0 in every target partition. The rows are cut into the same runs and the
runs into the same wire batches every time the task's input is the same, so the replayed task sends exactly
the batches of the first attempt, and the leaders answer those they already hold as duplicates. (A task
can outlive its killed driver in PySpark's worker daemon, see its input end early and write its last rows
as a short run; the replay producer then writes only the rest of the replay's overlapping run.) The query id
is the one Spark keeps in the checkpoint (stable across restarts), the batch id is Spark's.

This rests on Spark's own assumption for exactly-once sinks: a replayed micro-batch gives each task the same
rows, here also *in the same order* (true for deterministic queries without a shuffle before the sink; after a
shuffle the order may change: set ``sortRows`` so that each task writes its rows sorted by key and value).
The runs also depend on ``rowsPerSend`` and the producer's ``batch_bytes``: keep them when restarting a query.
It also assumes the target topics keep their partition count between a run and its replay.

Spark gives Python sinks the append and complete output modes (not update); in complete mode each micro-batch
appends the whole result table, as Spark's Kafka sink does. ``df.write`` needs ``mode("append")`` (or
``"overwrite"``, which appends too: a log is not truncated).

A batch ``df.write`` has no query to replay: it writes through a normal idempotent producer (a retried task
may write its records again: at-least-once).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    NullType,
    ShortType,
    StringType,
    StructType,
)

from multiraft import BatchMetadata, ConfigError, Producer
from spark_connector._options import (
    CONNECTION_OPTIONS,
    Connection,
    check_names,
    connect,
    lower_keys,
    missing_topics_error,
    parse_connection,
)
from spark_connector._security import KAFKA_PREFIXED

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "MultiraftBatchWriter",
    "MultiraftStreamWriter",
    "SinkOptions",
    "check_sink_schema",
    "check_sink_target",
    "parse_sink_options",
]

# the client (multiraft) routes structlog through stdlib logging until a process configures it: stdout stays clean.
log: structlog.stdlib.BoundLogger = structlog.get_logger(__name__)

# Spark's local properties (StreamExecution.QUERY_ID_KEY, MicroBatchExecution.BATCH_ID_KEY).
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
# Producer epochs are i16 (>= 0): batch b writes under epoch b % 32768 of the key's generation b // 32768.
EPOCHS_PER_KEY = 2**15

DEFAULT_ROWS_PER_SEND = 10_000  # Spark's Arrow batches hold 10,000 rows by default: usually no re-cutting

# Producer settings the sink passes through: option name (lower case, no underscores) -> (keyword, type).
_PRODUCER_SETTINGS: dict[str, tuple[str, type]] = {
    "compression": ("compression", str),
    "batchbytes": ("batch_bytes", int),
    "bufferbytes": ("buffer_bytes", int),
    "lingerms": ("linger_ms", float),
    "maxinflight": ("max_in_flight", int),
    "deliverytimeouts": ("delivery_timeout_s", float),
    "requesttimeouts": ("request_timeout_s", float),
    "maxblocks": ("max_block_s", float),
}
_MISNAMED = {
    "kafka.bootstrap.servers": "the option is called bootstrap",
    "idempotence": "the sink is always idempotent",
}
_SINK_OPTIONS = (
    *CONNECTION_OPTIONS,
    "topic",
    "rowsPerSend",
    "sortRows",
    *(keyword for keyword, _ in _PRODUCER_SETTINGS.values()),
)
_CAMEL_CASE = tuple(key for key in _PRODUCER_SETTINGS if key not in _SINK_OPTIONS)  # batchBytes, ...
_PASSED_BY_SPARK = ("path", "checkpointlocation", "queryname")
_BINARY = (BinaryType, StringType)
_INTEGER = (ByteType, ShortType, IntegerType, LongType)


# --------------------------------------------------------------------------------------------- options


@dataclass(frozen=True)
class SinkOptions:
    """The sink's options, parsed once on the driver (the writer carries them to the executors)."""

    bootstrap: str
    connection: Connection
    topic: str | None
    rows_per_send: int
    sort_rows: bool
    producer: tuple[tuple[str, Any], ...]  # Producer keyword arguments

    def producer_settings(self) -> dict[str, Any]:
        return dict(self.producer)


def _bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise ConfigError(name, f"must be true or false, got {value!r}")
    return lowered == "true"


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Check the sink's options; errors name the option (a misspelt name too, with the nearest known one)."""
    check_names(
        options,
        _SINK_OPTIONS,
        passed_by_spark=_PASSED_BY_SPARK,
        unsupported=_MISNAMED,
        role="sink",
        aliases=(*_CAMEL_CASE, *KAFKA_PREFIXED),
    )
    lowered = lower_keys(options)
    connection = parse_connection(lowered)
    topic = lowered.get("topic")
    if topic is not None and not topic.strip():
        raise ConfigError("topic", "must not be empty")
    rows = lowered.get("rowspersend", str(DEFAULT_ROWS_PER_SEND))
    try:
        rows_per_send = int(rows)
    except ValueError:
        raise ConfigError("rowsPerSend", f"must be an integer, got {rows!r}") from None
    if rows_per_send < 1:
        raise ConfigError("rowsPerSend", f"must be >= 1, got {rows_per_send}")
    producer: list[tuple[str, Any]] = []
    for key, value in lowered.items():
        setting = _PRODUCER_SETTINGS.get(key.replace("_", ""))
        if setting is None:
            continue
        keyword, kind = setting
        try:
            producer.append((keyword, kind(value)))
        except ValueError:
            raise ConfigError(keyword, f"must be {kind.__name__}, got {value!r}") from None
    given = dict(producer)
    if "request_timeout_s" in given:
        if "requesttimeoutms" in lowered:
            raise ConfigError("requestTimeoutMs", "give it or request_timeout_s, not both")
        connection = dataclasses.replace(connection, request_timeout_s=given["request_timeout_s"])
    elif "requesttimeoutms" in lowered:
        producer.append(("request_timeout_s", connection.request_timeout_s))
    return SinkOptions(
        bootstrap=connection.bootstrap,
        connection=connection,
        topic=topic.strip() if topic is not None else None,
        rows_per_send=rows_per_send,
        sort_rows=_bool("sortRows", lowered.get("sortrows", "false")),
        producer=tuple(sorted(producer)),
    )


# ---------------------------------------------------------------------------------------------- schema


def _type_name(kind: DataType) -> str:
    return str(kind.simpleString())


def check_sink_schema(schema: StructType, options: SinkOptions) -> None:
    """Refuse a DataFrame the sink cannot write, naming the column (before any task runs)."""
    fields = {field.name.lower(): field for field in schema.fields}

    def check(name: str, allowed: tuple[type, ...], wanted: str) -> None:
        field = fields.get(name)
        if field is not None and not isinstance(field.dataType, allowed):
            raise ValueError(
                f"multiraft sink: column {field.name!r} must be {wanted}, not {_type_name(field.dataType)}"
            )

    if "value" not in fields:
        raise ValueError(
            f"multiraft sink: the DataFrame needs a 'value' column (binary or string); it has {schema.fieldNames()}"
        )
    check("value", _BINARY, "binary or string")
    check("key", (*_BINARY, NullType), "binary or string")
    check("topic", (StringType, NullType), "string")
    check("partition", (*_INTEGER, NullType), "an integer")
    headers = fields.get("headers")
    if headers is not None:
        kind = headers.dataType
        element = kind.elementType if isinstance(kind, ArrayType) else None
        inner = {f.name: f.dataType for f in element.fields} if isinstance(element, StructType) else {}
        if (
            set(inner) != {"key", "value"}
            or not isinstance(inner["key"], StringType)
            or not isinstance(inner["value"], _BINARY)
        ):
            raise ValueError(
                "multiraft sink: column 'headers' must be array<struct<key: string, value: binary>>, "
                f"not {_type_name(kind)}"
            )
    if "topic" not in fields and options.topic is None:
        raise ValueError("multiraft sink: give the target with the 'topic' option or a 'topic' column")


def check_sink_target(options: SinkOptions) -> None:
    """On the driver, before any task: the cluster answers (within connectTimeoutMs, else "no node reachable
    at ..."), and the ``topic`` option names a topic that exists. Every task would otherwise find out alone,
    each after its own timeout, and Spark would retry each task."""
    with connect(options.connection) as admin:
        topics = {info.name for info in admin.list_topics()}
    if options.topic is not None and options.topic not in topics:
        raise missing_topics_error("topic", [options.topic], topics)


# ---------------------------------------------------------------------------------------------- writing


@dataclass(frozen=True)
class SinkCommitMessage(WriterCommitMessage):
    """What one task wrote: its records, the wire batches, and how many batches were already there."""

    partition: int
    rows: int
    batches: int
    duplicate_batches: int


@dataclass(frozen=True)
class _Replay:
    key: str
    epoch: int


def _runs(batches: Iterator[pa.RecordBatch], rows: int) -> Iterator[pa.Table]:
    """The rows in runs of exactly ``rows`` (the last one shorter), whatever the input batches' sizes, so a
    replayed task cuts its rows at the same places."""
    import pyarrow as pa

    pending: pa.Table | None = None
    for batch in batches:
        if not batch.num_rows:
            continue
        table = pa.Table.from_batches([batch])
        pending = table if pending is None else pa.concat_tables([pending, table])
        while pending.num_rows >= rows:
            yield pending.slice(0, rows)
            pending = pending.slice(rows)
    if pending is not None and pending.num_rows:
        yield pending


def _sorted(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """All of the task's rows sorted by key, then value: the same rows in any order give the same runs.
    (The whole task is held in memory: meant for the modest output of an aggregation.)"""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = pa.Table.from_batches(list(batches))
    if not table.num_rows:
        return
    sort_keys = [(name, "ascending") for name in table.column_names if name.lower() in ("key", "value")]
    sort_keys.sort(key=lambda item: item[0].lower())  # key before value
    yield from table.take(pc.sort_indices(table, sort_keys=sort_keys)).to_batches()


def _column(table: pa.Table, name: str) -> pa.ChunkedArray | None:
    for i, field_name in enumerate(table.column_names):
        if field_name.lower() == name:
            column = table.column(i)
            if column.null_count == len(column) and name in ("key", "partition", "topic", "headers"):
                return None  # an all-null (or NullType) optional column says nothing
            return column
    return None


class _TaskWriter:
    """Writes one task's rows through one producer and collects the outcome."""

    def __init__(self, options: SinkOptions, producer: Producer, replay: _Replay | None) -> None:
        self._options = options
        self._producer = producer
        self._replay = replay
        self._futures: list[Future[list[BatchMetadata]]] = []
        self._runs = 0
        self.rows = 0

    def write(self, run: pa.Table) -> None:
        import pyarrow.compute as pc

        self.rows += run.num_rows
        topics = _column(run, "topic")
        if topics is None:
            assert self._options.topic is not None  # check_sink_schema
            self._write_topic(self._options.topic, run)
        else:
            if self._options.topic is not None:
                topics = pc.fill_null(topics, self._options.topic)
            elif topics.null_count:
                raise ValueError("multiraft sink: a row has a null 'topic' and there is no 'topic' option")
            for topic in sorted(pc.unique(topics).to_pylist()):
                self._write_topic(topic, run.filter(pc.equal(topics, topic)))
        self._runs += 1

    def _write_topic(self, topic: str, rows: pa.Table) -> None:
        import pyarrow.compute as pc

        partitions = _column(rows, "partition")
        if partitions is not None:
            for partition in sorted(pc.unique(partitions.drop_null()).to_pylist()):
                self._send(topic, rows.filter(pc.equal(partitions, partition)), int(partition))
            if not partitions.null_count:
                return
            rows = rows.filter(pc.is_null(partitions))
        keys = _column(rows, "key")
        if self._replay is None:
            self._send(topic, rows, None)  # keys hash; null keys go to the producer's sticky partition
            return
        # The sticky partition is random: a replay must put keyless rows where the first attempt did.
        if keys is not None and not keys.null_count:
            self._send(topic, rows, None)
            return
        if keys is not None:
            self._send(topic, rows.filter(pc.is_valid(keys)), None)
            rows = rows.filter(pc.is_null(keys))
        spot = self._producer.partition_for(topic, f"{self._replay.key}:{self._replay.epoch}:{self._runs}")
        self._send(topic, rows, spot)

    def _send(self, topic: str, rows: pa.Table, partition: int | None) -> None:
        if not rows.num_rows:
            return
        value = _column(rows, "value")
        assert value is not None
        headers = _column(rows, "headers")
        self._futures.append(
            self._producer.send_batch(topic, value, keys=_column(rows, "key"), headers=headers, partition=partition)
        )

    def finish(self, spark_partition: int) -> SinkCommitMessage:
        batches = duplicates = 0
        for future in self._futures:
            for metadata in future.result():  # the first failure fails the task (and with it the micro-batch)
                batches += 1
                duplicates += metadata.duplicate
        return SinkCommitMessage(spark_partition, self.rows, batches, duplicates)


def _task_context() -> tuple[int, str | None, int | None]:
    """(Spark partition id, streaming query id, micro-batch id) of the running task."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return 0, None, None
    query_id = context.getLocalProperty(QUERY_ID_PROPERTY)
    batch_id = context.getLocalProperty(BATCH_ID_PROPERTY)
    return context.partitionId(), query_id, int(batch_id) if batch_id is not None else None


def _write_task(options: SinkOptions, batches: Iterator[pa.RecordBatch], replay: _Replay | None) -> SinkCommitMessage:
    spark_partition, _, _ = _task_context()
    settings = options.producer_settings()
    if replay is not None:
        settings.update(replay_key=replay.key, replay_epoch=replay.epoch)
    if options.sort_rows:
        batches = _sorted(batches)
    runs = _runs(batches, options.rows_per_send)
    first = next(runs, None)
    if first is None:
        return SinkCommitMessage(spark_partition, 0, 0, 0)  # an empty task: no producer, no connection
    with Producer(options.bootstrap, **settings, **options.connection.security.client_kwargs()) as producer:
        writer = _TaskWriter(options, producer, replay)
        writer.write(first)
        for run in runs:
            writer.write(run)
        message = writer.finish(spark_partition)
    log.debug(
        "sink task wrote",
        spark_partition=spark_partition,
        rows=message.rows,
        batches=message.batches,
        duplicate_batches=message.duplicate_batches,
        replay_key=replay.key if replay else None,
    )
    return message


def _summarise(messages: list[WriterCommitMessage | None]) -> tuple[int, int]:
    written = [m for m in messages if isinstance(m, SinkCommitMessage)]
    return sum(m.rows for m in written), sum(m.duplicate_batches for m in written)


class MultiraftBatchWriter(DataSourceArrowWriter):
    """``df.write.format("multiraft")``: each task writes its rows with an idempotent producer."""

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        self._options = parse_sink_options(options)
        check_sink_schema(schema, self._options)
        check_sink_target(self._options)
        if overwrite:
            # A log is appended to; Spark's default save mode for df.write is errorifexists, which we take as append.
            log.debug("the multiraft sink appends; overwrite is ignored")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return _write_task(self._options, iterator, None)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        rows, _ = _summarise(messages)
        log.info("multiraft sink: write committed", rows=rows, tasks=len(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        rows, _ = _summarise(messages)
        # Records of the tasks that finished stay written: a log cannot take them back.
        log.warning("multiraft sink: write aborted; records of finished tasks stay written", rows=rows)


class MultiraftStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("multiraft")``: exactly-once per micro-batch through replay producers."""

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        self._options = parse_sink_options(options)
        check_sink_schema(schema, self._options)
        check_sink_target(self._options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        spark_partition, query_id, batch_id = _task_context()
        replay = None
        if query_id is not None and batch_id is not None:
            generation, epoch = divmod(batch_id, EPOCHS_PER_KEY)
            replay = _Replay(f"spark:{query_id}:{spark_partition}:{generation}", epoch)
        else:
            log.warning(
                "multiraft sink: no streaming query or batch id in the task's properties; writing at-least-once",
                query_id=query_id,
                batch_id=batch_id,
            )
        return _write_task(self._options, iterator, replay)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 (Spark's name)
        rows, duplicates = _summarise(messages)
        log.debug("multiraft sink: micro-batch committed", batch_id=batchId, rows=rows, duplicate_batches=duplicates)
        if duplicates:
            log.info(
                "multiraft sink: replayed micro-batch deduplicated", batch_id=batchId, duplicate_batches=duplicates
            )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        rows, _ = _summarise(messages)
        # What finished tasks wrote stays; replaying this batch (same id, same epoch) will not write it again.
        log.warning("multiraft sink: micro-batch aborted", batch_id=batchId, rows_written=rows)
