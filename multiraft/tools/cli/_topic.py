"""``multiraft topic create|list|describe|delete|alter|add-partitions``."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from multiraft.tools.cli._common import console
from multiraft.tools.cli._options import (
    BootstrapOption,
    ClusterDirOption,
    TimeoutOption,
    count,
    fail,
    open_admin,
    with_tls_options,
)

if TYPE_CHECKING:
    from multiraft import ConfigEntry, TopicInfo

__all__ = ["topic_app", "partition_status", "format_replica_lag", "key_values", "print_table"]

_PIPE_WIDTH = 240

topic_app = typer.Typer(help="Create, list, describe, delete and alter topics.", no_args_is_help=True)


def key_values(items: list[str], option: str) -> dict[str, str]:
    """``["a=1", "b=2"]`` -> ``{"a": "1", "b": "2"}``; a malformed item is a usage error naming ``option``."""
    found: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint=option)
        found[key.strip()] = value
    return found


def format_replica_lag(leader: int, replicas: tuple[int, ...], lag: dict[int, int]) -> str:
    """``"2:0 3:12"``: log entries each follower is behind the leader; ``"-"`` when the cluster did not say."""
    if not lag:
        return "-"
    return " ".join(f"{node}:{lag.get(node, '?')}" for node in replicas if node != leader) or "-"


def print_table(table: Table) -> None:
    """A table on stdout; into a pipe or file it is not squeezed into 80 columns."""
    (console if console.is_terminal else Console(width=_PIPE_WIDTH)).print(table)


def partition_status(leader: int, replicas: tuple[int, ...], in_sync: tuple[int, ...], under: bool) -> Text:
    if not leader:
        return Text("no leader", style="bold red")
    if under or set(replicas) - set(in_sync):
        return Text("under-replicated", style="red")
    return Text("ok", style="green")


def _ids(nodes: tuple[int, ...]) -> str:
    return ",".join(str(n) for n in nodes) or "-"


def _print_json(payload: Any) -> None:
    sys.stdout.write(json.dumps(payload) + "\n")


@topic_app.command("create")
@with_tls_options
def create(
    name: str = typer.Argument(..., metavar="NAME", help="Topic name."),
    partitions: int = typer.Option(0, "--partitions", "-p", min=0, help="Partition count (0: the cluster default)."),
    replication_factor: int = typer.Option(
        0, "--replication-factor", "-r", min=0, help="Replicas per partition (0: the cluster default)."
    ),
    config: list[str] = typer.Option([], "--config", "-c", help="A topic config KEY=VALUE (repeatable)."),
    bootstrap: BootstrapOption = None,
    cluster_dir: ClusterDirOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Create a topic; returns once every partition has a leader."""
    configs = key_values(config, "--config")
    with open_admin(bootstrap, cluster_dir, timeout) as admin:
        topic = admin.create_topic(name, partitions=partitions, replication_factor=replication_factor, configs=configs)
    console.print(
        f"created topic {topic.name!r}: {count(len(topic.partitions), 'partition')}, "
        f"replication factor {topic.replication_factor}",
        highlight=False,
    )


