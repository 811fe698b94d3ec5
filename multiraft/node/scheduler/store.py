"""The store: every replica of a node and the log store they live in, on the scheduler thread.

Like CockroachDB's Store and TiKV's raftstore, the :class:`Store` owns the replicas (Raft groups with their
state machines: the controller group, partition replicas, ``__consumer_offsets`` replicas) and does what
concerns them as a set: opening and bootstrapping them at start, creating and deleting them as the
controller's state says, housekeeping, leadership hand-back, and answering for them (produce, offsets,
status). Per-partition logic stays in the replica's machine (:mod:`multiraft.node.replicas.partition`).

Every method runs on the scheduler thread (:class:`~multiraft.node.threads.SchedulerOwned`). The event loop
reaches it only through :class:`~multiraft.node.services.store_client.StoreClient`, which submits the work and
awaits the
answer; the store publishes what the loop must know (views, cluster state, controller leader) through a
:class:`~multiraft.node.threads.LoopHandoff`.
"""

from __future__ import annotations

import functools
import json
import random
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace

from multiraft import controller as ctl
from multiraft import raft
from multiraft.config.node import NodeConfig
from multiraft.errors import (
    MultiraftError,
    NotLeaderError,
    StorageFailureError,
    UnavailableError,
)
from multiraft.logging import get_logger
from multiraft.node.protocols import ViewDirectory
from multiraft.node.replicas.capacity import LowWater, RoomLedger, shortage
from multiraft.node.replicas.controller import CONTROLLER_TOPIC, ControllerMachine
from multiraft.node.replicas.offsets import OFFSETS_TOPIC, OffsetsMachine
from multiraft.node.replicas.partition import PartitionMachine, PartitionView, forget_producers_after
from multiraft.node.replicas.raft_group import Completion, RaftGroup
from multiraft.node.replicas.raft_log import RaftLogStorage
from multiraft.node.scheduler.scheduler import Scheduler, damaged_index
from multiraft.node.scheduler.snapshot_peers import snapshot_peers
from multiraft.node.scheduler.startup_elections import StartupElections, hold_ticks
from multiraft.node.threads import LoopHandoff, SchedulerOwned, on_owner_thread
from multiraft.node.vocabulary.capacity import NodeCapacity
from multiraft.node.vocabulary.controller import ControllerRequest
from multiraft.node.vocabulary.offsets import CommittedOffset, OffsetsCommit, OffsetsFetch, OffsetsList
from multiraft.node.vocabulary.partitions import RetentionPolicy
from multiraft.node.vocabulary.status import PartitionStatus
from storage import CorruptionError, SegmentedLog, StorageError, StorageFullError, StoreCapacity
from storage.batch import BatchHeader

__all__ = ["Store", "LiveIds", "CatchupHook"]

log = get_logger(__name__)

_GROUP_ATTRIBUTE = "node.group"
_ISR_MAX_LAG = 1_000  # entries: a voter further behind is not in sync
_REPAIR_ATTEMPTS = 3  # cuts of one replica's log in a row before it is left closed (the damage is not a suffix)

LiveIds = Callable[[], tuple[frozenset[int], frozenset[int]]]
"""(ids the member-list holds live, every id it remembers); safe from any thread (the sets are replaced)."""
CatchupHook = Callable[[int, Collection[int]], dict[int, tuple[int, int]]]
"""(group id, replicas catching up by snapshot) -> {node id: (bytes copied, bytes total)} of segment copies."""


