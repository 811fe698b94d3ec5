"""Consumer-group offsets: the internal topic ``__consumer_offsets``, one Raft group per partition.

A group's offsets live in partition ``crc32c(group) % partitions`` of the topic, as in Kafka. Each commit is
one CONTROL entry; every replica applies it to an in-memory map ``group -> (topic, partition) -> offset``, so
a commit survives the loss of any minority of the partition's replicas. The map is snapshotted every
``SNAPSHOT_EVERY`` commits and the log compacted behind it (as the controller does), so a restarted replica
loads the snapshot and replays the commits after it.

The leader serves reads once it has applied an entry of its own term: only then is it sure to have applied
every commit its predecessors acknowledged.

The consumer groups whose offsets a partition holds keep their records there too (CONTROL entries tagged
``groups/1``, :mod:`multiraft.consumer_groups.records`): every replica applies them into a
:class:`~multiraft.consumer_groups.GroupRecords` (a tombstone also drops the group's offsets), snapshots carry them, and
the leader hosts the groups' coordinators (:mod:`multiraft.node.replicas.consumer_group_host`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import crc32c

from multiraft import consumer_groups as g
from multiraft import raft
from multiraft.errors import MultiraftError, NotLeaderError, UnavailableError
from multiraft.logging import get_logger
from multiraft.node.replicas.consumer_group_host import ConsumerGroupHost
from multiraft.node.replicas.partition import PartitionView
from multiraft.node.replicas.raft_group import Completion, RaftGroup
from multiraft.node.threads import SchedulerOwned, ThreadOwner
from multiraft.node.vocabulary.offsets import CommittedOffset, OffsetsCommit

__all__ = [
    "OFFSETS_TOPIC",
    "SNAPSHOT_EVERY",
    "OffsetsMachine",
    "group_partition",
    "encode_commit",
    "decode_commit",
]

log = get_logger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
SNAPSHOT_EVERY = 1_000
_FORMAT = "offsets/1"


def group_partition(group: str, partitions: int) -> int:
    """The partition of ``__consumer_offsets`` that holds ``group``'s offsets (stable across versions)."""
    return crc32c.crc32c(group.encode()) % partitions


def encode_commit(group: str, offsets: Sequence[CommittedOffset]) -> bytes:
    rows = [[o.topic, o.partition, o.offset, o.metadata] for o in offsets]
    return json.dumps({"v": _FORMAT, "group": group, "offsets": rows}, separators=(",", ":")).encode()


def decode_commit(payload: bytes | memoryview) -> tuple[str, list[tuple[str, int, int, str]]]:
    """(group, [(topic, partition, offset, metadata)]); ValueError if the payload is not a commit."""
    try:
        document = json.loads(bytes(payload))
        if document.get("v") != _FORMAT:
            raise ValueError(f"not an offsets commit: {document.get('v')!r}")
        return str(document["group"]), [(str(t), int(p), int(o), str(m)) for t, p, o, m in document["offsets"]]
    except (KeyError, TypeError, AttributeError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"undecodable offsets commit: {exc}") from exc


