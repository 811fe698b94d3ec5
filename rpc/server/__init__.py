"""The gRPC front door of a node: protobuf in, service calls, protobuf or a status out.

What lives here: the front door that serves a node on its client port (``front_door.py``: ``GrpcFrontDoor``,
``run_node``), the servicers of the data and admin API (``servicers.py``), of consumer groups
(``consumer_groups_servicer.py``) and of users and ACLs (``security_servicer.py``), the authentication
interceptor (``auth.py``), request limits (``limits.py``) and the client port's TLS (``tls.py``).

Owner: the node's event loop (grpc.aio). May import: the node's services and their result types, the wire
(``rpc.proto``), security and config; never the client library.
"""
