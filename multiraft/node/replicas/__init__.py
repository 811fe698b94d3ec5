"""The replicas a node hosts: the state machines of its Raft groups, over the log store (scheduler thread).

What lives here: a topic-partition replica (``partition.py``) with its idempotent producers
(``producers.py``) and its CONTROL entries (``control.py``); a ``__consumer_offsets`` replica (``offsets.py``)
and the consumer-group coordinators hosted on its leader (``consumer_group_host.py``, with the mapping of the
coordinator's refusals to client errors, ``consumer_group_errors.py``); the controller's replica, Raft group 0
(``controller.py``) and the room it places within (``capacity.py``: low-water marks, the shortage check, the
room ledger); the Raft group a replica is handed (``raft_group.py``: its core, storage, pending completions,
and ``propose``); and the Raft core's storage over a segmented log (``raft_log.py``: the Raft log *is* the
partition log).

Owner: the scheduler thread (each class derives from ``SchedulerOwned``; ``PartitionView`` is the event
loop's, ``LoopOwned``; ``RoomLedger`` is replaced whole, read by both). A replica proposes through its Raft
group and is applied by the scheduler; it never calls back into the scheduler. This is the lowest room of the
node: it may import the Raft core, the controller and consumer-group state machines, storage, the node's
vocabulary and threads, and no other room (``tests/test_layering.py``, ``NODE_ROOMS``).
"""
