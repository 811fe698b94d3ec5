"""Waiting (bounded) for the controller's state, as this node applies it, to show a change."""

from __future__ import annotations

import asyncio
import time

from multiraft.errors import RequestTimeoutError
from multiraft.node.protocols import ClusterView

__all__ = ["wait_for_topic"]

_POLL_S = 0.01


async def wait_for_topic(cluster: ClusterView, name: str, *, present: bool, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (name in cluster.cluster.topics) != present:
        if time.monotonic() > deadline:
            raise RequestTimeoutError(f"topic {name!r} change not applied on node {cluster.node_id} in time")
        await asyncio.sleep(_POLL_S)
