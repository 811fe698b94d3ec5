"""The coordinator's protocol rules, request by request (Kafka's JoinGroup/SyncGroup/Heartbeat/LeaveGroup)."""

from __future__ import annotations

import pytest

from multiraft.consumer_groups import (
    GroupCoordinator,
    GroupDeadError,
    GroupMaxSizeReachedError,
    GroupMetadataRecord,
    GroupSettings,
    GroupSettingsError,
    GroupState,
    GroupTombstone,
    HeartbeatRequest,
    IllegalAssignmentError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidSessionTimeoutError,
    JoinReply,
    JoinRequest,
    LeaveRequest,
    MemberIdRequiredError,
    NonEmptyGroupError,
    RebalanceInProgressError,
    Subscription,
    SyncReply,
    SyncRequest,
    UnknownMemberIdError,
    check_offset_commit,
)

from ._harness import counter_ids

SUB = Subscription(("t",))


def _coordinator(**settings: int) -> GroupCoordinator:
    return GroupCoordinator("g", counter_ids(), GroupSettings(**{"initial_rebalance_delay_ms": 0, **settings}))


def _join(
    g: GroupCoordinator, member_id: str = "", now: int = 0, protocols: tuple[str, ...] = ("range",), **kw: object
):
    request = JoinRequest(
        member_id, kw.pop("session", 10_000), kw.pop("rebalance", 20_000), protocols, kw.pop("sub", SUB), **kw
    )  # type: ignore[arg-type]
    return g.join(request, now)


def _member(g: GroupCoordinator, client: str = "c", now: int = 0, protocols: tuple[str, ...] = ("range",)) -> str:
    first = _join(g, client_id=client, now=now, protocols=protocols).reply
    assert isinstance(first, JoinReply) and isinstance(first.error, MemberIdRequiredError)
    return first.error.member_id


def test_a_first_join_gets_a_member_id_to_join_again_with() -> None:
    g = _coordinator()
    reply = _join(g, client_id="app").reply
    assert isinstance(reply, JoinReply) and isinstance(reply.error, MemberIdRequiredError)
    assert reply.member_id == reply.error.member_id == "app-1"
    assert g.state is GroupState.EMPTY and g.member_ids == ()


def test_a_lone_member_becomes_leader_of_generation_one_and_receives_what_it_assigns() -> None:
    g = _coordinator()
    member = _member(g)
    join = _join(g, member).reply
    assert isinstance(join, JoinReply) and join.error is None
    assert (join.generation, join.leader_id, join.protocol_name) == (1, member, "range")
    assert [m.member_id for m in join.members] == [member]
    sync = g.sync(SyncRequest(member, 1, ((member, frozenset({("t", 0)})),)), 0)
    assert isinstance(sync.reply, SyncReply) and sync.reply.assignment == {("t", 0)}
    assert g.state is GroupState.STABLE
    assert isinstance(sync.records[0], GroupMetadataRecord) and sync.records[0].generation == 1


def test_the_group_runs_the_protocol_most_members_prefer_among_those_all_support() -> None:
    g = _coordinator()
    a, b, c = _member(g, "a"), _member(g, "b"), _member(g, "c")
    _join(g, a, protocols=("sticky", "range"))
    _join(g, b, protocols=("range", "sticky"))
    outcome = _join(g, c, protocols=("range", "roundrobin"))
    assert outcome.reply is not None and outcome.reply.protocol_name == "range"


def test_a_member_sharing_no_protocol_with_the_group_is_refused() -> None:
    g = _coordinator()
    _join(g, _member(g), protocols=("range",))
    reply = _join(g, _member(g), protocols=("cooperative-sticky",)).reply
    assert reply is not None and isinstance(reply.error, InconsistentGroupProtocolError)
    other_type = _join(g, _member(g), protocol_type="connect").reply
    assert other_type is not None and isinstance(other_type.error, InconsistentGroupProtocolError)


@pytest.mark.parametrize("session", [5_999, 1_800_001])
def test_a_session_timeout_outside_the_coordinators_bounds_is_refused(session: int) -> None:
    g = GroupCoordinator("g", counter_ids())
    reply = _join(g, session=session).reply
    assert reply is not None and isinstance(reply.error, InvalidSessionTimeoutError)


def test_a_full_group_refuses_another_member() -> None:
    g = _coordinator(max_group_size=1)
    _join(g, _member(g))
    reply = _join(g).reply
    assert reply is not None and isinstance(reply.error, GroupMaxSizeReachedError)


def test_a_join_parks_until_every_known_member_rejoined() -> None:
    g = _coordinator()
    a = _member(g, "a")
    _join(g, a)
    g.sync(SyncRequest(a, 1, ((a, frozenset({("t", 0)})),)), 0)
    b = _member(g, "b")
    parked = _join(g, b, now=100)
    assert parked.reply is None and parked.parked_as == b and g.state is GroupState.PREPARING_REBALANCE
    beat = g.heartbeat(HeartbeatRequest(a, 1), 200).reply
    assert beat is not None and isinstance(beat.error, RebalanceInProgressError)
    rejoin = _join(g, a, now=300)
    assert isinstance(rejoin.reply, JoinReply) and rejoin.reply.generation == 2
    assert [(r.member_id, r.generation) for r in rejoin.deferred if isinstance(r, JoinReply)] == [(b, 2)]


