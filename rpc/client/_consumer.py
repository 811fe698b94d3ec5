"""The Consumer: reads partitions from their leaders, by offset or by time, as Records or Arrow tables.

>>> with Consumer("127.0.0.1:7000", group_id="billing") as consumer:     # doctest: +SKIP
...     consumer.subscribe("events")
...     for record in consumer.poll(timeout_s=1.0):
...         handle(record)

Each assigned partition has a *position*, the offset of the next record ``poll()`` returns. Each partition
is read through one long-lived ``Subscribe`` stream from its leader (:mod:`rpc.client._fetcher`: the leader
pushes batches as they commit), run on one background thread; at most two responses per partition wait
undecoded, and more are decoded only while the partition holds fewer than ``max_poll_records`` records.
A stream that fails (leader moved, node lost, offset out of range) is re-opened at the next offset.
Decoding is done in bulk (:func:`storage.decode_batches`); ``poll_arrow`` never touches single records in
Python. A batch that cannot be decoded stops its partition there: ``poll()`` raises
:class:`CorruptRecordBatchError` until :meth:`Consumer.skip_batch` or a seek moves past it.

With a ``group_id`` the consumer commits positions (the next offset to read, as Kafka) to the cluster and
starts from them; there is no group membership: ``subscribe`` reads every partition of its topics.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from multiraft.errors import (
    ConfigError,
    InvalidArgumentError,
    MultiraftError,
    NotLeaderError,
    OffsetOutOfRangeError,
    UnknownPartitionError,
    UnknownTopicError,
)
from multiraft.logging import get_logger
from rpc.client._cluster import ClusterClient
from rpc.client._fetcher import StreamFetcher
from rpc.client._offsets import list_offsets
from rpc.client._partition_buffer import PartitionBuffer, Reset, Start, by_topic, start_point, take_fairly
from rpc.client._records import Record, TopicPartition, as_topic_partition
from rpc.client._tls import TlsSettings
from rpc.proto import multiraft_pb2 as pb
from storage.batch import headers_type, record_schema

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["Consumer", "Start", "arrow_schema"]

log = get_logger(__name__)

_MIN_PARTITION_FETCH_BYTES = 64 * 1024


def arrow_schema() -> pa.Schema:
    """Schema of :meth:`Consumer.poll_arrow` tables."""
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("topic", pa.string(), nullable=False),
            pa.field("partition", pa.int32(), nullable=False),
            *record_schema(),
            pa.field("headers", headers_type()),
        ]
    )


class Consumer:
    """Reads records from assigned or subscribed partitions. Not thread-safe: use it from one thread.

    Arguments:

    * ``group_id``: names the committed offsets this consumer resumes from and commits to.
    * ``auto_offset_reset``: where to start without a committed offset, and where to go when the
      position is no longer (or not yet) in the log: ``"earliest"`` or ``"latest"``.
    * ``enable_auto_commit`` / ``auto_commit_interval_s``: with a group, commit positions on ``poll()``
      once the interval has passed, and on ``close()``.
    * ``fetch_max_bytes``: split over the partitions (at least 64 KiB each), the most bytes of one
      pushed response (a response always holds at least one batch); at most two wait per partition.
    * ``fetch_max_wait_ms``: accepted for compatibility; the streams wait for new records on the leader
      (its own ``fetch_max_wait_ms``) and push them as they commit.
    * ``max_poll_records``: most records one ``poll()`` returns.
    * ``metadata_max_age_s``: how often a subscription looks for new partitions and topics.
    * ``tls``: reach the cluster over TLS (:class:`TlsSettings`); None: plaintext.
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        group_id: str | None = None,
        auto_offset_reset: Literal["earliest", "latest"] = "latest",
        enable_auto_commit: bool = True,
        auto_commit_interval_s: float = 5.0,
        fetch_max_bytes: int = 4_194_304,
        fetch_max_wait_ms: int = 500,
        max_poll_records: int = 500,
        request_timeout_s: float = 30.0,
        metadata_max_age_s: float = 30.0,
        tls: TlsSettings | None = None,
        user: str | None = None,
        password: str | None = None,
    ) -> None:
        if auto_offset_reset not in ("earliest", "latest"):
            raise ConfigError("auto_offset_reset", f"must be 'earliest' or 'latest', got {auto_offset_reset!r}")
        if group_id is not None and not group_id:
            raise ConfigError("group_id", "must be a non-empty string or None")
        for name, value in (
            ("fetch_max_bytes", fetch_max_bytes),
            ("max_poll_records", max_poll_records),
            ("auto_commit_interval_s", auto_commit_interval_s),
            ("request_timeout_s", request_timeout_s),
            ("metadata_max_age_s", metadata_max_age_s),
        ):
            if value <= 0:
                raise ConfigError(name, f"must be > 0, got {value}")
        if fetch_max_wait_ms < 0:
            raise ConfigError("fetch_max_wait_ms", f"must be >= 0, got {fetch_max_wait_ms}")
        self._client = ClusterClient(
            bootstrap, request_timeout_s=request_timeout_s, tls=tls, user=user, password=password
        )
        self._group_id = group_id
        self._auto_offset_reset = auto_offset_reset
        self._auto_commit = enable_auto_commit and group_id is not None
        self._auto_commit_interval_s = auto_commit_interval_s
        self._next_auto_commit = time.monotonic() + auto_commit_interval_s
        self._fetch_max_bytes = fetch_max_bytes
        self._fetch_max_wait_ms = fetch_max_wait_ms
        self._max_poll_records = max_poll_records
        self._request_timeout_s = request_timeout_s
        self._metadata_max_age_s = metadata_max_age_s
        self._partitions: dict[TopicPartition, PartitionBuffer] = {}
        self._subscription: tuple[str, ...] | None = None
        self._subscription_start: Start = None
        self._next_metadata_check = 0.0
        self._completed = threading.Event()
        self._fetcher = StreamFetcher(
            self._completed.set, credentials=self._client.credentials, interceptors=self._client.aio_interceptors()
        )
        weakref.finalize(self, self._fetcher.close)  # a consumer dropped without close() stops its thread
        self._rotation = 0
        self._closed = False

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --------------------------------------------------------------------------------------- assignment

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]], *, start: Start = None) -> None:
        """Read exactly these partitions (replacing any assignment or subscription).

        ``start``: None resumes at the group's committed offset (else ``auto_offset_reset``); ``"earliest"``,
        ``"latest"``, an offset, or a datetime (the first record at or after it) applies to every partition.
        Partitions that stay assigned keep their position when ``start`` is None.
        """
        self._check_open()
        wanted = [as_topic_partition(p) for p in partitions]
        self._subscription = None
        self._set_assignment(wanted, start, keep=start is None)

    def subscribe(self, topics: str | Iterable[str], *, start: Start = None) -> None:
        """Read every partition of ``topics``, including partitions and topics that appear later (metadata
        is re-read every ``metadata_max_age_s``). ``start`` as in :meth:`assign`; partitions found later
        start at ``start`` too, unless it is an offset (then at the committed offset or the reset policy)."""
        self._check_open()
        names = (topics,) if isinstance(topics, str) else tuple(topics)
        if not names or not all(isinstance(t, str) and t for t in names):
            raise TypeError("subscribe() takes a topic name or an iterable of topic names")
        self._subscription = names
        self._subscription_start = start
        self._set_assignment([], None, keep=False)
        self._refresh_subscription(force=True, start=start)

    def unsubscribe(self) -> None:
        """Drop every partition (assigned or subscribed)."""
        self._subscription = None
        self._set_assignment([], None, keep=False)

    def assignment(self) -> set[TopicPartition]:
        return set(self._partitions)

    def _set_assignment(self, wanted: list[TopicPartition], start: Start, *, keep: bool) -> None:
        previous = self._partitions
        self._partitions = {}
        for tp in wanted:
            state = previous.pop(tp, None) if keep else None
            if state is None:
                state = PartitionBuffer(tp)
                self._apply_start(state, start)
            self._partitions[tp] = state
        for state in previous.values():
            state.close_stream()

    def _apply_start(self, state: PartitionBuffer, start: Start) -> None:
        default = Reset("committed") if self._group_id is not None else Reset(self._auto_offset_reset)
        state.seek(*start_point(start, default))

    def _refresh_subscription(self, *, force: bool = False, start: Start = None) -> None:
        if self._subscription is None:
            return
        now = time.monotonic()
        if not force and now < self._next_metadata_check:
            return
        self._next_metadata_check = now + self._metadata_max_age_s
        try:
            metadata = self._client.metadata(refresh=True)
        except MultiraftError as exc:
            log.debug("metadata refresh failed; keeping the subscription as it is", error=str(exc))
            return
        wanted = [
            TopicPartition(topic, p.partition)
            for topic in self._subscription
            if topic in metadata.topics
            for p in metadata.topics[topic].partitions
        ]
        later_start = None if isinstance(self._subscription_start, int) else self._subscription_start
        added = [tp for tp in wanted if tp not in self._partitions]
        removed = [tp for tp in self._partitions if tp.topic not in metadata.topics]
        if not added and not removed:
            return
        for tp in removed:
            self._partitions.pop(tp).seek(None, None)
        for tp in added:
            state = PartitionBuffer(tp)
            self._apply_start(state, start if force else later_start)
            self._partitions[tp] = state
        log.info("subscription changed", added=[str(tp) for tp in added], removed=[str(tp) for tp in removed])

    # ------------------------------------------------------------------------------------------ seeking

    def _state(self, tp: TopicPartition | tuple[str, int]) -> PartitionBuffer:
        state = self._partitions.get(as_topic_partition(tp))
        if state is None:
            raise InvalidArgumentError(f"{tp} is not assigned to this consumer", field="partition")
        return state

    def _states(self, tps: Sequence[TopicPartition | tuple[str, int]]) -> list[PartitionBuffer]:
        return [self._state(tp) for tp in tps] if tps else list(self._partitions.values())

    def seek(self, tp: TopicPartition | tuple[str, int], offset: int) -> None:
        """Read ``tp`` from ``offset`` on (an offset outside the log resets per ``auto_offset_reset``)."""
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        self._state(tp).seek(offset, None)

    def seek_to_beginning(self, *tps: TopicPartition | tuple[str, int]) -> None:
        """Read from the log start (of every assigned partition when none is named)."""
        for state in self._states(tps):
            state.seek(None, Reset("earliest"))

    def seek_to_end(self, *tps: TopicPartition | tuple[str, int]) -> None:
        """Read only records written from now on."""
        for state in self._states(tps):
            state.seek(None, Reset("latest"))

    def seek_to_timestamp(self, timestamp_ms: int | datetime, *tps: TopicPartition | tuple[str, int]) -> None:
        """Read from the first record whose timestamp is at or after ``timestamp_ms`` (the end if none is)."""
        ms = round(timestamp_ms.timestamp() * 1000) if isinstance(timestamp_ms, datetime) else timestamp_ms
        for state in self._states(tps):
            state.seek(None, Reset("timestamp", ms))

    def position(self, tp: TopicPartition | tuple[str, int]) -> int:
        """The offset of the next record ``poll()`` returns for ``tp``."""
        state = self._state(tp)
        if state.position is None:
            self._resolve([state])
            address = self._client.cached_leader(state.tp.topic, state.tp.partition)
            if address is not None:
                self._fetcher.connect(address)  # connect only: the stream opens on the first poll
        assert state.position is not None
        return state.position

    def lag(self) -> dict[TopicPartition, int]:
        """Records between each assigned partition's position and its high watermark (from the latest
        response, or asked of the leader when there was none)."""
        self._resolve([s for s in self._partitions.values() if s.position is None])
        for state in self._partitions.values():
            stream = state.stream
            if stream is not None and stream.responses:
                with contextlib.suppress(IndexError):  # taken meanwhile
                    state.high_watermark = max(state.high_watermark or 0, stream.responses[-1].high_watermark)
        unknown = [s for s in self._partitions.values() if s.high_watermark is None]
        for topic, states in by_topic(unknown).items():
            ends = self._list_offsets(topic, [s.tp.partition for s in states], "latest")
            for state in states:
                state.high_watermark = ends[state.tp.partition]
        return {tp: max(0, (s.high_watermark or 0) - (s.position or 0)) for tp, s in sorted(self._partitions.items())}

    # ------------------------------------------------------------------------------------------ offsets

    def _resolve(self, states: Iterable[PartitionBuffer]) -> None:
        """Turn pending resets into positions (committed offsets, then ListOffsets)."""
        pending = [s for s in states if s.position is None and s.reset is not None]
        committed = [s for s in pending if s.reset is not None and s.reset.kind == "committed"]
        if committed:
            stored = self._committed_or_none([s.tp for s in committed])
            for state in committed:
                offset = stored.get(state.tp)
                if offset is not None:
                    state.seek(offset, None)
                else:
                    state.reset = Reset(self._auto_offset_reset)
        groups: dict[tuple[str, str, int], list[PartitionBuffer]] = {}
        for state in pending:
            if state.position is None and state.reset is not None:
                key = (state.tp.topic, state.reset.kind, state.reset.timestamp_ms)
                groups.setdefault(key, []).append(state)
        for (topic, kind, timestamp_ms), group in groups.items():
            offsets = self._list_offsets(topic, [s.tp.partition for s in group], kind, timestamp_ms)
            missing = [s for s in group if offsets[s.tp.partition] < 0]  # nothing at or after the time
            if missing:
                ends = self._list_offsets(topic, [s.tp.partition for s in missing], "latest")
                offsets.update(ends)
            for state in group:
                state.seek(offsets[state.tp.partition], None)

    def _committed_or_none(self, tps: list[TopicPartition]) -> dict[TopicPartition, int | None]:
        try:
            return self.committed(tps)
        except MultiraftError as exc:
            if exc.metadata.get("method") != "FetchOffsets":
                raise
            log.warning("the cluster cannot fetch committed offsets; using auto_offset_reset", error=str(exc))
            return {}

    def _list_offsets(self, topic: str, partitions: list[int], kind: str, timestamp_ms: int = 0) -> dict[int, int]:
        return list_offsets(self._client, topic, partitions, kind, timestamp_ms, self._request_timeout_s)

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Store offsets for the group: the NEXT offset to read per partition (default: every position)."""
        group = self._require_group()
        if offsets is None:
            offsets = {tp: s.position for tp, s in self._partitions.items() if s.position is not None}
        if not offsets:
            return
        now_ms = time.time_ns() // 1_000_000
        request = pb.CommitOffsetsRequest(
            group=group,
            offsets=[
                pb.CommittedOffset(topic=tp[0], partition=tp[1], offset=offset, commit_time_ms=now_ms)
                for tp, offset in offsets.items()
            ],
        )
        self._client.call_any_log(lambda stub, timeout: stub.CommitOffsets(request, timeout=timeout))
        self._next_auto_commit = time.monotonic() + self._auto_commit_interval_s

    def committed(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> dict[TopicPartition, int | None]:
        """The group's committed offsets (None where it committed nothing)."""
        group = self._require_group()
        tps = [as_topic_partition(p) for p in partitions]
        if not tps:
            return {}
        request = pb.FetchOffsetsRequest(
            group=group, partitions=[pb.TopicPartition(topic=tp.topic, partition=tp.partition) for tp in tps]
        )
        response = self._client.call_any_log(lambda stub, timeout: stub.FetchOffsets(request, timeout=timeout))
        found = {TopicPartition(o.topic, o.partition): o.offset for o in response.offsets}
        return {tp: (found[tp] if found.get(tp, -1) >= 0 else None) for tp in tps}

    def _require_group(self) -> str:
        if self._group_id is None:
            raise InvalidArgumentError("committed offsets need a consumer with a group_id", field="group_id")
        return self._group_id

    def _maybe_auto_commit(self) -> None:
        if not self._auto_commit or time.monotonic() < self._next_auto_commit:
            return
        try:
            self.commit()
        except MultiraftError as exc:
            self._next_auto_commit = time.monotonic() + self._auto_commit_interval_s
            log.warning("auto-commit failed", group=self._group_id, error=str(exc))

    # --------------------------------------------------------------------------------------------- poll

    def poll(self, timeout_s: float = 1.0, max_records: int | None = None) -> list[Record]:
        """Records from the positions on (at most ``max_records``, default ``max_poll_records``), waiting up
        to ``timeout_s`` for some; advances the positions past them."""
        import pyarrow.compute as pc

        records: list[Record] = []
        for tp, table in self._poll_tables(timeout_s, max_records):
            offsets = table.column("offset").to_pylist()
            timestamps = table.column("timestamp").cast("int64").to_pylist()
            keys = table.column("key").to_pylist()
            values = table.column("value").to_pylist()
            headers = table.column("headers")
            if not pc.sum(pc.list_value_length(headers)).as_py():
                header_tuples: list[tuple[tuple[str, bytes | None], ...]] = [()] * len(offsets)
            else:
                header_tuples = [
                    tuple((h["key"], h["value"]) for h in row) if row else () for row in headers.to_pylist()
                ]
            topic, partition = tp
            records.extend(
                Record(topic, partition, o, t, k, v, h)
                for o, t, k, v, h in zip(offsets, timestamps, keys, values, header_tuples, strict=True)
            )
        return records

    def poll_arrow(self, timeout_s: float = 1.0, max_records: int | None = None) -> pa.Table:
        """Like :meth:`poll`, as one Arrow table (columns: :func:`arrow_schema`)."""
        import pyarrow as pa

        schema = arrow_schema()
        tables = []
        for tp, table in self._poll_tables(timeout_s, max_records):
            n = table.num_rows
            columns = [
                pa.repeat(pa.scalar(tp.topic, pa.string()), n),
                pa.repeat(pa.scalar(tp.partition, pa.int32()), n),
                *table.columns,
            ]
            tables.append(pa.Table.from_arrays(columns, schema=schema))
        if not tables:
            return schema.empty_table()
        return pa.concat_tables(tables) if len(tables) > 1 else tables[0]

    def _poll_tables(self, timeout_s: float, max_records: int | None) -> list[tuple[TopicPartition, pa.Table]]:
        self._check_open()
        limit = self._max_poll_records if max_records is None else max_records
        if limit < 1:
            raise ValueError(f"max_records must be >= 1, got {limit}")
        deadline = time.monotonic() + max(0.0, timeout_s)
        self._maybe_auto_commit()
        self._refresh_subscription()
        self._resolve(list(self._partitions.values()))
        while True:
            self._completed.clear()
            self._collect()
            self._raise_at_corrupt_batch()
            taken = self._take(limit)
            self._send_fetches()
            if taken:
                return taken
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            wake = remaining
            backoffs = [s.backoff_until for s in self._partitions.values() if s.backoff_until > time.monotonic()]
            if backoffs:
                wake = min(wake, max(0.001, min(backoffs) - time.monotonic()))
            self._completed.wait(wake)
            self._refresh_subscription()
            self._resolve(list(self._partitions.values()))

    def _raise_at_corrupt_batch(self) -> None:
        """Once a partition's position reaches a batch that cannot be decoded, every poll raises (as Kafka's
        does) until the application skips it: reading never stops silently."""
        for state in self._partitions.values():
            if state.corrupt is not None and state.buffer is None:
                raise state.corrupt

    def skip_batch(self, tp: TopicPartition | tuple[str, int]) -> int:
        """Move ``tp``'s position past the batch that :class:`CorruptRecordBatchError` named (its records
        are lost to this consumer); returns the new position."""
        state = self._state(tp)
        if state.corrupt is None:
            raise InvalidArgumentError(f"{state.tp} has no batch that failed to decode", field="partition")
        next_offset = state.corrupt.next_offset
        log.warning("skipping a batch that cannot be decoded", partition=str(state.tp), offset=state.corrupt.offset)
        state.seek(next_offset, None)
        return next_offset

    def _take(self, limit: int) -> list[tuple[TopicPartition, pa.Table]]:
        """Up to ``limit`` buffered records, fairly across partitions; advances positions."""
        states = list(self._partitions.values())
        if not states:
            return []
        self._rotation = (self._rotation + 1) % len(states)
        return take_fairly(states, self._rotation, limit)

    # -------------------------------------------------------------------------------------------- fetch

    def _send_fetches(self) -> None:
        """Open a stream for every partition that has a position and none open (after its back-off)."""
        now = time.monotonic()
        ready = [
            s
            for s in self._partitions.values()
            if s.position is not None and s.stream is None and s.backoff_until <= now and s.corrupt is None
        ]
        if not ready:
            return
        max_bytes = max(self._fetch_max_bytes // max(1, len(self._partitions)), _MIN_PARTITION_FETCH_BYTES)
        for state in ready:
            tp = state.tp
            try:
                address = self._client.leader_address(tp.topic, tp.partition)
            except MultiraftError as exc:
                self._fetch_failed(state, exc)
                continue
            if address is None:
                self._client.refresh_metadata_quietly()
                state.back_off()
                continue
            request = pb.SubscribeRequest(
                topic=tp.topic, partition=tp.partition, offset=state.fetch_offset, max_bytes=max_bytes
            )
            state.stream = self._fetcher.open(address, request)

    def _collect(self) -> None:
        """Take in what the streams pushed: decode it into each partition's buffer (while the buffer holds
        fewer than ``max_poll_records`` records), or handle the error that ended a stream."""
        for state in list(self._partitions.values()):
            stream = state.stream
            while (
                stream is not None
                and state.corrupt is None
                and (state.buffer is None or state.buffer.num_rows < self._max_poll_records)
            ):
                response = stream.pop()
                if response is None:
                    break
                state.take_in(response)
            if stream is not None and stream.done and not stream.responses:
                state.stream = None
                if stream.error is not None:
                    self._fetch_failed(state, stream.error)

    def _fetch_failed(self, state: PartitionBuffer, error: MultiraftError) -> None:
        tp = state.tp
        if isinstance(error, OffsetOutOfRangeError):
            start = int(error.metadata.get("log_start_offset", "0") or 0)
            end = int(error.metadata.get("high_watermark", "0") or 0)
            state.max_high_watermark = max(state.max_high_watermark, state.high_watermark or 0)
            if state.fetch_offset > end and end < state.max_high_watermark:
                # A new leader whose high watermark has not caught up yet: the records will be there.
                state.back_off()
                return
            log.warning(
                "fetch position out of range; resetting",
                partition=str(tp),
                offset=state.fetch_offset,
                log_start_offset=start,
                high_watermark=end,
                reset=self._auto_offset_reset,
            )
            state.seek(None, Reset(self._auto_offset_reset))
            return
        if isinstance(error, NotLeaderError):
            self._client.learn_leader(tp.topic, tp.partition, error)
            if not error.leader_id:
                self._client.refresh_metadata_quietly()
            state.back_off()
            return
        if isinstance(error, UnknownTopicError | UnknownPartitionError) and self._subscription is not None:
            self._next_metadata_check = 0.0  # deleted: the subscription drops it
            state.back_off()
            return
        if error.retriable:
            self._client.refresh_metadata_quietly()
            state.back_off()
            return
        raise error

    # -------------------------------------------------------------------------------------------- close

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidArgumentError("the consumer is closed", field="consumer")

    def close(self) -> None:
        """Commit positions (with auto-commit) and release the connections."""
        if self._closed:
            return
        try:
            if self._auto_commit:
                try:
                    self.commit()
                except MultiraftError as exc:
                    log.warning("final auto-commit failed", group=self._group_id, error=str(exc))
        finally:
            self._closed = True
            for state in self._partitions.values():
                state.close_stream()
            self._fetcher.close()
            self._client.close()
