"""The RawNode contract: what a Ready holds and in which order, advance(), restarts, config and status."""

from __future__ import annotations

import random
from dataclasses import fields

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multiraft.raft import (
    ConfChange,
    ConfChangeSingle,
    ConfChangeTransition,
    ConfChangeType,
    ConfState,
    Entry,
    EntryKind,
    HardState,
    InvalidConfChangeError,
    InvalidRequestError,
    LogInvariantError,
    MemoryStorage,
    MessageType,
    RaftConfig,
    RaftConfigError,
    RawNode,
    Role,
    UsageError,
    apply_conf_change,
)
from multiraft.raft._log import RaftLog

from .harness import Cluster, ReplicaHost


def _node(node_id: int = 1, voters: tuple[int, ...] = (1, 2, 3), **config: object) -> RawNode:
    storage = MemoryStorage.bootstrapped(ConfState.of(voters))
    return RawNode(RaftConfig(id=node_id, **config), storage, random.Random(node_id))  # type: ignore[arg-type]


def test_ready_fields_are_declared_in_their_order_of_handling() -> None:
    from multiraft.raft import Ready

    assert [f.name for f in fields(Ready)] == [
        "soft_state",
        "hard_state",
        "snapshot",
        "entries",
        "must_sync",
        "messages",
        "persisted_messages",
        "committed_entries",
        "conf_state",
        "read_states",
    ]


def test_a_second_ready_before_advance_is_a_usage_error() -> None:
    node = _node()
    node.campaign()
    rd = node.ready()
    assert not node.has_ready()
    with pytest.raises(UsageError):
        node.ready()
    with pytest.raises(UsageError):
        node.advance(type(rd)(*[getattr(rd, f.name) for f in fields(rd)]))
    node.advance(rd)


def test_the_leaders_appends_may_go_out_before_its_own_persist_but_acks_wait_for_the_followers() -> None:
    cluster = Cluster()
    cluster.elect(1)
    cluster.node(1).propose(b"x")
    rd = cluster.node(1).ready()
    assert rd.entries and rd.must_sync
    assert [m.type for m in rd.messages] == [MessageType.APP, MessageType.APP]
    assert rd.persisted_messages == []
    cluster.node(1).advance(rd)
    cluster.node(2).step(rd.messages[0])
    follower = cluster.node(2).ready()
    assert follower.entries and follower.must_sync
    assert follower.messages == []
    assert [m.type for m in follower.persisted_messages] == [MessageType.APP_RESP]
    cluster.node(2).advance(follower)


def test_must_sync_is_false_when_only_the_commit_index_changed() -> None:
    cluster = Cluster()
    cluster.elect(1)
    cluster.node(1).propose(b"x")
    leader_rd = cluster.node(1).ready()
    cluster.node(1).advance(leader_rd)
    cluster.node(2).step(leader_rd.messages[0])
    cluster.node(2).advance(cluster.node(2).ready())
    cluster.stabilize()
    cluster.node(2).step(
        type(leader_rd.messages[0])(
            type=MessageType.HEARTBEAT,
            to=2,
            sender=1,
            term=cluster.node(1).term,
            commit=cluster.node(1).status().commit,
        )
    )
    rd = cluster.node(2).ready()
    assert not rd.must_sync
    cluster.node(2).advance(rd)


def test_entries_stepped_between_ready_and_advance_go_into_the_next_ready() -> None:
    cluster = Cluster()
    cluster.elect(1)
    leader = cluster.node(1)
    leader.propose(b"a")
    first = leader.ready()
    leader.propose(b"b")
    leader.advance(first)
    second = leader.ready()
    assert [bytes(e.payload) for e in first.entries] == [b"a"]
    assert [bytes(e.payload) for e in second.entries] == [b"b"]
    leader.advance(second)


def test_a_crash_before_persisting_loses_the_ready_and_the_node_restarts_from_storage() -> None:
    storage = MemoryStorage.bootstrapped(ConfState.of((1, 2, 3)))
    node = RawNode(RaftConfig(id=1, pre_vote=False), storage, random.Random(1))
    node.campaign()
    node.ready()  # never persisted: the vote for itself in term 2 is lost
    restarted = RawNode(RaftConfig(id=1, pre_vote=False), storage, random.Random(1))
    assert restarted.term == 1 and restarted.status().vote == 0


