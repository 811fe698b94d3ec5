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
starts from them, and ``subscribe`` joins the group: the group's coordinator spreads the partitions over its
members (:mod:`rpc.client._consumer_group_member`), ``poll()`` drives the membership and runs the rebalance callbacks
(:mod:`rpc.client._consumer_group`). Without a group, ``subscribe`` reads every partition of its topics.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from multiraft.consumer_groups import NO_GENERATION
from multiraft.errors import (
    ConfigError,
    InvalidArgumentError,
    MultiraftError,
)
from multiraft.logging import get_logger
from rpc.client._cluster import ClusterClient
from rpc.client._consumer_fetch import collect, fetch_failed, open_streams
from rpc.client._consumer_group import (
    RebalanceCallback,
    Rebalancer,
    log_commit_failure,
    matching_topics,
    start_membership,
    subscription_of,
)
from rpc.client._consumer_group_heartbeat import HeartbeatThread
from rpc.client._consumer_group_link import commit_offsets
from rpc.client._consumer_group_member import GroupMembership, Phase
from rpc.client._consumer_group_settings import MemberSettings, strategies
from rpc.client._consumer_tables import arrow_schema, as_records, as_table
from rpc.client._fetcher import StreamFetcher
from rpc.client._offsets import list_offsets
from rpc.client._partition_buffer import PartitionBuffer, Reset, Start, by_topic, start_point, take_fairly
from rpc.client._records import Record, TopicPartition, as_topic_partition
from rpc.client._tls import TlsSettings
from rpc.proto import multiraft_pb2 as pb

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["Consumer", "Start", "arrow_schema"]

