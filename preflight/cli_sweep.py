"""`preflight sweep`: the distributed collective sweep (all-reduce over message sizes, node-pair
ping-pong, bad-node isolation), launched locally, over SSH or with srun + torchrun.

torch is imported by the ranks only, never by this module (the CLI stays light).
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from preflight.cli import UsageError, app, load_config

_SIZE = re.compile(r"^\s*(\d+)\s*([kmgKMG]?)[iI]?[bB]?\s*$")


def parse_size(text: str) -> int:
    """'8', '64K', '64M', '1G' (powers of 1024) -> bytes."""
    m = _SIZE.match(text)
    if not m:
        raise UsageError(f"size {text!r}: use bytes or a K/M/G suffix (64M)")
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2).lower()]


@app.command("sweep")
def sweep_cmd(
    nproc: Annotated[int | None, typer.Option("--nproc", help="Run N ranks on this machine (local launch).")] = None,
    hosts: Annotated[str | None, typer.Option("--hosts", "-H", help="Nodes (hostlist, comma list or @file): one agent per node over SSH.")] = None,
    transport: Annotated[str, typer.Option("--transport", "-t", help="auto, local, ssh or srun (srun + torchrun, c10d rendezvous).")] = "auto",
    nproc_per_node: Annotated[int, typer.Option("--nproc-per-node", help="Ranks per node (GPUs per node on NCCL).")] = 1,
    ssh_config: Annotated[Path | None, typer.Option("--ssh-config", help="OpenSSH config for the system ssh client.")] = None,
    ssh_accept_new: Annotated[bool, typer.Option("--ssh-accept-new", help="Accept unknown host keys (changed keys are refused).")] = False,
    connect_timeout: Annotated[float, typer.Option("--connect-timeout", help="Seconds for ssh to connect and log in; a node's agent must answer within this + 10 s.")] = 10.0,
    backend: Annotated[str, typer.Option("--backend", help="nccl, gloo or auto (nccl where nvidia-smi exists).")] = "auto",
    dtype: Annotated[str, typer.Option("--dtype", help="float32, bfloat16, float16, float64, int32, int64, uint8.")] = "float32",
    min_bytes: Annotated[str, typer.Option("--min-bytes", help="Smallest message (8, 64K, 1M).")] = "8",
    max_bytes: Annotated[str | None, typer.Option("--max-bytes", help="Largest message; default 1G on nccl, 64M on gloo.")] = None,
    factor: Annotated[int, typer.Option("--factor", help="Size step factor (2 or 4 ...).")] = 4,
    warmup: Annotated[int, typer.Option("--warmup", help="Warm-up iterations per size.")] = 3,
    iters: Annotated[int, typer.Option("--iters", help="Timed iterations per size.")] = 10,
    op_timeout: Annotated[float, typer.Option("--op-timeout", help="Seconds one collective may take (process-group timeout).")] = 60.0,
    deadline: Annotated[float, typer.Option("--deadline", help="Seconds for the whole sweep; the watchdog kills the ranks after.")] = 600.0,
    pingpong: Annotated[str, typer.Option("--pingpong", help="Node pairs: ring (neighbours), all, none.")] = "ring",
    pp_bytes: Annotated[str | None, typer.Option("--pp-bytes", help="Ping-pong bandwidth message (default 64M nccl, 1M gloo).")] = None,
    pp_iters: Annotated[int, typer.Option("--pp-iters", help="Ping-pong round trips per size.")] = 10,
    no_isolate: Annotated[bool, typer.Option("--no-isolate", help="Do not re-pair suspects to name the bad node.")] = False,
    ifname: Annotated[str, typer.Option("--ifname", help="GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME for the ranks.")] = "",
    python: Annotated[str, typer.Option("--python", help="The ranks' python, with torch (the job's environment): default this python locally, python3 (with preflight) on the nodes.")] = "",
    profile: Annotated[str, typer.Option("--profile", "-p", help="Profile name or TOML file; auto picks it from the GPUs.")] = "auto",
    expect_busbw: Annotated[float | None, typer.Option("--expect-busbw", help="Override the fail floor (GB/s busbw) of the profile's table.")] = None,
    expect_warn_busbw: Annotated[float | None, typer.Option("--expect-warn-busbw", help="Override the warn floor (GB/s).")] = None,
    expect_min_bytes: Annotated[str | None, typer.Option("--expect-min-bytes", help="Grade the floor from this size up (default: the profile's peak_min_bytes).")] = None,
    master_addr: Annotated[str | None, typer.Option("--master-addr", help="Rendezvous address (default: first node's ssh HostName).")] = None,
    master_port: Annotated[int | None, typer.Option("--master-port", help="Rendezvous port (default: random 20000-39999).")] = None,
    partition: Annotated[str | None, typer.Option("--partition", help="srun partition.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the JSON report on stdout.")] = False,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Report folder (default reports/<timestamp>/).")] = None,
    no_report: Annotated[bool, typer.Option("--no-report", help="Do not write report files.")] = False,
    warn_as_fail: Annotated[bool, typer.Option("--warn-as-fail", help="A WARN makes the verdict NO-GO.")] = False,
) -> None:
    """All-reduce sweep over message sizes, node-pair ping-pong and bad-node isolation (GO / NO-GO)."""
    from preflight.report import Report, default_out_dir, write_all
    from preflight.sweep import report as sweep_report
    from preflight.sweep.launch import LaunchError
    from preflight.sweep.run import SweepOptions, sweep
    from preflight.sweep.spec import SpecError

    cfg = load_config()
    nodes: list[str] = []
    if hosts:
        from preflight import inventory

        try:
            nodes = inventory.parse_hosts(hosts)
        except inventory.HostlistError as exc:
            raise UsageError(str(exc)) from None
    kind = transport
    if nproc is not None:
        if hosts:
            raise UsageError("--nproc runs on this machine; use --nproc-per-node with --hosts")
        kind, nproc_per_node = "local", nproc
    elif kind == "auto" and not nodes:
        import os

        if os.environ.get("SLURM_JOB_ID"):
            kind = "srun"
            nodes = inventory_from_env()
        else:
            kind = "local"
    elif kind == "auto":
        kind = "ssh"
    if kind == "srun" and not nodes:
        nodes = inventory_from_env()
        if not nodes:
            raise UsageError("--transport srun needs an allocation (SLURM_JOB_NODELIST) or --hosts")
    if kind == "ssh" and not nodes:
        raise UsageError("--transport ssh needs --hosts")
    if ssh_config is not None and not ssh_config.is_file():
        raise UsageError(f"--ssh-config {ssh_config}: no such file")
    opts = SweepOptions(
        backend=backend, dtype=dtype, min_bytes=parse_size(min_bytes),
        max_bytes=parse_size(max_bytes) if max_bytes else None, factor=factor, warmup=warmup, iters=iters,
        op_timeout_s=op_timeout, deadline_s=deadline, nproc_per_node=nproc_per_node, pingpong=pingpong,
        pp_bytes=parse_size(pp_bytes) if pp_bytes else None, pp_iters=pp_iters, isolate=not no_isolate,
        socket_ifname=ifname, python=python, profile=profile if profile != "auto" else cfg.profile,
        profile_dirs=tuple(cfg.profile_dirs), expect_busbw=expect_busbw, expect_warn_busbw=expect_warn_busbw,
        expect_min_bytes=parse_size(expect_min_bytes) if expect_min_bytes else None, master_addr=master_addr,
        master_port=master_port, accept_new=ssh_accept_new, partition=partition, connect_timeout=connect_timeout)
    start = time.monotonic()
    try:
        run = sweep(nodes, kind, ssh_config, opts)
    except (LaunchError, SpecError) as exc:
        raise UsageError(str(exc)) from None
    report = Report.build("sweep", run.results, warn_as_fail, profiles=dict.fromkeys(run.outcome.nodes,
                                                                                      run.profile.name),
                          duration_s=time.monotonic() - start, nodes=run.outcome.nodes)
    written: dict[str, Path] = {}
    if not no_report:
        target = out or default_out_dir()
        try:
            written = write_all(report, target)
            written.update(sweep_report.write(target, run.outcome, run.results, run.profile, written))
        except OSError as exc:
            raise UsageError(f"cannot write reports to {target}: {exc.strerror or exc}") from None
    if as_json:
        sys.stdout.write(report.to_json() + "\n")
    else:
        from preflight.report.console import render

        render(report)
        if run.outcome.rows:
            sys.stdout.write(sweep_report.markdown(run.outcome, run.results, run.profile, None))
    if written and not as_json:
        sys.stderr.write("reports: " + ", ".join(str(p) for p in written.values()) + "\n")
    from preflight.history import maybe_record

    maybe_record(report, None)  # $PREFLIGHT_HISTORY or the default store; never raises
    no_torch = next((r for r in run.results if r.facts.get("reason") == "no-torch"), None)
    if no_torch is not None:  # asked for a sweep and none could run: not a GO
        raise UsageError(f"{no_torch.summary}; {no_torch.remedy}")
    raise typer.Exit(report.verdict.exit_code)


def inventory_from_env() -> list[str]:
    """The allocation's nodes (SLURM_JOB_NODELIST) for an srun launch."""
    from preflight import inventory

    try:
        return inventory.from_environment() or []
    except inventory.HostlistError as exc:
        raise UsageError(str(exc)) from None