@topic_app.command("list")
@with_tls_options
def list_(
    internal: bool = typer.Option(
        False, "--internal", "-i", help="Also list internal topics (__consumer_offsets), as rpk does."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON array instead of a table."),
    bootstrap: BootstrapOption = None,
    cluster_dir: ClusterDirOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Every topic with its partition count, replication factor and configs."""
    with open_admin(bootstrap, cluster_dir, timeout) as admin:
        topics = sorted(admin.list_topics(include_internal=internal), key=lambda t: t.name)
    if as_json:
        _print_json(
            [
                {
                    "name": t.name,
                    "partitions": len(t.partitions),
                    "replication_factor": t.replication_factor,
                    "configs": t.configs,
                    "internal": t.internal,
                }
                for t in topics
            ]
        )
        return
    if not topics:
        console.print("no topics")
        return
    table = Table(title="topics")
    table.add_column("topic")
    table.add_column("partitions", justify="right")
    table.add_column("replication factor", justify="right")
    table.add_column("configs")
    for topic in topics:
        configs = " ".join(f"{k}={v}" for k, v in sorted(topic.configs.items()))
        name = f"{topic.name} (internal)" if topic.internal else topic.name
        table.add_row(name, str(len(topic.partitions)), str(topic.replication_factor), configs or "-")
    print_table(table)


@topic_app.command("describe")
@with_tls_options
def describe(
    names: list[str] = typer.Argument(None, metavar="NAME", help="Topic names (several are described in turn)."),
    regex: list[str] = typer.Option(
        [], "--regex", "-r", help="Also every topic whose whole name matches this regular expression (repeatable)."
    ),
    print_partitions: bool = typer.Option(
        False, "--print-partitions", "-p", help="Print the partitions section (alone unless -c is given too)."
    ),
    print_configs: bool = typer.Option(
        False, "--print-configs", "-c", help="Print the configs section: every key, value and source (rpk's -c)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object per topic, one per line."),
    bootstrap: BootstrapOption = None,
    cluster_dir: ClusterDirOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Partitions (leader, replicas, ISR, log start, high watermark, replica lag) and configs of topics, with
    each config's source (DEFAULT_CONFIG or DYNAMIC_TOPIC_CONFIG); internal topics too."""
    wanted = list(dict.fromkeys(names or []))
    patterns = []
    for text in regex:
        try:
            patterns.append(re.compile(text))
        except re.error as exc:
            raise typer.BadParameter(f"{text!r} is not a regular expression: {exc}", param_hint="--regex") from exc
    if not wanted and not patterns:
        raise typer.BadParameter("name a topic, or give --regex", param_hint="NAME")
    with open_admin(bootstrap, cluster_dir, timeout) as admin:
        if patterns:
            matched = sorted(t.name for t in admin.list_topics() if any(p.fullmatch(t.name) for p in patterns))
            if not matched and not wanted:
                fail(f"no topic matches {', '.join(regex)}")
            wanted += [name for name in matched if name not in wanted]
        topics = [admin.describe_topic(name) for name in wanted]
    for index, topic in enumerate(topics):
        if as_json:
            payload = asdict(topic)
            for partition in payload["partitions"]:
                partition["under_replicated"] = bool(set(partition["replicas"]) - set(partition["in_sync_replicas"]))
            print(json.dumps(payload))
            continue
        if index:
            console.print()
        both = not print_partitions and not print_configs
        _print_topic(topic, partitions=both or print_partitions, configs=both or print_configs)


def _print_topic(topic: TopicInfo, *, partitions: bool = True, configs: bool = True) -> None:
    console.print(
        f"topic [bold]{topic.name}[/bold]: {count(len(topic.partitions), 'partition')}, "
        f"replication factor {topic.replication_factor}" + (", internal" if topic.internal else ""),
        highlight=False,
    )
    if partitions:
        _print_partitions(topic)
    if configs:
        _print_config_entries(topic.config_entries)


def _print_config_entries(entries: tuple[ConfigEntry, ...]) -> None:
    table = Table(title="configs")
    for column in ("key", "value", "source"):
        table.add_column(column)
    for entry in entries:
        table.add_row(entry.name, entry.value, entry.source + (" (read-only)" if entry.read_only else ""))
    print_table(table)


def _print_partitions(topic: TopicInfo) -> None:
    table = Table(title="partitions")
    for column in ("partition", "leader", "replicas", "ISR", "log start", "high watermark", "replica lag", "status"):
        table.add_column(
            column, justify="right" if column in ("partition", "leader", "log start", "high watermark") else "left"
        )
    for p in topic.partitions:
        table.add_row(
            str(p.partition),
            str(p.leader or "-"),
            _ids(p.replicas),
            _ids(p.in_sync_replicas),
            str(p.log_start_offset),
            str(p.high_watermark),
            format_replica_lag(p.leader, p.replicas, p.replica_lag),
            partition_status(p.leader, p.replicas, p.in_sync_replicas, False),
        )
    print_table(table)


def _print_configs(configs: dict[str, str]) -> None:
    if not configs:
        console.print("configs: cluster defaults")
        return
    table = Table(title="configs")
    table.add_column("key")
    table.add_column("value")
    for key, value in sorted(configs.items()):
        table.add_row(key, value)
    print_table(table)


@topic_app.command("delete")
@with_tls_options
def delete(
    name: str = typer.Argument(..., metavar="NAME", help="Topic name."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    bootstrap: BootstrapOption = None,
    cluster_dir: ClusterDirOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Delete a topic and every record in it (asks first unless --yes)."""
    if not yes:
        if not sys.stdin.isatty():
            fail(f"not deleting topic {name!r}: pass --yes to confirm (stdin is not a terminal)")
        if not typer.confirm(f"Delete topic {name!r} and all its records?", default=False):
            fail(f"topic {name!r} not deleted")
    with open_admin(bootstrap, cluster_dir, timeout) as admin:
        admin.delete_topic(name)
    console.print(f"deleted topic {name!r}", highlight=False)


@topic_app.command("alter")
@with_tls_options
def alter(
    name: str = typer.Argument(..., metavar="NAME", help="Topic name."),
    set_: list[str] = typer.Option([], "--set", "-s", help="Set a topic config KEY=VALUE (repeatable)."),
    delete_: list[str] = typer.Option([], "--delete", "-d", help="Reset a config KEY to the default (repeatable)."),
    bootstrap: BootstrapOption = None,
    cluster_dir: ClusterDirOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Change a topic's configs; prints the configs that result."""
    to_set = key_values(set_, "--set")
    if not to_set and not delete_:
        raise typer.BadParameter("give at least one --set KEY=VALUE or --delete KEY", param_hint="--set/--delete")
    with open_admin(bootstrap, cluster_dir, timeout) as admin:
        topic = admin.alter_topic_configs(name, set=to_set, delete=delete_)
    console.print(f"altered topic {topic.name!r}", highlight=False)
    _print_configs(topic.configs)


# ----------------------------------------------------------------------- adding partitions (issue 25)


@topic_app.command("add-partitions")
@with_tls_options
def add_partitions(
    names: list[str] = typer.Argument(..., metavar="TOPIC", help="Topic names (each grows the same way)."),
    num: int = typer.Option(0, "--num", "-n", min=0, help="Partitions to add to each topic (rpk's -n)."),
    total: int = typer.Option(
        0, "--partitions", "-p", min=0, help="The partition count to grow each topic to (kafka-topics --partitions)."
    ),
    bootstrap: BootstrapOption = None,
    cluster_dir: ClusterDirOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Add partitions to topics (never removes any); returns once the new partitions have leaders. Keys may
    map to other partitions afterwards, as in Kafka."""
    if (num > 0) == (total > 0):
        raise typer.BadParameter("give one of --num N (partitions to add) or --partitions TOTAL", param_hint="--num")
    with open_admin(bootstrap, cluster_dir, timeout) as admin:
        for name in dict.fromkeys(names):
            before = len(admin.describe_topic(name).partitions)
            topic = admin.create_partitions(name, before + num if num else total)
            console.print(
                f"topic {topic.name!r}: {before} -> {count(len(topic.partitions), 'partition')}", highlight=False
            )


# -------------------------------------------------------------------- end of adding partitions (issue 25)


# --- issue 25: trim-prefix (Kafka's DeleteRecords, rpk topic trim-prefix) ---


@topic_app.command("trim-prefix")
@with_tls_options
def trim_prefix(
    name: str = typer.Argument(..., metavar="TOPIC", help="Topic name."),
    offset: int = typer.Option(
        ..., "--offset", "-o", min=-1, help="Delete the records before this offset (-1: the high watermark)."
    ),
    partitions: list[str] = typer.Option(
        [], "--partitions", "-p", help="Partitions, comma-separated or repeated (default: every partition)."
    ),
    yes: bool = typer.Option(False, "--no-confirm", "--yes", "-y", help="Do not ask for confirmation."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object per partition, one per line."),
    bootstrap: BootstrapOption = None,
    cluster_dir: ClusterDirOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Delete the records before --offset in partitions of TOPIC, on every replica (asks first unless
    --no-confirm); prints each partition's new log start offset. Exit 1 if any partition failed."""
    from multiraft.errors import MultiraftError
    from multiraft.tools.cli._options import describe_error

    with open_admin(bootstrap, cluster_dir, timeout) as admin:
        wanted = _partition_numbers(partitions) or [p.partition for p in admin.describe_topic(name).partitions]
        if not yes:
            if not sys.stdin.isatty():
                fail(f"not deleting records of {name!r}: pass --no-confirm to confirm (stdin is not a terminal)")
            where = ", ".join(str(p) for p in wanted)
            if not typer.confirm(f"Delete the records before offset {offset} in {name!r} partitions {where}?"):
                fail("no records deleted")
        rows: list[tuple[int, int | None, str]] = []
        for partition in wanted:
            try:
                rows.append((partition, admin.delete_records({(name, partition): offset})[(name, partition)], ""))
            except MultiraftError as exc:
                rows.append((partition, None, describe_error(exc)))
    if as_json:
        for partition, start, error in rows:
            _print_json({"topic": name, "partition": partition, "new_start_offset": start, "error": error or None})
    else:
        table = Table(title=f"records deleted in {name}")
        for column in ("partition", "new start offset", "error"):
            table.add_column(column, justify="left" if column == "error" else "right")
        for partition, start, error in rows:
            table.add_row(str(partition), "-" if start is None else str(start), error or "-")
        print_table(table)
    if any(error for _, _, error in rows):
        raise typer.Exit(1)


def _partition_numbers(items: list[str]) -> list[int]:
    """``["0,1", "3"]`` -> ``[0, 1, 3]`` (rpk's -p takes a comma-separated list); a usage error otherwise."""
    numbers: set[int] = set()
    for item in items:
        for text in item.split(","):
            if not text.strip().isdigit():
                raise typer.BadParameter(f"expected partition numbers, got {item!r}", param_hint="--partitions")
            numbers.add(int(text))
    return sorted(numbers)


# --- end issue 25: trim-prefix ---