log = get_logger(__name__)


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

    Group membership (with a ``group_id``, once :meth:`subscribe` is called; Kafka's settings of the same names):

    * ``group_instance_id``: static membership; the member comes back to its partitions within
      ``session_timeout_s`` with no rebalance, and ``close()`` does not leave the group.
    * ``session_timeout_s`` / ``heartbeat_interval_s``: the coordinator drops a member whose heartbeats
      (sent by a background thread every ``heartbeat_interval_s``) stop for ``session_timeout_s``.
    * ``max_poll_interval_s``: past it without a ``poll()`` the member leaves the group (the next ``poll()``
      rejoins); also how long a rebalance waits for the member.
    * ``partition_assignment_strategy``: assignor name(s), most preferred first: ``"cooperative-sticky"``
      (default: rebalances move only the partitions that change owner), ``"sticky"``, ``"range"``,
      ``"roundrobin"``.
    * ``client_id`` / ``client_rack``: name the member; rack-aware assignors prefer partitions in its rack.
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
        group_instance_id: str | None = None,
        session_timeout_s: float = 45.0,
        heartbeat_interval_s: float = 3.0,
        max_poll_interval_s: float = 300.0,
        partition_assignment_strategy: str | Sequence[str] = "cooperative-sticky",
        client_id: str = "multiraft-consumer",
        client_rack: str | None = None,
    ) -> None:
        self._member_settings = MemberSettings(
            group_id or "-",  # checked below; the other arguments are checked with or without a group
            group_instance_id,
            session_timeout_s,
            heartbeat_interval_s,
            max_poll_interval_s,
            strategies(partition_assignment_strategy),
            client_id,
            client_rack,
        )
        self._member_settings.validate()
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
        self._subscription: tuple[str, ...] | re.Pattern[str] | None = None
        self._subscription_start: Start = None
        self._membership: GroupMembership | None = None
        self._heartbeat: HeartbeatThread | None = None
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
        self._leave_group()
        self._subscription = None
        self._set_assignment(wanted, start, keep=start is None)

    def subscribe(
        self,
        topics: str | Iterable[str] | re.Pattern[str],
        *,
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
        on_lost: RebalanceCallback | None = None,
        start: Start = None,
    ) -> None:
        """Read ``topics`` (names, or a compiled pattern matching whole topic names, re-checked every
        ``metadata_max_age_s``).

        With a ``group_id`` the consumer joins the group and reads only the partitions the group gives it;
        ``callback(consumer, partitions)`` runs inside ``poll()``/``close()``: ``on_revoke`` before partitions
        are given up (commit there), ``on_lost`` (default ``on_revoke``) when they were taken away (session
        expired, fenced), ``on_assign`` after partitions were given (after every rebalance, maybe empty).
        ``start`` is where partitions without a committed offset start (default ``auto_offset_reset``).
        Without a group it reads every partition, including partitions and topics that appear later; ``start``
        as in :meth:`assign`, and partitions found later start there too unless it is an offset."""
        self._check_open()
        subscription = subscription_of(topics)
        start_point(start, Reset("committed"))  # a bad start fails here, not at the first poll
        if self._group_id is None:
            if on_assign is not None or on_revoke is not None or on_lost is not None:
                raise InvalidArgumentError("rebalance callbacks need a consumer with a group_id", field="group_id")
            self._subscription = subscription
            self._subscription_start = start
            self._set_assignment([], None, keep=False)
            self._refresh_subscription(force=True, start=start)
            return
        if self._membership is None:
            self._set_assignment([], None, keep=False)
            settings = replace(self._member_settings, group_id=self._group_id)
            self._listener = Rebalancer(self, auto_commit=self._auto_commit)
            self._membership, self._heartbeat = start_membership(
                self._client, settings, self._listener, self._completed.set, self._metadata_max_age_s
            )
            weakref.finalize(self, self._heartbeat.stop)
        self._listener.on_assign, self._listener.on_revoke, self._listener.on_lost = on_assign, on_revoke, on_lost
        self._subscription = subscription
        self._subscription_start = start
        self._membership.subscribe(subscription)

    def _leave_group(self) -> None:
        """Stop the membership: revoke (``on_revoke``) and leave (a static member keeps its place)."""
        if self._heartbeat is not None:
            self._heartbeat.stop()
            self._heartbeat = None
        if self._membership is not None:
            try:
                self._membership.close()  # on_revoke may still commit as the member
            finally:
                self._membership = None

    @property
    def member_id(self) -> str:
        """The member id the group's coordinator gave ("" outside a group)."""
        return self._membership.member_id if self._membership is not None else ""

    @property
    def generation(self) -> int:
        """The group generation this consumer is a member of (-1 outside a group)."""
        return self._membership.generation if self._membership is not None else NO_GENERATION

    def unsubscribe(self) -> None:
        """Drop every partition (assigned or subscribed); a group member runs ``on_revoke`` and leaves."""
        self._leave_group()
        self._subscription = None
        self._set_assignment([], None, keep=False)

    def _add_partitions(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            if tp not in self._partitions:
                state = PartitionBuffer(tp)
                state.seek(None, Reset("committed"))
                self._partitions[tp] = state

    def _drop_partitions(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            state = self._partitions.pop(tp, None)
            if state is not None:
                state.close_stream()

    def _commit_positions_quietly(self, partitions: list[TopicPartition]) -> None:
        offsets = {tp: s.position for tp in partitions if (s := self._partitions.get(tp)) and s.position is not None}
        try:
            self.commit(offsets)
        except MultiraftError as exc:
            log_commit_failure(self._group_id, exc, when="revoking partitions")

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
        if self._subscription is None or self._membership is not None:
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
            for topic in matching_topics(self._subscription, metadata.topics)
            if topic in metadata.topics
            for p in metadata.topics[topic].partitions
        ]
        later_start = None if isinstance(self._subscription_start, int) else self._subscription_start
        added = [tp for tp in wanted if tp not in self._partitions]
        topics = set(matching_topics(self._subscription, metadata.topics)) & set(metadata.topics)
        removed = [tp for tp in self._partitions if tp.topic not in topics]
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
                elif self._membership is not None and self._subscription_start is not None:
                    state.seek(*start_point(self._subscription_start, Reset(self._auto_offset_reset)))
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
        """Store offsets for the group: the NEXT offset to read per partition (default: every position).

        A group member commits as itself: a member that is no longer in the group's current generation gets
        :class:`MemberFencedError` (its subclass says why), one whose group is rebalancing
        :class:`GroupRebalancingError`; commit again after the next ``poll()`` (or in ``on_revoke``)."""
        group = self._require_group()
        if offsets is None:
            offsets = {tp: s.position for tp, s in self._partitions.items() if s.position is not None}
        if not offsets:
            return
        if self._membership is not None:
            self._membership.commit(offsets)  # as the member of its generation: a zombie is refused
        else:
            commit_offsets(self._client, group, offsets)
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
        if self._membership is not None and self._membership.phase is Phase.SYNCING:
            return  # the coordinator refuses commits until the new generation is assigned: next poll
        try:
            self.commit()
        except MultiraftError as exc:
            self._next_auto_commit = time.monotonic() + self._auto_commit_interval_s
            log_commit_failure(self._group_id, exc, when="poll")

    # --------------------------------------------------------------------------------------------- poll

    def poll(self, timeout_s: float = 1.0, max_records: int | None = None) -> list[Record]:
        """Records from the positions on (at most ``max_records``, default ``max_poll_records``), waiting up
        to ``timeout_s`` for some; advances the positions past them. With a group subscription it also keeps
        the membership going (joins, rebalances, runs the callbacks)."""
        return as_records(self._poll_tables(timeout_s, max_records))

    def poll_arrow(self, timeout_s: float = 1.0, max_records: int | None = None) -> pa.Table:
        """Like :meth:`poll`, as one Arrow table (columns: :func:`arrow_schema`)."""
        return as_table(self._poll_tables(timeout_s, max_records))

    def _poll_tables(self, timeout_s: float, max_records: int | None) -> list[tuple[TopicPartition, pa.Table]]:
        self._check_open()
        limit = self._max_poll_records if max_records is None else max_records
        if limit < 1:
            raise ValueError(f"max_records must be >= 1, got {limit}")
        deadline = time.monotonic() + max(0.0, timeout_s)
        self._drive_group()
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
            if self._membership is not None and self._membership.retry_at > time.monotonic():
                wake = min(wake, max(0.001, self._membership.retry_at - time.monotonic()))
            self._completed.wait(wake)
            self._drive_group()
            self._refresh_subscription()
            self._resolve(list(self._partitions.values()))

    def _drive_group(self) -> None:
        if self._membership is not None:
            self._membership.poll()

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
        open_streams(self._partitions, self._client, self._fetcher, self._fetch_max_bytes, self._fetch_failed)

    def _collect(self) -> None:
        collect(self._partitions, self._max_poll_records, self._fetch_failed)

    def _fetch_failed(self, state: PartitionBuffer, error: MultiraftError) -> None:
        if fetch_failed(state, error, self._client, self._auto_offset_reset, subscribed=self._subscription is not None):
            self._next_metadata_check = 0.0  # deleted: the subscription drops it

    # -------------------------------------------------------------------------------------------- close

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidArgumentError("the consumer is closed", field="consumer")

    def close(self) -> None:
        """Commit positions (with auto-commit) and release the connections. A group member runs
        ``on_revoke`` and leaves the group at once (a static member keeps its place for its session)."""
        if self._closed:
            return
        try:
            if self._auto_commit and self._membership is None:
                try:
                    self.commit()
                except MultiraftError as exc:
                    log_commit_failure(self._group_id, exc, when="close")
            self._leave_group()  # with auto-commit, revoking commits the positions first
        finally:
            self._closed = True
            for state in self._partitions.values():
                state.close_stream()
            self._fetcher.close()
            self._client.close()