def test_a_restarted_node_resumes_from_the_applied_index_it_is_given() -> None:
    cluster = Cluster()
    cluster.elect(1)
    for i in range(3):
        cluster.propose(1, f"e{i}".encode())
    cluster.tick_all(2)
    host = cluster.hosts[2]
    applied = host.state.applied_index
    node = RawNode(host.config, host.storage, random.Random(0), applied=applied)
    assert node.status().applied == applied
    assert not node.has_ready() or node.ready().committed_entries == ()
    with pytest.raises(InvalidRequestError):
        RawNode(host.config, host.storage, random.Random(0), applied=applied + 100)
    # The commit index in the hard state is not synced on its own: it may lag what the application applied.
    host.storage.set_hard_state(HardState(cluster.node(2).term, 1, applied - 2))
    assert RawNode(host.config, host.storage, random.Random(0), applied=applied).status().commit == applied


def test_committed_entries_per_ready_are_limited_by_bytes() -> None:
    cluster = Cluster(config={"max_committed_size_per_ready": 100})
    cluster.elect(1)
    for _ in range(5):
        cluster.node(1).propose(b"x" * 60)
    cluster.stabilize()
    cluster.restart(2)
    host: ReplicaHost = cluster.hosts[2]
    batches = []
    while host.node.has_ready():
        rd = host.node.ready()
        batches.append([len(e.payload) for e in rd.committed_entries])
        host.node.advance(rd)
    assert [b for b in batches if b] == [[0, 60], [60], [60], [60], [60]]


def test_ready_reports_the_configuration_that_its_committed_entries_bring() -> None:
    cluster = Cluster()
    cluster.elect(1)
    cluster.add_node(4)
    cluster.node(1).propose_conf_change(ConfChange.add_learner(4))
    seen = []
    for _ in range(20):
        for node_id in (1, 2, 3):
            node = cluster.node(node_id)
            if node.has_ready():
                rd = node.ready()
                if rd.conf_state is not None:
                    seen.append((node_id, rd.conf_state))
                host = cluster.hosts[node_id]
                host.pending = rd
                cluster.queue.extend(rd.messages)
                cluster.queue.extend(host.persist())
        while cluster.deliver_one():
            pass
    assert sorted(n for n, _ in seen) == [1, 2, 3]
    assert all(cs == ConfState.of((1, 2, 3), learners=(4,)) for _, cs in seen)


def test_soft_state_reports_leadership_changes() -> None:
    node = _node(voters=(1,))
    node.campaign()
    rd = node.ready()
    assert rd.soft_state is not None and (rd.soft_state.leader_id, rd.soft_state.role) == (1, Role.LEADER)
    assert rd.hard_state == HardState(term=2, vote=1, commit=1)
    node.advance(rd)
    assert node.ready().soft_state is None


def test_status_reports_the_leaders_view_of_every_replica() -> None:
    cluster = Cluster()
    cluster.elect(1)
    status = cluster.node(1).status()
    assert status.role is Role.LEADER and status.leader_id == 1
    assert set(status.progress) == {1, 2, 3}
    assert all(p.state == "replicate" and p.match == status.last_index for p in status.progress.values())
    assert cluster.node(2).status().progress == {}


# --- configuration ---------------------------------------------------------------------------------------------


def test_every_config_field_documents_its_unit_and_meaning() -> None:
    for f in fields(RaftConfig):
        assert f.metadata.get("unit") and f.metadata.get("doc"), f.name


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"id": 0}, "id"),
        ({"election_tick": 0}, "election_tick"),
        ({"election_tick": 2, "heartbeat_tick": 2}, "election_tick"),
        ({"max_inflight_msgs": -1}, "max_inflight_msgs"),
        ({"max_size_per_msg": 1.5}, "max_size_per_msg"),
        ({"pre_vote": 1}, "pre_vote"),
    ],
)
def test_config_validation_names_the_bad_field(overrides: dict[str, object], field: str) -> None:
    config = RaftConfig(**{"id": 1, **overrides})  # type: ignore[arg-type]
    with pytest.raises(RaftConfigError, match=f"RaftConfig.{field}"):
        config.validate()
    with pytest.raises(RaftConfigError):
        RawNode(config, MemoryStorage(), random.Random(0))


