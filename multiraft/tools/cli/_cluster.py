"""``scripts/cluster`` and ``multiraft cluster``: the command line of :mod:`multiraft.tools.launcher`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from multiraft.tools.launcher import (
    ClusterInfo,
    add_node,
    cluster_down,
    cluster_start,
    cluster_status,
    cluster_up,
    kill_node,
    load_cluster,
    start_node,
    stop_node,
    wait_serving,
)

__all__ = ["cluster_app", "connect_instructions"]


cluster_app = typer.Typer(
    help="Local clusters on 127.0.0.1 (data, logs and PIDs under --dir); `cluster config`: cluster-wide settings."
)
_console = Console()


def _settings(values: list[str]) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep:
            raise typer.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--set")
        settings[key.strip()] = value.split(",") if key.strip() in ("seeds",) else _number_or_text(value)
    return settings


def _number_or_text(value: str) -> Any:
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            continue
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    return value


@cluster_app.command("up")
def up(
    directory: Path = typer.Option(..., "--dir", help="Directory for the cluster's data, logs and PIDs."),
    nodes: int = typer.Option(3, "--nodes", min=1, max=9, help="Number of nodes."),
    nodes_per_host: int = typer.Option(
        0,
        "--nodes-per-host",
        min=0,
        help="Pretend every N consecutive nodes share a machine (their config host is host-1, host-2, ...): "
        "placement then keeps each partition's replicas on distinct hosts. 0: no hosts.",
    ),
    set_: list[str] = typer.Option([], "--set", help="A node setting KEY=VALUE for every node (repeatable)."),
    secure: bool = typer.Option(
        False,
        "--secure",
        help="TLS on every port (a new CA and certificates in DIR/tls), encrypted gossip, SCRAM authentication "
        "and ACLs with an admin user (its password in DIR/tls/admin.password).",
    ),
) -> None:
    """Start a cluster on free loopback ports, wait until it serves, print the bootstrap address.

    With --secure, how to connect follows on stderr. A directory that holds a stopped cluster is refused at
    once: `start --dir DIR` restarts that one.
    """
    typer.echo(f"starting {nodes} node{'' if nodes == 1 else 's'} in {directory}; waiting until each serves", err=True)
    cluster = cluster_up(directory, nodes, _settings(set_), secure=secure, auth=secure, nodes_per_host=nodes_per_host)
    typer.echo(cluster.bootstrap)
    if cluster.secure:
        typer.echo(connect_instructions(cluster), err=True)


def connect_instructions(cluster: ClusterInfo) -> str:
    """How a client reaches a secure cluster: the CLI's variables and the client library's settings."""
    tls = cluster.tls
    return (
        f"TLS is on; certificates are in {tls['directory']}. Connect with:\n"
        f"  export MULTIRAFT_BOOTSTRAP={cluster.bootstrap}\n"
        f"  export MULTIRAFT_TLS_CA={tls['ca_file']}\n"
        f"  export MULTIRAFT_TLS_CERT={tls['cert_file']}\n"
        f"  export MULTIRAFT_TLS_KEY={tls['key_file']}\n"
        + (
            f"  export MULTIRAFT_USER={tls['user']}\n  export MULTIRAFT_PASSWORD_FILE={tls['password_file']}\n"
            if "password_file" in tls
            else ""
        )
        + f"or, in Python: TlsSettings(ca_file={tls['ca_file']!r}, cert_file={tls['cert_file']!r}, "
        f"key_file={tls['key_file']!r})"
        + (
            f", with user={tls['user']!r} and password=<the contents of {tls['password_file']}>"
            if "password_file" in tls
            else ""
        )
    )


@cluster_app.command("down")
def down(directory: Path = typer.Option(..., "--dir")) -> None:
    """Stop every node of the cluster (SIGTERM, then SIGKILL after 15 s)."""
    stopped = cluster_down(directory)
    _console.print(f"stopped nodes {stopped}" if stopped else "no node was running")


@cluster_app.command("status")
def status(directory: Path = typer.Option(..., "--dir"), as_json: bool = typer.Option(False, "--json")) -> None:
    """One line per node: pid, running, serving, addresses."""
    rows = cluster_status(directory)
    if as_json:
        typer.echo(json.dumps(rows))
        return
    table = Table()
    for column in ("node", "pid", "running", "serving", "client address", "peer address"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            str(row["node_id"]),
            str(row["pid"] or "-"),
            "yes" if row["running"] else "[red]no",
            "yes" if row["serving"] else "[red]no",
            row["client_address"],
            row["peer_address"],
        )
    _console.print(table)


@cluster_app.command("kill")
def kill(node_id: int = typer.Argument(...), directory: Path = typer.Option(..., "--dir")) -> None:
    """SIGKILL one node."""
    if not kill_node(load_cluster(directory), node_id):
        raise typer.Exit(1)


@cluster_app.command("start")
def start(
    node_id: int | None = typer.Argument(None, help="The node to start (default: every stopped node)."),
    directory: Path = typer.Option(..., "--dir"),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="Wait until the node serves again."),
) -> None:
    """Start a stopped node (or every stopped node) again with the same addresses and data.

    Without NODE_ID it restarts a whole cluster that `down` stopped, and prints its bootstrap address.
    """
    if node_id is None:
        typer.echo(f"starting the stopped nodes of {directory}; waiting until every node serves", err=True)
        cluster, started = cluster_start(directory, wait=wait)
        typer.echo(cluster.bootstrap)
        if not started:
            typer.echo("every node was already running", err=True)
        return
    cluster = load_cluster(directory)
    start_node(cluster, node_id)
    if wait:
        typer.echo(f"waiting until node {node_id} serves", err=True)
        wait_serving(cluster, [node_id])


@cluster_app.command("add")
def add(
    directory: Path = typer.Option(..., "--dir"),
    node_id: int = typer.Option(0, "--node-id", help="Id of the new node (default: one above the highest)."),
    rack: str = typer.Option("", "--rack", help="The new node's rack."),
    host: str = typer.Option("", "--host", help="The new node's host (default: as --nodes-per-host groups it)."),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="Wait until the node serves."),
) -> None:
    """Start a new node that joins the running cluster through its seeds."""
    node = add_node(load_cluster(directory), node_id or None, wait=wait, rack=rack, host=host)
    typer.echo(f"node {node.node_id} at {node.client_address}")


@cluster_app.command("stop")
def stop(node_id: int = typer.Argument(...), directory: Path = typer.Option(..., "--dir")) -> None:
    """Stop one node cleanly (SIGTERM)."""
    if not stop_node(load_cluster(directory), node_id):
        raise typer.Exit(1)


# --- issue 25: cluster-wide configuration (rpk cluster config) ---
from multiraft.tools.cli._cluster_config import config_app  # noqa: E402

cluster_app.add_typer(config_app, name="config")
# --- end issue 25 ---
