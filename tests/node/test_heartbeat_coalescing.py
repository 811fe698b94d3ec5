"""Coalesced heartbeats, end to end: three nodes host many Raft groups with leaders spread over them and
talk over real peer transports on loopback.

Time is virtual: the test ticks every group and flushes every transport's held heartbeats once per
heartbeat interval, then lets the network settle (every message sent has been received and handled). So
the frames a peer receives in an interval can be counted exactly, and nothing depends on sleeps.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest

from multiraft import raft
from multiraft.node.peer.transport import PeerTransport
from tests.raft.harness import ReplicaHost

T = raft.MessageType
NODES = (1, 2, 3)
GROUPS = 36
HEARTBEATS = frozenset({T.HEARTBEAT, T.HEARTBEAT_RESP})


def _leader_of(group: int) -> int:
    return NODES[group % len(NODES)]


class Host:
    """One node: a replica of every group and a peer transport, driven in scheduler-like rounds."""

    def __init__(self, node_id: int, config: raft.RaftConfig, *, coalesce: bool) -> None:
        self.id = node_id
        conf = raft.ConfState.of(NODES)
        self.replicas = {
            group: ReplicaHost(
                node_id, raft.MemoryStorage.bootstrapped(conf), config, random.Random(group * 10 + node_id)
            )
            for group in range(1, GROUPS + 1)
        }
        self.coalesce = coalesce
        self.inbox: list[list[tuple[int, raft.Message]]] = []
        # frames received that carried heartbeats or responses: (sender, kind) -> count, and their contents
        self.heartbeat_frames: Counter[tuple[int, T]] = Counter()
        self.heartbeat_contents: dict[int, list[Counter[T]]] = defaultdict(list)
        self.transport = PeerTransport(
            node_id=node_id,
            cluster_id="coalescing",
            listen="127.0.0.1:0",
            deliver=self._deliver,
            on_unreachable=lambda peer: None,
            heartbeat_interval_s=None,  # the test is the heartbeat clock
        )

    def _deliver(self, from_node: int, messages: list[tuple[int, raft.Message]]) -> None:
        kinds = Counter(m.type for _, m in messages if m.type in HEARTBEATS)
        for kind in kinds:
            self.heartbeat_frames[(from_node, kind)] += 1
        if kinds:
            self.heartbeat_contents[from_node].append(kinds)
        self.inbox.append(messages)

    def round(self) -> bool:
        """Step what arrived, then handle every Ready as the scheduler does; False if there was nothing."""
        inbox, self.inbox = self.inbox, []
        for messages in inbox:
            for group, message in messages:
                replica = self.replicas.get(group)
                if replica is not None:
                    replica.node.step(message)
        ready = [(group, r) for group, r in self.replicas.items() if r.node.has_ready()]
        if not ready:
            return bool(inbox)
        self._send([(group, m) for group, r in ready for m in r.take_ready()])
        self._send([(group, m) for group, r in ready for m in r.persist()])
        return True

    def _send(self, messages: list[tuple[int, raft.Message]]) -> None:
        batches: dict[int, list[tuple[int, raft.Message]]] = defaultdict(list)
        for group, message in messages:
            batches[message.to].append((group, message))
        for to, batch in batches.items():
            self.transport.send(to, batch)
        if not self.coalesce:
            self.transport.flush_heartbeats()  # heartbeats leave with their round, as before coalescing

    def leaders(self) -> dict[int, tuple[int, int]]:
        return {g: (r.node.leader_id, r.node.term) for g, r in self.replicas.items() if r.node.role is raft.Role.LEADER}


@dataclass
class Cluster:
    hosts: dict[int, Host]
    heartbeat_ticks: int
    ticks: int = 0

    async def settle(self) -> None:
        """Run rounds until every message sent has been received and handled and no group has a Ready."""
        hosts = list(self.hosts.values())
        async with asyncio.timeout(30):
            while True:
                busy = False
                for host in hosts:
                    busy |= host.round()
                sent = sum(h.transport.stats.messages_out for h in hosts)
                received = sum(h.transport.stats.messages_in for h in hosts)
                if not busy and sent == received:
                    return
                await asyncio.sleep(0)  # let the loop move bytes

    async def tick(self) -> None:
        for host in self.hosts.values():
            for replica in host.replicas.values():
                replica.node.tick()
        self.ticks += 1
        await self.settle()
        if self.ticks % self.heartbeat_ticks == 0:
            for host in self.hosts.values():
                host.transport.flush_heartbeats()
            await self.settle()

    async def interval(self) -> None:
        for _ in range(self.heartbeat_ticks):
            await self.tick()

    def leaders(self) -> dict[int, tuple[int, int]]:
        found: dict[int, tuple[int, int]] = {}
        for host in self.hosts.values():
            found.update(host.leaders())
        return found

    def reset_counts(self) -> None:
        for host in self.hosts.values():
            host.heartbeat_frames.clear()
            host.heartbeat_contents.clear()


@asynccontextmanager
async def cluster(
    *, coalesce: bool = True, election_ticks: int = 10, heartbeat_ticks: int = 2
) -> AsyncIterator[Cluster]:
    """Three connected nodes; the leader of group g is node ``_leader_of(g)``, elected in a tick that depends
    on g, so that the groups' heartbeat timers run in different phases."""
    config_of = {
        node_id: raft.RaftConfig(
            id=node_id, election_tick=election_ticks, heartbeat_tick=heartbeat_ticks, quiesce=False
        )
        for node_id in NODES
    }
    hosts = {node_id: Host(node_id, config_of[node_id], coalesce=coalesce) for node_id in NODES}
    for host in hosts.values():
        await host.transport.start()
    for host in hosts.values():
        for other in hosts.values():
            if other is not host:
                host.transport.set_peer(other.id, f"127.0.0.1:{other.transport.port}")
    try:
        async with asyncio.timeout(10):  # dial every peer; group 0 is hosted nowhere, so this is ignored
            while not all(h.transport.connected(p) for h in hosts.values() for p in NODES if p != h.id):
                for host in hosts.values():
                    for peer in NODES:
                        if peer != host.id:
                            host.transport.send(peer, [(0, _probe(host.id, peer))])
                await asyncio.sleep(0.01)
        test_cluster = Cluster(hosts, heartbeat_ticks)
        await test_cluster.settle()
        for phase in range(heartbeat_ticks):
            for group in range(1, GROUPS + 1):
                if group % heartbeat_ticks == phase:
                    hosts[_leader_of(group)].replicas[group].node.campaign()
            await test_cluster.settle()
            await test_cluster.tick()
        assert {g: leader for g, (leader, _) in test_cluster.leaders().items()} == {
            g: _leader_of(g) for g in range(1, GROUPS + 1)
        }
        for _ in range(3):
            await test_cluster.interval()  # the first heartbeats and responses go round
        test_cluster.reset_counts()
        yield test_cluster
    finally:
        for host in hosts.values():
            await host.transport.stop()


