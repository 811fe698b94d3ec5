"""Encrypted gossip over real UDP and TCP on 127.0.0.1: members sharing a keyring converge and send nothing in
plain text; a wrong key or a plain-text forger is never believed and its packets are counted as dropped; keys
rotate in three steps (install, use, remove) with nothing dropped; memberlist's verify flags allow a rolling
migration from plain text."""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar

import pytest

from membership import (
    EventKind,
    JoinError,
    Keyring,
    MemberEvent,
    MemberList,
    MemberMeta,
    MembershipConfig,
    MemberState,
    NetTransport,
    generate_key,
)
from membership._wire import Alive, PushPull, StateEntry, cluster_tag, encode_message, encode_packet, encode_push_pull

LOCAL = MembershipConfig.local()
T = TypeVar("T")
FAKE = 666
KEY_A, KEY_B, KEY_WRONG = generate_key(), generate_key(16), generate_key()

pytestmark = pytest.mark.timeout(90)


def _meta(node_id: int) -> MemberMeta:
    return MemberMeta(node_id, f"127.0.0.1:{21000 + node_id}", f"127.0.0.1:{21500 + node_id}")


def _run(scenario: Callable[[], Awaitable[T]]) -> T:
    async def bounded() -> T:
        async with asyncio.timeout(75):
            return await scenario()

    return asyncio.run(bounded())


async def _until(predicate: Callable[[], bool], timeout: float) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)


class _Recording(NetTransport):
    """A real transport that keeps a copy of every datagram and push-pull request it sends."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[bytes] = []

    def send_packet(self, addr: str, data: bytes) -> None:
        self.sent.append(data)
        super().send_packet(addr, data)

    async def exchange(self, addr: str, data: bytes, timeout: float) -> bytes:
        self.sent.append(data)
        return await super().exchange(addr, data, timeout)


@contextlib.asynccontextmanager
async def _cluster(
    keyrings: Sequence[Keyring | None], configs: Sequence[MembershipConfig] | None = None
) -> AsyncIterator[list[MemberList]]:
    configs = configs or [LOCAL] * len(keyrings)
    members = [
        MemberList(_meta(i), config, keyring=ring, rng=random.Random(i), transport=_Recording())
        for i, (ring, config) in enumerate(zip(keyrings, configs, strict=True), 1)
    ]
    try:
        for member in members:
            await member.start()
        for member in members[1:]:
            assert await member.join([members[0].gossip_addr]) == 1
        await _until(lambda: all(m.num_members == len(members) for m in members), timeout=10)
        yield members
    finally:
        for member in members:
            await member.stop()


def _sent(member: MemberList) -> list[bytes]:
    transport = member._transport
    assert isinstance(transport, _Recording)
    return transport.sent


async def _traffic(members: Sequence[MemberList], packets: int = 20) -> None:
    """Let every member hear ``packets`` more datagrams, and push-pull once with each other member (TCP)."""
    marks = [m.counters()["packets_in"] for m in members]
    for member in members:
        for other in members:
            if other is not member:
                assert await member.join([other.gossip_addr]) == 1
    await _until(
        lambda: all(m.counters()["packets_in"] >= mark + packets for m, mark in zip(members, marks, strict=True)), 20
    )


def _plain_alive_packet(attacker: str, tag: int) -> bytes:
    """A plain packet in which a fake member introduces itself at the attacker's address."""
    alive = Alive(0, MemberMeta(FAKE, "6.6.6.6:3", "6.6.6.6:4"), attacker)
    return encode_packet(tag, FAKE, 3, [encode_message(alive)])


def test_members_sharing_a_keyring_converge_and_send_nothing_in_plain_text() -> None:
    async def scenario() -> None:
        ring = Keyring.from_base64(KEY_A)
        async with _cluster([ring, ring, ring]) as members:
            await _traffic(members)
            for member in members:
                assert [m.state for m in member.members()] == [MemberState.ALIVE] * 3
                assert member.counters()["undecryptable_dropped"] == 0
                sent = _sent(member)
                assert len(sent) > 10
                # Sealed: the version byte of the sealed form, and none of the addresses gossip carries.
                assert all(data[0] == 1 for data in sent)
                assert not any(b"127.0.0.1" in data for data in sent)

    _run(scenario)


