"""An idempotent producer never gives the sequence numbers of a batch that may have been written to other
records (Kafka's KIP-360): after a failure whose outcome is unknown it re-sends the same batch (deduplicated by
the leader) or moves the partition to a new producer id; only a batch the leader refused up front frees its
sequences.

The leader here is a gRPC server in the test process that writes and deduplicates batches as a partition does
(``multiraft.node.replicas.producers``) and, when scripted, answers a batch it wrote with an error, as a leader
whose own
write failed after the append reached its followers would.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from concurrent import futures
from concurrent.futures import Future
from typing import Any

import grpc
import pytest

from multiraft.errors import (
    InsufficientStorageError,
    MultiraftError,
    StorageFailureError,
    UnavailableError,
)
from multiraft.node.replicas.producers import ProducerStates, Verdict
from rpc.client._accumulator import RecordAccumulator, record_size
from rpc.client._records import RecordMetadata
from rpc.client._sender import Sender
from rpc.proto import multiraft_pb2 as pb
from rpc.proto import multiraft_pb2_grpc as pb_grpc
from rpc.proto.status import to_proto_error
from storage.batch import Compression, check_batch, decode_batches

_TOPIC = "orders"
_WAIT_S = 60.0  # a guard against a hang, not a timing assertion


class _Leader(pb_grpc.LogServicer):
    """One partition's leader: a log of record values, the real dedup, and scripted failures."""

    def __init__(self) -> None:
        self.records: list[bytes] = []  # the partition's log: offset -> value
        self.producer_ids: list[int] = []
        self.fail_after_write: list[MultiraftError] = []  # answer the next written batches with these
        self.refuse: list[MultiraftError] = []  # refuse the next batches before writing them
        self.refuse_once_written = 0  # ...but only once the log holds this many records
        self.grant_ids = 1 << 30  # InitProducer answers UNAVAILABLE once it handed out this many ids
        self._states = ProducerStates()
        self._lock = threading.Lock()

    def InitProducer(self, request: pb.InitProducerRequest, context: Any) -> pb.InitProducerResponse:
        with self._lock:
            if len(self.producer_ids) >= self.grant_ids:
                context.abort(grpc.StatusCode.UNAVAILABLE, "the controller has no leader")
            self.producer_ids.append(1000 + len(self.producer_ids))
            return pb.InitProducerResponse(producer_id=self.producer_ids[-1], producer_epoch=0)

    def ProduceStream(
        self, request_iterator: Iterator[pb.ProduceRequest], context: Any
    ) -> Iterator[pb.ProduceResponse]:
        for request in request_iterator:
            with self._lock:
                yield self._produce(request)

    def _produce(self, request: pb.ProduceRequest) -> pb.ProduceResponse:
        if self.refuse and len(self.records) >= self.refuse_once_written:
            return pb.ProduceResponse(sequence=request.sequence, error=to_proto_error(self.refuse.pop(0)))
        header = check_batch(request.batch)
        pid, epoch, first, count = header.producer_id, header.producer_epoch, header.base_sequence, header.record_count
        try:
            verdict, original = self._states.check(pid, epoch, first, count)
        except MultiraftError as exc:
            return pb.ProduceResponse(sequence=request.sequence, error=to_proto_error(exc))
        if verdict is Verdict.DUPLICATE:
            assert original is not None
            return pb.ProduceResponse(sequence=request.sequence, base_offset=original.base_offset, duplicate=True)
        base_offset = len(self.records)
        self.records.extend(decode_batches(request.batch).column("value").to_pylist())
        self._states.apply(pid, epoch, first, count, base_offset, base_offset + 1, 0)
        if self.fail_after_write:
            return pb.ProduceResponse(sequence=request.sequence, error=to_proto_error(self.fail_after_write.pop(0)))
        return pb.ProduceResponse(sequence=request.sequence, base_offset=base_offset)


class _Cluster:
    """What the sender asks of the cluster client: one node leads the partition."""

    def __init__(self, address: str) -> None:
        self.address = address

    def addresses(self) -> list[str]:
        return [self.address]

    def cached_leader(self, topic: str, partition: int) -> str:
        return self.address

    def learn_leader(self, topic: str, partition: int, error: object) -> None:
        pass

    def refresh_metadata_quietly(self) -> None:
        pass

    def aio_channel(self, address: str, options: Sequence[tuple[str, Any]]) -> grpc.aio.Channel:
        return grpc.aio.insecure_channel(address, options=options)