def _probe(sender: int, to: int) -> raft.Message:
    return raft.Message(type=T.APP_RESP, to=to, sender=sender, term=0, index=0)


async def _count_frames(test_cluster: Cluster, intervals: int, kind: T) -> list[dict[tuple[int, int], int]]:
    """Frames carrying heartbeats (or responses) that each node received from each peer, per interval."""
    counts = []
    for _ in range(intervals):
        test_cluster.reset_counts()
        await test_cluster.interval()
        hosts = test_cluster.hosts.values()
        counts.append({(frm, h.id): h.heartbeat_frames[(frm, kind)] for h in hosts for frm in NODES if frm != h.id})
    return counts


@pytest.mark.parametrize(
    ("election_ticks", "heartbeat_ticks"), [(10, 2), (9, 3)], ids=["defaults", "election-3x-heartbeat"]
)
def test_each_node_sends_each_peer_one_heartbeat_frame_per_interval_for_all_groups(
    election_ticks: int, heartbeat_ticks: int
) -> None:
    async def scenario() -> None:
        async with cluster(election_ticks=election_ticks, heartbeat_ticks=heartbeat_ticks) as test_cluster:
            leaders = test_cluster.leaders()
            led = Counter(_leader_of(g) for g in range(1, GROUPS + 1))
            for _ in range(4 * election_ticks // heartbeat_ticks):  # four election timeouts
                test_cluster.reset_counts()
                await test_cluster.interval()
                for host in test_cluster.hosts.values():
                    for peer in NODES:
                        if peer == host.id:
                            continue
                        # one frame with a heartbeat of every group the peer leads, one with an answer for every
                        # group this node leads, and no heartbeat in any other frame
                        assert sorted(host.heartbeat_contents[peer], key=sorted) == [
                            Counter({T.HEARTBEAT: led[peer]}),
                            Counter({T.HEARTBEAT_RESP: led[host.id]}),
                        ], (host.id, peer, host.heartbeat_contents[peer])
            assert test_cluster.leaders() == leaders, "no leader stepped down and no follower campaigned"
            stats = [h.transport.stats for h in test_cluster.hosts.values()]
            assert sum(s.heartbeat_frames_out for s in stats) == sum(s.heartbeat_frames_in for s in stats)

    asyncio.run(scenario())


def test_without_coalescing_the_same_groups_send_several_heartbeat_frames_per_interval() -> None:
    """The baseline the test above improves on: heartbeats leaving with the round that produced them."""

    async def scenario() -> None:
        async with cluster(coalesce=False) as test_cluster:
            counts = await _count_frames(test_cluster, 10, T.HEARTBEAT)
            assert all(min(c.values()) >= 2 for c in counts), counts

    asyncio.run(scenario())


def test_read_index_and_leader_transfer_do_not_wait_for_the_heartbeat_clock() -> None:
    """Neither a tick nor a heartbeat flush happens here: a read and a transfer complete on their own."""

    async def scenario() -> None:
        async with cluster() as test_cluster:
            hosts = test_cluster.hosts
            flushed = {h.id: h.transport.stats.heartbeat_frames_out for h in hosts.values()}
            group = 4
            leader = hosts[_leader_of(group)]
            follower = hosts[next(n for n in NODES if n != leader.id)]

            leader.replicas[group].node.read_index(b"on the leader")
            follower.replicas[group].node.read_index(b"on a follower")
            await test_cluster.settle()
            commit = leader.replicas[group].node.status().commit
            assert leader.replicas[group].read_states == [(commit, b"on the leader")]
            assert follower.replicas[group].read_states == [(commit, b"on a follower")]

            leader.replicas[group].node.transfer_leader(follower.id)
            await test_cluster.settle()
            assert follower.replicas[group].node.role is raft.Role.LEADER
            assert leader.replicas[group].node.leader_id == follower.id

            assert {h.id: h.transport.stats.heartbeat_frames_out for h in hosts.values()} == flushed

    asyncio.run(scenario())
