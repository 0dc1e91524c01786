"""History commands: `preflight history`, `preflight record`, `preflight baseline learn`.

`history` reads the results store (`--history URL`, default $PREFLIGHT_HISTORY, else
~/.local/share/preflight/history.db) and shows failure counts per node and check (graded
failures out of the runs in which the check was graded, and apart from them the runs in which
it was not checked: node unreachable, output lost), nodes often not checked, flapping and lemon
nodes and each node's bandwidth against its own past; `--json`, `--html FILE` and
`--prometheus FILE` (node_exporter textfile) export the same. `record` adds report.json files
made elsewhere (sweeps, triage, analyze). `baseline learn` turns a fleet run into a profile of
expected values.

Exit codes: 0 done, 2 could not run (bad arguments, store unreachable).
"""

from __future__ import annotations

import json
import re
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from preflight.cli import UsageError, app

HistoryOpt = Annotated[str | None, typer.Option("--history", help="Results store: sqlite:///path, a file path, or "
                                                "postgresql://user@host/db (default $PREFLIGHT_HISTORY, else "
                                                "~/.local/share/preflight/history.db).")]
SinceOpt = Annotated[str, typer.Option("--since", help="Window: an age (30m, 6h, 7d, 4w), an ISO time, or 'all'.")]

_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_window(value: str | None, now: float | None = None) -> float | None:
    """`--since` -> Unix time (None = everything)."""
    if value is None or value.strip().lower() in ("", "all"):
        return None
    m = _AGE.match(value)
    if m:
        return (now if now is not None else time.time()) - float(m.group(1)) * _UNIT_S[m.group(2)]
    try:
        t = datetime.fromisoformat(value.strip())
    except ValueError:
        raise UsageError(f"--since {value!r}: use an age (30m, 6h, 7d, 4w), an ISO time or 'all'") from None
    return (t if t.tzinfo else t.astimezone()).timestamp()


def _open(url: str | None) -> Any:
    from preflight.history.store import HistoryError, open_store

    try:
        return open_store(url)
    except HistoryError as exc:
        raise UsageError(str(exc)) from None


