"""Asking the cluster how its partitions are doing (event loop).

:class:`StatusCollector` asks each partition's leader (this node's store, or a peer) for its live status:
leader, term, high watermark, in-sync replicas, lag, segment copies. :class:`MoveReporter` asks the
controller leader for the replica moves it has in flight. Both give what they could gather: a leader that
does not answer in time is left out, as ``multiraft status`` shows it; moves the controller leader does not
report in time are an UnavailableError (no answer is not "no moves in flight").
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from multiraft import controller as ctl
from multiraft.errors import UnavailableError
from multiraft.node.cluster.rebalancer import MoveProgress
from multiraft.node.peer.call import ask_moves, ask_partition_statuses
from multiraft.node.protocols import PeerCaller, StoreHandle
from multiraft.node.threads import LoopOwned
from multiraft.node.vocabulary.status import MoveReport, PartitionStatus

__all__ = ["StatusCollector", "MoveReporter", "move_report"]

_ASK_TIMEOUT_S = 2.0


class StatusCollector(LoopOwned):
    """The node's ``PartitionStatusSource``."""

    def __init__(self, node_id: int, leader_of: Callable[[int], int], store: StoreHandle, peers: PeerCaller) -> None:
        self._node_id = node_id
        self._leader_of = leader_of
        self._store = store
        self._peers = peers

    async def partition_status(self, partitions: Sequence[ctl.PartitionState]) -> dict[int, PartitionStatus]:
        by_leader: dict[int, list[int]] = {}
        for p in partitions:
            by_leader.setdefault(self._leader_of(p.group_id) or p.preferred_leader, []).append(p.group_id)
        results: dict[int, PartitionStatus] = {}

        async def ask(node: int, group_ids: list[int]) -> None:
            if node == self._node_id:
                found = await self._store.partition_status(group_ids)
            else:
                try:
                    answered = await ask_partition_statuses(self._peers, node, group_ids, _ASK_TIMEOUT_S)
                except (ConnectionError, TimeoutError):
                    return
                if answered is None:
                    return
                found = answered
            results.update((s.group_id, s) for s in found)

        await asyncio.gather(*(ask(node, ids) for node, ids in by_leader.items() if node))
        return results


def move_report(move: MoveProgress) -> MoveReport:
    return MoveReport(
        topic=move.move.topic,
        partition=move.move.partition,
        group_id=move.group_id,
        from_node=move.move.from_node or move.move.replaces or 0,
        to_node=move.move.to_node,
        phase=move.phase,
        bytes_copied=move.bytes_copied,
        bytes_total=move.bytes_total,
        eta_seconds=move.eta_seconds,
    )


class MoveReporter(LoopOwned):
    """The node's ``MoveSource``: the controller leader's moves, from here or from it."""

    def __init__(
        self,
        node_id: int,
        controller_leader: Callable[[], int],
        local: Callable[[], list[MoveProgress]],
        peers: PeerCaller,
    ) -> None:
        self._node_id = node_id
        self._controller_leader = controller_leader
        self._local = local
        self._peers = peers

    async def moves(self) -> list[MoveReport]:
        leader = self._controller_leader()
        if leader == self._node_id or not leader:
            return [move_report(m) for m in self._local()]
        try:
            return await ask_moves(self._peers, leader, _ASK_TIMEOUT_S)
        except (ConnectionError, TimeoutError) as exc:
            raise UnavailableError(
                f"the controller leader (node {leader}) did not say which moves are in flight within "
                f"{_ASK_TIMEOUT_S:g}s: {exc or type(exc).__name__}"
            ) from exc
