"""After a restart, each reopened replica waits for the controller's state: the preferred leader's replica
campaigns at once, the others hold off, so the replicas of a group do not split the vote."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

from multiraft import controller as ctl
from multiraft import raft
from multiraft.node.scheduler.scheduler import RaftGroup
from multiraft.node.scheduler.startup_elections import StartupElections, hold_ticks

from ._fakes import cluster_with_topic

ELECTION_TICKS = 10


def reopened(node_id: int, group_id: int) -> RaftGroup:
    """A replica of a 3-voter group as a restart reopens it: a follower that knows no leader."""
    storage = raft.MemoryStorage()
    hard_state, snapshot = raft.bootstrap(raft.ConfState.of((1, 2, 3)))
    storage.apply_snapshot(snapshot)
    storage.set_hard_state(hard_state)
    config = raft.RaftConfig(id=node_id, election_tick=ELECTION_TICKS)
    raw = raft.RawNode(config, storage, random.Random(group_id), applied=snapshot.meta.index)
    machine: Any = None  # never called here
    return RaftGroup(group_id, raw, storage, machine)


class FakeScheduler:
    def __init__(self, groups: dict[int, RaftGroup]) -> None:
        self.groups = groups
        self.touched: list[int] = []

    def touch(self, group: RaftGroup) -> None:
        self.touched.append(group.group_id)


def campaigned(group: RaftGroup) -> bool:
    return group.raw.role is not raft.Role.FOLLOWER


def with_preferred(state: ctl.ClusterState, preferred: dict[int, int]) -> ctl.ClusterState:
    """``state`` with the preferred leader of each group id in ``preferred`` set."""
    topics = dict(state.topics)
    for name, topic in state.topics.items():
        parts = tuple(
            replace(p, preferred_leader=preferred.get(p.group_id, 0) or p.preferred_leader) for p in topic.partitions
        )
        topics[name] = replace(topic, partitions=parts)
    return replace(state, topics=topics)


def test_the_preferred_leaders_replica_campaigns_at_its_election_timeout_and_the_others_hold_off() -> None:
    state = cluster_with_topic(partitions=2)
    first, second = (p.group_id for p in state.topics["orders"].partitions)
    state = with_preferred(state, {first: 1, second: 2})
    groups = {first: reopened(1, first), second: reopened(1, second)}
    startup = StartupElections(node_id=1)
    for group in groups.values():
        startup.reopened(group)
    startup.hold(5 * ELECTION_TICKS)

    scheduler = FakeScheduler(groups)
    assert startup.on_state(state, scheduler) == [groups[first]]
    assert scheduler.touched == [first]
    assert len(startup) == 0
    for _ in range(2 * ELECTION_TICKS):  # longer than any election timeout, shorter than the hold
        for group in groups.values():
            group.raw.tick()
    assert campaigned(groups[first])
    assert not campaigned(groups[second])
    for _ in range(5 * ELECTION_TICKS):
        groups[second].raw.tick()
    assert campaigned(groups[second])  # no leader heard within the hold: it stands itself


def test_a_replica_the_state_does_not_know_yet_waits_for_a_later_state() -> None:
    later = cluster_with_topic(partitions=1)
    group_id = later.topics["orders"].partitions[0].group_id
    later = with_preferred(later, {group_id: 1})
    earlier = ctl.ClusterState(nodes=later.nodes)  # the snapshot, before the topic's creation replays
    groups = {group_id: reopened(1, group_id)}
    startup = StartupElections(node_id=1)
    startup.reopened(groups[group_id])

    assert startup.on_state(earlier, FakeScheduler(groups)) == []
    assert len(startup) == 1
    assert startup.on_state(later, FakeScheduler(groups)) == [groups[group_id]]
    assert len(startup) == 0


def test_a_replica_removed_since_it_was_reopened_is_forgotten() -> None:
    state = cluster_with_topic(partitions=1)
    group_id = state.topics["orders"].partitions[0].group_id
    state = with_preferred(state, {group_id: 1})
    startup = StartupElections(node_id=1)
    startup.reopened(reopened(1, group_id))

    assert startup.on_state(state, FakeScheduler({})) == []
    assert len(startup) == 0


def test_the_hold_is_two_election_timeouts_or_as_long_as_loading_took() -> None:
    assert hold_ticks(10, 50, 0.2) == 20
    assert hold_ticks(10, 50, 6.0) == 120
