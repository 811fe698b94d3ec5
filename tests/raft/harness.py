"""Test harness: replicas hosted in one process, a controllable network, and a deterministic cluster.

``ReplicaHost`` plays the application around one RawNode: it handles each Ready in the documented order
(persist snapshot/entries/hard state into a MutableStorage, sync if the Ready says ``must_sync``, then send,
then apply) and can split a Ready into "taken" and "persisted" so that a crash in between loses exactly what
was not synced. :class:`CrashableMemoryStorage` makes writes durable only when synced.

``Cluster`` is the scenario-test driver: FIFO delivery, explicit ticks, partitions and message filters, and a
transcript of every delivered message (used by the golden scenario files).
"""

from __future__ import annotations

import random
import struct
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from multiraft.raft import (
    ConfState,
    Entry,
    EntryKind,
    HardState,
    MemoryStorage,
    Message,
    MessageType,
    MutableStorage,
    RaftConfig,
    RawNode,
    Ready,
    Role,
    Snapshot,
)

StorageFactory = Callable[[int, ConfState | None], MutableStorage]


class UnsyncedWriteCounter:
    """Mixed in before a Storage implementation: counts the writes made since the last sync (what a crash loses)."""

    unsynced_writes = 0

    def set_hard_state(self, hard_state: HardState) -> None:
        super().set_hard_state(hard_state)  # type: ignore[misc]
        self.unsynced_writes += 1

    def append(self, entries: Sequence[Entry]) -> None:
        super().append(entries)  # type: ignore[misc]
        self.unsynced_writes += bool(entries)

    def apply_snapshot(self, snapshot: Snapshot) -> None:
        super().apply_snapshot(snapshot)  # type: ignore[misc]
        self.unsynced_writes += 1

    def create_snapshot(self, index: int, conf_state: ConfState, data: bytes) -> Snapshot:
        snapshot: Snapshot = super().create_snapshot(index, conf_state, data)  # type: ignore[misc]
        self.unsynced_writes += 1
        return snapshot

    def compact(self, index: int) -> None:
        super().compact(index)  # type: ignore[misc]
        self.unsynced_writes += 1


class CrashableMemoryStorage(UnsyncedWriteCounter, MemoryStorage):
    """A MemoryStorage whose writes become durable only at :meth:`sync`: :meth:`crash` returns to the last sync.

    It looks inside its base class (the reference implementation) to take the durable image.
    """

    def __init__(self) -> None:
        super().__init__()
        self.unsynced_writes = 0
        self._image = self._capture()

    def _capture(self) -> tuple[HardState, Snapshot, int, int, tuple[Entry, ...]]:
        return self._hard_state, self._snapshot, self._offset, self._offset_term, tuple(self._entries)

    def sync(self) -> None:
        """Everything written so far is durable (an fsync covers every earlier write)."""
        if self.unsynced_writes:
            self._image = self._capture()
            self.unsynced_writes = 0

    def crash(self) -> int:
        """Lose every write since the last sync; returns how many there were."""
        lost = self.unsynced_writes
        if lost:
            hard_state, snapshot, offset, offset_term, entries = self._image
            self._hard_state, self._snapshot, self._offset, self._offset_term = (
                hard_state,
                snapshot,
                offset,
                offset_term,
            )
            self._entries = list(entries)
            self.unsynced_writes = 0
        return lost

    def lose_suffix(self, keep: int) -> tuple[int, int]:
        """A damaged disk whose repair cut the durable log after ``keep`` (at least the snapshot's index); the
        hard state stays as it was. Returns (index, term) of the last entry before the cut."""
        self.crash()
        last = self.last_index()
        before = (last, self.term(last))
        del self._entries[max(keep, self._offset) - self._offset :]
        self._image = self._capture()
        return before


def memory_storage(node_id: int, conf_state: ConfState | None) -> MutableStorage:
    """Initial members get the bootstrap snapshot; nodes added later start empty."""
    return MemoryStorage.bootstrapped(conf_state) if conf_state is not None else MemoryStorage()


