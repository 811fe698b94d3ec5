"""``multiraft group list|describe|delete|reset-offsets``: consumer groups, as ``kafka-consumer-groups`` shows them."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table
from rich.text import Text

from multiraft.errors import MultiraftError, UnknownMemberError
from multiraft.tools.cli._common import console
from multiraft.tools.cli._consumer_group_lag import GroupLag, group_lag, member_lags
from multiraft.tools.cli._consumer_group_reset import (
    PartitionState,
    PlannedOffset,
    parse_topic_scope,
    plan_reset,
    reset_spec,
)
from multiraft.tools.cli._options import (
    BootstrapOption,
    ClusterDirOption,
    TimeoutOption,
    describe_error,
    fail,
    open_admin,
    with_tls_options,
)
from multiraft.tools.cli._topic import print_table

if TYPE_CHECKING:
    from multiraft import Admin, GroupDescription, UnavailablePartition
    from multiraft.tools.cli._consumer_group_reset import ResetSpec

__all__ = ["group_app", "describe_payload", "plan_payload", "PARTIAL_EXIT_CODE"]

PARTIAL_EXIT_CODE = 3
"""Exit code of a command that printed only part of its answer: the rest (named on stderr) did not answer."""

group_app = typer.Typer(
    help="List, describe and delete consumer groups; reset their committed offsets.", no_args_is_help=True
)

_STATE_STYLES = {
    "Stable": "green",
    "Empty": "dim",
    "Dead": "dim",
    "PreparingRebalance": "yellow",
    "CompletingRebalance": "yellow",
}


def _print_json(payload: Any) -> None:
    sys.stdout.write(json.dumps(payload) + "\n")


def _dash(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


def _active_members_message(group: str, description: GroupDescription) -> str:
    return (
        f"group {group!r} has active members ({len(description.members)}, state {description.state}); "
        "stop them first: offsets can only be reset while the group is inactive"
    )


@group_app.command("list")
@with_tls_options
def list_(
    as_json: bool = typer.Option(False, "--json", help="Print a JSON array instead of a table."),
    bootstrap: BootstrapOption = None,
    cluster_dir: ClusterDirOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Every consumer group (members or committed offsets) with its state, protocol type and member count.

    Every ``__consumer_offsets`` partition is asked at once; one without a leader is named on stderr and its
    groups are missing from the list, which is then partial: exit code 3."""
    with open_admin(bootstrap, cluster_dir, timeout) as admin:
        result = admin.list_groups_result()
    listings = result.listings
    if as_json:
        _print_json(
            [
                {"group": g.group, "state": g.state, "protocol_type": g.protocol_type, "members": g.members}
                for g in listings
            ]
        )
    elif listings:
        table = Table(title="consumer groups")
        for column in ("group", "state", "protocol", "members"):
            table.add_column(column, justify="right" if column == "members" else "left")
        for g in listings:
            table.add_row(
                g.group, Text(g.state, style=_STATE_STYLES.get(g.state, "")), _dash(g.protocol_type), str(g.members)
            )
        print_table(table)
    elif result.complete:
        console.print("no consumer groups")
    _warn_unavailable(result.unavailable)
    if not result.complete:
        raise typer.Exit(PARTIAL_EXIT_CODE)


def _warn_unavailable(unavailable: Iterable[UnavailablePartition]) -> None:
    """One stderr line per partition that did not answer (so stdout stays the listing, JSON or not)."""
    for missing in unavailable:
        print(
            f"warning: groups of {missing.topic}/{missing.partition} not listed: {describe_error(missing.error)}",
            file=sys.stderr,
        )


