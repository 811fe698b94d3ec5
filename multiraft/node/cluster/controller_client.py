"""Metadata requests to the controller leader, wherever it is (event loop).

Only the controller leader proposes metadata commands: it knows which nodes are alive, so it places new
topics. :class:`RemoteController` runs a request locally when this node leads the controller group, sends
it to the leader over the peer transport otherwise, and retries while leadership moves, within a deadline.
A node that does not know the leader yet (it joined through the seeds) sends the request to any live peer,
which passes it on once (``forwarded``). :meth:`RemoteController.serve` is the peer side of the same; it
serves only what a peer may ask for (:mod:`multiraft.node.cluster.controller_policy`), at every hop.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Collection
from typing import Protocol

from multiraft import controller as ctl
from multiraft.errors import MultiraftError, NotLeaderError, RequestTimeoutError, UnavailableError
from multiraft.node.cluster.controller_policy import authorize_request, check_peer_request, requester
from multiraft.node.peer.call import ask_controller
from multiraft.node.protocols import PeerCaller
from multiraft.node.threads import LoopOwned
from multiraft.node.vocabulary.controller import ControllerBody, ControllerOutcome, ControllerRequest
from multiraft.security.authorizer import Authorizer
from multiraft.security.principal import CURRENT_PRINCIPAL

__all__ = ["RemoteController", "CONTROLLER_TIMEOUT_S"]

CONTROLLER_TIMEOUT_S = 15.0
DEFAULT_MAX_TOPIC_PARTITIONS = 4_096  # NodeConfig.max_topic_partitions' default
_RETRY_S = 0.05


class _Leader(Protocol):
    @property
    def node_id(self) -> int: ...

    @property
    def controller_leader(self) -> int: ...

    @property
    def cluster(self) -> ctl.ClusterState: ...


LocalController = Callable[[ControllerRequest, float], Awaitable[object]]
"""Runs a request on this node's controller replica (it answers NotLeaderError unless it leads)."""


class RemoteController(LoopOwned):
    """The node's ``ControllerClient`` (see the module docstring)."""

    def __init__(
        self,
        view: _Leader,
        local: LocalController,
        peers: PeerCaller,
        live_peers: Callable[[], Collection[int]],
        rng: random.Random | None = None,
        max_topic_partitions: int = DEFAULT_MAX_TOPIC_PARTITIONS,
        authorizer: Callable[[], Authorizer] | None = None,
    ) -> None:
        self._view = view
        self._local = local
        self._peers = peers
        self._live_peers = live_peers
        self._rng = rng or random.Random()  # this loop's own: the scheduler's belongs to its thread
        self._max_topic_partitions = max_topic_partitions
        self.authorizer = authorizer

    async def call(self, body: ControllerBody, *, timeout_s: float = CONTROLLER_TIMEOUT_S) -> ControllerOutcome:
        """Run a metadata request on the controller leader; retry while leadership moves. It carries the
        principal of the client request being served, if any (``CURRENT_PRINCIPAL``)."""
        request = ControllerRequest(body, principal=CURRENT_PRINCIPAL.get())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        last_error: MultiraftError = UnavailableError("the controller has no leader yet")
        while loop.time() < deadline:
            leader = self._view.controller_leader or self._any_live_peer()
            try:
                if leader == self._view.node_id:
                    return ControllerOutcome.of(await self._local(request, deadline - loop.time()))
                if leader:
                    return await self._remote(leader, request, deadline - loop.time())
            except (NotLeaderError, UnavailableError) as exc:
                last_error = exc
            await asyncio.sleep(_RETRY_S)
        raise RequestTimeoutError(f"metadata request not served in {timeout_s:g}s: {last_error.message}")

    async def serve(self, from_node: int, request: ControllerRequest) -> ControllerOutcome:
        """A request a peer sent here: refuse what peers may not ask for; run the rest, or pass it on once to
        the leader this node knows, naming the peer as its origin."""
        cluster = self._view.cluster
        origin = requester(cluster, from_node, request)
        check_peer_request(cluster, origin, request, self._max_topic_partitions)
        if self.authorizer is not None:
            authorize_request(self.authorizer(), origin, request)
        leader = self._view.controller_leader
        if leader and leader not in (self._view.node_id, from_node) and not request.forwarded:
            forwarded = ControllerRequest(request.body, forwarded=True, origin=origin, principal=request.principal)
            return await self._remote(leader, forwarded, CONTROLLER_TIMEOUT_S)
        return ControllerOutcome.of(await self._local(request, CONTROLLER_TIMEOUT_S))

    def _any_live_peer(self) -> int:
        """Some live member to forward a request through while the controller leader is unknown."""
        peers = sorted(self._live_peers())
        return self._rng.choice(peers) if peers else 0

    async def _remote(self, leader: int, request: ControllerRequest, timeout_s: float) -> ControllerOutcome:
        return await ask_controller(self._peers, leader, request, timeout_s)
