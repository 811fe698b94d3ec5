"""One seeded nemesis run: start a local cluster, write and read under faults, heal, check.

:func:`run_once` is the whole run: a fresh cluster in its own directory (nodes with the debug cuts switch on),
a topic, the clients of :mod:`multiraft.tools.nemesis.clients`, a schedule of faults drawn from the seed (quiet,
inject, hold, heal, again until the duration ends), a final heal, a bounded wait for the cluster to
acknowledge writes again, a final read of every partition, the final placement of every replica and a
bounded wait for nodes to give back the logs of replicas moved off them (:mod:`multiraft.tools.nemesis.replicas`),
and an offline comparison of the placed replicas once the cluster has stopped (every node frozen, then
killed: a graceful stop, node after node, lets a leader that is left append an entry the stopped nodes never
get). Everything lands in ``history.jsonl`` in the run's directory, and
:func:`multiraft.tools.nemesis.checker.check` judges it. Every wait is bounded.
"""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from multiraft import Admin, Consumer, MultiraftError, TopicExistsError, UnknownTopicError
from multiraft.node.debug import DEBUG_ISOLATION
from multiraft.tools.launcher import ClusterInfo, cluster_down, cluster_up, load_cluster
from multiraft.tools.nemesis.checker import CheckResult, check
from multiraft.tools.nemesis.clients import AdminClient, ClientSettings, GroupClient, ProducerClient, ReaderClient
from multiraft.tools.nemesis.faults import FAULT_KINDS, Nemesis, kill_all_at_once
from multiraft.tools.nemesis.history import History
from multiraft.tools.nemesis.replicas import Placement, await_removals, compare_replicas, record_placement

__all__ = ["RunSettings", "RunResult", "run_once", "FAST_NODE_SETTINGS", "disk_faults_possible"]

FAST_NODE_SETTINGS: dict[str, object] = {
    "tick_ms": 25,
    "election_ticks": 10,  # an election timeout of 250 to 500 ms: pauses and cuts of 1 s or more outlast it
    "heartbeat_ticks": 2,
    "retention_check_ms": 200,
    "membership_profile": "local",
    # Below the disk-full fault's 48 MiB tmpfs, so that its node accepts topics until the filler runs.
    "min_free_disk_bytes": 8 << 20,
}
TOPIC = "nemesis"
_OFFSETS_TOPIC = "__consumer_offsets"
_FINAL_READ_TIMEOUT_S = 60.0
_DISK_BYTES = 48 << 20
_CLIENTS_OUTLIVE_S = 3_600.0
_PLACEMENT_ROUNDS = 3
_COMPARED_TOPICS = (TOPIC, _OFFSETS_TOPIC)


@dataclass(frozen=True)
class RunSettings:
    seed: int
    duration_s: float = 10.0
    """How long faults are injected, at least one of each kind (the run takes longer: start, heal, final
    read, comparison)."""
    faults: tuple[str, ...] = FAULT_KINDS
    nodes: int = 3
    """Nodes the cluster starts with (3 to 9); churn may add some. The topic has replication 3, so at 5 or
    more nodes its partitions live on some nodes only and rebalancing moves replicas between them."""
    partitions: int = 0
    """Partitions of the run's topic; 0: as many as nodes, at least 3 (every node leads about one)."""
    producers: int = 2
    hold_s: tuple[float, float] = (1.0, 2.5)
    """A fault lasts this long (uniform), longer than an election timeout."""
    quiet_s: tuple[float, float] = (0.5, 1.5)
    recovery_bound_s: float = 60.0
    settle_timeout_s: float = 60.0
    """How long the healed cluster may take to have every partition led and no follower behind."""
    drain_timeout_s: float = 60.0
    """How long a churn's drained node may take to empty (else it is kept, and the history says so)."""
    placement_timeout_s: float = 30.0
    """How long the settled cluster may take to agree on one placement with no replica move in flight."""
    removal_bound_s: float = 15.0
    """How long after the final placement a node may keep the log of a replica moved off it (its removal
    grace is 5 s, ``REMOVAL_GRACE_S`` in multiraft/node/scheduler/reconciler.py, plus a reconciler pass)."""

    @property
    def topic_partitions(self) -> int:
        return self.partitions or max(3, self.nodes)

    def validate(self) -> RunSettings:
        unknown = sorted(set(self.faults) - set(FAULT_KINDS))
        if unknown:
            raise ValueError(f"faults: unknown kinds {unknown}; known: {', '.join(FAULT_KINDS)}")
        if not self.faults:
            raise ValueError("faults: name at least one kind")
        if self.nodes < 3:
            raise ValueError(f"nodes: at least 3 (a quorum that survives a fault), got {self.nodes}")
        if self.nodes > 9:
            raise ValueError(f"nodes: at most 9 on one machine, got {self.nodes}")
        if self.duration_s <= 0:
            raise ValueError(f"duration_s: must be > 0, got {self.duration_s}")
        if self.partitions < 0:
            raise ValueError(f"partitions: must be >= 0 (0: as many as nodes), got {self.partitions}")
        return self


