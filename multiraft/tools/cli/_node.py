"""``multiraft node start|config-reference|drain|remove``: run one node, or take one out of a cluster.

``start`` flags are generated from :class:`multiraft.config.node.NodeConfig`, so a new key is a new flag with its
doc. ``drain`` and ``remove`` are client commands with the usual connection options (``--bootstrap``,
``--cluster-dir``, ``--timeout``; see ``multiraft.tools.cli._options``).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import time
import typing
from pathlib import Path
from typing import Annotated, Any

import typer

from multiraft.tools.cli._options import BootstrapOption, ClusterDirOption, TimeoutOption, with_tls_options

__all__ = ["node_app"]

node_app = typer.Typer(
    help="Run a node, print its configuration reference, or drain and remove one.", no_args_is_help=True
)

NodeIdArgument = Annotated[int, typer.Argument(metavar="NODE_ID", min=1, help="The node's id.")]


def _with_config_options(command: Any) -> Any:
    """One ``--KEY`` flag per :class:`NodeConfig` field (its doc and unit as help), passed on as ``**flags``."""
    from multiraft.config.node import NodeConfig

    hints = typing.get_type_hints(NodeConfig)
    extra = []
    for config_field in dataclasses.fields(NodeConfig):
        kind = hints[config_field.name]
        # A bool key takes a value (``--peer-direct-writes false``, converted by load_config), as in the file.
        value_type: Any = {int: int, float: float}.get(kind, str)
        help_text = f"{config_field.metadata['doc']} [{config_field.metadata['unit']}]"
        if typing.get_origin(kind) is tuple:
            help_text += " Comma-separated."
        if kind is bool:
            help_text += " true or false."
        flag = f"--{config_field.name.replace('_', '-')}"
        option = typer.Option(
            flag,
            help=help_text,
            metavar="true|false" if kind is bool else None,
            rich_help_panel="Configuration (override the file)",
        )
        extra.append(
            inspect.Parameter(
                config_field.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=None,
                annotation=Annotated[value_type | None, option],
            )
        )
    signature = inspect.signature(command, eval_str=True)
    kept = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    command.__signature__ = signature.replace(parameters=[*kept, *extra])
    return command


@node_app.command("start")
@_with_config_options
def start(
    config_path: Annotated[Path | None, typer.Option("--config", dir_okay=False, help="TOML config file.")] = None,
    **flags: Any,
) -> None:
    """Start a node and serve until SIGTERM or SIGINT."""
    import asyncio

    from multiraft.config.node import load_config
    from multiraft.logging import configure_logging
    from rpc.server.front_door import run_node

    config = load_config(str(config_path) if config_path is not None else None, overrides=flags)
    configure_logging(config.log_level, json=config.log_format == "json")
    asyncio.run(run_node(config))


@node_app.command("config-reference")
def reference() -> None:
    """Print every configuration key with its unit, default and meaning (Markdown)."""
    from multiraft.config.node import config_reference

    typer.echo(config_reference(), nl=False)


@node_app.command("drain")
@with_tls_options
def drain(
    node_id: NodeIdArgument,
    wait: Annotated[
        bool, typer.Option("--wait/--no-wait", help="Follow the drain until the node is safe to stop.")
    ] = True,
    wait_timeout: Annotated[
        float, typer.Option("--wait-timeout", min=0, help="Give up waiting after this many s (0: never).")
    ] = 0.0,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Drain even if fewer active nodes would remain than a topic's replication factor."
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON lines instead of text.")] = False,
    bootstrap: BootstrapOption = None,
    cluster_dir: ClusterDirOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Move every replica and leadership off NODE_ID, then report it safe to stop.

    The controller keeps moving replicas after this command exits; run it again to see how far it got.
    Exits 1 if --wait-timeout passes first. Refused (DRAIN_REFUSED) when fewer active nodes would remain than
    a topic's replication factor, unless --force. `multiraft node undrain` reverts a drain.
    """
    from multiraft.tools.cli._options import count, fail, open_admin

    deadline = time.monotonic() + wait_timeout if wait_timeout else None
    last: tuple[int, int, bool] | None = None
    with open_admin(bootstrap, cluster_dir, timeout) as admin:
        while True:
            status = admin.drain_node(node_id, force=force)
            current = (status.replicas_left, status.leaders_left, status.safe_to_stop)
            if current != last:
                last = current
                if as_json:
                    typer.echo(json.dumps({"node_id": node_id, **dataclasses.asdict(status)}))
                elif status.safe_to_stop:
                    typer.echo(f"node {node_id} holds no replicas and leads nothing: safe to stop")
                else:
                    typer.echo(
                        f"node {node_id} draining: {count(status.replicas_left, 'replica')} and "
                        f"{count(status.leaders_left, 'leadership')} left"
                    )
            if status.safe_to_stop or not wait:
                return
            if deadline is not None and time.monotonic() > deadline:
                fail(f"node {node_id} still holds {count(status.replicas_left, 'replica')} after {wait_timeout:g} s")
            time.sleep(1.0)


@node_app.command("undrain")
@with_tls_options
def undrain(
    node_id: NodeIdArgument,
    bootstrap: BootstrapOption = None,
    cluster_dir: ClusterDirOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Make the draining NODE_ID active again (Redpanda's recommission).

    It may receive replicas again and the controller stops moving its replicas off. A removed node stays
    removed.
    """
    from multiraft.tools.cli._options import open_admin

    with open_admin(bootstrap, cluster_dir, timeout) as admin:
        admin.undrain_node(node_id)
    typer.echo(f"node {node_id} active")


@node_app.command("remove")
@with_tls_options
def remove(
    node_id: NodeIdArgument,
    bootstrap: BootstrapOption = None,
    cluster_dir: ClusterDirOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Forget NODE_ID. Refused (NODE_HAS_REPLICAS) while it still holds replicas: drain it first."""
    from multiraft.tools.cli._options import open_admin

    with open_admin(bootstrap, cluster_dir, timeout) as admin:
        admin.remove_node(node_id)
    typer.echo(f"node {node_id} removed")
