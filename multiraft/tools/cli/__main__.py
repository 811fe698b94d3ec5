"""``python -m multiraft.tools.cli``: the same as the ``multiraft`` command (how node processes are started)."""

from multiraft.tools.cli import main

main()
