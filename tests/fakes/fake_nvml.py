"""The fake NVIDIA driver library for tests: a real `libnvidia-ml.so.1` built from
`tests/fakes/nvml/fake_nvml.c` with the machine's C compiler, once per source version, into a
cache folder (an atomic rename makes parallel builds safe).

The library answers from `$PREFLIGHT_FAKE_DIR/nvml.kv`, which `tests.fakes.scenario` writes
from a scenario's `nvml.json` (the shape the NVML probe prints: `kv_text`). A scenario without
it is a machine whose driver is not loaded. Put `library_dir()` on LD_LIBRARY_PATH
(`with_library`), or copy the library where a node's loader finds it (`install`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).resolve().parent / "nvml" / "fake_nvml.c"
SONAME = "libnvidia-ml.so.1"
VARIANTS = {"": [], "old": ["-DFAKE_OLD_DRIVER"]}  # "old": an old driver's library, lacking newer functions
_MIB = 1024 * 1024
_LOCK = threading.Lock()

# nvmlReturn_t codes by name (nvml.h), and the pynvml exception class names older scenarios used
CODES = {"NVML_ERROR_UNINITIALIZED": 1, "NVML_ERROR_INVALID_ARGUMENT": 2, "NVML_ERROR_NOT_SUPPORTED": 3,
         "NVML_ERROR_NO_PERMISSION": 4, "NVML_ERROR_NOT_FOUND": 6, "NVML_ERROR_INSUFFICIENT_POWER": 8,
         "NVML_ERROR_DRIVER_NOT_LOADED": 9, "NVML_ERROR_TIMEOUT": 10, "NVML_ERROR_IRQ_ISSUE": 11,
         "NVML_ERROR_LIBRARY_NOT_FOUND": 12, "NVML_ERROR_FUNCTION_NOT_FOUND": 13, "NVML_ERROR_CORRUPTED_INFOROM": 14,
         "NVML_ERROR_GPU_IS_LOST": 15, "NVML_ERROR_RESET_REQUIRED": 16, "NVML_ERROR_OPERATING_SYSTEM": 17,
         "NVML_ERROR_LIB_RM_VERSION_MISMATCH": 18, "NVML_ERROR_IN_USE": 19, "NVML_ERROR_UNKNOWN": 999,
         "NotSupported": 3, "NoPermission": 4, "DriverNotLoaded": 9, "GpuIsLost": 15, "ResetRequired": 16,
         "LibRmVersionMismatch": 18, "Unknown": 999}
_FIELDS = ("name", "uuid", "pci_bus_id", "vbios", "pcie_gen", "pcie_gen_max", "pcie_width", "pcie_width_max")


class Unavailable(RuntimeError):
    """No C compiler (or no C library headers) to build the fake library."""


def library_dir(variant: str = "") -> Path:
    """The folder holding the built `libnvidia-ml.so.1` (built on first use)."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise Unavailable("no C compiler (gcc) to build the fake libnvidia-ml.so.1")
    flags = VARIANTS[variant]
    digest = hashlib.sha256(SOURCE.read_bytes() + " ".join(flags).encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"preflight-fake-nvml-{digest}"
    lib = folder / SONAME
    if lib.is_file():
        return folder
    with _LOCK:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{SONAME}.{os.getpid()}.{threading.get_ident()}"
        p = subprocess.run([cc, "-shared", "-fPIC", "-O1", *flags, "-o", str(tmp), str(SOURCE)],
                           capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise Unavailable(f"building the fake libnvidia-ml.so.1 failed (gcc and libc6-dev needed): "
                              f"{p.stderr.strip()[-1000:]}")
        os.replace(tmp, lib)
    return folder


def with_library(env: dict[str, str], variant: str = "") -> dict[str, str]:
    """`env` with the fake library's folder first on LD_LIBRARY_PATH."""
    parts = [str(library_dir(variant)), *[p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]]
    env["LD_LIBRARY_PATH"] = os.pathsep.join(parts)
    return env


def install(dest: Path, variant: str = "") -> Path:
    """Copy the library into `dest` (a node's own library folder); the path of the copy."""
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / SONAME
    tmp = dest / f".{SONAME}.{os.getpid()}"
    shutil.copyfile(library_dir(variant) / SONAME, tmp)
    os.replace(tmp, target)
    return target


def _code(text: str, default: int = 3) -> int:
    """The return code an error text names (NVML_ERROR_GPU_IS_LOST: ..., NVMLError_GpuIsLost);
    NOT_SUPPORTED (3) when it names none."""
    for name, code in CODES.items():
        if name in text:
            return code
    return default


def _value(value: Any, error: str) -> str:
    return f"!{_code(error)}" if value is None else str(value)


def _gpu_lines(i: int, g: dict[str, Any]) -> list[str]:
    errors = {str(k): str(v) for k, v in (g.get("errors") or {}).items()}
    if "handle" in errors:
        return [f"gpu.{i}.handle=!{_code(errors['handle'])}"]
    lines = [f"gpu.{i}.{k}={_value(g.get(k), errors.get(k, ''))}" for k in _FIELDS]
    pers = g.get("persistence")
    lines.append(f"gpu.{i}.persistence={_value(None if pers is None else int(bool(pers)), errors.get('persistence', ''))}")
    for key in ("mig_mode", "mig_mode_pending"):
        mode = g.get(key)
        lines.append(f"gpu.{i}.{key}={_value(None if mode is None else int(mode == 'Enabled'), errors.get(key, ''))}")
    mib = g.get("memory_total_mib")
    lines.append(f"gpu.{i}.memory_total={_value(None if mib is None else int(mib) * _MIB, errors.get('memory_total_mib', ''))}")
    return lines


def kv_text(data: dict[str, Any]) -> str:
    """The library's data file for a scenario in the probe's JSON shape. `ok: false` makes
    nvmlInit_v2 return the code its `error_type` names (NVML_ERROR_UNKNOWN otherwise); a null
    GPU field returns the code its `errors` entry names (NOT_SUPPORTED otherwise); raw keys in
    `fake_kv` override (e.g. {"count": "!999"})."""
    if not data.get("ok", True):
        return f"init={_code(str(data.get('error_type') or ''), CODES['NVML_ERROR_UNKNOWN'])}\n"
    lines = [f"driver={data.get('driver') or '!999'}", f"nvml_version={data.get('nvml_version') or '!999'}"]
    if data.get("cuda_driver_version"):
        lines.append(f"cuda={int(data['cuda_driver_version'])}")
    gpus = [g for g in data.get("gpus") or [] if isinstance(g, dict)]
    lines.append(f"count={len(gpus)}")
    for i, g in enumerate(gpus):
        lines.extend(_gpu_lines(i, g))
    raw = {str(k): str(v) for k, v in (data.get("fake_kv") or {}).items()}
    lines = [ln for ln in lines if ln.split("=", 1)[0] not in raw] + [f"{k}={v}" for k, v in raw.items()]
    return "\n".join(lines) + "\n"


def write_data(folder: Path) -> None:
    """Write `nvml.kv` next to the scenario's `nvml.json` (nothing when there is none)."""
    import json

    src = folder / "nvml.json"
    if src.is_file():
        (folder / "nvml.kv").write_text(kv_text(json.loads(src.read_text())))
