"""NATS JetStream peer: a real 3-node nats-server cluster with JetStream (file storage) and an R3 stream.

Workloads, from nats-py on one connection:
  produce   publish_async with at most ``window`` acknowledgements outstanding, then wait for all of them
  consume   an ordered push consumer (ack none, flow control) reads every message from the first
  latency   one publish at a time, each waiting for its PubAck
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
from common import (
    PROCESSES,
    PeerSetupError,
    ResourceAccount,
    ServerProcess,
    binary_version,
    free_ports,
    latency_summary,
    run_async,
    settle_disk,
    stopwatch,
    throughput,
    wait_until,
)
from nats.aio.client import Client as NATSClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy, RetentionPolicy, StorageType, StreamConfig

NODES = 3
STREAM = "BENCH"
SUBJECT = "bench.data"
MIN_VERSION = (2, 2, 0)  # JetStream first shipped in 2.2
MAX_PAYLOAD = 1024 * 1024  # nats-server default max_payload
START_TIMEOUT_S = 60.0
API_TIMEOUT_S = 30.0
LATENCY_WARMUP = 100

ACK_GUARANTEE = (
    "JetStream (2.9) acknowledges a publish once the stream's Raft group has stored it on a quorum (2 of 3 "
    "nodes), in their page cache: it does not fsync per write. File storage is fsynced on a timer (every "
    "2 minutes by default; sync_interval from 2.10), so acknowledged messages can be lost if a quorum of "
    "nodes loses power within that window."
)


@dataclass
class NatsCluster:
    version: str
    servers: dict[str, ServerProcess]
    client_ports: dict[str, int]
    monitor_ports: dict[str, int]

    @property
    def urls(self) -> list[str]:
        return [f"nats://127.0.0.1:{port}" for port in self.client_ports.values()]


def check_version(binary: str) -> str:
    text, parsed = binary_version([binary, "--version"], r"v(\d+\.\d+\.\d+\S*)")
    if parsed < MIN_VERSION:
        raise PeerSetupError(f"nats-server {text} has no JetStream; need >= {'.'.join(map(str, MIN_VERSION))}")
    return text


def _config(name: str, index: int, ports: list[int], store: Path) -> str:
    client, cluster, monitor = ports[index * 3 : index * 3 + 3]
    routes = "\n".join(f'    "nats-route://127.0.0.1:{ports[i * 3 + 1]}"' for i in range(NODES) if i != index)
    return f"""\
