"""The node runtime: a store of replicas on the scheduler thread, services on the event loop, and the peer side.

Front doors (gRPC: :mod:`rpc.server`) are built on :attr:`Node.services` outside this package.
"""

from multiraft.node.node import FrontDoor, Node, NodeServices
from multiraft.node.services import (
    ClusterDescription,
    DrainStatus,
    FetchResult,
    NodeDescription,
    PartitionDescription,
    ProduceAck,
    TopicDescription,
)

__all__ = [
    "Node",
    "NodeServices",
    "FrontDoor",
    "ProduceAck",
    "FetchResult",
    "PartitionDescription",
    "TopicDescription",
    "NodeDescription",
    "ClusterDescription",
    "DrainStatus",
]
