"""Consumer-group members as processes (:mod:`tests.integration.group_worker`), and what the tests read back.

Each worker is started by the test and stopped by its PID (SIGKILL at teardown if it is still running); its
events come back from its JSON-lines file. The group is looked at through ``Groups.DescribeGroups`` and the
committed offsets through ``Log.FetchOffsets``, as an operator would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from rpc.client._cluster import ClusterClient
from rpc.proto import multiraft_pb2 as pb
from rpc.proto import multiraft_pb2_grpc as pb_grpc

ROOT = Path(__file__).resolve().parents[2]
_T = TypeVar("_T")


@dataclass
class Worker:
    name: str
    process: subprocess.Popen[bytes]
    events_path: Path
    stop_file: Path
    hold_file: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        if not self.events_path.exists():
            return []
        found = []
        for line in self.events_path.read_text().splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue  # the line a kill cut short
            if kind is None or event["e"] == kind:
                found.append(event)
        return found

    def member_id(self) -> str:
        """The member id of its latest assignment ("" before it has one)."""
        owned = self.events("owned")
        return str(owned[-1]["member"]) if owned else ""

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        self.process.wait(30)

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def release_hold(self) -> None:
        self.hold_file.touch()

    def stop(self, timeout_s: float = 60) -> None:
        """Ask it to close (leaving the group) and wait for it; killed if it does not exit in time."""
        self.stop_file.touch()
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"worker {self.name} did not stop within {timeout_s}s") from None


@dataclass
class Workers:
    directory: Path
    bootstrap: str
    defaults: dict[str, Any] = field(default_factory=dict)
    started: list[Worker] = field(default_factory=list)

    def start(self, name: str, **settings: Any) -> Worker:
        events = self.directory / f"{name}-{len(self.started)}.jsonl"
        stop_file = self.directory / f"{name}-{len(self.started)}.stop"
        hold_file = self.directory / f"{name}-{len(self.started)}.hold"
        document = {
            "bootstrap": self.bootstrap,
            "events": str(events),
            "stop_file": str(stop_file),
            **self.defaults,
            **settings,
        }
        if document.pop("hold", False):
            document["hold_file"] = str(hold_file)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.group_worker", json.dumps(document)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(self.directory / f"{name}-{len(self.started)}.stderr", "wb"),
        )
        worker = Worker(name, process, events, stop_file, hold_file)
        self.started.append(worker)
        return worker

    def close(self) -> None:
        for worker in self.started:
            if worker.process.poll() is None:
                worker.resume()  # a paused worker cannot be stopped otherwise
                worker.kill()

    def all_events(self, kind: str) -> list[dict[str, Any]]:
        return [event for worker in self.started for event in worker.events(kind)]


def workers_in(directory: Path, bootstrap: str, **defaults: Any) -> Iterator[Workers]:
    directory.mkdir(parents=True, exist_ok=True)
    workers = Workers(directory, bootstrap, defaults)
    try:
        yield workers
    finally:
        workers.close()


def wait_for(what: str, probe: Callable[[], _T | None], timeout_s: float = 60.0) -> _T:
    """``probe()`` until it returns something truthy (bounded in time and count); that value."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    for _ in range(100_000):
        try:
            value = probe()
        except AssertionError as exc:
            value, last = None, exc
        if value:
            return value
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    raise AssertionError(f"waited {timeout_s}s for {what}" + (f": {last}" if last else ""))


def describe(client: ClusterClient, group: str) -> pb.GroupDescription:
    request = pb.DescribeGroupsRequest(groups=[group])
    response = client.call_any_node(
        lambda channel, timeout: pb_grpc.GroupsStub(channel).DescribeGroups(request, timeout=timeout)
    )
    return response.groups[0]


def stable_assignment(client: ClusterClient, group: str, members: int) -> dict[str, set[int]] | None:
    """member id -> partitions, once the group is Stable with ``members`` members that hold partitions."""
    described = describe(client, group)
    if described.state != "Stable" or len(described.members) != members:
        return None
    assignment = {m.member_id: {tp.partition for tp in m.assignment} for m in described.members}
    return assignment if all(assignment.values()) else None


def committed(client: ClusterClient, group: str, topic: str, partitions: int) -> dict[int, int]:
    request = pb.FetchOffsetsRequest(
        group=group, partitions=[pb.TopicPartition(topic=topic, partition=p) for p in range(partitions)]
    )
    response = client.call_any_log(lambda stub, timeout: stub.FetchOffsets(request, timeout=timeout))
    return {o.partition: o.offset for o in response.offsets}


def processed(workers: Workers) -> set[tuple[int, int]]:
    """(partition, offset) of every record some member processed."""
    return {(p, o) for event in workers.all_events("records") for p, o in event["recs"]}


def owners_by_generation(workers: Workers) -> dict[tuple[int, int], set[str]]:
    """(generation, partition) -> the members that held it in that generation."""
    owners: dict[tuple[int, int], set[str]] = {}
    for event in workers.all_events("owned"):
        for _topic, partition in event["parts"]:
            owners.setdefault((event["gen"], partition), set()).add(event["member"])
    return owners


def assert_no_partition_owned_twice(workers: Workers) -> None:
    doubled = {key: members for key, members in owners_by_generation(workers).items() if len(members) > 1}
    assert not doubled, f"partitions owned by two members in one generation: {doubled}"


def assert_commits_skip_nothing(done: set[tuple[int, int]], offsets: dict[int, int], starts: dict[int, int]) -> None:
    """Every record below a committed offset (from the log start) was processed by some member."""
    for partition, offset in offsets.items():
        skipped = [o for o in range(starts.get(partition, 0), max(offset, 0)) if (partition, o) not in done]
        assert not skipped, f"partition {partition}: committed {offset} but never processed {skipped[:10]}"
