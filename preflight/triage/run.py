"""Collect, then attribute: what `preflight collect` and `preflight triage` run.

The nodes come from a Slurm job (the Slurm adapter's `job_nodes`: scontrol, else sacct),
from --hosts, or are this node; the bundle comes from the transport, or from a file written
by an earlier collect. Bad input is a UsageError naming it; a node that cannot be reached is
part of the bundle (its error), never an exception.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from preflight.engine import TransportOptions, UsageError, make_transport
from preflight.report.base import Report
from preflight.triage.collect import Bundle


@dataclass
class Target:
    nodes: list[str]
    job: dict[str, Any]
    local: bool


@dataclass
class CollectRequest:
    run_dir: str | None = None
    logs: list[str] = field(default_factory=list)
    pattern: str | None = None
    transport: str = "auto"
    transport_options: TransportOptions = field(default_factory=lambda: TransportOptions(command_timeout=90.0))
    node_checks: bool = True


def resolve_job(job_id: str) -> dict[str, Any]:
    """A Slurm job's node list and start time, through the Slurm adapter."""
    from preflight import inventory, slurm

    if not slurm.JOB_ID.match(job_id):
        raise UsageError(f"job id {job_id!r}: use digits (4242 or 4242_7)")
    job = slurm.job_nodes(job_id)
    if not job.nodelist:
        raise UsageError(f"job {job_id}: no node list from scontrol or sacct ({job.problem or 'no answer'})")
    try:
        nodes = inventory.expand(job.nodelist)
    except inventory.HostlistError as exc:
        raise UsageError(f"job {job_id}: node list {job.nodelist!r}: {exc}") from None
    return {"job_id": job.job_id or job_id, "nodelist": job.nodelist, "nodes": nodes, "start": job.start,
            "end": job.end, "state": job.state, "exit_code": job.exit_code}


def target_for(job_id: str | None, hosts: str | None) -> Target:
    """The nodes to collect from: a job's, --hosts, or this node."""
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


def _probes(target: Target, req: CollectRequest) -> tuple[str | None, list[Any]]:
    """(the run directory as the nodes see it, the probes that collect it)."""
    from preflight import registry
    from preflight.triage import collect

    run_dir = req.run_dir
    if run_dir and target.local:
        run_dir = str(Path(run_dir).resolve()) if not run_dir.startswith("/") else run_dir
        if not Path(run_dir).is_dir():
            why = "not a directory" if Path(run_dir).exists() else "no such directory"
            raise UsageError(f"--run-dir {run_dir}: {why}")
    if req.pattern:
        try:
            re.compile(req.pattern)
        except re.error as exc:
            raise UsageError(f"--pattern {req.pattern!r}: {exc}") from None
    probes = collect.triage_probes(run_dir, req.logs, req.pattern, kernel_log=not req.node_checks)
    if req.node_checks:
        probes = collect.node_check_probes(registry.load()) + probes
    if not probes:
        raise UsageError("nothing to collect: give --run-dir and/or --log (or drop --no-node-checks)")
    return run_dir, probes


def collect_bundle(target: Target, req: CollectRequest) -> Bundle:
    """Collect a bundle from the target's nodes (never raises for a node-level fault)."""
    from preflight.transport.local import LocalTransport
    from preflight.triage import collect

    run_dir, probes = _probes(target, req)
    if not target.local and req.transport == "local" and len(target.nodes) > 1:
        raise UsageError("--transport local reaches this node only; use ssh or srun for several hosts")
    local = target.local or req.transport == "local"
    tr = LocalTransport() if local else make_transport(req.transport, target.nodes, req.transport_options)
    try:
        outcomes = tr.collect({n: probes for n in target.nodes})
    finally:
        tr.close()
    job = dict(target.job)
    job.setdefault("collected_from", ",".join(target.nodes))
    return collect.from_outcomes(outcomes, job, run_dir or "")


@dataclass
class Collected:
    """`preflight collect`: the bundle, where it went, and a report of the nodes not reached."""

    bundle: Bundle
    target: Target
    path: Path
    report: Report

    def summary(self, report: Report) -> None:
        import sys

        bad = ", ".join(f"{n} ({e})" for n, e in sorted(self.bundle.errors.items()))
        sys.stderr.write(f"collected {len(self.bundle.nodes)}/{len(self.target.nodes)} node(s) in "
                         f"{report.duration_s:.1f} s" + (f"; unreachable: {bad}" if bad else "")
                         + f"\nbundle: {self.path}\n")

    def write(self, report: Report, _folder: Path) -> dict[str, Path]:
        from preflight.report.emit import OutputError
        from preflight.triage import collect

        try:
            return {"bundle": collect.write_bundle(self.bundle, self.path)}
        except OSError as exc:
            raise OutputError(f"cannot write {self.path}: {exc.strerror or exc}") from None

    @property
    def exit_code(self) -> int:
        return 0 if self.bundle.nodes else 1


