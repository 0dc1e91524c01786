"""The `preflight` command line.

Exit codes: 0 GO, 1 NO-GO, 2 could not run (bad arguments, bad profile, broken site check).
The node/prologue path imports neither torch nor pandas; heavy modules load lazily.
"""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated, Any

import typer

from preflight import __version__
from preflight.grading import EXIT_USAGE

app = typer.Typer(
    name="preflight",
    help="Cluster preflight and diagnostics for GPU training clusters: is this allocation fit to train on?",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


class UsageError(Exception):
    """Bad input from the operator: reported in one line, exit code 2."""


@dataclass
class Config:
    """Site configuration: $PREFLIGHT_CONFIG, else /etc/preflight/config.toml (optional)."""

    checks_dirs: list[Path] = field(default_factory=list)
    profile_dirs: list[Path] = field(default_factory=list)
    profile: str = "auto"
    path: str = ""


def load_config() -> Config:
    path = Path(os.environ.get("PREFLIGHT_CONFIG", "/etc/preflight/config.toml"))
    if not path.is_file():
        if "PREFLIGHT_CONFIG" in os.environ:
            raise UsageError(f"config file {path} (PREFLIGHT_CONFIG) does not exist")
        return Config()
    from preflight.profile import _read_toml

    try:
        data = _read_toml(path)
    except Exception as exc:
        raise UsageError(f"config file {path}: {exc}") from None
    base = path.parent
    try:
        return Config(
            checks_dirs=[base / Path(p) for p in data.get("checks_dirs", [])],
            profile_dirs=[base / Path(p) for p in data.get("profile_dirs", [])],
            profile=str(data.get("profile", "auto")),
            path=str(path),
        )
    except TypeError:
        raise UsageError(f"config file {path}: checks_dirs and profile_dirs must be lists of folders") from None


_REL = re.compile(r"^\s*(\d+)\s*([smhd])\s*$")


def parse_since(value: str | None) -> datetime | None:
    """`--xid-since`: 'boot' (default), an ISO time, or a relative age like 30m, 6h, 2d."""
    if value is None or value.strip().lower() in ("", "boot"):
        return None
    m = _REL.match(value)
    if m:
        unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[m.group(2)]
        return datetime.now(timezone.utc) - timedelta(**{unit: int(m.group(1))})
    try:
        t = datetime.fromisoformat(value.strip())
    except ValueError:
        raise UsageError(f"--xid-since {value!r}: use 'boot', an ISO time (2024-06-03T10:00) or an age (30m, 6h, 2d)") from None
    return t if t.tzinfo else t.astimezone()


def _registry(checks_dir: list[Path] | None, cfg: Config) -> Any:
    from preflight import registry

    return registry.load([*cfg.checks_dirs, *(checks_dir or [])])


class NodeProgress:
    """Counts per node: done (every probe back), failed (a node-level fault), pending. The
    engine tells it what each node's bundle holds and which nodes failed; `line()` is the text."""

    def __init__(self, on_change: Any = None) -> None:
        self.expected: dict[str, int] = {}
        self.seen: dict[str, int] = {}
        self.failed: set[str] = set()
        self.probes_failed = 0
        self.on_change = on_change

    def expect(self, bundles: dict[str, int]) -> None:
        for node, n in bundles.items():
            self.expected[node] = self.seen.get(node, 0) + n
        self._changed()

    def __call__(self, node: str, capture: Any) -> None:
        self.seen[node] = self.seen.get(node, 0) + 1
        if not capture.ok:
            self.probes_failed += 1
        self._changed()

    def node_failed(self, node: str) -> None:
        self.failed.add(node)
        self._changed()

    def line(self) -> str:
        done = [n for n, want in self.expected.items() if n not in self.failed and self.seen.get(n, 0) >= want]
        pending = len(self.expected) - len(done) - len(self.failed)
        probes = sum(self.seen.values())
        extra = f", {self.probes_failed} probe(s) not ok" if self.probes_failed else ""
        return (f"nodes: {len(done)} done, {len(self.failed)} failed, {pending} pending "
                f"({probes} probe results{extra})")

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self.line())


def _progress(enabled: bool) -> tuple[Any, Any]:
    """A live nodes done / failed / pending display on stderr (only on a terminal)."""
    if not enabled or not sys.stderr.isatty():
        return None, None
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn

    prog = Progress(SpinnerColumn(), TextColumn("{task.description}"), console=Console(stderr=True), transient=True)
    task = prog.add_task("running probes", total=None)
    return prog, NodeProgress(lambda text: prog.update(task, description=text))


