"""Flap damping: when a failing node is drained, and when a drained node comes back.

A soft failure (an MTU black hole that comes and goes, a port that flaps) drains only after
K failing runs of the node in a row; a hard fault drains at once: a reset-class Xid (the
catalog says reset or reboot, e.g. Xid 48 or 79: `xid_catalog.DRAIN_ACTIONS`), uncorrectable ECC or row-remap trouble in
gpu.health, the fabric manager down. A node resumes only after M passing runs in a row.
K, M and the hard Xids come from the profile (`history.damp_fail_runs`,
`history.damp_pass_runs`, `history.hard_xids`) or from `--damp K,M`.

Only graded failures (FAIL) count. An ERROR means the check was not graded in that run (a
probe timed out, its output was lost): a run whose only problems are ERRORs is "not checked",
neither a failing run nor a passing one. It never makes a hard fault, does not extend a fail
streak nor break one, and does not count towards resuming (a passing run has no ERROR). A
node not checked in K runs in a row drains with that cause: it cannot be vouched for, but the
reason says "not checked", not "failed".

`decide` is pure: the node's current results and its earlier runs in, a Decision out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from preflight import facts
from preflight.checks import xid_catalog
from preflight.model import Result, Status

BAD = (Status.FAIL,)  # graded failures; ERROR is "not checked"
# Defaults when neither the profile nor --damp says: the values the built-in profiles carry.
DEFAULT_FAIL_RUNS = 3
DEFAULT_PASS_RUNS = 2


@dataclass(frozen=True)
class Damping:
    fail_runs: int = DEFAULT_FAIL_RUNS  # K
    pass_runs: int = DEFAULT_PASS_RUNS  # M
    hard_xids: frozenset[int] = field(default_factory=frozenset)  # empty: the catalog's reset/reboot ones
    hard_checks: tuple[str, ...] = ("fabric.manager",)

    @classmethod
    def parse(cls, spec: str | None, profile: Any = None) -> Damping:
        """`K,M` (or `K`), or `on`/`profile` for the profile's values. Raises ValueError."""
        get = getattr(profile, "get", None)

        def pget(key: str, default: Any) -> Any:
            value = get(key) if callable(get) else None
            return default if value is None else value

        k = int(pget("history.damp_fail_runs", DEFAULT_FAIL_RUNS))
        m = int(pget("history.damp_pass_runs", DEFAULT_PASS_RUNS))
        xids = frozenset(int(x) for x in pget("history.hard_xids", []) or [])
        hard_checks = tuple(str(c) for c in pget("history.hard_checks", ["fabric.manager"]) or [])
        text = (spec or "").strip().lower()
        if text and text not in ("on", "profile", "yes", "true"):
            parts = [p.strip() for p in text.split(",")]
            try:
                k = int(parts[0])
                m = int(parts[1]) if len(parts) > 1 and parts[1] else m
            except ValueError:
                raise ValueError(f"--damp {spec!r}: use K,M (e.g. 3,2): drain after K failing runs in a row, "
                                 "resume after M passing runs") from None
            if len(parts) > 2:
                raise ValueError(f"--damp {spec!r}: use K,M")
        if k < 1 or m < 1:
            raise ValueError(f"--damp {spec!r}: K and M must be at least 1")
        return cls(fail_runs=k, pass_runs=m, hard_xids=xids, hard_checks=hard_checks)


@dataclass(frozen=True)
class Decision:
    node: str
    drain: bool
    resume: bool
    reason: str  # the line shown and recorded; for a drain, the Slurm reason
    check: str = ""  # for a drain: the check and summary that go into `preflight: <check> <summary>`
    summary: str = ""
    hard: bool = False
    fail_streak: int = 0  # failing runs in a row, this one included
    pass_streak: int = 0
    unchecked_streak: int = 0  # runs in a row in which the node was not checked, this one included

    @property
    def action(self) -> str:
        if self.drain:
            return "drain"
        if self.resume:
            return "resume"
        if self.fail_streak:
            return "damped"
        return "unchecked" if self.unchecked_streak else "keep"

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "action": self.action, "drain": self.drain, "resume": self.resume,
                "reason": self.reason, "check": self.check, "hard": self.hard, "fail_streak": self.fail_streak,
                "pass_streak": self.pass_streak, "unchecked_streak": self.unchecked_streak}


# faults without an Xid number that no retry clears: the GPU or its link is gone until a reboot
HARD_FAULT_KINDS = {"fallen_off_bus": "GPU fallen off the bus", "gpu_lost": "GPU lost (no longer answers the driver)",
                    "pcie_fatal": "fatal PCIe error on a GPU or NIC", "sxid_fatal": "fatal NVSwitch error (SXid)",
                    "gsp_timeout": "GPU System Processor timed out (GPU reset needed)",
                    "gsp_crash": "GPU System Processor crashed (GPU reset needed)"}


def _xid_hard_fault(r: Result, damping: Damping) -> str:
    for ev in facts.xid_events(r):
        if ev["severity"] != "fail":
            continue
        xid = ev["xid"]
        if damping.hard_xids:
            if xid in damping.hard_xids:
                return f"Xid {xid} needs a GPU reset or reboot"
        elif xid_catalog.needs_drain(ev["action"]):
            return f"Xid {xid} needs a GPU reset or reboot"
        elif xid == 79:
            return "Xid 79: GPU fallen off the bus"
    for f in facts.xid_faults(r):
        why = HARD_FAULT_KINDS.get(f["kind"])
        if why:
            return why
    return ""


