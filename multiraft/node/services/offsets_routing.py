"""Routing to the leader of a ``__consumer_offsets`` partition, shared by the offsets and groups services.

A group's offsets and its coordinator live in partition ``crc32c(group) % partitions`` of the internal topic
(created on first use), served by that partition's leader wherever it is. Requests go there in attempts: a
dead leader is only noticed by timing out, and its successor may be up already. An attempt is short for a
request answered at once, and as long as the wait for a long poll (a JoinGroup waits for its generation).

A partition that cannot elect a leader (its replicas lost their quorum) must not stall what does not need it:
a request gives up after its bound with ``LeaderNotAvailableError`` naming the partition, its replicas and
what the last attempt met, and an operator's read (describe, list, fetch) is bounded by ``ADMIN_TOTAL_S``, a
few election timeouts, so it answers well within a client's deadline. Listing every group asks every
partition at once and reports the partitions that did not answer beside the groups of those that did
(:meth:`OffsetsRouter.fan_out`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from multiraft import controller as ctl
from multiraft.errors import (
    CoordinatorMovedError,
    LeaderNotAvailableError,
    MultiraftError,
    NotLeaderError,
    RequestTimeoutError,
    TopicExistsError,
    UnavailableError,
)
from multiraft.node.protocols import ClusterView, ControllerClient, LeaderDirectory, PeerCaller
from multiraft.node.replicas.offsets import OFFSETS_TOPIC, group_partition
from multiraft.node.services._waits import wait_for_topic
from multiraft.node.threads import LoopOwned
from multiraft.node.vocabulary.controller import CreateTopicRequest

__all__ = ["OffsetsRouter", "RoutingSettings", "PartAnswer", "REQUEST_TIMEOUT_S", "ATTEMPT_S", "ADMIN_TOTAL_S"]

REQUEST_TIMEOUT_S = 15.0
ATTEMPT_S = 2.0
# An operator's read waits this long for a leader: several election timeouts (0.5-1 s at the defaults), and
# well within a client's attempt, so a wedged partition is reported by the node rather than timed out by it.
ADMIN_TOTAL_S = 3.0
_DIAL_S = 0.3  # a leader we have no connection to is likely dead; look again soon
_RETRY_S = 0.05

T = TypeVar("T")
Local = Callable[[float], Awaitable[T]]  # (timeout s) -> the answer of this node's replica
Remote = Callable[[int, float], Awaitable[T]]  # (leader node id, timeout s) -> that leader's answer


@dataclass(frozen=True, slots=True)
class PartAnswer(Generic[T]):
    """One ``__consumer_offsets`` partition's answer to a fan-out: ``value``, or ``error`` when it had none."""

    partition: int
    group_id: int
    value: T | None = None
    error: MultiraftError | None = None


@dataclass(frozen=True, slots=True)
class RoutingSettings:
    offsets_partitions: int
    default_replication_factor: int
    admin_total_s: float = ADMIN_TOTAL_S  # seconds an operator's read waits for a partition's leader


class OffsetsRouter(LoopOwned):
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
    def admin_total_s(self) -> float:
        """How long an operator's read (describe, list, fetch) waits for a partition's leader."""
        return self._settings.admin_total_s

    @property
    def exists(self) -> bool:
        return OFFSETS_TOPIC in self._cluster.cluster.topics

    def group_ids(self) -> list[int]:
        """The Raft group of every partition of the topic (none before it exists)."""
        topic = self._cluster.cluster.topics.get(OFFSETS_TOPIC)
        return [p.group_id for p in topic.partitions] if topic is not None else []

    def leader_of(self, group_id: int) -> int:
        return self._leaders.leader_of(group_id)

    def _where(self, group_id: int) -> tuple[int, tuple[int, ...]]:
        """(partition, replicas) of offsets group ``group_id``; (-1, ()) if the topic no longer has it."""
        topic = self._cluster.cluster.topics.get(OFFSETS_TOPIC)
        for index, partition in enumerate(topic.partitions if topic is not None else ()):
            if partition.group_id == group_id:
                return index, tuple(partition.replicas)
        return -1, ()

    async def fan_out(
        self, call: Callable[[int], Awaitable[T]], group_ids: Sequence[int] | None = None
    ) -> list[PartAnswer[T]]:
        """``call(group_id)`` on every partition of the topic at once (``group_ids``: those only): each answer
        or error, in partition order. One partition failing or waiting does not hold up the others' answers
        beyond the bound its own call keeps."""
        chosen = self.group_ids() if group_ids is None else list(group_ids)

        async def one(group_id: int) -> PartAnswer[T]:
            partition = self._where(group_id)[0]
            try:
                return PartAnswer(partition, group_id, value=await call(group_id))
            except MultiraftError as exc:
                return PartAnswer(partition, group_id, error=exc)

        return list(await asyncio.gather(*(one(group_id) for group_id in chosen)))

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
        last_error: MultiraftError = UnavailableError("no leader known")
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
            except (UnavailableError, RequestTimeoutError) as exc:
                last_error = exc
            await asyncio.sleep(_RETRY_S if not hint else 0)
        raise self.unserved(group_id, f"{what} not served in {total_s:g}s", last_error)

    def unserved(self, group_id: int, what: str, last_error: MultiraftError) -> MultiraftError:
        """The error of a request no leader of offsets group ``group_id`` served: names the partition, its
        replicas, the leader this node knows of (if any) and what the last attempt met. A leader that took
        the request but did not finish it in time (its outcome unknown) is a RequestTimeoutError; no leader
        to take it, a LeaderNotAvailableError."""
        partition, replicas = self._where(group_id)
        where = f"{OFFSETS_TOPIC}/{partition} (replicas {','.join(map(str, replicas)) or '?'})"
        if isinstance(last_error, RequestTimeoutError):
            return RequestTimeoutError(f"{where}: {what} ({last_error.message})")
        leader = self._leaders.leader_of(group_id)
        state = f"leader node {leader} not answering" if leader else "no leader elected"
        cause = last_error.message
        if isinstance(last_error, NotLeaderError) and not last_error.leader_id:
            state, cause = "no leader elected", ""
        because = f" ({cause})" if cause else ""
        return LeaderNotAvailableError(f"{where}: {state}; {what}{because}", topic=OFFSETS_TOPIC, partition=partition)
