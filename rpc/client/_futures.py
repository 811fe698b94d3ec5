"""The futures ``Producer.send()`` returns: :class:`concurrent.futures.Future` objects that share one
condition per batch.

A stock Future builds its own ``threading.Condition`` (an RLock and bookkeeping, in Python), which was the
largest single cost of ``send()``. The records of one batch complete together, so they share the batch's
condition. A stock ``result()`` waits on its condition once and takes any wake-up for its own result, so
:class:`RecordFuture` waits in a loop until its own outcome is set: a sibling's completion only wakes it
up to check. Everything else (``add_done_callback``, ``concurrent.futures.wait``, ``as_completed``) is the
stock implementation, which uses the condition only as a lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures._base import FINISHED, RUNNING

from rpc.client._records import RecordMetadata

__all__ = ["RecordFuture"]


class RecordFuture(Future[RecordMetadata]):
    """Running from the start (a sent record cannot be cancelled); completed by the producer's sender."""

    def __init__(self, condition: threading.Condition) -> None:
        self._condition = condition
        self._state = RUNNING
        self._result = None
        self._exception = None
        self._waiters = []
        self._done_callbacks: list[Callable[[Future[RecordMetadata]], object]] = []

    def _wait(self, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._condition:
            while self._state != FINISHED:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return
                self._condition.wait(remaining)

    def result(self, timeout: float | None = None) -> RecordMetadata:
        self._wait(timeout)
        return super().result(0)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait(timeout)
        return super().exception(0)
