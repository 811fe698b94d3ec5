"""A multiraft node: builds its parts, wires them together, starts and stops them.

The parts (``docs/architecture.md`` draws them):

* the **store** (:mod:`multiraft.node.scheduler.store`) owns the log store and every replica, on the scheduler thread
  (:mod:`multiraft.node.scheduler.scheduler`);
* the **services** (:mod:`multiraft.node.services`: data, offsets, admin) answer clients on the event loop,
  each depending on narrow protocols (:mod:`multiraft.node.protocols`);
* the **peer side**: the transport (Raft messages and typed requests, :mod:`multiraft.node.peer.messages`),
  the peer service answering requests, the controller client, leader announcements, the catch-up copier;
* **membership** (SWIM) and the **rebalancer** (on the controller leader).

Front doors (the gRPC server in :mod:`rpc.server.front_door`; a Kafka listener or console later) are built outside the
runtime on :attr:`Node.services` and handed to :meth:`Node.add_front_door` so that the node stops them in
order. Only :mod:`multiraft.node.threads`' hand-offs cross between the loop and the scheduler thread, and the
transport's ``post`` (the scheduler thread writes Raft frames on idle peer connections, under their locks).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from membership import EventKind, MemberEvent
from multiraft import controller as ctl
from multiraft import raft, trace
from multiraft.config.node import NodeConfig
from multiraft.errors import MultiraftError, UnavailableError
from multiraft.logging import get_logger
from multiraft.node.catchup import CatchupManager
from multiraft.node.cluster.capacity import CapacityMonitor
from multiraft.node.cluster.controller_client import RemoteController
from multiraft.node.cluster.directory import Directory
from multiraft.node.cluster.leader_broadcast import LeaderBroadcaster
from multiraft.node.cluster.rebalancer import OwnController, Rebalancer, RebalanceSettings
from multiraft.node.cluster.status import MoveReporter, StatusCollector, move_report
from multiraft.node.cluster.swim import NodeMembership
from multiraft.node.debug import CUTS_FILE, DEBUG_GC_MS, DEBUG_ISOLATION, Isolation, record_gc_pauses
from multiraft.node.peer.transport import PeerTransport
from multiraft.node.replicas.capacity import RoomLedger
from multiraft.node.replicas.raft_log import record_lost_suffixes
from multiraft.node.scheduler.reconciler import Reconciler
from multiraft.node.scheduler.scheduler import Scheduler
from multiraft.node.scheduler.scrubber import SLICE_S as SCRUB_SLICE_S
from multiraft.node.scheduler.scrubber import Scrubber
from multiraft.node.scheduler.store import Store
from multiraft.node.scheduler.tracing import trace_peer_messages
from multiraft.node.services import (
    AdminService,
    AdminSettings,
    DataLimits,
    DataService,
    OffsetsService,
    OffsetsSettings,
)
from multiraft.node.services.consumer_groups import ConsumerGroupsService, ConsumerGroupsSettings
from multiraft.node.services.local_consumer_groups import (
    GROUP_TICK_S,
    LocalConsumerGroups,
    offsets_group_ids,
    tick_group_hosts,
)
from multiraft.node.services.peer_requests import PeerService, error_answer
from multiraft.node.services.security import NodeSecurity, SecuritySettings
from multiraft.node.services.store_client import StoreClient
from multiraft.node.threads import LoopHandoff, LoopOwned, SchedulerHandoff, ThreadOwner
from multiraft.node.vocabulary.capacity import NodeCapacity
from multiraft.security.tls import peer_tls
from storage import (
    CorruptionError,
    LogStore,
    StorageConfig,
    UnrepairableStoreError,
    repair_store,
    set_aside_store,
)

__all__ = ["Node", "NodeServices", "FrontDoor"]

log = get_logger(__name__)

_GIL_SWITCH_INTERVAL_S = 0.0001
_RECONCILE_S = 0.2  # how often partition leaders make Raft configurations follow the controller's assignments
_REGISTER_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class NodeServices:
    """What front doors serve clients with."""

    data: DataService
    offsets: OffsetsService
    admin: AdminService
    security: NodeSecurity
    groups: ConsumerGroupsService


class FrontDoor(Protocol):
    """A client-facing listener built on the services (gRPC today)."""

    async def stop(self) -> None: ...


class _Liveness:
    """The member-list's answers, and this node alive to itself (a ``Liveness``); loop thread, except
    :meth:`ids`, which any thread may call (the sets are replaced, never mutated)."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.members: NodeMembership | None = None

    def ids(self) -> tuple[frozenset[int], frozenset[int]]:
        members = self.members
        if members is None:
            return frozenset({self.node_id}), frozenset({self.node_id})
        return members.live_ids, members.known_ids

    def state(self, node_id: int) -> str:
        if node_id == self.node_id:
            return "alive"
        return self.members.state(node_id) if self.members is not None else "unknown"

    def is_live(self, node_id: int) -> bool:
        return self.state(node_id) in ("alive", "suspect")

    def is_suspect(self, node_id: int) -> bool:
        return self.state(node_id) == "suspect"

    def gone_for(self, node_id: int) -> float | None:
        return self.members.gone_for(node_id) if self.members is not None else None

    def peers(self) -> list[int]:
        return list(self.members.peers()) if self.members is not None else []


