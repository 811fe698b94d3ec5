"""``multiraft node start|config-reference|drain|remove``: run one node, or take one out of a cluster.

``start`` flags are generated from :class:`multiraft.config.NodeConfig`, so a new key is a new flag with its
doc. ``drain`` and ``remove`` are client commands with the usual connection options (``--bootstrap``,
``--cluster-dir``, ``--timeout``; see ``multiraft.cli._options``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import typing
from pathlib import Path
from typing import Any

import click

from multiraft.config import NodeConfig, config_reference, load_config
from multiraft.logging import configure_logging

__all__ = ["node_group"]


@click.group("node", help="Run a node, print its configuration reference, or drain and remove one.")
def node_group() -> None:
    pass


def _config_options(command: Any) -> Any:
    hints = typing.get_type_hints(NodeConfig)
    for field in reversed(dataclasses.fields(NodeConfig)):
        kind = hints[field.name]
        click_type: Any = {int: int, float: float, bool: bool}.get(kind, str)
        help_text = f"{field.metadata['doc']} [{field.metadata['unit']}]"
        if typing.get_origin(kind) is tuple:
            help_text += " Comma-separated."
        command = click.option(
            f"--{field.name.replace('_', '-')}", field.name, type=click_type, default=None, help=help_text
        )(command)
    return command


@node_group.command("start")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None, help="TOML config file.")
@_config_options
def start(config_path: str | None, **flags: Any) -> None:
    """Start a node and serve until SIGTERM or SIGINT."""
    from rpc.server import run_node

    config = load_config(config_path, overrides=flags)
    configure_logging(config.log_level, json=config.log_format == "json")
    asyncio.run(run_node(config))


@node_group.command("config-reference")
def reference() -> None:
    """Print every configuration key with its unit, default and meaning (Markdown)."""
    click.echo(config_reference(), nl=False)


def _connection_options(command: Any) -> Any:
    from multiraft.cli._options import remember_tls

    for flag, variable, text in (
        ("--tls-key", "MULTIRAFT_TLS_KEY", "Key of --tls-cert."),
        ("--tls-cert", "MULTIRAFT_TLS_CERT", "Client certificate to present; needs --tls-key."),
        ("--tls-ca", "MULTIRAFT_TLS_CA", "Speak TLS; trust the nodes' certificates signed by this CA bundle."),
    ):
        command = click.option(
            flag, envvar=variable, metavar="PEM", default=None, expose_value=False, help=text,
            callback=lambda context, parameter, value: remember_tls(parameter.name, value),
        )(command)  # fmt: skip
    command = click.option(
        "--timeout", type=click.FloatRange(min=0.1), default=30.0, help="Seconds to wait for each request."
    )(command)
    command = click.option(
        "--cluster-dir",
        envvar="MULTIRAFT_CLUSTER_DIR",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="A local cluster's directory (`multiraft cluster up --dir`); used when no --bootstrap is given.",
    )(command)
    return click.option(
        "--bootstrap",
        "-b",
        envvar="MULTIRAFT_BOOTSTRAP",
        metavar="HOST:PORT[,HOST:PORT]",
        default=None,
        help="Addresses of one or more nodes.",
    )(command)


@node_group.command("drain")
@click.argument("node_id", type=click.IntRange(min=1))
@click.option("--wait/--no-wait", default=True, help="Follow the drain until the node is safe to stop.")
@click.option(
    "--wait-timeout", type=click.FloatRange(min=0), default=0.0, help="Give up waiting after this many s (0: never)."
)
@click.option(
    "--force", is_flag=True, help="Drain even if fewer active nodes would remain than a topic's replication factor."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines instead of text.")
@_connection_options
def drain(
    node_id: int,
    wait: bool,
    wait_timeout: float,
    force: bool,
    as_json: bool,
    bootstrap: str | None,
    cluster_dir: Path | None,
    timeout: float,
) -> None:
    """Move every replica and leadership off NODE_ID, then report it safe to stop.

    The controller keeps moving replicas after this command exits; run it again to see how far it got.
    Exits 1 if --wait-timeout passes first. Refused (DRAIN_REFUSED) when fewer active nodes would remain than
    a topic's replication factor, unless --force. `multiraft node undrain` reverts a drain.
    """
    from multiraft.cli._options import fail, open_admin

    deadline = time.monotonic() + wait_timeout if wait_timeout else None
    last: tuple[int, int, bool] | None = None
    with open_admin(bootstrap, cluster_dir, timeout) as admin:
        while True:
            status = admin.drain_node(node_id, force=force)
            current = (status.replicas_left, status.leaders_left, status.safe_to_stop)
            if current != last:
                last = current
                if as_json:
                    click.echo(json.dumps({"node_id": node_id, **dataclasses.asdict(status)}))
                elif status.safe_to_stop:
                    click.echo(f"node {node_id} holds no replicas and leads nothing: safe to stop")
                else:
                    click.echo(
                        f"node {node_id} draining: {status.replicas_left} replicas and {status.leaders_left} "
                        "leaderships left"
                    )
            if status.safe_to_stop or not wait:
                return
            if deadline is not None and time.monotonic() > deadline:
                fail(f"node {node_id} still holds {status.replicas_left} replicas after {wait_timeout:g}s")
            time.sleep(1.0)


@node_group.command("undrain")
@click.argument("node_id", type=click.IntRange(min=1))
@_connection_options
def undrain(node_id: int, bootstrap: str | None, cluster_dir: Path | None, timeout: float) -> None:
    """Make the draining NODE_ID active again (Redpanda's recommission): it may receive replicas again and the
    controller stops moving its replicas off. A removed node stays removed."""
    from multiraft.cli._options import open_admin

    with open_admin(bootstrap, cluster_dir, timeout) as admin:
        admin.undrain_node(node_id)
    click.echo(f"node {node_id} active")


@node_group.command("remove")
@click.argument("node_id", type=click.IntRange(min=1))
@_connection_options
def remove(node_id: int, bootstrap: str | None, cluster_dir: Path | None, timeout: float) -> None:
    """Forget NODE_ID. Refused (NODE_HAS_REPLICAS) while it still holds replicas: drain it first."""
    from multiraft.cli._options import open_admin

    with open_admin(bootstrap, cluster_dir, timeout) as admin:
        admin.remove_node(node_id)
    click.echo(f"node {node_id} removed")