def test_a_member_that_does_not_rejoin_in_time_is_dropped_from_the_new_generation() -> None:
    g = _coordinator()
    a, b = _member(g, "a"), _member(g, "b")
    _join(g, a)
    _join(g, b)
    g.sync(SyncRequest(a, 1, ()), 0)  # a is the leader
    g.sync(SyncRequest(b, 1), 0)
    c = _member(g, "c", now=1_000)
    _join(g, c, now=1_000)
    _join(g, a, now=1_000)
    for now in range(1_000, 21_000, 1_000):
        g.heartbeat(HeartbeatRequest(b, 1), now)  # heartbeats do not stand in for a join
        assert g.tick(now).deferred == ()
    outcome = g.tick(21_000)  # the rebalance timeout (20 s) has passed
    assert g.generation == 2 and set(g.member_ids) == {a, c}
    assert {r.member_id for r in outcome.deferred} == {a, c}


def test_a_leader_assigning_a_partition_twice_is_refused_and_the_group_rebalances() -> None:
    g = _coordinator()
    a, b = _member(g, "a"), _member(g, "b")
    _join(g, a)
    _join(g, b)
    waiting = g.sync(SyncRequest(b, 1), 0)
    assert waiting.reply is None and waiting.parked_as == b
    twice = frozenset({("t", 0)})
    outcome = g.sync(SyncRequest(a, 1, ((a, twice), (b, twice))), 0)
    assert outcome.reply is not None and isinstance(outcome.reply.error, IllegalAssignmentError)
    assert [type(r.error) for r in outcome.deferred] == [RebalanceInProgressError]
    assert g.state is GroupState.PREPARING_REBALANCE and outcome.records == ()


def test_a_cooperative_leader_may_not_move_a_partition_its_owner_still_holds() -> None:
    g = _coordinator()
    a = _member(g, "a", protocols=("cooperative-sticky",))
    _join(g, a, protocols=("cooperative-sticky",))
    g.sync(SyncRequest(a, 1, ((a, frozenset({("t", 0), ("t", 1)})),)), 0)
    b = _member(g, "b", protocols=("cooperative-sticky",))
    _join(g, b, protocols=("cooperative-sticky",))
    owned = Subscription(("t",), frozenset({("t", 0), ("t", 1)}), 1)
    _join(g, a, protocols=("cooperative-sticky",), sub=owned)
    moved = g.sync(SyncRequest(a, 2, ((a, frozenset({("t", 0)})), (b, frozenset({("t", 1)})))), 0)
    assert moved.reply is not None and isinstance(moved.reply.error, IllegalAssignmentError)
    assert "still holds" in str(moved.reply.error)


def test_a_stale_generation_is_refused_on_sync_and_heartbeat() -> None:
    g = _coordinator()
    a = _member(g)
    _join(g, a)
    sync = g.sync(SyncRequest(a, 7), 0).reply
    beat = g.heartbeat(HeartbeatRequest(a, 0), 0).reply
    assert sync is not None and isinstance(sync.error, IllegalGenerationError)
    assert beat is not None and isinstance(beat.error, IllegalGenerationError)


def test_an_unknown_member_is_refused() -> None:
    g = _coordinator()
    for reply in (
        g.sync(SyncRequest("ghost", 0), 0).reply,
        g.heartbeat(HeartbeatRequest("ghost", 0), 0).reply,
        g.leave(LeaveRequest("ghost"), 0).reply,
        _join(g, "ghost").reply,
    ):
        assert reply is not None and isinstance(reply.error, UnknownMemberIdError)


def test_a_leader_that_never_syncs_is_removed_after_the_rebalance_timeout() -> None:
    g = _coordinator()
    a, b = _member(g, "a"), _member(g, "b")
    _join(g, a)
    _join(g, b)
    g.sync(SyncRequest(b, 1), 0)
    for now in range(1_000, 20_000, 1_000):
        g.heartbeat(HeartbeatRequest(a, 1), now)
        g.tick(now)
    assert g.state is GroupState.COMPLETING_REBALANCE
    outcome = g.tick(20_000)
    assert a not in g.member_ids and g.state is GroupState.PREPARING_REBALANCE
    assert [(r.member_id, type(r.error)) for r in outcome.deferred] == [(b, RebalanceInProgressError)]


def test_a_retried_join_during_completing_rebalance_gets_the_same_answer() -> None:
    g = _coordinator()
    a = _member(g)
    first = _join(g, a).reply
    again = _join(g, a).reply
    assert first == again and g.generation == 1


def test_deleting_a_group_with_members_is_refused_and_an_empty_one_leaves_a_tombstone() -> None:
    g = _coordinator()
    a = _member(g)
    _join(g, a)
    with pytest.raises(NonEmptyGroupError):
        g.delete()
    g.leave(LeaveRequest(a), 0)
    assert g.delete().records == (GroupTombstone("g"),)
    reply = _join(g).reply
    assert reply is not None and isinstance(reply.error, GroupDeadError)
    assert GroupCoordinator.from_records("g", [g.snapshot(0), GroupTombstone("g")], counter_ids(), 0) is None


