"""Which controller operations a peer may forward, and the guards they share with the client path.

Peer connections are not authenticated: all a node knows of a peer is the node id of its HELLO. So a peer
may ask the controller leader only for what a client could ask through the admin and data services, or for
what concerns the peer itself:

* create a topic (placed by the leader), delete one, alter its configs: never an internal topic (``__``
  names), except creating ``__consumer_offsets``, which every node does on first use of consumer groups;
  partition counts and replication factors within the client path's bounds;
* add partitions to a topic (a :class:`CreatePartitionsRequest`, placed by the leader): never to an internal
  topic, and to at most the client path's partition count;
* drain, undrain or remove a node (a :class:`NodeStateRequest`, judged by the leader like a client's);
* reserve a block of producer ids (InitProducer);
* register or update *itself*: a ``RegisterNode`` whose node id is the requester's;
* change users and ACLs (``UpsertUser``, ``DeleteUser``, ``CreateAcls``, ``DeleteAcls``), for a client.

A client's change carries the client's ``principal``, and with authorization on the leader checks it against
the ACLs again (:func:`authorize_request`): a forwarded drain needs cluster-action on the cluster, a topic
change create/delete/alter on the topic, a user or ACL change alter on the cluster. A client's change without
a principal is refused. The node's own work (registering, producer id blocks, the offsets topic) has none.

Everything else (a placed ``CreateTopic`` or ``CreatePartitions``, ``SetPartitionReplicas``, a raw
``SetNodeState``, a ``DeleteTopic`` with ``internal``) only the controller leader's own node proposes, and a peer
asking for it gets :class:`~multiraft.errors.OperationNotAllowedError`.

A forwarded request names its ``origin``, the peer the forwarder served. That claim is believed only for a node
not registered yet (a joining node that does not know the leader, and could have asked for itself); otherwise
the forwarder is the requester, so a registered node's entry changes only over its own connection (a
restarted node at a new address that reaches a forwarder first retries until it knows the leader).
"""

from __future__ import annotations

from multiraft import controller as ctl
from multiraft.errors import InvalidArgumentError, OperationNotAllowedError
from multiraft.node.replicas.offsets import OFFSETS_TOPIC
from multiraft.node.vocabulary.controller import (
    ControllerBody,
    ControllerRequest,
    CreatePartitionsRequest,
    CreateTopicRequest,
    NodeStateRequest,
)
from multiraft.security.authorizer import CLUSTER, Authorizer, Resource

__all__ = ["requester", "check_peer_request", "authorize_request", "client_operation"]

_ADMIN_COMMANDS = (ctl.UpsertUser, ctl.DeleteUser, ctl.CreateAcls, ctl.DeleteAcls, ctl.AlterClusterConfigs)

_MAX_OFFSETS_PARTITIONS = 1_000


def requester(cluster: ctl.ClusterState, from_node: int, request: ControllerRequest) -> int:
    """The node on whose behalf ``request`` (received from ``from_node``'s connection) is made."""
    if request.forwarded and not _registered(cluster, request.origin):
        return request.origin  # a joining node, which could have asked for itself
    return from_node


def check_peer_request(cluster: ctl.ClusterState, origin: int, request: ControllerRequest, max_partitions: int) -> None:
    """Raise :class:`OperationNotAllowedError` (or InvalidArgumentError) unless a peer may ask for ``request``."""
    body = request.body
    if isinstance(body, CreateTopicRequest):
        if body.internal and body.name != OFFSETS_TOPIC:
            raise _refused(origin, f"create the internal topic {body.name[:64]!r}")
        # The offsets topic's count is the node setting offsets_partitions (at most 1,000), not a client's.
        limit = max(max_partitions, _MAX_OFFSETS_PARTITIONS) if body.internal else max_partitions
        if not 1 <= body.partitions <= limit:
            raise InvalidArgumentError(f"partitions must be in [1, {limit}], got {body.partitions}", field="partitions")
        if body.replication_factor < 1:
            raise InvalidArgumentError("replication_factor must be >= 1", field="replication_factor")
    elif isinstance(body, CreatePartitionsRequest):
        topic = cluster.topics.get(body.name)
        if topic is not None and topic.internal:
            raise _refused(origin, f"change the internal topic {body.name[:64]!r}")
        if not 1 <= body.total <= max_partitions:
            message = f"partitions must be in [1, {max_partitions}], got {body.total}"
            raise InvalidArgumentError(message, field="partitions")
    elif isinstance(body, NodeStateRequest | ctl.AllocateProducerIds):
        pass  # judged by the leader (node_state_change) and by apply (the block size), as for a client
    elif isinstance(body, ctl.DeleteTopic | ctl.AlterTopicConfigs):
        topic = cluster.topics.get(body.name)
        if (isinstance(body, ctl.DeleteTopic) and body.internal) or (topic is not None and topic.internal):
            raise _refused(origin, f"change the internal topic {body.name[:64]!r}")
    elif isinstance(body, _ADMIN_COMMANDS):
        pass  # a client's change: authorize_request judges its principal
    elif isinstance(body, ctl.RegisterNode):
        if body.node.node_id != origin:
            raise _refused(origin, f"register node {body.node.node_id} (a node registers only itself)")
    else:
        raise _refused(origin, f"forward {type(body).__name__} (only the controller leader's node proposes it)")


def client_operation(body: ControllerBody) -> tuple[ctl.AclOperation, Resource] | None:
    """The ACL operation and resource a client's change needs; None for the node's own work."""
    topic = ctl.ResourceType.TOPIC
    if isinstance(body, CreateTopicRequest):
        return None if body.internal else (ctl.AclOperation.CREATE, Resource(topic, body.name))
    if isinstance(body, ctl.DeleteTopic):
        return None if body.internal else (ctl.AclOperation.DELETE, Resource(topic, body.name))
    if isinstance(body, ctl.AlterTopicConfigs | CreatePartitionsRequest):  # Kafka: CreatePartitions needs alter
        return ctl.AclOperation.ALTER, Resource(topic, body.name)
    if isinstance(body, NodeStateRequest):
        return ctl.AclOperation.CLUSTER_ACTION, CLUSTER
    if isinstance(body, _ADMIN_COMMANDS):
        return ctl.AclOperation.ALTER, CLUSTER
    return None


def authorize_request(authorizer: Authorizer, origin: int, request: ControllerRequest) -> None:
    """Raise AuthorizationFailedError unless the request's principal may make the client change it asks for."""
    needed = client_operation(request.body)
    if needed is None or not authorizer.enabled:
        return
    if not request.principal:
        raise _refused(origin, f"forward a client's {type(request.body).__name__} without the client's principal")
    authorizer.check(request.principal, *needed)


def _registered(cluster: ctl.ClusterState, node_id: int) -> bool:
    node = cluster.nodes.get(node_id)
    return node is not None and node.state is not ctl.NodeState.REMOVED


def _refused(origin: int, what: str) -> OperationNotAllowedError:
    return OperationNotAllowedError(f"peer node {origin} may not {what}", node_id=origin)