def test_without_a_keyring_gossip_stays_plain_text_tagged_with_the_cluster_name() -> None:
    async def scenario() -> None:
        async with _cluster([None, None]) as members:
            sent = _sent(members[0])
            assert sent and all(data[0] in (0x53, 0x50) for data in sent)  # 'S' packets, 'P' push-pull states
            assert any(b"127.0.0.1" in data for data in sent)

    _run(scenario)


def test_a_member_with_a_wrong_key_cannot_join_and_its_packets_are_counted_as_dropped() -> None:
    async def scenario() -> None:
        ring = Keyring.from_base64(KEY_A)
        async with (
            _cluster([ring, ring]) as members,
            MemberList(_meta(3), LOCAL, keyring=Keyring.from_base64(KEY_WRONG)) as intruder,
        ):
            with pytest.raises(JoinError):
                await intruder.join([members[0].gossip_addr])
            await _until(lambda: members[0].counters()["undecryptable_dropped"] >= 1, 5)
            # Datagrams sealed with the wrong key: a fake member introducing itself, from a raw socket.
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as raw:
                raw.bind(("127.0.0.1", 0))
                attacker = f"127.0.0.1:{raw.getsockname()[1]}"
                forged = Keyring.from_base64(KEY_WRONG).seal(
                    _plain_alive_packet(attacker, cluster_tag("multiraft")), b"multiraft"
                )
                dropped = members[1].counters()["undecryptable_dropped"]
                for _ in range(5):
                    raw.sendto(forged, ("127.0.0.1", members[1].port))
                await _until(lambda: members[1].counters()["undecryptable_dropped"] >= dropped + 5, 5)
            await _traffic(members)
            for member in members:
                assert member.member(3) is None and member.member(FAKE) is None
                assert [m.node_id for m in member.members()] == [1, 2]
            assert intruder.num_members == 1

    _run(scenario)


@pytest.mark.parametrize("encrypted", [True, False], ids=["keyring", "plain-control"])
def test_a_spoofed_plain_text_packet_is_ignored_by_a_member_with_a_keyring(encrypted: bool) -> None:
    # The control shows the same packet is believed without a keyring: the checksum of the cluster name is no proof.
    async def scenario() -> None:
        ring = Keyring.from_base64(KEY_A) if encrypted else None
        async with _cluster([ring, ring]) as members:
            target = members[0]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as raw:
                raw.bind(("127.0.0.1", 0))
                attacker = f"127.0.0.1:{raw.getsockname()[1]}"
                for _ in range(5):
                    raw.sendto(
                        _plain_alive_packet(attacker, cluster_tag(LOCAL.cluster_name)), ("127.0.0.1", target.port)
                    )
            state = encode_push_pull(
                PushPull(
                    cluster_tag(LOCAL.cluster_name),
                    FAKE + 1,
                    False,
                    (StateEntry(0, MemberMeta(FAKE + 1, "6.6.6.6:5", "6.6.6.6:6"), attacker, MemberState.ALIVE),),
                )
            )
            reader, writer = await asyncio.open_connection("127.0.0.1", target.port)
            writer.write(struct.pack(">I", len(state)) + state)
            await writer.drain()
            reply = await reader.read(1 << 20)
            writer.close()
            if encrypted:
                await _until(lambda: target.counters()["undecryptable_dropped"] >= 6, 5)
                assert reply == b""  # no state handed to a stranger either
                assert target.member(FAKE) is None and target.member(FAKE + 1) is None
            else:
                await _until(lambda: target.member(FAKE) is not None, 5)
                assert reply != b""
                assert target.counters()["undecryptable_dropped"] == 0

    _run(scenario)


