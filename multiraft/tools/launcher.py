"""Local clusters on 127.0.0.1: ``scripts/cluster up|down|status|kill|start`` and ``multiraft cluster``
(the command line is in :mod:`multiraft.tools.cli._cluster`).

A cluster lives in one directory::

    DIR/cluster.json        nodes, their addresses and PIDs, and the bootstrap address
    DIR/n<ID>/node.toml     the node's configuration (start it again with the same arguments)
    DIR/n<ID>/data/         its log store
    DIR/n<ID>/node.log      its stdout and stderr
    DIR/tls/                with ``up --secure``: the CA, node and client certificates (multiraft.security.tls)

Processes are started in their own session and stopped by the PIDs recorded here, after checking that each
PID still runs a multiraft node of this directory (a recycled PID is never signalled).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import grpc

from multiraft.security.tls import node_name, write_cluster_certificates

__all__ = [
    "ClusterInfo",
    "free_ports",
    "NodeProcess",
    "cluster_up",
    "cluster_down",
    "cluster_status",
    "kill_node",
    "start_node",
    "add_node",
    "stop_node",
    "load_cluster",
]

_STATE_FILE = "cluster.json"
_READY_TIMEOUT_S = 60.0


@dataclass
class NodeProcess:
    node_id: int
    client_address: str
    peer_address: str
    gossip_address: str
    directory: str
    pid: int = 0

    @property
    def config_path(self) -> Path:
        return Path(self.directory) / "node.toml"

    @property
    def log_path(self) -> Path:
        return Path(self.directory) / "node.log"


@dataclass
class ClusterInfo:
    directory: str
    nodes: dict[int, NodeProcess] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    # With --secure: how a client connects (ca_file, cert_file, key_file), and the certificates' directory.
    tls: dict[str, str] = field(default_factory=dict)
    # With --nodes-per-host N: nodes 1..N get host "host-1", N+1..2N "host-2", ... (0: no hosts).
    nodes_per_host: int = 0

    @property
    def secure(self) -> bool:
        return bool(self.tls)

    def node_settings(self, node_id: int) -> dict[str, Any]:
        """Every node's settings plus this node's own host and TLS files (a new node gets its certificate here)."""
        host = {"host": host_name(node_id, self.nodes_per_host)} if self.nodes_per_host else {}
        if not self.secure:
            return {**host, **self.settings}
        directory = Path(self.tls["directory"])
        cert, key = directory / f"{node_name(node_id)}.pem", directory / f"{node_name(node_id)}-key.pem"
        if not cert.exists():
            write_cluster_certificates(directory, [node_id], clients=())
        files = {"tls_cert_file": str(cert), "tls_key_file": str(key), "tls_ca_file": self.tls["ca_file"]}
        return {**files, "tls_client_auth": "requested", **host, **self.settings}

    @property
    def bootstrap(self) -> str:
        return ",".join(node.client_address for node in self.nodes.values())

    def save(self) -> None:
        document = {
            "nodes": [asdict(n) for n in self.nodes.values()],
            "settings": self.settings,
            "tls": self.tls,
            "nodes_per_host": self.nodes_per_host,
        }
        path = Path(self.directory) / _STATE_FILE
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(document, indent=2))
        temporary.replace(path)


def load_cluster(directory: str | os.PathLike[str]) -> ClusterInfo:
    path = Path(directory) / _STATE_FILE
    if not path.exists():
        raise FileNotFoundError(f"no cluster in {directory} (missing {_STATE_FILE})")
    document = json.loads(path.read_text())
    nodes = {int(n["node_id"]): NodeProcess(**n) for n in document["nodes"]}
    return ClusterInfo(
        str(Path(directory).resolve()),
        nodes,
        document.get("settings", {}),
        document.get("tls", {}),
        int(document.get("nodes_per_host", 0)),
    )


def host_name(node_id: int, nodes_per_host: int) -> str:
    """The pretend machine of ``node_id`` when every ``nodes_per_host`` consecutive nodes share one."""
    return f"host-{(node_id - 1) // nodes_per_host + 1}"


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (held open together while chosen, so they differ)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value))


def _write_config(node: NodeProcess, initial_cluster: list[str], settings: dict[str, Any], seeds: list[str]) -> None:
    values: dict[str, Any] = {
        "node_id": node.node_id,
        "data_dir": str(Path(node.directory) / "data"),
        "client_address": node.client_address,
        "peer_address": node.peer_address,
        "gossip_address": node.gossip_address,
        "initial_cluster": initial_cluster,
        "seeds": seeds,
        **settings,
    }
    node.config_path.write_text("".join(f"{key} = {_toml_value(value)}\n" for key, value in values.items()))


def _is_our_process(node: NodeProcess) -> bool:
    if node.pid <= 0:
        return False
    try:
        cmdline = Path(f"/proc/{node.pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(node.config_path).encode() in cmdline


def start_node(cluster: ClusterInfo, node_id: int) -> NodeProcess:
    """Start (or restart) one node with its recorded configuration and data."""
    node = cluster.nodes[node_id]
    if _is_our_process(node):
        raise RuntimeError(f"node {node_id} is already running (pid {node.pid})")
    log_file = node.log_path.open("ab")
    command = [sys.executable, "-m", "multiraft.tools.cli", "node", "start", "--config", str(node.config_path)]
    environment = {**os.environ, "PYTHONUNBUFFERED": "1"}
    password_file = cluster.tls.get("password_file")
    if password_file:  # the cluster's first user, made by the controller leader (multiraft.node.services.security)
        password = Path(password_file).read_text().strip()
        environment["MULTIRAFT_BOOTSTRAP_USER"] = f"{cluster.tls['user']}:{password}"
    process = subprocess.Popen(
        command, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        env=environment,
    )  # fmt: skip
    log_file.close()
    node.pid = process.pid
    _wait_exec(process)
    cluster.save()
    return node


def _wait_exec(process: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """Popen may return (vfork) while the kernel is still replacing the child's image, and meanwhile its
    /proc cmdline reads empty: wait for it, so that the node is recognised as ours from now on."""
    cmdline = Path(f"/proc/{process.pid}/cmdline")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        with contextlib.suppress(OSError):
            if cmdline.read_bytes():
                return
        time.sleep(0.005)


def stop_node(cluster: ClusterInfo, node_id: int, *, timeout_s: float = 10.0) -> bool:
    """SIGTERM the node, then SIGKILL it if it has not exited within ``timeout_s``; True if it was running."""
    node = cluster.nodes[node_id]
    if not _is_our_process(node):
        return False
    os.kill(node.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and _is_our_process(node):
        _reap(node.pid)
        time.sleep(0.05)
    if _is_our_process(node):
        os.kill(node.pid, signal.SIGKILL)
        _wait_gone(node)
    return True


def kill_node(cluster: ClusterInfo, node_id: int) -> bool:
    """SIGKILL one node (a crash); True if it was running."""
    node = cluster.nodes[node_id]
    if not _is_our_process(node):
        return False
    os.kill(node.pid, signal.SIGKILL)
    _wait_gone(node)
    return True


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _exit_status(pid: int) -> str:
    try:
        reaped, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return "not our child; status unknown"
    if reaped == 0:
        return "still running"
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit code {os.WEXITSTATUS(status)}"


def _log_tail(node: NodeProcess, lines: int = 15) -> str:
    try:
        tail = node.log_path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return f"no log at {node.log_path}"
    return f"last lines of {node.log_path}:\n" + "\n".join(tail)


def _wait_gone(node: NodeProcess, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and _is_our_process(node):
        _reap(node.pid)
        time.sleep(0.02)
    _reap(node.pid)


def node_serving(address: str, timeout_s: float = 1.0, tls: dict[str, str] | None = None) -> bool:
    """True once the node answers the standard gRPC health check with SERVING (it is registered); ``tls``:
    a secure cluster's :attr:`ClusterInfo.tls`."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    if tls:
        ca, key, cert = (Path(tls[name]).read_bytes() for name in ("ca_file", "key_file", "cert_file"))
        channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(ca, key, cert))
    else:
        channel = grpc.insecure_channel(address)
    with channel:
        try:
            response = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=timeout_s)
        except grpc.RpcError:
            return False
        return bool(response.status == health_pb2.HealthCheckResponse.SERVING)


