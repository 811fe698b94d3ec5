"""The ``multiraft`` command run as an operator runs it: a subprocess against a real 3-node cluster."""

from __future__ import annotations

from tests.integration._helpers import cluster, cluster_factory, shared_cluster  # noqa: F401