def _emit(report: Any, as_json: bool, out: Path | None, write_files: bool, quiet: bool = False,
          history: str | None = None) -> None:
    """Write the report files, print the report, and record it in the history store."""
    from preflight.history import maybe_record
    from preflight.report import default_out_dir, write_all

    maybe_record(report, history)  # never raises; `off` (or PREFLIGHT_HISTORY=off) records nothing

    written: dict[str, Path] = {}
    if write_files:
        target = out or default_out_dir()
        try:
            written = write_all(report, target)
        except OSError as exc:
            raise UsageError(f"cannot write reports to {target}: {exc.strerror or exc}") from None
    if as_json:
        sys.stdout.write(report.to_json() + "\n")
    elif not quiet:
        from preflight.report.console import render

        render(report)
    if written and not as_json:
        sys.stderr.write("reports: " + ", ".join(str(p) for p in written.values()) + "\n")


def _select_nodes(hosts: str | None, partition: str | None, nodelist: str | None) -> list[str] | None:
    """--hosts, or --partition/--nodelist through scontrol, or the allocation's nodes; None = this node."""
    from preflight import inventory

    try:
        if hosts:
            return inventory.parse_hosts(hosts)
        if partition or nodelist:
            return inventory.hostnames_for(partition=partition, nodelist=nodelist)
        return inventory.from_environment()
    except inventory.HostlistError as exc:
        raise UsageError(str(exc)) from None


def _make_transport(kind: str, nodes: list[str], o: dict[str, Any]) -> Any:
    if kind == "auto":
        kind = "srun" if os.environ.get("SLURM_JOB_ID") and o.get("in_allocation", True) else "ssh"
    if kind == "local":
        from preflight.transport.local import LocalTransport

        return LocalTransport()
    if kind == "ssh":
        from preflight.transport.ssh import SSHTransport

        return SSHTransport(ssh_config=o.get("ssh_config"), concurrency=o["concurrency"],
                            connect_timeout=o["connect_timeout"], command_timeout=o["command_timeout"],
                            deadline=o.get("deadline"), accept_new_host_keys=o.get("accept_new", False))
    if kind == "srun":
        from preflight.transport.srun import SrunTransport

        return SrunTransport(deadline=o.get("deadline"), partition=o.get("partition"))
    raise UsageError(f"--transport {kind!r}: use auto, local, ssh or srun")


def _peer_addresses(nodes: list[str], transport: Any) -> dict[str, str]:
    """node -> the address its peers should ping (the ssh config's HostName when there is one)."""
    resolve = getattr(transport, "resolve_hostname", None)
    out = {}
    for n in nodes:
        addr = n
        if callable(resolve):
            try:
                addr = resolve(n) or n
            except Exception:
                addr = n
        out[n] = addr
    return out


