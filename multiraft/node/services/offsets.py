"""The offsets service: consumer groups' committed offsets (event loop).

A group's offsets live in one partition of the internal topic ``__consumer_offsets`` (created on first
use), chosen by the group name; its leader serves them (:mod:`.offsets_routing` finds it). Repeating a
request is harmless (a commit writes the same offsets again).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any

from multiraft.consumer_groups import NO_GENERATION
from multiraft.errors import InvalidArgumentError, UnavailableError
from multiraft.node.peer.call import ask_offsets
from multiraft.node.protocols import ClusterView, ControllerClient, LeaderDirectory, PeerCaller, StoreHandle
from multiraft.node.replicas.offsets import encode_commit
from multiraft.node.services.offsets_routing import ADMIN_TOTAL_S, REQUEST_TIMEOUT_S, OffsetsRouter, RoutingSettings
from multiraft.node.services.results import UnansweredPartition
from multiraft.node.threads import LoopOwned
from multiraft.node.vocabulary.offsets import (
    CommittedOffset,
    OffsetRow,
    OffsetsCommit,
    OffsetsFetch,
    OffsetsList,
    OffsetsRequest,
)

__all__ = ["OffsetsService", "OffsetsSettings", "MAX_GROUP_NAME", "MAX_OFFSET_METADATA", "check_group_name"]

MAX_GROUP_NAME = 255
MAX_OFFSET_METADATA = 4096

Operation = OffsetsCommit | OffsetsFetch | OffsetsList


@dataclass(frozen=True, slots=True)
class OffsetsSettings:
    """The node config fields the offsets service uses."""

    offsets_partitions: int
    default_replication_factor: int
    max_offsets_per_commit: int = 10_000  # NodeConfig.max_offsets_per_commit
    max_offsets_commit_bytes: int = 4 * 1024 * 1024  # NodeConfig.max_offsets_commit_bytes
    admin_read_s: float = ADMIN_TOTAL_S  # seconds a describe, list or fetch waits for a partition's leader


class OffsetsService(LoopOwned):
    """Commit, fetch and list consumer-group offsets."""

    def __init__(
        self,
        settings: OffsetsSettings,
        cluster: ClusterView,
        leaders: LeaderDirectory,
        store: StoreHandle,
        controller: ControllerClient,
        peers: PeerCaller,
    ) -> None:
        self._settings = settings
        self._cluster = cluster
        self._leaders = leaders
        self._store = store
        self._controller = controller
        self._peers = peers
        self._router = OffsetsRouter(
            RoutingSettings(settings.offsets_partitions, settings.default_replication_factor, settings.admin_read_s),
            cluster,
            leaders,
            controller,
            peers,
        )

    @property
    def router(self) -> OffsetsRouter:
        return self._router

    async def commit_offsets(
        self,
        group: str,
        offsets: Sequence[CommittedOffset],
        member_id: str = "",
        generation: int = NO_GENERATION,
        group_instance_id: str | None = None,
    ) -> None:
        """Commit ``offsets``; a group member commits as itself (the coordinator fences zombies)."""
        check_group_name(group)
        most = self._settings.max_offsets_per_commit
        if len(offsets) > most:
            raise InvalidArgumentError(
                f"a commit of {len(offsets)} offsets exceeds max_offsets_per_commit ({most})", field="offsets"
            )
        for index, committed in enumerate(offsets):
            self._cluster.partition_state(committed.topic, committed.partition)
            if committed.offset < 0:
                raise InvalidArgumentError(f"offsets[{index}].offset must be >= 0", field="offsets.offset")
            if len(committed.metadata) > MAX_OFFSET_METADATA:
                raise InvalidArgumentError(
                    f"offsets[{index}].metadata is longer than {MAX_OFFSET_METADATA}", field="offsets.metadata"
                )
        if not offsets:
            return
        # The commit's log entry, measured as written: JSON escaping can make it six times the request.
        encoded = len(encode_commit(group, offsets))
        if encoded > self._settings.max_offsets_commit_bytes:
            raise InvalidArgumentError(
                f"the commit encodes to {encoded} bytes, above max_offsets_commit_bytes "
                f"({self._settings.max_offsets_commit_bytes})",
                field="offsets",
            )
        rows = tuple(OffsetRow(o.topic, o.partition, o.offset, o.metadata) for o in offsets)
        await self._request(group, OffsetsCommit(group, rows, member_id, generation, group_instance_id))

    async def fetch_offsets(self, group: str, partitions: Sequence[tuple[str, int]]) -> list[CommittedOffset]:
        """The group's committed offsets: of ``partitions`` (-1 where none), or every one it committed."""
        check_group_name(group)
        for topic, partition in partitions:
            self._cluster.partition_state(topic, partition)
        if not self._router.exists:
            return [CommittedOffset(t, p, -1) for t, p in partitions]
        found: list[CommittedOffset] = await self._request(group, OffsetsFetch(group, tuple(partitions) or None))
        if not partitions:
            return [o for o in found if self._is_current(o)]
        return [o if self._is_current(o) else CommittedOffset(o.topic, o.partition, -1) for o in found]

    def _is_current(self, committed: CommittedOffset) -> bool:
        """False for offsets of a deleted topic, or of its deleted namesake (committed before it was created)."""
        topic = self._cluster.cluster.topics.get(committed.topic)
        return (
            committed.offset >= 0
            and topic is not None
            and committed.partition < len(topic.partitions)
            and committed.commit_time_ms >= topic.created_ms
        )

    async def list_groups(self) -> tuple[list[str], list[UnansweredPartition]]:
        """The groups with committed offsets in the partitions that answered, and the partitions that did not
        (each bounded by ``admin_read_s``: one without a leader does not hide the others)."""

        async def names(group_id: int) -> list[str]:
            found: list[str] = await self._partition_call(group_id, OffsetsList())
            return found

        answers = await self._router.fan_out(names)
        listed = sorted({str(name) for a in answers for name in a.value or ()})
        return listed, [UnansweredPartition(a.partition, a.error) for a in answers if a.error is not None]

    async def serve(self, request: OffsetsRequest) -> Any:
        """A peer's request for an offsets group led here."""
        return await self._store.offsets(request.group_id, request.operation)

    # --------------------------------------------------------------------------------------------- routing

    async def _request(self, group: str, operation: Operation) -> Any:
        return await self._partition_call(await self._router.group_id_of(group), operation)

    async def _partition_call(self, group_id: int, operation: Operation) -> Any:
        """Serve an operation on the leader of offsets group ``group_id``, wherever it is. Reads are bounded
        by ``admin_read_s`` (a local read is bounded by its attempt: a replica that cannot reach its quorum
        must not hold one for the store's whole timeout); a commit keeps the longer bound."""
        request = OffsetsRequest(group_id, operation)
        if isinstance(operation, OffsetsCommit):
            return await self._router.call(
                group_id,
                lambda _timeout_s: self._store.offsets(group_id, operation),
                lambda leader, timeout_s: self._remote(leader, request, timeout_s),
                total_s=REQUEST_TIMEOUT_S,
            )
        return await self._router.call(
            group_id,
            lambda timeout_s: _bounded(self._store.offsets(group_id, operation), timeout_s),
            lambda leader, timeout_s: self._remote(leader, request, timeout_s),
            total_s=self._router.admin_total_s,
        )

    async def _remote(self, leader: int, request: OffsetsRequest, timeout_s: float) -> Any:
        return await ask_offsets(self._peers, leader, request, timeout_s)


async def _bounded(answer: Awaitable[Any], timeout_s: float) -> Any:
    """A local read within ``timeout_s``: one that does not come is a replica that cannot confirm its
    leadership with a quorum, so no leader to read from (retried, then LEADER_NOT_AVAILABLE)."""
    try:
        return await asyncio.wait_for(answer, timeout_s)
    except TimeoutError:
        raise UnavailableError(f"the local replica did not confirm a read in {timeout_s:g}s") from None


def check_group_name(group: str) -> None:
    if not group:
        raise InvalidArgumentError("group must not be empty", field="group")
    if len(group) > MAX_GROUP_NAME:
        raise InvalidArgumentError(f"group is longer than {MAX_GROUP_NAME} characters", field="group")
