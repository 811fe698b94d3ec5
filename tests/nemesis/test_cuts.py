"""The node's debug network cuts (multiraft.node.debug): what a cuts file makes a node drop, in which direction."""

from __future__ import annotations

from pathlib import Path

import pytest

from multiraft import raft
from multiraft.node.debug import CUTS_FILE, CutPlan, Isolation


def _message(kind: raft.MessageType = raft.MessageType.HEARTBEAT) -> list[tuple[int, raft.Message]]:
    return [(7, raft.Message(type=kind, to=1, sender=2, term=3))]


def _isolation(tmp_path: Path, plan: CutPlan | None) -> Isolation:
    isolation = Isolation(1, tmp_path / CUTS_FILE)
    if plan is not None:
        (tmp_path / CUTS_FILE).write_text(plan.to_json())
    isolation.reload()
    return isolation


def test_a_cuts_file_round_trips() -> None:
    plan = CutPlan(4, frozenset({2, 3}), frozenset({3}), {2: "127.0.0.1:7002", 3: "127.0.0.1:7003"})
    assert CutPlan.from_json(plan.to_json()) == plan


def test_a_one_way_cut_drops_only_its_direction_of_raft_requests_and_gossip(tmp_path: Path) -> None:
    isolation = _isolation(tmp_path, CutPlan(1, frozenset(), frozenset({2}), {2: "127.0.0.1:7002", 3: "x:3"}))
    assert isolation.drop_incoming(2, _message())
    assert not isolation.drop_incoming(3, _message())
    assert isolation.keep_outgoing({2: _message(), 3: _message()}).keys() == {2, 3}
    assert isolation.drop_request(2, False) and not isolation.drop_request(2, True)
    assert isolation.drop_packet("127.0.0.1:7002", False) and not isolation.drop_packet("127.0.0.1:7002", True)
    assert not isolation.drop_packet("x:3", False)


def test_outgoing_cuts_keep_the_batches_of_other_peers_and_count_what_they_drop(tmp_path: Path) -> None:
    isolation = _isolation(tmp_path, CutPlan(1, frozenset({3}), frozenset()))
    kept = isolation.keep_outgoing({2: _message(), 3: _message(raft.MessageType.PRE_VOTE)})
    assert kept.keys() == {2}
    assert isolation.dropped[(True, raft.MessageType.PRE_VOTE)] == 1


def test_an_empty_cuts_file_heals(tmp_path: Path) -> None:
    isolation = _isolation(tmp_path, CutPlan(1, frozenset({2}), frozenset({2})))
    assert isolation.isolated
    (tmp_path / CUTS_FILE).write_text(CutPlan(2).to_json())
    isolation.reload()
    assert not isolation.isolated
    assert not isolation.drop_incoming(2, _message())


def test_without_a_cuts_file_the_signal_toggles_a_cut_from_every_peer(tmp_path: Path) -> None:
    isolation = _isolation(tmp_path, None)
    assert isolation.drop_incoming(5, _message()) and isolation.keep_outgoing({9: _message()}) == {}
    assert isolation.drop_packet("any:1", True)
    isolation.reload()
    assert not isolation.isolated


@pytest.mark.parametrize("text", ["5", "{not json", '{"drop_to": ["a"]}'])
def test_an_unreadable_cuts_file_leaves_the_cuts_as_they_were(tmp_path: Path, text: str) -> None:
    isolation = _isolation(tmp_path, CutPlan(1, frozenset({2}), frozenset()))
    (tmp_path / CUTS_FILE).write_text(text)
    isolation.reload()
    assert isolation.cuts(2, outgoing=True)


def test_a_cut_peer_request_is_lost_in_either_direction_and_answered_again_once_healed() -> None:
    import asyncio

    from multiraft.node.peer.transport import PeerTransport

    cuts: dict[str, set[tuple[int, bool]]] = {"one": set(), "two": set()}

    async def answer(from_node: int, kind: int, body: bytes) -> tuple[int, bytes]:
        return 0, b"pong"

    def transport(node_id: int, name: str) -> PeerTransport:
        peer = PeerTransport(
            node_id=node_id, cluster_id="t", listen="127.0.0.1:0", deliver=lambda *_: None,
            on_unreachable=lambda _: None, handle_request=answer,
        )  # fmt: skip
        peer.drop_request = lambda node, outgoing: (node, outgoing) in cuts[name]
        return peer

    async def scenario() -> list[str]:
        one, two = transport(1, "one"), transport(2, "two")
        await one.start()
        await two.start()
        one.set_peer(2, f"127.0.0.1:{two.port}")
        two.set_peer(1, f"127.0.0.1:{one.port}")
        outcomes = []
        try:
            for cut in [set(), {("one", (2, True))}, {("two", (1, False))}, {("two", (1, True))},
                        {("one", (2, False))}, set()]:  # fmt: skip
                cuts["one"] = {c for side, c in cut if side == "one"}
                cuts["two"] = {c for side, c in cut if side == "two"}
                try:
                    outcomes.append((await one.call(2, 1, b"ping", timeout_s=0.5))[1].decode())
                except TimeoutError:
                    outcomes.append("lost")
        finally:
            await one.stop()
            await two.stop()
        return outcomes

    assert asyncio.run(scenario()) == ["pong", "lost", "lost", "lost", "lost", "pong"]
