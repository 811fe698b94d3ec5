"""The Security service's servicer: SCRAM authentication, users and ACLs (thin, over
:class:`multiraft.node.services.security.NodeSecurity`). Who may call what is decided before, by
:mod:`rpc.server.auth`."""

from __future__ import annotations

from typing import Any

import grpc

from multiraft import controller as ctl
from multiraft.errors import AuthenticationFailedError, InvalidArgumentError
from multiraft.node.services.security import NodeSecurity
from multiraft.security.authorizer import user_principal
from multiraft.security.scram import MECHANISM
from rpc.proto import multiraft_pb2 as pb
from rpc.proto import multiraft_pb2_grpc as pb_grpc
from rpc.server.handlers import mapped
from rpc.server.limits import RequestLimits

__all__ = ["SecurityServicer", "binding_from_pb", "binding_pb"]

_ENUMS: dict[str, type[Any]] = {
    "resource_type": ctl.ResourceType,
    "pattern_type": ctl.PatternType,
    "operation": ctl.AclOperation,
    "permission": ctl.AclPermission,
}


def _enum(name: str, value: str, *, optional: bool = False) -> Any:
    if optional and not value:
        return None
    try:
        return _ENUMS[name](value)
    except ValueError:
        choices = ", ".join(str(v) for v in _ENUMS[name])
        raise InvalidArgumentError(f"{name} must be one of {choices}, got {value[:64]!r}", field=name) from None


def binding_from_pb(binding: pb.AclBinding) -> ctl.AclBinding:
    found = ctl.AclBinding(
        binding.principal,
        _enum("resource_type", binding.resource_type),
        binding.resource_name,
        _enum("pattern_type", binding.pattern_type or "literal"),
        _enum("operation", binding.operation),
        _enum("permission", binding.permission or "allow"),
    )
    try:
        ctl.check_binding(found)
    except ctl.ControllerArgumentError as exc:
        raise InvalidArgumentError(str(exc), field=f"bindings.{exc.field}") from exc
    return found


def binding_pb(binding: ctl.AclBinding) -> pb.AclBinding:
    return pb.AclBinding(
        principal=binding.principal,
        resource_type=str(binding.resource_type),
        resource_name=binding.resource_name,
        pattern_type=str(binding.pattern_type),
        operation=str(binding.operation),
        permission=str(binding.permission),
    )


def _filter_from_pb(found: pb.AclFilter) -> ctl.AclFilter:
    return ctl.AclFilter(
        found.principal or None,
        _enum("resource_type", found.resource_type, optional=True),
        found.resource_name or None,
        _enum("pattern_type", found.pattern_type, optional=True),
        _enum("operation", found.operation, optional=True),
        _enum("permission", found.permission, optional=True),
    )


class SecurityServicer(pb_grpc.SecurityServicer):
    def __init__(self, security: NodeSecurity, limits: RequestLimits | None = None) -> None:
        self._security = security
        self._limits = limits or RequestLimits()

    @mapped
    async def Authenticate(  # noqa: N802 - gRPC method names
        self, request: pb.AuthenticateRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.AuthenticateResponse:
        if request.mechanism.upper() != MECHANISM:
            raise AuthenticationFailedError(f"unsupported mechanism {request.mechanism[:32]!r}; use {MECHANISM}")
        if not request.session_id:
            session, server_first = self._security.scram_first(request.message)
            return pb.AuthenticateResponse(session_id=session, message=server_first)
        server_final, token, expires_ms, user = self._security.scram_final(request.session_id, request.message)
        return pb.AuthenticateResponse(
            session_id=request.session_id,
            message=server_final,
            token=token,
            token_expires_at_ms=expires_ms,
            principal=user_principal(user),
        )

    @mapped
    async def UpsertUser(  # noqa: N802
        self, request: pb.UpsertUserRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.UpsertUserResponse:
        c = request.credential
        credential = ctl.ScramCredential(bytes(c.salt), c.iterations, bytes(c.stored_key), bytes(c.server_key))
        await self._security.upsert_user(request.name, credential, create_only=request.create_only)
        return pb.UpsertUserResponse()

    @mapped
    async def DeleteUser(  # noqa: N802
        self, request: pb.DeleteUserRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DeleteUserResponse:
        await self._security.delete_user(request.name)
        return pb.DeleteUserResponse()

    @mapped
    async def ListUsers(  # noqa: N802
        self, request: pb.ListUsersRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListUsersResponse:
        users = [pb.UserInfo(name=n, mechanism=MECHANISM, iterations=i) for n, i in self._security.list_users()]
        return pb.ListUsersResponse(users=users)

    @mapped
    async def CreateAcls(  # noqa: N802
        self, request: pb.CreateAclsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.CreateAclsResponse:
        await self._security.create_acls([binding_from_pb(b) for b in request.bindings])
        return pb.CreateAclsResponse()

    @mapped
    async def DeleteAcls(  # noqa: N802
        self, request: pb.DeleteAclsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DeleteAclsResponse:
        if not request.filters:
            raise InvalidArgumentError("give at least one filter", field="filters")
        deleted = await self._security.delete_acls([_filter_from_pb(f) for f in request.filters])
        return pb.DeleteAclsResponse(deleted=[binding_pb(b) for b in deleted])

    @mapped
    async def DescribeAcls(  # noqa: N802
        self, request: pb.DescribeAclsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DescribeAclsResponse:
        bindings = self._security.describe_acls([_filter_from_pb(request.filter)])
        return pb.DescribeAclsResponse(bindings=[binding_pb(b) for b in bindings])
