"""Errors on the wire: a :class:`multiraft.errors.MultiraftError` travels as a gRPC status whose details hold a
``google.rpc.ErrorInfo`` (domain ``multiraft``, the error's stable ``reason`` and its metadata), and comes back
as the same class on the client."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from multiraft.errors import DOMAIN, MultiraftError, ResourceExhaustedError, UnavailableError, error_for_reason
from rpc.proto import multiraft_pb2 as pb

__all__ = ["to_status", "from_rpc_error", "to_proto_error", "from_proto_error"]

_DETAILS_KEY = "grpc-status-details-bin"
# gRPC's own answer when the server runs maximum_concurrent_rpcs calls: a busy node, to retry, unlike the
# RESOURCE_EXHAUSTED of a message above the size limit, which no retry mends.
_CONCURRENT_RPC_LIMIT = "Concurrent RPC limit exceeded"


def to_status(error: MultiraftError) -> grpc.Status:
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.ErrorInfo(reason=error.reason, domain=DOMAIN, metadata=error.metadata))
    code: int = error.code.value[0]
    return rpc_status.to_status(status_pb2.Status(code=code, message=error.message, details=[detail]))


def from_rpc_error(exc: grpc.RpcError) -> MultiraftError:
    """The error a failed call stands for; transport failures become :class:`UnavailableError`."""
    trailing: Sequence[tuple[str, Any]] = ()
    if hasattr(exc, "trailing_metadata"):
        metadata: Any = exc.trailing_metadata() or ()
        trailing = [(str(key), value) for key, value in metadata]
    for key, value in trailing:
        if key == _DETAILS_KEY and isinstance(value, bytes):
            status = status_pb2.Status.FromString(value)
            for detail in status.details:
                if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                    info = error_details_pb2.ErrorInfo()
                    detail.Unpack(info)
                    if info.domain == DOMAIN:
                        return error_for_reason(info.reason, status.message, dict(info.metadata))
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return error_for_reason("TIMEOUT", f"deadline exceeded: {details}", {})
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return error_for_reason("UNSUPPORTED", f"the node does not serve this method: {details}", {})
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and _CONCURRENT_RPC_LIMIT in str(details):
        return ResourceExhaustedError(f"the node serves max_concurrent_rpcs calls already: {details}")
    if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED):
        return error_for_reason("INVALID_ARGUMENT", str(details), {})
    return UnavailableError(f"{code.name if code is not None else 'RPC'} from the node: {details}")


def to_proto_error(error: MultiraftError) -> pb.Error:
    return pb.Error(code=error.code.value[0], reason=error.reason, message=error.message, metadata=error.metadata)


def from_proto_error(error: pb.Error) -> MultiraftError:
    return error_for_reason(error.reason, error.message, dict(error.metadata))
