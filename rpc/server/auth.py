"""Who is calling and may they: authentication and authorization of every client call, as one gRPC interceptor.

:class:`ClientAuth` wraps every handler. Before the servicer runs it finds the call's principal (the node
config's ``authentication``): a bearer token in the ``authorization`` metadata (from ``Security.Authenticate``,
verified with the cluster's token key), else with ``mtls`` the verified client certificate's common name (or
first SAN) as ``User:<name>``; without ``authentication`` everyone is ``User:ANONYMOUS``. A call without valid
credentials ends UNAUTHENTICATED with the reason. Then it checks the ACLs the method needs (:data:`_RULES`,
Kafka's mapping) and ends the call PERMISSION_DENIED naming the principal, operation and resource; answers
that list topics or groups are filtered to what the principal may describe, as Kafka's metadata is. The
principal is set in :data:`multiraft.security.CURRENT_PRINCIPAL` for the node (controller changes carry it,
producer ids are bound to it). Health checks and ``Authenticate`` itself need no credentials.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import grpc

from multiraft.config.node import NodeConfig
from multiraft.controller import AclOperation, ResourceType
from multiraft.errors import AuthenticationFailedError, AuthorizationFailedError, MultiraftError
from multiraft.node.services.security import MTLS_METHOD, NodeSecurity
from multiraft.security.authorizer import ANONYMOUS, CLUSTER, Authorizer, Resource, user_principal
from multiraft.security.principal import CURRENT_PRINCIPAL
from rpc.proto.status import to_status
from rpc.server.limits import Undecodable

__all__ = ["ClientAuth", "AUTHENTICATE_METHOD", "bearer_token"]

AUTHENTICATE_METHOD = "/multiraft.v1.Security/Authenticate"
_OPEN_PREFIXES = ("/grpc.health.",)
_OURS = "/multiraft."
_BEARER = "bearer "

# One requirement: (operation, resource); a rule lists what a request needs, each an alternative tuple (any
# one of them allowed is enough), in order.
_Need = tuple[tuple[AclOperation, Resource], ...]
_Rule = Callable[[Any], Iterable[_Need]]

R, W, D = AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE
_TOPIC, _GROUP = ResourceType.TOPIC, ResourceType.GROUP


def _topic(name: str) -> Resource:
    return Resource(_TOPIC, name)


def _one(operation: AclOperation, resource: Resource) -> list[_Need]:
    return [((operation, resource),)]


_RULES: dict[str, _Rule] = {
    "/multiraft.v1.Log/Produce": lambda r: _one(W, _topic(r.topic)),
    "/multiraft.v1.Log/ProduceStream": lambda r: _one(W, _topic(r.topic)),
    "/multiraft.v1.Log/Fetch": lambda r: _one(R, _topic(r.topic)),
    "/multiraft.v1.Log/Subscribe": lambda r: _one(R, _topic(r.topic)),
    "/multiraft.v1.Log/ListOffsets": lambda r: _one(D, _topic(r.topic)),
    "/multiraft.v1.Log/DeleteRecords": lambda r: _one(AclOperation.DELETE, _topic(r.topic)),  # as Kafka's
    "/multiraft.v1.Log/InitProducer": lambda r: [],  # checked by _authorize: write on some topic
    "/multiraft.v1.Log/CommitOffsets": lambda r: [
        *_one(R, Resource(_GROUP, r.group)),
        *(need for topic in sorted({o.topic for o in r.offsets}) for need in _one(R, _topic(topic))),
    ],
    "/multiraft.v1.Log/FetchOffsets": lambda r: [
        *_one(D, Resource(_GROUP, r.group)),
        *(need for topic in sorted({p.topic for p in r.partitions}) for need in _one(D, _topic(topic))),
    ],
    "/multiraft.v1.Admin/Metadata": lambda r: [need for t in r.topics for need in _one(D, _topic(t))],
    "/multiraft.v1.Admin/CreateTopic": lambda r: [
        ((AclOperation.CREATE, _topic(r.name)), (AclOperation.CREATE, CLUSTER))
    ],
    "/multiraft.v1.Admin/DeleteTopic": lambda r: _one(AclOperation.DELETE, _topic(r.name)),
    "/multiraft.v1.Admin/ListTopics": lambda r: [],  # filtered
    "/multiraft.v1.Admin/DescribeTopic": lambda r: _one(D, _topic(r.name)),
    "/multiraft.v1.Admin/AlterTopicConfigs": lambda r: _one(AclOperation.ALTER, _topic(r.name)),
    "/multiraft.v1.Admin/DescribeCluster": lambda r: _one(D, CLUSTER),
    "/multiraft.v1.Admin/DrainNode": lambda r: _one(AclOperation.CLUSTER_ACTION, CLUSTER),
    "/multiraft.v1.Admin/UndrainNode": lambda r: _one(AclOperation.CLUSTER_ACTION, CLUSTER),
    "/multiraft.v1.Admin/RemoveNode": lambda r: _one(AclOperation.CLUSTER_ACTION, CLUSTER),
    "/multiraft.v1.Admin/ListGroups": lambda r: [],  # filtered
    "/multiraft.v1.Admin/CreatePartitions": lambda r: _one(AclOperation.ALTER, _topic(r.name)),  # issue 25, as Kafka
    "/multiraft.v1.Admin/DescribeClusterConfigs": lambda r: _one(D, CLUSTER),
    "/multiraft.v1.Admin/AlterClusterConfigs": lambda r: _one(AclOperation.ALTER, CLUSTER),
    "/multiraft.v1.Groups/JoinGroup": lambda r: _one(R, Resource(_GROUP, r.group)),
    "/multiraft.v1.Groups/SyncGroup": lambda r: _one(R, Resource(_GROUP, r.group)),
    "/multiraft.v1.Groups/Heartbeat": lambda r: _one(R, Resource(_GROUP, r.group)),
    "/multiraft.v1.Groups/LeaveGroup": lambda r: _one(R, Resource(_GROUP, r.group)),
    "/multiraft.v1.Groups/DescribeGroups": lambda r: [need for x in r.groups for need in _one(D, Resource(_GROUP, x))],
    "/multiraft.v1.Groups/DeleteGroups": lambda r: [
        need for x in r.groups for need in _one(AclOperation.DELETE, Resource(_GROUP, x))
    ],
    "/multiraft.v1.Security/UpsertUser": lambda r: _one(AclOperation.ALTER, CLUSTER),
    "/multiraft.v1.Security/DeleteUser": lambda r: _one(AclOperation.ALTER, CLUSTER),
    "/multiraft.v1.Security/ListUsers": lambda r: _one(D, CLUSTER),
    "/multiraft.v1.Security/CreateAcls": lambda r: _one(AclOperation.ALTER, CLUSTER),
    "/multiraft.v1.Security/DeleteAcls": lambda r: _one(AclOperation.ALTER, CLUSTER),
    "/multiraft.v1.Security/DescribeAcls": lambda r: _one(D, CLUSTER),
}


def bearer_token(metadata: Iterable[tuple[str, Any]] | None) -> str | None:
    """The token of an ``authorization: Bearer <token>`` metadata entry, if any."""
    for key, value in metadata or ():
        if key == "authorization":
            text = value.decode("ascii", "replace") if isinstance(value, bytes) else str(value)
            if text[: len(_BEARER)].lower() == _BEARER:
                return text[len(_BEARER) :].strip()
            raise AuthenticationFailedError("the authorization metadata is not 'Bearer <token>'")
    return None


def _certificate_name(context: Any) -> str | None:
    """The verified client certificate's common name, else its first subject alternative name."""
    auth: dict[str, list[bytes]] = context.auth_context() or {}
    for key in ("x509_common_name", "x509_subject_alternative_name"):
        values = auth.get(key)
        if values:
            return values[0].decode("utf-8", "replace")
    return None


