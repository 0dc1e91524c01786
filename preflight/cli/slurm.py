"""Slurm commands: `preflight prologue` (Prolog= / HealthCheckProgram=) and `preflight resume`.

`prologue` runs the node-local checks within a time budget and, on NO-GO, drains the node
with `preflight: <check> <summary>` and exits non-zero so Slurm requeues the job elsewhere
(preflight.prologue does the work). Exit codes: 0 GO, 1 NO-GO (or the budget ran out),
2 could not run (bad arguments, profile).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from preflight.cli import options as opt
from preflight.cli.app import app
from preflight.interrupt import guarded


@app.command()
@guarded  # SIGTERM from slurmd, or Ctrl-C: its probes ended, no drain, exit 128 + the signal
def prologue(
    budget: Annotated[float, typer.Option("--budget", help="Seconds the whole command may take.")] = 20.0,
    profile: opt.ProfileOpt = None,
    checks_dir: opt.ChecksDirOpt = None,
    only: opt.OnlyOpt = None,
    skip: opt.SkipOpt = None,
    xid_since: opt.XidOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Check and print what would be done; "
                                          "drain nothing and exit 0.")] = False,
    no_drain: Annotated[bool, typer.Option("--no-drain", help="Exit non-zero on NO-GO but leave the "
                                           "drain to Slurm.")] = False,
    node: Annotated[str | None, typer.Option("--node", help="Slurm node name (default: $SLURMD_NODENAME, "
                                             "else the host name).")] = None,
    as_json: opt.JsonOpt = False,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Also write the reports to this folder.")] = None,
    history: opt.HistoryOpt = None,
    damp: Annotated[str | None, typer.Option("--damp", help="K,M: drain a soft failure only after K failing runs "
                                             "in a row (hard faults at once), resume after M passing runs; 'on' "
                                             "takes K,M from the profile.")] = None,
    bad_nodes: opt.BadNodesOpt = None,
    prometheus: opt.PrometheusOpt = None,
    per_node: opt.PerNodeOpt = False,
) -> None:
    """Slurm Prolog / HealthCheckProgram gate: node-local checks within a time budget; on NO-GO
    drain the node with `preflight: <check> <summary>` and exit 1 so the job is requeued."""
    from preflight.engine import load_config
    from preflight.prologue import PrologueRequest, run_prologue
    from preflight.report.emit import Output, choose_sinks, emit

    req = PrologueRequest(budget=budget, profile=profile, checks_dirs=list(checks_dir or []), only=list(only or []),
                          skip=list(skip or []), xid_since=opt.xid_since(xid_since), dry_run=dry_run,
                          no_drain=no_drain, node=node, history=history, damp=damp, lines_to_stderr=as_json,
                          per_node=per_node)
    cfg = load_config()
    outcome = run_prologue(req, cfg)
    # the history gate has recorded the run already
    emit(outcome.report, choose_sinks(Output(as_json=as_json, out=out, write_files=out is not None, quiet=True,
                                             bad_nodes=bad_nodes,
                                             history="off", prometheus=prometheus or cfg.prometheus,
                                             metrics_warn_only=True)))
    outcome.say()  # stdout, or stderr beside --json
    raise typer.Exit(outcome.code)


@app.command()
def resume(
    nodes: Annotated[str, typer.Argument(help="Slurm hostlist, e.g. gpu[001-016,020].")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what would be resumed; change nothing.")] = False,
) -> None:
    """Resume the nodes preflight drained (reason `preflight: ...`); every other node is left alone."""
    from preflight import slurm
    from preflight.inventory import HostlistError, expand

    try:
        names = expand(nodes)
    except HostlistError as exc:
        opt.usage(str(exc))
    actions = slurm.resume(names, dry_run=dry_run)
    for a in actions:
        sys.stdout.write(a.line(dry_run) + "\n")
    raise typer.Exit(1 if any(a.action == "error" for a in actions) else 0)
