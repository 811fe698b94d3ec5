"""``multiraft storage check|repair DIR``: offline checks of a node's log store."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import typer
from rich.table import Table

from multiraft.node.replicas.raft_log import record_lost_suffixes
from multiraft.tools.cli._common import console, err_console
from storage import LogStore, StorageError, check_store, repair_store

storage_app = typer.Typer(help="Check and repair a node's log store (run while the node is stopped).")


@storage_app.command("check")
def check(
    data_dir: Path = typer.Argument(..., help="The node's data directory (holds log.lmdb)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
) -> None:
    """Verify every page and every entry of the store; exit 1 if anything is wrong."""
    report = check_store(data_dir)
    if as_json:
        payload = asdict(report) | {"ok": report.ok, "problems": [str(p) for p in report.problems]}
        console.print_json(json.dumps(payload))
    elif report.logs:
        table = Table(title=f"log store {report.path}")
        for column in ("log", "first index", "last index", "valid up to", "entries checked", "bytes", "status"):
            table.add_column(column, justify="left" if column in ("log", "status") else "right")
        for log_check in report.logs:
            status = "[green]ok" if not log_check.problems else f"[red]{log_check.problems[0].message}"
            table.add_row(
                log_check.name,
                str(log_check.first_index),
                str(log_check.last_index),
                str(log_check.last_good_index),
                str(log_check.entries_checked),
                str(log_check.bytes_checked),
                status,
            )
        console.print(table)
    if not as_json:
        for problem in report.problems:
            err_console.print(f"[red]problem:[/red] {problem}", highlight=False)
        if report.ok:
            console.print(f"[green]ok:[/green] {report.entries_checked} entries in {len(report.logs)} logs")
    if not report.ok:
        raise typer.Exit(1)


@storage_app.command("repair")
def repair(data_dir: Path = typer.Argument(..., help="The node's data directory (holds log.lmdb).")) -> None:
    """Keep the longest valid prefix of every log; say what was dropped. The damaged file is kept aside."""
    try:
        report = repair_store(data_dir)
    except StorageError as exc:
        err_console.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(2) from exc
    if not report.repaired:
        console.print(f"nothing to repair in {report.path}")
        return
    for dropped in report.dropped:
        console.print(
            f"dropped {dropped.log} entries {dropped.first_index}..{dropped.last_index} "
            f"({dropped.entries} entries): {dropped.reason}",
            highlight=False,
        )
    for note in report.notes:
        console.print(note, highlight=False)
    _record_lost_suffixes(data_dir, [(dropped.log, dropped.last_index) for dropped in report.dropped])
    console.print(f"repaired {report.path}; the damaged copy is {report.damaged_copy}", highlight=False)


def _record_lost_suffixes(data_dir: Path, lost: list[tuple[str, int]]) -> None:
    """Each log that lost entries may have acknowledged them (see ``record_lost_suffixes``)."""
    if not lost:
        return
    with LogStore.open(data_dir) as store:
        for name, (index, _) in record_lost_suffixes(store, lost).items():
            console.print(f"{name} will not vote until its leader has sent entries up to {index} again")
