"""Idempotent producers: what a partition remembers so that a retried batch is never written twice.

Each producer has an id (handed out in blocks by the controller) and an epoch, and numbers its records per
partition; a batch's header carries the id, the epoch and the sequence of its first record. A partition
remembers, per producer, its epoch, the next sequence it expects and its last few batches with their
offsets (as Kafka does, five).

* Every replica updates this state the same way when it applies a data entry, so a new leader has it.
* The leader checks a produced batch against it *and* against the batches in its log that are not applied
  yet (a new leader rescans that suffix), so a retry of a batch the old leader appended is recognised even
  before it commits: the retry then waits for that entry instead of appending a second copy.
* Applying is idempotent: replaying entries the state already covers changes nothing, so the state can be
  restored from a snapshot older than the log position and replayed forward.

Before any of that, :func:`check_granted` refuses ids and epochs nobody granted (Kafka's UNKNOWN_PRODUCER_ID
and INVALID_PRODUCER_EPOCH): an id below 2**62 must be one the controller has handed out (below its
``next_producer_id``), at epoch 0, the only epoch InitProducer grants; a client that needs a new epoch asks
for a new id. Ids from 2**62 up are replay producers' (derived from a key by the client, like Kafka's
transactional.id): their epoch is the key owner's to raise, as the Spark sink does per micro-batch.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

from multiraft import controller as ctl
from multiraft.errors import (
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    UnknownProducerIdError,
)
from multiraft.node.threads import SchedulerOwned, ThreadOwner

__all__ = [
    "ProducerStates",
    "Verdict",
    "RecentBatch",
    "NO_PRODUCER",
    "RETAINED_BATCHES",
    "REPLAY_PRODUCER_IDS_FROM",
    "check_granted",
]

NO_PRODUCER = -1
RETAINED_BATCHES = 5
_EXPIRE_AFTER_MS = 7 * 24 * 3600 * 1000  # a producer silent for a week is forgotten (by entry timestamps)
REPLAY_PRODUCER_IDS_FROM = ctl.MAX_PRODUCER_ID + 1  # 2**62: rpc.client's replay_producer_id sets bit 62


def check_granted(producer_id: int, epoch: int, next_producer_id: int) -> None:
    """Refuse a batch whose producer id the controller never handed out (``next_producer_id`` is its
    high-water mark) or whose epoch InitProducer never granted; replay producer ids pass."""
    if producer_id >= REPLAY_PRODUCER_IDS_FROM:
        return
    if not ctl.FIRST_PRODUCER_ID <= producer_id < next_producer_id:
        raise UnknownProducerIdError(
            f"producer id {producer_id} was never handed out by InitProducer", producer_id=producer_id
        )
    if epoch != 0:
        raise InvalidProducerEpochError(
            f"producer {producer_id}: epoch {epoch} was never granted (InitProducer grants epoch 0; ask it for a "
            "new producer id instead)",
            producer_id=producer_id,
            epoch=epoch,
        )


class RecentBatch(NamedTuple):
    first_sequence: int
    last_sequence: int
    base_offset: int  # -1 while not applied (a batch still in flight on the leader)
    entry_index: int  # Raft index of its entry
    append_time_ms: int = -1  # the leader's clock when it accepted the batch


@dataclass(slots=True)
class _Producer:
    epoch: int
    next_sequence: int
    last_timestamp_ms: int
    batches: deque[RecentBatch] = field(default_factory=lambda: deque(maxlen=RETAINED_BATCHES))


class Verdict(Enum):
    APPEND = "append"  # a new batch, in order
    DUPLICATE = "duplicate"  # already written (or in flight): answer with the original


class ProducerStates(SchedulerOwned):
    """Per-producer state of one partition (scheduler thread)."""

    def __init__(self, owner: ThreadOwner | None = None) -> None:
        self.owner = owner if owner is not None else ThreadOwner("scheduler")  # its partition's
        self._applied: dict[int, _Producer] = {}
        self._in_flight: dict[int, deque[RecentBatch]] = {}  # leader only: appended, not applied yet

    # ------------------------------------------------------------------------------------------ leader side

    def check(self, producer_id: int, epoch: int, first: int, count: int) -> tuple[Verdict, RecentBatch | None]:
        """What to do with a produced batch: append it, or answer with the batch it duplicates.

        Raises :class:`ProducerFencedError` for an old epoch and :class:`OutOfOrderSequenceError` for a gap.
        """
        last = first + count - 1
        applied = self._applied.get(producer_id)
        in_flight = self._in_flight.get(producer_id, ())
        if applied is not None and epoch < applied.epoch:
            raise ProducerFencedError(
                f"producer {producer_id} epoch {epoch} is fenced by epoch {applied.epoch}",
                producer_id=producer_id,
                epoch=applied.epoch,
            )
        for batch in (*in_flight, *(applied.batches if applied is not None and applied.epoch == epoch else ())):
            if batch.first_sequence == first and batch.last_sequence == last:
                return Verdict.DUPLICATE, batch
        expected = self._expected(producer_id, epoch)
        if expected is not None and first != expected:
            if expected > first:
                # Older than the batches we remember: it was written long ago; we no longer know where.
                raise OutOfOrderSequenceError(
                    f"producer {producer_id}: sequence {first} is older than the last {RETAINED_BATCHES} batches",
                    expected_sequence=expected,
                )
            raise OutOfOrderSequenceError(
                f"producer {producer_id}: expected sequence {expected}, got {first}", expected_sequence=expected
            )
        return Verdict.APPEND, None

    def _expected(self, producer_id: int, epoch: int) -> int | None:
        in_flight = self._in_flight.get(producer_id)
        if in_flight:
            return in_flight[-1].last_sequence + 1
        applied = self._applied.get(producer_id)
        if applied is None or applied.epoch != epoch:
            return None  # a new producer or epoch may start anywhere (retries after expiry must not fail)
        return applied.next_sequence

    def track(self, producer_id: int, first: int, count: int, index: int) -> RecentBatch:
        """Remember a batch the leader just appended at ``index``."""
        batch = RecentBatch(first, first + count - 1, -1, index)
        self._in_flight.setdefault(producer_id, deque()).append(batch)
        return batch

    def forget_in_flight(self) -> None:
        """This replica is no longer the leader: what it appended may be overwritten."""
        self._in_flight.clear()

    # ------------------------------------------------------------------------------------ every replica

    def apply(
        self, producer_id: int, epoch: int, first: int, count: int, base_offset: int, index: int, timestamp_ms: int
    ) -> None:
        """Record a committed batch (deterministic, and idempotent under replay)."""
        in_flight = self._in_flight.get(producer_id)
        if in_flight:
            while in_flight and in_flight[0].entry_index <= index:
                in_flight.popleft()
            if not in_flight:
                del self._in_flight[producer_id]
        producer = self._applied.get(producer_id)
        last = first + count - 1
        if producer is None or epoch > producer.epoch:
            producer = self._applied[producer_id] = _Producer(epoch, last + 1, timestamp_ms)
        elif epoch < producer.epoch or any(b.entry_index >= index for b in producer.batches):
            return  # a fenced producer's leftover, or a replay of what the state already holds
        producer.next_sequence = max(producer.next_sequence, last + 1)
        producer.last_timestamp_ms = max(producer.last_timestamp_ms, timestamp_ms)
        producer.batches.append(RecentBatch(first, last, base_offset, index, timestamp_ms))

    def expire(self, now_ms: int) -> None:
        """Forget producers silent for a week of entry time (deterministic: now_ms comes from an entry)."""
        stale = [pid for pid, p in self._applied.items() if now_ms - p.last_timestamp_ms > _EXPIRE_AFTER_MS]
        for producer_id in stale:
            del self._applied[producer_id]

    def __len__(self) -> int:
        return len(self._applied)

    # ----------------------------------------------------------------------------------------- persistence

    def encode(self) -> bytes:
        document = {
            str(pid): [p.epoch, p.next_sequence, p.last_timestamp_ms, [list(batch) for batch in p.batches]]
            for pid, p in self._applied.items()
        }
        return json.dumps(document, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> ProducerStates:
        states = cls()
        for pid, (epoch, next_sequence, last_ts, batches) in json.loads(data).items():
            producer = _Producer(int(epoch), int(next_sequence), int(last_ts))
            producer.batches.extend(RecentBatch(*map(int, b)) for b in batches)
            states._applied[int(pid)] = producer
        return states
