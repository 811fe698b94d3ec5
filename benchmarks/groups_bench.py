"""Consumer groups: how long a rebalance takes to settle, and what a group's members read together.

    python benchmarks/groups_bench.py --json --out benchmarks/results/groups.json    # 3 rounds
    python benchmarks/groups_bench.py --rounds 1                                      # a quick look

On a local 3-node cluster (``multiraft.tools.launcher``), one topic of 60 partitions (replication factor 3):

* **join**: 3 members hold the 60 partitions; a 4th starts. Time from its ``subscribe()`` to the moment every
  one of the 4 members holds its share of one generation that covers the 60 partitions (each member's
  ``owned`` event of that generation, as written by :mod:`tests.integration.group_worker`).
* **death**: 4 members; one is killed with SIGKILL. Time from the kill to the 3 survivors holding all 60; the
  session timeout (``--session-s``) is most of it, so it is also reported after the session timeout.
* both with ``cooperative-sticky`` (incremental: members keep reading what does not move) and with the eager
  ``range`` assignor as the baseline of the same run;
* **throughput**: records per second read from the earliest offset by a 3-member group against one member
  holding every partition (the same worker process code, reading with ``poll_arrow`` and committing after
  each poll), over ``--records`` records of 100 bytes: for the whole run from the members' start (joining
  included: the group's initial rebalance delay is 3 s, Kafka's default) and for the fetch alone (first
  record to last, as Kafka's consumer-perf-test reports both).

Each figure is the median over the rounds; ratios are of the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _results import save_json  # noqa: E402  # benchmarks/ (this script's directory)

from multiraft import Admin, Producer  # noqa: E402
from multiraft.tools.launcher import cluster_down, cluster_up  # noqa: E402

PARTITIONS = 60
_SETTLE_TIMEOUT_S = 180.0


class _Member:
    def __init__(self, directory: Path, name: str, settings: dict[str, Any]) -> None:
        self.events_path = directory / f"{name}.jsonl"
        self.stop_file = directory / f"{name}.stop"
        document = {**settings, "events": str(self.events_path), "stop_file": str(self.stop_file)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.group_worker", json.dumps(document)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.DEVNULL,
            stderr=open(directory / f"{name}.stderr", "wb"),  # noqa: SIM115
        )

    def events(self) -> list[dict[str, Any]]:
        if not self.events_path.exists():
            return []
        found = []
        for line in self.events_path.read_text().splitlines():
            try:
                found.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return found

    def kill(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(30)

    def stop(self) -> None:
        self.stop_file.touch()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.kill()


def _settled_at(members: list[_Member]) -> float | None:
    """When the members last came to hold one generation's disjoint cover of every partition (None: not yet)."""
    latest: list[dict[str, Any]] = []
    for member in members:
        owned = [e for e in member.events() if e["e"] == "owned"]
        if not owned:
            return None
        latest.append(owned[-1])
    generations = {e["gen"] for e in latest}
    parts = [p for e in latest for _t, p in e["parts"]]
    if len(generations) != 1 or len(parts) != PARTITIONS or len(set(parts)) != PARTITIONS:
        return None
    return max(float(e["t"]) for e in latest)


def _wait_settled(members: list[_Member], after: float) -> float:
    deadline = time.monotonic() + _SETTLE_TIMEOUT_S
    while time.monotonic() < deadline:
        settled = _settled_at(members)
        if settled is not None and settled >= after:
            return settled
        time.sleep(0.05)
    raise RuntimeError(f"the group did not settle in {_SETTLE_TIMEOUT_S}s")


def _rebalances(bootstrap: str, directory: Path, strategy: str, session_s: float, round_: int) -> dict[str, float]:
    group = f"rebalance-{strategy}-{round_}"
    settings = {
        "bootstrap": bootstrap,
        "group": group,
        "topic": "groups-bench",
        "strategy": strategy,
        "session_timeout_s": session_s,
        "heartbeat_interval_s": min(1.0, session_s / 3),
        "log_records": False,
    }
    members = [_Member(directory, f"{group}-{i}", settings) for i in range(3)]
    try:
        _wait_settled(members, 0.0)
        joiner = _Member(directory, f"{group}-3", settings)
        members.append(joiner)
        started = _wait_event(joiner, "subscribing")
        join_s = _wait_settled(members, started) - started
        victim = members.pop(0)
        killed = time.time()
        victim.kill()
        death_s = _wait_settled(members, killed) - killed
    finally:
        for member in members:
            member.stop()
    return {"join_s": join_s, "death_s": death_s, "death_after_session_s": death_s - session_s}