class Observer(Protocol):
    """Hooks the invariant checker uses; every method may raise AssertionError."""

    def on_persist(self, host: ReplicaHost, ready: Ready) -> None: ...

    def on_apply(self, host: ReplicaHost, entry: Entry, chain: int) -> None: ...

    def on_snapshot_installed(self, host: ReplicaHost, snapshot: Snapshot, chain: int) -> None: ...


_SNAP_HEADER = struct.Struct("<QI")


class StateMachine:
    """The application's state: every applied DATA payload and a running checksum of the applied history."""

    __slots__ = ("applied_index", "chain", "payloads")

    def __init__(self, applied_index: int = 0, chain: int = 0, payloads: list[bytes] | None = None) -> None:
        self.applied_index = applied_index
        self.chain = chain
        self.payloads = payloads if payloads is not None else []

    def apply(self, entry: Entry) -> int:
        chain = zlib.crc32(
            bytes(entry.payload), zlib.crc32(struct.pack("<QQB", entry.index, entry.term, entry.kind), self.chain)
        )
        self.chain = chain
        self.applied_index = entry.index
        if entry.kind == EntryKind.DATA:
            self.payloads.append(bytes(entry.payload))
        return chain

    def to_snapshot_data(self) -> bytes:
        parts = [_SNAP_HEADER.pack(self.applied_index, self.chain)]
        for payload in self.payloads:
            parts.append(struct.pack("<I", len(payload)))
            parts.append(payload)
        return b"".join(parts)

    @classmethod
    def from_snapshot(cls, snapshot: Snapshot) -> StateMachine:
        if not snapshot.data:
            return cls(snapshot.meta.index, 0, [])
        data = snapshot.data
        index, chain = _SNAP_HEADER.unpack_from(data, 0)
        offset = _SNAP_HEADER.size
        payloads = []
        while offset < len(data):
            (n,) = struct.unpack_from("<I", data, offset)
            offset += 4
            payloads.append(bytes(data[offset : offset + n]))
            offset += n
        return cls(index, chain, payloads)


def make_config(node_id: int, **overrides: object) -> RaftConfig:
    return RaftConfig(id=node_id, **overrides)  # type: ignore[arg-type]


class ReplicaHost:
    """The application around one replica."""

    def __init__(
        self,
        node_id: int,
        storage: MutableStorage,
        config: RaftConfig,
        rng: random.Random,
        observer: Observer | None = None,
        sync: Callable[[], None] | None = None,
        *,
        recover_until: tuple[int, int] = (0, 0),
    ) -> None:
        self.id = node_id
        self.storage = storage
        self.config = config
        self.observer = observer
        self.sync = sync  # makes what was written durable; None: every write is durable at once
        self.node = RawNode(config, storage, rng, recover_until=recover_until)
        self.state = StateMachine.from_snapshot(storage.snapshot())
        self.pending: Ready | None = None
        self.applied_entries: list[Entry] = []  # in this incarnation, for scenario assertions
        self.read_states: list[tuple[int, bytes]] = []

    def take_ready(self) -> list[Message]:
        """Take a Ready; returns the messages that may go out now. The persist happens in persist()."""
        rd = self.node.ready()
        self.pending = rd
        return list(rd.messages)

    def persist(self) -> list[Message]:
        """Persist the taken Ready, apply its committed entries, advance; returns the after-persist messages."""
        rd = self.pending
        assert rd is not None
        storage = self.storage
        if rd.snapshot is not None:
            storage.apply_snapshot(rd.snapshot)
        if rd.entries:
            storage.append(rd.entries)
        if rd.hard_state is not None:
            storage.set_hard_state(rd.hard_state)
        if rd.must_sync and self.sync is not None:
            self.sync()  # without must_sync, the write (a new commit index) stays volatile until a later sync
        if self.observer is not None:
            self.observer.on_persist(self, rd)
        if rd.snapshot is not None:
            self.state = StateMachine.from_snapshot(rd.snapshot)
            if self.observer is not None:
                self.observer.on_snapshot_installed(self, rd.snapshot, self.state.chain)
        for entry in rd.committed_entries:
            if entry.index <= self.state.applied_index:
                continue  # already in the state (installed snapshot)
            chain = self.state.apply(entry)
            self.applied_entries.append(entry)
            if self.observer is not None:
                self.observer.on_apply(self, entry, chain)
        for read in rd.read_states:
            self.read_states.append((read.index, read.context))
        self.pending = None
        self.node.advance(rd)
        return list(rd.persisted_messages)

    def handle_ready(self) -> list[Message]:
        """Take and persist one Ready; all its messages in the order they may be sent."""
        out = self.take_ready()
        out.extend(self.persist())
        return out

    def snapshot_and_compact(self, keep: int) -> bool:
        """Snapshot the applied state and drop the log up to ``keep`` entries before it."""
        node = self.node
        index = self.state.applied_index
        if self.pending is not None or index <= self.storage.snapshot().meta.index:
            return False
        if node.status().applied != index:
            return False
        self.storage.create_snapshot(index, node.conf_state, self.state.to_snapshot_data())
        compact_to = index - keep
        if compact_to >= self.storage.first_index():
            self.storage.compact(compact_to)
        if self.sync is not None:
            self.sync()  # the application syncs its snapshot
        return True


