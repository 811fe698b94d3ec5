"""Fencing: who may move a group's offsets, and the precise reason a zombie is refused."""

from __future__ import annotations

import pytest

from multiraft.consumer_groups import (
    NO_GENERATION,
    FencedInstanceIdError,
    GroupCoordinator,
    GroupDeadError,
    GroupFencedError,
    GroupSettings,
    JoinRequest,
    PartitionNotOwnedError,
    RebalanceInProgressError,
    Subscription,
    SyncRequest,
    UnknownMemberIdError,
    check_offset_commit,
)

from ._harness import counter_ids

T0, T1, T2 = ("t", 0), ("t", 1), ("t", 2)


def _join(
    g: GroupCoordinator,
    member_id: str,
    owned: frozenset[tuple[str, int]] = frozenset(),
    gen: int = -1,
    instance: str | None = None,
) -> str:
    sub = Subscription(("t",), owned, gen)
    outcome = g.join(JoinRequest(member_id, 10_000, 20_000, ("cooperative-sticky",), sub, instance), 0)
    return outcome.reply.member_id if outcome.reply else outcome.parked_as


def _stable_pair() -> tuple[GroupCoordinator, str, str]:
    """A group at generation 1: a owns t/0 and t/1, b owns t/2."""
    g = GroupCoordinator("g", counter_ids(), GroupSettings(initial_rebalance_delay_ms=1_000))
    a = _join(g, "", instance="host-a")
    b = _join(g, "", instance="host-b")
    g.tick(1_000)  # the first generation waited for both
    assert (g.generation, g.leader_id) == (1, a)
    g.sync(SyncRequest(b, 1), 0)
    g.sync(SyncRequest(a, 1, ((a, frozenset({T0, T1})), (b, frozenset({T2})))), 0)
    return g, a, b


def test_members_of_the_current_generation_commit_what_they_own() -> None:
    g, a, b = _stable_pair()
    check_offset_commit(g, a, 1, [T0, T1], "host-a")
    check_offset_commit(g, b, 1, [T2], "host-b")


def test_a_commit_for_a_partition_of_another_member_is_refused_naming_it() -> None:
    g, a, _ = _stable_pair()
    with pytest.raises(PartitionNotOwnedError, match="t/2") as refused:
        check_offset_commit(g, a, 1, [T0, T2])
    assert refused.value.reason == "PARTITION_NOT_OWNED" and isinstance(refused.value, GroupFencedError)


def test_an_unknown_member_is_refused_even_with_the_right_generation() -> None:
    g, _, _ = _stable_pair()
    with pytest.raises(UnknownMemberIdError) as refused:
        check_offset_commit(g, "zombie", 1, [T0])
    assert refused.value.reason == "UNKNOWN_MEMBER_ID"


def test_an_older_process_of_a_static_instance_is_fenced() -> None:
    g, _, _ = _stable_pair()
    with pytest.raises(FencedInstanceIdError) as refused:
        check_offset_commit(g, "old-process-of-a", 1, [T0], "host-a")
    assert refused.value.reason == "FENCED_INSTANCE_ID"


def test_commits_wait_while_the_leader_computes_a_new_generation() -> None:
    g, a, b = _stable_pair()
    _join(g, b, frozenset({T2}), 1, "host-b")
    _join(g, a, frozenset({T0, T1}), 1, "host-a")  # everyone rejoined: generation 2 is completing
    with pytest.raises(RebalanceInProgressError):
        check_offset_commit(g, a, 2, [T0])


def test_members_may_commit_while_the_group_prepares_a_rebalance() -> None:
    g, a, b = _stable_pair()
    _join(g, b, frozenset({T2}), 1, "host-b")  # a has not rejoined yet: it commits in on_revoke first
    check_offset_commit(g, a, 1, [T0, T1], "host-a")


def test_a_revoked_partition_may_be_committed_until_its_new_owner_is_assigned_it() -> None:
    g, a, b = _stable_pair()
    _join(g, b, frozenset({T2}), 1, "host-b")
    _join(g, a, frozenset({T0, T1}), 1, "host-a")
    g.sync(SyncRequest(b, 2), 0)
    g.sync(SyncRequest(a, 2, ((a, frozenset({T0})), (b, frozenset({T2})))), 0)  # a revokes t/1
    check_offset_commit(g, a, 2, [T1], "host-a")  # its on_revoke commit
    with pytest.raises(PartitionNotOwnedError):
        check_offset_commit(g, b, 2, [T1], "host-b")
    _join(g, a, frozenset({T0}), 2, "host-a")  # the follow-up rebalance hands t/1 to b
    _join(g, b, frozenset({T2}), 2, "host-b")
    g.sync(SyncRequest(b, 3), 0)
    g.sync(SyncRequest(a, 3, ((a, frozenset({T0})), (b, frozenset({T1, T2})))), 0)
    check_offset_commit(g, b, 3, [T1], "host-b")
    with pytest.raises(PartitionNotOwnedError):
        check_offset_commit(g, a, 3, [T1], "host-a")


def test_a_commit_outside_any_generation_is_accepted_only_while_the_group_has_no_members() -> None:
    g = GroupCoordinator("g", counter_ids())
    check_offset_commit(g, "", NO_GENERATION, [T0])  # admin tools, manually assigned consumers
    g, _, _ = _stable_pair()
    with pytest.raises(UnknownMemberIdError):
        check_offset_commit(g, "", NO_GENERATION, [T0])


def test_a_dead_group_refuses_every_commit() -> None:
    g, _, _ = _stable_pair()
    g.unload()
    with pytest.raises(GroupDeadError) as refused:
        check_offset_commit(g, "", NO_GENERATION, [T0])
    assert refused.value.reason == "COORDINATOR_NOT_AVAILABLE" and refused.value.status == "UNAVAILABLE"
