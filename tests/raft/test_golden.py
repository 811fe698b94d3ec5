"""Golden scenario files (datadriven style, like etcd's testdata/*.txt): exact message flows, reviewed by eye.

Each file in ``testdata/`` is a list of blocks::

    # a comment
    command arg key=value
    ----
    expected output

Every command prints the messages delivered while the cluster settles (``sender->receiver TYPE ...``), or
``ok``. After a deliberate change of behaviour, regenerate the files with ``RAFT_GOLDEN_REWRITE=1`` and review
the diff like code.

Commands: ``cluster voters=1,2,3 [learners=4] [key=value ...RaftConfig]``, ``campaign N``, ``propose N text``,
``tick [n] [nodes=1,2]``, ``isolate N``, ``cut A B``, ``heal``, ``crash N``, ``restart N``, ``add-node N``,
``conf-change N add-learner|add-voter|remove M``, ``transfer N M``, ``read-index N ctx``, ``compact N``,
``wake N``, ``status``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from multiraft.raft import ConfChange, RaftError

from .harness import Cluster

TESTDATA = Path(__file__).resolve().parent / "testdata"


def _parse(text: str) -> list[tuple[list[str], str, str]]:
    """Blocks of (leading comment lines, command, expected output)."""
    blocks: list[tuple[list[str], str, str]] = []
    lines = text.splitlines()
    i = 0
    comments: list[str] = []
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.startswith("#"):
            if line.startswith("#"):
                comments.append(line)
            i += 1
            continue
        command = line
        i += 1
        if i >= len(lines) or lines[i] != "----":
            raise ValueError(f"expected ---- after {command!r}")
        i += 1
        out: list[str] = []
        while i < len(lines) and lines[i].strip():
            out.append(lines[i])
            i += 1
        blocks.append((comments, command, "\n".join(out)))
        comments = []
    return blocks


class _Runner:
    def __init__(self) -> None:
        self.cluster: Cluster | None = None

    @property
    def c(self) -> Cluster:
        assert self.cluster is not None, "start with a cluster command"
        return self.cluster

    def run(self, command: str) -> str:
        words = command.split()
        name, args = words[0], words[1:]
        positional = [a for a in args if "=" not in a]
        options = dict(a.split("=", 1) for a in args if "=" in a)
        try:
            output = getattr(self, "cmd_" + name.replace("-", "_"))(positional, options)
        except RaftError as exc:
            output = f"error: {type(exc).__name__}: {exc}"
        return output if output else "ok"

    def _settle(self) -> str:
        start = len(self.c.transcript)
        self.c.stabilize()
        return "\n".join(self.c.transcript[start:])

    def cmd_cluster(self, positional: list[str], options: dict[str, str]) -> str:
        voters = [int(v) for v in options.pop("voters").split(",")]
        learners = [int(v) for v in options.pop("learners").split(",")] if "learners" in options else []
        config: dict[str, object] = {k: (v == "true") if v in ("true", "false") else int(v) for k, v in options.items()}
        self.cluster = Cluster(ids=voters, learners=learners, config=config)
        return ""

    def cmd_campaign(self, positional: list[str], options: dict[str, str]) -> str:
        self.c.node(int(positional[0])).campaign()
        return self._settle()

    def cmd_propose(self, positional: list[str], options: dict[str, str]) -> str:
        index = self.c.node(int(positional[0])).propose(positional[1].encode())
        return f"index {index}\n" + self._settle()

    def cmd_tick(self, positional: list[str], options: dict[str, str]) -> str:
        count = int(positional[0]) if positional else 1
        nodes = [int(n) for n in options["nodes"].split(",")] if "nodes" in options else sorted(self.c.hosts)
        start = len(self.c.transcript)
        for _ in range(count):
            for node_id in nodes:
                if node_id not in self.c.down and not self.c.node(node_id).quiescent:
                    self.c.node(node_id).tick()
            self.c.stabilize()
        return "\n".join(self.c.transcript[start:])

    def cmd_isolate(self, positional: list[str], options: dict[str, str]) -> str:
        self.c.isolate(int(positional[0]))
        return ""

    def cmd_cut(self, positional: list[str], options: dict[str, str]) -> str:
        self.c.cut(int(positional[0]), int(positional[1]))
        return ""

    def cmd_heal(self, positional: list[str], options: dict[str, str]) -> str:
        self.c.heal()
        return ""

    def cmd_crash(self, positional: list[str], options: dict[str, str]) -> str:
        self.c.crash(int(positional[0]))
        return ""

    def cmd_restart(self, positional: list[str], options: dict[str, str]) -> str:
        self.c.restart(int(positional[0]))
        return ""

    def cmd_add_node(self, positional: list[str], options: dict[str, str]) -> str:
        self.c.add_node(int(positional[0]))
        return ""

    def cmd_conf_change(self, positional: list[str], options: dict[str, str]) -> str:
        node, kind, target = int(positional[0]), positional[1], int(positional[2])
        change = {
            "add-learner": ConfChange.add_learner,
            "add-voter": ConfChange.add_voter,
            "remove": ConfChange.remove_node,
        }[kind](target)
        index = self.c.node(node).propose_conf_change(change)
        return f"index {index}\n" + self._settle()

    def cmd_transfer(self, positional: list[str], options: dict[str, str]) -> str:
        self.c.node(int(positional[0])).transfer_leader(int(positional[1]))
        return self._settle()

    def cmd_read_index(self, positional: list[str], options: dict[str, str]) -> str:
        node_id = int(positional[0])
        host = self.c.hosts[node_id]
        before = len(host.read_states)
        self.c.node(node_id).read_index(positional[1].encode())
        out = self._settle()
        reads = [f"read-state index={i} ctx={ctx.decode()}" for i, ctx in host.read_states[before:]]
        return "\n".join([line for line in [out, *reads] if line])

    def cmd_compact(self, positional: list[str], options: dict[str, str]) -> str:
        host = self.c.hosts[int(positional[0])]
        host.snapshot_and_compact(keep=0)
        return f"snapshot at {host.storage.snapshot().meta.index}"

    def cmd_wake(self, positional: list[str], options: dict[str, str]) -> str:
        self.c.node(int(positional[0])).wake()
        return self._settle()

    def cmd_status(self, positional: list[str], options: dict[str, str]) -> str:
        lines = []
        for node_id, host in sorted(self.c.hosts.items()):
            if node_id in self.c.down:
                lines.append(f"{node_id}: down")
                continue
            s = host.node.status()
            conf = s.conf_state
            members = f"voters={','.join(map(str, conf.voters))}"
            if conf.learners:
                members += f" learners={','.join(map(str, conf.learners))}"
            sleeping = " quiescent" if s.quiescent else ""
            payloads = ",".join(p.decode() for p in host.state.payloads)
            lines.append(
                f"{node_id}: {s.role.name.lower()} term={s.term} lead={s.leader_id} commit={s.commit} "
                f"applied={s.applied} last={s.last_index} {members}{sleeping} state=[{payloads}]"
            )
        return "\n".join(lines)


def _files() -> list[Path]:
    return sorted(TESTDATA.glob("*.txt"))


@pytest.mark.parametrize("path", _files(), ids=lambda p: p.stem)
def test_golden_scenario(path: Path) -> None:
    runner = _Runner()
    blocks = _parse(path.read_text())
    actual = [(comments, command, runner.run(command)) for comments, command, _ in blocks]
    if os.environ.get("RAFT_GOLDEN_REWRITE") == "1":
        parts = []
        for comments, command, output in actual:
            parts.extend(comments)
            parts.extend([command, "----", output, ""])
        path.write_text("\n".join(parts).rstrip("\n") + "\n")
        return
    for (_, command, expected), (_, _, got) in zip(blocks, actual, strict=True):
        assert got == expected, f"{path.name}: {command}\n--- expected\n{expected}\n--- got\n{got}"