def describe(m: Message) -> str:
    """One transcript line for a message (stable: used by golden files)."""
    parts = [f"{m.sender}->{m.to} {m.type.name} term={m.term}"]
    t = m.type
    if t in (MessageType.APP,):
        parts.append(f"prev=({m.index},{m.log_term}) commit={m.commit}")
        if m.entries:
            parts.append("entries=[" + " ".join(f"{e.index}/{e.term}{_kind(e)}" for e in m.entries) + "]")
    elif t is MessageType.APP_RESP:
        parts.append(f"index={m.index}")
        if m.reject:
            parts.append(f"reject hint=({m.reject_hint},{m.log_term})")
    elif t in (MessageType.VOTE, MessageType.PRE_VOTE):
        parts.append(f"last=({m.index},{m.log_term})")
        if m.leader_transfer:
            parts.append("transfer")
    elif t in (MessageType.VOTE_RESP, MessageType.PRE_VOTE_RESP):
        parts.append("reject" if m.reject else "granted")
    elif t is MessageType.HEARTBEAT:
        parts.append(f"commit={m.commit}")
        if m.quiesce:
            parts.append("quiesce")
        if m.context:
            parts.append(f"read={int.from_bytes(m.context, 'big')}")
    elif t is MessageType.HEARTBEAT_RESP:
        if m.context:
            parts.append(f"read={int.from_bytes(m.context, 'big')}")
    elif t is MessageType.SNAP and m.snapshot is not None:
        parts.append(f"snapshot=({m.snapshot.meta.index},{m.snapshot.meta.term})")
    elif t in (MessageType.READ_INDEX, MessageType.READ_INDEX_RESP):
        parts.append(f"index={m.index} ctx={m.context.decode(errors='replace')}")
    elif t is MessageType.TRANSFER_LEADER:
        parts.append(f"target={m.index}")
    return " ".join(parts)


def _kind(e: Entry) -> str:
    return {EntryKind.DATA: "", EntryKind.CONFIG: ":conf", EntryKind.NOOP: ":noop", EntryKind.CONTROL: ":ctl"}[e.kind]


