"""Produce on a partition leader, one way down: the replica decides (new batch, duplicate, producer error) and
proposes on the Raft group it is handed, with no scheduler; applying the entry answers the proposal's result
and every retry that waited for it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from multiraft import raft
from multiraft.errors import OutOfOrderSequenceError
from multiraft.node.replicas.partition import PartitionMachine, PartitionView, ProduceResult
from multiraft.node.replicas.raft_group import RaftGroup
from multiraft.node.replicas.raft_log import RaftLogStorage
from multiraft.node.threads import ThreadOwner
from storage import LogStore, StorageConfig, encode_batch, read_header

T0 = 1_700_000_000_000
PRODUCER = 7


@dataclass
class FakeRaw:
    """A leader's Raft core that records what its group proposes."""

    term: int = 1
    leader_id: int = 1
    id: int = 1
    role: raft.Role = raft.Role.LEADER
    quiescent: bool = False
    proposed: list[bytes] = field(default_factory=list)

    def propose(self, payload: bytes, *, kind: raft.EntryKind, timestamp_ms: int) -> int:
        self.proposed.append(payload)
        return len(self.proposed)


@dataclass
class Answer:
    result: Any = None
    error: BaseException | None = None
    calls: int = 0

    def __call__(self, result: Any, error: BaseException | None) -> None:
        self.result, self.error, self.calls = result, error, self.calls + 1


@pytest.fixture
def store(tmp_path: Path) -> Iterator[LogStore]:
    opened = LogStore.open(tmp_path, StorageConfig())
    yield opened
    opened.close()


def leader(store: LogStore) -> tuple[PartitionMachine, RaftGroup, FakeRaw]:
    plog = store.log("t", 0)
    raw = FakeRaw()
    machine = PartitionMachine("t", 0, 1, plog, ThreadOwner("scheduler"), lambda f: f(), PartitionView("t", 0, 1, plog))
    group = RaftGroup(1, cast(raft.RawNode, raw), RaftLogStorage(plog), machine, role=raft.Role.LEADER)
    machine.start(group)
    return machine, group, raw


def batch(sequence: int, records: int = 2) -> bytes:
    values = [b"r%d" % (sequence + i) for i in range(records)]
    return encode_batch(values, timestamps_ms=T0, producer_id=PRODUCER, producer_epoch=0, base_sequence=sequence)


def produce(machine: PartitionMachine, group: RaftGroup, payload: bytes) -> Answer:
    answer = Answer()
    machine.produce(group, payload, read_header(payload), answer)
    return answer


def commit(machine: PartitionMachine, group: RaftGroup, raw: FakeRaw, index: int) -> dict[int, Any]:
    """What the scheduler's round does with the entry at ``index`` once it commits: store it, apply it."""
    entry = raft.Entry(index, raw.term, raft.EntryKind.DATA, T0, raw.proposed[index - 1])
    group.storage.append([entry])
    return machine.apply(group, [entry])


def test_a_new_batch_is_proposed_on_the_group_with_its_completion_waiting_there(store: LogStore) -> None:
    machine, group, raw = leader(store)
    first = produce(machine, group, batch(0))
    assert len(raw.proposed) == 1 and group.pending[1].completion is first
    assert group.wakeups.touched == {1}  # the group asks for the next round itself
    assert commit(machine, group, raw, 1) == {1: ProduceResult(0, T0)}
    assert first.calls == 0  # the scheduler answers it from the result, after the apply


def test_a_retry_of_a_batch_in_flight_waits_for_the_first_copy_and_is_not_proposed_again(store: LogStore) -> None:
    machine, group, raw = leader(store)
    produce(machine, group, batch(0))
    retry = produce(machine, group, batch(0))
    assert len(raw.proposed) == 1 and retry.calls == 0
    commit(machine, group, raw, 1)
    assert (retry.result, retry.error) == (ProduceResult(0, T0, duplicate=True), None)
    again = produce(machine, group, batch(0))  # once committed: answered at once
    assert (again.result, again.error, len(raw.proposed)) == (ProduceResult(0, T0, duplicate=True), None, 1)


def test_a_sequence_gap_is_answered_with_an_error_and_nothing_is_proposed(store: LogStore) -> None:
    machine, group, raw = leader(store)
    produce(machine, group, batch(0))
    commit(machine, group, raw, 1)
    gap = produce(machine, group, batch(5))
    assert isinstance(gap.error, OutOfOrderSequenceError) and len(raw.proposed) == 1


def test_a_retry_waiting_for_its_first_copy_fails_when_this_replica_stops_leading(store: LogStore) -> None:
    machine, group, _ = leader(store)
    machine.on_role_change(group, raft.SoftState(1, raft.Role.LEADER))
    produce(machine, group, batch(0))
    retry = produce(machine, group, batch(0))
    machine.on_role_change(group, raft.SoftState(2, raft.Role.FOLLOWER))
    assert retry.error is not None and getattr(retry.error, "leader_id", None) == 2
