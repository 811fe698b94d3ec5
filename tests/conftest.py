"""Suite-wide settings. Hypothesis searches reproducibly by default, so a rare draw cannot fail CI at random:
profile ``ci`` is derandomized (examples derive from each test's source) and keeps no example database. The
wide search runs under ``-m slow`` (profile ``wide``), or whenever ``HYPOTHESIS_PROFILE`` names a profile;
every counterexample it finds is pinned in its test as an ``@example``."""

from __future__ import annotations

import os
import signal

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, deadline=None)
settings.register_profile("wide", max_examples=1_000, deadline=None)


def pytest_configure(config: pytest.Config) -> None:
    # A shell without job control starts background commands with SIGINT ignored, and children inherit that:
    # the tests that press Ctrl-C on a CLI process would see it ignored. Restore Python's own handler.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    markexpr = str(config.getoption("markexpr", default="") or "")
    wide = "slow" in markexpr and "not slow" not in markexpr
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("wide" if wide else "ci"))
