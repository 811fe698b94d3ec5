"""The groups service: consumer-group membership (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), description,
deletion and listing (event loop).

Any node takes these calls and forwards them to the group's coordinator, the leader of its
``__consumer_offsets`` partition (:mod:`.offsets_routing`), which runs it
(:mod:`multiraft.node.replicas.consumer_group_host`).
JoinGroup and SyncGroup are long polls: one attempt waits as long as the coordinator may park them (the
rebalance timeout, plus the initial rebalance delay of a new group) and a margin.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from multiraft import consumer_groups as g
from multiraft.errors import InvalidArgumentError, MultiraftError
from multiraft.node.peer.call import ask_groups
from multiraft.node.protocols import PeerCaller
from multiraft.node.services.local_consumer_groups import LocalConsumerGroups
from multiraft.node.services.offsets import check_group_name
from multiraft.node.services.offsets_routing import ATTEMPT_S, REQUEST_TIMEOUT_S, OffsetsRouter
from multiraft.node.services.results import ConsumerGroupListings, UnansweredPartition
from multiraft.node.threads import LoopOwned
from multiraft.node.vocabulary.consumer_groups import (
    GroupDelete,
    GroupDescribe,
    GroupHeartbeat,
    GroupJoin,
    GroupLeave,
    GroupListingRow,
    GroupOperation,
    GroupsAnswer,
    GroupsList,
    GroupsRequest,
    GroupSync,
)

__all__ = [
    "ConsumerGroupsService",
    "ConsumerGroupsSettings",
    "ConsumerGroupDescription",
    "LONG_POLL_MARGIN_S",
    "MAX_USER_DATA_BYTES",
]

MAX_USER_DATA_BYTES = 64 * 1024  # every member's is in each group record: keep a record within one log entry
LONG_POLL_MARGIN_S = 2.0  # a long poll's attempt outlasts the coordinator's own bound by this much
_MAX_WAIT_MS = 2**31 - 1
_SYNC_WAIT_S = 600.0


@dataclass(frozen=True, slots=True)
class ConsumerGroupsSettings:
    initial_rebalance_delay_ms: int  # NodeConfig.group_initial_rebalance_delay_ms


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription:
    """One group's description, or why it could not be described; ``coordinator`` is the node that runs it."""

    group: str
    description: g.GroupMetadataRecord | None
    coordinator: int
    error: MultiraftError | None = None


