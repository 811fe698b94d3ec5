"""The offsets service: consumer groups' committed offsets (event loop).

A group's offsets live in one partition of the internal topic ``__consumer_offsets`` (created on first
use), chosen by the group name; its leader serves them (:mod:`.offsets_routing` finds it). Repeating a
request is harmless (a commit writes the same offsets again).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from multiraft.errors import InvalidArgumentError
from multiraft.groups import NO_GENERATION
from multiraft.node.offsets import CommittedOffset, encode_commit
from multiraft.node.peer_call import ask_peer
from multiraft.node.peer_messages import (
    OffsetRow,
    OffsetsCommit,
    OffsetsFetch,
    OffsetsList,
    OffsetsRequest,
    RequestKind,
    decode_offset_rows,
    decode_strings,
    encode_offsets_request,
)
from multiraft.node.protocols import ClusterView, ControllerClient, LeaderDirectory, PeerCaller, StoreHandle
from multiraft.node.services.offsets_routing import OffsetsRouter, RoutingSettings

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


class OffsetsService:
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
            RoutingSettings(settings.offsets_partitions, settings.default_replication_factor),
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

    async def list_groups(self) -> list[str]:
        answers = await asyncio.gather(*(self._partition_call(g, OffsetsList()) for g in self._router.group_ids()))
        return sorted({str(name) for names in answers for name in names})

    async def serve(self, request: OffsetsRequest) -> Any:
        """A peer's request for an offsets group led here."""
        return await self._store.offsets(request.group_id, request.operation)

    # --------------------------------------------------------------------------------------------- routing

    async def _request(self, group: str, operation: Operation) -> Any:
        return await self._partition_call(await self._router.group_id_of(group), operation)

    async def _partition_call(self, group_id: int, operation: Operation) -> Any:
        """Serve an operation on the leader of offsets group ``group_id``, wherever it is."""
        request = OffsetsRequest(group_id, operation)
        return await self._router.call(
            group_id,
            lambda _timeout_s: self._store.offsets(group_id, operation),
            lambda leader, timeout_s: self._remote(leader, request, timeout_s),
        )

    async def _remote(self, leader: int, request: OffsetsRequest, timeout_s: float) -> Any:
        body = encode_offsets_request(request)
        answer = await ask_peer(self._peers, leader, RequestKind.OFFSETS, body, timeout_s, what="offsets leader")
        operation = request.operation
        if isinstance(operation, OffsetsFetch):
            rows = decode_offset_rows(answer)
            return [CommittedOffset(r.topic, r.partition, r.offset, r.metadata, r.commit_time_ms) for r in rows]
        if isinstance(operation, OffsetsList):
            return list(decode_strings(answer))
        return None


def check_group_name(group: str) -> None:
    if not group:
        raise InvalidArgumentError("group must not be empty", field="group")
    if len(group) > MAX_GROUP_NAME:
        raise InvalidArgumentError(f"group is longer than {MAX_GROUP_NAME} characters", field="group")
