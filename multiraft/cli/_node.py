"""``multiraft node start|config-reference``: run one node; every config key is also a flag.

Flags are generated from :class:`multiraft.config.NodeConfig`, so a new key is a new flag with its doc.
"""

from __future__ import annotations

import asyncio
import dataclasses
import typing
from typing import Any

import click

from multiraft.config import NodeConfig, config_reference, load_config
from multiraft.logging import configure_logging

__all__ = ["node_group"]


@click.group("node", help="Run a node, or print its configuration reference.")
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
    from multiraft.node import run_node

    config = load_config(config_path, overrides=flags)
    configure_logging(config.log_level, json=config.log_format == "json")
    asyncio.run(run_node(config))


@node_group.command("config-reference")
def reference() -> None:
    """Print every configuration key with its unit, default and meaning (Markdown)."""
    click.echo(config_reference(), nl=False)
