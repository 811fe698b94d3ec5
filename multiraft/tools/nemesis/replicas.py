"""Where the replicas are at the end of a run, whether nodes gave back what they no longer hold, and whether
the replicas that are placed agree.

Once a run has settled, :func:`record_placement` asks every member node for the final placement of the
run's topics (the controller state each node applied, through the Admin API) until they all agree and no
replica move is in flight, and records it (``placement``). :func:`await_removals` then polls every member's
log store, read-only while the node runs, until no node holds the log of a partition the placement does not
give it, within a bound (``removals``: ``ok``, or ``info`` naming what was kept). After the cluster is
stopped, :func:`compare_replicas` compares, offline, the logs of exactly the replicas the placement names
(``replicas``): a log a node still holds for a replica moved off it is not one of them.

The pure parts (:func:`placed_logs`, :func:`unplaced_logs`, :func:`compare_logs`) take plain values, so the
checks are tested without a cluster.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import lmdb

from multiraft import Admin, MultiraftError, UnknownTopicError
from multiraft.tools.launcher import ClusterInfo
from multiraft.tools.nemesis.history import History
from storage import LogStore, StorageError

# storage's layout: the environment's directory, and the main database's key prefix of log names
# ("topic/partition"); read here without the engine, because the running node holds the store open.
from storage._format import ENV_DIRNAME as _ENV_DIRNAME
from storage._format import LOG_NAMES as _LOG_NAMES

__all__ = [
    "Placement",
    "LogEntries",
    "record_placement",
    "await_removals",
    "compare_replicas",
    "placed_logs",
    "unplaced_logs",
    "compare_logs",
    "difference",
]

LogKey = tuple[str, int]
LogEntries = list[tuple[int, int, int, bytes]]
"""A replica's Raft log: (index, term, kind, payload) per entry."""

_POLL_S = 0.5
STABLE_S = 5.0
"""How long the agreed placement must hold with no move in flight before it is taken as final."""
_ASK_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Placement:
    """Per partition (``topic/partition``), the voters and learners the final controller state names."""

    replicas: dict[str, list[int]]
    learners: dict[str, list[int]]

    @classmethod
    def from_event(cls, value: Mapping[str, object]) -> Placement:
        def nodes(name: str) -> dict[str, list[int]]:
            raw = value.get(name, {})
            assert isinstance(raw, dict)
            return {str(k): [int(n) for n in v] for k, v in raw.items()}

        return cls(nodes("replicas"), nodes("learners"))


def _key_name(key: LogKey) -> str:
    return f"{key[0]}/{key[1]}"


def placed_logs(placement: Placement, node_id: int) -> set[str]:
    """The partitions whose log ``node_id`` may keep: those it is a voter or a learner of."""
    return {
        name
        for name in {*placement.replicas, *placement.learners}
        if node_id in placement.replicas.get(name, ()) or node_id in placement.learners.get(name, ())
    }


def unplaced_logs(
    placement: Placement,
    stored: Mapping[int, Iterable[LogKey]],
    *,
    counted: tuple[str, ...] = (),
    replication: int = 3,
) -> list[str]:
    """``node N: topic/partition`` for each log a node holds that the placement no longer gives it.

    Partitions the placement describes are judged by it. Those of the ``counted`` topics it cannot describe
    (``__consumer_offsets`` is internal: the Admin API does not describe it) are judged by their number of
    holders, which must not exceed ``replication``. Other topics' logs (the side topics) are not judged.
    """
    kept = []
    holders: dict[str, list[int]] = {}
    for node_id, keys in sorted(stored.items()):
        allowed = placed_logs(placement, node_id)
        for key in sorted(keys):
            name = _key_name(key)
            if name in placement.replicas and name not in allowed:
                kept.append(f"node {node_id}: {name}")
            elif name not in placement.replicas and key[0] in counted:
                holders.setdefault(name, []).append(node_id)
    for name, nodes in sorted(holders.items()):
        if len(nodes) > replication:
            kept.append(f"nodes {nodes}: {name} ({len(nodes)} stored copies of {replication} replicas)")
    return kept


