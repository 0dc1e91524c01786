"""gpu.nvlink, error counters: the `nvidia-smi nvlink --errorcounters` (`-e`, `-ec`) part of the
NVLink check, graded by finding codes.

Every counter of an error kind (`preflight.parsers.nvlink.ERROR_KINDS`) above 0 is a finding of
its kind's code (`KIND_CODES`): replays, recoveries, CRC errors, packet errors and errors FEC
did not correct on a link are a marginal link (WARN by the policy), a recovery that failed is a
link lost (FAIL). `Total link recovery events` is the sum of the successful and the failed
recoveries printed beside it: never added to them; on a link that shows no such split it is read as
its recoveries. A total that is not the sum of its split is named in a note. Rates (BER), the FEC histogram, the pre-FEC raw counters and traffic are not
error counts and are not graded; a counter of no known kind, or one that reads no number, is
named in a note, never guessed at. The statuses are the policy's (`checks/policy.toml`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from preflight.findings import Findings
from preflight.parsers.nvlink import ERROR_KINDS, TOTAL_KINDS, Counter, NvlinkGpu

KIND_CODES = {
    "replay": "gpu.nvlink/replay-errors",
    "recovery": "gpu.nvlink/recovery-errors",
    "recovery_failed": "gpu.nvlink/recovery-failed",
    "crc": "gpu.nvlink/crc-errors",
    "packet": "gpu.nvlink/packet-errors",
    "symbol": "gpu.nvlink/symbol-errors",
}
KIND_WORDS = {"replay": "replay", "recovery": "recovery", "recovery_failed": "failed recovery", "crc": "CRC",
              "packet": "packet", "symbol": "effective/symbol"}
KIND_TITLES = {"replay": "NVLink replay errors", "recovery": "NVLink link recoveries",
               "recovery_failed": "NVLink link recoveries that failed", "crc": "NVLink CRC errors",
               "packet": "NVLink packet errors", "symbol": "NVLink errors FEC did not correct"}
MARGINAL_REMEDY = ("watch the counters (`nvidia-smi nvlink -e`, reset with `nvidia-smi nvlink -re`): counts that keep "
                   "growing on one link point at its cable, connector or board; reseat or service it at the next "
                   "maintenance, drain the node if a link goes down or an Xid 74 follows")
LOST_REMEDY = ("drain the node: a link failed to recover and is down until the GPU is reset; reset the GPU "
               "(`nvidia-smi -r`) or reboot, check `nvidia-smi nvlink -s`, and service the link if it recurs")


@dataclass
class CounterGrade:
    """What the error counters of a listing say."""

    gpus: int
    links: int = 0
    read: int = 0  # error counters read as a number
    nonzero: dict[str, list[tuple[NvlinkGpu, Counter, int]]] = field(default_factory=dict)  # kind -> (.., count > 0)
    unread: list[Counter] = field(default_factory=list)  # error counters without a number (N/A)
    unknown: list[Counter] = field(default_factory=list)  # counters of no known kind, above 0
    mismatched: list[tuple[Counter, int]] = field(default_factory=list)  # a total that is not its split's sum
    kinds: set[str] = field(default_factory=set)  # the error kinds read

    @property
    def graded(self) -> bool:
        return self.read > 0


def _graded(g: NvlinkGpu, mismatched: list[tuple[Counter, int]]) -> list[Counter]:
    """The GPU's counters with each total replaced: dropped where its link shows the counters it
    sums (a total that is not their sum goes to `mismatched`), read as its kind's counter where not."""
    out = []
    for c in g.counters:
        if c.kind not in TOTAL_KINDS:
            out.append(c)
            continue
        as_kind, parts = TOTAL_KINDS[c.kind]
        split = [p.value for p in g.counters if p.link == c.link and p.kind in parts and p.value is not None]
        if not split:
            out.append(replace(c, kind=as_kind))
        elif c.value is not None and c.value != sum(split):
            mismatched.append((c, sum(split)))
    return out


def read_counters(gpus: list[NvlinkGpu]) -> CounterGrade:
    cg = CounterGrade(gpus=len(gpus))
    for g in gpus:
        cg.links += len({c.link for c in g.counters})
        for c in _graded(g, cg.mismatched):
            if c.kind in ERROR_KINDS:
                if c.value is None:
                    cg.unread.append(c)
                    continue
                cg.read += 1
                cg.kinds.add(c.kind)
                if c.value > 0:
                    cg.nonzero.setdefault(c.kind, []).append((g, c, c.value))
            elif not c.kind and c.value:
                cg.unknown.append(c)
    return cg


def _where(hits: list[tuple[NvlinkGpu, Counter, int]]) -> str:
    per: dict[tuple[int, int], int] = {}
    for g, c, n in hits:
        per[(g.index, c.link)] = per.get((g.index, c.link), 0) + n
    shown = [f"GPU {gi} link {ln} ({n})" for (gi, ln), n in list(per.items())[:6]]
    more = f" (+{len(per) - 6} more)" if len(per) > 6 else ""  # pragma: no mutate (6: how many are named)
    return ", ".join(shown) + more


def counter_findings(cg: CounterGrade, f: Findings) -> None:
    """One finding per error kind with a counter above 0; notes for what was not read."""
    for kind in ERROR_KINDS:
        hits = cg.nonzero.get(kind, [])
        if not hits:
            continue
        evidence = list(dict.fromkeys(line for g, c, _ in hits for line in (g.line, c.line)))
        remedy = LOST_REMEDY if kind == "recovery_failed" else MARGINAL_REMEDY
        f.add(KIND_CODES[kind], f"{KIND_TITLES[kind]}: {_where(hits)}", evidence, remedy, proof=hits[0][1].line)
    if cg.unread:
        f.note(f"{len(cg.unread)} NVLink error counter(s) read no number, not graded: {cg.unread[0].line}")
    if cg.mismatched:
        c, parts = cg.mismatched[0]
        f.note(f"{len(cg.mismatched)} NVLink recovery total(s) differ from the successful + failed events beside "
               f"them ({c.text} against {parts}; the split is graded): {c.line}")
    if cg.unknown:
        f.note("NVLink counter(s) of no known kind above 0, not graded: "
               + ", ".join(f"{c.name} = {c.text}" for c in cg.unknown[:3]))


def ok_summary(cg: CounterGrade) -> str:
    kinds = sorted(cg.kinds, key=ERROR_KINDS.index)
    return (f"NVLink error counters 0 on {cg.links} link(s) of {cg.gpus} GPU(s) ("
            + ", ".join(KIND_WORDS[k] for k in kinds) + ")")


def counter_facts(cg: CounterGrade) -> dict[str, Any]:
    return {"gpus": cg.gpus, "links": cg.links, "counters_read": cg.read,
            "nonzero": {k: sum(n for _, _, n in hits) for k, hits in cg.nonzero.items()},
            "unread": len(cg.unread)}


__all__ = ["CounterGrade", "KIND_CODES", "counter_facts", "counter_findings", "ok_summary", "read_counters"]
