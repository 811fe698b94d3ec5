"""The node runtime: a store of replicas on the scheduler thread, services on the event loop, and the peer side.

Front doors (gRPC: :mod:`rpc.server.front_door`) are built on :attr:`Node.services` outside this package; what the
services answer is in :mod:`multiraft.node.services`.
"""

from multiraft.node.node import FrontDoor, Node, NodeServices

__all__ = ["Node", "NodeServices", "FrontDoor"]
