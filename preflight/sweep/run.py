"""The sweep from start to results: build the spec from options and the profile, launch,
collect, grade. `run_sweep` is what `preflight run` calls after the node checks pass;
`sweep` also returns the outcome for the sweep's own report pages.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from preflight.model import Result, Status
from preflight.profile import Profile, ProfileError, autodetect, load
from preflight.sweep import launch as launcher
from preflight.sweep.outcome import GROUP, SweepOutcome, collect, effective_profile, grade, group_floor
from preflight.sweep.pairs import Isolation
from preflight.sweep.spec import DEFAULT_MAX_BYTES, DEFAULT_MAX_BYTES_GLOO, SweepSpec
from preflight.transport import choose_kind


@dataclass
class SweepOptions:
    backend: str = "auto"  # auto: nccl where nvidia-smi is on this machine's PATH, else gloo
    dtype: str = "float32"
    min_bytes: int = 8
    max_bytes: int | None = None  # None: 1 GB on nccl, 64 MB on gloo
    factor: int = 4
    warmup: int = 3
    iters: int = 10
    op_timeout_s: float = 60.0
    deadline_s: float = 600.0
    nproc_per_node: int = 1
    pingpong: str = "ring"
    pp_bytes: int | None = None  # None: 64 MB on nccl, 1 MB on gloo
    pp_iters: int = 10
    isolate: bool = True
    socket_ifname: str = ""
    python: str = ""  # the ranks' interpreter: "" = this one locally, python3 on the nodes (ssh / srun)
    profile: str = "auto"
    profile_dirs: tuple[Path, ...] = ()
    expect_busbw: float | None = None
    expect_warn_busbw: float | None = None
    expect_min_bytes: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    connect_timeout: float | None = None  # None: each host's ssh_config ConnectTimeout, else 10 s
    accept_new: bool = False
    partition: str | None = None
    allreduce: bool = True
    start_timeout_s: float | None = None  # each node's agent answers within this (default: connect timeout + 10 s)
    stall_s: float = 20.0  # no bytes from a started node's agent for this long ends the launch


@dataclass
class SweepRun:
    outcome: SweepOutcome
    results: list[Result]
    profile: Profile
    isolation: Isolation
    spec: SweepSpec
    argv: dict[str, list[str]] = field(default_factory=dict)


def pick_backend(backend: str) -> str:
    if backend != "auto":
        return backend
    return "nccl" if shutil.which("nvidia-smi") else "gloo"


def build_spec(o: SweepOptions, profile: Profile, multi_node: bool) -> SweepSpec:
    backend = pick_backend(o.backend)
    max_bytes = o.max_bytes or (DEFAULT_MAX_BYTES if backend == "nccl" else DEFAULT_MAX_BYTES_GLOO)
    pp = o.pp_bytes or ((64 << 20) if backend == "nccl" else (1 << 20))
    floor, floor_from = group_floor(profile, multi_node)
    spec = SweepSpec(backend=backend, dtype=o.dtype, min_bytes=o.min_bytes, max_bytes=max_bytes, factor=o.factor,
                     warmup=o.warmup, iters=o.iters, op_timeout_s=o.op_timeout_s, deadline_s=o.deadline_s,
                     allreduce=o.allreduce, pingpong=o.pingpong, pp_large_bytes=pp, pp_iters=o.pp_iters,
                     isolate=o.isolate, pair_min_gbps=float(profile.get("sweep.pingpong_min_gbps") or 0.0),
                     pair_slow_ratio=float(profile.get("sweep.pair_slow_ratio") or 0.0),
                     group_floor_busbw=floor, group_floor_min_bytes=floor_from,
                     socket_ifname=launcher.check_ifname(o.socket_ifname))
    spec.validate()
    return spec


def _profile(o: SweepOptions, model: str | None = None, per_node: int | None = None) -> Profile:
    name = o.profile
    if name == "auto":
        name = autodetect(model, per_node, o.profile_dirs)
    base = load(name, o.profile_dirs)
    return effective_profile(base, o.expect_busbw, o.expect_min_bytes, o.expect_warn_busbw)


def this_node_names() -> set[str]:
    """The names this machine answers to (short and full host name, localhost)."""
    import socket

    names = {"localhost", "127.0.0.1", "::1"}
    for n in (socket.gethostname(), socket.getfqdn()):
        if n:
            names |= {n, n.split(".")[0]}
    return names


def is_this_node(nodes: list[str]) -> bool:
    """True when the node list is only this machine (by any of its names): a sweep there is
    launched locally, never over SSH to itself."""
    return bool(nodes) and all(n in this_node_names() for n in nodes)


def sweep(nodes: list[str], transport_kind: str = "auto", ssh_config: Path | None = None,
          options: SweepOptions | None = None) -> SweepRun:
    """Launch, measure, grade. Never raises for a cluster fault: those are Results."""
    o = options or SweepOptions()
    try:
        kind = choose_kind(transport_kind, nodes)
    except ValueError as exc:
        raise launcher.LaunchError(str(exc)) from None
    if kind != "local" and is_this_node(nodes):
        kind = "local"  # this machine alone (its own name, a one-node allocation we run on): no ssh, no srun
    prof = _profile(o)
    multi = kind != "local" and len(nodes) > 1
    spec = build_spec(o, prof, multi)
    if kind == "local":
        from preflight.transport.local import local_node_name

        name = local_node_name() if not nodes or is_this_node(nodes) else nodes[0]
        launched = launcher.launch_local(spec, o.nproc_per_node, local_python(o.python), node=name,
                                         master_port=o.master_port, stall_s=o.stall_s,
                                         **({"start_s": o.start_timeout_s} if o.start_timeout_s else {}))
        nodes = [name]
    elif kind == "ssh":
        launched = launcher.launch_ssh(spec, nodes, o.nproc_per_node, ssh_config, o.python or "python3",
                                       o.master_addr, o.master_port, o.connect_timeout, o.accept_new,
                                       start_s=o.start_timeout_s, stall_s=o.stall_s)
    else:
        launched = launcher.launch_srun(spec, nodes, o.nproc_per_node, o.python or "python3", o.partition,
                                        o.master_port,
                                        **({"start_s": o.start_timeout_s} if o.start_timeout_s else {}))
    out = collect(launched, spec, nodes if kind != "srun" else [])
    if o.profile == "auto":
        models = {str(h.get("model")) for h in out.ranks.values() if h.get("backend") == "nccl"}
        if len(models) == 1:
            try:
                prof = _profile(o, models.pop(), o.nproc_per_node)
            except ProfileError:
                pass
    results, iso = grade(out, prof)
    return SweepRun(outcome=out, results=results, profile=prof, isolation=iso, spec=spec, argv=launched.argv)


def local_python(python: str) -> str:
    """The interpreter of a local launch: the one given, else the one running preflight."""
    import sys

    return python or sys.executable


def run_sweep(nodes: list[str], transport_kind: str, ssh_config: Path | None = None,
              options: SweepOptions | None = None) -> list[Result]:
    """The collective sweep as `preflight run` uses it: results only (nccl.allreduce,
    nccl.pingpong, nccl.transport). Bad input (sizes, names) is an ERROR result, not an
    exception."""
    try:
        return sweep(nodes, transport_kind, ssh_config, options).results
    except (launcher.LaunchError, ValueError, ProfileError) as exc:
        return [Result(check="nccl.allreduce", node=GROUP, status=Status.ERROR,
                       summary=f"sweep not started: {exc}", evidence=[str(exc)],
                       remedy="fix the sweep options (sizes, dtype, node names, interface)", source="sweep")]
