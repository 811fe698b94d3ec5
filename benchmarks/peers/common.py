"""Shared parts of the peer benchmarks: installing peers, loopback ports, server processes, CPU accounting,
percentiles, medians of runs and machine facts.

Every server a benchmark starts goes through ``PROCESSES``: it is stopped by its PID when the run ends, on any
error (callers use try/finally), at interpreter exit (atexit), on SIGTERM/SIGHUP (turned into SystemExit so the
finally blocks run), and by the kernel if this process dies without cleaning up (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import importlib
import importlib.metadata
import importlib.util
import math
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psutil

# benchmarks/, for what every benchmark shares (the disk probe).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _disk import fdatasync_p50_ms

T = TypeVar("T")

MB = 1_000_000  # MB/s figures use decimal megabytes, as in the research notes
APT_TIMEOUT_S = 900.0
PIP_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 10.0


class PeerSetupError(RuntimeError):
    """A peer could not be installed, started or reached; the message says what to do."""


# ---------------------------------------------------------------------------------------------------- installing


SBIN_PATH = "/usr/local/sbin:/usr/sbin:/sbin"  # nats-server lands in /usr/sbin, often not on a user's PATH


def find_binary(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path=SBIN_PATH)


def ensure_debian_packages(binaries: Mapping[str, str]) -> dict[str, str]:
    """Make sure each binary (key) is installed, installing its Debian package (value) when running as root.

    Returns binary -> absolute path.
    """
    missing = {binary: package for binary, package in binaries.items() if find_binary(binary) is None}
    if missing:
        packages = sorted(set(missing.values()))
        if os.geteuid() != 0:
            raise PeerSetupError(
                f"{', '.join(sorted(missing))} not found; install with: sudo apt-get install -y {' '.join(packages)}"
            )
        if shutil.which("apt-get") is None:
            raise PeerSetupError(f"{', '.join(sorted(missing))} not found and apt-get is not available")
        print(f"installing Debian packages: {' '.join(packages)}", file=sys.stderr)
        if not _apt_install(packages):
            _run_bounded(["apt-get", "update"], APT_TIMEOUT_S, "apt-get update")
            if not _apt_install(packages):
                raise PeerSetupError(f"apt-get install -y {' '.join(packages)} failed; see the output above")
    paths: dict[str, str] = {}
    for binary in binaries:
        path = find_binary(binary)
        if path is None:
            raise PeerSetupError(f"{binary} is still not on PATH after installing {binaries[binary]}")
        paths[binary] = path
    return paths


def _apt_install(packages: list[str]) -> bool:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        completed = subprocess.run(
            ["apt-get", "install", "-y", "--no-install-recommends", *packages],
            env=env,
            stdout=sys.stderr,
            stderr=sys.stderr,
            timeout=APT_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise PeerSetupError(f"apt-get install took longer than {APT_TIMEOUT_S:.0f} s") from exc
    return completed.returncode == 0


def _run_bounded(argv: list[str], timeout_s: float, what: str) -> None:
    try:
        subprocess.run(argv, stdout=sys.stderr, stderr=sys.stderr, timeout=timeout_s, check=True)
    except subprocess.TimeoutExpired as exc:
        raise PeerSetupError(f"{what} took longer than {timeout_s:.0f} s") from exc
    except subprocess.CalledProcessError as exc:
        raise PeerSetupError(f"{what} failed with exit status {exc.returncode}") from exc


def ensure_python_packages(modules: Mapping[str, str]) -> None:
    """Make sure each module (key) imports, pip-installing its requirement (value) into this interpreter if not."""
    missing = [requirement for module, requirement in modules.items() if importlib.util.find_spec(module) is None]
    if not missing:
        return
    print(f"installing Python packages: {' '.join(missing)}", file=sys.stderr)
    _run_bounded([sys.executable, "-m", "pip", "install", *missing], PIP_TIMEOUT_S, "pip install")
    importlib.invalidate_caches()
    still = [module for module in modules if importlib.util.find_spec(module) is None]
    if still:
        raise PeerSetupError(f"{', '.join(still)} still cannot be imported after pip install")


def distribution_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def binary_version(argv: list[str], pattern: str) -> tuple[str, tuple[int, ...]]:
    """Run ``argv`` (e.g. ``[path, "--version"]``) and pull the version out with ``pattern`` (one group)."""
    try:
        completed = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except subprocess.TimeoutExpired as exc:
        raise PeerSetupError(f"{' '.join(argv)} did not answer within 30 s") from exc
    output = completed.stdout + completed.stderr
    match = re.search(pattern, output)
    if match is None:
        raise PeerSetupError(f"cannot read a version from {' '.join(argv)!r}: {output.strip()!r}")
    text = match.group(1)
    return text, tuple(int(part) for part in re.findall(r"\d+", text)[:3])


# ---------------------------------------------------------------------------------------------------- ports


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (all held open together, so they differ)."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str, interval_s: float = 0.05) -> None:
    """Poll ``predicate`` until it is true; raise TimeoutError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(interval_s)