def collect_job(job_id: str | None, hosts: str | None, req: CollectRequest, out: Path | None) -> Collected:
    """Collect from a job's nodes (or --hosts, or this node) into a bundle file (default
    triage-<job id or time>.tar.gz); the report holds an ERROR per node not reached."""
    from preflight.model import Result, Status

    target = target_for(job_id, hosts)
    start = time.monotonic()
    bundle = collect_bundle(target, req)
    name = f"triage-{target.job.get('job_id') or datetime.now().strftime('%Y%m%d-%H%M%S')}.tar.gz"
    results = [Result(check="triage.collect", node=n, status=Status.ERROR, summary=f"not collected: {e}")
               for n, e in sorted(bundle.errors.items())]
    report = Report.build("collect", results, duration_s=time.monotonic() - start, nodes=target.nodes)
    return Collected(bundle=bundle, target=target, path=out or Path(name), report=report)


def looks_like_bundle(value: str) -> bool:
    p = Path(value)
    return p.exists() and (p.is_file() or (p / "manifest.json").is_file() or (p / "bundle" / "manifest.json").is_file())


def _bundle_for(target: str | None, hosts: str | None, req: CollectRequest) -> Bundle:
    """The bundle to triage: a file, a job's nodes, --hosts, the allocation or this node."""
    from preflight import slurm
    from preflight.triage import collect

    if target and looks_like_bundle(target):
        if hosts or req.run_dir or req.logs:
            raise UsageError("a bundle is triaged as collected: --hosts/--run-dir/--log do not apply")
        try:
            return collect.read_bundle(Path(target))
        except collect.BundleError as exc:
            raise UsageError(str(exc)) from None
    if target and slurm.JOB_ID.match(target):
        return collect_bundle(target_for(target, None), req)
    if target and not Path(target).exists() and ("/" in target or target.endswith((".tar.gz", ".tgz", ".tar"))):
        raise UsageError(f"{target}: no such bundle file (give a bundle written by `preflight collect`, or a "
                         "Slurm job id)")
    if target and Path(target).is_dir():
        raise UsageError(f"{target}: a folder, not a bundle (no manifest.json in it); for a run directory use "
                         "--run-dir")
    if target:
        raise UsageError(f"{target!r} is neither a bundle file nor a Slurm job id")
    allocation = os.environ.get("SLURM_JOB_ID")
    if not (req.run_dir or req.logs or hosts or allocation):
        raise UsageError("give a job id, a bundle, or --run-dir (with --hosts for several nodes)")
    if not hosts and allocation and not req.run_dir:
        return collect_bundle(target_for(allocation, None), req)
    return collect_bundle(target_for(None, hosts), req)


@dataclass
class Triaged:
    """`preflight triage`: the verdict and its report, with the triage's own texts."""

    verdict: Any
    report: Report

    def console(self, report: Report, per_node: bool = False) -> None:
        from preflight.triage import report as texts

        texts.console(self.verdict, report, per_node)

    def to_json(self, report: Report) -> str:
        from preflight.triage import report as texts

        return texts.to_json(self.verdict, report)

    def write(self, report: Report, folder: Path) -> dict[str, Path]:
        from preflight.triage import report as texts

        return texts.write(self.verdict, report, folder)

    def problems(self) -> list[str]:
        """The lines for stderr: unreadable input, or not enough evidence to decide."""
        lines = [f"preflight triage: input: {e}" for e in self.verdict.input_errors]
        if self.verdict.category == "unknown":
            lines.append(f"preflight triage: {self.verdict.summary}")
        return lines

    @property
    def exit_code(self) -> int:
        """0 a clean run; 1 a failure, its culprit or fault named (input that could not be read is
        said beside it); 3 the same, but the job recovered (finished or training again after it);
        2 unknown, or a clean verdict with input that could not be read."""
        v = self.verdict
        if v.category == "unknown":
            return 2
        if v.category == "none":
            return 2 if v.input_errors else 0
        return 3 if v.recovery.get("recovered") else 1


def triage(target: str | None, hosts: str | None, req: CollectRequest, since: datetime | None = None,
           save_bundle: Path | None = None) -> Triaged:
    """Name the culprit of a hang or crash from a bundle, a job or a run directory."""
    from preflight import registry
    from preflight.triage import collect, judge

    start = time.monotonic()
    bundle = _bundle_for(target, hosts, req)
    if save_bundle is not None:
        try:
            collect.write_bundle(bundle, save_bundle)
        except OSError as exc:
            raise UsageError(f"cannot write {save_bundle}: {exc.strerror or exc}") from None
    from preflight.engine import load_config
    from preflight.triage import downtime

    told = downtime.story_of(bundle, load_config())  # the run, read once: the verdict and the downtime
    verdict, results = judge.triage(bundle, registry.load(), since, told)
    results = [*results, *downtime.results(bundle, told=told)]  # runtime.downtime: time lost per incident
    rep = Report.build("triage", results, duration_s=time.monotonic() - start,
                       nodes=sorted(set(bundle.nodes) | set(bundle.errors)))
    return Triaged(verdict=verdict, report=rep)
