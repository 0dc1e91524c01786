"""The fleet-size read of `preflight history` (Store.digest + analysis.summarize_digest: the
aggregation done in SQL) gives the very answers of the plain read (every row into
analysis.summarize), on stores with known answers, with every filter, in SQLite and PostgreSQL."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from preflight.history import downtime, query
from preflight.history.analysis import Thresholds, latest_results, summarize, summarize_digest
from preflight.history.store import INDEXES, SCHEMA_VERSION, open_store
from preflight.model import Result, Status
from tests.history import HOUR, T0, res, ten_runs

REFUSED = "node not checked: ssh: connect to host n5 port 22: Connection refused"
LOST = "output lost: connection lost mid-bundle after 4 of 10 captures"


def _nic(up: bool) -> list[dict[str, Any]]:
    return [{"name": "ens1", "state": "UP" if up else "DOWN", "mtu": 9000}, {"name": "lo", "state": "UNKNOWN"}]


def mixed_runs() -> list[tuple[list[Result], str, float]]:
    """Twelve runs on n5..n7 and the cluster: n5 not checked in four (two causes, one run in
    part), n6 with two ib.hca results in some runs (one failing), n6's NIC going down and up,
    n7's ib.hca failing in alternate runs, a peak busbw that is no number, a cluster sweep over
    two hosts, downtime incidents, and a sweep run among the prologues."""
    from tests.history import ports

    out = []
    for i in range(12):
        t = T0 + i * HOUR
        results: list[Result] = []
        if i in (1, 4, 7):
            results += [Result("gpu.health", "n5", Status.ERROR, REFUSED), Result("ib.hca", "n5", Status.ERROR, REFUSED)]
        elif i == 10:
            results += [res("gpu.health", "n5", "pass"), Result("ib.hca", "n5", Status.ERROR, LOST)]
        else:
            results += [res("gpu.health", "n5", "warn" if i == 2 else "pass"),
                        res("ib.hca", "n5", "pass", ports=ports(False))]
        results.append(res("ib.hca", "n6", "pass", ports=ports(False)))
        if i % 4 == 1:
            results.append(res("ib.hca", "n6", "fail", "mlx5_3 port 1 Down", ports=ports(True)))
        results.append(res("net.nic", "n6", "pass" if i % 3 else "fail", interfaces=_nic(i % 3 != 0)))
        results.append(res("ib.hca", "n7", "fail" if i % 2 else "pass", ports=ports(i % 2 == 1)))
        results.append(res("gpu.xid", "n7", "skip", "no kernel log"))
        peak: Any = True if i == 5 else 300.0 + i
        results.append(res("nccl.allreduce", "n7", "pass", peak_busbw=peak, hosts=["n7"]))
        results.append(res("nccl.allreduce", "cluster", "pass", peak_busbw=200.0 - (50.0 if i == 11 else 0.0),
                           hosts=["n6", "n5"]))
        if i in (3, 9):
            results.append(res("runtime.downtime", "n6", "warn", f"hang {i}", incident=f"/runs/a:{i}", lost_s=600.0 * i,
                               gpu_hours=1.5 * i, cause="hang", open=False))
        out.append((results, "sweep" if i == 6 else "prologue", t))
    return out


def _fill(url: str) -> None:
    with open_store(url) as s:
        for d in ten_runs():
            s.record(d, host="h1")
        s.record_many(mixed_runs(), host="h1")
        # what no current writer stores: an unknown status, facts that are no JSON
        if s.dialect == "sqlite":
            run = s.record([res("gpu.inventory", "n7", "pass")], "prologue", when=T0 + 12 * HOUR)
            with s._write() as cur:
                cur.execute("INSERT INTO results (run_id, ts, check_id, node, status, summary, remedy, evidence, "
                            "facts, source) VALUES (?, ?, 'gpu.xid', 'n7', 'bogus', 'odd', '', '[]', 'not json', '')",
                            (run, T0 + 12 * HOUR))
                cur.execute("INSERT INTO results (run_id, ts, check_id, node, status, summary, remedy, evidence, "
                            "facts, source) VALUES (?, ?, 'nccl.allreduce', 'n7', 'pass', 'x', '', '[]', '{bad', '')",
                            (run, T0 + 12 * HOUR))


def _plain(url: str, f: query.Filters, th: Thresholds) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """The answers as the plain read gives them: every row into analysis.summarize."""
    since = query.window(f.since)
    with open_store(url) as s:
        rows = s.rows(since=since, nodes=f.nodes, checks=f.checks, commands=f.commands)
    checked = [r for r in rows if r.check != downtime.dt.CHECK]
    return (summarize(checked, th, since=since).to_dict(), [r.to_dict() for r in latest_results(checked)],
            downtime.summarize(rows))


FILTERS = [
    query.Filters(),
    query.Filters(nodes=["n2"]),
    query.Filters(nodes=["n5", "n6", "cluster"]),
    query.Filters(checks=["ib.hca"]),
    query.Filters(checks=["nccl.allreduce", "nccl.pingpong", "gpu.xid"]),
    query.Filters(checks=["runtime.downtime"]),
    query.Filters(commands=["sweep"]),
    query.Filters(commands=["prologue"], nodes=["n6", "n7"]),
    query.Filters(since=datetime.fromtimestamp(T0 + 5 * HOUR, timezone.utc)),
    query.Filters(nodes=["nobody"]),
]


def _same_answers(url: str) -> None:
    for th in (Thresholds(), Thresholds(flap_episodes=2, lemon_runs=2, unchecked_runs=1, trend_runs=3)):
        for f in FILTERS:
            summary, latest, lost = _plain(url, f, th)
            view = query.summarize(url, f, th, latest=True)
            assert view.summary.to_dict() == summary, (f, th)
            assert [r.to_dict() for r in view.latest] == latest, f
            assert view.downtime == lost, f


def test_digest_gives_the_plain_answers(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/h.db"
    _fill(url)
    _same_answers(url)
    # and those answers are the known ones
    s = query.summarize(url, query.Filters(), Thresholds()).summary
    assert s.flapping_nodes == ["n2", "n6", "n7"] and "n3" in s.lemon_nodes and "n7" in s.lemon_nodes
    assert [u.node for u in s.unchecked] == ["n5"] and s.unchecked[0].count == 4 and s.unchecked[0].whole == 3
    assert s.unchecked[0].sequence == "GNGGNGGNGGPG"
    n6 = {(st.check, st.sequence) for st in s.stats if st.node == "n6"}
    assert ("ib.hca", "PFPPPFPPPFPP") in n6  # a run's two results count as its worst
    assert {lm.key for lm in s.lemons if lm.node == "n6"} >= {"ens1", "mlx5_3/1"}
    low = {t.label for t in s.trends if t.low}
    assert "n4" in low and "n5+n6" in low
    assert query.summarize(url, query.Filters(), Thresholds()).latest == []  # read only when asked for


def test_sequences_without_the_index_are_the_same(tmp_path: Path) -> None:
    """A store whose index is missing (and cannot be given it) reads its sequences by a window:
    the same answers; with the index SQLite concatenates in the index's order, no sort."""
    url = f"sqlite:///{tmp_path}/h.db"
    _fill(url)
    with open_store(url) as s:
        where, params = s._filtered(None, [], [], [], ["runtime.downtime"])
        with_index = s._sequences(where, params, {"n6"})  # n6: two results of one check in a run
        plan = " ".join(str(p[-1]) for p in s.conn.execute(
            "EXPLAIN QUERY PLAN SELECT r.node, r.check_id, group_concat(r.status, ''), MAX(r.ts) "
            f"{where.replace('FROM results r', 'FROM results r INDEXED BY results_node_check_run')} "
            "GROUP BY r.node, r.check_id", params))
        assert "TEMP B-TREE" not in plan and "COVERING INDEX results_node_check_run" in plan
        s.conn.execute("DROP INDEX results_node_check_run")
        assert sorted(s._sequences(where, params, {"n6"})) == sorted(with_index)
        digest = s.digest(skip_checks=["runtime.downtime"])
        rows = [r for r in s.rows() if r.check != "runtime.downtime"]
    assert summarize_digest(digest).to_dict() == summarize(rows).to_dict()


