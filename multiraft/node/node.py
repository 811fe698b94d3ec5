"""A multiraft node: the event-loop side (gRPC, peers, client operations) around the scheduler thread.

The scheduler (``multiraft.node.scheduler``) owns the log store and every Raft group. This module owns what
runs on the asyncio loop: the gRPC server, the peer transport, the client operations the servicers call
(produce, fetch, list offsets, topic administration), forwarding metadata requests to the controller leader,
and sharing partition leadership with the other nodes so that any node can answer Metadata.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import random
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from membership import EventKind, MemberEvent
from multiraft import controller as ctl
from multiraft import raft
from multiraft.config import NodeConfig
from multiraft.errors import (
    CorruptBatchError,
    InvalidArgumentError,
    MultiraftError,
    NotLeaderError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    RequestTimeoutError,
    StorageFailureError,
    TopicExistsError,
    UnavailableError,
    UnknownNodeError,
    UnknownPartitionError,
    UnknownTopicError,
    error_for_reason,
)
from multiraft.logging import get_logger
from multiraft.node.catchup import CATCHUP_REQUEST_KINDS, CatchupManager, snapshot_peers
from multiraft.node.controller_group import CONTROLLER_TOPIC, ControllerMachine
from multiraft.node.membership import NodeMembership
from multiraft.node.offsets import OFFSETS_TOPIC, CommittedOffset, OffsetsMachine, group_partition
from multiraft.node.partition import PartitionMachine, PartitionView, RetentionPolicy
from multiraft.node.raftlog import RaftLogStorage
from multiraft.node.rebalancer import MoveProgress, Rebalancer
from multiraft.node.reconfigure import Reconciler
from multiraft.node.scheduler import Group, Scheduler, loop_completion
from multiraft.node.transport import PeerTransport
from storage import (
    BatchFormatError,
    BatchHeader,
    CompactedError,
    LogStore,
    StorageConfig,
    StorageError,
    validate_batch,
)
from storage import (
    UnavailableError as StorageUnavailableError,
)

__all__ = [
    "Node",
    "run_node",
    "ProduceAck",
    "FetchResult",
    "PartitionDescription",
    "TopicDescription",
    "NodeDescription",
    "ClusterDescription",
    "DrainStatus",
]

log = get_logger(__name__)

_REQUEST_CONTROLLER = 1
_REQUEST_PARTITION_STATUS = 2
_REQUEST_LEADERS = 3
_REQUEST_OFFSETS = 4
_REQUEST_MOVES = 5
_STATUS_OK = 0
_STATUS_ERROR = 1
_GROUP_ATTRIBUTE = "node.group"
_LEADER_BROADCAST_S = 0.25
_LEADER_FULL_BROADCAST_S = 5.0
_CONTROLLER_TIMEOUT_S = 15.0
_GIL_SWITCH_INTERVAL_S = 0.0005
_MAX_GROUP_NAME = 255
_OFFSETS_ATTEMPT_S = 2.0
_OFFSETS_DIAL_S = 0.3  # a leader we have no connection to is likely dead; look again soon
_MAX_OFFSET_METADATA = 4096
_RECONCILE_S = 0.2  # how often partition leaders make Raft memberships follow the controller's assignments
# Diagnostics: with this set to 1, SIGUSR1 toggles a network partition of this node's Raft traffic (tests).
_DEBUG_ISOLATION = "MULTIRAFT_DEBUG_ISOLATION"


@dataclass(frozen=True, slots=True)
class ProduceAck:
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class FetchResult:
    batches: bytes
    high_watermark: int
    log_start_offset: int
    next_offset: int


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    in_sync_replicas: tuple[int, ...]
    preferred_leader: int
    high_watermark: int
    log_start_offset: int
    leader_epoch: int
    learners: tuple[int, ...] = ()
    replica_lag: dict[int, int] = field(default_factory=dict)  # entries behind the leader, per replica


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    partitions: tuple[PartitionDescription, ...]
    configs: dict[str, str]
    replication_factor: int


@dataclass(frozen=True, slots=True)
class NodeDescription:
    node_id: int
    client_address: str
    peer_address: str
    rack: str
    state: str
    capacity: float


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    cluster_id: str
    controller_id: int
    nodes: tuple[NodeDescription, ...]
    loads: tuple[tuple[int, int, int], ...]  # (node id, replicas, leaders)
    under_replicated: tuple[tuple[str, int], ...]
    partitions: int
    moves: tuple[MoveProgress, ...] = ()  # replica moves in flight (known to the controller leader)


@dataclass(frozen=True, slots=True)
class DrainStatus:
    replicas_left: int
    leaders_left: int

    @property
    def safe_to_stop(self) -> bool:
        return self.replicas_left == 0 and self.leaders_left == 0


@dataclass
class _Isolation:
    """A network partition of one node's Raft traffic, for tests (``MULTIRAFT_DEBUG_ISOLATION=1``): SIGUSR1
    toggles it. While it is on, every Raft message to or from a peer is dropped, and the node keeps ticking, so
    its groups time out and campaign; requests between nodes (metadata, status) still pass. Turning it off
    logs what was dropped."""

    node_id: int
    isolated: bool = False
    dropped: collections.Counter[tuple[bool, raft.MessageType]] = field(default_factory=collections.Counter)

    def toggle(self) -> None:
        self.isolated = not self.isolated
        if self.isolated:
            self.dropped.clear()
            log.warning("debug isolation on", node_id=self.node_id)
            return
        sent = {kind: n for (outgoing, kind), n in self.dropped.items() if outgoing}
        log.warning(
            "debug isolation off",
            node_id=self.node_id,
            sent_dropped=sum(sent.values()),
            received_dropped=sum(n for (outgoing, _), n in self.dropped.items() if not outgoing),
            pre_votes_dropped=sent.get(raft.MessageType.PRE_VOTE, 0),
            votes_dropped=sent.get(raft.MessageType.VOTE, 0),
        )

    def drop(self, batches: Iterable[list[tuple[int, raft.Message]]], *, outgoing: bool) -> bool:
        """True (and the messages counted) while isolated."""
        if not self.isolated:
            return False
        for messages in batches:
            self.dropped.update((outgoing, message.type) for _, message in messages)
        return True


@dataclass
class _LeaderCache:
    """Who leads each partition group, as the leaders themselves announced it (term wins)."""

    leaders: dict[int, tuple[int, int]] = field(default_factory=dict)

    def learn(self, group_id: int, leader: int, term: int) -> None:
        known = self.leaders.get(group_id)
        if known is None or term >= known[1]:
            self.leaders[group_id] = (leader, term)


class Node:
    """One node of a cluster. ``await start()``, then serve until ``await stop()``."""

    def __init__(self, config: NodeConfig) -> None:
        self.config = config.validate()
        self.node_id = config.node_id
        self.cluster = ctl.ClusterState()
        self.controller_leader = 0
        self.views: dict[tuple[str, int], PartitionView] = {}
        self.views_by_group: dict[int, PartitionView] = {}
        self._leader_cache = _LeaderCache()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scheduler: Scheduler | None = None
        self._transport: PeerTransport | None = None
        self._server: grpc.aio.Server | None = None
        self._controller_group: Group | None = None
        self._controller: ControllerMachine | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._health: Any = None
        self._rng = random.Random()  # one for every group: they all run on the scheduler thread
        self._registered = asyncio.Event()
        self._producer_ids = (0, 0)  # [next, end) of the block this node hands out
        self._producer_ids_lock = asyncio.Lock()
        self._offsets_topic_lock = asyncio.Lock()
        self._stopped = asyncio.Event()
        self.client_port = 0
        self.peer_port = 0
        self.membership: NodeMembership | None = None
        self.rebalancer = Rebalancer(self)
        # Hook for the replica catch-up copier: (group id, replicas catching up by snapshot) -> {node id: (bytes
        # copied, bytes total)} of the segment copies this node (as leader) is sending; reported in partition
        # status ("copy") and move progress. The rebalancer promotes no learner listed there.
        self.catchup_progress: Callable[[int, Collection[int]], dict[int, tuple[int, int]]] | None = None
        self.catchup: CatchupManager | None = None  # segment copies to and from this node
        self._isolation: _Isolation | None = None  # MULTIRAFT_DEBUG_ISOLATION (loop thread)

    # ------------------------------------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        # The scheduler and the event loop hand work to each other many times per commit; with CPython's
        # default 5 ms GIL switch interval a woken thread can wait that long behind a busy one.
        sys.setswitchinterval(_GIL_SWITCH_INTERVAL_S)
        if os.environ.get("MULTIRAFT_DEBUG_GC_MS"):
            _record_gc_pauses(float(os.environ["MULTIRAFT_DEBUG_GC_MS"]))
        self._loop = asyncio.get_running_loop()
        if os.environ.get(_DEBUG_ISOLATION) == "1":
            self._isolation = _Isolation(self.node_id)
            self._loop.add_signal_handler(signal.SIGUSR1, self._isolation.toggle)
        config = self.config
        self._transport = PeerTransport(
            node_id=self.node_id,
            cluster_id=config.cluster_id,
            listen=config.peer_address,
            deliver=self._deliver,
            on_unreachable=self._peer_unreachable,
            handle_request=self._serve_peer_request,
            max_frame_bytes=config.max_frame_bytes,
            heartbeat_interval_s=config.heartbeat_interval_s,
        )
        await self._transport.start()
        self.peer_port = self._transport.port
        for node_id, address in config.initial_members().items():
            if node_id != self.node_id:
                self._transport.set_peer(node_id, address)
        self._scheduler = Scheduler(store_opener=self._open_store, tick_ms=config.tick_ms, outbox=self)
        self.catchup = CatchupManager(
            node_id=self.node_id,
            data_dir=config.data_dir,
            scheduler=self._scheduler,
            call=self._transport.call,
            disconnect=self._transport.disconnect,
            views_by_group=self.views_by_group,
            bandwidth_bytes_per_s=config.move_bandwidth_bytes_per_s,
        )
        self.catchup_progress = self.catchup.leader_progress
        self._scheduler.start(self._load_groups)
        self.catchup.start(self._loop)
        self._scheduler.every(config.retention_check_ms / 1000, self._partition_housekeeping)
        self._scheduler.every(config.leader_balance_ms / 1000, self._hand_back_leadership)
        self._scheduler.every(
            _RECONCILE_S,
            Reconciler(
                self.node_id,
                self._scheduler,
                lambda: self._controller.state if self._controller is not None else ctl.ClusterState(),
                lambda: self.controller_leader,
                self._drop_local_replica,
            ),
        )
        await self._start_grpc()
        self.membership = NodeMembership(
            config,
            client_address=self._advertised_client(),
            peer_address=self._advertised_peer(),
            on_event=self._on_member_event,
        )
        await self.membership.start()
        self._tasks = [
            self._loop.create_task(self._register()),
            self._loop.create_task(self._broadcast_leaders()),
            self._loop.create_task(self.rebalancer.run()),
        ]
        log.info(
            "node started",
            node_id=self.node_id,
            client_address=f"{config.client_address.rpartition(':')[0]}:{self.client_port}",
            peer_address=f"{config.peer_address.rpartition(':')[0]}:{self.peer_port}",
            data_dir=config.data_dir,
        )

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self.membership is not None:
            await self.membership.stop()  # graceful leave: peers see "left" now, not a failure later
        if self._server is not None:
            await self._server.stop(grace=1.0)
        if self.catchup is not None:
            await self.catchup.stop()
        if self._transport is not None:
            await self._transport.stop()
        if self._scheduler is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._scheduler.stop)
        self._stopped.set()
        log.info("node stopped", node_id=self.node_id)

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def wait_ready(self, timeout_s: float) -> None:
        """Until this node is registered with a controller that has a leader."""
        await asyncio.wait_for(self._registered.wait(), timeout_s)

    def _open_store(self) -> LogStore:
        config = self.config
        return LogStore.open(
            Path(config.data_dir),
            StorageConfig(map_size_bytes=config.map_size_bytes, max_segments=config.max_segments),
        )

    async def _start_grpc(self) -> None:
        from grpc_health.v1 import health, health_pb2_grpc
        from grpc_reflection.v1alpha import reflection

        from rpc.proto import multiraft_pb2, multiraft_pb2_grpc
        from rpc.servicers import AdminServicer, LogServicer

        limit = self.config.max_batch_bytes + 1024 * 1024
        self._server = grpc.aio.server(
            options=[("grpc.max_receive_message_length", limit), ("grpc.max_send_message_length", 2 * limit)]
        )
        multiraft_pb2_grpc.add_LogServicer_to_server(LogServicer(self), self._server)
        multiraft_pb2_grpc.add_AdminServicer_to_server(AdminServicer(self), self._server)
        self._health = health.aio.HealthServicer()  # type: ignore[attr-defined]
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        names = [d.full_name for d in multiraft_pb2.DESCRIPTOR.services_by_name.values()]
        reflection.enable_server_reflection([*names, health.SERVICE_NAME, reflection.SERVICE_NAME], self._server)
        self.client_port = self._server.add_insecure_port(self.config.client_address)
        await self._update_health()  # the default status of "" is SERVING: say the truth before serving
        await self._server.start()

    # ------------------------------------------------------------------------------ scheduler side: groups

    def _raft_config(self) -> raft.RaftConfig:
        config = self.config
        return raft.RaftConfig(
            id=self.node_id,
            election_tick=config.election_ticks,
            heartbeat_tick=config.heartbeat_ticks,
            max_size_per_msg=config.max_append_bytes,
            max_inflight_bytes=config.max_inflight_bytes,
        )

    def _load_groups(self) -> None:
        """On the scheduler thread at start: the controller group, then every partition group on disk."""
        scheduler = self._sched
        store = scheduler.store
        assert store is not None
        controller_log = store.log(CONTROLLER_TOPIC, 0)
        storage = RaftLogStorage(controller_log)
        members = self.config.initial_members()
        fresh = controller_log.last_index() == 0 and storage.snapshot().meta.index == 0
        if fresh and self.node_id in members:
            voters = tuple(list(members)[: self.config.controller_replicas])
            learners = tuple(n for n in members if n not in voters)
            hard_state, snapshot = raft.bootstrap(raft.ConfState.of(voters, learners))
            storage.apply_snapshot(snapshot)
            storage.set_hard_state(hard_state)
        machine = ControllerMachine(
            self.node_id, scheduler, self._on_cluster_state, self._on_controller_leader, liveness=self._liveness
        )
        snapshot_index = storage.snapshot().meta.index
        # the cluster state is rebuilt from the snapshot, then replayed
        raw = raft.RawNode(self._raft_config(), storage, self._rng, applied=snapshot_index)
        group = Group(ctl.CONTROLLER_GROUP_ID, raw, storage, machine)
        self._controller_group, self._controller = group, machine
        scheduler.add_group(group)
        if fresh and members and self.node_id == next(iter(members)):
            raw.campaign()  # the first member starts the first election instead of waiting a timeout
        for topic, partition in store.logs():
            if topic == CONTROLLER_TOPIC:
                continue
            attribute = store.log(topic, partition).attribute(_GROUP_ATTRIBUTE)
            if attribute is not None:
                described = json.loads(attribute)
                self._open_partition(topic, partition, int(described["group_id"]), bootstrap=None, configs=None)
        machine.start(group)

    @property
    def _sched(self) -> Scheduler:
        assert self._scheduler is not None
        return self._scheduler

    def _open_partition(
        self,
        topic: str,
        partition: int,
        group_id: int,
        *,
        bootstrap: ctl.PartitionState | None,
        configs: ctl.TopicConfig | None,
    ) -> Group:
        """Create (with ``bootstrap``: as an initial replica) or reopen one partition group (scheduler thread).

        A replica added later, or one whose creation this node missed, starts empty and gets a snapshot from
        the leader. ``configs`` fix the segment limits of a log being created (they never change after).
        """
        scheduler = self._sched
        store = scheduler.store
        assert store is not None
        if configs is not None and (topic, partition) in set(store.logs()):
            existing = store.log(topic, partition).attribute(_GROUP_ATTRIBUTE)
            if existing is not None and int(json.loads(existing)["group_id"]) != group_id:
                # A topic deleted while this node was away and created again under the same name.
                stale = json.loads(existing)["group_id"]
                log.info("removing a stale log of a re-created topic", topic=topic, partition=partition, group=stale)
                scheduler.remove_group(int(stale))
                store.delete_log(topic, partition)
        if configs is None:
            plog = store.log(topic, partition)
        else:
            plog = store.log(topic, partition, segment_bytes=configs.segment_bytes, segment_ms=configs.segment_ms)
        storage = RaftLogStorage(plog)
        if bootstrap is not None and plog.attribute(_GROUP_ATTRIBUTE) is None:
            hard_state, snapshot = raft.bootstrap(raft.ConfState.of(bootstrap.replicas, bootstrap.learners))
            storage.apply_snapshot(snapshot)
            storage.set_hard_state(hard_state)
        if plog.attribute(_GROUP_ATTRIBUTE) is None:
            plog.set_attribute(_GROUP_ATTRIBUTE, json.dumps({"group_id": group_id}).encode())
        view = PartitionView(topic, partition, group_id, plog)
        machine: PartitionMachine | OffsetsMachine
        if topic == OFFSETS_TOPIC:
            # The offsets map is rebuilt from the snapshot and the commits after it, as the controller's is.
            applied = storage.snapshot().meta.index
            machine = OffsetsMachine(topic, partition, group_id, scheduler, self._on_loop, view)
        else:
            applied = storage.applied_index()
            machine = PartitionMachine(topic, partition, group_id, plog, scheduler, self._on_loop, view)
        raw = raft.RawNode(self._raft_config(), storage, self._rng, applied=applied)
        group = Group(group_id, raw, storage, machine)
        scheduler.add_group(group)
        machine.start(group)
        self._on_loop(lambda: self._add_view(view))
        if bootstrap is not None and bootstrap.preferred_leader == self.node_id:
            raw.campaign()
        return group

    def _on_cluster_state(self, state: ctl.ClusterState, created: set[int], deleted: set[int]) -> None:
        """After each batch of controller commands (scheduler thread): open the partition groups assigned to
        this node and remove those of deleted topics. Removal follows applied deletions only, never a diff:
        at start-up the state may not yet have replayed the creation of groups that are on disk."""
        scheduler = self._sched
        for group_id in deleted:
            group = scheduler.remove_group(group_id)
            if group is not None and isinstance(group.machine, PartitionMachine):
                machine = group.machine
                assert scheduler.store is not None
                scheduler.store.delete_log(machine.topic, machine.partition)
                self._on_loop(lambda view=machine.view: self._remove_view(view))  # type: ignore[misc]
        for group_id, partition in ((p.group_id, p) for p in state.partitions_on_node(self.node_id)):
            configs = ctl.effective_topic_config(state.topics[partition.topic].configs)
            group = scheduler.groups.get(group_id)
            if group is None:
                group = self._open_partition(
                    partition.topic,
                    partition.partition,
                    group_id,
                    bootstrap=partition if group_id in created else None,
                    configs=configs,
                )
            if isinstance(group.machine, PartitionMachine):
                group.machine.retention = RetentionPolicy(configs.retention_ms, configs.retention_bytes)
        self._on_loop(lambda: self._set_cluster(state))

    def _on_controller_leader(self, leader_id: int) -> None:
        self._on_loop(lambda: self._set_controller_leader(leader_id))

    def _partition_housekeeping(self) -> None:
        now_ms = int(time.time() * 1000)
        for group in list(self._sched.groups.values()):
            if isinstance(group.machine, PartitionMachine):
                group.machine.housekeeping(group, now_ms)
                if self.catchup is not None:
                    self.catchup.leader_check(group)

    def _hand_back_leadership(self) -> None:
        """Every ``leader_balance_ms`` (scheduler thread): of the partitions this node leads, hand each whose
        preferred leader is a live, ACTIVE voter back to it once it has caught up."""
        controller = self._controller
        groups = self._sched.groups
        led = {
            group_id: self.node_id
            for group_id, group in groups.items()
            if group.is_leader and isinstance(group.machine, PartitionMachine)
        }
        if controller is None or not led:
            return
        live, _ = self._liveness()
        for group_id, preferred in ctl.preferred_leader_moves(controller.state, led, set(live)):
            group = groups[group_id]
            if isinstance(group.machine, PartitionMachine):
                group.machine.hand_back_leadership(group, preferred)

    def _drop_local_replica(self, group: Group) -> None:
        """Remove a replica the controller moved off this node, and its log (scheduler thread)."""
        scheduler = self._sched
        scheduler.remove_group(group.group_id)
        machine = group.machine
        if isinstance(machine, PartitionMachine | OffsetsMachine):
            assert scheduler.store is not None
            scheduler.store.delete_log(machine.topic, machine.partition)
            self._on_loop(lambda view=machine.view: self._remove_view(view))  # type: ignore[misc]

    # ------------------------------------------------------------------------------ liveness (member-list)

    def _liveness(self) -> tuple[frozenset[int], frozenset[int]]:
        """(live ids, every id the member-list remembers); any thread (the sets are replaced, never mutated)."""
        members = self.membership
        if members is None:
            return frozenset({self.node_id}), frozenset({self.node_id})
        return members.live_ids, members.known_ids

    def liveness(self, node_id: int) -> str:
        """alive, suspect, dead, left or unknown, as the member-list says (loop thread)."""
        if node_id == self.node_id:
            return "alive"
        return self.membership.state(node_id) if self.membership is not None else "unknown"

    def is_live(self, node_id: int) -> bool:
        return self.liveness(node_id) in ("alive", "suspect")

    def is_suspect(self, node_id: int) -> bool:
        return self.liveness(node_id) == "suspect"

    def membership_gone_for(self, node_id: int) -> float | None:
        """Seconds since the member-list declared ``node_id`` dead or saw it leave (None: it is not)."""
        return self.membership.gone_for(node_id) if self.membership is not None else None

    def _on_member_event(self, event: MemberEvent) -> None:
        meta = event.member.meta
        if meta.node_id == self.node_id:
            return
        if event.kind in (EventKind.JOIN, EventKind.UPDATE) and self._transport is not None:
            # A node that joined through the seeds is reachable before the controller has registered it.
            self._transport.set_peer(meta.node_id, meta.peer_addr)
        elif event.kind in (EventKind.DEAD, EventKind.LEAVE) and self._scheduler is not None:
            self._peer_unreachable(meta.node_id)  # wake quiescent followers of its groups so they campaign

    # ----------------------------------------------------------------------------- loop side: state

    def _on_loop(self, action: Callable[[], None]) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(action)

    def _add_view(self, view: PartitionView) -> None:
        self.views[(view.topic, view.partition)] = view
        self.views_by_group[view.group_id] = view

    def _remove_view(self, view: PartitionView) -> None:
        view.mark_removed()
        self.views.pop((view.topic, view.partition), None)
        self.views_by_group.pop(view.group_id, None)

    def _set_cluster(self, state: ctl.ClusterState) -> None:
        self.cluster = state
        transport = self._transport
        if transport is not None:
            for node in state.nodes.values():
                if node.node_id != self.node_id:
                    transport.set_peer(node.node_id, node.peer_address)
        for view in self.views.values():
            topic = state.topics.get(view.topic)
            if topic is not None and view.partition < len(topic.partitions):
                view.replicas = topic.partitions[view.partition].replicas
        self._check_registered()

    def _set_controller_leader(self, leader_id: int) -> None:
        self.controller_leader = leader_id

    def _check_registered(self) -> None:
        node = self.cluster.nodes.get(self.node_id)
        registered = node is not None and node.client_address == self._advertised_client()
        if registered and not self._registered.is_set():
            self._registered.set()
            if self._loop is not None and self._health is not None:
                self._loop.create_task(self._update_health())

    async def _update_health(self) -> None:
        """SERVING once registered: every call sets the status from the flag, so the last one is right."""
        from grpc_health.v1 import health_pb2

        status = (
            health_pb2.HealthCheckResponse.SERVING
            if self._registered.is_set()
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        assert self._health is not None
        await self._health.set("", status)

    def _advertised_client(self) -> str:
        configured = self.config.advertise_client_address
        if configured:
            return configured
        host = self.config.client_address.rpartition(":")[0]
        return f"{host}:{self.client_port}"

    def _advertised_peer(self) -> str:
        configured = self.config.advertise_peer_address
        if configured:
            return configured
        host = self.config.peer_address.rpartition(":")[0]
        return f"{host}:{self.peer_port}"

    # ------------------------------------------------------------------------------ network plumbing

    def send(self, batches: dict[int, list[tuple[int, raft.Message]]]) -> None:
        """Outbox for the scheduler: hand a round's messages to the loop (scheduler thread)."""
        self._on_loop(lambda: self._send_now(batches))

    def _send_now(self, batches: dict[int, list[tuple[int, raft.Message]]]) -> None:
        transport = self._transport
        if transport is None:
            return
        if self._isolation is not None and self._isolation.drop(batches.values(), outgoing=True):
            return
        for to_node, messages in batches.items():
            transport.send(to_node, messages)

    def _deliver(self, from_node: int, messages: list[tuple[int, raft.Message]]) -> None:
        if self._isolation is not None and self._isolation.drop((messages,), outgoing=False):
            return
        scheduler = self._sched
        if self.catchup is not None:  # InstallSnapshot with segment files waits for the copy
            messages = self.catchup.intercept(from_node, messages)
        scheduler.submit(lambda: scheduler.deliver(messages))

    def _peer_unreachable(self, peer: int) -> None:
        scheduler = self._sched

        def report() -> None:
            for group in scheduler.groups.values():
                if peer in group.raw.conf_state.voters or peer in group.raw.conf_state.learners:
                    group.raw.report_unreachable(peer)
                    if group.raw.leader_id == peer and group.raw.quiescent:
                        group.raw.wake()  # a quiescent follower never campaigns by itself
                        scheduler.touch(group)

        scheduler.submit(report)

    async def _serve_peer_request(self, from_node: int, kind: int, body: bytes) -> tuple[int, bytes]:
        if kind in CATCHUP_REQUEST_KINDS and self.catchup is not None:
            return await self.catchup.serve(from_node, kind, body)
        if kind == _REQUEST_CONTROLLER:
            request = json.loads(body)
            leader = self.controller_leader
            try:
                if leader and leader not in (self.node_id, from_node) and not request.get("forwarded"):
                    # A node that joined through the seeds knows no controller leader yet: pass it on once.
                    forwarded = {**request, "forwarded": True}
                    result = await self._controller_remote(leader, forwarded, _CONTROLLER_TIMEOUT_S)
                else:
                    result = await self._controller_local(request, _CONTROLLER_TIMEOUT_S)
            except MultiraftError as exc:
                return _STATUS_ERROR, _encode_error(exc)
            return _STATUS_OK, json.dumps(result).encode()
        if kind == _REQUEST_PARTITION_STATUS:
            wanted = json.loads(body)
            return _STATUS_OK, json.dumps(await self._local_partition_status(wanted)).encode()
        if kind == _REQUEST_OFFSETS:
            document = json.loads(body)
            try:
                result = await self._offsets_local(int(document["group_id"]), document["request"])
            except MultiraftError as exc:
                return _STATUS_ERROR, _encode_error(exc)
            return _STATUS_OK, json.dumps(result).encode()
        if kind == _REQUEST_MOVES:
            return _STATUS_OK, json.dumps([_move_json(m) for m in self.rebalancer.snapshot()]).encode()
        if kind == _REQUEST_LEADERS:
            for group_id, leader, term in json.loads(body):
                self._leader_cache.learn(int(group_id), int(leader), int(term))
            return _STATUS_OK, b""
        return _STATUS_ERROR, _encode_error(InvalidArgumentError(f"unknown request kind {kind}"))

    async def _broadcast_leaders(self) -> None:
        """Tell every peer which partitions this node leads (changes often, everything now and then)."""
        announced: dict[int, int] = {}
        last_full = 0.0
        while True:
            await asyncio.sleep(_LEADER_BROADCAST_S)
            led = {v.group_id: v.leader_term for v in self.views.values() if v.is_leader}
            for group_id, term in led.items():
                self._leader_cache.learn(group_id, self.node_id, term)
            now = time.monotonic()
            if led == announced and now - last_full < _LEADER_FULL_BROADCAST_S:
                continue
            announced, last_full = led, now
            body = json.dumps([[g, self.node_id, t] for g, t in led.items()]).encode()
            transport = self._transport
            if transport is None:
                continue
            for peer in list(transport.known_peers()):
                if transport.connected(peer):
                    self._tasks.append(asyncio.get_running_loop().create_task(self._announce(peer, body)))
            self._tasks = [t for t in self._tasks if not t.done()]

    async def _announce(self, peer: int, body: bytes) -> None:
        assert self._transport is not None
        with contextlib.suppress(ConnectionError, TimeoutError):
            await self._transport.call(peer, _REQUEST_LEADERS, body, 2.0)

    # -------------------------------------------------------------------------------- the controller

    async def _register(self) -> None:
        """Register (or re-register) this node's addresses with the controller until it sticks."""
        delay = 0.1
        while True:
            node = self.cluster.nodes.get(self.node_id)
            if node is not None and node.client_address == self._advertised_client():
                self._check_registered()
                return
            request = {
                "op": "register_node",
                "node": {
                    "node_id": self.node_id,
                    "client_address": self._advertised_client(),
                    "peer_address": self._advertised_peer(),
                    "gossip_address": self.config.gossip_address,
                    "rack": self.config.rack,
                    "capacity": self.config.capacity,
                },
            }
            try:
                await self.controller_call(request, timeout_s=5.0)
            except MultiraftError as exc:
                log.debug("registration not done yet", error=str(exc))
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    async def controller_call(self, request: dict[str, Any], *, timeout_s: float = _CONTROLLER_TIMEOUT_S) -> Any:
        """Run a metadata request on the controller leader, wherever it is; retry while leadership moves."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        last_error: MultiraftError = UnavailableError("the controller has no leader yet")
        while loop.time() < deadline:
            leader = self.controller_leader or self._any_live_peer()
            try:
                if leader == self.node_id:
                    return await self._controller_local(request, deadline - loop.time())
                if leader:
                    return await self._controller_remote(leader, request, deadline - loop.time())
            except NotLeaderError as exc:
                last_error = exc
            except UnavailableError as exc:
                last_error = exc
            await asyncio.sleep(0.05)
        raise RequestTimeoutError(f"metadata request not served in {timeout_s:.0f}s: {last_error.message}")

    def _any_live_peer(self) -> int:
        """Some live member to forward a metadata request through while the controller leader is unknown."""
        if self.membership is None:
            return 0
        peers = sorted(self.membership.peers())
        return self._rng.choice(peers) if peers else 0

    async def _controller_local(self, request: dict[str, Any], timeout_s: float) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        completion = loop_completion(loop, future)
        group, machine = self._controller_group, self._controller
        assert group is not None and machine is not None
        self._sched.submit(lambda: machine.handle(group, request, completion))
        try:
            outcome = await asyncio.wait_for(future, max(0.01, timeout_s))
        except TimeoutError:
            raise RequestTimeoutError("the controller did not commit the request in time") from None
        return _outcome_json(outcome)

    async def _controller_remote(self, leader: int, request: dict[str, Any], timeout_s: float) -> Any:
        assert self._transport is not None
        try:
            status, body = await self._transport.call(
                leader, _REQUEST_CONTROLLER, json.dumps(request).encode(), timeout_s
            )
        except (ConnectionError, TimeoutError) as exc:
            raise UnavailableError(f"controller leader {leader} unreachable: {exc}") from exc
        if status == _STATUS_OK:
            return json.loads(body)
        raise _decode_error(body)

    # ---------------------------------------------------------------------------------- client reads

    def _partition_state(self, topic: str, partition: int) -> ctl.PartitionState:
        found = self.cluster.topics.get(topic)
        if found is None or found.internal:
            raise UnknownTopicError(f"unknown topic {topic!r}", topic=topic)
        if not 0 <= partition < len(found.partitions):
            raise UnknownPartitionError(
                f"topic {topic!r} has partitions 0..{len(found.partitions) - 1}, not {partition}",
                topic=topic,
                partition=partition,
            )
        return found.partitions[partition]

    def leader_of(self, group_id: int) -> int:
        view = self.views_by_group.get(group_id)
        if view is not None and view.leader_id:
            return view.leader_id
        cached = self._leader_cache.leaders.get(group_id)
        if cached is not None:
            return cached[0]
        return 0

    def _not_leader(self, topic: str, partition: int, group_id: int) -> NotLeaderError:
        leader = self.leader_of(group_id)
        node = self.cluster.nodes.get(leader)
        return NotLeaderError(
            f"node {self.node_id} does not lead {topic}/{partition}",
            leader_id=leader,
            leader_address=node.client_address if node is not None else None,
        )

    def _leader_view(self, topic: str, partition: int) -> PartitionView:
        state = self._partition_state(topic, partition)
        view = self.views.get((topic, partition))
        if view is None or not view.is_leader:
            raise self._not_leader(topic, partition, state.group_id)
        return view

    async def produce(self, topic: str, partition: int, batch: bytes, timeout_ms: int) -> ProduceAck:
        return await self.begin_produce(topic, partition, batch, timeout_ms)

    def begin_produce(self, topic: str, partition: int, batch: bytes, timeout_ms: int) -> asyncio.Future[ProduceAck]:
        """Check a batch and hand it to the scheduler *now*, so that batches handed over in order (one
        ProduceStream) are proposed in order; the future resolves when the batch commits."""
        loop = asyncio.get_running_loop()
        try:
            view, header = self._check_produce(topic, partition, batch)
            if timeout_ms < 0:
                raise InvalidArgumentError("timeout_ms must be >= 0", field="timeout_ms")
        except MultiraftError as exc:
            failed: asyncio.Future[ProduceAck] = loop.create_future()
            failed.set_exception(exc)
            return failed
        future: asyncio.Future[Any] = loop.create_future()
        completion = loop_completion(loop, future)
        scheduler = self._sched
        group_id = view.group_id

        def propose() -> None:
            group = scheduler.groups.get(group_id)
            if group is None or not group.is_leader or not isinstance(group.machine, PartitionMachine):
                completion(None, self._not_leader_from_scheduler(topic, partition, group))
                return
            group.machine.produce(group, batch, header, completion)

        scheduler.submit(propose)
        timeout_s = (timeout_ms or self.config.produce_timeout_ms) / 1000
        return asyncio.ensure_future(self._produce_outcome(future, view, timeout_s))

    def _check_produce(self, topic: str, partition: int, batch: bytes) -> tuple[PartitionView, BatchHeader]:
        view = self._leader_view(topic, partition)
        configs = ctl.effective_topic_config(self.cluster.topics[topic].configs)
        limit = min(configs.max_message_bytes, self.config.max_batch_bytes)
        if len(batch) > limit:
            raise RecordTooLargeError(f"batch of {len(batch)} bytes exceeds {limit}", max_bytes=limit)
        try:
            header = validate_batch(batch)
        except BatchFormatError as exc:
            raise CorruptBatchError(f"bad record batch: {exc}", field="batch") from exc
        if header.length != len(batch):
            raise CorruptBatchError("one request carries exactly one record batch", field="batch")
        if header.base_offset != 0:
            raise InvalidArgumentError("a produced batch must have base offset 0", field="batch.base_offset")
        if header.producer_id >= 0 and (header.base_sequence < 0 or header.producer_epoch < 0):
            raise InvalidArgumentError(
                "an idempotent batch needs base_sequence >= 0 and producer_epoch >= 0", field="batch.base_sequence"
            )
        if header.producer_id < -1:
            raise InvalidArgumentError("producer_id must be -1 or a producer id", field="batch.producer_id")
        return view, header

    async def _produce_outcome(self, future: asyncio.Future[Any], view: PartitionView, timeout_s: float) -> ProduceAck:
        try:
            result = await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            raise RequestTimeoutError(
                f"{view.topic}/{view.partition}: not committed within {timeout_s:g}s (it may still be written)"
            ) from None
        return ProduceAck(result.base_offset, result.log_append_time_ms, view.log_start_offset, result.duplicate)

    async def init_producer(self) -> tuple[int, int]:
        """A new producer id (epoch 0), from a block this node reserved from the controller."""
        async with self._producer_ids_lock:
            next_id, end = self._producer_ids
            if next_id >= end:
                block = await self.controller_call(
                    {"op": "allocate_producer_ids", "count": self.config.producer_id_block}
                )
                next_id, end = int(block["first"]), int(block["first"]) + int(block["count"])
            self._producer_ids = (next_id + 1, end)
        return next_id, 0

    def _not_leader_from_scheduler(self, topic: str, partition: int, group: Group | None) -> MultiraftError:
        if group is None:
            return UnavailableError(f"{topic}/{partition} is not hosted here")
        return NotLeaderError(f"not the leader of {topic}/{partition}", leader_id=group.raw.leader_id)

    async def fetch(
        self, topic: str, partition: int, offset: int, max_bytes: int, max_wait_ms: int, min_bytes: int = 0
    ) -> FetchResult:
        if max_bytes < 0 or max_wait_ms < 0 or min_bytes < 0:
            field = "max_bytes" if max_bytes < 0 else "max_wait_ms" if max_wait_ms < 0 else "min_bytes"
            raise InvalidArgumentError(f"{field} must be >= 0", field=field)
        view = self._leader_view(topic, partition)
        max_bytes = max_bytes or self.config.fetch_max_bytes
        if offset > view.high_watermark and not view.current:
            # A new leader's high watermark catches up once it commits an entry of its term: the offset may
            # well exist, so the client retries rather than resetting (Kafka's OFFSET_NOT_AVAILABLE).
            raise UnavailableError(f"{topic}/{partition}: the new leader is still catching up")
        if offset < view.log_start_offset or offset > view.high_watermark:
            raise OffsetOutOfRangeError(
                f"offset {offset} of {topic}/{partition} is outside [{view.log_start_offset}, {view.high_watermark}]",
                log_start_offset=view.log_start_offset,
                high_watermark=view.high_watermark,
            )
        wait_s = min(max_wait_ms, self.config.fetch_max_wait_ms) / 1000
        if wait_s > 0 and view.high_watermark - offset <= max(0, min_bytes) // 1024:
            await view.wait_past(offset, wait_s)
        if not view.is_leader:
            raise self._not_leader(topic, partition, view.group_id)
        try:
            result = view.log.read(offset, max_bytes, max_offset=view.high_watermark)
        except CompactedError as exc:
            raise OffsetOutOfRangeError(
                f"offset {offset} of {topic}/{partition} was removed by retention",
                log_start_offset=view.log_start_offset,
                high_watermark=view.high_watermark,
            ) from exc
        except (StorageUnavailableError, StorageError) as exc:
            raise StorageFailureError(f"{topic}/{partition}: {exc}") from exc
        return FetchResult(result.data, view.high_watermark, result.log_start_offset, result.next_offset)

    async def subscribe(self, topic: str, partition: int, offset: int, max_bytes: int) -> AsyncIterator[FetchResult]:
        """Committed batches from ``offset`` on, as they commit, until the caller stops or an error ends it."""
        if max_bytes < 0:
            raise InvalidArgumentError("max_bytes must be >= 0", field="max_bytes")
        while True:
            result = await self.fetch(topic, partition, offset, max_bytes, self.config.fetch_max_wait_ms)
            if result.batches:
                yield result
                offset = result.next_offset

    def partition_count(self, topic: str) -> int:
        self._partition_state(topic, 0)
        return len(self.cluster.topics[topic].partitions)

    def list_offset(self, topic: str, partition: int, spec: str, timestamp_ms: int = 0) -> int:
        """``earliest``, ``latest`` or ``timestamp`` (first offset at or after it, -1 if none), on the leader."""
        view = self._leader_view(topic, partition)
        if spec == "earliest":
            return view.log_start_offset
        if spec == "latest":
            if not view.current:
                raise UnavailableError(f"{topic}/{partition}: the new leader is still catching up")
            return view.high_watermark
        found = view.log.offset_for_timestamp(timestamp_ms)
        return -1 if found is None or found >= view.high_watermark else found

    # --------------------------------------------------------------------------- consumer-group offsets

    async def commit_offsets(self, group: str, offsets: Sequence[CommittedOffset]) -> None:
        _check_group_name(group)
        for index, committed in enumerate(offsets):
            self._partition_state(committed.topic, committed.partition)
            if committed.offset < 0:
                raise InvalidArgumentError(f"offsets[{index}].offset must be >= 0", field="offsets.offset")
            if len(committed.metadata) > _MAX_OFFSET_METADATA:
                raise InvalidArgumentError(
                    f"offsets[{index}].metadata is longer than {_MAX_OFFSET_METADATA}", field="offsets.metadata"
                )
        if not offsets:
            return
        rows = [[o.topic, o.partition, o.offset, o.metadata] for o in offsets]
        await self._offsets_request(group, {"op": "commit", "group": group, "offsets": rows})

    async def fetch_offsets(self, group: str, partitions: Sequence[tuple[str, int]]) -> list[CommittedOffset]:
        """The group's committed offsets: of ``partitions`` (-1 where none), or every one it committed."""
        _check_group_name(group)
        for topic, partition in partitions:
            self._partition_state(topic, partition)
        if OFFSETS_TOPIC not in self.cluster.topics:
            return [CommittedOffset(t, p, -1) for t, p in partitions]
        request = {"op": "fetch", "group": group, "partitions": [list(tp) for tp in partitions] or None}
        rows = await self._offsets_request(group, request)
        fetched = [CommittedOffset(str(t), int(p), int(o), str(m), int(ts)) for t, p, o, m, ts in rows]
        if not partitions:
            return [o for o in fetched if self._offset_is_current(o)]
        return [o if self._offset_is_current(o) else CommittedOffset(o.topic, o.partition, -1) for o in fetched]

    def _offset_is_current(self, committed: CommittedOffset) -> bool:
        """False for offsets of a deleted topic, or of its deleted namesake (committed before it was created)."""
        topic = self.cluster.topics.get(committed.topic)
        return (
            committed.offset >= 0
            and topic is not None
            and committed.partition < len(topic.partitions)
            and committed.commit_time_ms >= topic.created_ms
        )

    async def list_groups(self) -> list[str]:
        topic = self.cluster.topics.get(OFFSETS_TOPIC)
        if topic is None:
            return []
        answers = await asyncio.gather(
            *(self._offsets_partition_call(p.group_id, {"op": "list"}) for p in topic.partitions)
        )
        return sorted({str(name) for names in answers for name in names})

    async def _offsets_request(self, group: str, request: dict[str, Any]) -> Any:
        await self._ensure_offsets_topic()
        topic = self.cluster.topics[OFFSETS_TOPIC]
        partition = topic.partitions[group_partition(group, len(topic.partitions))]
        return await self._offsets_partition_call(partition.group_id, request)

    async def _ensure_offsets_topic(self) -> None:
        """Create ``__consumer_offsets`` on first use (any node may race to: the controller keeps one)."""
        if OFFSETS_TOPIC in self.cluster.topics:
            return
        async with self._offsets_topic_lock:
            if OFFSETS_TOPIC in self.cluster.topics:
                return
            registered = sum(1 for n in self.cluster.nodes.values() if n.state is ctl.NodeState.ACTIVE)
            request = {
                "op": "create_topic",
                "name": OFFSETS_TOPIC,
                "partitions": self.config.offsets_partitions,
                "replication_factor": max(1, min(self.config.default_replication_factor, registered)),
                "configs": {},
                "internal": True,
            }
            with contextlib.suppress(TopicExistsError):
                await self.controller_call(request)
            await self._wait_for_topic(OFFSETS_TOPIC, present=True)

    async def _offsets_partition_call(
        self, group_id: int, request: dict[str, Any], timeout_s: float = _CONTROLLER_TIMEOUT_S
    ) -> Any:
        """Serve an offsets request on the leader of offsets group ``group_id``, wherever it is."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        last_error: MultiraftError = UnavailableError("the offsets partition has no leader yet")
        hint = 0
        while loop.time() < deadline:
            leader = hint or self.leader_of(group_id)
            hint = 0
            try:
                if leader == self.node_id or not leader:
                    return await self._offsets_local(group_id, request)
                # Short attempts: a dead leader is only noticed by timing out, and its successor may be up
                # already. Repeating a request is harmless (a commit writes the same offsets again).
                assert self._transport is not None
                connected = self._transport.connected(leader)
                attempt_s = min(_OFFSETS_ATTEMPT_S if connected else _OFFSETS_DIAL_S, deadline - loop.time())
                return await self._offsets_remote(leader, group_id, request, attempt_s)
            except NotLeaderError as exc:
                last_error, hint = exc, exc.leader_id
            except UnavailableError as exc:
                last_error = exc
            await asyncio.sleep(0.05 if not hint else 0)
        raise RequestTimeoutError(f"consumer offsets request not served in {timeout_s:.0f}s: {last_error.message}")

    async def _offsets_local(self, group_id: int, request: dict[str, Any]) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        completion = loop_completion(loop, future)
        scheduler = self._sched

        def serve() -> None:
            group = scheduler.groups.get(group_id)
            if group is None or not isinstance(group.machine, OffsetsMachine):
                completion(None, NotLeaderError(f"node {self.node_id} hosts no offsets group {group_id}"))
                return
            machine, op = group.machine, request["op"]
            try:
                if op == "commit":
                    rows = [CommittedOffset(str(t), int(p), int(o), str(m)) for t, p, o, m in request["offsets"]]
                    machine.commit(group, str(request["group"]), rows, completion)
                elif op == "fetch":
                    wanted = request.get("partitions")
                    found = machine.fetch(
                        group, str(request["group"]), None if wanted is None else [(str(t), int(p)) for t, p in wanted]
                    )
                    completion([[o.topic, o.partition, o.offset, o.metadata, o.commit_time_ms] for o in found], None)
                elif op == "list":
                    completion(machine.group_names(group), None)
                else:
                    completion(None, InvalidArgumentError(f"unknown offsets operation {op!r}", field="op"))
            except MultiraftError as exc:
                completion(None, exc)

        scheduler.submit(serve)
        try:
            return await asyncio.wait_for(future, _CONTROLLER_TIMEOUT_S)
        except TimeoutError:
            raise RequestTimeoutError("the offsets commit was not applied in time") from None

    async def _offsets_remote(self, leader: int, group_id: int, request: dict[str, Any], timeout_s: float) -> Any:
        assert self._transport is not None
        body = json.dumps({"group_id": group_id, "request": request}).encode()
        try:
            status, answer = await self._transport.call(leader, _REQUEST_OFFSETS, body, max(0.01, timeout_s))
        except (ConnectionError, TimeoutError) as exc:
            raise UnavailableError(f"offsets leader {leader} unreachable: {exc!r}") from exc
        if status == _STATUS_OK:
            return json.loads(answer)
        raise _decode_error(answer)

    # ------------------------------------------------------------------------------------------- admin

    async def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> TopicDescription:
        partitions = partitions or self.config.default_partitions
        replication_factor = replication_factor or self.config.default_replication_factor
        if not 1 <= partitions <= self.config.max_topic_partitions:
            raise InvalidArgumentError(
                f"partitions must be in [1, {self.config.max_topic_partitions}], got {partitions}", field="partitions"
            )
        if replication_factor < 1:
            raise InvalidArgumentError("replication_factor must be >= 1", field="replication_factor")
        await self.controller_call(
            {
                "op": "create_topic",
                "name": name,
                "partitions": partitions,
                "replication_factor": replication_factor,
                "configs": configs,
            }
        )
        await self._wait_for_topic(name, present=True)
        await self._wait_for_leaders(name, timeout_s=10.0)
        return await self.describe_topic(name)

    async def delete_topic(self, name: str) -> None:
        self._partition_state(name, 0)
        await self.controller_call({"op": "delete_topic", "name": name})
        await self._wait_for_topic(name, present=False)

    async def alter_topic_configs(self, name: str, set_: dict[str, str], delete: Sequence[str]) -> TopicDescription:
        self._partition_state(name, 0)
        await self.controller_call({"op": "alter_topic_configs", "name": name, "set": set_, "delete": list(delete)})
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not _configs_applied(self.cluster.topics.get(name), set_, delete):
            await asyncio.sleep(0.02)
        return await self.describe_topic(name)

    async def _wait_for_topic(self, name: str, *, present: bool) -> None:
        deadline = time.monotonic() + 10
        while (name in self.cluster.topics) != present:
            if time.monotonic() > deadline:
                raise RequestTimeoutError(f"topic {name!r} change not applied on node {self.node_id} in time")
            await asyncio.sleep(0.01)

    async def _wait_for_leaders(self, name: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            topic = self.cluster.topics.get(name)
            if topic is None or all(self.leader_of(p.group_id) for p in topic.partitions):
                return
            await asyncio.sleep(0.02)

    def list_topics(self) -> list[TopicDescription]:
        return [self._describe_static(topic) for topic in self._user_topics()]

    def _user_topics(self) -> list[ctl.Topic]:
        return [
            self.cluster.topics[name] for name in sorted(self.cluster.topics) if not self.cluster.topics[name].internal
        ]

    def _describe_static(self, topic: ctl.Topic, live: dict[int, dict[str, Any]] | None = None) -> TopicDescription:
        partitions = []
        for p in topic.partitions:
            status = (live or {}).get(p.group_id, {})
            partitions.append(
                PartitionDescription(
                    partition=p.partition,
                    leader=int(status.get("leader", self.leader_of(p.group_id))),
                    replicas=p.replicas,
                    in_sync_replicas=tuple(status.get("isr", ())),
                    preferred_leader=p.preferred_leader,
                    high_watermark=int(status.get("hw", 0)),
                    log_start_offset=int(status.get("log_start", 0)),
                    leader_epoch=int(status.get("term", 0)),
                    learners=p.learners,
                    replica_lag={int(node): int(lag) for node, lag in status.get("lag", {}).items()},
                )
            )
        return TopicDescription(topic.name, tuple(partitions), dict(topic.configs), topic.replication_factor)

    async def describe_topic(self, name: str) -> TopicDescription:
        self._partition_state(name, 0)
        topic = self.cluster.topics[name]
        return self._describe_static(topic, await self._partition_status(topic.partitions))

    def metadata(self, topics: Iterable[str]) -> tuple[list[NodeDescription], list[TopicDescription]]:
        wanted = list(topics)
        chosen = [self.cluster.topics[n] for n in wanted if n in self.cluster.topics] if wanted else self._user_topics()
        for name in wanted:
            if name not in self.cluster.topics:
                raise UnknownTopicError(f"unknown topic {name!r}", topic=name)
        return self.nodes(), [self._describe_static(t) for t in chosen]

    def nodes(self) -> list[NodeDescription]:
        return [
            NodeDescription(n.node_id, n.client_address, n.peer_address, n.rack, self._node_state(n), n.capacity)
            for n in sorted(self.cluster.nodes.values(), key=lambda n: n.node_id)
        ]

    def _node_state(self, node: ctl.NodeInfo) -> str:
        """The administrative state (draining, removed), or for an active node its liveness as the member-list
        says: alive, suspect, dead, left, or unknown (not gossiped to this node yet)."""
        if node.state is not ctl.NodeState.ACTIVE:
            return str(node.state)
        return self.liveness(node.node_id)

    async def describe_cluster(self) -> ClusterDescription:
        partitions = [p for t in self._user_topics() for p in t.partitions]
        live = await self._partition_status(partitions)
        replicas = self.cluster.replica_counts()
        leaders: dict[int, int] = {}
        under = []
        for p in partitions:
            status = live.get(p.group_id, {})
            leader = int(status.get("leader", self.leader_of(p.group_id)))
            if leader:
                leaders[leader] = leaders.get(leader, 0) + 1
            # Short of the topic's replication factor in sync: a replica is down, lagging, or being replaced.
            wanted = max(len(p.replicas), self.cluster.topics[p.topic].replication_factor)
            if len(status.get("isr", ())) < wanted:
                under.append((p.topic, p.partition))
        loads = tuple((node, replicas.get(node, 0), leaders.get(node, 0)) for node in sorted(replicas))
        return ClusterDescription(
            self.config.cluster_id,
            self.controller_leader,
            tuple(self.nodes()),
            loads,
            tuple(under),
            len(partitions),
            tuple(await self._moves()),
        )

    async def _moves(self) -> list[MoveProgress]:
        """Replica moves in flight, as the controller leader tracks them (empty if it cannot be asked)."""
        leader = self.controller_leader
        if leader == self.node_id or not leader or self._transport is None:
            return self.rebalancer.snapshot()
        try:
            status, body = await self._transport.call(leader, _REQUEST_MOVES, b"", 2.0)
        except (ConnectionError, TimeoutError):
            return []
        if status != _STATUS_OK:
            return []
        moves = []
        for item in json.loads(body):
            from_node = int(item["from_node"]) or None
            move = ctl.ReplicaMove(str(item["topic"]), int(item["partition"]), from_node, int(item["to_node"]))
            progress = MoveProgress(move, int(item["group_id"]), phase=str(item["phase"]))
            progress.bytes_copied, progress.bytes_total = int(item["bytes_copied"]), int(item["bytes_total"])
            progress.eta_seconds = float(item["eta_seconds"])
            moves.append(progress)
        return moves

    async def partition_status(self, partitions: Sequence[ctl.PartitionState]) -> dict[int, dict[str, Any]]:
        """Live status of partitions as their leaders report it (see ``_local_partition_status``)."""
        return await self._partition_status(partitions)

    async def drain_node(self, node_id: int) -> DrainStatus:
        """Mark the node draining (idempotent) and report what is left on it; the controller leader's
        rebalancing moves its replicas, and preferred leadership, to other nodes."""
        node = self.cluster.nodes.get(node_id)
        if node is None or node.state is ctl.NodeState.REMOVED:
            raise UnknownNodeError(f"node {node_id} is not a registered node", node_id=node_id)
        if node.state is not ctl.NodeState.DRAINING:
            await self.controller_call({"op": "set_node_state", "node_id": node_id, "state": "draining"})
        partitions = self.cluster.partitions_on_node(node_id)
        led = 0
        if partitions:
            status = await self._partition_status(partitions)
            led = sum(1 for p in partitions if int(status.get(p.group_id, {}).get("leader", 0)) == node_id)
        return DrainStatus(replicas_left=len(partitions), leaders_left=led)

    async def remove_node(self, node_id: int) -> None:
        """Forget a node; the controller refuses (NODE_HAS_REPLICAS) while it holds any replica."""
        node = self.cluster.nodes.get(node_id)
        if node is None:
            raise UnknownNodeError(f"node {node_id} is not a registered node", node_id=node_id)
        await self.controller_call({"op": "set_node_state", "node_id": node_id, "state": "removed"})

    async def _partition_status(self, partitions: Sequence[ctl.PartitionState]) -> dict[int, dict[str, Any]]:
        """Live status (leader, term, high watermark, in-sync replicas) of partitions, asked of their leaders."""
        by_leader: dict[int, list[int]] = {}
        for p in partitions:
            by_leader.setdefault(self.leader_of(p.group_id) or p.preferred_leader, []).append(p.group_id)
        results: dict[int, dict[str, Any]] = {}

        async def ask(node: int, group_ids: list[int]) -> None:
            if node == self.node_id:
                results.update({int(k): v for k, v in (await self._local_partition_status(group_ids)).items()})
                return
            assert self._transport is not None
            try:
                status, body = await self._transport.call(
                    node, _REQUEST_PARTITION_STATUS, json.dumps(group_ids).encode(), 2.0
                )
            except (ConnectionError, TimeoutError):
                return
            if status == _STATUS_OK:
                results.update({int(k): v for k, v in json.loads(body).items()})

        await asyncio.gather(*(ask(node, ids) for node, ids in by_leader.items() if node))
        return results

    def _peer_live(self, peer: int) -> bool:
        # A quiescent group sends no heartbeats, so Raft's recent_active goes stale; the member-list does not.
        return peer in self._liveness()[0]

    async def _local_partition_status(self, group_ids: Sequence[int]) -> dict[str, dict[str, Any]]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[dict[str, dict[str, Any]]] = loop.create_future()
        scheduler = self._sched

        def collect() -> None:
            out: dict[str, dict[str, Any]] = {}
            for group_id in group_ids:
                group = scheduler.groups.get(group_id)
                if group is None or not group.is_leader or not isinstance(group.machine, PartitionMachine):
                    continue
                status = group.raw.status()
                isr = [self.node_id] + [
                    peer
                    for peer, progress in status.progress.items()
                    if peer != self.node_id
                    and not progress.is_learner
                    and (progress.recent_active or (status.quiescent and self._peer_live(peer)))
                    and self._peer_live(peer)
                    and status.commit - progress.match <= 1_000
                    and (progress.match > 0 or status.commit == 0)  # an empty new replica is not in sync
                ]
                segments = group.machine.log.segments()
                hook = self.catchup_progress
                copies = hook(group_id, snapshot_peers(status, group.storage.first_index())) if hook is not None else {}
                out[str(group_id)] = {
                    "bytes": sum(segment.size_bytes for segment in segments),
                    "entries": max(0, status.last_index - group.storage.first_index() + 1),
                    "copy": {str(peer): [copied, total] for peer, (copied, total) in copies.items()},
                    "lag": {
                        str(peer): max(0, status.last_index - progress.match)
                        for peer, progress in status.progress.items()
                        if peer != self.node_id
                    },
                    # Peers that acknowledged entries: lag in entries alone would call an empty replica of a
                    # partition with few large entries caught up.
                    "acked": [peer for peer, progress in status.progress.items() if progress.match > 0],
                    "leader": self.node_id,
                    "term": status.term,
                    "hw": group.machine.high_watermark,
                    "log_start": group.machine.log.start_offset(),
                    "isr": sorted(set(isr)),
                }

            def settle() -> None:
                if not future.done():
                    future.set_result(out)

            loop.call_soon_threadsafe(settle)

        scheduler.submit(collect)
        return await asyncio.wait_for(future, 5.0)


def _check_group_name(group: str) -> None:
    if not group:
        raise InvalidArgumentError("group must not be empty", field="group")
    if len(group) > _MAX_GROUP_NAME:
        raise InvalidArgumentError(f"group is longer than {_MAX_GROUP_NAME} characters", field="group")


def _configs_applied(topic: ctl.Topic | None, set_: dict[str, str], delete: Sequence[str]) -> bool:
    if topic is None:
        return True
    return all(topic.configs.get(k) == v for k, v in set_.items()) and not any(k in topic.configs for k in delete)


def _outcome_json(outcome: Any) -> Any:
    if outcome is None:
        return None
    if isinstance(outcome, ctl.Topic):
        return {"topic": outcome.name}
    if isinstance(outcome, ctl.NodeInfo):
        return {"node_id": outcome.node_id}
    if isinstance(outcome, ctl.ProducerIdBlock):
        return {"first": outcome.first, "count": outcome.count}
    if isinstance(outcome, ctl.PartitionState):
        return {"group_id": outcome.group_id}
    return None


def _move_json(move: MoveProgress) -> dict[str, Any]:
    return {
        "topic": move.move.topic,
        "partition": move.move.partition,
        "group_id": move.group_id,
        "from_node": move.move.from_node or move.move.replaces or 0,
        "to_node": move.move.to_node,
        "phase": move.phase,
        "bytes_copied": move.bytes_copied,
        "bytes_total": move.bytes_total,
        "eta_seconds": move.eta_seconds,
    }


def _encode_error(error: MultiraftError) -> bytes:
    return json.dumps({"reason": error.reason, "message": error.message, "metadata": error.metadata}).encode()


def _decode_error(body: bytes) -> MultiraftError:
    try:
        document = json.loads(body)
        return error_for_reason(str(document["reason"]), str(document["message"]), dict(document["metadata"]))
    except (ValueError, KeyError, TypeError):
        return UnavailableError(f"the controller leader failed: {body[:200]!r}")


def _record_gc_pauses(threshold_ms: float) -> None:
    """Log every garbage collection longer than ``threshold_ms`` (diagnostics; MULTIRAFT_DEBUG_GC_MS=ms)."""
    import gc

    started: list[float] = [0.0]

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            pause_ms = (time.perf_counter() - started[0]) * 1000
            if pause_ms >= threshold_ms:
                log.warning(
                    "gc pause", generation=info["generation"], ms=round(pause_ms, 2), collected=info["collected"]
                )

    gc.callbacks.append(callback)


async def run_node(config: NodeConfig) -> None:
    """Run a node until SIGTERM or SIGINT, then stop it cleanly."""
    node = Node(config)
    await node.start()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        waiter = loop.create_task(stop.wait())
        watcher = loop.create_task(_watch_scheduler(node))
        await asyncio.wait({waiter, watcher}, return_when=asyncio.FIRST_COMPLETED)
        for task in (waiter, watcher):
            task.cancel()
    finally:
        await node.stop()


async def _watch_scheduler(node: Node) -> None:
    """Stop the node if its scheduler thread died (storage failure): a node without it cannot serve."""
    while node._scheduler is not None and node._scheduler.alive:
        await asyncio.sleep(0.5)
    log.error("the scheduler stopped; shutting the node down")
