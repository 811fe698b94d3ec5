"""The producer's memory bound: every record reserves its estimated size here before it is queued and gives it
back when its batch is acknowledged or fails, so a producer that outruns the cluster blocks instead of growing.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence

from multiraft.errors import ProducerError, RecordTooLargeError, RequestTimeoutError

__all__ = ["BufferPool", "Header", "record_size", "RECORD_OVERHEAD"]

Header = tuple[str, bytes | None]

# Per record in a batch body: value length, key length, header count (i32 each) and a timestamp delta.
RECORD_OVERHEAD = 16
_HEADER_OVERHEAD = 8  # header key and value lengths


def record_size(value: bytes | None, key: bytes | None, headers: Sequence[Header] | None) -> int:
    """Estimated bytes a record adds to an uncompressed batch (an upper bound)."""
    size = RECORD_OVERHEAD + (len(value) if value is not None else 0) + (len(key) if key is not None else 0)
    if headers:
        for name, header_value in headers:
            size += _HEADER_OVERHEAD + len(name.encode()) + (len(header_value) if header_value is not None else 0)
    return size


class BufferPool:
    """Bytes of records waiting in the producer; ``reserve`` blocks while the pool is exhausted.

    ``lock``: the lock that guards it (the accumulator's own, so that ``send()`` reserves and appends under one
    lock); the ``*_locked`` methods are called with it held.
    """

    def __init__(self, capacity: int, lock: threading.Lock | None = None) -> None:
        self.capacity = capacity
        # Read and written under the lock (the accumulator takes its common case inline).
        self.available = capacity
        self._lock = lock or threading.Lock()
        self._cond = threading.Condition(self._lock)
        self.waiting: deque[object] = deque()  # first come, first served: a large send_batch() is not starved
        self.closed = False

    def check(self, size: int) -> None:
        if size > self.capacity:
            raise RecordTooLargeError(
                f"a record of {size} bytes does not fit the producer's buffer_bytes={self.capacity}",
                max_bytes=self.capacity,
            )

    def reserve(self, size: int, timeout_s: float) -> None:
        """Take ``size`` bytes, waiting up to ``timeout_s`` for other records to be acknowledged. Waiters are
        served in arrival order."""
        self.check(size)
        with self._lock:
            self.reserve_locked(size, timeout_s)

    def reserve_locked(self, size: int, timeout_s: float) -> None:
        """``reserve()`` with the lock held (and ``size`` checked); the lock is let go while it waits."""
        if self.closed:
            raise ProducerError("the producer is closed")
        if self.available >= size and not self.waiting:
            self.available -= size
            return
        deadline = time.monotonic() + timeout_s
        ticket = object()
        self.waiting.append(ticket)
        try:
            while self.waiting[0] is not ticket or self.available < size:
                if self.closed:
                    raise ProducerError("the producer closed while send() waited for buffer space")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RequestTimeoutError(
                        f"the producer's buffer ({self.capacity} bytes) stayed full for "
                        f"max_block_s={timeout_s:g}s: records are produced faster than the cluster "
                        "acknowledges them"
                    )
                self._cond.wait(remaining)
            self.available -= size
        finally:
            self.waiting.remove(ticket)
            self._cond.notify_all()  # the next waiter's turn

    def release(self, size: int) -> None:
        if size:
            with self._lock:
                self.release_locked(size)

    def release_locked(self, size: int) -> None:
        self.available += size
        if self.waiting:
            self._cond.notify_all()

    def close(self) -> None:
        with self._lock:
            self.closed = True
            self._cond.notify_all()
