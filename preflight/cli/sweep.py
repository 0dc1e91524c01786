"""`preflight sweep`: the distributed collective sweep (all-reduce over message sizes, node-pair
ping-pong, bad-node isolation), launched locally, over SSH or with srun + torchrun.

torch is imported by the ranks only, never by this module (the CLI stays light).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from preflight.cli import options as opt
from preflight.cli.app import app


@app.command("sweep")
def sweep_cmd(
    nproc: Annotated[int | None, typer.Option("--nproc", help="Run N ranks on this machine (local launch).")] = None,
    hosts: Annotated[str | None, typer.Option("--hosts", "-H", help="Nodes (hostlist, comma list or @file): one agent per node over SSH.")] = None,
    exclude: Annotated[str | None, typer.Option("--exclude", "-x", help="Leave these nodes of --hosts out (hostlist or @file).")] = None,
    transport: Annotated[str, typer.Option("--transport", "-t", help="auto, local, ssh or srun (srun + torchrun, c10d rendezvous).")] = "auto",
    nproc_per_node: Annotated[int, typer.Option("--nproc-per-node", help="Ranks per node (GPUs per node on NCCL).")] = 1,
    ssh_config: Annotated[Path | None, typer.Option("--ssh-config", help="OpenSSH config for the system ssh client.")] = None,
    ssh_accept_new: Annotated[bool, typer.Option("--ssh-accept-new", help="Accept unknown host keys (changed keys are refused).")] = False,
    connect_timeout: Annotated[float | None, typer.Option("--connect-timeout", help="Seconds for ssh to connect and log in (default: the host's ConnectTimeout in the ssh config, else 10); a node's agent must answer within this + 10 s.")] = None,
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
    profile: opt.ProfileOpt = None,
    expect_busbw: Annotated[float | None, typer.Option("--expect-busbw", help="Override the fail floor (GB/s busbw) of the profile's table.")] = None,
    expect_warn_busbw: Annotated[float | None, typer.Option("--expect-warn-busbw", help="Override the warn floor (GB/s).")] = None,
    expect_min_bytes: Annotated[str | None, typer.Option("--expect-min-bytes", help="Grade the floor from this size up (default: the profile's peak_min_bytes).")] = None,
    master_addr: Annotated[str | None, typer.Option("--master-addr", help="Rendezvous address (default: first node's ssh HostName).")] = None,
    master_port: Annotated[int | None, typer.Option("--master-port", help="Rendezvous port (default: random 20000-39999).")] = None,
    partition: Annotated[str | None, typer.Option("--partition", help="srun partition.")] = None,
    as_json: opt.JsonOpt = False,
    out: opt.OutOpt = None,
    no_report: opt.NoReportOpt = False,
    warn_as_fail: opt.WarnOpt = False,
    bad_nodes: opt.BadNodesOpt = None,
    per_node: opt.PerNodeOpt = False,
) -> None:
    """All-reduce sweep over message sizes, node-pair ping-pong and bad-node isolation (GO / NO-GO)."""
    from preflight import engine
    from preflight.report.emit import Output, choose_sinks, emit
    from preflight.sweep.run import SweepOptions

    cfg = engine.load_config()
    if exclude is not None and not hosts:
        opt.usage("--exclude needs --hosts (the nodes to take them from)")
    nodes = engine.select_nodes(hosts, exclude=exclude) if hosts else []
    options = SweepOptions(
        backend=backend, dtype=dtype, min_bytes=opt.size(min_bytes),
        max_bytes=opt.size(max_bytes) if max_bytes else None, factor=factor, warmup=warmup, iters=iters,
        op_timeout_s=op_timeout, deadline_s=deadline, nproc_per_node=nproc_per_node, pingpong=pingpong,
        pp_bytes=opt.size(pp_bytes) if pp_bytes else None, pp_iters=pp_iters, isolate=not no_isolate,
        socket_ifname=ifname, python=python, profile=cfg.resolve_profile(profile), expect_busbw=expect_busbw,
        expect_warn_busbw=expect_warn_busbw, expect_min_bytes=opt.size(expect_min_bytes) if expect_min_bytes else None,
        master_addr=master_addr, master_port=master_port, accept_new=ssh_accept_new, partition=partition,
        connect_timeout=connect_timeout)
    swept = engine.sweep_command(nodes or [], transport, nproc, ssh_config, options, cfg, warn_as_fail)
    emit(swept.report, choose_sinks(Output(as_json=as_json, out=out, write_files=not no_report,
                                           history=cfg.resolve_history(None),
                                           bad_nodes=bad_nodes),
                                    writer=swept.write, render=lambda r: swept.console(r, per_node)))
    no_torch = swept.no_torch()
    if no_torch is not None:  # asked for a sweep and none could run: not a GO
        opt.usage(no_torch)
    raise typer.Exit(swept.report.verdict.exit_code)
