"""Whom a member believes (issue 13): forged senders, re-pointed addresses and incarnations at the top.

A packet must come from its sender's known gossip address; a third party may suspect, kill or spread newer
news of a member at the addresses we hold, but never re-point it, nor move its incarnation further than
``max_incarnation_jump``; an address change is believed first-hand only; incarnations compare as serial
numbers, so an accusation at 2**32 - 1 is refuted like any other.
"""

from __future__ import annotations

import random

from hypothesis import example, given, settings
from hypothesis import strategies as st

from membership import EventKind, Member, MemberMeta, MembershipConfig, MemberState, SimulatedNetwork, SwimCore
from membership._incarnation import is_at_least
from membership._wire import (
    Ack,
    Alive,
    Dead,
    Message,
    Ping,
    PushPull,
    StateEntry,
    Suspect,
    cluster_tag,
    decode_packet,
    encode_message,
    encode_packet,
    encode_push_pull,
)

from .strategies import SMALL_NODE_ID, messages, push_pulls

LAN = MembershipConfig.lan()
TAG = cluster_tag(LAN.cluster_name)
TOP = 2**32 - 1


def _meta(node_id: int, **changes: object) -> MemberMeta:
    fields: dict[str, object] = {
        "node_id": node_id,
        "client_addr": f"n{node_id}:9092",
        "peer_addr": f"n{node_id}:9093",
        **changes,
    }
    return MemberMeta(**fields)  # type: ignore[arg-type]


def _alive(node_id: int, incarnation: int = 0, addr: str | None = None, **changes: object) -> Alive:
    return Alive(incarnation, _meta(node_id, **changes), addr or f"n{node_id}:7946")


def _packet(sender: int, *messages: Message) -> bytes:
    return encode_packet(TAG, sender, 2, [encode_message(m) for m in messages])


def _core(node_id: int = 1, *, incarnation: int = 0) -> SwimCore:
    return SwimCore(LAN, _meta(node_id), f"n{node_id}:7946", rng=random.Random(0), now=0.0, incarnation=incarnation)


def _knowing(*members: int, incarnation: int = 0) -> SwimCore:
    """Member 1, having heard each of ``members`` first-hand."""
    core = _core()
    for member in members:
        core.receive(0.0, f"n{member}:7946", _packet(member, _alive(member, incarnation)))
    core.take_packets()
    core.take_events()
    return core


def _addresses(member: Member | None) -> tuple[str, str, str]:
    assert member is not None
    return member.gossip_addr, member.meta.client_addr, member.meta.peer_addr


# Forged senders


def test_a_packet_speaking_for_a_known_member_from_another_address_is_dropped() -> None:
    core = _knowing(2, 3)
    core.receive(1.0, "evil:666", _packet(2, Dead(0, 3, 2), Ping(7, 1)))
    assert core.state_of(3) is MemberState.ALIVE
    assert [addr for addr, _ in core.take_packets() if addr == "evil:666"] == []  # the ping is not answered
    assert core.counters.spoofed_dropped == 1


def test_an_unknown_sender_must_introduce_itself_from_the_address_it_names() -> None:
    core = _core()
    core.receive(0.0, "evil:666", _packet(9, _alive(9), Ping(5, 1)))
    assert core.member(9) is None
    assert core.counters.unknown_sender_dropped == 1
    core.receive(0.0, "n9:7946", _packet(9, _alive(9), Ping(5, 1)))
    assert core.member(9) is not None


def test_an_ack_from_anyone_but_the_target_or_a_helper_does_not_save_a_probed_member() -> None:
    core = _knowing(2, 3)
    core.tick(LAN.probe_interval)  # probes 2 or 3
    [(target_addr, ping)] = [
        (a, m) for a, d in core.take_packets() for m in decode_packet(d).messages if isinstance(m, Ping)
    ]
    other = 5 - ping.target
    core.receive(LAN.probe_interval, f"n{other}:7946", _packet(other, Ack(ping.seq)))
    core.tick(3 * LAN.probe_interval)
    assert core.state_of(ping.target) is MemberState.SUSPECT
    assert target_addr == f"n{ping.target}:7946"


