"""gpu.driver: the driver stack (kernel module, user-space libraries, NVML, CUDA version).

Graded from what nvidia-smi and NVML print instead of data (version mismatch, driver not
loaded, no devices, NVML library missing or failing), the kernel log's driver faults (no adapter
probed, another driver owns the GPUs, API mismatch, missing firmware), the loaded kernel module
against the module on disk and the installed packages (`/proc/driver/nvidia/version`, `modinfo`,
`dpkg -l` / `rpm -qa`), and the versions the profile pins. Each finding names its cause and the
versions the captures show ("unknown" where they show none). Codes: checks/policy.toml.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from preflight.findings import Findings
from preflight.model import Result
from preflight.parsers.driver_version import DriverVersions
from preflight.parsers.kernel_log import KernelLog
from preflight.parsers.nvml import NvmlReport
from preflight.parsers.nvsmi_errors import ToolError
from preflight.parsers.nvsmi_q import QReport
from preflight.registry import Check, CheckContext, register

from .gpu_health import DRIVER_ERRORS, PROBE_NVML, PROBE_Q
from .units import owns

# the kind of an nvidia-smi / NVML error -> its code
ERROR_CODES = {"version_mismatch": "gpu.driver/version-mismatch", "no_driver": "gpu.driver/driver-not-loaded",
               "no_devices": "gpu.driver/no-devices", "library_missing": "gpu.driver/nvml-library-missing",
               "nvml_init": "gpu.driver/nvml-init-failed"}
# the kind of a kernel-log driver fault (preflight.parsers.kernel_log.DRIVER_FAULTS) -> its code
KLOG_CODES = {"no_adapter": "gpu.driver/klog-no-adapter", "probe_not_called": "gpu.driver/klog-probe-not-called",
              "api_mismatch": "gpu.driver/klog-api-mismatch", "unsupported_gpu": "gpu.driver/klog-unsupported-gpu",
              "module_symbols": "gpu.driver/klog-module-symbols", "firmware_missing": "gpu.driver/klog-firmware-missing"}
# nvidia-smi's exit status (nvidia-smi(1), RETURN VALUE) -> what it means
SMI_EXIT = {2: "an invalid argument or flag", 3: "the operation is not available on the device",
            4: "insufficient permissions", 6: "the GPU queried was not found", 8: "external power cables not attached",
            9: "the NVIDIA driver is not loaded", 10: "the kernel detected an interrupt issue with a GPU",
            12: "the NVML shared library could not be found or loaded",
            13: "the local NVML does not implement a needed function", 14: "the infoROM is corrupted",
            15: "a GPU has fallen off the bus or is otherwise inaccessible", 255: "another or an internal driver error"}
UNKNOWN = "unknown"
_REBOOT = ("the driver was upgraded without a reboot: drain the node and reboot so the kernel module and the "
           "user-space libraries are one version again")


def _prov(ctx: CheckContext, key: str) -> str:
    src = ctx.profile.source(key)
    return f"profile {ctx.profile.name}: {key} = {ctx.profile.get(key)!r}" + (f" ({src})" if src else "")


def _pin_ok(actual: str, pin: str) -> bool:
    """A pin matches the version or a prefix of it on a dot boundary ('535' matches 535.161.08)."""
    return actual == pin or actual.startswith(pin + ".")


@dataclass
class DriverView:
    """What the captures say of the driver: nvidia-smi -q, NVML, the kernel log, the versions."""

    q: QReport | None
    nv: NvmlReport | None
    klog: KernelLog | None
    dv: DriverVersions | None
    errors: list[ToolError]  # nvidia-smi's driver errors
    lost: list[ToolError]  # GPUs that do not answer
    nverr: ToolError | None  # NVML's tool error, None when NVML answered

    @classmethod
    def of(cls, ctx: CheckContext) -> DriverView:
        q: QReport | None = ctx.facts("nvidia-smi-q")
        nv: NvmlReport | None = ctx.facts("nvml")
        errors = [e for e in (q.errors if q else []) if e.kind in DRIVER_ERRORS]
        lost = [e for e in (q.errors if q else []) if e.kind == "gpu_lost"]
        if lost:  # "No devices were found" after a device-handle error: the GPU is gone, not the driver
            errors = [e for e in errors if e.kind != "no_devices"]
        return cls(q, nv, ctx.facts("kernel-log"), ctx.facts("driver-version"), errors, lost,
                   nv.tool_error() if nv is not None else None)

    @property
    def smi_driver(self) -> str:
        return self.q.driver if self.q else ""

    @property
    def nvml_driver(self) -> str:
        return self.nv.driver if self.nv is not None else ""

    @property
    def kernel_module(self) -> str:
        """The loaded kernel module's version: /proc/driver/nvidia/version, else the kernel log's."""
        if self.dv is not None and self.dv.loaded:
            return self.dv.loaded
        return str(getattr(self.klog, "module_version", "") or "") if self.klog is not None else ""

    @property
    def library(self) -> str:
        """The user-space library's version: "NVML library version", the kernel log's API mismatch
        client, else the installed packages'."""
        if self.q is not None and self.q.nvml_library:
            return self.q.nvml_library
        faults = self.klog.driver_faults if self.klog is not None else []
        client = next((str(k.detail.get("client") or "") for k in faults if k.kind == "api_mismatch"), "")
        if client:
            return client
        installed = self.dv.installed if self.dv is not None else []
        return installed[0] if len(installed) == 1 else ""

    @property
    def driver(self) -> str:
        dv = self.dv
        return self.smi_driver or self.nvml_driver or (dv.loaded if dv else "") or (dv.on_disk if dv else "")

    @property
    def cuda(self) -> str:
        return (self.q.cuda if self.q else "") or (self.nv.cuda if self.nv is not None else "")

    def facts(self) -> dict[str, Any]:
        nv, dv = self.nv, self.dv
        out = {"driver": self.driver or None, "cuda": self.cuda or None,
                "nvml": (nv.nvml_version or None) if nv is not None else None, "error": None,
                "kernel_module": self.kernel_module or None, "installed": dv.installed if dv else [],
                "nvml_library": self.library or None,
                "nvml_file": (nv.library or None) if nv is not None else None}  # the libnvidia-ml the probe loaded
        if nv is not None and self.nverr is not None:  # where the probe looked for it and each load that
            # failed: the facts and the evidence (--verbose) hold them, the summary does not
            out.update(nvml_searched=nv.searched, nvml_load_errors=nv.load_errors)
        return out

    def nvml_lines(self) -> list[str]:
        """The NVML probe's own line, then where it looked and what failed (evidence, not summary)."""
        if self.nverr is None:
            return []
        nv = self.nv
        more = [f"NVML probe searched: {', '.join(nv.searched)}"] if nv is not None and nv.searched else []
        more += [f"NVML probe load failed: {e}" for e in (nv.load_errors if nv is not None else [])]
        return [self.nverr.line, *more]


