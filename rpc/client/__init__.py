"""The multiraft client library (public names are re-exported by ``multiraft.client`` and the ``multiraft``
package)."""

from rpc.client._admin import (
    Admin,
    ClusterConfig,
    ClusterInfo,
    ConfigEntry,
    DrainStatus,
    MoveInfo,
    NodeInfo,
    NodeLoad,
    PartitionInfo,
    TopicInfo,
)
from rpc.client._cluster import ClusterClient, Metadata, PartitionMetadata, TopicMetadata, parse_bootstrap
from rpc.client._consumer import Consumer, arrow_schema
from rpc.client._group_admin import (
    GroupDescription,
    GroupListing,
    GroupListingResult,
    GroupMemberInfo,
    UnavailablePartition,
)
from rpc.client._partitioner import partition_for_key
from rpc.client._producer import Producer
from rpc.client._records import BatchMetadata, Record, RecordMetadata, TopicPartition
from rpc.client._security_admin import AclBinding, AclFilter, UserInfo
from rpc.client._tls import TlsSettings

__all__ = [
    "Producer",
    "Consumer",
    "Admin",
    "TopicPartition",
    "TlsSettings",
    "Record",
    "RecordMetadata",
    "BatchMetadata",
    "ClusterClient",
    "ClusterConfig",
    "ClusterInfo",
    "ConfigEntry",
    "DrainStatus",
    "GroupDescription",
    "GroupListing",
    "GroupListingResult",
    "UnavailablePartition",
    "GroupMemberInfo",
    "Metadata",
    "MoveInfo",
    "NodeInfo",
    "NodeLoad",
    "PartitionInfo",
    "PartitionMetadata",
    "TopicInfo",
    "TopicMetadata",
    "arrow_schema",
    "AclBinding",
    "AclFilter",
    "UserInfo",
    "parse_bootstrap",
    "partition_for_key",
]
