"""NVML probe: reads the node's own libnvidia-ml through ctypes and prints one JSON object.

Standard library only, and no import of the rest of preflight: it ships with the probe bundle
as `python3 -c <this file's text>` (packed by `shipped`; see `checks.gpu_health.PROBE_NVML`), so a node needs
nothing but the NVIDIA driver's own library. It runs as a subprocess of the probe runner, so a
hung or crashing driver library is bounded by the probe timeout and never takes preflight
down with it. It always prints one JSON object and exits 0:

    {"ok": bool, "error": str, "error_type": str, "error_code": int, "library": str,
     "driver": str, "nvml_version": str, "cuda_driver_version": int,
     "gpus": [{"index", "name", "uuid", "pci_bus_id", "vbios", "persistence", "pcie_gen",
               "pcie_gen_max", "pcie_width", "pcie_width_max", "mig_mode", "mig_mode_pending",
               "memory_total_mib", "errors"?}], "searched"?: [str], "load_errors"?: [str]}

`library` is the file actually loaded. A node without the library says `error_type`
"LibraryNotFound" (or "LibraryLoadError", each failed load in `load_errors`) in one short `error`,
and where it looked in `searched`; an nvmlInit failure carries NVML's own error string in
`error` and the return code's name (NVML_ERROR_DRIVER_NOT_LOADED ...) in `error_type`. A field
a GPU does not give (NOT_SUPPORTED under MIG, a function an old driver lacks, a lost GPU) is
null, and the reason is in that GPU's "errors" as "<code name>: <NVML error string>".

The C API used (nvml.h): nvmlInit_v2, nvmlShutdown, nvmlErrorString, nvmlSystemGetDriverVersion,
nvmlSystemGetNVMLVersion, nvmlSystemGetCudaDriverVersion(_v2), nvmlDeviceGetCount_v2,
nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetName, nvmlDeviceGetUUID, nvmlDeviceGetPciInfo_v3,
nvmlDeviceGetVbiosVersion, nvmlDeviceGetPersistenceMode, nvmlDeviceGet{Curr,Max}PcieLink
{Generation,Width}, nvmlDeviceGetMigMode, nvmlDeviceGetMemoryInfo.
"""

from __future__ import annotations

import base64
import ctypes
import json
import os
import sys
import zlib
from typing import Any

SONAME = "libnvidia-ml.so.1"
# where driver packages put the library when the loader's own search (LD_LIBRARY_PATH,
# ld.so.cache) does not find it: distribution packages, the .run installer, WSL, the GPU
# operator's driver container, the Kubernetes device plugin's mount
DRIVER_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib64/nvidia",
               "/usr/lib/nvidia", "/usr/lib", "/usr/local/nvidia/lib64", "/usr/lib/wsl/lib",
               "/run/nvidia/driver/usr/lib64", "/run/nvidia/driver/usr/lib/x86_64-linux-gnu")

# nvmlReturn_t (nvml.h)
SUCCESS = 0
RETURN_NAMES = {
    0: "NVML_SUCCESS", 1: "NVML_ERROR_UNINITIALIZED", 2: "NVML_ERROR_INVALID_ARGUMENT", 3: "NVML_ERROR_NOT_SUPPORTED",
    4: "NVML_ERROR_NO_PERMISSION", 5: "NVML_ERROR_ALREADY_INITIALIZED", 6: "NVML_ERROR_NOT_FOUND",
    7: "NVML_ERROR_INSUFFICIENT_SIZE", 8: "NVML_ERROR_INSUFFICIENT_POWER", 9: "NVML_ERROR_DRIVER_NOT_LOADED",
    10: "NVML_ERROR_TIMEOUT", 11: "NVML_ERROR_IRQ_ISSUE", 12: "NVML_ERROR_LIBRARY_NOT_FOUND",
    13: "NVML_ERROR_FUNCTION_NOT_FOUND", 14: "NVML_ERROR_CORRUPTED_INFOROM", 15: "NVML_ERROR_GPU_IS_LOST",
    16: "NVML_ERROR_RESET_REQUIRED", 17: "NVML_ERROR_OPERATING_SYSTEM", 18: "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
    19: "NVML_ERROR_IN_USE", 20: "NVML_ERROR_MEMORY", 21: "NVML_ERROR_NO_DATA", 22: "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED",
    23: "NVML_ERROR_INSUFFICIENT_RESOURCES", 24: "NVML_ERROR_FREQ_NOT_SUPPORTED",
    25: "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", 26: "NVML_ERROR_DEPRECATED", 27: "NVML_ERROR_NOT_READY",
    28: "NVML_ERROR_GPU_NOT_FOUND", 29: "NVML_ERROR_INVALID_STATE", 999: "NVML_ERROR_UNKNOWN",
}
FUNCTION_NOT_FOUND = 13

