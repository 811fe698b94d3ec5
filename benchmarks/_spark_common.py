"""What the Spark benchmarks share: shuffled timed repetitions against a baseline case, and the report."""

from __future__ import annotations

import json
import os
import random
import statistics
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any


def _stat(pid: int | str) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:  # gone meanwhile
        return None


def process_cpu(node_pids: Collection[int]) -> dict[str, float]:
    """CPU seconds (user + system) used so far, from ``/proc`` (Linux): ``jvm`` is Spark's JVM (this
    process's child), ``python`` every Python process under it (the daemon, its workers, a streaming
    query's source runner), including those already exited and reaped by the JVM or the daemon; ``nodes``
    the cluster's node processes; ``driver`` this process."""
    tick = os.sysconf("SC_CLK_TCK")
    stats = {int(pid): stat for pid in os.listdir("/proc") if pid.isdigit() and (stat := _stat(pid)) is not None}
    children: dict[int, list[int]] = {}
    for pid, stat in stats.items():
        children.setdefault(int(stat[1]), []).append(pid)

    def own(stat: list[str]) -> float:
        return (int(stat[11]) + int(stat[12])) / tick

    def reaped(stat: list[str]) -> float:
        return (int(stat[13]) + int(stat[14])) / tick

    usage = {"jvm": 0.0, "python": 0.0, "nodes": 0.0, "driver": own(stats[os.getpid()])}
    for jvm in children.get(os.getpid(), []):
        if "java" not in Path(f"/proc/{jvm}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace"):
            continue
        usage["jvm"] += own(stats[jvm])
        usage["python"] += reaped(stats[jvm])
        below = list(children.get(jvm, []))
        while below:
            pid = below.pop()
            if pid in stats:
                usage["python"] += own(stats[pid]) + reaped(stats[pid])
                below += children.get(pid, [])
    usage["nodes"] = sum(own(stats[pid]) for pid in node_pids if pid in stats)
    return usage


def timed(run: Callable[[], None]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def repeat(
    cases: Mapping[str, Callable[[], float]], reps: int, seed: int, baseline: str = "parquet"
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Run every case (each returns its rows/s) ``reps`` times in a shuffled order: (rates, ratios to the
    baseline case of the same repetition)."""
    rates: dict[str, list[float]] = {name: [] for name in cases}
    ratios: dict[str, list[float]] = {name: [] for name in cases}
    shuffle = random.Random(seed)
    for _ in range(reps):
        order = list(cases)
        shuffle.shuffle(order)
        rep = {name: cases[name]() for name in order}
        for name in cases:
            rates[name].append(rep[name])
            ratios[name].append(rep[name] / rep[baseline])
    return rates, ratios


def summarise(
    rates: Mapping[str, list[float]],
    ratios: Mapping[str, list[float]],
    cpu_per_row: Mapping[str, list[dict[str, float]]] | None = None,
) -> dict[str, Any]:
    """Per case: the median rate and ratio, and (given ``cpu_per_row``, one dict per repetition) the median
    CPU microseconds per row of each process kind."""
    summary: dict[str, Any] = {}
    for name in rates:
        summary[name] = {
            "median_rows_per_s": statistics.median(rates[name]),
            "rows_per_s": rates[name],
            "median_ratio_to_parquet": statistics.median(ratios[name]),
        }
        if cpu_per_row is not None and cpu_per_row.get(name):
            reps = cpu_per_row[name]
            summary[name]["median_cpu_us_per_row"] = {
                kind: round(statistics.median(rep[kind] for rep in reps), 3) for kind in reps[0]
            }
    return summary


def report(result: Mapping[str, Any], as_json: bool) -> None:
    """Print ``result``: as JSON, or one line per case under a header of the run's parameters."""
    if as_json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"{result['rows']:,} rows of {result['value_bytes']} B, {result['partitions']} partitions, "
        f"RF {result['replication_factor']}, {result['reps']} reps"
    )
    for name, case in result["cases"].items():
        print(
            f"  {name:18s} {case['median_rows_per_s']:>12,.0f} rows/s   "
            f"ratio to parquet {case['median_ratio_to_parquet']:.2f}"
        )