@dataclass
class OffsetsMachine(SchedulerOwned):
    """State machine of one ``__consumer_offsets`` partition replica (scheduler thread)."""

    topic: str
    partition: int
    group_id: int
    owner: ThreadOwner
    publish: Callable[[Callable[[], None]], None]
    view: PartitionView
    group_settings: g.GroupSettings = field(default_factory=g.GroupSettings)
    groups: dict[str, dict[tuple[str, int], CommittedOffset]] = field(default_factory=dict)
    records: g.GroupRecords = field(default_factory=g.GroupRecords)
    host: ConsumerGroupHost = field(init=False)
    _applied_index: int = 0
    _snapshot_index: int = 0
    _current: bool = False  # leader that has applied an entry of its own term

    def __post_init__(self) -> None:
        self.host = ConsumerGroupHost(self.owner, self, self.group_settings)

    @property
    def current(self) -> bool:
        """A leader that has applied an entry of its own term (so every earlier commit)."""
        return self._current

    def has_offsets(self, name: str) -> bool:
        return bool(self.groups.get(name))

    def offset_groups(self) -> list[str]:
        return [name for name, offsets in self.groups.items() if offsets]

    def start(self, group: RaftGroup) -> None:
        snapshot = group.storage.snapshot()
        self._load(snapshot.data)
        self._snapshot_index = self._applied_index = snapshot.meta.index
        self._publish(group)

    # ------------------------------------------------------------------------------------ StateMachine

    def apply(self, group: RaftGroup, entries: Sequence[raft.Entry]) -> dict[int, Any]:
        term, leading = group.raw.term, group.is_leader
        for entry in entries:
            if entry.index <= self._applied_index:
                continue
            self._applied_index = entry.index
            if leading and entry.term == term:
                self._current = True
            if entry.kind != raft.EntryKind.CONTROL:
                continue
            if g.is_group_record(entry.payload):
                self._apply_group_record(entry)
                continue
            try:
                name, rows = decode_commit(entry.payload)
            except ValueError as exc:
                # Every replica reads the same bytes the same way, so all of them skip it.
                log.error("skipping an undecodable offsets entry", group=self.group_id, error=str(exc))
                continue
            offsets = self.groups.setdefault(name, {})
            for topic, partition, offset, metadata in rows:
                offsets[(topic, partition)] = CommittedOffset(topic, partition, offset, metadata, entry.timestamp_ms)
        self._maybe_snapshot(group)
        return {}

    def _apply_group_record(self, entry: raft.Entry) -> None:
        try:
            record = g.decode_group_record(entry.payload)
        except g.GroupRecordDecodeError as exc:
            log.error("skipping an undecodable group record", group=self.group_id, error=str(exc))
            return
        self.records.apply(record)
        if isinstance(record, g.GroupTombstone):
            self.groups.pop(record.group_id, None)  # a deleted group's offsets go with it

    def on_role_change(self, group: RaftGroup, soft_state: raft.SoftState) -> None:
        self._current = False
        if soft_state.role is not raft.Role.LEADER:
            self.host.unload_all(f"node {group.raw.id} no longer coordinates these groups")
        self._publish(group)

    def on_snapshot(self, group: RaftGroup, snapshot: raft.Snapshot) -> None:
        self._load(snapshot.data)
        self._snapshot_index = self._applied_index = snapshot.meta.index

    def _load(self, data: bytes) -> None:
        self.groups = {}
        self.records.load([])
        if not data:
            return
        try:
            document = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return  # the bootstrap snapshot
        if not isinstance(document, dict) or document.get("v") != _FORMAT:
            return
        for name, rows in document["groups"].items():
            self.groups[name] = {(t, p): CommittedOffset(t, p, o, m, ts) for t, p, o, m, ts in rows}
        self.records.load(_decode_records(document.get("group_records", [])))  # absent in older snapshots

    def _maybe_snapshot(self, group: RaftGroup) -> None:
        applied = self._applied_index
        if applied - self._snapshot_index < SNAPSHOT_EVERY:
            return
        document = {
            "v": _FORMAT,
            "groups": {
                name: [[o.topic, o.partition, o.offset, o.metadata, o.commit_time_ms] for o in offsets.values()]
                for name, offsets in self.groups.items()
            },
            "group_records": [g.encode_group_record(r).decode() for r in self.records.records()],
        }
        storage = group.storage
        storage.create_snapshot(applied, group.raw.conf_state, json.dumps(document, separators=(",", ":")).encode())
        storage.compact(applied)
        self._snapshot_index = applied

    def _publish(self, group: RaftGroup) -> None:
        view, raw = self.view, group.raw
        leader_id, term, leader = raw.leader_id, raw.term, raw.role is raft.Role.LEADER
        self.publish(
            lambda: view.update(
                high_watermark=0, log_start_offset=0, leader_id=leader_id, term=term, leader=leader, current=False
            )
        )

    # --------------------------------------------------------------------------------- leader requests

    def _check_leader(self, group: RaftGroup) -> None:
        if not group.is_leader:
            raise NotLeaderError(f"not the leader of {self.topic}/{self.partition}", leader_id=group.raw.leader_id)

    def commit(
        self, group: RaftGroup, request: OffsetsCommit, offsets: Sequence[CommittedOffset], completion: Completion
    ) -> None:
        name = request.group
        try:
            self._check_leader(group)
            partitions = [(o.topic, o.partition) for o in offsets]
            self.host.check_commit(
                group, name, request.member_id, request.generation, request.group_instance_id, partitions
            )
        except MultiraftError as exc:
            completion(None, exc)
            return
        group.propose(encode_commit(name, offsets), completion, kind=raft.EntryKind.CONTROL)

    def fetch(self, group: RaftGroup, name: str, wanted: Iterable[tuple[str, int]] | None) -> list[CommittedOffset]:
        self._check_leader(group)
        if not self._current:
            raise UnavailableError(f"{self.topic}/{self.partition}: the new leader is still catching up")
        offsets = self.groups.get(name, {})
        if wanted is None:
            return sorted(offsets.values(), key=lambda o: (o.topic, o.partition))
        return [offsets.get(tp, CommittedOffset(tp[0], tp[1], -1)) for tp in wanted]

    def group_names(self, group: RaftGroup) -> list[str]:
        self._check_leader(group)
        if not self._current:
            raise UnavailableError(f"{self.topic}/{self.partition}: the new leader is still catching up")
        return [name for name, offsets in self.groups.items() if offsets]


def _decode_records(encoded: object) -> list[g.GroupRecord]:
    """A snapshot's group records; one that does not decode is skipped (as every replica skips it)."""
    out: list[g.GroupRecord] = []
    for item in encoded if isinstance(encoded, list) else []:
        try:
            out.append(g.decode_group_record(str(item).encode()))
        except g.GroupRecordDecodeError as exc:
            log.error("skipping an undecodable group record of a snapshot", error=str(exc))
    return out
