"""The heartbeat thread of a group member: one daemon thread that calls
:meth:`~rpc.client._consumer_group_member.GroupMembership.beat` every heartbeat interval until stopped.

It touches no partition and runs no callback: it only tells ``poll()`` (through the membership's flags)
that the group rebalances, that the membership is gone, or that it left after ``max_poll_interval_s``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from multiraft.logging import get_logger

__all__ = ["HeartbeatThread"]

log = get_logger(__name__)

_STOP_WAIT_S = 5.0  # a heartbeat in flight gets this long to finish when the consumer closes


class HeartbeatThread:
    """Runs ``beat()`` (which returns the seconds until the next beat) until :meth:`stop`."""

    def __init__(self, beat: Callable[[], float], *, name: str) -> None:
        self._beat = beat
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(_STOP_WAIT_S)

    def _run(self) -> None:
        wait = 0.0
        while not self._stop.wait(wait):
            try:
                wait = self._beat()
            except Exception:  # a bug must not silently end the membership's heartbeats
                log.exception("heartbeat step failed")
                wait = 1.0
