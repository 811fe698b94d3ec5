"""Client tests run against real 3-node clusters (tests/integration/_helpers.py) and, for the parts that need
no network, against the client's own pieces."""

from __future__ import annotations

from tests.integration._helpers import cluster, cluster_factory, shared_cluster  # noqa: F401
