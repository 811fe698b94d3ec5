"""What the producer's sender knows of one partition, and the rules it applies to a failed batch that need no
I/O: whether an error proves the batch was never written, and where the leader's expected sequence puts it."""

from __future__ import annotations

from dataclasses import dataclass, field

from multiraft.errors import (
    InsufficientStorageError,
    InvalidArgumentError,
    InvalidProducerEpochError,
    MultiraftError,
    NotFoundError,
    OutOfOrderSequenceError,
    UnknownProducerIdError,
    UnsupportedError,
)
from rpc.client._accumulator import ProducerBatch
from rpc.client._records import TopicPartition

__all__ = ["PartitionState", "refused", "written_long_ago", "written_prefix", "BACKOFF_START_S", "BACKOFF_MAX_S"]

BACKOFF_START_S = 0.02
BACKOFF_MAX_S = 0.5

# Errors that prove the leader refused a batch before proposing it (checks, a node short of storage, a method
# or topic it does not know): the batch was not written and its sequences may go to the next batch.
_REFUSED: tuple[type[MultiraftError], ...] = (
    InvalidArgumentError,
    NotFoundError,
    InsufficientStorageError,
    UnknownProducerIdError,
    InvalidProducerEpochError,
    UnsupportedError,
)


def refused(error: MultiraftError) -> bool:
    """Whether ``error`` proves its batch was never proposed; any other failure leaves the outcome unknown."""
    return isinstance(error, _REFUSED)


@dataclass(eq=False)
class PartitionState:
    """What the sender knows of one partition (loop thread only)."""

    tp: TopicPartition
    producer_id: int = -1
    producer_epoch: int = -1
    next_sequence: int = 0
    acked_once: bool = False  # the first batch of a producer id goes alone (it fixes where sequences start)
    inflight: list[ProducerBatch] = field(default_factory=list)  # sent, unanswered, in sequence order
    retry: list[ProducerBatch] = field(default_factory=list)  # to re-send, in sequence order
    address: str | None = None  # the node the in-flight batches went to
    backoff_s: float = 0.0
    backoff_until: float = 0.0
    reset_error: MultiraftError | None = None  # the sequence broke: fail what is unacknowledged, new id
    resetting: bool = False
    sends: int = 0
    first_failed_send: int | None = None  # of the in-flight round: later answers may be out of order

    def back_off(self, now: float) -> None:
        """Wait longer before the next send to this partition (doubling, up to BACKOFF_MAX_S)."""
        self.backoff_s = min(max(self.backoff_s * 2, BACKOFF_START_S), BACKOFF_MAX_S)
        self.backoff_until = max(self.backoff_until, now + self.backoff_s)

    def close_gap(self, batch: ProducerBatch) -> None:
        """``batch`` was refused (not written): later batches of its producer id move down into its sequences
        (the leader refused them as out of order)."""
        if batch.base_sequence < 0:
            return
        count = batch.record_count
        for other in (*self.inflight, *self.retry):
            if other.producer_id == batch.producer_id and other.base_sequence > batch.base_sequence:
                other.set_producer(other.producer_id, other.producer_epoch, other.base_sequence - count)
        if self.producer_id == batch.producer_id:
            self.next_sequence -= count


def _expected_sequence(error: MultiraftError) -> int | None:
    if not isinstance(error, OutOfOrderSequenceError):
        return None
    try:
        return int(error.metadata.get("expected_sequence", ""))
    except ValueError:
        return None


def written_long_ago(batch: ProducerBatch, error: MultiraftError) -> bool:
    """Whether the leader refused an idempotent ``batch`` as out of order because it expects a sequence after the
    batch's last one: the batch was written (a producer's sequences are written contiguously, and the leader
    would have recognised it among its last five), only too long ago for the leader to say where."""
    expected = _expected_sequence(error)
    if expected is None or batch.base_sequence < 0:
        return False
    # Between first and last: the batch overlaps what was written with other boundaries: see written_prefix.
    return expected > batch.last_sequence


def written_prefix(batch: ProducerBatch, error: MultiraftError) -> int:
    """How many leading records of a replay producer's ``batch`` the leader already holds: it refused the batch
    as out of order and expects a sequence inside it (0 otherwise).

    A replay producer sends the same records under the same sequences every time, but an earlier attempt may
    have cut them into other batches: one whose input ended early (the Spark task of a killed driver lives on
    in its Python worker, sees its input end and writes its last rows as a short run) wrote a prefix of the run
    the replay sends whole. Those records are the replay's own first records."""
    expected = _expected_sequence(error)
    if expected is None or batch.base_sequence < 0:
        return 0
    if batch.base_sequence < expected <= batch.last_sequence:
        return expected - batch.base_sequence
    return 0
