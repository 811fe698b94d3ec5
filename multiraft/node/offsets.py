"""Consumer-group offsets: the internal topic ``__consumer_offsets``, one Raft group per partition.

A group's offsets live in partition ``crc32c(group) % partitions`` of the topic, as in Kafka. Each commit is
one CONTROL entry; every replica applies it to an in-memory map ``group -> (topic, partition) -> offset``, so
a commit survives the loss of any minority of the partition's replicas. The map is snapshotted every
``SNAPSHOT_EVERY`` commits and the log compacted behind it (as the controller does), so a restarted replica
loads the snapshot and replays the commits after it.

The leader serves reads once it has applied an entry of its own term: only then is it sure to have applied
every commit its predecessors acknowledged.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import crc32c

from multiraft import raft
from multiraft.errors import NotLeaderError, UnavailableError
from multiraft.logging import get_logger
from multiraft.node.partition import PartitionView
from multiraft.node.scheduler import Completion, Group, Scheduler

__all__ = [
    "OFFSETS_TOPIC",
    "SNAPSHOT_EVERY",
    "CommittedOffset",
    "OffsetsMachine",
    "group_partition",
    "encode_commit",
    "decode_commit",
]

log = get_logger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
SNAPSHOT_EVERY = 1_000
_FORMAT = "offsets/1"


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    topic: str
    partition: int
    offset: int  # the next offset the group will read
    metadata: str = ""
    commit_time_ms: int = 0  # the offsets leader's clock when it accepted the commit


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
class OffsetsMachine:
    """State machine of one ``__consumer_offsets`` partition replica (scheduler thread)."""

    topic: str
    partition: int
    group_id: int
    scheduler: Scheduler
    publish: Callable[[Callable[[], None]], None]
    view: PartitionView
    groups: dict[str, dict[tuple[str, int], CommittedOffset]] = field(default_factory=dict)
    _applied_index: int = 0
    _snapshot_index: int = 0
    _current: bool = False  # leader that has applied an entry of its own term

    def start(self, group: Group) -> None:
        snapshot = group.storage.snapshot()
        self._load(snapshot.data)
        self._snapshot_index = self._applied_index = snapshot.meta.index
        self._publish(group)

    # ------------------------------------------------------------------------------------ StateMachine

    def apply(self, group: Group, entries: Sequence[raft.Entry]) -> dict[int, Any]:
        term, leading = group.raw.term, group.is_leader
        for entry in entries:
            if entry.index <= self._applied_index:
                continue
            self._applied_index = entry.index
            if leading and entry.term == term:
                self._current = True
            if entry.kind != raft.EntryKind.CONTROL:
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

    def on_role_change(self, group: Group, soft_state: raft.SoftState) -> None:
        self._current = False
        self._publish(group)

    def on_snapshot(self, group: Group, snapshot: raft.Snapshot) -> None:
        self._load(snapshot.data)
        self._snapshot_index = self._applied_index = snapshot.meta.index

    def _load(self, data: bytes) -> None:
        self.groups = {}
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

    def _maybe_snapshot(self, group: Group) -> None:
        applied = self._applied_index
        if applied - self._snapshot_index < SNAPSHOT_EVERY:
            return
        document = {
            "v": _FORMAT,
            "groups": {
                name: [[o.topic, o.partition, o.offset, o.metadata, o.commit_time_ms] for o in offsets.values()]
                for name, offsets in self.groups.items()
            },
        }
        storage = group.storage
        storage.create_snapshot(applied, group.raw.conf_state, json.dumps(document, separators=(",", ":")).encode())
        storage.compact(applied)
        self._snapshot_index = applied

    def _publish(self, group: Group) -> None:
        view, raw = self.view, group.raw
        leader_id, term, leader = raw.leader_id, raw.term, raw.role is raft.Role.LEADER
        self.publish(
            lambda: view.update(
                high_watermark=0, log_start_offset=0, leader_id=leader_id, term=term, leader=leader, current=False
            )
        )

    # --------------------------------------------------------------------------------- leader requests

    def _check_leader(self, group: Group) -> None:
        if not group.is_leader:
            raise NotLeaderError(f"not the leader of {self.topic}/{self.partition}", leader_id=group.raw.leader_id)

    def commit(self, group: Group, name: str, offsets: Sequence[CommittedOffset], completion: Completion) -> None:
        try:
            self._check_leader(group)
        except NotLeaderError as exc:
            completion(None, exc)
            return
        self.scheduler.propose(group, encode_commit(name, offsets), completion, kind=raft.EntryKind.CONTROL)

    def fetch(self, group: Group, name: str, wanted: Iterable[tuple[str, int]] | None) -> list[CommittedOffset]:
        self._check_leader(group)
        if not self._current:
            raise UnavailableError(f"{self.topic}/{self.partition}: the new leader is still catching up")
        offsets = self.groups.get(name, {})
        if wanted is None:
            return sorted(offsets.values(), key=lambda o: (o.topic, o.partition))
        return [offsets.get(tp, CommittedOffset(tp[0], tp[1], -1)) for tp in wanted]

    def group_names(self, group: Group) -> list[str]:
        self._check_leader(group)
        if not self._current:
            raise UnavailableError(f"{self.topic}/{self.partition}: the new leader is still catching up")
        return [name for name, offsets in self.groups.items() if offsets]
