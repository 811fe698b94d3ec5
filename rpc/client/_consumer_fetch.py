"""The consumer's reading: open a stream per partition at its leader, take in what the streams push, and
handle the error that ends a stream (reset out of range, follow the leader, back off)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from multiraft import trace
from multiraft.errors import (
    MultiraftError,
    NotLeaderError,
    OffsetOutOfRangeError,
    UnknownPartitionError,
    UnknownTopicError,
)
from multiraft.logging import get_logger
from rpc.client._cluster import ClusterClient
from rpc.client._fetcher import StreamFetcher
from rpc.client._partition_buffer import PartitionBuffer, Reset
from rpc.client._records import TopicPartition
from rpc.proto import multiraft_pb2 as pb

__all__ = ["open_streams", "collect", "fetch_failed"]

log = get_logger(__name__)

_MIN_PARTITION_FETCH_BYTES = 64 * 1024

FetchFailed = Callable[[PartitionBuffer, MultiraftError], None]


def open_streams(
    partitions: Mapping[TopicPartition, PartitionBuffer],
    client: ClusterClient,
    fetcher: StreamFetcher,
    fetch_max_bytes: int,
    failed: FetchFailed,
) -> None:
    """Open a stream for every partition that has a position and none open (after its back-off)."""
    now = time.monotonic()
    ready = [
        s
        for s in partitions.values()
        if s.position is not None and s.stream is None and s.backoff_until <= now and s.corrupt is None
    ]
    if not ready:
        return
    max_bytes = max(fetch_max_bytes // max(1, len(partitions)), _MIN_PARTITION_FETCH_BYTES)
    for state in ready:
        tp = state.tp
        try:
            address = client.leader_address(tp.topic, tp.partition)
        except MultiraftError as exc:
            failed(state, exc)
            continue
        if address is None:
            client.refresh_metadata_quietly()
            state.back_off()
            continue
        request = pb.SubscribeRequest(
            topic=tp.topic, partition=tp.partition, offset=state.fetch_offset, max_bytes=max_bytes
        )
        state.stream = fetcher.open(address, request)


def collect(partitions: Mapping[TopicPartition, PartitionBuffer], max_poll_records: int, failed: FetchFailed) -> None:
    """Take in what the streams pushed: decode it into each partition's buffer (while the buffer holds
    fewer than ``max_poll_records`` records), or handle the error that ended a stream."""
    for state in list(partitions.values()):
        stream = state.stream
        while (
            stream is not None
            and state.corrupt is None
            and (state.buffer is None or state.buffer.num_rows < max_poll_records)
        ):
            response = stream.pop()
            if response is None:
                break
            state.take_in(response)
            if trace.ON:
                trace.upto("client_decoded", state.tp.topic, state.tp.partition, state.fetch_offset)
        if stream is not None and stream.done and not stream.responses:
            state.stream = None
            if stream.error is not None:
                failed(state, stream.error)


def fetch_failed(
    state: PartitionBuffer, error: MultiraftError, client: ClusterClient, auto_offset_reset: str, *, subscribed: bool
) -> bool:
    """Handle the error that ended ``state``'s stream (or raise it); True when a subscription should re-read
    the metadata now (the topic or partition is gone)."""
    tp = state.tp
    if isinstance(error, OffsetOutOfRangeError):
        start = int(error.metadata.get("log_start_offset", "0") or 0)
        end = int(error.metadata.get("high_watermark", "0") or 0)
        state.max_high_watermark = max(state.max_high_watermark, state.high_watermark or 0)
        if state.fetch_offset > end and end < state.max_high_watermark:
            # A new leader whose high watermark has not caught up yet: the records will be there.
            state.back_off()
            return False
        log.warning(
            "fetch position out of range; resetting",
            partition=str(tp),
            offset=state.fetch_offset,
            log_start_offset=start,
            high_watermark=end,
            reset=auto_offset_reset,
        )
        state.seek(None, Reset(auto_offset_reset))
        return False
    if isinstance(error, NotLeaderError):
        client.learn_leader(tp.topic, tp.partition, error)
        if not error.leader_id:
            client.refresh_metadata_quietly()
        state.back_off()
        return False
    if isinstance(error, UnknownTopicError | UnknownPartitionError) and subscribed:
        state.back_off()
        return True
    if error.retriable:
        client.refresh_metadata_quietly()
        state.back_off()
        return False
    raise error
