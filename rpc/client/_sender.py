"""The producer's sender: one background thread running an asyncio loop with grpc.aio channels.

It drains ready batches from the accumulator, gives each a producer id and sequence (idempotence), encodes
it once and sends it on the ``ProduceStream`` of the partition's leader node: one stream per node, which
the node answers in request order. Per partition at most ``max_in_flight`` batches are in flight, all on one
stream. When a batch fails retriably (NOT_LEADER, a broken stream, a timeout) the partition stops sending,
waits for the answers to its other in-flight batches, refreshes metadata and re-sends every unacknowledged
batch, with the same bytes, in sequence order to the (new) leader; the leader recognises a batch it already
wrote and answers with the original offset.

Without idempotence a batch is sent at most once: only a batch that provably never left the client (no
connection to the node could be made) is retried; any other failure fails its records.

A batch's sequence numbers are never given to other records unless the leader proved it refused the batch
before proposing it (a failed check, STORAGE_FULL up front, an unknown topic: the later batches then move
down) and no earlier attempt of it ended with its outcome unknown (a refused retry proves nothing of a first
attempt that a leader proposed and a later one committed). Any other failure leaves the outcome unknown, as
the followers may hold the batch: a retriable one (a timeout, a lost stream, NOT_LEADER, UNAVAILABLE, which a
leader also answers when its write failed after the proposal) and an older node's STORAGE_ERROR re-send the
same batch until the delivery timeout; any other failure, and the delivery timeout, fail the partition's
unacknowledged batches and move it to a new producer id, as Kafka's idempotent producer does since KIP-360.

A leader that answers OUT_OF_ORDER_SEQUENCE expecting a sequence beyond a batch's last one already wrote that
batch, too long ago to remember where (Kafka's DUPLICATE_SEQUENCE_NUMBER): the batch succeeds as a duplicate
with offsets unknown (-1). A replay producer (``replay=(id, epoch)``) takes its id and epoch from its caller
instead of ``InitProducer``; as its sequences must match an earlier run's, a broken sequence stops it for
good instead of moving it to a new id.

A node that does not know ``ProduceStream`` (an older version answering UNIMPLEMENTED) is written with
unary ``Produce`` calls, one batch in flight per partition; one that does not know ``InitProducer`` gets
non-idempotent writes, with a warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import grpc.aio

from multiraft.errors import (
    AuthenticationFailedError,
    AuthorizationFailedError,
    ConnectionFailedError,
    MultiraftError,
    NotLeaderError,
    OutOfOrderSequenceError,
    ProducerError,
    ProducerFencedError,
    RecordTooLargeError,
    RequestTimeoutError,
    StorageFailureError,
)
from multiraft.logging import get_logger
from rpc.client._accumulator import ProducerBatch, RecordAccumulator
from rpc.client._aio import cancel_all_tasks
from rpc.client._cluster import CHANNEL_OPTIONS, ClusterClient
from rpc.client._partition_state import PartitionState as _PartitionState
from rpc.client._partition_state import (
    attempt_refused,
    written_long_ago,
    written_prefix,
)
from rpc.client._produce_request import PRODUCE_METHOD
from rpc.client._produce_stream import CONNECT_TIMEOUT_S, NodeStream, connect
from rpc.client._producer_ids import request_producer_id
from rpc.client._records import TopicPartition
from rpc.proto import multiraft_pb2 as pb
from rpc.proto.status import from_proto_error, from_rpc_error
from storage.batch import Compression

__all__ = ["Sender"]

log = get_logger(__name__)


_REFRESH_MIN_INTERVAL_S = 0.1
_IDLE_WAKE_S = 0.2
_STREAM_GRACE_S = 5.0  # beyond the request timeout, before an unanswered stream is given up
_FINISH_TIMEOUT_S = 2.0  # for the streams to answer what they carry when the producer closes
_CANCEL_TIMEOUT_S = 5.0


class Sender:
    """Runs the producer's network side on its own thread."""

    def __init__(
        self,
        client: ClusterClient,
        accumulator: RecordAccumulator,
        *,
        idempotence: bool,
        max_in_flight: int,
        request_timeout_s: float,
        compression: Compression,
        uses_append_time: Callable[[str], bool],
        learn_max_bytes: Callable[[str, int], None],
        replay: tuple[int, int] | None = None,
    ) -> None:
        self.idempotent = idempotence
        self._client = client
        self._accumulator = accumulator
        self._max_in_flight = max_in_flight
        self._request_timeout_s = request_timeout_s
        self._compression = compression
        self._uses_append_time = uses_append_time
        self._learn_max_bytes = learn_max_bytes
        self._states: dict[TopicPartition, _PartitionState] = {}
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._streams: dict[str, NodeStream] = {}
        self._use_streams = True
        self._request_ids = itertools.count(1)
        self._producer: tuple[int, int] | None = replay  # (id, epoch) once InitProducer answered
        self._replay = replay is not None
        self._ready = not idempotence or self._replay
        # Set once the producer cannot go on (fenced, refused credentials, a broken replay): send() raises it.
        self.fatal_error: MultiraftError | None = None
        self._stopping = False
        self._abort: MultiraftError | None = None
        self._refreshing = False
        self._last_refresh = 0.0
        self._tasks: set[asyncio.Future[None]] = set()
        self._wake_requested = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None
        self._started = threading.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="multiraft-producer-metadata")
        self._thread = threading.Thread(target=self._run, name="multiraft-producer-sender", daemon=True)

    # ------------------------------------------------------------------------------ control (any thread)

    def start(self) -> None:
        self._thread.start()
        self._started.wait()

    @property
    def producer_id(self) -> int:
        return self._producer[0] if self._producer is not None else -1

    def wake(self) -> None:
        loop, event = self._loop, self._event
        if loop is None or event is None or self._wake_requested:
            return
        self._wake_requested = True
        with contextlib.suppress(RuntimeError):  # the loop has stopped
            loop.call_soon_threadsafe(event.set)

    def stop(self, abort: MultiraftError | None = None, timeout_s: float | None = None) -> bool:
        """Finish (sending what is waiting, unless ``abort`` fails it) and stop; True once the thread ended."""
        loop = self._loop
        if loop is not None and self._thread.is_alive():

            def request_stop() -> None:
                self._stopping = True
                if abort is not None and self._abort is None:
                    self._abort = abort
                if self._event is not None:
                    self._event.set()

            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(request_stop)
        self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self._executor.shutdown(wait=False)
            return True
        return False

    # ------------------------------------------------------------------------------------ the loop thread

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        self._started.set()
        if not self._ready:
            self._spawn(self._init_producer())
        try:
            while True:
                self._wake_requested = False
                self._event.clear()
                now = time.monotonic()
                if self._abort is not None:
                    self._fail_everything(self._abort)
                    break
                for batch in self._accumulator.expire(now):
                    self._fail(batch, RequestTimeoutError(f"{batch.tp}: not sent within the delivery timeout"))
                next_at = self._dispatch(now)
                self._watch_streams(now)
                if self._stopping and not self._busy():
                    break
                deadline = self._accumulator.next_deadline()
                wake_at = min(t for t in (next_at, deadline, now + _IDLE_WAKE_S) if t is not None)
                if wake_at > now:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._event.wait(), wake_at - now)
                else:
                    await asyncio.sleep(0)
        finally:
            await self._shutdown()

    def _busy(self) -> bool:
        return self._accumulator.has_waiting() or any(s.inflight or s.retry for s in self._states.values())

    async def _shutdown(self) -> None:
        for stream in list(self._streams.values()):
            stream.finish()
        tasks = [stream.task for stream in self._streams.values()]
        if tasks:
            await asyncio.wait(tasks, timeout=_FINISH_TIMEOUT_S)
        for channel in self._channels.values():
            await channel.close(grace=None)
        self._channels.clear()
        # Whatever the cluster did (a node killed or paused mid-call), no task of ours outlives the loop.
        await cancel_all_tasks(_CANCEL_TIMEOUT_S)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _poke(self) -> None:
        if self._event is not None:
            self._event.set()

    # ------------------------------------------------------------------------------------ producer ids

    async def _new_producer_id(self) -> tuple[int, int] | None:
        """A fresh (producer id, epoch) from any node; None if the cluster does not know InitProducer."""
        try:
            return await request_producer_id(
                self._client, self._channel, self._request_timeout_s, lambda: self._stopping
            )
        except (AuthenticationFailedError, AuthorizationFailedError) as error:
            # No retry mends credentials or ACLs: the producer stops, as Kafka's does.
            self.fatal_error = error
            self._fail_everything(error)
            return None

    async def _init_producer(self) -> None:
        producer = await self._new_producer_id()
        if producer is None and not self._stopping and self.fatal_error is None:
            log.warning("the cluster does not support idempotent produce (InitProducer); retries may duplicate")
            self.idempotent = False
        self._producer = producer
        self._ready = True
        self._poke()

    async def _reset_partition(self, state: _PartitionState) -> None:
        producer = await self._new_producer_id()
        if producer is None and self._stopping:
            # Closing before a new id came: the old id's sequences are spent, so what waits cannot be sent.
            error = ProducerError(f"{state.tp}: the producer closed before it had a new producer id")
            for batch in self._accumulator.take(state.tp):
                self._fail(batch, error)
            self._poke()
            return  # still resetting: nothing more goes out under the old id
        if producer is not None:
            state.producer_id, state.producer_epoch = producer
        state.next_sequence = 0
        state.acked_once = False
        state.resetting = False
        log.info("partition producer reset", partition=str(state.tp), producer_id=state.producer_id)
        self._poke()

    # -------------------------------------------------------------------------------------------- sending

    def _state(self, tp: TopicPartition) -> _PartitionState:
        state = self._states.get(tp)
        if state is None:
            state = self._states[tp] = _PartitionState(tp)
            if self._producer is not None:
                state.producer_id, state.producer_epoch = self._producer
        return state

    def _dispatch(self, now: float) -> float | None:
        """Send what may be sent; returns when to look again for a partition that is backing off."""
        if not self._ready or self.fatal_error is not None:
            return None
        next_at: float | None = None
        for state in list(self._states.values()):
            if state.retry and not state.inflight:
                at = self._resend(state, now)
                if at is not None and (next_at is None or at < next_at):
                    next_at = at
        batches, linger_at = self._accumulator.drain(now, lambda tp: self._capacity(tp, now))
        for batch in batches:
            state = self._state(batch.tp)
            if self.idempotent:
                batch.set_producer(state.producer_id, state.producer_epoch, state.next_sequence)
                state.next_sequence += batch.record_count
            address = self._client.cached_leader(batch.tp.topic, batch.tp.partition)
            if address is None:  # a metadata refresh just forgot the leader capacity() saw
                self._retry(state, batch)
                continue
            self._send(state, batch, address)
        if linger_at is not None and (next_at is None or linger_at < next_at):
            next_at = linger_at
        return next_at

    def _capacity(self, tp: TopicPartition, now: float) -> int:
        state = self._state(tp)
        if state.retry or state.resetting or state.reset_error is not None or now < state.backoff_until:
            return 0
        address = self._client.cached_leader(tp.topic, tp.partition)
        if address is None:
            self._request_refresh()
            return 0
        if state.inflight and state.address != address:
            return 0  # never two streams for one partition: wait for the old node's answers
        limit = self._max_in_flight if self._use_streams else 1
        if self.idempotent and not state.acked_once:
            limit = 1
        return limit - len(state.inflight)

    def _resend(self, state: _PartitionState, now: float) -> float | None:
        """Re-send a partition's failed batches in sequence order, or give them up."""
        if state.reset_error is not None:
            error, state.reset_error = state.reset_error, None
            self._give_up_partition(state, error)
            return None
        expired = [b for b in state.retry if b.deadline <= now]
        if expired:
            error = RequestTimeoutError(f"{state.tp}: not acknowledged within the delivery timeout")
            if self.idempotent:
                self._give_up_partition(state, error)
            else:
                for batch in expired:
                    state.retry.remove(batch)
                    self._fail(batch, error)
            return None
        if now < state.backoff_until:
            return state.backoff_until
        if state.resetting:
            return None
        address = self._client.cached_leader(state.tp.topic, state.tp.partition)
        if address is None:
            self._request_refresh()
            self._back_off(state, now)
            return state.backoff_until
        if self.idempotent:
            state.retry.sort(key=lambda b: b.base_sequence)
        limit = self._max_in_flight if self._use_streams else 1
        if self.idempotent and not state.acked_once:
            limit = 1
        resend, state.retry = state.retry[:limit], state.retry[limit:]
        for batch in resend:
            self._send(state, batch, address)
        return None

    def _give_up_partition(self, state: _PartitionState, error: MultiraftError) -> None:
        """Fail every unacknowledged batch of the partition and continue under a new producer id (a
        sequence the leader does not expect would otherwise block the partition for good)."""
        batches, state.retry = state.retry, []
        if self._replay:
            # A new id or restarted sequence would not line up with the run this producer replays: stop (set
            # before the batches fail, so that their callers see the producer stopped).
            self.fatal_error = ProducerError(
                f"replay producer {state.producer_id} stopped: the sequence of {state.tp} broke ({error}); "
                "a new replay producer replays from the start"
            )
        for batch in batches:
            self._fail(batch, error)
        if self.fatal_error is not None:
            self._fail_everything(self.fatal_error)
            return
        if self.idempotent:
            state.resetting = True
            self._spawn(self._reset_partition(state))

    def _send(self, state: _PartitionState, batch: ProducerBatch, address: str) -> None:
        request = batch.produce_request(self._compression, self._request_ids, int(self._request_timeout_s * 1000))
        batch.attempts += 1
        state.sends += 1
        batch.send_index = state.sends
        state.inflight.append(batch)
        state.address = address
        if self._use_streams:
            stream = self._streams.get(address)
            if stream is None or stream.closed:
                stream = self._streams[address] = NodeStream(self, address, self._channel(address))
            stream.send(batch.request_id, batch, request)
        else:
            self._spawn(self._produce_unary(address, batch, request))

    async def _produce_unary(self, address: str, batch: ProducerBatch, request: bytes) -> None:
        channel = self._channel(address)
        if not await connect(channel, CONNECT_TIMEOUT_S):
            self.on_response(batch, None, ConnectionFailedError(f"could not connect to {address}"))
            return
        batch.maybe_written = True
        produce = channel.unary_unary(
            PRODUCE_METHOD, request_serializer=None, response_deserializer=pb.ProduceResponse.FromString
        )
        try:
            response = await produce(request, timeout=self._request_timeout_s)
        except grpc.aio.AioRpcError as exc:
            self.on_response(batch, None, from_rpc_error(exc))
            return
        self.on_response(batch, response, None)

    def _channel(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = self._client.aio_channel(address, CHANNEL_OPTIONS)
        return channel

    def _watch_streams(self, now: float) -> None:
        limit = self._request_timeout_s + _STREAM_GRACE_S
        for stream in self._streams.values():
            if stream.outstanding and now - stream.outstanding[0].sent_at > limit:
                log.warning("produce stream unanswered; reconnecting", address=stream.address)
                stream.give_up()

    # ---------------------------------------------------------------------------------------- answers

    def streams_unsupported(self, address: str) -> None:
        if self._use_streams:
            log.info("the cluster does not support ProduceStream; using unary Produce", address=address)
        self._use_streams = False

    def on_stream_closed(self, stream: NodeStream) -> None:
        if self._streams.get(stream.address) is stream:
            del self._streams[stream.address]

    def on_response(
        self, batch: ProducerBatch, response: pb.ProduceResponse | None, error: MultiraftError | None
    ) -> None:
        state = self._state(batch.tp)
        if batch in state.inflight:
            state.inflight.remove(batch)
        if error is None and response is not None and response.HasField("error"):
            error = from_proto_error(response.error)
        written = 0 if error is None else self._written_prefix(batch, error)
        if written:
            # A replay producer's batch whose first records the leader already holds, cut elsewhere by an
            # earlier attempt (whose input ended early: a task whose process lived on after its driver died).
            # Same sequences, same records: those are written; send the rest.
            log.debug("batch partly written", partition=str(batch.tp), sequence=batch.base_sequence, written=written)
            head, tail = batch.split(written)
            self._accumulator.replace(batch, (head, tail))
            head.complete(-1, True, None)  # where it went is forgotten: offsets unknown
            self._accumulator.release(head)
            state.retry.append(tail)
            if state.first_failed_send is None or batch.send_index < state.first_failed_send:
                state.first_failed_send = batch.send_index  # later batches in flight fail after it: retry them
        elif error is not None and self._written_long_ago(batch, error):
            log.debug("batch already written", partition=str(batch.tp), sequence=batch.base_sequence)
            state.acked_once = True
            state.backoff_s = 0.0
            batch.complete(-1, True, None)  # where it went is forgotten: offsets unknown
            self._accumulator.release(batch)
        elif error is None and response is not None:
            state.acked_once = True
            state.backoff_s = 0.0
            append_time = response.log_append_time_ms if self._uses_append_time(batch.tp.topic) else None
            batch.complete(response.base_offset, response.duplicate, append_time)
            self._accumulator.release(batch)
        else:
            assert error is not None
            first_failed = state.first_failed_send
            follows_failure = first_failed is not None and batch.send_index > first_failed
            if first_failed is None or batch.send_index < first_failed:
                state.first_failed_send = batch.send_index
            self._on_failure(state, batch, error, follows_failure=follows_failure)
        if not state.inflight:
            state.first_failed_send = None
        self._poke()

    def _written_long_ago(self, batch: ProducerBatch, error: MultiraftError) -> bool:
        return written_long_ago(batch, error) if self.idempotent else False

    def _written_prefix(self, batch: ProducerBatch, error: MultiraftError) -> int:
        return written_prefix(batch, error) if self._replay else 0

    def _on_failure(
        self, state: _PartitionState, batch: ProducerBatch, error: MultiraftError, *, follows_failure: bool
    ) -> None:
        tp = batch.tp
        log.debug("batch failed", partition=str(tp), sequence=batch.base_sequence, error=str(error))
        unknown_before = batch.outcome_unknown  # an earlier attempt may have written the batch
        if batch.maybe_written and not attempt_refused(error):
            batch.outcome_unknown = True
        if isinstance(error, NotLeaderError):
            self._client.learn_leader(tp.topic, tp.partition, error)
            if not error.leader_id:
                self._request_refresh()
        elif error.retriable:
            self._request_refresh()
        if self._stopping and self._abort is not None:
            self._fail(batch, error)
            return
        if isinstance(error, ProducerFencedError):
            self.fatal_error = error
            self._fail(batch, error)
            self._fail_everything(error)
            return
        if isinstance(error, RecordTooLargeError):
            max_bytes = int(error.metadata.get("max_bytes", "0") or 0)
            if max_bytes:
                self._learn_max_bytes(tp.topic, max_bytes)
            if batch.record_count > 1:  # not written: send it as two smaller batches, same sequences
                parts = batch.split()
                self._accumulator.replace(batch, parts)
                state.retry.extend(parts)
                return
        if isinstance(error, OutOfOrderSequenceError) and self.idempotent:
            if follows_failure:
                self._retry(state, batch)  # an earlier batch of the round failed: the leader expected that one
            else:
                state.reset_error = error  # the leader expects another sequence than our oldest batch's
                state.retry.append(batch)
            return
        if error.retriable and (self.idempotent or not batch.maybe_written):
            self._retry(state, batch)
            return
        if error.retriable:
            self._fail(batch, error)  # it may have been written; sending it again could duplicate it
            return
        # A refused retry of a batch an earlier attempt may have written frees nothing (nemesis finding 6).
        refused = not batch.maybe_written or attempt_refused(error)
        if not self.idempotent or batch.base_sequence < 0 or (refused and not unknown_before):
            self._reject(state, batch, error)
            return
        # The leader may have written the batch (KIP-360): its sequences are spent, never given to other records.
        if isinstance(error, StorageFailureError):
            # The leader's storage failed mid-write (a node of an older version says so): another leader
            # deduplicates the same batch, or writes it if the followers never got it.
            self._request_refresh()
            self._retry(state, batch)
            return
        state.reset_error = error  # fail it and what follows, and go on under a new producer id
        state.retry.append(batch)

    def _retry(self, state: _PartitionState, batch: ProducerBatch) -> None:
        state.retry.append(batch)
        self._back_off(state, time.monotonic())

    def _back_off(self, state: _PartitionState, now: float) -> None:
        state.back_off(now)

    def _reject(self, state: _PartitionState, batch: ProducerBatch, error: MultiraftError) -> None:
        """The leader refused the batch (it was not written): fail it, and close the gap it leaves in the
        sequence: later batches of the partition move down (the leader refused them as out of order)."""
        self._fail(batch, error)
        state.close_gap(batch)

    def _fail(self, batch: ProducerBatch, error: MultiraftError) -> None:
        batch.fail(error)
        self._accumulator.release(batch)

    def _fail_everything(self, error: MultiraftError) -> None:
        for batch in self._accumulator.take_all():
            self._fail(batch, error)
        for state in self._states.values():
            for batch in (*state.inflight, *state.retry):
                if not batch.done.is_set():
                    self._fail(batch, error)
            state.inflight.clear()
            state.retry.clear()
        for stream in list(self._streams.values()):
            stream.outstanding.clear()
            stream.finish()

    # --------------------------------------------------------------------------------------- metadata

    def _request_refresh(self) -> None:
        now = time.monotonic()
        if self._refreshing or now - self._last_refresh < _REFRESH_MIN_INTERVAL_S or self._loop is None:
            return
        self._refreshing = True
        future = self._loop.run_in_executor(self._executor, self._client.refresh_metadata_quietly)

        def done(_: object) -> None:
            self._refreshing = False
            self._last_refresh = time.monotonic()
            self._poke()

        future.add_done_callback(done)
