"""The narrow protocols services and background tasks depend on, so each can be built and tested with fakes.

The node wires the real ones: :class:`~multiraft.node.cluster.directory.Directory` is a ``ClusterView`` and a
``LeaderDirectory``; :class:`~multiraft.node.cluster.swim.NodeMembership` behind ``Liveness``;
:class:`~multiraft.node.cluster.controller_client.RemoteController` is the ``ControllerClient``;
:class:`~multiraft.node.scheduler.store.StoreClient` the ``StoreHandle``; the transport the ``PeerCaller``;
:class:`~multiraft.node.cluster.status.StatusCollector` the ``PartitionStatusSource``. Everything here is used on
the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol

from multiraft import controller as ctl
from multiraft.errors import NotLeaderError
from multiraft.node.replicas.partition import PartitionView
from multiraft.node.threads import ThreadOwner
from multiraft.node.vocabulary.capacity import NodeCapacity
from multiraft.node.vocabulary.controller import ControllerBody, ControllerOutcome
from multiraft.node.vocabulary.offsets import OffsetsCommit, OffsetsFetch, OffsetsList
from multiraft.node.vocabulary.partitions import ProduceResult
from multiraft.node.vocabulary.status import MoveReport, PartitionStatus
from storage.batch import BatchHeader

__all__ = [
    "ClusterView",
    "LeaderDirectory",
    "Liveness",
    "ControllerClient",
    "StoreHandle",
    "PeerCaller",
    "PartitionStatusSource",
    "MoveSource",
    "ViewDirectory",
]


class ClusterView(Protocol):
    """The controller's replicated state as this node has applied it, and who leads the controller."""

    @property
    def node_id(self) -> int: ...

    @property
    def cluster(self) -> ctl.ClusterState: ...

    @property
    def controller_leader(self) -> int: ...

    @property
    def controller_voters(self) -> tuple[int, ...]:
        """The nodes that vote in the controller group (a drained node must not be one when it stops)."""
        ...

    def partition_state(self, topic: str, partition: int) -> ctl.PartitionState:
        """A user topic's partition; raises UnknownTopicError / UnknownPartitionError."""
        ...

    def user_topics(self) -> list[ctl.Topic]: ...


class LeaderDirectory(Protocol):
    """Who leads each partition group, and the local replicas' views."""

    def leader_of(self, group_id: int) -> int:
        """The leader's node id, 0 if unknown."""
        ...

    def leader_view(self, topic: str, partition: int) -> PartitionView:
        """The local view of a partition led here; raises NotLeaderError otherwise."""
        ...

    def not_leader(self, topic: str, partition: int, group_id: int) -> NotLeaderError: ...


class Liveness(Protocol):
    """What the member-list (SWIM) says of other nodes."""

    def state(self, node_id: int) -> str:
        """alive, suspect, dead, left or unknown."""
        ...

    def is_live(self, node_id: int) -> bool: ...

    def is_suspect(self, node_id: int) -> bool: ...

    def gone_for(self, node_id: int) -> float | None:
        """Seconds since the node was declared dead or left; None while it is not."""
        ...


class ControllerClient(Protocol):
    """Runs metadata changes on the controller leader, wherever it is."""

    async def call(self, body: ControllerBody, *, timeout_s: float = ...) -> ControllerOutcome: ...


class StoreHandle(Protocol):
    """The loop's hand-off to the scheduler thread's store: every call is submitted there."""

    def produce(self, view: PartitionView, batch: bytes, header: BatchHeader) -> asyncio.Future[ProduceResult]:
        """Propose a checked batch now (batches handed over in order are proposed in order)."""
        ...

    async def delete_records(self, view: PartitionView, offset: int, timeout_s: float) -> int:
        """DeleteRecords on the local leader replica: the log start offset once every replica applies it."""
        ...

    async def offsets(self, group_id: int, operation: OffsetsCommit | OffsetsFetch | OffsetsList) -> Any:
        """Serve an offsets operation on the local replica of offsets group ``group_id`` (NotLeaderError
        if it is not the leader): None for a commit, ``list[CommittedOffset]`` for a fetch, names for a list."""
        ...

    async def partition_status(self, group_ids: Sequence[int]) -> list[PartitionStatus]:
        """Status of the partitions among ``group_ids`` that this node leads."""
        ...

    async def capacity(self) -> NodeCapacity:
        """What this node's store can still take (``multiraft.node.cluster.capacity``)."""
        ...


class PeerCaller(Protocol):
    """Node-to-node requests (the peer transport)."""

    async def call(self, to_node: int, kind: int, body: bytes, timeout_s: float) -> tuple[int, bytes]: ...

    def connected(self, node_id: int) -> bool: ...


class PartitionStatusSource(Protocol):
    async def partition_status(self, partitions: Sequence[ctl.PartitionState]) -> dict[int, PartitionStatus]:
        """Live status of partitions, asked of their leaders (missing where a leader did not answer)."""
        ...


class MoveSource(Protocol):
    async def moves(self) -> list[MoveReport]:
        """Replica moves in flight, as the controller leader tracks them."""
        ...


class ViewDirectory(Protocol):
    """What the store publishes to the loop's directory (each call posted to the event loop): the views of
    the partitions it opens or closes, the controller's state as applied here, and the controller leader."""

    owner: ThreadOwner

    def add_view(self, view: PartitionView) -> None: ...

    def remove_view(self, view: PartitionView) -> None: ...

    def set_cluster(self, state: ctl.ClusterState) -> None: ...

    def set_controller_leader(self, leader_id: int) -> None: ...
