"""The controller group on a node: cluster metadata as a Raft group (group 0) hosted by every node.

Up to ``controller_replicas`` nodes vote; the others follow as learners, so every node holds the whole
cluster state. Committed commands are applied by :func:`multiraft.controller.apply` in log order; after
each batch the node reconciles which partition groups it hosts (creating those newly assigned to it,
removing those of deleted topics) and the event loop gets the new state.

Requests that change metadata (create a topic, register a node...) are served by the controller *leader*:
only it knows which nodes are alive, so it decides the placement and proposes the resulting command. Other
nodes forward requests to it (``multiraft.node.cluster.controller_client``) as typed peer messages
(``multiraft.node.peer.messages``): a command already decided by the sender, or a topic to create.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from multiraft import controller as ctl
from multiraft import raft
from multiraft.errors import MultiraftError, NotLeaderError, error_for_reason
from multiraft.logging import get_logger
from multiraft.node.replicas.capacity import RoomLedger
from multiraft.node.replicas.raft_group import Completion, RaftGroup
from multiraft.node.threads import SchedulerOwned, ThreadOwner, on_owner_thread
from multiraft.node.vocabulary.controller import (
    ControllerBody,
    CreatePartitionsRequest,
    CreateTopicRequest,
    NodeStateRequest,
)

__all__ = ["ControllerMachine", "CONTROLLER_TOPIC", "controller_error", "SNAPSHOT_EVERY"]

log = get_logger(__name__)

CONTROLLER_TOPIC = "__cluster_metadata"
SNAPSHOT_EVERY = 500  # applied commands between metadata snapshots (the log is compacted behind them)


def controller_error(exc: ctl.ControllerError) -> MultiraftError:
    """The shared error hierarchy's equivalent of a controller error (same reason on the wire)."""
    return error_for_reason(exc.reason, str(exc), exc.metadata)


