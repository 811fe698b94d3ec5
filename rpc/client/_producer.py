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

import hashlib
import itertools
import operator
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import crc32c

from multiraft.errors import (
    ConfigError,
    MultiraftError,
    ProducerError,
    RecordTooLargeError,
    RequestTimeoutError,
    UnknownPartitionError,
)
from multiraft.logging import get_logger
from rpc.client._accumulator import RECORD_OVERHEAD, Header, RecordAccumulator, record_size
from rpc.client._bulk import BulkBatch, BulkCall, BulkColumns
from rpc.client._cluster import ClusterClient, TopicMetadata
from rpc.client._partitioner import partition_for_key
from rpc.client._records import BatchMetadata, RecordMetadata, TopicPartition
from rpc.client._sender import Sender
from rpc.client._tls import TlsSettings
from storage.batch import HEADER_SIZE, Compression, headers_type

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pyarrow as pa

    Int64Array = npt.NDArray[np.int64]

__all__ = [
    "Producer",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "MAX_IN_FLIGHT_IDEMPOTENT",
    "MAX_PRODUCER_EPOCH",
    "replay_producer_id",
]

log = get_logger(__name__)

# The cluster's default max.message.bytes (multiraft.controller.topic_config); Metadata lists only the
# configs a topic sets, and the client library may not import the controller.
DEFAULT_MAX_MESSAGE_BYTES = 8 * 1024 * 1024
# A leader remembers the last five batches per producer and partition, so it can recognise a retry of any
# batch in flight only if at most five are.
MAX_IN_FLIGHT_IDEMPOTENT = 5

# Producer epochs travel as an i16 in the batch header (storage/batch.py) and must be >= 0.
MAX_PRODUCER_EPOCH = 2**15 - 1
# Replay producer ids have bit 62 set: the controller counts its ids up from 1 and will never reach 2**62, and
# the header's i64 keeps them positive (negative ids mean "not idempotent").
_REPLAY_ID_BIT = 1 << 62

_COMPRESSION = {"none": Compression.NONE, "zstd": Compression.ZSTD, "lz4": Compression.LZ4}

Value = bytes | bytearray | memoryview | str | None
Headers = Mapping[str, bytes | str | None] | Sequence[tuple[str, bytes | str | None]]
Callback = Callable[[RecordMetadata | None, BaseException | None], object]
BulkValues = Sequence[Value] | Any  # or a binary/string pyarrow Array or ChunkedArray
BulkHeaders = Sequence[Headers | None] | Any  # or a pyarrow array of storage.headers_type()
BulkTimestamps = int | datetime | Sequence[int] | Any | None  # or a numpy or pyarrow array (ms or timestamps)


def replay_producer_id(replay_key: str) -> int:
    """The producer id a replay producer with ``replay_key`` writes under: 62 bits of BLAKE2b of the key's
    UTF-8 bytes, with bit 62 set (never an id the controller hands out)."""
    digest = hashlib.blake2b(replay_key.encode(), digest_size=8, person=b"multiraft-replay").digest()
    return (int.from_bytes(digest, "big") & (_REPLAY_ID_BIT - 1)) | _REPLAY_ID_BIT


@dataclass(frozen=True, slots=True)
class _TopicInfo:
    source: TopicMetadata
    partitions: int
    max_bytes: int
    append_time: bool


def _to_bytes(value: Value, name: str) -> bytes | None:
    if value is None or type(value) is bytes:
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"{name} must be bytes, str or None, not {type(value).__name__}")


def _to_headers(headers: Headers) -> tuple[Header, ...] | None:
    items = headers.items() if isinstance(headers, Mapping) else headers
    converted: list[Header] = []
    for item in items:
        name, value = item
        if not isinstance(name, str):
            raise TypeError(f"header names must be str, not {type(name).__name__}")
        converted.append((name, _to_bytes(value, f"header {name!r}")))
    return tuple(converted) or None


