"""The results store: every run's results, in an SQLite file (default) or a PostgreSQL server.

One schema for both, created and upgraded by numbered migrations (table `schema_version`).
SQLite runs in WAL mode with a busy timeout and takes its write lock up front (`BEGIN
IMMEDIATE`), so many prologues on one host can record at once without losing a run;
PostgreSQL serialises migrations with an advisory lock.

URLs: `sqlite:///abs/path.db`, `sqlite://rel/path.db`, a plain file path, or
`postgresql://user@host/db` (`postgres://` too). `off` (or `none`) records nothing.
Default: $PREFLIGHT_HISTORY, else $XDG_DATA_HOME/preflight/history.db
(~/.local/share/preflight/history.db).
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from preflight.model import CLUSTER, Result, Status, is_node, real_nodes
from preflight.timeparse import epoch

ENV = "PREFLIGHT_HISTORY"
OFF = frozenset({"off", "none", "no", "false", "0"})
BUSY_TIMEOUT_S = 10.0  # how long a writer waits for another writer's lock
CONNECT_TIMEOUT_S = 5.0  # PostgreSQL connect timeout
EVIDENCE_KEPT = 20  # evidence lines stored per result (the JSON report keeps them all)
_PG_LOCK = 0x70726566  # advisory lock id that serialises migrations ("pref")
COPY_ROWS = 1000  # a batch of this many results goes to PostgreSQL by COPY (fewer: executemany)


class HistoryError(Exception):
    """The store cannot be opened, migrated, read or written (the reason in one line)."""


# ---- URLs -----------------------------------------------------------------------------------


def default_path() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "preflight" / "history.db"


def resolve_url(url: str | None) -> str | None:
    """The store URL to use: the given one, else $PREFLIGHT_HISTORY, else the default SQLite
    file; None when recording is switched off (`off`)."""
    value = url if url is not None else os.environ.get(ENV)
    if value is None or not value.strip():
        return "sqlite:///" + str(default_path())
    value = value.strip()
    if value.lower() in OFF:
        return None
    if value.startswith(("postgresql://", "postgres://", "sqlite://")):
        return value
    if "://" in value:
        raise HistoryError(f"history URL {value!r}: use sqlite:///path, postgresql://... or a file path")
    return "sqlite:///" + str(Path(value).expanduser().resolve())


def describe(url: str) -> str:
    """The URL without a password, for messages."""
    if "@" in url and url.startswith(("postgresql://", "postgres://")):
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        return f"{scheme}://{creds.split(':', 1)[0]}@{host}"
    return url


# ---- migrations -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Migration:
    version: int
    title: str
    sqlite: tuple[str, ...]
    postgresql: tuple[str, ...]


def _both(*stmts: str, pg_id: str = "BIGSERIAL PRIMARY KEY") -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The same DDL for both dialects; `{id}` is the auto-increment primary key."""
    lite = tuple(s.replace("{id}", "INTEGER PRIMARY KEY AUTOINCREMENT").replace("{ref}", "INTEGER") for s in stmts)
    pg = tuple(s.replace("{id}", pg_id).replace("{ref}", "BIGINT") for s in stmts)
    return lite, pg


_V1 = _both(
    """CREATE TABLE runs (
        id {id},
        ts DOUBLE PRECISION NOT NULL,
        time TEXT NOT NULL,
        command TEXT NOT NULL,
        verdict TEXT NOT NULL,
        host TEXT NOT NULL,
        nodes TEXT NOT NULL,
        profile TEXT NOT NULL,
        duration_s DOUBLE PRECISION NOT NULL,
        version TEXT NOT NULL,
        job_id TEXT NOT NULL,
        counts TEXT NOT NULL)""",
    """CREATE TABLE results (
        id {id},
        run_id {ref} NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        ts DOUBLE PRECISION NOT NULL,
        check_id TEXT NOT NULL,
        node TEXT NOT NULL,
        status TEXT NOT NULL,
        summary TEXT NOT NULL,
        remedy TEXT NOT NULL,
        evidence TEXT NOT NULL,
        facts TEXT NOT NULL,
        source TEXT NOT NULL)""",
    "CREATE INDEX results_node_check_ts ON results (node, check_id, ts)",
    "CREATE INDEX results_run ON results (run_id)",
    "CREATE INDEX runs_ts ON runs (ts)",
)
_V2 = _both(
    """CREATE TABLE decisions (
        id {id},
        run_id {ref} REFERENCES runs(id) ON DELETE CASCADE,
        ts DOUBLE PRECISION NOT NULL,
        node TEXT NOT NULL,
        action TEXT NOT NULL,
        reason TEXT NOT NULL,
        detail TEXT NOT NULL)""",
    "CREATE INDEX decisions_node_ts ON decisions (node, ts)",
)

