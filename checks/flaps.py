"""Link flaps from system logs, for the checks that own the links: `net.nic` (Ethernet
interfaces) and `ib.hca` (IPoIB interfaces and RDMA ports). Facts: `preflight.parsers.netlog`.
"""

from __future__ import annotations

from typing import Any

from preflight.findings import Findings
from preflight.model import Status
from preflight.parsers.netlog import LinkEvents
from preflight.profile import Profile


def is_ib_name(name: str) -> bool:
    """An IPoIB / RDMA interface name (ib0, ibp26s0, ibs85f0, ib6): graded by ib.hca."""
    return name.startswith("ib") and len(name) > 2 and (name[2].isdigit() or name[2] in "ps")



def grade_flaps(events: LinkEvents, names: list[str], profile: Profile, f: Findings, what: str) -> list[dict[str, Any]]:
    """Link flaps of `names` from system-log events: WARN for a flap, FAIL past the profile's count."""
    fail_at = int(profile.get("net.link_flaps_fail") or 0)
    out = []
    for name in names:
        n = events.flaps(name)
        downs = events.downs(name)
        down_now = events.last_up(name) is False
        out.append({"interface": name, "flaps": n, "down_now": down_now, "downs": len(downs)})
        lines = [e.line.raw for e in events.of(name)[:6]]
        first, last = events.window(name)
        window = f" between {first} and {last}" if first and last and len(events.of(name)) > 1 else ""
        src = f"net.link_flaps_fail = {fail_at} ({profile.source('net.link_flaps_fail')})"
        if down_now:
            f.add(Status.FAIL, f"{what} {name} lost its link and did not get it back", [*lines, src],
                  f"check the cable/transceiver and the switch port of {name}; drain the node until the link is up")
        elif n and fail_at and n >= fail_at:
            f.add(Status.FAIL, f"{what} {name} flapped {n} times{window}", [*lines, src],
                  f"a flapping link makes NCCL jobs fail: drain the node, reseat or replace the cable/transceiver of "
                  f"{name}, check the switch port's error counters")
        elif n:
            f.add(Status.WARN, f"{what} {name} flapped {n} time(s){window}", [*lines, src],
                  f"watch {name}: replace the cable/transceiver if it flaps again")
    return out


__all__ = ["grade_flaps", "is_ib_name"]