def wait_serving(cluster: ClusterInfo, node_ids: list[int] | None = None, timeout_s: float = _READY_TIMEOUT_S) -> None:
    """Wait until every (given) node is registered with a controller that has a leader."""
    pending = set(node_ids if node_ids is not None else cluster.nodes)
    deadline = time.monotonic() + timeout_s
    while pending:
        for node_id in sorted(pending):
            node = cluster.nodes[node_id]
            if not _is_our_process(node):
                raise RuntimeError(f"node {node_id} exited ({_exit_status(node.pid)}); {_log_tail(node)}")
            if node_serving(node.client_address, tls=cluster.tls):
                pending.discard(node_id)
        if pending and time.monotonic() > deadline:
            raise TimeoutError(f"nodes {sorted(pending)} not serving after {timeout_s:.0f}s; see their node.log")
        if pending:
            time.sleep(0.1)


def cluster_up(
    directory: str | os.PathLike[str],
    nodes: int = 3,
    settings: dict[str, Any] | None = None,
    *,
    secure: bool = False,
    auth: bool = False,
    nodes_per_host: int = 0,
) -> ClusterInfo:
    """Start a fresh ``nodes``-node cluster in ``directory`` and wait until it serves. ``secure``: with a new
    CA, node certificates and an ``admin`` client certificate under ``DIR/tls``, TLS on the client port, mutual
    TLS on the peer port and an encrypted gossip keyring. ``auth`` (with ``secure``): SCRAM authentication and
    ACLs, with ``admin`` as the one super user (its password in ``DIR/tls/admin.password``).
    ``nodes_per_host``: pretend every that many consecutive nodes share a machine (config ``host``
    ``host-1``, ``host-2``, ...), so placement keeps a partition's replicas on distinct ones; 0: no hosts."""
    if auth and not secure:
        raise ValueError("auth needs secure: tokens and passwords must not cross plaintext")
    if nodes_per_host < 0:
        raise ValueError(f"nodes_per_host must be >= 0, got {nodes_per_host}")
    root = Path(directory).resolve()
    if (root / _STATE_FILE).exists():
        existing = load_cluster(root)
        if any(_is_our_process(n) for n in existing.nodes.values()):
            raise RuntimeError(f"a cluster is already running in {root}; run `down` first")
        # Its nodes' data belongs to that cluster: new ports and a new initial cluster would not fit it.
        raise RuntimeError(
            f"{root} holds a stopped cluster: use `start --dir {root}` to restart it in place, or remove the "
            "directory for a new one"
        )
    root.mkdir(parents=True, exist_ok=True)
    ports = free_ports(3 * nodes)
    cluster = ClusterInfo(str(root), settings=dict(settings or {}), nodes_per_host=nodes_per_host)
    if secure:
        tls_dir = write_cluster_certificates(root / "tls", [], clients=("admin",))
        cluster.tls = {
            "directory": str(tls_dir),
            "ca_file": str(tls_dir / "ca.pem"),
            "cert_file": str(tls_dir / "admin.pem"),
            "key_file": str(tls_dir / "admin-key.pem"),
        }
        cluster.settings = {**_secure_extras(tls_dir, cluster, auth), **cluster.settings}
    for position in range(nodes):
        node_id = position + 1
        node_dir = root / f"n{node_id}"
        node_dir.mkdir(exist_ok=True)
        cluster.nodes[node_id] = NodeProcess(
            node_id=node_id,
            client_address=f"127.0.0.1:{ports[3 * position]}",
            peer_address=f"127.0.0.1:{ports[3 * position + 1]}",
            gossip_address=f"127.0.0.1:{ports[3 * position + 2]}",
            directory=str(node_dir),
        )
    initial = [f"{n.node_id}={n.peer_address}" for n in cluster.nodes.values()]
    seeds = [n.gossip_address for n in cluster.nodes.values()]
    for node in cluster.nodes.values():
        _write_config(node, initial, cluster.node_settings(node.node_id), seeds)
    cluster.save()
    try:
        for node_id in cluster.nodes:
            start_node(cluster, node_id)
        wait_serving(cluster)
    except BaseException:
        cluster_down(root)
        raise
    return cluster


