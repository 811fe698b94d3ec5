"""The top floor: the tools a user runs around a cluster.

What lives here: the command line (``cli/``: ``multiraft`` and its subcommands, ``multiraft bench``), the
local-cluster launcher (``launcher.py``: start, stop and restart node processes) and the nemesis
(``nemesis/``: fault-injection runs and their checker).

Nothing below this floor imports it (``tests/test_layering.py``). The tools use the public client API, the
node's entry points and the launcher; the nemesis reads stopped nodes' log stores offline with ``storage``.
"""
