"""The coordinators' tick reaches the offsets groups this node leads, and only them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from multiraft import controller as ctl
from multiraft.node.replicas.offsets import OFFSETS_TOPIC, OffsetsMachine
from multiraft.node.scheduler.scheduler import Scheduler
from multiraft.node.services.local_consumer_groups import offsets_group_ids, tick_group_hosts
from tests.controller._helpers import cluster, run


class _Host:
    def __init__(self) -> None:
        self.ticks = 0

    def tick(self, group: Any) -> None:
        self.ticks += 1


class _Offsets(OffsetsMachine):
    """An offsets machine that is only its coordinators' host."""

    def __init__(self) -> None:  # nothing of the real machine is needed here
        self.host = cast(Any, _Host())


@dataclass
class _Group:
    group_id: int
    machine: Any
    is_leader: bool = True


@dataclass
class _Scheduler:
    groups: dict[int, _Group] = field(default_factory=dict)


def test_only_the_named_offsets_groups_led_here_are_ticked() -> None:
    led, followed, unnamed = _Offsets(), _Offsets(), _Offsets()
    scheduler = _Scheduler(
        {1: _Group(1, led), 2: _Group(2, followed, is_leader=False), 3: _Group(3, unnamed), 4: _Group(4, object())}
    )
    tick_group_hosts(cast(Scheduler, scheduler), (1, 2, 4, 99))
    assert (led.host.ticks, followed.host.ticks, unnamed.host.ticks) == (1, 0, 0)


def test_the_offsets_groups_are_those_of_the_offsets_topic() -> None:
    state = cluster(3)
    assert offsets_group_ids(state) == ()
    configs = ctl.validate_topic_configs({}, creating=True)
    state = run(state, ctl.CreateTopic("orders", configs, (((1, 2, 3), 1),)))
    state = run(state, ctl.CreateTopic(OFFSETS_TOPIC, configs, (((1, 2, 3), 1), ((1, 2, 3), 2)), internal=True))
    assert offsets_group_ids(state) == tuple(p.group_id for p in state.topics[OFFSETS_TOPIC].partitions)
    assert len(offsets_group_ids(state)) == 2
