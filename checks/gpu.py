"""GPU inventory, NVLink and PCIe/NVLink topology checks: graders over parsed facts.

gpu.inventory  how many GPUs, which model, driver, persistence, PCIe link, MIG mode (from the
               `--query-gpu` CSV, NVML, the default table, `-L` or `-q`, richest first), and
               the GPUs nvidia-smi names by an error line instead of listing them
gpu.nvlink     every NVLink of every GPU up, at the expected speed (`nvidia-smi nvlink --status`)
gpu.topology   GPU pairs on NVLink and a NIC near each GPU (`nvidia-smi topo -m`)

Parsers live in `preflight.parsers` (nvsmi_csv, nvml, nvsmi_table, nvsmi_list, nvsmi_q,
nvlink, topo). Expected values come from the profile sections [gpu], [nvlink], [topology];
every finding's status comes from the policy table (`checks/policy.toml`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from preflight import engine, lazyre
from preflight.findings import Findings
from preflight.model import Result, Status
from preflight.parsers.base import GpuRecord, pci_id, to_bool
from preflight.parsers.nvlink import NvlinkGpu, NvlinkReport
from preflight.parsers.nvsmi_csv import BadRow, QueryCsv
from preflight.parsers.nvsmi_errors import ToolError
from preflight.parsers.topo import TopoMatrix
from preflight.probes import Probe
from preflight.profile import Profile
from preflight.registry import Check, CheckContext, register

from .gpu_health import PROBE_NVML
from .nvlink_counters import counter_facts, counter_findings, read_counters
from .nvlink_counters import ok_summary as counter_summary

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
PROBE_NVLINK = Probe.of("nvidia-smi-nvlink", ["nvidia-smi", "nvlink", "--status"], ["nvidia-smi", "nvlink", "-s"],
                        timeout=15)
PROBE_TOPO = Probe.of("nvidia-smi-topo", ["nvidia-smi", "topo", "-m"], timeout=15)

LISTINGS = ("nvidia-smi-query", "nvml", "nvidia-smi-table", "nvidia-smi-L", "nvidia-smi-q")  # richest first
PCIE_KEYS = ("pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max",
             "pstate")
MIG_KEYS = ("index", "pci.bus_id", "mig.mode.current", "mig.mode.pending", "mig")
LOST_REMEDY = ("a GPU may have fallen off the bus: check Xid 79 (`dmesg -T | grep -i xid`) and `lspci -d 10de:` "
               "for the missing device; drain the node; a reboot may bring it back, otherwise reseat or replace "
               "the GPU/baseboard")
DRIVER_REMEDY = ("check that the NVIDIA driver is loaded (`lsmod | grep nvidia`, `dmesg -T | grep NVRM`); "
                 "a driver/library mismatch needs a reboot after a driver update")
MIG_REMEDY = ("disable MIG (`nvidia-smi -i <index> -mig 0`), then reset the GPU (`nvidia-smi -i <index> -r`) or "
              "reboot; a site that runs MIG on purpose sets gpu.inventory/mig-enabled to pass")

# nvidia-smi's messages about one GPU: the finding code of each kind (nvsmi_errors.ToolError.kind)
GPU_ERROR_CODES = {"gpu_lost": "gpu.inventory/gpu-lost", "needs_reset": "gpu.inventory/gpu-requires-reset",
                   "insufficient_power": "gpu.inventory/gpu-insufficient-power",
                   "no_permission": "gpu.inventory/gpu-access-denied",
                   "inforom_corrupted": "gpu.inventory/inforom-corrupted"}
UNUSABLE = ("gpu_lost", "needs_reset", "insufficient_power")  # kinds that make the GPU unusable
_ERROR_WORDS = {"needs_reset": "requires a reset",
                "insufficient_power": "is insufficiently powered", "no_permission": "could not be opened",
                "inforom_corrupted": "has a corrupted infoROM"}


# output that is not understood: SKIP "not recognised" for a capture handed to analyze; ERROR for the
# output of the check's own probe (the tool misbehaved: no verdict)
UNREAD_CODES = {"gpu.inventory": ("gpu.inventory/not-recognised", "gpu.inventory/unreadable-output"),
                "gpu.nvlink": ("gpu.nvlink/not-recognised", "gpu.nvlink/unreadable-output"),
                "gpu.topology": ("gpu.topology/not-recognised", "gpu.topology/unreadable-output")}
# a listing that names a GPU by an error line, or failed: (GPU not listed, tool failed, not graded here)
LISTING_CODES = {"gpu.nvlink": ("gpu.nvlink/gpu-not-listed", "gpu.nvlink/tool-failed", "gpu.nvlink/not-graded"),
                 "gpu.topology": ("gpu.topology/gpu-not-listed", "gpu.topology/tool-failed",
                                  "gpu.topology/not-graded")}


def unread_code(ctx: CheckContext) -> str:
    """The code for this check's output that is not understood, in this mode."""
    analyzed, own = UNREAD_CODES[ctx.check.id]
    return analyzed if ctx.options.mode == "analyze" else own


# ---------------------------------------------------------------------------------------
# gpu.inventory


@dataclass
class Inventory:
    source: str = ""  # the listing the GPU list comes from
    gpus: list[GpuRecord] = field(default_factory=list)
    driver: str = ""
    cuda: str = ""
    mig_devices: int = 0
    errors: list[ToolError] = field(default_factory=list)  # what the tools printed instead of data
    bad_rows: list[BadRow] = field(default_factory=list)  # CSV rows that did not fit the header
    counts: dict[str, int] = field(default_factory=dict)  # GPU count per listing that had one
    notes: list[str] = field(default_factory=list)
    partial: bool = False  # the listing is a fragment (table rows without banner and header)
    q_subset: list[str] = field(default_factory=list)  # nvidia-smi -q blocks that are not the whole listing
    nvml_error: ToolError | None = None  # the NVML probe could not load its library

    @property
    def lost(self) -> list[ToolError]:
        return self.about_gpus(("gpu_lost", "needs_reset"))

    def about_gpus(self, kinds: tuple[str, ...]) -> list[ToolError]:
        """The tool's messages of these kinds, one per GPU."""
        return list({e.pci or e.line: e for e in self.errors if e.kind in kinds}.values())

    @property
    def seen(self) -> int:
        """GPUs the listing shows, readable or not."""
        return len(self.gpus) + len(self.bad_rows)