def compare_logs(
    logs: Mapping[int, Mapping[LogKey, LogEntries]],
    placement: Placement | None,
    commits: Mapping[int, Mapping[LogKey, int]] | None = None,
) -> tuple[int, list[str], list[str]]:
    """Compare the logs of each partition's placed voters: (partitions compared, divergences, logs left out).

    Without a placement every stored log is compared (the run could not read one). A voter whose log is
    missing from its store is a divergence: the placement says it holds the partition.
    """
    divergent: list[str] = []
    left_out: list[str] = []
    compared = 0
    for key in sorted({k for node_logs in logs.values() for k in node_logs}):
        name = _key_name(key)
        holders = {n: node_logs[key] for n, node_logs in sorted(logs.items()) if key in node_logs}
        if placement is not None and name in placement.replicas:
            voters = [n for n in placement.replicas[name] if n in logs]
            left_out += [f"node {n}: {name}" for n in holders if n not in voters]
            missing = [n for n in voters if n not in holders]
            divergent += [f"{name}: node {n} is a replica and holds no log" for n in missing]
            holders = {n: holders[n] for n in voters if n in holders}
        if len(holders) < 2:
            continue
        compared += 1
        committed = None if commits is None else max(commits.get(n, {}).get(key, 0) for n in holders)
        (first_node, first), *others = holders.items()
        for node_id, other in others:
            found = difference(first, other, committed)
            if found:
                divergent.append(f"{name}: nodes {first_node} and {node_id} {found}")
    return compared, divergent, left_out


def difference(a: LogEntries, b: LogEntries, committed: int | None = None) -> str:
    """How two replicas' logs differ over the range both hold, or at their ends ("" if they agree).

    With ``committed`` (the highest commit index any of the partition's replicas stored), a log may end
    before the other only past it: a leader elected just before the stop appends an entry the frozen nodes
    never get, which Raft replaces or commits later. Without it, both must end at the same index."""
    if not a or not b:
        return "" if not a and not b else f"one is empty ({len(a)} vs {len(b)} entries)"
    if a[-1][0] != b[-1][0] and (committed is None or min(a[-1][0], b[-1][0]) < committed):
        at = "" if committed is None else f", committed {committed}"
        return f"end at different indexes ({a[-1][0]} vs {b[-1][0]}{at})"
    start = max(a[0][0], b[0][0])
    mine = a[start - a[0][0] :]
    theirs = b[start - b[0][0] :]
    for x, y in zip(mine, theirs, strict=False):
        if x != y:
            return f"differ at index {x[0]} (terms {x[1]} vs {y[1]}, {len(x[3])} vs {len(y[3])} bytes)"
    return ""


# ------------------------------------------------------------------------------------------- with a cluster


def _describe(admin: Admin, topics: Iterable[str]) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    replicas: dict[str, list[int]] = {}
    learners: dict[str, list[int]] = {}
    for topic in topics:
        try:
            described = admin.describe_topic(topic)
        except UnknownTopicError:  # __consumer_offsets exists only once a group used it
            continue
        for p in described.partitions:
            replicas[f"{topic}/{p.partition}"] = sorted(p.replicas)
            learners[f"{topic}/{p.partition}"] = sorted(p.learners)
    return replicas, learners


def record_placement(
    cluster: ClusterInfo,
    history: History,
    members: list[int],
    topics: tuple[str, ...],
    timeout_s: float,
    stable_s: float = STABLE_S,
) -> Placement | None:
    """Until every member describes the same placement, the controller has no move in flight, and both have
    held for ``stable_s`` (bounded), then record it (``placement``: ``ok``, or ``info`` with the controller
    leader's view when they never agreed). None if no node answered.

    The window matters: a new controller leader adopts the moves of the old one only at its first rebalancing
    round, so "no move in flight" can be true for a moment in the middle of a rebalance (seed 23025 recorded a
    placement 3 s before two more moves)."""
    # One Admin per node, bootstrapped with that node alone: it asks that node (it fetches no metadata that
    # would send it elsewhere), so each answer is that node's applied controller state.
    admins = {n: Admin(cluster.nodes[n].client_address, request_timeout_s=_ASK_TIMEOUT_S) for n in members}
    deadline = time.monotonic() + timeout_s
    views: dict[int, tuple[dict[str, list[int]], dict[str, list[int]]]] = {}
    moves: list[str] = []
    controller = 0
    settled: tuple[str, float] | None = None  # the agreed view, and since when it has held with no move
    try:
        for _ in range(10_000):
            views = {}
            for node_id, admin in admins.items():
                with contextlib.suppress(MultiraftError):
                    views[node_id] = _describe(admin, topics)
            moves = ["?"]
            for admin in admins.values():
                with contextlib.suppress(MultiraftError):
                    described = admin.describe_cluster()
                    controller = described.controller_id
                    moves = [f"{m.topic}/{m.partition} {m.from_node}->{m.to_node} {m.phase}" for m in described.moves]
                    break
            distinct = {repr(v) for v in views.values()}
            if len(views) == len(admins) and len(distinct) == 1 and not moves:
                agreed = next(iter(distinct))
                if settled is None or settled[0] != agreed:
                    settled = (agreed, time.monotonic())
                if time.monotonic() - settled[1] >= stable_s:
                    replicas, learners = next(iter(views.values()))
                    history.record(
                        "runner", "ok", "placement", replicas=replicas, learners=learners, controller=controller
                    )
                    return Placement(replicas, learners)
            else:
                settled = None
            if time.monotonic() > deadline:
                break
            time.sleep(_POLL_S)
    finally:
        for admin in admins.values():
            admin.close()
    if not views:
        history.record("runner", "fail", "placement", error=f"no member answered in {timeout_s}s")
        return None
    replicas, learners = views.get(controller, next(iter(views.values())))
    disagree = sorted(n for n, v in views.items() if v != (replicas, learners))
    history.record(
        "runner", "info", "placement", replicas=replicas, learners=learners, controller=controller,
        error=f"not stable in {timeout_s}s: moves {moves}; nodes {disagree} describe another placement; "
        f"nodes {sorted(set(members) - set(views))} did not answer",
    )  # fmt: skip
    return Placement(replicas, learners)