@dataclass
class RunResult:
    settings: RunSettings
    directory: Path
    check: CheckResult
    elapsed_s: float
    skipped: dict[str, str] = field(default_factory=dict)
    """Fault kinds that could not run here, with the reason."""

    @property
    def history_path(self) -> Path:
        return self.directory / "history.jsonl"

    @classmethod
    def failed(cls, settings: RunSettings, directory: Path, error: str) -> RunResult:
        """A run that could not be carried out (counted failed, with why)."""
        result = CheckResult(harness_errors=1)
        result.examples["harness_errors"] = [error[-2_000:]]
        return cls(settings, directory, result, 0.0)


def disk_faults_possible() -> str | None:
    """None if a small filesystem can be mounted here (root, tmpfs allowed), else why not."""
    if os.geteuid() != 0:
        return "disk-full needs root to mount a small tmpfs at a node's data directory"
    probe = Path(f"/tmp/multiraft-nemesis-probe-{os.getpid()}")
    probe.mkdir(exist_ok=True)
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(probe)], capture_output=True, check=False
        )
        if mounted.returncode:
            return f"mounting a tmpfs failed: {mounted.stderr.decode(errors='replace').strip()}"
        subprocess.run(["umount", str(probe)], check=False)
        return None
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()


def run_once(settings: RunSettings, directory: str | Path) -> RunResult:
    """Run one seeded nemesis run in ``directory`` (created; must not hold a running cluster)."""
    settings.validate()
    started = time.monotonic()
    root = Path(directory).resolve()
    root.mkdir(parents=True, exist_ok=True)
    rng = random.Random(settings.seed)
    faults = list(settings.faults)
    skipped: dict[str, str] = {}
    disk_node: int | None = None
    if "disk-full" in faults:
        reason = disk_faults_possible()
        if reason is None:
            disk_node = rng.randint(1, settings.nodes)
        else:
            skipped["disk-full"] = reason
            faults.remove("disk-full")
    with History(root / "history.jsonl") as history:
        history.record("runner", "info", "settings", seed=settings.seed, faults=faults, skipped=skipped,
                       nodes=settings.nodes, duration_s=settings.duration_s)  # fmt: skip
        with _mounted_disk(root, disk_node), _debug_cuts_on():
            cluster = cluster_up(root / "cluster", settings.nodes, FAST_NODE_SETTINGS)
            ending: tuple[list[int], Placement | None] = (sorted(cluster.nodes), None)
            try:
                try:
                    ending = _run(settings, cluster, history, rng, faults, disk_node)
                except Exception as exc:  # a harness failure fails this run, never the batch
                    history.record("runner", "fail", "harness", error=_failure(exc))
                history.record("runner", "ok", "stop", nodes=kill_all_at_once(cluster))
            finally:
                cluster_down(cluster.directory)
            members, placement = ending
            try:
                compare_replicas(load_cluster(cluster.directory), history, members, placement, _COMPARED_TOPICS)
            except Exception as exc:  # recorded: the checker counts a comparison not made
                history.record("runner", "fail", "replicas", error=_failure(exc))
        events = history.events()
    return RunResult(
        settings, root, check(events, recovery_bound_s=settings.recovery_bound_s), time.monotonic() - started, skipped
    )


def _failure(exc: BaseException) -> str:
    """What the history keeps of an exception that escaped a step of the run: its repr and where it came from."""
    frames = traceback.extract_tb(exc.__traceback__)[-3:]
    where = " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(frames))
    return f"{exc!r} at {where}"[-2_000:]