def _to_timestamp_ms(timestamp: int | datetime | None) -> int:
    if timestamp is None:
        return time.time_ns() // 1_000_000
    if isinstance(timestamp, datetime):
        return round(timestamp.timestamp() * 1000)  # naive datetimes are local time, as datetime.timestamp()
    if isinstance(timestamp, int) and not isinstance(timestamp, bool):
        if timestamp < 0:
            raise ValueError(f"timestamp must be >= 0 ms since the epoch, got {timestamp}")
        return timestamp
    raise TypeError(f"timestamp must be int milliseconds, a datetime or None, not {type(timestamp).__name__}")


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


# ------------------------------------------------------------------------------- send_batch() columns


def _binary_column(values: BulkValues, name: str) -> pa.Array:
    """A binary or string Arrow array of ``values``: Arrow input as it is (no copy), a sequence of bytes
    joined in C (str goes through Arrow's converter)."""
    import numpy as np
    import pyarrow as pa

    if isinstance(values, pa.ChunkedArray):
        values = values.chunk(0) if values.num_chunks == 1 else values.combine_chunks()
    if isinstance(values, pa.Array):
        kind = values.type
        if pa.types.is_binary_view(kind) or pa.types.is_string_view(kind):
            return values.cast(pa.binary())  # the batch layout needs contiguous data: one copy
        if not (
            pa.types.is_binary(kind)
            or pa.types.is_string(kind)
            or pa.types.is_large_binary(kind)
            or pa.types.is_large_string(kind)
        ):
            raise TypeError(f"{name} must be a binary or string Arrow array, not {kind}")
        return values
    if isinstance(values, str | bytes | bytearray | memoryview) or not isinstance(values, Iterable):
        raise TypeError(
            f"{name} must be a sequence of bytes, str or None, or a pyarrow array, not {type(values).__name__}"
        )
    items = values if isinstance(values, list | tuple) else list(values)
    n = len(items)
    try:
        nulls = items.count(None)
        present = list(map(operator.is_not, items, itertools.repeat(None))) if nulls else None
        kept = list(itertools.compress(items, present)) if present is not None else items
        data = b"".join(kept)
        kept_lengths = np.fromiter(map(len, kept), dtype=np.int64, count=n - nulls)
    except TypeError:  # str (or something Arrow may convert)
        try:
            return pa.array(items, type=pa.binary())
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as exc:
            raise TypeError(f"{name} must be bytes, str (encoded as UTF-8) or None: {exc}") from exc
    offsets = np.zeros(n + 1, dtype=np.int64)
    validity = None
    if present is not None:
        mask = np.fromiter(present, dtype=bool, count=n)
        lengths = np.zeros(n, dtype=np.int64)
        lengths[mask] = kept_lengths
        np.cumsum(lengths, out=offsets[1:])
        validity = pa.py_buffer(np.packbits(mask, bitorder="little"))
    else:
        np.cumsum(kept_lengths, out=offsets[1:])
    if offsets[-1] < 2**31:
        return pa.Array.from_buffers(
            pa.binary(), n, [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)], nulls
        )
    return pa.Array.from_buffers(pa.large_binary(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)], nulls)


def _headers_column(headers: BulkHeaders) -> pa.Array:
    """A ``headers_type()`` Arrow array: Arrow input cast if needed, else each record's mapping or pairs."""
    import pyarrow as pa

    if isinstance(headers, pa.ChunkedArray):
        headers = headers.chunk(0) if headers.num_chunks == 1 else headers.combine_chunks()
    if isinstance(headers, pa.Array):
        if not headers.type.equals(headers_type()):
            try:
                headers = headers.cast(headers_type())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise TypeError(f"headers must be a pyarrow array of {headers_type()}, not {headers.type}") from exc
        return headers
    if isinstance(headers, str | bytes | Mapping) or not isinstance(headers, Iterable):
        raise TypeError(f"headers must be one mapping or sequence of pairs per record, not {type(headers).__name__}")
    rows = headers if isinstance(headers, list | tuple) else list(headers)
    try:
        return pa.array(rows, type=headers_type())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, KeyError):
        pass  # mappings: converted to pairs below
    try:
        return pa.array([list(row.items()) if isinstance(row, Mapping) else row for row in rows], type=headers_type())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, KeyError) as exc:
        raise TypeError(
            f"each record's headers must be a mapping or a sequence of (str, bytes | str | None) pairs: {exc}"
        ) from exc


