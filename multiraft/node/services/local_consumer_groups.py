"""The event loop's handle on the group coordinators hosted here
(:mod:`multiraft.node.replicas.consumer_group_host`), and
their periodic tick on the scheduler thread."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from multiraft import controller as ctl
from multiraft.errors import MultiraftError, NotLeaderError, RequestTimeoutError
from multiraft.logging import get_logger
from multiraft.node.replicas.offsets import OFFSETS_TOPIC, OffsetsMachine
from multiraft.node.scheduler.scheduler import Completion, Scheduler
from multiraft.node.threads import LoopOwned, SchedulerHandoff
from multiraft.node.vocabulary.consumer_groups import GroupDescribe, GroupOperation, GroupsList

__all__ = ["LocalConsumerGroups", "tick_group_hosts", "offsets_group_ids", "GROUP_TICK_S"]

log = get_logger(__name__)

GROUP_TICK_S = 0.1  # how often coordinators expire sessions and end rebalances


def serve_group_operation(
    scheduler: Scheduler, group_id: int, operation: GroupOperation, completion: Completion
) -> None:
    """On the scheduler thread: hand ``operation`` to the coordinators of offsets group ``group_id``."""
    group = scheduler.groups.get(group_id)
    if group is None or not isinstance(group.machine, OffsetsMachine):
        completion(None, NotLeaderError(f"this node hosts no offsets group {group_id}"))
        return
    host = group.machine.host
    try:
        if isinstance(operation, GroupsList | GroupDescribe):
            # Confirmed by a quorum first, as offsets reads are (reads.py): a leader that lost its quorum
            # while quiescent never checks it, and would list or describe from memory as if it still led.
            scheduler.read(group, lambda: host.read(group, operation), completion)
        else:
            host.handle(group, operation, completion)
    except Exception as exc:  # a bug met by one request fails that request only, at once
        log.exception("group request failed unexpectedly", operation=type(operation).__name__, error=repr(exc))
        completion(None, MultiraftError(f"internal error serving {type(operation).__name__}: {exc!r}"))


def offsets_group_ids(state: ctl.ClusterState) -> tuple[int, ...]:
    """The group ids of the internal offsets topic's partitions (none before it is created)."""
    topic = state.topics.get(OFFSETS_TOPIC)
    return tuple(p.group_id for p in topic.partitions) if topic is not None else ()


def tick_group_hosts(scheduler: Scheduler, group_ids: Iterable[int]) -> None:
    """On the scheduler thread: tick the coordinators of the offsets groups ``group_ids`` that this node leads.

    Only those groups are looked at: every 100 ms over every hosted group would cost a node with 10,000
    partition replicas a walk over all of them."""
    groups = scheduler.groups
    for group_id in group_ids:
        group = groups.get(group_id)
        if group is not None and group.is_leader and isinstance(group.machine, OffsetsMachine):
            group.machine.host.tick(group)


class LocalConsumerGroups(LoopOwned):
    """Runs group operations on this node's coordinators and awaits their answer (a long poll for joins)."""

    def __init__(self, scheduler: Scheduler, handoff: SchedulerHandoff) -> None:
        self._scheduler = scheduler
        self._handoff = handoff

    async def call(self, group_id: int, operation: GroupOperation, timeout_s: float) -> Any:
        future, completion = self._handoff.completion()
        scheduler = self._scheduler
        self._handoff.submit(lambda: serve_group_operation(scheduler, group_id, operation, completion))
        try:
            return await asyncio.wait_for(future, max(0.01, timeout_s))
        except TimeoutError:
            raise RequestTimeoutError("the group coordinator did not answer in time") from None