def _secure_extras(tls_dir: Path, cluster: ClusterInfo, auth: bool) -> dict[str, Any]:
    """A gossip keyring, and with ``auth`` the admin's password (files of mode 0600): the settings they need."""
    from membership import generate_key

    keyring = tls_dir / "gossip.keyring"
    _write_secret(keyring, generate_key() + "\n")
    extras: dict[str, Any] = {"gossip_keyring_file": str(keyring)}
    if auth:
        password_file = tls_dir / "admin.password"
        _write_secret(password_file, secrets.token_urlsafe(24) + "\n")
        cluster.tls |= {"user": "admin", "password_file": str(password_file)}
        extras |= {"authentication": ["scram-sha-256"], "authorization": True, "super_users": ["User:admin"]}
    return extras


def _write_secret(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(text)


def add_node(
    cluster: ClusterInfo, node_id: int | None = None, *, wait: bool = True, rack: str = "", host: str = ""
) -> NodeProcess:
    """Start a new node that joins the running cluster through the member-list (no initial_cluster).

    Its seeds are the gossip addresses of every node recorded so far; it registers with the controller,
    which makes it a learner of the metadata group, and the controller's rebalancing then moves replicas to
    it. ``node_id`` defaults to one above the highest recorded id; ``host`` to the cluster's grouping.
    """
    new_id = node_id if node_id is not None else max(cluster.nodes, default=0) + 1
    if new_id in cluster.nodes:
        raise ValueError(f"node {new_id} is already part of the cluster in {cluster.directory}")
    ports = free_ports(3)
    node_dir = Path(cluster.directory) / f"n{new_id}"
    node_dir.mkdir(exist_ok=True)
    node = NodeProcess(
        node_id=new_id,
        client_address=f"127.0.0.1:{ports[0]}",
        peer_address=f"127.0.0.1:{ports[1]}",
        gossip_address=f"127.0.0.1:{ports[2]}",
        directory=str(node_dir),
    )
    seeds = [n.gossip_address for n in cluster.nodes.values()]
    settings = {**cluster.node_settings(new_id), **({"rack": rack} if rack else {}), **({"host": host} if host else {})}
    _write_config(node, [], settings, seeds)
    cluster.nodes[new_id] = node
    cluster.save()
    start_node(cluster, new_id)
    if wait:
        wait_serving(cluster, [new_id])
    return node


def cluster_start(directory: str | os.PathLike[str], *, wait: bool = True) -> tuple[ClusterInfo, list[int]]:
    """Start every stopped node of the cluster in ``directory`` again (same ports and data); wait until all
    serve. Returns the cluster and the ids it started."""
    cluster = load_cluster(directory)
    started = [node_id for node_id, node in cluster.nodes.items() if not _is_our_process(node)]
    for node_id in started:
        start_node(cluster, node_id)
    if wait:
        wait_serving(cluster)
    return cluster, started


def cluster_down(directory: str | os.PathLike[str]) -> list[int]:
    """Stop every node of the cluster; returns the ids that were running."""
    cluster = load_cluster(directory)
    stopped = []
    for node_id in cluster.nodes:
        node = cluster.nodes[node_id]
        if _is_our_process(node):
            os.kill(node.pid, signal.SIGTERM)
            stopped.append(node_id)
    deadline = time.monotonic() + 15
    for node_id in stopped:
        node = cluster.nodes[node_id]
        while time.monotonic() < deadline and _is_our_process(node):
            _reap(node.pid)
            time.sleep(0.05)
        if _is_our_process(node):
            os.kill(node.pid, signal.SIGKILL)
            _wait_gone(node)
    return stopped


def cluster_status(directory: str | os.PathLike[str]) -> list[dict[str, Any]]:
    cluster = load_cluster(directory)
    rows = []
    for node in cluster.nodes.values():
        running = _is_our_process(node)
        rows.append(
            {
                "node_id": node.node_id,
                "pid": node.pid if running else None,
                "running": running,
                "serving": running and node_serving(node.client_address, 0.5, cluster.tls),
                "client_address": node.client_address,
                "peer_address": node.peer_address,
                "log": str(node.log_path),
            }
        )
    return rows
