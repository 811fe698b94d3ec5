"""The connector's security options: TLS and SCRAM users, named as librdkafka (confluent-kafka) names them.

    security.protocol         PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL
    ssl.ca.location           PEM bundle the nodes' certificates are checked against (default: system roots)
    ssl.certificate.location  this client's certificate (PEM), for clusters that ask for one
    ssl.key.location          its private key (PEM)
    sasl.mechanism            SCRAM-SHA-256 (the only one)
    sasl.username             the user (``multiraft user create``)
    sasl.password             its password

Each may also be written with Spark's Kafka source prefix (``kafka.security.protocol``, ...). The files are
read where the clients run: on the driver and on every executor, as Kafka's truststore locations are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from multiraft import ConfigError, TlsSettings

__all__ = ["SECURITY_OPTIONS", "KAFKA_PREFIXED", "Security", "parse_security"]

SECURITY_OPTIONS = (
    "security.protocol",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "sasl.mechanism",
    "sasl.username",
    "sasl.password",
)
KAFKA_PREFIXED = tuple(f"kafka.{name}" for name in SECURITY_OPTIONS)
"""The same options as Spark's Kafka source spells them (accepted, not listed in errors)."""

_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_MECHANISMS = ("SCRAM-SHA-256",)


@dataclass(frozen=True)
class Security:
    """How the connector's clients reach the cluster (carried to the executors with the options)."""

    protocol: str = "PLAINTEXT"
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    user: str = ""
    password: str = field(default="", repr=False)  # never in a log line or a plan's string

    @property
    def tls(self) -> TlsSettings | None:
        if self.protocol not in ("SSL", "SASL_SSL"):
            return None
        return TlsSettings(ca_file=self.ca_file, cert_file=self.cert_file, key_file=self.key_file)

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``Admin``, ``Producer`` and ``Consumer``."""
        kwargs: dict[str, Any] = {}
        if self.tls is not None:
            kwargs["tls"] = self.tls
        if self.protocol.startswith("SASL"):
            kwargs.update(user=self.user, password=self.password)
        return kwargs


def parse_security(options: Mapping[str, str]) -> Security:
    """The security options of lower-cased ``options``; errors name the option as the user wrote it."""

    def get(name: str) -> str | None:
        plain, prefixed = options.get(name), options.get(f"kafka.{name}")
        if plain is not None and prefixed is not None:
            raise ConfigError(name, f"give it or kafka.{name}, not both")
        return plain if plain is not None else prefixed

    protocol = (get("security.protocol") or "PLAINTEXT").strip().upper()
    if protocol not in _PROTOCOLS:
        raise ConfigError("security.protocol", f"must be one of {', '.join(_PROTOCOLS)}, got {protocol!r}")
    files = {}
    for name in ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location"):
        value = (get(name) or "").strip()
        if value and protocol not in ("SSL", "SASL_SSL"):
            raise ConfigError(name, f"needs security.protocol SSL or SASL_SSL (it is {protocol})")
        if value and not Path(value).is_file():
            raise ConfigError(name, f"no such file on the driver: {value}")
        files[name] = value
    if bool(files["ssl.certificate.location"]) != bool(files["ssl.key.location"]):
        missing = "ssl.key.location" if files["ssl.certificate.location"] else "ssl.certificate.location"
        raise ConfigError(missing, "ssl.certificate.location and ssl.key.location go together")
    user, password = (get("sasl.username") or "").strip(), get("sasl.password") or ""
    mechanism = (get("sasl.mechanism") or "SCRAM-SHA-256").strip().upper()
    if protocol.startswith("SASL"):
        if mechanism not in _MECHANISMS:
            raise ConfigError("sasl.mechanism", f"must be {', '.join(_MECHANISMS)}, got {mechanism!r}")
        if not user:
            raise ConfigError("sasl.username", f"is required with security.protocol {protocol}")
        if not password:
            raise ConfigError("sasl.password", f"is required with security.protocol {protocol}")
    else:
        for name in ("sasl.mechanism", "sasl.username", "sasl.password"):
            if get(name) is not None:
                raise ConfigError(name, f"needs security.protocol SASL_PLAINTEXT or SASL_SSL (it is {protocol})")
    return Security(
        protocol,
        files["ssl.ca.location"],
        files["ssl.certificate.location"],
        files["ssl.key.location"],
        user,
        password,
    )
