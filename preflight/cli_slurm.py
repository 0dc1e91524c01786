"""Slurm commands: `preflight prologue` (Prolog= / HealthCheckProgram=) and `preflight resume`.

`prologue` runs the node-local checks within a time budget; every probe's timeout shrinks to
fit, and a watchdog ends the command at the budget whatever happens. On NO-GO it drains the
node itself with `preflight: <check> <summary>` (unless the node carries a reason preflight did
not set) and exits non-zero, so Slurm requeues the job and runs it elsewhere. It imports
neither torch nor pandas.

Exit codes: 0 GO, 1 NO-GO (or the budget ran out), 2 could not run (bad arguments, profile).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any

import typer

from preflight.grading import EXIT_NO_GO
from preflight.probes import DEFAULT_CAP, DEFAULT_TIMEOUT, Probe
from preflight.transport.local import LocalTransport


def _cli_module() -> ModuleType:
    """The CLI module to register on: always the canonical `preflight.cli` (under
    `python -m preflight.cli` its `__main__` copy hands over to it)."""
    loaded = sys.modules.get("preflight.cli")  # mid-import when cli.py imports this module
    if loaded is not None:
        return loaded
    import importlib

    return importlib.import_module("preflight.cli")


_cli = _cli_module()
app: typer.Typer = _cli.app
UsageError: type[Exception] = _cli.UsageError

ProfileOpt = Annotated[str, typer.Option("--profile", "-p", help="Profile name or TOML file; 'auto' detects it.")]
ChecksDirOpt = Annotated[list[Path] | None, typer.Option("--checks-dir", help="Folder of site checks (*.py); repeatable.")]
OnlyOpt = Annotated[list[str] | None, typer.Option("--only", help="Run only these checks or families; repeatable.")]
SkipOpt = Annotated[list[str] | None, typer.Option("--skip", help="Skip these checks or families; repeatable.")]
XidOpt = Annotated[str | None, typer.Option("--xid-since", help="Kernel-log window: boot (default), ISO time, or 30m/6h/2d.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the JSON report on stdout.")]



def _process_age() -> float:
    """Seconds since this process started (interpreter start-up and imports included), or 0."""
    try:
        stat = Path("/proc/self/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return 0.0
    return age if 0.0 <= age < 60.0 else 0.0


_STARTED = time.monotonic() - _process_age()  # when the command started: the budget counts from here
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


def _watchdog(budget: float) -> threading.Timer:
    """Ends the process at the budget, whatever is still running (Slurm drains on non-zero)."""

    def fire() -> None:
        sys.stderr.write(f"preflight prologue: time budget of {budget:g} s exhausted; exiting NO-GO\n")
        sys.stderr.flush()
        os._exit(EXIT_NO_GO)

    timer = threading.Timer(max(0.1, budget - (time.monotonic() - _STARTED)), fire)
    timer.daemon = True
    timer.start()
    return timer


def _summary_line(report: Any, node: str) -> list[str]:
    lines = [f"preflight prologue {node}: {report.verdict.verdict} ({report.duration_s:.1f} s)"]
    for r in report.verdict.blocking:
        lines.append(f"  {r.status.value.upper()} {r.check}: {r.summary}")
        if r.remedy:
            lines.append(f"    remedy: {r.remedy}")
    return lines


def drain_summary(blocking: Sequence[Any]) -> tuple[str, str]:
    """(check, summary) for the drain reason: the worst result, with a count of the others."""
    first = blocking[0]
    more = len(blocking) - 1
    return first.check, first.summary + (f" (+{more} more)" if more else "")


def _check_damp(damp: str | None) -> None:
    """A malformed --damp is a usage error before anything runs."""
    from preflight.history.gate import parse_damp

    try:
        parse_damp(damp)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _history_gate(report: Any, node: str, history: str | None, damp: str | None, profile: Any,
                  budget: float) -> Any:
    """History and flap damping (preflight/history/gate.py): records this run; with --damp,
    decides drain/resume from the node's earlier runs. Never raises."""
    from preflight.history.gate import prologue_gate

    left = max(0.5, min(5.0, _STARTED + budget - time.monotonic() - 1.0))
    return prologue_gate(report, node, history, damp, profile, timeout=left)