class ClientAuth(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """See the module docstring. :meth:`attach` gives it the node's security service once the node runs."""

    def __init__(self, config: NodeConfig) -> None:
        self._methods = config.authentication
        self._enabled = bool(config.authentication) or config.authorization
        self._security: NodeSecurity | None = None
        self._wrapped: dict[int, tuple[Any, Any]] = {}

    def attach(self, security: NodeSecurity) -> None:
        self._security = security

    # ------------------------------------------------------------------------------------ the decisions

    def principal(self, context: Any) -> str:
        if not self._methods:
            return ANONYMOUS
        token = bearer_token(context.invocation_metadata())
        if token is not None:
            if self._security is None:
                raise AuthenticationFailedError("the node is starting; retry")
            return self._security.token_principal(token)
        if MTLS_METHOD in self._methods:
            name = _certificate_name(context)
            if name:
                return user_principal(name)
        raise AuthenticationFailedError(
            "no credentials: authenticate (SCRAM-SHA-256: user and password) or present a client certificate"
        )

    def _authorizer(self) -> Authorizer | None:
        security = self._security
        if security is None or not security.settings.authorization:
            return None
        return security.authorizer()

    def authorize(self, method: str, principal: str, request: Any) -> None:
        authorizer = self._authorizer()
        if authorizer is None or isinstance(request, Undecodable):
            return  # an undecodable request is refused by the servicer, INVALID_ARGUMENT
        rule = _RULES.get(method)
        if rule is None:
            raise AuthorizationFailedError(f"{principal} may not call {method} (no ACL maps to it)")
        if method.endswith("/InitProducer"):
            if not authorizer.allowed_somewhere(principal, W, _TOPIC):
                raise AuthorizationFailedError(f"{principal} may not write any topic, so may not InitProducer")
            return
        for alternatives in rule(request):
            if not any(authorizer.allowed(principal, op, resource) for op, resource in alternatives):
                authorizer.check(principal, *alternatives[0])

    def filter(self, method: str, principal: str, response: Any) -> Any:
        """Drop from an answer the topics and groups the principal may not describe."""
        authorizer = self._authorizer()
        if authorizer is None:
            return response

        def visible(topic: str) -> bool:
            return authorizer.allowed(principal, D, _topic(topic))

        if method.endswith(("/Metadata", "/ListTopics")):
            kept = [t for t in response.topics if visible(t.name)]
            del response.topics[:]
            response.topics.extend(kept)
        elif method.endswith("/DescribeCluster"):
            under = [tp for tp in response.under_replicated if visible(tp.topic)]
            moves = [m for m in response.moves if visible(m.topic)]
            del response.under_replicated[:]
            response.under_replicated.extend(under)
            del response.moves[:]
            response.moves.extend(moves)
        elif method.endswith("/ListGroups"):
            groups = [g for g in response.groups if authorizer.allowed(principal, D, Resource(_GROUP, g))]
            del response.groups[:]
            response.groups.extend(groups)
            listings = [x for x in response.listings if authorizer.allowed(principal, D, Resource(_GROUP, x.group))]
            del response.listings[:]
            response.listings.extend(listings)
        return response

    # ------------------------------------------------------------------------------------ the interceptor

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Any]], handler_call_details: Any) -> Any:
        handler = await continuation(handler_call_details)
        method = str(handler_call_details.method)
        if handler is None or not self._enabled or method == AUTHENTICATE_METHOD or method.startswith(_OPEN_PREFIXES):
            return handler
        cached = self._wrapped.get(id(handler))
        if cached is None or cached[0] is not handler:
            cached = (handler, self._wrap(handler, method))
            self._wrapped[id(handler)] = cached
        return cached[1]

    def _wrap(self, handler: Any, method: str) -> Any:
        ours = method.startswith(_OURS)

        async def admit(request: Any, context: Any) -> str:
            try:
                principal = self.principal(context)
                CURRENT_PRINCIPAL.set(principal)
                if ours and request is not None:
                    self.authorize(method, principal, request)
                return principal
            except MultiraftError as exc:
                await context.abort_with_status(to_status(exc))
                raise AssertionError("abort_with_status returned") from exc  # pragma: no cover

        if handler.unary_unary is not None:
            inner_uu = handler.unary_unary

            async def unary_unary(request: Any, context: Any) -> Any:
                principal = await admit(request, context)
                return self.filter(method, principal, await inner_uu(request, context))

            return handler._replace(unary_unary=unary_unary)
        if handler.unary_stream is not None:
            inner_us = handler.unary_stream

            async def unary_stream(request: Any, context: Any) -> AsyncIterator[Any]:
                await admit(request, context)
                async for item in inner_us(request, context):
                    yield item

            return handler._replace(unary_stream=unary_stream)

        inner = handler.stream_stream or handler.stream_unary

        def checked(principal: str, requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
            async def each() -> AsyncIterator[Any]:
                async for request in requests:
                    if ours:
                        self.authorize(method, principal, request)  # a denied item ends the stream
                    yield request

            return each()

        if handler.stream_stream is not None:

            async def stream_stream(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
                principal = await admit(None, context)
                async for item in inner(checked(principal, requests), context):
                    yield item

            return handler._replace(stream_stream=stream_stream)

        async def stream_unary(requests: AsyncIterator[Any], context: Any) -> Any:
            principal = await admit(None, context)
            return await inner(checked(principal, requests), context)

        return handler._replace(stream_unary=stream_unary)
