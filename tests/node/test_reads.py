"""Linearizable reads: served only after a quorum confirmed the leader and the apply reached the read's index;
never from a leader that no quorum confirms (one cut off by a partition), which fails them retriable."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from multiraft import raft
from multiraft.errors import NotLeaderError, UnavailableError
from multiraft.node.scheduler.reads import LinearizableReads
from multiraft.node.scheduler.scheduler import RaftGroup
from multiraft.node.threads import ThreadOwner
from multiraft.raft import ReadState


@dataclass
class FakeRaw:
    leader: bool = True
    applied_index: int = 0
    asked: list[bytes] = field(default_factory=list)

    def read_index(self, context: bytes) -> None:
        if not self.leader:
            raise raft.NotLeader("no leader")
        self.asked.append(context)


@dataclass
class FakeGroup:
    raw: FakeRaw
    group_id: int = 7


def _reads(timeout_s: float = 5.0) -> LinearizableReads:
    owner = ThreadOwner("scheduler")
    owner.bind()
    return LinearizableReads(owner, timeout_s)


def _start(reads: LinearizableReads, group: FakeGroup, value: Any) -> list[tuple[Any, BaseException | None]]:
    answers: list[tuple[Any, BaseException | None]] = []
    reads.start(cast(RaftGroup, group), lambda: value, lambda result, error: answers.append((result, error)))
    return answers


def test_a_read_is_served_once_confirmed_and_applied_and_not_before() -> None:
    reads, group = _reads(), FakeGroup(FakeRaw(applied_index=3))
    answers = _start(reads, group, "offsets")
    reads.after_apply(cast(RaftGroup, group), [])
    assert answers == []  # no quorum has confirmed it yet
    reads.after_apply(cast(RaftGroup, group), [ReadState(5, group.raw.asked[0])])
    assert answers == [] and reads.waiting(7)  # confirmed at 5, applied only 3
    group.raw.applied_index = 5
    reads.after_apply(cast(RaftGroup, group), [])
    assert answers == [("offsets", None)] and not reads.waiting(7)


def test_a_read_no_quorum_confirms_fails_retriable_after_its_timeout() -> None:
    reads, group = _reads(timeout_s=0.0), FakeGroup(FakeRaw(applied_index=9))
    answers = _start(reads, group, "stale offsets")  # a leader cut off from its followers: no ReadState comes
    reads.expire()
    assert len(answers) == 1 and answers[0][0] is None and isinstance(answers[0][1], UnavailableError)
    assert answers[0][1].retriable


def test_a_node_that_knows_no_leader_answers_not_leader() -> None:
    reads, group = _reads(), FakeGroup(FakeRaw(leader=False))
    answers = _start(reads, group, "x")
    assert len(answers) == 1 and isinstance(answers[0][1], NotLeaderError)