@dataclass
class ControllerMachine(SchedulerOwned):
    """State machine of the controller group (scheduler thread)."""

    node_id: int
    owner: ThreadOwner
    on_state: Callable[[ctl.ClusterState, set[int], set[int]], None]  # new state, groups created, deleted
    on_leader: Callable[[int], None]  # controller leader id (0 if unknown), on the scheduler thread
    # (ids the member-list holds live: alive or suspect, every id it remembers); published by the event loop.
    liveness: Callable[[], tuple[frozenset[int], frozenset[int]]] | None = None
    room: RoomLedger | None = None  # what each node can still store (placement refuses what does not fit)
    state: ctl.ClusterState = field(default_factory=ctl.ClusterState)
    _snapshot_index: int = 0

    def start(self, group: RaftGroup) -> None:
        snapshot = group.storage.snapshot()
        if snapshot.data:
            self.state = ctl.decode_snapshot(snapshot.data)
        self._snapshot_index = snapshot.meta.index
        self.on_state(self.state, set(), set())

    # ------------------------------------------------------------------------------------ StateMachine

    def apply(self, group: RaftGroup, entries: Sequence[raft.Entry]) -> dict[int, Any]:
        results: dict[int, Any] = {}
        state = self.state
        created: set[int] = set()
        deleted: set[int] = set()
        for entry in entries:
            if entry.kind != raft.EntryKind.CONTROL or entry.index <= state.applied_index:
                continue
            try:
                command = ctl.decode_command(bytes(entry.payload))
            except ctl.UnsupportedVersionError as exc:
                # A newer node wrote it: skipping it would make this replica's state diverge. Stop instead.
                log.error("controller command from a newer version; upgrade this node", index=entry.index)
                raise RuntimeError(f"controller command {entry.index} needs a newer multiraft: {exc}") from exc
            except ctl.CommandDecodeError as exc:
                # Every replica of this version reads the same bytes the same way, so all of them skip it.
                log.error("skipping an undecodable controller command", index=entry.index, error=str(exc))
                continue
            state, result = ctl.apply(state, entry.index, command)
            if result.ok and isinstance(result.outcome, ctl.Topic):
                group_ids = {p.group_id for p in result.outcome.partitions}
                if isinstance(command, ctl.CreateTopic):
                    created |= group_ids
                elif isinstance(command, ctl.CreatePartitions):  # only the new ones start from a bootstrap
                    new = result.outcome.partitions[command.total - len(command.assignments) :]
                    created |= {p.group_id for p in new}
                elif isinstance(command, ctl.DeleteTopic):
                    deleted |= group_ids
                    created -= group_ids
            results[entry.index] = result.outcome if result.error is None else controller_error(result.error)
        if state is not self.state:
            self.state = state
            self.on_state(state, created, deleted)
            self._maybe_snapshot(group)
        return results

    def on_role_change(self, group: RaftGroup, soft_state: raft.SoftState) -> None:
        self.on_leader(soft_state.leader_id)

    def on_snapshot(self, group: RaftGroup, snapshot: raft.Snapshot) -> None:
        previous = set(self.state.groups())
        # A node that joins a running cluster may be sent the bootstrap snapshot, which carries no state.
        self.state = ctl.decode_snapshot(snapshot.data) if snapshot.data else ctl.ClusterState()
        self._snapshot_index = snapshot.meta.index
        # Topics deleted in the history the snapshot skipped are gone for good.
        self.on_state(self.state, set(), previous - set(self.state.groups()))

    def _maybe_snapshot(self, group: RaftGroup) -> None:
        applied = self.state.applied_index
        if applied - self._snapshot_index < SNAPSHOT_EVERY:
            return
        storage = group.storage
        storage.create_snapshot(applied, group.raw.conf_state, ctl.encode_snapshot(self.state))
        storage.compact(applied)
        self._snapshot_index = applied
        log.info("controller snapshot", index=applied)

    # --------------------------------------------------------------------------------- leader requests

    @on_owner_thread
    def handle(self, group: RaftGroup, request: ControllerBody, completion: Completion) -> None:
        """Serve a metadata request on the leader: decide, then propose the command (scheduler thread)."""
        if not group.is_leader:
            completion(None, NotLeaderError("not the controller leader", leader_id=group.raw.leader_id))
            return
        try:
            command = self._command_for(group, request)
            payload = ctl.encode_command(command)
        except ctl.ControllerError as exc:
            completion(None, controller_error(exc))
            return
        index = group.propose(payload, completion, kind=raft.EntryKind.CONTROL)
        if self.room is not None:
            self.room.reserve(index, command, self.state.applied_index)

    def _command_for(self, group: RaftGroup, request: ControllerBody) -> ctl.Command:
        if isinstance(request, CreateTopicRequest):
            ctl.validate_topic_name(request.name, internal=request.internal)
            if request.name in self.state.topics:
                raise ctl.DuplicateTopicError(request.name)
            configs = ctl.validate_topic_configs(request.configs, creating=True)
            live, state = self.live_nodes(group), self.state
            place = ctl.place_new_topic if self.room is None else self.room.place_new_topic
            assignments = place(live, state, request.partitions, request.replication_factor)
            return ctl.CreateTopic(
                request.name,
                configs,
                tuple((tuple(replicas), leader) for replicas, leader in assignments),
                internal=request.internal,
                created_ms=int(time.time() * 1000),
            )
        if isinstance(request, CreatePartitionsRequest):
            return self._create_partitions(group, request)
        if isinstance(request, NodeStateRequest):
            return ctl.node_state_change(self.state, request.node_id, request.state, force=request.force)
        if isinstance(request, ctl.SetNodeState) and request.node_id not in self.state.nodes:
            raise ctl.NodeNotFoundError(request.node_id)
        return request

    def _create_partitions(self, group: RaftGroup, request: CreatePartitionsRequest) -> ctl.CreatePartitions:
        """Place the new partitions as a topic's are (balance, hosts, racks, room) with the topic's
        replication factor; refused as a topic creation would be when the live nodes cannot take them."""
        state = self.state
        adding = ctl.partitions_to_add(state, request.name, request.total)
        replication_factor = state.topics[request.name].replication_factor
        place = ctl.place_new_topic if self.room is None else self.room.place_new_topic
        assignments = place(self.live_nodes(group), state, adding, replication_factor)
        return ctl.CreatePartitions(
            request.name, request.total, tuple((tuple(replicas), leader) for replicas, leader in assignments)
        )

    def live_nodes(self, group: RaftGroup) -> list[ctl.NodeInfo]:
        """ACTIVE registered nodes the member-list holds alive or suspect (itself included).

        A node the member-list has not heard of yet (gossip still converging after a restart) counts as live
        if the controller group heard from it recently, so creating a topic right after start-up works."""
        status = group.raw.status()
        recent = {self.node_id} | {peer for peer, progress in status.progress.items() if progress.recent_active}
        if self.liveness is None:
            alive = recent
        else:
            live, known = self.liveness()
            alive = {self.node_id} | set(live) | {n for n in recent if n not in known}
        return [node for node in self.state.nodes_in_state(ctl.NodeState.ACTIVE) if node.node_id in alive]
