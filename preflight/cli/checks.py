"""The check commands: `run`, `node`, `list`, `profiles`, `analyze`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from preflight.cli import options as opt
from preflight.cli.app import app
from preflight.interrupt import guarded
from preflight.report.progress import live_progress

if TYPE_CHECKING:
    from preflight.policy import Policy
    from preflight.registry import Registry


@app.command()
@guarded  # SIGINT/SIGTERM: its probes ended, what finished reported INTERRUPTED, exit 128 + the signal
def run(
    profile: opt.ProfileOpt = None,
    checks_dir: opt.ChecksDirOpt = None,
    only: opt.OnlyOpt = None,
    skip: opt.SkipOpt = None,
    as_json: opt.JsonOpt = False,
    out: opt.OutOpt = None,
    no_report: opt.NoReportOpt = False,
    warn_as_fail: opt.WarnOpt = False,
    xid_since: opt.XidOpt = None,
    probe_timeout: opt.TimeoutOpt = 10.0,
    peer: opt.PeersOpt = None,
    hosts: opt.HostsOpt = None,
    partition: Annotated[str | None, typer.Option("--partition", help="All nodes of a Slurm partition (scontrol).")] = None,
    nodelist: Annotated[str | None, typer.Option("--nodelist", help="A Slurm nodelist resolved by scontrol.")] = None,
    exclude: opt.ExcludeOpt = None,
    bad_nodes: opt.BadNodesOpt = None,
    transport: Annotated[str, typer.Option("--transport", "-t", help="auto (srun in an allocation, else ssh with hosts, else local), local, ssh, srun.")] = "auto",
    ssh_config: opt.SshConfigOpt = None,
    ssh_accept_new: opt.AcceptOpt = False,
    concurrency: opt.ConcOpt = 64,
    ssh_handshakes: opt.HandshakesOpt = 8,
    connect_timeout: opt.ConnOpt = None,
    command_timeout: Annotated[float, typer.Option("--command-timeout", help="Seconds for a node's probe bundle.")] = 60.0,
    deadline: opt.DeadlineOpt = None,
    mtu_all_pairs: Annotated[bool, typer.Option("--mtu-all-pairs", help="Ping every pair of nodes, not only ring neighbours.")] = False,
    expect_nodes: Annotated[int | None, typer.Option("--expect-nodes", help="Nodes the job needs; fewer answering is NO-GO.")] = None,
    no_sweep: Annotated[bool, typer.Option("--no-sweep", help="Node and cross-node checks only, no collective sweep.")] = False,
    sweep_only: Annotated[bool, typer.Option("--sweep-only", help="The collective sweep only, no node checks.")] = False,
    sweep_nproc: Annotated[int, typer.Option("--sweep-nproc", help="Ranks per node for the sweep (0: one per GPU found).")] = 0,
    sweep_max_bytes: Annotated[int | None, typer.Option("--sweep-max-bytes", help="Largest all-reduce size (default 1 GB on NCCL, 64 MB on gloo).")] = None,
    sweep_deadline: Annotated[float, typer.Option("--sweep-deadline", help="Seconds for the whole sweep; a hang ends there. Not cut by --deadline, but the sweep does not start once --deadline has passed.")] = 600.0,
    sweep_python: Annotated[str, typer.Option("--sweep-python", help="The python that runs the sweep's ranks: the job's environment, with torch (default: this python locally, python3 on the nodes).")] = "",
    sweep_backend: Annotated[str, typer.Option("--sweep-backend", help="nccl, gloo or auto (nccl where nvidia-smi exists).")] = "auto",
    sweep_profile: Annotated[str | None, typer.Option("--sweep-profile", help="Profile for grading the sweep (default: --profile).")] = None,
    history: opt.HistoryOpt = None,
    prometheus: opt.PrometheusOpt = None,
    quiet: opt.QuietOpt = False,
    per_node: opt.PerNodeOpt = False,
) -> None:
    """Run every check (on this node, or on --hosts / the allocation) and give the GO / NO-GO verdict."""
    from preflight import engine
    from preflight.report.emit import Output, choose_sinks, emit

    cfg = engine.load_config()
    req = engine.CheckRequest(
        command="run", profile=profile, checks_dirs=list(checks_dir or []), only=list(only or []),
        skip=list(skip or []), xid_since=opt.xid_since(xid_since), probe_timeout=probe_timeout,
        peers=list(peer or []), nodes=engine.select_nodes(hosts, partition, nodelist, exclude), transport=transport,
        transport_options=engine.TransportOptions(
            ssh_config=ssh_config, accept_new=ssh_accept_new, concurrency=concurrency,
            connect_timeout=connect_timeout, command_timeout=command_timeout, deadline=deadline,
            partition=partition, ssh_handshakes=ssh_handshakes),
        mtu_all_pairs=mtu_all_pairs, expect_nodes=expect_nodes, warn_as_fail=warn_as_fail)
    sweep = engine.SweepRequest(enabled=not no_sweep, forced=sweep_only, nproc=sweep_nproc,
                                max_bytes=sweep_max_bytes, deadline=sweep_deadline, python=sweep_python,
                                backend=sweep_backend, profile=sweep_profile)
    with live_progress() as tick:
        report = engine.run_checks(req, sweep, cfg, tick)
    emit(report, choose_sinks(Output(as_json=as_json, out=out, write_files=not no_report,
                                     history=cfg.resolve_history(history),
                                     bad_nodes=bad_nodes, failures_only=quiet, per_node=per_node,
                                     prometheus=prometheus or cfg.prometheus)))
    raise typer.Exit(report.verdict.exit_code)


@app.command()
@guarded  # SIGINT/SIGTERM: its probes ended, what finished reported INTERRUPTED, exit 128 + the signal
def node(
    profile: opt.ProfileOpt = None,
    checks_dir: opt.ChecksDirOpt = None,
    only: opt.OnlyOpt = None,
    skip: opt.SkipOpt = None,
    as_json: opt.JsonOpt = False,
    out: opt.OutOpt = None,
    warn_as_fail: opt.WarnOpt = False,
    xid_since: opt.XidOpt = None,
    probe_timeout: opt.TimeoutOpt = 10.0,
    deadline: opt.DeadlineOpt = None,
    history: opt.HistoryOpt = None,
    bad_nodes: opt.BadNodesOpt = None,
    prometheus: opt.PrometheusOpt = None,
    quiet: opt.QuietOpt = False,
    per_node: opt.PerNodeOpt = False,
) -> None:
    """Node-local checks only: light and fast, for prologues and health-check programs."""
    from preflight import engine
    from preflight.report.emit import Output, choose_sinks, emit

    cfg = engine.load_config()
    req = engine.CheckRequest(command="node", node_only=True, profile=profile, checks_dirs=list(checks_dir or []),
                              only=list(only or []), skip=list(skip or []), xid_since=opt.xid_since(xid_since),
                              probe_timeout=probe_timeout, warn_as_fail=warn_as_fail,
                              transport_options=engine.TransportOptions(deadline=deadline))
    with live_progress() as tick:
        report = engine.check_nodes(req, cfg, tick)
    emit(report, choose_sinks(Output(as_json=as_json, out=out, write_files=out is not None,
                                     history=cfg.resolve_history(history),
                                     bad_nodes=bad_nodes, failures_only=quiet, per_node=per_node,
                                     prometheus=prometheus or cfg.prometheus)))
    raise typer.Exit(report.verdict.exit_code)


@app.command("list")
def list_checks(
    checks_dir: opt.ChecksDirOpt = None,
    as_json: opt.JsonOpt = False,
) -> None:
    """List the registered checks: id, probes, profile keys, what each catches."""
    from preflight import engine

    rows = engine.check_table(list(checks_dir or []), engine.load_config())
    if as_json:
        import json

        from preflight.report.base import SCHEMA_VERSION

        sys.stdout.write(json.dumps({"schema_version": SCHEMA_VERSION, "checks": rows}, indent=2) + "\n")
        return
    from preflight.report.console import render_checks

    render_checks(rows)


@app.command()
def profiles(
    show: Annotated[str | None, typer.Option("--show", help="Print one profile's values and their sources.")] = None,
) -> None:
    """List the profiles (expected tables), or show one with every value's provenance."""
    from preflight import engine

    cfg = engine.load_config()
    if show:
        p = engine.show_profile(show, cfg)
        sys.stdout.write(f"# {p.name}: {p.description}\n# file: {p.path}\n")
        for k in sorted(p.values):
            src = p.source(k)
            sys.stdout.write(f"{k} = {p.values[k]!r}" + (f"    # {src}" if src else "") + "\n")
        return
    for name, desc, path in engine.profile_list(cfg):
        sys.stdout.write(f"{name:20s} {desc}  [{path}]\n")


