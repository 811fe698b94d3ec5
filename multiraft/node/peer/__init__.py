"""The peer side of a node: everything that talks to other nodes (event loop thread).

What lives here: the transport (one TCP connection per peer carrying every Raft group's messages and the
node-to-node requests, ``transport.py``), its frames (``frames.py``) and outbound links (``link.py``, written
from either thread), the binary codec of the node-to-node requests, whose types are the node's vocabulary
(``messages.py``, ``consumer_group_messages.py``; the types in :mod:`multiraft.node.vocabulary`), the typed
requests whose answer a caller awaits (``call.py``: the other rooms ask peers through it, never through the
codec), the server side of those requests (``service.py``) and the leadership broadcast
(``leader_broadcast.py``).

Owner: the event loop, except ``PeerLink.write``, which the scheduler thread calls to send Raft messages.
May import: the node's vocabulary and threads, the Raft core's messages, ``storage.binary``; never the front
doors, the scheduler's internals or the replicas.
"""
