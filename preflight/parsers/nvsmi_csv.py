"""`nvidia-smi --query-gpu=<fields> --format=csv[,noheader][,nounits]` as facts.

The header names the fields as queried, with a unit suffix (` [MiB]`) unless `nounits`.
Cells follow csv quoting (a GPU name may hold commas inside quotes). Without a header
(`noheader`) the fields come from the command line that produced the output, when it is
known (the probe's argv, or the prompt above a paste); a headerless CSV of unknown fields is
not guessed. A row that does not fit the header (an extra or a missing cell) is kept as a bad
row naming its line, never dropped: the GPU it describes was seen but could not be read.
Looping queries (`-l N`) print the same GPU many times: the last sample of each GPU counts.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field

from preflight import lazyre
from preflight.framing import Doc
from preflight.parsers.base import BROKEN_VALUES, Format, GpuRecord, ParserSpec, clean, to_bool, to_int
from preflight.parsers.nvsmi_errors import ToolError, errors_in

_HEADER_CELL = lazyre.compile(r"^([A-Za-z][A-Za-z0-9_.]*)(?:\s*\[[^\]]*\])?$")
# fields of --query-gpu common enough that two of them in a header line make it one
CORE_FIELDS = frozenset({
    "index", "name", "uuid", "pci.bus_id", "driver_version", "serial", "vbios_version", "memory.total",
    "persistence_mode", "pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current",
    "mig.mode.current", "timestamp", "count", "pstate", "temperature.gpu", "utilization.gpu", "power.draw",
    "fan.speed", "memory.used", "clocks.sm", "ecc.errors.uncorrected.volatile.total", "gpu_name", "gpu_bus_id",
})
_QUERY_ARG = lazyre.compile(r"--query-gpu[= ]+['\"]?([A-Za-z0-9_.,\s]+?)['\"]?(?=\s+-|\s*$|\s*\|)")


@dataclass(frozen=True)
class BadRow:
    n: int  # line number in the document (1-based)
    line: str
    why: str


@dataclass
class QueryCsv:
    fields: list[str] = field(default_factory=list)  # lower case, unit suffixes removed
    rows: list[dict[str, str]] = field(default_factory=list)  # field -> cell as printed (stripped)
    bad_rows: list[BadRow] = field(default_factory=list)
    gpus: list[GpuRecord] = field(default_factory=list)
    driver: str = ""
    header_found: bool = False
    noheader: bool = False  # fields taken from the command line
    errors: list[ToolError] = field(default_factory=list)
    other: list[str] = field(default_factory=list)  # lines that are neither header, row nor tool error

    @property
    def recognised(self) -> bool:
        return bool(self.fields)


def header_fields(line: str) -> list[str] | None:
    """Field names of a --format=csv header line; None when the line is not one."""
    names = []
    for cell in line.lstrip("\ufeff").split(","):
        m = _HEADER_CELL.match(cell.strip())
        if not m:
            return None
        names.append(m.group(1).lower())
    return names if len(names) >= 2 else None


def _is_header(line: str) -> list[str] | None:
    names = header_fields(line)
    if names and (len(set(names) & CORE_FIELDS) >= 2 or (len(names) == 2 and set(names) & CORE_FIELDS)):
        return names
    return None


def command_fields(command: str) -> list[str]:
    """The fields a `nvidia-smi --query-gpu=...` command line asks for ([] when none)."""
    m = _QUERY_ARG.search(command or "")
    if not m:
        return []
    return [f.strip().lower() for f in m.group(1).split(",") if f.strip()]


def _record(row: dict[str, str], position: int, line: str) -> GpuRecord:
    def get(*names: str) -> str:
        for n in names:
            v = clean(row.get(n))
            if v and v.lower() not in BROKEN_VALUES:
                return v
        return ""

    idx = to_int(get("index"))
    return GpuRecord(
        index=position if idx is None else idx,
        name=get("name", "gpu_name") or None,
        uuid=get("uuid", "gpu_uuid") or None,
        bus_id=get("pci.bus_id", "gpu_bus_id") or None,
        vbios=get("vbios_version") or None,
        persistence=to_bool(get("persistence_mode")),
        pstate=get("pstate") or None,
        pcie_gen=to_int(get("pcie.link.gen.current", "pcie.link.gen.gpucurrent")),
        pcie_gen_max=to_int(get("pcie.link.gen.max", "pcie.link.gen.gpumax")),
        pcie_width=to_int(get("pcie.link.width.current")),
        pcie_width_max=to_int(get("pcie.link.width.max")),
        mig_mode=get("mig.mode.current") or None,
        mig_pending=get("mig.mode.pending") or None,
        memory_total_mib=to_int(get("memory.total")),
        util=to_int(get("utilization.gpu")),
        broken=sorted({v for v in row.values() if v.strip().lower() in BROKEN_VALUES}),
        line=line.strip(),
        cells=dict(row),
    )


def _row(out: QueryCsv, fields: list[str], n: int, line: str) -> dict[str, str] | None:
    """The row's cells by field; a bad row (kept, naming its line) when they do not fit."""
    try:
        cells = next(csv.reader([line], skipinitialspace=True))
    except (csv.Error, StopIteration) as exc:
        out.bad_rows.append(BadRow(n, line, f"not a CSV row ({exc})"))
        return None
    if len(cells) != len(fields):
        more = "more" if len(cells) > len(fields) else "fewer"
        out.bad_rows.append(BadRow(n, line, f"{len(cells)} cells, {more} than the header's {len(fields)} fields"))
        return None
    return {f: c.strip() for f, c in zip(fields, cells, strict=True)}


