"""Quorum arithmetic (as etcd's quorum package): what a majority reached, how a vote stands, in a simple or a
joint configuration (``C_old,new``: both majorities must agree). Pure functions over node ids; the
:class:`~multiraft.raft._tracker.ProgressTracker` applies them to its configuration.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from enum import IntEnum

__all__ = ["VoteResult", "majority_index", "majority_vote", "joint_vote"]


class VoteResult(IntEnum):
    """How an election (or CheckQuorum's count of active voters) stands."""

    PENDING = 0
    WON = 1
    LOST = 2


def majority_index(voters: Collection[int], value: Callable[[int], int]) -> int:
    """The largest value that a majority of ``voters`` has reached (no constraint for an empty half: 2**63)."""
    n = len(voters)
    if n == 0:
        return 1 << 63  # an empty half of a non-joint config never holds anything back
    if n == 1:
        for v in voters:
            return value(v)
    values = sorted([value(v) for v in voters], reverse=True)
    return values[n // 2]


def majority_vote(voters: Collection[int], votes: Mapping[int, bool]) -> VoteResult:
    """WON once a majority granted, LOST once one can no longer grant, else PENDING (an empty half: WON)."""
    if not voters:
        return VoteResult.WON
    granted = rejected = 0
    for v in voters:
        vote = votes.get(v)
        if vote is None:
            continue
        if vote:
            granted += 1
        else:
            rejected += 1
    quorum = len(voters) // 2 + 1
    if granted >= quorum:
        return VoteResult.WON
    if granted + (len(voters) - granted - rejected) >= quorum:
        return VoteResult.PENDING
    return VoteResult.LOST


def joint_vote(incoming: Collection[int], outgoing: Collection[int], votes: Mapping[int, bool]) -> VoteResult:
    """How a vote stands in a configuration whose ``outgoing`` half is empty unless it is joint."""
    incoming_result = majority_vote(incoming, votes)
    if not outgoing:
        return incoming_result
    outgoing_result = majority_vote(outgoing, votes)
    if incoming_result is VoteResult.LOST or outgoing_result is VoteResult.LOST:
        return VoteResult.LOST
    if incoming_result is VoteResult.WON and outgoing_result is VoteResult.WON:
        return VoteResult.WON
    return VoteResult.PENDING
