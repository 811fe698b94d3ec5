"""The suite's Hypothesis search is reproducible unless asked to search widely (tests/conftest.py)."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings


@pytest.mark.skipif(bool(os.environ.get("HYPOTHESIS_PROFILE")), reason="a profile was chosen explicitly")
def test_hypothesis_draws_the_same_examples_every_run_and_keeps_no_database() -> None:
    assert settings.default.derandomize
    assert settings.default.database is None
