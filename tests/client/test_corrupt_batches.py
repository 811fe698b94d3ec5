"""A consumer that meets a batch it cannot decode never stalls silently (issue 13): poll() raises
CorruptRecordBatchError naming the topic, partition and offset, on every poll until the application skips
the batch; the records before it are delivered first and those after it after the skip.

The batch here is the issue's: 62 bytes claiming 2^31-1 records with a valid CRC, as a log written before
the produce check may hold. It is served by a fake fetcher (the Subscribe streams are replaced, nothing else),
and then, written into a real node's log before it starts, by a real single-node cluster."""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable
from pathlib import Path

import crc32c
import grpc
import pytest

from multiraft import Consumer, CorruptRecordBatchError, InvalidArgumentError, TopicPartition
from multiraft.tools.launcher import stop_node
from rpc.proto import multiraft_pb2 as pb
from rpc.proto import multiraft_pb2_grpc as pb_grpc
from storage import Entry, EntryKind, LogStore, StorageConfig, encode_batch, read_header
from tests.integration._helpers import Cluster, fetch_all

TP = TopicPartition("events", 0)
LIE = 2**31 - 1


def _lying_batch(base_offset: int) -> bytes:
    """One record whose header claims 2^31-1, CRC recomputed (62 bytes)."""
    batch = bytearray(encode_batch([b"x"], timestamps_ms=1_700_000_000_000, base_offset=base_offset))
    struct.pack_into("<i", batch, 19, LIE)
    struct.pack_into("<I", batch, 13, crc32c.crc32c(bytes(batch[17:])))
    return bytes(batch)


def _batch(values: list[bytes], base_offset: int) -> bytes:
    return encode_batch(values, timestamps_ms=1_700_000_000_000, base_offset=base_offset)


class _Served:
    """What the consumer sees of one Subscribe stream: some responses, then the end."""

    def __init__(self, responses: list[pb.FetchResponse]) -> None:
        self.responses = deque(responses)
        self.done = True
        self.error = None

    def pop(self) -> pb.FetchResponse | None:
        return self.responses.popleft() if self.responses else None

    def cancel(self) -> None:
        self.responses.clear()


class _FakeFetcher:
    """Serves a fixed log: every batch that ends after the asked offset, in one response."""

    def __init__(self, log: list[bytes]) -> None:
        self.log = log
        self.end = read_header(log[-1]).next_offset
        self.opened: list[int] = []

    def open(self, address: str, request: pb.SubscribeRequest) -> _Served:
        self.opened.append(request.offset)
        batches = [b for b in self.log if read_header(b).next_offset > request.offset]
        if not batches:
            return _Served([])
        response = pb.FetchResponse(
            batches=b"".join(batches), high_watermark=self.end, log_start_offset=0, next_offset=self.end
        )
        return _Served([response])

    def connect(self, address: str) -> None:
        pass

    def close(self) -> None:
        pass


def _consumer_of(log: list[bytes]) -> Consumer:
    consumer = Consumer("127.0.0.1:1", fetch_max_wait_ms=0)
    consumer._fetcher = _FakeFetcher(log)  # type: ignore[assignment]
    consumer._client.leader_address = lambda topic, partition: "leader:1"  # type: ignore[method-assign]
    consumer.assign([TP], start=0)
    return consumer


def test_poll_raises_at_a_lying_batch_after_the_records_before_it_on_every_poll_until_skipped() -> None:
    after = LIE + 3
    consumer = _consumer_of([_batch([b"a", b"b", b"c"], 0), _lying_batch(3), _batch([b"d", b"e"], after)])
    with consumer:
        assert [(r.offset, r.value) for r in consumer.poll(0.1)] == [(0, b"a"), (1, b"b"), (2, b"c")]
        for _ in range(3):  # never silently empty: the same error on every poll
            with pytest.raises(CorruptRecordBatchError) as raised:
                consumer.poll(0.1)
            error = raised.value
            assert (error.topic, error.partition, error.offset, error.next_offset) == ("events", 0, 3, after)
            assert "events/0" in str(error) and "offset 3" in str(error)
            assert consumer.position(TP) == 3
        assert consumer.skip_batch(TP) == after
        assert [(r.offset, r.value) for r in consumer.poll(0.1)] == [(after, b"d"), (after + 1, b"e")]
        with pytest.raises(InvalidArgumentError):
            consumer.skip_batch(TP)  # nothing left to skip


def test_a_seek_past_the_bad_batch_reads_on_as_kafka_users_do() -> None:
    consumer = _consumer_of([_lying_batch(0), _batch([b"z"], LIE)])
    with consumer:
        with pytest.raises(CorruptRecordBatchError) as raised:
            consumer.poll(0.1)
        consumer.seek(TP, raised.value.next_offset)
        assert [r.value for r in consumer.poll(0.1)] == [b"z"]


