"""Lifeguard local health awareness: a node that misses acks and nacks suspects itself first.

A slow node (overloaded CPU, GC pause, saturated NIC) sees its probes fail and would accuse healthy peers.
Lifeguard keeps a small score of evidence that *this* node is unhealthy, and stretches the node's own probe
interval and timeout by ``score + 1`` so it accuses less while it is slow.
"""

from __future__ import annotations

__all__ = ["Awareness"]


class Awareness:
    """Health score in ``[0, max_multiplier - 1]``; 0 is healthy."""

    __slots__ = ("_max_score", "_score")

    def __init__(self, max_multiplier: int) -> None:
        self._max_score = max_multiplier - 1
        self._score = 0

    @property
    def score(self) -> int:
        return self._score

    def apply_delta(self, delta: int) -> int:
        """Add ``delta`` (clamped to the range) and return the new score."""
        self._score = min(self._max_score, max(0, self._score + delta))
        return self._score

    def scale(self, timeout: float) -> float:
        return timeout * (self._score + 1)