def _timestamps_column(timestamps: BulkTimestamps, n: int) -> int | Int64Array:
    """One timestamp for every record, or an int64 array of ``n``: milliseconds since the epoch."""
    import numpy as np
    import pyarrow as pa

    if timestamps is None or isinstance(timestamps, int | datetime):
        return _to_timestamp_ms(timestamps)
    if isinstance(timestamps, pa.ChunkedArray | pa.Array):
        arrow: Any = timestamps.combine_chunks() if isinstance(timestamps, pa.ChunkedArray) else timestamps
        if arrow.null_count:
            raise ValueError("timestamps must not be null")
        if pa.types.is_timestamp(arrow.type):
            arrow = arrow.cast(pa.timestamp("ms", tz=arrow.type.tz), safe=False).cast(pa.int64())
        elif not pa.types.is_integer(arrow.type):
            raise TypeError(f"timestamps must be integer milliseconds or Arrow timestamps, not {arrow.type}")
        array = arrow.to_numpy(zero_copy_only=False)
    elif isinstance(timestamps, str | bytes) or not isinstance(timestamps, Iterable):
        raise TypeError(
            f"timestamps must be int milliseconds, a sequence of them or None, not {type(timestamps).__name__}"
        )
    else:
        array = np.asarray(timestamps if isinstance(timestamps, list | tuple | np.ndarray) else list(timestamps))
        if array.dtype.kind == "M":
            array = array.astype("datetime64[ms]")
    if array.dtype.kind not in "iuM" or array.ndim != 1:
        raise TypeError(f"timestamps must be integer milliseconds since the epoch, got an array of {array.dtype}")
    result = np.ascontiguousarray(array.astype(np.int64, copy=False))
    if result.shape != (n,):
        raise ValueError(f"timestamps has {result.size} entries for {n} records")
    if n and int(result.min()) < 0:
        raise ValueError("timestamps must be >= 0 ms since the epoch")
    return result


def _byte_lengths(array: pa.Array) -> Int64Array:
    """Bytes per entry of a binary or string array (0 for null)."""
    import numpy as np
    import pyarrow.compute as pc

    lengths: Int64Array = pc.binary_length(array).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    return lengths


def _record_sizes(columns: BulkColumns) -> Int64Array:
    """:func:`record_size` of every record, computed on whole columns."""
    import numpy as np

    sizes = _byte_lengths(columns.values) + RECORD_OVERHEAD
    if columns.keys is not None:
        sizes += _byte_lengths(columns.keys)
    headers = columns.headers
    if headers is not None and len(headers):
        offsets = headers.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
        entries = headers.values
        entry_sizes = 8 + _byte_lengths(entries.field("key")) + _byte_lengths(entries.field("value"))
        running = np.zeros(len(entry_sizes) + 1, dtype=np.int64)
        np.cumsum(entry_sizes, out=running[1:])
        per_record = running[offsets[1:]] - running[offsets[:-1]]
        if headers.null_count:
            per_record[headers.is_null().to_numpy(zero_copy_only=False)] = 0
        sizes += per_record
    return sizes


def _key_partitions(keys: pa.Array, partitions: int) -> Int64Array:
    """``crc32c(key) % partitions`` of every key (the partitioner of ``send()``), -1 for a null key."""
    import numpy as np
    import pyarrow as pa

    large = pa.types.is_large_string(keys.type) or pa.types.is_large_binary(keys.type)
    binary = keys.cast(pa.large_binary() if large else pa.binary())
    present = binary.drop_null() if binary.null_count else binary
    # crc32c runs in C over the keys' bytes; to_pylist() makes the bytes objects it takes.
    checksums = np.fromiter(map(crc32c.crc32c, present.to_pylist()), dtype=np.int64, count=len(present))
    if not binary.null_count:
        result: Int64Array = checksums % partitions
        return result
    result = np.full(len(binary), -1, dtype=np.int64)
    result[binary.is_valid().to_numpy(zero_copy_only=False)] = checksums % partitions
    return result


