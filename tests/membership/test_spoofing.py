"""Spoofed SWIM packets over real UDP and TCP (issue 13): three nodes' member-lists on 127.0.0.1 under fire.

The attacker is an ordinary process on the same host: a raw UDP socket and plain TCP connections. It sends
every message type of the wire format as each real member (from its own address), introduces a fake member
and speaks through it as a third party (accusations at the largest incarnation, forged leaves, forged
address changes), and sends lying lengths, random bytes, mutated packets and forged push-pull states.
Afterwards every member is alive everywhere at its true addresses, the node hook handed the peer transport
no other address, incarnations still move (a metadata update spreads), and a new member can still join.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from membership import EventKind, MemberEvent, MemberMeta, MemberState
from membership._wire import (
    Ack,
    Alive,
    Dead,
    IndirectPing,
    Message,
    Nack,
    Ping,
    PushPull,
    StateEntry,
    Suspect,
    cluster_tag,
    encode_message,
    encode_packet,
    encode_push_pull,
)
from multiraft.config.node import NodeConfig
from multiraft.node.cluster.swim import NodeMembership

T = TypeVar("T")
TOP = 2**32 - 1
FAKE = 666
# Incarnations an attacker who cannot see the cluster would try: the current ones, small and large jumps, the top.
GUESSES = (0, 1, 2, 3, 1000, 5000, 2**31 - 1, 2**31, TOP)

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


class _Node:
    """A NodeMembership and every peer address its event hook would have handed the transport."""

    def __init__(self, node_id: int, seeds: tuple[str, ...], data_dir: str) -> None:
        self.node_id = node_id
        config = NodeConfig(
            node_id=node_id,
            data_dir=data_dir,
            gossip_address="127.0.0.1:0",
            seeds=seeds,
            membership_profile="local",
        )
        self.meta = MemberMeta(node_id, f"127.0.0.1:{17000 + node_id}", f"127.0.0.1:{17100 + node_id}")
        self.handed: list[tuple[int, str, str]] = []  # (node id, peer address, client address) of JOIN/UPDATE
        self.membership = NodeMembership(
            config, client_address=self.meta.client_addr, peer_address=self.meta.peer_addr, on_event=self._on_event
        )

    def _on_event(self, event: MemberEvent) -> None:
        # What multiraft.node.Node._on_member_event passes to transport.set_peer.
        if event.kind in (EventKind.JOIN, EventKind.UPDATE):
            meta = event.member.meta
            self.handed.append((meta.node_id, meta.peer_addr, meta.client_addr))


def _forged_udp(truth: dict[int, tuple[str, MemberMeta]], attacker: str, tag: int, rng: random.Random) -> list[bytes]:
    """Every message type, as each real member and as a fake third party, plus malformed and mutated bytes."""
    ids = sorted(truth)
    evil_meta = {i: MemberMeta(i, "6.6.6.6:1", "6.6.6.6:2") for i in ids}
    fake_alive = Alive(0, MemberMeta(FAKE, "6.6.6.6:3", "6.6.6.6:4"), attacker)
    packets: list[bytes] = []

    def packet(sender: int, messages: list[Message], *, introduce: bool = False) -> bytes:
        frames = [encode_message(m) for m in messages]
        if introduce:
            frames.insert(0, encode_message(fake_alive))
        return encode_packet(tag, sender, len(ids) + 1, frames)

    for target in ids:
        gossip_addr, meta = truth[target]
        other = ids[(ids.index(target) + 1) % len(ids)]
        for inc in GUESSES:
            news: list[Message] = [
                Ping(rng.randrange(2**32), target),
                IndirectPing(rng.randrange(2**32), other, truth[other][0], True),
                IndirectPing(rng.randrange(2**32), other, attacker, False),
                Ack(rng.randrange(2**32)),
                Nack(rng.randrange(2**32)),
                Suspect(inc, target, other),
                Dead(inc, target, other),
                Dead(inc, target, target),  # a forged leave
                Alive(inc, evil_meta[target], gossip_addr),  # re-point its client and peer addresses
                Alive(inc, meta, attacker),  # move it to the attacker
                Alive(inc, evil_meta[target], attacker),
                Alive(inc, meta, gossip_addr),
            ]
            # As the member itself and as another real member, from the attacker's address...
            packets.append(packet(target, news[:6]))
            packets.append(packet(other, news[5:]))
            # ...and as a fake member that introduced itself properly: a third party.
            packets.append(packet(FAKE, news[:6], introduce=True))
            packets.append(packet(FAKE, news[6:], introduce=True))
    valid = list(packets)
    header = struct.pack(">BBIQI", 0x53, 1, tag, FAKE, 4)
    packets += [
        header + struct.pack(">BH", 6, 60000) + b"\0" * 20,  # a frame claiming more than the packet holds
        header + struct.pack(">BH", 5, 3) + b"\0" * 3,  # a suspect body that is too short
        header + struct.pack(">BH", 99, 0),  # an unknown type
        header[:10],  # a truncated header
        struct.pack(">BBIQI", 0x53, 9, tag, FAKE, 4) + encode_message(fake_alive),  # another version
        encode_packet(cluster_tag("other"), FAKE, 1, [encode_message(fake_alive)]),  # another cluster
        b"\0" * 2000,  # oversized
    ]
    packets += [rng.randbytes(rng.randrange(1, 1400)) for _ in range(60)]
    for _ in range(150):
        mutated = bytearray(rng.choice(valid))
        for _ in range(rng.randrange(1, 4)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        packets.append(bytes(mutated))
    return packets


def _forged_push_pulls(truth: dict[int, tuple[str, MemberMeta]], attacker: str, tag: int) -> list[bytes]:
    """Length-framed push-pull requests: forged states in the name of a real member, and lying lengths."""
    ids = sorted(truth)
    frames: list[bytes] = []
    for sender in ids:
        entries: list[StateEntry] = [
            StateEntry(0, MemberMeta(FAKE + 1, "6.6.6.6:5", "6.6.6.6:6"), attacker, MemberState.ALIVE)
        ]
        for target in ids:
            gossip_addr, meta = truth[target]
            evil = MemberMeta(target, "6.6.6.6:1", "6.6.6.6:2")
            for inc in (1, 1000, TOP):
                entries += [
                    StateEntry(inc, evil, gossip_addr, MemberState.ALIVE),
                    StateEntry(inc, meta, attacker, MemberState.ALIVE),
                ]
            entries += [StateEntry(TOP, meta, gossip_addr, state) for state in (MemberState.DEAD, MemberState.LEFT)]
        for entry in entries:
            state = encode_push_pull(PushPull(tag, sender, False, (entry,)))
            frames.append(struct.pack(">I", len(state)) + state)
    frames += [
        struct.pack(">I", 2**32 - 1),  # a length far beyond the limit
        struct.pack(">I", 1000) + b"\x50" * 10,  # a length the stream never delivers
        struct.pack(">I", 40) + random.Random(1).randbytes(40),
    ]
    return frames


async def _send_stream(addr: str, frame: bytes) -> None:
    host, _, port = addr.rpartition(":")
    try:
        async with asyncio.timeout(3):
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(frame)
            await writer.drain()
            writer.write_eof()
            await reader.read(1 << 20)
            writer.close()
            await writer.wait_closed()
    except (OSError, TimeoutError):
        pass  # the member may close on us: that is what it should do


def test_spoofed_and_mutated_swim_packets_change_nobody_s_view(tmp_path: object) -> None:
    async def scenario() -> None:
        first = _Node(1, (), str(tmp_path))
        await first.membership.start()
        seeds = (first.membership.gossip_addr,)
        nodes = [first, _Node(2, seeds, str(tmp_path)), _Node(3, seeds, str(tmp_path))]
        for node in nodes[1:]:
            await node.membership.start()
        attacker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            truth = {n.node_id: (n.membership.gossip_addr, n.meta) for n in nodes}

            def all_true() -> bool:
                return all(
                    n.membership.state(i) == "alive" and n.membership.peers().get(i) == truth[i][1]
                    for n in nodes
                    for i in truth
                    if i != n.node_id
                )

            await _until(all_true, 30)
            attacker.bind(("127.0.0.1", 0))
            attacker.setblocking(False)
            attacker_addr = f"127.0.0.1:{attacker.getsockname()[1]}"
            tag = cluster_tag(nodes[0].membership.swim_config.cluster_name)
            packets = _forged_udp(truth, attacker_addr, tag, random.Random(13))
            loop = asyncio.get_running_loop()
            for i, data in enumerate(packets):
                for gossip_addr, _ in truth.values():
                    host, _, port = gossip_addr.rpartition(":")
                    await loop.sock_sendto(attacker, data, (host, int(port)))
                if i % 20 == 0:
                    await asyncio.sleep(0.01)  # let the members run between bursts
            for frame in _forged_push_pulls(truth, attacker_addr, tag):
                await asyncio.gather(*(_send_stream(addr, frame) for addr, _ in truth.values()))

            await _until(all_true, 30)
            for node in nodes:
                counters = node.membership.counters()
                assert counters["spoofed_dropped"] > 0 and counters["malformed_dropped"] > 0, counters
                for member_id, peer_addr, client_addr in node.handed:
                    if member_id in truth:
                        assert (peer_addr, client_addr) == (
                            truth[member_id][1].peer_addr,
                            truth[member_id][1].client_addr,
                        )
                for member_id, (gossip_addr, _) in truth.items():
                    member = node.membership.member(member_id)
                    assert member is not None and member.gossip_addr == gossip_addr

            # Not wedged: each member can still publish news under a newer incarnation, and it spreads.
            for node in nodes:
                node.membership._members.update_meta(rack=f"after-{node.node_id}")
            await _until(
                lambda: all(
                    n.membership.peers()[i].rack == f"after-{i}" for n in nodes for i in truth if i != n.node_id
                ),
                30,
            )
            # Still serving: a new member joins and everyone sees it at its true address, even though the
            # attacker gossiped it first, at its own address, as hearsay (which the hook never hands on).
            late = _Node(4, seeds, str(tmp_path))
            hearsay = Alive(0, MemberMeta(4, "6.6.6.6:7", "6.6.6.6:8"), "127.0.0.1:9")
            fake_alive = Alive(0, MemberMeta(FAKE, "6.6.6.6:3", "6.6.6.6:4"), attacker_addr)
            forged = encode_packet(tag, FAKE, 4, [encode_message(fake_alive), encode_message(hearsay)])
            for gossip_addr, _ in truth.values():
                host, _, port = gossip_addr.rpartition(":")
                await loop.sock_sendto(attacker, forged, (host, int(port)))
            await _until(lambda: all(n.membership.state(4) != "unknown" for n in nodes), 10)
            nodes.append(late)
            await late.membership.start()
            await _until(lambda: all(n.membership.peers().get(4) == late.meta for n in nodes[:3]), 60)
            late_addresses = (late.meta.peer_addr, late.meta.client_addr)
            for node in nodes:
                assert [(p, c) for i, p, c in node.handed if i == 4 and (p, c) != late_addresses] == []
        finally:
            attacker.close()
            for node in nodes:
                await node.membership.stop()

    _run(scenario)
