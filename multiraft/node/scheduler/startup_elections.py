"""Who campaigns first after a restart: each partition's preferred leader, so that its replicas do not split
the vote (scheduler thread).

At start every node reopens all the replicas on its disk, and so do its peers: at 10,000 replicas per node
every group's replicas time out within the same election window, several campaign at once and split the
votes, again and again while the nodes are busy answering each other; and whichever node finishes loading
first wins the groups of the others, which its leaders hand back to the preferred leaders later, a second
wave of elections. So a replica reopened at start holds off its campaign (``RawNode.delay_election``) until
the controller's state, replayed from this node's own log, says who the preferred leader is: that replica
campaigns at its election timeout (not at once: the node's first round finds no peer connection yet), the
others keep holding off, and campaign only if no leader is heard within the hold (the preferred leader's
node is down or cut off).
"""

from __future__ import annotations

import math
from typing import Protocol

from multiraft import controller as ctl
from multiraft.node.replicas.raft_group import RaftGroup
from multiraft.node.threads import SchedulerOwned, ThreadOwner

__all__ = ["Rounds", "StartupElections", "hold_ticks"]


class Rounds(Protocol):
    """What of the scheduler this needs: its groups, and a way to have a group looked at this round."""

    groups: dict[int, RaftGroup]

    def touch(self, group: RaftGroup) -> None: ...


def hold_ticks(election_ticks: int, tick_ms: int, load_s: float) -> int:
    """How long a reopened replica that is not the preferred leader holds off: two election timeouts, or as
    long as this node took to reopen its replicas if that is longer (its peers reopen about as many, and a
    preferred leader still loading cannot answer yet)."""
    return max(2 * election_ticks, math.ceil(load_s * 1000 / tick_ms))


class StartupElections(SchedulerOwned):
    """The replicas reopened at start that wait to learn their preferred leader."""

    def __init__(self, node_id: int, owner: ThreadOwner | None = None) -> None:
        self.owner = owner if owner is not None else ThreadOwner("scheduler")
        self._node_id = node_id
        self._waiting: dict[int, RaftGroup] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    def reopened(self, group: RaftGroup) -> None:
        """A replica reopened from disk at start: it waits for :meth:`hold` and :meth:`on_state`."""
        self._waiting[group.group_id] = group

    def hold(self, ticks: int) -> None:
        """Hold off every waiting replica's campaign for ``ticks`` ticks beyond its election timeout."""
        for group in self._waiting.values():
            group.raw.delay_election(ticks)

    def on_state(self, state: ctl.ClusterState, scheduler: Rounds) -> list[RaftGroup]:
        """The controller's state (perhaps replayed only in part): the waiting replicas it knows are decided;
        those this node is the preferred leader of stop holding off (returned) and campaign at their election
        timeout."""
        groups = scheduler.groups
        preferred = []
        decided = []
        for group_id, group in self._waiting.items():
            if groups.get(group_id) is not group:
                decided.append(group_id)  # removed or reopened since
                continue
            partition = state.group(group_id)
            if partition is None:
                continue  # created after the replayed part of the state: a later state decides
            decided.append(group_id)
            if partition.preferred_leader == self._node_id:
                # Its own election timeout, not at once: the first round's messages find no connection yet.
                group.raw.delay_election(0)
                scheduler.touch(group)  # ticked again if it slept
                preferred.append(group)
        for group_id in decided:
            del self._waiting[group_id]
        return preferred
