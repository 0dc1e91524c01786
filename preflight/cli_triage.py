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

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from preflight.cli_slurm import _cli_module

_cli = _cli_module()
app: typer.Typer = _cli.app
UsageError: type[Exception] = _cli.UsageError

SLURM_TIMEOUT = 15.0
_JOB_ID = re.compile(r"^\d+(?:_\d+)?$")

HostsOpt = Annotated[str | None, typer.Option("--hosts", "-H", help="Nodes of the job: hostlist, comma list or @file.")]
RunDirOpt = Annotated[str | None, typer.Option("--run-dir", help="The job's run directory on the nodes (events, hang "
                                                                 "records, flight-recorder dumps, rank logs).")]
LogOpt = Annotated[list[str] | None, typer.Option("--log", help="Glob of extra logs on the nodes (NCCL_DEBUG_FILE, "
                                                              "launcher output); repeatable.")]
PatternOpt = Annotated[str | None, typer.Option("--pattern", help="Regex on the command line of the training processes "
                                                                 "still running (default: the run directory).")]
TransportOpt = Annotated[str, typer.Option("--transport", "-t", help="auto, local, ssh or srun.")]
SshConfigOpt = Annotated[Path | None, typer.Option("--ssh-config", help="OpenSSH config file.")]
AcceptOpt = Annotated[bool, typer.Option("--ssh-accept-new", help="Accept host keys not in known_hosts.")]
ConcOpt = Annotated[int, typer.Option("--concurrency", help="Nodes worked on at once.")]
ConnOpt = Annotated[float, typer.Option("--connect-timeout", help="Seconds to connect to a node.")]
CmdOpt = Annotated[float, typer.Option("--command-timeout", help="Seconds for a node's collection.")]
DeadlineOpt = Annotated[float | None, typer.Option("--deadline", help="Seconds for the whole collection.")]
NoChecksOpt = Annotated[bool, typer.Option("--no-node-checks", help="Collect only the job's files, not the node "
                                                                   "probes (Xids, GPU, IB, fabric manager).")]


@dataclass
class Target:
    nodes: list[str]
    job: dict[str, Any]
    local: bool


def _run(argv: list[str]) -> tuple[int, str]:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=SLURM_TIMEOUT)
    except FileNotFoundError:
        return 127, f"{argv[0]} not found"
    except subprocess.TimeoutExpired:
        return 124, f"{argv[0]} did not answer within {SLURM_TIMEOUT:g} s"
    return p.returncode, p.stdout if p.returncode == 0 else (p.stderr or p.stdout)


def resolve_job(job_id: str) -> dict[str, Any]:
    """A Slurm job's node list and start time: scontrol (running or recent), else sacct (accounting)."""
    from preflight import inventory
    from preflight.parsers import slurm_job as parsers

    if not _JOB_ID.match(job_id):
        raise UsageError(f"job id {job_id!r}: use digits (4242 or 4242_7)")
    rc, out = _run(["scontrol", "show", "job", "-o", job_id])
    job = parsers.parse_scontrol_job(out) if rc == 0 else parsers.SlurmJob(problem=out.strip()[:200])
    if not job.nodelist:
        rc2, out2 = _run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "JobID,NodeList,Start,End,State,ExitCode"])
        acct = parsers.parse_sacct(out2) if rc2 == 0 else parsers.SlurmJob(problem=out2.strip()[:200])
        if acct.nodelist:
            job = acct
        elif not job.problem:
            job.problem = acct.problem
    if not job.nodelist:
        raise UsageError(f"job {job_id}: no node list from scontrol or sacct ({job.problem or 'no answer'})")
    try:
        nodes = inventory.expand(job.nodelist)
    except inventory.HostlistError as exc:
        raise UsageError(f"job {job_id}: node list {job.nodelist!r}: {exc}") from None
    return {"job_id": job.job_id or job_id, "nodelist": job.nodelist, "nodes": nodes, "start": job.start,
            "end": job.end, "state": job.state, "exit_code": job.exit_code}


def _target(job_id: str | None, hosts: str | None) -> Target:
    from preflight import inventory
    from preflight.transport.local import local_node_name

    if job_id:
        job = resolve_job(job_id)
        return Target(nodes=list(job.pop("nodes")), job=job, local=False)
    if hosts:
        try:
            return Target(nodes=inventory.parse_hosts(hosts), job={}, local=False)
        except inventory.HostlistError as exc:
            raise UsageError(str(exc)) from None
    return Target(nodes=[local_node_name()], job={}, local=True)


