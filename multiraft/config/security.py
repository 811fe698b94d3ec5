"""The security keys of a node's configuration (TLS, gossip encryption, authentication, authorization).

:class:`SecuritySettings` is a base of :class:`multiraft.config.node.NodeConfig`: these keys are read from TOML,
``MULTIRAFT_*`` variables and flags like every other key. ``docs/security.md`` tells how they fit together.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from multiraft.errors import ConfigError
from storage.config_fields import setting

__all__ = ["SecuritySettings", "is_loopback", "AUTH_METHODS", "TLS_CLIENT_AUTH"]

AUTH_METHODS = ("scram-sha-256", "mtls")
TLS_CLIENT_AUTH = ("none", "requested", "required")


@dataclass(frozen=True)
class SecuritySettings:
    """Security keys; all off by default, which a node accepts only on loopback addresses (see ``insecure``)."""

    tls_cert_file: str = setting(
        "",
        "path",
        "PEM certificate chain of this node, served on the client port and presented on the peer port. Empty: "
        "plaintext. On the peer port it must name the node (SAN DNS name node-<node_id>).",
    )
    tls_key_file: str = setting("", "path", "PEM private key of tls_cert_file. Required with it.")
    tls_ca_file: str = setting(
        "",
        "path",
        "PEM bundle of the certificate authorities trusted for peer and client certificates. Required with TLS: "
        "the peer port always asks for and verifies the other node's certificate (mutual TLS).",
    )
    tls_client_auth: str = setting(
        "none",
        "mode",
        "Client certificates on the client port: none, requested (verified if presented) or required.",
    )
    tls_reload_interval_s: float = setting(
        10.0, "seconds", "How often the TLS files are checked for changes; new connections use the new ones."
    )
    gossip_keyring_file: str = setting(
        "",
        "path",
        "Keyring of the SWIM gossip: one base64 AES key (16, 24 or 32 bytes) a line, the first one encrypts, "
        "all decrypt (rotation). Empty: gossip is not encrypted. Re-read when it changes.",
    )
    gossip_verify_incoming: bool = setting(
        True,
        "bool",
        "With a keyring: drop gossip that no key opens. false also accepts plain-text gossip, only while a "
        "running cluster migrates to encryption (docs/security.md).",
    )
    gossip_verify_outgoing: bool = setting(
        True,
        "bool",
        "With a keyring: encrypt all gossip sent. false sends plain text, only for the first step of a migration.",
    )
    authentication: tuple[str, ...] = setting(
        (),
        "list",
        "How clients prove who they are: scram-sha-256 (users of `multiraft user`), mtls (the certificate's "
        "subject). Empty: no authentication, every client is User:ANONYMOUS.",
    )
    auth_token_ttl_s: float = setting(
        900.0, "seconds", "Lifetime of the token a SCRAM authentication issues; the client renews it before then."
    )
    authorization: bool = setting(
        False,
        "bool",
        "Enforce ACLs (`multiraft acl`) on every request; without a matching ACL a request is denied. Off: "
        "every client may do everything.",
    )
    super_users: tuple[str, ...] = setting(
        (), "list of principals", "Principals (User:name) allowed everything whatever the ACLs say."
    )
    insecure: bool = setting(
        False,
        "bool",
        "Allow listening on a non-loopback address without TLS and authentication. Off: such a node refuses to start.",
    )

    def validate_security(self, listen_hosts: dict[str, str]) -> None:
        """Raise :class:`ConfigError` naming the first wrong security key (``listen_hosts``: key -> host)."""
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            key = "tls_key_file" if self.tls_cert_file else "tls_cert_file"
            raise ConfigError(key, "tls_cert_file and tls_key_file go together")
        if self.tls_cert_file and not self.tls_ca_file:
            raise ConfigError("tls_ca_file", "is required with tls_cert_file (peers verify each other)")
        if self.tls_client_auth not in TLS_CLIENT_AUTH:
            raise ConfigError("tls_client_auth", f"must be one of {', '.join(TLS_CLIENT_AUTH)}")
        if self.tls_client_auth != "none" and not self.tls_cert_file:
            raise ConfigError("tls_client_auth", "client certificates need TLS (tls_cert_file)")
        if not self.tls_reload_interval_s > 0:
            raise ConfigError("tls_reload_interval_s", f"must be > 0, got {self.tls_reload_interval_s}")
        for method in self.authentication:
            if method not in AUTH_METHODS:
                raise ConfigError("authentication", f"unknown method {method!r}; known: {', '.join(AUTH_METHODS)}")
        if "mtls" in self.authentication and self.tls_client_auth == "none":
            raise ConfigError("authentication", "mtls needs tls_client_auth = requested or required")
        if not 10 <= self.auth_token_ttl_s <= 86_400:
            raise ConfigError("auth_token_ttl_s", f"must be within [10, 86400] seconds, got {self.auth_token_ttl_s}")
        for principal in self.super_users:
            kind, sep, name = principal.partition(":")
            if not sep or kind != "User" or not name:
                raise ConfigError("super_users", f"expected User:name, got {principal!r}")
        if not self.gossip_keyring_file:
            for key in ("gossip_verify_incoming", "gossip_verify_outgoing"):
                if not getattr(self, key):
                    raise ConfigError(key, "only means something with gossip_keyring_file")
        exposed = [key for key, host in listen_hosts.items() if not is_loopback(host)]
        if exposed and not self.insecure and not (self.tls_cert_file and self.authentication):
            raise ConfigError(
                exposed[0],
                f"listens off the loopback ({listen_hosts[exposed[0]]}) without TLS and authentication: set "
                "tls_cert_file, tls_key_file, tls_ca_file and authentication, or insecure = true to accept it",
            )
        gossip_host = listen_hosts.get("gossip_address", "127.0.0.1")
        verified = self.gossip_keyring_file and self.gossip_verify_incoming and self.gossip_verify_outgoing
        if not is_loopback(gossip_host) and not self.insecure and not verified:
            # Plain gossip can declare nodes dead or alive at will: SWIM off the loopback needs the keyring.
            raise ConfigError(
                "gossip_keyring_file",
                f"gossip listens off the loopback ({gossip_host}) unencrypted: set gossip_keyring_file "
                "(`multiraft gossip keygen`), or insecure = true to accept it",
            )


def is_loopback(host: str) -> bool:
    """True for an address only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere
