"""The node's vocabulary: the plain values its rooms exchange, apart from any wire format.

What lives here: frozen dataclasses that requests, answers and reports are made of, one concept per module:
controller requests and outcomes (``controller.py``), the offsets group's operations (``offsets.py``), the
consumer-group coordinator's operations (``consumer_groups.py``), what nodes report of partitions, leaders and
moves (``status.py``) and of their own room (``capacity.py``), a produce's result and a partition's retention
(``partitions.py``), and a segment-copy chunk request (``catchup.py``). Their binary encoding is the peer room's
(:mod:`multiraft.node.peer.messages`, :mod:`multiraft.node.peer.consumer_group_messages`).

Owner: none; every value here is immutable and may cross threads. Every room of the node may import it. It
imports only pure types (the controller's, the consumer-group coordinator's, the error tree): never a codec,
``struct``, storage or another room of the node (``tests/test_layering.py``).
"""
