"""Diagnostics a node can switch on by environment variable; off by default.

``MULTIRAFT_DEBUG_ISOLATION=1``: SIGUSR1 toggles a network partition of the node's Raft traffic (tests).
``MULTIRAFT_DEBUG_GC_MS=ms``: log every garbage collection pause longer than that.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from multiraft import raft
from multiraft.logging import get_logger

__all__ = ["Isolation", "record_gc_pauses", "DEBUG_ISOLATION", "DEBUG_GC_MS"]

log = get_logger(__name__)

DEBUG_ISOLATION = "MULTIRAFT_DEBUG_ISOLATION"
DEBUG_GC_MS = "MULTIRAFT_DEBUG_GC_MS"


@dataclass
class Isolation:
    """A network partition of one node's Raft traffic, for tests (``MULTIRAFT_DEBUG_ISOLATION=1``): SIGUSR1
    toggles it. While it is on, every Raft message to or from a peer is dropped, and the node keeps ticking, so
    its groups time out and campaign; requests between nodes (metadata, status) still pass. Turning it off
    logs what was dropped."""

    node_id: int
    isolated: bool = False
    dropped: collections.Counter[tuple[bool, raft.MessageType]] = field(default_factory=collections.Counter)

    def toggle(self) -> None:
        self.isolated = not self.isolated
        if self.isolated:
            self.dropped.clear()
            log.warning("debug isolation on", node_id=self.node_id)
            return
        sent = {kind: n for (outgoing, kind), n in self.dropped.items() if outgoing}
        log.warning(
            "debug isolation off",
            node_id=self.node_id,
            sent_dropped=sum(sent.values()),
            received_dropped=sum(n for (outgoing, _), n in self.dropped.items() if not outgoing),
            pre_votes_dropped=sent.get(raft.MessageType.PRE_VOTE, 0),
            votes_dropped=sent.get(raft.MessageType.VOTE, 0),
        )

    def drop(self, batches: Iterable[list[tuple[int, raft.Message]]], *, outgoing: bool) -> bool:
        """True (and the messages counted) while isolated."""
        if not self.isolated:
            return False
        for messages in batches:
            self.dropped.update((outgoing, message.type) for _, message in messages)
        return True


def record_gc_pauses(threshold_ms: float) -> None:
    """Log every garbage collection longer than ``threshold_ms`` (diagnostics; MULTIRAFT_DEBUG_GC_MS=ms)."""
    import gc

    started: list[float] = [0.0]

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            pause_ms = (time.perf_counter() - started[0]) * 1000
            if pause_ms >= threshold_ms:
                log.warning(
                    "gc pause", generation=info["generation"], ms=round(pause_ms, 2), collected=info["collected"]
                )

    gc.callbacks.append(callback)
