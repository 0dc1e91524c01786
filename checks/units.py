"""systemd units a check owns: a failed unit is graded by the check whose concern it serves.

`systemctl --failed`, `systemctl status X` and `journalctl -u X` (probe `systemd-units`, parsed by
preflight/parsers/systemd.py) name units by name or by description. Each owning check lists its
units here (the NVIDIA persistence and DCGM daemons: gpu.driver; the Mellanox/RDMA driver stack:
ib.hca; the time daemons: node.clock); the fabric manager's unit stays with fabric.manager (probe
`fm-service`). `owns(check)` gives a check the unit facts as one more input: its grader runs as
before, and a failed owned unit is one more finding, `<check>/unit-failed`; an owned unit that
runs is said as a PASS line. Failed units no check owns are named in a note beside them.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from typing import Any

from preflight import lazyre
from preflight.findings import Findings
from preflight.model import Result, Status, worst
from preflight.parsers.systemd import UNIT_NAME, UNITS_PROBE, Units, UnitState
from preflight.registry import Check, CheckContext, register

# check -> the units it owns: base names and descriptions as the vendors' unit files spell them
OWNERS: dict[str, re.Pattern[str]] = {
    "gpu.driver": lazyre.compile(r"^(?:nvidia-persistenced|nvidia-dcgm|dcgm|nvidia-powerd)$|"
                             r"^NVIDIA Persistence Daemon$|^NVIDIA DCGM service$|DCGM", re.I),
    "ib.hca": lazyre.compile(r"^(?:openibd|rdma|rdma-load-modules@\S*|rdma-hw|rdma-ndd|ibacm|opensm|"
                         r"nv_peer_mem|nvidia-peermem)$|^openibd\b|Mellanox|^RDMA |Peer Memory", re.I),
    "node.clock": lazyre.compile(r"^(?:chronyd?|ntpd?|ntpsec|ntpdate|systemd-timesyncd|openntpd)$|"
                             r"^NTP client/server$|^Network Time (?:Service|Synchronization)$|^chrony\b", re.I),
    "fabric.manager": lazyre.compile(r"^nvidia-fabricmanager$|fabric manager", re.I),
}
# check -> its code for a failed unit it owns
UNIT_FAILED = {"gpu.driver": "gpu.driver/unit-failed", "ib.hca": "ib.hca/unit-failed",
               "node.clock": "node.clock/unit-failed"}
CONCERN = {
    "gpu.driver": "the GPU driver's daemons (persistence mode, DCGM health monitoring)",
    "ib.hca": "the InfiniBand/RDMA driver stack (HCA modules, GPUDirect RDMA)",
    "node.clock": "clock synchronisation",
}
REMEDY = {
    "gpu.driver": "persistence mode and DCGM health watches are off while it is down; the daemon's own lines say why "
                  "(e.g. it cannot open /dev/nvidia*: the driver is not loaded)",
    "ib.hca": "the HCA driver stack is not (fully) loaded: RDMA ports and GPUDirect RDMA are not usable until it "
              "starts; check `ibstat` and dmesg for mlx5_core",
    "node.clock": "nothing keeps the clock on time while it is down; its own lines say why (a missing or bad "
                  "configuration file, a port in use by another time daemon)",
}


def owner(units: Units, u: UnitState) -> str:
    """The check that owns unit `u`, "" when none does."""
    names = [re.sub(r"\.service$", "", n) for n in units.names(u)] + [u.unit]
    for check, pattern in OWNERS.items():
        if any(pattern.search(n) for n in names):
            return check
    return ""


def owned(units: Units, check: str) -> list[UnitState]:
    return [u for u in units.units.values() if owner(units, u) == check]


def unowned_failed(units: Units) -> list[UnitState]:
    return [u for u in units.failed() if not owner(units, u)]


def _read(u: UnitState) -> str:
    """How to read the unit's own account: by name, or (named only by its description) find it."""
    if re.fullmatch(UNIT_NAME, u.unit):
        return f"read `systemctl status {u.unit}` and `journalctl -u {u.unit} -b`"
    return f"find the unit described as '{u.unit}' (`systemctl list-units --failed`) and read its `systemctl status`"


def _label(units: Units, u: UnitState) -> str:
    desc = units.descriptions.get(u.unit, "")
    return f"{u.unit} ({desc})" if desc and desc != u.unit else u.unit


