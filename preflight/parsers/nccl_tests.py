"""nccl-tests / rccl-tests `*_perf` output as facts: the header, the rank list, the result rows.

Rows are `size count type [redop root] time algbw busbw #wrong` out-of-place then in-place
(`N/A` where a column was not measured); `# Avg bus bandwidth` and `# Out of bounds values`
close the table, but a pasted table may stop before them. The rank lines (`#  Rank 3 Group 0
Pid 123 on host device 3 [0x1b] NVIDIA H100 80GB HBM3`) give hosts, devices and GPU models.
A prompt above the table gives the command line (NCCL_IB_HCA, -b/-e sizes). srun labels and
blank labelled lines are peeled by framing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from preflight.framing import Doc
from preflight.parsers.base import Format, ParserSpec

_ROW_HEAD = re.compile(r"^\s*(\d+)\s+(\d+)\s+\S+")
_NUM = r"(?:[\d.]+(?:[eE][+-]?\d+)?|N/A|nan|-?inf)"
_RANK_LINE = re.compile(r"^#\s+Rank\s+(\d+)\s+Group\s+(\d+)\s+Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+"
                        r"\[([^\]]*)\]\s*(.*?)\s*$")
_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*([\d.]+(?:[eE][+-]?\d+)?)")
_OOB = re.compile(r"#\s*Out of bounds values\s*:\s*(\d+)\s+(\w+)")
_TEST_FAIL = re.compile(r"Test NCCL failure|Test CUDA failure|Test failure|NCCL WARN|"
                        r"\bunhandled (?:system|cuda) error\b", re.I)

# Printed busbw cells have two decimals: their mean may differ from the printed average by
# rounding only. A larger gap means an edited or truncated table.
AVG_ROUNDING_SLACK = 0.01


@dataclass
class NcclTestRow:
    bytes: int
    count: int
    dtype: str
    time_us: float | None
    algbw: float | None
    busbw: float | None
    wrong: int | None
    ip_time_us: float | None = None
    ip_algbw: float | None = None
    ip_busbw: float | None = None
    ip_wrong: int | None = None
    line: str = ""


@dataclass
class NcclTests:
    rows: list[NcclTestRow] = field(default_factory=list)
    ranks: list[dict[str, Any]] = field(default_factory=list)
    avg_busbw: float | None = None
    oob_values: int | None = None
    oob_line: str = ""
    avg_line: str = ""
    header: str = ""
    errors: list[str] = field(default_factory=list)
    command: str = ""  # the command line above the table (a prompt), when pasted
    ib_hcas: list[str] = field(default_factory=list)  # NCCL_IB_HCA devices named on that command line

    @property
    def recognised(self) -> bool:
        return bool(self.rows or self.ranks or self.errors or self.header)

    @property
    def hosts(self) -> list[str]:
        return list(dict.fromkeys(r["host"] for r in self.ranks))

    def busbw_cells(self) -> list[float]:
        out: list[float] = []
        for r in self.rows:
            out.extend(v for v in (r.busbw, r.ip_busbw) if v is not None)
        return out


def _f(tok: str) -> float | None:
    try:
        v = float(tok)
    except ValueError:
        return None
    return v if v == v and v not in (float("inf"), float("-inf")) else None


def _i(tok: str) -> int | None:
    return int(tok) if tok.isdigit() else None


def parse_nccl_tests(text: str) -> NcclTests:
    out = NcclTests()
    for raw in text.splitlines():
        line = raw.rstrip()
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            _comment(out, s)
        elif _TEST_FAIL.search(s):
            out.errors.append(s)
        elif _ROW_HEAD.match(line):
            row = _row(s)
            if row is not None:
                out.rows.append(row)
    return out


def _comment(out: NcclTests, s: str) -> None:
    """A `#` line: the run's header, a rank's device line, the average bus bandwidth, the
    out-of-bounds count."""
    if s.startswith("# nThread") and not out.header:
        out.header = s
    mr = _RANK_LINE.match(s)
    if mr:
        out.ranks.append({"rank": int(mr.group(1)), "group": int(mr.group(2)), "pid": int(mr.group(3)),
                          "host": mr.group(4), "device": int(mr.group(5)), "bus": mr.group(6),
                          "model": mr.group(7)})
    ma = _AVG.search(s)
    if ma:
        out.avg_busbw = float(ma.group(1))
        out.avg_line = s
    mo = _OOB.search(s)
    if mo:
        out.oob_values = int(mo.group(1))
        out.oob_line = s


def _row(s: str) -> NcclTestRow | None:
    """A result row: size count type [redop root] + (time algbw busbw #wrong) out of place, then
    in place; a row with only one set of the four (a single-mode run) has no in-place numbers."""
    toks = s.split()
    if len(toks) < 3 + 8:
        if len(toks) >= 3 + 4 and all(_f(t) is not None or t == "N/A" for t in toks[-4:]):
            tail = toks[-4:]
            return NcclTestRow(bytes=int(toks[0]), count=int(toks[1]), dtype=toks[2], time_us=_f(tail[0]),
                               algbw=_f(tail[1]), busbw=_f(tail[2]), wrong=_i(tail[3]), line=s)
        return None
    tail = toks[-8:]
    if not all(re.fullmatch(_NUM, t) for t in tail):
        return None
    return NcclTestRow(
        bytes=int(toks[0]), count=int(toks[1]), dtype=toks[2],
        time_us=_f(tail[0]), algbw=_f(tail[1]), busbw=_f(tail[2]), wrong=_i(tail[3]),
        ip_time_us=_f(tail[4]), ip_algbw=_f(tail[5]), ip_busbw=_f(tail[6]), ip_wrong=_i(tail[7]), line=s)


_HCA_ARG = re.compile(r"NCCL_IB_HCA[= ]['\"]?\^?=?([\w.:,-]+)")


def parse(doc: Doc) -> NcclTests:
    out = parse_nccl_tests("\n".join(ln.text for ln in doc.lines))
    out.command = doc.command or ""
    m = _HCA_ARG.search(out.command)
    if m:
        out.ib_hcas = [h.split(":")[0] for h in m.group(1).split(",") if h]
    return out


def detect(doc: Doc) -> bool:
    for ln in doc.head(400):
        t = ln.text
        if (re.match(r"^#\s*Avg bus bandwidth\s*:", t) or re.match(r"^# nThread \d+ nGpus \d+", t)
                or re.match(r"^#\s+size\s+count\s+type\b.*\btime\s+algbw\s+busbw", t)):
            return True
    return False


FORMATS = [Format("nccl-tests", detect=detect, priority=65, description="nccl-tests / rccl-tests *_perf output")]
PARSERS = [ParserSpec("nccl-tests", parse)]

__all__ = ["AVG_ROUNDING_SLACK", "FORMATS", "PARSERS", "NcclTestRow", "NcclTests", "detect", "parse",
           "parse_nccl_tests"]
