"""Fixtures of the integration tests: real multi-process clusters on 127.0.0.1 (defined in ``_helpers.py``)."""

from __future__ import annotations

from tests.integration._helpers import cluster, cluster_factory, shared_cluster  # noqa: F401
