"""The nemesis: faults injected into a running local cluster, and their heals.

One fault at a time: :meth:`Nemesis.inject` applies one of :data:`FAULT_KINDS` and records it, and
:meth:`Nemesis.heal` undoes it. Every choice (which node, which shape) comes from the run's seeded
generator, so a seed replays the same schedule (the cluster's own timing still varies).

* ``kill``, ``kill-minority``, ``power-loss``: SIGKILL one node, a minority, or every node at once; the
  heal restarts them.
* ``pause-leader``, ``pause-follower``: SIGSTOP a partition's leader, or a node that does not lead it,
  until the heal's SIGCONT (the hold is longer than an election timeout).
* ``partition-halves``, ``partition-bridge``, ``partition-oneway``: network cuts through the nodes' debug
  cuts files (:mod:`multiraft.node.debug`; the nodes run with ``MULTIRAFT_DEBUG_ISOLATION=1``): a minority
  cut from the majority, two sides that each still reach one bridge node, or one direction between two
  nodes. Raft, node-to-node requests and gossip are cut; clients still reach every node.
* ``corrupt-bitflip``, ``corrupt-truncate``: stop a follower, flip one bit inside a stored record of its
  data file or cut the file short, and start it again.
* ``disk-full``: fill the small filesystem mounted at one node's data directory (the runner mounts it
  before the cluster starts); the heal frees it and restarts the node if it stopped.
* ``churn``: a new node joins, an old one is drained and, once empty (or when the hold ends), stopped and
  removed.
* ``churn-undrain``: a node is drained, undrained while its replicas move, and drained again; the heal waits
  for it to empty and undrains it, so replicas move back to a node that held them before.
* ``churn-rejoin``: a node is drained; the heal waits for it to empty, stops and removes it, and starts it
  again, so the node that left joins again (same id; its data directory kept or wiped, by the seed) and
  replicas are placed on it again.

The churn kinds first add a node when no more than the replication factor are active (a drain is refused
otherwise), so they work from three nodes up; every drain is bounded (``drain_timeout_s``) and one that does
not finish is recorded (``drain``, ``info``), which the checker counts as a stalled drain.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from multiraft import Admin, MultiraftError
from multiraft.node.debug import CUTS_FILE, CutPlan
from multiraft.tools.launcher import ClusterInfo, add_node, kill_node, start_node, stop_node, wait_serving
from multiraft.tools.nemesis.history import History
from storage._format import ENV_DIRNAME

__all__ = ["FAULT_KINDS", "Nemesis", "Fault", "kill_all_at_once"]

FAULT_KINDS = (
    "kill",
    "kill-minority",
    "power-loss",
    "pause-leader",
    "pause-follower",
    "partition-halves",
    "partition-bridge",
    "partition-oneway",
    "corrupt-bitflip",
    "corrupt-truncate",
    "disk-full",
    "churn",
    "churn-undrain",
    "churn-rejoin",
)
_RESTART_TIMEOUT_S = 60.0
_UNDRAIN_AFTER_S = (0.2, 1.0)
"""How long a churn-undrain lets the first drain (and then the undrain) move replicas before the next step."""
_VALUE = re.compile(rb"producer-[0-9]+:[0-9]+")


@dataclass
class Fault:
    kind: str
    nodes: tuple[int, ...] = ()
    detail: dict[str, object] = field(default_factory=dict)


class Nemesis:
    """Injects faults into ``cluster`` (a running local cluster) for the run's topic."""

    def __init__(
        self,
        cluster: ClusterInfo,
        admin: Admin,
        history: History,
        rng: random.Random,
        *,
        topic: str,
        disk_node: int | None = None,
        drain_timeout_s: float = 60.0,
        replication: int = 3,
    ) -> None:
        self.cluster = cluster
        self.admin = admin
        self.history = history
        self.rng = rng
        self.topic = topic
        self.disk_node = disk_node
        self.drain_timeout_s = drain_timeout_s
        self.replication = replication
        self.members = sorted(cluster.nodes)  # nodes that are part of the cluster (not removed)
        self.draining: set[int] = set()  # members left draining (a drain that did not finish)
        self.active: Fault | None = None
        self._generation = 0

    # ---------------------------------------------------------------------------------------- schedule

    def inject(self, kind: str) -> Fault | None:
        """Apply one fault (after healing any still active); None if it does not apply now (recorded)."""
        self.heal()
        self.history.record("nemesis", "invoke", "fault", kind=kind)
        try:
            fault: Fault | None = getattr(self, "_" + kind.replace("-", "_"))()
        except (MultiraftError, OSError, RuntimeError, TimeoutError) as exc:
            self.history.record("nemesis", "fail", "fault", kind=kind, error=repr(exc))
            # Half applied (a filler written, some nodes' cuts): undone now, since no heal follows a failure.
            self._undo_leftovers(kind)
            return None
        if fault is None:
            self.history.record("nemesis", "fail", "fault", kind=kind, error="not applicable now")
            return None
        self.active = fault
        self.history.record("nemesis", "ok", "fault", kind=kind, nodes=list(fault.nodes), **fault.detail)
        return fault

    def heal(self) -> None:
        """Undo the active fault: restart killed nodes, continue paused ones, lift cuts, free the disk."""
        fault, self.active = self.active, None
        if fault is None:
            return
        self.history.record("nemesis", "invoke", "heal", kind=fault.kind)
        try:
            if fault.kind.startswith("pause"):
                for node_id in fault.nodes:
                    self._signal(node_id, signal.SIGCONT)
            elif fault.kind.startswith("partition"):
                self._cut({})
            elif fault.kind == "disk-full":
                with contextlib.suppress(FileNotFoundError):
                    self._filler().unlink()
            elif fault.kind == "churn":
                self._finish_churn(fault)
            elif fault.kind == "churn-undrain":
                self._finish_churn_undrain(fault)
            elif fault.kind == "churn-rejoin":
                self._finish_churn_rejoin(fault)
        except (MultiraftError, OSError, RuntimeError, TimeoutError) as exc:
            # A heal that cannot be done is recorded; the run goes on (the nodes are still restarted below).
            undone = repr(exc)
        else:
            undone = ""
        error = ""
        for _ in range(2):  # a node that stopped itself (e.g. on a full disk) may die after the first look
            try:
                self._restart_stopped()
                wait_serving(self.cluster, self.members, timeout_s=_RESTART_TIMEOUT_S)
            except (RuntimeError, TimeoutError) as exc:
                error = str(exc)[-2_000:]
                continue
            if undone:
                self.history.record("nemesis", "fail", "heal", kind=fault.kind, error=undone)
            else:
                self.history.record("nemesis", "ok", "heal", kind=fault.kind)
            return
        error = f"{undone}; {error}" if undone else error
        # A node that cannot come back is a finding, not a harness crash.
        self.history.record("nemesis", "fail", "heal", kind=fault.kind, error=error)

    def heal_all(self) -> None:
        """Whatever happened: every member node running and continued, no cut."""
        self.heal()
        for node_id in self.members:
            self._signal(node_id, signal.SIGCONT)
        try:
            self._cut({})
        except OSError as exc:  # a node whose cuts file cannot be written (its disk full): the others are healed
            self.history.record("nemesis", "fail", "heal", kind="all", error=repr(exc))
        try:
            self._restart_stopped()
        except (RuntimeError, TimeoutError) as exc:
            self.history.record("nemesis", "fail", "heal", kind="all", error=str(exc)[-2_000:])

    def _undo_leftovers(self, kind: str) -> None:
        """What a fault that failed half way may have left: a filler, cuts on some nodes, paused nodes."""
        try:
            if kind == "disk-full" and self.disk_node is not None:
                with contextlib.suppress(FileNotFoundError):
                    self._filler().unlink()
            elif kind.startswith("partition"):
                self._cut({})
            elif kind.startswith("pause"):
                for node_id in self.members:
                    self._signal(node_id, signal.SIGCONT)
        except OSError as exc:
            self.history.record("nemesis", "fail", "heal", kind=kind, error=repr(exc))

    # ------------------------------------------------------------------------------------------ faults

    def _kill(self) -> Fault:
        victim = self.rng.choice(self.members)
        kill_node(self.cluster, victim)
        return Fault("kill", (victim,))

    def _kill_minority(self) -> Fault:
        count = max(1, (len(self.members) - 1) // 2)
        victims = tuple(sorted(self.rng.sample(self.members, count)))
        for victim in victims:
            kill_node(self.cluster, victim)
        return Fault("kill-minority", victims)

    def _power_loss(self) -> Fault:
        for node_id in self.members:
            kill_node(self.cluster, node_id)
        return Fault("power-loss", tuple(self.members))

    def _pause_leader(self) -> Fault | None:
        leader = self._leader(self.rng.randrange(self._partitions()))
        if leader not in self.members:
            return None
        self._signal(leader, signal.SIGSTOP)
        return Fault("pause-leader", (leader,))

    def _pause_follower(self) -> Fault | None:
        followers = self._followers(self.rng.randrange(self._partitions()))
        if not followers:
            return None
        victim = self.rng.choice(followers)
        self._signal(victim, signal.SIGSTOP)
        return Fault("pause-follower", (victim,))

    def _partition_halves(self) -> Fault:
        shuffled = self.rng.sample(self.members, len(self.members))
        minority = set(shuffled[: max(1, (len(shuffled) - 1) // 2)])
        majority = set(shuffled) - minority
        cuts = {n: (majority if n in minority else minority) for n in self.members}
        self._cut({n: (peers, peers) for n, peers in cuts.items()})
        return Fault("partition-halves", tuple(sorted(minority)), {"majority": sorted(majority)})

    def _partition_bridge(self) -> Fault | None:
        if len(self.members) < 3:
            return None
        shuffled = self.rng.sample(self.members, len(self.members))
        bridge, rest = shuffled[0], shuffled[1:]
        left, right = set(rest[: len(rest) // 2]), set(rest[len(rest) // 2 :])
        cuts = dict.fromkeys(left, (right, right)) | dict.fromkeys(right, (left, left))
        self._cut(cuts)
        return Fault("partition-bridge", (bridge,), {"left": sorted(left), "right": sorted(right)})

    def _partition_oneway(self) -> Fault | None:
        if len(self.members) < 2:
            return None
        deaf, silenced = self.rng.sample(self.members, 2)
        # ``deaf`` hears nothing from ``silenced``; everything else, the other way included, flows.
        self._cut({deaf: (set(), {silenced}), silenced: ({deaf}, set())})
        return Fault("partition-oneway", (deaf, silenced), {"dropped": f"{silenced}->{deaf}"})

    def _corrupt_bitflip(self) -> Fault | None:
        return self._corrupt("bitflip")

    def _corrupt_truncate(self) -> Fault | None:
        return self._corrupt("truncate")

    def _corrupt(self, how: str) -> Fault | None:
        followers = self._followers(self.rng.randrange(self._partitions()))
        if not followers:
            return None
        victim = self.rng.choice(followers)
        stop_node(self.cluster, victim)
        # The live store's file: a store set aside after an earlier cut (log.lmdb.unrepairable-*) has one too.
        data = Path(self.cluster.nodes[victim].directory) / "data" / ENV_DIRNAME / "data.mdb"
        if not data.exists():
            start_node(self.cluster, victim)
            return None
        detail: dict[str, object] = {"file": str(data)}
        with data.open("r+b") as file:
            content = file.read()
            if how == "bitflip":
                # Inside a stored record (a value of this run), so the damage is to data, not to LMDB's tree;
                # every copy of that value in the file (LMDB keeps stale pages), so the live one is hit too.
                spots = _find_all(content, b"producer-", limit=10_000)
                if not spots:
                    start_node(self.cluster, victim)
                    return None
                value = _value_at(content, self.rng.choice(spots))
                at = self.rng.randrange(len(value))
                bit = self.rng.randrange(8)
                hits = [
                    spot
                    for spot in _find_all(content, value, limit=1_000)
                    if not _continues(content, spot + len(value))
                ]
                for spot in hits:
                    file.seek(spot + at)
                    file.write(bytes([content[spot + at] ^ (1 << bit)]))
                detail |= {"value": value.decode(), "byte": at, "bit": bit, "copies": len(hits)}
            else:
                size = len(content)
                keep = size - max(4096, self.rng.randrange(size // 4 + 1)) // 4096 * 4096
                file.truncate(max(4096, keep))
                detail |= {"size": size, "kept": max(4096, keep)}
        start_node(self.cluster, victim)
        return Fault(f"corrupt-{how}", (victim,), detail)

    def _disk_full(self) -> Fault | None:
        if self.disk_node is None or self.disk_node not in self.members:
            return None
        filler = self._filler()
        chunk = b"\0" * (1 << 20)
        # Unbuffered: a buffered file kept the tail of a chunk the disk had no room for and raised ENOSPC again
        # when it was closed, so the fault failed with its filler left behind (seed 23052).
        try:
            with filler.open("wb", buffering=0) as file:
                for _ in range(100_000):  # bounded: a filesystem image is far smaller than 100 GiB
                    try:
                        if file.write(chunk) < len(chunk):
                            break  # the disk is full (the next write would fail)
                    except OSError:
                        break
            size = filler.stat().st_size
        except OSError:
            with contextlib.suppress(FileNotFoundError):
                filler.unlink()
            raise
        return Fault("disk-full", (self.disk_node,), {"filler_bytes": size})

    def _churn(self) -> Fault | None:
        if len(self.members) < 3:
            return None
        leaving = self.rng.choice(self._active())
        joined = self._join()
        self._drain(leaving)
        return Fault("churn", (joined, leaving), {"joined": joined, "drained": leaving})

    def _finish_churn(self, fault: Fault) -> None:
        drained = int(str(fault.detail["drained"]))
        if self._await_drained(drained, time.monotonic() + self.drain_timeout_s):
            self._leave(drained)

    def _churn_undrain(self) -> Fault | None:
        joined = self._spare()
        node = self.rng.choice(self._active())
        self._drain(node)
        time.sleep(self.rng.uniform(*_UNDRAIN_AFTER_S))
        self._undrain(node)
        time.sleep(self.rng.uniform(*_UNDRAIN_AFTER_S))
        self._drain(node)
        return Fault("churn-undrain", (node,), {"drained": node, "joined": joined})

    def _finish_churn_undrain(self, fault: Fault) -> None:
        node = int(str(fault.detail["drained"]))
        self._await_drained(node, time.monotonic() + self.drain_timeout_s)
        # Drained or not, it becomes active again: the rebalancer moves replicas back to it.
        with contextlib.suppress(MultiraftError):
            self._undrain(node)

    def _churn_rejoin(self) -> Fault | None:
        joined = self._spare()
        node = self.rng.choice(self._active())
        self._drain(node)
        wipe = self.rng.random() < 0.5
        return Fault("churn-rejoin", (node,), {"drained": node, "joined": joined, "wipe": wipe})

    def _finish_churn_rejoin(self, fault: Fault) -> None:
        node = int(str(fault.detail["drained"]))
        if not self._await_drained(node, time.monotonic() + self.drain_timeout_s):
            with contextlib.suppress(MultiraftError):
                self._undrain(node)
            return
        removed = self._leave(node)
        data = Path(self.cluster.nodes[node].directory) / "data"
        wipe = removed and bool(fault.detail.get("wipe"))  # never the data of a node still holding replicas
        if wipe:
            # Children only: the data directory may be a mount point (the disk-full node's tmpfs).
            for child in list(data.iterdir()):
                if child.is_dir():
                    shutil.rmtree(child)
                else:
                    child.unlink()
        start_node(self.cluster, node)
        self.members.append(node)
        self.history.record("nemesis", "ok", "rejoin", node=node, removed=removed, wiped=wipe)

    # ------------------------------------------------------------------------------------------ churn steps

    def _active(self) -> list[int]:
        return [n for n in self.members if n not in self.draining]

    def _spare(self) -> int | None:
        """Add a node when draining one would leave fewer active nodes than the replication factor."""
        return self._join() if len(self._active()) <= self.replication else None

    def _join(self) -> int:
        joined = add_node(self.cluster, wait=True).node_id
        self.members.append(joined)
        self.history.record("nemesis", "ok", "join", node=joined)
        return joined

    def _drain(self, node: int) -> None:
        self.admin.drain_node(node)
        self.draining.add(node)
        self.history.record("nemesis", "ok", "drain", node=node)

    def _undrain(self, node: int) -> None:
        self.admin.undrain_node(node)
        self.draining.discard(node)
        self.history.record("nemesis", "ok", "undrain", node=node)

    def _await_drained(self, node: int, deadline: float) -> bool:
        """Until ``node`` holds no replica and leads nothing; False (recorded: a stalled drain) at ``deadline``."""
        status = "unknown"
        for _ in range(10_000):
            with contextlib.suppress(MultiraftError):
                drain = self.admin.drain_node(node)
                if drain.safe_to_stop:
                    self.history.record("nemesis", "ok", "drained", node=node)
                    return True
                moves = [f"{m.topic}/{m.partition} {m.from_node}->{m.to_node} {m.phase}"
                         for m in self.admin.describe_cluster().moves]  # fmt: skip
                status = f"{drain.replicas_left} replicas and {drain.leaders_left} leaders left; moves {moves}"
            if time.monotonic() > deadline:
                self.history.record("nemesis", "info", "drain", node=node, error=f"not drained in time, kept: {status}")
                return False
            time.sleep(0.5)
        return False

    def _leave(self, node: int) -> bool:
        """Stop the drained ``node`` and remove it from the cluster; False (recorded) if removal is refused."""
        deadline = time.monotonic() + self.drain_timeout_s
        stop_node(self.cluster, node)
        self.members.remove(node)
        self.draining.discard(node)
        for _ in range(100):
            try:
                self.admin.remove_node(node)
                break
            except MultiraftError as exc:
                if time.monotonic() > deadline:
                    self.history.record("nemesis", "info", "remove", node=node, error=repr(exc))
                    return False
                time.sleep(0.5)
        self.history.record("nemesis", "ok", "remove", node=node)
        return True

    # ----------------------------------------------------------------------------------------- helpers

    def _partitions(self) -> int:
        return len(self.admin.describe_topic(self.topic).partitions)

    def _leader(self, partition: int) -> int:
        return self.admin.describe_topic(self.topic).partitions[partition].leader

    def _followers(self, partition: int) -> list[int]:
        """The running members that replicate ``partition`` but do not lead it (at 5 or more nodes a
        partition lives on 3 of them); any member but its leader if none is known."""
        described = self.admin.describe_topic(self.topic).partitions[partition]
        followers = [n for n in described.replicas if n != described.leader and n in self.members]
        return followers or [n for n in self.members if n != described.leader]

    def _signal(self, node_id: int, signum: signal.Signals) -> None:
        node = self.cluster.nodes[node_id]
        if node.pid > 0 and _runs(node.pid, node.config_path):
            os.kill(node.pid, signum)

    def _cut(self, cuts: dict[int, tuple[set[int], set[int]]]) -> None:
        """Write every member's cuts file ({node: (drop_to, drop_from)}; absent: no cut) and tell it."""
        self._generation += 1
        gossip = {n.node_id: n.gossip_address for n in self.cluster.nodes.values()}
        failed: OSError | None = None
        for node_id in self.members:
            drop_to, drop_from = cuts.get(node_id, (set(), set()))
            plan = CutPlan(self._generation, frozenset(drop_to), frozenset(drop_from), gossip)
            path = Path(self.cluster.nodes[node_id].directory) / "data" / CUTS_FILE
            temporary = path.with_suffix(".tmp")
            try:
                temporary.write_text(plan.to_json())
                temporary.replace(path)
            except OSError as exc:  # every other node still gets its file: a heal must reach all it can
                failed = failed or exc
                with contextlib.suppress(OSError):
                    temporary.unlink()
                continue
            self._signal(node_id, signal.SIGUSR1)
        if failed is not None:
            raise failed

    def _filler(self) -> Path:
        assert self.disk_node is not None
        return Path(self.cluster.nodes[self.disk_node].directory) / "data" / "nemesis-filler"

    def _restart_stopped(self) -> None:
        stopped = [n for n in self.members if not _runs(self.cluster.nodes[n].pid, self.cluster.nodes[n].config_path)]
        for node_id in stopped:
            status = _reap(self.cluster.nodes[node_id].pid)
            if status:  # it stopped by itself (not a kill of ours): a finding worth its line in the history
                self.history.record("nemesis", "info", "node-exited", node=node_id, status=status)
            start_node(self.cluster, node_id)
        if stopped:
            wait_serving(self.cluster, stopped, timeout_s=_RESTART_TIMEOUT_S)


def kill_all_at_once(cluster: ClusterInfo) -> list[int]:
    """Freeze every running node (SIGSTOP), then SIGKILL them: none sees another stop, so none campaigns and
    appends an entry of a new term that the nodes already gone never get (a graceful stop, one node after
    another, does: its leaders hand over or time out). What stays on disk is what Raft made durable. Returns
    the ids that were running."""
    running = [n for n, node in sorted(cluster.nodes.items()) if node.pid > 0 and _runs(node.pid, node.config_path)]
    for node_id in running:
        with contextlib.suppress(ProcessLookupError):
            os.kill(cluster.nodes[node_id].pid, signal.SIGSTOP)
    for node_id in running:
        kill_node(cluster, node_id)
    return running


def _reap(pid: int) -> str:
    """How our child ``pid`` ended, if it had not been reaped yet ("" if unknown or already reaped)."""
    try:
        reaped, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return ""
    if reaped == 0:
        return ""
    return (
        f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit code {os.WEXITSTATUS(status)}"
    )


def _runs(pid: int, config_path: Path) -> bool:
    """Whether ``pid`` is still the node started with ``config_path`` (a recycled pid is not)."""
    try:
        return str(config_path).encode() in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False


def _value_at(content: bytes, start: int) -> bytes:
    """The whole value (``producer-N:M``) that starts at ``start`` (its key may follow it at once)."""
    match = _VALUE.match(content, start)
    return match.group(0) if match else content[start : start + len(b"producer-")]


def _continues(content: bytes, at: int) -> bool:
    """Whether a value's digits go on at ``at`` (``producer-0:12`` is a prefix of ``producer-0:123``)."""
    return at < len(content) and content[at] in b"0123456789"


def _find_all(content: bytes, needle: bytes, *, limit: int) -> list[int]:
    spots: list[int] = []
    at = content.find(needle)
    while at >= 0 and len(spots) < limit:
        spots.append(at)
        at = content.find(needle, at + 1)
    return spots
