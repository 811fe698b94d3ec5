"""The groups service (event loop): every group call goes to the coordinator, the leader of the group's
``__consumer_offsets`` partition; JoinGroup waits there in one long attempt."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from multiraft import groups as g
from multiraft.errors import CoordinatorMovedError, InvalidArgumentError
from multiraft.node.offsets import OFFSETS_TOPIC
from multiraft.node.peer_groups import (
    GroupJoin,
    GroupOperation,
    decode_groups_request,
    encode_groups_answer,
)
from multiraft.node.peer_messages import STATUS_ERROR, STATUS_OK, LeaderAnnouncement, RequestKind, encode_error
from multiraft.node.services import GroupsService, GroupsSettings, OffsetsService, OffsetsSettings
from multiraft.node.services.groups import MAX_USER_DATA_BYTES
from multiraft.node.services.offsets_routing import OffsetsRouter
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


def _service(peers: TimedPeers) -> tuple[GroupsService, Any, OffsetsRouter]:
    found = directory(cluster_with_topic())
    offsets = OffsetsService(OffsetsSettings(3, 3), found, found, FakeStore(), FakeController(found), peers)
    settings = GroupsSettings(initial_rebalance_delay_ms=3_000)
    return GroupsService(settings, offsets.router, NoLocalGroups(), peers), found, offsets.router  # type: ignore[arg-type]


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