def _mismatch(v: DriverView, facts: dict[str, Any]) -> tuple[str, list[str]]:
    """The two versions of a library/kernel-module mismatch ("unknown" where not shown)."""
    lib, kmod = v.library or UNKNOWN, v.kernel_module or UNKNOWN
    facts["mismatch"] = {"library": lib, "kernel_module": kmod}
    ev = [x for x in ((v.q.nvml_library_line if v.q else ""), (v.dv.loaded_line if v.dv else "")) if x]
    if lib == UNKNOWN and kmod == UNKNOWN:
        return " (versions not shown: unknown)", ev
    return f" (user-space library {lib}, kernel module {kmod})", ev


def _no_devices_cause(v: DriverView) -> tuple[str, list[str]]:
    """Why the driver found no GPU, when the kernel log says: a GPU that failed to initialise."""
    faults = [k for k in (v.klog.faults if v.klog is not None else []) if k.kind == "adapter_init_failed"]
    if not faults:
        return "", []
    pcis = sorted({k.pci for k in faults if k.pci})
    what = f"GPU {', '.join(pcis)}" if pcis else "a GPU"
    return (f"; kernel log: {what} failed to initialise (RmInitAdapter failed)",
            [k.line.raw.strip() or k.line.text for k in faults])


def _fault_findings(v: DriverView, f: Findings, facts: dict[str, Any]) -> None:
    """Driver errors nvidia-smi printed, and driver faults in the kernel log."""
    for e in v.errors:
        extra = ""
        ev: list[str] = []
        if e.kind == "version_mismatch":
            extra, ev = _mismatch(v, facts)
        elif e.kind == "no_devices":
            extra, ev = _no_devices_cause(v)
        remedy = e.remedy
        if extra.startswith("; kernel log"):
            remedy = ("the GPU is on the bus but the driver could not initialise it: read dmesg for the "
                      "RmInitAdapter error, check the BIOS (Above 4G decoding, Resizable BAR), power and the "
                      "driver's support for this GPU; drain and power-cycle the node")
        f.add(ERROR_CODES[e.kind], f"{e.summary}: {e.line}{extra}", [e.line, *ev], remedy)
    for k in (v.klog.driver_faults if v.klog is not None else []):
        f.add(KLOG_CODES.get(k.kind, "gpu.driver/klog-driver-fault"), f"kernel log: {k.meaning}",
              [k.line.raw.strip() or k.line.text],
              "unload the module that owns the GPUs (nouveau: blacklist it and rebuild the initramfs) or fix the "
              "driver install (DKMS build for the running kernel), then reboot; check `dmesg | grep NVRM`")


