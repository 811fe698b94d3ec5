"""The event loop's view of the cluster: the controller's state, who leads what, and the local replicas.

The scheduler thread publishes changes here through :class:`~multiraft.node.threads.LoopHandoff`; services
read it on the loop. Partition leadership is learnt from the local replicas first, then from what the other
nodes' leaders announced (``LeaderAnnouncement``, term wins), so any node can answer Metadata.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from multiraft import controller as ctl
from multiraft.errors import NotLeaderError, UnknownPartitionError, UnknownTopicError
from multiraft.node.replicas.partition import PartitionView
from multiraft.node.threads import LoopOwned, ThreadOwner, on_owner_thread
from multiraft.node.vocabulary.status import LeaderAnnouncement

__all__ = ["Directory"]


@dataclass
class _LeaderCache:
    """Who leads each partition group, as the leaders themselves announced it (term wins)."""

    leaders: dict[int, tuple[int, int]] = field(default_factory=dict)

    def learn(self, group_id: int, leader: int, term: int) -> None:
        known = self.leaders.get(group_id)
        if known is None or term >= known[1]:
            self.leaders[group_id] = (leader, term)


class Directory(LoopOwned):
    """Cluster state, controller leader, partition views and leaders, as the event loop sees them."""

    def __init__(self, node_id: int, owner: ThreadOwner) -> None:
        self.owner = owner
        self.node_id = node_id
        self.cluster = ctl.ClusterState()
        self.controller_leader = 0
        self.controller_voters: tuple[int, ...] = ()  # the controller group's voters (joint: both halves)
        self.views: dict[tuple[str, int], PartitionView] = {}
        self.views_by_group: dict[int, PartitionView] = {}
        self._leaders = _LeaderCache()
        self._led: dict[int, int] = {}  # group id -> term of the partitions led here, kept as views change
        self._on_cluster: list[Callable[[ctl.ClusterState], None]] = []
        self._on_controller_leader: list[Callable[[int], None]] = []

    def on_controller_leader(self, listener: Callable[[int], None]) -> None:
        """Call ``listener`` on the loop with the new controller leader (0: unknown) each time it changes."""
        self._on_controller_leader.append(listener)

    def on_cluster(self, listener: Callable[[ctl.ClusterState], None]) -> None:
        """Call ``listener`` on the loop after every new cluster state."""
        self._on_cluster.append(listener)

    # ------------------------------------------------------------------------ published by the scheduler

    @on_owner_thread
    def add_view(self, view: PartitionView) -> None:
        self.views[(view.topic, view.partition)] = view
        self.views_by_group[view.group_id] = view
        view.on_leadership = self._leadership_changed
        self._leadership_changed(view)

    @on_owner_thread
    def remove_view(self, view: PartitionView) -> None:
        view.mark_removed()
        view.on_leadership = None
        self.views.pop((view.topic, view.partition), None)
        self.views_by_group.pop(view.group_id, None)
        self._led.pop(view.group_id, None)

    def _leadership_changed(self, view: PartitionView) -> None:
        if self.views_by_group.get(view.group_id) is not view:
            return  # replaced by a newer view of the same group
        if view.is_leader:
            self._led[view.group_id] = view.leader_term
            self._leaders.learn(view.group_id, self.node_id, view.leader_term)
        else:
            self._led.pop(view.group_id, None)

    @on_owner_thread
    def set_cluster(self, state: ctl.ClusterState) -> None:
        self.cluster = state
        for view in self.views.values():
            topic = state.topics.get(view.topic)
            if topic is not None and view.partition < len(topic.partitions):
                view.replicas = topic.partitions[view.partition].replicas
        for listener in self._on_cluster:
            listener(state)

    @on_owner_thread
    def set_controller_leader(self, leader_id: int) -> None:
        changed = leader_id != self.controller_leader
        self.controller_leader = leader_id
        if changed:
            for listener in self._on_controller_leader:
                listener(leader_id)

    @on_owner_thread
    def set_controller_voters(self, voters: tuple[int, ...]) -> None:
        self.controller_voters = voters

    # ------------------------------------------------------------------------------------------ leaders

    def learn_leaders(self, announcements: Iterable[LeaderAnnouncement]) -> None:
        for a in announcements:
            self._leaders.learn(a.group_id, a.leader, a.term)

    def led_here(self) -> dict[int, int]:
        """Group id -> term of every partition this node leads (and remembered as such): kept up to date as
        views change, so asking costs a copy, not a walk over every view (10,000 replicas, 4 times a second)."""
        return dict(self._led)

    def leader_of(self, group_id: int) -> int:
        view = self.views_by_group.get(group_id)
        if view is not None and view.leader_id:
            return view.leader_id
        cached = self._leaders.leaders.get(group_id)
        return cached[0] if cached is not None else 0

    # ----------------------------------------------------------------------------------------- lookups

    def partition_state(self, topic: str, partition: int) -> ctl.PartitionState:
        """The partition of a user topic; UNKNOWN_TOPIC / UNKNOWN_PARTITION otherwise."""
        found = self.cluster.topics.get(topic)
        if found is None or found.internal:
            raise UnknownTopicError(f"unknown topic {topic!r}", topic=topic)
        if not 0 <= partition < len(found.partitions):
            raise UnknownPartitionError(
                f"topic {topic!r} has partitions 0..{len(found.partitions) - 1}, not {partition}",
                topic=topic,
                partition=partition,
            )
        return found.partitions[partition]

    def user_topics(self) -> list[ctl.Topic]:
        topics = self.cluster.topics
        return [topics[name] for name in sorted(topics) if not topics[name].internal]

    def not_leader(self, topic: str, partition: int, group_id: int) -> NotLeaderError:
        leader = self.leader_of(group_id)
        node = self.cluster.nodes.get(leader)
        return NotLeaderError(
            f"node {self.node_id} does not lead {topic}/{partition}",
            leader_id=leader,
            leader_address=node.client_address if node is not None else None,
        )

    def leader_view(self, topic: str, partition: int) -> PartitionView:
        """The local view of a partition this node leads; NOT_LEADER (with a hint) otherwise."""
        state = self.partition_state(topic, partition)
        view = self.views.get((topic, partition))
        if view is None or not view.is_leader:
            raise self.not_leader(topic, partition, state.group_id)
        return view
