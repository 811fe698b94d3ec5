"""The Producer: batches records per partition and writes them through partition leaders.

>>> with Producer("127.0.0.1:7000") as producer:                    # doctest: +SKIP
...     producer.send("events", b"payload", key=b"user-42")
...     producer.flush()

``send()`` returns at once with a :class:`concurrent.futures.Future`; records wait up to ``linger_ms`` to
share a batch, and a background sender (see :mod:`rpc.client._sender`) writes the batches.
``send_batch()`` takes many records as columns (Python sequences or Arrow arrays), groups them per partition
with numpy and Arrow, and queues them as ready wire batches. docs/client.md describes the partitioner,
delivery semantics and idempotence.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, NoReturn

from multiraft.errors import (
    ConfigError,
    MultiraftError,
    ProducerError,
    RecordTooLargeError,
    RequestTimeoutError,
    UnknownPartitionError,
)
from multiraft.logging import get_logger
from rpc.client._accumulator import RECORD_OVERHEAD, RecordAccumulator, record_size
from rpc.client._bulk import BulkBatch, BulkCall, BulkColumns
from rpc.client._bulk_split import chunk_bounds, partition_records, record_sizes
from rpc.client._cluster import ClusterClient, TopicMetadata
from rpc.client._futures import Callback
from rpc.client._partitioner import partition_for_key
from rpc.client._producer_ids import replay_identity
from rpc.client._record_input import (
    BulkHeaders,
    BulkTimestamps,
    BulkValues,
    Headers,
    Value,
    binary_column,
    headers_column,
    timestamps_column,
    to_bytes,
    to_headers,
    to_timestamp_ms,
)
from rpc.client._records import BatchMetadata, RecordMetadata, TopicPartition
from rpc.client._sender import Sender
from rpc.client._tls import TlsSettings
from storage.batch import HEADER_SIZE, Compression

__all__ = [
    "Producer",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "MAX_IN_FLIGHT_IDEMPOTENT",
]

log = get_logger(__name__)

# The cluster's default max.message.bytes (multiraft.controller.topic_config); Metadata lists only the
# configs a topic sets, and the client library may not import the controller.
DEFAULT_MAX_MESSAGE_BYTES = 8 * 1024 * 1024
# A leader remembers the last five batches per producer and partition, so it can recognise a retry of any
# batch in flight only if at most five are.
MAX_IN_FLIGHT_IDEMPOTENT = 5

# send() reuses what it knows of a topic for this long before it asks the client's metadata cache again (which
# refreshes it when older than metadata_max_age_s); the per-record look-up was a tenth of send()'s cost. Timed
# on the wall clock send() reads anyway for the record's timestamp (a clock that steps back rechecks at once).
_TOPIC_RECHECK_MS = 1000

_time_ns = time.time_ns

_COMPRESSION = {"none": Compression.NONE, "zstd": Compression.ZSTD, "lz4": Compression.LZ4}


@dataclass(slots=True)
class _TopicInfo:
    source: TopicMetadata
    partitions: int
    max_bytes: int
    append_time: bool
    checked_ms: int  # wall clock: send() looks at the client's metadata again _TOPIC_RECHECK_MS after this


def _adapt(callback: Callback) -> Callable[[Future[RecordMetadata]], None]:
    def done(future: Future[RecordMetadata]) -> None:
        error = future.exception()
        try:
            if error is None:
                callback(future.result(), None)
            else:
                callback(None, error)
        except Exception as exc:
            log.exception("a send() callback raised", error=repr(exc))

    return done


class Producer:
    """Writes records to topics; thread-safe.

    ``send()`` never waits for the network (only for buffer space, see ``max_block_s``); it returns a
    future that resolves to the record's :class:`RecordMetadata` or fails with one
    :class:`multiraft.errors.MultiraftError`. Callbacks and future callbacks run on the producer's
    sender thread: keep them short.

    Arguments (units in the names):

    * ``linger_ms``: how long a batch waits for more records before it is sent.
    * ``batch_bytes``: a batch is sent once it holds this many bytes (capped by the topic's
      ``max.message.bytes``).
    * ``buffer_bytes``: the most record bytes waiting or in flight; ``send()`` blocks beyond it.
    * ``compression``: ``"none"``, ``"zstd"`` or ``"lz4"``, per batch.
    * ``idempotence``: sequence-numbered batches that the leader writes exactly once however often they
      are retried (default). Without it a batch that may have been written is failed, never re-sent.
    * ``max_in_flight``: unacknowledged batches per partition (at most 5 with idempotence).
    * ``delivery_timeout_s``: from ``send()`` to acknowledgement, retries included; then the record fails
      with :class:`RequestTimeoutError`.
    * ``request_timeout_s``: how long one produce request (or a metadata call) may take.
    * ``max_block_s``: how long ``send()`` blocks for buffer space before it raises
      :class:`RequestTimeoutError`.
    * ``metadata_max_age_s``: metadata older than this is refreshed (new partitions, moved leaders).
    * ``tls``: reach the cluster over TLS (:class:`TlsSettings`); None: plaintext.
    * ``replay_key``, ``replay_epoch``: a *replay producer* (docs/client.md). Its producer id is derived from
      the key (:func:`~rpc.client._producer_ids.replay_producer_id`), its epoch is ``replay_epoch`` (0 to
      32767) and its sequences start at 0 in every partition, without asking the cluster for an id. A second
      producer with the same key and epoch that sends the same records in the same batches (same calls, same
      partitions) writes nothing twice: the leader answers each batch it already holds as a duplicate. A
      higher epoch fences the lower ones of the same key. Its sequence cannot be restarted: where a normal
      producer would move to a new id, a replay producer fails for good (create a new one, which replays
      from the start).
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        linger_ms: float = 5,
        batch_bytes: int = 1_048_576,
        buffer_bytes: int = 67_108_864,
        compression: Literal["none", "zstd", "lz4"] = "none",
        idempotence: bool = True,
        max_in_flight: int = 5,
        delivery_timeout_s: float = 120.0,
        request_timeout_s: float = 30.0,
        max_block_s: float = 60.0,
        metadata_max_age_s: float = 300.0,
        replay_key: str | None = None,
        replay_epoch: int = 0,
        tls: TlsSettings | None = None,
        user: str | None = None,
        password: str | None = None,
    ) -> None:
        if linger_ms < 0:
            raise ConfigError("linger_ms", f"must be >= 0, got {linger_ms}")
        if batch_bytes < 1:
            raise ConfigError("batch_bytes", f"must be >= 1, got {batch_bytes}")
        if buffer_bytes < batch_bytes:
            raise ConfigError("buffer_bytes", f"must be >= batch_bytes ({batch_bytes}), got {buffer_bytes}")
        if compression not in _COMPRESSION:
            raise ConfigError("compression", f"must be one of {sorted(_COMPRESSION)}, got {compression!r}")
        if max_in_flight < 1:
            raise ConfigError("max_in_flight", f"must be >= 1, got {max_in_flight}")
        if idempotence and max_in_flight > MAX_IN_FLIGHT_IDEMPOTENT:
            raise ConfigError(
                "max_in_flight", f"must be <= {MAX_IN_FLIGHT_IDEMPOTENT} with idempotence, got {max_in_flight}"
            )
        for name, value in (
            ("delivery_timeout_s", delivery_timeout_s),
            ("request_timeout_s", request_timeout_s),
            ("metadata_max_age_s", metadata_max_age_s),
        ):
            if value <= 0:
                raise ConfigError(name, f"must be > 0, got {value}")
        if max_block_s < 0:
            raise ConfigError("max_block_s", f"must be >= 0, got {max_block_s}")
        replay = replay_identity(replay_key, replay_epoch, idempotence=idempotence)
        self._client = ClusterClient(
            bootstrap,
            request_timeout_s=request_timeout_s,
            metadata_max_age_s=metadata_max_age_s,
            tls=tls,
            user=user,
            password=password,
        )
        self._topics: dict[str, _TopicInfo] = {}
        self._partitions_refreshed_ms: dict[str, int] = {}  # issue 25: last refresh for a partition past the count
        self._learned_max_bytes: dict[str, int] = {}
        self._closed = False
        self._close_lock = threading.Lock()
        self._accumulator = RecordAccumulator(
            batch_bytes=batch_bytes,
            buffer_bytes=buffer_bytes,
            linger_s=linger_ms / 1000,
            delivery_timeout_s=delivery_timeout_s,
            max_block_s=max_block_s,
            wake=self._wake,
        )
        self._sender = Sender(
            self._client,
            self._accumulator,
            idempotence=idempotence,
            max_in_flight=max_in_flight,
            request_timeout_s=request_timeout_s,
            compression=_COMPRESSION[compression],
            uses_append_time=self._uses_append_time,
            learn_max_bytes=self._learn_max_bytes,
            replay=replay,
        )
        self._sender.start()

    def _wake(self) -> None:
        self._sender.wake()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def idempotent(self) -> bool:
        """Whether batches carry producer ids and sequences (False if the cluster cannot dedupe them)."""
        return self._sender.idempotent

    @property
    def producer_id(self) -> int:
        """The producer id batches carry (-1 until the cluster gave one, or without idempotence)."""
        return self._sender.producer_id

    # ------------------------------------------------------------------------------------------- topics

    def _topic(self, topic: str) -> _TopicInfo:
        metadata = self._client.topic(topic)
        info = self._topics.get(topic)
        if info is not None and info.source is metadata:
            info.checked_ms = time.time_ns() // 1_000_000
            return info
        max_bytes = int(metadata.configs.get("max.message.bytes", DEFAULT_MAX_MESSAGE_BYTES))
        learned = self._learned_max_bytes.get(topic)
        info = _TopicInfo(
            metadata,
            len(metadata.partitions),
            min(max_bytes, learned) if learned else max_bytes,
            metadata.configs.get("message.timestamp.type", "CreateTime") == "LogAppendTime",
            time.time_ns() // 1_000_000,
        )
        self._topics[topic] = info
        return info

    def _refreshed_for_new_partitions(self, topic: str, info: _TopicInfo, now_ms: int) -> _TopicInfo:
        """The topic's metadata fetched again, at most once per _TOPIC_RECHECK_MS per topic: a partition past the
        cached count may have been added since (CreatePartitions), as Kafka's producer refreshes for it."""
        if now_ms - self._partitions_refreshed_ms.get(topic, now_ms - _TOPIC_RECHECK_MS) < _TOPIC_RECHECK_MS:
            return info
        self._partitions_refreshed_ms[topic] = now_ms
        self._client.topic(topic, refresh=True)
        return self._topic(topic)

    def _uses_append_time(self, topic: str) -> bool:
        info = self._topics.get(topic)
        return info is not None and info.append_time

    def _learn_max_bytes(self, topic: str, max_bytes: int) -> None:
        self._learned_max_bytes[topic] = max_bytes
        self._topics.pop(topic, None)

    def partition_for(self, topic: str, key: bytes | str) -> int:
        """The partition a record with ``key`` goes to: ``crc32c(key bytes) % partition count``."""
        key_bytes = to_bytes(key, "key")
        if key_bytes is None:
            raise TypeError("key must be bytes or str")
        return partition_for_key(key_bytes, self._topic(topic).partitions)

    # --------------------------------------------------------------------------------------------- send

    def _raise_stopped(self) -> NoReturn:
        fatal = self._sender.fatal_error
        if fatal is not None:
            raise fatal
        raise ProducerError("the producer is closed")

    def send(
        self,
        topic: str,
        value: Value,
        key: Value = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp: int | datetime | None = None,
        *,
        callback: Callback | None = None,
    ) -> Future[RecordMetadata]:
        """Queue one record; the future resolves once the partition's replicas have it.

        The partition is ``partition`` if given, else ``crc32c(key) % partitions`` for a key, else the
        sticky partition (one partition until its batch is sent, then another). A record above the
        topic's ``max.message.bytes`` fails its future with :class:`RecordTooLargeError`.

        Raises :class:`RequestTimeoutError` when the buffer stays full for ``max_block_s``, and
        :class:`ProducerError` after ``close()``.
        """
        if self._sender.fatal_error is not None or self._closed:
            self._raise_stopped()
        # The common cases (bytes, no key or a bytes key, no headers, now) without a call each.
        value_bytes = value if type(value) is bytes else to_bytes(value, "value")
        key_bytes = key if key is None or type(key) is bytes else to_bytes(key, "key")
        header_items = to_headers(headers) if headers is not None else None
        now_ms = _time_ns() // 1_000_000
        timestamp_ms = now_ms if timestamp is None else to_timestamp_ms(timestamp)
        try:
            info = self._topics.get(topic)
            if info is None or not info.checked_ms <= now_ms < info.checked_ms + _TOPIC_RECHECK_MS:
                info = self._topic(topic)
            if partition is not None:
                if partition >= info.partitions:
                    info = self._refreshed_for_new_partitions(topic, info, now_ms)
                if not 0 <= partition < info.partitions:
                    raise UnknownPartitionError(
                        f"topic {topic!r} has {info.partitions} partition{'' if info.partitions == 1 else 's'}, "
                        f"there is no partition {partition}",
                        topic=topic,
                        partition=partition,
                    )
            elif key_bytes is not None:
                partition = partition_for_key(key_bytes, info.partitions)
            if header_items is None:
                size = RECORD_OVERHEAD + (0 if value_bytes is None else len(value_bytes))
                if key_bytes is not None:
                    size += len(key_bytes)
            else:
                size = record_size(value_bytes, key_bytes, header_items)
            if HEADER_SIZE + size > info.max_bytes:
                raise RecordTooLargeError(
                    f"a record of {HEADER_SIZE + size} bytes (batched) exceeds max.message.bytes={info.max_bytes} "
                    f"of topic {topic!r}",
                    max_bytes=info.max_bytes,
                )
            return self._accumulator.append(
                topic,
                partition,
                info.partitions,
                info.max_bytes,
                value_bytes,
                key_bytes,
                header_items,
                timestamp_ms,
                size,
                callback,
            )[1]
        except RequestTimeoutError:
            raise
        except MultiraftError as exc:
            failed: Future[RecordMetadata] = Future()
            failed.set_running_or_notify_cancel()
            failed.set_exception(exc)
            if callback is not None:
                failed.add_done_callback(_adapt(callback))
            return failed

    def send_batch(
        self,
        topic: str,
        values: BulkValues,
        *,
        keys: BulkValues | None = None,
        headers: BulkHeaders | None = None,
        partition: int | None = None,
        timestamps: BulkTimestamps = None,
    ) -> Future[list[BatchMetadata]]:
        """Queue many records at once; the future resolves, once every one of them is acknowledged, to the
        :class:`BatchMetadata` of each wire batch they went in (by partition, then offset).

        ``values`` and ``keys``: a sequence of bytes, str (UTF-8) or None, or a binary or string pyarrow
        ``Array`` / ``ChunkedArray`` (taken from its buffers without a copy). ``headers``: per record a
        mapping, a sequence of ``(name, value)`` pairs or None, or a pyarrow array of
        ``storage.headers_type()``. ``timestamps``: one int (ms since the epoch) or datetime for all, a
        sequence or numpy/pyarrow array of them (int ms, datetime64 or Arrow timestamps), or None (now).

        The partition is ``partition`` if given; else, with keys, ``crc32c(key) % partitions`` per record
        (what ``send()`` does; null keys go to the sticky partition); else the sticky partition, for the
        whole call. A partition's records keep their order, are written after the records sent to it before
        the call, and are split into wire batches of at most ``batch_bytes`` (and ``max.message.bytes``);
        they are contiguous in the log when the call fits ``buffer_bytes``. The batches are sent without
        waiting for ``linger_ms``.

        The future fails with the first error of any of its batches, once all of them are done; the other
        batches may have been written (each exactly once, with idempotence). A record above
        ``max.message.bytes`` fails the whole call before anything is sent (:class:`RecordTooLargeError`).
        Raises :class:`TypeError` or :class:`ValueError` for malformed input,
        :class:`RequestTimeoutError` when the buffer stays full for ``max_block_s`` before anything was
        queued, and :class:`ProducerError` after ``close()``.
        """
        if self._sender.fatal_error is not None or self._closed:
            self._raise_stopped()
        value_column = binary_column(values, "values")
        n = len(value_column)
        key_column = None if keys is None else binary_column(keys, "keys")
        header_column = None if headers is None else headers_column(headers)
        for name, column in (("keys", key_column), ("headers", header_column)):
            if column is not None and len(column) != n:
                raise ValueError(f"{name} has {len(column)} entries for {n} values")
        columns = BulkColumns(value_column, key_column, header_column, timestamps_column(timestamps, n))
        future: Future[list[BatchMetadata]] = Future()
        future.set_running_or_notify_cancel()  # queued records cannot be taken back
        if n == 0:
            future.set_result([])
            return future
        try:
            info = self._topic(topic)
            if partition is not None and partition >= info.partitions:
                info = self._refreshed_for_new_partitions(topic, info, _time_ns() // 1_000_000)
            sizes = record_sizes(columns)
            largest = int(sizes.argmax())
            if HEADER_SIZE + int(sizes[largest]) > info.max_bytes:
                raise RecordTooLargeError(
                    f"record {largest} of the batch, of {HEADER_SIZE + int(sizes[largest])} bytes (batched), "
                    f"exceeds max.message.bytes={info.max_bytes} of topic {topic!r}; nothing was sent",
                    max_bytes=info.max_bytes,
                )
            if int(sizes[largest]) > self._accumulator.pool.capacity:
                raise RecordTooLargeError(
                    f"record {largest} of the batch, of {int(sizes[largest])} bytes, does not fit the producer's "
                    f"buffer_bytes={self._accumulator.pool.capacity}; nothing was sent",
                    max_bytes=self._accumulator.pool.capacity,
                )
            groups, sticky = partition_records(
                topic,
                info.partitions,
                columns,
                sizes,
                partition,
                lambda: self._accumulator.sticky_partition(topic, info.partitions),
            )
            budget = min(self._accumulator.batch_bytes, info.max_bytes) - HEADER_SIZE
            chunks = [
                (TopicPartition(topic, p), part.slice(start, stop), size)
                for p, part, part_sizes in groups
                for start, stop, size in chunk_bounds(part_sizes, budget)
            ]
            call = BulkCall(future, len(chunks))
            batches = [BulkBatch(tp, call, part, size) for tp, part, size in chunks]
            self._accumulator.append_bulk(batches, sticky)
        except RequestTimeoutError:
            raise
        except MultiraftError as exc:
            future.set_exception(exc)
        return future

    # ------------------------------------------------------------------------------------ flush, close

    def flush(self, timeout_s: float | None = None) -> None:
        """Send every queued record now and wait until each is acknowledged or has failed.

        Raises :class:`RequestTimeoutError` if that takes longer than ``timeout_s``. Failed records are
        reported by their futures, not here.
        """
        started = time.monotonic()
        deadline = None if timeout_s is None else started + timeout_s
        self._accumulator.begin_flush()
        try:
            while True:
                pending = [b for b in self._accumulator.incomplete() if b.created <= started]
                if not pending:
                    return
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    records = sum(b.record_count for b in pending)
                    raise RequestTimeoutError(f"flush: {records} records not acknowledged within {timeout_s:g}s")
                pending[0].done.wait(remaining if remaining is None else min(remaining, 1.0))
        finally:
            self._accumulator.end_flush()

    def close(self, timeout_s: float | None = None) -> None:
        """Send what is queued, wait for it (up to ``timeout_s``; None waits for every delivery timeout),
        then stop. Records still unacknowledged at the timeout fail with :class:`RequestTimeoutError`."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self._accumulator.close()
        try:
            self.flush(timeout_s)
        except RequestTimeoutError:
            log.warning("closing the producer with unacknowledged records", timeout_s=timeout_s)
        finally:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            abort = None
            if self._accumulator.incomplete():
                abort = RequestTimeoutError("the producer closed before the record was acknowledged")
            if not self._sender.stop(abort, timeout_s=remaining if abort is None else 10.0):
                self._sender.stop(RequestTimeoutError("the producer closed"), timeout_s=10.0)
            self._client.close()