def _local_run(command: str, node_only: bool, profile: str, checks_dir: list[Path] | None, only: list[str] | None,
               skip: list[str] | None, xid_since: str | None, probe_timeout: float, peers: list[str] | None,
               cfg: Config, nodes: list[str] | None = None, transport: str = "auto",
               topts: dict[str, Any] | None = None, mtu_all_pairs: bool = False,
               expect_nodes: int | None = None) -> Any:
    from preflight import engine
    from preflight.registry import Options
    from preflight.report import Report
    from preflight.transport.local import LocalTransport, local_node_name

    reg = _registry(checks_dir, cfg)
    checks = engine.select(reg, only or (), skip or (), node_only=node_only)
    if not checks:
        raise UsageError("no check selected (see `preflight list`)")
    opts = Options(peers=list(peers or []), xid_since=parse_since(xid_since), probe_timeout=probe_timeout)
    if expect_nodes:
        opts.extra["expect_nodes"] = expect_nodes
    if not nodes:
        if transport not in ("auto", "local"):
            raise UsageError(f"--transport {transport} needs nodes (--hosts, --partition/--nodelist or an allocation)")
        nodes = [local_node_name()]
        tr: Any = LocalTransport()
        remote = False
    else:
        if transport == "local" and len(nodes) > 1:
            raise UsageError("--transport local runs on this node only; use ssh or srun for several hosts")
        from preflight.sweep.run import is_this_node

        if transport == "auto" and not os.environ.get("SLURM_JOB_ID") and is_this_node(nodes):
            transport = "local"  # --hosts naming this machine alone: never SSH to ourselves
        tr = _make_transport(transport, nodes, topts or {})
        remote = not isinstance(tr, LocalTransport)
    peer_map: Any = {}
    addresses: dict[str, str] = {}
    cluster: list[Any] = []
    if remote and len(nodes) > 1:
        from preflight import inventory

        addr = _peer_addresses(nodes, tr)
        addresses = {a: n for n, a in addr.items()}

        def peer_map(answered: list[str]) -> dict[str, list[str]]:
            # the ring is drawn over the nodes that answered: an unreachable node is not a peer
            pairs = inventory.all_pairs(answered) if mtu_all_pairs else inventory.ring_peers(answered)
            return {n: [addr[p] for p in ps] for n, ps in pairs.items()}

        cluster = list(reg.cluster_checks.values()) if not node_only else []
    elif expect_nodes:
        cluster = [c for c in reg.cluster_checks.values() if c.id == "cluster.nodes"]
    if only:
        cluster = [c for c in cluster if any(c.id == p or c.id.startswith(p.rstrip(".") + ".") for p in only)
                   or c.id in ("cluster.mtu",) and any("net.mtu".startswith(p) for p in only)]
    prog, tick = _progress(True)
    start = time.monotonic()
    if prog is not None:
        prog.start()
    try:
        results, used = engine.run(reg, checks, nodes, tr, profile_name=profile or cfg.profile,
                                   options=opts, extra_profile_dirs=tuple(cfg.profile_dirs), progress=tick,
                                   peers=peer_map, cluster_checks=cluster, addresses=addresses)
    finally:
        if prog is not None:
            prog.stop()
        close = getattr(tr, "close", None)
        if callable(close):
            close()
    return Report.build(command, results, profiles={n: p.name for n, p in used.items()},
                        duration_s=time.monotonic() - start, nodes=nodes)


ProfileOpt = Annotated[str, typer.Option("--profile", "-p", help="Profile name or TOML file; 'auto' detects it from the GPUs.")]
ChecksDirOpt = Annotated[list[Path] | None, typer.Option("--checks-dir", help="Folder of site checks (*.py); repeatable.")]
OnlyOpt = Annotated[list[str] | None, typer.Option("--only", help="Run only these checks or families (gpu, net.mtu); repeatable.")]
SkipOpt = Annotated[list[str] | None, typer.Option("--skip", help="Skip these checks or families; repeatable.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the JSON report on stdout.")]
OutOpt = Annotated[Path | None, typer.Option("--out", "-o", help="Report folder (default reports/<timestamp>/).")]
WarnOpt = Annotated[bool, typer.Option("--warn-as-fail", help="A WARN makes the verdict NO-GO.")]
XidOpt = Annotated[str | None, typer.Option("--xid-since", help="Kernel-log window: boot (default), ISO time, or 30m/6h/2d.")]
TimeoutOpt = Annotated[float, typer.Option("--probe-timeout", help="Seconds before a hung probe is killed.")]
HistoryOpt = Annotated[str | None, typer.Option("--history", help="History store: sqlite:///path, postgresql://..., or off (default $PREFLIGHT_HISTORY, else ~/.local/share/preflight/history.db).")]
PeersOpt = Annotated[list[str] | None, typer.Option("--peer", help="Peer node for MTU path pings; repeatable.")]


