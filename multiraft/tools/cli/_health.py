"""``multiraft health``: is the cluster healthy? (``rpk cluster health``.)

Healthy means: a controller leader is known, no node is down (suspect, dead or unknown to the answering
node's member list), every partition has a leader, and none is under-replicated. ``--watch`` prints the
overview again whenever it changes, until Ctrl-C (or, with ``--exit-when-healthy``, until it is healthy).
Exits 0 when the last overview was healthy, 1 when not.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import typer

from multiraft.tools.cli._options import BootstrapOption, ClusterDirOption, TimeoutOption, open_admin, with_tls_options

if TYPE_CHECKING:
    from multiraft import Admin

__all__ = ["health", "Health", "overview"]

_DOWN_STATES = frozenset({"suspect", "dead", "unknown"})


@dataclass(frozen=True)
class Health:
    healthy: bool
    controller_id: int
    nodes: list[int]
    nodes_down: list[int]
    leaderless_partitions: list[str]
    under_replicated_partitions: list[str]


def overview(admin: Admin) -> Health:
    """One look at the cluster: its nodes, and every partition's leader and replicas."""
    cluster = admin.describe_cluster()
    topics = admin.list_topics()
    nodes = sorted(node.node_id for node in cluster.nodes if node.state != "removed")
    down = sorted(node.node_id for node in cluster.nodes if node.state in _DOWN_STATES)
    leaderless = sorted(f"{t.name}/{p.partition}" for t in topics for p in t.partitions if not p.leader)
    under = sorted(f"{topic}/{partition}" for topic, partition in cluster.under_replicated)
    healthy = bool(cluster.controller_id) and not down and not leaderless and not under
    return Health(healthy, cluster.controller_id, nodes, down, leaderless, under)


def _text(health: Health) -> str:
    def items(values: list[int] | list[str]) -> str:
        return "[" + " ".join(str(value) for value in values) + "]"

    rows = [
        ("Healthy:", str(health.healthy).lower()),
        ("Controller ID:", str(health.controller_id or "none")),
        ("All nodes:", items(health.nodes)),
        ("Nodes down:", items(health.nodes_down)),
        ("Leaderless partitions:", items(health.leaderless_partitions)),
        ("Under-replicated partitions:", items(health.under_replicated_partitions)),
    ]
    return "\n".join(f"{label:<30}{value}" for label, value in rows)


@with_tls_options
def health(
    watch: bool = typer.Option(False, "--watch", "-w", help="Print the overview again whenever it changes."),
    exit_when_healthy: bool = typer.Option(
        False, "--exit-when-healthy", "-e", help="With --watch: stop once the cluster is healthy."
    ),
    interval: float = typer.Option(2.0, "--interval", min=0.1, help="With --watch: seconds between looks."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object per overview."),
    bootstrap: BootstrapOption = None,
    cluster_dir: ClusterDirOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Is the cluster healthy? Nodes down, leaderless and under-replicated partitions; --watch to follow.

    Exits 0 when the (last) overview is healthy, 1 when not.
    """
    last: Health | None = None
    with open_admin(bootstrap, cluster_dir, timeout) as admin:
        while True:
            current = overview(admin)
            if current != last:
                if last is not None and not as_json:
                    typer.echo()
                typer.echo(json.dumps(asdict(current)) if as_json else _text(current))
                last = current
            if not watch or (exit_when_healthy and current.healthy):
                break
            time.sleep(interval)
    if not current.healthy:
        raise typer.Exit(1)
