"""``python -m multiraft.cli``: the same as the ``multiraft`` command (how node processes are started)."""

from multiraft.cli import main

main()
