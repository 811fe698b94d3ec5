"""Security, one home: client authentication and authorization, shared by the node and the client library.

What lives here: SCRAM-SHA-256 (``scram.py``), TLS material and settings (``tls.py``), the cluster's bearer
tokens (``tokens.py``), the ACL authorizer and principals (``authorizer.py``) and the principal of the
request being served (``principal.py``: ``CURRENT_PRINCIPAL``, set by a front door). Import each from its
module: the client loads SCRAM and TLS without the authorizer (and so without the controller's state machine).

The users and ACLs themselves live in the controller's replicated state (:mod:`multiraft.controller.security`);
the node's security service is :mod:`multiraft.node.services.security`, the gRPC interceptor
:mod:`rpc.server.auth`, the security keys of the node config :mod:`multiraft.config.security`.
"""