@app.command()
def run(
    profile: ProfileOpt = "auto",
    checks_dir: ChecksDirOpt = None,
    only: OnlyOpt = None,
    skip: SkipOpt = None,
    as_json: JsonOpt = False,
    out: OutOpt = None,
    no_report: Annotated[bool, typer.Option("--no-report", help="Do not write report files.")] = False,
    warn_as_fail: WarnOpt = False,
    xid_since: XidOpt = None,
    probe_timeout: TimeoutOpt = 10.0,
    peer: PeersOpt = None,
    hosts: Annotated[str | None, typer.Option("--hosts", "-H", help="Nodes: Slurm hostlist (gpu[001-016]), comma list or @file.")] = None,
    partition: Annotated[str | None, typer.Option("--partition", help="All nodes of a Slurm partition (scontrol).")] = None,
    nodelist: Annotated[str | None, typer.Option("--nodelist", help="A Slurm nodelist resolved by scontrol.")] = None,
    transport: Annotated[str, typer.Option("--transport", "-t", help="auto (srun in an allocation, else ssh with hosts, else local), local, ssh, srun.")] = "auto",
    ssh_config: Annotated[Path | None, typer.Option("--ssh-config", help="OpenSSH config file (default ~/.ssh/config).")] = None,
    ssh_accept_new: Annotated[bool, typer.Option("--ssh-accept-new", help="Accept host keys not in known_hosts (changed keys are still refused).")] = False,
    concurrency: Annotated[int, typer.Option("--concurrency", help="Nodes worked on at once.")] = 64,
    connect_timeout: Annotated[float, typer.Option("--connect-timeout", help="Seconds to connect and log in to a node.")] = 10.0,
    command_timeout: Annotated[float, typer.Option("--command-timeout", help="Seconds for a node's probe bundle.")] = 60.0,
    deadline: Annotated[float | None, typer.Option("--deadline", help="Seconds for the whole collection; late nodes are ERROR.")] = None,
    mtu_all_pairs: Annotated[bool, typer.Option("--mtu-all-pairs", help="Ping every pair of nodes, not only ring neighbours.")] = False,
    expect_nodes: Annotated[int | None, typer.Option("--expect-nodes", help="Nodes the job needs; fewer answering is NO-GO.")] = None,
    no_sweep: Annotated[bool, typer.Option("--no-sweep", help="Node and cross-node checks only, no collective sweep.")] = False,
    sweep_only: Annotated[bool, typer.Option("--sweep-only", help="The collective sweep only, no node checks.")] = False,
    sweep_nproc: Annotated[int, typer.Option("--sweep-nproc", help="Ranks per node for the sweep (0: one per GPU found).")] = 0,
    sweep_max_bytes: Annotated[int | None, typer.Option("--sweep-max-bytes", help="Largest all-reduce size (default 1 GB on NCCL, 64 MB on gloo).")] = None,
    sweep_deadline: Annotated[float, typer.Option("--sweep-deadline", help="Seconds for the whole sweep; a hang ends there.")] = 600.0,
    sweep_python: Annotated[str, typer.Option("--sweep-python", help="The python that runs the sweep's ranks: the job's environment, with torch (default: this python locally, python3 on the nodes).")] = "",
    sweep_backend: Annotated[str, typer.Option("--sweep-backend", help="nccl, gloo or auto (nccl where nvidia-smi exists).")] = "auto",
    sweep_profile: Annotated[str | None, typer.Option("--sweep-profile", help="Profile for grading the sweep (default: --profile).")] = None,
    history: HistoryOpt = None,
) -> None:
    """Run every check (on this node, or on --hosts / the allocation) and give the GO / NO-GO verdict."""
    cfg = load_config()
    nodes = _select_nodes(hosts, partition, nodelist)
    topts = {"ssh_config": ssh_config, "accept_new": ssh_accept_new, "concurrency": concurrency,
             "connect_timeout": connect_timeout, "command_timeout": command_timeout, "deadline": deadline,
             "partition": partition}
    if ssh_config is not None and not ssh_config.is_file():
        raise UsageError(f"--ssh-config {ssh_config}: no such file")
    if no_sweep and sweep_only:
        raise UsageError("--no-sweep and --sweep-only exclude each other")
    _check_sweep_options(sweep_python, sweep_backend)
    from preflight.report import Report

    start = time.monotonic()
    results: list[Any] = []
    profiles_used: dict[str, str] = {}
    run_nodes = nodes
    if not sweep_only:
        report = _local_run("run", False, profile, checks_dir, only, skip, xid_since, probe_timeout, peer, cfg,
                            nodes=nodes, transport=transport, topts=topts, mtu_all_pairs=mtu_all_pairs,
                            expect_nodes=expect_nodes)
        results, profiles_used, run_nodes = list(report.results), report.profiles, report.nodes
    if not no_sweep and not only:
        results.extend(_sweep_after_checks(results, run_nodes, transport, ssh_config, topts,
                                           sweep_profile or profile, cfg, sweep_nproc, sweep_max_bytes,
                                           sweep_deadline, sweep_only, sweep_python, sweep_backend))
    report = Report.build("run", results, warn_as_fail, profiles_used, time.monotonic() - start,
                          run_nodes or sorted({r.node for r in results}))
    _emit(report, as_json, out, not no_report, history=history)
    raise typer.Exit(report.verdict.exit_code)


