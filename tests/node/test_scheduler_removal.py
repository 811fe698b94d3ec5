"""A group removed while its round is being applied (a topic deleted by an entry of another group applied in
the same round) is not applied: its log is closed, and applying it would look like a disk failure and stop
the node. Found by the wide fuzz of CreateTopic then DeleteTopic (tests/integration/test_fuzz.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from multiraft import raft
from multiraft.node.scheduler.scheduler import RaftGroup, Scheduler
from storage.errors import LogClosedError
from tests.node.test_scheduler import Disk, RecordingMachine, _commits, _leaders, node1


class _RemovesTheOther(RecordingMachine):
    """Applying an entry removes the other group and closes its log, as applying a DeleteTopic does."""

    def __init__(self, disk: Disk, scheduler: Scheduler) -> None:
        super().__init__(disk)
        self.scheduler = scheduler
        self.other: RaftGroup | None = None
        self.closed = False
        self.armed = False

    def apply(self, group: RaftGroup, entries: Sequence[raft.Entry]) -> dict[int, Any]:
        if self.closed:
            raise LogClosedError(f"log {group.group_id} is closed")
        results = super().apply(group, entries)
        other = self.other
        if self.armed and other is not None and self.scheduler.groups.get(other.group_id) is other:
            self.scheduler.remove_group(other.group_id)
            assert isinstance(other.machine, _RemovesTheOther)
            other.machine.closed = True
        return results


def test_a_group_removed_by_an_entry_applied_earlier_in_the_same_round_is_not_applied() -> None:
    with node1(2, (1,)) as node:
        first, second = node.groups
        machines = [_RemovesTheOther(node.disk, node.scheduler) for _ in node.groups]
        for group, machine, other in ((first, machines[0], second), (second, machines[1], first)):
            group.machine = machine
            machine.other = other
        _leaders(node)
        answers: list[tuple[int, Any, BaseException | None]] = []

        def propose_on_both() -> None:  # one round commits both entries
            for machine in machines:
                machine.armed = True
            for group in node.groups:
                group.propose(b"batch", lambda result, error, g=group.group_id: answers.append((g, result, error)))

        node.scheduler.submit(propose_on_both)
        node.wait_until(lambda: len(answers) == 2, "both proposals to be answered")

        assert node.scheduler.alive, "the scheduler stopped as if its disk had failed"
        survivor = next(g for g in node.groups if node.scheduler.groups.get(g.group_id) is g)
        removed = next(g for g in node.groups if g is not survivor)
        assert {g: error is None for g, _, error in answers} == {survivor.group_id: True, removed.group_id: False}
        for machine in machines:
            machine.armed = False
        assert _commits(node, survivor)[1] is None
