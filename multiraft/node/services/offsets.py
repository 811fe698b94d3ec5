"""The offsets service: consumer groups' committed offsets (event loop).

A group's offsets live in one partition of the internal topic ``__consumer_offsets`` (created on first
use), chosen by the group name; its leader serves them. Requests go to that leader wherever it is, in short
attempts: a dead leader is only noticed by timing out, and its successor may be up already. Repeating a
request is harmless (a commit writes the same offsets again).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from multiraft import controller as ctl
from multiraft.errors import (
    InvalidArgumentError,
    MultiraftError,
    NotLeaderError,
    RequestTimeoutError,
    TopicExistsError,
    UnavailableError,
)
from multiraft.node.offsets import OFFSETS_TOPIC, CommittedOffset, encode_commit, group_partition
from multiraft.node.peer_call import ask_peer
from multiraft.node.peer_messages import (
    CreateTopicRequest,
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
from multiraft.node.services._waits import wait_for_topic

__all__ = ["OffsetsService", "OffsetsSettings", "MAX_GROUP_NAME", "MAX_OFFSET_METADATA"]

MAX_GROUP_NAME = 255
MAX_OFFSET_METADATA = 4096
_REQUEST_TIMEOUT_S = 15.0
_ATTEMPT_S = 2.0
_DIAL_S = 0.3  # a leader we have no connection to is likely dead; look again soon
_RETRY_S = 0.05

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
        self._offsets_topic_lock = asyncio.Lock()

    async def commit_offsets(self, group: str, offsets: Sequence[CommittedOffset]) -> None:
        _check_group_name(group)
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
        await self._request(group, OffsetsCommit(group, rows))

    async def fetch_offsets(self, group: str, partitions: Sequence[tuple[str, int]]) -> list[CommittedOffset]:
        """The group's committed offsets: of ``partitions`` (-1 where none), or every one it committed."""
        _check_group_name(group)
        for topic, partition in partitions:
            self._cluster.partition_state(topic, partition)
        if OFFSETS_TOPIC not in self._cluster.cluster.topics:
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
        topic = self._cluster.cluster.topics.get(OFFSETS_TOPIC)
        if topic is None:
            return []
        answers = await asyncio.gather(*(self._partition_call(p.group_id, OffsetsList()) for p in topic.partitions))
        return sorted({str(name) for names in answers for name in names})

    async def serve(self, request: OffsetsRequest) -> Any:
        """A peer's request for an offsets group led here."""
        return await self._store.offsets(request.group_id, request.operation)

    # --------------------------------------------------------------------------------------------- routing

    async def _request(self, group: str, operation: Operation) -> Any:
        await self._ensure_offsets_topic()
        topic = self._cluster.cluster.topics[OFFSETS_TOPIC]
        partition = topic.partitions[group_partition(group, len(topic.partitions))]
        return await self._partition_call(partition.group_id, operation)

    async def _ensure_offsets_topic(self) -> None:
        """Create ``__consumer_offsets`` on first use (any node may race to: the controller keeps one)."""
        cluster = self._cluster
        if OFFSETS_TOPIC in cluster.cluster.topics:
            return
        async with self._offsets_topic_lock:
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

    async def _partition_call(self, group_id: int, operation: Operation) -> Any:
        """Serve an operation on the leader of offsets group ``group_id``, wherever it is."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _REQUEST_TIMEOUT_S
        last_error: MultiraftError = UnavailableError("the offsets partition has no leader yet")
        hint = 0
        while loop.time() < deadline:
            leader = hint or self._leaders.leader_of(group_id)
            hint = 0
            try:
                if leader == self._cluster.node_id or not leader:
                    return await self._store.offsets(group_id, operation)
                attempt_s = min(_ATTEMPT_S if self._peers.connected(leader) else _DIAL_S, deadline - loop.time())
                return await self._remote(leader, OffsetsRequest(group_id, operation), attempt_s)
            except NotLeaderError as exc:
                last_error, hint = exc, exc.leader_id
            except UnavailableError as exc:
                last_error = exc
            await asyncio.sleep(_RETRY_S if not hint else 0)
        raise RequestTimeoutError(
            f"consumer offsets request not served in {_REQUEST_TIMEOUT_S:.0f}s: {last_error.message}"
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


def _check_group_name(group: str) -> None:
    if not group:
        raise InvalidArgumentError("group must not be empty", field="group")
    if len(group) > MAX_GROUP_NAME:
        raise InvalidArgumentError(f"group is longer than {MAX_GROUP_NAME} characters", field="group")
