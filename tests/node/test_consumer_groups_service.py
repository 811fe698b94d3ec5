"""The groups service (event loop): every group call goes to the coordinator, the leader of the group's
``__consumer_offsets`` partition; JoinGroup waits there in one long attempt."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from multiraft import consumer_groups as g
from multiraft.errors import CoordinatorMovedError, InvalidArgumentError, LeaderNotAvailableError, NotLeaderError
from multiraft.node.peer.consumer_group_messages import decode_groups_request, encode_groups_answer
from multiraft.node.peer.messages import STATUS_ERROR, STATUS_OK, RequestKind, encode_error
from multiraft.node.replicas.offsets import OFFSETS_TOPIC, group_partition
from multiraft.node.services import (
    ConsumerGroupDescription,
    ConsumerGroupListings,
    ConsumerGroupsService,
    ConsumerGroupsSettings,
    OffsetsService,
    OffsetsSettings,
)
from multiraft.node.services.consumer_groups import MAX_USER_DATA_BYTES
from multiraft.node.services.offsets_routing import OffsetsRouter
from multiraft.node.vocabulary.consumer_groups import (
    GroupDescribe,
    GroupJoin,
    GroupListingRow,
    GroupOperation,
    GroupsList,
)
from multiraft.node.vocabulary.status import LeaderAnnouncement
from tests.node._fakes import FakeController, FakePeers, FakeStore, cluster_with_topic, directory

JOIN = g.JoinRequest("m-1", 10_000, 30_000, ("range",), g.Subscription(("orders",)))


class TimedPeers(FakePeers):
    def __init__(self) -> None:
        super().__init__()
        self.timeouts: list[float] = []

    async def call(self, to_node: int, kind: int, body: bytes, timeout_s: float) -> tuple[int, bytes]:
        self.timeouts.append(timeout_s)
        return await super().call(to_node, kind, body, timeout_s)


class NoLocalGroups:
    async def call(self, group_id: int, operation: GroupOperation, timeout_s: float) -> Any:
        raise AssertionError("the coordinator is remote")


def _service(peers: TimedPeers) -> tuple[ConsumerGroupsService, Any, OffsetsRouter]:
    found = directory(cluster_with_topic())
    offsets = OffsetsService(OffsetsSettings(3, 3), found, found, FakeStore(), FakeController(found), peers)
    settings = ConsumerGroupsSettings(initial_rebalance_delay_ms=3_000)
    return ConsumerGroupsService(settings, offsets.router, NoLocalGroups(), peers), found, offsets.router  # type: ignore[arg-type]


async def _remote_coordinator(found: Any, router: OffsetsRouter, leader: int = 2) -> None:
    await router.ensure_topic()
    for p in found.cluster.topics[OFFSETS_TOPIC].partitions:
        found.learn_leaders([LeaderAnnouncement(p.group_id, leader, 9)])


def test_a_join_is_forwarded_to_the_remote_coordinator_in_one_attempt_as_long_as_the_rebalance() -> None:
    async def scenario() -> None:
        peers = TimedPeers()
        service, found, router = _service(peers)
        await _remote_coordinator(found, router)
        peers.connected_to = {2}
        reply = g.JoinReply("m-1", 4, "consumer", "range", "m-1")
        peers.answers[RequestKind.GROUPS] = [(STATUS_OK, encode_groups_answer(GroupJoin("b", JOIN), reply))]
        assert await service.join("billing", JOIN) == reply
        ((to, kind, body),) = peers.calls
        assert (to, kind) == (2, RequestKind.GROUPS)
        assert decode_groups_request(body).operation == GroupJoin("billing", JOIN)
        assert peers.timeouts == [pytest.approx(30 + 3 + 2)]  # rebalance timeout + initial delay + margin

    asyncio.run(scenario())


def test_a_moved_coordinator_is_the_callers_to_handle_not_retried_here() -> None:
    async def scenario() -> None:
        peers = TimedPeers()
        service, found, router = _service(peers)
        await _remote_coordinator(found, router)
        peers.connected_to = {2}
        moved = encode_error(CoordinatorMovedError("the coordinator moved"))
        peers.answers[RequestKind.GROUPS] = [(STATUS_ERROR, moved), (STATUS_ERROR, moved)]
        with pytest.raises(CoordinatorMovedError):
            await service.heartbeat("billing", g.HeartbeatRequest("m-1", 4))
        assert len(peers.calls) == 1

    asyncio.run(scenario())


def test_a_group_call_with_a_bad_name_or_a_negative_partition_is_refused_before_anything_is_sent() -> None:
    async def scenario() -> None:
        peers = TimedPeers()
        service, _, _ = _service(peers)
        with pytest.raises(InvalidArgumentError):
            await service.heartbeat("", g.HeartbeatRequest("m-1", 4))
        owned = g.Subscription(("orders",), frozenset({("orders", -1)}))
        with pytest.raises(InvalidArgumentError):
            await service.join("billing", g.JoinRequest("m-1", 10_000, 30_000, ("range",), owned))
        heavy = g.Subscription(("orders",), user_data=b"x" * (MAX_USER_DATA_BYTES + 1))
        with pytest.raises(InvalidArgumentError, match="user_data"):
            await service.join("billing", g.JoinRequest("m-1", 10_000, 30_000, ("range",), heavy))
        (result,) = await service.describe(["x" * 300])
        assert isinstance(result.error, InvalidArgumentError)
        assert peers.calls == []

    asyncio.run(scenario())


# ------------------------------------------------------------------------------ a partition without a leader

PARTITIONS = 3


class PartitionPeers:
    """Peers that serve each offsets partition's group calls on its leader node, except the nodes that are
    down (connection refused, as a killed node's would be)."""

    def __init__(self, down: set[int]) -> None:
        self.down = down
        self.calls: list[tuple[int, int]] = []  # (node, offsets group id)

    async def call(self, to_node: int, kind: int, body: bytes, timeout_s: float) -> tuple[int, bytes]:
        request = decode_groups_request(body)
        self.calls.append((to_node, request.group_id))
        if to_node in self.down:
            raise ConnectionError(f"node {to_node} refused the connection")
        operation = request.operation
        if isinstance(operation, GroupsList):
            rows = (GroupListingRow(f"listed-{request.group_id}", "Empty", "", 0),)
            return STATUS_OK, encode_groups_answer(operation, rows)
        if isinstance(operation, GroupDescribe):
            record = g.GroupMetadataRecord(operation.group, 3, g.GroupState.EMPTY, "consumer", None, "", (), 5)
            return STATUS_OK, encode_groups_answer(operation, record)
        raise AssertionError(f"unexpected {operation}")

    def connected(self, node_id: int) -> bool:
        return node_id not in self.down


class NotHostedHere:
    """This node hosts no replica of any offsets partition (as ``serve_group_operation`` answers then)."""

    async def call(self, group_id: int, operation: GroupOperation, timeout_s: float) -> Any:
        raise NotLeaderError(f"this node hosts no offsets group {group_id}")


async def _wedged_service(
    leaders: dict[int, int], down: set[int], admin_read_s: float = 0.3
) -> tuple[ConsumerGroupsService, PartitionPeers, list[int]]:
    """A service on node 1 whose offsets partitions (by index) are led as ``leaders`` says (missing: no
    leader known); ``admin_read_s`` short, so the test does not wait out the real bound."""
    found = directory(cluster_with_topic())
    peers = PartitionPeers(down)
    settings = OffsetsSettings(PARTITIONS, 3, admin_read_s=admin_read_s)
    offsets = OffsetsService(settings, found, found, FakeStore(), FakeController(found), peers)  # type: ignore[arg-type]
    await offsets.router.ensure_topic()
    group_ids = offsets.router.group_ids()
    found.learn_leaders([LeaderAnnouncement(group_ids[p], node, 4) for p, node in leaders.items()])
    service = ConsumerGroupsService(
        ConsumerGroupsSettings(initial_rebalance_delay_ms=0), offsets.router, NotHostedHere(), peers
    )  # type: ignore[arg-type]
    return service, peers, group_ids


def _group_in(partition: int) -> str:
    return next(name for name in (f"group-{i}" for i in range(1000)) if group_partition(name, PARTITIONS) == partition)


def test_a_listing_names_the_partition_without_a_leader_and_lists_the_groups_of_the_others() -> None:
    async def scenario() -> tuple[ConsumerGroupListings, list[int]]:
        service, _, group_ids = await _wedged_service({0: 2, 2: 2}, down=set())
        return await service.listings(), group_ids

    listed, group_ids = asyncio.run(scenario())
    assert [row.group for row in listed.rows] == [f"listed-{group_ids[0]}", f"listed-{group_ids[2]}"]
    ((missing),) = listed.unanswered
    assert missing.partition == 1
    assert isinstance(missing.error, LeaderNotAvailableError)
    assert missing.error.metadata == {"topic": OFFSETS_TOPIC, "partition": "1"}
    assert "__consumer_offsets/1 (replicas 1,2,3): no leader elected" in missing.error.message


def test_a_listing_names_the_partition_whose_known_leader_does_not_answer() -> None:
    async def scenario() -> tuple[ConsumerGroupListings, PartitionPeers, list[int]]:
        service, peers, group_ids = await _wedged_service({0: 2, 1: 3, 2: 2}, down={3})
        return await service.listings(), peers, group_ids

    listed, peers, group_ids = asyncio.run(scenario())
    assert [row.group for row in listed.rows] == [f"listed-{group_ids[0]}", f"listed-{group_ids[2]}"]
    ((missing),) = listed.unanswered
    assert missing.partition == 1
    assert "leader node 3 not answering" in missing.error.message
    assert "refused the connection" in missing.error.message
    assert (3, group_ids[1]) in peers.calls


def test_describing_a_group_of_a_leaderless_partition_fails_alone_with_the_partition_named() -> None:
    stuck, fine = _group_in(1), _group_in(2)

    async def scenario() -> list[ConsumerGroupDescription]:
        service, _, _ = await _wedged_service({0: 2, 2: 2}, down=set())
        return await service.describe([stuck, fine])

    described = {r.group: r for r in asyncio.run(scenario())}
    assert described[fine].error is None and described[fine].description is not None
    assert described[fine].coordinator == 2
    error = described[stuck].error
    assert isinstance(error, LeaderNotAvailableError)
    assert error.metadata["partition"] == "1"
    assert "no leader elected" in error.message


def test_a_member_call_waits_out_the_longer_bound_not_the_operators_one() -> None:
    # The admin bound must not shorten what members ask: a join waits its rebalance, a heartbeat its
    # REQUEST_TIMEOUT_S. Here the heartbeat's leader is down for longer than the admin bound and comes back.
    async def scenario() -> None:
        service, peers, _ = await _wedged_service({1: 3}, down={3}, admin_read_s=0.05)
        group = _group_in(1)
        call = asyncio.ensure_future(service.heartbeat(group, g.HeartbeatRequest("m-1", 4)))
        await asyncio.sleep(0.3)  # an event-loop wait in a service test: past the 0.05 s admin bound
        assert not call.done()
        call.cancel()
        assert any(node == 3 for node, _ in peers.calls)

    asyncio.run(scenario())


class SilentStore(FakeStore):
    """A local replica that believes it leads but never confirms a read (its quorum is gone)."""

    async def offsets(self, group_id: int, operation: Any) -> Any:
        self.offsets_calls.append((group_id, operation))
        await asyncio.Event().wait()


def test_an_offsets_read_a_local_replica_cannot_confirm_fails_as_leaderless_within_the_operators_bound() -> None:
    async def scenario() -> None:
        found = directory(cluster_with_topic())
        store = SilentStore()
        settings = OffsetsSettings(PARTITIONS, 3, admin_read_s=0.3)
        offsets = OffsetsService(settings, found, found, store, FakeController(found), PartitionPeers(set()))  # type: ignore[arg-type]
        await offsets.router.ensure_topic()
        group = _group_in(1)
        # bounded by the test only as a guard: the service's own bound (0.3 s) is what ends the call
        with pytest.raises(LeaderNotAvailableError, match=r"__consumer_offsets/1 \(replicas 1,2,3\)") as caught:
            await asyncio.wait_for(offsets.fetch_offsets(group, []), 10)
        assert "did not confirm a read" in caught.value.message
        assert len(store.offsets_calls) >= 1

    asyncio.run(scenario())