# Re-pointing a member


def test_a_third_party_cannot_repoint_a_live_members_peer_address_but_makes_us_ask_the_member() -> None:
    core = _knowing(2, 3)
    core.receive(1.0, "n3:7946", _packet(3, _alive(2, 5, peer_addr="evil:9093")))
    assert _addresses(core.member(2)) == ("n2:7946", "n2:9092", "n2:9093")
    assert [e for e in core.take_events() if e.kind is EventKind.UPDATE] == []
    assert core.take_push_pulls() == ["n2:7946"]  # the check goes to the address we hold
    assert core.counters.address_checks == 1
    # Repeated claims do not turn into a flood of checks.
    core.receive(1.1, "n3:7946", _packet(3, _alive(2, 6, peer_addr="evil:9093")))
    assert core.take_push_pulls() == []


def test_a_member_changes_its_own_peer_address_first_hand() -> None:
    core = _knowing(2)
    core.receive(1.0, "n2:7946", _packet(2, _alive(2, 1, peer_addr="n2:9999")))
    assert _addresses(core.member(2)) == ("n2:7946", "n2:9092", "n2:9999")
    assert [e.kind for e in core.take_events()] == [EventKind.UPDATE]


def test_a_dead_member_is_moved_only_by_its_own_answer_from_the_new_address() -> None:
    core = _knowing(2, 3)
    core.receive(1.0, "n3:7946", _packet(3, Dead(0, 2, 3)))
    assert core.state_of(2) is MemberState.DEAD
    core.receive(2.0, "n3:7946", _packet(3, _alive(2, 1, "evil:7946", peer_addr="evil:9093")))
    assert core.state_of(2) is MemberState.DEAD
    assert core.take_push_pulls() == ["evil:7946"]
    # Whoever answers there is not member 2: nothing changes.
    impostor = PushPull(TAG, 9, False, (StateEntry(0, _meta(9), "evil:7946", MemberState.ALIVE),))
    assert core.handle_push_pull_response(2.1, encode_push_pull(impostor), "evil:7946")
    assert core.state_of(2) is MemberState.DEAD
    # A reply that names 2 but came from another address than the one we dialled is third-party news too.
    moved = StateEntry(1, _meta(2, peer_addr="new:9093"), "new:7946", MemberState.ALIVE)
    core.handle_push_pull_response(2.2, encode_push_pull(PushPull(TAG, 2, False, (moved,))), "evil:7946")
    assert core.state_of(2) is MemberState.DEAD
    # Member 2 itself, answering at its new address, is believed.
    core.handle_push_pull_response(2.3, encode_push_pull(PushPull(TAG, 2, False, (moved,))), "new:7946")
    member = core.member(2)
    assert member is not None and member.state is MemberState.ALIVE
    assert _addresses(member) == ("new:7946", "n2:9092", "new:9093")


def test_a_restarted_member_announces_its_new_address_itself() -> None:
    core = _knowing(2, 3)
    core.receive(1.0, "n3:7946", _packet(3, Dead(0, 2, 3)))
    core.receive(2.0, "n2b:7946", _packet(2, _alive(2, 0, "n2b:7946"), Ping(4, 1)))
    member = core.member(2)
    assert member is not None and member.state is MemberState.ALIVE and member.gossip_addr == "n2b:7946"


def test_a_member_heard_of_second_hand_is_unconfirmed_until_it_answers_from_its_address() -> None:
    core = _knowing(3)
    core.receive(1.0, "n3:7946", _packet(3, _alive(4)))
    member = core.member(4)
    assert member is not None and member.state is MemberState.ALIVE and not member.confirmed
    assert [(e.kind, e.member.confirmed) for e in core.take_events()] == [(EventKind.JOIN, False)]
    # It is greeted at once, with our own alive message so that it can answer a stranger.
    greetings = [decode_packet(d).messages for a, d in core.take_packets() if a == "n4:7946"]
    assert any(isinstance(m, Ping) and m.target == 4 for msgs in greetings for m in msgs)
    assert any(m == _alive(1) for msgs in greetings for m in msgs)
    # Someone else speaking for it from elsewhere does not confirm it; its own answer does.
    core.receive(1.1, "evil:1", _packet(4, _alive(4, 0, "evil:1"), Ack(1)))
    assert not core.member(4).confirmed  # type: ignore[union-attr]
    core.receive(1.2, "n4:7946", _packet(4, Ack(1)))
    assert core.member(4).confirmed  # type: ignore[union-attr]
    assert [(e.kind, e.member.confirmed) for e in core.take_events()] == [(EventKind.UPDATE, True)]