# --- configuration changes as a pure function ------------------------------------------------------------------


def test_a_change_of_one_voter_is_simple_and_of_several_is_joint() -> None:
    base = ConfState.of((1, 2, 3))
    assert apply_conf_change(base, ConfChange.add_voter(4)) == ConfState.of((1, 2, 3, 4))
    swap = ConfChange((ConfChangeSingle(ConfChangeType.ADD_VOTER, 4), ConfChangeSingle(ConfChangeType.REMOVE_NODE, 1)))
    joint = apply_conf_change(base, swap)
    assert joint == ConfState.of((2, 3, 4), voters_outgoing=(1, 2, 3), auto_leave=True)
    assert apply_conf_change(joint, ConfChange.leave_joint()) == ConfState.of((2, 3, 4))
    with pytest.raises(InvalidConfChangeError):
        apply_conf_change(joint, ConfChange.add_voter(5))
    explicit = ConfChange((ConfChangeSingle(ConfChangeType.ADD_LEARNER, 5),), ConfChangeTransition.JOINT_EXPLICIT)
    assert apply_conf_change(base, explicit).auto_leave is False


change_singles = st.builds(ConfChangeSingle, st.sampled_from(ConfChangeType), st.integers(1, 6))


@settings(max_examples=300, deadline=None)
@given(
    changes=st.lists(st.lists(change_singles, max_size=3).map(tuple), max_size=8),
    transitions=st.lists(st.sampled_from(ConfChangeTransition), min_size=8, max_size=8),
)
def test_any_sequence_of_valid_changes_keeps_the_configuration_well_formed(
    changes: list[tuple[ConfChangeSingle, ...]], transitions: list[ConfChangeTransition]
) -> None:
    conf = ConfState.of((1, 2, 3))
    for change_set, transition in zip(changes, transitions, strict=False):
        change = ConfChange(change_set, transition)
        try:
            conf = apply_conf_change(conf, change)
        except InvalidConfChangeError:
            continue
        voters, learners = set(conf.voters), set(conf.learners)
        assert voters and not voters & learners
        assert not set(conf.learners_next) & voters
        assert set(conf.learners_next) <= set(conf.voters_outgoing)
        assert conf.joint or not conf.learners_next
        assert not (set(conf.voters_outgoing) & learners)
        if conf.joint and conf.auto_leave:
            conf = apply_conf_change(conf, ConfChange.leave_joint())
            assert not conf.joint


def test_a_restart_resumes_from_the_snapshot_even_when_the_log_was_compacted_to_an_earlier_point() -> None:
    cluster = Cluster()
    cluster.elect(1)
    cluster.add_node(4)
    cluster.node(1).propose_conf_change(ConfChange.add_learner(4))
    cluster.stabilize()
    for i in range(3):
        cluster.propose(1, f"e{i}".encode())
    cluster.tick_all(2)
    host = cluster.hosts[2]
    assert host.snapshot_and_compact(keep=5)  # entries 2.. stay readable behind the snapshot
    snapshot_index = host.storage.snapshot().meta.index
    assert host.storage.first_index() < snapshot_index
    cluster.crash(2)
    cluster.restart(2)
    node = cluster.node(2)
    assert node.status().applied == snapshot_index
    assert node.conf_state == ConfState.of((1, 2, 3), learners=(4,))
    if node.has_ready():
        assert node.ready().committed_entries == ()  # nothing the snapshot covers is applied twice


def test_a_broken_log_invariant_is_a_named_error() -> None:
    storage = MemoryStorage()
    storage.append([Entry(i, 1, EntryKind.DATA, 0, b"x") for i in range(1, 6)])
    log = RaftLog(storage, 1 << 20)
    log.commit_to(3)
    with pytest.raises(LogInvariantError, match="overwrite committed"):
        log.append([Entry(3, 2, EntryKind.DATA, 0, b"rewritten history")])
    with pytest.raises(LogInvariantError, match="beyond the last index"):
        log.commit_to(6)
    with pytest.raises(LogInvariantError, match="conflicts with the committed index"):
        log.maybe_append(1, 1, 3, [Entry(2, 2, EntryKind.DATA, 0, b"rewritten history")])
