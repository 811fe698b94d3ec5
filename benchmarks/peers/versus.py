"""multiraft against its peers in one session: `multiraft bench` and benchmarks/peers/run.py, same workloads.

    python benchmarks/peers/versus.py --json --out benchmarks/results/versus.json    # 3 rounds
    python benchmarks/peers/versus.py --quick                                         # 1 round, 10k messages

Each round runs, one after the other:

* ``multiraft bench produce --local 3`` (``send_batch()``, the client's bulk API), ``produce --api send`` (one
  ``send()`` per record, as the peers' Python clients publish), ``consume``, ``latency`` and ``e2e`` (records
  paced at 1,000/s from send() to a consumer's poll(), as many as the latency samples): N messages of S bytes,
  6 partitions, RF 3, each on a fresh throwaway 3-node cluster;
* ``benchmarks/peers/run.py --runs 1`` (NATS JetStream R3 and Redis Streams): the same N, S, and a window of
  512 acknowledgements in flight; then ``--latency-samples`` one-at-a-time round trips.

Rounds interleave the systems so that a noisy minute hits them alike. Every figure is the median over rounds;
each ratio (ours / peer, or peer / ours for latency) is computed within a round and its median reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from _results import emit  # noqa: E402  # benchmarks/, after sys.path

FIELDS = ("msgs_per_s", "mb_per_s", "p50_ms", "p99_ms", "p999_ms")
OURS_CASES = {
    "produce": ["produce"],
    "produce_send": ["produce", "--api", "send"],
    "consume": ["consume"],
    "latency": ["latency"],
    "e2e": ["e2e"],
}
# Targets of issue 16 (1 KiB values, RF 3), as ratios within one run: ours / JetStream for throughput (at least),
# ours / JetStream for latency (at most), and our end-to-end p50 / our acknowledgement p50 (at most).
TARGETS = {
    "produce_vs_nats": 5.0,
    "produce_send_vs_nats": 5.0,
    "consume_vs_nats": 8.0,
    "latency_p50_vs_nats": 1.5,
    "latency_p99_vs_nats": 1.0,
    "e2e_p50_vs_ack_p50": 1.5,
}


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MULTIRAFT_")}


def run_ours(case: str, count: int, size: int, samples: int) -> dict[str, Any]:
    records = samples if case in ("latency", "e2e") else count
    command = [
        sys.executable, "-m", "multiraft.tools.cli", "bench", *OURS_CASES[case], "--local", "3",
        "--message-size", str(size), "--count", str(records), "--json",
    ]  # fmt: skip
    completed = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=900, env=_environment(), check=False
    )
    if completed.returncode != 0:
        raise RuntimeError(f"{' '.join(command[2:])} failed: {completed.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(completed.stdout)
    return result


def run_peers(count: int, size: int, samples: int, systems: str) -> dict[str, Any]:
    command = [
        sys.executable, str(HERE / "run.py"), "--json", "--runs", "1", "--count", str(count), "--size", str(size),
        "--latency-samples", str(samples), "--systems", systems,
    ]  # fmt: skip
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=3600, check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"peers/run.py failed: {completed.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(completed.stdout)
    return result


def pick(figures: dict[str, Any]) -> dict[str, Any]:
    """The fields every system reports, the same in `multiraft bench` and peers/run.py."""
    cpu = figures.get("cpu_s") or {}
    picked = {key: figures.get(key) for key in FIELDS}
    picked["client_cpu_us_per_msg"] = cpu.get("client_us_per_msg")
    picked["servers_cpu_us_per_msg"] = cpu.get("servers_us_per_msg")
    return picked


def median(values: list[Any]) -> float | None:
    present = [float(v) for v in values if isinstance(v, int | float)]
    return round(statistics.median(present), 3) if present else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    parser.add_argument("--out", type=Path, help="also write the JSON to this file")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--latency-samples", type=int, default=5000)
    parser.add_argument("--systems", default="nats,redis")
    parser.add_argument("--quick", action="store_true", help="1 round of 10,000 messages and 1,000 samples")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.count, args.latency_samples = 1, 10_000, 1000
    if min(args.rounds, args.count, args.size, args.latency_samples) < 1:
        parser.error("--rounds, --count, --size and --latency-samples must be >= 1")

    began = time.monotonic()
    load = [round(os.getloadavg()[0], 2)]
    rounds: list[dict[str, Any]] = []
    peer_meta: dict[str, Any] = {}
    for index in range(args.rounds):
        ours = {}
        for case in OURS_CASES:
            result = run_ours(case, args.count, args.size, args.latency_samples)
            ours[case] = pick(result) | {"load_avg_1m": result["machine"]["load_avg_1m"]}
            print(f"round {index + 1}: multiraft {case}: {ours[case]}", file=sys.stderr)
            peer_meta.setdefault("multiraft", {"ack_guarantee": result["ack_guarantee"]})
        peers = run_peers(args.count, args.size, args.latency_samples, args.systems)
        round_result: dict[str, Any] = {"multiraft": ours}
        for name, system in peers["systems"].items():
            round_result[name] = {w: pick(f) for w, f in system["workloads"].items()}
            peer_meta[name] = {
                "ack_guarantee": system["ack_guarantee"],
                "server_version": system["server_version"],
                "client": system["client"],
            }
            print(f"round {index + 1}: {name}: {round_result[name]}", file=sys.stderr)
        rounds.append(round_result)
        load.append(round(os.getloadavg()[0], 2))

    systems = list(rounds[0])
    medians: dict[str, Any] = {}
    for system in systems:
        medians[system] = {
            case: {key: median([r[system][case][key] for r in rounds]) for key in rounds[0][system][case]}
            for case in rounds[0][system]
        }
    ratios: dict[str, Any] = {}
    for peer in systems[1:]:
        per_round: dict[str, list[float]] = {
            "produce": [r["multiraft"]["produce"]["msgs_per_s"] / r[peer]["produce"]["msgs_per_s"] for r in rounds],
            "produce_send": [
                r["multiraft"]["produce_send"]["msgs_per_s"] / r[peer]["produce"]["msgs_per_s"] for r in rounds
            ],
            "consume": [r["multiraft"]["consume"]["msgs_per_s"] / r[peer]["consume"]["msgs_per_s"] for r in rounds],
            # above 1: ours is slower (the peer's latency divided into ours)
            "latency_p50": [r["multiraft"]["latency"]["p50_ms"] / r[peer]["latency"]["p50_ms"] for r in rounds],
            "latency_p99": [r["multiraft"]["latency"]["p99_ms"] / r[peer]["latency"]["p99_ms"] for r in rounds],
        }
        ratios[f"multiraft_vs_{peer}"] = {
            key: {"median": round(statistics.median(values), 2), "per_round": [round(v, 2) for v in values]}
            for key, values in per_round.items()
        }
    e2e_vs_ack = [r["multiraft"]["e2e"]["p50_ms"] / r["multiraft"]["latency"]["p50_ms"] for r in rounds]
    ratios["multiraft_e2e_p50_vs_ack_p50"] = {
        "median": round(statistics.median(e2e_vs_ack), 2),
        "per_round": [round(v, 2) for v in e2e_vs_ack],
    }
    targets: dict[str, Any] = {
        "e2e_p50_vs_ack_p50": {
            "target": TARGETS["e2e_p50_vs_ack_p50"],
            "measured": ratios["multiraft_e2e_p50_vs_ack_p50"]["median"],
        }
    }
    if "nats" in systems:
        nats = ratios["multiraft_vs_nats"]
        for key, ratio in (
            ("produce_vs_nats", "produce"),
            ("produce_send_vs_nats", "produce_send"),
            ("consume_vs_nats", "consume"),
            ("latency_p50_vs_nats", "latency_p50"),
            ("latency_p99_vs_nats", "latency_p99"),
        ):
            targets[key] = {"target": TARGETS[key], "measured": nats[ratio]["median"]}
    result = {
        "benchmark": "versus",
        "command": "python benchmarks/peers/versus.py " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "params": {
            "rounds": args.rounds,
            "count": args.count,
            "size": args.size,
            "latency_samples": args.latency_samples,
            "multiraft": "6 partitions, RF 3, 1 producer process, fresh 3-node cluster per case (--local 3)",
            "peers": "window 512, see benchmarks/peers/run.py",
        },
        "load_avg_1m_per_round": load,
        "systems": peer_meta,
        "median": medians,
        "ratios": ratios,
        "targets": targets,
        "rounds": rounds,
        "elapsed_s": round(time.monotonic() - began, 1),
    }
    emit(result, args.out, compact=args.json)


if __name__ == "__main__":
    main()