# what `digest` and the gate read at fleet size: per (node, check) and per (node, run) from the
# index alone, per check without scanning the others, the not-checked results apart. Not a
# numbered migration: any store (older ones too) gets those it lacks when opened.
INDEXES: tuple[tuple[str, str], ...] = (
    ("results_node_check_run", "ON results (node, check_id, ts, run_id, status)"),
    ("results_node_run", "ON results (node, run_id, ts, status, check_id)"),
    ("results_check_ts", "ON results (check_id, ts)"),
    ("results_not_checked", "ON results (ts) WHERE status NOT IN ('pass', 'warn', 'fail', 'skip')"),
    ("results_not_passed", "ON results (ts) WHERE status != 'pass'"),
)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "runs and their results", *_V1),
    Migration(2, "drain/resume decisions of the flap damping", *_V2),
)
SCHEMA_VERSION = MIGRATIONS[-1].version


# ---- rows -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    id: int
    ts: float
    time: str
    command: str
    verdict: str
    host: str
    nodes: tuple[str, ...]
    profile: str
    duration_s: float
    job_id: str

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "time": self.time, "command": self.command, "verdict": self.verdict,
                "host": self.host, "nodes": list(self.nodes), "profile": self.profile,
                "duration_s": self.duration_s, "job_id": self.job_id}


@dataclass(frozen=True)
class Row:
    """One result of one recorded run."""

    run_id: int
    ts: float
    command: str
    check: str
    node: str
    status: Status
    summary: str
    facts: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    remedy: str = ""

    def result(self) -> Result:
        return Result(check=self.check, node=self.node, status=self.status, summary=self.summary,
                      remedy=self.remedy, facts=dict(self.facts), source=f"history:run {self.run_id}")


@dataclass(frozen=True)
class DecisionRow:
    run_id: int | None
    ts: float
    node: str
    action: str
    reason: str
    detail: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass
class Digest:
    """What `preflight history` needs of a window, read with the aggregation in SQL (see
    `Store.digest`). Sequences hold one letter per run, oldest first (P W F E S): the run's
    worst status as history.analysis counts it."""

    sequences: list[tuple[str, str, str, float]]  # (node, check, sequence, time of its last run)
    node_runs: dict[str, list[tuple[float, int, int, bool, bool]]]  # node -> (ts, run id, worst rank,
    #   some result not checked, some result graded), oldest first
    errors: list[Row]  # the not-checked results (ERROR), oldest first
    xid: list[Row]  # gpu.xid results with facts beyond an empty event list
    ports: list[tuple[Row, int]]  # ib.hca / net.nic results (not ERROR), each with how many runs it stands
    #   for (a node and check whose facts never changed: one row)
    peaks: list[Row]  # the cluster's nccl.allreduce and the nccl.pingpong results (not ERROR)
    points: list[tuple[str, float, float]] = field(default_factory=list)  # (node, time, peak busbw) of a real
    #   node's own all-reduce results (not ERROR) whose peak is a number

    @property
    def runs(self) -> int:
        return len({i for per in self.node_runs.values() for _, i, _, _, _ in per})


_LETTER_SQL = ("CASE r.status WHEN 'pass' THEN 'P' WHEN 'warn' THEN 'W' WHEN 'fail' THEN 'F' WHEN 'skip' THEN 'S' "
               "ELSE 'E' END")
_NOT_CHECKED_SQL = "r.status NOT IN ('pass', 'warn', 'fail', 'skip')"
_RANK = {"fail": 0, "warn": 1, "pass": 2, "skip": 4}  # a run's worst first (as analysis._worst); others: 3 (ERROR)
_EMPTY_XID = ("{}", '{"events": []}')  # facts that hold no Xid event (as `record` writes them)


# ---- the store ------------------------------------------------------------------------------


def _status(value: Any) -> Status:
    try:
        return Status(str(value))
    except ValueError:
        return Status.ERROR


def _worst_letter(statuses: Sequence[Status]) -> str:
    """The letter of a run's worst status (a graded one first, as history.analysis counts it)."""
    for s, letter in ((Status.FAIL, "F"), (Status.WARN, "W"), (Status.PASS, "P"), (Status.ERROR, "E"),
                      (Status.SKIP, "S")):
        if s in statuses:
            return letter
    return "S"


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds")


def _loads(text: Any) -> Any:
    try:
        return json.loads(text) if text else {}
    except (TypeError, ValueError):
        return {}


@dataclass
class _Parts:
    results: list[Result]
    command: str
    ts: float
    verdict: str
    nodes: list[str]
    profile: str
    duration_s: float
    counts: dict[str, int]


