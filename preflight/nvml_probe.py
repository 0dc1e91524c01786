"""NVML probe: `python -m preflight.nvml_probe` prints one JSON object and exits 0.

It runs as a subprocess of the probe runner, so a hung or crashing driver library can be
bounded by the probe timeout and never takes preflight down with it. Output shape:

    {"ok": bool, "error": str, "error_type": str, "driver": str, "nvml_version": str,
     "cuda_driver_version": int, "gpus": [{"index", "name", "uuid", "pci_bus_id", "vbios",
     "persistence", "pcie_gen", "pcie_gen_max", "pcie_width", "pcie_width_max", "mig_mode",
     "memory_total_mib"}]}

A field a GPU does not support (NotSupported under MIG, on a VM slice...) is null, and its
error is listed in that GPU's "errors". Only the standard library and pynvml are imported.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

_MIB = 1024 * 1024


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def _field(errors: dict[str, str], name: str, fn: Callable[[], Any]) -> Any:
    """Call one NVML getter; a per-field error is recorded, never raised."""
    try:
        return fn()
    except Exception as exc:  # NVMLError subclasses, and anything odd from a broken library
        errors[name] = f"{type(exc).__name__}: {exc}"
        return None


def _gpu(nvml: Any, index: int) -> dict[str, Any]:
    errors: dict[str, str] = {}
    gpu: dict[str, Any] = {"index": index}
    handle = _field(errors, "handle", lambda: nvml.nvmlDeviceGetHandleByIndex(index))
    if handle is None:
        gpu.update({k: None for k in ("name", "uuid", "pci_bus_id", "vbios", "persistence", "pcie_gen",
                                      "pcie_gen_max", "pcie_width", "pcie_width_max", "mig_mode",
                                      "memory_total_mib")})
        gpu["errors"] = errors
        return gpu
    name = _field(errors, "name", lambda: nvml.nvmlDeviceGetName(handle))
    gpu["name"] = None if name is None else _text(name)
    uuid = _field(errors, "uuid", lambda: nvml.nvmlDeviceGetUUID(handle))
    gpu["uuid"] = None if uuid is None else _text(uuid)
    pci = _field(errors, "pci_bus_id", lambda: nvml.nvmlDeviceGetPciInfo(handle))
    gpu["pci_bus_id"] = None if pci is None else _text(getattr(pci, "busId", ""))
    vbios = _field(errors, "vbios", lambda: nvml.nvmlDeviceGetVbiosVersion(handle))
    gpu["vbios"] = None if vbios is None else _text(vbios)
    pers = _field(errors, "persistence", lambda: nvml.nvmlDeviceGetPersistenceMode(handle))
    gpu["persistence"] = None if pers is None else bool(pers)
    gpu["pcie_gen"] = _field(errors, "pcie_gen", lambda: int(nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle)))
    gpu["pcie_gen_max"] = _field(errors, "pcie_gen_max", lambda: int(nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)))
    gpu["pcie_width"] = _field(errors, "pcie_width", lambda: int(nvml.nvmlDeviceGetCurrPcieLinkWidth(handle)))
    gpu["pcie_width_max"] = _field(errors, "pcie_width_max", lambda: int(nvml.nvmlDeviceGetMaxPcieLinkWidth(handle)))
    mig = _field(errors, "mig_mode", lambda: nvml.nvmlDeviceGetMigMode(handle))
    if isinstance(mig, (list, tuple)) and mig:
        gpu["mig_mode"] = "Enabled" if int(mig[0]) else "Disabled"
        if len(mig) > 1:
            gpu["mig_mode_pending"] = "Enabled" if int(mig[1]) else "Disabled"
    else:
        gpu["mig_mode"] = None
    mem = _field(errors, "memory_total_mib", lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
    total = getattr(mem, "total", None)
    gpu["memory_total_mib"] = int(total) // _MIB if isinstance(total, int) else None
    if errors:
        gpu["errors"] = errors
    return gpu


def collect() -> dict[str, Any]:
    """Query NVML; every failure becomes part of the returned object."""
    out: dict[str, Any] = {"ok": False, "error": "", "error_type": "", "driver": "", "nvml_version": "",
                           "cuda_driver_version": 0, "gpus": []}
    try:
        import pynvml as nvml
    except Exception as exc:
        out["error"] = f"pynvml cannot be imported: {exc}"
        out["error_type"] = type(exc).__name__
        return out
    try:
        nvml.nvmlInit()
    except Exception as exc:
        out["error"] = str(exc)
        out["error_type"] = type(exc).__name__
        return out
    try:
        errors: dict[str, str] = {}
        out["driver"] = _text(_field(errors, "driver", nvml.nvmlSystemGetDriverVersion) or "")
        out["nvml_version"] = _text(_field(errors, "nvml_version", nvml.nvmlSystemGetNVMLVersion) or "")
        out["cuda_driver_version"] = int(_field(errors, "cuda_driver_version",
                                                nvml.nvmlSystemGetCudaDriverVersion) or 0)
        count = _field(errors, "count", nvml.nvmlDeviceGetCount)
        if count is None:
            out["error"] = errors.get("count", "device count unavailable")
            out["error_type"] = out["error"].split(":", 1)[0]
            return out
        out["gpus"] = [_gpu(nvml, i) for i in range(int(count))]
        if errors:
            out["errors"] = errors
        out["ok"] = True
    except Exception as exc:
        out["error"] = str(exc)
        out["error_type"] = type(exc).__name__
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass
    return out


def main() -> int:
    try:
        result = collect()
    except BaseException as exc:  # the one-JSON-object promise holds even here
        result = {"ok": False, "error": str(exc), "error_type": type(exc).__name__, "driver": "",
                  "nvml_version": "", "cuda_driver_version": 0, "gpus": []}
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
