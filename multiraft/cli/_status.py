"""``multiraft status``: nodes, controller, partitions and consumer groups of a running cluster."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table
from rich.text import Text

from multiraft.cli._common import console
from multiraft.cli._group_lag import GroupLag, group_lag, member_lags
from multiraft.cli._options import (
    BootstrapOption,
    ClusterDirOption,
    TimeoutOption,
    describe_error,
    open_admin,
    with_tls_options,
)
from multiraft.cli._topic import format_replica_lag, partition_status, print_table
from multiraft.errors import MultiraftError, UnknownTopicError

if TYPE_CHECKING:
    from rpc.client import Admin, ClusterInfo, TopicInfo

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


@dataclass
class _Snapshot:
    cluster: ClusterInfo
    topics: list[TopicInfo]
    groups: list[GroupLag] = field(default_factory=list)
    groups_error: str | None = None


def _snapshot(admin: Admin) -> _Snapshot:
    cluster = admin.describe_cluster()
    topics: list[TopicInfo] = []
    for listed in sorted(admin.list_topics(), key=lambda t: t.name):
        try:
            topics.append(admin.describe_topic(listed.name))
        except UnknownTopicError:  # deleted since it was listed
            continue
    snapshot = _Snapshot(cluster, topics)
    try:
        described = admin.describe_groups(admin.list_groups())
    except MultiraftError as exc:  # the rest of the status is still worth showing
        snapshot.groups_error = describe_error(exc)
        return snapshot
    failed: list[str] = []
    for name, description in described.items():
        try:
            if description.error is not None:
                raise description.error
            snapshot.groups.append(group_lag(admin, description))
        except MultiraftError as exc:  # one group's coordinator being away hides only that group
            failed.append(f"{name}: {describe_error(exc)}")
    snapshot.groups_error = "; ".join(failed) or None
    return snapshot


def _as_json(snapshot: _Snapshot) -> dict[str, Any]:
    cluster = snapshot.cluster
    loads = {load.node_id: load for load in cluster.loads}
    under = set(cluster.under_replicated)
    return {
        "cluster_id": cluster.cluster_id,
        "controller_id": cluster.controller_id,
        "nodes": [
            {
                "node_id": node.node_id,
                "address": node.client_address,
                "rack": node.rack,
                "state": node.state,
                "replicas": loads[node.node_id].replicas if node.node_id in loads else 0,
                "leaders": loads[node.node_id].leaders if node.node_id in loads else 0,
                "controller": node.node_id == cluster.controller_id,
            }
            for node in sorted(cluster.nodes, key=lambda n: n.node_id)
        ],
        "topics": [
            {
                "name": topic.name,
                "replication_factor": topic.replication_factor,
                "partitions": [
                    {
                        "partition": p.partition,
                        "leader": p.leader,
                        "replicas": list(p.replicas),
                        "in_sync_replicas": list(p.in_sync_replicas),
                        "log_start_offset": p.log_start_offset,
                        "high_watermark": p.high_watermark,
                        "replica_lag": {str(node): lag for node, lag in sorted(p.replica_lag.items())},
                        "under_replicated": (topic.name, p.partition) in under
                        or bool(set(p.replicas) - set(p.in_sync_replicas)),
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
            for m in cluster.moves
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


def _print_tables(snapshot: _Snapshot) -> None:
    cluster = snapshot.cluster
    loads = {load.node_id: load for load in cluster.loads}
    under = set(cluster.under_replicated)
    controller = f"node {cluster.controller_id}" if cluster.controller_id else "[red]none (no controller leader)"
    console.print(
        f"cluster [bold]{cluster.cluster_id}[/bold]  controller leader: {controller}  "
        f"partitions: {cluster.partitions}  under-replicated: {len(under)}  moves in flight: {len(cluster.moves)}",
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

    if not snapshot.topics:
        console.print("no topics")
    else:
        partitions = Table(title="partitions")
        for column in ("topic", "partition", "leader", "replicas", "ISR", "high watermark", "replica lag", "status"):
            partitions.add_column(
                column, justify="right" if column in ("partition", "leader", "high watermark") else "left"
            )
        for topic in snapshot.topics:
            for p in topic.partitions:
                partitions.add_row(
                    topic.name,
                    str(p.partition),
                    str(p.leader or "-"),
                    ",".join(map(str, p.replicas)),
                    ",".join(map(str, p.in_sync_replicas)) or "-",
                    str(p.high_watermark),
                    format_replica_lag(p.leader, p.replicas, p.replica_lag),
                    partition_status(p.leader, p.replicas, p.in_sync_replicas, (topic.name, p.partition) in under),
                )
        print_table(partitions)

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

    if snapshot.groups_error is not None:
        console.print(f"[yellow]consumer groups unavailable:[/yellow] {snapshot.groups_error}", highlight=False)
    if snapshot.groups:
        _print_groups(snapshot.groups)
    elif snapshot.groups_error is None:
        console.print("no consumer groups")


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
    timeout: TimeoutOption = 30.0,
) -> None:
    """Nodes, the controller leader, every partition (leader, replicas, ISR, lag), replica moves in flight (bytes
    copied, ETA) and consumer-group lag."""
    with open_admin(bootstrap, cluster_dir, timeout) as admin:
        snapshot = _snapshot(admin)
    if as_json:
        sys.stdout.write(json.dumps(_as_json(snapshot)) + "\n")
    else:
        _print_tables(snapshot)