def _check_sweep_options(python: str, backend: str) -> None:
    from preflight.sweep.launch import LaunchError, check_python

    if backend not in ("auto", "nccl", "gloo"):
        raise UsageError(f"--sweep-backend {backend!r}: use auto, nccl or gloo")
    if python:
        try:
            check_python(python)
        except LaunchError as exc:
            raise UsageError(f"--sweep-python: {exc}") from None


def _sweep_after_checks(results: list[Any], nodes: list[str] | None, transport: str, ssh_config: Path | None,
                        topts: dict[str, Any], profile: str, cfg: Config, nproc: int, max_bytes: int | None,
                        deadline: float, forced: bool, python: str = "", backend: str = "auto") -> list[Any]:
    """The collective sweep, once the node checks pass (or with --sweep-only).

    This node alone (no --hosts, --transport local, or a node list that is only this machine's
    name, as in a one-node allocation run on the node) is swept locally with one rank per GPU
    found; never over SSH to itself. Several nodes: one agent per node over ssh, or srun in an
    allocation. A python without torch makes the sweep SKIP, naming --sweep-python."""
    from preflight.grading import decide
    from preflight.model import Result, Status

    def skipped(why: str) -> list[Any]:
        return [Result(check="nccl.allreduce", node="cluster", status=Status.SKIP, summary=why, source="sweep")]

    if not forced and decide(results).verdict != "GO":
        return skipped("node checks failed: collective sweep not run (fix or drain the named nodes first)")
    if not nproc:
        counts = [int(r.facts.get("count") or 0) for r in results if r.check == "gpu.inventory"]
        nproc = min(counts) if counts else 0
    from preflight.sweep.run import SweepOptions, is_this_node, run_sweep

    _check_sweep_options(python, backend)
    targets = list(nodes or [])
    local = transport == "local" or not targets or is_this_node(targets)
    if local and nproc < 2:
        return skipped(f"{'one rank' if nproc == 1 else 'no GPU count'} on this node: nothing to all-reduce with "
                       "(give --sweep-nproc N, or --hosts for several nodes)")
    opts = SweepOptions(nproc_per_node=max(nproc, 1), max_bytes=max_bytes, deadline_s=deadline,
                        profile=profile or cfg.profile, profile_dirs=tuple(cfg.profile_dirs),
                        connect_timeout=float(topts.get("connect_timeout") or 10.0),
                        accept_new=bool(topts.get("accept_new")), partition=topts.get("partition"),
                        python=python, backend=backend)
    if local:
        from preflight.transport.local import local_node_name

        return run_sweep([local_node_name()], "local", None, opts)
    kind = transport
    if kind == "auto":
        kind = "srun" if os.environ.get("SLURM_JOB_ID") else "ssh"
    return run_sweep(targets, kind, ssh_config, opts)


@app.command()
def node(
    profile: ProfileOpt = "auto",
    checks_dir: ChecksDirOpt = None,
    only: OnlyOpt = None,
    skip: SkipOpt = None,
    as_json: JsonOpt = False,
    out: OutOpt = None,
    warn_as_fail: WarnOpt = False,
    xid_since: XidOpt = None,
    probe_timeout: TimeoutOpt = 10.0,
    history: HistoryOpt = None,
) -> None:
    """Node-local checks only: light and fast, for prologues and health-check programs."""
    cfg = load_config()
    report = _local_run("node", True, profile, checks_dir, only, skip, xid_since, probe_timeout, None, cfg)
    if warn_as_fail:
        from preflight.report import Report

        report = Report.build("node", report.results, True, report.profiles, report.duration_s, report.nodes)
    _emit(report, as_json, out, out is not None, history=history)
    raise typer.Exit(report.verdict.exit_code)


