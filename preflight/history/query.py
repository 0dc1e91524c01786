"""What the history commands run: read the store into a summary (with its exports), add
reports made elsewhere, learn a fleet baseline. Bad input or an unreachable store is a
UsageError naming it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from preflight.engine import UsageError
from preflight.history.store import HistoryError, Row, Store, describe, open_store
from preflight.timeparse import epoch


def open_or_fail(url: str | None) -> Store:
    try:
        return open_store(url)
    except HistoryError as exc:
        raise UsageError(str(exc)) from None


def window(since: datetime | None) -> float | None:
    """A window start as Unix time (None: everything)."""
    return None if since is None else epoch(since)


def read_reports(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """The JSON reports in these files and folders (report.json, searched recursively)."""
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
            _known_schema(f, doc)
            docs.append(doc)
    return docs


def _known_schema(path: Path, doc: dict[str, Any]) -> None:
    """A report written by a newer preflight (a schema_version above ours) is refused by name;
    one with none comes from a preflight before schema versions (the same keys as version 1)."""
    from preflight.report.base import SCHEMA_VERSION

    version = doc.get("schema_version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise UsageError(f"{path}: schema_version {version!r} is not a positive integer")
    if version > SCHEMA_VERSION:
        raise UsageError(f"{path}: report schema_version {version} is newer than this preflight reads "
                         f"({SCHEMA_VERSION}); upgrade preflight")


def record_reports(paths: Sequence[Path], url: str | None, command: str | None = None) -> list[int]:
    """`preflight record`: add JSON reports made elsewhere; returns the new run ids."""
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise UsageError(f"no such file or folder: {', '.join(missing)}")
    docs = read_reports(paths)
    with open_or_fail(url) as store:
        return [store.record(doc, command) for doc in docs]


def record_run_dir(run_dir: Path, url: str | None) -> tuple[int | None, list[Any]]:
    """`preflight record --run-dir DIR`: measure the run directory's interruptions (as triage does)
    and record them as one run of command "runtime"; (run id or None when there was none, results)."""
    from preflight.engine import load_config
    from preflight.runtime import story
    from preflight.triage.downtime import price, to_results

    if not run_dir.is_dir():
        raise UsageError(f"--run-dir {run_dir}: {'not a directory' if run_dir.exists() else 'no such directory'}")
    files = story.read_run_dir(run_dir)
    if not files:
        raise UsageError(f"--run-dir {run_dir}: no events, heartbeats, hang or crash records in it")
    cost, currency = price(load_config())
    told = story.tell(files, run_dir=str(run_dir.resolve()), cost_per_gpu_hour=cost, currency=currency,
                      end_label="record time")  # the run, read as triage reads it
    results = to_results(told.downtime["incidents"], source=str(run_dir))
    if not results:
        return None, []
    with open_or_fail(url) as store:
        return store.record(results, "runtime"), results


@dataclass
class Filters:
    since: datetime | None = None
    nodes: list[str] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)


@dataclass
class HistoryView:
    """The store's summary for a window, with what its exports need."""

    summary: Any
    latest: list[Any]  # the fleet's state as last seen (analysis.latest_results); empty unless asked for
    runs: list[Any]  # the window's runs (for the Prometheus textfile); empty unless `latest` was asked for
    url: str
    downtime: dict[str, Any] = field(default_factory=dict)  # history.downtime.summarize: lost time per cause, node


def summarize(url: str | None, filters: Filters, thresholds: Any, latest: bool = False) -> HistoryView:
    """`preflight history`: failure counts, flapping and lemon nodes, trends for a window. The
    store aggregates (Store.digest) and the analysis reads that, never every result; `latest`
    also reads each node's last run for the exports."""
    from preflight.history import downtime
    from preflight.history.analysis import latest_results, summarize_digest

    since = window(filters.since)
    nodes, checks, commands = filters.nodes, filters.checks, filters.commands
    skip = [downtime.dt.CHECK]  # downtime is not a node's check result: totalled apart, never a failure count
    with open_or_fail(url) as store:
        try:
            digest = store.digest(since, nodes, checks, commands, skip_checks=skip)
            lost = [] if checks and downtime.dt.CHECK not in checks else \
                store.rows(since=since, nodes=nodes, checks=[downtime.dt.CHECK], commands=commands)
            last = latest_results(store.latest_rows(digest, since, nodes, checks, commands, skip_checks=skip)) \
                if latest else []
            runs = store.runs(since=since, commands=commands) if latest else []  # the exports' meta
        except HistoryError as exc:
            raise UsageError(str(exc)) from None
        where = describe(store.url)
    return HistoryView(summary=summarize_digest(digest, thresholds, since=since), latest=last, runs=runs, url=where,
                       downtime=downtime.summarize(lost, *_price()))


def _price() -> tuple[float | None, str]:
    from preflight.engine import load_config
    from preflight.triage.downtime import price

    return price(load_config())


