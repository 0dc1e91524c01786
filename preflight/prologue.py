"""The Slurm prologue gate (`preflight prologue`, as Prolog= or HealthCheckProgram=).

Node-local checks within a time budget: every probe's timeout shrinks to fit, and a watchdog
ends the process within the budget whatever happens. The history gate records the run and
(with damping) decides; on NO-GO the node is drained with `preflight: <check> <summary>` (unless
it carries a reason preflight did not set) and the exit code is non-zero, so Slurm requeues the
job elsewhere. Imports neither torch nor pandas.

The watchdog fires a moment before the budget ends (`EXIT_RESERVE_S`, plus `DRAIN_RESERVE_S`
when it may drain): it prints the verdict, NO-GO, with every probe still running named as
ERROR (`ERROR <check>: probe <name> still running at the <B> s budget`), drains the node with
the first of them as the reason when there is time left for scontrol (else it says so: a
Prolog that exits non-zero makes Slurm drain the node itself), and exits 1. It is told what
the prologue is doing as it goes (the stage, which check needs which probe, the probes
running), so firing only formats a few lines. Once the verdict is known it prints that.
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

from preflight import interrupt
from preflight.engine import (
    CHECK_TIMEOUTS,
    Config,
    UsageError,
    disabled_results,
    load_registry,
    mark_interrupted,
    run,
    select,
    split_disabled,
)
from preflight.grading import EXIT_NO_GO
from preflight.probes import DEFAULT_CAP, DEFAULT_TIMEOUT, Probe, kill_live
from preflight.report.base import Report
from preflight.rootcause import TOOL_OWNER
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
# what the watchdog keeps back from the budget: printing the verdict and leaving (measured well
# under 0.1 s with two CPU hogs on two cores; the rest is margin for a thread woken late), and the
# two scontrol calls of a drain
EXIT_RESERVE_S = 0.4
DRAIN_RESERVE_S = 1.0  # at most; an eighth of the budget below 8 s
MIN_DRAIN_S = 0.1  # per scontrol call: with less left the watchdog does not try to drain
PROBE_GRACE_S = 0.3  # after the probes' end: a probe still not back is given up


class BudgetTransport(LocalTransport):
    """Local probes whose timeouts shrink to what is left of a deadline."""

    name = "local-budget"

    def __init__(self, node: str, probes_end: float, cap: int = DEFAULT_CAP, budget: float = 0.0) -> None:
        super().__init__(cap)
        self.node = node
        self.probes_end = probes_end  # time.monotonic() by which every probe must be done
        self.budget = budget
        self.shrunk: list[str] = []  # probes whose timeout was cut, for the report

    def limit_words(self) -> str:
        return f"the probes' share of the prologue's {self.budget:g} s budget"

    def collect_end(self) -> float:
        """A probe that its fitted timeout and a kill did not end (a tool stuck in the driver) is
        given up `PROBE_GRACE_S` after that timeout, so the checks are graded without it."""
        return max(self.probes_end, time.monotonic() + MIN_PROBE_S) + PROBE_GRACE_S

    def fit(self, probes: Sequence[Probe]) -> list[Probe]:
        left = max(MIN_PROBE_S, self.probes_end - time.monotonic())
        out: list[Probe] = []
        for p in probes:
            if p.timeout > left:
                if left < 0.9 * p.timeout:
                    self.shrunk.append(f"{p.name} {p.timeout:g}s->{left:.1f}s")
                p = replace(p, timeout=round(left, 2))
            out.append(p)
        return out


def cut_and_timed_out(shrunk: Sequence[str], report: Report) -> list[str]:
    """The cut probes (`name 15s->3.2s`) that a non-passing result says timed out; all of them
    when a blocking result is a timeout naming none (the cut may be why it is not GO)."""
    import re

    from preflight.model import Status

    late = re.compile(r"timed out|still running|hung|did not finish")
    said = [f"{r.summary} {' '.join(r.evidence)}" for r in report.results if r.status is not Status.PASS]
    said = [t for t in said if late.search(t)]
    named = [c for c in shrunk if any(re.search(rf"(?<![\w.-]){re.escape(c.split()[0])}(?![\w-])", t) for t in said)]
    blocked = any(late.search(f"{r.summary} {' '.join(r.evidence)}") for r in report.verdict.blocking)
    return named or (list(shrunk) if blocked else [])


def slurm_node_name() -> str:
    """The Slurm name of this node: SLURMD_NODENAME (set in Prolog and tasks), else the host name."""
    from preflight.transport.local import local_node_name

    return os.environ.get("SLURMD_NODENAME") or local_node_name()


def left(budget: float, reserve: float) -> float:
    """Seconds of the budget still free once `reserve` is kept back."""
    return STARTED + budget - time.monotonic() - reserve


HUNG_REMEDY = "a hung tool often means a hung driver or GPU: check dmesg, reset the GPU or reboot the node"


def hung_tools(running: Sequence[str], tools: dict[str, str]) -> dict[str, list[str]]:
    """The probes still running, by the tool they run (a probe whose tool is not known: its own name)."""
    out: dict[str, list[str]] = {}
    for probe in sorted(running):
        out.setdefault(tools.get(probe, probe), []).append(probe)
    return out


@dataclass
class Decided:
    """What the prologue has decided so far: its lines, exit code and drain reason (check, summary)."""

    lines: list[str]
    code: int
    drain: tuple[str, str] | None = None


class Watchdog:
    """Ends the process within the budget, with the verdict (see the module's docstring)."""

    def __init__(self, budget: float, node: str, no_drain: bool = False, dry_run: bool = False,
                 to_stderr: bool = False) -> None:
        from preflight import slurm  # loaded now: the firing path imports nothing

        self.slurm = slurm
        self.budget, self.node, self.no_drain, self.dry_run = budget, node, no_drain, dry_run
        self.stream = sys.stderr if to_stderr else sys.stdout
        self.stage = "loading the checks"
        self.transport: LocalTransport | None = None
        self.uses: dict[str, list[str]] = {}  # probe -> the checks that need it
        self.tools: dict[str, str] = {}  # probe -> the tool it runs
        self.decided: Decided | None = None
        self.ended = 0  # probes that came back
        self.printed = False
        self._out = threading.Lock()
        self.reserve = EXIT_RESERVE_S + (0.0 if no_drain or dry_run else min(DRAIN_RESERVE_S, budget / 8))
        self.timer = threading.Timer(max(0.05, left(budget, self.reserve)), self.fire)
        self.timer.daemon = True

    def start(self) -> Watchdog:
        self.timer.start()
        return self

    # the engine's progress hooks: which probes each check needs on this node, which ended
    def __call__(self, node: str, capture: Any) -> None:
        self.ended += 1

    def planned(self, plans: dict[str, dict[str, list[str]]]) -> None:
        uses: dict[str, list[str]] = {}
        for per_check in plans.values():
            for cid, probes in sorted(per_check.items()):
                for probe in probes:
                    uses.setdefault(probe, []).append(cid)
        self.uses = uses

    def probe_tools(self, tools: dict[str, str]) -> None:
        self.tools.update(tools)

    def say(self, lines: list[str], code: int) -> None:
        """Print the prologue's own lines (once: the watchdog prints nothing after them)."""
        with self._out:
            self.decided = Decided(lines, code)
            self.stream.write("\n".join(lines) + "\n")
            self.stream.flush()
            self.printed = True

    def at_budget(self) -> Decided:
        """The verdict at the budget: what was decided, else NO-GO naming each running probe."""
        if self.decided is not None:
            d = self.decided
            return Decided(d.lines + [f"  the {self.budget:g} s budget ran out while {self.stage}"], d.code, d.drain)
        running = sorted(self.transport.running(self.node)) if self.transport is not None else []
        lines = [f"preflight prologue {self.node}: NO-GO (the {self.budget:g} s budget ran out while {self.stage}; "
                 f"{self.ended} probe(s) back, {len(running)} still running)"]
        first: tuple[str, str] | None = None
        for tool, probes in hung_tools(running, self.tools).items():
            # one line per hung tool, on the check that owns it; the others that need it depend on it
            users = list(dict.fromkeys(c for p in probes for c in self.uses.get(p) or ["prologue"]))
            owner = TOOL_OWNER.get(tool, "")
            cid = owner if owner in users else users[0]
            if len(probes) > 1:
                summary = f"{tool} still running at the {self.budget:g} s budget (hung): probes {', '.join(probes)}"
            else:
                summary = f"probe {probes[0]} still running at the {self.budget:g} s budget"
                summary += "" if tool == probes[0] else f" ({tool} hung)"
            more = len(users) - 1
            lines += [f"  ERROR {cid}: {summary}" + (f" ({more} dependent check{'s' * (more > 1)} not graded)"
                                                     if more else ""),
                      f"    remedy: run `preflight node --only {cid}` on {self.node}; {HUNG_REMEDY}"]
            first = first or (cid, summary)
        if first is None:
            first = ("prologue", f"the {self.budget:g} s budget ran out while {self.stage}")
            lines.append(f"  ERROR {first[0]}: {first[1]}")
        if isinstance(self.transport, BudgetTransport) and self.transport.shrunk:
            lines.append("  probe timeouts cut to fit the budget: " + ", ".join(self.transport.shrunk))
        return Decided(lines, EXIT_NO_GO, first)

    def drain_line(self, check: str, summary: str) -> str:
        """Drain within what is left of the budget, or say why not."""
        reason = self.slurm.drain_reason(check, summary)
        if self.no_drain:
            return f"  not draining (--no-drain): {reason}"
        per_call = left(self.budget, EXIT_RESERVE_S) / 2  # scontrol show, then update
        if per_call < MIN_DRAIN_S:
            return (f"  not draining: no time left in the budget for scontrol; exiting {EXIT_NO_GO} "
                    f"(Slurm drains a node whose Prolog fails): {reason}")
        return "  " + self.slurm.drain(self.node, check, summary, dry_run=self.dry_run, timeout=per_call).line(
            self.dry_run)

    def fire(self) -> None:
        """At the budget: print the verdict, end the probes still running (with their process
        groups: no hung tool outlives the prologue), drain if there is time, exit."""
        code = EXIT_NO_GO
        if self._out.acquire(timeout=0.1):
            if self.printed and self.decided is not None:
                os._exit(self.decided.code)
            d = self.at_budget()
            code = d.code
            self.stream.write("\n".join(d.lines) + "\n")
            self.stream.flush()
            kill_live()
            if d.drain is not None:
                self.stream.write(self.drain_line(*d.drain) + "\n")
            if self.dry_run and code != 0:
                self.stream.write(f"  dry run: would exit {code}; exiting 0\n")
                code = 0
            self.stream.flush()
        os._exit(code)


def start_watchdog(budget: float, node: str = "", **kw: Any) -> Watchdog:
    """A started `Watchdog` for this process (see the module's docstring)."""
    return Watchdog(budget, node or slurm_node_name(), **kw).start()


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
    profile: str | None = None  # None: $PREFLIGHT_PROFILE, else the site config's, else auto
    checks_dirs: list[Path] = field(default_factory=list)
    only: list[str] = field(default_factory=list)
    skip: list[str] = field(default_factory=list)
    xid_since: datetime | None = None
    dry_run: bool = False
    no_drain: bool = False
    node: str | None = None  # default: $SLURMD_NODENAME, else the host name
    history: str | None = None
    damp: str | None = None
    lines_to_stderr: bool = False  # --json: the report is stdout, the prologue's lines go to stderr
    per_node: bool = False  # --per-node: each finding one line naming the node, its evidence and remedy


@dataclass
class PrologueOutcome:
    report: Report
    lines: list[str]  # what the prologue says (stdout, or stderr beside --json)
    code: int
    watchdog: Watchdog | None = None

    def say(self) -> None:
        """Print the lines (through the watchdog, so that it never prints a second verdict)."""
        if self.watchdog is not None:
            self.watchdog.stage = "exiting"
            self.watchdog.say(self.lines, self.code)
        else:
            sys.stdout.write("\n".join(self.lines) + "\n")


def _summary_lines(report: Report, node: str, per_node: bool = False) -> list[str]:
    lines = [f"preflight prologue {node}: {report.verdict.verdict} ({report.duration_s:.1f} s)"]
    if per_node:  # `run --per-node`'s lines: `FAIL <node> <check>: ... | evidence: ... | remedy: ...`
        from preflight.report.console import finding_lines

        return lines + finding_lines(report.verdict.blocking, failures_only=True, per_node=True,
                                     warn_as_fail=report.warn_as_fail)
    for r in report.verdict.blocking:
        deps = r.facts.get("dependents")
        folded = f" ({len(deps)} dependent check{'s' * (len(deps) > 1)} skipped)" if isinstance(deps, list) and deps \
            else ""
        lines.append(f"  {r.status.value.upper()} {r.check}: {r.summary}{folded}")
        if r.remedy:
            lines.append(f"    remedy: {r.remedy}")
    return lines


def _check(req: PrologueRequest, name: str, cfg: Config, watch: Watchdog) -> tuple[Report, Any, BudgetTransport]:
    """The node-local checks with probe timeouts fitted to the budget; (report, profile used,
    the transport that knows which timeouts it cut)."""
    from preflight.registry import Options

    reg = load_registry(req.checks_dirs, cfg)
    cfg.validate_ids(reg, req.only, req.skip)
    checks, disabled = split_disabled(select(reg, *cfg.resolve_selection(req.only, req.skip), node_only=True), cfg)
    if not checks:
        raise UsageError(f"every check selected is {cfg.disabled_reason()}: {', '.join(disabled)}" if disabled
                         else "no check selected (see `preflight list`)")
    # Probes must be done with a reserve left for grading and the drain itself.
    deadline = STARTED + req.budget - min(5.0, req.budget * 0.25)
    transport = BudgetTransport(name, deadline, budget=req.budget)
    watch.transport = transport
    opts = Options(xid_since=req.xid_since,
                   probe_timeout=max(MIN_PROBE_S, min(DEFAULT_TIMEOUT, deadline - time.monotonic())))
    if cfg.check_timeouts:
        opts.extra[CHECK_TIMEOUTS] = dict(cfg.check_timeouts)
    start = time.monotonic()
    watch.stage = "running the checks"
    results, used = run(reg, checks, [name], transport, profile_name=cfg.resolve_profile(req.profile),
                        options=opts, extra_profile_dirs=tuple(cfg.profile_dirs), progress=watch)
    results += disabled_results(disabled, [name], cfg.disabled_reason())
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
            timeout = min(slurm.SCONTROL_TIMEOUT, max(MIN_DRAIN_S, left(req.budget, EXIT_RESERVE_S) / 2))
            lines.append("  " + slurm.drain(name, *drain, dry_run=req.dry_run, timeout=timeout).line(req.dry_run))
    if resume and not req.no_drain:
        timeout = min(slurm.SCONTROL_TIMEOUT, max(MIN_DRAIN_S, left(req.budget, EXIT_RESERVE_S) / 2))
        lines += ["  " + a.line(req.dry_run) for a in slurm.resume([name], dry_run=req.dry_run, timeout=timeout)
                  if a.action != "keep"]
    return lines


def run_prologue(req: PrologueRequest, cfg: Config) -> PrologueOutcome:
    """Check this node within the budget, record the run, decide (history gate), drain or
    resume; the watchdog is started first and ends the process at the budget."""
    from preflight.history.gate import drain_summary, prologue_gate, settle
    from preflight.inventory import valid_node_name

    if req.budget <= 0:
        raise UsageError("--budget must be positive")
    check_damp(req.damp)
    name = req.node or slurm_node_name()
    watch = start_watchdog(req.budget, name, no_drain=req.no_drain, dry_run=req.dry_run,
                           to_stderr=req.lines_to_stderr)
    if not valid_node_name(name):
        raise UsageError(f"invalid node name {name!r}")
    report, profile, transport = _check(req, name, cfg, watch)
    if interrupt.signum():  # slurmd cancelling the job (SIGTERM), or Ctrl-C: no verdict on the node, no drain
        report = mark_interrupted(report)
        lines = _summary_lines(report, name, req.per_node)
        watch.decided = Decided(list(lines), report.verdict.exit_code)
        return PrologueOutcome(report=report, lines=lines, code=report.verdict.exit_code, watchdog=watch)
    lines = _summary_lines(report, name, req.per_node)
    cut = cut_and_timed_out(transport.shrunk, report)  # a note only where the cut may be the cause
    if cut:
        lines.append("  probe timeouts cut to fit the budget: " + ", ".join(cut))
    blocking = report.verdict.blocking
    watch.decided = Decided(list(lines), report.verdict.exit_code if blocking else 0,
                            drain_summary(blocking) if blocking else None)
    watch.stage = "recording the run in the history store"
    gate = prologue_gate(report, name, cfg.resolve_history(req.history), req.damp, profile,
                         timeout=max(0.5, min(5.0, left(req.budget, 1.0))))
    lines += gate.lines
    settled = settle(report, gate)
    watch.decided = Decided(list(lines), settled.code)  # a drain is tried now: not again at the budget
    watch.stage = "draining the node" if settled.drain is not None else "asking Slurm about the node"
    lines += _slurm_actions(req, name, settled.drain, settled.resume)
    code = settled.code
    if req.dry_run and code != 0:
        lines.append(f"  dry run: would exit {code}; exiting 0")
        code = 0
    watch.decided = Decided(list(lines), code)
    watch.stage = "writing the reports"
    return PrologueOutcome(report=report, lines=lines, code=code, watchdog=watch)