def _parts(report_or_results: Any, command: str | None, when: Any) -> _Parts:
    """A Report, a report dict (report.json) or a list of Results -> what a run row needs."""
    from preflight.grading import decide

    if isinstance(report_or_results, Mapping):
        results = [Result.from_dict(r) for r in report_or_results.get("results", [])]
        cmd = command or str(report_or_results.get("command") or "unknown")
        started: Any = report_or_results.get("started")
        nodes = list(report_or_results.get("nodes") or [])
        profiles = dict(report_or_results.get("profiles") or {})
        duration = float(report_or_results.get("duration_s") or 0.0)
    elif hasattr(report_or_results, "results") and hasattr(report_or_results, "verdict"):
        results = list(report_or_results.results)
        cmd = command or str(getattr(report_or_results, "command", "") or "unknown")
        started = getattr(report_or_results, "started", None)
        nodes = list(getattr(report_or_results, "nodes", []) or [])
        profiles = dict(getattr(report_or_results, "profiles", {}) or {})
        duration = float(getattr(report_or_results, "duration_s", 0.0) or 0.0)
    else:
        results = [r if isinstance(r, Result) else Result.from_dict(r) for r in report_or_results]
        cmd, started, nodes, profiles, duration = command or "unknown", None, [], {}, 0.0
    verdict = decide(results)
    ts = epoch(when if when is not None else started)
    return _Parts(results=results, command=cmd, ts=ts, verdict=verdict.verdict,
                  nodes=[n for n in nodes if is_node(n)] or real_nodes(r.node for r in results),
                  profile=",".join(sorted(set(profiles.values()))), duration_s=duration, counts=verdict.counts)