def _version_findings(dv: DriverVersions | None, userspace: str, f: Findings) -> None:
    """The loaded kernel module against what is installed and what user space reports."""
    if dv is None or not dv.loaded:
        return
    other = [(v, p.line) for p in dv.packages for v in [p.version] if v != dv.loaded]
    if other:
        f.add("gpu.driver/module-older-than-packages",
              f"kernel module {dv.loaded} is loaded but packages of {other[0][0]} are installed",
              [dv.loaded_line, *dict.fromkeys(line for _, line in other)], _REBOOT)
    elif dv.on_disk and dv.on_disk != dv.loaded:
        f.add("gpu.driver/module-differs-from-disk",
              f"kernel module {dv.loaded} is loaded but the module on disk is {dv.on_disk}",
              [dv.loaded_line, dv.on_disk_line], _REBOOT)
    elif userspace and userspace != dv.loaded:
        f.add("gpu.driver/module-differs-from-userspace",
              f"kernel module {dv.loaded} is loaded but the user-space driver reports {userspace}",
              [dv.loaded_line, f"driver version reported by nvidia-smi/NVML: {userspace}"], _REBOOT)


def _nvml_findings(v: DriverView, f: Findings) -> None:
    """NVML failing where nvidia-smi works, and the two disagreeing on the driver."""
    nverr, driver, nvml_driver = v.nverr, v.smi_driver, v.nvml_driver
    if nverr is not None and nverr.kind != "gpu_lost" and nverr.kind not in {e.kind for e in v.errors}:
        if driver and not v.errors:  # nvidia-smi reads the driver fine: only the probe's process lacks NVML
            f.add("gpu.driver/nvml-unusable-here", f"{nverr.summary}: {nverr.line}", v.nvml_lines(),
                  "nvidia-smi works, so the driver is fine: check that the node's python3 can load libnvidia-ml.so.1 "
                  "(LD_LIBRARY_PATH, ld.so.cache, container mounts; `ldconfig -p | grep nvidia-ml`)")
        else:
            f.add(ERROR_CODES.get(nverr.kind, "gpu.driver/nvml-init-failed"), f"{nverr.summary}: {nverr.line}",
                  v.nvml_lines(), nverr.remedy)
    if driver and nvml_driver and driver != nvml_driver:
        f.add("gpu.driver/smi-nvml-disagree", f"nvidia-smi reports driver {driver} but NVML reports {nvml_driver}",
              [v.q.header_lines.get("Driver Version", driver) if v.q else driver, f"NVML driver: {nvml_driver}"],
              "two driver libraries are visible (container mounts, LD_LIBRARY_PATH): keep one")


def _pin_findings(ctx: CheckContext, v: DriverView, f: Findings) -> None:
    """The driver and CUDA versions against the profile's pins."""
    for key, code, actual, what in (("gpu.driver_version", "gpu.driver/driver-version-pin", v.driver, "driver"),
                                    ("gpu.cuda_version", "gpu.driver/cuda-version-pin", v.cuda,
                                     "CUDA driver version")):
        pin = str(ctx.profile.get(key) or "").strip()
        if pin and actual and not _pin_ok(actual, pin):
            shown = v.q.header_lines.get("Driver Version" if what == "driver" else "CUDA Version") if v.q else None
            f.add(code, f"{what} {actual} is not the pinned {pin}", [shown or f"{what}: {actual}", _prov(ctx, key)],
                  f"install the driver branch that provides {what} {pin}, or update the profile pin")


