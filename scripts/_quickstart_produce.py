"""The quickstart's producer thread: paces generated events into ``events`` with ``Producer.send_batch``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import numpy as np
from _quickstart_events import Clock, end_of_stream_marker, event_chunk

from multiraft import BatchMetadata, Producer

__all__ = ["StreamProducer", "send_end_of_stream"]

# Chunks per second: small enough chunks that the stream looks live to Spark, large enough that send_batch
# (one call per chunk, no per-record work in the client) stays cheap.
_CHUNKS_PER_SECOND = 5


class StreamProducer:
    """Sends ``events`` generated events over about ``seconds`` seconds.

    ``acked`` counts acknowledged events (the progress bar follows it); ``error`` holds the first failure.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        events: int,
        seconds: float,
        clock: Clock,
        on_acked: Callable[[int], None],
        seed: int = 7,
        client: dict[str, Any] | None = None,
    ) -> None:
        self._bootstrap = bootstrap
        self._client = client or {}  # TLS and credentials (--secure)
        self._topic = topic
        self._events = events
        self._seconds = seconds
        self._clock = clock
        self._on_acked = on_acked
        self._rng = np.random.default_rng(seed)
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self.sent = 0
        self.acked = 0
        self.error: BaseException | None = None
        self.started_at = 0.0
        self.finished_at = 0.0

        # Composition, not a Thread subclass: Thread's own private names (_bootstrap, _stop) must not clash.
        self._thread = threading.Thread(target=self._run, name="quickstart-producer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout_s: float | None = None) -> None:
        self._thread.join(timeout_s)

    def stop(self) -> None:
        self._stopping.set()

    def _count(self, future: Future[list[BatchMetadata]]) -> None:
        # Runs on the client's sender thread: only count, never block.
        if future.exception() is not None:
            with self._lock:
                if self.error is None:
                    self.error = future.exception()
            return
        records = sum(batch.record_count for batch in future.result())
        with self._lock:
            self.acked += records
        self._on_acked(records)

    def _run(self) -> None:
        try:
            self._produce()
        except BaseException as exc:  # reported by the main thread, which owns the console and the exit status
            with self._lock:
                if self.error is None:
                    self.error = exc

    def _produce(self) -> None:
        chunk = max(100, -(-self._events // max(1, round(self._seconds * _CHUNKS_PER_SECOND))))
        # lz4: JSON compresses well, and each wire batch is compressed once, on the client.
        with Producer(self._bootstrap, compression="lz4", **self._client) as producer:
            self.started_at = time.monotonic()
            futures: list[Future[list[BatchMetadata]]] = []
            for start in range(0, self._events, chunk):
                if self._stopping.is_set() or self.error is not None:
                    return
                # Pace the stream: chunk k is due k/CHUNKS_PER_SECOND seconds after the start (sent at once if late).
                due = self.started_at + (start / chunk) / _CHUNKS_PER_SECOND
                delay = due - time.monotonic()
                if delay > 0 and self._stopping.wait(delay):
                    return
                count = min(chunk, self._events - start)
                keys, values = event_chunk(start, count, self._clock, self._rng)
                future = producer.send_batch(self._topic, values, keys=keys)
                future.add_done_callback(self._count)
                futures.append(future)
                self.sent += count
            for future in futures:
                future.result()  # raises the first failure; acked counts arrive through the callbacks
            self.finished_at = time.monotonic()


def send_end_of_stream(
    bootstrap: str, topic: str, clock: Clock, watermark_delay_ms: int, *, client: dict[str, Any] | None = None
) -> None:
    """Append the end-of-stream marker. Send it only once the Spark job has read every event: a batch that read
    the marker before the last events of another partition would move the watermark past them, and the
    aggregation would drop them as late."""
    key, value = end_of_stream_marker(clock, watermark_delay_ms)
    with Producer(bootstrap, **(client or {})) as producer:
        producer.send(topic, value, key=key).result()
