"""``multiraft status``: nodes, controller, partitions and consumer groups of a running cluster."""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table
from rich.text import Text

from multiraft.errors import MultiraftError, UnknownTopicError
from multiraft.tools.cli._common import console
from multiraft.tools.cli._consumer_group import PARTIAL_EXIT_CODE
from multiraft.tools.cli._consumer_group_lag import (
    GroupLag,
    high_watermarks,
    leader_answered,
    member_lags,
    partition_lags,
)
from multiraft.tools.cli._options import (
    BootstrapOption,
    ClusterDirOption,
    TimeoutOption,
    describe_error,
    open_admin,
    with_tls_options,
)
from multiraft.tools.cli._topic import format_replica_lag, partition_status, print_table

if TYPE_CHECKING:
    from multiraft import Admin, ClusterInfo, GroupDescription, PartitionInfo, TopicInfo

__all__ = ["status"]

_STATE_STYLES = {
    "active": "green",
    "alive": "green",
    "suspect": "yellow",
    "draining": "yellow",
    "dead": "bold red",
    "unreachable": "bold red",
    "left": "dim",
    "unknown": "dim",
    "removed": "dim",
}


_SECTIONS = ("cluster", "moves", "topics", "groups")  # moves come with the cluster's description
_WORKERS = 8  # topics described (groups' offsets read) at once


@dataclass
class _Section:
    """What one section of the status is doing, and how it ended: ``error`` is None when it got everything."""

    name: str
    step: str = "starting"
    done: bool = False
    error: str | None = None


@dataclass
class _GroupState:
    description: GroupDescription
    committed: dict[tuple[str, int], int]


@dataclass
class _Snapshot:
    """What the sections gathered (each fills its part; a section cut short leaves what it had)."""

    cluster: ClusterInfo | None = None
    topics: list[TopicInfo] = field(default_factory=list)
    groups: list[GroupLag] = field(default_factory=list)
    groups_error: str | None = None
    sections: dict[str, _Section] = field(default_factory=lambda: {name: _Section(name) for name in _SECTIONS})

    @property
    def complete(self) -> bool:
        return all(s.done and s.error is None for s in self.sections.values()) and self.groups_error is None


