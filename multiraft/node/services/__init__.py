"""The node's services, on the event loop: what every front door (gRPC today) serves clients with."""

from multiraft.node.services.admin import AdminService, AdminSettings
from multiraft.node.services.consumer_groups import (
    ConsumerGroupDescription,
    ConsumerGroupsService,
    ConsumerGroupsSettings,
)
from multiraft.node.services.data import DataLimits, DataService
from multiraft.node.services.offsets import OffsetsService, OffsetsSettings
from multiraft.node.services.results import (
    ClusterDescription,
    ConsumerGroupListings,
    DrainProgress,
    FetchResult,
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
    "ConsumerGroupsService",
    "ConsumerGroupsSettings",
    "ConsumerGroupDescription",
    "AdminService",
    "AdminSettings",
    "ProduceAck",
    "FetchResult",
    "PartitionDescription",
    "TopicDescription",
    "NodeDescription",
    "ClusterDescription",
    "DrainProgress",
    "ConsumerGroupListings",
    "UnansweredPartition",
]