# ---------------------------------------------------------------------------------------------------- processes


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: the kernel kills it if the benchmark process dies.
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)


@dataclass
class ServerProcess:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def check_alive(self) -> None:
        if not self.alive():
            raise PeerSetupError(
                f"{self.name} (pid {self.pid}) exited with status {self.popen.returncode}; "
                f"last lines of {self.log_path}:\n{self.log_tail()}"
            )


@dataclass
class ProcessRegistry:
    """Every server process started by this run, so each can be stopped by its PID whatever happens."""

    processes: list[ServerProcess] = field(default_factory=list)
    _atexit_registered: bool = False

    def start(self, name: str, argv: list[str], log_path: Path, cwd: Path) -> ServerProcess:
        if not self._atexit_registered:
            atexit.register(self.stop_all)
            self._atexit_registered = True
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log:
            popen = subprocess.Popen(
                argv,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C at the terminal reaches us only; we stop the servers
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - single-threaded at this point
            )
        process = ServerProcess(name, popen, log_path)
        self.processes.append(process)
        return process

    def stop(self, process: ServerProcess, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM, wait up to ``timeout_s``, then SIGKILL and wait again: by PID, never by name."""
        popen = process.popen
        if popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                popen.send_signal(signal.SIGTERM)
            try:
                popen.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    popen.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    popen.wait(timeout=timeout_s)
        if process in self.processes and popen.poll() is not None:
            self.processes.remove(process)

    def stop_all(self) -> None:
        for process in list(reversed(self.processes)):
            self.stop(process)


PROCESSES = ProcessRegistry()


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _raise_system_exit(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def install_signal_handlers() -> None:
    """Turn SIGTERM and SIGHUP into SystemExit so that finally blocks and atexit stop the servers."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, _raise_system_exit)


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` where SIGTERM/SIGHUP cancel the work cleanly and then become SystemExit."""

    async def guarded() -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        received: list[int] = []

        def stop(signum: int) -> None:
            received.append(signum)
            if task is not None:
                task.cancel()

        for signum in STOP_SIGNALS:
            loop.add_signal_handler(signum, stop, signum)
        try:
            return await coro
        except BaseException:
            if received:  # a client library may turn the cancellation into its own error
                raise SystemExit(128 + received[0]) from None
            raise
        finally:
            for signum in STOP_SIGNALS:
                loop.remove_signal_handler(signum)
            install_signal_handlers()

    return asyncio.run(guarded())


# ---------------------------------------------------------------------------------------------------- measuring


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU of a process, including its reaped children (Redis's AOF-rewrite fork)."""
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system + times.children_user + times.children_system)


def own_cpu_seconds() -> float:
    times = psutil.Process().cpu_times()
    return float(times.user + times.system)


def machine_busy_cpu_seconds() -> float:
    """CPU seconds all cores spent on anything but idle and iowait, machine-wide."""
    times = psutil.cpu_times()
    return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))


def process_write_bytes(pid: int) -> int:
    """Bytes the process caused to be written to storage (counted when pages are dirtied, fsynced or not)."""
    try:
        return int(psutil.Process(pid).io_counters().write_bytes)
    except (AttributeError, psutil.AccessDenied):
        return 0


class ResourceAccount:
    """CPU seconds of the client (this process) and of each server, and bytes each server wrote to storage,
    between ``__enter__`` and ``__exit__``."""

    def __init__(self, servers: Mapping[str, ServerProcess]) -> None:
        self._servers = dict(servers)
        self._client_start = 0.0
        self._cpu_start: dict[str, float] = {}
        self._write_start: dict[str, int] = {}
        self._machine_start = 0.0
        self._wall_start = 0.0
        self.client_s = 0.0
        self.machine_busy_s = 0.0
        self.wall_s = 0.0
        self.servers_s: dict[str, float] = {}
        self.servers_written: dict[str, int] = {}

    def _check_servers(self) -> None:
        for process in self._servers.values():
            process.check_alive()

    def __enter__(self) -> ResourceAccount:
        self._check_servers()
        self._write_start = {name: process_write_bytes(p.pid) for name, p in self._servers.items()}
        self._cpu_start = {name: process_cpu_seconds(p.pid) for name, p in self._servers.items()}
        self._client_start = own_cpu_seconds()
        self._machine_start = machine_busy_cpu_seconds()
        self._wall_start = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.machine_busy_s = machine_busy_cpu_seconds() - self._machine_start
        self.wall_s = time.monotonic() - self._wall_start
        self.client_s = own_cpu_seconds() - self._client_start
        if exc[0] is not None:
            return  # the workload's own error says more
        self._check_servers()
        self.servers_s = {name: process_cpu_seconds(p.pid) - self._cpu_start[name] for name, p in self._servers.items()}
        self.servers_written = {
            name: process_write_bytes(p.pid) - self._write_start[name] for name, p in self._servers.items()
        }

    def as_dict(self, messages: int, size: int) -> dict[str, Any]:
        servers_total = sum(self.servers_s.values())
        written_total = sum(self.servers_written.values())
        payload = messages * size
        return {
            "cpu_s": {
                "client": round(self.client_s, 3),
                "servers": {name: round(value, 3) for name, value in self.servers_s.items()},
                "servers_total": round(servers_total, 3),
                "client_us_per_msg": round(self.client_s / messages * 1e6, 2),
                "servers_us_per_msg": round(servers_total / messages * 1e6, 2),
                # Busy CPU on the machine used by neither (other tests, kernel writeback): noise on a shared box.
                "others": round(max(0.0, self.machine_busy_s - self.client_s - servers_total), 3),
                "machine_cores_busy": round(self.machine_busy_s / self.wall_s, 2) if self.wall_s else None,
            },
            "disk_write_mb": {
                "servers": {name: round(value / MB, 3) for name, value in self.servers_written.items()},
                "servers_total": round(written_total / MB, 3),
                "per_payload_byte": round(written_total / payload, 3) if payload else None,
            },
        }


def settle_disk(timeout_s: float = 60.0) -> None:
    """Flush dirty pages (os.sync) so the previous workload's writeback does not land in the next one's fsyncs."""
    worker = threading.Thread(target=os.sync, name="settle-disk", daemon=True)
    worker.start()
    worker.join(timeout_s)


@contextlib.contextmanager
def stopwatch() -> Iterator[list[float]]:
    """Yields a one-element list that holds the elapsed seconds after the block."""
    elapsed = [0.0]
    started = time.perf_counter()
    try:
        yield elapsed
    finally:
        elapsed[0] = time.perf_counter() - started


def throughput(messages: int, size: int, elapsed_s: float) -> dict[str, float]:
    return {
        "elapsed_s": round(elapsed_s, 4),
        "msgs_per_s": round(messages / elapsed_s, 1),
        "mb_per_s": round(messages * size / elapsed_s / MB, 3),
    }


def latency_summary(samples_s: list[float]) -> dict[str, float]:
    """p50/p99/p999 (nearest rank), mean and max of per-message round trips, in milliseconds."""
    ordered = sorted(samples_s)
    count = len(ordered)

    def rank(q: float) -> float:
        index = min(count - 1, max(0, math.ceil(q * count) - 1))
        return ordered[index] * 1000

    return {
        "p50_ms": round(rank(0.50), 4),
        "p99_ms": round(rank(0.99), 4),
        "p999_ms": round(rank(0.999), 4),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 4),
        "max_ms": round(ordered[-1] * 1000, 4),
    }


def median_of_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median of every numeric leaf across runs; other leaves kept as one value if all runs agree, else a list."""
    result: dict[str, Any] = {}
    for key, value in runs[0].items():
        values = [run.get(key) for run in runs]
        if isinstance(value, dict):
            result[key] = median_of_runs([v for v in values if isinstance(v, dict)])
        elif isinstance(value, int | float) and not isinstance(value, bool):
            median = statistics.median(float(v) for v in values if isinstance(v, int | float))
            integral = all(isinstance(v, int) for v in values) and median.is_integer()
            result[key] = int(median) if integral else round(median, 4)
        else:
            result[key] = value if all(v == value for v in values) else values
    return result


PER_RUN_FIGURES = ("msgs_per_s", "mb_per_s", "p50_ms", "p99_ms", "p999_ms")


def summarize_workload(runs: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    """Medians at the top level, the headline figures of each run under ``per_run``, the parameters, and
    every run's full figures under ``runs``."""
    summary = median_of_runs(runs)
    summary["per_run"] = {key: [run[key] for run in runs] for key in PER_RUN_FIGURES if key in runs[0]}
    summary["params"] = params
    summary["runs"] = runs
    return summary


# ---------------------------------------------------------------------------------------------------- machine


def machine_facts(directory: Path) -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "load_avg_1m_at_start": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "fdatasync_4k_p50_ms": fdatasync_p50_ms(directory),  # at start; run.py adds one at the end
        "data_dir": str(directory),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
