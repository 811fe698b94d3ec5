"""With ``mtls`` in ``authentication``, a client whose certificate the TLS layer verified is ``User:<CN>``; a
client without one is refused UNAUTHENTICATED with the reason. A small TLS server in this process (certificates
made here with the ``cryptography`` package) runs the front door's :class:`rpc.server.auth.ClientAuth` interceptor."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from multiraft.config.node import NodeConfig
from multiraft.security.principal import CURRENT_PRINCIPAL
from rpc.proto import multiraft_pb2 as pb
from rpc.proto.status import from_rpc_error
from rpc.server.auth import ClientAuth

METHOD = "/multiraft.v1.Admin/ListTopics"


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _issue(
    subject: str, issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None, *, ca: bool = False
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer[0].subject if issuer else _name(subject))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256()), key


def _pem(cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> tuple[bytes, bytes]:
    return cert.public_bytes(serialization.Encoding.PEM), key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@pytest.fixture(scope="module")
def pki() -> dict[str, tuple[bytes, bytes]]:
    ca = _issue("test ca", None, ca=True)
    return {
        "ca": _pem(*ca),
        "server": _pem(*_issue("localhost", ca)),
        "alice": _pem(*_issue("alice", ca)),
    }


async def _list_topics(request: pb.ListTopicsRequest, context: Any) -> pb.ListTopicsResponse:
    """Answers with the principal the interceptor found, as a topic name."""
    return pb.ListTopicsResponse(topics=[pb.TopicInfo(name=CURRENT_PRINCIPAL.get())])


async def _subscribe(request: pb.SubscribeRequest, context: Any) -> AsyncIterator[pb.FetchResponse]:
    """A stream whose one item names the principal."""
    yield pb.FetchResponse(topic=CURRENT_PRINCIPAL.get())


def _call(
    pki: dict[str, tuple[bytes, bytes]], *, require_client_auth: bool, client: str | None, stream: bool = False
) -> str:
    async def run() -> str:
        auth = ClientAuth(NodeConfig(authentication=("mtls",)))
        server = grpc.aio.server(interceptors=[auth])
        handler = grpc.method_handlers_generic_handler(
            "multiraft.v1.Admin",
            {
                "ListTopics": grpc.unary_unary_rpc_method_handler(
                    _list_topics,
                    request_deserializer=pb.ListTopicsRequest.FromString,
                    response_serializer=pb.ListTopicsResponse.SerializeToString,
                )
            },
        )
        streams = grpc.method_handlers_generic_handler(
            "multiraft.v1.Log",
            {
                "Subscribe": grpc.unary_stream_rpc_method_handler(
                    _subscribe,
                    request_deserializer=pb.SubscribeRequest.FromString,
                    response_serializer=pb.FetchResponse.SerializeToString,
                )
            },
        )
        server.add_generic_rpc_handlers((handler, streams))
        credentials = grpc.ssl_server_credentials(
            [pki["server"][::-1]], root_certificates=pki["ca"][0], require_client_auth=require_client_auth
        )
        port = server.add_secure_port("127.0.0.1:0", credentials)
        await server.start()
        try:
            key, chain = (pki[client][1], pki[client][0]) if client else (None, None)
            channel_credentials = grpc.ssl_channel_credentials(pki["ca"][0], key, chain)
            options = [("grpc.ssl_target_name_override", "localhost")]
            async with grpc.aio.secure_channel(f"127.0.0.1:{port}", channel_credentials, options=options) as channel:
                if stream:
                    subscribe = channel.unary_stream(
                        "/multiraft.v1.Log/Subscribe",
                        request_serializer=pb.SubscribeRequest.SerializeToString,
                        response_deserializer=pb.FetchResponse.FromString,
                    )
                    items = [item async for item in subscribe(pb.SubscribeRequest(topic="t"), timeout=10)]
                    return str(items[0].topic)
                call = channel.unary_unary(
                    METHOD,
                    request_serializer=pb.ListTopicsRequest.SerializeToString,
                    response_deserializer=pb.ListTopicsResponse.FromString,
                )
                response = await call(pb.ListTopicsRequest(), timeout=10)
                return str(response.topics[0].name)
        finally:
            await server.stop(None)

    return asyncio.run(run())


def test_a_verified_client_certificate_makes_its_common_name_the_principal(pki: Any) -> None:
    assert _call(pki, require_client_auth=True, client="alice") == "User:alice"


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_a_client_without_a_certificate_or_token_is_refused_with_the_reason(pki: Any, stream: bool) -> None:
    with pytest.raises(grpc.RpcError) as refused:
        _call(pki, require_client_auth=False, client=None, stream=stream)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED  # type: ignore[attr-defined]
    assert "no credentials" in from_rpc_error(refused.value).message


def test_a_stream_sees_the_principal_too(pki: Any) -> None:
    assert _call(pki, require_client_auth=True, client="alice", stream=True) == "User:alice"
