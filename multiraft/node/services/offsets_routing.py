"""Routing to the leader of a ``__consumer_offsets`` partition, shared by the offsets and groups services.

A group's offsets and its coordinator live in partition ``crc32c(group) % partitions`` of the internal topic
(created on first use), served by that partition's leader wherever it is. Requests go there in attempts: a
dead leader is only noticed by timing out, and its successor may be up already. An attempt is short for a
request answered at once, and as long as the wait for a long poll (a JoinGroup waits for its generation).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from multiraft import controller as ctl
from multiraft.errors import (
    CoordinatorMovedError,
    MultiraftError,
    NotLeaderError,
    RequestTimeoutError,
    TopicExistsError,
    UnavailableError,
)
from multiraft.node.offsets import OFFSETS_TOPIC, group_partition
from multiraft.node.peer_messages import CreateTopicRequest
from multiraft.node.protocols import ClusterView, ControllerClient, LeaderDirectory, PeerCaller
from multiraft.node.services._waits import wait_for_topic

__all__ = ["OffsetsRouter", "RoutingSettings", "REQUEST_TIMEOUT_S", "ATTEMPT_S"]

REQUEST_TIMEOUT_S = 15.0
ATTEMPT_S = 2.0
_DIAL_S = 0.3  # a leader we have no connection to is likely dead; look again soon
_RETRY_S = 0.05

T = TypeVar("T")
Local = Callable[[float], Awaitable[T]]  # (timeout s) -> the answer of this node's replica
Remote = Callable[[int, float], Awaitable[T]]  # (leader node id, timeout s) -> that leader's answer


@dataclass(frozen=True, slots=True)
class RoutingSettings:
    offsets_partitions: int
    default_replication_factor: int


class OffsetsRouter:
    """Finds (and creates) the ``__consumer_offsets`` partition of a group and calls its leader."""

    def __init__(
        self,
        settings: RoutingSettings,
        cluster: ClusterView,
        leaders: LeaderDirectory,
        controller: ControllerClient,
        peers: PeerCaller,
    ) -> None:
        self._settings = settings
        self._cluster = cluster
        self._leaders = leaders
        self._controller = controller
        self._peers = peers
        self._topic_lock = asyncio.Lock()

    @property
    def exists(self) -> bool:
        return OFFSETS_TOPIC in self._cluster.cluster.topics

    def group_ids(self) -> list[int]:
        """The Raft group of every partition of the topic (none before it exists)."""
        topic = self._cluster.cluster.topics.get(OFFSETS_TOPIC)
        return [p.group_id for p in topic.partitions] if topic is not None else []

    def leader_of(self, group_id: int) -> int:
        return self._leaders.leader_of(group_id)

    async def group_id_of(self, group: str) -> int:
        """The Raft group of ``group``'s partition, creating the topic on first use."""
        await self.ensure_topic()
        topic = self._cluster.cluster.topics[OFFSETS_TOPIC]
        return topic.partitions[group_partition(group, len(topic.partitions))].group_id

    async def ensure_topic(self) -> None:
        """Create ``__consumer_offsets`` on first use (any node may race to: the controller keeps one)."""
        cluster = self._cluster
        if OFFSETS_TOPIC in cluster.cluster.topics:
            return
        async with self._topic_lock:
            if OFFSETS_TOPIC in cluster.cluster.topics:
                return
            registered = sum(1 for n in cluster.cluster.nodes.values() if n.state is ctl.NodeState.ACTIVE)
            request = CreateTopicRequest(
                OFFSETS_TOPIC,
                self._settings.offsets_partitions,
                max(1, min(self._settings.default_replication_factor, registered)),
                internal=True,
            )
            with contextlib.suppress(TopicExistsError):
                await self._controller.call(request)
            await wait_for_topic(cluster, OFFSETS_TOPIC, present=True)

    async def call(
        self,
        group_id: int,
        local: Local[T],
        remote: Remote[T],
        *,
        attempt_s: float = ATTEMPT_S,
        total_s: float = REQUEST_TIMEOUT_S,
        what: str = "consumer offsets request",
    ) -> T:
        """Serve a request on the leader of offsets group ``group_id``, wherever it is; a moved group
        coordinator (``CoordinatorMovedError``) is the caller's to handle (it rejoins)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + total_s
        last_error: MultiraftError = UnavailableError("the offsets partition has no leader yet")
        hint = 0
        while loop.time() < deadline:
            leader = hint or self._leaders.leader_of(group_id)
            hint = 0
            try:
                if leader == self._cluster.node_id or not leader:
                    return await local(max(0.01, min(attempt_s, deadline - loop.time())))
                connected = self._peers.connected(leader)
                return await remote(leader, min(attempt_s if connected else _DIAL_S, deadline - loop.time()))
            except CoordinatorMovedError:
                raise
            except NotLeaderError as exc:
                last_error, hint = exc, exc.leader_id
            except UnavailableError as exc:
                last_error = exc
            await asyncio.sleep(_RETRY_S if not hint else 0)
        raise RequestTimeoutError(f"{what} not served in {total_s:.0f}s: {last_error.message}")