def describe_payload(lagged: GroupLag, coordinator_address: str | None) -> dict[str, Any]:
    """The JSON of ``group describe --json``."""
    d = lagged.description
    lags = member_lags(d, lagged.partitions)
    return {
        "group": d.group,
        "state": d.state,
        "protocol_type": d.protocol_type,
        "assignor": d.protocol,
        "generation": d.generation,
        "leader_id": d.leader_id,
        "coordinator": {"node_id": d.coordinator_id, "address": coordinator_address},
        "lag": lagged.total_lag,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "session_timeout_ms": m.session_timeout_ms,
                "topics": list(m.topics),
                "assignment": [{"topic": tp.topic, "partition": tp.partition} for tp in m.assignment],
                "lag": lags.get(m.member_id),
            }
            for m in d.members
        ],
        "partitions": [
            {
                "topic": p.topic,
                "partition": p.partition,
                "committed": p.committed,
                "log_end_offset": p.log_end,
                "lag": p.lag,
                "member_id": p.member.member_id if p.member else None,
                "client_id": p.member.client_id if p.member else None,
                "client_host": p.member.client_host if p.member else None,
            }
            for p in lagged.partitions
        ],
    }


def _print_description(lagged: GroupLag, coordinator_address: str | None) -> None:
    d = lagged.description
    coordinator = f"node {d.coordinator_id}" if d.coordinator_id else "unknown"
    if d.coordinator_id and coordinator_address:
        coordinator += f" ({coordinator_address})"
    console.print(
        f"group [bold]{d.group}[/bold]  state: {d.state}  assignor: {_dash(d.protocol)}  generation: {d.generation}  "
        f"coordinator: {coordinator}  members: {len(d.members)}  lag: {_dash(lagged.total_lag)}",
        highlight=False,
        soft_wrap=True,
    )
    if d.state == "Dead" and not lagged.partitions:
        console.print(f"group {d.group!r} does not exist (no members, no committed offsets)", highlight=False)
        return
    if lagged.partitions:
        table = Table(title="partitions")
        for column in ("topic", "partition", "committed", "log end", "lag", "member", "client", "host"):
            table.add_column(
                column, justify="right" if column in ("partition", "committed", "log end", "lag") else "left"
            )
        for p in lagged.partitions:
            table.add_row(
                p.topic,
                str(p.partition),
                _dash(p.committed),
                _dash(p.log_end),
                Text(_dash(p.lag), style="yellow" if p.lag else ""),
                _dash(p.member.member_id if p.member else None),
                _dash(p.member.client_id if p.member else None),
                _dash(p.member.client_host if p.member else None),
            )
        print_table(table)
    if d.members:
        lags = member_lags(d, lagged.partitions)
        table = Table(title="members")
        for column in ("member", "instance", "client", "host", "partitions", "lag"):
            table.add_column(column, justify="right" if column in ("partitions", "lag") else "left")
        for m in d.members:
            leader = " (leader)" if m.member_id == d.leader_id else ""
            table.add_row(
                m.member_id + leader,
                _dash(m.group_instance_id),
                m.client_id,
                m.client_host,
                str(len(m.assignment)),
                _dash(lags.get(m.member_id)),
            )
        print_table(table)


def _described(group: str, description: GroupDescription | None) -> GroupDescription:
    if description is None:
        fail(f"the cluster did not describe group {group!r}")
    if description.error is not None:
        fail(f"cannot describe group {group!r}: {describe_error(description.error)}")
    return description


def _describe_one(admin: Admin, group: str) -> GroupDescription:
    return _described(group, admin.describe_groups([group]).get(group))


