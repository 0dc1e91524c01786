"""The same history in a real PostgreSQL server (a private one, started here) and in SQLite
gives the same answers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from preflight.history.analysis import summarize
from preflight.history.damping import Damping, decide
from preflight.history.store import SCHEMA_VERSION, open_store
from preflight.model import Result
from tests.conftest import ROOT
from tests.history import HOUR, T0, ten_runs


def _fill(url: str) -> None:
    with open_store(url) as s:
        for i, d in enumerate(ten_runs()):
            rid = s.record(d, host="h1", job_id=str(i))
            s.record_decision(rid, "n2", "damped", f"run {i}", {"i": i}, when=d["started"])


@pytest.mark.real
def test_postgres_and_sqlite_give_the_same_answers(pg_url: str, tmp_path: Path) -> None:
    lite = f"sqlite:///{tmp_path}/h.db"
    # two writers migrate the fresh PostgreSQL store at once: the advisory lock serialises them
    errors: list[BaseException] = []

    def opener() -> None:
        try:
            with open_store(pg_url) as s:
                assert s.version() == SCHEMA_VERSION
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=opener) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    _fill(pg_url)
    _fill(lite)
    with open_store(pg_url) as pg, open_store(lite) as sq:
        assert pg.dialect == "postgresql" and sq.dialect == "sqlite"
        assert pg.counts() == sq.counts() == {"runs": 10, "results": 130, "decisions": 10}
        assert [r.to_dict() | {"id": 0} for r in pg.runs()] == [r.to_dict() | {"id": 0} for r in sq.runs()]
        prow, srow = pg.rows(), sq.rows()
        assert [(r.ts, r.check, r.node, r.status, r.summary, r.facts) for r in prow] == \
            [(r.ts, r.check, r.node, r.status, r.summary, r.facts) for r in srow]
        assert summarize(prow).to_dict() == summarize(srow).to_dict()
        assert summarize(prow).flapping_nodes == ["n2"]
        for node in ("n2", "n3"):
            hp, hs = pg.node_runs(node, ("prologue",), limit=4), sq.node_runs(node, ("prologue",), limit=4)
            assert [[r.to_dict() | {"source": ""} for r in run] for run in hp] == \
                [[r.to_dict() | {"source": ""} for r in run] for run in hs]
            cur = ten_runs()[-1]
            now = [Result.from_dict(r) for r in cur["results"]]
            assert decide(node, now, hp, Damping()) == decide(node, now, hs, Damping())
        assert [(d.action, d.reason, d.detail) for d in pg.decisions("n2", since=0)] == \
            [(d.action, d.reason, d.detail) for d in sq.decisions("n2", since=0)]
        half = T0 + 5 * HOUR
        assert len(pg.rows(since=half, nodes=["n4"], checks=["nccl.allreduce"])) == 5
        assert pg.rows(since=half, commands=["prologue"]) == sq.rows(since=half, commands=["prologue"])


@pytest.mark.real
def test_history_command_reads_postgres_like_sqlite(pg_url: str, tmp_path: Path) -> None:
    lite = f"sqlite:///{tmp_path}/h2.db"
    _fill(lite)
    with open_store(pg_url) as pg:
        if pg.counts()["runs"] == 0:
            _fill(pg_url)
    out = {}
    for name, url in (("pg", pg_url), ("lite", lite)):
        env = {k: v for k, v in os.environ.items() if k not in ("PREFLIGHT_CONFIG", "PREFLIGHT_HISTORY")}
        p = subprocess.run([sys.executable, "-c", "import sys\nfrom preflight.cli import main\nmain()", "history",
                            "--history", url, "--since", "all", "--json"], capture_output=True, text=True,
                           timeout=120, cwd=ROOT, env=env)
        assert p.returncode == 0, p.stderr
        out[name] = json.loads(p.stdout)
    assert out["pg"] == out["lite"]
    assert out["pg"]["flapping_nodes"] == ["n2"] and "n3" in out["pg"]["lemon_nodes"]
