"""The multiraft client library (public names are re-exported by the ``multiraft`` package)."""

from rpc.client._admin import Admin, ClusterInfo, NodeInfo, NodeLoad, PartitionInfo, TopicInfo
from rpc.client._cluster import ClusterClient, Metadata, PartitionMetadata, TopicMetadata, parse_bootstrap

__all__ = [
    "Admin",
    "ClusterClient",
    "ClusterInfo",
    "Metadata",
    "NodeInfo",
    "NodeLoad",
    "PartitionInfo",
    "PartitionMetadata",
    "TopicInfo",
    "TopicMetadata",
    "parse_bootstrap",
]