class Store:
    """An open results store. Use `open_store(url)`; close it (or use `with`)."""

    def __init__(self, url: str, conn: Any, dialect: str) -> None:
        self.url = url
        self.conn = conn
        self.dialect = dialect  # "sqlite" or "postgresql"

    # -- plumbing --

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.conn.close()
        except Exception:
            pass

    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s") if self.dialect == "postgresql" else sql

    @contextmanager
    def _write(self) -> Iterator[Any]:
        """One write transaction; SQLite takes the write lock at once (no upgrade deadlock)."""
        cur = self.conn.cursor()
        try:
            if self.dialect == "sqlite":
                cur.execute("BEGIN IMMEDIATE")
            yield cur
            if self.dialect == "postgresql":
                self.conn.commit()
            else:
                cur.execute("COMMIT")
        except BaseException:
            try:
                self.conn.rollback()
            except Exception:
                pass
            raise
        finally:
            cur.close()

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        cur = self.conn.cursor()
        try:
            cur.execute(self._sql(sql), tuple(params))
            rows = [tuple(r) for r in cur.fetchall()]
        finally:
            cur.close()
        if self.dialect == "postgresql":
            self.conn.commit()  # end the read transaction
        return rows

    def _insert(self, cur: Any, sql: str, params: Sequence[Any]) -> int:
        cur.execute(self._sql(sql + " RETURNING id"), tuple(params))
        row = cur.fetchone()
        return int(row[0])

    def version(self) -> int:
        rows = self._query("SELECT MAX(version) FROM schema_version")
        return int(rows[0][0] or 0) if rows else 0

    def _missing_indexes(self) -> list[str]:
        if self.dialect == "postgresql":
            have = {str(r[0]) for r in self._query("SELECT indexname FROM pg_indexes WHERE tablename = 'results'")}
        else:
            have = {str(r[0]) for r in self._query("SELECT name FROM sqlite_master WHERE type = 'index'")}
        return [name for name, _ in INDEXES if name not in have]

    def _ensure_indexes(self) -> None:
        """Create the INDEXES this store lacks (a read when it has them all)."""
        if not self._missing_indexes():
            return
        try:
            with self._write() as cur:
                if self.dialect == "postgresql":
                    cur.execute(f"SELECT pg_advisory_xact_lock({_PG_LOCK})")
                for name, spec in INDEXES:
                    cur.execute(f"CREATE INDEX IF NOT EXISTS {name} {spec}")
        except Exception:  # a store we may read but not change (read-only file, role): slower, not wrong
            pass

    def migrate(self, indexes: bool = True) -> int:
        """Apply the migrations this store lacks, and (`indexes`) create the indexes it lacks;
        returns the schema version."""
        try:
            if self.version() == SCHEMA_VERSION:  # the common case: no write lock needed
                if indexes:
                    self._ensure_indexes()
                return SCHEMA_VERSION
        except HistoryError:
            raise
        except Exception:  # no schema_version table yet
            if self.dialect == "postgresql":
                self.conn.rollback()
        with self._write() as cur:
            if self.dialect == "postgresql":
                cur.execute(f"SELECT pg_advisory_xact_lock({_PG_LOCK})")
            cur.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, "
                        "title TEXT NOT NULL, applied TEXT NOT NULL)")
            cur.execute("SELECT MAX(version) FROM schema_version")
            have = int(cur.fetchone()[0] or 0)
            if have > SCHEMA_VERSION:
                raise HistoryError(f"history store {describe(self.url)} has schema version {have}, newer than "
                                   f"this preflight knows ({SCHEMA_VERSION}): upgrade preflight")
            for m in MIGRATIONS:
                if m.version <= have:
                    continue
                for stmt in (m.postgresql if self.dialect == "postgresql" else m.sqlite):
                    cur.execute(stmt)
                cur.execute(self._sql("INSERT INTO schema_version (version, title, applied) VALUES (?, ?, ?)"),
                            (m.version, m.title, _iso(time.time())))
            for name, spec in INDEXES:
                cur.execute(f"CREATE INDEX IF NOT EXISTS {name} {spec}")
        return SCHEMA_VERSION

    # -- writing --

    def record(self, report_or_results: Any, command: str | None = None, *, host: str | None = None,
               when: Any = None, job_id: str | None = None) -> int:
        """Record one run (a Report, a report.json dict, or Results); returns the run id."""
        return self.record_many([(report_or_results, command, when)], host=host, job_id=job_id)[0]

    def record_many(self, batch: Iterable[tuple[Any, str | None, Any]], *, host: str | None = None,
                    job_id: str | None = None) -> list[int]:
        """Record many runs in one transaction, each `(report or results, command, when)` as
        `record` takes them; returns their run ids in order. PostgreSQL receives the results
        by COPY."""
        host = host or socket.gethostname()
        job = job_id if job_id is not None else os.environ.get("SLURM_JOB_ID", "")
        from preflight import __version__

        ids: list[int] = []
        parts = [_parts(report_or_results, command, when) for report_or_results, command, when in batch]
        copy = self.dialect == "postgresql" and len(parts) > 1
        with self._write() as cur:
            rows: list[tuple[Any, ...]] = []
            if copy:  # the ids from the sequence first, then the runs by COPY
                cur.execute("SELECT nextval(pg_get_serial_sequence('runs', 'id')) FROM generate_series(1, %s)",
                            (len(parts),))
                ids = [int(r[0]) for r in cur.fetchall()]
                with cur.copy("COPY runs (id, ts, time, command, verdict, host, nodes, profile, duration_s, version, "
                              "job_id, counts) FROM STDIN") as out:
                    for run_id, p in zip(ids, parts, strict=True):
                        out.write_row((run_id, p.ts, _iso(p.ts), p.command, p.verdict, host, json.dumps(p.nodes),
                                       p.profile, p.duration_s, __version__, job, json.dumps(p.counts)))
            for k, p in enumerate(parts):
                if copy:
                    run_id = ids[k]
                else:
                    run_id = self._insert(cur, "INSERT INTO runs (ts, time, command, verdict, host, nodes, profile, "
                                               "duration_s, version, job_id, counts) VALUES "
                                               "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                          (p.ts, _iso(p.ts), p.command, p.verdict, host, json.dumps(p.nodes),
                                           p.profile, p.duration_s, __version__, job, json.dumps(p.counts)))
                    ids.append(run_id)
                rows += [(run_id, p.ts, r.check, r.node, r.status.value, r.summary, r.remedy,
                          json.dumps(list(r.evidence)[:EVIDENCE_KEPT], default=str),
                          json.dumps(r.facts, default=str, sort_keys=True), r.source) for r in p.results]
            if self.dialect == "postgresql" and len(rows) >= COPY_ROWS and hasattr(cur, "copy"):
                with cur.copy("COPY results (run_id, ts, check_id, node, status, summary, remedy, evidence, facts, "
                              "source) FROM STDIN") as sink:
                    for row in rows:
                        sink.write_row(row)
            elif rows:
                cur.executemany(self._sql("INSERT INTO results (run_id, ts, check_id, node, status, summary, "
                                          "remedy, evidence, facts, source) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                                rows)
        return ids

    def record_decision(self, run_id: int | None, node: str, action: str, reason: str,
                        detail: Mapping[str, Any] | None = None, when: Any = None) -> None:
        ts = epoch(when) if when is not None else time.time()
        with self._write() as cur:
            cur.execute(self._sql("INSERT INTO decisions (run_id, ts, node, action, reason, detail) "
                                  "VALUES (?, ?, ?, ?, ?, ?)"),
                        (run_id, ts, node, action, reason, json.dumps(dict(detail or {}), default=str)))

    # -- reading --

    def runs(self, since: float | None = None, commands: Iterable[str] = ()) -> list[Run]:
        sql = "SELECT id, ts, time, command, verdict, host, nodes, profile, duration_s, job_id FROM runs WHERE ts >= ?"
        params: list[Any] = [since if since is not None else float("-inf")]
        cmds = list(commands)
        if cmds:
            sql += " AND command IN (" + ", ".join("?" for _ in cmds) + ")"
            params += cmds
        out = []
        for r in self._query(sql + " ORDER BY ts, id", params):
            out.append(Run(id=int(r[0]), ts=float(r[1]), time=str(r[2]), command=str(r[3]), verdict=str(r[4]),
                           host=str(r[5]), nodes=tuple(_loads(r[6]) or ()), profile=str(r[7]),
                           duration_s=float(r[8]), job_id=str(r[9])))
        return out

    def rows(self, since: float | None = None, nodes: Iterable[str] = (), checks: Iterable[str] = (),
             commands: Iterable[str] = ()) -> list[Row]:
        """Results, oldest first (by run time, run, node, check)."""
        sql = ("SELECT r.run_id, r.ts, u.command, r.check_id, r.node, r.status, r.summary, r.facts, r.remedy "
               "FROM results r JOIN runs u ON u.id = r.run_id WHERE r.ts >= ?")
        params: list[Any] = [since if since is not None else float("-inf")]
        for col, values in (("r.node", list(nodes)), ("r.check_id", list(checks)), ("u.command", list(commands))):
            if values:
                sql += f" AND {col} IN (" + ", ".join("?" for _ in values) + ")"
                params += values
        out = []
        for r in self._query(sql + " ORDER BY r.ts, r.run_id, r.node, r.check_id, r.id", params):
            try:
                status = Status(str(r[5]))
            except ValueError:
                status = Status.ERROR
            out.append(Row(run_id=int(r[0]), ts=float(r[1]), command=str(r[2]), check=str(r[3]), node=str(r[4]),
                           status=status, summary=str(r[6]), facts=_loads(r[7]), remedy=str(r[8])))
        return out

    def _filtered(self, since: float | None, nodes: Iterable[str], checks: Iterable[str],
                  commands: Iterable[str], skip_checks: Iterable[str] = ()) -> tuple[str, list[Any]]:
        """`FROM ... WHERE ...` over results `r` with `rows`' filters (`skip_checks` left out)."""
        cmds = list(commands)
        sql = "FROM results r WHERE r.ts >= ?"
        params: list[Any] = [since if since is not None else float("-inf")]
        for col, values in (("r.node", list(nodes)), ("r.check_id", list(checks))):
            if values:
                sql += f" AND {col} IN (" + ", ".join("?" for _ in values) + ")"
                params += values
        if cmds:  # a run's results are kept or left out with it; the scan stays on results' indexes
            sql += " AND r.run_id IN (SELECT u.id FROM runs u WHERE u.command IN (" + ", ".join("?" for _ in cmds) + "))"
            params += cmds
        skipped = list(skip_checks)
        if skipped:
            sql += " AND r.check_id NOT IN (" + ", ".join("?" for _ in skipped) + ")"
            params += skipped
        return sql, params

    def _rows_of(self, sql: str, params: Sequence[Any]) -> list[Row]:
        """Rows from `SELECT r.run_id, r.ts, check, node, status, summary, facts` (no command)."""
        return self._rows_of_values(self._query(sql, params))

    @staticmethod
    def _rows_of_values(values: Iterable[Sequence[Any]]) -> list[Row]:
        """Rows; those with the very same facts text share one facts object (read-only here)."""
        out = []
        parsed: dict[str, Any] = {}
        for r in values:
            try:
                status = Status(str(r[4]))
            except ValueError:
                status = Status.ERROR
            facts: Any
            if isinstance(r[6], dict):
                facts = r[6]
            elif isinstance(r[6], str):
                facts = parsed.get(r[6])
                if facts is None:
                    facts = parsed.setdefault(r[6], _loads(r[6]))
            else:
                facts = _loads(r[6])
            out.append(Row(run_id=int(r[0]), ts=float(r[1]), command="", check=str(r[2]), node=str(r[3]),
                           status=status, summary=str(r[5]), facts=facts, remedy=str(r[7]) if len(r) > 7 else ""))
        return out

    def digest(self, since: float | None = None, nodes: Iterable[str] = (), checks: Iterable[str] = (),
               commands: Iterable[str] = (), skip_checks: Iterable[str] = ()) -> Digest:
        """The results `rows` would return (less `skip_checks`), aggregated in SQL to what the
        history's analysis reads: per (node, check) its status sequence, per (node, run) its
        worst status and whether it was (partly) not checked, and only the results whose facts
        or summaries a finding reads. Runs are ordered by (time, id) as `rows` orders them (the
        results of one run share its time)."""
        nodes, checks, commands, skip_checks = list(nodes), list(checks), list(commands), list(skip_checks)
        where, params = self._filtered(since, nodes, checks, commands, skip_checks)
        node_runs: dict[str, list[tuple[float, int, int, bool, bool]]] = {}
        doubled: set[str] = set()  # nodes with two results of one check in one run
        # the results that did not pass (few), then each (node, run) counted: the flags follow
        odd: dict[tuple[str, int], list[str]] = {}
        for r in self._query(f"SELECT r.node, r.run_id, r.status {where} AND r.status != 'pass'", params):
            odd.setdefault((str(r[0]), int(r[1])), []).append(str(r[2]))
        for r in self._query(f"SELECT r.node, r.run_id, MIN(r.ts), COUNT(*), COUNT(DISTINCT r.check_id) {where} "
                             "GROUP BY r.node, r.run_id", params):
            node, run = str(r[0]), int(r[1])
            others = odd.get((node, run), [])
            ranks = [_RANK.get(st, 3) for st in others]
            passed = int(r[3]) > len(others)
            node_runs.setdefault(node, []).append(
                (float(r[2]), run, min([*ranks, *([2] if passed else [])]), any(k == 3 for k in ranks),
                 passed or any(k < 2 for k in ranks)))
            if int(r[3]) != int(r[4]):
                doubled.add(node)
        for per in node_runs.values():
            per.sort(key=lambda x: (x[0], x[1]))
        sequences = self._sequences(where, params, doubled)
        cols = "SELECT r.run_id, r.ts, r.check_id, r.node, r.status, r.summary"
        rows_order = "ORDER BY r.ts, r.run_id, r.node, r.check_id, r.id"
        errors = self._rows_of(f"{cols}, '' {where} AND {_NOT_CHECKED_SQL} {rows_order}", params)

        def of(check_list: Sequence[str]) -> tuple[str, list[Any]]:
            wanted = [c for c in check_list if (not checks or c in checks) and c not in skip_checks]
            return self._filtered(since, nodes, wanted, commands) if wanted else ("", [])

        w, p = of(["gpu.xid"])
        xid = self._rows_of(f"{cols}, r.facts {w} AND r.facts NOT IN (?, ?) {rows_order}", [*p, *_EMPTY_XID]) \
            if w else []
        w, p = of(["ib.hca", "net.nic"])
        ports = self._ports(w, p, cols, rows_order) if w else []
        w, p = of(["nccl.allreduce", "nccl.pingpong"])
        points, peaks = self._peaks(w, p, cols, rows_order) if w else ([], [])
        return Digest(sequences=sequences, node_runs=node_runs, errors=errors, xid=xid, ports=ports, peaks=peaks,
                      points=points)

    def _sequences(self, where: str, params: list[Any], doubled: set[str]) -> list[tuple[str, str, str, float]]:
        """(node, check, one letter per run oldest first, time of the last run). SQLite
        concatenates in the order of the (node, check, ts, run_id) index it scans (no sort: the
        plan is checked, else the order is made by a window); a node with two results of one
        check in one run is read row by row."""
        letter = _LETTER_SQL
        if self.dialect == "postgresql":
            sql = (f"SELECT r.node, r.check_id, string_agg({letter}, '' ORDER BY r.ts, r.run_id, r.id), MAX(r.ts) "
                   f"{where} GROUP BY r.node, r.check_id")
        else:
            sql = (f"SELECT r.node, r.check_id, group_concat({letter}, ''), MAX(r.ts) "
                   f"{where.replace('FROM results r', 'FROM results r INDEXED BY results_node_check_run', 1)} "
                   "GROUP BY r.node, r.check_id")
            plan = ""
            if "results_node_check_run" not in self._missing_indexes():  # else a store that could not be given it
                plan = " ".join(str(p[-1]) for p in self.conn.execute("EXPLAIN QUERY PLAN " + sql, params))
            if "TEMP B-TREE" in plan or "results_node_check_run" not in plan:
                sql = ("SELECT node, check_id, seq, ts FROM (SELECT node, check_id, ts, group_concat(l, '') OVER w AS seq, "
                       f"lead(1) OVER w AS nx FROM (SELECT r.node, r.check_id, r.ts, r.run_id, r.id, {letter} AS l "
                       f"{where}) t WINDOW w AS (PARTITION BY node, check_id ORDER BY ts, run_id, id ROWS BETWEEN "
                       "UNBOUNDED PRECEDING AND CURRENT ROW)) s WHERE nx IS NULL")
        out = [(str(r[0]), str(r[1]), str(r[2]), float(r[3])) for r in self._query(sql, params)
               if str(r[0]) not in doubled]
        for node in sorted(doubled):
            per: dict[str, dict[int, list[Status]]] = {}
            last: dict[str, float] = {}
            for r in self._query(f"SELECT r.check_id, r.run_id, r.ts, r.status {where} AND r.node = ? "
                                 "ORDER BY r.ts, r.run_id, r.id", [*params, node]):
                try:
                    status = Status(str(r[3]))
                except ValueError:
                    status = Status.ERROR
                per.setdefault(str(r[0]), {}).setdefault(int(r[1]), []).append(status)
                last[str(r[0])] = float(r[2])
            for check, runs in per.items():
                out.append((node, check, "".join(_worst_letter(v) for v in runs.values()), last[check]))
        return out

    def _ports(self, where: str, params: list[Any], cols: str, rows_order: str) -> list[tuple[Row, int]]:
        """The port results (not ERROR): a node whose results of one check all hold the very
        same facts as one row standing for all its runs, the others row by row."""
        out: list[tuple[Row, int]] = []
        stable: list[tuple[tuple[Any, ...], int]] = []
        changing: list[tuple[str, str]] = []
        for r in self._query(f"SELECT r.node, r.check_id, MIN(r.facts), MAX(r.facts), COUNT(*), MIN(r.ts), "
                             f"MIN(r.run_id) {where} AND NOT {_NOT_CHECKED_SQL} GROUP BY r.node, r.check_id", params):
            if r[2] == r[3]:
                stable.append(((r[6], r[5], r[1], r[0], "pass", "", r[2]), int(r[4])))
            else:
                changing.append((str(r[0]), str(r[1])))
        out += list(zip(self._rows_of_values([v for v, _ in stable]), [n for _, n in stable], strict=True))
        for node, check in changing:
            out += [(row, 1) for row in self._rows_of(
                f"{cols}, r.facts {where} AND NOT {_NOT_CHECKED_SQL} AND r.node = ? AND r.check_id = ? {rows_order}",
                [*params, node, check])]
        return out

    def _peaks(self, where: str, params: list[Any], cols: str,
               rows_order: str) -> tuple[list[tuple[str, float, float]], list[Row]]:
        """The bandwidth results (not ERROR): a real node's own all-reduce peak as (node, time,
        GB/s) when it is a number (as facts.peak_busbw reads it), the cluster's and the
        ping-pong results as rows."""
        points: list[tuple[str, float, float]] = []
        rows: list[Row] = []
        if self.dialect == "postgresql":
            facts_sql, peak_sql = "r.facts", "NULL"
        else:  # SQLite reads the peak itself; json_type tells a number from true/false
            facts_sql = "CASE WHEN r.check_id = 'nccl.allreduce' AND r.node != ? THEN NULL ELSE r.facts END"
            peak_sql = ("CASE WHEN r.check_id = 'nccl.allreduce' AND json_valid(r.facts) AND json_type(r.facts, "
                        "'$.peak_busbw') IN ('integer', 'real') THEN json_extract(r.facts, '$.peak_busbw') END")
            params = [CLUSTER, *params]
        for r in self._query(f"SELECT r.run_id, r.ts, r.check_id, r.node, r.status, r.summary, {facts_sql}, "
                             f"{peak_sql} {where} AND NOT {_NOT_CHECKED_SQL} {rows_order}", params):
            own = str(r[2]) == "nccl.allreduce" and str(r[3]) != CLUSTER
            if own and self.dialect == "postgresql":
                peak = _loads(r[6]).get("peak_busbw") if isinstance(_loads(r[6]), dict) else None
                if isinstance(peak, (int, float)) and not isinstance(peak, bool):
                    points.append((str(r[3]), float(r[1]), float(peak)))
            elif own:
                if r[7] is not None:
                    points.append((str(r[3]), float(r[1]), float(r[7])))
            else:
                rows += self._rows_of_values([r[:7]])
        return points, rows

    def latest_rows(self, digest: Digest, since: float | None = None, nodes: Iterable[str] = (),
                    checks: Iterable[str] = (), commands: Iterable[str] = (),
                    skip_checks: Iterable[str] = ()) -> list[Row]:
        """The digest's rows of each node's last run (what analysis.latest_results reads), with
        the filters the digest was read with."""
        last = {node: per[-1][1] for node, per in digest.node_runs.items() if per}
        ids = sorted(set(last.values()))
        out: list[Row] = []
        where, params = self._filtered(since, nodes, checks, commands, skip_checks)
        for k in range(0, len(ids), 500):
            chunk = ids[k:k + 500]
            out += [r for r in self._rows_of(
                f"SELECT r.run_id, r.ts, r.check_id, r.node, r.status, r.summary, r.facts, r.remedy {where} "
                "AND r.run_id IN ("
                + ", ".join("?" for _ in chunk) + ") ORDER BY r.ts, r.run_id, r.node, r.check_id, r.id",
                [*params, *chunk]) if last.get(r.node) == r.run_id]
        return out

    def node_runs(self, node: str, commands: Iterable[str] = ("prologue", "node", "run"),
                  limit: int = 20) -> list[list[Result]]:
        """The node's results in its last `limit` runs (oldest first, one list per run)."""
        cmds = list(commands)
        sql = "SELECT u.id FROM runs u WHERE u.id IN (SELECT run_id FROM results WHERE node = ?)"
        params: list[Any] = [node]
        if cmds:
            sql += " AND u.command IN (" + ", ".join("?" for _ in cmds) + ")"
            params += cmds
        ids = [int(r[0]) for r in self._query(sql + " ORDER BY u.ts DESC, u.id DESC LIMIT ?", [*params, int(limit)])]
        if not ids:
            return []
        placeholders = ", ".join("?" for _ in ids)
        rows = self._query("SELECT run_id, ts, check_id, node, status, summary, facts, remedy FROM results "
                           f"WHERE node = ? AND run_id IN ({placeholders}) ORDER BY ts, run_id, check_id, id",
                           [node, *ids])
        by_run: dict[int, list[Result]] = {i: [] for i in sorted(ids)}
        order: dict[int, float] = {}
        for r in rows:
            try:
                status = Status(str(r[4]))
            except ValueError:
                status = Status.ERROR
            by_run[int(r[0])].append(Result(check=str(r[2]), node=str(r[3]), status=status, summary=str(r[5]),
                                            facts=_loads(r[6]), remedy=str(r[7]), source=f"history:run {r[0]}"))
            order[int(r[0])] = float(r[1])
        return [by_run[i] for i in sorted(by_run, key=lambda i: (order.get(i, 0.0), i))]

    def decisions(self, node: str | None = None, since: float | None = None) -> list[DecisionRow]:
        sql = "SELECT run_id, ts, node, action, reason, detail FROM decisions WHERE ts >= ?"
        params: list[Any] = [since if since is not None else float("-inf")]
        if node:
            sql += " AND node = ?"
            params.append(node)
        return [DecisionRow(run_id=None if r[0] is None else int(r[0]), ts=float(r[1]), node=str(r[2]),
                            action=str(r[3]), reason=str(r[4]), detail=_loads(r[5]))
                for r in self._query(sql + " ORDER BY ts, id", params)]

    def counts(self) -> dict[str, int]:
        return {t: int(self._query(f"SELECT COUNT(*) FROM {t}")[0][0]) for t in ("runs", "results", "decisions")}


def _sqlite_path(url: str) -> Path:
    rest = url[len("sqlite://"):]
    if rest.startswith("/"):
        return Path(rest)
    return Path(rest).resolve()


def _wal(conn: sqlite3.Connection, timeout: float) -> str:
    """Put the file in WAL mode (it stays so); its journal mode after. Switching takes an
    exclusive lock and SQLite's busy handler does not wait for it: when several processes open a
    new file at once the others get "database is locked" at once, so they retry until `timeout`
    (the mode is read first: once a file is WAL nobody needs that lock again)."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        row = conn.execute("PRAGMA journal_mode").fetchone()
        if row and str(row[0]).lower() == "wal":
            return "wal"
        try:
            row = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            return str(row[0]).lower() if row else ""
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def open_store(url: str | None = None, timeout: float = BUSY_TIMEOUT_S, migrate: bool = True,
               indexes: bool = True) -> Store:
    """Open (and create or upgrade) the store at `url` (None: the default). Raises HistoryError.
    `indexes=False` leaves an existing store's missing INDEXES to the next opener that builds
    them (the prologue: building them on a large store holds the write lock for seconds)."""
    resolved = resolve_url(url)
    if resolved is None:
        raise HistoryError("history is switched off (--history off / PREFLIGHT_HISTORY=off)")
    try:
        if resolved.startswith("sqlite://"):
            path = _sqlite_path(resolved)
            path.parent.mkdir(parents=True, exist_ok=True)
            conn: Any = sqlite3.connect(str(path), timeout=timeout, isolation_level=None, check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
            mode = _wal(conn, timeout)
            if mode != "wal":
                conn.close()
                raise HistoryError(f"history store {path}: cannot switch to WAL mode (got {mode})")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
            store = Store(resolved, conn, "sqlite")
        else:
            try:
                import psycopg
            except ImportError:
                raise HistoryError("a PostgreSQL history store needs the psycopg package "
                                   "(pip install 'psycopg[binary]')") from None
            conn = psycopg.connect(resolved.replace("postgres://", "postgresql://", 1),
                                   connect_timeout=max(1, int(timeout if timeout < CONNECT_TIMEOUT_S else
                                                              CONNECT_TIMEOUT_S)))
            store = Store(resolved, conn, "postgresql")
        if migrate:
            store.migrate(indexes)
        return store
    except HistoryError:
        raise
    except Exception as exc:
        raise HistoryError(f"history store {describe(resolved)}: {type(exc).__name__}: "
                           f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}") from None
