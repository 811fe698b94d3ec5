"""The node's services, on the event loop: what every front door (gRPC today) serves clients with."""

from multiraft.node.services.admin import AdminService, AdminSettings
from multiraft.node.services.consumer_groups import GroupDescriptionResult, GroupsService, GroupsSettings
from multiraft.node.services.data import DataLimits, DataService
from multiraft.node.services.offsets import OffsetsService, OffsetsSettings
from multiraft.node.services.results import (
    ClusterDescription,
    DrainProgress,
    FetchResult,
    GroupListings,
    NodeDescription,
    PartitionDescription,
    ProduceAck,
    TopicDescription,
    UnansweredPartition,
)

__all__ = [
    "DataService",
    "DataLimits",
    "OffsetsService",
    "OffsetsSettings",
    "GroupsService",
    "GroupsSettings",
    "GroupDescriptionResult",
    "AdminService",
    "AdminSettings",
    "ProduceAck",
    "FetchResult",
    "PartitionDescription",
    "TopicDescription",
    "NodeDescription",
    "ClusterDescription",
    "DrainProgress",
    "GroupListings",
    "UnansweredPartition",
]
