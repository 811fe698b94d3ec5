"""The node runtime: a scheduler thread driving every Raft group of the node, and the event-loop side around it."""

from multiraft.node.node import (
    ClusterDescription,
    FetchResult,
    Node,
    NodeDescription,
    PartitionDescription,
    ProduceAck,
    TopicDescription,
    run_node,
)

__all__ = [
    "Node",
    "run_node",
    "ProduceAck",
    "FetchResult",
    "PartitionDescription",
    "TopicDescription",
    "NodeDescription",
    "ClusterDescription",
]