@group_app.command("describe")
@with_tls_options
def describe(
    groups: list[str] = typer.Argument(None, metavar="GROUP...", help="Consumer groups.", show_default=False),
    all_groups: bool = typer.Option(False, "--all-groups", help="Every group the cluster lists."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object per group (a line each)."),
    bootstrap: BootstrapOption = None,
    cluster_dir: ClusterDirOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """State, assignor, generation, coordinator, members, and per partition its owner, committed offset, log end
    offset and lag (a group with committed offsets only, like a Spark query's monitoring group, shows them too).

    A group that cannot be described (its coordinator's ``__consumer_offsets`` partition has no leader) is
    named on stderr and the others are shown: exit code 1 (3 with --all-groups when only the listing was
    partial)."""
    if bool(groups) == all_groups:
        raise typer.BadParameter("name the groups or give --all-groups", param_hint="GROUP.../--all-groups")
    unavailable: tuple[UnavailablePartition, ...] = ()
    failed: list[str] = []
    lagged: list[GroupLag] = []
    with open_admin(bootstrap, cluster_dir, timeout) as admin:
        if all_groups:
            listed = admin.list_groups_result()
            names, unavailable = [g.group for g in listed.listings], listed.unavailable
        else:
            names = list(dict.fromkeys(groups))
        answers = admin.describe_groups(names) if names else {}
        for name in names:
            description = answers.get(name)
            if description is None:
                failed.append(f"error: the cluster did not describe group {name!r}")
            elif description.error is not None:
                failed.append(f"error: cannot describe group {name!r}: {describe_error(description.error)}")
            else:
                try:
                    lagged.append(group_lag(admin, description))
                except MultiraftError as exc:  # its offsets' partition lost its leader since: this group only
                    failed.append(f"error: cannot read the offsets of group {name!r}: {describe_error(exc)}")
        addresses = {n.node_id: n.client_address for n in admin.describe_cluster().nodes} if lagged else {}
    if not names and not unavailable:
        console.print("no consumer groups")
    for one in lagged:
        address = addresses.get(one.description.coordinator_id)
        if as_json:
            _print_json(describe_payload(one, address))
        else:
            _print_description(one, address)
    for line in failed:
        print(line, file=sys.stderr)
    _warn_unavailable(unavailable)
    if failed:
        raise typer.Exit(1)
    if unavailable:
        raise typer.Exit(PARTIAL_EXIT_CODE)


@group_app.command("delete")
@with_tls_options
def delete(
    groups: list[str] = typer.Argument(..., metavar="GROUP...", help="Consumer groups to delete."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    bootstrap: BootstrapOption = None,
    cluster_dir: ClusterDirOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Delete empty groups and their committed offsets (asks first unless --yes); a group with members is
    refused. Exits 1 when any group was not deleted."""
    names = ", ".join(repr(g) for g in groups)
    if not yes:
        if not sys.stdin.isatty():
            fail(f"not deleting {names}: pass --yes to confirm (stdin is not a terminal)")
        if not typer.confirm(f"Delete consumer group(s) {names} and their committed offsets?", default=False):
            fail(f"{names} not deleted")
    with open_admin(bootstrap, cluster_dir, timeout) as admin:
        results = admin.delete_groups(groups)
    failed = False
    for group in dict.fromkeys(groups):
        error = results.get(group)
        if group not in results:
            failed = True
            print(f"error: group {group!r}: the cluster did not answer for it", file=sys.stderr)
        elif error is None:
            console.print(f"deleted group {group!r}", highlight=False)
        else:
            failed = True
            print(f"error: group {group!r} not deleted: {describe_error(error)}", file=sys.stderr)
    if failed:
        raise typer.Exit(1)


def plan_payload(group: str, planned: list[PlannedOffset], executed: bool) -> dict[str, Any]:
    """The JSON of ``group reset-offsets --json``."""
    return {
        "group": group,
        "executed": executed,
        "offsets": [
            {
                "topic": p.topic,
                "partition": p.partition,
                "current": p.current,
                "new": p.new,
                "requested": p.requested,
                "log_start": p.log_start,
                "high_watermark": p.high_watermark,
            }
            for p in planned
        ],
    }


def _gather(
    admin: Admin, group: str, spec: ResetSpec, scopes: list[tuple[str, tuple[int, ...] | None]], all_topics: bool
) -> dict[tuple[str, int], PartitionState]:
    """Log start, high watermark, committed offset (and the offset at the time) of every partition to reset."""
    committed = {(tp.topic, tp.partition): offset for tp, offset in admin.group_offsets(group).items()}
    wanted: dict[str, set[int] | None] = {}  # None: every partition of the topic

    def add(topic: str, partitions: Iterable[int] | None) -> None:
        if partitions is None:
            wanted[topic] = None
        elif topic not in wanted:
            wanted[topic] = set(partitions)
        elif (listed := wanted[topic]) is not None:
            listed.update(partitions)

    if all_topics:
        if not committed:
            fail(f"group {group!r} has no committed offsets: name the topics with --topic")
        for topic, partition in committed:
            add(topic, [partition])
    for topic, scoped in scopes:
        add(topic, scoped)
    states: dict[tuple[str, int], PartitionState] = {}
    for topic, partitions in sorted(wanted.items()):
        chosen = sorted(partitions) if partitions is not None else None
        starts = admin.list_offsets(topic, "earliest", chosen)
        ends = admin.list_offsets(topic, "latest", chosen)
        at = admin.list_offsets(topic, spec.value, chosen) if spec.kind == "datetime" else {}
        for partition, start in starts.items():
            states[(topic, partition)] = PartitionState(
                start, ends[partition], committed.get((topic, partition)), at.get(partition)
            )
    return states


def _print_plan(group: str, planned: list[PlannedOffset], executed: bool) -> None:
    table = Table(title=f"new offsets of group {group}")
    for column in ("topic", "partition", "current", "new", "log start", "high watermark", "note"):
        table.add_column(column, justify="left" if column in ("topic", "note") else "right")
    for p in planned:
        note = f"clamped from {p.requested}" if p.clamped else ""
        table.add_row(
            p.topic, str(p.partition), _dash(p.current), str(p.new), str(p.log_start), str(p.high_watermark), note
        )
    print_table(table)
    if executed:
        console.print(f"committed {len(planned)} offsets for group {group!r}", highlight=False)
    else:
        console.print("dry run: nothing was committed (add --execute to commit these offsets)", highlight=False)


@group_app.command("reset-offsets")
@with_tls_options
def reset_offsets(
    group: str = typer.Argument(..., metavar="GROUP", help="Consumer group."),
    topic: list[str] = typer.Option(
        [], "--topic", "-t", metavar="TOPIC[:P,P]", help="A topic, or some of its partitions (repeatable)."
    ),
    all_topics: bool = typer.Option(False, "--all-topics", help="Every topic the group committed offsets for."),
    to_earliest: bool = typer.Option(False, "--to-earliest", help="To the log start."),
    to_latest: bool = typer.Option(False, "--to-latest", help="To the high watermark (skip everything)."),
    to_datetime: str | None = typer.Option(
        None, "--to-datetime", metavar="ISO", help="To the first record at or after this time (no zone: local time)."
    ),
    by_duration: str | None = typer.Option(
        None, "--by-duration", metavar="ISO", help="To the first record at or after this long ago (PT1H30M, P1D)."
    ),
    shift_by: int | None = typer.Option(None, "--shift-by", metavar="N", help="Move the committed offsets by N."),
    to_offset: int | None = typer.Option(None, "--to-offset", metavar="N", help="To offset N."),
    execute: bool = typer.Option(False, "--execute", help="Commit the new offsets (default: only print the plan)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
    bootstrap: BootstrapOption = None,
    cluster_dir: ClusterDirOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Plan new committed offsets for an inactive group (each clamped between the log start and the high
    watermark) and commit them with --execute. Refused while the group has members."""
    spec = reset_spec(
        to_earliest=to_earliest,
        to_latest=to_latest,
        to_datetime=to_datetime,
        by_duration=by_duration,
        shift_by=shift_by,
        to_offset=to_offset,
        now_ms=time.time_ns() // 1_000_000,
    )
    if bool(topic) == all_topics:
        raise typer.BadParameter("give --topic (repeatable) or --all-topics", param_hint="--topic/--all-topics")
    scopes = [parse_topic_scope(t) for t in topic]
    with open_admin(bootstrap, cluster_dir, timeout) as admin:
        description = _describe_one(admin, group)
        if description.active:
            fail(_active_members_message(group, description))
        planned = plan_reset(spec, _gather(admin, group, spec, scopes, all_topics))
        if execute:
            try:
                admin.commit_group_offsets(group, {(p.topic, p.partition): p.new for p in planned})
            except UnknownMemberError:  # a member joined since the check
                fail(_active_members_message(group, admin.describe_groups([group])[group]))
    if as_json:
        _print_json(plan_payload(group, planned, execute))
    else:
        _print_plan(group, planned, execute)