def _wait_event(member: _Member, kind: str) -> float:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = [e for e in member.events() if e["e"] == kind]
        if found:
            return float(found[0]["t"])
        time.sleep(0.02)
    raise RuntimeError(f"no {kind} event in 60s")


def _throughput(
    bootstrap: str, directory: Path, members: int, records: int, session_s: float, round_: int
) -> dict[str, float]:
    group = f"throughput-{members}-{round_}"
    settings = {
        "bootstrap": bootstrap,
        "group": group,
        "topic": "groups-bench",
        "log_records": False,
        "session_timeout_s": session_s,
        "max_poll_records": 5_000,
    }
    started = time.time()
    processes = [_Member(directory, f"{group}-{i}", settings) for i in range(members)]
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            counts = [e for p in processes for e in p.events() if e["e"] == "count"]
            if sum(e["n"] for e in counts) >= records:
                ended = max(float(e["t"]) for e in counts)
                first = min(float(e["t"]) for e in counts)
                # Kafka's consumer-perf-test too reports the whole run and the fetch alone (after the join).
                return {"total_per_s": records / (ended - started), "fetch_per_s": records / (ended - first)}
            time.sleep(0.1)
        raise RuntimeError(f"{members} member(s) did not read {records} records in 600s")
    finally:
        for process in processes:
            process.stop()


def _fill(bootstrap: str, records: int) -> None:
    with Admin(bootstrap) as admin:
        admin.create_topic("groups-bench", partitions=PARTITIONS, replication_factor=3)
    values = [b"x" * 100] * (records // PARTITIONS)
    with Producer(bootstrap) as producer:
        futures = [producer.send_batch("groups-bench", values, partition=p) for p in range(PARTITIONS)]
        for future in futures:
            future.result(timeout=300)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--session-s", type=float, default=6.0, help="members' session timeout (default 6 s)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    args.records -= args.records % PARTITIONS  # the same count in every partition
    runs: dict[str, list[Any]] = {"cooperative-sticky": [], "range": [], "group_of_3": [], "one_member": []}
    with tempfile.TemporaryDirectory(prefix="groups-bench-") as tmp:
        directory = Path(tmp)
        info = cluster_up(directory / "cluster", 3, {"group_initial_rebalance_delay_ms": 3000})
        try:
            _fill(info.bootstrap, args.records)
            for round_ in range(args.rounds):
                for strategy in ("cooperative-sticky", "range"):
                    runs[strategy].append(_rebalances(info.bootstrap, directory, strategy, args.session_s, round_))
                    print(f"round {round_ + 1}: {strategy} rebalances done", file=sys.stderr)
                for name, count in (("group_of_3", 3), ("one_member", 1)):
                    runs[name].append(
                        _throughput(info.bootstrap, directory, count, args.records, args.session_s, round_)
                    )
                    print(f"round {round_ + 1}: {name} throughput done", file=sys.stderr)
        finally:
            cluster_down(info.directory)
    summary: dict[str, Any] = {}
    for strategy in ("cooperative-sticky", "range"):
        for figure in ("join_s", "death_s", "death_after_session_s"):
            summary[f"{strategy}.{figure}"] = statistics.median(r[figure] for r in runs[strategy])
    for figure in ("total_per_s", "fetch_per_s"):
        group = statistics.median(r[figure] for r in runs["group_of_3"])
        one = statistics.median(r[figure] for r in runs["one_member"])
        summary[f"throughput.group_of_3.{figure}"] = group
        summary[f"throughput.one_member.{figure}"] = one
        summary[f"throughput.{figure}.ratio"] = round(group / one, 3)
    result = {
        "benchmark": "groups_bench",
        "rounds": args.rounds,
        "partitions": PARTITIONS,
        "session_s": args.session_s,
        "records": args.records,
        "summary": summary,
        "runs": runs,
    }
    save_json(result, args.out)
    if args.json:
        print(json.dumps(result))
    else:
        print("| figure | median |\n|---|---|")
        for name, value in summary.items():
            print(f"| {name} | {value:,.3f} |")


if __name__ == "__main__":
    main()
