"""What ``multiraft bench`` reports: latency percentiles, the machine, and the table a person reads."""

from __future__ import annotations

import os
import platform
import statistics
import time
from typing import Any

from multiraft.tools.cli._common import console, err_console

__all__ = ["ACK_GUARANTEE", "percentiles", "machine", "print_table"]

ACK_GUARANTEE = (
    "multiraft acknowledges a record once a majority of its partition's replicas have written it and fsynced "
    "it (the leader's commit); with idempotence, exactly once per partition."
)


def percentiles(samples: list[float]) -> dict[str, float | None]:
    if not samples:
        return {"p50_ms": None, "p99_ms": None, "p999_ms": None, "mean_ms": None, "max_ms": None}
    ordered = sorted(samples)

    def rank(q: float) -> float:  # nearest rank, as the peer benchmarks compute it
        index = min(len(ordered) - 1, max(0, -(-int(q * 1000 * len(ordered)) // 1000) - 1))
        return round(ordered[index], 4)

    return {
        "p50_ms": rank(0.50),
        "p99_ms": rank(0.99),
        "p999_ms": rank(0.999),
        "mean_ms": round(statistics.fmean(ordered), 4),
        "max_ms": round(ordered[-1], 4),
    }


def machine() -> dict[str, Any]:
    import psutil

    return {
        "cpus": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def print_table(result: dict[str, Any]) -> None:
    from rich.table import Table

    params = result["params"]
    what = f"{params['message_size']:,} B values, {params['partitions']} partitions, RF {params['replication_factor']}"
    table = Table(title=f"multiraft bench {result['mode']}: {what}", show_header=True)
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("records", f"{result['records']:,}" + (f" ({result['failed']:,} failed)" if result["failed"] else ""))
    table.add_row("seconds", f"{result['elapsed_s']:.2f}")
    table.add_row("records/s", f"{result['msgs_per_s']:,.0f}")
    table.add_row("MB/s of values", f"{result['mb_per_s']:,.1f}")
    for key in ("p50_ms", "p99_ms", "p999_ms", "max_ms"):
        if result.get(key) is not None:
            table.add_row(f"latency {key[:-3]} (ms)", f"{result[key]:.3f}")
    cpu = result["cpu_s"]
    table.add_row("client CPU s (all processes)", f"{cpu['client']:.2f}")
    if cpu["client_us_per_msg"] is not None:
        table.add_row("client CPU us/record", f"{cpu['client_us_per_msg']:.2f}")
    if cpu["servers"]:
        for name, seconds in cpu["servers"].items():
            table.add_row(f"{name} CPU s", "?" if seconds is None else f"{seconds:.2f}")
        if cpu["servers_us_per_msg"] is not None:
            table.add_row("nodes CPU us/record", f"{cpu['servers_us_per_msg']:.2f}")
    else:
        table.add_row("nodes CPU s", "unknown (give --cluster-dir or --local)")
    console.print(table)
    if result.get("first_error"):
        err_console.print(f"first error: {result['first_error']}", highlight=False)