def stored_logs_live(data_dir: str | Path) -> set[LogKey]:
    """The logs in a node's store, read through a read-only LMDB transaction while the node runs (LMDB's
    lock file keeps the pages this reader sees from being reused under it)."""
    env_dir = Path(data_dir) / _ENV_DIRNAME
    if not (env_dir / "data.mdb").exists():
        return set()
    found: set[LogKey] = set()
    env = lmdb.open(str(env_dir), readonly=True, lock=True, max_dbs=0, subdir=True, create=False)
    try:
        with env.begin() as txn:
            cursor = txn.cursor()
            if cursor.set_range(_LOG_NAMES):
                for key in cursor.iternext(values=False):
                    if not bytes(key).startswith(_LOG_NAMES):
                        break
                    topic, _, partition = bytes(key[len(_LOG_NAMES) :]).decode().rpartition("/")
                    found.add((topic, int(partition)))
    finally:
        env.close()
    return found


def await_removals(
    cluster: ClusterInfo,
    history: History,
    members: list[int],
    placement: Placement,
    bound_s: float,
    *,
    counted: tuple[str, ...] = (),
    replication: int = 3,
) -> None:
    """Poll every member's store until none holds a log the placement does not give it, at most ``bound_s``
    from now; record ``removals`` (``ok`` with how long it took, or ``info`` naming what was kept)."""
    started = time.monotonic()
    kept: list[str] = []
    error = ""
    for _ in range(10_000):
        stored: dict[int, set[LogKey]] = {}
        error = ""
        for node_id in members:
            try:
                stored[node_id] = stored_logs_live(Path(cluster.nodes[node_id].directory) / "data")
            except (lmdb.Error, OSError, UnicodeDecodeError, ValueError) as exc:
                error = f"node {node_id}: {exc!r}"
        kept = unplaced_logs(placement, stored, counted=counted, replication=replication)
        waited = round(time.monotonic() - started, 3)
        if not kept and not error:
            history.record("runner", "ok", "removals", waited_s=waited, bound_s=bound_s)
            return
        if time.monotonic() - started > bound_s:
            break
        time.sleep(_POLL_S)
    history.record(
        "runner", "info", "removals", kept=kept, bound_s=bound_s,
        error=error or f"{len(kept)} logs of replicas moved off their node still stored after {bound_s}s",
    )  # fmt: skip


def compare_replicas(
    cluster: ClusterInfo, history: History, members: list[int], placement: Placement | None, topics: tuple[str, ...]
) -> None:
    """Offline (the cluster stopped), the Raft logs of the replicas the placement names, entry by entry over
    the range they share (a replica may have compacted a longer prefix), and every committed entry on each."""
    logs: dict[int, dict[LogKey, LogEntries]] = {}
    commits: dict[int, dict[LogKey, int]] = {}
    node_id = 0
    try:
        for node_id in members:
            with LogStore.open(Path(cluster.nodes[node_id].directory) / "data") as store:
                logs[node_id] = {}
                commits[node_id] = {}
                for topic, partition in store.logs():
                    if topic not in topics:
                        continue
                    log = store.log(topic, partition, create=False)
                    commits[node_id][(topic, partition)] = log.hard_state().commit
                    entries = log.entries(log.first_index(), log.last_index() + 1)
                    logs[node_id][(topic, partition)] = [
                        (e.index, e.term, int(e.kind), bytes(e.payload)) for e in entries
                    ]
    except (StorageError, OSError) as exc:
        history.record("runner", "fail", "replicas", error=f"node {node_id}: {exc!r}")
        return
    compared, divergent, left_out = compare_logs(logs, placement, commits)
    history.record("runner", "ok", "replicas", compared=compared, divergent=divergent, not_placed=left_out)