def _each_at_once(items: list[str], work: Callable[[str], None]) -> None:
    """``work(item)`` for every item, ``_WORKERS`` at a time: one that waits out its bound (a partition
    without a leader) costs that bound once, not once per item after it."""
    pending = list(reversed(items))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not pending:
                    return
                item = pending.pop()
            work(item)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(_WORKERS, len(items)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


class _Gatherer:
    """Runs each section in a daemon thread of its own against one deadline: a section stuck on a partition
    that cannot answer shows as unavailable, with what it was waiting for, and never holds up the others
    (nor the command's exit: daemon threads are not joined)."""

    def __init__(self, admin: Admin, timeout_s: float) -> None:
        self._admin = admin
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._snapshot = _Snapshot()
        self._topics: dict[str, TopicInfo] = {}
        self._groups: dict[str, _GroupState] = {}
        self._group_failures: list[str] = []

    def run(self) -> _Snapshot:
        deadline = time.monotonic() + self._timeout_s
        threads = [
            threading.Thread(target=self._section, args=(name, work), name=f"status-{name}", daemon=True)
            for name, work in self._work()
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return self._collect()

    def _work(self) -> list[tuple[str, Callable[[_Section], None]]]:
        return [("cluster", self._cluster), ("topics", self._topics_section), ("groups", self._groups_section)]

    def _section(self, name: str, work: Callable[[_Section], None]) -> None:
        section = self._snapshot.sections[name]
        try:
            work(section)
        except Exception as exc:
            with self._lock:
                section.error = f"{section.step}: {describe_error(exc)}"
        finally:
            with self._lock:
                section.done = True

    def _step(self, section: _Section, step: str) -> None:
        with self._lock:
            section.step = step

    # -------------------------------------------------------------------------------------------- sections

    def _cluster(self, section: _Section) -> None:
        self._step(section, "describing the cluster")
        cluster = self._admin.describe_cluster()
        with self._lock:
            self._snapshot.cluster = cluster

    def _topics_section(self, section: _Section) -> None:
        self._step(section, "listing the topics")
        names = sorted(t.name for t in self._admin.list_topics())
        self._step(section, f"describing {len(names)} topics")
        failures: list[str] = []

        def describe(name: str) -> None:
            try:
                described = self._admin.describe_topic(name)
            except UnknownTopicError:  # deleted since it was listed
                return
            except MultiraftError as exc:
                with self._lock:
                    failures.append(f"{name}: {describe_error(exc)}")
                return
            with self._lock:
                self._topics[name] = described

        _each_at_once(names, describe)
        if failures:
            with self._lock:
                section.error = "; ".join(sorted(failures))

    def _groups_section(self, section: _Section) -> None:
        self._step(section, "listing the consumer groups")
        listed = self._admin.list_groups_result()
        for missing in listed.unavailable:
            with self._lock:
                self._group_failures.append(
                    f"groups of {missing.topic}/{missing.partition} not listed: {describe_error(missing.error)}"
                )
        names = [g.group for g in listed.listings]
        if not names:
            return
        self._step(section, f"describing {len(names)} consumer groups")
        described = self._admin.describe_groups(names)
        self._step(section, f"reading the committed offsets of {len(names)} consumer groups")

        def offsets(name: str) -> None:
            description = described.get(name)
            try:
                if description is None:
                    raise MultiraftError("the cluster did not describe it")
                if description.error is not None:
                    raise description.error
                committed = self._admin.group_offsets(name)
            except MultiraftError as exc:  # one group's coordinator being away hides only that group
                with self._lock:
                    self._group_failures.append(f"{name}: {describe_error(exc)}")
                return
            found = {(tp.topic, tp.partition): offset for tp, offset in committed.items()}
            with self._lock:
                self._groups[name] = _GroupState(description, found)

        _each_at_once(names, offsets)

    # ------------------------------------------------------------------------------------------- collect

    def _collect(self) -> _Snapshot:
        with self._lock:
            snapshot = self._snapshot
            snapshot.topics = [self._topics[name] for name in sorted(self._topics)]
            ends = _log_ends(snapshot.topics)
            snapshot.groups = [
                GroupLag(g.description, tuple(partition_lags(g.description, g.committed, ends)))
                for _, g in sorted(self._groups.items())
            ]
            failures = sorted(self._group_failures)
            for section in snapshot.sections.values():
                if not section.done and section.name != "moves":
                    section.error = f"no answer within {self._timeout_s:g}s (was {section.step})"
            cluster, moves = snapshot.sections["cluster"], snapshot.sections["moves"]
            moves.done = True
            if snapshot.cluster is None:
                moves.error = cluster.error
            elif snapshot.cluster.moves_error is not None:
                moves.error = snapshot.cluster.moves_error
            groups = snapshot.sections["groups"]
            if groups.error is not None:
                failures.append(groups.error)
            snapshot.groups_error = "; ".join(failures) or None
            # A copy: the threads still running must not change what is being printed.
            return dataclasses.replace(
                snapshot, sections={name: dataclasses.replace(s) for name, s in snapshot.sections.items()}
            )


def _log_ends(topics: list[TopicInfo]) -> dict[tuple[str, int], int]:
    """The high watermark of each partition whose leader answered (a group's lag is unknown elsewhere)."""
    ends: dict[tuple[str, int], int] = {}
    for topic in topics:
        ends.update(high_watermarks(topic))
    return ends


def _as_json(snapshot: _Snapshot) -> dict[str, Any]:
    cluster = snapshot.cluster
    loads = {load.node_id: load for load in cluster.loads} if cluster is not None else {}
    under = set(cluster.under_replicated) if cluster is not None else set()
    return {
        "complete": snapshot.complete,
        "sections": {
            name: {"available": section.done and section.error is None, "error": section.error}
            for name, section in snapshot.sections.items()
        },
        "cluster_id": cluster.cluster_id if cluster is not None else None,
        "controller_id": cluster.controller_id if cluster is not None else None,
        "nodes": [
            {
                "node_id": node.node_id,
                "address": node.client_address,
                "rack": node.rack,
                "state": node.state,
                "replicas": loads[node.node_id].replicas if node.node_id in loads else 0,
                "leaders": loads[node.node_id].leaders if node.node_id in loads else 0,
                "controller": cluster is not None and node.node_id == cluster.controller_id,
            }
            for node in (sorted(cluster.nodes, key=lambda n: n.node_id) if cluster is not None else ())
        ],
        "topics": [
            {
                "name": topic.name,
                "replication_factor": topic.replication_factor,
                "partitions": [
                    {
                        "partition": p.partition,
                        "leader": p.leader if leader_answered(p) else 0,
                        "leader_answered": leader_answered(p),
                        "last_known_leader": p.leader,
                        "replicas": list(p.replicas),
                        "in_sync_replicas": list(p.in_sync_replicas),
                        "log_start_offset": p.log_start_offset if leader_answered(p) else None,
                        "high_watermark": p.high_watermark if leader_answered(p) else None,
                        "replica_lag": {str(node): lag for node, lag in sorted(p.replica_lag.items())},
                        "under_replicated": (topic.name, p.partition) in under
                        or bool(set(p.replicas) - set(p.in_sync_replicas)),
                        "quorum_in_sync": leader_answered(p) and _quorum_in_sync(p),
                    }
                    for p in topic.partitions
                ],
            }
            for topic in snapshot.topics
        ],
        "under_replicated": [{"topic": t, "partition": p} for t, p in sorted(under)],
        "moves": [
            {
                "topic": m.topic,
                "partition": m.partition,
                "from_node": m.from_node,
                "to_node": m.to_node,
                "phase": m.phase,
                "bytes_copied": m.bytes_copied,
                "bytes_total": m.bytes_total,
                "eta_seconds": m.eta_seconds,
            }
            for m in (cluster.moves if cluster is not None else ())
        ],
        "groups": [
            {
                "group": g.description.group,
                "topic": p.topic,
                "partition": p.partition,
                "committed": p.committed,
                "log_end_offset": p.log_end,
                "lag": p.lag,
                "member_id": p.member.member_id if p.member else None,
            }
            for g in snapshot.groups
            for p in g.partitions
        ],
        "group_summaries": [
            {
                "group": g.description.group,
                "state": g.description.state,
                "members": len(g.description.members),
                "lag": g.total_lag,
            }
            for g in snapshot.groups
        ],
        "group_members": [
            {
                "group": g.description.group,
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "partitions": len(m.assignment),
                "lag": member_lags(g.description, g.partitions).get(m.member_id),
            }
            for g in snapshot.groups
            for m in g.description.members
        ],
        "groups_error": snapshot.groups_error,
    }


def _unavailable(what: str, error: str | None) -> None:
    console.print(f"[yellow]{what} unavailable:[/yellow] {error}", highlight=False, soft_wrap=True)


def _print_tables(snapshot: _Snapshot) -> None:
    cluster = snapshot.cluster
    sections = snapshot.sections
    if cluster is None:
        _unavailable("cluster, nodes and replica moves", sections["cluster"].error)
        under: set[tuple[str, int]] = set()
    else:
        _print_cluster(cluster)
        under = set(cluster.under_replicated)

    if sections["topics"].error is not None:
        _unavailable("topics" if not snapshot.topics else "some topics", sections["topics"].error)
    if snapshot.topics:
        partitions = Table(title="partitions")
        for column in ("topic", "partition", "leader", "replicas", "ISR", "high watermark", "replica lag", "status"):
            partitions.add_column(
                column, justify="right" if column in ("partition", "leader", "high watermark") else "left"
            )
        for topic in snapshot.topics:
            for p in topic.partitions:
                answered = leader_answered(p)
                partitions.add_row(
                    topic.name,
                    str(p.partition),
                    str(p.leader or "-") if answered else "-",
                    ",".join(map(str, p.replicas)),
                    ",".join(map(str, p.in_sync_replicas)) or "-",
                    str(p.high_watermark) if answered else "?",
                    format_replica_lag(p.leader, p.replicas, p.replica_lag),
                    _partition_status(p, (topic.name, p.partition) in under) if answered else _no_answer(p.leader),
                )
        print_table(partitions)
    elif sections["topics"].error is None:
        console.print("no topics")

    if snapshot.groups_error is not None:
        _unavailable("consumer groups" if not snapshot.groups else "some consumer groups", snapshot.groups_error)
    if snapshot.groups:
        _print_groups(snapshot.groups)
    elif snapshot.groups_error is None:
        console.print("no consumer groups")


def _quorum_in_sync(partition: PartitionInfo) -> bool:
    """Whether a majority of the replicas is in sync: below it the leader cannot commit (writes wait)."""
    return len(set(partition.in_sync_replicas) & set(partition.replicas)) > len(partition.replicas) // 2


def _partition_status(partition: PartitionInfo, under: bool) -> Text:
    if partition.leader and not _quorum_in_sync(partition):
        in_sync = ",".join(map(str, partition.in_sync_replicas)) or "none"
        return Text(f"no quorum in sync ({in_sync} of {len(partition.replicas)}): writes wait", style="bold red")
    return partition_status(partition.leader, partition.replicas, partition.in_sync_replicas, under)


def _no_answer(last_known: int) -> Text:
    """A partition no leader answered for (in the node's bound): no leader elected, or the one known is away."""
    known = f" (last known leader: node {last_known})" if last_known else ""
    return Text(f"no leader answering{known}", style="bold red")


def _print_cluster(cluster: ClusterInfo) -> None:
    loads = {load.node_id: load for load in cluster.loads}
    under = set(cluster.under_replicated)
    controller = f"node {cluster.controller_id}" if cluster.controller_id else "[red]none (no controller leader)"
    console.print(
        f"cluster [bold]{cluster.cluster_id}[/bold]  controller leader: {controller}  "
        f"partitions: {cluster.partitions}  under-replicated: {len(under)}  "
        f"moves in flight: {len(cluster.moves) if cluster.moves_error is None else '?'}",
        highlight=False,
    )

    nodes = Table(title="nodes")
    for column in ("node", "address", "rack", "state", "replicas", "leaders"):
        nodes.add_column(column, justify="right" if column in ("node", "replicas", "leaders") else "left")
    for node in sorted(cluster.nodes, key=lambda n: n.node_id):
        load = loads.get(node.node_id)
        label = f"{node.node_id} (controller)" if node.node_id == cluster.controller_id else str(node.node_id)
        nodes.add_row(
            label,
            node.client_address,
            node.rack or "-",
            Text(node.state, style=_STATE_STYLES.get(node.state, "")),
            str(load.replicas if load else 0),
            str(load.leaders if load else 0),
        )
    print_table(nodes)

    if cluster.moves_error is not None:
        _unavailable("replica moves in flight", cluster.moves_error)
    if cluster.moves:
        moves = Table(title="replica moves in flight")
        for column in ("topic", "partition", "from", "to", "phase", "copied", "ETA"):
            moves.add_column(column, justify="left" if column in ("topic", "phase") else "right")
        for m in cluster.moves:
            moves.add_row(
                m.topic,
                str(m.partition),
                str(m.from_node or "-"),
                str(m.to_node),
                m.phase,
                _copied(m.bytes_copied, m.bytes_total),
                f"{m.eta_seconds:.0f}s" if m.eta_seconds > 0 else "-",
            )
        print_table(moves)


def _print_groups(lagged: list[GroupLag]) -> None:
    groups = Table(title="consumer groups")
    for column in ("group", "state", "members", "lag"):
        groups.add_column(column, justify="right" if column in ("members", "lag") else "left")
    for g in lagged:
        groups.add_row(g.description.group, g.description.state, str(len(g.description.members)), _lag(g.total_lag))
    print_table(groups)

    if any(g.description.members for g in lagged):
        members = Table(title="group members")
        for column in ("group", "member", "client", "host", "partitions", "lag"):
            members.add_column(column, justify="right" if column in ("partitions", "lag") else "left")
        for g in lagged:
            lags = member_lags(g.description, g.partitions)
            for m in g.description.members:
                members.add_row(
                    g.description.group,
                    m.member_id,
                    m.client_id,
                    m.client_host,
                    str(len(m.assignment)),
                    _lag(lags.get(m.member_id)),
                )
        print_table(members)

    if any(g.partitions for g in lagged):
        partitions = Table(title="group partitions")
        for column in ("group", "topic", "partition", "committed", "lag", "member"):
            partitions.add_column(column, justify="right" if column in ("partition", "committed", "lag") else "left")
        for g in lagged:
            for p in g.partitions:
                partitions.add_row(
                    g.description.group,
                    p.topic,
                    str(p.partition),
                    "-" if p.committed is None else str(p.committed),
                    _lag(p.lag),
                    p.member.member_id if p.member else "-",
                )
        print_table(partitions)


def _lag(lag: int | None) -> Text:
    return Text("-" if lag is None else str(lag), style="yellow" if lag else "")


def _copied(copied: int, total: int) -> str:
    if total <= 0:
        return "-"
    return f"{copied / 1e6:.1f}/{total / 1e6:.1f} MB ({100 * copied / total:.0f}%)"


@with_tls_options
def status(
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
    bootstrap: BootstrapOption = None,
    cluster_dir: ClusterDirOption = None,
    timeout: TimeoutOption = 10.0,
) -> None:
    """Nodes, the controller leader, every partition (leader, replicas, ISR, lag), replica moves in flight (bytes
    copied, ETA) and consumer-group lag.

    The sections (cluster with its replica moves, topics, consumer groups) are asked at once, each within --timeout; one
    that cannot answer in time (a partition without a leader, a node away) is shown as unavailable with the
    reason, beside what the others got. Exits 3 when part of the status is missing."""
    with open_admin(bootstrap, cluster_dir, timeout) as admin:
        snapshot = _Gatherer(admin, timeout).run()
    if as_json:
        sys.stdout.write(json.dumps(_as_json(snapshot)) + "\n")
    else:
        _print_tables(snapshot)
    if not snapshot.complete:
        raise typer.Exit(PARTIAL_EXIT_CODE)
