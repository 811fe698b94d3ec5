"""The code blocks of README.md and docs/*.md run, as they are written there, against a live cluster.

Every fenced block says what it is by its info string (the word after the opening fence):

* ``python``: run with ``exec``, the blocks of one page in one namespace, in page order. The page's
  ``127.0.0.1:PORT[,...]`` addresses become the test cluster's; ``bootstrap`` is that address, ``handle()``
  takes a record and ``running`` (the pages' ``while running:``) is true until ``handle()`` got one (at most
  20 s; a loop that handled none fails the test).
* ``console``: a shell session. Each ``$ COMMAND`` runs with ``bash`` (``multiraft`` on the PATH,
  ``MULTIRAFT_BOOTSTRAP`` set to the cluster) and must exit as the session shows (``[exit N]`` after its
  output; 0 when absent); every ``error: ...`` line shown must be what it printed. ``$ cat FILE`` of a file
  that does not exist yet creates it from the output shown (how a page shows its input file).
* ``bash``: a script, run whole from the repository root (``scripts/...`` work; it may start its own cluster).
* ``text``, ``toml``, ``json``: not code (diagrams, output, configuration); never run.

A block of a runnable kind that must not run (it needs Spark, a secure cluster, a fourth node, or runs for
minutes) is marked by an HTML comment on the line before its fence: ``<!-- not run: REASON -->``. A fence
without an info string fails :func:`test_every_block_is_run_or_marked`. Paths under ``/tmp/`` are moved into
the test's own temporary directory. Each page starts on a cluster without topics: the pages share one.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from multiraft.tools.launcher import cluster_down
from tests.cli._helpers import ROOT
from tests.integration._helpers import Cluster

pytestmark = pytest.mark.integration

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = ("python", "console", "bash")
NOT_CODE = ("text", "toml", "json")
_NOT_RUN = re.compile(r"^<!-- not run: .+ -->$")
_ADDRESSES = re.compile(r"127\.0\.0\.1:\d+(?:,127\.0\.0\.1:\d+)*")
_TMP_PATH = re.compile(r"(?<![\w/])/tmp/")
# Topics a page uses without creating them (its text says they exist), with how many records they hold.
_GIVEN_TOPICS = {"client.md": {"orders": 3, "refunds": 1}, "consumer-groups.md": {"orders": 3}}


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    kind: str
    text: str
    not_run: bool

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line} ({self.kind})"


def blocks(page: Path) -> Iterator[Block]:
    lines = page.read_text(encoding="utf-8").split("\n")
    index = 0
    while index < len(lines):
        opening = re.match(r"^\s*```(.*)$", lines[index])
        if opening is None:
            index += 1
            continue
        end = index + 1
        while not re.match(r"^\s*```\s*$", lines[end]):
            end += 1
        previous = next((lines[i].strip() for i in range(index - 1, -1, -1) if lines[i].strip()), "")
        kind = opening.group(1).strip().split(" ")[0] if opening.group(1).strip() else ""
        yield Block(page, index + 1, kind, "\n".join(lines[index + 1 : end]), bool(_NOT_RUN.match(previous)))
        index = end + 1


def test_every_block_is_run_or_marked() -> None:
    unknown = [str(b) for page in PAGES for b in blocks(page) if b.kind not in RUNNABLE + NOT_CODE]
    assert not unknown, f"give these fences an info string ({', '.join(RUNNABLE + NOT_CODE)}): {unknown}"
    run = [b for page in PAGES for b in blocks(page) if b.kind in RUNNABLE and not b.not_run]
    assert len(run) >= 20, "the pages' examples are expected to run"


# ------------------------------------------------------------------------------------------------- runners


class _Running:
    """``while running:`` and ``handle(record)`` in a page: loop until a record was handled (a group takes
    a few seconds to form), at most ``limit_s``."""

    def __init__(self, limit_s: float = 20.0) -> None:
        self._deadline = time.monotonic() + limit_s
        self.handled = 0
        self.looped = False

    def handle(self, *record: object) -> None:
        self.handled += 1

    def __bool__(self) -> bool:
        self.looped = True
        return self.handled == 0 and time.monotonic() < self._deadline


@dataclass
class _Session:
    bootstrap: str
    directory: Path  # the page's working directory, and where /tmp/ paths go

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MULTIRAFT_")}
        env["MULTIRAFT_BOOTSTRAP"] = self.bootstrap
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        env["COLUMNS"] = "200"
        return env

    def localize(self, text: str) -> str:
        return _TMP_PATH.sub(f"{self.directory}/tmp/", text)


def _run_python(block: Block, session: _Session, namespace: dict[str, object]) -> None:
    running = _Running()
    namespace.update(bootstrap=session.bootstrap, handle=running.handle, running=running)
    source = _ADDRESSES.sub(session.bootstrap, session.localize(block.text))
    exec(compile(source, str(block), "exec"), namespace)  # the page's own example
    # A reader's loop that never sees a record (a group starting at "latest") is a broken example.
    assert not running.looped or running.handled, f"{block}: its loop handled no record"


def _commands(text: str) -> Iterator[tuple[str, list[str]]]:
    """Each ``$ COMMAND`` of a session with the output lines shown after it."""
    command: str | None = None
    output: list[str] = []
    for line in text.split("\n"):
        if line.startswith("$ "):
            if command is not None:
                yield command, output
            command, output = line[2:], []
        elif command is not None:
            output.append(line)
    if command is not None:
        yield command, output


def _run_console(block: Block, session: _Session) -> None:
    for typed, shown in _commands(block.text):
        command = session.localize(typed)
        cat = re.fullmatch(r"cat (\S+)", command.strip())
        if cat and not (session.directory / cat.group(1)).exists():
            (session.directory / cat.group(1)).write_text("\n".join(shown).rstrip("\n") + "\n")
            continue
        if command.rstrip() == "":  # a prompt with nothing typed
            continue
        exits = [int(m.group(1)) for line in shown if (m := re.fullmatch(r"\[exit (\d+)\]", line.strip()))]
        expected = exits[0] if exits else 0
        result = subprocess.run(
            ["bash", "-o", "pipefail", "-c", command],
            cwd=session.directory,
            env=session.environment(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=120,
            check=False,
        )
        stderr = result.stderr.decode(errors="replace")
        where = f"{block}: $ {command}\nstdout: {result.stdout.decode(errors='replace')}\nstderr: {stderr}"
        assert result.returncode == expected, where
        for line in shown:
            if line.startswith("error: "):
                assert line in stderr.splitlines(), f"{where}\nshown: {line}"


def _run_bash(block: Block, session: _Session) -> None:
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", session.localize(block.text)],
        cwd=ROOT,
        env={**session.environment(), "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, (str(block), result.stdout.decode(), result.stderr.decode())


def _clean(cluster: Cluster) -> None:
    """Drop every topic a page made, so the next page starts as the docs assume."""
    from multiraft import Admin

    with Admin(cluster.bootstrap) as admin:
        for topic in admin.list_topics():
            if not topic.name.startswith("__"):
                admin.delete_topic(topic.name)


def _given_topic(cluster: Cluster, topic: str, records: int) -> None:
    from multiraft import Producer

    cluster.create_topic(topic, 3, 3)
    with Producer(cluster.bootstrap) as producer:
        for number in range(records):
            producer.send(topic, f"record {number}", key=f"key {number}")


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_the_pages_examples_run(page: Path, shared_cluster: Cluster, tmp_path: Path) -> None:
    runnable = [b for b in blocks(page) if b.kind in RUNNABLE and not b.not_run]
    if not runnable:
        pytest.skip(f"{page.name} has no runnable block")
    _clean(shared_cluster)
    for topic, records in _GIVEN_TOPICS.get(page.name, {}).items():
        _given_topic(shared_cluster, topic, records)
    session = _Session(shared_cluster.bootstrap, tmp_path)
    namespace: dict[str, object] = {"__name__": f"doc:{page.name}"}
    try:
        for block in runnable:
            if block.kind == "python":
                _run_python(block, session, namespace)
            elif block.kind == "console":
                _run_console(block, session)
            else:
                _run_bash(block, session)
    finally:
        for state in tmp_path.rglob("cluster.json"):  # clusters a page's script started
            cluster_down(state.parent)
        shutil.rmtree(tmp_path / "tmp", ignore_errors=True)
