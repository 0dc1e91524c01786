"""`preflight collect` and `preflight triage`: after a hang or a crash, name the culprit.

    preflight collect --job 4242 --run-dir /shared/runs/exp7 -o exp7.tar.gz
    preflight collect --hosts gpu[001-016] --run-dir /shared/runs/exp7 --log '/var/log/nccl/*.log'
    preflight triage 4242 --run-dir /shared/runs/exp7       # collect, then attribute
    preflight triage --run-dir ./run                         # this node only
    preflight triage exp7.tar.gz                             # offline, from a bundle

Exit codes: 0 a clean run (every rank ended cleanly), 1 a culprit or fault was found, 2 bad or
missing input (no run directory, an empty one, a corrupt hang or crash record, unreadable files:
each named with the reason, the verdict still drawn from the rest) or not enough evidence to
decide (category "unknown").
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from preflight.cli import options as opt
from preflight.cli.app import app

RunDirOpt = Annotated[str | None, typer.Option("--run-dir", help="The job's run directory on the nodes (events, hang "
                                                                 "records, flight-recorder dumps, rank logs).")]
LogOpt = Annotated[list[str] | None, typer.Option("--log", help="Glob of extra logs on the nodes (NCCL_DEBUG_FILE, "
                                                              "launcher output); repeatable.")]
PatternOpt = Annotated[str | None, typer.Option("--pattern", help="Regex on the command line of the training processes "
                                                                 "still running (default: the run directory).")]
CmdOpt = Annotated[float, typer.Option("--command-timeout", help="Seconds for a node's collection.")]
NoChecksOpt = Annotated[bool, typer.Option("--no-node-checks", help="Collect only the job's files, not the node "
                                                                   "probes (Xids, GPU, IB, fabric manager).")]


def _request(run_dir: str | None, log: list[str] | None, pattern: str | None, transport: str,
             ssh_config: Path | None, accept: bool, concurrency: int, connect_timeout: float | None,
             command_timeout: float, deadline: float | None, no_node_checks: bool) -> Any:
    from preflight.engine import TransportOptions
    from preflight.triage.run import CollectRequest

    topts = TransportOptions(ssh_config=ssh_config, accept_new=accept, concurrency=concurrency,
                             connect_timeout=connect_timeout, command_timeout=command_timeout, deadline=deadline)
    topts.check()
    return CollectRequest(run_dir=run_dir, logs=list(log or []), pattern=pattern, transport=transport,
                          transport_options=topts, node_checks=not no_node_checks)


@app.command("collect")
def collect_cmd(
    job: Annotated[str | None, typer.Option("--job", "-j", help="Slurm job id (its nodes and start time).")] = None,
    hosts: opt.HostsOpt = None,
    run_dir: RunDirOpt = None,
    log: LogOpt = None,
    pattern: PatternOpt = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Bundle file (default triage-<job|time>.tar.gz).")] = None,
    transport: opt.TransportOpt = "auto",
    ssh_config: opt.SshConfigOpt = None,
    ssh_accept_new: opt.AcceptOpt = False,
    concurrency: opt.ConcOpt = 64,
    connect_timeout: opt.ConnOpt = None,
    command_timeout: CmdOpt = 90.0,
    deadline: opt.DeadlineOpt = None,
    no_node_checks: NoChecksOpt = False,
) -> None:
    """Collect node probes, Xids, run-directory files, logs and live stacks from every node of a job."""
    from preflight.report.emit import ConsoleSink, FilesSink, HistorySink, emit
    from preflight.triage.run import collect_job

    req = _request(run_dir, log, pattern, transport, ssh_config, ssh_accept_new, concurrency, connect_timeout,
                   command_timeout, deadline, no_node_checks)
    collected = collect_job(job, hosts, req, out)
    emit(collected.report, [HistorySink("off"), FilesSink(collected.path.parent, collected.write),
                            ConsoleSink(collected.summary)])
    raise typer.Exit(collected.exit_code)


@app.command("triage")
def triage_cmd(
    target: Annotated[str | None, typer.Argument(help="A Slurm job id, or a bundle written by `preflight collect`.")] = None,
    hosts: opt.HostsOpt = None,
    run_dir: RunDirOpt = None,
    log: LogOpt = None,
    pattern: PatternOpt = None,
    as_json: opt.JsonOpt = False,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write triage.json and triage.md here.")] = None,
    save_bundle: Annotated[Path | None, typer.Option("--save-bundle", help="Also keep the collected bundle.")] = None,
    since: Annotated[str | None, typer.Option("--since", help="Node faults from: ISO time or age (30m, 6h); default "
                                                             "the job's start.")] = None,
    transport: opt.TransportOpt = "auto",
    ssh_config: opt.SshConfigOpt = None,
    ssh_accept_new: opt.AcceptOpt = False,
    concurrency: opt.ConcOpt = 64,
    connect_timeout: opt.ConnOpt = None,
    command_timeout: CmdOpt = 90.0,
    deadline: opt.DeadlineOpt = None,
    no_node_checks: NoChecksOpt = False,
    bad_nodes: opt.BadNodesOpt = None,
    per_node: opt.PerNodeOpt = False,
) -> None:
    """Name the culprit of a hang or crash: rank, node, collective and sequence number, category and action."""
    from preflight.engine import load_config
    from preflight.report.emit import Output, choose_sinks, emit
    from preflight.triage.run import triage

    req = _request(run_dir, log, pattern, transport, ssh_config, ssh_accept_new, concurrency, connect_timeout,
                   command_timeout, deadline, no_node_checks)
    result = triage(target, hosts, req, opt.since_time(since, "--since", "an ISO time or an age (30m, 6h)"),
                    save_bundle)
    emit(result.report, choose_sinks(Output(as_json=as_json, out=out, write_files=out is not None,
                                            bad_nodes=bad_nodes,
                                            history=load_config().resolve_history(None), announce_with_json=True),
                                     writer=result.write, render=lambda report: result.console(report, per_node),
                                     json_text=result.to_json))
    for line in result.problems():
        sys.stderr.write(line + "\n")
    raise typer.Exit(result.exit_code)