class _Producer:
    def __init__(self, leader: _Leader, replay: tuple[int, int] | None = None) -> None:
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_LogServicer_to_server(leader, self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.accumulator = RecordAccumulator(
            batch_bytes=1 << 16, buffer_bytes=1 << 20, linger_s=0.0, delivery_timeout_s=_WAIT_S, max_block_s=_WAIT_S
        )
        cluster: Any = _Cluster(f"127.0.0.1:{port}")
        self.sender = Sender(
            cluster,
            self.accumulator,
            idempotence=True,
            max_in_flight=5,
            request_timeout_s=_WAIT_S,
            compression=Compression.NONE,
            uses_append_time=lambda topic: False,
            learn_max_bytes=lambda topic, size: None,
            replay=replay,
        )
        self.accumulator.wake = self.sender.wake
        self.sender.start()

    def append(self, value: bytes) -> Future[RecordMetadata]:
        size = record_size(value, None, None)
        _, future = self.accumulator.append(_TOPIC, 0, 1, 1 << 16, value, None, None, 1_700_000_000_000, size)
        self.sender.wake()
        return future

    def send(self, value: bytes) -> tuple[int | None, MultiraftError | None]:
        """Send one record as a batch of its own; (offset, None) once acknowledged, or (None, the error)."""
        try:
            return self.append(value).result(_WAIT_S).offset, None
        except MultiraftError as exc:
            return None, exc

    def close(self) -> None:
        self.accumulator.close()
        self.sender.stop(timeout_s=_WAIT_S)
        self.server.stop(None)


@pytest.fixture
def leader() -> Iterator[_Leader]:
    yield _Leader()


def _send_first_and_second(leader: _Leader) -> tuple[Any, Any]:
    """Send b"first" then b"second" through one producer: each (offset or None, error or None)."""
    producer = _Producer(leader)
    try:
        return producer.send(b"first"), producer.send(b"second")
    finally:
        producer.close()


def _acknowledged_where_the_log_says(leader: _Leader, acked: dict[bytes, int]) -> None:
    for value, offset in acked.items():
        assert leader.records[offset] == value, f"{value!r} acknowledged at {offset} but the log holds another"


def test_a_storage_error_after_the_write_resends_the_same_batch_which_the_leader_deduplicates(leader: _Leader) -> None:
    # An older leader answers STORAGE_ERROR when its own write failed after the append reached its followers.
    leader.fail_after_write = [StorageFailureError("storage failed: disk full")]
    (first, first_error), (second, second_error) = _send_first_and_second(leader)
    assert (first_error, second_error) == (None, None)
    assert leader.records == [b"first", b"second"]  # the retry was recognised, not written twice
    assert first is not None and second is not None
    _acknowledged_where_the_log_says(leader, {b"first": first, b"second": second})


def test_an_unknown_outcome_the_producer_gives_up_moves_the_partition_to_a_new_producer_id(leader: _Leader) -> None:
    # INTERNAL says nothing of whether the batch was written: it fails, and its sequence is never reused.
    leader.fail_after_write = [MultiraftError("internal error in ProduceStream")]
    (first, first_error), (second, second_error) = _send_first_and_second(leader)
    assert first is None and type(first_error) is MultiraftError
    assert second_error is None and second is not None
    assert leader.records == [b"first", b"second"]  # the failed batch may be in the log: here it is
    _acknowledged_where_the_log_says(leader, {b"second": second})
    assert len(leader.producer_ids) == 2


def test_the_leaders_retriable_unknown_outcome_is_retried_under_the_same_sequence(leader: _Leader) -> None:
    leader.fail_after_write = [UnavailableError("the leader failed after proposing the batch", outcome="unknown")]
    (first, first_error), (second, second_error) = _send_first_and_second(leader)
    assert (first, first_error, second, second_error) == (0, None, 1, None)
    assert leader.records == [b"first", b"second"] and len(leader.producer_ids) == 1


def test_a_batch_refused_up_front_frees_its_sequence_for_the_next_batch(leader: _Leader) -> None:
    leader.refuse = [InsufficientStorageError("node storage is low", resource="disk")]
    (first, first_error), (second, second_error) = _send_first_and_second(leader)
    assert first is None and isinstance(first_error, InsufficientStorageError)
    assert (second, second_error) == (0, None)
    assert leader.records == [b"second"] and len(leader.producer_ids) == 1


def test_a_refused_retry_of_a_batch_an_earlier_attempt_may_have_written_does_not_free_its_sequence(
    leader: _Leader,
) -> None:
    # Nemesis finding 6: a leader whose disk was full proposed the batch (its follower got it) and lost
    # leadership before answering; the retry met a leader short of storage, which refused it up front. That
    # refusal says nothing of the first attempt: the batch was committed later, and a next batch given its
    # sequence would be deduplicated against it, acknowledged at its offset, and never written.
    leader.fail_after_write = [UnavailableError("the leader lost leadership after proposing", outcome="unknown")]
    leader.refuse = [InsufficientStorageError("node storage is low", resource="disk")]
    leader.refuse_once_written = 1
    (first, first_error), (second, second_error) = _send_first_and_second(leader)
    assert first is None and isinstance(first_error, InsufficientStorageError)
    assert second_error is None and second is not None
    assert leader.records == [b"first", b"second"]  # the failed batch is in the log, and so is the next one
    _acknowledged_where_the_log_says(leader, {b"second": second})
    assert len(leader.producer_ids) == 2  # its sequence is spent: the partition goes on under a new id


def test_a_replay_producer_stops_rather_than_reuse_a_sequence_whose_outcome_is_unknown(leader: _Leader) -> None:
    # Its sequences must match an earlier run's: no new id either; a new replay producer replays from the start.
    leader.fail_after_write = [MultiraftError("internal error in ProduceStream")]
    producer = _Producer(leader, replay=((1 << 62) + 7, 3))
    try:
        first, first_error = producer.send(b"first")
        fatal = producer.sender.fatal_error  # the producer refuses further sends with it
    finally:
        producer.close()
    assert first is None and first_error is not None
    assert fatal is not None and "replay producer" in str(fatal)
    assert leader.records == [b"first"] and leader.producer_ids == []


def test_a_producer_closed_before_it_has_a_new_producer_id_fails_what_waits(leader: _Leader) -> None:
    # The old id's sequences are spent: the waiting record must not go out under it from sequence 0 again.
    leader.fail_after_write = [MultiraftError("internal error in ProduceStream")]
    leader.grant_ids = 1
    producer = _Producer(leader)
    try:
        first, first_error = producer.send(b"first")
        second = producer.append(b"second")  # waits for a new producer id that does not come
    finally:
        producer.close()
    assert first is None and first_error is not None
    error = second.exception(_WAIT_S)
    assert error is not None, f"acknowledged at {second.result().offset}, but the log holds {leader.records}"
    assert leader.records == [b"first"]