def _no_tooling(ctx: CheckContext, nverr: ToolError | None, facts: dict[str, Any]) -> Result | None:
    """nvidia-smi not installed and no NVML library: no GPU stack on this node (SKIP), or a
    missing one (FAIL where the profile requires nvidia-smi)."""
    smi = ctx.attempt("nvidia-smi-q")
    if smi is None or smi.state.value != "missing" or (ctx.input("nvml") is not None and (
            nverr is None or nverr.kind != "library_missing")):
        return None
    facts["error"] = nverr.line if nverr else smi.reason
    nv = ctx.facts("nvml")
    searched = getattr(nv, "searched", None) or []
    ev = [smi.reason] + ([nverr.line] if nverr else []) + (
        [f"NVML probe searched: {', '.join(searched)}"] if searched else [])
    if ctx.profile.requires_tool(smi.tool):
        return ctx.finding("gpu.driver/no-tooling-required", f"no GPU tooling: {smi.tool} not found and the NVML "
                           "library is missing", evidence=[*ev, _prov(ctx, "tools.required")], facts=facts,
                           remedy=f"install the NVIDIA driver on {ctx.node} (kernel module, libnvidia-ml, nvidia-smi), "
                                  "then reboot")
    return ctx.finding("gpu.driver/no-tooling", f"no GPU tooling on this node ({smi.tool} not found, NVML library "
                       "missing); gpu.driver not checked", evidence=ev, facts=facts)


def _no_version(ctx: CheckContext, v: DriverView, facts: dict[str, Any]) -> Result | list[Result]:
    """No driver version anywhere and nothing wrong found: why not."""
    if v.lost and not v.errors:
        return ctx.finding("gpu.driver/only-lost-gpu", "driver not graded: the only message is a GPU that does not "
                           "answer (a GPU fault: gpu.inventory FAILs it)", evidence=[e.line for e in v.lost],
                           facts=facts)
    if ctx.options.mode == "analyze":
        if v.klog is not None and v.klog.module_version:  # the module loaded and no fault shown
            return Findings().result(ctx, f"kernel module {v.klog.module_version} loaded (kernel log); no driver "
                                     "fault in the lines shown", facts, [v.klog.module_line])
        return []  # this paste says nothing about the driver
    inp = ctx.input("nvidia-smi-q")
    if inp is not None and inp.rc:
        meaning = SMI_EXIT.get(inp.rc, "")
        return ctx.finding("gpu.driver/smi-failed", f"nvidia-smi -q failed with exit code {inp.rc}"
                           + (f" ({meaning})" if meaning else ""), facts=facts,
                           evidence=[f"`{inp.cmdline}` exited {inp.rc} without a driver version"],
                           remedy=f"run `nvidia-smi -q` by hand on {ctx.node} and check dmesg for NVRM errors")
    return ctx.finding("gpu.driver/no-version-found", "no driver version found in the captures", facts=facts,
                       evidence=[f"{name}: no driver version" for name in ("nvidia-smi-q", "nvml")
                                 if ctx.input(name) is not None],
                       remedy=f"run `nvidia-smi -q` by hand on {ctx.node}")


def grade_driver(ctx: CheckContext) -> Result | list[Result]:
    v = DriverView.of(ctx)
    facts = v.facts()
    early = _no_tooling(ctx, v.nverr, facts)
    if early is not None:
        return early
    f = Findings()
    _fault_findings(v, f, facts)
    _version_findings(v.dv, v.smi_driver or v.nvml_driver, f)
    _nvml_findings(v, f)
    _pin_findings(ctx, v, f)
    facts["error"] = v.errors[0].line if v.errors else v.nverr.line if v.nverr else None
    if f:
        return f.result(ctx, "", facts)
    if not v.driver:
        return _no_version(ctx, v, facts)
    q, nv, dv = v.q, v.nv, v.dv
    parts = [f"driver {v.driver}", f"CUDA {v.cuda}" if v.cuda else "",
             f"NVML {nv.nvml_version}" if nv is not None and nv.nvml_version else ""]
    ok_ev = [x for x in ((q.header_lines.get("Driver Version"), q.header_lines.get("CUDA Version")) if q else ()) if x]
    ok_ev += [dv.loaded_line] if dv and dv.loaded else []
    return f.result(ctx, ", ".join(p for p in parts if p), facts, ok_ev)


register(owns(Check(
    id="gpu.driver", title="GPU driver, CUDA and NVML", grade=grade_driver,
    probes=(PROBE_Q, PROBE_NVML), required=(), inputs=("nvidia-smi-q", "nvml", "kernel-log", "driver-version"),
    profile_keys={"gpu.driver_version": str, "gpu.cuda_version": str},
    catches="driver/library version mismatch, driver not loaded, no devices, NVML library missing, kernel-log driver "
            "faults (probe not called, no adapter), loaded module older than the installed packages, version pins",
    node_local=True, in_run=True)))

__all__ = ["ERROR_CODES", "KLOG_CODES", "SMI_EXIT", "DriverView", "grade_driver"]
