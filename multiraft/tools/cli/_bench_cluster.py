"""The cluster ``multiraft bench`` measures: an existing one, or a throwaway local one (``--local``, with
``--secure`` a secure one), its node processes (whose CPU time is reported), and the topic of the run."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from multiraft.tools.cli._common import err_console
from multiraft.tools.cli._options import fail

__all__ = [
    "Target",
    "bench_target",
    "local_cluster",
    "client_of",
    "node_cpu_seconds",
    "prepare_topic",
    "delete_topic",
]


@dataclass
class Target:
    bootstrap: str
    node_pids: dict[str, int] | None  # "node1" -> PID, when the node processes are known
    local_dir: str | None = None
    client: dict[str, Any] = field(default_factory=dict)  # TLS and credentials of every client (--secure)


@contextlib.contextmanager
def bench_target(bootstrap: str | None, cluster_dir: Path | None, local: int | None, secure: bool) -> Iterator[Target]:
    if secure and local is None:
        fail("--secure starts a secure local cluster: give it with --local (a --cluster-dir brings its own TLS)")
    if local is not None:
        if bootstrap or cluster_dir:
            fail("--local starts its own cluster: give it without --bootstrap or --cluster-dir")
        with local_cluster(local, secure) as target:
            yield target
        return
    if cluster_dir is not None:
        from multiraft.tools.launcher import load_cluster

        try:
            info = load_cluster(cluster_dir)
        except FileNotFoundError as exc:
            fail(str(exc))
        pids = {f"node{n.node_id}": n.pid for n in info.nodes.values()}
        yield Target(bootstrap or info.bootstrap, pids, client=client_of(info))
        return
    if not bootstrap:
        fail(
            "no cluster given: pass --local N, --bootstrap HOST:PORT[,HOST:PORT] (or MULTIRAFT_BOOTSTRAP), or "
            "--cluster-dir DIR (or MULTIRAFT_CLUSTER_DIR)"
        )
    yield Target(bootstrap, None)  # node CPU is unknown: the node processes may be anywhere


@contextlib.contextmanager
def local_cluster(nodes: int, secure: bool) -> Iterator[Target]:
    from multiraft.tools.launcher import cluster_down, cluster_up

    root = Path(tempfile.mkdtemp(prefix="multiraft-bench-"))
    what = "secure " if secure else ""
    err_console.print(f"starting a local {what}{nodes}-node cluster in {root}", highlight=False)
    try:
        info = cluster_up(root / "cluster", nodes, secure=secure, auth=secure)
        try:
            pids = {f"node{n.node_id}": n.pid for n in info.nodes.values()}
            target = Target(info.bootstrap, pids, str(root), client_of(info))
            if secure:
                wait_for_admin(target)
            yield target
        finally:
            cluster_down(root / "cluster")
            reap_children([n.pid for n in info.nodes.values()])
    finally:
        shutil.rmtree(root, ignore_errors=True)


def wait_for_admin(target: Target, timeout_s: float = 60.0) -> None:
    """The nodes make the admin user once a controller leader is elected: until then it is unknown."""
    from multiraft import Admin, MultiraftError

    deadline = time.monotonic() + timeout_s
    for _ in range(1_000):
        try:
            with Admin(target.bootstrap, request_timeout_s=5, **target.client) as admin:
                admin.list_topics()
            return
        except MultiraftError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def client_of(info: Any) -> dict[str, Any]:
    """TLS (and the admin's credentials) of a secure cluster started by the launcher; nothing for a plain one."""
    from multiraft import TlsSettings

    tls = info.tls
    if not tls:
        return {}
    client: dict[str, Any] = {"tls": TlsSettings(ca_file=tls["ca_file"])}
    if "password_file" in tls:
        client |= {"user": tls["user"], "password": Path(tls["password_file"]).read_text().strip()}
    return client


def reap_children(pids: list[int], timeout_s: float = 10.0) -> None:
    """The nodes are our children: collect their exit status. cluster_down stops waiting once a node is a
    zombie, and a zombie left behind outlives us where PID 1 does not reap orphans (containers)."""
    deadline = time.monotonic() + timeout_s
    for pid in pids:
        while True:
            try:
                reaped, _status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                break  # already collected
            if reaped or time.monotonic() > deadline:
                break
            time.sleep(0.02)


def node_cpu_seconds(pids: dict[str, int] | None) -> dict[str, float | None] | None:
    if pids is None:
        return None
    import psutil

    seconds: dict[str, float | None] = {}
    for name, pid in pids.items():
        try:
            times = psutil.Process(pid).cpu_times()
            seconds[name] = float(times.user + times.system)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            seconds[name] = None
    return seconds


def prepare_topic(
    bootstrap: str, mode: str, topic: str | None, partitions: int, replication_factor: int, client: dict[str, Any]
) -> tuple[str, int, bool]:
    """The topic's name, its partition count, and whether this run created it (and so deletes it)."""
    from multiraft import Admin
    from multiraft.errors import UnknownTopicError

    name = topic or f"bench-{mode}-{uuid.uuid4().hex[:8]}"
    with Admin(bootstrap, **client) as admin:
        try:
            info = admin.describe_topic(name)
            created = False
        except UnknownTopicError:
            info = admin.create_topic(name, partitions=partitions, replication_factor=replication_factor)
            created = True
        wait_for_preferred_leaders(admin, name)
        return name, len(info.partitions), created


def wait_for_preferred_leaders(admin: Any, topic: str, timeout_s: float = 30.0) -> None:
    """A new topic's first elections sometimes put most leaders on one node for a few seconds; measuring
    then would measure that node alone. Wait (bounded) until each partition is led by its preferred leader."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        partitions = admin.describe_topic(topic).partitions
        if all(p.leader and p.leader == p.preferred_leader for p in partitions):
            return
        time.sleep(0.1)


def delete_topic(bootstrap: str, topic: str, client: dict[str, Any]) -> None:
    from multiraft import Admin

    # Best effort: the result is already in hand.
    with contextlib.suppress(Exception), Admin(bootstrap, **client) as admin:
        admin.delete_topic(topic)
