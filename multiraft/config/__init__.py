"""Configuration of a node, in frozen dataclasses whose fields document their units and defaults.

What lives here: the node config and its parts (``node.py``: ``NodeConfig`` and the configs it holds),
environment overrides (``env.py``), consumer-group limits (``consumer_groups.py``), replica placement
(``placement.py``) and security (``security.py``). ``validate()`` names the wrong field.

The lower floors keep their own configs (``storage.config``, ``membership.config``, ``multiraft.raft.config``,
a topic's ``multiraft.controller.topic_config``); this room composes them. Pure values: no thread owns them.
"""