def _run(
    settings: RunSettings,
    cluster: ClusterInfo,
    history: History,
    rng: random.Random,
    faults: list[str],
    disk_node: int | None,
) -> tuple[list[int], Placement | None]:
    """The run up to the final read, the final placement and the removals; returns the member nodes (those
    not removed) and the placement (None if it could not be read)."""
    replication = min(3, settings.nodes)
    partitions = settings.topic_partitions
    admin = Admin(cluster.bootstrap, request_timeout_s=10)
    try:
        with contextlib.suppress(TopicExistsError):  # a retry after an attempt that timed out but created it
            admin.create_topic(TOPIC, partitions=partitions, replication_factor=replication)
        # The runner stops the clients; this bound only ends them if it cannot (heals can take minutes: a
        # drain, nodes that do not come back).
        client_deadline = time.monotonic() + settings.duration_s + _CLIENTS_OUTLIVE_S
        common = ClientSettings(cluster.bootstrap, TOPIC, partitions, history, deadline=client_deadline)
        producers = [ProducerClient(common, i, seed=rng.randrange(2**32)) for i in range(settings.producers)]
        readers = [ReaderClient(common), GroupClient(common), AdminClient(common, replication_factor=replication)]
        workers = [*producers, *readers]
        for worker in workers:
            worker.start()
        nemesis = Nemesis(
            cluster, admin, history, rng, topic=TOPIC, disk_node=disk_node, drain_timeout_s=settings.drain_timeout_s,
            replication=replication,
        )  # fmt: skip
        try:
            try:
                _schedule(settings, nemesis, rng, faults)
            finally:
                nemesis.heal_all()
                history.record("runner", "ok", "heal-all")
            _await_recovery(history, settings.recovery_bound_s)
        finally:  # also when the run fails: no client outlives it
            for worker in workers:
                worker.stop()
        _settle(admin, history, nemesis.members, settings.settle_timeout_s)
        _final_read(cluster.bootstrap, admin, history, partitions)
        placement = None
        for _ in range(_PLACEMENT_ROUNDS):  # a placement that changed while the nodes gave back logs is taken again
            again = record_placement(cluster, history, nemesis.members, _COMPARED_TOPICS, settings.placement_timeout_s)
            if again is None or again == placement:
                break
            placement = again
            await_removals(
                cluster, history, nemesis.members, placement, settings.removal_bound_s,
                counted=(_OFFSETS_TOPIC,), replication=replication,
            )  # fmt: skip
        return list(nemesis.members), placement
    finally:
        admin.close()


def _schedule(settings: RunSettings, nemesis: Nemesis, rng: random.Random, faults: list[str]) -> None:
    """Quiet, inject, hold, heal, until the duration ends and every kind has come up once; the kinds are
    dealt from shuffled decks, so every kind comes up once before any comes up twice."""
    deadline = time.monotonic() + settings.duration_s
    deck: list[str] = []
    for dealt in range(10_000):
        time.sleep(rng.uniform(*settings.quiet_s))
        if time.monotonic() > deadline and dealt >= len(faults):
            return
        if not deck:
            deck = rng.sample(faults, len(faults))
        nemesis.inject(deck.pop())
        time.sleep(rng.uniform(*settings.hold_s))
        nemesis.heal()


def _await_recovery(history: History, bound_s: float) -> None:
    """Until a write sent after the last heal is acknowledged (the checker measures it), at most ``bound_s``."""
    healed = history.now()
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        invoked = {e.value["value"]: e.time_s for e in history.events() if e.f == "send" and e.type == "invoke"}
        if any(
            e.f == "send" and e.type == "ok" and invoked.get(e.value["value"], -1.0) >= healed
            for e in history.events()[-2_000:]
        ):
            return
        time.sleep(0.2)


def _settle(admin: Admin, history: History, members: list[int], timeout_s: float) -> None:
    """Until every partition (the topic's and the offsets topic's) has a leader and no follower lags."""
    deadline = time.monotonic() + timeout_s
    last = ""
    for _ in range(10_000):
        try:
            topics = [admin.describe_topic(TOPIC)]
            with contextlib.suppress(UnknownTopicError):  # internal: it may not be described
                topics.append(admin.describe_topic(_OFFSETS_TOPIC))
            lagging = [
                f"{t.name}/{p.partition}"
                for t in topics
                for p in t.partitions
                if not p.leader or len(p.replica_lag) != len(p.replicas) - 1 or any(p.replica_lag.values())
            ]
            if not lagging:
                history.record("runner", "ok", "settle", members=members)
                return
            last = f"lagging: {lagging}"
        except MultiraftError as exc:
            last = repr(exc)
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    history.record("runner", "info", "settle", error=f"not settled in {timeout_s}s: {last}")