def test_an_older_store_gets_the_indexes_when_opened(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    url = f"sqlite:///{path}"
    _fill(url)
    db = sqlite3.connect(path)
    for name, _ in INDEXES:
        db.execute(f"DROP INDEX {name}")
    db.commit()
    assert not {n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")} & \
        {n for n, _ in INDEXES}
    db.close()
    with open_store(url) as s:
        assert s.version() == SCHEMA_VERSION
        assert s._missing_indexes() == []
        plan = " ".join(str(p[-1]) for p in s.conn.execute(
            "EXPLAIN QUERY PLAN SELECT u.id FROM runs u WHERE u.id IN (SELECT run_id FROM results WHERE node = ?)",
            ("n2",)))
        assert "results_node_run" in plan
    _same_answers(url)


def test_record_many_is_record_in_one_transaction(tmp_path: Path) -> None:
    one, many = f"sqlite:///{tmp_path}/one.db", f"sqlite:///{tmp_path}/many.db"
    batch = mixed_runs()
    with open_store(one) as s:
        ids_one = [s.record(r, c, when=w, host="h") for r, c, w in batch]
    with open_store(many) as s:
        ids_many = s.record_many(batch, host="h")
    assert ids_one == ids_many
    with open_store(one) as a, open_store(many) as b:
        assert a.counts() == b.counts()
        assert [r.to_dict() for r in a.runs()] == [r.to_dict() for r in b.runs()]
        assert a.rows() == b.rows() and [r.facts for r in a.rows()] == [r.facts for r in b.rows()]


@pytest.mark.real
def test_digest_gives_the_plain_answers_in_postgres(pg_url: str, tmp_path: Path) -> None:
    _fill(pg_url)
    _same_answers(pg_url)
    lite = f"sqlite:///{tmp_path}/h.db"
    _fill(lite)
    for f in FILTERS:  # the SQLite store holds two odd rows of n7 that PostgreSQL does not
        a = query.summarize(pg_url, f, Thresholds(), latest=True)
        b = query.summarize(lite, f, Thresholds(), latest=True)
        if f.nodes and "n7" not in f.nodes:
            assert a.summary.to_dict() == b.summary.to_dict(), f
            assert [r.to_dict() for r in a.latest] == [r.to_dict() for r in b.latest], f
        assert a.downtime == b.downtime
    with open_store(pg_url) as pg:
        assert pg._missing_indexes() == []
        batch = mixed_runs()[:3]
        before = pg.counts()
        ids = pg.record_many(batch, host="h")
        assert len(ids) == 3 and ids == sorted(ids)
        assert pg.counts()["runs"] == before["runs"] + 3
        got = [r for r in pg.rows(since=T0) if r.run_id in ids]
        assert len(got) == sum(len(r) for r, _, _ in batch)
