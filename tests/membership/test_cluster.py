"""Whole-cluster behaviour on the simulated network: convergence, failure detection, loss, rejoin, healing.

Every run is seeded and driven by the virtual clock, so a run of minutes takes a fraction of a second and
replays exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from membership import EventKind, MembershipConfig, MemberState, SimulatedNetwork

LAN = MembershipConfig.lan()
LOCAL = MembershipConfig.local()


def _members(n: int) -> list[int]:
    return list(range(1, n + 1))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fifty_members_joining_through_one_seed_converge_within_log_n_protocol_periods(seed: int) -> None:
    n = 50
    net = SimulatedNetwork(seed=seed)
    for node_id in _members(n):
        net.add(LAN, node_id)
    for node_id in _members(n)[1:]:
        net.join(node_id, [1])
    took = net.run_until_true(net.converged, timeout=60, step=0.1)
    assert took is not None
    assert took / LAN.probe_interval <= 2 * math.log2(n)


def test_news_of_a_join_reaches_every_one_of_fifty_members_within_log_n_protocol_periods() -> None:
    net = SimulatedNetwork(seed=4)
    net.start_converged(LAN, _members(50))
    net.run_for(10)
    net.add(LAN, 51)
    net.join(51, [1])
    took = net.run_until_true(net.converged, timeout=60, step=0.05)
    assert took is not None
    assert took / LAN.probe_interval <= math.log2(51)


def test_a_member_that_missed_gossip_catches_up_through_a_divergence_sync() -> None:
    net = SimulatedNetwork(seed=5)
    net.start_converged(LAN, _members(20))
    net.partition([20])
    net.add(LAN, 21)
    net.join(21, [1])
    net.run_for(2)  # the news of 21 is spread and retired while 20 is cut off
    net.heal()
    assert net.core(20).state_of(21) is None
    took = net.run_until_true(lambda: net.core(20).state_of(21) is MemberState.ALIVE, timeout=20, step=0.1)
    assert took is not None and took < LAN.push_pull_interval
    assert net.core(20).counters.divergence_syncs >= 1


@pytest.mark.parametrize("config", [LAN, LOCAL], ids=["lan", "local"])
def test_a_crashed_member_is_declared_dead_by_every_member_within_the_configured_bound(
    config: MembershipConfig,
) -> None:
    n = 20
    net = SimulatedNetwork(seed=6)
    net.start_converged(config, _members(n))
    net.run_for(10)
    crashed_at = net.now
    net.crash(n)
    bound = config.failure_detection_bound(n)
    took = net.run_until_true(lambda: net.all_agree(n, MemberState.DEAD), timeout=bound, step=0.01)
    assert took is not None, f"not every member declared the crash within {bound:.1f} s"
    deaths = [e for _, e in net.events if e.kind is EventKind.DEAD]
    assert {e.member.node_id for e in deaths} == {n}
    assert all(e.at - crashed_at <= bound for e in deaths)


def _false_deaths_under_loss(config: MembershipConfig, n: int, seconds: float, loss: float) -> dict[str, float]:
    net = SimulatedNetwork(seed=7, loss=loss)
    net.start_converged(config, _members(n))
    net.events.clear()
    net.run_for(seconds)
    probes = sum(core.counters.probes for core in net.cores.values())
    failed = sum(core.counters.probe_failures for core in net.cores.values())
    deaths = sum(1 for _, e in net.events if e.kind is EventKind.DEAD)
    return {
        "member_hours": n * seconds / 3600,
        "false_deaths": deaths,
        "false_deaths_per_member_hour": deaths / (n * seconds / 3600),
        "failed_probe_rate": failed / probes,
        "refutations": sum(core.counters.refutations for core in net.cores.values()),
    }


@pytest.mark.parametrize(
    ("config", "n", "seconds"), [(LAN, 50, 600.0), (LOCAL, 20, 300.0)], ids=["lan-50x600s", "local-20x300s"]
)
def test_no_live_member_is_declared_dead_under_ten_percent_packet_loss(
    config: MembershipConfig, n: int, seconds: float, record_property: Callable[[str, object], None]
) -> None:
    result = _false_deaths_under_loss(config, n, seconds, loss=0.10)
    for key, value in result.items():
        record_property(key, value)
    # Probes do fail (both packets of a ping must arrive, and every indirect path too), and are refuted.
    assert result["failed_probe_rate"] > 0
    assert result["false_deaths"] == 0, result


@pytest.mark.slow
def test_no_live_member_is_declared_dead_under_ten_percent_loss_in_a_long_run_of_a_hundred_members() -> None:
    result = _false_deaths_under_loss(LAN, 100, 1800.0, loss=0.10)
    assert result["false_deaths"] == 0, result


@pytest.mark.parametrize("new_address", [False, True], ids=["same-address", "new-address"])
def test_a_restarted_member_refutes_its_own_death(new_address: bool) -> None:
    net = SimulatedNetwork(seed=8)
    net.start_converged(LAN, _members(10))
    net.run_for(5)
    net.crash(10)
    assert net.run_until_true(lambda: net.all_agree(10, MemberState.DEAD), timeout=60) is not None
    dead = net.core(1).member(10)
    assert dead is not None
    net.run_for(5)
    restarted = net.add(LAN, 10, new_address=new_address)  # a fresh process: incarnation 0
    net.join(10, [1])
    assert net.run_until_true(net.converged, timeout=10, step=0.05) is not None
    assert restarted.local_member.incarnation > dead.incarnation
    for node_id in _members(9):
        member = net.core(node_id).member(10)
        assert member is not None and member.gossip_addr == restarted.local_member.gossip_addr
    assert EventKind.JOIN in [
        e.kind for o, e in net.events if o == 1 and e.member.node_id == 10 and e.at > dead.state_changed_at
    ]


def test_a_member_wrongly_declared_dead_rejoins_when_the_partition_heals() -> None:
    net = SimulatedNetwork(seed=9)
    net.start_converged(LAN, _members(10))
    net.partition([10])
    isolated_sees_all_dead = lambda: all(net.core(10).state_of(i) is MemberState.DEAD for i in _members(9))  # noqa: E731
    assert net.run_until_true(lambda: net.all_agree(10, MemberState.DEAD) and isolated_sees_all_dead(), timeout=300)
    net.heal()
    took = net.run_until_true(net.converged, timeout=2 * LAN.reconnect_interval, step=0.1)
    assert took is not None
    assert net.core(10).local_member.incarnation >= 1


def test_members_that_left_are_forgotten_and_dead_ones_remembered_for_reconnects() -> None:
    config = LAN.with_changes(gossip_to_the_dead_time=5.0, reconnect_timeout=60.0)
    net = SimulatedNetwork(seed=10)
    net.start_converged(config, _members(6))
    net.core(5).leave(net.now)
    net.run_for(1)
    net.crash(5)
    net.crash(6)
    net.run_for(40)
    assert net.all_agree(5, None)  # left: forgotten after gossip_to_the_dead_time
    assert net.all_agree(6, MemberState.DEAD)  # dead: remembered, and retried
    assert sum(core.counters.reconnects for core in net.cores.values()) > 0
    net.run_for(60)
    assert net.all_agree(6, None)  # forgotten after reconnect_timeout