def do_collect(target: Target, run_dir: str | None, logs: list[str], pattern: str | None, transport: str,
               topts: dict[str, Any], node_checks: bool = True) -> Any:
    """Collect a bundle from the target's nodes (never raises for a node-level fault)."""
    from preflight import registry as reg
    from preflight.transport.local import LocalTransport
    from preflight.triage import collect

    if run_dir and not run_dir.startswith("/") and target.local:
        run_dir = str(Path(run_dir).resolve())
    if run_dir and target.local and not Path(run_dir).is_dir():
        why = "not a directory" if Path(run_dir).exists() else "no such directory"
        raise UsageError(f"--run-dir {run_dir}: {why}")
    if pattern:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise UsageError(f"--pattern {pattern!r}: {exc}") from None
    probes = collect.triage_probes(run_dir, logs, pattern)
    if node_checks:
        probes = collect.node_check_probes(reg.load()) + probes
    if not probes:
        raise UsageError("nothing to collect: give --run-dir and/or --log (or drop --no-node-checks)")
    tr: Any
    if target.local:
        tr = LocalTransport()
    else:
        if transport == "local" and len(target.nodes) > 1:
            raise UsageError("--transport local reaches this node only; use ssh or srun for several hosts")
        tr = LocalTransport() if transport == "local" else _cli._make_transport(transport, target.nodes, topts)
    try:
        outcomes = tr.collect({n: probes for n in target.nodes})
    finally:
        close = getattr(tr, "close", None)
        if callable(close):
            close()
    job = dict(target.job)
    job.setdefault("collected_from", ",".join(target.nodes))
    return collect.from_outcomes(outcomes, job, run_dir or "")


def _topts(ssh_config: Path | None, accept: bool, concurrency: int, connect_timeout: float, command_timeout: float,
           deadline: float | None) -> dict[str, Any]:
    if ssh_config is not None and not ssh_config.is_file():
        raise UsageError(f"--ssh-config {ssh_config}: no such file")
    return {"ssh_config": ssh_config, "accept_new": accept, "concurrency": concurrency,
            "connect_timeout": connect_timeout, "command_timeout": command_timeout, "deadline": deadline}


@app.command("collect")
def collect_cmd(
    job: Annotated[str | None, typer.Option("--job", "-j", help="Slurm job id (its nodes and start time).")] = None,
    hosts: HostsOpt = None,
    run_dir: RunDirOpt = None,
    log: LogOpt = None,
    pattern: PatternOpt = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Bundle file (default triage-<job|time>.tar.gz).")] = None,
    transport: TransportOpt = "auto",
    ssh_config: SshConfigOpt = None,
    ssh_accept_new: AcceptOpt = False,
    concurrency: ConcOpt = 64,
    connect_timeout: ConnOpt = 10.0,
    command_timeout: CmdOpt = 90.0,
    deadline: DeadlineOpt = None,
    no_node_checks: NoChecksOpt = False,
) -> None:
    """Collect node probes, Xids, run-directory files, logs and live stacks from every node of a job."""
    from preflight.triage import collect

    target = _target(job, hosts)
    topts = _topts(ssh_config, ssh_accept_new, concurrency, connect_timeout, command_timeout, deadline)
    start = time.monotonic()
    bundle = do_collect(target, run_dir, list(log or []), pattern, transport, topts, not no_node_checks)
    name = f"triage-{target.job.get('job_id') or datetime.now().strftime('%Y%m%d-%H%M%S')}.tar.gz"
    path = out or Path(name)
    try:
        collect.write_bundle(bundle, path)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    bad = ", ".join(f"{n} ({e})" for n, e in sorted(bundle.errors.items()))
    sys.stderr.write(f"collected {len(bundle.nodes)}/{len(target.nodes)} node(s) in {time.monotonic() - start:.1f} s"
                     + (f"; unreachable: {bad}" if bad else "") + f"\nbundle: {path}\n")
    raise typer.Exit(0 if bundle.nodes else 1)


