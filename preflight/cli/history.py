"""History commands: `preflight history`, `preflight record`, `preflight baseline learn`.

`history` reads the results store (`--history URL`, default $PREFLIGHT_HISTORY, else
~/.local/share/preflight/history.db) and shows failure counts per node and check (graded
failures out of the runs in which the check was graded, and apart from them the runs in which
it was not checked: node unreachable, output lost), nodes often not checked, flapping and lemon
nodes and each node's bandwidth against its own past, and the time, GPU-hours and money lost to
interruptions of training per cause and node (`runtime.downtime`, each incident once); `--json`
exports all of it (downtime under `downtime`), `--html FILE` and `--prometheus FILE`
(node_exporter textfile) the failure analysis. `record` adds report.json files made elsewhere (sweeps, triage, analyze), and
with `--run-dir DIR` a training run's downtime. `baseline learn` turns a fleet run into a profile of
expected values.

Exit codes: 0 done, 2 could not run (bad arguments, store unreachable).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from preflight.cli import options as opt
from preflight.cli.app import app


def _store(flag: str | None) -> str | None:
    """The results store: --history, else $PREFLIGHT_HISTORY, else the site config's."""
    from preflight.engine import load_config

    return load_config().resolve_history(flag)


@app.command()
def history(
    history_url: opt.StoreOpt = None,
    since: opt.SinceOpt = "7d",
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
    from preflight.history.analysis import Thresholds
    from preflight.history.query import Filters, export, summarize, summary_document

    start = opt.since_time(since)
    if min(flap_min, lemon_runs, xid_repeat, trend_runs, unchecked_runs) < 1 or trend_drop < 0:
        opt.usage("--flap-min, --lemon-runs, --xid-repeat, --trend-runs and --unchecked-runs must be at "
                  "least 1, --trend-drop at least 0")
    th = Thresholds(flap_episodes=flap_min, lemon_runs=lemon_runs, xid_repeat=xid_repeat, port_flaps=2,
                    trend_runs=trend_runs, trend_drop_pct=trend_drop, unchecked_runs=unchecked_runs)
    view = summarize(_store(history_url), Filters(since=start, nodes=list(node or []), checks=list(check or []),
                                          commands=list(command or [])), th,
                     latest=html is not None or prometheus is not None)
    written = export(view, html, prometheus)
    if as_json:
        sys.stdout.write(json.dumps(summary_document(view), indent=2) + "\n")
        return
    from preflight.report.history_console import render

    render(view.summary, view.url)
    from preflight.history.downtime import render as render_downtime

    render_downtime(view.downtime)
    for p in written:
        sys.stderr.write(f"wrote {p}\n")


@app.command()
def record(
    reports: Annotated[list[Path] | None, typer.Argument(help="report.json files, or folders holding them.")] = None,
    history_url: opt.StoreOpt = None,
    command: Annotated[str | None, typer.Option("--command", help="Record under this command name "
                                                "(default: the report's own).")] = None,
    run_dir: Annotated[Path | None, typer.Option("--run-dir", help="A training run's directory: record the time "
                                                 "its interruptions cost (runtime.downtime), as triage does.")] = None,
) -> None:
    """Add JSON reports made elsewhere (sweep, triage, analyze, other hosts) to the results store;
    with --run-dir, a training run's downtime."""
    from preflight.history.query import record_reports, record_run_dir

    if run_dir is not None:
        run_id, results = record_run_dir(run_dir, _store(history_url))
        sys.stdout.writelines(f"{r.summary}\n" for r in results)
        sys.stdout.write(f"recorded {len(results)} incident(s) (run id {run_id})\n" if run_id is not None
                         else f"{run_dir}: no interruption found, nothing recorded\n")
        if not reports:
            return
    if not reports:
        opt.usage("give report.json files or folders, or --run-dir")
    ids = record_reports(list(reports), _store(history_url), command)
    sys.stdout.write(f"recorded {len(ids)} run(s)" + (f" (ids {ids[0]}-{ids[-1]})" if ids else "") + "\n")


baseline_app = typer.Typer(help="Expected values learned from the fleet.", no_args_is_help=True,
                           rich_markup_mode=None)
app.add_typer(baseline_app, name="baseline")


@baseline_app.command("learn")
def baseline_learn(
    reports: Annotated[list[Path] | None, typer.Argument(help="report.json files or folders of a fleet run "
                                                         "(default: read the results store).")] = None,
    history_url: opt.StoreOpt = None,
    since: opt.SinceOpt = "30d",
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
    min_samples: Annotated[int, typer.Option("--min-samples", help="Nodes (node groups) with a passing all-reduce "
                                             "a table needs to be learned.")] = 8,
    parent_fraction: Annotated[float, typer.Option("--parent-fraction", help="Refuse floors under this fraction of "
                                                   "the parent profile's (0: no check).")] = 0.5,
    force: Annotated[bool, typer.Option("--force", help="Write floors under the parent fraction, or from another "
                                        "backend or GPU model than the parent's (said in the profile).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print what was learned as JSON.")] = False,
) -> None:
    """Learn all-reduce busbw floors per topology from a fleet run's passing results (iterative
    outlier removal) and write them as a profile that extends the fleet's own. Refuses (exit 2,
    nothing written) tables with too few nodes, floors at or below zero, and, unless --force,
    floors far under the parent's or results of another backend or GPU model."""
    from preflight.history.query import LearnRequest, learn_baseline

    got = learn_baseline(LearnRequest(
        reports=list(reports or []), url=_store(history_url), since=None if reports else opt.since_time(since),
        out=out,
        name=name, extends=extends, method=method, k=k, warn_sigmas=warn_sigmas, fail_fraction=fail_fraction,
        min_samples=min_samples, parent_fraction=parent_fraction, force=force))
    notes = [n for n in (got.left_out, *(f"{t}; not learned" for t in got.vetted.too_few)) if n]
    if as_json:
        sys.stderr.writelines(f"{n}\n" for n in notes)
        sys.stdout.write(json.dumps([{"table": lr.table, "warn": lr.warn, "fail": lr.fail, "samples": lr.samples,
                                      "center": lr.fit.center, "spread": lr.fit.spread, "kept": sorted(lr.fit.kept),
                                      "dropped": sorted(lr.fit.dropped), "source": lr.source, "forced": lr.forced}
                                     for lr in got.vetted.learned], indent=2) + "\n")
        return
    for lr in got.vetted.learned:
        sys.stdout.write(f"{lr.table}: warn < {lr.warn:g} GB/s, fail < {lr.fail:g} GB/s ({lr.source})\n")
        sys.stdout.writelines(f"  FORCED despite: {o}\n" for o in lr.forced)
    sys.stdout.writelines(f"{n}\n" for n in notes)
    sys.stdout.write(f"wrote {out} (extends {got.parent})\n")