@app.command("list")
def list_checks(
    checks_dir: ChecksDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List the registered checks: id, probes, profile keys, what each catches."""
    reg = _registry(checks_dir, load_config())
    rows = []
    for c in sorted(reg.checks.values(), key=lambda c: c.id):
        probes = "dynamic" if callable(c.probes) else ", ".join(c.static_probe_names()) or "-"
        where = "node" if c.node_local else ("run" if c.in_run else "analyze")
        rows.append({"id": c.id, "title": c.title, "probes": probes, "profile_keys": sorted(c.profile_keys),
                     "inputs": list(c.inputs), "scope": where, "catches": c.catches, "origin": c.origin})
    for cc in sorted(reg.cluster_checks.values(), key=lambda c: c.id):
        rows.append({"id": cc.id, "title": cc.title, "probes": ", ".join(p.name for p in cc.probes) or "-",
                     "profile_keys": [], "formats": [], "scope": "cluster", "catches": cc.catches,
                     "origin": cc.origin})
    if as_json:
        import json

        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="preflight checks")
    for col in ("id", "scope", "probes", "catches"):
        table.add_column(col)
    for r in rows:
        origin = "" if r["origin"] == "builtin" else f" (site: {Path(r['origin']).name})"
        table.add_row(r["id"] + origin, r["scope"], r["probes"], r["catches"] or r["title"])
    Console().print(table)


@app.command()
def profiles(
    show: Annotated[str | None, typer.Option("--show", help="Print one profile's values and their sources.")] = None,
) -> None:
    """List the profiles (expected tables), or show one with every value's provenance."""
    from preflight import profile as prof

    cfg = load_config()
    dirs = tuple(cfg.profile_dirs)
    if show:
        p = prof.load(show, dirs)
        prof.validate(p, _registry(None, cfg).profile_schema())
        sys.stdout.write(f"# {p.name}: {p.description}\n# file: {p.path}\n")
        for k in sorted(p.values):
            src = p.source(k)
            sys.stdout.write(f"{k} = {p.values[k]!r}" + (f"    # {src}" if src else "") + "\n")
        return
    for name, path in prof.available(dirs).items():
        try:
            p = prof.load(name, dirs)
            desc = p.description
        except prof.ProfileError as exc:
            desc = f"(broken: {exc})"
        sys.stdout.write(f"{name:20s} {desc}  [{path}]\n")


@app.command()
def analyze(
    paths: Annotated[list[Path], typer.Argument(
        help="Files, folders of files, folders of per-node folders, archives, or - for standard input "
             "(pdsh/clush/srun -l output is split per node).")],
    profile: ProfileOpt = "auto",
    checks_dir: ChecksDirOpt = None,
    as_json: JsonOpt = False,
    out: OutOpt = None,
    warn_as_fail: WarnOpt = False,
    xid_since: XidOpt = None,
    history: HistoryOpt = "off",
) -> None:
    """Grade captured tool outputs and logs (classified by content) with the same checks."""
    from preflight.analyze import analyze as run_analyze
    from preflight.registry import Options
    from preflight.report import Report

    cfg = load_config()
    missing = [str(p) for p in paths if str(p) != "-" and not (p.exists() or p.is_symlink())]
    if missing:
        raise UsageError(f"no such file or folder: {', '.join(missing)}")
    reg = _registry(checks_dir, cfg)
    start = time.monotonic()
    results = run_analyze(reg, list(paths), profile_name=profile, options=Options(xid_since=parse_since(xid_since)),
                          extra_profile_dirs=tuple(cfg.profile_dirs))
    report = Report.build("analyze", results, warn_as_fail, duration_s=time.monotonic() - start)
    _emit(report, as_json, out, out is not None, history=history)
    raise typer.Exit(report.verdict.exit_code)


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"preflight {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")] = False,
) -> None:
    """Cluster preflight and diagnostics for GPU training clusters."""


def main() -> None:
    """Entry point: known failures become one clear line and exit code 2, never a traceback."""
    from preflight.profile import ProfileError
    from preflight.registry import RegistryError

    try:
        app(standalone_mode=True)
    except (UsageError, ProfileError, RegistryError) as exc:
        sys.stderr.write(f"preflight: {exc}\n")
        sys.exit(EXIT_USAGE)
    except KeyboardInterrupt:
        sys.stderr.write("preflight: interrupted\n")
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as exc:  # last line of defence: one line, not a traceback
        if os.environ.get("PREFLIGHT_DEBUG"):
            raise
        sys.stderr.write(f"preflight: internal error: {type(exc).__name__}: {exc} (PREFLIGHT_DEBUG=1 shows the traceback)\n")
        sys.exit(EXIT_USAGE)


def _load_command_modules() -> None:
    """Command groups living in their own modules register themselves on `app`."""
    import importlib
    import importlib.util

    for name in ("cli_slurm", "cli_sweep", "cli_history", "cli_triage"):
        if importlib.util.find_spec(f"preflight.{name}") is not None:
            importlib.import_module(f"preflight.{name}")


_load_command_modules()

if __name__ == "__main__":
    # `python -m preflight.cli`: run the canonical module, on which the command modules registered
    from preflight.cli import main as _canonical_main

    _canonical_main()