def _listing_gpus(name: str, f: Any, inv: Inventory) -> list[GpuRecord]:
    """The GPUs of one listing's facts; driver, CUDA and MIG devices go to the inventory."""
    if isinstance(f, QueryCsv):
        inv.bad_rows = f.bad_rows
        inv.driver = inv.driver or f.driver
        if not f.fields and not f.errors:
            inv.notes.append("--query-gpu output without a header and of unknown fields: not read")
        inv.notes.extend(f.other[:3])
        return list(f.gpus)
    if name == "nvml":
        inv.driver, inv.cuda = inv.driver or f.driver, inv.cuda or f.cuda
        err = f.tool_error()
        if err is not None and not f.ok:
            inv.notes.append(err.line)
            if err.kind == "library_missing":
                inv.nvml_error = err  # gpu.driver grades a missing library; here it only means: no listing
            else:
                inv.errors.append(err)
        return list(f.records)
    if name == "nvidia-smi-q":
        inv.driver, inv.cuda = inv.driver or f.driver, inv.cuda or f.cuda
        if f.gpus and not f.listing:  # `-i N`, `-d` of one GPU, or an excerpt: not the node's GPUs
            inv.q_subset = [f"nvidia-smi -q shows {len(f.gpus)} of {f.attached or '?'} attached GPU(s) (a -i "
                            "selection or an excerpt)", f.header_lines.get("Attached GPUs", "(no Attached GPUs line)"),
                            *[f"GPU {g.bus_id}" if g.bus_id else f"GPU block {g.index}" for g in f.gpus]]
        return list(f.records) if f.listing else []
    inv.driver = inv.driver or getattr(f, "driver", "")
    inv.cuda = inv.cuda or getattr(f, "cuda", "")
    inv.mig_devices = max(inv.mig_devices, f.mig_devices)
    return list(f.records if name == "nvidia-smi-table" else f.gpus)


def build_inventory(facts: Callable[[str], Any]) -> Inventory:
    """Merge whichever GPU listings are present; the richest one gives the GPU list."""
    inv = Inventory()
    for name in LISTINGS:
        f = facts(name)
        if f is None:
            continue
        gpus = _listing_gpus(name, f, inv)
        inv.errors.extend(getattr(f, "errors", []))
        rows = len(f.bad_rows) if isinstance(f, QueryCsv) else 0
        if gpus or rows:
            inv.counts[name] = len(gpus) + rows
            if not inv.source:
                inv.source, inv.gpus = name, gpus
                inv.partial = bool(getattr(f, "partial", False))
    inv.errors = list({e.line: e for e in inv.errors}.values())
    return inv


def _model_matches(name: str | None, expected: str) -> bool:
    if not name:
        return True  # nothing to compare (N/A): not a mismatch
    n, e = " ".join(name.lower().split()), " ".join(expected.lower().split())
    if n.endswith("..."):  # the default table truncates long names
        return e.startswith(n[:-3].strip())
    return e == n or e in n


def _labels(gpus: list[GpuRecord]) -> str:
    return ", ".join(g.label for g in gpus)


def _socket_split(gpus: list[GpuRecord]) -> tuple[int, int] | None:
    """GPUs under the low (bus < 0x80) and high halves of PCI domain 0; None where the rule
    does not apply (a VM's non-zero domains, a bus id missing)."""
    low = high = 0
    for g in gpus:
        parts = (g.bus_id or "").split(":")
        if len(parts) < 3:
            return None
        try:
            dom = int(parts[0], 16)  # pragma: no mutate (only compared with 0, which any base reads as 0)
            bus = int(parts[1], 16)
        except ValueError:
            return None
        if dom != 0:
            return None
        if bus < 0x80:
            low += 1
        else:
            high += 1
    return low, high


def _count_findings(inv: Inventory, prof: Profile, f: Findings) -> None:
    expected = int(prof.get("gpu.count") or 0)
    present = f"present: {_labels(inv.gpus)}"
    src = f"gpu.count = {expected} ({prof.source('gpu.count')})"
    if inv.partial:
        f.note(f"the listing is a fragment of the nvidia-smi table: {inv.seen} GPU(s) shown, the count is not graded")
    elif expected and inv.seen < expected:
        idx = sorted(g.index for g in inv.gpus)
        gaps = sorted(set(range(max(idx) + 1)) - set(idx))
        # what proves the absence: the count the listing shows against the profile's (and the index
        # that is not there); the GPUs present follow
        count = f"{inv.source}: {inv.seen} GPU(s) listed where gpu.count expects {expected}" + (
            f"; no GPU at index {', '.join(map(str, gaps))}" if gaps else "")
        f.add("gpu.inventory/gpus-missing", f"{inv.seen} of {expected} GPUs visible"
              + (f" (index {', '.join(map(str, gaps))} missing)" if gaps else ""),
              [count, present, src, *[g.line for g in inv.gpus][:12]], LOST_REMEDY)
    elif expected and inv.seen > expected:
        # what proves it: the listing's rows of the GPUs beyond the count (index >= gpu.count), then the count
        beyond = [g.line for g in inv.gpus if g.index >= expected and g.line]
        count = f"{inv.source}: {inv.seen} GPU(s) listed where gpu.count expects {expected}"
        f.add("gpu.inventory/extra-gpus", f"{inv.seen} GPUs visible, profile expects {expected}",
              [*beyond, count, present, src], "grade this node with the profile that matches its hardware (--profile)")
    elif not expected and prof.get("gpu.expect_symmetric_sockets") and not inv.bad_rows:
        _socket_finding(inv, prof, f)
    if len(set(inv.counts.values())) > 1:
        f.add("gpu.inventory/listings-disagree",
              "GPU count differs between sources: " + ", ".join(f"{k} {v}" for k, v in inv.counts.items()),
              [f"{k}: {v} GPUs" for k, v in inv.counts.items()],
              "a GPU appearing and disappearing points at a failing GPU or PCIe link: check dmesg for Xid 79")