class Store(SchedulerOwned):
    """The replicas of one node (see the module docstring)."""

    def __init__(
        self,
        config: NodeConfig,
        scheduler: Scheduler,
        directory: ViewDirectory,
        to_loop: LoopHandoff,
        liveness: LiveIds,
        room: RoomLedger | None = None,
    ) -> None:
        self.owner = scheduler.owner
        self.config = config
        self.node_id = config.node_id
        self.scheduler = scheduler
        self._directory = directory
        self._to_loop = to_loop
        self._liveness = liveness
        self._room = room
        self._rng = random.Random()  # every group's election jitter; used only on this thread
        self.controller_group: RaftGroup | None = None
        self.controller: ControllerMachine | None = None
        self.catchup_progress: CatchupHook | None = None  # set by the catch-up copier
        self.low_water = LowWater(config.min_free_disk_bytes, config.min_free_map_bytes, config.min_free_segments)
        self.disk_free: Callable[[], int] | None = None  # overrides the file system's answer (tests)
        # Replicas assigned here that could not be stored: group id -> (what is short, bootstrap state if
        # this node was to create the group). Retried every housekeeping round; listed in capacity reports.
        self.unstorable: dict[int, tuple[str, ctl.PartitionState | None]] = {}
        self.repairs = 0  # replicas whose damaged suffix was cut off to be fetched again
        self._repair_attempts: dict[int, int] = {}
        scheduler.on_damage = self.repair_replica
        self.startup = StartupElections(
            self.node_id, self.owner
        )  # the replicas reopened at start, until their state is known

    # ------------------------------------------------------------------------------------ opening groups

    def raft_config(self) -> raft.RaftConfig:
        config = self.config
        return raft.RaftConfig(
            id=self.node_id,
            election_tick=config.election_ticks,
            heartbeat_tick=config.heartbeat_ticks,
            max_size_per_msg=config.max_append_bytes,
            max_inflight_bytes=config.max_inflight_bytes,
        )

    @on_owner_thread
    def load(self) -> None:
        """At start: the controller group (bootstrapped on a fresh initial member), then every replica on disk."""
        scheduler = self.scheduler
        store = scheduler.store
        assert store is not None
        store.hold_transaction()  # every replica's reads in one transaction; the scheduler commits it after
        controller_log = store.log(CONTROLLER_TOPIC, 0)
        storage = self._raft_storage(controller_log, ctl.CONTROLLER_GROUP_ID)
        members = self.config.initial_members()
        fresh = controller_log.last_index() == 0 and storage.snapshot().meta.index == 0
        if fresh and self.node_id in members:
            voters = tuple(list(members)[: self.config.controller_replicas])
            learners = tuple(n for n in members if n not in voters)
            hard_state, snapshot = raft.bootstrap(raft.ConfState.of(voters, learners))
            storage.apply_snapshot(snapshot)
            storage.set_hard_state(hard_state)
        machine = ControllerMachine(
            self.node_id,
            self.owner,
            self._on_cluster_state,
            self._on_controller_leader,
            liveness=self._liveness,
            room=self._room,
        )
        # the cluster state is rebuilt from the snapshot, then replayed
        raw = self._raw_node_repairing(storage, storage.snapshot().meta.index)
        group = RaftGroup(ctl.CONTROLLER_GROUP_ID, raw, storage, machine)
        self.controller_group, self.controller = group, machine
        scheduler.add_group(group)
        if fresh and members and self.node_id == next(iter(members)):
            raw.campaign()  # the first member starts the first election instead of waiting a timeout
        began = time.monotonic()
        for topic, partition in store.logs():
            if topic == CONTROLLER_TOPIC:
                continue
            attribute = store.log(topic, partition).attribute(_GROUP_ATTRIBUTE)
            if attribute is not None:
                gid = int(json.loads(attribute)["group_id"])
                self.startup.reopened(self.open_partition(topic, partition, gid, bootstrap=None, configs=None))
        self.startup.hold(hold_ticks(self.config.election_ticks, self.config.tick_ms, time.monotonic() - began))
        machine.start(group)  # the preferred leaders among the reopened replicas campaign (_on_cluster_state)

    def _raft_storage(self, log_: SegmentedLog, group_id: int) -> RaftLogStorage:
        """The group's Raft storage, held to the terms recorded outside the store (see TermGuard)."""
        guard = self.scheduler.term_guard
        if guard is None:
            return RaftLogStorage(log_, owner=self.owner)
        released = guard.released(group_id)
        storage = RaftLogStorage(log_, term_floor=guard.floor(group_id), released=released, owner=self.owner)
        if released:
            # Placed here again after a removal this node applied: a new replica. From now on a lost store is
            # a lost log again, so the mark goes before the replica stores anything.
            guard.reclaim(group_id)
            log.info("a replica is placed again on a node that gave it up", log=log_.name, group=group_id)
        if storage.amnesiac:
            log.warning(
                "a replica lost its log with the store; it is rebuilt from the leader, and votes and campaigns "
                "again once it holds an entry of a later term than any it had",
                log=log_.name,
                group=group_id,
                until_term=storage.recover_until()[1],
            )
        return storage

    def _raw_node_repairing(self, storage: RaftLogStorage, applied: int) -> raft.RawNode:
        """The group's RawNode; a damaged entry it reads at start (configuration replay) is cut off first."""
        for attempt in range(_REPAIR_ATTEMPTS + 1):
            try:
                return raft.RawNode(
                    self.raft_config(), storage, self._rng, applied=applied, recover_until=storage.recover_until()
                )
            except raft.RaftStorageError as exc:
                index = damaged_index(exc)
                if index is None or attempt == _REPAIR_ATTEMPTS:
                    raise
                self._cut(storage, index)
                applied = min(applied, storage.applied_index(), storage.last_index())
        raise AssertionError("unreachable")

    def _cut(self, storage: RaftLogStorage, index: int) -> None:
        """Cut a damaged suffix off a log, durably, with the record the core needs (see RaftLogStorage)."""
        record = storage.cut_damaged_suffix(index)
        forget_producers_after(storage.log, index - 1)
        assert self.scheduler.store is not None
        self.scheduler.store.sync()
        self.repairs += 1
        log.warning(
            "cut a damaged log suffix; the leader sends it again",
            log=storage.log.name,
            damaged_index=index,
            last_index=storage.last_index(),
            recover_until=record[0],
        )

    @on_owner_thread
    def repair_replica(self, group: RaftGroup, index: int) -> None:
        """A stored entry of ``group`` failed its check (the scheduler took the group out): cut the damaged
        suffix and open the replica again as a follower that gets the entries back from the leader (a leader
        steps down this way too). The controller group's machine cannot replay in place: its log is cut and
        the node stops, to replay it at the next start."""
        storage = group.storage
        if self.scheduler.groups.get(group.group_id) is not None:
            self.scheduler.remove_group(group.group_id)  # reopened meanwhile (the cluster state): repair that one
        try:  # the log may be gone meanwhile (its topic deleted): then it is closed, and there is nothing to do
            last = storage.log.last_index()
            if index <= last and storage.log.first_damaged(index, index + 1) is not None:
                attempts = self._repair_attempts[group.group_id] = self._repair_attempts.get(group.group_id, 0) + 1
                if attempts > _REPAIR_ATTEMPTS:
                    raise raft.RaftStorageError(f"{storage.log.name} was cut {attempts - 1} times and is still damaged")
                self._cut(storage, index)
        except raft.IndexCompactedError as exc:  # Raft cannot send it again: keep the replica up with its damage
            log.error("cannot repair a damaged entry below the compaction point", log=storage.log.name, error=str(exc))
        except (StorageError, raft.RaftStorageError) as exc:
            log.error("cannot repair a damaged replica; it stays closed", log=storage.log.name, error=str(exc))
            return
        machine = group.machine
        if isinstance(machine, PartitionMachine | OffsetsMachine):
            old_view = machine.view
            self._to_loop.post(old_view.mark_removed)
            self.open_partition(machine.topic, machine.partition, group.group_id, bootstrap=None, configs=None)
            return
        raise StorageFailureError(f"the controller log was damaged at {index}; restart the node to replay it")

    def _damage_read_elsewhere(self, group_id: int, index: int) -> None:
        """A read on another thread (a Fetch on the loop) found a damaged entry: repair on this thread (any thread)."""
        scheduler = self.scheduler

        def report() -> None:
            group = scheduler.groups.get(group_id)
            if group is None:
                return
            storage = group.storage
            if index <= max(storage.first_index() - 1, storage.snapshot().meta.index):
                # Raft cannot send it again (a segment kept below a catch-up snapshot): keep the replica up.
                log.error("a read found a damaged entry below the compaction point", log=storage.log.name, index=index)
                return
            scheduler.report_damage(group, CorruptionError("a read found a damaged entry", path="", index=index))

        scheduler.submit(report)

    @on_owner_thread
    def open_partition(
        self,
        topic: str,
        partition: int,
        group_id: int,
        *,
        bootstrap: ctl.PartitionState | None,
        configs: ctl.TopicConfig | None,
    ) -> RaftGroup:
        """Create or reopen one partition group (see :meth:`_open_partition`); a damaged entry read while it
        opens is cut off with the rest of the log after it, and the replica opens again."""
        for attempt in range(_REPAIR_ATTEMPTS + 1):
            try:
                return self._open_partition(topic, partition, group_id, bootstrap=bootstrap, configs=configs)
            except (StorageError, raft.RaftStorageError) as exc:
                index = damaged_index(exc)
                if index is None or attempt == _REPAIR_ATTEMPTS:
                    raise
                group = self.scheduler.remove_group(group_id)
                assert self.scheduler.store is not None
                plog = self.scheduler.store.log(topic, partition)
                self._cut(group.storage if group is not None else RaftLogStorage(plog), index)
        raise AssertionError("unreachable")

    def _open_partition(
        self,
        topic: str,
        partition: int,
        group_id: int,
        *,
        bootstrap: ctl.PartitionState | None,
        configs: ctl.TopicConfig | None,
    ) -> RaftGroup:
        """Create (with ``bootstrap``: as an initial replica) or reopen one partition group.

        A replica added later, or one whose creation this node missed, starts empty and gets a snapshot from
        the leader. ``configs`` fix the segment limits of a log being created (they never change after).
        """
        scheduler = self.scheduler
        store = scheduler.store
        assert store is not None
        if configs is not None and store.has_log(topic, partition):
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
        storage = self._raft_storage(plog, group_id)
        if bootstrap is not None and plog.attribute(_GROUP_ATTRIBUTE) is None:
            hard_state, snapshot = raft.bootstrap(raft.ConfState.of(bootstrap.replicas, bootstrap.learners))
            storage.apply_snapshot(snapshot)
            storage.set_hard_state(hard_state)
        if plog.attribute(_GROUP_ATTRIBUTE) is None:
            plog.set_attribute(_GROUP_ATTRIBUTE, json.dumps({"group_id": group_id}).encode())
        view = PartitionView(topic, partition, group_id, plog, self._directory.owner)
        view.damage_hook = self._damage_read_elsewhere
        machine: PartitionMachine | OffsetsMachine
        post = self._to_loop.post
        if topic == OFFSETS_TOPIC:
            # The offsets map is rebuilt from the snapshot and the commits after it, as the controller's is.
            applied = storage.snapshot().meta.index
            machine = OffsetsMachine(topic, partition, group_id, self.owner, post, view, self.config.group_settings())
        else:
            applied = storage.applied_index()
            machine = PartitionMachine(topic, partition, group_id, plog, self.owner, post, view)
        raw = self._raw_node_repairing(storage, applied)
        group = RaftGroup(group_id, raw, storage, machine)
        scheduler.add_group(group)
        machine.start(group)
        post(lambda: self._directory.add_view(view))
        if bootstrap is not None and bootstrap.preferred_leader == self.node_id:
            raw.campaign()
        return group

    def _on_cluster_state(self, state: ctl.ClusterState, created: set[int], deleted: set[int]) -> None:
        """After each batch of controller commands: open the partition groups assigned to this node and
        remove those of deleted topics. Removal follows applied deletions only, never a diff: at start-up
        the state may not yet have replayed the creation of groups that are on disk."""
        self.owner.check("Store._on_cluster_state")
        scheduler = self.scheduler
        for group_id in deleted:
            group = scheduler.remove_group(group_id)
            if group is not None and isinstance(group.machine, PartitionMachine):
                self._delete_local(group.machine)
        self._open_assigned(state, created)
        if self.startup:
            self.startup.on_state(state, scheduler)
        self._to_loop.post(lambda: self._directory.set_cluster(state))

    def _open_assigned(self, state: ctl.ClusterState, created: Collection[int]) -> None:
        """Open the replicas ``state`` assigns here that are not open yet, where they can be stored."""
        scheduler = self.scheduler
        assigned = state.partitions_on_node(self.node_id)
        assigned_ids = {p.group_id for p in assigned}
        self.unstorable = {g: why for g, why in self.unstorable.items() if g in assigned_ids}
        on_disk: set[tuple[str, int]] | None = None
        for partition in assigned:
            configs = ctl.effective_config(state.topics[partition.topic].configs, state.cluster_configs)
            group = scheduler.groups.get(partition.group_id)
            if group is None:
                held = self.unstorable.get(partition.group_id)
                bootstrap = partition if partition.group_id in created else held[1] if held else None
                if on_disk is None:
                    assert scheduler.store is not None
                    on_disk = set(scheduler.store.logs())
                if (partition.topic, partition.partition) not in on_disk:
                    # A new log takes a segment slot and map space: never let a command that replays at every
                    # start fail the node because this one cannot be stored. It stays offline, reported.
                    short = shortage(self._store_capacity(), self.low_water, self.config.data_dir, new_segments=1)
                    if short:
                        if held is None:
                            log.error(
                                "cannot store a replica assigned to this node; it stays offline until there is room",
                                topic=partition.topic,
                                partition=partition.partition,
                                group=partition.group_id,
                                short=short,
                            )
                        self.unstorable[partition.group_id] = (short, bootstrap)
                        continue
                self.unstorable.pop(partition.group_id, None)
                try:
                    group = self.open_partition(
                        partition.topic, partition.partition, partition.group_id, bootstrap=bootstrap, configs=configs
                    )
                except StorageFullError as exc:  # the disk filled meanwhile (the term guard's file, say)
                    log.error(
                        "cannot store a replica assigned to this node; it stays offline until there is room",
                        topic=partition.topic,
                        partition=partition.partition,
                        group=partition.group_id,
                        short=str(exc),
                    )
                    self.unstorable[partition.group_id] = (str(exc), bootstrap)
                    continue
            if isinstance(group.machine, PartitionMachine):
                group.machine.retention = RetentionPolicy(configs.retention_ms, configs.retention_bytes)

    def _store_capacity(self) -> StoreCapacity:
        store = self.scheduler.store
        assert store is not None
        capacity = store.capacity()
        if self.disk_free is not None:
            capacity = replace(capacity, disk_free_bytes=self.disk_free())
        return capacity

    @on_owner_thread
    def capacity(self) -> NodeCapacity:
        """What this node can still store, for its own write check and the controller leader's placement."""
        capacity = self._store_capacity()
        short = shortage(capacity, self.low_water, self.config.data_dir) or self.scheduler.storage_full
        return NodeCapacity(
            node_id=self.node_id,
            assigned=len(self.cluster_state().partitions_on_node(self.node_id)),
            free_segments=capacity.free_segments,
            reserved_segments=self.low_water.min_free_segments,
            disk_free_bytes=capacity.disk_free_bytes,
            map_free_bytes=capacity.map_free_bytes,
            short=short,
            unstorable=tuple(sorted(self.unstorable)),
        )

    def _on_controller_leader(self, leader_id: int) -> None:
        self._to_loop.post(lambda: self._directory.set_controller_leader(leader_id))

    def _delete_local(self, machine: PartitionMachine | OffsetsMachine) -> None:
        assert self.scheduler.store is not None
        self.scheduler.store.delete_log(machine.topic, machine.partition)
        view = machine.view
        self._to_loop.post(lambda: self._directory.remove_view(view))

    @on_owner_thread
    def drop_local_replica(self, group: RaftGroup) -> None:
        """Remove a replica the controller moved off this node, and its log. When this replica applied its own
        removal, the group is released first (see TermGuard): placed here again, it is an ordinary new replica."""
        conf = group.raw.conf_state
        members = {*conf.voters, *conf.voters_outgoing, *conf.learners, *conf.learners_next}
        guard = self.scheduler.term_guard
        if guard is not None and self.node_id not in members:
            try:
                guard.release(group.group_id)
            except StorageFullError as exc:  # only the release is lost: placed here again, it is rebuilt
                log.warning(
                    "cannot record a replica's release; dropping it anyway", group=group.group_id, error=str(exc)
                )
        elif guard is not None:
            log.warning(
                "dropping a replica whose removal did not reach it; placed here again, it is rebuilt as one that "
                "lost its log",
                group=group.group_id,
                voters=conf.voters,
                learners=conf.learners,
            )
        self.scheduler.remove_group(group.group_id)
        if isinstance(group.machine, PartitionMachine | OffsetsMachine):
            self._delete_local(group.machine)

    def cluster_state(self) -> ctl.ClusterState:
        """The controller state as applied here (for the reconciler, on this thread)."""
        return self.controller.state if self.controller is not None else ctl.ClusterState()

    # ----------------------------------------------------------------------------------------- housekeeping

    @on_owner_thread
    def housekeeping(self, leader_check: Callable[[RaftGroup], None] | None) -> None:
        """Every ``retention_check_ms``: retention and segment rolls on the partitions led here, and the
        catch-up copier's leader check."""
        now_ms = int(time.time() * 1000)
        if self.unstorable:
            self._open_assigned(self.cluster_state(), ())
        for group in list(self.scheduler.groups.values()):
            storage = group.storage
            if storage.recover_until()[0] and not group.raw.recovering_until and storage.recovered():
                storage.clear_recovery()  # in the transaction that holds (or follows) the entries that came back
                self._repair_attempts.pop(group.group_id, None)
                log.info("a repaired replica has its entries back", log=storage.log.name, last=storage.last_index())
            if isinstance(group.machine, PartitionMachine):
                group.machine.housekeeping(group, now_ms)
            if leader_check is not None:  # every group: it also re-sends lost in-band Raft snapshots
                leader_check(group)

    @on_owner_thread
    def hand_back_leadership(self) -> None:
        """Every ``leader_balance_ms``: of the partitions led here, hand each whose preferred leader is a
        live, ACTIVE voter back to it once it has caught up."""
        groups = self.scheduler.groups
        led = {
            group_id: self.node_id
            for group_id, group in groups.items()
            if group.is_leader and isinstance(group.machine, PartitionMachine)
        }
        if self.controller is None or not led:
            return
        live, _ = self._liveness()
        for group_id, preferred in ctl.preferred_leader_moves(self.controller.state, led, set(live)):
            group = groups[group_id]
            if isinstance(group.machine, PartitionMachine):
                group.machine.hand_back_leadership(group, preferred)

    @on_owner_thread
    def peer_unreachable(self, peer: int) -> None:
        """A peer's connection failed or the member-list lost it: tell its groups, and wake quiescent
        followers of groups it led (a quiescent follower never campaigns by itself)."""
        for group in self.scheduler.groups.values():
            conf = group.raw.conf_state
            if peer in conf.voters or peer in conf.learners:
                group.raw.report_unreachable(peer)
                if group.raw.leader_id == peer and group.raw.quiescent:
                    group.raw.wake()
                    self.scheduler.touch(group)

    # ------------------------------------------------------------------------------------------- requests

    @on_owner_thread
    def produce(self, view: PartitionView, batch: bytes, header: BatchHeader, completion: Completion) -> None:
        if (leading := self._leading(view, completion)) is not None:
            leading[1].produce(leading[0], batch, header, completion)

    @on_owner_thread
    def delete_records(self, view: PartitionView, offset: int, completion: Completion) -> None:
        if (leading := self._leading(view, completion)) is not None:
            leading[1].delete_records(leading[0], offset, completion)

    def _leading(self, view: PartitionView, completion: Completion) -> tuple[RaftGroup, PartitionMachine] | None:
        """The partition's group and machine when this replica leads it; else the completion is answered."""
        group = self.scheduler.groups.get(view.group_id)
        name = f"{view.topic}/{view.partition}"
        if group is None:
            completion(None, UnavailableError(f"{name} is not hosted here"))
        elif not group.is_leader or not isinstance(group.machine, PartitionMachine):
            completion(None, NotLeaderError(f"not the leader of {name}", leader_id=group.raw.leader_id))
        else:
            return group, group.machine
        return None

    @on_owner_thread
    def offsets(
        self, group_id: int, operation: OffsetsCommit | OffsetsFetch | OffsetsList, completion: Completion
    ) -> None:
        group = self.scheduler.groups.get(group_id)
        if group is None or not isinstance(group.machine, OffsetsMachine):
            completion(None, NotLeaderError(f"node {self.node_id} hosts no offsets group {group_id}"))
            return
        machine = group.machine
        try:
            if isinstance(operation, OffsetsCommit):
                rows = [CommittedOffset(r.topic, r.partition, r.offset, r.metadata) for r in operation.rows]
                machine.commit(group, operation, rows, completion)
            elif isinstance(operation, OffsetsFetch):  # linearizable (reads.py): never older than acknowledged
                serve = functools.partial(machine.fetch, group, operation.group, operation.partitions)
                self.scheduler.read(group, serve, completion)
            else:
                self.scheduler.read(group, functools.partial(machine.group_names, group), completion)
        except MultiraftError as exc:
            completion(None, exc)

    @on_owner_thread
    def controller_request(self, request: ControllerRequest, completion: Completion) -> None:
        group, machine = self.controller_group, self.controller
        assert group is not None and machine is not None
        machine.handle(group, request.body, completion)

    @on_owner_thread
    def partition_status(self, group_ids: Sequence[int]) -> list[PartitionStatus]:
        """Status of the partitions among ``group_ids`` that this node leads."""
        live = self._liveness()[0]
        out: list[PartitionStatus] = []
        for group_id in group_ids:
            group = self.scheduler.groups.get(group_id)
            # The offsets groups too: without their status the rebalancer never promotes a learner of one
            # (a drain onto a new node stalled), and a drain would not count the offsets groups a node leads.
            if group is None or not group.is_leader or not isinstance(group.machine, PartitionMachine | OffsetsMachine):
                continue
            out.append(self._status(group, group.machine, live))
        return out

    def _status(
        self, group: RaftGroup, machine: PartitionMachine | OffsetsMachine, live: frozenset[int]
    ) -> PartitionStatus:
        status = group.raw.status()
        me = self.node_id
        isr = {me} | {
            peer
            for peer, progress in status.progress.items()
            if peer != me
            and not progress.is_learner
            # a quiescent group sends no heartbeats, so recent_active goes stale; the member-list does not
            and (progress.recent_active or status.quiescent)
            and peer in live
            and status.commit - progress.match <= _ISR_MAX_LAG
            and (progress.match > 0 or status.commit == 0)  # an empty new replica is not in sync
        }
        first_index = group.storage.first_index()
        hook = self.catchup_progress
        copies = hook(group.group_id, snapshot_peers(status, first_index)) if hook is not None else {}
        records = machine if isinstance(machine, PartitionMachine) else None  # offsets groups hold no records
        return PartitionStatus(
            group_id=group.group_id,
            leader=me,
            term=status.term,
            high_watermark=records.high_watermark if records is not None else 0,
            log_start_offset=records.log_start_offset() if records is not None else 0,
            in_sync_replicas=tuple(sorted(isr)),
            lag={peer: max(0, status.last_index - p.match) for peer, p in status.progress.items() if peer != me},
            acked=tuple(peer for peer, p in status.progress.items() if p.match > 0),
            copies=copies,
            size_bytes=sum(segment.size_bytes for segment in records.log.segments()) if records is not None else 0,
            entries=max(0, status.last_index - first_index + 1),
        )
