"""The client library: Producer, Consumer and Admin over gRPC, and what they are built from (private).

Its public names are the face of :mod:`multiraft` (``from multiraft import Producer``); nothing here is
imported by users directly. The client runs on the caller's threads and a sender thread of its own per
producer; it imports no engine (no storage engine, Raft core or node runtime), only the record-batch format
of ``storage.batch`` and the error tree of ``multiraft.errors``.
"""
