"""The values a Producer and a Consumer hand to their user: where a record is, and the record itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["TopicPartition", "RecordMetadata", "BatchMetadata", "Record", "as_topic_partition"]


class TopicPartition(NamedTuple):
    """One partition of a topic."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}/{self.partition}"


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where an acknowledged record was written.

    ``timestamp_ms`` is the record's own timestamp, or the leader's append time for a topic with
    ``message.timestamp.type=LogAppendTime``. ``duplicate`` says the leader recognised the batch as a retry
    of one it had already written (idempotent producers): the offset is where the first copy went, or -1 when it
    was written too long ago for the leader to remember where.
    """

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    duplicate: bool = False

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """Where one acknowledged batch of a ``Producer.send_batch()`` call was written: ``record_count`` records
    at offsets ``base_offset`` to ``last_offset`` of one partition, in the order they were given.

    ``timestamp_ms`` is the timestamp of the batch's first record, or the leader's append time for a topic
    with ``message.timestamp.type=LogAppendTime``. ``duplicate`` as in :class:`RecordMetadata`. A duplicate
    written too long ago for the leader to remember where has ``base_offset`` (and ``last_offset``) -1.
    """

    topic: str
    partition: int
    base_offset: int
    record_count: int
    timestamp_ms: int
    duplicate: bool = False

    @property
    def last_offset(self) -> int:
        return -1 if self.base_offset < 0 else self.base_offset + self.record_count - 1

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class Record(NamedTuple):
    """One consumed record: immutable, compared and hashed by its fields (as kafka-python's ConsumerRecord, a
    named tuple: ``poll()`` builds thousands a call, and a tuple is built in C, about a quarter of the cost of
    a frozen dataclass)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


def as_topic_partition(item: TopicPartition | tuple[str, int]) -> TopicPartition:
    """A (topic, partition) pair as a TopicPartition; TypeError for anything else."""
    topic, partition = item
    if not isinstance(topic, str) or not isinstance(partition, int) or partition < 0:
        raise TypeError(f"a partition is (topic: str, partition: int >= 0), not {item!r}")
    return TopicPartition(topic, partition)