def test_unloading_tells_every_parked_request_to_find_the_new_coordinator() -> None:
    g = _coordinator()
    a, b = _member(g, "a"), _member(g, "b")
    _join(g, a)
    _join(g, b)
    g.sync(SyncRequest(b, 1), 0)
    outcome = g.unload()
    assert [(r.member_id, type(r.error)) for r in outcome.deferred] == [(b, GroupDeadError)]
    assert g.state is GroupState.DEAD


def test_a_static_member_may_be_removed_by_its_instance_id_alone() -> None:
    g = _coordinator()
    joined = _join(g, group_instance_id="host-1")
    assert isinstance(joined.reply, JoinReply) and joined.reply.error is None  # static: no MEMBER_ID_REQUIRED
    g.leave(LeaveRequest("", "host-1"), 0)
    assert g.member_ids == () and g.state is GroupState.EMPTY


def test_a_pending_member_id_expires_after_the_session_timeout() -> None:
    g = _coordinator()
    member = _member(g)
    g.tick(10_000)
    reply = _join(g, member, now=10_001).reply
    assert reply is not None and isinstance(reply.error, UnknownMemberIdError)


@pytest.mark.parametrize(
    ("field", "value"), [("min_session_timeout_ms", -1), ("max_group_size", 0), ("min_session_timeout_ms", 2_000_000)]
)
def test_invalid_settings_name_the_field(field: str, value: int) -> None:
    with pytest.raises(GroupSettingsError) as error:
        GroupSettings(**{field: value}).validate()
    assert error.value.field == field


def test_after_a_failover_a_member_is_assumed_to_hold_the_assignment_it_may_have_received() -> None:
    coop = ("cooperative-sticky",)
    g = _coordinator(initial_rebalance_delay_ms=1_000)
    a, b = _member(g, "a", protocols=coop), _member(g, "b", protocols=coop)
    _join(g, a, protocols=coop)
    _join(g, b, protocols=coop)
    g.tick(1_000)
    t0, t1, t2 = ("t", 0), ("t", 1), ("t", 2)
    written = g.sync(SyncRequest(a, 1, ((a, frozenset({t2})), (b, frozenset({t0, t1})))), 1_000).records
    g.sync(SyncRequest(b, 1), 1_000)  # b receives t/0 and t/1 after the record was written
    reborn = GroupCoordinator.from_records("g", written, counter_ids(), 2_000)
    assert reborn is not None
    c = _member(reborn, "c", now=2_000, protocols=coop)
    _join(reborn, c, now=2_000, protocols=coop)
    _join(reborn, b, now=2_000, protocols=coop, sub=Subscription(("t",), frozenset({t0, t1}), 1))
    _join(reborn, a, now=2_000, protocols=coop, sub=Subscription(("t",), frozenset({t2}), 1))
    generation = reborn.generation
    moved = reborn.sync(SyncRequest(a, generation, ((b, frozenset({t0})), (c, frozenset({t1})))), 2_000).reply
    assert moved is not None and isinstance(moved.error, IllegalAssignmentError)  # b may still hold t/1
    for member, owned in ((a, {t2}), (b, {t0, t1}), (c, set())):
        _join(reborn, member, now=2_000, protocols=coop, sub=Subscription(("t",), frozenset(owned), 1))
    generation = reborn.generation
    reborn.sync(SyncRequest(a, generation, ((a, frozenset({t2})), (b, frozenset({t0})))), 2_000)
    reborn.sync(SyncRequest(b, generation), 2_000)
    check_offset_commit(reborn, b, generation, [t1])  # b revokes t/1 and commits it in on_revoke


def test_heartbeats_are_accepted_while_the_leader_computes_the_assignment() -> None:
    g = _coordinator()
    a = _member(g)
    _join(g, a)
    assert g.state is GroupState.COMPLETING_REBALANCE
    beat = g.heartbeat(HeartbeatRequest(a, 1), 5_000).reply
    assert beat is not None and beat.error is None


def test_a_restarted_static_leader_takes_over_leadership_without_reassigning() -> None:
    g = _coordinator()
    first = _join(g, group_instance_id="host-a").reply
    assert first is not None
    old = first.member_id
    g.sync(SyncRequest(old, 1, ((old, frozenset({("t", 0)})),), "host-a"), 0)
    again = _join(g, group_instance_id="host-a", now=1_000)
    reply = again.reply
    assert isinstance(reply, JoinReply) and reply.error is None
    assert reply.skip_assignment and reply.leader_id == reply.member_id != old
    assert [m.member_id for m in reply.members] == [reply.member_id]
    assert (g.generation, g.state) == (1, GroupState.STABLE)
    assert isinstance(again.records[0], GroupMetadataRecord) and again.records[0].leader_id == reply.member_id
    synced = g.sync(SyncRequest(reply.member_id, 1, (), "host-a"), 1_000).reply
    assert synced is not None and synced.assignment == {("t", 0)}
