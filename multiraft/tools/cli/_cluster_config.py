"""``multiraft cluster config get|set|reset``: dynamic cluster-wide settings (rpk's ``cluster config``)."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from multiraft.tools.cli._common import console
from multiraft.tools.cli._options import BootstrapOption, ClusterDirOption, TimeoutOption, open_admin, with_tls_options

__all__ = ["config_app"]

config_app = typer.Typer(
    help="Get and set dynamic cluster-wide settings (defaults of topic configs; no restart needed).",
    no_args_is_help=True,
)


@config_app.command("get")
@with_tls_options
def get(
    key: str = typer.Argument(None, metavar="[KEY]", help="One setting: print only its value."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON object: key -> {value, source, default}."),
    bootstrap: BootstrapOption = None,
    cluster_dir: ClusterDirOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Every setting with its value and source (DEFAULT_CONFIG or DYNAMIC_CLUSTER_CONFIG), or one value."""
    with open_admin(bootstrap, cluster_dir, timeout) as admin:
        configs = admin.describe_cluster_configs([key] if key else [])
    if as_json:
        payload = {c.name: {"value": c.value, "source": c.source, "default": c.default} for c in configs.values()}
        print(json.dumps(payload))
    elif key:
        print(configs[key].value)
    else:
        table = Table(title="cluster config")
        for column in ("key", "value", "source", "default"):
            table.add_column(column)
        for config in configs.values():
            table.add_row(config.name, config.value, config.source, config.default)
        console.print(table)


@config_app.command("set")
@with_tls_options
def set_(
    key: str = typer.Argument(..., metavar="KEY", help="Setting name (see `multiraft cluster config get`)."),
    value: str = typer.Argument(..., metavar="VALUE", help="New value."),
    bootstrap: BootstrapOption = None,
    cluster_dir: ClusterDirOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Set a setting cluster-wide; every node applies it without a restart."""
    with open_admin(bootstrap, cluster_dir, timeout) as admin:
        configs = admin.alter_cluster_configs(set={key: value})
    console.print(f"{key} = {configs[key].value}", highlight=False)


@config_app.command("reset")
@with_tls_options
def reset(
    key: str = typer.Argument(..., metavar="KEY", help="Setting name."),
    bootstrap: BootstrapOption = None,
    cluster_dir: ClusterDirOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Put a setting back to its default."""
    with open_admin(bootstrap, cluster_dir, timeout) as admin:
        configs = admin.alter_cluster_configs(delete=[key])
    console.print(f"{key} = {configs[key].value} (default)", highlight=False)