def _socket_finding(inv: Inventory, prof: Profile, f: Findings) -> None:
    split = _socket_split(inv.gpus)
    if split and min(split) > 0 and split[0] != split[1] and inv.seen % 2:
        f.add("gpu.inventory/gpu-missing-by-socket-layout",
              f"{inv.seen} GPUs, a GPU is probably missing ({split[0]} on one CPU socket, {split[1]} on the other)",
              [f"{inv.source}: {split[0]} GPU(s) at bus below 0x80, {split[1]} GPU(s) at bus 0x80 and above: a GPU is "
               f"probably missing from the half with {min(split)}"]
              + [g.line for g in inv.gpus]
              + [f"gpu.expect_symmetric_sockets = true ({prof.source('gpu.expect_symmetric_sockets')})"],
              LOST_REMEDY + "; if the node really has an odd GPU count, set gpu.count in a site profile")


def _error_findings(inv: Inventory, f: Findings, listed: bool) -> None:
    """The GPUs nvidia-smi names by an error line instead of listing them, one finding per kind."""
    for kind, code in GPU_ERROR_CODES.items():
        errs = inv.about_gpus((kind,))
        if not errs:
            continue
        names = ", ".join(f"{e.bus_id or '?'}" + (f" ({e.detail})" if e.detail else "") for e in errs)
        if kind == "gpu_lost" and listed:
            summary = f"{len(errs)} GPU(s) do not answer: {names}"
        elif kind == "gpu_lost":
            summary = "no usable GPU: " + ", ".join(
                f"GPU {e.bus_id or '?'} does not answer" + (f" ({e.detail})" if e.detail else "") for e in errs)
        else:
            summary = f"GPU {names} {_ERROR_WORDS[kind]}"
        remedy = LOST_REMEDY if kind == "gpu_lost" else errs[0].remedy
        f.add(code, summary, [line for e in errs for line in e.lines], remedy)


def _health_findings(inv: Inventory, f: Findings) -> None:
    """GPUs that are listed but do not answer, and listing rows that could not be read."""
    _error_findings(inv, f, listed=True)
    broken = [g for g in inv.gpus if g.broken]
    reset = [g for g in broken if any("reset" in b.lower() for b in g.broken)]
    for code, gpus in (("gpu.inventory/gpu-requires-reset", reset),
                       ("gpu.inventory/gpu-lost", [g for g in broken if g not in reset])):
        if gpus:
            f.add(code, "GPU not answering: " + ", ".join(f"{g.label} {g.broken[0]}" for g in gpus),
                  [g.line for g in gpus], LOST_REMEDY)
    if inv.bad_rows:
        f.add("gpu.inventory/unreadable-row", f"{len(inv.bad_rows)} --query-gpu row(s) could not be read: "
              + "; ".join(f"line {b.n}: {b.why}" for b in inv.bad_rows[:3]),
              [f"line {b.n}: {b.line}" for b in inv.bad_rows],
              "a row that does not fit the CSV header is a GPU that was listed but not read: rerun "
              "`nvidia-smi --query-gpu=... --format=csv` on the node and check that GPU's row")


# what nvidia-smi prints where it cannot read a GPU's name (gpu.health grades the unreadable GPU)
_UNREAD_NAME = lazyre.compile(r"ERR!|N/A|\[?(?:Unknown Error|GPU is lost|Not Supported)\]?|Unknown", re.IGNORECASE)


def _model_findings(inv: Inventory, prof: Profile, f: Findings) -> None:
    model = str(prof.get("gpu.model") or "")
    named = [g for g in inv.gpus if g.name and not _UNREAD_NAME.fullmatch(str(g.name))]
    wrong = [g for g in named if model and not _model_matches(g.name, model)]
    if wrong:
        f.add("gpu.inventory/wrong-model",
              f"{len(wrong)} GPU(s) are not {model}: " + ", ".join(sorted({str(g.name) for g in wrong})),
              [f"{g.label}: {g.name}" for g in wrong] + [f"gpu.model = {model} ({prof.source('gpu.model')})"],
              "grade this node with the profile that matches its hardware (--profile), or move it to the "
              "partition for that GPU model")
    models = list(dict.fromkeys(str(g.name) for g in named))  # a name the driver could not read is no model
    if len(models) > 1:
        f.add("gpu.inventory/mixed-models", f"mixed GPU models on one node: {', '.join(models)}",
              [f"{g.label}: {g.name}" for g in inv.gpus],
              "mixed models make collectives run at the slowest GPU's pace; check the node's build")
    off = [g for g in inv.gpus if g.persistence is False]
    if prof.get("gpu.persistence_mode") and off:
        f.add("gpu.inventory/persistence-off", f"persistence mode off on {_labels(off)}",
              [g.evidence(("index", "pci.bus_id", "persistence_mode")) for g in off]
              + [f"gpu.persistence_mode = true ({prof.source('gpu.persistence_mode')})"],
              "enable the persistence daemon (`systemctl enable --now nvidia-persistenced`) or run `nvidia-smi -pm 1`")


def _mig_evidence(g: Any) -> str:
    """The MIG mode of a GPU as its listing shows it (the CSV's cells, else what -q said)."""
    if any(k in g.cells for k in MIG_KEYS):
        return str(g.evidence(MIG_KEYS))
    return f"{g.label}: MIG mode current={g.mig_mode or 'N/A'}, pending={g.mig_pending or 'N/A'}"


def _mig_findings(inv: Inventory, prof: Profile, f: Findings) -> None:
    on = [g for g in inv.gpus if to_bool(g.mig_mode) is True or g.mig_devices]
    pending = [g for g in inv.gpus if g not in on and to_bool(g.mig_pending)]
    allowed = bool(prof.get("gpu.mig_allowed", True))
    src = f"gpu.mig_allowed = {str(allowed).lower()} ({prof.source('gpu.mig_allowed')})"
    devices = [f"{inv.mig_devices} MIG device(s) listed, counted as part of their physical GPU"] \
        if inv.mig_devices else []
    if on:
        f.add("gpu.inventory/mig-enabled" if allowed else "gpu.inventory/mig-not-allowed",
              f"MIG enabled on {_labels(on)}", [_mig_evidence(g) for g in on] + devices + [src],
              MIG_REMEDY if allowed else "drain the node; " + MIG_REMEDY)
    if pending:
        f.add("gpu.inventory/mig-pending", f"MIG will turn on at the next reset of {_labels(pending)}",
              [_mig_evidence(g) for g in pending] + [src],
              "clear the pending MIG mode (`nvidia-smi -i <index> -mig 0`) before the next GPU reset")


