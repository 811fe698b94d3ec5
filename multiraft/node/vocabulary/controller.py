"""Requests for the controller leader and what an applied one produced.

A controller request carries either a controller command already decided by the sender or a request only
the controller leader can decide: a :class:`CreateTopicRequest` or :class:`CreatePartitionsRequest`
(placement) or a :class:`NodeStateRequest` (drain, undrain, remove). Which of them a peer may send is decided
by :mod:`multiraft.node.cluster.controller_policy`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from multiraft import controller as ctl

__all__ = [
    "CreateTopicRequest",
    "NodeStateRequest",
    "CreatePartitionsRequest",
    "ControllerBody",
    "ControllerRequest",
    "ControllerOutcome",
]


@dataclass(frozen=True, slots=True)
class CreateTopicRequest:
    """Create a topic; the controller leader places its replicas (it knows which nodes are alive)."""

    name: str
    partitions: int
    replication_factor: int
    configs: dict[str, str] = field(default_factory=dict)
    internal: bool = False


@dataclass(frozen=True, slots=True)
class NodeStateRequest:
    """An operator's drain (DRAINING), undrain (ACTIVE) or removal (REMOVED) of a node, judged by the
    controller leader (:func:`multiraft.controller.node_state_change`); ``force`` drains even when too few
    active nodes would remain for a topic's replication factor."""

    node_id: int
    state: ctl.NodeState
    force: bool = False


@dataclass(frozen=True, slots=True)
class CreatePartitionsRequest:
    """Grow a topic to ``total`` partitions (issue 25); the controller leader places the new ones."""

    name: str
    total: int


ControllerBody = ctl.Command | CreateTopicRequest | NodeStateRequest | CreatePartitionsRequest


@dataclass(frozen=True, slots=True)
class ControllerRequest:
    """A metadata change for the controller leader; ``forwarded`` once a node has passed it on, and then
    ``origin`` is the node that sent it to the forwarder (the one its allow-list judged). ``principal`` is the
    client on whose behalf it is made ("" for the node's own work); the leader checks its ACLs."""

    body: ControllerBody
    forwarded: bool = False
    origin: int = 0
    principal: str = ""


@dataclass(frozen=True, slots=True)
class ControllerOutcome:
    """What an applied controller command produced, as far as a requester needs it."""

    topic: str = ""
    node_id: int = 0
    producer_ids: tuple[int, int] = (0, 0)  # (first, count) of an allocated block
    group_id: int = 0

    @classmethod
    def of(cls, outcome: object) -> ControllerOutcome:
        if isinstance(outcome, ctl.Topic):
            return cls(topic=outcome.name)
        if isinstance(outcome, ctl.NodeInfo):
            return cls(node_id=outcome.node_id)
        if isinstance(outcome, ctl.ProducerIdBlock):
            return cls(producer_ids=(outcome.first, outcome.count))
        if isinstance(outcome, ctl.PartitionState):
            return cls(group_id=outcome.group_id)
        return cls()
