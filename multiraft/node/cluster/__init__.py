"""The event loop's dealings with the cluster: what it knows of the others and what it tells them.

What lives here: the directory (``directory.py``: the controller's state as applied here, who leads what,
the local replicas' views), the client of the controller leader (``controller_client.py``) and which
controller operations a peer may forward (``controller_policy.py``), partition status from each leader
(``status.py``), this node's leaderships told to every peer (``leader_broadcast.py``), the controller
leader's healing and balancing loop (``rebalancer.py``), storage capacity reports (``capacity.py``) and the
node's seat in the SWIM member-list (``swim.py``).

Owner: the event loop (``LoopOwned``). May import: the rooms below it (``replicas``, ``scheduler``,
``peer``, ``catchup``), the node's vocabulary, protocols and threads, the controller's state machine and
``membership`` (SWIM); never ``services`` or ``node.py``.
"""
