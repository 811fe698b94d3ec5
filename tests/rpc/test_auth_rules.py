"""Every RPC of the protocol says which ACL it needs (a new RPC cannot be added unguarded), and the bearer
token is read from the ``authorization`` metadata as HTTP's ``Bearer`` scheme."""

from __future__ import annotations

import pytest

from multiraft.errors import AuthenticationFailedError
from rpc.auth import _RULES, AUTHENTICATE_METHOD, bearer_token
from rpc.proto import multiraft_pb2 as pb


def test_every_rpc_but_authenticate_has_an_acl_rule() -> None:
    methods = {
        f"/{service.full_name}/{method.name}"
        for service in pb.DESCRIPTOR.services_by_name.values()
        for method in service.methods
    }
    assert methods - {AUTHENTICATE_METHOD} == set(_RULES)


def test_the_bearer_token_is_read_case_insensitively_and_other_schemes_are_refused() -> None:
    assert bearer_token([("x-other", "1"), ("authorization", "Bearer abc.def")]) == "abc.def"
    assert bearer_token([("authorization", b"bearer  tok ")]) == "tok"
    assert bearer_token([("x-other", "1")]) is None
    assert bearer_token(None) is None
    with pytest.raises(AuthenticationFailedError, match="Bearer"):
        bearer_token([("authorization", "Basic dXNlcjpwdw==")])