def test_a_push_pull_request_cannot_repoint_members_either() -> None:
    core = _knowing(2, 3)
    entries = (
        StateEntry(0, _meta(3), "n3:7946", MemberState.ALIVE),
        StateEntry(9, _meta(2, client_addr="evil:9092"), "n2:7946", MemberState.ALIVE),
    )
    assert core.handle_push_pull_request(1.0, encode_push_pull(PushPull(TAG, 3, False, entries))) is not None
    assert _addresses(core.member(2)) == ("n2:7946", "n2:9092", "n2:9093")


@settings(max_examples=100, deadline=None)
@given(script=st.lists(st.tuples(st.integers(2, 5), st.lists(messages(SMALL_NODE_ID), min_size=1, max_size=4))))
@example(script=[(3, [Alive(1, _meta(2, peer_addr="evil:1"), "n2:7946")])])
def test_no_message_re_points_a_known_member_unless_it_comes_from_that_member(
    script: list[tuple[int, list[Message]]],
) -> None:
    core = _knowing(2, 3, 4, 5)
    for sender, batch in script:
        before = {m.node_id: _addresses(m) for m in core.all_members()}
        core.receive(1.0, f"n{sender}:7946", _packet(sender, *batch))
        for member in core.all_members():
            if member.node_id in before and member.node_id != sender:
                assert _addresses(member) == before[member.node_id], member


@settings(max_examples=100, deadline=None)
@given(state=push_pulls(), sender=st.integers(2, 5))
def test_no_push_pull_request_re_points_a_known_member(state: PushPull, sender: int) -> None:
    core = _knowing(2, 3, 4, 5)
    before = {m.node_id: _addresses(m) for m in core.all_members()}
    known = tuple(StateEntry(TOP, _meta(i, peer_addr="evil:1"), f"n{i}:7946", MemberState.ALIVE) for i in (2, 3))
    forged = PushPull(TAG, sender, state.join, state.entries + known)
    core.handle_push_pull_request(1.0, encode_push_pull(forged))
    for member in core.all_members():
        if member.node_id in before:
            assert _addresses(member) == before[member.node_id], member


# Incarnations


def test_a_third_party_cannot_jump_a_members_incarnation_far_ahead() -> None:
    core = _knowing(2, 3)
    jump = LAN.max_incarnation_jump
    forged = (Suspect(TOP, 2, 3), Suspect(2**31 - 1, 2, 3), Dead(jump + 1, 2, 3), _alive(2, jump + 1))
    core.receive(1.0, "n3:7946", _packet(3, *forged))
    member = core.member(2)
    assert member is not None and member.state is MemberState.ALIVE and member.incarnation == 0
    assert core.counters.implausible_dropped == 3
    core.receive(1.0, "n3:7946", _packet(3, Suspect(jump, 2, 3)))
    assert core.state_of(2) is MemberState.SUSPECT


