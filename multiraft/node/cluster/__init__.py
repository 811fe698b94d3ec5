"""The event loop's dealings with the cluster: what it knows of the others and what it tells them.

What lives here: the directory (``directory.py``: the controller's state as applied here, who leads what,
the local replicas), the client of the controller leader (``controller_client.py``), partition status from
each leader (``status.py``), the controller leader's healing and balancing loop (``rebalancer.py``), storage
capacity and its reports (``capacity.py``) and the node's seat in the SWIM member-list (``swim.py``).

Owner: the event loop (``LoopOwned``). May import: the node's protocols, vocabulary and threads, the
controller's state machine, ``membership`` (SWIM); never the scheduler's internals, the replicas or the
front doors.
"""
