"""The nemesis table: per run and in total, what was done, what broke, and how long writes stalled."""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass

from rich.table import Table

from multiraft.tools.nemesis.runner import RunResult

__all__ = ["Summary", "summarize", "summary_table", "runs_table", "summary_markdown"]


@dataclass(frozen=True)
class Summary:
    runs: int
    failed_runs: int
    operations: int
    faults: dict[str, int]
    acknowledged: int
    lost: int
    duplicated: int
    divergent_replicas: int
    other_anomalies: int
    longest_unavailability_s: float
    longest_recovery_s: float | None
    skipped: dict[str, str]


def summarize(results: Sequence[RunResult]) -> Summary:
    faults: collections.Counter[str] = collections.Counter()
    skipped: dict[str, str] = {}
    for result in results:
        faults.update(result.check.faults)
        skipped |= result.skipped
    recoveries = [r.check.recovery_s for r in results if r.check.recovery_s is not None]
    return Summary(
        runs=len(results),
        failed_runs=sum(1 for r in results if not r.check.valid),
        operations=sum(r.check.operations for r in results),
        faults=dict(sorted(faults.items())),
        acknowledged=sum(r.check.acknowledged for r in results),
        lost=sum(r.check.lost for r in results),
        duplicated=sum(r.check.duplicated for r in results),
        divergent_replicas=sum(r.check.divergent_replicas for r in results),
        other_anomalies=sum(
            sum(v for k, v in r.check.anomalies.items() if k not in ("lost", "duplicated", "divergent_replicas"))
            for r in results
        ),
        longest_unavailability_s=max((r.check.longest_unavailability_s for r in results), default=0.0),
        longest_recovery_s=max(recoveries) if len(recoveries) == len(results) and recoveries else None,
        skipped=skipped,
    )


def _faults_text(faults: dict[str, int]) -> str:
    return ", ".join(f"{kind} {count}" for kind, count in faults.items()) or "none"


def summary_table(summary: Summary) -> Table:
    table = Table(title="nemesis", show_header=True)
    for column in ("runs", "failed", "operations", "faults by kind", "acknowledged", "lost", "duplicated",
                   "divergent replicas", "other anomalies", "longest unavailability", "longest recovery"):  # fmt: skip
        table.add_column(column)
    table.add_row(
        str(summary.runs),
        str(summary.failed_runs),
        str(summary.operations),
        _faults_text(summary.faults),
        str(summary.acknowledged),
        str(summary.lost),
        str(summary.duplicated),
        str(summary.divergent_replicas),
        str(summary.other_anomalies),
        f"{summary.longest_unavailability_s:.1f} s",
        f"{summary.longest_recovery_s:.1f} s" if summary.longest_recovery_s is not None else "not recovered",
    )
    return table


def runs_table(results: Sequence[RunResult]) -> Table:
    table = Table(title="nemesis runs", show_header=True)
    for column in (
        "seed",
        "result",
        "operations",
        "faults",
        "acked",
        "lost",
        "dup",
        "divergent",
        "unavail",
        "recovery",
        "history",
    ):
        table.add_column(column)
    for result in results:
        check = result.check
        table.add_row(
            str(result.settings.seed),
            "ok" if check.valid else "; ".join(check.problems()),
            str(check.operations),
            _faults_text(dict(check.faults)),
            str(check.acknowledged),
            str(check.lost),
            str(check.duplicated),
            str(check.divergent_replicas),
            f"{check.longest_unavailability_s:.1f} s",
            f"{check.recovery_s:.1f} s" if check.recovery_s is not None else "-",
            str(result.history_path),
        )
    return table


def summary_markdown(summary: Summary) -> str:
    """The summary as a markdown table (what docs/reliability.md records)."""
    header = ("| runs | failed | operations | faults by kind | acknowledged | lost | duplicated | divergent replicas "
              "| other anomalies | longest unavailability | longest recovery |")  # fmt: skip
    recovery = f"{summary.longest_recovery_s:.1f} s" if summary.longest_recovery_s is not None else "not recovered"
    row = (
        f"| {summary.runs} | {summary.failed_runs} | {summary.operations} | {_faults_text(summary.faults)} "
        f"| {summary.acknowledged} | {summary.lost} | {summary.duplicated} | {summary.divergent_replicas} "
        f"| {summary.other_anomalies} | {summary.longest_unavailability_s:.1f} s | {recovery} |"
    )
    return "\n".join([header, "|" + "---|" * 11, row])
