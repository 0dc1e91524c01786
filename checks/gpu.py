"""GPU inventory, NVLink and PCIe/NVLink topology checks.

gpu.inventory  how many GPUs, which model, driver, VBIOS, persistence, PCIe link, MIG mode
               (from `nvidia-smi --query-gpu`, `nvidia-smi -L`, NVML, or the default table)
gpu.nvlink     every NVLink of every GPU up, at the expected speed (`nvidia-smi nvlink --status`)
gpu.topology   GPU pairs on NVLink and a NIC near each GPU (`nvidia-smi topo -m`)

Parsers are pure (text -> dicts); graders are pure (facts + profile -> Result). Expected
values come from the profile sections [gpu], [nvlink] and [topology].
"""

from __future__ import annotations

import csv
import json
import re
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from preflight import engine
from preflight.model import Capture, Result, Status, worst
from preflight.probes import Probe
from preflight.registry import Check, CheckContext, Format, register, register_format

# ---------------------------------------------------------------------------------------
# Probes
# ---------------------------------------------------------------------------------------

# Fields every driver since the R450 branch knows; an unknown field makes nvidia-smi refuse
# the whole query, so the fallback drops the MIG fields that older drivers lack.
QUERY_FIELDS: tuple[str, ...] = (
    "index", "name", "uuid", "pci.bus_id", "driver_version", "vbios_version", "persistence_mode",
    "pstate", "pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current",
    "pcie.link.width.max", "memory.total", "utilization.gpu", "mig.mode.current", "mig.mode.pending",
)
_QUERY_FIELDS_OLD = tuple(f for f in QUERY_FIELDS if not f.startswith("mig."))

PROBE_QUERY = Probe.of(
    "nvidia-smi-query",
    ["nvidia-smi", "--query-gpu=" + ",".join(QUERY_FIELDS), "--format=csv"],
    ["nvidia-smi", "--query-gpu=" + ",".join(_QUERY_FIELDS_OLD), "--format=csv"],
    timeout=15,
)
PROBE_L = Probe.of("nvidia-smi-L", ["nvidia-smi", "-L"], timeout=15)
PROBE_NVML = Probe.of("nvml", [sys.executable, "-m", "preflight.nvml_probe"], timeout=20)
PROBE_NVLINK = Probe.of("nvidia-smi-nvlink", ["nvidia-smi", "nvlink", "--status"], ["nvidia-smi", "nvlink", "-s"],
                        timeout=15)
PROBE_TOPO = Probe.of("nvidia-smi-topo", ["nvidia-smi", "topo", "-m"], timeout=15)

EVIDENCE_MAX = 24  # evidence lines kept per result (display limits, not grading thresholds)
SUMMARY_FINDINGS = 3  # findings named in a one-line summary

# ---------------------------------------------------------------------------------------
# Shared helpers
# ---------------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_NA_VALUES = {"", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]", "[gpu is lost]",
              "[requested functionality has been deprecated]", "[insufficient permissions]"}
_SMI_FAILURES = (
    re.compile(r"NVIDIA-SMI has failed.*", re.I),
    re.compile(r"No devices were found", re.I),
    re.compile(r"Failed to initialize NVML.*", re.I),
    re.compile(r"Unable to determine the device handle for.*", re.I),
    re.compile(r"Driver/library version mismatch.*", re.I),
    re.compile(r"Unable to load the NVIDIA kernel module.*", re.I),
)
_LOST = re.compile(
    r"Unable to determine the device handle for\s*(?:GPU|gpu)?\s*"
    r"([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*:?\s*(.*)")


def strip_ansi(text: str) -> str:
    """Remove terminal escape sequences (nvidia-smi underlines the topo header on a TTY)."""
    return _ANSI.sub("", text)


def _na(value: str | None) -> str | None:
    """None for the N/A spellings nvidia-smi uses; the stripped value otherwise."""
    if value is None:
        return None
    v = value.strip()
    return None if v.lower() in _NA_VALUES or (v.startswith("[") and v.endswith("]")) else v