def unit_findings(check: str, units: Units, f: Findings) -> list[str]:
    """Findings of the units `check` owns; the evidence lines of those that run (PASS lines)."""
    ok: list[str] = []
    for u in owned(units, check):
        what = _label(units, u)
        if u.active == "failed" and check in UNIT_FAILED:
            how = "failed" if u.form == "list" else u.describe()
            f.add(UNIT_FAILED[check], f"{what} {how}: {CONCERN.get(check, check)} not served", u.lines,
                  f"{REMEDY.get(check, '')}; {_read(u)}, fix the cause, then restart the unit", proof=("Active:", "failed"))
        elif u.active == "active":
            ok.append(next((ln for ln in u.lines if ln.startswith("Active:")), f"{u.unit} {u.describe()}"))
        elif u.active:
            f.note(f"{what} {u.describe()}")
    return ok


def _merge(ctx: CheckContext, check: str, units: Units, inner: list[Result]) -> list[Result]:
    """The unit findings joined to the check's own result (or standing alone where the check
    had nothing to say, or only that it had no input)."""
    f = Findings()
    ok = unit_findings(check, units, f)
    if not owned(units, check):
        return inner
    mine = [r for r in inner if r.check == check and r.node == ctx.node]
    if not mine or all(r.status is Status.SKIP for r in mine):
        units_ok = "; ".join(f"{u.unit} {u.describe()}" for u in owned(units, check))
        return [f.result(ctx, units_ok, {"units": _facts(units, check)}, ok)] + [r for r in inner if r not in mine]
    r = mine[0]
    if f:
        unit = f.result(ctx, "", {})
        r.summary = f"{unit.summary}; {r.summary}" if r.status is not Status.PASS or r.summary else unit.summary
        r.status = worst([r.status, unit.status])
        r.evidence = list(dict.fromkeys([*unit.evidence, *r.evidence]))
        r.remedy = f"{unit.remedy} {r.remedy}".strip() if r.remedy != unit.remedy else r.remedy
        r.facts["codes"] = list(dict.fromkeys([*unit.facts.get("codes", []), *r.facts.get("codes", [])]))
    else:
        r.evidence = list(dict.fromkeys([*r.evidence, *ok, *f.notes]))
    r.facts["units"] = _facts(units, check)
    return inner


def _facts(units: Units, check: str) -> list[dict[str, Any]]:
    return [{"unit": u.unit, "active": u.active, "sub": u.sub, "result": u.result} for u in owned(units, check)]


@dataclasses.dataclass(frozen=True)
class OwningCheck(Check):
    """A check that also reads the systemd unit facts (its declared inputs stay its own)."""

    also: tuple[str, ...] = ()

    def reads(self) -> tuple[str, ...]:
        return (*super().reads(), *self.also)


def owns(check: Check) -> Check:
    """`check` with the systemd unit facts as one more input: its grader runs when its own inputs
    are there (as before), and the units it owns are graded beside."""
    reads = check.reads()
    grade = check.grade

    def graded(ctx: CheckContext) -> Result | Iterable[Result]:
        units: Units | None = ctx.facts(UNITS_PROBE)
        if units is None:
            return grade(ctx)
        own_input = ctx.options.mode != "analyze" or any(ctx.input(p) is not None for p in reads)
        out = grade(ctx) if own_input else []
        inner = [out] if isinstance(out, Result) else list(out)
        return _merge(ctx, check.id, units, inner)

    fields = {f.name: getattr(check, f.name) for f in dataclasses.fields(check)}
    return OwningCheck(**{**fields, "grade": graded, "also": (UNITS_PROBE,)})


UNOWNED = "node.units"


def grade_unowned(ctx: CheckContext) -> list[Result]:
    """Failed units no check owns (`systemctl --failed` rows, a failed `status`, systemd's failure
    lines): said as a WARN each, never dropped; nothing when every failed unit has its owner."""
    units: Units | None = ctx.facts(UNITS_PROBE)
    if units is None or units.error:
        return []
    others = unowned_failed(units)
    if not others:
        return []
    f = Findings()
    for u in others:
        f.add("node.units/unit-failed", f"{_label(units, u)} {'failed' if u.form == 'list' else u.describe()}",
              u.lines, f"{_read(u)}; no preflight check reads this unit: judge whether the node needs it",
              proof=("Active:", "failed"))
    return [f.result(ctx, "", {"units": [{"unit": u.unit, "active": u.active, "result": u.result} for u in others]},
                     named=4)]


register(Check(
    id=UNOWNED, title="Failed systemd units no other check owns", grade=grade_unowned, probes=(),
    inputs=(UNITS_PROBE,),
    catches="a failed unit in `systemctl --failed`, `systemctl status` or systemd's journal that no check owns "
            "(the GPU, RDMA and time daemons' units are graded by gpu.driver, ib.hca, node.clock, fabric.manager)",
    node_local=False, in_run=False))

__all__ = ["OWNERS", "UNOWNED", "OwningCheck", "grade_unowned", "owned", "owner", "owns", "unit_findings", "unowned_failed"]
