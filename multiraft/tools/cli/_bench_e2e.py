"""``multiraft bench e2e``'s consumer side: warming it up and turning polled records into latency samples."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any

from multiraft import trace
from multiraft.tools.cli._bench_cluster import Target
from multiraft.tools.cli._bench_worker import STAMP

__all__ = ["Reader", "take_samples", "warm_up"]

_POLL_S = 0.05  # poll() returns as soon as a record is there; this only bounds how late stop() is seen


def take_samples(records: Iterable[Any], samples: list[float]) -> None:
    """Append each stamped record's latency (ms, from its send time to now) to ``samples``; with tracing on,
    also a ``polled`` trace line per record (its offset and send time), which the breakdown starts from."""
    now = time.monotonic_ns()
    for record in records:
        value = record.value
        if value is not None and len(value) >= STAMP.size:
            stamp = STAMP.unpack_from(value)[0]
            if stamp:  # 0: a warm-up record
                samples.append((now - stamp) / 1e6)
                if trace.ON:
                    trace.event("polled", f"r{record.topic}/{record.partition}@{record.offset}", f"s{stamp}")


class Reader:
    """Polls the consumer on a thread of its own from ``with`` to its end, so that a record is seen as soon as
    the client has it: with polls taking turns with other work on one thread, a record waits for the turn."""

    def __init__(self, consumer: Any, samples: list[float]) -> None:
        self._consumer = consumer
        self._samples = samples
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-e2e-consumer", daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                take_samples(self._consumer.poll(timeout_s=_POLL_S), self._samples)
        except BaseException as exc:  # raised again on the main thread by __exit__
            self.error = exc

    def __enter__(self) -> Reader:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        if self.error is not None:
            raise self.error


def warm_up(consumer: Any, target: Target, topic: str, partitions: int, rounds: int = 3) -> None:
    """A consumer's first fetches take a second or more (connections, leaders, positions), and it then catches
    up over the next few hundred milliseconds: measured from cold, e2e would report that. So send a few
    records (stamp 0) to every partition, one at a time, and poll until each is seen."""
    from multiraft import Producer

    with Producer(target.bootstrap, linger_ms=0, **target.client) as producer:
        for _ in range(rounds):
            for partition in range(partitions):
                producer.send(topic, STAMP.pack(0), partition=partition).result()
                deadline = time.monotonic() + 10
                while not consumer.poll(timeout_s=0.2) and time.monotonic() < deadline:
                    pass