def _looks_like_bundle(value: str) -> bool:
    p = Path(value)
    return p.exists() and (p.is_file() or (p / "manifest.json").is_file() or (p / "bundle" / "manifest.json").is_file())


@app.command("triage")
def triage_cmd(
    target: Annotated[str | None, typer.Argument(help="A Slurm job id, or a bundle written by `preflight collect`.")] = None,
    hosts: HostsOpt = None,
    run_dir: RunDirOpt = None,
    log: LogOpt = None,
    pattern: PatternOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the JSON report on stdout.")] = False,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write triage.json and triage.md here.")] = None,
    save_bundle: Annotated[Path | None, typer.Option("--save-bundle", help="Also keep the collected bundle.")] = None,
    since: Annotated[str | None, typer.Option("--since", help="Node faults from: ISO time or age (30m, 6h); default "
                                                             "the job's start.")] = None,
    transport: TransportOpt = "auto",
    ssh_config: SshConfigOpt = None,
    ssh_accept_new: AcceptOpt = False,
    concurrency: ConcOpt = 64,
    connect_timeout: ConnOpt = 10.0,
    command_timeout: CmdOpt = 90.0,
    deadline: DeadlineOpt = None,
    no_node_checks: NoChecksOpt = False,
) -> None:
    """Name the culprit of a hang or crash: rank, node, collective and sequence number, category and action."""
    from preflight import registry as reg
    from preflight.report import Report
    from preflight.triage import attribute, collect, report

    start = time.monotonic()
    if target and _looks_like_bundle(target):
        if hosts or run_dir or log:
            raise UsageError("a bundle is triaged as collected: --hosts/--run-dir/--log do not apply")
        try:
            bundle = collect.read_bundle(Path(target))
        except collect.BundleError as exc:
            raise UsageError(str(exc)) from None
    elif target and _JOB_ID.match(target):
        bundle = do_collect(_target(target, None), run_dir, list(log or []), pattern, transport,
                            _topts(ssh_config, ssh_accept_new, concurrency, connect_timeout, command_timeout,
                                   deadline), not no_node_checks)
    elif target:
        raise UsageError(f"{target!r} is neither a bundle file nor a Slurm job id")
    else:
        if not (run_dir or log or hosts or os.environ.get("SLURM_JOB_ID")):
            raise UsageError("give a job id, a bundle, or --run-dir (with --hosts for several nodes)")
        if not hosts and os.environ.get("SLURM_JOB_ID") and not run_dir:
            bundle = do_collect(_target(os.environ["SLURM_JOB_ID"], None), run_dir, list(log or []), pattern,
                                transport, _topts(ssh_config, ssh_accept_new, concurrency, connect_timeout,
                                                  command_timeout, deadline), not no_node_checks)
        else:
            bundle = do_collect(_target(None, hosts), run_dir, list(log or []), pattern, transport,
                                _topts(ssh_config, ssh_accept_new, concurrency, connect_timeout, command_timeout,
                                       deadline), not no_node_checks)
    if save_bundle is not None:
        collect.write_bundle(bundle, save_bundle)
    since_dt = _cli.parse_since(since) if since else None
    verdict, results = attribute.triage(bundle, reg.load(), since_dt)
    rep = Report.build("triage", results, duration_s=time.monotonic() - start,
                       nodes=sorted(set(bundle.nodes) | set(bundle.errors)))
    if out is not None:
        try:
            paths = report.write(verdict, rep, out)
        except OSError as exc:
            raise UsageError(f"cannot write reports to {out}: {exc.strerror or exc}") from None
        sys.stderr.write("reports: " + ", ".join(str(p) for p in paths.values()) + "\n")
    if as_json:
        sys.stdout.write(report.to_json(verdict, rep) + "\n")
    else:
        report.console(verdict, rep)
    from preflight.history import maybe_record

    maybe_record(rep, None)  # $PREFLIGHT_HISTORY or the default store; never raises
    for e in verdict.input_errors:
        sys.stderr.write(f"preflight triage: input: {e}\n")
    if verdict.category == "unknown":
        sys.stderr.write(f"preflight triage: {verdict.summary}\n")
    if verdict.input_errors or verdict.category == "unknown":
        raise typer.Exit(2)
    raise typer.Exit(0 if verdict.category == "none" else 1)