@app.command()
def analyze(
    paths: Annotated[list[Path], typer.Argument(
        help="Files, folders of files, folders of per-node folders, archives, or - for standard input "
             "(pdsh/clush/srun -l output is split per node).")],
    profile: opt.ProfileOpt = None,
    checks_dir: opt.ChecksDirOpt = None,
    as_json: opt.JsonOpt = False,
    out: opt.OutOpt = None,
    warn_as_fail: opt.WarnOpt = False,
    xid_since: opt.XidOpt = None,
    history: opt.HistoryOpt = "off",
    bad_nodes: opt.BadNodesOpt = None,
    quiet: opt.QuietOpt = False,
    per_node: opt.PerNodeOpt = False,
    jobs: Annotated[int | None, typer.Option(
        "--jobs", "-j", min=1,
        help="Processes that grade the inputs' node folders side by side (default: the CPUs this process may "
             "use; 1: one process). The report is the same whatever the number.")] = None,
) -> None:
    """Grade captured tool outputs and logs (classified by content) with the same checks."""
    from preflight import engine, offline
    from preflight.report.emit import Output, choose_sinks, emit

    cfg = engine.load_config()
    report = offline.analyze_paths(list(paths), cfg, cfg.resolve_profile(profile), list(checks_dir or []),
                                  opt.xid_since(xid_since),
                                  warn_as_fail, jobs=jobs)
    emit(report, choose_sinks(Output(as_json=as_json, out=out, write_files=out is not None, history=history,
                                     bad_nodes=bad_nodes, failures_only=quiet, per_node=per_node)))
    raise typer.Exit(report.verdict.exit_code)


