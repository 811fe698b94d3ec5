"""Limits every client request is held to before any work: how many items each repeated or map field has and
how long each string is. The walk follows the message's descriptor, so a field added to the protocol is
limited without anyone remembering to.

Request bytes are limited earlier, by gRPC itself (``grpc.max_receive_message_length``, see ``rpc.server.front_door``).
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
_OUR_METHODS = "/multiraft."


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
    _check(request, _plan(request.DESCRIPTOR), limits, "")


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
        if deserialize is None or not str(handler_call_details.method).startswith(_OUR_METHODS):
            return handler  # health and reflection cannot take an Undecodable
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


# What to look at in a message type: (field name, kind, plan of its message type if it has one)
_Plan = list[tuple[str, int, "_Plan | None"]]
_TEXT, _TEXTS, _ITEMS, _MAP, _CHILD, _CHILDREN = range(6)
_plans: dict[str, _Plan] = {}


def _plan(descriptor: Any) -> _Plan:
    """The fields of a message type that a limit applies to, worked out once per type (a request's check
    is then a few attribute reads, not a walk of the descriptor)."""
    plan = _plans.get(descriptor.full_name)
    if plan is not None:
        return plan
    plan = _plans[descriptor.full_name] = []
    for field in descriptor.fields:
        message = field.message_type
        if field.is_repeated:
            if message is not None and message.GetOptions().map_entry:
                texts = all(message.fields_by_name[part].type == _STRING for part in ("key", "value"))
                plan.append((field.name, _MAP if texts else _ITEMS, None))  # only map<string, string> today
            elif message is not None:
                plan.append((field.name, _CHILDREN, _plan(message)))
            else:
                plan.append((field.name, _TEXTS if field.type == _STRING else _ITEMS, None))
        elif message is not None:
            plan.append((field.name, _CHILD, _plan(message)))
        elif field.type == _STRING:
            plan.append((field.name, _TEXT, None))
    return plan


def _check(message: Message, plan: _Plan, limits: RequestLimits, prefix: str) -> None:
    most, longest = limits.max_request_items, limits.max_request_string_chars
    for name, kind, child in plan:
        value: Any = getattr(message, name)
        if kind == _TEXT:
            if len(value) > longest:
                _too_long(prefix + name, len(value), limits)
            continue
        if kind == _CHILD:
            if message.HasField(name):
                _check(value, child or [], limits, prefix + name + ".")
            continue
        if len(value) > most:
            raise InvalidArgumentError(
                f"{prefix}{name} has {len(value)} items, above max_request_items ({most})", field=prefix + name
            )
        if kind == _TEXTS:
            if value and max(map(len, value)) > longest:
                _too_long(prefix + name, max(map(len, value)), limits)
        elif kind == _MAP:
            if value and max(len(k) for k in value) > longest:
                _too_long(prefix + name, max(len(k) for k in value), limits)
            if value and max(len(v) for v in value.values()) > longest:
                _too_long(prefix + name, max(len(v) for v in value.values()), limits)
        elif kind == _CHILDREN:
            for item in value:
                _check(item, child or [], limits, prefix + name + ".")


def _too_long(name: str, length: int, limits: RequestLimits) -> None:
    raise InvalidArgumentError(
        f"{name} is {length} characters long, above max_request_string_chars ({limits.max_request_string_chars})",
        field=name,
    )
