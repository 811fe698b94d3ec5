"""What a seeded simulation run is made of besides its schedule: the parameters a seed draws, and the disks
the nodes keep their Raft state on."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from multiraft.raft import ConfState, MutableStorage, bootstrap

from .harness import CrashableMemoryStorage

__all__ = ["Disk", "DiskFactory", "MemoryDisk", "SimParams"]


class Disk(Protocol):
    """One node's durable storage as the simulation drives it."""

    storage: MutableStorage  # what the node reads and writes (a crash may replace it: reopened from disk)

    def sync(self) -> None:
        """Make every write so far durable."""
        ...

    def crash(self) -> int:
        """Lose every write since the last sync and reopen; returns how many writes were lost."""
        ...

    def close(self) -> None: ...


DiskFactory = Callable[[int, ConfState | None], Disk]
"""(node id, initial configuration or None for a node added later) -> a fresh disk."""


class MemoryDisk:
    """A :class:`CrashableMemoryStorage` (the default disk)."""

    def __init__(self, node_id: int, conf_state: ConfState | None) -> None:
        self._memory = CrashableMemoryStorage()
        if conf_state is not None:
            hard_state, snapshot = bootstrap(conf_state)
            self._memory.apply_snapshot(snapshot)
            self._memory.set_hard_state(hard_state)
        self._memory.sync()
        self.storage: MutableStorage = self._memory

    def damage(self, keep: int) -> tuple[int, int]:
        """A damaged disk cut back after ``keep`` (durably); returns the last entry it held before."""
        return self._memory.lose_suffix(keep)

    def sync(self) -> None:
        self._memory.sync()

    def crash(self) -> int:
        return self._memory.crash()

    def close(self) -> None:
        pass


@dataclass
class SimParams:
    """Everything a seed decides about a run besides the schedule itself."""

    nodes: int
    ticks: int
    election_tick: int
    heartbeat_tick: int
    pre_vote: bool
    check_quorum: bool
    quiesce: bool
    max_inflight_msgs: int
    max_size_per_msg: int
    max_entries_per_msg: int
    drop: float
    duplicate: float
    max_delay: int
    crash: float
    restart: float
    partition: float
    heal: float
    propose: float
    conf_change: float
    transfer: float
    read: float
    snapshot: float
    slow_persist: float
    spurious_wake: float
    reorder: float
    codec: bool

    @classmethod
    def random(cls, rng: random.Random) -> SimParams:
        calm = rng.random() < 0.2
        return cls(
            nodes=rng.choice((1, 3, 3, 3, 5, 5)) if rng.random() < 0.9 else 2,
            ticks=rng.randint(40, 110),
            election_tick=rng.choice((5, 8, 10)),
            heartbeat_tick=rng.choice((1, 1, 2)),
            pre_vote=rng.random() < 0.8,
            check_quorum=rng.random() < 0.8,
            quiesce=rng.random() < 0.7,
            max_inflight_msgs=rng.choice((1, 2, 4, 256)),
            max_size_per_msg=rng.choice((1, 16, 1 << 20)),
            max_entries_per_msg=rng.choice((1, 3, 1024)),
            drop=0.0 if calm else rng.choice((0.0, 0.02, 0.1, 0.2)),
            duplicate=0.0 if calm else rng.choice((0.0, 0.02, 0.1)),
            max_delay=rng.choice((0, 0, 1, 3)),
            crash=0.0 if calm else rng.choice((0.0, 0.01, 0.03)),
            restart=rng.choice((0.05, 0.2)),
            partition=0.0 if calm else rng.choice((0.0, 0.01, 0.04)),
            heal=rng.choice((0.05, 0.2)),
            propose=rng.choice((0.2, 0.5, 1.0)),
            conf_change=rng.choice((0.0, 0.0, 0.03, 0.08)),
            transfer=rng.choice((0.0, 0.01, 0.03)),
            read=rng.choice((0.0, 0.05, 0.2)),
            snapshot=rng.choice((0.0, 0.02, 0.1)),
            slow_persist=rng.choice((0.0, 0.1, 0.4)),
            spurious_wake=rng.choice((0.0, 0.02)),
            reorder=rng.choice((0.0, 0.0, 0.01, 0.05)),
            codec=rng.random() < 0.25,
        )
