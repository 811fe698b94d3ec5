"""Protobuf schemas, gRPC servicers and the client library."""