server_name: {name}
listen: 127.0.0.1:{client}
http: 127.0.0.1:{monitor}
max_payload: {MAX_PAYLOAD}
jetstream {{
  store_dir: "{store}"
  max_memory_store: 256MB
  max_file_store: 64GB
}}
cluster {{
  name: multiraft-peers
  listen: 127.0.0.1:{cluster}
  routes: [
{routes}
  ]
}}
"""


def _jsz(port: int) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/jsz", timeout=2) as response:
            return json.loads(response.read())  # type: ignore[no-any-return]
    except (OSError, ValueError, urllib.error.URLError):
        return None


def start_cluster(binary: str, version: str, workdir: Path) -> NatsCluster:
    """Start three nodes and wait (bounded) until they agree on a JetStream meta leader."""
    ports = free_ports(NODES * 3)
    servers: dict[str, ServerProcess] = {}
    client_ports: dict[str, int] = {}
    monitor_ports: dict[str, int] = {}
    for index in range(NODES):
        name = f"n{index + 1}"
        node_dir = workdir / "nats" / name
        (node_dir / "jetstream").mkdir(parents=True, exist_ok=True)
        conf = node_dir / "nats.conf"
        conf.write_text(_config(name, index, ports, node_dir / "jetstream"))
        servers[name] = PROCESSES.start(
            f"nats-server {name}", [binary, "-c", str(conf)], node_dir / "log.txt", node_dir
        )
        client_ports[name] = ports[index * 3]
        monitor_ports[name] = ports[index * 3 + 2]

    def ready() -> bool:
        for server in servers.values():
            server.check_alive()
        for port in monitor_ports.values():
            jsz = _jsz(port)
            meta = (jsz or {}).get("meta_cluster") or {}
            if not meta.get("leader") or meta.get("cluster_size") != NODES:
                return False
        return True

    wait_until(ready, START_TIMEOUT_S, "the NATS cluster to elect a JetStream meta leader", interval_s=0.2)
    return NatsCluster(version, servers, client_ports, monitor_ports)


async def _connect(cluster: NatsCluster, window: int) -> tuple[NATSClient, JetStreamContext]:
    # Always the first node, so runs are alike; the stream leader may be elsewhere (recorded per run).
    nc = await nats.connect(
        servers=cluster.urls,
        dont_randomize=True,
        connect_timeout=5,
        max_reconnect_attempts=0,
        allow_reconnect=False,
    )
    return nc, nc.jetstream(timeout=API_TIMEOUT_S, publish_async_max_pending=window)


async def _fresh_stream(js: JetStreamContext) -> dict[str, Any]:
    with contextlib.suppress(nats.js.errors.NotFoundError):
        await js.delete_stream(STREAM)
    config = StreamConfig(
        name=STREAM,
        subjects=[SUBJECT],
        storage=StorageType.FILE,
        num_replicas=NODES,
        retention=RetentionPolicy.LIMITS,
    )
    deadline = time.monotonic() + API_TIMEOUT_S
    while True:  # the stream's own Raft group may need a moment after a delete
        try:
            await js.add_stream(config)
            break
        except nats.js.errors.APIError:
            if time.monotonic() >= deadline:
                raise
            await asyncio.sleep(0.2)
    while True:
        info = await js.stream_info(STREAM)
        if info.cluster is not None and info.cluster.leader:
            return {"stream_leader": info.cluster.leader}
        if time.monotonic() >= deadline:
            raise TimeoutError(f"stream {STREAM} has no leader after {API_TIMEOUT_S:.0f} s")
        await asyncio.sleep(0.1)


async def _produce(js: JetStreamContext, count: int, payload: bytes, timeout_s: float) -> float:
    futures: list[asyncio.Future[Any]] = []
    deadline = time.monotonic() + timeout_s
    try:
        # No per-call wait_stall (it wraps each semaphore wait in a task); one deadline bounds the whole loop.
        async with asyncio.timeout(timeout_s):
            with stopwatch() as elapsed:
                for _ in range(count):
                    futures.append(await js.publish_async(SUBJECT, payload))
                await js.publish_async_completed()
    except (TimeoutError, nats.js.errors.TooManyStalledMsgsError) as exc:
        if time.monotonic() < deadline:
            raise
        raise TimeoutError(
            f"{len(futures)} of {count} publishes sent, not all acknowledged in {timeout_s:.0f} s"
        ) from exc
    failed = [f.exception() for f in futures if f.exception() is not None]
    if failed:
        raise RuntimeError(f"{len(failed)} of {count} publishes failed; first: {failed[0]!r}")
    return elapsed[0]


async def _consume(js: JetStreamContext, count: int, size: int, timeout_s: float) -> float:
    """Read the stream from its first message with an ordered push consumer (ack none, flow control).

    It is how JetStream reads a stream in order (KV watchers and the object store use it), and the fastest way
    from nats-py: a pull consumer fetching batches of 1,000 ran at about a fifth of the rate here.
    """
    received = 0
    received_bytes = 0
    last: list[Msg] = []
    done = asyncio.Event()

    async def on_message(message: Msg) -> None:
        nonlocal received, received_bytes
        received += 1
        received_bytes += len(message.data)
        if received >= count:
            last.append(message)
            done.set()

    with stopwatch() as elapsed:
        subscription = await js.subscribe(
            SUBJECT,
            stream=STREAM,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.ALL,
            cb=on_message,
        )
        try:
            async with asyncio.timeout(timeout_s):
                await done.wait()
        except TimeoutError as exc:
            raise TimeoutError(f"consumed {received} of {count} messages in {timeout_s:.0f} s") from exc
        finally:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()
    last_sequence = last[0].metadata.sequence.stream if last else None
    if received != count or received_bytes != count * size or last_sequence != count:
        raise RuntimeError(
            f"consumed {received} messages / {received_bytes} bytes ending at stream sequence {last_sequence}, "
            f"expected {count} / {count * size} ending at {count}"
        )
    return elapsed[0]


async def _latency(js: JetStreamContext, samples: int, payload: bytes) -> list[float]:
    timings = []
    clock = time.perf_counter
    for _ in range(samples):
        started = clock()
        await js.publish(SUBJECT, payload)
        timings.append(clock() - started)
    return timings


def _client_server(nc: NATSClient, cluster: NatsCluster) -> str:
    url = nc.connected_url
    port = url.port if url is not None else None
    return next((name for name, p in cluster.client_ports.items() if p == port), "unknown")


async def _one_run(cluster: NatsCluster, params: dict[str, Any], timeout_s: float) -> dict[str, dict[str, Any]]:
    count, size, samples = params["count"], params["size"], params["latency_samples"]
    payload = os.urandom(size)
    nc, js = await _connect(cluster, params["window"])
    result: dict[str, dict[str, Any]] = {}
    try:
        placement = {**await _fresh_stream(js), "client_server": _client_server(nc, cluster)}
        settle_disk()
        with ResourceAccount(cluster.servers) as account:
            elapsed = await _produce(js, count, payload, timeout_s)
        result["produce"] = {**throughput(count, size, elapsed), **account.as_dict(count, size), **placement}

        with ResourceAccount(cluster.servers) as account:
            elapsed = await _consume(js, count, size, timeout_s)
        result["consume"] = {**throughput(count, size, elapsed), **account.as_dict(count, size), **placement}

        placement = {**await _fresh_stream(js), "client_server": _client_server(nc, cluster)}
        settle_disk()
        async with asyncio.timeout(timeout_s):
            await _latency(js, LATENCY_WARMUP, payload)
        with ResourceAccount(cluster.servers) as account, stopwatch() as elapsed_box:
            async with asyncio.timeout(timeout_s):
                timings = await _latency(js, samples, payload)
        result["latency"] = {
            **latency_summary(timings),
            **throughput(samples, size, elapsed_box[0]),
            **account.as_dict(samples, size),
            **placement,
        }
        await js.delete_stream(STREAM)
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(nc.close(), 10)
    return result


def run(cluster: NatsCluster, params: dict[str, Any], timeout_s: float) -> dict[str, dict[str, Any]]:
    """One run of every workload on a fresh stream; the cluster stays up between runs."""
    for server in cluster.servers.values():
        server.check_alive()
    return run_async(_one_run(cluster, params, timeout_s))


def describe(cluster: NatsCluster, params: dict[str, Any]) -> dict[str, Any]:
    """What was measured and how, for the JSON."""
    return {
        "system": "NATS JetStream",
        "server_version": cluster.version,
        "topology": f"{NODES} nats-server processes on 127.0.0.1 in one cluster; one stream, R{NODES}, file storage",
        "ack_guarantee": ACK_GUARANTEE,
        "config": {
            "stream": {"replicas": NODES, "storage": "file", "retention": "limits", "subjects": [SUBJECT]},
            "jetstream_sync": "server default (2.9: fsync every 2 min; not configurable before 2.10)",
            "max_payload": MAX_PAYLOAD,
            "client_connects_to": "n1 (the stream leader is elected; see stream_leader per run)",
        },
        "params": {
            "produce": {
                "count": params["count"],
                "size": params["size"],
                "window": params["window"],
                "window_kind": "sliding: at most `window` publishes awaiting their PubAck (publish_async)",
                "batch": "none: one PUB per message (nats-py coalesces socket writes)",
            },
            "consume": {
                "count": params["count"],
                "size": params["size"],
                "consumer": "ordered push consumer from sequence 1 (ack none, flow control), message callback",
                "batch": "none: the server pushes with flow control",
            },
            "latency": {
                "samples": params["latency_samples"],
                "warmup": LATENCY_WARMUP,
                "size": params["size"],
                "window": 1,
            },
        },
    }