def summary_document(view: HistoryView) -> dict[str, Any]:
    """`preflight history --json`: the summary, with the schema version every JSON document
    preflight writes carries."""
    from preflight.report.base import SCHEMA_VERSION

    return {"schema_version": SCHEMA_VERSION, **view.summary.to_dict(), "downtime": view.downtime}


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def export(view: HistoryView, html: Path | None, prometheus: Path | None) -> list[Path]:
    """The latest state and the history as an HTML page and/or a node_exporter textfile."""
    from preflight.history.analysis import prometheus_text
    from preflight.report.base import Report

    if html is None and prometheus is None:
        return []
    latest = view.latest
    if html is not None:
        from preflight.report.html import render as render_html

        _write(html, render_html(Report.build("history", latest, nodes=view.summary.nodes), history=view.summary))
    if prometheus is not None:
        from preflight.report.prometheus import render_results, write_textfile

        meta = [{"command": r.command, "ts": r.ts, "verdict": r.verdict, "duration_s": r.duration_s}
                for r in view.runs]
        try:
            write_textfile(render_results(latest, meta) + prometheus_text(view.summary), prometheus)
        except OSError as exc:
            raise UsageError(f"cannot write {prometheus}: {exc.strerror or exc}") from None
    return [p for p in (html, prometheus) if p is not None]


def _report_rows(docs: Sequence[dict[str, Any]]) -> tuple[list[Row], list[str]]:
    from preflight.model import Result

    rows: list[Row] = []
    profiles: list[str] = []
    for i, doc in enumerate(docs):
        ts = epoch(doc.get("started"))
        profiles += list((doc.get("profiles") or {}).values())
        for r in doc["results"]:
            res = Result.from_dict(r)
            rows.append(Row(run_id=i, ts=ts, command=str(doc.get("command", "")), check=res.check, node=res.node,
                            status=res.status, summary=res.summary, facts=res.facts))
    return rows, profiles


def _store_rows(url: str | None, since: datetime | None) -> tuple[list[Row], list[str]]:
    start = window(since)
    with open_or_fail(url) as store:
        rows = store.rows(since=start, checks=["nccl.allreduce", "gpu.inventory"])
        used = {r.run_id for r in rows if r.check == "nccl.allreduce"}
        return rows, [r.profile for r in store.runs(since=start) if r.id in used]


@dataclass
class LearnRequest:
    reports: list[Path] = field(default_factory=list)  # none: read the store
    url: str | None = None
    since: datetime | None = None
    out: Path = Path("fleet-baseline.toml")
    name: str | None = None
    extends: str | None = None
    method: str = "mad"
    k: float = 3.0
    warn_sigmas: float = 3.0
    fail_fraction: float = 0.75
    min_samples: int = 8
    parent_fraction: float = 0.5
    force: bool = False


@dataclass
class Learnt:
    """What `baseline learn` wrote: the tables, the parent, and what it left out."""

    vetted: Any  # baseline.Vetted
    parent: str
    left_out: str  # the results not learned from, and why ("" when none)


def _parent_profile(name: str, out: Path) -> Any:
    from preflight.engine import load_config
    from preflight.profile import ProfileError, load

    try:
        return load(name, (*load_config().profile_dirs, out.parent))
    except ProfileError as exc:
        raise UsageError(f"parent profile: {exc}; name one with --extends") from None


def learn_baseline(req: LearnRequest) -> Learnt:
    """`preflight baseline learn`: busbw floors per topology from a fleet run's passing results,
    vetted against the parent profile (samples, floors above zero and near the parent's, the
    same backend and GPU model), written as a profile extending it. A refusal is a UsageError
    and writes nothing."""
    from preflight.history import baseline as bl

    if req.method not in ("mad", "std"):
        raise UsageError(f"--method {req.method!r}: use mad or std")
    if not 0 < req.fail_fraction <= 1:
        raise UsageError("--fail-fraction must be in (0, 1]")
    if req.min_samples < 1 or not 0 <= req.parent_fraction <= 1:
        raise UsageError("--min-samples must be at least 1, --parent-fraction in [0, 1]")
    rows, profiles = _report_rows(read_reports(req.reports)) if req.reports else _store_rows(req.url, req.since)
    picked = bl.pick(rows)
    if not picked.rows:
        raise UsageError("nothing to learn from: no passing nccl.allreduce result with a peak busbw in the input"
                         + (f" ({picked.left_out_text()})" if picked.left_out else ""))
    learned = bl.learn(picked.rows, method=req.method, k=req.k, warn_sigmas=req.warn_sigmas,
                       fail_fraction=req.fail_fraction)
    parent = req.extends or bl.fleet_profile(profiles)
    vetted = bl.vet(learned, _parent_profile(parent, req.out), bl.hardware(picked.rows, rows),
                    bl.Safety(min_samples=req.min_samples, parent_fraction=req.parent_fraction, force=req.force))
    if vetted.blocked:
        hint = "; --force writes it anyway" if not vetted.refused and vetted.learned else ""
        raise UsageError(f"refused, {req.out} not written: {'; '.join(vetted.blocked)}{hint}")
    _write(req.out, bl.profile_toml(vetted.learned, req.name or req.out.stem, parent))
    return Learnt(vetted=vetted, parent=parent, left_out=picked.left_out_text())