def _pcie_findings(inv: Inventory, prof: Profile, f: Findings) -> None:
    """Width: a datacenter GPU keeps its trained width, so narrower than required is a physical
    fault (riser, cable, slot): FAIL. Generation: GPUs lower the link speed when idle, so a low
    current gen FAILs only when the link cannot reach the minimum at all (max below it), WARNs
    in P0 (full performance), and is a note in any power-saving state."""
    min_gen, min_width = int(prof.get("gpu.min_pcie_gen") or 0), int(prof.get("gpu.min_pcie_width") or 0)
    narrow = [g for g in inv.gpus if min_width and (g.pcie_width if g.pcie_width is not None else g.pcie_width_max
                                                    or min_width) < min_width]
    capped = [g for g in inv.gpus if min_gen and g.pcie_gen_max is not None and g.pcie_gen_max < min_gen]
    slow = [g for g in inv.gpus if min_gen and g not in capped and g.pcie_gen is not None and g.pcie_gen < min_gen]
    for g in [g for g in slow if (g.pstate or "").upper() != "P0"]:
        f.note(f"{g.label}: PCIe Gen{g.pcie_gen} now (max Gen{g.pcie_gen_max}), pstate {g.pstate or 'unknown'}: "
               "power-saving downshift, not graded")
    slow = [g for g in slow if (g.pstate or "").upper() == "P0"]
    src_w = f"gpu.min_pcie_width = {min_width} ({prof.source('gpu.min_pcie_width')})"
    src_g = f"gpu.min_pcie_gen = {min_gen} ({prof.source('gpu.min_pcie_gen')})"
    if narrow:
        f.add("gpu.inventory/pcie-width-degraded", f"PCIe link trained below x{min_width} on {_labels(narrow)}",
              [g.evidence(PCIE_KEYS) for g in narrow] + [src_w],
              "drain the node; reseat the GPU/riser or replace the PCIe cable/slot of the named GPU (a narrower "
              "link cuts host<->GPU and GPUDirect RDMA bandwidth); check `lspci -vv` LnkSta for the device")
    if capped:
        f.add("gpu.inventory/pcie-gen-capped", f"PCIe link cannot reach Gen{min_gen} on {_labels(capped)}",
              [g.evidence(PCIE_KEYS) for g in capped] + [src_g],
              "check the BIOS PCIe speed setting for the slot and the riser/retimer; reseat the GPU; drain until fixed")
    if slow:
        f.add("gpu.inventory/pcie-gen-low-in-p0", f"PCIe link below Gen{min_gen} while in P0 on {_labels(slow)}",
              [g.evidence(PCIE_KEYS) for g in slow] + [src_g],
              "re-check under load (`nvidia-smi -q -d PCIE`); a link that stays slow under load needs the "
              "GPU reseated or the riser replaced")


def _no_gpu_result(ctx: CheckContext, inv: Inventory, facts: dict[str, Any]) -> Result:
    f = Findings(notes=list(inv.notes))
    _error_findings(inv, f, listed=False)
    per_gpu = {e.line for e in inv.errors if e.kind in GPU_ERROR_CODES}
    other = [e for e in inv.errors if e.line not in per_gpu and e.kind not in ("reset_failed",)]
    if other and not inv.about_gpus((*UNUSABLE, "no_permission")):
        e = other[0]
        f.add("gpu.inventory/no-gpu-listed", f"no GPU listed: {e.line}", [line for x in other for line in x.lines],
              f"{e.remedy}; {DRIVER_REMEDY}")
    if inv.bad_rows:
        f.add("gpu.inventory/unreadable-row", f"none of the {len(inv.bad_rows)} --query-gpu row(s) could be read",
              [f"line {b.n}: {b.why}: {b.line}" for b in inv.bad_rows],
              "rerun `nvidia-smi --query-gpu=... --format=csv` on the node")
    if not f and inv.nvml_error is not None:
        f.add("gpu.inventory/nvml-unavailable", f"no GPU listed: NVML could not be loaded ({inv.nvml_error.line})",
              [inv.nvml_error.line, *inv.notes], f"{inv.nvml_error.remedy} (see gpu.driver)")
    if not f and inv.q_subset:
        f.add("gpu.inventory/not-a-listing", f"{inv.q_subset[0]}: the GPU count is not graded", inv.q_subset[1:],
              "run `nvidia-smi -L` (or `--query-gpu=index,name,pci.bus_id --format=csv`) for the node's GPUs")
    if not f:
        f.add(unread_code(ctx), "not recognised: no GPU line, CSV row or table row could be read "
              "from the nvidia-smi output", inv.notes or ["no GPU line, CSV row or table row found"],
              "run `nvidia-smi --query-gpu=index,name,pci.bus_id --format=csv` by hand and check its output")
    return f.result(ctx, "no GPU listed", facts)  # pragma: no mutate (never shown: a finding is always added)


def grade_inventory(ctx: CheckContext) -> Result:
    inv = build_inventory(ctx.facts)
    prof = ctx.profile
    models = list(dict.fromkeys(g.name for g in inv.gpus if g.name))
    facts: dict[str, Any] = {
        "count": len(inv.gpus), "models": models, "driver": inv.driver, "cuda_version": inv.cuda,
        "source": inv.source, "counts_by_source": inv.counts, "mig_devices": inv.mig_devices,
        "lost": [e.bus_id for e in inv.lost], "unreadable_rows": [b.n for b in inv.bad_rows],
        "gpus": [g.as_facts() for g in inv.gpus], "partial": inv.partial,
    }
    if not inv.gpus:
        return _no_gpu_result(ctx, inv, facts)
    f = Findings(notes=list(inv.notes))
    _health_findings(inv, f)
    _count_findings(inv, prof, f)
    _model_findings(inv, prof, f)
    _mig_findings(inv, prof, f)
    _pcie_findings(inv, prof, f)
    expected = int(prof.get("gpu.count") or 0)
    ok = (f"{len(inv.gpus)} x {', '.join(models) or 'GPU'}" + (f", driver {inv.driver}" if inv.driver else "")
          + (f" (profile {prof.name} expects {expected})" if expected else ""))
    return f.result(ctx, ok, facts)