def test_rotating_keys_in_three_steps_drops_nothing_and_keeps_every_member_alive() -> None:
    async def scenario() -> None:
        old = Keyring.from_base64(KEY_A)
        steps = [
            Keyring.from_base64(KEY_A, KEY_B),  # 1. install the new key everywhere (still sealing with the old)
            Keyring.from_base64(KEY_B, KEY_A),  # 2. make it primary everywhere (the old one still opens)
            Keyring.from_base64(KEY_B),  # 3. remove the old key
        ]
        async with _cluster([old, old, old]) as members:
            events = [m.event_queue() for m in members]
            for ring in steps:
                for member in members:  # one member after the other, as an operator's rollout would
                    member.set_keyring(ring)
                    await _traffic(members, packets=5)
                await _traffic(members)
            assert all(m.keyring == Keyring.from_base64(KEY_B) for m in members)
            for member, queue in zip(members, events, strict=True):
                assert member.counters()["undecryptable_dropped"] == 0
                assert [m.state for m in member.members()] == [MemberState.ALIVE] * 3
                seen: list[MemberEvent] = []
                while not queue.empty():
                    seen.append(queue.get_nowait())
                assert not [e for e in seen if e.kind in (EventKind.DEAD, EventKind.LEAVE)]
            # The old key alone no longer opens anything the members send.
            last = _sent(members[0])[-1]
            with pytest.raises(ValueError):
                old.unseal(last, LOCAL.cluster_name.encode())

    _run(scenario)


def test_sealing_with_a_new_key_before_every_member_holds_it_gets_packets_dropped() -> None:
    # Why rotation needs its first step: skip it and the others cannot open what the early member sends.
    async def scenario() -> None:
        old = Keyring.from_base64(KEY_A)
        async with _cluster([old, old]) as members:
            members[0].set_keyring(Keyring.from_base64(KEY_B, KEY_A))
            await _until(lambda: members[1].counters()["undecryptable_dropped"] >= 3, 10)

    _run(scenario)


def test_a_rolling_migration_from_plain_text_keeps_members_together() -> None:
    # memberlist's steps: keyring with both checks off (plain out, plain in accepted), then sealing outgoing,
    # then verifying incoming. Each step runs next to members of the previous step.
    async def scenario() -> None:
        ring = Keyring.from_base64(KEY_A)
        lenient = LOCAL.with_changes(gossip_verify_incoming=False, gossip_verify_outgoing=False)
        sealing = LOCAL.with_changes(gossip_verify_incoming=False)
        for keyrings, configs in (
            ([None, ring], [LOCAL, lenient]),  # step 1 next to a member not yet migrated
            ([ring, ring], [lenient, sealing]),  # step 2 next to step 1
            ([ring, ring], [sealing, LOCAL]),  # step 3 next to step 2
        ):
            async with _cluster(keyrings, configs) as members:
                await _traffic(members)
                for member in members:
                    assert member.counters()["undecryptable_dropped"] == 0
                    assert [m.state for m in member.members()] == [MemberState.ALIVE] * 2

    _run(scenario)


def test_a_strict_member_and_a_plain_one_cannot_form_a_cluster() -> None:
    async def scenario() -> None:
        async with (
            MemberList(_meta(1), LOCAL, keyring=Keyring.from_base64(KEY_A)) as strict,
            MemberList(_meta(2), LOCAL) as plain,
        ):
            with pytest.raises(JoinError):
                await plain.join([strict.gossip_addr])
            with pytest.raises(JoinError):
                await strict.join([plain.gossip_addr])
            assert strict.counters()["undecryptable_dropped"] >= 1
            assert plain.counters()["malformed_dropped"] + plain.counters()["push_pull_failures"] >= 1
            assert strict.num_members == plain.num_members == 1

    _run(scenario)


def test_a_flood_of_undecryptable_packets_is_counted_one_by_one_but_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        async with MemberList(_meta(1), LOCAL, keyring=Keyring.from_base64(KEY_A)) as member:
            forged = Keyring.from_base64(KEY_WRONG).seal(b"anything", LOCAL.cluster_name.encode())
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as raw:
                for _ in range(10):  # in rounds, so the kernel's receive buffer does not overflow
                    for _ in range(10):
                        raw.sendto(forged, ("127.0.0.1", member.port))
                    await asyncio.sleep(0.01)
            await _until(lambda: member.counters()["undecryptable_dropped"] >= 100, 10)
            assert member.counters()["packets_in"] == 0  # the core never saw one

    with caplog.at_level("WARNING", logger="membership._runtime"):
        _run(scenario)
    warnings = [r for r in caplog.records if "dropped gossip no key opens" in r.getMessage()]
    assert len(warnings) == 1