@dataclass
class Cluster:
    """A deterministic cluster for scenario tests: nothing happens unless the test says so."""

    ids: Sequence[int] = (1, 2, 3)
    learners: Sequence[int] = ()
    seed: int = 0
    config: dict[str, object] = field(default_factory=dict)
    storage_factory: StorageFactory = memory_storage
    observer: Observer | None = None
    hosts: dict[int, ReplicaHost] = field(init=False, default_factory=dict)
    queue: deque[Message] = field(init=False, default_factory=deque)
    transcript: list[str] = field(init=False, default_factory=list)
    blocked: set[tuple[int, int]] = field(init=False, default_factory=set)
    filters: list[Callable[[Message], bool]] = field(init=False, default_factory=list)
    down: set[int] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        conf = ConfState.of(self.ids, self.learners)
        for node_id in [*self.ids, *self.learners]:
            self.hosts[node_id] = self._new_host(node_id, self.storage_factory(node_id, conf))

    def _new_host(self, node_id: int, storage: MutableStorage, recover_until: tuple[int, int] = (0, 0)) -> ReplicaHost:
        return ReplicaHost(
            node_id,
            storage,
            make_config(node_id, **self.config),
            random.Random(self.seed * 1000 + node_id),
            self.observer,
            recover_until=recover_until,
        )

    # --- topology ----------------------------------------------------------------------------------------

    def add_node(self, node_id: int) -> ReplicaHost:
        """Start a new, empty replica (it learns everything from the leader)."""
        host = self._new_host(node_id, self.storage_factory(node_id, None))
        self.hosts[node_id] = host
        return host

    def node(self, node_id: int) -> RawNode:
        return self.hosts[node_id].node

    def isolate(self, node_id: int) -> None:
        for other in self.hosts:
            if other != node_id:
                self.blocked.add((node_id, other))
                self.blocked.add((other, node_id))

    def partition(self, *groups: Iterable[int]) -> None:
        sides = [set(g) for g in groups]
        for a in self.hosts:
            for b in self.hosts:
                if a != b and not any(a in s and b in s for s in sides):
                    self.blocked.add((a, b))

    def heal(self) -> None:
        self.blocked.clear()

    def cut(self, a: int, b: int) -> None:
        self.blocked.add((a, b))
        self.blocked.add((b, a))

    def crash(self, node_id: int) -> None:
        """Stop the node; whatever it had not persisted is lost."""
        self.down.add(node_id)

    def restart(self, node_id: int, *, recover_until: tuple[int, int] = (0, 0)) -> None:
        old = self.hosts[node_id]
        self.down.discard(node_id)
        self.hosts[node_id] = self._new_host(node_id, old.storage, recover_until)

    # --- driving -----------------------------------------------------------------------------------------

    def _route(self, messages: Iterable[Message]) -> None:
        self.queue.extend(messages)

    def process(self, node_id: int) -> bool:
        host = self.hosts[node_id]
        if node_id in self.down or not host.node.has_ready():
            return False
        self._route(host.handle_ready())
        return True

    def process_all(self) -> bool:
        moved = False
        for node_id in sorted(self.hosts):
            moved |= self.process(node_id)
        return moved

    def deliver_one(self) -> bool:
        if not self.queue:
            return False
        m = self.queue.popleft()
        if m.to in self.down or m.sender in self.down or (m.sender, m.to) in self.blocked or m.to not in self.hosts:
            return True
        if any(not keep(m) for keep in self.filters):
            return True
        self.transcript.append(describe(m))
        self.hosts[m.to].node.step(m)
        return True

    def stabilize(self, max_rounds: int = 10_000) -> None:
        """Process Readies and deliver messages until nothing moves."""
        for _ in range(max_rounds):
            moved = self.process_all()
            while self.deliver_one():
                moved = True
                self.process_all()
            if not moved:
                return
        raise AssertionError("the cluster did not stabilize")

    def tick(self, node_id: int, n: int = 1) -> None:
        for _ in range(n):
            if node_id not in self.down:
                self.hosts[node_id].node.tick()

    def tick_all(self, n: int = 1, *, stabilize: bool = True) -> None:
        for _ in range(n):
            for node_id in sorted(self.hosts):
                if node_id not in self.down and not self.hosts[node_id].node.quiescent:
                    self.hosts[node_id].node.tick()
            if stabilize:
                self.stabilize()

    def campaign(self, node_id: int) -> None:
        self.node(node_id).campaign()
        self.stabilize()

    def elect(self, node_id: int) -> None:
        self.campaign(node_id)
        assert self.node(node_id).role is Role.LEADER, self.status_line()

    def propose(self, node_id: int, payload: bytes) -> int:
        index = self.node(node_id).propose(payload)
        self.stabilize()
        return index

    def leader(self) -> int | None:
        leaders = [i for i, h in self.hosts.items() if i not in self.down and h.node.role is Role.LEADER]
        if not leaders:
            return None
        return max(leaders, key=lambda i: self.hosts[i].node.term)

    def applied_payloads(self, node_id: int) -> list[bytes]:
        return list(self.hosts[node_id].state.payloads)

    def status_line(self) -> str:
        return " ".join(
            f"{i}:{h.node.role.name[0]}t{h.node.term}c{h.node.status().commit}" for i, h in sorted(self.hosts.items())
        )