def profile_hint(store: Any) -> tuple[str | None, int | None]:
    """(GPU model, GPU count) from whichever GPU listing is present; (None, None) if none."""
    def facts(name: str) -> Any:
        inp = store.input(name)
        return store.facts(name) if inp is not None and inp.ok else None

    inv = build_inventory(facts)
    names = Counter(g.name for g in inv.gpus if g.name)
    if names:
        # a GPU that fell off the bus is still one of the node's GPUs: an 8-GPU board with one
        # lost keeps its 8-GPU profile, so the loss is graded against the count it should have
        listed = {pci_id(g.bus_id) for g in inv.gpus if g.bus_id}
        lost = {e.pci for e in inv.about_gpus(UNUSABLE) if e.pci and e.pci not in listed}
        return names.most_common()[0][0], inv.seen + len(lost)
    q = facts("nvidia-smi-q")
    if q is not None and q.gpus:
        qnames = Counter(g.name for g in q.gpus if g.name)
        if qnames:
            return qnames.most_common()[0][0], q.attached or len(q.gpus)
    nv = facts("nvidia-smi-nvlink")
    if isinstance(nv, NvlinkReport) and nv.gpus:
        return Counter(g.name for g in nv.gpus).most_common()[0][0], len(nv.gpus)
    return None, None


# ---------------------------------------------------------------------------------------
# Tool errors in the nvlink and topo listings


def tool_errors(check: str, errors: list[ToolError], tool: str, expected: bool, f: Findings) -> None:
    """What a listing printed instead of rows: a GPU that does not answer, or a driver failure.
    Where the profile expects what the listing shows on every GPU (NVLinks, a local NIC), the
    missing GPU or listing FAILs the check; elsewhere it is not graded here (ERROR: gpu.inventory
    and gpu.driver grade the GPU and the driver), never passed as fine with the rest."""
    for err in errors:
        if err.kind == "inforom_corrupted":
            continue  # a warning about a GPU that is listed: gpu.inventory reports it
        gpu = err.kind in GPU_ERROR_CODES
        not_listed, failed, ungraded = LISTING_CODES[check]
        code = (not_listed if gpu else failed) if expected and err.kind != "no_permission" else ungraded
        what = f"{err.bus_id or 'a GPU'} not listed by {tool}: {err.summary}" if gpu else f"{tool} failed: {err.line}"
        f.add(code, what, list(err.lines), err.remedy)


# ---------------------------------------------------------------------------------------
# gpu.nvlink


def expected_links(prof: Profile, name: str) -> tuple[int, str]:
    """NVLinks per GPU: the profile's own count, else the count the model has by construction
    (SXM/HGX boards); 0 for PCIe boards and unknown models."""
    per_gpu = int(prof.get("nvlink.links_per_gpu") or 0)
    if per_gpu:
        return per_gpu, f"nvlink.links_per_gpu = {per_gpu} ({prof.source('nvlink.links_per_gpu')})"
    n = name.lower()
    if "pcie" in n or " nvl" in n:
        return 0, ""
    table = prof.get("nvlink.model_links") or {}
    for key, links in sorted(table.items(), key=lambda kv: -len(kv[0])):
        if key.lower() in n:
            return int(links), f"nvlink.model_links[{key}] = {links} ({prof.source('nvlink.model_links')})"
    return 0, ""


NVLINK_DOWN_REMEDY = ("drain the node; check `nvidia-smi nvlink -e` error counters and the fabric manager log; "
                      "a reboot re-trains the links; links that stay down need the GPU or NVSwitch baseboard serviced")


def _no_nvlink_result(ctx: CheckContext, rep: NvlinkReport | None) -> Result:
    prof = ctx.profile
    per_gpu = int(prof.get("nvlink.links_per_gpu") or 0)
    f = Findings()
    tool_errors("gpu.nvlink", rep.errors if rep is not None else [], "nvidia-smi nvlink", bool(per_gpu), f)
    if f:
        return f.result(ctx, "", {"links_total": 0})
    if rep is not None and rep.unparsed:
        return ctx.finding(unread_code(ctx), "not recognised: nvidia-smi nvlink output without a GPU "
                           "line (expected `GPU <n>: <name> (UUID: ...)` and its `Link <n>:` lines)",
                           evidence=rep.unparsed[:5], remedy="run `nvidia-smi nvlink --status` by hand and check "
                           "its output", facts={"links_total": 0})
    inp = ctx.input("nvidia-smi-nvlink")
    if inp is not None and per_gpu:
        return ctx.finding("gpu.nvlink/no-nvlink", f"no NVLink reported; profile {prof.name} expects {per_gpu} per GPU",
                           evidence=[f"`{inp.cmdline}` listed no GPU",
                                     f"nvlink.links_per_gpu = {per_gpu} ({prof.source('nvlink.links_per_gpu')})"],
                           remedy="check that the fabric manager runs and the NVSwitch baseboard is seen "
                                  "(`nvidia-smi -q | grep -A3 Fabric`); reboot; service the baseboard if it persists",
                           facts={"links_total": 0})
    return ctx.result(Status.PASS, "no NVLink on this node (nothing to grade)", facts={"links_total": 0})


def _gpu_link_facts(g: NvlinkGpu, per_gpu: int) -> dict[str, Any]:
    return {"index": g.index, "name": g.name, "links_up": len(g.up), "links_down": len(g.down),
            "expected": per_gpu, "speeds_gbps": sorted({ln.gbps for ln in g.up if ln.gbps})}


