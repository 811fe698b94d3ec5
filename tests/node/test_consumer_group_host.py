"""The group coordinators hosted on a ``__consumer_offsets`` leader (multiraft.node.replicas.consumer_group_host),
and the
replicated group records of its state machine (multiraft.node.replicas.offsets), with a scheduler that holds every
proposal until the test commits it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from multiraft import consumer_groups as g
from multiraft import raft
from multiraft.errors import (
    CoordinatorMovedError,
    GroupNotEmptyError,
    GroupRebalancingError,
    MemberIdAssignedError,
    MultiraftError,
    NotLeaderError,
    PartitionNotAssignedError,
    StaleGenerationError,
    UnavailableError,
    UnknownMemberError,
)
from multiraft.node.replicas import offsets as offsets_module
from multiraft.node.replicas.offsets import OffsetsMachine, encode_commit
from multiraft.node.services.local_consumer_groups import serve_group_operation
from multiraft.node.threads import ThreadOwner
from multiraft.node.vocabulary.consumer_groups import (
    GroupDelete,
    GroupDescribe,
    GroupHeartbeat,
    GroupJoin,
    GroupLeave,
    GroupOperation,
    GroupsList,
    GroupSync,
)
from multiraft.node.vocabulary.offsets import CommittedOffset, OffsetsCommit

SETTINGS = g.GroupSettings(min_session_timeout_ms=100, initial_rebalance_delay_ms=0)
SESSION_MS = 1_000


@dataclass
class _Raw:
    id: int = 1
    leader_id: int = 1
    term: int = 2
    conf_state: Any = None
    role: raft.Role = raft.Role.LEADER


@dataclass
class _Storage:
    snapshots: list[bytes] = field(default_factory=list)

    def create_snapshot(self, index: int, conf_state: Any, data: bytes) -> None:
        self.snapshots.append(data)

    def compact(self, index: int) -> None:
        pass


@dataclass
class _Group:
    raw: _Raw = field(default_factory=_Raw)
    storage: _Storage = field(default_factory=_Storage)
    is_leader: bool = True
    leader_id: int = 1
    group_id: int = 7
    proposals: _Scheduler | None = None  # where its proposals wait to be committed

    def propose(self, payload: bytes, completion: Any, *, kind: raft.EntryKind) -> None:
        assert self.proposals is not None
        self.proposals.propose(self, payload, completion, kind=kind)


class _Scheduler:
    """Holds proposals; ``commit`` applies them in order through the machine, ``fail`` refuses them."""

    def __init__(self) -> None:
        self.owner = ThreadOwner("scheduler")
        self.proposed: list[tuple[bytes, Any]] = []
        self.machine: OffsetsMachine | None = None
        self.index = 10

    def propose(self, group: Any, payload: bytes, completion: Any, *, kind: raft.EntryKind) -> None:
        assert kind is raft.EntryKind.CONTROL
        self.proposed.append((payload, completion))

    def commit(self, group: _Group) -> None:
        proposed, self.proposed = self.proposed, []
        assert self.machine is not None
        for payload, completion in proposed:
            self.index += 1
            self.machine.apply(group, [raft.Entry(self.index, group.raw.term, raft.EntryKind.CONTROL, 1, payload)])  # type: ignore[arg-type]
            completion(None, None)

    def fail(self) -> None:
        proposed, self.proposed = self.proposed, []
        for _, completion in proposed:
            completion(None, NotLeaderError("lost the leadership", leader_id=2))


@dataclass
class _Clock:
    now: int = 1_000_000

    def __call__(self) -> int:
        return self.now


@dataclass
class _Answer:
    result: Any = None
    error: BaseException | None = None
    calls: int = 0

    def __call__(self, result: Any, error: BaseException | None) -> None:
        self.result, self.error, self.calls = result, error, self.calls + 1


@dataclass
class Node:
    scheduler: _Scheduler
    machine: OffsetsMachine
    group: _Group
    clock: _Clock

    def call(self, operation: GroupOperation) -> _Answer:
        answer = _Answer()
        self.machine.host.handle(self.group, operation, answer)  # type: ignore[arg-type]
        return answer

    def commit(self) -> None:
        self.scheduler.commit(self.group)


def _node() -> Node:
    scheduler = _Scheduler()
    ids = iter(f"m-{i}" for i in range(1, 100))
    machine = OffsetsMachine("__consumer_offsets", 0, 7, scheduler.owner, lambda _: None, None, SETTINGS)  # type: ignore[arg-type]
    clock = _Clock()
    machine.host._member_ids = lambda _client: next(ids)
    machine.host._clock = clock
    scheduler.machine = machine
    group = _Group(proposals=scheduler)
    node = Node(scheduler, machine, group, clock)
    machine.apply(group, [raft.Entry(1, 2, raft.EntryKind.DATA, 0, b"")])  # type: ignore[arg-type]  # current
    return node


def _join(member: str = "", instance: str | None = None) -> GroupJoin:
    request = g.JoinRequest(member, SESSION_MS, 5_000, ("range",), g.Subscription(("t",)), instance)
    return GroupJoin("billing", request)


def _one_member_group(node: Node) -> tuple[str, int]:
    first = node.call(_join())
    assert isinstance(first.error, MemberIdAssignedError)
    member = first.error.member_id
    joined = node.call(_join(member))
    assert joined.error is None and joined.result.leader_id == member
    generation = joined.result.generation
    synced = node.call(GroupSync("billing", g.SyncRequest(member, generation, ((member, frozenset({("t", 0)})),))))
    assert synced.calls == 0, "the sync reply waits for its group record to commit"
    node.commit()
    assert synced.error is None and synced.result.assignment == frozenset({("t", 0)})
    return member, generation


def test_a_member_joins_syncs_and_is_answered_only_once_its_record_is_committed() -> None:
    node = _node()
    member, generation = _one_member_group(node)
    assert node.machine.records.groups["billing"].generation == generation
    beat = node.call(GroupHeartbeat("billing", g.HeartbeatRequest(member, generation)))
    assert beat.calls == 1 and beat.error is None


def test_a_newer_parked_join_of_the_same_member_replaces_the_older_which_is_told_to_rejoin() -> None:
    node = _node()
    _one_member_group(node)
    newcomer = node.call(_join()).error
    assert isinstance(newcomer, MemberIdAssignedError)
    older = node.call(_join(newcomer.member_id))
    newer = node.call(_join(newcomer.member_id))
    assert isinstance(older.error, GroupRebalancingError) and newer.calls == 0


def test_a_failed_proposal_drops_the_coordinator_and_tells_waiters_the_coordinator_moved() -> None:
    node = _node()
    member, generation = _one_member_group(node)
    left = node.call(GroupLeave("billing", g.LeaveRequest(member)))  # empties the group: a record to commit
    again = node.call(GroupLeave("billing", g.LeaveRequest(member)))  # answered after that record
    assert left.calls == again.calls == 0
    node.scheduler.fail()
    assert isinstance(left.error, CoordinatorMovedError) and isinstance(again.error, CoordinatorMovedError)
    # Rebuilt from the committed record: the member is still there, at the same generation.
    described = node.call(GroupDescribe("billing"))
    assert described.result.generation == generation and [m.member_id for m in described.result.members] == [member]


def test_losing_the_leadership_unloads_every_coordinator_and_answers_parked_requests() -> None:
    node = _node()
    _one_member_group(node)
    newcomer = node.call(_join()).error
    assert isinstance(newcomer, MemberIdAssignedError)
    parked = node.call(_join(newcomer.member_id))
    node.group.is_leader = False
    node.machine.on_role_change(node.group, raft.SoftState(2, raft.Role.FOLLOWER))  # type: ignore[arg-type]
    assert isinstance(parked.error, CoordinatorMovedError)
    assert node.machine.host.loaded == ()
    refused = node.call(GroupDescribe("billing"))
    assert isinstance(refused.error, NotLeaderError)


def test_a_leader_that_has_not_applied_an_entry_of_its_term_refuses_group_calls() -> None:
    node = _node()
    node.machine.on_role_change(node.group, raft.SoftState(1, raft.Role.LEADER))  # type: ignore[arg-type]
    assert isinstance(node.call(_join()).error, UnavailableError)


def test_a_session_that_ends_without_heartbeats_removes_the_member_at_the_next_tick() -> None:
    node = _node()
    _one_member_group(node)
    node.clock.now += SESSION_MS + 1
    node.machine.host.tick(node.group)  # type: ignore[arg-type]
    node.commit()
    record = node.machine.records.groups["billing"]
    assert record.state is g.GroupState.EMPTY and record.members == ()


def test_commits_are_fenced_by_member_generation_and_ownership() -> None:
    node = _node()
    member, generation = _one_member_group(node)

    def commit(partition: int, **fields: Any) -> _Answer:
        answer = _Answer()
        request = OffsetsCommit("billing", (), **fields)
        node.machine.commit(node.group, request, [CommittedOffset("t", partition, 1)], answer)  # type: ignore[arg-type]
        return answer

    assert isinstance(commit(0, member_id=member, generation=generation - 1).error, StaleGenerationError)
    assert isinstance(commit(0, member_id="zombie", generation=generation).error, UnknownMemberError)
    assert isinstance(commit(1, member_id=member, generation=generation).error, PartitionNotAssignedError)
    assert isinstance(commit(0).error, UnknownMemberError)  # from outside any generation while it has members
    accepted = commit(0, member_id=member, generation=generation)
    node.commit()
    assert accepted.error is None and node.machine.groups["billing"][("t", 0)].offset == 1


def test_a_group_that_never_had_members_takes_commits_from_outside_any_generation() -> None:
    node = _node()
    answer = _Answer()
    node.machine.commit(node.group, OffsetsCommit("plain", ()), [CommittedOffset("t", 3, 9)], answer)  # type: ignore[arg-type]
    node.commit()
    assert answer.error is None and node.machine.groups["plain"][("t", 3)].offset == 9


def test_deleting_a_group_refuses_while_it_has_members_and_then_drops_its_offsets() -> None:
    node = _node()
    member, generation = _one_member_group(node)
    node.machine.commit(
        node.group,  # type: ignore[arg-type]
        OffsetsCommit("billing", (), member, generation),
        [CommittedOffset("t", 0, 4)],
        _Answer(),
    )
    node.commit()
    assert isinstance(node.call(GroupDelete("billing")).error, GroupNotEmptyError)
    node.call(GroupLeave("billing", g.LeaveRequest(member)))
    node.commit()
    listed = node.call(GroupsList()).result
    assert [(r.group, r.state, r.members) for r in listed] == [("billing", "Empty", 0)]
    deleted = node.call(GroupDelete("billing"))
    assert deleted.calls == 0
    node.commit()
    assert deleted.calls == 1 and deleted.error is None
    assert "billing" not in node.machine.groups and "billing" not in node.machine.records.groups
    assert node.call(GroupDescribe("billing")).result.state is g.GroupState.DEAD
    assert node.call(GroupsList()).result == ()


def test_every_replica_applies_group_records_and_a_tombstone_drops_the_offsets() -> None:
    follower = _node()
    follower.group.is_leader = False
    record = g.GroupMetadataRecord("billing", 3, g.GroupState.EMPTY, "consumer", None, "", (), 5)
    entries = [
        raft.Entry(20, 2, raft.EntryKind.CONTROL, 1, encode_commit("billing", [CommittedOffset("t", 0, 8)])),
        raft.Entry(21, 2, raft.EntryKind.CONTROL, 1, g.encode_group_record(record)),
        raft.Entry(22, 2, raft.EntryKind.CONTROL, 1, b'{"v":"groups/1","t":"nonsense"}'),  # skipped by all
    ]
    follower.machine.apply(follower.group, entries)  # type: ignore[arg-type]
    assert follower.machine.records.groups["billing"] == record and follower.machine.has_offsets("billing")
    tombstone = raft.Entry(23, 2, raft.EntryKind.CONTROL, 1, g.encode_group_record(g.GroupTombstone("billing")))
    follower.machine.apply(follower.group, [tombstone])  # type: ignore[arg-type]
    assert not follower.machine.records.groups and not follower.machine.has_offsets("billing")


def test_a_snapshot_carries_the_group_records_and_an_older_snapshot_without_them_still_loads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(offsets_module, "SNAPSHOT_EVERY", 1)
    node = _node()
    _one_member_group(node)
    data = node.group.storage.snapshots[-1]
    restarted = _node()
    restarted.machine.on_snapshot(restarted.group, raft.Snapshot(raft.SnapshotMeta(100, 2), data))  # type: ignore[arg-type]
    assert restarted.machine.records.groups == node.machine.records.groups
    older = {key: value for key, value in json.loads(data).items() if key != "group_records"}
    restarted.machine.on_snapshot(restarted.group, raft.Snapshot(raft.SnapshotMeta(101, 2), json.dumps(older).encode()))  # type: ignore[arg-type]
    assert restarted.machine.records.groups == {}


def test_a_refusal_reaches_the_client_face_with_its_kafka_reason() -> None:
    node = _node()
    refused = node.call(GroupJoin("billing", g.JoinRequest("", 1, 5_000, ("range",))))  # below the minimum session
    assert isinstance(refused.error, MultiraftError) and refused.error.reason == "INVALID_SESSION_TIMEOUT"
    assert isinstance(refused.error.__cause__, g.InvalidSessionTimeoutError)


def test_a_new_leader_loads_every_recorded_group_and_expires_members_that_died_meanwhile() -> None:
    old = _node()
    _one_member_group(old)
    new = _node()  # another replica that applied the same record, now the leader
    new.machine.records.load(old.machine.records.records())
    new.machine.host.tick(new.group)  # type: ignore[arg-type]
    assert new.machine.host.loaded == ("billing",)
    new.clock.now += SESSION_MS + 1  # the member never comes back: its session ends on the new coordinator
    new.machine.host.tick(new.group)  # type: ignore[arg-type]
    new.commit()
    assert new.machine.records.groups["billing"].members == ()


def test_a_bug_met_by_one_group_request_answers_it_internal_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    node = _node()

    def broken(*_: Any) -> None:
        raise TypeError("'int' object is not iterable")

    monkeypatch.setattr(node.machine.host, "handle", broken)
    scheduler = SimpleNamespace(groups={7: SimpleNamespace(machine=node.machine)})
    answer = _Answer()
    serve_group_operation(scheduler, 7, GroupDelete("billing"), answer)  # type: ignore[arg-type]
    assert isinstance(answer.error, MultiraftError) and answer.error.reason == "INTERNAL"
    missing = _Answer()
    serve_group_operation(scheduler, 8, GroupsList(), missing)  # type: ignore[arg-type]
    assert isinstance(missing.error, NotLeaderError)


class _Reads:
    """A scheduler whose linearizable reads wait until the test confirms (a quorum answered) or fails them."""

    def __init__(self, node: Node) -> None:
        self.groups = {7: node.group}
        node.group.machine = node.machine  # type: ignore[attr-defined]
        self.pending: list[tuple[Any, Any]] = []

    def read(self, group: Any, serve: Any, completion: Any) -> None:
        self.pending.append((serve, completion))

    def confirm(self) -> None:
        pending, self.pending = self.pending, []
        for serve, completion in pending:
            completion(serve(), None)

    def lose_quorum(self) -> None:
        pending, self.pending = self.pending, []
        for _, completion in pending:
            completion(None, NotLeaderError("stepped down: no quorum", leader_id=0))


def test_listing_and_describing_wait_for_a_quorum_to_confirm_the_leader_like_offset_reads() -> None:
    # A leader that lost its quorum while quiescent never checks it, and would answer from memory.
    node = _node()
    _one_member_group(node)
    reads = _Reads(node)
    listed, described = _Answer(), _Answer()
    serve_group_operation(reads, 7, GroupsList(), listed)  # type: ignore[arg-type]
    serve_group_operation(reads, 7, GroupDescribe("billing"), described)  # type: ignore[arg-type]
    assert (listed.calls, described.calls) == (0, 0), "nothing is answered before a quorum confirms"
    reads.confirm()
    assert [row.group for row in listed.result] == ["billing"]
    assert described.result.group_id == "billing" and len(described.result.members) == 1

    deposed = _Answer()
    serve_group_operation(reads, 7, GroupsList(), deposed)  # type: ignore[arg-type]
    reads.lose_quorum()
    assert isinstance(deposed.error, NotLeaderError) and deposed.result is None