@app.command()
def explain(
    name: Annotated[str | None, typer.Argument(help="A finding code (gpu.inventory/mig-enabled), a check (gpu.xid) "
                                                     "or a family (gpu); none: every code.")] = None,
    checks_dir: opt.ChecksDirOpt = None,
    as_json: opt.JsonOpt = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="The whole reference page (checks/policy.md).")] = False,
    readme: Annotated[bool, typer.Option("--readme", help="The README's check table.")] = False,
) -> None:
    """What a finding code means, its status (and this site's, when the config changes it), why, and its source."""
    from preflight import engine, policy, reference

    cfg = engine.load_config()
    rows = engine.check_table(list(checks_dir or []), cfg)  # installs the site's policy
    pol = policy.active()
    if markdown or readme:
        if readme:
            sys.stdout.write(reference.readme_table(pol, rows))
        else:
            sys.stdout.write(reference.markdown_page(pol, {str(r["id"]): str(r["catches"]) for r in rows}))
        return
    codes = reference.lookup(pol, name) if name else sorted(pol.codes.values(), key=lambda c: c.code)
    if not codes:
        _explain_uncoded(name or "", engine.load_registry(list(checks_dir or []), cfg), pol)
        return
    if as_json:
        import json

        from preflight.report.base import SCHEMA_VERSION

        sys.stdout.write(json.dumps({"schema_version": SCHEMA_VERSION,
                                     "codes": [reference.entry_json(pol, c) for c in codes]}, indent=2) + "\n")
        return
    sys.stdout.write("\n".join(reference.entry_text(pol, c) for c in codes))


def _explain_uncoded(name: str, reg: Registry, pol: Policy) -> None:
    """`explain NAME` for a name with no code in the policy table: a known check (a site
    check, an id another command reports) says so; an unknown name is a usage error naming the
    closest code, check or family."""
    from preflight import engine, reference

    known = reg.matches([name])
    if not known:
        raise engine.UsageError(f"no finding code or check {name!r}{reference.suggestion(pol, name, reg.known_ids())} "
                                "(`preflight explain` lists every code)")
    sys.stdout.write(f"{name}: no finding codes in the policy table for {', '.join(known)}; "
                     "its results carry their own summary and status (`preflight list` says what each catches)\n")