@app.command()
def prologue(
    budget: Annotated[float, typer.Option("--budget", help="Seconds the whole command may take.")] = 20.0,
    profile: ProfileOpt = "auto",
    checks_dir: ChecksDirOpt = None,
    only: OnlyOpt = None,
    skip: SkipOpt = None,
    xid_since: XidOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Check and print what would be done; "
                                          "drain nothing and exit 0.")] = False,
    no_drain: Annotated[bool, typer.Option("--no-drain", help="Exit non-zero on NO-GO but leave the "
                                           "drain to Slurm.")] = False,
    node: Annotated[str | None, typer.Option("--node", help="Slurm node name (default: $SLURMD_NODENAME, "
                                             "else the host name).")] = None,
    as_json: JsonOpt = False,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Also write the reports to this folder.")] = None,
    history: Annotated[str | None, typer.Option("--history", help="Results store: sqlite:///path, postgresql://... "
                                                "or off (default $PREFLIGHT_HISTORY, else ~/.local/share/preflight/"
                                                "history.db).")] = None,
    damp: Annotated[str | None, typer.Option("--damp", help="K,M: drain a soft failure only after K failing runs "
                                             "in a row (hard faults at once), resume after M passing runs; 'on' "
                                             "takes K,M from the profile.")] = None,
) -> None:
    """Slurm Prolog / HealthCheckProgram gate: node-local checks within a time budget; on NO-GO
    drain the node with `preflight: <check> <summary>` and exit 1 so the job is requeued."""
    if budget <= 0:
        raise UsageError("--budget must be positive")
    _check_damp(damp)
    _watchdog(budget)
    from preflight import engine, slurm
    from preflight.registry import Options
    from preflight.report import Report

    name = node or slurm_node_name()
    from preflight.inventory import valid_node_name

    if not valid_node_name(name):
        raise UsageError(f"invalid node name {name!r}")
    cfg = _cli.load_config()
    reg = _cli._registry(checks_dir, cfg)
    checks = engine.select(reg, only or (), skip or (), node_only=True)
    if not checks:
        raise UsageError("no check selected (see `preflight list`)")
    # Probes must be done with a reserve left for grading and the drain itself.
    reserve = min(5.0, budget * 0.25)
    deadline = _STARTED + budget - reserve
    transport = BudgetTransport(name, deadline)
    opts = Options(xid_since=_cli.parse_since(xid_since),
                   probe_timeout=max(MIN_PROBE_S, min(DEFAULT_TIMEOUT, deadline - time.monotonic())))
    start = time.monotonic()
    results, used = engine.run(reg, checks, [name], transport, profile_name=profile or cfg.profile, options=opts,
                               extra_profile_dirs=tuple(cfg.profile_dirs))
    report = Report.build("prologue", results, profiles={n: p.name for n, p in used.items()},
                          duration_s=time.monotonic() - start, nodes=[name])
    if as_json or out is not None:
        _cli._emit(report, as_json, out, out is not None, quiet=True, history="off")  # the gate records it
    lines = _summary_line(report, name)
    if transport.shrunk:
        lines.append("  probe timeouts cut to fit the budget: " + ", ".join(transport.shrunk))
    code = report.verdict.exit_code
    gate = _history_gate(report, name, history, damp, used.get(name), budget)
    lines += gate.lines
    if gate.decision is not None and code != 0 and not gate.decision.drain:
        code = 0  # damped: a soft failure below K runs in a row neither drains nor fails the job
    if code != 0:
        check, summary = drain_summary(report.verdict.blocking)
        if gate.decision is not None and gate.decision.drain:
            check, summary = gate.decision.check, gate.decision.summary
        if no_drain:
            lines.append(f"  not draining (--no-drain): {slurm.drain_reason(check, summary)}")
        else:
            left = max(1.0, _STARTED + budget - time.monotonic() - 0.5)
            action = slurm.drain(name, check, summary, dry_run=dry_run, timeout=min(slurm.SCONTROL_TIMEOUT, left))
            lines.append("  " + action.line(dry_run))
    if gate.decision is not None and gate.decision.resume and not no_drain:
        left = max(1.0, _STARTED + budget - time.monotonic() - 0.5)
        lines += ["  " + a.line(dry_run) for a in slurm.resume([name], dry_run=dry_run,
                                                               timeout=min(slurm.SCONTROL_TIMEOUT, left))
                  if a.action != "keep"]
    if dry_run and code != 0:
        lines.append(f"  dry run: would exit {code}; exiting 0")
        code = 0
    (sys.stderr if as_json else sys.stdout).write("\n".join(lines) + "\n")
    raise typer.Exit(code)


@app.command()
def resume(
    nodes: Annotated[str, typer.Argument(help="Slurm hostlist, e.g. gpu[001-016,020].")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what would be resumed; change nothing.")] = False,
) -> None:
    """Resume the nodes preflight drained (reason `preflight: ...`); every other node is left alone."""
    from preflight import slurm
    from preflight.inventory import HostlistError, expand

    try:
        names = expand(nodes)
    except HostlistError as exc:
        raise UsageError(str(exc)) from None
    actions = slurm.resume(names, dry_run=dry_run)
    for a in actions:
        sys.stdout.write(a.line(dry_run) + "\n")
    raise typer.Exit(1 if any(a.action == "error" for a in actions) else 0)