class ConsumerGroupsService(LoopOwned):
    """Consumer-group calls, each forwarded to its group's coordinator."""

    def __init__(
        self, settings: ConsumerGroupsSettings, router: OffsetsRouter, local: LocalConsumerGroups, peers: PeerCaller
    ) -> None:
        self._settings = settings
        self._router = router
        self._local = local
        self._peers = peers

    async def join(self, group: str, request: g.JoinRequest) -> g.JoinReply:
        _check_partitions(request.subscription.owned, "subscription.owned")
        if len(request.subscription.user_data) > MAX_USER_DATA_BYTES:
            raise InvalidArgumentError(
                f"subscription.user_data is longer than {MAX_USER_DATA_BYTES} bytes", field="subscription.user_data"
            )
        operation = GroupJoin(group, request)
        reply: g.JoinReply = await self._call(group, operation, self.long_poll_s(operation))
        return reply

    async def sync(self, group: str, request: g.SyncRequest) -> g.SyncReply:
        for _, partitions in request.assignments:
            _check_partitions(partitions, "assignments.partitions")
        operation = GroupSync(group, request)
        reply: g.SyncReply = await self._call(group, operation, self.long_poll_s(operation))
        return reply

    async def heartbeat(self, group: str, request: g.HeartbeatRequest) -> None:
        await self._call(group, GroupHeartbeat(group, request))

    async def leave(self, group: str, request: g.LeaveRequest) -> None:
        await self._call(group, GroupLeave(group, request))

    async def describe(self, groups: Sequence[str]) -> list[ConsumerGroupDescription]:
        async def one(group: str) -> ConsumerGroupDescription:
            try:
                check_group_name(group)
                group_id = await self._router.group_id_of(group)
                record: g.GroupMetadataRecord = await self._partition_call(
                    group_id, GroupDescribe(group), ATTEMPT_S, total_s=self._router.admin_total_s
                )
                return ConsumerGroupDescription(group, record, self._router.leader_of(group_id))
            except MultiraftError as exc:
                return ConsumerGroupDescription(group, None, 0, exc)

        return list(await asyncio.gather(*(one(group) for group in groups)))

    async def delete(self, groups: Sequence[str]) -> list[MultiraftError | None]:
        async def one(group: str) -> MultiraftError | None:
            try:
                check_group_name(group)
                group_id = await self._router.group_id_of(group)
                await self._partition_call(group_id, GroupDelete(group), ATTEMPT_S, total_s=self._router.admin_total_s)
            except MultiraftError as exc:
                return exc
            return None

        return list(await asyncio.gather(*(one(group) for group in groups)))

    async def listings(self) -> ConsumerGroupListings:
        """Every group with committed offsets or a group record, sorted by name, of the partitions that
        answered within the router's ``admin_total_s``; the others are named with their error, not waited out."""
        operation = GroupsList()

        async def listed(group_id: int) -> list[GroupListingRow]:
            rows: list[GroupListingRow] = await self._partition_call(
                group_id, operation, ATTEMPT_S, total_s=self._router.admin_total_s
            )
            return rows

        answers = await self._router.fan_out(listed)
        rows = sorted((row for a in answers for row in a.value or ()), key=lambda row: row.group)
        return ConsumerGroupListings(
            rows, [UnansweredPartition(a.partition, a.error) for a in answers if a.error is not None]
        )

    async def serve(self, request: GroupsRequest) -> GroupsAnswer:
        """A peer's request for a coordinator hosted here: the coordinator's answer."""
        # The forwarding node bounds the wait; this side only must not give up before it does.
        timeout_s = self.long_poll_s(request.operation) + LONG_POLL_MARGIN_S
        answer: GroupsAnswer = await self._local.call(request.group_id, request.operation, timeout_s)
        return answer

    # --------------------------------------------------------------------------------------------- routing

    async def _call(self, group: str, operation: GroupOperation, attempt_s: float = ATTEMPT_S) -> Any:
        check_group_name(group)
        group_id = await self._router.group_id_of(group)
        return await self._partition_call(group_id, operation, attempt_s)

    async def _partition_call(
        self, group_id: int, operation: GroupOperation, attempt_s: float, *, total_s: float | None = None
    ) -> Any:
        request = GroupsRequest(group_id, operation)

        async def remote(leader: int, timeout_s: float) -> Any:
            return await ask_groups(self._peers, leader, request, timeout_s)

        return await self._router.call(
            group_id,
            lambda timeout_s: self._local.call(group_id, operation, timeout_s),
            remote,
            attempt_s=attempt_s,
            total_s=total_s if total_s is not None else max(REQUEST_TIMEOUT_S, attempt_s + ATTEMPT_S),
            what="consumer group request",
        )

    def long_poll_s(self, operation: GroupOperation) -> float:
        """How long one attempt of ``operation`` may wait at the coordinator."""
        if isinstance(operation, GroupJoin):
            wait_ms = min(max(operation.request.rebalance_timeout_ms, 0), _MAX_WAIT_MS)
            return (wait_ms + self._settings.initial_rebalance_delay_ms) / 1000 + LONG_POLL_MARGIN_S
        if isinstance(operation, GroupSync):
            # A follower waits for the leader's SyncGroup, which the coordinator bounds by the members'
            # rebalance timeout (not in the request): the client's deadline ends the call before this does.
            return _SYNC_WAIT_S
        return ATTEMPT_S


def _check_partitions(partitions: Iterable[g.TopicPartition], field: str) -> None:
    for topic, partition in partitions:
        if partition < 0:
            raise InvalidArgumentError(f"{field}: partition {topic}/{partition} is negative", field=field)