@settings(max_examples=60, deadline=None)
@given(held=st.integers(0, TOP), step=st.integers(0, LAN.max_incarnation_jump), own=st.integers(0, TOP))
@example(held=TOP, step=0, own=TOP)
@example(held=TOP - 3, step=5, own=TOP - 3)
# The member's own number exactly half the space away from what others hold (forged news told only to it
# can put it there): neither number is newer than the other, and it must still refute.
@example(held=7, step=0, own=7 + 2**31)
@example(held=7, step=0, own=6)
def test_every_accusation_a_member_hears_can_be_refuted(held: int, step: int, own: int) -> None:
    """Whatever the observer holds (``held``) and the member holds of itself (``own``)."""
    accused = (held + step) % 2**32
    observer = _knowing(2, 3, incarnation=held)
    member = _core(2, incarnation=own)
    member.receive(0.0, "n1:7946", _packet(1, _alive(1)))
    member.take_packets()
    accusation = _packet(3, Suspect(accused, 2, 3))
    observer.receive(1.0, "n3:7946", accusation)
    assert observer.state_of(2) is MemberState.SUSPECT
    member.receive(1.0, "n1:7946", _packet(1, Suspect(accused, 2, 3)))
    assert member.local_member.state is MemberState.ALIVE
    member.tick(1.0 + LAN.gossip_interval)
    for addr, data in member.take_packets():
        if addr == "n1:7946":
            observer.receive(1.1, "n2:7946", data)
    assert observer.state_of(2) is MemberState.ALIVE
    seen = observer.member(2)
    assert seen is not None and is_at_least(seen.incarnation, accused) and seen.incarnation != accused


def test_a_member_suspected_at_the_largest_incarnation_stays_alive_in_a_cluster() -> None:
    net = SimulatedNetwork(seed=13)
    for node_id in (1, 2, 3, 4):
        net.add(LAN, node_id, incarnation=TOP if node_id == 2 else 0)
    for node_id in (2, 3, 4):
        net.join(node_id, [1])
    assert net.run_until_true(net.converged, timeout=30) is not None
    net.inject(1, "n3:7946", _packet(3, Suspect(TOP, 2, 3)))
    net.inject(3, "n4:7946", _packet(4, Dead(TOP, 2, 4)))
    net.run_for(60)
    assert net.all_agree(2, MemberState.ALIVE)


def test_a_forged_leave_told_to_one_member_is_refuted_within_seconds() -> None:
    # Members gossip to the recently left as to the recently dead, so the accused hears of its "leave".
    net = SimulatedNetwork(seed=1)
    net.start_converged(LAN, [1, 2, 3, 4, 5])
    net.run_for(1)
    fake = Alive(0, MemberMeta(66, "e:1", "e:2"), "evil:1")
    net.inject(1, "evil:1", _packet(66, fake, Dead(0, 2, 2)))
    assert net.core(1).state_of(2) is MemberState.LEFT
    net.run_for(5)  # the periodic push-pull, which also repairs it, is 30 s away
    assert net.all_agree(2, MemberState.ALIVE)


def test_a_member_whose_own_news_is_older_than_what_we_hold_is_told_what_we_hold() -> None:
    # A third party's alive at a higher (plausible) incarnation, at the member's true addresses, must not hide
    # the member's own later news until a push-pull happens to pair us: we tell it, and it refutes.
    core = _knowing(2, 3)
    core.receive(1.0, "n3:7946", _packet(3, _alive(2, 1000)))
    core.take_packets()
    core.receive(1.1, "n2:7946", _packet(2, _alive(2, 1, rack="r9")))
    sent = [m for addr, data in core.take_packets() if addr == "n2:7946" for m in decode_packet(data).messages]
    assert _alive(2, 1000) in sent
    member = _core(2, incarnation=1)
    member.receive(1.2, "n1:7946", _packet(1, _alive(1), _alive(2, 1000)))
    assert member.local_member.incarnation == 1001


def test_a_member_pushed_far_ahead_by_news_told_only_to_it_is_still_heard_by_everyone() -> None:
    # Member 2 refutes a forged alive far ahead; third parties may not relay such a jump, so each member
    # that hears it second-hand asks member 2 itself (a push-pull) instead of keeping its stale record.
    net = SimulatedNetwork(seed=4)
    net.start_converged(LAN, list(range(1, 21)))
    net.run_for(1)
    fake = Alive(0, MemberMeta(66, "e:1", "e:2"), "evil:1")
    net.inject(2, "evil:1", _packet(66, fake, _alive(2, 5000)))
    assert net.core(2).local_member.incarnation == 5001
    net.core(2).update_meta(net.now, _meta(2, rack="r9"))
    net.run_for(5)  # the periodic push-pull, which would also repair it, is 30 s away
    for core in net.cores.values():
        seen = core.member(2)
        assert seen is not None and seen.meta.rack == "r9" and seen.state is MemberState.ALIVE
