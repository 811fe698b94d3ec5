"""``multiraft nemesis``: seeded Jepsen-style runs against local clusters, and their table."""

from __future__ import annotations

import tempfile
from pathlib import Path

import typer

from multiraft.tools.cli._common import console
from multiraft.tools.nemesis import (
    FAULT_KINDS,
    RunResult,
    RunSettings,
    load_history,
    run_once,
    summarize,
    summary_markdown,
)
from multiraft.tools.nemesis.checker import check
from multiraft.tools.nemesis.report import runs_table, summary_table

__all__ = ["nemesis"]


def nemesis(
    runs: int = typer.Option(1, "--runs", min=1, max=10_000, help="Number of runs (seeds SEED, SEED+1, ...)."),
    seed: int = typer.Option(1, "--seed", help="The first run's seed; a seed replays a run's schedule."),
    duration: float = typer.Option(20.0, "--duration", min=1.0, help="Seconds of faults per run."),
    faults: str = typer.Option("all", "--faults", help=f"Comma-separated kinds, or 'all': {', '.join(FAULT_KINDS)}."),
    nodes: int = typer.Option(
        3, "--nodes", min=3, max=9, help="Nodes per cluster (at 5 or more a partition lives on 3 of them)."
    ),
    directory: Path | None = typer.Option(
        None, "--dir", help="Where runs keep clusters and histories (default: a temp dir)."
    ),
    recovery_bound: float = typer.Option(
        60.0, "--recovery-bound", help="Seconds the cluster may take to accept writes after the last heal."
    ),
    markdown: bool = typer.Option(False, "--markdown", help="Also print the summary as a markdown table."),
    check_history: Path | None = typer.Option(
        None, "--check", help="Only check this history file again, and print what it finds."
    ),
) -> None:
    """Run seeded nemesis runs (faults while idempotent producers, consumers, a group and an admin work),
    check each history, print a table; exit 1 if any run found an anomaly."""
    if check_history is not None:
        checked = check(load_history(check_history), recovery_bound_s=recovery_bound)
        console.print("ok" if checked.valid else "\n".join(checked.problems()))
        raise typer.Exit(0 if checked.valid else 1)
    kinds = FAULT_KINDS if faults == "all" else tuple(k.strip() for k in faults.split(",") if k.strip())
    root = directory if directory is not None else Path(tempfile.mkdtemp(prefix="multiraft-nemesis-"))
    results = []
    for number in range(runs):
        settings = RunSettings(seed + number, duration, kinds, nodes, recovery_bound_s=recovery_bound)
        try:
            settings.validate()
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from exc
        try:
            result = run_once(settings, root / f"run-{settings.seed}")
        except Exception as exc:  # one run that cannot go on is that run's failure, not the batch's
            result = RunResult.failed(settings, root / f"run-{settings.seed}", f"run aborted: {exc!r}")
        results.append(result)
        verdict = "ok" if result.check.valid else "FAILED: " + "; ".join(result.check.problems())
        console.print(f"seed {settings.seed}: {verdict} ({result.elapsed_s:.0f} s, history {result.history_path})")
    console.print(runs_table(results))
    summary = summarize(results)
    console.print(summary_table(summary))
    for kind, reason in summary.skipped.items():
        console.print(f"skipped {kind}: {reason}")
    if markdown:
        typer.echo(summary_markdown(summary))  # unwrapped, to paste into docs/reliability.md
    if summary.failed_runs:
        raise typer.Exit(1)