def test_poll_arrow_raises_the_same_error() -> None:
    with _consumer_of([_lying_batch(0)]) as consumer, pytest.raises(CorruptRecordBatchError):
        consumer.poll_arrow(0.1)


def _error_info(exc: grpc.RpcError) -> tuple[grpc.StatusCode, str, dict[str, str]]:
    from google.rpc import error_details_pb2, status_pb2

    for key, value in exc.trailing_metadata() or ():  # type: ignore[attr-defined]
        if key == "grpc-status-details-bin":
            for detail in status_pb2.Status.FromString(value).details:
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                return exc.code(), info.reason, dict(info.metadata)  # type: ignore[attr-defined]
    raise AssertionError(f"no ErrorInfo in {exc!r}")


@pytest.mark.integration
def test_a_raw_grpc_client_sending_the_lying_batch_is_refused_and_the_partition_stays_readable(
    shared_cluster: Cluster,
) -> None:
    shared_cluster.create_topic("liars", partitions=1, replication_factor=3)
    client = shared_cluster.client
    before = [b"before-%d" % i for i in range(5)]
    request = pb.ProduceRequest(topic="liars", partition=0, batch=_batch(before, 0))
    client.call_leader("liars", 0, lambda stub, timeout: stub.Produce(request, timeout=timeout))
    leader = client.leader_address("liars", 0)
    assert leader is not None
    with grpc.insecure_channel(leader) as channel:  # the generated stub, as any gRPC client would
        stub = pb_grpc.LogStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.Produce(pb.ProduceRequest(topic="liars", partition=0, batch=_lying_batch(0)), timeout=30)
        code, reason, metadata = _error_info(refused.value)
        assert (code, reason, metadata["field"]) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "CORRUPT_BATCH",
            "batch.record_count",
        )
        next_offset = stub.Produce(
            pb.ProduceRequest(topic="liars", partition=0, batch=_batch([b"after"], 0)), timeout=30
        )
    assert next_offset.base_offset == 5  # the lie took no offsets
    assert fetch_all(client, "liars", 0) == [(i, v) for i, v in enumerate([*before, b"after"])]
    with Consumer(shared_cluster.bootstrap) as consumer:
        consumer.assign([TopicPartition("liars", 0)], start="earliest")
        seen: list[bytes] = []
        for _ in range(60):
            seen += [r.value for r in consumer.poll(0.5)]
            if len(seen) >= 6:
                break
        assert seen == [*before, b"after"]


@pytest.mark.integration
def test_a_lying_batch_already_in_a_log_raises_at_its_offset_and_can_be_skipped(
    cluster_factory: Callable[..., Cluster],
) -> None:
    # A log written before the produce check: the batch goes straight into the stopped node's store.
    cluster = cluster_factory(nodes=1)
    cluster.create_topic("old-log", partitions=1, replication_factor=1)
    client = cluster.client
    request = pb.ProduceRequest(topic="old-log", partition=0, batch=_batch([b"a", b"b", b"c"], 0))
    client.call_leader("old-log", 0, lambda stub, timeout: stub.Produce(request, timeout=timeout))
    assert stop_node(cluster.info, 1)
    with LogStore.open(Path(cluster.info.nodes[1].directory) / "data", StorageConfig()) as store:
        log = store.log("old-log", 0, create=False)
        index = log.last_index()
        log.append([Entry(index + 1, log.term(index), EntryKind.DATA, 1_700_000_000_000, _lying_batch(0))])
        store.sync()
    cluster.start(1)
    client.metadata(refresh=True)
    request = pb.ProduceRequest(topic="old-log", partition=0, batch=_batch([b"d"], 0))
    after = client.call_leader("old-log", 0, lambda stub, timeout: stub.Produce(request, timeout=timeout))
    assert after.base_offset == 3 + LIE  # the log took the lie: the next batch is 2^31-1 offsets on
    with Consumer(cluster.bootstrap, request_timeout_s=10) as consumer:
        tp = TopicPartition("old-log", 0)
        consumer.assign([tp], start="earliest")
        seen: list[bytes] = []
        error: CorruptRecordBatchError | None = None
        for _ in range(60):
            try:
                seen += [r.value for r in consumer.poll(0.5)]
            except CorruptRecordBatchError as exc:
                error = exc
                break
        assert seen == [b"a", b"b", b"c"]
        assert error is not None and (error.topic, error.partition, error.offset) == ("old-log", 0, 3)
        assert consumer.skip_batch(tp) == 3 + LIE
        for _ in range(60):
            seen += [r.value for r in consumer.poll(0.5)]
            if len(seen) == 4:
                break
        assert seen == [b"a", b"b", b"c", b"d"]
