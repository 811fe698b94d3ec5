"""The scrubber: a background walk over every replica's stored entries that checks their CRCs, so damage on
disk is found (and repaired) before a read needs the entry, on followers too.

It runs on the scheduler thread in small slices (about ``scrub_bytes_per_s`` / 10 bytes every 100 ms, and
at most ``MAX_GROUPS_PER_SLICE`` replicas, so that thousands of nearly empty idle replicas cost a bounded
share of the thread rather than one walk over all of them every slice), since the store's owner must not
race its own writes, and reads without copying entries out of the LMDB map. A
damaged entry above the Raft compaction point is handed to the scheduler's damage path
(:meth:`multiraft.node.scheduler.scheduler.Scheduler.report_damage`): the store cuts the log before it, and the replica
gets the entries back from the leader as a follower that may not vote for a log lacking them
(``RawNode(recover_until=...)``). Damage at or below the compaction point cannot come back through Raft's
appends: it is logged and counted (``multiraft storage check|repair`` are the operator's tools for it). The
counters (:class:`ScrubStats`) go to the log with every damaged entry and at the end of a pass (at most every
ten minutes).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from multiraft.logging import get_logger
from multiraft.node.scheduler.scheduler import Scheduler
from multiraft.node.threads import SchedulerOwned, on_owner_thread
from storage import CorruptionError, StorageError

__all__ = ["Scrubber", "ScrubStats", "SLICE_S", "MAX_GROUPS_PER_SLICE"]

log = get_logger(__name__)

SLICE_S = 0.1  # how often a slice runs; each checks about bytes_per_s * SLICE_S bytes
# Each replica visited costs a read transaction and a few lookups whatever its size: this bounds a slice's
# cost when the replicas are many and small (10,000 idle ones: a pass every ~2 minutes, not every slice).
MAX_GROUPS_PER_SLICE = 8
_REPORT_EVERY_S = 600.0  # the counters go to the log at the end of a pass, at most this often


@dataclass
class ScrubStats:
    """Counters since the node started."""

    entries: int = 0  # entries checked
    bytes: int = 0  # bytes checked (entry headers included)
    passes: int = 0  # walks completed over every replica
    corruptions: int = 0  # damaged entries found
    repairs: int = 0  # of them, handed to the repair
    unrepairable: int = 0  # of them, at or below a compaction point

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class Scrubber(SchedulerOwned):
    """Walks the replicas group by group, a slice at a time (scheduler thread)."""

    def __init__(self, scheduler: Scheduler, bytes_per_s: int) -> None:
        self.owner = scheduler.owner
        self._scheduler = scheduler
        self._slice_bytes = max(1, int(bytes_per_s * SLICE_S))
        self._group_id = -1  # the group being walked (-1: start a pass)
        self._position = 0  # the next index to check in it
        self._to_walk: list[int] = []
        self.stats = ScrubStats()
        self._reported_at = float("-inf")

    @on_owner_thread
    def run_slice(self) -> None:
        budget = self._slice_bytes
        groups = self._scheduler.groups
        visits = 0
        for _ in range(len(groups) + 2):  # bounded: each turn checks one group or moves to the next
            if budget <= 0:
                return
            group = groups.get(self._group_id)
            if group is None:
                if self._group_id != -1:  # removed (deleted, moved away, or taken out for repair) meanwhile
                    self._finish_group()
                if visits >= MAX_GROUPS_PER_SLICE or not self._next_group():
                    return
                visits += 1
                continue
            storage = group.storage
            log_ = storage.log
            try:
                position, checked, damaged = log_.scrub(self._position, budget)
            except StorageError as exc:  # the log was closed or deleted meanwhile: go on with the next
                log.debug("scrub skipped a log", log=log_.name, error=str(exc))
                self._finish_group()
                continue
            self.stats.entries += position - max(self._position, log_.first_index())
            self.stats.bytes += checked
            budget -= max(checked, 1)
            self._position = position
            if damaged is not None:
                self._found(group.group_id, damaged)
                self._finish_group()
            elif position > log_.last_index():
                self._finish_group()

    def _finish_group(self) -> None:
        self._group_id = -1
        if not self._to_walk:
            self.stats.passes += 1
            now = time.monotonic()
            if now - self._reported_at >= _REPORT_EVERY_S:
                self._reported_at = now
                log.info("scrub pass complete", **self.stats.as_dict())

    def _next_group(self) -> bool:
        if not self._to_walk:
            self._to_walk = sorted(self._scheduler.groups, reverse=True)
            if not self._to_walk:
                return False
        self._group_id = self._to_walk.pop()
        self._position = 0
        return True

    def _found(self, group_id: int, index: int) -> None:
        self.stats.corruptions += 1
        group = self._scheduler.groups[group_id]
        storage = group.storage
        floor = max(storage.first_index() - 1, storage.snapshot().meta.index)
        log.warning("the scrubber found a damaged entry", log=storage.log.name, index=index, **self.stats.as_dict())
        error = CorruptionError("the scrubber found a damaged entry", path=storage.log.name, index=index)
        if index > floor and self._scheduler.report_damage(group, error):
            self.stats.repairs += 1
            return
        self.stats.unrepairable += 1
        log.error(
            "the scrubber found a damaged entry it cannot repair; run `multiraft storage check`",
            log=storage.log.name,
            index=index,
            compaction_point=floor,
        )
