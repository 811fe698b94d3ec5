"""The scheduler side of a node: one thread that owns the log store and drives every Raft group in rounds.

What lives here: the scheduler (``scheduler.py``: step, tick, Ready, one LMDB transaction, one fsync, send,
apply), the store of replicas it drives (``store.py``: open, bootstrap, delete, hand-back, produce, offsets,
status, controller requests), linearizable reads (``reads.py``), the indexes that wait for the next sync
(``deferred_indexes.py``), who campaigns first after a restart (``startup_elections.py``), the scrubber
(``scrubber.py``), the term guard kept outside the log store (``term_guard.py``), the reconciler that makes
Raft configurations follow the controller's assignments (``reconciler.py``), which replicas need a snapshot
(``snapshot_peers.py``) and the trace hooks (``tracing.py``).

Owner: the scheduler thread (``SchedulerOwned``). The event loop reaches it only through ``SchedulerHandoff``
(``services.store_client.StoreClient`` wraps it); it answers through ``LoopHandoff.post``, publishing to the
loop's directory through the ``ViewDirectory`` protocol. May import: ``replicas``, the node's vocabulary,
threads and protocols, the Raft core, the controller and storage; no room above it (``peer``, ``catchup``,
``cluster``, ``services``).
"""
