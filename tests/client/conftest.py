"""Client tests run against real 3-node clusters (tests/integration/conftest.py) and, for the parts that need
no network, against the client's own pieces."""

from __future__ import annotations

from tests.integration.conftest import cluster, cluster_factory, shared_cluster  # noqa: F401
