"""`multiraft storage check|repair`: what an operator sees, and the exit status scripts rely on."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from multiraft.node.replicas.raft_log import RaftLogStorage
from multiraft.tools.cli import app
from storage import LogStore
from tests.damage import flip_every_copy
from tests.storage._helpers import SMALL, data

runner = CliRunner()


def _store_with_a_flipped_entry(path: Path) -> None:
    with LogStore.open(path, SMALL) as store:
        store.log("clicks", 2).append([data(i, value=b"#%04d#" % i * 10) for i in range(1, 30)])
    flip_every_copy(path / "log.lmdb" / "data.mdb", b"#0017#", at=1)


def test_check_of_a_sound_store_exits_zero(tmp_path: Path) -> None:
    with LogStore.open(tmp_path, SMALL) as store:
        store.log("clicks", 0).append([data(i) for i in range(1, 10)])
    result = runner.invoke(app, ["storage", "check", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "ok: 9 entries in 1 logs" in result.output


def test_check_names_the_file_and_index_and_repair_fixes_it(tmp_path: Path) -> None:
    _store_with_a_flipped_entry(tmp_path)
    result = runner.invoke(app, ["storage", "check", str(tmp_path), "--json"])
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False
    assert report["problems"] == [f"{tmp_path}/log.lmdb/data.mdb log clicks/2 index 17: entry CRC mismatch"]

    result = runner.invoke(app, ["storage", "repair", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "dropped clicks/2 entries 17..29 (13 entries): entry CRC mismatch" in result.output
    # The replica may have acknowledged what it lost: it must not vote for a log lacking it (multiraft.raft).
    assert "clicks/2 will not vote until its leader has sent entries up to 29 again" in result.output
    with LogStore.open(tmp_path, SMALL) as store:
        log = store.log("clicks", 2)
        assert log.last_index() == 16
        assert RaftLogStorage(log).recover_until() == (29, max(log.hard_state().term, log.term(16)))
    assert runner.invoke(app, ["storage", "check", str(tmp_path)]).exit_code == 0
    assert runner.invoke(app, ["storage", "repair", str(tmp_path)]).output.startswith("nothing to repair")


def test_repair_of_an_unreadable_store_exits_two_and_changes_nothing(tmp_path: Path) -> None:
    env = tmp_path / "log.lmdb"
    env.mkdir()
    (env / "data.mdb").write_bytes(b"\x00" * 100)
    result = runner.invoke(app, ["storage", "repair", str(tmp_path)])
    assert result.exit_code == 2
    assert "cannot repair" in result.output
    assert (env / "data.mdb").read_bytes() == b"\x00" * 100