def _read_reports(paths: list[Path]) -> list[dict[str, Any]]:
    docs = []
    for p in paths:
        files = sorted(p.rglob("report.json")) if p.is_dir() else [p]
        if not files:
            raise UsageError(f"{p}: no report.json in this folder")
        for f in files:
            try:
                doc = json.loads(f.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise UsageError(f"{f}: not a readable JSON report ({exc})") from None
            if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
                raise UsageError(f"{f}: not a preflight JSON report (no results list)")
            docs.append(doc)
    return docs


def _console_tables(summary: Any, url: str) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console()
    since = summary.to_dict()["since"] or "the beginning"
    con.print(f"[bold]preflight history[/bold]: {summary.runs} run(s), {len(summary.nodes)} node(s) since {since} "
              f"({url})")
    bad = [s for s in summary.stats if s.bad or s.warn]  # runs not checked alone: the table after
    t = Table(title="failures per node and check (failed: of the runs in which it was checked; not checked: "
                    "unreachable node or lost output)")
    for col in ("node", "check", "failed", "warn", "checked runs", "not checked", "last", "runs (oldest first)"):
        t.add_column(col)
    for s in sorted(bad, key=lambda s: (-s.bad, -s.warn, s.node, s.check)):
        t.add_row(s.node, s.check, str(s.bad), str(s.warn), str(s.graded), str(s.not_checked), s.last_status,
                  s.sequence[-40:])
    con.print(t if bad else "no failures in this window")
    if summary.unchecked:
        t = Table(title="nodes not checked (unreachable, or output lost; not counted as failures)")
        for col in ("node", "not checked", "runs", "wholly", "most common cause", "runs (oldest first)"):
            t.add_column(col)
        for u in summary.unchecked:
            t.add_row(u.node, str(u.count), str(u.runs), str(u.whole), f"{u.cause} ({u.cause_count} runs)",
                      u.sequence[-40:])
        con.print(t)
    if summary.flapping:
        t = Table(title="flapping")
        for col in ("node", "check", "failure episodes", "runs (oldest first)"):
            t.add_column(col)
        for f in summary.flapping:
            t.add_row(f.node, f.check, str(f.episodes), f.sequence[-40:])
        con.print(t)
    if summary.lemons:
        t = Table(title="lemon nodes")
        for col in ("node", "kind", "what", "finding"):
            t.add_column(col)
        for lm in summary.lemons:
            t.add_row(lm.node, lm.kind, lm.key, lm.summary)
        con.print(t)
    if summary.trends:
        t = Table(title="bandwidth against each node's own past")
        for col in ("node / pair", "kind", "latest GB/s", "against its past"):
            t.add_column(col)
        for tr in summary.trends:
            t.add_row(tr.label, tr.kind, f"{tr.last:.4g}", ("[red]" if tr.low else "") + tr.summary)
        con.print(t)


@app.command()
def history(
    history_url: HistoryOpt = None,
    since: SinceOpt = "7d",
    node: Annotated[list[str] | None, typer.Option("--node", help="Only these nodes; repeatable.")] = None,
    check: Annotated[list[str] | None, typer.Option("--check", help="Only these checks; repeatable.")] = None,
    command: Annotated[list[str] | None, typer.Option("--command", help="Only runs of these commands (run, node, "
                                                      "prologue, sweep, analyze, triage); repeatable.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON on stdout.")] = False,
    html: Annotated[Path | None, typer.Option("--html", help="Write an HTML report (latest state + history).")] = None,
    prometheus: Annotated[Path | None, typer.Option("--prometheus", help="Write the latest state as a "
                                                    "node_exporter textfile (.prom), atomically.")] = None,
    flap_min: Annotated[int, typer.Option("--flap-min", help="Failure episodes (fail, pass, fail again, ...) that "
                                          "make a check flapping.")] = 3,
    lemon_runs: Annotated[int, typer.Option("--lemon-runs", help="Failing runs of one check that make a lemon.")] = 3,
    xid_repeat: Annotated[int, typer.Option("--xid-repeat", help="Distinct events of one Xid that make a "
                                            "lemon.")] = 2,
    trend_runs: Annotated[int, typer.Option("--trend-runs", help="A node's own baseline: its last N runs.")] = 10,
    trend_drop: Annotated[float, typer.Option("--trend-drop", help="Flag bandwidth this many percent under the "
                                              "node's own median.")] = 5.0,
    unchecked_runs: Annotated[int, typer.Option("--unchecked-runs", help="Runs in which a node was not checked "
                                                "(unreachable, output lost) that make a finding.")] = 3,
) -> None:
    """Failure counts, flapping and lemon nodes, and bandwidth trends from the results store."""
    from preflight.history.analysis import Thresholds, latest_results, prometheus_text, summarize
    from preflight.history.store import describe

    window = parse_window(since)
    if min(flap_min, lemon_runs, xid_repeat, trend_runs, unchecked_runs) < 1 or trend_drop < 0:
        raise UsageError("--flap-min, --lemon-runs, --xid-repeat, --trend-runs and --unchecked-runs must be at "
                         "least 1, --trend-drop at least 0")
    th = Thresholds(flap_episodes=flap_min, lemon_runs=lemon_runs, xid_repeat=xid_repeat, port_flaps=2,
                    trend_runs=trend_runs, trend_drop_pct=trend_drop, unchecked_runs=unchecked_runs)
    with _open(history_url) as store:
        rows = store.rows(since=window, nodes=node or (), checks=check or (), commands=command or ())
        runs = store.runs(since=window, commands=command or ())
        url = describe(store.url)
    summary = summarize(rows, th, since=window)
    if html is not None or prometheus is not None:
        from preflight.report import Report

        latest = latest_results(rows)
        if html is not None:
            from preflight.report.html import render as render_html

            rep = Report.build("history", latest, nodes=summary.nodes)
            _write(html, render_html(rep, history=summary))
        if prometheus is not None:
            from preflight.report.prometheus import render_results, write_textfile

            meta = [{"command": r.command, "ts": r.ts, "verdict": r.verdict} for r in runs]
            try:
                write_textfile(render_results(latest, meta) + prometheus_text(summary), prometheus)
            except OSError as exc:
                raise UsageError(f"cannot write {prometheus}: {exc.strerror or exc}") from None
    if as_json:
        sys.stdout.write(json.dumps(summary.to_dict(), indent=2, sort_keys=True) + "\n")
    else:
        _console_tables(summary, url)
    for p in (html, prometheus):
        if p is not None and not as_json:
            sys.stderr.write(f"wrote {p}\n")


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


@app.command()
def record(
    reports: Annotated[list[Path], typer.Argument(help="report.json files, or folders holding them.")],
    history_url: HistoryOpt = None,
    command: Annotated[str | None, typer.Option("--command", help="Record under this command name "
                                                "(default: the report's own).")] = None,
) -> None:
    """Add JSON reports made elsewhere (sweep, triage, analyze, other hosts) to the results store."""
    missing = [str(p) for p in reports if not p.exists()]
    if missing:
        raise UsageError(f"no such file or folder: {', '.join(missing)}")
    docs = _read_reports(list(reports))
    with _open(history_url) as store:
        ids = [store.record(doc, command) for doc in docs]
    sys.stdout.write(f"recorded {len(ids)} run(s)" + (f" (ids {ids[0]}-{ids[-1]})" if ids else "") + "\n")


baseline_app = typer.Typer(help="Expected values learned from the fleet.", no_args_is_help=True,
                           rich_markup_mode=None)
app.add_typer(baseline_app, name="baseline")


@baseline_app.command("learn")
def baseline_learn(
    reports: Annotated[list[Path] | None, typer.Argument(help="report.json files or folders of a fleet run "
                                                         "(default: read the results store).")] = None,
    history_url: HistoryOpt = None,
    since: SinceOpt = "30d",
    out: Annotated[Path, typer.Option("--out", "-o", help="The profile TOML file to write.")] = Path(
        "fleet-baseline.toml"),
    name: Annotated[str | None, typer.Option("--name", help="Profile name (default: the file's stem).")] = None,
    extends: Annotated[str | None, typer.Option("--extends", help="Parent profile (default: the one the fleet "
                                                "ran with, else generic).")] = None,
    method: Annotated[str, typer.Option("--method", help="Outlier removal: mad (median/MAD) or std "
                                        "(mean/stddev).")] = "mad",
    k: Annotated[float, typer.Option("--k", help="Drop values more than k spreads from the center.")] = 3.0,
    warn_sigmas: Annotated[float, typer.Option("--warn-sigmas", help="Warn floor: center minus this many "
                                               "spreads.")] = 3.0,
    fail_fraction: Annotated[float, typer.Option("--fail-fraction", help="Fail floor: this fraction of the "
                                                 "center.")] = 0.75,
    as_json: Annotated[bool, typer.Option("--json", help="Print what was learned as JSON.")] = False,
) -> None:
    """Learn all-reduce busbw floors per topology from a fleet run (iterative outlier removal)
    and write them as a profile that extends the fleet's own."""
    from preflight.history import baseline as bl
    from preflight.history.store import Row, _epoch
    from preflight.model import Result

    if method not in ("mad", "std"):
        raise UsageError(f"--method {method!r}: use mad or std")
    if not 0 < fail_fraction <= 1:
        raise UsageError("--fail-fraction must be in (0, 1]")
    rows: list[Row] = []
    profiles: list[str] = []
    if reports:
        for i, doc in enumerate(_read_reports(list(reports))):
            ts = _epoch(doc.get("started"))
            profiles += list((doc.get("profiles") or {}).values())
            for r in doc["results"]:
                res = Result.from_dict(r)
                rows.append(Row(run_id=i, ts=ts, command=str(doc.get("command", "")), check=res.check, node=res.node,
                                status=res.status, summary=res.summary, facts=res.facts))
    else:
        window = parse_window(since)
        with _open(history_url) as store:
            rows = store.rows(since=window, checks=["nccl.allreduce"])
            used = {r.run_id for r in rows}
            profiles = [r.profile for r in store.runs(since=window) if r.id in used]
    try:
        learned = bl.learn(rows, method=method, k=k, warn_sigmas=warn_sigmas, fail_fraction=fail_fraction)
    except ValueError as exc:
        raise UsageError(f"nothing to learn from: {exc}") from None
    if not learned:
        raise UsageError("nothing to learn from: no nccl.allreduce result with a peak busbw in the input")
    parent = extends or bl.fleet_profile(profiles)
    text = bl.profile_toml(learned, name or out.stem, parent)
    _write(out, text)
    if as_json:
        sys.stdout.write(json.dumps([{"table": lr.table, "warn": lr.warn, "fail": lr.fail,
                                      "center": lr.fit.center, "spread": lr.fit.spread, "kept": sorted(lr.fit.kept),
                                      "dropped": sorted(lr.fit.dropped), "source": lr.source} for lr in learned],
                                    indent=2) + "\n")
    else:
        for lr in learned:
            sys.stdout.write(f"{lr.table}: warn < {lr.warn:g} GB/s, fail < {lr.fail:g} GB/s ({lr.source})\n")
        sys.stdout.write(f"wrote {out} (extends {parent})\n")
