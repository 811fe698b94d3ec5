"""Membership benchmark: what SWIM costs a node, measured on 127.0.0.1 and projected to large clusters.

Three parts:

1. **Runtime, 5 nodes.** Five real ``MemberList`` instances (UDP + TCP on 127.0.0.1) in one asyncio process,
   converged, then measured over a steady window: CPU and bandwidth per node, for each profile. The
   baseline, measured in the same run, is a bare asyncio UDP ping/ack between five sockets at the same
   probe rate and packet size: the floor any failure detector in Python pays, without SWIM's logic.
2. **Projection, 100 and 1,000 nodes.** The same protocol core on the simulated network (virtual clock,
   LAN profile): messages and bytes per node per second in steady state, time from a crash until the first
   member and until every member declares it dead, and time for a join to reach every member.
3. **Loss.** 10% random packet loss for a long run: false deaths per member-hour and failed probe rate.

Usage::

    .venv/bin/python benchmarks/membership_bench.py            # human-readable
    .venv/bin/python benchmarks/membership_bench.py --json     # one JSON object on stdout
    .venv/bin/python benchmarks/membership_bench.py --quick    # shorter windows, smaller projection
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import sys
import time
from typing import Any, cast

from membership import EventKind, MemberEvent, MemberList, MemberMeta, MembershipConfig, MemberState, SimulatedNetwork
from multiraft.logging import configure_logging

_PING_BYTES = 33  # a SWIM ping packet: 18-byte header + 15-byte ping frame


def _machine() -> dict[str, Any]:
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), model)
    except OSError:
        pass
    return {
        "cpu_model": model,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


# 1. The runtime on 127.0.0.1


async def _runtime_cost(config: MembershipConfig, nodes: int, warmup: float, window: float) -> dict[str, Any]:
    members = [
        MemberList(MemberMeta(i, f"127.0.0.1:{20000 + i}", f"127.0.0.1:{21000 + i}"), config, rng=random.Random(i))
        for i in range(1, nodes + 1)
    ]
    try:
        for member in members:
            await member.start()
        for member in members[1:]:
            await member.join([members[0].gossip_addr])
        async with asyncio.timeout(10):
            while any(m.num_members < nodes for m in members):
                await asyncio.sleep(0.01)
        await asyncio.sleep(warmup)
        before = [m.counters() for m in members]
        cpu, wall = time.process_time(), time.perf_counter()
        await asyncio.sleep(window)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        after = [m.counters() for m in members]
    finally:
        for member in members:
            await member.stop()

    def per_node_per_second(name: str) -> float:
        return sum(a[name] - b[name] for a, b in zip(after, before, strict=True)) / nodes / wall

    return {
        "nodes": nodes,
        "window_s": round(wall, 2),
        "cpu_percent_per_node": round(100 * cpu / wall / nodes, 3),
        "udp_packets_out_per_node_s": round(per_node_per_second("packets_out"), 2),
        "udp_bytes_out_per_node_s": round(per_node_per_second("bytes_out"), 1),
        "udp_bytes_in_per_node_s": round(per_node_per_second("bytes_in"), 1),
        "tcp_push_pull_bytes_per_node_s": round(
            per_node_per_second("stream_bytes_out") + per_node_per_second("stream_bytes_in"), 1
        ),
        "probes_per_node_s": round(per_node_per_second("probes"), 2),
        "false_suspicions": sum(a["suspicions"] for a in after),
    }


class _Echo(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.transport: asyncio.DatagramTransport | None = None
        self.sent = 0
        self.bytes = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        if data[:1] == b"p" and self.transport is not None:
            self.send(b"a" + data[1:], addr)

    def send(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        if self.transport is None:
            return
        self.transport.sendto(data, addr)
        self.sent += 1
        self.bytes += len(data)


async def _baseline_cost(interval: float, nodes: int, warmup: float, window: float) -> dict[str, Any]:
    """Bare asyncio UDP ping/ack: each socket pings a random peer every ``interval``, like a probe."""
    loop = asyncio.get_running_loop()
    endpoints = [await loop.create_datagram_endpoint(_Echo, local_addr=("127.0.0.1", 0)) for _ in range(nodes)]
    protocols = [protocol for _, protocol in endpoints]
    addresses = [transport.get_extra_info("sockname") for transport, _ in endpoints]
    rng = random.Random(0)
    payload = b"p" + bytes(_PING_BYTES - 1)

    timers: dict[int, asyncio.TimerHandle] = {}

    def probe(index: int) -> None:
        peer = rng.choice([a for i, a in enumerate(addresses) if i != index])
        protocols[index].send(payload, peer)
        timers[index] = loop.call_later(interval, probe, index)

    for index in range(nodes):
        timers[index] = loop.call_later(rng.random() * interval, probe, index)
    await asyncio.sleep(warmup)
    sent = sum(p.sent for p in protocols)
    sent_bytes = sum(p.bytes for p in protocols)
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.sleep(window)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    result = {
        "nodes": nodes,
        "window_s": round(wall, 2),
        "cpu_percent_per_node": round(100 * cpu / wall / nodes, 3),
        "udp_packets_out_per_node_s": round((sum(p.sent for p in protocols) - sent) / nodes / wall, 2),
        "udp_bytes_out_per_node_s": round((sum(p.bytes for p in protocols) - sent_bytes) / nodes / wall, 1),
    }
    for timer in timers.values():
        timer.cancel()
    for transport, _ in endpoints:
        transport.close()
    return result


async def _runtime_section(warmup: float, window: float, baseline_window: float) -> dict[str, Any]:
    section: dict[str, Any] = {}
    for name, config in (("lan", MembershipConfig.lan()), ("local", MembershipConfig.local())):
        cost = await _runtime_cost(config, 5, warmup, window)
        baseline = await _baseline_cost(config.probe_interval, 5, warmup, baseline_window)
        cost["baseline_bare_udp_ping_ack"] = baseline
        cost["cpu_ratio_to_baseline"] = (
            round(cost["cpu_percent_per_node"] / baseline["cpu_percent_per_node"], 2)
            if baseline["cpu_percent_per_node"] > 0
            else None
        )
        section[name] = cost
    return section


# 2. Projection on the simulated network


def _project(n: int, config: MembershipConfig, seed: int, warmup: float, window: float) -> dict[str, Any]:
    started = time.perf_counter()
    # Cover whole push-pull periods, or the TCP share would be sampled at random.
    window = max(window, 2 * config.push_pull_period(n))
    net = SimulatedNetwork(seed=seed, record_events=False)
    net.start_converged(config, list(range(1, n + 1)))
    net.run_for(warmup)  # let every member's own join announcement finish spreading
    cores = net.cores
    before = {name: sum(getattr(c.counters, name) for c in cores.values()) for name in _TRAFFIC}
    net.run_for(window)
    rates = {
        name: (sum(getattr(c.counters, name) for c in cores.values()) - before[name]) / n / window for name in _TRAFFIC
    }

    victim = n
    first_dead: list[float] = []

    def watch(observer: int, event: MemberEvent) -> None:
        if event.kind is EventKind.DEAD and event.member.node_id == victim and not first_dead:
            first_dead.append(event.at)

    net.subscribe(watch)
    crashed_at = net.now
    net.crash(victim)
    all_dead = net.run_until_true(
        lambda: net.all_agree(victim, MemberState.DEAD), timeout=config.failure_detection_bound(n), step=0.1
    )
    newcomer = n + 1
    net.add(config, newcomer)
    net.join(newcomer, [1])
    joined = net.run_until_true(
        lambda: net.all_agree(newcomer, MemberState.ALIVE) and net.core(newcomer).num_members == n,
        timeout=120,
        step=0.05,
    )
    suspicion_shortest, suspicion_longest = config.suspicion_timeouts(n)
    return {
        "nodes": n,
        "steady_window_s": window,
        "udp_packets_out_per_node_s": round(rates["packets_out"], 2),
        "udp_bytes_out_per_node_s": round(rates["bytes_out"], 1),
        "gossip_messages_out_per_node_s": round(rates["gossip_messages_out"], 2),
        "tcp_push_pull_bytes_per_node_s": round(rates["stream_bytes_out"] + rates["stream_bytes_in"], 1),
        "crash_to_first_dead_s": round(first_dead[0] - crashed_at, 2) if first_dead else None,
        "crash_to_all_dead_s": round(all_dead, 2) if all_dead is not None else None,
        "failure_detection_bound_s": round(config.failure_detection_bound(n), 1),
        "suspicion_timeout_s": [round(suspicion_shortest, 2), round(suspicion_longest, 2)],
        "join_to_all_know_s": round(joined, 2) if joined is not None else None,
        "sim_wall_s": round(time.perf_counter() - started, 1),
    }


_TRAFFIC = ("packets_out", "bytes_out", "gossip_messages_out", "stream_bytes_out", "stream_bytes_in")


def _projection_section(sizes: list[int], trials: int, warmup: float, window: float) -> dict[str, Any]:
    config = MembershipConfig.lan()
    section: dict[str, Any] = {"profile": "lan"}
    for n in sizes:
        runs = [_project(n, config, seed, warmup, window) for seed in range(1, (trials if n <= 200 else 1) + 1)]
        merged: dict[str, Any] = {"nodes": n, "trials": len(runs)}
        for key in runs[0]:
            values = [r[key] for r in runs]
            if all(v == values[0] for v in values):
                merged[key] = values[0]
            elif all(isinstance(v, int | float) for v in values):
                merged[key] = round(statistics.median(values), 3)  # median over seeds
                merged[f"{key}_per_trial"] = values
            else:
                merged[key] = values
        section[str(n)] = merged
    return section


# 3. Loss


def _loss_section(n: int, seconds: float, loss: float) -> dict[str, Any]:
    results = {}
    for name, config in (("lan", MembershipConfig.lan()), ("local", MembershipConfig.local())):
        net = SimulatedNetwork(seed=7, loss=loss)
        net.start_converged(config, list(range(1, n + 1)))
        net.events.clear()
        net.run_for(seconds)
        cores = net.cores.values()
        probes = sum(c.counters.probes for c in cores)
        deaths = sum(1 for _, e in net.events if e.kind is EventKind.DEAD)
        member_hours = n * seconds / 3600
        results[name] = {
            "nodes": n,
            "loss": loss,
            "seconds": seconds,
            "member_hours": round(member_hours, 2),
            "false_deaths": deaths,
            "false_deaths_per_member_hour": round(deaths / member_hours, 4),
            "failed_probe_rate": round(sum(c.counters.probe_failures for c in cores) / probes, 5),
            "refutations": sum(c.counters.refutations for c in cores),
            "stale_corrections": sum(c.counters.stale_corrections for c in cores),
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="short windows and a 100/300-node projection")
    parser.add_argument("--window", type=float, default=60.0, help="runtime measurement window per profile, s")
    parser.add_argument("--baseline-window", type=float, default=20.0, help="bare UDP baseline window, s")
    parser.add_argument("--sizes", default="100,1000", help="projected cluster sizes")
    parser.add_argument("--trials", type=int, default=3, help="seeds per projected size up to 200 nodes")
    parser.add_argument("--loss-nodes", type=int, default=100)
    parser.add_argument("--loss-seconds", type=float, default=600.0, help="virtual seconds under 10%% loss")
    args = parser.parse_args()
    configure_logging("warning")

    window, baseline_window = (5.0, 5.0) if args.quick else (args.window, args.baseline_window)
    sizes = [100, 300] if args.quick else [int(s) for s in args.sizes.split(",")]
    started = time.perf_counter()
    result: dict[str, Any] = {
        "benchmark": "membership",
        "command": " ".join([os.path.relpath(sys.executable), *sys.argv]),
        "machine": _machine(),
    }
    result["runtime_127_0_0_1"] = asyncio.run(_runtime_section(2.0, window, baseline_window))
    result["projection"] = _projection_section(sizes, 1 if args.quick else args.trials, warmup=30.0, window=60.0)
    result["loss_10_percent"] = _loss_section(
        args.loss_nodes if not args.quick else 30, args.loss_seconds if not args.quick else 120.0, 0.10
    )
    result["bench_wall_s"] = round(time.perf_counter() - started, 1)
    if args.json:
        print(json.dumps(result))
    else:
        _print_report(result)


def _print_report(result: dict[str, Any]) -> None:
    machine = result["machine"]
    print(f"membership benchmark on {machine['cpu_model']} x{machine['cpu_count']}, Python {machine['python']}")
    print(f"load average at start: {machine['load_average_at_start']}\n")
    print("Runtime, 5 members on 127.0.0.1 (per member)")
    print(f"  {'profile':8} {'CPU %':>7} {'baseline %':>11} {'ratio':>6} {'pkts/s':>7} {'UDP B/s':>8} {'TCP B/s':>8}")
    for name, row in result["runtime_127_0_0_1"].items():
        base = row["baseline_bare_udp_ping_ack"]
        print(
            f"  {name:8} {row['cpu_percent_per_node']:7.3f} {base['cpu_percent_per_node']:11.3f} "
            f"{row['cpu_ratio_to_baseline'] or 0:6.2f} {row['udp_packets_out_per_node_s']:7.2f} "
            f"{row['udp_bytes_out_per_node_s']:8.1f} {row['tcp_push_pull_bytes_per_node_s']:8.1f}"
        )
    print("\nProjection, LAN profile, simulated network (per member; times in seconds)")
    print(
        f"  {'members':>7} {'pkts/s':>7} {'UDP B/s':>8} {'TCP B/s':>8} {'1st dead':>9} {'all dead':>9} {'join→all':>9}"
    )
    for key, row in result["projection"].items():
        if key == "profile":
            continue
        print(
            f"  {row['nodes']:>7} {row['udp_packets_out_per_node_s']:7.2f} {row['udp_bytes_out_per_node_s']:8.1f} "
            f"{row['tcp_push_pull_bytes_per_node_s']:8.1f} {row['crash_to_first_dead_s']!s:>9} "
            f"{row['crash_to_all_dead_s']!s:>9} {row['join_to_all_know_s']!s:>9}"
        )
    print("\n10% packet loss, simulated network")
    for name, row in result["loss_10_percent"].items():
        print(
            f"  {name:6} {row['nodes']} members x {row['seconds']:.0f} s: {row['false_deaths']} false deaths "
            f"({row['false_deaths_per_member_hour']} per member-hour), failed probe rate {row['failed_probe_rate']}"
        )
    print(f"\nbenchmark wall time {result['bench_wall_s']} s")


if __name__ == "__main__":
    main()
