"""The NVML probe's JSON (`preflight.nvml_probe`, shipped to the node) as facts.

Shape: {ok, error, error_type, error_code, library, driver, nvml_version, cuda_driver_version,
gpus: [...], searched?, load_errors?}. The probe prints one JSON object; anything around it (a warning a library
printed) is skipped. Garbage gives ok False with the reason, never an exception. `error_type`
is the probe's LibraryNotFound / LibraryLoadError, or the name of NVML's return code
(NVML_ERROR_DRIVER_NOT_LOADED ...) with NVML's own sentence in `error`; older probes printed
pynvml's exception class (NVMLError_DriverNotLoaded): both are classified.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from preflight import lazyre
from preflight.framing import Doc
from preflight.parsers.base import Format, GpuRecord, ParserSpec, to_bool, to_int
from preflight.parsers.nvsmi_errors import ToolError, error_for, errors_in

_SCAN = 65536  # pragma: no mutate (how much of the text the cheap test reads: the probe's key is near the start)
_CUDA_MIN = 1000  # CUDA versions are major * 1000 + minor * 10 (1.0 is 1000)
# NVML's answer for a GPU that stopped answering (nvmlReturn_t GPU_IS_LOST, RESET_REQUIRED, UNKNOWN; the
# probe writes "<code name>: <NVML's sentence>", older probes pynvml's class name)
_STOPPED = lazyre.compile(r"GPU_IS_LOST|GpuIsLost|GPU is lost|RESET_REQUIRED|ResetRequired|requires reset|"
                      r"NVML_ERROR_UNKNOWN|Unknown Error", re.I)


@dataclass
class NvmlGpu:
    index: int
    name: str | None = None
    uuid: str | None = None
    bus_id: str | None = None
    vbios: str | None = None
    persistence: bool | None = None
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    mig_mode: str | None = None
    mig_pending: str | None = None
    memory_total_mib: int | None = None
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def broken(self) -> list[str]:
        """NVML's answers that say this GPU stopped answering (its handle, or any field): a lost GPU is
        one GPU that does not answer, never a listed healthy one."""
        return [f"[{k}: {v}]" for k, v in self.errors.items() if _STOPPED.search(v)]


@dataclass
class NvmlReport:
    ok: bool = False
    error: str = ""
    error_type: str = ""
    driver: str = ""
    nvml_version: str = ""
    cuda_driver_version: int = 0
    gpus: list[NvmlGpu] = field(default_factory=list)
    recognised: bool = False  # the text held the probe's JSON object
    library: str = ""  # the libnvidia-ml file the probe loaded ("" when none)
    searched: list[str] = field(default_factory=list)  # where the probe looked for it, when it found none
    load_errors: list[str] = field(default_factory=list)  # each load of it that failed

    @property
    def cuda(self) -> str:
        """The CUDA driver version as nvidia-smi prints it (12020 -> 12.2)."""
        v = self.cuda_driver_version
        return f"{v // 1000}.{(v % 1000) // 10}" if v >= _CUDA_MIN else ""

    @property
    def records(self) -> list[GpuRecord]:
        return [GpuRecord(index=g.index, name=g.name, uuid=g.uuid, bus_id=g.bus_id, vbios=g.vbios,
                          persistence=g.persistence, pcie_gen=g.pcie_gen, pcie_gen_max=g.pcie_gen_max,
                          pcie_width=g.pcie_width, pcie_width_max=g.pcie_width_max, mig_mode=g.mig_mode,
                          mig_pending=g.mig_pending, memory_total_mib=g.memory_total_mib, broken=g.broken,
                          line=f"NVML GPU {g.index}: {g.name or '?'} {g.bus_id or ''}".rstrip()
                          + "".join(f" {b}" for b in g.broken))
                for g in self.gpus] if self.ok else []

    def tool_error(self) -> ToolError | None:
        """The probe's failure as a ToolError; None when it succeeded with GPUs."""
        if self.ok:
            return None if self.gpus else error_for("no_devices", "NVML: device count is 0")
        where = f"NVML ({self.library})" if self.library else "NVML"
        line = f"{where}: {self.error or 'NVML probe failed'}" + (f" ({self.error_type})" if self.error_type else "")
        # the return code's name (NVML_ERROR_DRIVER_NOT_LOADED, NVMLError_...) names the kind, else the message does
        found = errors_in([f"{self.error_type} {self.error}"])
        kind = found[0].kind if found else "nvml_init"
        return error_for(kind, line)


def _object(text: str) -> dict[str, Any] | None:
    for chunk in [text.strip(), *reversed(text.strip().splitlines())]:
        chunk = chunk.strip()
        if not chunk.startswith("{"):
            continue
        try:
            data = json.loads(chunk)
        except ValueError:
            continue
        if isinstance(data, dict):
            return data
    return None


def _strings(value: Any) -> list[str]:
    return [str(v) for v in value if isinstance(v, str)] if isinstance(value, list) else []


def parse(doc: Doc) -> NvmlReport:
    data = _object(doc.clean)
    if data is None:
        return NvmlReport(ok=False, error="NVML probe output is not a JSON object", error_type="BadOutput")
    rep = NvmlReport(ok=bool(data.get("ok")), error=str(data.get("error") or ""),
                     error_type=str(data.get("error_type") or ""), driver=str(data.get("driver") or ""),
                     nvml_version=str(data.get("nvml_version") or ""),
                     cuda_driver_version=to_int(data.get("cuda_driver_version")) or 0, recognised=True,
                     library=str(data.get("library") or ""), searched=_strings(data.get("searched")),
                     load_errors=_strings(data.get("load_errors")))
    for i, g in enumerate(data.get("gpus") or []):
        if not isinstance(g, dict):
            continue
        idx = to_int(g.get("index"))
        errs = g.get("errors")
        rep.gpus.append(NvmlGpu(
            index=i if idx is None else idx, name=g.get("name") or None, uuid=g.get("uuid") or None,
            bus_id=g.get("pci_bus_id") or None, vbios=g.get("vbios") or None, persistence=to_bool(g.get("persistence")),
            pcie_gen=to_int(g.get("pcie_gen")), pcie_gen_max=to_int(g.get("pcie_gen_max")),
            pcie_width=to_int(g.get("pcie_width")), pcie_width_max=to_int(g.get("pcie_width_max")),
            mig_mode=g.get("mig_mode") or None, mig_pending=g.get("mig_mode_pending") or None,
            memory_total_mib=to_int(g.get("memory_total_mib")),
            errors={str(k): str(v) for k, v in errs.items()} if isinstance(errs, dict) else {}))
    return rep


def detect(doc: Doc) -> bool:
    # cheap tests on the raw text and the first peeled lines before the whole document is peeled
    if '"nvml_version"' not in doc.text[:_SCAN]:
        return False
    first = next((ln.text.strip() for ln in doc.head() if ln.text.strip()), "")
    if not first.startswith("{"):
        return False
    data = _object(doc.clean)
    return data is not None and "ok" in data and "gpus" in data


_PRIORITY = 60  # pragma: no mutate (the only format of the nvml probe: any priority picks it)
FORMATS = [Format("nvml", detect=detect, priority=_PRIORITY, description="preflight NVML probe JSON")]
PARSERS = [ParserSpec("nvml", parse)]

__all__ = ["FORMATS", "NvmlGpu", "NvmlReport", "PARSERS", "detect", "parse"]
