"""Log output: nothing ever on stdout; once an entry point configures logging, key=value (or JSON) lines on
stderr with exactly one timestamp each, added where events are rendered, not by the library that logs them.

Each scenario runs in a fresh interpreter: logging configuration is process-wide.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Loggers of storage, membership and the Raft core exist before logging is configured, as in a node.
_LIBRARY_EVENTS = """
import sys
import structlog
from membership import _runtime
from multiraft.raft import _raft
from storage import LogStore

def log_from_every_library():
    with LogStore.open(sys.argv[1]) as store:  # storage logs "log store opened" at info
        store.log("t", 0)
    _runtime._log.warning("member suspected", member="n2")
    _raft._log.bind(node=1).warning("raft event", term=3)
"""


def _python(script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a fresh interpreter, with a store directory as its argument."""
    return subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "store")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def _run(tmp_path: Path, *setup: str) -> subprocess.CompletedProcess[str]:
    """Run ``setup``, then log from every library, in a fresh interpreter."""
    return _python("\n".join([_LIBRARY_EVENTS, *setup, "log_from_every_library()"]), tmp_path)


def test_configured_logs_are_key_value_lines_on_stderr_with_one_timestamp_each(tmp_path: Path) -> None:
    result = _run(tmp_path, "from multiraft.logging import configure_logging", "configure_logging('info')")
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert [line.split(" event=")[0].split(" ", 1)[1] for line in lines] == [
        "level=info logger=storage.log",
        "level=warning logger=membership._runtime",
        "level=warning logger=multiraft.raft._raft",
    ]
    assert all(line.startswith("timestamp=") and line.count("timestamp=") == 1 for line in lines)
    assert 'event="raft event" node=1 term=3' in lines[2]


def test_configured_logs_are_json_objects_when_asked(tmp_path: Path) -> None:
    result = _run(tmp_path, "from multiraft.logging import configure_logging", "configure_logging('info', json=True)")
    assert result.stdout == ""
    events = [json.loads(line) for line in result.stderr.splitlines()]
    assert [(e["logger"], e["event"]) for e in events] == [
        ("storage.log", "log store opened"),
        ("membership._runtime", "member suspected"),
        ("multiraft.raft._raft", "raft event"),
    ]
    assert all(isinstance(e["timestamp"], str) and e["timestamp"].endswith("Z") for e in events)


def test_before_configuration_a_process_using_multiraft_prints_nothing_on_stdout(tmp_path: Path) -> None:
    # What a Spark executor or a client application does: import the library, never configure logging.
    result = _run(tmp_path, "import multiraft.logging")
    assert result.stdout == ""
    assert result.stderr.splitlines() == [  # stdlib's default: warnings and errors only, on stderr
        'level=warning logger=membership._runtime event="member suspected" member=n2',
        'level=warning logger=multiraft.raft._raft event="raft event" node=1 term=3',
    ]


def test_storage_and_membership_used_alone_never_print_on_stdout(tmp_path: Path) -> None:
    # No multiraft import at all, so nothing has routed or configured structlog: its default would print.
    script = """
import sys
from membership import _runtime
from storage import LogStore
assert "multiraft.logging" not in sys.modules
with LogStore.open(sys.argv[1]) as store:  # "log store opened" at info
    store.log("t", 0)
_runtime._log.warning("member suspected", member="n2")
"""
    result = _python(script, tmp_path)
    assert result.stdout == ""
    assert "log store opened" not in result.stderr  # info is below stdlib's default level
    assert "member suspected" in result.stderr
