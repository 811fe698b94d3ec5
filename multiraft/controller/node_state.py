"""Operator requests on a node's state (drain, undrain), judged by the controller leader before it proposes them.

A pure function of the metadata, as placement is; apply() judges what only the log order can (a removal while
the node still holds replicas).
"""

from __future__ import annotations

from ._model import ClusterState, NodeState, SetNodeState
from ._placement_pool import distinct_hosts
from .errors import DrainUnderReplicatesError, InvalidNodeError, NodeNotFoundError

__all__ = ["node_state_change"]


def node_state_change(state: ClusterState, node_id: int, target: NodeState, *, force: bool = False) -> SetNodeState:
    """The command that moves ``node_id`` to ``target`` on an operator's request, or the error that refuses it.

    Drain (ACTIVE to DRAINING) is refused with :class:`DrainUnderReplicatesError` when fewer ACTIVE nodes, or
    hosts they run on, would remain than the largest replication factor among the topics (their replicas could
    not all move), unless ``force``. Undrain is DRAINING back to ACTIVE (an ACTIVE node is left as it is).
    REMOVED is final: no request brings a removed node back (it registers again); removal itself is judged by
    apply (NODE_HAS_REPLICAS).
    """
    node = state.nodes.get(node_id)
    if node is None:
        raise NodeNotFoundError(node_id)
    if node.state is NodeState.REMOVED:
        raise InvalidNodeError("state", f"node {node_id} is removed; it must register again")
    if target is NodeState.DRAINING and node.state is NodeState.ACTIVE and not force:
        remaining = [n.node_id for n in state.nodes.values() if n.state is NodeState.ACTIVE and n.node_id != node_id]
        widest = max(state.topics.values(), key=lambda t: (t.replication_factor, t.name), default=None)
        if widest is not None and widest.replication_factor > len(remaining):
            raise DrainUnderReplicatesError(node_id, widest.name, widest.replication_factor, len(remaining))
        hosts = distinct_hosts(state, remaining)
        if widest is not None and widest.replication_factor > hosts:
            raise DrainUnderReplicatesError(
                node_id, widest.name, widest.replication_factor, len(remaining), hosts=hosts
            )
    return SetNodeState(node_id, target)
