"""The Slurm prologue gate (`preflight prologue`, as Prolog= or HealthCheckProgram=).

Node-local checks within a time budget: every probe's timeout shrinks to fit, and a watchdog
ends the process at the budget whatever happens. The history gate records the run and (with
damping) decides; on NO-GO the node is drained with `preflight: <check> <summary>` (unless it
carries a reason preflight did not set) and the exit code is non-zero, so Slurm requeues the
job elsewhere. Imports neither torch nor pandas.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from preflight.engine import Config, UsageError, load_registry, run, select
from preflight.grading import EXIT_NO_GO
from preflight.probes import DEFAULT_CAP, DEFAULT_TIMEOUT, Probe
from preflight.report.base import Report
from preflight.transport.local import LocalTransport


def _process_age() -> float:
    """Seconds since this process started (interpreter start-up and imports included), or 0."""
    try:
        stat = Path("/proc/self/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return 0.0
    return age if 0.0 <= age < 60.0 else 0.0


STARTED = time.monotonic() - _process_age()  # when the command started: the budget counts from here
MIN_PROBE_S = 1.0  # below this a probe cannot say anything useful


class BudgetTransport(LocalTransport):
    """Local probes whose timeouts shrink to what is left of a deadline."""

    name = "local-budget"

    def __init__(self, node: str, deadline: float, cap: int = DEFAULT_CAP) -> None:
        super().__init__(cap)
        self.node = node
        self.deadline = deadline  # time.monotonic() by which every probe must be done
        self.shrunk: list[str] = []  # probes whose timeout was cut, for the report

    def fit(self, probes: Sequence[Probe]) -> list[Probe]:
        left = max(MIN_PROBE_S, self.deadline - time.monotonic())
        out: list[Probe] = []
        for p in probes:
            if p.timeout > left:
                if left < 0.9 * p.timeout:
                    self.shrunk.append(f"{p.name} {p.timeout:g}s->{left:.1f}s")
                p = replace(p, timeout=round(left, 2))
            out.append(p)
        return out


def slurm_node_name() -> str:
    """The Slurm name of this node: SLURMD_NODENAME (set in Prolog and tasks), else the host name."""
    from preflight.transport.local import local_node_name

    return os.environ.get("SLURMD_NODENAME") or local_node_name()


def left(budget: float, reserve: float) -> float:
    """Seconds of the budget still free once `reserve` is kept back."""
    return STARTED + budget - time.monotonic() - reserve


def start_watchdog(budget: float) -> threading.Timer:
    """Ends the process at the budget, whatever is still running (Slurm drains on non-zero)."""

    def fire() -> None:
        sys.stderr.write(f"preflight prologue: time budget of {budget:g} s exhausted; exiting NO-GO\n")
        sys.stderr.flush()
        os._exit(EXIT_NO_GO)

    timer = threading.Timer(max(0.1, left(budget, 0.0)), fire)
    timer.daemon = True
    timer.start()
    return timer


def check_damp(damp: str | None) -> None:
    """A malformed --damp is a usage error before anything runs."""
    from preflight.history.gate import parse_damp

    try:
        parse_damp(damp)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


@dataclass
class PrologueRequest:
    budget: float = 20.0
    profile: str = "auto"
    checks_dirs: list[Path] = field(default_factory=list)
    only: list[str] = field(default_factory=list)
    skip: list[str] = field(default_factory=list)
    xid_since: datetime | None = None
    dry_run: bool = False
    no_drain: bool = False
    node: str | None = None  # default: $SLURMD_NODENAME, else the host name
    history: str | None = None
    damp: str | None = None


@dataclass
class PrologueOutcome:
    report: Report
    lines: list[str]  # what the prologue says (stdout, or stderr beside --json)
    code: int


def _summary_lines(report: Report, node: str) -> list[str]:
    lines = [f"preflight prologue {node}: {report.verdict.verdict} ({report.duration_s:.1f} s)"]
    for r in report.verdict.blocking:
        lines.append(f"  {r.status.value.upper()} {r.check}: {r.summary}")
        if r.remedy:
            lines.append(f"    remedy: {r.remedy}")
    return lines


def _check(req: PrologueRequest, name: str, cfg: Config) -> tuple[Report, Any, BudgetTransport]:
    """The node-local checks with probe timeouts fitted to the budget; (report, profile used,
    the transport that knows which timeouts it cut)."""
    from preflight.registry import Options

    reg = load_registry(req.checks_dirs, cfg)
    checks = select(reg, req.only, req.skip, node_only=True)
    if not checks:
        raise UsageError("no check selected (see `preflight list`)")
    # Probes must be done with a reserve left for grading and the drain itself.
    deadline = STARTED + req.budget - min(5.0, req.budget * 0.25)
    transport = BudgetTransport(name, deadline)
    opts = Options(xid_since=req.xid_since,
                   probe_timeout=max(MIN_PROBE_S, min(DEFAULT_TIMEOUT, deadline - time.monotonic())))
    start = time.monotonic()
    results, used = run(reg, checks, [name], transport, profile_name=req.profile or cfg.profile, options=opts,
                        extra_profile_dirs=tuple(cfg.profile_dirs))
    report = Report.build("prologue", results, profiles={n: p.name for n, p in used.items()},
                          duration_s=time.monotonic() - start, nodes=[name])
    return report, used.get(name), transport


def _slurm_actions(req: PrologueRequest, name: str, drain: tuple[str, str] | None, resume: bool) -> list[str]:
    """Drain (or say why not) and resume through the Slurm adapter, within the budget."""
    from preflight import slurm

    lines: list[str] = []
    if drain is not None:
        if req.no_drain:
            lines.append(f"  not draining (--no-drain): {slurm.drain_reason(*drain)}")
        else:
            timeout = min(slurm.SCONTROL_TIMEOUT, max(1.0, left(req.budget, 0.5)))
            lines.append("  " + slurm.drain(name, *drain, dry_run=req.dry_run, timeout=timeout).line(req.dry_run))
    if resume and not req.no_drain:
        timeout = min(slurm.SCONTROL_TIMEOUT, max(1.0, left(req.budget, 0.5)))
        lines += ["  " + a.line(req.dry_run) for a in slurm.resume([name], dry_run=req.dry_run, timeout=timeout)
                  if a.action != "keep"]
    return lines


def run_prologue(req: PrologueRequest, cfg: Config) -> PrologueOutcome:
    """Check this node within the budget, record the run, decide (history gate), drain or
    resume; the watchdog is started first and ends the process at the budget."""
    from preflight.history.gate import prologue_gate, settle
    from preflight.inventory import valid_node_name

    if req.budget <= 0:
        raise UsageError("--budget must be positive")
    check_damp(req.damp)
    start_watchdog(req.budget)
    name = req.node or slurm_node_name()
    if not valid_node_name(name):
        raise UsageError(f"invalid node name {name!r}")
    report, profile, transport = _check(req, name, cfg)
    lines = _summary_lines(report, name)
    if transport.shrunk:
        lines.append("  probe timeouts cut to fit the budget: " + ", ".join(transport.shrunk))
    gate = prologue_gate(report, name, req.history, req.damp, profile,
                         timeout=max(0.5, min(5.0, left(req.budget, 1.0))))
    lines += gate.lines
    settled = settle(report, gate)
    lines += _slurm_actions(req, name, settled.drain, settled.resume)
    code = settled.code
    if req.dry_run and code != 0:
        lines.append(f"  dry run: would exit {code}; exiting 0")
        code = 0
    return PrologueOutcome(report=report, lines=lines, code=code)
