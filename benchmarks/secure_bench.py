"""TLS + SCRAM + ACLs against plaintext: produce and consume throughput and one-at-a-time latency.

    python benchmarks/secure_bench.py --json --out benchmarks/results/secure.json   # 3 rounds
    python benchmarks/secure_bench.py --rounds 1                                    # a quick look

Each round runs ``multiraft bench MODE --local 3 [--secure] --json`` for every mode, plaintext then secure,
interleaved so that a noisy minute spreads over both; each figure is the median of the rounds, and the ratio is
secure / plaintext of the medians (issue 14's targets: throughput >= 0.85, p99 latency <= 1.2x).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _results import save_json  # noqa: E402  # benchmarks/ (this script's directory)

MODES: dict[str, tuple[str, ...]] = {
    "produce": ("--count", "100000", "--message-size", "1024"),
    "consume": ("--count", "100000", "--message-size", "1024"),
    "latency": ("--count", "2000", "--message-size", "256", "--partitions", "1"),
}
FIGURES = {
    "produce": ("msgs_per_s", "mb_per_s"),
    "consume": ("msgs_per_s", "mb_per_s"),
    "latency": ("p50_ms", "p99_ms"),
}


def bench(mode: str, secure: bool) -> dict[str, Any]:
    command = [sys.executable, "-m", "multiraft.tools.cli", "bench", mode, "--local", "3", *MODES[mode], "--json"]
    if secure:
        command.append("--secure")
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MULTIRAFT_")}
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900, env=environment, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[2:])} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {m: {"plaintext": [], "secure": []} for m in MODES}
    for round_ in range(args.rounds):
        for mode in MODES:
            for kind in ("plaintext", "secure"):
                runs[mode][kind].append(bench(mode, kind == "secure"))
                print(f"round {round_ + 1}: {mode} {kind} done", file=sys.stderr)
    summary: dict[str, Any] = {}
    for mode, kinds in runs.items():
        for figure in FIGURES[mode]:
            plain = statistics.median(r[figure] for r in kinds["plaintext"])
            secure = statistics.median(r[figure] for r in kinds["secure"])
            summary[f"{mode}.{figure}"] = {"plaintext": plain, "secure": secure, "ratio": round(secure / plain, 3)}
    result = {"benchmark": "secure_bench", "rounds": args.rounds, "summary": summary, "runs": runs}
    save_json(result, args.out)
    if args.json:
        print(json.dumps(result))
    else:
        print("| figure | plaintext | TLS + SCRAM + ACLs | ratio |\n|---|---|---|---|")
        for name, row in summary.items():
            print(f"| {name} | {row['plaintext']:,.3f} | {row['secure']:,.3f} | {row['ratio']:.3f} |")


if __name__ == "__main__":
    main()
