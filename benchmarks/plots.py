"""Plots for docs/benchmarks.md from the JSON the benchmarks saved with --out.

    python benchmarks/plots.py                       # benchmarks/results/*.json -> docs/img/*.png
    python benchmarks/plots.py --results DIR --img DIR

Reads whichever of these exist (a missing one is skipped, with a note on stderr):

  scaling.json       benchmarks/scaling.py       -> scaling_partitions.png, scaling_message_size.png
  versus.json        benchmarks/peers/versus.py  -> peers_throughput.png, peers_latency.png
  raft_engines.json  benchmarks/raft_engines.py  -> raft_engines.png
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # after choosing the backend
from matplotlib.patches import Rectangle

ROOT = Path(__file__).resolve().parent.parent
COLORS = {"multiraft": "#1f77b4", "nats": "#ff7f0e", "redis": "#d62728", "pysyncobj": "#7f7f7f"}


def _load(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        print(f"skipped: {path} not found", file=sys.stderr)
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _footer(figure: Any, data: dict[str, Any]) -> None:
    figure.text(0.01, 0.01, f"{data.get('command', '')}  ({data.get('date', '')[:10]})", fontsize=6, color="#555")


def _save(figure: Any, path: Path) -> None:
    figure.tight_layout(rect=(0, 0.03, 1, 1))
    figure.savefig(path, dpi=120)
    plt.close(figure)
    print(f"wrote {path}", file=sys.stderr)


def plot_scaling(data: dict[str, Any], out: Path) -> None:
    runs = data["params"]["runs"]
    for curve, xlabel, name in (
        ("partitions", "partitions (1 KiB values)", "scaling_partitions.png"),
        (
            "message_size",
            f"value size, bytes ({data['params']['size_partitions']} partitions)",
            "scaling_message_size.png",
        ),
    ):
        points = data.get(curve) or {}
        if not points:
            continue
        xs = sorted(points, key=int)
        figure, left = plt.subplots(figsize=(6.4, 3.6))
        left.plot([int(x) for x in xs], [points[x]["msgs_per_s"] for x in xs], "o-", color=COLORS["multiraft"])
        left.set_xscale("log")
        left.set_xlabel(xlabel)
        left.set_ylabel("records/s (acknowledged)", color=COLORS["multiraft"])
        right = left.twinx()
        right.plot([int(x) for x in xs], [points[x]["mb_per_s"] for x in xs], "s--", color="#2ca02c")
        right.set_ylabel("MB/s of values", color="#2ca02c")
        # From zero: a flat curve must look flat. Records/s across value sizes spans four decades: log.
        if curve == "message_size":
            left.set_yscale("log")
        else:
            left.set_ylim(bottom=0)
        right.set_ylim(bottom=0)
        left.set_xticks([int(x) for x in xs], [_size_label(int(x)) if curve == "message_size" else x for x in xs])
        left.set_title(f"multiraft produce, RF 3, fsync before ack (median of {runs})", fontsize=10)
        left.grid(alpha=0.3)
        _footer(figure, data)
        _save(figure, out / name)


def _size_label(size: int) -> str:
    if size >= 1 << 20:
        return f"{size >> 20} MiB"
    if size >= 1 << 10:
        return f"{size >> 10} KiB"
    return f"{size} B"


def plot_versus(data: dict[str, Any], out: Path) -> None:
    medians = data["median"]
    systems = list(medians)
    cases = [("produce", "produce"), ("consume", "consume")]
    figure, axis = plt.subplots(figsize=(6.4, 3.6))
    width = 0.8 / (len(systems) + 1)
    bars: list[tuple[str, str, int]] = []
    for index, system in enumerate(systems):
        for position, (case, _label) in enumerate(cases):
            value = medians[system].get(case, {}).get("msgs_per_s")
            if value is not None:
                axis.bar(position + index * width, value, width, color=COLORS.get(system, "#999"))
                bars.append((system, case, position))
        if system == "multiraft" and "produce_send" in medians[system]:
            value = medians[system]["produce_send"]["msgs_per_s"]
            axis.bar(0 + len(systems) * width, value, width, color=COLORS["multiraft"], alpha=0.45, hatch="//")
    axis.set_xticks([i + width * (len(systems) - 1) / 2 for i in range(len(cases))], [c[1] for c in cases])
    axis.set_ylabel("messages/s, 1 KiB")
    handles = [Rectangle((0, 0), 1, 1, color=COLORS.get(s, "#999")) for s in systems]
    labels = [_system_label(s) for s in systems]
    if "produce_send" in medians.get("multiraft", {}):
        handles.append(Rectangle((0, 0), 1, 1, color=COLORS["multiraft"], alpha=0.45, hatch="//"))
        labels.append("multiraft, send() per record")
    axis.legend(handles, labels, fontsize=8)
    axis.set_title(f"Python clients, same workload (median of {data['params']['rounds']} rounds)", fontsize=10)
    axis.grid(axis="y", alpha=0.3)
    _footer(figure, data)
    _save(figure, out / "peers_throughput.png")

    figure, axis = plt.subplots(figsize=(6.4, 3.6))
    quantiles = ["p50_ms", "p99_ms", "p999_ms"]
    width = 0.8 / len(systems)
    for index, system in enumerate(systems):
        figures = medians[system].get("latency", {})
        values = [figures.get(q) or 0 for q in quantiles]
        axis.bar([i + index * width for i in range(len(quantiles))], values, width, color=COLORS.get(system, "#999"),
                 label=_system_label(system))  # fmt: skip
    axis.set_xticks([i + width * (len(systems) - 1) / 2 for i in range(len(quantiles))], ["p50", "p99", "p99.9"])
    axis.set_yscale("log")
    axis.set_ylabel("ms, one message at a time (log)")
    axis.legend(fontsize=8, loc="upper left")
    axis.set_title("Acknowledgement latency, 1 KiB, waiting for each ack", fontsize=10)
    axis.grid(axis="y", alpha=0.3)
    _footer(figure, data)
    _save(figure, out / "peers_latency.png")


def _system_label(system: str) -> str:
    return {
        "multiraft": "multiraft RF 3 (fsync)",
        "nats": "NATS JetStream R3 (no fsync)",
        "redis": "Redis Streams (fsync, 1 node)",
    }.get(system, system)


def plot_engines(data: dict[str, Any], out: Path) -> None:
    summary = data["summary"]
    workloads = list(summary)
    labels = {"one": "1 KiB, one at a time", "inflight": "1 KiB, many in flight", "big": "256 KiB batches"}
    figure, axis = plt.subplots(figsize=(6.4, 3.6))
    width = 0.38
    for index, engine in enumerate(("multiraft", "pysyncobj")):
        values = [summary[w][engine]["mb_per_s"] or 0 for w in workloads]
        axis.bar([i + index * width for i in range(len(workloads))], values, width, color=COLORS[engine],
                 label=engine + (" (fsync)" if engine == "multiraft" else " 0.3.17 (no fsync)"))  # fmt: skip
    ticks = [f"{labels.get(w, w)}\nratio {summary[w]['ratio_mb_per_s']}x" for w in workloads]
    axis.set_xticks([i + width / 2 for i in range(len(workloads))], ticks)
    axis.set_yscale("log")
    axis.set_ylabel("MB/s replicated (log)")
    axis.legend(fontsize=8)
    axis.set_title(f"3 replicas on 127.0.0.1 (median of {data['params']['runs']} runs)", fontsize=10)
    axis.grid(axis="y", alpha=0.3)
    _footer(figure, data)
    _save(figure, out / "raft_engines.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--img", type=Path, default=ROOT / "docs" / "img")
    args = parser.parse_args()
    args.img.mkdir(parents=True, exist_ok=True)
    plotted = 0
    for name, plot in (
        ("scaling.json", plot_scaling),
        ("versus.json", plot_versus),
        ("raft_engines.json", plot_engines),
    ):
        data = _load(args.results / name)
        if data is not None:
            plot(data, args.img)
            plotted += 1
    if not plotted:
        sys.exit(f"no results in {args.results}: run the benchmarks with --out first")


if __name__ == "__main__":
    main()
