"""The node's services, on the event loop: what every front door (gRPC today) serves clients with.

What lives here: data (``data.py``: produce, fetch, subscribe, list offsets, producer ids), consumer-group
offsets (``offsets.py``, routed by ``offsets_routing.py``), consumer groups (``consumer_groups.py``, with the
handle on the coordinators hosted here, ``local_consumer_groups.py``), admin (``admin.py``), security
(``security.py``), what they answer (``results.py``: plain values, no wire format), the loop's only way into
the scheduler thread (``store_client.py``) and the peer wire's front door (``peer_requests.py``: a peer's
typed request to the same services).

Owner: the event loop (``LoopOwned``). The top room of the node: it may import every room below it, never
``node.py``, which wires them, nor a front door (``rpc``).
"""

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
