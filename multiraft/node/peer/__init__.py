"""The peer wire and transport: how this node talks to the others (event loop thread).

What lives here: the transport (one TCP connection per peer carrying every Raft group's messages and the
node-to-node requests, ``transport.py``), its frames (``frames.py``) and outbound links (``link.py``, written
from either thread), the codec of node-to-node requests (``messages.py``, ``consumer_group_messages.py``:
they only encode and decode the node's vocabulary) and the typed asks a caller awaits (``call.py``).

Owner: the event loop, except ``PeerLink`` writes, which the scheduler thread makes to send Raft messages
(under the link's lock). May import: the node's vocabulary, threads and protocols, the Raft core's messages,
``storage.binary``; no room above it (``catchup``, ``cluster``, ``services``). Only this room encodes the
vocabulary (and the two ends of the wire that live above it: ``services.peer_requests`` and
``cluster.leader_broadcast``).
"""
