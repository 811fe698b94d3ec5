"""The controller's replicated state machine: cluster metadata, the commands that change it, and apply().

The node runtime proposes :func:`encode_command` bytes to the controller Raft group (group 0); when an entry
commits, every replica decodes it and calls :func:`apply` in log order. apply() is deterministic and makes no
choice of its own: placement, time and liveness are decided by the proposer and carried in the command.
:func:`encode_snapshot` / :func:`decode_snapshot` let new or lagging nodes catch up.
"""

from __future__ import annotations

from ._apply import MAX_PRODUCER_ID_BLOCK, ApplyResult, Outcome, ProducerIdBlock, apply, partitions_to_add
from ._codec import (
    COMMAND_FORMAT_VERSION,
    SNAPSHOT_FORMAT_VERSION,
    decode_command,
    decode_snapshot,
    encode_command,
    encode_snapshot,
)
from ._model import (
    COMMAND_TYPES,
    CONTROLLER_GROUP_ID,
    FIRST_PARTITION_GROUP_ID,
    FIRST_PRODUCER_ID,
    MAX_NODE_ID,
    MAX_PRODUCER_ID,
    AllocateProducerIds,
    AlterClusterConfigs,
    AlterTopicConfigs,
    ClusterState,
    Command,
    CreatePartitions,
    CreateTopic,
    DeleteTopic,
    NodeInfo,
    NodeState,
    PartitionState,
    RegisterNode,
    SetNodeState,
    SetPartitionReplicas,
    Topic,
    check_node_info,
)

__all__ = [
    # state
    "ClusterState",
    "NodeInfo",
    "NodeState",
    "PartitionState",
    "Topic",
    "check_node_info",
    "CONTROLLER_GROUP_ID",
    "FIRST_PARTITION_GROUP_ID",
    "FIRST_PRODUCER_ID",
    "MAX_NODE_ID",
    "MAX_PRODUCER_ID",
    # commands
    "Command",
    "COMMAND_TYPES",
    "RegisterNode",
    "CreateTopic",
    "DeleteTopic",
    "AlterTopicConfigs",
    "SetPartitionReplicas",
    "SetNodeState",
    "AllocateProducerIds",
    "CreatePartitions",
    "AlterClusterConfigs",
    # applying
    "apply",
    "ApplyResult",
    "Outcome",
    "ProducerIdBlock",
    "MAX_PRODUCER_ID_BLOCK",
    "partitions_to_add",
    # encodings
    "encode_command",
    "decode_command",
    "encode_snapshot",
    "decode_snapshot",
    "COMMAND_FORMAT_VERSION",
    "SNAPSHOT_FORMAT_VERSION",
]
