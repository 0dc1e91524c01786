"""The results store: URLs, migrations, recording, reading, the never-raising hook, and 16
processes writing to one SQLite file at once."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from preflight.history import maybe_record, record
from preflight.history.store import MIGRATIONS, SCHEMA_VERSION, HistoryError, open_store, resolve_url
from preflight.model import Result, Status
from preflight.report import Report
from tests import fakes
from tests.conftest import ROOT
from tests.history import T0, res, ten_runs
from tests.slurm import KMSG_CLEAN


def test_urls_default_env_off_and_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PREFLIGHT_HISTORY", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert resolve_url(None) == f"sqlite:///{tmp_path}/xdg/preflight/history.db"
    monkeypatch.setenv("PREFLIGHT_HISTORY", "off")
    assert resolve_url(None) is None
    assert resolve_url("sqlite:///x/y.db") == "sqlite:///x/y.db"
    assert resolve_url(str(tmp_path / "h.db")) == f"sqlite:///{tmp_path}/h.db"
    assert resolve_url("postgresql://u@h/db") == "postgresql://u@h/db"
    with pytest.raises(HistoryError, match="use sqlite"):
        resolve_url("mysql://x")
    with pytest.raises(HistoryError, match="switched off"):
        open_store("off")


def test_migrations_are_versioned_and_idempotent(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/h.db"
    with open_store(url) as s:
        assert s.version() == SCHEMA_VERSION == len(MIGRATIONS)
        assert s.migrate() == SCHEMA_VERSION
    db = sqlite3.connect(tmp_path / "h.db")
    assert [r[0] for r in db.execute("SELECT version FROM schema_version ORDER BY version")] == [1, 2]
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    # a store from a newer preflight is refused, not damaged
    db.execute("INSERT INTO schema_version VALUES (99, 'future', 'x')")
    db.commit()
    db.close()
    with pytest.raises(HistoryError, match="newer than"):
        open_store(url)


def test_a_v1_store_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, title TEXT NOT NULL, applied TEXT NOT NULL)")
    for stmt in MIGRATIONS[0].sqlite:
        db.execute(stmt)
    db.execute("INSERT INTO schema_version VALUES (1, 'runs', 'then')")
    db.commit()
    db.close()
    with open_store(f"sqlite:///{path}") as s:
        assert s.version() == 2
        s.record_decision(None, "n1", "drain", "preflight: x")
        assert s.decisions("n1")[0].reason == "preflight: x"


def test_record_report_dict_and_results_read_back(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/h.db"
    rep = Report.build("node", [res("gpu.xid", "n1", "fail", "Xid 79"), res("ib.hca", "n1", "pass")])
    rid = record(rep, url=url, host="h1")
    docs = ten_runs()
    with open_store(url) as s:
        ids = [s.record(d) for d in docs[:3]]
        s.record([res("net.mtu", "n9", "warn")], "triage", when=T0 - 10)
        runs = s.runs()
        assert [r.command for r in runs] == ["triage", "prologue", "prologue", "prologue", "node"]
        assert runs[-1].id == rid and runs[-1].verdict == "NO-GO" and runs[-1].host == "h1"
        rows = s.rows(nodes=["n3"], checks=["gpu.xid"], commands=["prologue"])
        assert [r.run_id for r in rows] == ids and rows[2].status is Status.FAIL
        assert rows[2].facts["events"][0]["xid"] == 79
        assert s.rows(since=T0 + 1.5 * 3600, nodes=["n1"], checks=["ib.hca"])[0].run_id == ids[2]
        per_run = s.node_runs("n2", ("prologue",), limit=2)
        assert [[r.status.value for r in run if r.check == "ib.hca"] for run in per_run] == [["fail"], ["fail"]]
        assert s.counts()["runs"] == 5


def test_maybe_record_never_raises(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rep = Report.build("run", [Result("gpu.xid", "n1", Status.PASS, "ok")])
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert maybe_record(rep, f"sqlite:///{blocker}/sub/h.db") is None
    assert "warning: run not recorded in history" in capsys.readouterr().err
    assert maybe_record(rep, "postgresql://nobody@127.0.0.1:1/none", timeout=1) is None
    assert "not recorded" in capsys.readouterr().err
    assert maybe_record(rep, "off") is None
    assert maybe_record(rep, f"sqlite:///{tmp_path}/ok.db") == 1


@pytest.mark.real
def test_sixteen_prologues_at_once_lose_no_record(tmp_path: Path) -> None:
    """16 `preflight prologue` processes on one host record into one SQLite file at the same
    moment (the first ones also race to create the schema)."""
    bin_dir = fakes.install(tmp_path / "bin", ["dmesg"])
    fakes.scenario(tmp_path / "sc", {"dmesg": [{"match": ".*", "stdout": "k.txt"}]}, {"k.txt": KMSG_CLEAN})
    env = fakes.env_for(bin_dir, tmp_path / "sc")
    env.pop("PREFLIGHT_CONFIG", None)
    db = tmp_path / "h.db"
    env["PREFLIGHT_HISTORY"] = f"sqlite:///{db}"
    go = tmp_path / "go"
    # each process waits for the same start signal after its imports, so the writes overlap
    code = ("import sys, time, pathlib\nfrom preflight.cli import main\n"
            f"while not pathlib.Path({str(go)!r}).exists(): time.sleep(0.005)\n"
            "sys.argv = ['preflight', 'prologue', '--only', 'gpu.xid', '--no-drain', '--budget', '30', "
            "'--node', sys.argv[1]]\nmain()\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, f"gpu{i:03d}"], env=env,
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(16)]
    time.sleep(1.0)
    go.write_text("go")
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [(p.returncode, o[0][-400:], o[1][-400:])
                                                   for p, o in zip(procs, outs, strict=True) if p.returncode]
    assert not any("not recorded" in o[0] + o[1] for o in outs), outs
    with open_store(f"sqlite:///{db}") as s:
        runs = s.runs()
        assert len(runs) == 16 and s.counts()["results"] == 16
        assert sorted(n for r in runs for n in r.nodes) == [f"gpu{i:03d}" for i in range(16)]
        assert s.version() == SCHEMA_VERSION


def test_a_new_file_locked_by_another_process_is_waited_for_then_named(tmp_path: Path) -> None:
    """Switching a new file to WAL needs an exclusive lock that SQLite's busy handler does not
    wait for: the opener retries until its timeout, then names the lock."""
    import threading

    db = tmp_path / "h.db"
    holder = sqlite3.connect(str(db), isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    t0 = time.monotonic()
    with pytest.raises(HistoryError, match="database is locked"):
        open_store(f"sqlite:///{db}", timeout=0.4)
    assert time.monotonic() - t0 >= 0.4
    threading.Timer(0.3, lambda: holder.execute("COMMIT")).start()
    with open_store(f"sqlite:///{db}", timeout=20) as s:
        s.record([res("gpu.xid", "n1", "pass")], "prologue")
        assert len(s.runs()) == 1
    assert sqlite3.connect(str(db)).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    holder.close()


def test_the_prologue_says_when_its_run_was_not_recorded(tmp_path: Path) -> None:
    from preflight.history.gate import prologue_gate

    db = tmp_path / "h.db"
    holder = sqlite3.connect(str(db), isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    report = Report.build("prologue", [res("gpu.xid", "n1", "pass")])
    gate = prologue_gate(report, "n1", f"sqlite:///{db}", None, timeout=0.2)
    assert gate.run_id is None and len(gate.lines) == 1
    assert gate.lines[0].startswith(f"  history (sqlite:///{db}): ") and gate.lines[0].endswith("; not recorded")
    gate = prologue_gate(report, "n1", f"sqlite:///{db}", "2,2", timeout=0.2)
    assert gate.lines[-1].endswith("; not recorded; not damped")
    holder.close()