def _cut_reason(rep: NvlinkReport, g: NvlinkGpu, last: bool) -> str:
    """Why the links a GPU's listing does not show prove nothing ("" when they do): the poster
    cut lines out of it, the command shows a subset, or the paste is an excerpt and this GPU's
    listing is the last one, cut where the paste ends (links 0..n-1 shown, none skipped)."""
    if g.cut:
        return f"lines cut from the paste (`{g.cut[0]}`)"
    if rep.partial:
        return rep.partial
    if last and rep.excerpt and g.links and g.numbered_from_zero:
        return "the paste is an excerpt and ends in this GPU's listing"
    return ""


def _not_shown_note(cut: list[tuple[NvlinkGpu, int, str]], f: Findings) -> None:
    if cut:
        f.add("gpu.nvlink/links-not-shown",
              "not all links shown: " + "; ".join(f"GPU {g.index} ({len(g.links)} of {per} shown)" for g, per, _ in cut)
              + f": {cut[0][2]}; the links not shown are not graded", [g.line for g, _, _ in cut],
              "run `nvidia-smi nvlink --status` on the node and keep its whole output")


def _down_findings(rep: NvlinkReport, prof: Profile, f: Findings) -> list[dict[str, Any]]:
    """Links inactive or missing, per GPU (a listing cut by the poster misses nothing); the
    per-GPU facts."""
    facts_gpus, bad, ev, srcs, cut = [], [], [], [], []
    states = rep.state_gpus
    for g in states:
        per_gpu, src = expected_links(prof, g.name)
        missing = max(0, per_gpu - len(g.links))
        reason = _cut_reason(rep, g, g is states[-1]) if missing else ""
        if reason:
            cut.append((g, per_gpu, reason))
            missing = 0
        facts_gpus.append(_gpu_link_facts(g, per_gpu) | ({"cut": True} if reason else {}))
        if not (g.down or missing or (g.all_inactive and not g.links)):
            continue
        what = [f"{len(g.down)} inactive"] if g.down else []
        what += [f"{missing} missing"] if missing else []
        what += ["all inactive"] if g.all_inactive and not g.links and not missing else []
        bad.append((per_gpu, f"GPU {g.index} ({', '.join(what)})"))
        ev += [*([f"{g.line} / {ln.line}" for ln in g.down] or [g.line]), *g.notes]  # each down link's line first
        srcs += [src] if src and src not in srcs else []
    if bad:
        names = "; ".join(b[1] for b in bad)
        if any(per for per, _ in bad):
            f.add("gpu.nvlink/link-down", f"NVLink down: {names}", ev + srcs, NVLINK_DOWN_REMEDY)
        elif any(g.up for g in states):
            f.add("gpu.nvlink/link-down-unknown-model", f"NVLink down on a node that uses NVLink: {names}", ev,
                  NVLINK_DOWN_REMEDY)
        else:
            f.note("no active NVLink on any GPU: NVLink not in use on this node")
    _not_shown_note(cut, f)
    return facts_gpus


def _slow_findings(rep: NvlinkReport, prof: Profile, f: Findings) -> int:
    min_gbps = float(prof.get("nvlink.min_link_gbps") or 0)
    slow = [(g, ln) for g in rep.state_gpus for ln in g.up if min_gbps and ln.gbps is not None and ln.gbps < min_gbps]
    if slow:
        f.add("gpu.nvlink/link-slow", f"{len(slow)} NVLink(s) below {min_gbps:g} GB/s",
              [f"{g.line} / {ln.line}" for g, ln in slow]
              + [f"nvlink.min_link_gbps = {min_gbps:g} ({prof.source('nvlink.min_link_gbps')})"],
              "a link trained at reduced speed slows every collective: reboot to re-train; service the "
              "GPU/baseboard if it persists")
    return len(slow)


def _state_summary(states: list[NvlinkGpu], facts_gpus: list[dict[str, Any]]) -> str:
    speeds = sorted({ln.gbps for g in states for ln in g.up if ln.gbps})
    ok = f"{sum(len(g.up) for g in states)} NVLinks up on {len(states)} GPU(s)"
    ok += f", {'/'.join(f'{s:g}' for s in speeds)} GB/s" if speeds else ""
    cut = sum(1 for fg in facts_gpus if fg.get("cut"))
    return ok + (f" (listing cut: links not shown on {cut} GPU(s) not graded)" if cut else "")


def _grade_states(rep: NvlinkReport, prof: Profile, f: Findings) -> tuple[str, dict[str, Any]]:
    """The link-state part: its PASS summary and facts."""
    states = rep.state_gpus
    facts_gpus = _down_findings(rep, prof, f)
    slow = _slow_findings(rep, prof, f)
    facts = {"links_total": sum(len(g.links) for g in states), "links_down": sum(len(g.down) for g in states),
             "links_slow": slow, "gpus": facts_gpus}
    return _state_summary(states, facts_gpus), facts


def grade_nvlink(ctx: CheckContext) -> Result:
    rep: NvlinkReport | None = ctx.facts("nvidia-smi-nvlink")
    prof = ctx.profile
    if rep is None or not rep.gpus:
        return _no_nvlink_result(ctx, rep)
    counters = read_counters(rep.counter_gpus)
    if not rep.state_gpus and not counters.graded:
        lines = rep.other + [c.line for g in rep.counter_gpus for c in g.counters]
        return ctx.finding(unread_code(ctx), "not recognised: nvidia-smi nvlink output without link "
                           "states or error counts (expected `Link <n>: <speed> GB/s`, `<inactive>` or "
                           "`Link <n>: <counter> Errors: <count>`; these are another sub-command's lines)",
                           evidence=lines[:5], remedy="run `nvidia-smi nvlink --status` for the link states",
                           facts={"links_total": 0})
    f = Findings()
    tool_errors("gpu.nvlink", rep.errors, "nvidia-smi nvlink", bool(prof.get("nvlink.links_per_gpu")), f)
    ok: list[str] = []
    facts: dict[str, Any] = {"links_total": 0}
    if rep.state_gpus:
        summary, facts = _grade_states(rep, prof, f)
        ok.append(summary)
    if counters.graded:
        counter_findings(counters, f)
        ok.append(counter_summary(counters))
        facts["error_counters"] = counter_facts(counters)
    return f.result(ctx, "; ".join(ok), facts)


