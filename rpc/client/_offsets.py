"""ListOffsets for the consumer: where ``earliest``, ``latest`` or a timestamp falls in each partition."""

from __future__ import annotations

from typing import Any

import grpc

from rpc.client._cluster import ClusterClient
from rpc.proto import multiraft_pb2 as pb
from rpc.proto.status import from_proto_error, from_rpc_error

__all__ = ["list_offsets"]

_SPECS = {"earliest": pb.EARLIEST, "latest": pb.LATEST, "timestamp": pb.TIMESTAMP}


def list_offsets(
    client: ClusterClient, topic: str, partitions: list[int], kind: str, timestamp_ms: int, timeout_s: float
) -> dict[int, int]:
    """ListOffsets on each partition's leader: one request per leader node, sent concurrently; partitions
    that fail (a moved leader) are retried one by one through ``call_leader``."""
    spec = _SPECS[kind]
    by_leader: dict[str, list[int]] = {}
    retry: list[int] = []
    for partition in partitions:
        address = client.leader_address(topic, partition)
        if address is None:
            retry.append(partition)
        else:
            by_leader.setdefault(address, []).append(partition)
    futures = [
        client.log_stub(address).ListOffsets.future(
            pb.ListOffsetsRequest(topic=topic, partitions=ps, spec=spec, timestamp_ms=timestamp_ms),
            timeout=timeout_s,
        )
        for address, ps in by_leader.items()
    ]
    found: dict[int, int] = {}
    for future, ps in zip(futures, by_leader.values(), strict=True):
        try:
            response = future.result()
        except grpc.RpcError as exc:
            error = from_rpc_error(exc)
            if not error.retriable:
                raise error from None
            retry.extend(ps)
            continue
        for item in response.offsets:
            if item.HasField("error"):
                error = from_proto_error(item.error)
                if not error.retriable:
                    raise error
                retry.append(item.partition)
            else:
                found[item.partition] = item.offset
    for partition in retry:

        def one(stub: Any, timeout: float, partition: int = partition) -> int:
            request = pb.ListOffsetsRequest(topic=topic, partitions=[partition], spec=spec, timestamp_ms=timestamp_ms)
            response = stub.ListOffsets(request, timeout=timeout)
            item = response.offsets[0]
            if item.HasField("error"):
                raise from_proto_error(item.error)
            return int(item.offset)

        found[partition] = client.call_leader(topic, partition, one)
    return found
