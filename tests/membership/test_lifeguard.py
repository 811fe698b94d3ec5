"""Lifeguard: suspicion timeouts shrink with independent confirmations; slow nodes doubt themselves first."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from membership import EventKind, MembershipConfig, SimulatedNetwork
from membership._awareness import Awareness
from membership._suspicion import Suspicion, suspicion_timeout


def test_an_unconfirmed_suspicion_waits_the_longest_timeout() -> None:
    suspicion = Suspicion(accuser=1, incarnation=0, expected=3, shortest=2.0, longest=12.0, started=100.0)
    assert suspicion.deadline == 112.0


def test_each_independent_confirmation_shortens_the_timeout_down_to_the_shortest() -> None:
    suspicion = Suspicion(accuser=1, incarnation=0, expected=3, shortest=2.0, longest=12.0, started=100.0)
    deadlines = [suspicion.deadline]
    for accuser in (2, 3, 4):
        assert suspicion.confirm(accuser)
        deadlines.append(suspicion.deadline)
    assert deadlines == sorted(deadlines, reverse=True)
    assert deadlines[-1] == 102.0
    assert not suspicion.confirm(5)  # enough confirmations already


def test_repeated_and_self_confirmations_do_not_count() -> None:
    suspicion = Suspicion(accuser=1, incarnation=0, expected=3, shortest=2.0, longest=12.0, started=0.0)
    assert not suspicion.confirm(1)
    assert suspicion.confirm(2)
    assert not suspicion.confirm(2)
    assert suspicion.confirmations == 1


def test_without_expected_confirmations_the_shortest_timeout_applies() -> None:
    assert Suspicion(1, 0, expected=0, shortest=2.0, longest=12.0, started=0.0).deadline == 2.0


@given(
    expected=st.integers(1, 10),
    shortest=st.floats(0.1, 100),
    factor=st.floats(1, 10),
    confirmations=st.integers(0, 12),
)
def test_the_timeout_stays_between_shortest_and_longest_and_never_grows(
    expected: int, shortest: float, factor: float, confirmations: int
) -> None:
    longest = shortest * factor
    timeouts = [suspicion_timeout(c, expected, shortest, longest) for c in range(min(confirmations, expected) + 1)]
    assert all(shortest <= t <= longest for t in timeouts)
    assert timeouts == sorted(timeouts, reverse=True)


def test_health_awareness_is_clamped_and_stretches_timeouts() -> None:
    awareness = Awareness(max_multiplier=4)
    assert awareness.scale(0.5) == 0.5
    assert awareness.apply_delta(10) == 3
    assert awareness.scale(0.5) == 2.0
    assert awareness.apply_delta(-10) == 0


def test_a_slow_member_raises_its_health_score_and_probes_less_instead_of_killing_healthy_peers() -> None:
    config = MembershipConfig.lan()
    net = SimulatedNetwork(seed=11)
    net.start_converged(config, list(range(1, 9)))
    net.run_for(20)
    probes_before = {i: net.core(i).counters.probes for i in net.running()}
    # Everything sent to member 1 arrives 1.5 s late: its probes time out and the nacks come too late.
    net.slow_down(1, 1.5)
    scores = []
    for _ in range(60):
        net.run_for(1.0)
        scores.append(net.core(1).health_score)
    probes = {i: net.core(i).counters.probes - probes_before[i] for i in net.running()}
    assert max(scores) >= 3
    assert probes[1] < 0.6 * min(probes[i] for i in range(2, 9))
    # Member 1 may well be declared dead itself (every packet to it is late); healthy members must not be.
    killed = {e.member.node_id for _, e in net.events if e.kind is EventKind.DEAD}
    assert killed <= {1}


def _accusations_by_a_slow_member(awareness_max_multiplier: int) -> int:
    config = MembershipConfig.lan(awareness_max_multiplier=awareness_max_multiplier)
    net = SimulatedNetwork(seed=3)
    net.start_converged(config, list(range(1, 11)))
    net.slow_down(1, 1.5)
    net.run_for(120)
    return sum(1 for observer, e in net.events if observer == 1 and e.kind is EventKind.SUSPECT)


def test_health_awareness_makes_a_slow_member_accuse_healthy_peers_far_less() -> None:
    without, with_awareness = _accusations_by_a_slow_member(1), _accusations_by_a_slow_member(8)
    assert without > 100
    assert with_awareness * 10 < without