class Node(LoopOwned):
    """One node of a cluster. ``await start(client_port=...)``, then serve until ``await stop()``."""

    def __init__(self, config: NodeConfig) -> None:
        self.config = config.validate()
        self.node_id = config.node_id
        trace.set_label(f"node{self.node_id}")
        self.owner = ThreadOwner("event loop")
        self.directory = Directory(self.node_id, self.owner)
        self.liveness = _Liveness(self.node_id)
        self.client_port = 0
        self.peer_port = 0
        self.registered = asyncio.Event()
        self._on_registered: list[Callable[[], None]] = []
        self._front_doors: list[FrontDoor] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._isolation: Isolation | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._transport: PeerTransport | None = None
        self._scheduler: Scheduler | None = None
        self._store: Store | None = None
        self._services: NodeServices | None = None
        self._peer_service: PeerService | None = None
        self.catchup: CatchupManager | None = None
        self.scrubber: Scrubber | None = None
        self.rebalancer: Rebalancer | None = None
        self.membership: NodeMembership | None = None
        self.capacity: CapacityMonitor | None = None

    @property
    def services(self) -> NodeServices:
        assert self._services is not None, "start() the node first"
        return self._services

    @property
    def scheduler_alive(self) -> bool:
        return self._scheduler is not None and self._scheduler.alive

    def add_front_door(self, door: FrontDoor) -> None:
        self._front_doors.append(door)

    def on_registered(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` on the loop once this node is registered with the controller."""
        self._on_registered.append(callback)
        if self.registered.is_set():
            callback()

    # ------------------------------------------------------------------------------------------- lifecycle

    async def start(self, *, client_port: int) -> None:
        """Start every part; ``client_port`` is the bound port of the client front door (advertised)."""
        # The scheduler and the event loop hand work to each other many times per commit; with CPython's
        # default 5 ms GIL switch interval a woken thread can wait that long behind a busy one (0.1 ms: better
        # p50, p99 and CPU per record than 0.5 or 0.02 ms in docs/benchmarks.md's runs).
        sys.setswitchinterval(_GIL_SWITCH_INTERVAL_S)
        if os.environ.get(DEBUG_GC_MS):
            record_gc_pauses(float(os.environ[DEBUG_GC_MS]))
        loop = self._loop = asyncio.get_running_loop()
        self.owner.bind()
        self.client_port = client_port
        if os.environ.get(DEBUG_ISOLATION) == "1":
            self._isolation = Isolation(self.node_id, Path(self.config.data_dir) / CUTS_FILE)
            loop.add_signal_handler(signal.SIGUSR1, self._isolation.reload)
        config = self.config
        directory = self.directory
        transport = self._transport = PeerTransport(
            node_id=self.node_id,
            cluster_id=config.cluster_id,
            listen=config.peer_address,
            deliver=self._deliver,
            on_unreachable=self._peer_unreachable,
            handle_request=self._serve_peer,
            max_frame_bytes=config.max_frame_bytes,
            heartbeat_interval_s=config.heartbeat_interval_s,
            max_connections=config.max_peer_connections,
            max_requests_per_connection=config.max_peer_requests_per_connection,
            tls=peer_tls(config),
            direct_writes=config.peer_direct_writes,
        )
        if self._isolation is not None:
            transport.drop_request = self._isolation.drop_request
        await transport.start()
        self.peer_port = transport.port
        for node_id, address in config.initial_members().items():
            if node_id != self.node_id:
                transport.set_peer(node_id, address)
        directory.on_cluster(self._on_cluster)

        scheduler = self._scheduler = Scheduler(
            store_opener=self._open_store, tick_ms=config.tick_ms, outbox=self, terms_dir=config.data_dir
        )
        room = RoomLedger(self._capacity_reports)
        to_loop = LoopHandoff(loop)
        store = self._store = Store(config, scheduler, directory, to_loop, self.liveness.ids, room)
        store_client = StoreClient(store, SchedulerHandoff(scheduler, loop))
        capacity = self.capacity = CapacityMonitor(
            self.node_id,
            store_client.capacity,
            transport,
            self.liveness.peers,
            lambda: directory.controller_leader == self.node_id,
        )
        catchup = self.catchup = CatchupManager(
            node_id=self.node_id,
            data_dir=config.data_dir,
            scheduler=scheduler,
            call=transport.call,
            disconnect=transport.disconnect,
            views_by_group=directory.views_by_group,
            bandwidth_bytes_per_s=config.move_bandwidth_bytes_per_s,
        )
        store.catchup_progress = catchup.leader_progress
        scheduler.start(store.load)
        catchup.start(loop)
        scheduler.every(config.retention_check_ms / 1000, lambda: store.housekeeping(catchup.leader_check))
        scheduler.every(config.leader_balance_ms / 1000, store.hand_back_leadership)
        scheduler.every(GROUP_TICK_S, lambda: tick_group_hosts(scheduler, offsets_group_ids(store.cluster_state())))
        self.scrubber = Scrubber(scheduler, config.scrub_bytes_per_s)
        if config.scrub_bytes_per_s > 0:
            scheduler.every(SCRUB_SLICE_S, self.scrubber.run_slice)
        scheduler.every(
            _RECONCILE_S,
            Reconciler(
                self.node_id,
                scheduler,
                store.cluster_state,
                lambda: directory.controller_leader,  # an int, replaced whole on the loop
                store.drop_local_replica,
                lambda voters: to_loop.post(lambda: directory.set_controller_voters(voters)),
            ),
        )

        controller = RemoteController(
            directory,
            store_client.controller,
            transport,
            self.liveness.peers,
            max_topic_partitions=config.max_topic_partitions,
        )
        security = NodeSecurity(
            SecuritySettings(config.authentication, config.auth_token_ttl_s, config.authorization, config.super_users),
            directory,
            controller,
        )
        controller.authorizer = security.authorizer  # the leader checks forwarded client changes
        status = StatusCollector(self.node_id, directory.leader_of, store_client, transport)
        rebalancer = self.rebalancer = Rebalancer(
            RebalanceSettings(
                config.rebalance_interval_ms,
                config.replica_replace_after_ms,
                config.max_concurrent_moves,
                config.move_stall_s,
            ),
            directory,
            self.liveness,
            status,
            OwnController(store_client.controller),  # never forwarded: see multiraft.node.cluster.rebalancer
            room,
        )
        directory.on_controller_leader(rebalancer.controller_leader_changed)
        moves = MoveReporter(self.node_id, lambda: directory.controller_leader, rebalancer.snapshot, transport)
        offsets = OffsetsService(
            OffsetsSettings(
                config.offsets_partitions,
                config.default_replication_factor,
                config.max_offsets_per_commit,
                config.max_offsets_commit_bytes,
            ),
            directory,
            directory,
            store_client,
            controller,
            transport,
        )
        groups = ConsumerGroupsService(
            ConsumerGroupsSettings(config.group_initial_rebalance_delay_ms),
            offsets.router,
            LocalConsumerGroups(scheduler, SchedulerHandoff(scheduler, loop)),
            transport,
        )
        self._services = NodeServices(
            data=DataService(
                DataLimits(
                    config.max_batch_bytes,
                    config.produce_timeout_ms,
                    config.fetch_max_bytes,
                    config.fetch_max_wait_ms,
                    config.producer_id_block,
                    fetch_max_bytes_limit=config.fetch_max_bytes_limit,
                    max_inflight_produce_bytes=config.max_inflight_produce_bytes,
                    bind_producer_ids=config.authorization,
                    super_users=config.super_users,
                ),
                directory,
                directory,
                store_client,
                controller,
                storage_short=lambda: capacity.short,
            ),
            offsets=offsets,
            admin=AdminService(
                AdminSettings(
                    config.cluster_id,
                    config.default_partitions,
                    config.default_replication_factor,
                    config.max_topic_partitions,
                ),
                directory,
                directory,
                self.liveness,
                controller,
                status,
                moves,
            ),
            security=security,
            groups=groups,
        )
        self._peer_service = PeerService(
            controller,
            store_client,
            offsets,
            directory,
            lambda: [move_report(m) for m in rebalancer.snapshot()],
            catchup,
            groups,
        )
        self.membership = self.liveness.members = NodeMembership(
            config,
            client_address=self.advertised_client(),
            peer_address=self.advertised_peer(),
            on_event=self._on_member_event,
        )
        if self._isolation is not None:
            self.membership.cut_gossip(self._isolation.drop_packet)
        await self.membership.start()
        self._tasks = [
            loop.create_task(self._register(controller)),
            loop.create_task(LeaderBroadcaster(directory, transport).run()),
            loop.create_task(rebalancer.run()),
            loop.create_task(capacity.run()),
            loop.create_task(security.keep_token_key()),
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
        for door in self._front_doors:
            await door.stop()
        if self.catchup is not None:
            await self.catchup.stop()
        if self._transport is not None:
            await self._transport.stop()
        if self._scheduler is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._scheduler.stop)
        log.info("node stopped", node_id=self.node_id)

    def _open_store(self) -> LogStore:
        config = self.config
        path = Path(config.data_dir)
        storage_config = StorageConfig(map_size_bytes=config.map_size_bytes, max_segments=config.max_segments)
        try:
            return LogStore.open(path, storage_config)
        except CorruptionError as exc:  # e.g. a truncated file: keep every log's valid prefix, as Kafka would
            log.error("the log store is damaged; keeping the valid prefix of every log", error=str(exc))
        try:
            report = repair_store(path, storage_config)  # the damaged file is kept aside
        except UnrepairableStoreError as exc:
            # Start empty: every replica comes back from its peers, held by the terms recorded outside the store
            # (multiraft.node.scheduler.term_guard) to neither vote nor campaign before it holds what it may have lost.
            aside = set_aside_store(path)
            log.error(
                "the log store cannot be repaired; it is set aside and every replica is rebuilt from its peers",
                error=str(exc),
                copy=aside,
            )
            return LogStore.open(path, storage_config)
        store = LogStore.open(path, storage_config)
        record_lost_suffixes(store, [(dropped.log, dropped.last_index) for dropped in report.dropped])
        log.warning("repaired the log store", dropped=[str(d) for d in report.dropped], copy=report.damaged_copy)
        return store

    def _capacity_reports(self) -> Mapping[int, NodeCapacity]:
        """The controller leader's latest capacity reports (any thread: the mapping is replaced whole)."""
        capacity = self.capacity
        return capacity.reports if capacity is not None else {}

    def advertised_client(self) -> str:
        configured = self.config.advertise_client_address
        if configured:
            return configured
        return f"{self.config.client_address.rpartition(':')[0]}:{self.client_port}"

    def advertised_peer(self) -> str:
        configured = self.config.advertise_peer_address
        if configured:
            return configured
        return f"{self.config.peer_address.rpartition(':')[0]}:{self.peer_port}"

    # ---------------------------------------------------------------------------------------- registration

    def _registration(self) -> ctl.NodeInfo:
        config = self.config
        return ctl.NodeInfo(
            node_id=self.node_id,
            client_address=self.advertised_client(),
            peer_address=self.advertised_peer(),
            gossip_address=config.gossip_address,
            rack=config.rack,
            capacity=config.capacity,
            host=config.host,
        )

    async def _register(self, controller: RemoteController) -> None:
        """Register (or re-register) this node's addresses, rack, host and capacity until they stick."""
        delay = 0.1
        node = self._registration()
        while not self._check_registered():
            try:
                await controller.call(ctl.RegisterNode(node), timeout_s=_REGISTER_TIMEOUT_S)
            except MultiraftError as exc:
                log.debug("registration not done yet", error=str(exc))
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _check_registered(self) -> bool:
        node = self.directory.cluster.nodes.get(self.node_id)
        # Any difference re-registers: a node restarted with another host must not keep the old one.
        registered = node is not None and replace(node, state=ctl.NodeState.ACTIVE) == self._registration()
        if registered and not self.registered.is_set():
            self.registered.set()
            for callback in self._on_registered:
                callback()
        return registered

    def _on_cluster(self, state: ctl.ClusterState) -> None:
        transport = self._transport
        if transport is not None:
            for node in state.nodes.values():
                if node.node_id != self.node_id:
                    transport.set_peer(node.node_id, node.peer_address)
        self._check_registered()

    # ----------------------------------------------------------------------------------- network plumbing

    def send(self, batches: dict[int, list[tuple[int, raft.Message]]]) -> None:
        """Outbox for the scheduler (scheduler thread): the transport writes a round's messages from this
        thread where it can (``peer_direct_writes``), else they are handed to the loop."""
        transport = self._transport
        if transport is None or not self.config.peer_direct_writes:
            assert self._loop is not None
            self._loop.call_soon_threadsafe(self._send_now, batches)
            return
        if self._isolation is not None:  # its plan is replaced whole; its drop counts are only for the logs
            batches = self._isolation.keep_outgoing(batches)
        transport.post(batches)

    def _send_now(self, batches: dict[int, list[tuple[int, raft.Message]]]) -> None:
        transport = self._transport
        if transport is None:
            return
        if self._isolation is not None:
            batches = self._isolation.keep_outgoing(batches)
        for to_node, messages in batches.items():
            transport.send(to_node, messages)

    def _deliver(self, from_node: int, messages: list[tuple[int, raft.Message]]) -> None:
        if trace.ON:
            trace_peer_messages(messages)
        if self._isolation is not None and self._isolation.drop_incoming(from_node, messages):
            return
        scheduler = self._scheduler
        assert scheduler is not None
        if self.catchup is not None:  # InstallSnapshot with segment files waits for the copy
            messages = self.catchup.intercept(from_node, messages)
        scheduler.submit(lambda: scheduler.deliver(messages))

    def _peer_unreachable(self, peer: int) -> None:
        store, scheduler = self._store, self._scheduler
        if store is not None and scheduler is not None:
            scheduler.submit(lambda: store.peer_unreachable(peer))

    async def _serve_peer(self, from_node: int, kind: int, body: bytes) -> tuple[int, bytes]:
        service = self._peer_service
        if service is None:  # a request that arrives while the node is still starting
            return error_answer(UnavailableError(f"node {self.node_id} is starting"))
        return await service.serve(from_node, kind, body)

    def _on_member_event(self, event: MemberEvent) -> None:
        meta = event.member.meta
        if meta.node_id == self.node_id:
            return
        if event.kind in (EventKind.JOIN, EventKind.UPDATE) and self._transport is not None:
            # A node that joined through the seeds is reachable before the controller has registered it.
            self._transport.set_peer(meta.node_id, meta.peer_addr)
        elif event.kind in (EventKind.DEAD, EventKind.LEAVE):
            self._peer_unreachable(meta.node_id)  # wake quiescent followers of its groups so they campaign