def _int(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    m = re.match(r"\s*(-?\d+)", str(value))
    return int(m.group(1)) if m else None


def _onoff(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    v = str(value or "").strip().lower()
    if v in ("enabled", "on", "yes", "1", "true"):
        return True
    if v in ("disabled", "off", "no", "0", "false"):
        return False
    return None


def smi_failures(text: str) -> list[str]:
    """Lines in which nvidia-smi says it could not do its job (driver gone, GPU lost...)."""
    out = []
    for line in strip_ansi(text).splitlines():
        if any(p.search(line) for p in _SMI_FAILURES):
            out.append(line.strip())
    return out


def lost_gpus(text: str) -> list[dict[str, str]]:
    """GPUs nvidia-smi saw on the PCI bus but could not open: [{bus_id, error, line}]."""
    out = []
    for line in strip_ansi(text).splitlines():
        m = _LOST.search(line)
        if m:
            out.append({"bus_id": m.group(1), "error": m.group(2).strip(), "line": line.strip()})
    return out


def _gpu_label(g: dict[str, Any]) -> str:
    idx = g.get("index")
    bus = g.get("bus_id")
    name = f"GPU {idx}" if idx is not None else "GPU ?"
    return f"{name} ({bus})" if bus else name


@dataclass
class _Finding:
    status: Status
    summary: str
    evidence: list[str] = field(default_factory=list)
    remedy: str = ""


def _combine(ctx: CheckContext, findings: list[_Finding], ok_summary: str, facts: dict[str, Any],
             notes: Iterable[str] = ()) -> Result:
    """One Result from several findings: the worst status, its summary first, all evidence."""
    notes = list(notes)
    if not findings:
        return ctx.result(Status.PASS, ok_summary, evidence=notes[:EVIDENCE_MAX], facts=facts)
    status = worst([f.status for f in findings])
    ordered = sorted(findings, key=lambda f: -f.status.rank)
    summary = "; ".join(f.summary for f in ordered[:SUMMARY_FINDINGS])
    if len(ordered) > SUMMARY_FINDINGS:
        summary += f" (+{len(ordered) - SUMMARY_FINDINGS} more)"
    evidence: list[str] = []
    for f in ordered:
        for e in f.evidence:
            if e not in evidence:
                evidence.append(e)
    evidence.extend(n for n in notes if n not in evidence)
    remedies = list(dict.fromkeys(f.remedy for f in ordered if f.remedy))
    remedy = remedies[0] if len(remedies) == 1 else " ".join(f"({i}) {r}" for i, r in enumerate(remedies, 1))
    return ctx.result(status, summary, evidence=evidence[:EVIDENCE_MAX], remedy=remedy, facts=facts)


# ---------------------------------------------------------------------------------------
# Parsers: nvidia-smi --query-gpu=... --format=csv
# ---------------------------------------------------------------------------------------

_HEADER_FIELD = re.compile(r"^([A-Za-z][A-Za-z0-9_.]*)(?:\s*\[[^\]]*\])?$")
_CORE_FIELDS = {"index", "name", "uuid", "pci.bus_id", "driver_version", "serial", "vbios_version",
                "memory.total", "persistence_mode", "pcie.link.gen.current", "mig.mode.current"}


def _csv_header(line: str) -> list[str] | None:
    """Field names of a --format=csv header line (unit suffixes such as ` [MiB]` removed)."""
    names = []
    for cell in line.lstrip("\ufeff").split(","):
        m = _HEADER_FIELD.match(cell.strip())
        if not m:
            return None
        names.append(m.group(1))
    return names


def looks_like_query_csv(text: str) -> bool:
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    names = _csv_header(first) or []
    return len(set(names) & _CORE_FIELDS) >= 2


def parse_query_csv(text: str) -> dict[str, Any]:
    """Parse `nvidia-smi --query-gpu=<fields> --format=csv` (header with units, any field set).

    Returns {"fields": [...], "rows": [{field: raw value}], "gpus": [normalised GPU dicts],
    "driver": str, "problems": [lines that are not rows]}."""
    text = strip_ansi(text)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    out: dict[str, Any] = {"fields": [], "rows": [], "gpus": [], "driver": "", "problems": []}
    start = next((i for i, ln in enumerate(lines) if _csv_header(ln) and len(_csv_header(ln) or []) > 1), None)
    if start is None:
        out["problems"] = lines[:5]
        return out
    fields = _csv_header(lines[start]) or []
    out["fields"] = fields
    out["problems"].extend(lines[:start])
    for raw in lines[start + 1:]:
        try:
            cells = next(csv.reader([raw], skipinitialspace=True))
        except (csv.Error, StopIteration):
            out["problems"].append(raw)
            continue
        if len(cells) != len(fields):
            out["problems"].append(raw.strip())
            continue
        row = {f: c.strip() for f, c in zip(fields, cells, strict=True)}
        out["rows"].append(row)
        out["gpus"].append(_gpu_from_query(row, len(out["gpus"])))
    drivers = [r.get("driver_version", "") for r in out["rows"] if _na(r.get("driver_version"))]
    out["driver"] = drivers[0] if drivers else ""
    return out


def _gpu_from_query(row: dict[str, str], position: int) -> dict[str, Any]:
    idx = _int(_na(row.get("index")))
    return {
        "index": position if idx is None else idx,
        "name": _na(row.get("name")),
        "uuid": _na(row.get("uuid")),
        "bus_id": _na(row.get("pci.bus_id")),
        "vbios": _na(row.get("vbios_version")),
        "persistence": _onoff(_na(row.get("persistence_mode"))),
        "pstate": _na(row.get("pstate")),
        "pcie_gen": _int(_na(row.get("pcie.link.gen.current"))),
        "pcie_gen_max": _int(_na(row.get("pcie.link.gen.max"))),
        "pcie_width": _int(_na(row.get("pcie.link.width.current"))),
        "pcie_width_max": _int(_na(row.get("pcie.link.width.max"))),
        "mig_mode": _na(row.get("mig.mode.current")),
        "mig_pending": _na(row.get("mig.mode.pending")),
        "memory_total_mib": _int(_na(row.get("memory.total"))),
        "util": _int(_na(row.get("utilization.gpu"))),
        "raw": {k: v for k, v in row.items() if k in _EVIDENCE_FIELDS},
        "broken": sorted({v for v in row.values() if v.lower() in _BROKEN_VALUES}),
    }


# Cell values with which nvidia-smi says a listed GPU no longer answers.
_BROKEN_VALUES = {"[gpu is lost]", "[gpu requires reset]", "[unknown error]"}


_EVIDENCE_FIELDS = {"index", "name", "pci.bus_id", "persistence_mode", "pstate", "pcie.link.gen.current",
                    "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max", "mig.mode.current",
                    "mig.mode.pending", "utilization.gpu"}

# ---------------------------------------------------------------------------------------
# Parsers: nvidia-smi -L
# ---------------------------------------------------------------------------------------

_L_GPU = re.compile(r"^GPU\s+(\d+):\s+(.*?)\s*\(UUID:\s*([^)]*)\)\s*$")
_L_MIG = re.compile(r"^\s+MIG\s+(\S+)\s+Device\s+(\d+):\s*\(UUID:\s*([^)]*)\)\s*$")
_LINK_LINE = re.compile(r"^\s*Link\s+\d+\s*:")


def looks_like_smi_L(text: str) -> bool:
    lines = [ln for ln in strip_ansi(text).splitlines() if ln.strip()]
    if not lines or not any(_L_GPU.match(ln) for ln in lines):
        return False
    return all(_L_GPU.match(ln) or _L_MIG.match(ln) or _LOST.search(ln) for ln in lines)


def parse_smi_L(text: str) -> dict[str, Any]:
    """Parse `nvidia-smi -L`: physical GPUs (MIG devices are listed under their GPU, not as GPUs)."""
    gpus: list[dict[str, Any]] = []
    mig = 0
    for line in strip_ansi(text).splitlines():
        m = _L_GPU.match(line)
        if m:
            gpus.append({"index": int(m.group(1)), "name": m.group(2).strip(), "uuid": m.group(3).strip(),
                         "bus_id": None, "mig_devices": [], "line": line.strip()})
            continue
        m = _L_MIG.match(line)
        if m and gpus:
            gpus[-1]["mig_devices"].append({"profile": m.group(1), "device": int(m.group(2)),
                                            "uuid": m.group(3).strip()})
            mig += 1
    for g in gpus:
        if g["mig_devices"]:
            g["mig_mode"] = "Enabled"
    return {"gpus": gpus, "mig_devices": mig, "lost": lost_gpus(text), "failures": smi_failures(text)}


# ---------------------------------------------------------------------------------------
# Parsers: the default `nvidia-smi` table (525, 550 and 590 layouts)
# ---------------------------------------------------------------------------------------

_TABLE_VERSION = re.compile(r"NVIDIA-SMI\s+(\S+)\s+Driver Version:\s*(\S+)(?:\s+CUDA Version:\s*(\S+))?")
_TABLE_RULE = re.compile(r"^\|=+[=+|]*\|?\s*$")


def looks_like_smi_table(text: str) -> bool:
    t = strip_ansi(text)
    return bool(_TABLE_VERSION.search(t)) and bool(re.search(r"^\|=+", t, re.M)) and "Bus-Id" in t


def parse_smi_table_header(text: str) -> dict[str, str]:
    """{smi_version, driver, cuda} from the banner of the default table ("" when absent)."""
    m = _TABLE_VERSION.search(strip_ansi(text))
    if not m:
        return {"smi_version": "", "driver": "", "cuda": ""}
    return {"smi_version": m.group(1), "driver": m.group(2), "cuda": (m.group(3) or "").strip()}


def _cells(line: str) -> list[str]:
    parts = line.strip().split("|")
    if parts and parts[0] == "":
        parts = parts[1:]
    if parts and parts[-1].strip() == "":
        parts = parts[:-1]
    return [p.strip() for p in parts]


def parse_smi_table(text: str) -> list[dict[str, Any]]:
    """The GPU rows of the default `nvidia-smi` table, one dict per GPU.

    Keys: index (int), name, persistence, bus_id, disp_a, fan, temp, perf, power_usage,
    power_cap, memory_used, memory_total, util, ecc_uncorr, compute_mode, mig (all str as
    printed; "" where the layout has no such cell) and lines (the block's raw lines). The
    process list and the MIG device table below the GPU table are ignored."""
    lines = strip_ansi(text).splitlines()
    try:
        start = next(i for i, ln in enumerate(lines) if _TABLE_RULE.match(ln.strip()))
    except StopIteration:
        return []
    blocks: list[list[str]] = []
    current: list[str] = []
    for ln in lines[start + 1:]:
        s = ln.strip()
        if not s or re.search(r"Processes:|MIG devices:", s):
            break  # the process list / MIG devices table below the GPU table
        if s.startswith("+") or s.startswith("|-") and set(s) <= set("|+-"):
            if current:
                blocks.append(current)
                current = []
            continue
        if not s.startswith("|"):
            break
        cells = _cells(s)
        if re.match(r"^\d+\s+\S", cells[0] if cells else "") and current:
            blocks.append(current)  # a new GPU without a separator line in between
            current = []
        current.append(s)
    if current:
        blocks.append(current)
    gpus = []
    for block in blocks:
        g = _table_block(block)
        if g is not None:
            gpus.append(g)
    return gpus


def _table_block(block: list[str]) -> dict[str, Any] | None:
    rows = [_cells(b) for b in block]
    if len(rows[0]) < 3:
        return None  # not a GPU row of the three-column table
    first = rows[0] + ["", "", ""]
    m = re.match(r"^(\d+)\s+(.*?)\s+(On|Off|N/A)$", first[0])
    if not m:
        m2 = re.match(r"^(\d+)\s+(.*)$", first[0])
        if not m2:
            return None
        index, name, pers = int(m2.group(1)), m2.group(2).strip(), ""
    else:
        index, name, pers = int(m.group(1)), m.group(2).strip(), m.group(3)
    g: dict[str, Any] = {"index": index, "name": name, "persistence": pers, "bus_id": "", "disp_a": "",
                         "fan": "", "temp": "", "perf": "", "power_usage": "", "power_cap": "",
                         "memory_used": "", "memory_total": "", "util": "", "ecc_uncorr": "",
                         "compute_mode": "", "mig": "", "lines": list(block)}
    bus = first[1].split()
    if bus:
        g["bus_id"] = bus[0]
        g["disp_a"] = bus[1] if len(bus) > 1 else ""
    g["ecc_uncorr"] = first[2]
    if len(rows) > 1:
        second = rows[1] + ["", "", ""]
        # usage and cap are split on a slash between spaces: "N/A /  N/A" holds slashes of its own
        m = re.match(r"^(\S+)\s+(\S+)\s+(\S+)\s+(.*?)\s+/\s+(.*?)$", second[0])
        if m:
            g.update(fan=m.group(1), temp=m.group(2), perf=m.group(3), power_usage=m.group(4).strip(),
                     power_cap=m.group(5).strip())
        else:
            toks = second[0].split()
            g.update(dict(zip(("fan", "temp", "perf"), toks, strict=False)))
        mm = re.match(r"^(.*?)\s+/\s+(.*?)$", second[1]) or re.match(r"^(.*?)/(.*?)$", second[1])
        if mm:
            g["memory_used"], g["memory_total"] = mm.group(1).strip(), mm.group(2).strip()
        um = re.match(r"^(\S+)\s*(.*)$", second[2])
        if um:
            g["util"], g["compute_mode"] = um.group(1), um.group(2).strip()
    if len(rows) > 2:
        third = rows[2] + ["", "", ""]
        g["mig"] = third[2]
    return g


def _gpu_from_table(row: dict[str, Any]) -> dict[str, Any]:
    mig = _na(row.get("mig"))
    return {
        "index": row["index"], "name": row.get("name") or None, "uuid": None, "bus_id": row.get("bus_id") or None,
        "vbios": None, "persistence": _onoff(row.get("persistence")), "pstate": _na(row.get("perf")),
        "pcie_gen": None, "pcie_gen_max": None, "pcie_width": None, "pcie_width_max": None,
        "mig_mode": mig, "mig_pending": None, "memory_total_mib": _int(_na(row.get("memory_total"))),
        "util": _int(_na(row.get("util"))), "line": row["lines"][0] if row.get("lines") else "",
    }


# ---------------------------------------------------------------------------------------
# Parsers: NVML probe JSON
# ---------------------------------------------------------------------------------------


def looks_like_nvml_json(text: str) -> bool:
    t = text.strip()
    if not t.startswith("{"):
        return False
    try:
        data = json.loads(t)
    except ValueError:
        return False
    return isinstance(data, dict) and "ok" in data and "gpus" in data and "nvml_version" in data


def parse_nvml_json(text: str) -> dict[str, Any]:
    """The NVML probe's JSON: {ok, error, error_type, driver, cuda_driver_version, gpus}.

    Garbage gives ok False with the reason in error."""
    try:
        data = json.loads(text.strip() or "null")
    except ValueError as exc:
        return {"ok": False, "error": f"NVML probe output is not JSON ({exc})", "error_type": "BadOutput",
                "driver": "", "cuda_driver_version": 0, "gpus": []}
    if not isinstance(data, dict):
        return {"ok": False, "error": "NVML probe output is not a JSON object", "error_type": "BadOutput",
                "driver": "", "cuda_driver_version": 0, "gpus": []}
    gpus = []
    for i, g in enumerate(data.get("gpus") or []):
        if not isinstance(g, dict):
            continue
        gpus.append({
            "index": _int(g.get("index")) if _int(g.get("index")) is not None else i,
            "name": g.get("name") or None, "uuid": g.get("uuid") or None, "bus_id": g.get("pci_bus_id") or None,
            "vbios": g.get("vbios") or None, "persistence": _onoff(g.get("persistence")),
            "pstate": None, "pcie_gen": _int(g.get("pcie_gen")), "pcie_gen_max": _int(g.get("pcie_gen_max")),
            "pcie_width": _int(g.get("pcie_width")), "pcie_width_max": _int(g.get("pcie_width_max")),
            "mig_mode": g.get("mig_mode") or None, "mig_pending": g.get("mig_mode_pending") or None,
            "memory_total_mib": _int(g.get("memory_total_mib")), "util": None,
            "errors": g.get("errors") or {},
        })
    return {"ok": bool(data.get("ok")), "error": str(data.get("error") or ""),
            "error_type": str(data.get("error_type") or ""), "driver": str(data.get("driver") or ""),
            "cuda_driver_version": _int(data.get("cuda_driver_version")) or 0, "gpus": gpus}


# ---------------------------------------------------------------------------------------
# gpu.inventory
# ---------------------------------------------------------------------------------------


@dataclass
class Inventory:
    source: str = ""  # probe the GPU list comes from
    gpus: list[dict[str, Any]] = field(default_factory=list)
    driver: str = ""
    cuda: str = ""
    mig_devices: int = 0
    lost: list[dict[str, str]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # GPU count per source that had one
    notes: list[str] = field(default_factory=list)


def build_inventory(captures: dict[str, Capture]) -> Inventory:
    """Merge whichever GPU listings are present; the richest one gives the GPU list.

    Order of preference: --query-gpu CSV, NVML, the default table, -L."""
    inv = Inventory()
    query = captures.get("nvidia-smi-query")
    nvml = captures.get("nvml")
    table = captures.get("nvidia-smi-table")
    listing = captures.get("nvidia-smi-L")
    candidates: list[tuple[str, list[dict[str, Any]]]] = []
    if query is not None:
        q = parse_query_csv(query.stdout or query.text)
        if q["gpus"]:
            candidates.append(("nvidia-smi-query", q["gpus"]))
            inv.counts["nvidia-smi-query"] = len(q["gpus"])
        inv.driver = inv.driver or q["driver"]
        inv.failures.extend(smi_failures(query.text))
        inv.lost.extend(lost_gpus(query.text))
    if nvml is not None:
        n = parse_nvml_json(nvml.stdout)
        if n["ok"]:
            candidates.append(("nvml", n["gpus"]))
            inv.counts["nvml"] = len(n["gpus"])
            inv.driver = inv.driver or n["driver"]
            cv = n["cuda_driver_version"]
            if cv and not inv.cuda:
                inv.cuda = f"{cv // 1000}.{cv % 1000 // 10}"
        else:
            inv.notes.append(f"NVML: {n['error_type'] or 'error'}: {n['error']}".rstrip(": "))
    if table is not None:
        rows = parse_smi_table(table.text)
        head = parse_smi_table_header(table.text)
        if rows:
            candidates.append(("nvidia-smi-table", [_gpu_from_table(r) for r in rows]))
            inv.counts["nvidia-smi-table"] = len(rows)
        inv.driver = inv.driver or head["driver"]
        inv.cuda = inv.cuda or head["cuda"]
        inv.failures.extend(smi_failures(table.text))
    if listing is not None:
        ll = parse_smi_L(listing.text)
        if ll["gpus"]:
            candidates.append(("nvidia-smi-L", [
                {"index": g["index"], "name": g["name"], "uuid": g["uuid"], "bus_id": None, "vbios": None,
                 "persistence": None, "pstate": None, "pcie_gen": None, "pcie_gen_max": None, "pcie_width": None,
                 "pcie_width_max": None, "mig_mode": g.get("mig_mode"), "mig_pending": None,
                 "memory_total_mib": None, "util": None, "line": g["line"], "mig_devices": len(g["mig_devices"])}
                for g in ll["gpus"]]))
            inv.counts["nvidia-smi-L"] = len(ll["gpus"])
        inv.mig_devices = ll["mig_devices"]
        inv.failures.extend(ll["failures"])
        inv.lost.extend(ll["lost"])
    if candidates:
        inv.source, inv.gpus = candidates[0]
    inv.lost = list({x["bus_id"]: x for x in inv.lost}.values())
    inv.failures = list(dict.fromkeys(inv.failures))
    return inv


def _model_matches(name: str | None, expected: str) -> bool:
    if not name:
        return True  # nothing to compare (N/A): not a mismatch
    n = " ".join(name.lower().split())
    e = " ".join(expected.lower().split())
    if n.endswith("..."):  # the default table truncates long names
        return e.startswith(n[:-3].strip())
    return e == n or e in n


def _gpu_evidence(g: dict[str, Any], keys: Iterable[str]) -> str:
    raw = g.get("raw")
    if raw:
        parts = [f"{k}={raw[k]}" for k in keys if k in raw]
        return f"{_gpu_label(g)}: " + ", ".join(parts)
    if g.get("line"):
        return str(g["line"])
    return _gpu_label(g)


def _pcie_findings(inv: Inventory, min_gen: int, min_width: int, src_gen: str, src_width: str,
                   notes: list[str]) -> list[_Finding]:
    """Grade the PCIe link of each GPU against the profile minimum.

    Width: an NVIDIA datacenter GPU keeps its trained width; a link narrower than required
    (x8 on an x16 board) is a physical fault (riser, cable, slot): FAIL.
    Generation: GPUs lower the link speed to save power when idle, so a low *current* gen is
    only a problem when the link cannot reach the minimum at all (`pcie.link.gen.max` below
    it: BIOS setting, riser or slot capped): FAIL. A low current gen while the GPU sits in
    P0 (its full-performance state) is a WARN: it should be at full speed there. In any
    other (power-saving or unknown) state it is noted, not graded."""
    out: list[_Finding] = []
    keys = ("pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max",
            "pstate")
    narrow, capped, slow = [], [], []
    for g in inv.gpus:
        width, width_max = g.get("pcie_width"), g.get("pcie_width_max")
        gen, gen_max = g.get("pcie_gen"), g.get("pcie_gen_max")
        if min_width and width is not None and width < min_width:
            narrow.append(g)
        elif min_width and width is None and width_max is not None and width_max < min_width:
            narrow.append(g)
        if min_gen and gen_max is not None and gen_max < min_gen:
            capped.append(g)
        elif min_gen and gen is not None and gen < min_gen:
            if (g.get("pstate") or "").upper() == "P0":
                slow.append(g)
            else:
                notes.append(f"{_gpu_label(g)}: PCIe Gen{gen} now (max Gen{gen_max}), pstate "
                             f"{g.get('pstate') or 'unknown'}: power-saving downshift, not graded")
    if narrow:
        out.append(_Finding(
            Status.FAIL,
            f"PCIe link trained below x{min_width} on {', '.join(_gpu_label(g) for g in narrow)}",
            [_gpu_evidence(g, keys) for g in narrow] + [f"gpu.min_pcie_width = {min_width} ({src_width})"],
            "drain the node; reseat the GPU/riser or replace the PCIe cable/slot of the named GPU (a narrower "
            "link cuts host<->GPU and GPUDirect RDMA bandwidth); check `lspci -vv` LnkSta for the device"))
    if capped:
        out.append(_Finding(
            Status.FAIL,
            f"PCIe link cannot reach Gen{min_gen} on {', '.join(_gpu_label(g) for g in capped)}",
            [_gpu_evidence(g, keys) for g in capped] + [f"gpu.min_pcie_gen = {min_gen} ({src_gen})"],
            "check the BIOS PCIe speed setting for the slot and the riser/retimer; reseat the GPU; drain until fixed"))
    if slow:
        out.append(_Finding(
            Status.WARN,
            f"PCIe link below Gen{min_gen} while in P0 on {', '.join(_gpu_label(g) for g in slow)}",
            [_gpu_evidence(g, keys) for g in slow] + [f"gpu.min_pcie_gen = {min_gen} ({src_gen})"],
            "re-check under load (`nvidia-smi -q -d PCIE`); a link that stays slow under load needs the "
            "GPU reseated or the riser replaced"))
    return out


def grade_inventory(ctx: CheckContext) -> Result:
    inv = build_inventory({k: v for k, v in ctx.captures.items() if v.ok})
    prof = ctx.profile
    expected = int(prof.get("gpu.count", 0) or 0)
    model = str(prof.get("gpu.model", "") or "")
    models = list(dict.fromkeys(g["name"] for g in inv.gpus if g.get("name")))
    facts: dict[str, Any] = {
        "count": len(inv.gpus),
        "models": models,
        "driver": inv.driver,
        "cuda_version": inv.cuda,
        "source": inv.source,
        "counts_by_source": inv.counts,
        "mig_devices": inv.mig_devices,
        "lost": [x["bus_id"] for x in inv.lost],
        "gpus": [{k: v for k, v in g.items() if k not in ("raw", "line", "errors", "broken")} for g in inv.gpus],
    }
    notes = list(inv.notes)
    findings: list[_Finding] = []
    xid79 = ("a GPU may have fallen off the bus: check Xid 79 (`dmesg -T | grep -i xid`) and `lspci -d 10de:` "
             "for the missing device; drain the node; a reboot may bring it back, otherwise reseat or replace "
             "the GPU/baseboard")

    if not inv.gpus:
        if inv.failures or inv.lost:
            return ctx.result(
                Status.FAIL, f"no GPU listed: {(inv.failures or [inv.lost[0]['line']])[0]}",
                evidence=(inv.failures + [x["line"] for x in inv.lost] + notes)[:EVIDENCE_MAX],
                remedy="check that the NVIDIA driver is loaded (`lsmod | grep nvidia`, `dmesg -T | grep NVRM`); "
                       "a driver/library mismatch needs a reboot after a driver update; " + xid79,
                facts=facts)
        first = [ln for c in ctx.captures.values() if c.ok for ln in c.text.splitlines()[:3]]
        return ctx.result(Status.ERROR, "no GPU listing could be parsed from the captures",
                          evidence=(first + notes)[:EVIDENCE_MAX],
                          remedy="run `nvidia-smi --query-gpu=index,name,pci.bus_id --format=csv` by hand and "
                                 "check its output", facts=facts)

    present = ", ".join(_gpu_label(g) for g in inv.gpus)
    if inv.lost:
        findings.append(_Finding(
            Status.FAIL, f"{len(inv.lost)} GPU(s) on the PCI bus cannot be opened: "
                         + ", ".join(x["bus_id"] for x in inv.lost),
            [x["line"] for x in inv.lost], xid79))
    broken = [g for g in inv.gpus if g.get("broken")]
    if broken:
        findings.append(_Finding(
            Status.FAIL, "GPU not answering: " + ", ".join(f"{_gpu_label(g)} {g['broken'][0]}" for g in broken),
            [_gpu_evidence(g, ("index", "pci.bus_id", "name")) + f": {', '.join(g['broken'])}" for g in broken],
            xid79))
    if expected and len(inv.gpus) < expected:
        indices = sorted(g["index"] for g in inv.gpus if isinstance(g.get("index"), int))
        gaps = sorted(set(range(max(indices, default=-1) + 1)) - set(indices))
        findings.append(_Finding(
            Status.FAIL, f"{len(inv.gpus)} of {expected} GPUs visible"
                         + (f" (index {', '.join(map(str, gaps))} missing)" if gaps else ""),
            [f"present: {present}", f"gpu.count = {expected} ({prof.source('gpu.count')})"]
            + [str(g.get("line")) for g in inv.gpus if g.get("line")][:EVIDENCE_MAX // 2],
            xid79))
    elif expected and len(inv.gpus) > expected:
        findings.append(_Finding(
            Status.WARN, f"{len(inv.gpus)} GPUs visible, profile expects {expected}",
            [f"present: {present}", f"gpu.count = {expected} ({prof.source('gpu.count')})"],
            "grade this node with the profile that matches its hardware (--profile)"))
    if len(set(inv.counts.values())) > 1:
        findings.append(_Finding(
            Status.WARN, "GPU count differs between sources: "
                         + ", ".join(f"{k} {v}" for k, v in inv.counts.items()),
            [f"{k}: {v} GPUs" for k, v in inv.counts.items()],
            "a GPU appearing and disappearing points at a failing GPU or PCIe link: check dmesg for Xid 79"))
    if model:
        wrong = [g for g in inv.gpus if not _model_matches(g.get("name"), model)]
        if wrong:
            findings.append(_Finding(
                Status.FAIL, f"{len(wrong)} GPU(s) are not {model}: "
                             + ", ".join(sorted({str(g.get('name')) for g in wrong})),
                [f"{_gpu_label(g)}: {g.get('name')}" for g in wrong]
                + [f"gpu.model = {model} ({prof.source('gpu.model')})"],
                "grade this node with the profile that matches its hardware (--profile), or move it to the "
                "partition for that GPU model"))
    if len(models) > 1:
        findings.append(_Finding(
            Status.WARN, f"mixed GPU models on one node: {', '.join(models)}",
            [f"{_gpu_label(g)}: {g.get('name')}" for g in inv.gpus],
            "mixed models make collectives run at the slowest GPU's pace; check the node's build"))
    if prof.get("gpu.persistence_mode", False):
        off = [g for g in inv.gpus if g.get("persistence") is False]
        if off:
            findings.append(_Finding(
                Status.WARN, f"persistence mode off on {', '.join(_gpu_label(g) for g in off)}",
                [_gpu_evidence(g, ("index", "pci.bus_id", "persistence_mode")) for g in off]
                + [f"gpu.persistence_mode = true ({prof.source('gpu.persistence_mode')})"],
                "enable the persistence daemon (`systemctl enable --now nvidia-persistenced`) or run "
                "`nvidia-smi -pm 1`"))
    if prof.get("gpu.mig_allowed", True):
        on = [g for g in inv.gpus if _onoff(g.get("mig_mode")) is True]
        if on:
            notes.append(f"MIG enabled on {', '.join(_gpu_label(g) for g in on)} (allowed by profile {prof.name})")
    else:
        on = [g for g in inv.gpus if _onoff(g.get("mig_mode")) is True]
        pending = [g for g in inv.gpus if _onoff(g.get("mig_mode")) is not True and _onoff(g.get("mig_pending"))]
        src = f"gpu.mig_allowed = false ({prof.source('gpu.mig_allowed')})"
        if on:
            findings.append(_Finding(
                Status.FAIL, f"MIG enabled on {', '.join(_gpu_label(g) for g in on)}",
                [_gpu_evidence(g, ("index", "pci.bus_id", "mig.mode.current", "mig.mode.pending")) for g in on]
                + ([f"{inv.mig_devices} MIG device(s) listed"] if inv.mig_devices else []) + [src],
                "drain the node; disable MIG (`nvidia-smi -i <index> -mig 0`), then reset the GPU "
                "(`nvidia-smi -i <index> -r`) or reboot"))
        if pending:
            findings.append(_Finding(
                Status.WARN, f"MIG will turn on at the next reset of {', '.join(_gpu_label(g) for g in pending)}",
                [_gpu_evidence(g, ("index", "pci.bus_id", "mig.mode.current", "mig.mode.pending"))
                 for g in pending] + [src],
                "clear the pending MIG mode (`nvidia-smi -i <index> -mig 0`) before the next GPU reset"))
    findings.extend(_pcie_findings(inv, int(prof.get("gpu.min_pcie_gen", 0) or 0),
                                   int(prof.get("gpu.min_pcie_width", 0) or 0),
                                   prof.source("gpu.min_pcie_gen"), prof.source("gpu.min_pcie_width"), notes))
    if inv.mig_devices:
        notes.append(f"{inv.mig_devices} MIG device(s) listed; counted as part of their physical GPU")
    ok = (f"{len(inv.gpus)} x {', '.join(models) or 'GPU'}"
          + (f", driver {inv.driver}" if inv.driver else "")
          + (f" (profile {prof.name} expects {expected})" if expected else ""))
    return _combine(ctx, findings, ok, facts, notes)


# ---------------------------------------------------------------------------------------
# Profile auto-detection hint
# ---------------------------------------------------------------------------------------


def profile_hint(captures: dict[str, Capture]) -> tuple[str | None, int | None]:
    """(GPU model, GPU count) from whichever GPU listing is present; (None, None) if none."""
    ok = {k: v for k, v in captures.items() if v is not None and v.ok}
    inv = build_inventory(ok)
    if inv.gpus:
        names = Counter(g["name"] for g in inv.gpus if g.get("name"))
        if names:
            return names.most_common(1)[0][0], len(inv.gpus)
    q = ok.get("nvidia-smi-q")
    if q is not None:
        t = q.text
        names = Counter(m.strip() for m in re.findall(r"^\s*Product Name\s*:\s*(.+)$", t, re.M))
        att = re.search(r"^\s*Attached GPUs\s*:\s*(\d+)", t, re.M)
        if names:
            return names.most_common(1)[0][0], int(att.group(1)) if att else sum(names.values())
    nv = ok.get("nvidia-smi-nvlink")
    if nv is not None:
        gpus = parse_nvlink(nv.text)["gpus"]
        names = Counter(g["name"] for g in gpus if g.get("name"))
        if names:
            return names.most_common(1)[0][0], len(gpus)
    return None, None


# ---------------------------------------------------------------------------------------
# gpu.nvlink
# ---------------------------------------------------------------------------------------

_NV_GPU = re.compile(r"^GPU\s+(\d+):\s+(.*?)\s*(?:\(UUID:\s*([^)]*)\))?\s*$")
_NV_LINK = re.compile(r"^\s*Link\s+(\d+)\s*:\s*(.*?)\s*$")
_GBPS = re.compile(r"([\d.]+)\s*GB/s", re.I)


def looks_like_nvlink(text: str) -> bool:
    t = strip_ansi(text)
    return bool(re.search(r"^GPU\s+\d+:.*\(UUID:", t, re.M)) and (
        bool(re.search(r"^\s+Link\s+\d+\s*:", t, re.M)) or "all links are inActive" in t)


def parse_nvlink(text: str) -> dict[str, Any]:
    """Parse `nvidia-smi nvlink --status` / `nvlink -s`.

    {"gpus": [{index, name, uuid, line, links: [{link, state, gbps, line}], notes}], "failures"}.
    A link is "up" with its speed, or "down" (`<inactive>`, or a GPU whose links NVML
    reports all inactive)."""
    gpus: list[dict[str, Any]] = []
    for raw in strip_ansi(text).splitlines():
        line = raw.rstrip()
        if not line.strip():
            continue
        m = _NV_GPU.match(line)
        if m:
            gpus.append({"index": int(m.group(1)), "name": m.group(2).strip(), "uuid": (m.group(3) or "").strip(),
                         "line": line.strip(), "links": [], "notes": [], "all_inactive": False})
            continue
        if not gpus:
            continue
        lm = _NV_LINK.match(line)
        if lm:
            value = lm.group(2)
            sp = _GBPS.search(value)
            gbps = float(sp.group(1)) if sp else None
            up = gbps is not None and gbps > 0  # "<inactive>", or a link reporting 0 GB/s
            gpus[-1]["links"].append({"link": int(lm.group(1)), "state": "up" if up else "down",
                                      "value": value, "gbps": gbps, "line": line.strip()})
        else:
            gpus[-1]["notes"].append(line.strip())
            if re.search(r"inactive", line, re.I):
                gpus[-1]["all_inactive"] = True
    return {"gpus": gpus, "failures": smi_failures(text)}


def grade_nvlink(ctx: CheckContext) -> Result:
    cap = ctx.capture("nvidia-smi-nvlink")
    prof = ctx.profile
    per_gpu = int(prof.get("nvlink.links_per_gpu", 0) or 0)
    min_gbps = float(prof.get("nvlink.min_link_gbps", 0) or 0)
    src_links = f"nvlink.links_per_gpu = {per_gpu} ({prof.source('nvlink.links_per_gpu')})"
    text = cap.text if cap is not None else ""
    parsed = parse_nvlink(text)
    gpus = parsed["gpus"]
    links_total = sum(len(g["links"]) for g in gpus)
    down_links = [(g, ln) for g in gpus for ln in g["links"] if ln["state"] == "down"]
    facts: dict[str, Any] = {
        "links_total": links_total,
        "links_down": len(down_links) + sum(per_gpu for g in gpus if g["all_inactive"] and not g["links"]),
        "links_slow": 0,
        "expected_per_gpu": per_gpu,
        "gpus": [{"index": g["index"], "name": g["name"],
                  "links_up": sum(1 for ln in g["links"] if ln["state"] == "up"),
                  "links_down": sum(1 for ln in g["links"] if ln["state"] == "down"),
                  "speeds_gbps": sorted({ln["gbps"] for ln in g["links"] if ln["gbps"] is not None})}
                 for g in gpus],
    }
    if not gpus:
        if parsed["failures"]:
            status = Status.FAIL if per_gpu else Status.ERROR
            return ctx.result(status, f"nvidia-smi nvlink failed: {parsed['failures'][0]}",
                              evidence=parsed["failures"][:EVIDENCE_MAX],
                              remedy="check the NVIDIA driver (`nvidia-smi`, `dmesg -T | grep -i -e NVRM -e xid`); "
                                     "drain the node until nvidia-smi works", facts=facts)
        if text.strip():
            return ctx.result(Status.ERROR, "nvidia-smi nvlink output not understood",
                              evidence=text.strip().splitlines()[:5],
                              remedy="run `nvidia-smi nvlink --status` by hand and check its output", facts=facts)
        if per_gpu:
            return ctx.result(Status.FAIL, f"no NVLink reported; profile {prof.name} expects {per_gpu} per GPU",
                              evidence=["nvidia-smi nvlink --status printed nothing", src_links],
                              remedy="check that the fabric manager runs and the NVSwitch baseboard is seen "
                                     "(`nvidia-smi -q | grep -A3 Fabric`); reboot; service the baseboard if it "
                                     "persists", facts=facts)
        return ctx.result(Status.PASS, "no NVLink on this node (nothing to grade)", facts=facts)

    findings: list[_Finding] = []
    notes: list[str] = []
    node_uses_nvlink = any(ln["state"] == "up" for g in gpus for ln in g["links"])
    remedy_down = ("drain the node; check `nvidia-smi nvlink -e` error counters and the fabric manager log; "
                   "a reboot re-trains the links; links that stay down need the GPU or NVSwitch baseboard serviced")
    # Links reported inactive (or missing against the expected count).
    bad: list[str] = []
    ev: list[str] = []
    for g in gpus:
        down = [ln for ln in g["links"] if ln["state"] == "down"]
        missing = max(0, per_gpu - len(g["links"])) if per_gpu else 0
        if g["all_inactive"] and not g["links"]:
            missing = per_gpu
        if down or missing or (g["all_inactive"] and not g["links"]):
            what = []
            if down:
                what.append(f"{len(down)} inactive")
            if missing:
                what.append(f"{missing} missing")
            if g["all_inactive"] and not g["links"] and not missing:
                what.append("all inactive")
            bad.append(f"GPU {g['index']} ({', '.join(what)})")
            ev.append(g["line"])
            ev.extend(ln["line"] for ln in down)
            ev.extend(g["notes"])
    if bad:
        if per_gpu:
            findings.append(_Finding(Status.FAIL, f"NVLink down: {'; '.join(bad)}", ev + [src_links], remedy_down))
        elif node_uses_nvlink:
            findings.append(_Finding(Status.WARN, f"NVLink down on a node that uses NVLink: {'; '.join(bad)}",
                                     ev + [src_links], remedy_down))
        else:
            notes.append("no active NVLink on any GPU: NVLink not in use on this node")
    # Links slower than the profile's minimum.
    if min_gbps:
        slow = [(g, ln) for g in gpus for ln in g["links"] if ln["state"] == "up" and ln["gbps"] < min_gbps]
        facts["links_slow"] = len(slow)
        if slow:
            findings.append(_Finding(
                Status.WARN, f"{len(slow)} NVLink(s) below {min_gbps:g} GB/s",
                [f"{g['line']} / {ln['line']}" for g, ln in slow]
                + [f"nvlink.min_link_gbps = {min_gbps:g} ({prof.source('nvlink.min_link_gbps')})"],
                "a link trained at reduced speed slows every collective: reboot to re-train; service the "
                "GPU/baseboard if it persists"))
    ok = f"{links_total} NVLinks up on {len(gpus)} GPU(s)"
    if per_gpu:
        ok += f" ({per_gpu} per GPU expected)"
    speeds = sorted({ln["gbps"] for g in gpus for ln in g["links"] if ln["gbps"] is not None})
    if speeds:
        ok += f", {'/'.join(f'{s:g}' for s in speeds)} GB/s"
    return _combine(ctx, findings, ok, facts, notes)


# ---------------------------------------------------------------------------------------
# gpu.topology
# ---------------------------------------------------------------------------------------

_DEVICE = re.compile(r"GPU\d+|NIC\d+|mlx\d+_\d+|[a-z]+\d*_\d+")
_CELL = re.compile(r"\s*(X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC|PSB)(?=\s|$|X|NV|PIX|PXB|PHB|NODE|SYS|SOC|PSB)")
_AFFINITY_COLS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")


def looks_like_topo(text: str) -> bool:
    t = strip_ansi(text)
    row = re.search(r"^\s*GPU0\s+X\b", t, re.M)
    return row is not None and "GPU0" in t[:row.start()]


def parse_topo(text: str) -> dict[str, Any]:
    """Parse `nvidia-smi topo -m`.

    {"devices": [column names], "matrix": {row: {col: cell}}, "affinity": {row: {col: value}},
     "nic_legend": {"NIC0": "mlx5_0"}, "lines": {row: raw line}}. Tabs or spaces, ANSI escapes
    and columns printed without a separator all parse."""
    lines = strip_ansi(text).replace("\r", "").splitlines()
    out: dict[str, Any] = {"devices": [], "matrix": {}, "affinity": {}, "nic_legend": {}, "lines": {},
                           "header": ""}
    header_i = next((i for i, ln in enumerate(lines)
                     if "GPU0" in ln and not re.match(r"^\s*GPU0\s+X\b", ln)), None)
    if header_i is None:
        return out
    header = lines[header_i]
    out["header"] = header.strip()
    cut = len(header)
    for col in _AFFINITY_COLS:
        pos = header.find(col)
        if pos >= 0:
            cut = min(cut, pos)
    devices = _DEVICE.findall(header[:cut])
    aff_cols = [c for c in _AFFINITY_COLS if c in header]
    out["devices"] = devices
    for ln in lines[header_i + 1:]:
        m = re.match(r"^\s*(GPU\d+|NIC\d+|mlx\d+_\d+|[a-z]+\d*_\d+)(?=\s)(.*)$", ln)
        if not m:
            lm = _LEGEND.match(ln)
            if lm:
                out["nic_legend"][lm.group(1)] = lm.group(2)
            continue
        row, rest = m.group(1), m.group(2)
        if row not in devices:
            continue
        cells: dict[str, str] = {}
        pos = 0
        for col in devices:
            cm = _CELL.match(rest, pos)
            if not cm:
                break
            cells[col] = cm.group(1)
            pos = cm.end()
        out["matrix"][row] = cells
        out["lines"][row] = ln.strip()
        tail = [t.strip() for t in re.split(r"\t+|\s{2,}|\s", rest[pos:].strip()) if t.strip()]
        out["affinity"][row] = dict(zip(aff_cols, tail, strict=False))
    return out


def grade_topology(ctx: CheckContext) -> Result:
    cap = ctx.capture("nvidia-smi-topo")
    prof = ctx.profile
    text = cap.text if cap is not None else ""
    topo = parse_topo(text)
    gpu_rows = [d for d in topo["devices"] if d.startswith("GPU") and d in topo["matrix"]]
    nics = [d for d in topo["devices"] if not d.startswith("GPU")]
    local_levels = [str(x).upper() for x in (prof.get("topology.local_nic_levels") or ["PIX", "PXB"])]
    per_gpu = int(prof.get("nvlink.links_per_gpu", 0) or 0)
    require_nic = bool(prof.get("topology.require_local_nic", False))
    legend = topo["nic_legend"]

    def nic_name(n: str) -> str:
        return legend.get(n, n)

    gpus_facts = []
    without: list[str] = []
    for g in gpu_rows:
        cells = topo["matrix"][g]
        local = [nic_name(n) for n in nics if cells.get(n, "").upper() in local_levels]
        gpus_facts.append({"gpu": g, "local_nics": local, "links": {d: c for d, c in cells.items() if d != g},
                           **{k.lower().replace(" ", "_"): v for k, v in topo["affinity"].get(g, {}).items()}})
        if not local:
            without.append(g)
    pairs = {f"{a}-{b}": topo["matrix"][a].get(b, "") for i, a in enumerate(gpu_rows) for b in gpu_rows[i + 1:]}
    facts: dict[str, Any] = {"gpus": gpus_facts, "gpu_count": len(gpu_rows), "nics": [nic_name(n) for n in nics],
                             "gpus_without_local_nic": without if nics or require_nic else [],
                             "pairs": pairs, "nic_legend": legend}
    if not gpu_rows:
        failures = smi_failures(text)
        if failures:
            return ctx.result(Status.FAIL if per_gpu or require_nic else Status.ERROR,
                              f"nvidia-smi topo failed: {failures[0]}", evidence=failures[:EVIDENCE_MAX],
                              remedy="check the NVIDIA driver (`nvidia-smi`, `dmesg -T | grep -i -e NVRM -e xid`); "
                                     "drain the node until nvidia-smi works", facts=facts)
        return ctx.result(Status.ERROR, "no topology matrix found in the nvidia-smi topo -m output",
                          evidence=text.strip().splitlines()[:5] or ["(empty output)"],
                          remedy="run `nvidia-smi topo -m` by hand and check its output", facts=facts)
    findings: list[_Finding] = []
    notes: list[str] = []
    short_rows = [g for g in gpu_rows if len(topo["matrix"][g]) < len(topo["devices"])]
    if short_rows:
        notes.append(f"matrix rows not fully parsed: {', '.join(short_rows)}")
    if per_gpu and len(gpu_rows) > 1:
        src = f"nvlink.links_per_gpu = {per_gpu} ({prof.source('nvlink.links_per_gpu')})"
        not_nv = {p: c for p, c in pairs.items() if c and not c.upper().startswith("NV")}
        if not_nv:
            rows = sorted({p.split("-")[0] for p in not_nv} | {p.split("-")[1] for p in not_nv})
            findings.append(_Finding(
                Status.FAIL, f"{len(not_nv)} GPU pair(s) not on NVLink: "
                             + ", ".join(f"{p} {c}" for p, c in list(not_nv.items())[:8]),
                [topo["header"]] + [topo["lines"][r] for r in rows] + [src],
                "drain the node; check the fabric manager (`systemctl status nvidia-fabricmanager`) and "
                "`nvidia-smi nvlink --status`; a reboot re-trains NVLink; persistent gaps need the NVSwitch "
                "baseboard serviced"))
        few = {p: c for p, c in pairs.items() if c.upper().startswith("NV") and (_int(c[2:]) or 0) < per_gpu}
        if few:
            rows = sorted({p.split("-")[0] for p in few})
            findings.append(_Finding(
                Status.WARN, f"{len(few)} GPU pair(s) with fewer than {per_gpu} NVLinks: "
                             + ", ".join(f"{p} {c}" for p, c in list(few.items())[:8]),
                [topo["header"]] + [topo["lines"][r] for r in rows] + [src],
                "see gpu.nvlink for the links that are down; a reboot re-trains them"))
    if require_nic and without:
        src = f"topology.require_local_nic = true ({prof.source('topology.require_local_nic')})"
        findings.append(_Finding(
            Status.WARN,
            f"{len(without)} GPU(s) without a NIC at {'/'.join(local_levels)}: {', '.join(without)}"
            + ("" if nics else " (no NIC in the matrix)"),
            [topo["header"]] + [topo["lines"][g] for g in without] + [src],
            "GPUDirect RDMA needs a NIC under the same PCIe switch: check that every HCA is seen "
            "(`ibstat`, `lspci | grep -i mellanox`) and the driver (mlx5_core) is loaded; reseat a missing HCA"))
    ok = f"{len(gpu_rows)} GPU(s)"
    if len(gpu_rows) > 1:
        kinds = Counter(pairs.values())
        ok += ", pairs: " + ", ".join(f"{c} x{n}" for c, n in kinds.most_common())
    if nics:
        ok += f"; {len(nics)} NIC(s), {len(gpu_rows) - len(without)} GPU(s) with a local NIC"
    else:
        ok += "; no NIC in the matrix"
    return _combine(ctx, findings, ok, facts, notes)


# ---------------------------------------------------------------------------------------
# Registration
# ---------------------------------------------------------------------------------------

register_format(Format("nvidia-smi-query", detect=looks_like_query_csv,
                       description="nvidia-smi --query-gpu=... --format=csv", priority=60))
register_format(Format("nvidia-smi-L", detect=looks_like_smi_L, description="nvidia-smi -L", priority=55))
register_format(Format("nvidia-smi-table", detect=looks_like_smi_table,
                       description="nvidia-smi (default table)", priority=55))
register_format(Format("nvml", detect=looks_like_nvml_json, description="preflight NVML probe JSON", priority=60))
register_format(Format("nvidia-smi-nvlink", detect=looks_like_nvlink,
                       description="nvidia-smi nvlink --status / nvlink -s", priority=60))
register_format(Format("nvidia-smi-topo", detect=looks_like_topo, description="nvidia-smi topo -m", priority=60))

register(Check(
    id="gpu.inventory", title="GPU inventory", grade=grade_inventory,
    probes=(PROBE_QUERY, PROBE_L, PROBE_NVML), required=("nvidia-smi-query",),
    profile_keys={"gpu.count": int, "gpu.model": str, "gpu.min_pcie_gen": int, "gpu.min_pcie_width": int,
                  "gpu.persistence_mode": bool, "gpu.mig_allowed": bool},
    formats=("nvidia-smi-query", "nvidia-smi-L", "nvidia-smi-table", "nvml"),
    catches="GPUs missing (fallen off the bus), wrong model, PCIe link trained down, MIG on, persistence off",
))
register(Check(
    id="gpu.nvlink", title="NVLink links", grade=grade_nvlink,
    probes=(PROBE_NVLINK,), required=("nvidia-smi-nvlink",),
    profile_keys={"nvlink.links_per_gpu": int, "nvlink.min_link_gbps": (int, float)},
    formats=("nvidia-smi-nvlink",),
    catches="NVLinks inactive or missing, links trained below the expected speed",
))
register(Check(
    id="gpu.topology", title="GPU/NIC topology", grade=grade_topology,
    probes=(PROBE_TOPO,), required=("nvidia-smi-topo",),
    profile_keys={"topology.require_local_nic": bool, "topology.local_nic_levels": list,
                  "nvlink.links_per_gpu": int},
    formats=("nvidia-smi-topo",),
    catches="GPU pairs off NVLink on an NVSwitch node, GPUs without a NIC under their PCIe switch",
))
engine.register_profile_hint(profile_hint, probes=(PROBE_QUERY,))

__all__ = [
    "PROBE_L", "PROBE_NVLINK", "PROBE_NVML", "PROBE_QUERY", "PROBE_TOPO", "Inventory", "build_inventory",
    "lost_gpus", "parse_nvlink", "parse_nvml_json", "parse_query_csv", "parse_smi_L", "parse_smi_table",
    "parse_smi_table_header", "parse_topo", "profile_hint", "smi_failures", "strip_ansi",
]
