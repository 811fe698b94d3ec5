"""Lifeguard suspicion: a timeout that starts long and shortens as independent members confirm it.

A suspicion starts at the unconfirmed (maximum) timeout when confirmations are expected, and falls
logarithmically towards the minimum as ``k`` distinct members report the same suspicion. A member that is
really dead is confirmed quickly by many probers; a member that one slow node wrongly accuses gets the
longest time to refute.
"""

from __future__ import annotations

import math

__all__ = ["Suspicion", "suspicion_timeout"]


def suspicion_timeout(elapsed_confirmations: int, expected: int, shortest: float, longest: float) -> float:
    """Total timeout (from the start of the suspicion) after ``elapsed_confirmations`` of ``expected``."""
    if expected < 1:
        return shortest
    fraction = math.log(elapsed_confirmations + 1.0) / math.log(expected + 1.0)
    raw = longest - fraction * (longest - shortest)
    # Millisecond granularity as in memberlist, so timeouts compare equal across platforms.
    return max(shortest, math.floor(1000.0 * raw) / 1000.0)


class Suspicion:
    """The timer of one suspected member."""

    __slots__ = (
        "_confirmations",
        "_confirmed_by",
        "_expected",
        "_longest",
        "_shortest",
        "accuser",
        "deadline",
        "incarnation",
        "reannounce_at",
        "started",
    )

    def __init__(
        self, accuser: int, incarnation: int, expected: int, shortest: float, longest: float, started: float
    ) -> None:
        self.accuser = accuser
        self.incarnation = incarnation
        self._confirmed_by = {accuser}
        self._confirmations = 0
        self._expected = expected
        self._shortest = shortest
        self._longest = longest
        self.started = started
        self.deadline = started + suspicion_timeout(0, expected, shortest, longest)
        # Halfway through, the holder repeats the accusation once (see Transitions.expire_suspicions).
        self.reannounce_at = started + (self.deadline - started) / 2

    @property
    def confirmations(self) -> int:
        return self._confirmations

    def confirm(self, accuser: int) -> bool:
        """Count a confirmation from ``accuser``; True if it was new and shortened the timeout."""
        if self._confirmations >= self._expected or accuser in self._confirmed_by:
            return False
        self._confirmed_by.add(accuser)
        self._confirmations += 1
        self.deadline = self.started + suspicion_timeout(
            self._confirmations, self._expected, self._shortest, self._longest
        )
        return True
