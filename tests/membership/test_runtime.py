"""The asyncio runtime over real UDP and TCP on 127.0.0.1: a few members in one process, bounded waits."""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import pytest

from membership import (
    EventKind,
    JoinError,
    LifecycleError,
    MemberEvent,
    MemberList,
    MemberMeta,
    MembershipConfig,
    MemberState,
    MetadataError,
    TransportError,
)
from membership._wire import Ping, cluster_tag, encode_message, encode_packet

LOCAL = MembershipConfig.local()
T = TypeVar("T")

pytestmark = pytest.mark.timeout(60)


def _meta(node_id: int) -> MemberMeta:
    return MemberMeta(node_id, f"127.0.0.1:{19000 + node_id}", f"127.0.0.1:{19500 + node_id}", rack=f"r{node_id % 2}")


def _run(scenario: Callable[[], Awaitable[T]]) -> T:
    async def bounded() -> T:
        async with asyncio.timeout(45):
            return await scenario()

    return asyncio.run(bounded())


async def _until(predicate: Callable[[], bool], timeout: float) -> None:
    """Poll a condition on real time, up to ``timeout`` seconds."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)


async def _next_event(queue: asyncio.Queue[MemberEvent], kind: EventKind, node_id: int, timeout: float) -> MemberEvent:
    async with asyncio.timeout(timeout):
        while True:
            event = await queue.get()
            if event.kind is kind and event.member.node_id == node_id:
                return event


@contextlib.asynccontextmanager
async def _cluster(n: int, config: MembershipConfig = LOCAL) -> AsyncIterator[list[MemberList]]:
    members = [MemberList(_meta(i), config, rng=random.Random(i)) for i in range(1, n + 1)]
    try:
        for member in members:
            await member.start()
        for member in members[1:]:
            assert await member.join([members[0].gossip_addr]) == 1
        await _until(lambda: all(m.num_members == n for m in members), timeout=5)
        yield members
    finally:
        for member in members:
            await member.stop()


def test_port_zero_binds_a_free_port_for_udp_and_tcp_and_reports_it() -> None:
    async def scenario() -> None:
        async with MemberList(_meta(1), LOCAL) as member:
            port = member.port
            assert port > 0
            assert member.gossip_addr == f"127.0.0.1:{port}"
            assert member.local_member.gossip_addr == member.gossip_addr
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp, pytest.raises(OSError):
                udp.bind(("127.0.0.1", port))
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()

    _run(scenario)


def test_binding_all_interfaces_requires_an_advertised_address() -> None:
    async def scenario() -> None:
        member = MemberList(_meta(1), LOCAL, host="0.0.0.0")
        with pytest.raises(TransportError, match="advertise_host"):
            await member.start()
        async with MemberList(_meta(2), LOCAL, host="0.0.0.0", advertise_host="127.0.0.1") as advertised:
            assert advertised.gossip_addr == f"127.0.0.1:{advertised.port}"

    _run(scenario)


def test_a_member_bound_to_a_host_name_advertises_the_address_its_packets_come_from() -> None:
    # Peers believe a member's packets only from the address it advertises, and packets carry an IP.
    async def scenario() -> None:
        async with (
            MemberList(_meta(1), LOCAL, host="localhost") as named,
            MemberList(_meta(2), LOCAL) as other,
        ):
            assert named.gossip_addr == f"127.0.0.1:{named.port}"
            await other.join([named.gossip_addr])
            await _until(lambda: named.num_members == other.num_members == 2, timeout=5)
            probes = named.counters()["probes"]
            await _until(lambda: named.counters()["probes"] >= probes + 5, timeout=10)
            assert other.counters()["spoofed_dropped"] == 0
            assert [m.state for m in other.members()] == [MemberState.ALIVE, MemberState.ALIVE]

    _run(scenario)


def test_members_join_through_a_seed_and_all_see_each_other() -> None:
    async def scenario() -> None:
        async with _cluster(4) as members:
            for member in members:
                seen = {m.node_id: m for m in member.members()}
                assert sorted(seen) == [1, 2, 3, 4]
                assert all(m.state is MemberState.ALIVE for m in seen.values())
                assert seen[3].meta == _meta(3)
                assert seen[3].gossip_addr == members[2].gossip_addr

    _run(scenario)


def test_a_stopped_member_is_declared_dead_by_the_others_within_the_bound() -> None:
    async def scenario() -> None:
        async with _cluster(4) as members:
            queues = [m.event_queue() for m in members[:3]]
            loop = asyncio.get_running_loop()
            stopped_at = loop.time()
            await members[3].stop()
            bound = LOCAL.failure_detection_bound(4)
            for queue in queues:
                event = await _next_event(queue, EventKind.DEAD, 4, timeout=bound + 1.0)
                assert event.at - stopped_at <= bound + 0.5
            assert all(m.member(4).state is MemberState.DEAD for m in members[:3])  # type: ignore[union-attr]
            assert all(m.num_members == 3 for m in members[:3])
            assert members[0].counters()["probe_failures"] + members[1].counters()["probe_failures"] > 0

    _run(scenario)


def test_a_graceful_leave_is_seen_as_a_leave_not_a_failure() -> None:
    async def scenario() -> None:
        async with _cluster(4) as members:
            queues = [m.event_queue() for m in members[:3]]
            assert await members[3].leave() is True
            for queue in queues:
                await _next_event(queue, EventKind.LEAVE, 4, timeout=2)
            await asyncio.sleep(3 * LOCAL.probe_interval)  # give a would-be failure detector time to misfire
            for member, queue in zip(members[:3], queues, strict=True):
                assert member.member(4).state is MemberState.LEFT  # type: ignore[union-attr]
                kinds = []
                while not queue.empty():
                    kinds.append(queue.get_nowait().kind)
                assert EventKind.DEAD not in kinds
            with pytest.raises(LifecycleError):
                await members[3].join([members[0].gossip_addr])

    _run(scenario)


def test_a_metadata_update_reaches_every_member_with_a_bumped_incarnation() -> None:
    async def scenario() -> None:
        async with _cluster(4) as members:
            queues = [m.event_queue() for m in members[1:]]
            before = members[0].local_member.incarnation
            updated = members[0].update_meta(rack="rack-9", capacity=2.5, client_addr="127.0.0.1:29001")
            assert updated.node_id == 1
            for queue in queues:
                event = await _next_event(queue, EventKind.UPDATE, 1, timeout=2)
                assert event.member.meta == updated
                assert event.member.incarnation == before + 1
            with pytest.raises(MetadataError, match="node_id"):
                members[0].update_meta(node_id=7)
            with pytest.raises(MetadataError, match="colour"):
                members[0].update_meta(colour="blue")
            with pytest.raises(MetadataError, match="capacity"):
                members[0].update_meta(capacity=0)

    _run(scenario)


def test_malformed_foreign_and_unknown_datagrams_are_counted_and_the_member_keeps_working() -> None:
    async def scenario() -> None:
        async with _cluster(3) as members:
            target = ("127.0.0.1", members[0].port)
            tag = cluster_tag(LOCAL.cluster_name)
            ping = encode_message(Ping(1, 1))
            junk = [
                b"",
                b"\x00" * 10,
                bytes(range(256)),
                b"S" * 5000,  # over max_packet_bytes
                encode_packet(cluster_tag("another-cluster"), 2, 3, [ping]),
                encode_packet(tag, 99, 3, [ping]),  # a node nobody knows, not introducing itself
            ]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as raw:
                for _ in range(5):  # in small rounds, so the kernel's receive buffer does not overflow
                    for datagram in junk:
                        raw.sendto(datagram, target)
                    await asyncio.sleep(0.02)
            counters = members[0].counters
            await _until(
                lambda: (
                    counters()["malformed_dropped"] >= 20
                    and counters()["foreign_cluster_dropped"] >= 5
                    and counters()["unknown_sender_dropped"] >= 5
                ),
                timeout=5,
            )
            assert members[0].running
            # Still a working member: a newcomer can join through it and be seen by all.
            async with MemberList(_meta(4), LOCAL) as newcomer:
                await newcomer.join([members[0].gossip_addr])
                await _until(lambda: all(m.num_members == 4 for m in [*members, newcomer]), timeout=5)

    _run(scenario)


def test_joining_through_unreachable_seeds_raises_join_error_naming_each_seed() -> None:
    async def scenario() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            closed = f"127.0.0.1:{probe.getsockname()[1]}"
        async with MemberList(_meta(1), LOCAL) as member:
            with pytest.raises(JoinError) as caught:
                await member.join([closed, "not-an-address"])
            assert set(caught.value.failures) == {closed, "not-an-address"}
            assert await member.join([]) == 0
            assert await member.join([member.gossip_addr]) == 0  # our own address is skipped

    _run(scenario)


def test_a_member_of_another_cluster_cannot_join() -> None:
    async def scenario() -> None:
        async with (
            MemberList(_meta(1), LOCAL) as ours,
            MemberList(_meta(2), LOCAL.with_changes(cluster_name="staging")) as theirs,
        ):
            with pytest.raises(JoinError):
                await theirs.join([ours.gossip_addr])
            assert ours.num_members == 1
            assert ours.counters()["foreign_cluster_dropped"] == 1

    _run(scenario)


def test_subscribers_get_every_event_and_a_failing_callback_is_only_counted() -> None:
    async def scenario() -> None:
        seen: list[tuple[EventKind, int]] = []
        seed = MemberList(_meta(1), LOCAL)
        seed.subscribe(lambda event: seen.append((event.kind, event.member.node_id)))
        seed.subscribe(lambda event: 1 / 0)
        unsubscribe = seed.subscribe(lambda event: seen.append((EventKind.UPDATE, -1)))
        unsubscribe()
        full = seed.event_queue(maxsize=1)
        await seed.start()
        try:
            async with MemberList(_meta(2), LOCAL) as other:
                await other.join([seed.gossip_addr])
                await _until(lambda: (EventKind.JOIN, 2) in seen, timeout=2)
            assert seen[0] == (EventKind.JOIN, 1)  # itself, on start
            assert (EventKind.UPDATE, -1) not in seen
            assert seed.counters()["callback_errors"] >= 2
            assert full.qsize() == 1 and seed.counters()["events_dropped"] >= 1
        finally:
            await seed.stop()

    _run(scenario)


def test_using_a_member_list_out_of_order_raises_lifecycle_error() -> None:
    async def scenario() -> None:
        member = MemberList(_meta(1), LOCAL)
        with pytest.raises(LifecycleError):
            member.members()
        await member.start()
        with pytest.raises(LifecycleError):
            await member.start()
        await member.stop()
        await member.stop()  # idempotent
        with pytest.raises(LifecycleError):
            await member.join(["127.0.0.1:1"])
        with pytest.raises(LifecycleError):
            member.update_meta(rack="x")
        assert [m.node_id for m in member.members()] == [1]  # the last view stays readable

    _run(scenario)