def _final_read(bootstrap: str, admin: Admin, history: History, partitions: int) -> None:
    """Every committed record of every partition, from the start to the high watermark. A partition whose
    high watermark cannot be had (no leader) is not read, and the others still are: the checker then counts
    only its acknowledged records as unreadable."""
    history.record("final", "invoke", "final-read")
    ends, unknown = _high_watermarks(admin, partitions)
    if not ends:
        history.record("final", "fail", "final-read", error=f"high watermarks: {unknown}")
        return
    rows: list[list[object]] = []
    deadline = time.monotonic() + _FINAL_READ_TIMEOUT_S
    with Consumer(bootstrap, auto_offset_reset="earliest", request_timeout_s=10) as consumer:
        consumer.assign([(TOPIC, p) for p in sorted(ends)], start="earliest")
        positions = dict.fromkeys(range(partitions), 0)
        last_error = ""
        for _ in range(100_000):
            if all(positions[p] >= ends.get(p, 0) for p in positions) or time.monotonic() > deadline:
                break
            try:
                records = consumer.poll(timeout_s=0.5, max_records=5_000)
            except MultiraftError as exc:
                if repr(exc) != last_error:  # the same error again and again is recorded once
                    last_error = repr(exc)
                    history.record("final", "info", "poll", error=last_error)
                time.sleep(0.2)
                continue
            for record in records:
                value = record.value.decode(errors="replace") if record.value is not None else None
                key = record.key.decode(errors="replace") if record.key is not None else None
                rows.append([record.partition, record.offset, key, value])
                positions[record.partition] = max(positions[record.partition], record.offset + 1)
    short = {p: (positions[p], ends.get(p, 0)) for p in positions if positions[p] < ends.get(p, 0)}
    if short or unknown:
        error = f"read up to (position, end): {short}; last error: {last_error or 'none'}"
        if unknown:
            error = f"high watermarks unknown: {unknown}; {error}"
        history.record("final", "fail", "final-read", error=error, rows=rows, positions=_by_name(positions))
    else:
        history.record("final", "ok", "final-read", rows=rows, positions=_by_name(positions))


def _high_watermarks(admin: Admin, partitions: int) -> tuple[dict[int, int], dict[int, str]]:
    """Each partition's high watermark, and why it is unknown for those no leader answered for."""
    try:
        return admin.list_offsets(TOPIC, "latest"), {}
    except MultiraftError:
        pass  # one partition without a leader fails the whole request: ask each alone
    ends: dict[int, int] = {}
    unknown: dict[int, str] = {}
    for partition in range(partitions):
        try:
            ends |= admin.list_offsets(TOPIC, "latest", [partition])
        except MultiraftError as exc:
            unknown[partition] = repr(exc)
    return ends, unknown


def _by_name(positions: dict[int, int]) -> dict[str, int]:
    return {str(p): n for p, n in positions.items()}


@contextlib.contextmanager
def _debug_cuts_on() -> Iterator[None]:
    """Nodes started meanwhile (the launcher passes its environment on) obey the harness's cuts files."""
    previous = os.environ.get(DEBUG_ISOLATION)
    os.environ[DEBUG_ISOLATION] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(DEBUG_ISOLATION, None)
        else:
            os.environ[DEBUG_ISOLATION] = previous


@contextlib.contextmanager
def _mounted_disk(root: Path, node_id: int | None) -> Iterator[None]:
    """A small tmpfs at ``node_id``'s data directory, for the disk-full fault (none: nothing to mount)."""
    if node_id is None:
        yield
        return
    target = root / "cluster" / f"n{node_id}" / "data"
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={_DISK_BYTES}", "tmpfs", str(target)], check=True)
    try:
        yield
    finally:
        for _ in range(20):  # a node that just stopped may hold the mount for a moment
            if subprocess.run(["umount", str(target)], capture_output=True, check=False).returncode == 0:
                break
            time.sleep(0.25)
