"""Limits every client request is held to before any work: how many items each repeated or map field has and
how long each string is. The walk follows the message's descriptor, so a field added to the protocol is
limited without anyone remembering to.

Request bytes are limited earlier, by gRPC itself (``grpc.max_receive_message_length``, see ``rpc.server``).
A request whose bytes do not parse would be answered UNKNOWN by gRPC, before any handler runs:
:class:`UndecodableRequests` hands the handler an :class:`Undecodable` instead, which :func:`check_request`
refuses as INVALID_ARGUMENT like any other bad request.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message

from multiraft.errors import InvalidArgumentError

__all__ = ["RequestLimits", "check_request", "Undecodable", "UndecodableRequests"]

_STRING = FieldDescriptor.TYPE_STRING
_MESSAGE = FieldDescriptor.TYPE_MESSAGE


@dataclass(frozen=True, slots=True)
class RequestLimits:
    """The node config fields that bound a client request (units as in ``NodeConfig``)."""

    max_request_items: int = 10_000
    max_request_string_chars: int = 4_096
    max_stream_inflight_bytes: int = 64 * 1024 * 1024


def check_request(request: Message, limits: RequestLimits) -> None:
    """Raise :class:`InvalidArgumentError` naming the first field (``offsets.metadata``, ``topics``) of
    ``request`` that holds too many items or too long a string, or for a request that did not parse."""
    if isinstance(request, Undecodable):
        raise InvalidArgumentError(f"the request does not parse: {request.reason}", field="request")
    _check(request, limits, "")


class Undecodable:
    """What a handler gets for request bytes that are not a valid message of the method's type."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


class UndecodableRequests(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Hands handlers an :class:`Undecodable` for a request that does not parse (gRPC would answer UNKNOWN)."""

    def __init__(self) -> None:
        self._wrapped: dict[int, tuple[Any, Any]] = {}  # id(handler) -> (handler, tolerant handler)

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Any]], handler_call_details: Any) -> Any:
        handler = await continuation(handler_call_details)
        deserialize = getattr(handler, "request_deserializer", None)
        if deserialize is None:
            return handler
        cached = self._wrapped.get(id(handler))
        if cached is None or cached[0] is not handler:
            cached = (handler, handler._replace(request_deserializer=_tolerant(deserialize)))
            self._wrapped[id(handler)] = cached
        return cached[1]


def _tolerant(deserialize: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def tolerant(data: bytes) -> Any:
        try:
            return deserialize(data)
        except DecodeError as exc:
            return Undecodable(str(exc))

    return tolerant


def _check(message: Message, limits: RequestLimits, prefix: str) -> None:
    for descriptor, value in message.ListFields():
        name = prefix + descriptor.name
        if descriptor.is_repeated:
            if len(value) > limits.max_request_items:
                raise InvalidArgumentError(
                    f"{name} has {len(value)} items, above max_request_items ({limits.max_request_items})",
                    field=name,
                )
            if descriptor.message_type is not None and descriptor.message_type.GetOptions().map_entry:
                for key, item in value.items():
                    _check_scalar(key, limits, name)
                    _check_item(descriptor.message_type.fields_by_name["value"], item, limits, name)
            elif descriptor.type in (_MESSAGE, _STRING):
                for item in value:
                    _check_item(descriptor, item, limits, name)
        else:
            _check_item(descriptor, value, limits, name)


def _check_item(descriptor: FieldDescriptor, value: object, limits: RequestLimits, name: str) -> None:
    if descriptor.type == _MESSAGE:
        assert isinstance(value, Message)
        _check(value, limits, name + ".")
    elif descriptor.type == _STRING:
        _check_scalar(value, limits, name)


def _check_scalar(value: object, limits: RequestLimits, name: str) -> None:
    if isinstance(value, str) and len(value) > limits.max_request_string_chars:
        raise InvalidArgumentError(
            f"{name} is {len(value)} characters long, above max_request_string_chars "
            f"({limits.max_request_string_chars})",
            field=name,
        )
