"""The gRPC front door of a node: protobuf in, service calls, protobuf or a status out.

What lives here: the front door that serves a node on its client port (``front_door.py``: ``GrpcFrontDoor``,
``run_node``); the servicers of the data API (``log_servicer.py``), the admin API (``admin_servicer.py``),
consumer groups (``consumer_groups_servicer.py``) and users and ACLs (``security_servicer.py``), all
answering through one mapping of internal errors to wire errors (``handlers.py``); the authentication
interceptor (``auth.py``), request limits (``limits.py``) and the client port's TLS (``tls.py``).

Owner: the node's event loop (grpc.aio). May import: the node's services and their result types, the wire
(``rpc.proto``), security and config; never the client library.
"""
