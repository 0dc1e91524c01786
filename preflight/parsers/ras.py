"""NCCL RAS status (`ncclras`) as facts: missing or dead processes, ranks behind in operation counts."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from preflight.parsers.base import to_int as _int

_RAS_PROCESS = re.compile(r"^\s*Process (\d+) on node (\S+) managing GPUs? (\S+)")
_RAS_RANK = re.compile(r"^\s*Rank (\d+)(?: has (?:launched up to operation (\d+)|not launched any operations|"
                       r"status (\w+)))?\s*--\s*(?:GPU (\S+) managed by process (\d+) on node (\S+)|\[process information "
                       r"not found\])")
_RAS_COUNTS = re.compile(r"^\s*(\d+) ranks have launched up to operation (\d+)")
_RAS_OPS = re.compile(r"Communicator ranks have different (\w+) operation counts")


@dataclass
class RasStatus:
    missing_processes: list[dict[str, Any]] = field(default_factory=list)  # {pid, node, gpus}
    dead_processes: list[dict[str, Any]] = field(default_factory=list)
    ranks: list[dict[str, Any]] = field(default_factory=list)  # {rank, section, launched, status, node, pid}
    majority_launched: int | None = None
    mismatched_ops: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.missing_processes or self.dead_processes or self.ranks or self.mismatched_ops)


def looks_like_ras(text: str) -> bool:
    return bool(re.search(r"^Errors\n======", text, re.M) or re.search(r"Communicators\.\.\.", text)
                or re.search(r"^Group\s+Comms\s+Nodes\s+Ranks", text, re.M))


def parse_ras(text: str) -> RasStatus:
    """`ncclras` text -> the processes and ranks RAS singled out."""
    out = RasStatus()
    section = ""
    top = 0
    for raw in text.splitlines():
        line = raw.rstrip()
        word = line.strip()
        if word in ("INCOMPLETE", "DEAD") or re.match(r"^#\d+-\d+ \([0-9a-f]+\) (INCOMPLETE|ERROR|MISMATCH)$", word):
            section = word.split()[-1]
            out.lines.append(word)
            continue
        mp = _RAS_PROCESS.match(line)
        if mp:
            rec = {"pid": int(mp.group(1)), "node": mp.group(2), "gpus": mp.group(3)}
            (out.dead_processes if section == "DEAD" else out.missing_processes).append(rec)
            out.lines.append(word)
            continue
        mr = _RAS_RANK.match(line)
        if mr:
            out.ranks.append({"rank": int(mr.group(1)), "section": section,
                              "launched": _int(mr.group(2)) if mr.group(2) else (0 if "not launched" in line else None),
                              "status": mr.group(3) or "", "node": mr.group(6) or "",
                              "pid": _int(mr.group(5)) if mr.group(5) else None})
            out.lines.append(word)
            continue
        mc = _RAS_COUNTS.match(line)
        if mc and int(mc.group(1)) > top:
            top = int(mc.group(1))
            out.majority_launched = int(mc.group(2))
            out.lines.append(word)
            continue
        mo = _RAS_OPS.search(line)
        if mo:
            out.mismatched_ops.append(mo.group(1))
            out.lines.append(word)
    return out
