"""The data service: produce, fetch, subscribe, list offsets and producer ids (event loop).

A produced batch is checked here (size, header, CRC, its body's consistency, producer fields) and handed
to the partition leader's replica on the scheduler thread at once, so that batches handed over in order
(one ProduceStream) are proposed in order; the answer comes when the batch commits. Reads go to the local
log up to the high watermark, so they only ever see committed records.

A proposed batch whose leader failed before it could know the outcome (its own write failed after the append
went to the followers) is answered UNAVAILABLE with ``outcome=unknown``, never a terminal error: the batch
may still commit under the next leader, and an idempotent producer must re-send it, not reuse its sequence.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from multiraft import controller as ctl
from multiraft import trace
from multiraft.errors import (
    AuthorizationFailedError,
    CorruptBatchError,
    InsufficientStorageError,
    InvalidArgumentError,
    MultiraftError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    RequestTimeoutError,
    ResourceExhaustedError,
    StorageFailureError,
    UnavailableError,
)
from multiraft.node.protocols import ClusterView, ControllerClient, LeaderDirectory, StoreHandle
from multiraft.node.replicas.partition import PartitionView
from multiraft.node.replicas.producers import check_granted
from multiraft.node.services.results import FetchResult, ProduceAck
from multiraft.node.threads import LoopOwned
from multiraft.node.vocabulary.partitions import ProduceResult
from multiraft.security.principal import CURRENT_PRINCIPAL
from storage import StorageConfig
from storage.batch import BatchHeader, check_batch
from storage.errors import BatchFormatError, BeforeLogStartError, CorruptionError, StorageError

__all__ = ["DataService", "DataLimits"]


@dataclass(frozen=True, slots=True)
class DataLimits:
    """The node config fields the data service uses (units as in ``NodeConfig``)."""

    max_batch_bytes: int
    produce_timeout_ms: int
    fetch_max_bytes: int
    fetch_max_wait_ms: int
    producer_id_block: int
    # The log store refuses larger entries as a failure of the node: a batch above this is never proposed.
    max_payload_bytes: int = StorageConfig().max_payload_bytes
    fetch_max_bytes_limit: int = 16 * 1024 * 1024
    max_inflight_produce_bytes: int = 256 * 1024 * 1024
    # Authorization on: producer ids are reserved per principal, and only it may produce with them.
    bind_producer_ids: bool = False
    super_users: tuple[str, ...] = ()


def _outcome_unknown(view: PartitionView, exc: Exception) -> UnavailableError:
    """A proposed batch whose fate this leader cannot know (its write failed after the append went to the
    followers, which may commit it under another leader): retriable, so that an idempotent producer re-sends
    the same batch and is deduplicated, instead of a terminal error that would let it reuse the sequence."""
    return UnavailableError(
        f"{view.topic}/{view.partition}: the leader failed after proposing the batch ({exc}); it may be written, "
        "retry it",
        outcome="unknown",
    )


class DataService(LoopOwned):
    """Produce, fetch, subscribe, list offsets, init producer."""

    def __init__(
        self,
        limits: DataLimits,
        cluster: ClusterView,
        leaders: LeaderDirectory,
        store: StoreHandle,
        controller: ControllerClient,
        storage_short: Callable[[], str] = lambda: "",
    ) -> None:
        self._limits = limits
        self._storage_short = storage_short  # what this node's storage is short of ("" when nothing)
        self._cluster = cluster
        self._leaders = leaders
        self._store = store
        self._controller = controller
        self._producer_ids: dict[str, tuple[int, int]] = {}  # principal -> [next, end) of its block here
        self._producer_ids_lock = asyncio.Lock()
        self._inflight_bytes = 0  # of batches handed to the store and not yet committed, failed or timed out

    # ------------------------------------------------------------------------------------------ produce

    async def produce(self, topic: str, partition: int, batch: bytes, timeout_ms: int) -> ProduceAck:
        return await self.begin_produce(topic, partition, batch, timeout_ms)

    def begin_produce(self, topic: str, partition: int, batch: bytes, timeout_ms: int) -> asyncio.Future[ProduceAck]:
        """Check a batch and hand it to the scheduler *now*; the future resolves when the batch commits."""
        loop = asyncio.get_running_loop()
        try:
            view, header = self._check_produce(topic, partition, batch)
            if trace.ON:
                trace.event("leader_received", trace.batch_key(batch))
            if timeout_ms < 0:
                raise InvalidArgumentError("timeout_ms must be >= 0", field="timeout_ms")
            size = len(batch)
            budget = self._limits.max_inflight_produce_bytes
            if self._inflight_bytes + size > budget:
                raise ResourceExhaustedError(
                    f"{self._inflight_bytes} bytes of batches are uncommitted on this node; {size} more would exceed "
                    f"max_inflight_produce_bytes ({budget}): retry later",
                    field="max_inflight_produce_bytes",
                )
        except MultiraftError as exc:
            failed: asyncio.Future[ProduceAck] = loop.create_future()
            failed.set_exception(exc)
            return failed
        committed = self._store.produce(view, batch, header)
        self._inflight_bytes += size
        released = False

        def release(_: object = None) -> None:  # once, at commit, failure or timeout, whichever comes first
            nonlocal released
            if not released:
                released = True
                self._inflight_bytes -= size

        committed.add_done_callback(release)
        timeout_s = (timeout_ms or self._limits.produce_timeout_ms) / 1000
        outcome = asyncio.ensure_future(self._produce_outcome(committed, view, timeout_s))
        outcome.add_done_callback(release)
        return outcome

    def _check_produce(self, topic: str, partition: int, batch: bytes) -> tuple[PartitionView, BatchHeader]:
        view = self._leaders.leader_view(topic, partition)
        short = self._storage_short()
        if short:
            # Kafka's leader answers KAFKA_STORAGE_ERROR when its log dir fails; here nothing failed, the node
            # refuses new data until there is room again (retention, deleted topics, an operator) and serves reads.
            raise InsufficientStorageError(
                f"{topic}/{partition}: node storage is low, writes are refused until there is room: {short}",
                resource=short.partition(":")[0],
            )
        cluster = self._cluster.cluster
        configs = ctl.effective_config(cluster.topics[topic].configs, cluster.cluster_configs)
        limits = self._limits
        limit = min(limits.max_payload_bytes, limits.max_batch_bytes, configs.max_message_bytes)
        if len(batch) > limit:
            # on a tie, the deepest limit is named
            name = (
                "one log entry (max_entry_bytes less the entry header)"
                if limit == limits.max_payload_bytes
                else "the node's max_batch_bytes"
                if limit == limits.max_batch_bytes
                else f"{topic}'s max.message.bytes"
            )
            raise RecordTooLargeError(f"batch of {len(batch)} bytes exceeds {name}: {limit}", max_bytes=limit)
        try:
            # Consistent with itself (counts, lengths, frame sizes, timestamps), so that a reader can trust it.
            header = check_batch(batch)
        except BatchFormatError as exc:
            field = f"batch.{exc.field}" if exc.field else "batch"
            raise CorruptBatchError(f"bad record batch: {exc}", field=field) from exc
        if header.base_offset != 0:
            raise InvalidArgumentError("a produced batch must have base offset 0", field="batch.base_offset")
        if header.producer_id >= 0 and (header.base_sequence < 0 or header.producer_epoch < 0):
            raise InvalidArgumentError(
                "an idempotent batch needs base_sequence >= 0 and producer_epoch >= 0", field="batch.base_sequence"
            )
        if header.producer_id < -1:
            raise InvalidArgumentError("producer_id must be -1 or a producer id", field="batch.producer_id")
        if header.producer_id >= 0:
            check_granted(header.producer_id, header.producer_epoch, self._cluster.cluster.next_producer_id)
            if self._limits.bind_producer_ids and header.producer_id <= ctl.MAX_PRODUCER_ID:
                self._check_owner(header.producer_id)
        return view, header

    def _check_owner(self, producer_id: int) -> None:
        """Producer ids are bound to the principal that obtained them (replay ids, derived by the client from
        a key, are above MAX_PRODUCER_ID and bound to no one)."""
        principal = CURRENT_PRINCIPAL.get()
        if not principal or principal in self._limits.super_users:
            return
        owner = self._cluster.cluster.security.producer_owner(producer_id)
        if owner != principal:
            raise AuthorizationFailedError(
                f"{principal} may not use producer id {producer_id}: it was issued to {owner or 'no principal'}",
                principal=principal,
                operation="write",
                resource_type="producer_id",
                resource_name=str(producer_id),
            )

    async def _produce_outcome(
        self, committed: asyncio.Future[ProduceResult], view: PartitionView, timeout_s: float
    ) -> ProduceAck:
        try:
            result = await asyncio.wait_for(committed, timeout_s)
        except TimeoutError:
            raise RequestTimeoutError(
                f"{view.topic}/{view.partition}: not committed within {timeout_s:g}s (it may still be written)"
            ) from None
        except MultiraftError as exc:
            if not isinstance(exc, StorageFailureError):
                raise
            raise _outcome_unknown(view, exc) from exc
        except Exception as exc:
            raise _outcome_unknown(view, exc) from exc
        return ProduceAck(result.base_offset, result.log_append_time_ms, view.log_start_offset, result.duplicate)

    async def init_producer(self) -> tuple[int, int]:
        """A new producer id (epoch 0), from a block this node reserved from the controller."""
        principal = CURRENT_PRINCIPAL.get() if self._limits.bind_producer_ids else ""
        async with self._producer_ids_lock:
            next_id, end = self._producer_ids.get(principal, (0, 0))
            if next_id >= end:
                request = ctl.AllocateProducerIds(self._limits.producer_id_block, principal)
                outcome = await self._controller.call(request)
                first, count = outcome.producer_ids
                next_id, end = first, first + count
            self._producer_ids[principal] = (next_id + 1, end)
        return next_id, 0

    # -------------------------------------------------------------------------------------------- reads

    async def fetch(
        self, topic: str, partition: int, offset: int, max_bytes: int, max_wait_ms: int, min_bytes: int = 0
    ) -> FetchResult:
        if max_bytes < 0 or max_wait_ms < 0 or min_bytes < 0:
            field = "max_bytes" if max_bytes < 0 else "max_wait_ms" if max_wait_ms < 0 else "min_bytes"
            raise InvalidArgumentError(f"{field} must be >= 0", field=field)
        view = self._leaders.leader_view(topic, partition)
        # clamped like Kafka's fetch.max.bytes: a client asking for 2 GiB gets what the node hands out at once
        max_bytes = min(max_bytes or self._limits.fetch_max_bytes, self._limits.fetch_max_bytes_limit)
        if offset > view.high_watermark and not view.current:
            # A new leader's high watermark catches up once it commits an entry of its term: the offset may
            # well exist, so the client retries rather than resetting (Kafka's OFFSET_NOT_AVAILABLE).
            raise UnavailableError(f"{topic}/{partition}: the new leader is still catching up")
        if offset < view.log_start_offset or offset > view.high_watermark:
            raise OffsetOutOfRangeError(
                f"offset {offset} of {topic}/{partition} is outside [{view.log_start_offset}, {view.high_watermark}]",
                log_start_offset=view.log_start_offset,
                high_watermark=view.high_watermark,
            )
        wait_s = min(max_wait_ms, self._limits.fetch_max_wait_ms) / 1000
        if wait_s > 0 and view.high_watermark - offset <= max(0, min_bytes) // 1024:
            await view.wait_past(offset, wait_s)
        if not view.is_leader:
            raise self._leaders.not_leader(topic, partition, view.group_id)
        try:
            result = view.log.read(offset, max_bytes, max_offset=view.high_watermark)
        except BeforeLogStartError as exc:
            raise OffsetOutOfRangeError(
                f"offset {offset} of {topic}/{partition} was removed by retention",
                log_start_offset=view.log_start_offset,
                high_watermark=view.high_watermark,
            ) from exc
        except CorruptionError as exc:  # never served: the replica repairs itself and another one leads meanwhile
            view.report_damage(exc.index)
            raise UnavailableError(f"{topic}/{partition}: a stored batch failed its check; repairing") from exc
        except StorageError as exc:
            raise StorageFailureError(f"{topic}/{partition}: {exc}") from exc
        return FetchResult(result.data, view.high_watermark, view.log_start_offset, result.next_offset)

    async def subscribe(self, topic: str, partition: int, offset: int, max_bytes: int) -> AsyncIterator[FetchResult]:
        """Committed batches from ``offset`` on, as they commit, until the caller stops or an error ends it."""
        if max_bytes < 0:
            raise InvalidArgumentError("max_bytes must be >= 0", field="max_bytes")
        while True:
            result = await self.fetch(topic, partition, offset, max_bytes, self._limits.fetch_max_wait_ms)
            if result.batches:
                if trace.ON:
                    trace.upto("pushed", topic, partition, result.next_offset)
                yield result
                offset = result.next_offset

    def partition_count(self, topic: str) -> int:
        self._cluster.partition_state(topic, 0)
        return len(self._cluster.cluster.topics[topic].partitions)

    def list_offset(self, topic: str, partition: int, spec: str, timestamp_ms: int = 0) -> int:
        """``earliest``, ``latest`` or ``timestamp`` (first offset at or after it, -1 if none), on the leader."""
        if spec == "timestamp" and timestamp_ms < 0:  # Kafka's -1 and -2 are our LATEST and EARLIEST specs
            raise InvalidArgumentError(
                f"timestamp_ms must be >= 0 with spec TIMESTAMP, got {timestamp_ms}", field="timestamp_ms"
            )
        view = self._leaders.leader_view(topic, partition)
        if spec == "earliest":
            return view.log_start_offset
        if spec == "latest":
            if not view.current:
                raise UnavailableError(f"{topic}/{partition}: the new leader is still catching up")
            return view.high_watermark
        found = view.log.offset_for_timestamp(timestamp_ms)
        if found is not None:
            found = max(found, view.log_start_offset)  # in a segment straddling the DeleteRecords point
        return -1 if found is None or found >= view.high_watermark else found

    async def delete_records(self, topic: str, partition: int, offset: int, timeout_ms: int = 0) -> int:
        """Kafka's DeleteRecords for one partition, on its leader: records before ``offset`` (-1: the high
        watermark) are deleted on every replica; the new log start offset (low watermark)."""
        if timeout_ms < 0:
            raise InvalidArgumentError("timeout_ms must be >= 0", field="timeout_ms")
        view = self._leaders.leader_view(topic, partition)
        timeout_s = (timeout_ms or self._limits.produce_timeout_ms) / 1000
        return await self._store.delete_records(view, offset, timeout_s)