# ---------------------------------------------------------------------------------------
# gpu.topology


NIC_REMEDY = ("GPUDirect RDMA needs a NIC under the same PCIe switch: check that every HCA is seen (`ibstat`, "
              "`lspci | grep -i mellanox`) and its driver (mlx5_core) is loaded; reseat a missing HCA")


def _nic_findings(topo: TopoMatrix, local: dict[str, list[str]], prof: Profile, f: Findings) -> None:
    """GPUDirect RDMA wants a NIC under each GPU's PCIe switch (PIX/PXB)."""
    levels = "/".join(str(x).upper() for x in (prof.get("topology.local_nic_levels") or ["PIX", "PXB"]))
    graded = [g for g in topo.gpus if g not in topo.short]  # a row not read in full says nothing of its NICs
    without = [g for g in graded if not local[g]]
    if not without:
        return
    evidence = [*[topo.lines[g] for g in without], topo.header]  # the telling rows first
    if prof.get("topology.require_local_nic"):
        f.add("gpu.topology/gpu-without-local-nic-required", f"{len(without)} GPU(s) without a NIC at {levels}: "
              f"{', '.join(without)}" + ("" if topo.nics else " (no NIC in the matrix)"),
              evidence + [f"topology.require_local_nic = true ({prof.source('topology.require_local_nic')})"],
              NIC_REMEDY)
    elif any(topo.affinity.get(g, {}).get("GPU NUMA ID", "").isdigit() for g in graded):
        f.note("GPUs with a NUMA node of their own (GPU NUMA ID: a GPU coupled to a Grace CPU, GH200/GB200): the "
               "NICs hang off the CPU by design, GPU-NIC distance not graded")
    elif topo.nics and len(without) == len(graded):
        f.add("gpu.topology/no-gpu-near-a-nic", f"0 GPU(s) with a local NIC: all {len(topo.nics)} NIC(s) are across "
              "a host bridge or the CPU interconnect, so GPUDirect RDMA crosses the CPU" + _other_socket(topo, graded),
              evidence, NIC_REMEDY)
    elif topo.nics:
        f.add("gpu.topology/gpu-without-local-nic", f"{len(without)} GPU(s) without a NIC at {levels}: "
              f"{', '.join(without)}: their inter-node traffic crosses the host bridge or the CPU interconnect"
              + _other_socket(topo, graded), evidence,
              "balance the NICs over the GPUs' PCIe switches (one per GPU or per GPU pair), or pin the "
              "job's ranks so that those GPUs' traffic uses the nearest NIC; " + NIC_REMEDY)


def _other_socket(topo: TopoMatrix, graded: list[str]) -> str:
    """The GPUs whose every NIC is on the other CPU socket (SYS), where other GPUs have one nearer."""
    far = [g for g in graded if all(topo.matrix[g].get(n, "").upper() == "SYS" for n in topo.nics)]
    if not far or len(far) == len(graded):
        return ""
    return f"; {', '.join(far)} reach a NIC only across the CPU interconnect (SYS), the others nearer"


def _numa_findings(topo: TopoMatrix, prof: Profile, f: Findings) -> None:
    """Without a gpu.count in the profile (gpu.inventory grades a count), an odd number of GPUs split
    unevenly over the NUMA nodes of their CPU affinity (gpu.expect_symmetric_sockets); not where the
    tool's own lines name a GPU it could not list (tool_errors says that one)."""
    columns = [d for d in topo.devices if d.startswith("GPU")]
    numa = [topo.affinity.get(g, {}).get("NUMA Affinity", "") for g in topo.gpus]
    if prof.get("gpu.count") or not prof.get("gpu.expect_symmetric_sockets") or len(topo.gpus) < len(columns) \
            or topo.errors or not all(n.isdigit() for n in numa):
        return
    split = Counter(numa)
    if len(set(split.values())) > 1 and len(numa) % 2:  # two NUMA nodes at least, with different counts
        f.add("gpu.topology/gpu-missing-by-numa-layout", f"{len(numa)} GPUs, a GPU is probably missing ("
              + ", ".join(f"{n} on NUMA node {node}" for node, n in sorted(split.items())) + ")",
              [topo.header, *[topo.lines[g] for g in topo.gpus],
               f"gpu.expect_symmetric_sockets = true ({prof.source('gpu.expect_symmetric_sockets')})"],
              LOST_REMEDY + "; if the node really has an odd GPU count, set gpu.count in a site profile")


def _pair_findings(topo: TopoMatrix, pairs: dict[str, str], prof: Profile, f: Findings) -> None:
    per_gpu = int(prof.get("nvlink.links_per_gpu") or 0)
    if not per_gpu:
        return
    src = f"nvlink.links_per_gpu = {per_gpu} ({prof.source('nvlink.links_per_gpu')})"
    not_nv = {p: c for p, c in pairs.items() if c and not c.upper().startswith("NV")}
    few = {p: c for p, c in pairs.items() if c.upper().startswith("NV") and int(c[2:]) < per_gpu}
    for found, code, what, remedy in (
            (not_nv, "gpu.topology/pair-not-nvlink", "not on NVLink",
             "drain the node; check the fabric manager (`systemctl status nvidia-fabricmanager`) and "
             "`nvidia-smi nvlink --status`; a reboot re-trains NVLink; persistent gaps need the NVSwitch "
             "baseboard serviced"),
            (few, "gpu.topology/pair-fewer-nvlinks", f"with fewer than {per_gpu} NVLinks",
             "see gpu.nvlink for the links that are down; a reboot re-trains them")):
        if found:
            rows = sorted({r for p in found for r in p.split("-")})
            f.add(code, f"{len(found)} GPU pair(s) {what}: " + ", ".join(f"{p} {c}" for p, c in list(found.items())[:8]),
                  [*[topo.lines[r] for r in rows], topo.header, src], remedy)  # the telling rows first