def _memory_hard_fault(r: Result) -> str:
    for g in facts.gpu_health(r):
        ecc = g["uncorrectable_ecc"]
        if ecc is not None and ecc > 0:
            return f"uncorrectable ECC on GPU {g['index']}"
        if g["remapped_failure"] is True:
            return f"row remapping failure on GPU {g['index']}"
        if g["remapped_pending"] is True:
            return f"row remap pending on GPU {g['index']}"
    return ""


def hard_fault(r: Result, damping: Damping) -> str:
    """Why a blocking result is a hard fault ("" when it is soft)."""
    if r.status not in BAD:
        return ""
    if r.check in damping.hard_checks:
        return f"{r.check} is a hard fault"
    # a root cause stands for the checks folded into it: one of them hard makes the root hard
    folded = [c for c in r.facts.get("dependents") or [] if c in damping.hard_checks]
    if folded:
        return f"{r.check} is a hard fault ({folded[0]} depends on it)"
    if r.check == "gpu.xid":
        return _xid_hard_fault(r, damping)
    if r.check == "gpu.health":
        return _memory_hard_fault(r)
    return ""


def _bad(results: Sequence[Result], node: str) -> list[Result]:
    return sorted((r for r in results if r.node == node and r.status in BAD),
                  key=lambda r: (-r.status.rank, r.check))


def _errors(results: Sequence[Result], node: str) -> list[Result]:
    return sorted((r for r in results if r.node == node and r.status is Status.ERROR), key=lambda r: r.check)


def run_kind(results: Sequence[Result], node: str) -> str:
    """"fail" (a graded failure), "unchecked" (ERRORs and no failure) or "pass" for one run."""
    if _bad(results, node):
        return "fail"
    return "unchecked" if _errors(results, node) else "pass"


def _streak(kinds: Sequence[str], want: str) -> int:
    """Runs of kind `want` in a row at the end of `kinds`; not-checked runs neither add to a
    fail or pass streak nor break it."""
    n = 0
    for k in reversed(kinds):
        if k == want:
            n += 1
        elif k != "unchecked":
            break
    return n


def decide(node: str, current: Sequence[Result], history: Sequence[Sequence[Result]],
           damping: Damping | None = None) -> Decision:
    """Drain, resume or leave `node`, from this run's results and its earlier runs (oldest first).

    Pure: no I/O. A run counts as failing when the node has a FAIL result in it, as passing
    when it has neither FAIL nor ERROR; a run with ERRORs and no FAIL was not checked."""
    d = damping or Damping()
    bad_now = _bad(current, node)
    kinds = [run_kind(run, node) for run in history]
    now = run_kind(current, node)
    if now == "fail":
        streak = 1 + _streak(kinds, "fail")
        worst = bad_now[0]
        hard = [(r, why) for r in bad_now if (why := hard_fault(r, d))]
        if hard:
            r, why = hard[0]
            return Decision(node, True, False, f"{r.check} hard fault ({why}): drained at once",
                            check=r.check, summary=f"hard fault: {r.summary}", hard=True, fail_streak=streak)
        graded = [run for run, k in zip(history, kinds, strict=True) if k != "unchecked"]
        window = [*graded[-(d.fail_runs - 1):], current] if d.fail_runs > 1 else [current]
        same = sum(1 for run in window if any(r.check == worst.check for r in _bad(run, node)))
        tally = f"{worst.status.value} {same}/{d.fail_runs} runs"
        if streak >= d.fail_runs:
            return Decision(node, True, False, f"{worst.check} {tally}: drained after {streak} failing runs in a row",
                            check=worst.check, summary=f"{tally}: {worst.summary}", fail_streak=streak)
        return Decision(node, False, False, f"damped: {worst.check} {tally}; a soft failure drains after "
                        f"{d.fail_runs} failing runs in a row ({streak} so far)",
                        check=worst.check, summary=worst.summary, fail_streak=streak)
    if now == "unchecked":
        unchecked = 1
        for k in reversed(kinds):
            if k != "unchecked":
                break
            unchecked += 1
        err = _errors(current, node)
        first = err[0]
        what = f"{len(err)} check(s) not checked ({first.check}: {first.summary})"
        if unchecked >= d.fail_runs:
            tally = f"not checked {unchecked}/{d.fail_runs} runs"
            return Decision(node, True, False, f"{tally} in a row: drained ({what})", check=first.check,
                            summary=f"{tally}: {first.summary}", unchecked_streak=unchecked)
        return Decision(node, False, False, f"{what}: neither a failure nor a pass; a node not checked in "
                        f"{d.fail_runs} runs in a row drains ({unchecked} so far)", check=first.check,
                        summary=first.summary, unchecked_streak=unchecked)
    streak = 1 + _streak(kinds, "pass")
    if streak >= d.pass_runs:
        return Decision(node, False, True, f"passed {min(streak, d.pass_runs)}/{d.pass_runs} runs in a row: "
                        "may resume", pass_streak=streak)
    return Decision(node, False, False, f"passed {streak}/{d.pass_runs} runs in a row: not resumed yet",
                    pass_streak=streak)
