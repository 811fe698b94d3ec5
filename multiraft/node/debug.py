"""Diagnostics a node can switch on by environment variable; off by default.

``MULTIRAFT_DEBUG_ISOLATION=1``: SIGUSR1 applies the network cuts of ``<data_dir>/debug_cuts.json`` (tests and
the nemesis harness), or, without that file, toggles a cut from every peer.
``MULTIRAFT_DEBUG_GC_MS=ms``: log every garbage collection pause longer than that.

The cuts file (written whole, then SIGUSR1)::

    {"generation": 3, "drop_to": [2], "drop_from": [2, 3], "gossip": {"2": "127.0.0.1:7102", "3": "..."}}

``drop_to`` lists the peers whose traffic from this node is dropped, ``drop_from`` those whose traffic to this
node is dropped: Raft messages, node-to-node requests and their answers, and SWIM gossip (``gossip`` maps
peer ids to their gossip addresses, since gossip knows addresses, not ids). So one file per node draws any
partition loopback allows: a majority/minority split, a bridge, or a one-way cut. An empty file heals.
"""

from __future__ import annotations

import collections
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from multiraft import raft
from multiraft.logging import get_logger

__all__ = ["Isolation", "CutPlan", "record_gc_pauses", "DEBUG_ISOLATION", "DEBUG_GC_MS", "CUTS_FILE"]

log = get_logger(__name__)

DEBUG_ISOLATION = "MULTIRAFT_DEBUG_ISOLATION"
DEBUG_GC_MS = "MULTIRAFT_DEBUG_GC_MS"
CUTS_FILE = "debug_cuts.json"
_EVERYONE = -1  # in a cut set: every peer


@dataclass(frozen=True)
class CutPlan:
    """What one node drops: the cuts file's content, parsed (``to_json`` writes it)."""

    generation: int = 0
    drop_to: frozenset[int] = frozenset()
    drop_from: frozenset[int] = frozenset()
    gossip: dict[int, str] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {
                "generation": self.generation,
                "drop_to": sorted(self.drop_to),
                "drop_from": sorted(self.drop_from),
                "gossip": {str(k): v for k, v in sorted(self.gossip.items())},
            }
        )

    @classmethod
    def from_json(cls, text: str) -> CutPlan:
        document = json.loads(text)
        if not isinstance(document, dict):
            raise ValueError(f"a cuts file holds a JSON object, not {type(document).__name__}")
        return cls(
            generation=int(document.get("generation", 0)),
            drop_to=frozenset(int(n) for n in document.get("drop_to", ())),
            drop_from=frozenset(int(n) for n in document.get("drop_from", ())),
            gossip={int(k): str(v) for k, v in dict(document.get("gossip", {})).items()},
        )


@dataclass
class Isolation:
    """Network cuts of one node's traffic, for tests (``MULTIRAFT_DEBUG_ISOLATION=1``): SIGUSR1 calls
    :meth:`reload`. While a peer is cut, its Raft messages, requests and gossip are dropped in the cut
    direction, and the node keeps ticking, so its groups time out and campaign. Each change logs what the
    previous cuts dropped."""

    node_id: int
    cuts_path: Path | None = None
    plan: CutPlan = field(default_factory=CutPlan)
    dropped: collections.Counter[tuple[bool, raft.MessageType]] = field(default_factory=collections.Counter)
    requests_dropped: int = 0
    packets_dropped: int = 0

    @property
    def isolated(self) -> bool:
        return bool(self.plan.drop_to or self.plan.drop_from)

    def reload(self) -> None:
        """Apply the cuts file if there is one, else toggle a cut from every peer (both directions)."""
        path = self.cuts_path
        if path is not None and path.exists():
            try:
                plan = CutPlan.from_json(path.read_text())
            except (OSError, ValueError, TypeError) as exc:
                log.error("debug cuts file unreadable; cuts unchanged", path=str(path), error=str(exc))
                return
        elif self.isolated:
            plan = CutPlan()
        else:
            plan = CutPlan(drop_to=frozenset({_EVERYONE}), drop_from=frozenset({_EVERYONE}))
        self._apply(plan)

    def _apply(self, plan: CutPlan) -> None:
        sent = {kind: n for (outgoing, kind), n in self.dropped.items() if outgoing}
        counts = {
            "sent_dropped": sum(sent.values()),
            "received_dropped": sum(n for (outgoing, _), n in self.dropped.items() if not outgoing),
            "pre_votes_dropped": sent.get(raft.MessageType.PRE_VOTE, 0),
            "votes_dropped": sent.get(raft.MessageType.VOTE, 0),
            "requests_dropped": self.requests_dropped,
            "packets_dropped": self.packets_dropped,
        }
        was_isolated = self.isolated
        self.plan = plan
        self.dropped.clear()
        self.requests_dropped = self.packets_dropped = 0
        if self.isolated:
            log.warning(
                "debug isolation on",
                node_id=self.node_id,
                generation=plan.generation,
                drop_to=_show(plan.drop_to),
                drop_from=_show(plan.drop_from),
                **(counts if was_isolated else {}),
            )
        elif was_isolated:
            log.warning("debug isolation off", node_id=self.node_id, generation=plan.generation, **counts)

    def cuts(self, peer: int, *, outgoing: bool) -> bool:
        """Whether traffic with ``peer`` in that direction is dropped."""
        cut = self.plan.drop_to if outgoing else self.plan.drop_from
        return bool(cut) and (peer in cut or _EVERYONE in cut)

    def drop_request(self, peer: int, outgoing: bool) -> bool:
        """For the transport's REQUEST and RESPONSE frames: True (and counted) if cut."""
        if self.cuts(peer, outgoing=outgoing):
            self.requests_dropped += 1
            return True
        return False

    def drop_packet(self, address: str, outgoing: bool) -> bool:
        """For SWIM gossip, by the peer's gossip address: True (and counted) if cut."""
        cut = self.plan.drop_to if outgoing else self.plan.drop_from
        if not cut:
            return False
        if _EVERYONE in cut or any(self.plan.gossip.get(peer) == address for peer in cut):
            self.packets_dropped += 1
            return True
        return False

    def keep_outgoing(
        self, batches: dict[int, list[tuple[int, raft.Message]]]
    ) -> dict[int, list[tuple[int, raft.Message]]]:
        """The batches whose peer is not cut; the others are counted as dropped."""
        if not self.plan.drop_to:
            return batches
        kept = {}
        for to_node, messages in batches.items():
            if self.cuts(to_node, outgoing=True):
                self.dropped.update((True, message.type) for _, message in messages)
            else:
                kept[to_node] = messages
        return kept

    def drop_incoming(self, peer: int, messages: list[tuple[int, raft.Message]]) -> bool:
        """True (and the messages counted) if Raft traffic from ``peer`` is cut."""
        if not self.cuts(peer, outgoing=False):
            return False
        self.dropped.update((False, message.type) for _, message in messages)
        return True


def _show(peers: frozenset[int]) -> str:
    return "all" if _EVERYONE in peers else ",".join(str(p) for p in sorted(peers))


def record_gc_pauses(threshold_ms: float) -> None:
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
