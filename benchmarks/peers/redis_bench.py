"""Redis Streams peer: one redis-server with ``appendonly yes`` and ``appendfsync always``.

Workloads, from redis-py on one connection:
  produce   XADD in pipelines of ``window`` commands (one round trip per pipeline), every reply checked
  consume   XRANGE from the first entry in pages of ``consume_batch`` entries, each page starting after the last
  latency   one XADD at a time, each waiting for its reply
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import redis
import redis.utils
from common import (
    PROCESSES,
    PeerSetupError,
    ResourceAccount,
    ServerProcess,
    binary_version,
    free_ports,
    latency_summary,
    settle_disk,
    stopwatch,
    throughput,
    wait_until,
)

KEY = b"bench"
FIELD = b"d"
MIN_VERSION = (6, 2, 0)  # exclusive XRANGE bounds "(id" arrived in 6.2
START_TIMEOUT_S = 30.0
REWRITE_TIMEOUT_S = 120.0
LATENCY_WARMUP = 100

ACK_GUARANTEE = (
    "Redis with appendfsync always writes and fsyncs the AOF before it replies (one fsync per event-loop "
    "iteration, so pipelined commands share one), but it is a single node with no replication: an "
    "acknowledged write survives power loss, not the loss of the machine or its disk."
)

CONFIG = {
    "appendonly": "yes",
    "appendfsync": "always",
    "save": '""',  # no RDB snapshots: the AOF is the durability being measured
    # Left at their defaults, and they matter: a 100 MB produce triggers one AOF rewrite (a fork) mid-run.
    "auto-aof-rewrite-percentage": "100",
    "auto-aof-rewrite-min-size": "64mb",
    "no-appendfsync-on-rewrite": "no",
    "aof-use-rdb-preamble": "yes",
}


@dataclass
class RedisServer:
    version: str
    server: ServerProcess
    port: int

    @property
    def servers(self) -> dict[str, ServerProcess]:
        return {"redis": self.server}

    def client(self, timeout_s: float) -> redis.Redis:
        return redis.Redis(
            host="127.0.0.1", port=self.port, socket_timeout=timeout_s, socket_connect_timeout=5, decode_responses=False
        )


def check_version(binary: str) -> str:
    text, parsed = binary_version([binary, "--version"], r"v=(\d+\.\d+\.\d+)")
    if parsed < MIN_VERSION:
        raise PeerSetupError(f"redis-server {text} is too old; need >= {'.'.join(map(str, MIN_VERSION))}")
    return text


def client_parser() -> str:
    return "hiredis" if redis.utils.HIREDIS_AVAILABLE else "python (redis-py's own parser; hiredis not installed)"


def start_server(binary: str, version: str, workdir: Path) -> RedisServer:
    (port,) = free_ports(1)
    directory = workdir / "redis"
    directory.mkdir(parents=True, exist_ok=True)
    lines = [
        "bind 127.0.0.1",
        f"port {port}",
        "protected-mode yes",
        "daemonize no",
        f'dir "{directory}"',
        *(f"{key} {value}" for key, value in CONFIG.items()),
    ]
    conf = directory / "redis.conf"
    conf.write_text("\n".join(lines) + "\n")
    process = PROCESSES.start("redis-server", [binary, str(conf)], directory / "log.txt", directory)
    server = RedisServer(version, process, port)
    client = server.client(2)

    def ready() -> bool:
        process.check_alive()
        try:
            return bool(client.ping()) and client.info("persistence").get("loading") == 0
        except redis.RedisError:
            return False

    try:
        wait_until(ready, START_TIMEOUT_S, "redis-server to answer PING", interval_s=0.05)
        settings = {_text(k): _text(v) for k, v in client.config_get("append*").items()}
        if settings.get("appendfsync") != "always" or settings.get("appendonly") != "yes":
            raise PeerSetupError(f"redis-server did not take appendonly/appendfsync from {conf}: {settings}")
    finally:
        client.close()
    return server


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _aof_rewrites(client: redis.Redis) -> int:
    return int(client.info("persistence").get("aof_rewrites", 0))


def _reset(client: redis.Redis) -> None:
    """Delete the stream and compact the AOF, so that every run starts from the same small file."""
    client.delete(KEY)

    def idle() -> bool:
        info = client.info("persistence")
        return info.get("aof_rewrite_in_progress") == 0 and info.get("aof_rewrite_scheduled") == 0

    wait_until(idle, REWRITE_TIMEOUT_S, "a running AOF rewrite to finish", interval_s=0.1)
    client.bgrewriteaof()
    wait_until(idle, REWRITE_TIMEOUT_S, "BGREWRITEAOF to finish", interval_s=0.1)


def _produce(client: redis.Redis, count: int, payload: bytes, window: int) -> float:
    fields: dict[Any, Any] = {FIELD: payload}
    with stopwatch() as elapsed:
        sent = 0
        while sent < count:
            batch = min(window, count - sent)
            pipe = client.pipeline(transaction=False)
            for _ in range(batch):
                pipe.xadd(KEY, fields)
            replies = pipe.execute()
            if len(replies) != batch:
                raise RuntimeError(f"pipeline of {batch} XADDs returned {len(replies)} replies")
            sent += batch
    return elapsed[0]


def _consume(client: redis.Redis, count: int, size: int, batch: int, deadline_s: float) -> float:
    received = 0
    received_bytes = 0
    deadline = time.monotonic() + deadline_s
    start: bytes = b"-"
    with stopwatch() as elapsed:
        while received < count:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"consumed {received} of {count} entries in {deadline_s:.0f} s")
            entries = cast(
                "list[tuple[bytes, dict[bytes, bytes]]]",
                client.xrange(KEY, min=start, max=b"+", count=min(batch, count - received)),
            )
            if not entries:
                break
            received += len(entries)
            received_bytes += sum(len(fields[FIELD]) for _, fields in entries)
            start = b"(" + entries[-1][0]
    if received != count or received_bytes != count * size:
        raise RuntimeError(f"consumed {received} entries / {received_bytes} bytes, expected {count} / {count * size}")
    return elapsed[0]


def _latency(client: redis.Redis, samples: int, payload: bytes) -> list[float]:
    fields: dict[Any, Any] = {FIELD: payload}
    timings = []
    clock = time.perf_counter
    for _ in range(samples):
        started = clock()
        client.xadd(KEY, fields)
        timings.append(clock() - started)
    return timings


def run(server: RedisServer, params: dict[str, Any], timeout_s: float) -> dict[str, dict[str, Any]]:
    """One run of every workload on a fresh stream; the server stays up between runs."""
    server.server.check_alive()
    count, size, samples = params["count"], params["size"], params["latency_samples"]
    payload = os.urandom(size)
    client = server.client(timeout_s)
    result: dict[str, dict[str, Any]] = {}
    try:
        _reset(client)
        settle_disk()
        rewrites = _aof_rewrites(client)
        with ResourceAccount(server.servers) as account:
            elapsed = _produce(client, count, payload, params["window"])
        result["produce"] = {
            **throughput(count, size, elapsed),
            **account.as_dict(count, size),
            "aof_rewrites_during": _aof_rewrites(client) - rewrites,
        }

        with ResourceAccount(server.servers) as account:
            elapsed = _consume(client, count, size, params["consume_batch"], timeout_s)
        result["consume"] = {**throughput(count, size, elapsed), **account.as_dict(count, size)}

        _reset(client)
        settle_disk()
        _latency(client, LATENCY_WARMUP, payload)
        rewrites = _aof_rewrites(client)
        with ResourceAccount(server.servers) as account, stopwatch() as elapsed_box:
            timings = _latency(client, samples, payload)
        result["latency"] = {
            **latency_summary(timings),
            **throughput(samples, size, elapsed_box[0]),
            **account.as_dict(samples, size),
            "aof_rewrites_during": _aof_rewrites(client) - rewrites,
        }
        client.delete(KEY)
    finally:
        client.close()
    return result


def describe(server: RedisServer, params: dict[str, Any]) -> dict[str, Any]:
    """What was measured and how, for the JSON."""
    return {
        "system": "Redis Streams",
        "server_version": server.version,
        "topology": "1 redis-server process on 127.0.0.1, no replicas; one stream key",
        "ack_guarantee": ACK_GUARANTEE,
        "config": {key: value.strip('"') for key, value in CONFIG.items()},
        "client_parser": client_parser(),
        "params": {
            "produce": {
                "count": params["count"],
                "size": params["size"],
                "window": params["window"],
                "window_kind": "pipeline: `window` XADDs sent, then all replies read (one round trip each)",
                "batch": params["window"],
            },
            "consume": {
                "count": params["count"],
                "size": params["size"],
                "batch": params["consume_batch"],
                "command": "XRANGE key (last-id + COUNT batch",
            },
            "latency": {
                "samples": params["latency_samples"],
                "warmup": LATENCY_WARMUP,
                "size": params["size"],
                "window": 1,
            },
        },
    }