def parse(doc: Doc) -> QueryCsv:
    texts = [ln.text.strip() for ln in doc.lines]
    out = QueryCsv()
    fields: list[str] = []
    cmd_fields = command_fields(doc.command)
    if cmd_fields and "noheader" in (doc.command or ""):
        fields, out.noheader = cmd_fields, True
    samples: dict[str, GpuRecord] = {}
    loose: list[str] = []  # lines that are not rows, in order: where tool errors are looked for
    for n, line in enumerate(texts, 1):
        if not line:
            continue
        head = _is_header(line)
        if head is not None and (not out.noheader or head == fields):
            fields, out.header_found = head, True
            continue
        if not fields or ("," not in line and len(fields) > 1):
            out.other.append(line)  # text before the header, or a message between rows
            loose.append(line)
            continue
        row = _row(out, fields, n, line)
        if row is None:
            loose.append(line)
            continue
        out.rows.append(row)
        rec = _record(row, len(samples), line)
        samples[rec.uuid or rec.bus_id or str(rec.index)] = rec
    # `Unable to determine the device handle for GPU0: ...` (and its explanation lines, which may hold
    # commas) between the rows is the tool's message about a GPU, not a row
    out.errors = errors_in(loose)
    claimed = {t for e in out.errors for t in e.lines}
    out.bad_rows = [b for b in out.bad_rows if b.line not in claimed]
    out.other = [t for t in out.other if t not in claimed]
    out.fields = fields
    out.gpus = sorted(samples.values(), key=lambda g: g.index)
    drivers = [clean(r.get("driver_version")) for r in out.rows if clean(r.get("driver_version"))]
    out.driver = drivers[-1] if drivers else ""
    return out


def detect(doc: Doc) -> bool:
    if command_fields(doc.command) and "csv" in doc.command:
        return True
    for ln in doc.head(40):
        if ln.text.strip():
            return _is_header(ln.text.strip()) is not None
    return False


FORMATS = [Format("nvidia-smi-query", detect=detect, priority=60,
                  description="nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]")]
PARSERS = [ParserSpec("nvidia-smi-query", parse)]

__all__ = ["CORE_FIELDS", "FORMATS", "PARSERS", "BadRow", "QueryCsv", "command_fields", "detect", "header_fields",
           "parse"]