def _take(columns: BulkColumns, order: Int64Array) -> BulkColumns:
    """The records in ``order`` (a copy, made by Arrow and numpy)."""
    import pyarrow as pa

    indices = pa.Array.from_buffers(pa.int64(), len(order), [None, pa.py_buffer(order)])
    return BulkColumns(
        columns.values.take(indices),
        None if columns.keys is None else columns.keys.take(indices),
        None if columns.headers is None else columns.headers.take(indices),
        columns.timestamps if isinstance(columns.timestamps, int) else columns.timestamps[order],
    )


def _chunk_bounds(sizes: Int64Array, budget: int) -> list[tuple[int, int, int]]:
    """Split records into runs of at most ``budget`` bytes (a larger record goes alone):
    (start, stop, bytes) of each, found with a search over the running total, not a loop over records."""
    import numpy as np

    running = np.cumsum(sizes)
    bounds: list[tuple[int, int, int]] = []
    start, before, n = 0, 0, len(sizes)
    while start < n:
        stop = max(int(np.searchsorted(running, before + budget, side="right")), start + 1)
        total = int(running[stop - 1])
        bounds.append((start, stop, total - before))
        start, before = stop, total
    return bounds


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
      the key (:func:`replay_producer_id`), its epoch is ``replay_epoch`` (0 to 32767) and its sequences
      start at 0 in every partition, without asking the cluster for an id. A second producer with the same
      key and epoch that sends the same records in the same batches (same calls, same partitions) writes
      nothing twice: the leader answers each batch it already holds as a duplicate. A higher epoch fences
      the lower ones of the same key. Its sequence cannot be restarted: where a normal producer would move
      to a new id, a replay producer fails for good (create a new one, which replays from the start).
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
        replay: tuple[int, int] | None = None
        if replay_key is not None:
            if not isinstance(replay_key, str) or not replay_key:
                raise ConfigError("replay_key", f"must be a non-empty str, got {replay_key!r}")
            if not idempotence:
                raise ConfigError("replay_key", "needs idempotence=True (replays are deduplicated by sequence)")
            if (
                not isinstance(replay_epoch, int)
                or isinstance(replay_epoch, bool)
                or not 0 <= replay_epoch <= MAX_PRODUCER_EPOCH
            ):
                raise ConfigError(
                    "replay_epoch", f"must be an int from 0 to {MAX_PRODUCER_EPOCH}, got {replay_epoch!r}"
                )
            replay = (replay_producer_id(replay_key), replay_epoch)
        elif replay_epoch != 0:
            raise ConfigError("replay_epoch", "is only meaningful with replay_key")
        self._client = ClusterClient(
            bootstrap,
            request_timeout_s=request_timeout_s,
            metadata_max_age_s=metadata_max_age_s,
            tls=tls,
            user=user,
            password=password,
        )
        self._topics: dict[str, _TopicInfo] = {}
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
            return info
        max_bytes = int(metadata.configs.get("max.message.bytes", DEFAULT_MAX_MESSAGE_BYTES))
        learned = self._learned_max_bytes.get(topic)
        info = _TopicInfo(
            metadata,
            len(metadata.partitions),
            min(max_bytes, learned) if learned else max_bytes,
            metadata.configs.get("message.timestamp.type", "CreateTime") == "LogAppendTime",
        )
        self._topics[topic] = info
        return info

    def _uses_append_time(self, topic: str) -> bool:
        info = self._topics.get(topic)
        return info is not None and info.append_time

    def _learn_max_bytes(self, topic: str, max_bytes: int) -> None:
        self._learned_max_bytes[topic] = max_bytes
        self._topics.pop(topic, None)

    def partition_for(self, topic: str, key: bytes | str) -> int:
        """The partition a record with ``key`` goes to: ``crc32c(key bytes) % partition count``."""
        key_bytes = _to_bytes(key, "key")
        if key_bytes is None:
            raise TypeError("key must be bytes or str")
        return partition_for_key(key_bytes, self._topic(topic).partitions)

    # --------------------------------------------------------------------------------------------- send

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
        fatal = self._sender.fatal_error
        if fatal is not None:
            raise fatal
        if self._closed:
            raise ProducerError("the producer is closed")
        value_bytes = _to_bytes(value, "value")
        key_bytes = _to_bytes(key, "key")
        header_items = _to_headers(headers) if headers is not None else None
        timestamp_ms = _to_timestamp_ms(timestamp)
        try:
            info = self._topic(topic)
            if partition is not None:
                if not 0 <= partition < info.partitions:
                    raise UnknownPartitionError(
                        f"topic {topic!r} has {info.partitions} partitions, not {partition}",
                        topic=topic,
                        partition=partition,
                    )
            elif key_bytes is not None:
                partition = partition_for_key(key_bytes, info.partitions)
            size = record_size(value_bytes, key_bytes, header_items)
            if HEADER_SIZE + size > info.max_bytes:
                raise RecordTooLargeError(
                    f"a record of {HEADER_SIZE + size} bytes (batched) exceeds max.message.bytes={info.max_bytes} "
                    f"of topic {topic!r}",
                    max_bytes=info.max_bytes,
                )
            _, future = self._accumulator.append(
                topic,
                partition,
                info.partitions,
                info.max_bytes,
                value_bytes,
                key_bytes,
                header_items,
                timestamp_ms,
                size,
            )
        except RequestTimeoutError:
            raise
        except MultiraftError as exc:
            future = Future()
            future.set_running_or_notify_cancel()
            future.set_exception(exc)
        if callback is not None:
            future.add_done_callback(_adapt(callback))
        return future

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
        fatal = self._sender.fatal_error
        if fatal is not None:
            raise fatal
        if self._closed:
            raise ProducerError("the producer is closed")
        value_column = _binary_column(values, "values")
        n = len(value_column)
        key_column = None if keys is None else _binary_column(keys, "keys")
        header_column = None if headers is None else _headers_column(headers)
        for name, column in (("keys", key_column), ("headers", header_column)):
            if column is not None and len(column) != n:
                raise ValueError(f"{name} has {len(column)} entries for {n} values")
        columns = BulkColumns(value_column, key_column, header_column, _timestamps_column(timestamps, n))
        future: Future[list[BatchMetadata]] = Future()
        future.set_running_or_notify_cancel()  # queued records cannot be taken back
        if n == 0:
            future.set_result([])
            return future
        try:
            info = self._topic(topic)
            sizes = _record_sizes(columns)
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
            groups, sticky = self._partition_records(topic, info.partitions, columns, sizes, partition)
            budget = min(self._accumulator.batch_bytes, info.max_bytes) - HEADER_SIZE
            chunks = [
                (TopicPartition(topic, p), part.slice(start, stop), size)
                for p, part, part_sizes in groups
                for start, stop, size in _chunk_bounds(part_sizes, budget)
            ]
            call = BulkCall(future, len(chunks))
            batches = [BulkBatch(tp, call, part, size) for tp, part, size in chunks]
            self._accumulator.append_bulk(batches, sticky)
        except RequestTimeoutError:
            raise
        except MultiraftError as exc:
            future.set_exception(exc)
        return future

    def _partition_records(
        self, topic: str, partitions: int, columns: BulkColumns, sizes: Int64Array, partition: int | None
    ) -> tuple[list[tuple[int, BulkColumns, Int64Array]], int | None]:
        """The records of each partition they go to, in call order, and the sticky partition if one was used."""
        import numpy as np

        if partition is not None:
            if not 0 <= partition < partitions:
                raise UnknownPartitionError(
                    f"topic {topic!r} has {partitions} partitions, not {partition}", topic=topic, partition=partition
                )
            return [(partition, columns, sizes)], None
        targets = None if columns.keys is None else _key_partitions(columns.keys, partitions)
        sticky = None
        if targets is None or int(targets.min()) < 0:
            sticky = self._accumulator.sticky_partition(topic, partitions)
            if targets is None:
                return [(sticky, columns, sizes)], sticky
            targets[targets < 0] = sticky
        first = int(targets[0])
        if bool((targets == first).all()):
            return [(first, columns, sizes)], sticky
        order = np.argsort(targets, kind="stable")
        counts = np.bincount(targets, minlength=partitions)
        grouped, grouped_sizes = _take(columns, order), sizes[order]
        groups = []
        start = 0
        for p in np.flatnonzero(counts).tolist():
            stop = start + int(counts[p])
            groups.append((p, grouped.slice(start, stop), grouped_sizes[start:stop]))
            start = stop
        return groups, sticky

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
