"""Link flaps and transceiver faults from system logs, for the checks that own the links:
`net.nic` (Ethernet interfaces) and `ib.hca` (IPoIB interfaces and RDMA ports). Facts:
`preflight.parsers.netlog`. The finding codes are the calling check's (`net.nic/link-flapping`,
`ib.hca/link-flapping`); all of them are in `checks/policy.toml`.

Linear in the events: each interface's events come from the parser's index, so grading hundreds
of interfaces reads each event once.
"""

from __future__ import annotations

from typing import Any

from preflight.findings import Findings
from preflight.parsers.netlog import LinkEvents, ModuleError
from preflight.profile import Profile

QUOTED = 6  # event lines quoted per interface (display limit)
# each calling check's codes, written out (the policy table's tests read codes from the source)
CODES = {
    "net.nic": {"lost": "net.nic/link-lost", "flapping": "net.nic/link-flapping", "flapped": "net.nic/link-flapped",
                "module": "net.nic/module-error"},
    "ib.hca": {"lost": "ib.hca/link-lost", "flapping": "ib.hca/link-flapping", "flapped": "ib.hca/link-flapped",
               "module": "ib.hca/module-error"},
}


def is_ib_name(name: str) -> bool:
    """An IPoIB / RDMA interface name (ib0, ibp26s0, ibs85f0, ib6): graded by ib.hca."""
    return name.startswith("ib") and len(name) > 2 and (name[2].isdigit() or name[2] in ("p", "s"))


def _flap_finding(check: str, what: str, name: str, n: int, down_now: bool, fail_at: int) -> tuple[str, str, str]:
    """(code, summary, remedy) of one interface's link history; ("", "", "") when it is clean."""
    if down_now:
        return (CODES[check]["lost"], f"{what} {name} lost its link and did not get it back",
                f"check the cable/transceiver and the switch port of {name}; drain the node until the link is up")
    if n and fail_at and n >= fail_at:
        return (CODES[check]["flapping"], f"{what} {name} flapped {n} times",
                f"a flapping link makes NCCL jobs fail: drain the node, reseat or replace the cable/transceiver of "
                f"{name}, check the switch port's error counters")
    if n:
        return (CODES[check]["flapped"], f"{what} {name} flapped {n} time(s)",
                f"watch {name}: replace the cable/transceiver if it flaps again")
    return "", "", ""


def _module_findings(check: str, what: str, name: str, errs: list[ModuleError], f: Findings) -> None:
    faults = sorted({e.what for e in errs})
    f.add(CODES[check]["module"], f"{what} {name}: transceiver fault reported by the driver ({'; '.join(faults)})",
          [e.line.raw for e in errs[:QUOTED]],
          f"the port module (cable/transceiver) of {name} reported {', '.join(faults)}: reseat or replace it, check "
          f"its temperature and power budget (`mlxlink -d {errs[0].pci} -m`); the port stays down until it is fixed")


def grade_flaps(events: LinkEvents, names: list[str], profile: Profile, f: Findings, what: str,
                check: str = "net.nic") -> list[dict[str, Any]]:
    """Link flaps of `names` from system-log events: a WARN for a flap, a FAIL past the profile's
    count or for a link lost for good; a transceiver fault on one of `names` is a WARN. The codes
    are `check`'s. Returns one fact per interface with link events."""
    fail_at = int(profile.get("net.link_flaps_fail") or 0)
    src = f"net.link_flaps_fail = {fail_at} ({profile.source('net.link_flaps_fail')})"
    out = []
    for name in names:
        mine = events.of(name)
        errs = events.modules_of(name)
        if errs:
            _module_findings(check, what, name, errs, f)
        if not mine:
            continue
        n, downs, down_now = events.flaps(name), len(events.downs(name)), mine[-1].up is False
        out.append({"interface": name, "flaps": n, "down_now": down_now, "downs": downs})
        code, summary, remedy = _flap_finding(check, what, name, n, down_now, fail_at)
        if not code:
            continue
        first, last = events.window(name) if not down_now else ("", "")
        # a flap is two events at least, and `last` has a time whenever `first` has one
        window = f" between {first} and {last}" if first else ""
        ev = [e.line.raw for e in mine[:QUOTED]]
        # the loss that proves it comes first, whatever came before: the one that left the link down,
        # else the latest loss the link came back from (a log's first event is often a link up)
        proof = mine[-1] if down_now else next(e for e in reversed(mine) if e.up is False)
        ev = [proof.line.raw, *(x for x in ev if x != proof.line.raw)][:QUOTED]
        f.add(code, summary + window, [*ev, src], remedy)
    return out


__all__ = ["CODES", "grade_flaps", "is_ib_name"]