def _topo_expects(prof: Profile) -> bool:
    """The profile expects something of every GPU's matrix row (NVLinks to each GPU, a local NIC)."""
    return bool(prof.get("nvlink.links_per_gpu") or prof.get("topology.require_local_nic"))


def _no_matrix_result(ctx: CheckContext, topo: TopoMatrix | None) -> Result:
    f = Findings()
    tool_errors("gpu.topology", topo.errors if topo is not None else [], "nvidia-smi topo", _topo_expects(ctx.profile),
                f)
    if f:
        return f.result(ctx, "", {"gpu_count": 0})
    return ctx.finding(unread_code(ctx), "not recognised: no topology matrix in the nvidia-smi topo -m "
                       "output (expected a header naming GPU0.. and a `GPU0  X ...` row)",
                       evidence=[topo.header] if topo is not None and topo.header else ["(no GPU0 row)"],
                       remedy="run `nvidia-smi topo -m` by hand and check its output", facts={"gpu_count": 0})


def _topology_facts(topo: TopoMatrix, local: dict[str, list[str]], pairs: dict[str, str]) -> dict[str, Any]:
    gpus = topo.gpus
    return {"gpus": [{"gpu": g, "local_nics": local[g],
                      **{k.lower().replace(" ", "_"): v for k, v in topo.affinity.get(g, {}).items()}} for g in gpus],
            "gpu_count": len(gpus), "nics": [topo.nic_name(n) for n in topo.nics], "pairs": pairs,
            "gpus_without_local_nic": [g for g in gpus if not local[g] and g not in topo.short] if topo.nics else [],
            "nic_legend": topo.nic_legend}


def grade_topology(ctx: CheckContext) -> Result:
    topo: TopoMatrix | None = ctx.facts("nvidia-smi-topo")
    prof = ctx.profile
    if topo is None or not topo.gpus:
        return _no_matrix_result(ctx, topo)
    levels = [str(x).upper() for x in (prof.get("topology.local_nic_levels") or ["PIX", "PXB"])]
    gpus = topo.gpus
    local = {g: [topo.nic_name(n) for n in topo.nics if topo.matrix[g].get(n, "").upper() in levels] for g in gpus}
    pairs = {f"{a}-{b}": topo.matrix[a].get(b, "") for i, a in enumerate(gpus) for b in gpus[i + 1:]}
    f = Findings()
    if topo.short:
        f.add(unread_code(ctx), "not recognised: matrix row(s) with cells that are not a known link "
              f"level: {', '.join(topo.short)} (graded on the cells read)", [topo.header, *[topo.lines[g] for g in
                                                                                topo.short]],
              "run `nvidia-smi topo -m` by hand and check the row(s)")
    _numa_findings(topo, prof, f)
    _pair_findings(topo, pairs, prof, f)
    _nic_findings(topo, local, prof, f)
    tool_errors("gpu.topology", topo.errors, "nvidia-smi topo", _topo_expects(prof), f)
    ok = f"{len(gpus)} GPU(s)"
    if len(gpus) > 1:
        ok += ", pairs: " + ", ".join(f"{c} x{n}" for c, n in Counter(pairs.values()).most_common())
    with_nic = sum(1 for g in gpus if local[g])
    ok += f"; {len(topo.nics)} NIC(s), {with_nic} GPU(s) with a local NIC" if topo.nics else "; no NIC in the matrix"
    return f.result(ctx, ok, _topology_facts(topo, local, pairs))


# ---------------------------------------------------------------------------------------
# Registration

INVENTORY_KEYS: dict[str, Any] = {
    "gpu.count": int, "gpu.model": str, "gpu.min_pcie_gen": int, "gpu.min_pcie_width": int,
    "gpu.persistence_mode": bool, "gpu.mig_allowed": bool, "gpu.expect_symmetric_sockets": bool}
NVLINK_KEYS: dict[str, Any] = {"nvlink.links_per_gpu": int, "nvlink.min_link_gbps": (int, float),
                               "nvlink.model_links": dict}
TOPOLOGY_KEYS: dict[str, Any] = {"topology.require_local_nic": bool, "topology.local_nic_levels": list,
                                 "nvlink.links_per_gpu": int, "gpu.count": int, "gpu.expect_symmetric_sockets": bool}

register(Check(
    id="gpu.inventory", title="GPU inventory", grade=grade_inventory,  # pragma: no mutate (register metadata)
    probes=(PROBE_QUERY, PROBE_L, PROBE_NVML), required=(PROBE_QUERY.name,), inputs=LISTINGS,
    profile_keys=INVENTORY_KEYS,
    catches="GPUs missing (fallen off the bus, lost, unreadable), wrong model, PCIe link trained down, MIG on, "
            "persistence off",
))
register(Check(
    id="gpu.nvlink", title="NVLink links", grade=grade_nvlink,  # pragma: no mutate (register metadata)
    probes=(PROBE_NVLINK,), required=(PROBE_NVLINK.name,), inputs=(PROBE_NVLINK.name,), profile_keys=NVLINK_KEYS,
    catches="NVLinks inactive or missing (also on SXM boards graded with the generic profile), links below speed",
))
register(Check(
    id="gpu.topology", title="GPU/NIC topology", grade=grade_topology,  # pragma: no mutate (register metadata)
    probes=(PROBE_TOPO,), required=(PROBE_TOPO.name,), inputs=(PROBE_TOPO.name,), profile_keys=TOPOLOGY_KEYS,
    catches="GPU pairs off NVLink on an NVSwitch node, GPUs without a NIC under their PCIe switch, a GPU missing "
            "from the matrix (an odd count split unevenly over the NUMA nodes)",
))
engine.register_profile_hint(profile_hint, probes=(PROBE_QUERY,))

__all__ = ["GPU_ERROR_CODES", "INVENTORY_KEYS", "LISTING_CODES", "LISTINGS", "UNREAD_CODES", "NVLINK_KEYS", "TOPOLOGY_KEYS", "PROBE_L", "PROBE_NVLINK", "PROBE_NVML", "PROBE_QUERY", "PROBE_TOPO",
           "QUERY_FIELDS", "Inventory", "build_inventory", "expected_links", "profile_hint", "tool_errors"]