# buffer sizes (nvml.h: NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE, ..._NVML_VERSION_..., NVML_DEVICE_NAME_V2_BUFFER_SIZE,
# NVML_DEVICE_UUID_V2_BUFFER_SIZE, NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE)
DRIVER_BUF, NVML_BUF, NAME_BUF, UUID_BUF, VBIOS_BUF = 80, 80, 96, 96, 32
_MIB = 1024 * 1024
_GPU_FIELDS = ("name", "uuid", "pci_bus_id", "vbios", "persistence", "pcie_gen", "pcie_gen_max", "pcie_width",
               "pcie_width_max", "mig_mode", "mig_mode_pending", "memory_total_mib")


class PciInfo(ctypes.Structure):
    """nvmlPciInfo_t, as nvmlDeviceGetPciInfo_v3 fills it."""

    _fields_ = [("busIdLegacy", ctypes.c_char * 16), ("domain", ctypes.c_uint), ("bus", ctypes.c_uint),
                ("device", ctypes.c_uint), ("pciDeviceId", ctypes.c_uint), ("pciSubSystemId", ctypes.c_uint),
                ("busId", ctypes.c_char * 32)]


class Memory(ctypes.Structure):
    """nvmlMemory_t (bytes)."""

    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class NvmlFailure(Exception):
    """One NVML call that did not succeed: its return code and NVML's sentence for it."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(text)
        self.code = code
        self.text = text

    @property
    def name(self) -> str:
        return RETURN_NAMES.get(self.code, f"NVML_ERROR_{self.code}")

    def __str__(self) -> str:
        return f"{self.name}: {self.text}"


LOADER = "the loader's path (LD_LIBRARY_PATH, ld.so.cache)"


class NoLibrary(Exception):
    """The library could not be loaded at all: one short sentence, where it was looked for, and
    each load that failed (the loader's own message, which names the file)."""

    def __init__(self, text: str, kind: str, searched: list[str], failures: list[str] | None = None) -> None:
        super().__init__(text)
        self.kind = kind
        self.searched = searched
        self.failures = failures or []


def _loaded_path(fallback: str) -> str:
    """The file the loader mapped for libnvidia-ml (the loader's search is not told otherwise)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                path = line.split(None, 5)[-1].strip() if len(line.split(None, 5)) == 6 else ""
                if "libnvidia-ml" in os.path.basename(path):
                    return path
    except OSError:
        pass
    return fallback


def load(dirs: tuple[str, ...] = DRIVER_DIRS) -> tuple[ctypes.CDLL, str]:
    """(the library, the file loaded): the loader's search first, then the driver folders."""
    failed = []
    try:
        lib = ctypes.CDLL(SONAME)
        return lib, _loaded_path(SONAME)
    except OSError as exc:
        if "No such file" not in str(exc):  # found by the loader, but unusable (wrong class, missing symbol...)
            failed.append(str(exc))
    for folder in dirs:
        path = os.path.join(folder, SONAME)
        if not os.path.exists(path):
            continue
        try:
            return ctypes.CDLL(path), _loaded_path(path)
        except OSError as exc:  # the loader's message names the file ("<path>: invalid ELF header")
            failed.append(str(exc) if path in str(exc) else f"{path}: {exc}")
    searched = [LOADER, *dirs]
    if failed:
        more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
        raise NoLibrary(f"{SONAME} cannot be loaded: {failed[0]}{more}", "LibraryLoadError", searched, failed)
    raise NoLibrary(f"{SONAME} not found", "LibraryNotFound", searched)


class Nvml:
    """The few NVML calls the probe makes, each answering a value or raising NvmlFailure."""

    def __init__(self, lib: ctypes.CDLL, path: str) -> None:
        self.lib, self.path = lib, path

    def error_string(self, code: int) -> str:
        try:
            fn = self.lib.nvmlErrorString
        except AttributeError:
            return RETURN_NAMES.get(code, "Unknown Error")
        fn.restype, fn.argtypes = ctypes.c_char_p, [ctypes.c_int]
        text = fn(code)
        return text.decode("utf-8", errors="replace") if text else ""

    def call(self, names: tuple[str, ...], *args: Any) -> None:
        """Call the first of `names` the library has (newest version first)."""
        for name in names:
            try:
                fn = getattr(self.lib, name)
            except AttributeError:
                continue
            fn.restype = ctypes.c_int
            code = int(fn(*args))
            if code != SUCCESS:
                raise NvmlFailure(code, self.error_string(code))
            return
        raise NvmlFailure(FUNCTION_NOT_FOUND, f"{' / '.join(names)} not in {self.path}")

    def text(self, name: str, size: int, *head: Any) -> str:
        buf = ctypes.create_string_buffer(size)
        self.call((name,), *head, buf, ctypes.c_uint(size))
        return buf.value.decode("utf-8", errors="replace")

    def uint(self, names: tuple[str, ...], *head: Any) -> int:
        value = ctypes.c_uint(0)
        self.call(names, *head, ctypes.byref(value))
        return int(value.value)

    def integer(self, names: tuple[str, ...]) -> int:
        value = ctypes.c_int(0)
        self.call(names, ctypes.byref(value))
        return int(value.value)

    def handle(self, index: int) -> ctypes.c_void_p:
        device = ctypes.c_void_p()
        self.call(("nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"), ctypes.c_uint(index),
                  ctypes.byref(device))
        return device

    def pci_bus_id(self, device: ctypes.c_void_p) -> str:
        info = PciInfo()
        self.call(("nvmlDeviceGetPciInfo_v3",), device, ctypes.byref(info))
        return info.busId.decode("utf-8", errors="replace")

    def mig(self, device: ctypes.c_void_p) -> tuple[int, int]:
        current, pending = ctypes.c_uint(0), ctypes.c_uint(0)
        self.call(("nvmlDeviceGetMigMode",), device, ctypes.byref(current), ctypes.byref(pending))
        return int(current.value), int(pending.value)

    def memory_total(self, device: ctypes.c_void_p) -> int:
        mem = Memory()
        self.call(("nvmlDeviceGetMemoryInfo",), device, ctypes.byref(mem))
        return int(mem.total)


def _field(errors: dict[str, str], name: str, fn: Any) -> Any:
    """One NVML getter; a per-field failure is recorded, never raised."""
    try:
        return fn()
    except NvmlFailure as exc:
        errors[name] = str(exc)
    except Exception as exc:  # anything odd from a broken library
        errors[name] = f"{type(exc).__name__}: {exc}"
    return None


def _enabled(value: int | None) -> str | None:
    return None if value is None else ("Enabled" if value else "Disabled")


def gpu(nv: Nvml, index: int) -> dict[str, Any]:
    """One GPU's fields; a GPU whose handle fails has every field null and the reason."""
    errors: dict[str, str] = {}
    out: dict[str, Any] = {"index": index}
    device = _field(errors, "handle", lambda: nv.handle(index))
    if device is None:
        out.update(dict.fromkeys(_GPU_FIELDS))
        out["errors"] = errors
        return out
    out["name"] = _field(errors, "name", lambda: nv.text("nvmlDeviceGetName", NAME_BUF, device))
    out["uuid"] = _field(errors, "uuid", lambda: nv.text("nvmlDeviceGetUUID", UUID_BUF, device))
    out["pci_bus_id"] = _field(errors, "pci_bus_id", lambda: nv.pci_bus_id(device))
    out["vbios"] = _field(errors, "vbios", lambda: nv.text("nvmlDeviceGetVbiosVersion", VBIOS_BUF, device))
    persistence = _field(errors, "persistence", lambda: nv.uint(("nvmlDeviceGetPersistenceMode",), device))
    out["persistence"] = None if persistence is None else bool(persistence)
    for key, fn in (("pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration"),
                    ("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
                    ("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth"), ("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth")):
        out[key] = _field(errors, key, lambda fn=fn: nv.uint((fn,), device))
    mig = _field(errors, "mig_mode", lambda: nv.mig(device))
    out["mig_mode"] = _enabled(mig[0] if mig else None)
    out["mig_mode_pending"] = _enabled(mig[1] if mig else None)
    total = _field(errors, "memory_total_mib", lambda: nv.memory_total(device))
    out["memory_total_mib"] = None if total is None else total // _MIB
    if errors:
        out["errors"] = errors
    return out


def empty() -> dict[str, Any]:
    return {"ok": False, "error": "", "error_type": "", "error_code": 0, "library": "", "driver": "",
            "nvml_version": "", "cuda_driver_version": 0, "gpus": []}


def _fail(out: dict[str, Any], exc: NvmlFailure) -> dict[str, Any]:
    out.update(error=exc.text or exc.name, error_type=exc.name, error_code=exc.code)
    return out


def _system(nv: Nvml, out: dict[str, Any]) -> dict[str, Any]:
    """Driver, versions and every GPU, once NVML is initialised."""
    errors: dict[str, str] = {}
    out["driver"] = _field(errors, "driver", lambda: nv.text("nvmlSystemGetDriverVersion", DRIVER_BUF)) or ""
    out["nvml_version"] = _field(errors, "nvml_version", lambda: nv.text("nvmlSystemGetNVMLVersion", NVML_BUF)) or ""
    out["cuda_driver_version"] = _field(errors, "cuda_driver_version", lambda: nv.integer(
        ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"))) or 0
    try:
        count = nv.uint(("nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"))
    except NvmlFailure as exc:
        return _fail(out, exc)
    out["gpus"] = [gpu(nv, i) for i in range(count)]
    if errors:
        out["errors"] = errors
    out["ok"] = True
    return out


def collect(dirs: tuple[str, ...] = DRIVER_DIRS) -> dict[str, Any]:
    """Query NVML; every failure becomes part of the returned object."""
    out = empty()
    try:
        lib, path = load(dirs)
    except NoLibrary as exc:
        out.update(error=str(exc), error_type=exc.kind, searched=exc.searched)
        if exc.failures:
            out["load_errors"] = exc.failures
        return out
    out["library"] = path
    nv = Nvml(lib, path)
    try:
        nv.call(("nvmlInit_v2", "nvmlInit"))
    except NvmlFailure as exc:
        return _fail(out, exc)
    try:
        return _system(nv, out)
    finally:
        try:
            nv.call(("nvmlShutdown",))
        except Exception:
            pass


def shipped(text: str) -> str:
    """This module's text as the `python -c` program that ships it: zlib-compressed and base85
    encoded (under half the size, and no quote or backslash to escape), unpacked and run as
    `__main__` by the node's python. The bundle crosses the network as one SSH command, and a
    smaller command gets through where a bigger one would not."""
    packed = base64.b85encode(zlib.compress(text.encode("utf-8"), 9)).decode("ascii")
    return f"import base64,zlib;exec(compile(zlib.decompress(base64.b85decode('{packed}')),'nvml_probe.py','exec'))"


def main() -> int:
    try:
        result = collect()
    except BaseException as exc:  # the one-JSON-object promise holds even here
        result = empty()
        result.update(error=str(exc) or type(exc).__name__, error_type=type(exc).__name__)
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
