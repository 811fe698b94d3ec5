"""A node's gossip keyring file: loaded at start, re-read while running, so keys rotate without a restart.

Three nodes' member-lists (NodeMembership, as the node runs it) on 127.0.0.1 share a keyring file each; the
operator's three rotation steps are edits of those files, picked up by the poll, with nothing dropped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TypeVar

import pytest
import structlog
from structlog.testing import capture_logs

from membership import EventKind, Keyring, MemberEvent, generate_key
from multiraft.config.node import NodeConfig
from multiraft.errors import ConfigError
from multiraft.node.cluster import swim as node_membership
from multiraft.node.cluster.swim import NodeMembership

T = TypeVar("T")
POLL_S = 0.05

pytestmark = pytest.mark.timeout(120)


def _run(scenario: Callable[[], Awaitable[T]]) -> T:
    async def bounded() -> T:
        async with asyncio.timeout(100):
            return await scenario()

    return asyncio.run(bounded())


async def _until(predicate: Callable[[], bool], timeout: float) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)


def _ignore(event: MemberEvent) -> None:
    pass


class _Node:
    def __init__(self, node_id: int, seeds: tuple[str, ...], tmp: Path, keys: Sequence[str]) -> None:
        self.node_id = node_id
        self.keyring_file = tmp / f"node{node_id}.keyring"
        self.write(keys)
        config = NodeConfig(
            node_id=node_id,
            data_dir=str(tmp),
            gossip_address="127.0.0.1:0",
            seeds=seeds,
            membership_profile="local",
            gossip_keyring_file=str(self.keyring_file),
        )
        self.events: list[MemberEvent] = []
        self.membership = NodeMembership(
            config,
            client_address=f"127.0.0.1:{18000 + node_id}",
            peer_address=f"127.0.0.1:{18100 + node_id}",
            on_event=self.events.append,
            keyring_poll_s=POLL_S,
        )

    def write(self, keys: Sequence[str], comment: str = "") -> None:
        self.keyring_file.write_text(f"# gossip keyring{comment}\n" + "".join(f"{k}\n" for k in keys))

    def dropped(self) -> int:
        return self.membership.counters()["undecryptable_dropped"]


async def _converged(nodes: Sequence[_Node]) -> None:
    def alive_everywhere() -> bool:
        return all(all(n.membership.state(o.node_id) == "alive" for o in nodes) for n in nodes)

    await _until(alive_everywhere, 20)


async def _traffic(nodes: Sequence[_Node], packets: int = 20) -> None:
    marks = [n.membership.counters()["packets_in"] for n in nodes]
    await _until(
        lambda: all(n.membership.counters()["packets_in"] >= m + packets for n, m in zip(nodes, marks, strict=True)), 20
    )


async def _start(tmp: Path, keys: Sequence[str]) -> list[_Node]:
    first = _Node(1, (), tmp, keys)
    await first.membership.start()
    nodes = [
        first,
        _Node(2, (first.membership.gossip_addr,), tmp, keys),
        _Node(3, (first.membership.gossip_addr,), tmp, keys),
    ]
    for node in nodes[1:]:
        await node.membership.start()
    await _converged(nodes)
    return nodes


def test_rotation_by_editing_the_keyring_files_keeps_every_node_alive_and_drops_nothing(tmp_path: Path) -> None:
    old, new = generate_key(), generate_key()

    async def scenario() -> None:
        nodes = await _start(tmp_path, [old])
        try:
            for step in ([old, new], [new, old], [new]):
                expected = Keyring.from_base64(*step)
                for node in nodes:  # a rollout edits one node's file after the other
                    node.write(step)
                    await _until(lambda n=node, ring=expected: n.membership.keyring == ring, 10)  # type: ignore[misc]
                    await _traffic(nodes, packets=5)
                await _traffic(nodes)
            for node in nodes:
                assert node.dropped() == 0
                assert node.membership.keyring == Keyring.from_base64(new)
                assert not [e for e in node.events if e.kind in (EventKind.DEAD, EventKind.LEAVE)]
            await _converged(nodes)
        finally:
            for node in nodes:
                await node.membership.stop()

    _run(scenario)


def test_a_broken_or_missing_keyring_file_keeps_the_keys_in_use(tmp_path: Path) -> None:
    key = generate_key()

    async def scenario() -> None:
        nodes = await _start(tmp_path, [key])
        try:
            in_use = nodes[0].membership.keyring
            nodes[0].keyring_file.write_text("this is not base64\n")
            assert nodes[0].membership.reload_keyring() is False
            nodes[1].keyring_file.write_text("")
            nodes[2].keyring_file.unlink()
            await asyncio.sleep(POLL_S * 5)  # several polls pass (nothing to wait for: nothing may change)
            await _traffic(nodes)
            for node in nodes:
                assert node.membership.keyring == in_use
                assert node.dropped() == 0
            # A comment-only edit is no new keyring; a valid one is taken at once.
            nodes[0].write([key], comment=" (edited)")
            assert nodes[0].membership.reload_keyring() is False
            nodes[0].write([generate_key(), key])
            assert nodes[0].membership.reload_keyring() is True
        finally:
            for node in nodes:
                await node.membership.stop()

    _run(scenario)


def test_a_node_with_another_key_is_never_believed(tmp_path: Path) -> None:
    async def scenario() -> None:
        nodes = await _start(tmp_path, [generate_key()])
        stranger = _Node(4, (nodes[0].membership.gossip_addr,), tmp_path, [generate_key()])
        await stranger.membership.start()
        try:
            await _until(lambda: nodes[0].dropped() >= 2, 10)  # its join attempts, retried
            await _traffic(nodes)
            for node in nodes:
                assert node.membership.state(4) == "unknown"
                assert node.membership.member(4) is None
            assert not stranger.membership.joined.is_set()
        finally:
            for node in [*nodes, stranger]:
                await node.membership.stop()

    _run(scenario)


def test_a_missing_or_wrong_keyring_file_stops_the_node_at_start_naming_the_key(tmp_path: Path) -> None:
    base = {"node_id": 1, "data_dir": str(tmp_path), "gossip_address": "127.0.0.1:0"}
    wrong = tmp_path / "wrong.keyring"
    wrong.write_text("c2hvcnQ=\n")  # 5 bytes
    for path, problem in ((tmp_path / "absent", "cannot read"), (wrong, "line 1: a 5-byte key")):
        config = NodeConfig(**base, gossip_keyring_file=str(path))  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match=problem) as caught:
            NodeMembership(config, client_address="127.0.0.1:1", peer_address="127.0.0.1:2", on_event=_ignore)
        assert caught.value.field == "gossip_keyring_file"


def test_without_a_keyring_file_gossip_is_plain_and_nothing_is_polled(tmp_path: Path) -> None:
    async def scenario() -> None:
        config = NodeConfig(node_id=1, data_dir=str(tmp_path), gossip_address="127.0.0.1:0")
        node = NodeMembership(config, client_address="127.0.0.1:1", peer_address="127.0.0.1:2", on_event=_ignore)
        await node.start()
        try:
            assert node.keyring is None
            assert node._keyring_task is None
            assert node.state(1) == "alive"
        finally:
            await node.stop()

    _run(scenario)


def test_an_unreadable_or_broken_keyring_file_is_reported_once_not_at_every_poll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = generate_key()
    node = _Node(1, (), tmp_path, [key])
    in_use = node.membership.keyring
    with capture_logs() as logs:
        # A node started earlier in this process may have configured logging with cached loggers: a fresh one
        # goes through capture_logs' processors.
        monkeypatch.setattr(node_membership, "log", structlog.get_logger(node_membership.__name__))
        node.keyring_file.unlink()
        assert [node.membership.reload_keyring() for _ in range(3)] == [False] * 3
        node.keyring_file.write_text("broken\n")
        assert [node.membership.reload_keyring() for _ in range(3)] == [False] * 3
        node.write([key])  # back as it was: nothing to change
        assert node.membership.reload_keyring() is False
    assert [entry["log_level"] for entry in logs] == ["warning", "error"]
    assert node.membership.keyring == in_use
