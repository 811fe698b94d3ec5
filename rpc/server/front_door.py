"""The gRPC front door of a node, and ``run_node``, which wires a node and its front door together.

The node runtime (:mod:`multiraft.node`) knows nothing of gRPC: this module builds the server on the node's
services (:class:`multiraft.node.NodeServices`), binds the client port before the node starts (the node
advertises it), and reports health (NOT_SERVING until the node is registered with the controller).
"""

from __future__ import annotations

import asyncio
import signal

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from multiraft.config.node import NodeConfig
from multiraft.logging import get_logger
from multiraft.node import Node, NodeServices
from rpc.proto import multiraft_pb2, multiraft_pb2_grpc
from rpc.server.admin_servicer import AdminServicer
from rpc.server.auth import ClientAuth
from rpc.server.consumer_groups_servicer import ConsumerGroupsServicer
from rpc.server.limits import RequestLimits, UndecodableRequests
from rpc.server.log_servicer import LogServicer
from rpc.server.security_servicer import SecurityServicer
from rpc.server.tls import client_port_credentials

__all__ = ["GrpcFrontDoor", "run_node"]

log = get_logger(__name__)

_HEADROOM_BYTES = 1024 * 1024  # protobuf framing around the largest batch an answer may carry
_STOP_GRACE_S = 1.0
_WATCH_S = 0.5


class GrpcFrontDoor:
    """The client port: the Log, Admin, Groups and Security services, gRPC health and reflection.

    gRPC enforces the listener's limits before our code runs: request bytes (RESOURCE_EXHAUSTED), calls at
    once (RESOURCE_EXHAUSTED), streams per connection (the client waits) and connections (closed as they
    arrive). What gRPC cannot bound per connection, in-flight bytes, is bounded per stream
    (``max_stream_inflight_bytes``) and per node (``max_inflight_produce_bytes``) by the servicers and the data
    service; the rest of a request's shape is checked by :mod:`rpc.server.limits`.
    """

    def __init__(self, config: NodeConfig) -> None:
        # An answer holds at most a fetch's worth of batches plus one (reads return at least one batch);
        # a metadata answer may be larger than a request.
        self._auth = ClientAuth(config)  # authentication and ACLs of every call (rpc.server.auth)
        send = max(
            2 * config.max_request_bytes, config.fetch_max_bytes_limit + config.max_batch_bytes + _HEADROOM_BYTES
        )
        self._server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", config.max_request_bytes),
                ("grpc.max_send_message_length", send),
                ("grpc.max_concurrent_streams", config.max_concurrent_streams),
                ("grpc.max_allowed_incoming_connections", config.max_client_connections),
            ],
            maximum_concurrent_rpcs=config.max_concurrent_rpcs,
            interceptors=[UndecodableRequests(), self._auth],
        )
        self._limits = RequestLimits(
            config.max_request_items, config.max_request_string_chars, config.max_stream_inflight_bytes
        )
        self._health = health.aio.HealthServicer()  # type: ignore[attr-defined]
        if config.tls_cert_file:
            self.port = self._server.add_secure_port(config.client_address, client_port_credentials(config))
        else:
            self.port = self._server.add_insecure_port(config.client_address)

    async def start(self, services: NodeServices) -> None:
        server = self._server
        limits = self._limits
        multiraft_pb2_grpc.add_LogServicer_to_server(LogServicer(services.data, services.offsets, limits), server)
        admin = AdminServicer(services.admin, services.offsets, limits, services.groups)
        multiraft_pb2_grpc.add_AdminServicer_to_server(admin, server)
        multiraft_pb2_grpc.add_GroupsServicer_to_server(ConsumerGroupsServicer(services.groups, limits), server)
        multiraft_pb2_grpc.add_SecurityServicer_to_server(SecurityServicer(services.security, limits), server)
        self._auth.attach(services.security)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        names = [d.full_name for d in multiraft_pb2.DESCRIPTOR.services_by_name.values()]
        reflection.enable_server_reflection([*names, health.SERVICE_NAME, reflection.SERVICE_NAME], server)
        await self.set_serving(False)  # the default status of "" is SERVING: say the truth before serving
        await server.start()

    async def set_serving(self, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        await self._health.set("", status)

    async def stop(self) -> None:
        await self._server.stop(grace=_STOP_GRACE_S)


async def run_node(config: NodeConfig) -> None:
    """Run a node with its gRPC front door until SIGTERM or SIGINT, then stop it cleanly."""
    door = GrpcFrontDoor(config)
    node = Node(config)
    await node.start(client_port=door.port)
    node.add_front_door(door)
    await door.start(node.services)
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()
    node.on_registered(lambda: tasks.add(loop.create_task(door.set_serving(True))))
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        waiter = loop.create_task(stop.wait())
        watcher = loop.create_task(_watch_scheduler(node))
        await asyncio.wait({waiter, watcher}, return_when=asyncio.FIRST_COMPLETED)
        for task in (waiter, watcher):
            task.cancel()
    finally:
        await node.stop()


async def _watch_scheduler(node: Node) -> None:
    """Stop the node if its scheduler thread died (storage failure): a node without it cannot serve."""
    while node.scheduler_alive:
        await asyncio.sleep(_WATCH_S)
    log.error("the scheduler stopped; shutting the node down")
