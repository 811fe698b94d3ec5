"""A Jepsen-style nemesis over real multi-process clusters on 127.0.0.1 (docs/reliability.md).

Seeded runs (:func:`run_once`) start a local cluster with :mod:`multiraft.tools.launcher`, drive it with the public
client API (:mod:`multiraft.tools.nemesis.clients`), inject faults (:mod:`multiraft.tools.nemesis.faults`), write the
history to a file (:mod:`multiraft.tools.nemesis.history`) and check it (:mod:`multiraft.tools.nemesis.checker`);
:mod:`multiraft.tools.nemesis.report` draws the table. ``multiraft nemesis --runs N`` runs many.
"""

from __future__ import annotations

from multiraft.tools.nemesis.checker import CheckResult, check
from multiraft.tools.nemesis.faults import FAULT_KINDS
from multiraft.tools.nemesis.history import Event, History, load_history
from multiraft.tools.nemesis.report import Summary, summarize, summary_markdown
from multiraft.tools.nemesis.runner import RunResult, RunSettings, run_once

__all__ = [
    "FAULT_KINDS",
    "RunSettings",
    "RunResult",
    "run_once",
    "CheckResult",
    "check",
    "Event",
    "History",
    "load_history",
    "Summary",
    "summarize",
    "summary_markdown",
]
