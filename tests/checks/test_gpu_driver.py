"""gpu.driver and its parsers: driver versions (/proc, modinfo, packages), the NVML probe's JSON,
nvidia-smi's driver errors, the kernel log's driver faults; one code per decision."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from preflight.framing import Doc
from preflight.model import Capture, CaptureState, Result, Status
from preflight.parsers import driver_version, nvml
from preflight.parsers.driver_version import DriverVersions, package
from tests.conftest import capture, facts_of, grade, grade_text

PROC = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 18:56:32 UTC 2023"
MISMATCH = "Failed to initialize NVML: Driver/library version mismatch"


def one(results: list[Result]) -> Result:
    assert len(results) == 1, results
    return results[0]


def codes(r: Result) -> list[str]:
    return list(r.facts.get("codes", []))


def dv(text: str, command: str = "") -> DriverVersions:
    return driver_version.parse(Doc(text, command=command))


def nvml_cap(**fields: object) -> Capture:
    doc = {"ok": True, "error": "", "error_type": "", "driver": "535.129.03", "nvml_version": "12.535.129.03",
           "cuda_driver_version": 12020, "gpus": [{"index": 0}]}
    doc.update(fields)
    return capture("nvml", json.dumps(doc) + "\n")


def driver(inputs: dict[str, str], profile: str = "generic") -> Result:
    """gpu.driver over pasted text per probe, framed as analyze frames it."""
    return one(grade_text("gpu.driver", inputs, profile=profile))


# ---------------------------------------------------------------------------------------
# driver versions: /proc/driver/nvidia/version, modinfo, package listings


@pytest.mark.parametrize(("line", "version"), [
    (PROC, "535.129.03"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  (dvs-builder@U16-I3-B03-4-3)"
     "  Tue Mar  5 22:15:33 UTC 2024", "550.54.15"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  570.124.06  Release Build  (dvs-builder@U22)  "
     "Wed Feb 26 01:19:27 UTC 2025", "570.124.06"),
    ("NVRM version: NVIDIA UNIX ppc64le Kernel Module  418.67  Sat Apr  6 02:57:19 CDT 2019", "418.67"),
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  384.81  Sat Sep  2 02:43:11 PDT 2017", "384.81"),
])
def test_proc_version_every_build(line: str, version: str) -> None:
    d = dv(line + "\nGCC version:  gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04)\n")
    assert (d.loaded, d.loaded_line, d.on_disk, d.packages) == (version, line, "", [])
    assert d.recognised and driver_version.detect(Doc(line))


def test_modinfo_forms() -> None:
    d = dv("535.154.05\n", command="modinfo -F version nvidia")
    assert (d.on_disk, d.on_disk_line) == ("535.154.05", "535.154.05") and d.recognised
    d = dv("filename:       /lib/modules/5.15.0-91-generic/updates/dkms/nvidia.ko\nversion:        550.54.15\n"
           "license:        NVIDIA\n", command="modinfo nvidia")
    assert d.on_disk == "550.54.15" and d.on_disk_line == "version:        550.54.15"
    assert dv("535.154.05\n").on_disk == ""  # a bare version means nothing without modinfo above it
    assert dv("version:        550.54.15\n").on_disk == "550.54.15"


@pytest.mark.parametrize(("row", "want"), [
    ("ii  nvidia-utils-525  525.85.12-0ubuntu1  amd64  NVIDIA driver support binaries", ("nvidia-utils-525", "525.85.12")),
    ("ii  libnvidia-compute-535:amd64  535.129.03-0ubuntu0.22.04.1  amd64  NVIDIA libcompute package",
     ("libnvidia-compute-535:amd64", "535.129.03")),
    ("hi  nvidia-driver-535  535.129.03-0ubuntu1  amd64  NVIDIA driver metapackage", ("nvidia-driver-535", "535.129.03")),
    ("iU  nvidia-dkms-550  550.54.15-0ubuntu1  amd64  NVIDIA DKMS package", ("nvidia-dkms-550", "550.54.15")),
    ("ii  cuda-drivers  1:535.129.03-1  amd64  CUDA Driver meta-package", ("cuda-drivers", "535.129.03")),
    ("ii  nvidia-smi     525.85.12-1  amd64        NVIDIA System Management Interface", ("nvidia-smi", "525.85.12")),
    ("rc  nvidia-driver-520  520.56.06-0ubuntu1  amd64  NVIDIA driver metapackage", None),
    ("un  nvidia-driver-510  <none>  <none>  (no description available)", None),
    ("ii  nvidia-container-toolkit  1.14.3-1  amd64  NVIDIA Container toolkit", None),
    ("ii  nvidia-settings  535.129.03-0ubuntu1  amd64  Tool for configuring the NVIDIA graphics driver", None),
    ("nvidia-driver-570/unknown,now 570.124.06-0ubuntu1 amd64 [installed,automatic]",
     ("nvidia-driver-570", "570.124.06")),
    ("nvidia-utils-535/jammy-updates,jammy-security,now 535.183.01-0ubuntu0.22.04.1 amd64 [installed]",
     ("nvidia-utils-535", "535.183.01")),
    ("nvidia-driver-535/jammy-updates 535.183.01-0ubuntu0.22.04.1 amd64 [upgradable from: 535.129.03]", None),
    ("nvidia-driver-cuda-525.85.12-1.el8.x86_64", ("nvidia-driver-cuda", "525.85.12")),
    ("kmod-nvidia-latest-dkms-535.129.03-1.el8.x86_64", ("kmod-nvidia-latest-dkms", "535.129.03")),
    ("nvidia-driver.x86_64                3:535.129.03-1.el8                @cuda-rhel8-x86_64",
     ("nvidia-driver", "535.129.03")),
    ("nvidia-driver-cuda-libs.aarch64    3:550.54.15-1.el9    @cuda-rhel9-sbsa", ("nvidia-driver-cuda-libs", "550.54.15")),
    ("nvidia-container-toolkit.x86_64    1.14.3-1    @nvidia-container-toolkit", None),
    ("ii  nvidia-peer-memory  1.3-0  amd64  nvidia peer memory", None),
    ("pn  nvidia-driver-510  510.47.03-0ubuntu1  amd64  NVIDIA driver metapackage", None),
    ("iF  nvidia-driver-535  535.129.03-0ubuntu1  amd64  NVIDIA driver metapackage", ("nvidia-driver-535", "535.129.03")),
    ("iH  nvidia-driver-535  535.129.03-0ubuntu1  amd64  x", ("nvidia-driver-535", "535.129.03")),
    ("iW  nvidia-driver-535  535.129.03-0ubuntu1  amd64  x", ("nvidia-driver-535", "535.129.03")),
    ("it  nvidia-driver-535  535.129.03-0ubuntu1  amd64  x", ("nvidia-driver-535", "535.129.03")),
    ("some text 535.129.03", None),
])
def test_package_rows(row: str, want: tuple[str, str] | None) -> None:
    p = package(row)
    assert (p and (p.name, p.version)) == want or (p is None and want is None)
    if p is not None:
        assert p.line == row


def test_package_listing_installed_versions() -> None:
    text = ("Desired=Unknown/Install/Remove/Purge/Hold\n||/ Name           Version      Architecture Description\n"
            "+++-==============-============-============-=====\n"
            "ii  nvidia-utils-550  550.54.15-0ubuntu1  amd64  NVIDIA driver support binaries\n"
            "ii  libnvidia-gl-550:amd64  550.54.15-0ubuntu1  amd64  NVIDIA OpenGL/GLX/EGL/GLES\n"
            "rc  nvidia-utils-535  535.129.03-0ubuntu1  amd64  NVIDIA driver support binaries\n"
            "ii  nvidia-fabricmanager-535  535.161.08-1  amd64  Fabric Manager for NVSwitch based systems.\n")
    d = dv(text, command="dpkg -l '*nvidia*'")
    assert d.installed == ["550.54.15", "535.161.08"] and len(d.packages) == 3
    assert driver_version.detect(Doc(text, command="dpkg -l '*nvidia*'"))
    assert driver_version.detect(Doc(text))  # the dpkg header says what it is


@pytest.mark.parametrize(("text", "command"), [
    ("535.154.05\n", "uname -r"), ("version: 1.2\n", "modinfo nvidia"), ("nothing\n", "dpkg -l"),
    ("ii  bash  5.1-6  amd64  GNU Bourne Again SHell\n", "dpkg -l"), ("hello\n", ""),
    ("nvidia-driver-535 535.129.03\n", ""),
])
def test_driver_version_detect_is_specific(text: str, command: str) -> None:
    assert not driver_version.detect(Doc(text, command=command))


def test_driver_version_detect_commands() -> None:
    assert driver_version.detect(Doc("535.154.05\n", command="modinfo -F version nvidia"))
    assert not driver_version.detect(Doc("535.154.05\n", command="modinfo -F version ib_core"))
    for cmd in ("rpm -qa | grep nvidia", "yum list installed | grep nvidia", "dnf list installed nvidia*",
                "apt list --installed"):
        row = {"rpm": "nvidia-driver-cuda-525.85.12-1.el8.x86_64",
               "yum": "nvidia-driver.x86_64  3:535.129.03-1.el8  @cuda",
               "dnf": "nvidia-driver.x86_64  3:535.129.03-1.el8  @cuda",
               "apt": "nvidia-driver-570/unknown,now 570.124.06-0ubuntu1 amd64 [installed]"}[cmd.split()[0]]
        assert driver_version.detect(Doc(row + "\n", command=cmd)), cmd
    assert not dv("").recognised and dv("").installed == []


# ---------------------------------------------------------------------------------------
# the NVML probe's JSON


def test_nvml_report_fields_and_records() -> None:
    doc = {"ok": True, "error": "", "error_type": "", "driver": "550.54.15", "nvml_version": "12.550.54.15",
           "cuda_driver_version": 12040, "gpus": [
               {"index": 1, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1", "pci_bus_id": "00000000:18:00.0",
                "vbios": "96.00.74.00.0D", "persistence": "Enabled", "pcie_gen": 5, "pcie_gen_max": "5",
                "pcie_width": 16, "pcie_width_max": 16, "mig_mode": "Disabled", "mig_mode_pending": "Disabled",
                "memory_total_mib": 81559, "errors": {"ecc": "Not Supported"}},
               "junk", {"name": "x", "errors": "bad"}]}
    rep = facts_of("nvml", "warning: something\n" + json.dumps(doc) + "\n")
    assert rep.ok and rep.recognised and rep.driver == "550.54.15" and rep.cuda == "12.4"
    assert rep.nvml_version == "12.550.54.15" and len(rep.gpus) == 2
    g = rep.gpus[0]
    assert (g.index, g.name, g.uuid, g.bus_id, g.vbios, g.persistence) == \
        (1, "NVIDIA H100 80GB HBM3", "GPU-1", "00000000:18:00.0", "96.00.74.00.0D", True)
    assert (g.pcie_gen, g.pcie_gen_max, g.pcie_width, g.pcie_width_max, g.mig_mode, g.mig_pending) == \
        (5, 5, 16, 16, "Disabled", "Disabled")
    assert g.memory_total_mib == 81559 and g.errors == {"ecc": "Not Supported"}
    assert rep.gpus[1].index == 2 and rep.gpus[1].errors == {}  # position when the index is missing
    recs = rep.records
    assert [r.index for r in recs] == [1, 2] and recs[0].line == "NVML GPU 1: NVIDIA H100 80GB HBM3 00000000:18:00.0"
    assert recs[1].line == "NVML GPU 2: x" and recs[0].pcie_width == 16 and recs[0].memory_total_mib == 81559
    assert rep.tool_error() is None


@pytest.mark.parametrize(("cuda", "want"), [(12020, "12.2"), (13010, "13.1"), (11080, "11.8"), (1000, "1.0"),
                                            (999, ""), (0, ""), (-1, "")])
def test_nvml_cuda_version(cuda: int, want: str) -> None:
    rep = facts_of("nvml", json.dumps({"ok": True, "gpus": [], "nvml_version": "1", "cuda_driver_version": cuda}))
    assert rep.cuda == want


@pytest.mark.parametrize(("error", "error_type", "kind", "line"), [
    ("NVML Shared Library Not Found", "NVMLError_LibraryNotFound", "library_missing",
     "NVML: NVML Shared Library Not Found (NVMLError_LibraryNotFound)"),
    ("Driver Not Loaded", "NVMLError_DriverNotLoaded", "no_driver", "NVML: Driver Not Loaded (NVMLError_DriverNotLoaded)"),
    ("RM has detected an NVML/RM version mismatch.", "NVMLError_LibRmVersionMismatch", "version_mismatch",
     "NVML: RM has detected an NVML/RM version mismatch. (NVMLError_LibRmVersionMismatch)"),
    ("GPU is lost", "NVMLError_GpuIsLost", "gpu_lost", "NVML: GPU is lost (NVMLError_GpuIsLost)"),
    ("Insufficient Permissions", "NVMLError_NoPermission", "nvml_init",
     "NVML: Insufficient Permissions (NVMLError_NoPermission)"),
    ("Failed to initialize NVML: Unknown Error", "", "nvml_init", "NVML: Failed to initialize NVML: Unknown Error"),
    ("", "", "nvml_init", "NVML: NVML probe failed"),
])
def test_nvml_tool_errors(error: str, error_type: str, kind: str, line: str) -> None:
    rep = facts_of("nvml", json.dumps({"ok": False, "error": error, "error_type": error_type, "nvml_version": "",
                                       "gpus": []}))
    e = rep.tool_error()
    assert e is not None and (e.kind, e.line) == (kind, line)
    assert rep.records == []


def test_nvml_no_gpus_and_garbage() -> None:
    e = facts_of("nvml", '{"ok": true, "gpus": [], "nvml_version": "12"}').tool_error()
    assert e is not None and (e.kind, e.line) == ("no_devices", "NVML: device count is 0")
    bad = facts_of("nvml", "not json")
    assert (bad.ok, bad.error, bad.error_type, bad.recognised) == \
        (False, "NVML probe output is not a JSON object", "BadOutput", False)
    assert facts_of("nvml", "[1, 2]\n").error_type == "BadOutput"
    assert facts_of("nvml", '{"ok": true, "gpus": null, "nvml_version": "1", "cuda_driver_version": "x"}').cuda == ""


@pytest.mark.parametrize(("text", "want"), [
    ('{"ok": true, "gpus": [], "nvml_version": "12"}\n', True),
    ('noise\n{"ok": true, "gpus": [], "nvml_version": "12"}\n', False),  # the probe's object comes first
    ('{"ok": true, "nvml_version": "12"}\n', False),
    ('{"gpus": [], "nvml_version": "12"}\n', False),
    ('{"ok": true, "gpus": []}\n', False),
    ('{"ok": true, "gpus": [], "nvml_version": \n', False),
    ("plain text\n", False),
])
def test_nvml_detect(text: str, want: bool) -> None:
    assert nvml.detect(Doc(text)) is want


# ---------------------------------------------------------------------------------------
# gpu.driver: nvidia-smi's driver errors, with the cause and the versions named


def test_mismatch_with_both_versions() -> None:
    r = driver({"nvidia-smi-q": f"{MISMATCH}\nNVML library version: 535.183\n",
                "driver-version": f"$ cat /proc/driver/nvidia/version\n{PROC}\n"})
    assert r.status is Status.FAIL and codes(r) == ["gpu.driver/version-mismatch"]
    assert r.summary == ("the loaded NVIDIA kernel module and the user-space driver library differ: " + MISMATCH +
                         " (user-space library 535.183, kernel module 535.129.03)")
    assert r.evidence == [MISMATCH, "NVML library version: 535.183", PROC]
    assert r.facts["mismatch"] == {"library": "535.183", "kernel_module": "535.129.03"}
    assert r.facts["nvml_library"] == "535.183" and r.facts["kernel_module"] == "535.129.03"
    assert r.facts["error"] == MISMATCH and "reboot" in r.remedy


def test_mismatch_versions_unknown() -> None:
    r = driver({"nvidia-smi-q": MISMATCH + "\n"})
    assert r.summary.endswith("(versions not shown: unknown)") and r.evidence == [MISMATCH]
    assert r.facts["mismatch"] == {"library": "unknown", "kernel_module": "unknown"}


def test_mismatch_versions_from_the_kernel_log_and_packages() -> None:
    klog = ("[  14.0] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
            "[ 900.1] NVRM: API mismatch: the client has the version 535.129.03, but\n"
            "[ 900.1] NVRM: this kernel module has the version 535.104.05.  Please\n")
    r = driver({"nvidia-smi-q": MISMATCH + "\n", "kernel-log": klog})
    assert r.facts["mismatch"] == {"library": "535.129.03", "kernel_module": "535.104.05"}
    assert codes(r) == ["gpu.driver/version-mismatch", "gpu.driver/klog-api-mismatch"]
    pkgs = "$ dpkg -l | grep nvidia-utils\nii  nvidia-utils-550  550.54.15-0ubuntu1  amd64  NVIDIA driver binaries\n"
    r = driver({"nvidia-smi-q": MISMATCH + "\n", "driver-version": pkgs})
    assert r.facts["mismatch"] == {"library": "550.54.15", "kernel_module": "unknown"}
    two = pkgs + "ii  libnvidia-gl-535  535.129.03-0ubuntu1  amd64  NVIDIA OpenGL\n"
    assert driver({"nvidia-smi-q": MISMATCH + "\n", "driver-version": two}).facts["mismatch"]["library"] == "unknown"


def test_no_devices_with_the_adapter_init_failure() -> None:
    r = driver({"nvidia-smi-q": "No devices were found\n",
                "kernel-log": "[ 5.1] NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x22:0x56:884)\n"
                              "[ 5.2] NVRM: GPU 0000:01:00.0: rm_init_adapter failed, device minor number 0\n"})
    assert codes(r) == ["gpu.driver/no-devices"]
    assert r.summary == ("the driver is loaded but finds no GPU: No devices were found; kernel log: GPU 0000:01:00 "
                         "failed to initialise (RmInitAdapter failed)")
    assert r.evidence == ["No devices were found", "[ 5.1] NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x22:0x56:884)",
                          "[ 5.2] NVRM: GPU 0000:01:00.0: rm_init_adapter failed, device minor number 0"]
    assert r.remedy.startswith("the GPU is on the bus but the driver could not initialise it")
    r = driver({"nvidia-smi-q": "No devices were found\n"})
    assert r.summary == "the driver is loaded but finds no GPU: No devices were found" and "Xid 79" in r.remedy


def test_no_devices_after_a_lost_gpu_is_not_a_driver_fault() -> None:
    r = driver({"nvidia-smi-q": "Unable to determine the device handle for GPU0: 0000:01:00.0: Unknown Error\n"
                                "No devices were found\n"})
    assert r.status is Status.SKIP and codes(r) == ["gpu.driver/only-lost-gpu"]
    assert r.evidence == ["Unable to determine the device handle for GPU0: 0000:01:00.0: Unknown Error"]


@pytest.mark.parametrize(("text", "code"), [
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA "
     "driver is installed and running.", "gpu.driver/driver-not-loaded"),
    ("NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure that the NVIDIA Display "
     "Driver is properly installed and present in your system.\nlibnvidia-ml.so.1: cannot open shared object file",
     "gpu.driver/nvml-library-missing"),
    ("Failed to initialize NVML: Unknown Error", "gpu.driver/nvml-init-failed"),
])
def test_driver_error_codes(text: str, code: str) -> None:
    assert codes(driver({"nvidia-smi-q": text + "\n"})) == [code]


@pytest.mark.parametrize(("line", "code", "summary"), [
    ("NVRM: No NVIDIA GPU found.", "gpu.driver/klog-no-adapter", "the nvidia kernel module found no GPU to drive"),
    ("NVRM: The NVIDIA probe routine was not called for 3 device(s).", "gpu.driver/klog-probe-not-called",
     "another driver (nouveau, vfio) owns the GPUs"),
    ("NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:2b85) installed in this system is not supported by the NVIDIA "
     "535.129.03 driver release.", "gpu.driver/klog-unsupported-gpu", "does not support this GPU"),
    ("nvidia: Unknown symbol drm_gem_object_free (err -2)", "gpu.driver/klog-module-symbols", "unknown symbols"),
    ("NVRM: No firmware image found", "gpu.driver/klog-firmware-missing", "GSP firmware"),
])
def test_kernel_log_driver_faults(line: str, code: str, summary: str) -> None:
    r = driver({"kernel-log": f"[   12.345678] {line}\n"})
    assert codes(r) == [code] and summary in r.summary and r.summary.startswith("kernel log: ")
    assert r.evidence == [f"[   12.345678] {line}"] and "reboot" in r.remedy


def test_kernel_log_fault_of_a_kind_without_its_own_code() -> None:
    from preflight.checks import gpu_driver
    from preflight.parsers.kernel_log import KernelLog

    assert "no_adapter" in gpu_driver.KLOG_CODES and gpu_driver.KLOG_CODES.get("new_kind") is None
    assert KernelLog().driver_faults == []


# ---------------------------------------------------------------------------------------
# gpu.driver: the loaded module against the installed driver


def test_module_older_than_packages() -> None:
    r = driver({"driver-version": f"$ cat /proc/driver/nvidia/version\n{PROC}\n$ dpkg -l | grep nvidia\n"
                                  "ii  nvidia-utils-550  550.54.15-0ubuntu1  amd64  NVIDIA driver binaries\n"
                                  "ii  nvidia-dkms-550  550.54.15-0ubuntu1  amd64  NVIDIA DKMS package\n"})
    assert codes(r) == ["gpu.driver/module-older-than-packages"]
    assert r.summary == "kernel module 535.129.03 is loaded but packages of 550.54.15 are installed"
    assert r.evidence == [PROC, "ii  nvidia-utils-550  550.54.15-0ubuntu1  amd64  NVIDIA driver binaries",
                          "ii  nvidia-dkms-550  550.54.15-0ubuntu1  amd64  NVIDIA DKMS package"]
    assert r.remedy.startswith("the driver was upgraded without a reboot")
    assert r.facts["installed"] == ["550.54.15"] and r.facts["kernel_module"] == "535.129.03"


def test_module_differs_from_disk_and_from_userspace() -> None:
    r = driver({"driver-version": f"$ cat /proc/driver/nvidia/version\n{PROC}\n$ modinfo -F version nvidia\n"
                                  "550.54.15\n"})
    assert codes(r) == ["gpu.driver/module-differs-from-disk"]
    assert r.summary == "kernel module 535.129.03 is loaded but the module on disk is 550.54.15"
    assert r.evidence == [PROC, "550.54.15"]
    head = "==============NVSMI LOG==============\nDriver Version : 550.54.15\nCUDA Version : 12.4\nAttached GPUs : 0\n"
    r = driver({"nvidia-smi-q": head, "driver-version": f"$ cat /proc/driver/nvidia/version\n{PROC}\n"})
    assert codes(r) == ["gpu.driver/module-differs-from-userspace"]
    assert r.evidence == [PROC, "driver version reported by nvidia-smi/NVML: 550.54.15"]


def test_matching_versions_pass() -> None:
    head = "==============NVSMI LOG==============\nDriver Version : 535.129.03\nCUDA Version : 12.2\nAttached GPUs : 0\n"
    r = driver({"nvidia-smi-q": head, "driver-version": f"$ cat /proc/driver/nvidia/version\n{PROC}\n$ modinfo -F "
                                                         "version nvidia\n535.129.03\n"})
    assert r.status is Status.PASS and r.summary == "driver 535.129.03, CUDA 12.2"
    assert r.evidence == ["Driver Version : 535.129.03", "CUDA Version : 12.2", PROC]
    r = driver({"driver-version": f"$ cat /proc/driver/nvidia/version\n{PROC}\n"})
    assert r.status is Status.PASS and r.summary == "driver 535.129.03" and r.facts["driver"] == "535.129.03"
    r = driver({"driver-version": "$ modinfo -F version nvidia\n535.129.03\n"})
    assert r.status is Status.PASS and r.facts["driver"] == "535.129.03" and r.facts["kernel_module"] is None


# ---------------------------------------------------------------------------------------
# gpu.driver: NVML, pins, no tooling, nothing to say


def missing(probe: str, tool: str) -> Capture:
    return Capture(probe=probe, argv=[tool], state=CaptureState.MISSING, reason=f"{tool} not found on PATH")


def test_nvml_codes() -> None:
    head = "==============NVSMI LOG==============\nDriver Version : 535.129.03\nCUDA Version : 12.2\n"
    lib = nvml_cap(ok=False, error="NVML Shared Library Not Found", error_type="NVMLError_LibraryNotFound",
                   driver="", gpus=[])
    r = one(grade("gpu.driver", {"nvidia-smi-q": capture("nvidia-smi-q", head), "nvml": lib}))
    assert codes(r) == ["gpu.driver/nvml-unusable-here"] and r.status is Status.WARN
    r = one(grade("gpu.driver", {"nvidia-smi-q": capture("nvidia-smi-q", MISMATCH + "\n"), "nvml": lib}))
    assert codes(r) == ["gpu.driver/version-mismatch", "gpu.driver/nvml-library-missing"]
    r = one(grade("gpu.driver", {"nvml": nvml_cap(ok=False, error="Driver Not Loaded",
                                                  error_type="NVMLError_DriverNotLoaded", gpus=[], driver="")}))
    assert codes(r) == ["gpu.driver/driver-not-loaded"] and r.summary == \
        "the NVIDIA kernel driver is not loaded: NVML: Driver Not Loaded (NVMLError_DriverNotLoaded)"
    r = one(grade("gpu.driver", {"nvml": nvml_cap(ok=False, error="GPU is lost", error_type="NVMLError_GpuIsLost",
                                                  gpus=[], driver="")}))
    assert r.status is Status.ERROR and codes(r) == ["gpu.driver/no-version-found"]
    r = one(grade("gpu.driver", {"nvidia-smi-q": capture("nvidia-smi-q", head), "nvml": nvml_cap(driver="550.54.15")}))
    assert codes(r) == ["gpu.driver/smi-nvml-disagree"]
    assert r.evidence == ["Driver Version : 535.129.03", "NVML driver: 550.54.15"]
    r = one(grade("gpu.driver", {"nvidia-smi-q": capture("nvidia-smi-q", head), "nvml": nvml_cap()}))
    assert r.status is Status.PASS and r.summary == "driver 535.129.03, CUDA 12.2, NVML 12.535.129.03"
    assert r.facts["nvml"] == "12.535.129.03"


def test_nvml_same_error_as_smi_is_said_once() -> None:
    caps = {"nvidia-smi-q": capture("nvidia-smi-q", MISMATCH + "\n"),
            "nvml": nvml_cap(ok=False, error="RM has detected an NVML/RM version mismatch.",
                             error_type="NVMLError_LibRmVersionMismatch", gpus=[], driver="")}
    assert codes(one(grade("gpu.driver", caps))) == ["gpu.driver/version-mismatch"]


def _pin(tmp_path: Path, drv: str, cuda: str) -> str:
    p = tmp_path / "pin.toml"
    p.write_text(f'[profile]\nname = "pin"\nextends = "generic"\n[gpu]\ndriver_version = {{ value = "{drv}", '
                 f'source = "site pin" }}\ncuda_version = {{ value = "{cuda}", source = "site pin" }}\n')
    return str(p)


def test_pins(tmp_path: Path) -> None:
    head = "==============NVSMI LOG==============\nDriver Version : 535.129.03\nCUDA Version : 12.2\n"
    r = driver({"nvidia-smi-q": head}, profile=_pin(tmp_path, "550", "12.4"))
    assert codes(r) == ["gpu.driver/driver-version-pin", "gpu.driver/cuda-version-pin"]
    assert r.summary == "driver 535.129.03 is not the pinned 550; CUDA driver version 12.2 is not the pinned 12.4"
    assert r.evidence == ["Driver Version : 535.129.03", "profile pin: gpu.driver_version = '550' (site pin)",
                          "CUDA Version : 12.2", "profile pin: gpu.cuda_version = '12.4' (site pin)"]
    assert driver({"nvidia-smi-q": head}, profile=_pin(tmp_path, "535.129", "12")).status is Status.PASS
    assert driver({"nvidia-smi-q": head}, profile=_pin(tmp_path, "535.129.03", "12.2")).status is Status.PASS
    r = driver({"driver-version": f"$ cat /proc/driver/nvidia/version\n{PROC}\n"}, profile=_pin(tmp_path, "550", ""))
    assert r.evidence == ["driver: 535.129.03", "profile pin: gpu.driver_version = '550' (site pin)"]


def test_no_tooling(tmp_path: Path) -> None:
    notools = tmp_path / "notools.toml"
    notools.write_text('[profile]\nname = "notools"\nextends = "generic"\n[tools]\nrequired = []\n')
    caps = {"nvidia-smi-q": missing("nvidia-smi-q", "nvidia-smi")}
    r = one(grade("gpu.driver", caps, profile=str(notools)))
    assert r.status is Status.SKIP and codes(r) == ["gpu.driver/no-tooling"]
    assert r.evidence == ["nvidia-smi not found on PATH"] and r.facts["error"] == "nvidia-smi not found on PATH"
    r = one(grade("gpu.driver", caps))
    assert r.status is Status.FAIL and codes(r) == ["gpu.driver/no-tooling-required"]
    assert r.evidence[0] == "nvidia-smi not found on PATH" and r.evidence[1].startswith("profile generic: tools.required")
    assert "install the NVIDIA driver on node1" in r.remedy
    caps["nvml"] = nvml_cap()  # NVML answers: the driver is there, only the tool is missing
    assert one(grade("gpu.driver", caps)).status is Status.PASS


def test_smi_exit_codes_and_no_version() -> None:
    cap = Capture(probe="nvidia-smi-q", argv=["nvidia-smi", "-q"], state=CaptureState.OK, stdout="\n", rc=9)
    r = one(grade("gpu.driver", {"nvidia-smi-q": cap}))
    assert codes(r) == ["gpu.driver/smi-failed"]
    assert r.summary == "nvidia-smi -q failed with exit code 9 (the NVIDIA driver is not loaded)"
    assert r.evidence == ["`nvidia-smi -q` exited 9 without a driver version"]
    cap = Capture(probe="nvidia-smi-q", argv=["nvidia-smi", "-q"], state=CaptureState.OK, stdout="\n", rc=42)
    assert one(grade("gpu.driver", {"nvidia-smi-q": cap})).summary == "nvidia-smi -q failed with exit code 42"
    r = one(grade("gpu.driver", {"nvidia-smi-q": capture("nvidia-smi-q", "???\n"), "nvml": nvml_cap(driver="")}))
    assert codes(r) == ["gpu.driver/no-version-found"]
    assert r.evidence == ["nvidia-smi-q: no driver version", "nvml: no driver version"]
    assert grade("gpu.driver", {"nvidia-smi-q": capture("nvidia-smi-q", "???\n")}, mode="analyze") == []


def test_exit_code_meanings() -> None:
    from preflight.checks.gpu_driver import SMI_EXIT

    assert SMI_EXIT[15] == "a GPU has fallen off the bus or is otherwise inaccessible"
    assert SMI_EXIT[12] == "the NVML shared library could not be found or loaded" and 0 not in SMI_EXIT


@pytest.mark.parametrize("name", ["libnvidia-container-tools", "nvidia-docker2", "nvidia-cuda-toolkit", "cuda-toolkit",
                                  "nvidia-persistenced-doc", "nvidia-firmware-535", "nvidia-modprobe",
                                  "nvidia-settings", "nvidia-prime", "nvidia-dkms-tools", "nvidia-fabricmanager-dev"])
def test_packages_that_do_not_carry_the_driver_version(name: str) -> None:
    assert package(f"ii  {name}  535.129.03-0ubuntu1  amd64  x") is None


def test_listing_lines_after_blank_lines_and_modinfo() -> None:
    d = dv("\n\nversion:        550.54.15\nii  nvidia-utils-550  550.54.15-0ubuntu1  amd64  x\n\n" + PROC + "\n")
    assert (d.on_disk, d.loaded, d.installed) == ("550.54.15", "535.129.03", ["550.54.15"])


def test_driver_version_format_is_classified() -> None:
    from preflight import registry
    from preflight.analyze import classify

    reg = registry.load()
    assert [f.name for f in classify(Doc(PROC + "\n"), reg)] == ["driver-version"]
    doc = Doc('{"ok": true, "error": "", "driver": "1", "nvml_version": "12", "gpus": []}\n')
    assert "nvml" in [f.name for f in classify(doc, reg)]


def test_nvml_error_type_decides_the_kind() -> None:
    for error_type, kind in (("NVMLError_LibraryNotFound", "library_missing"), ("NVMLError_DriverNotLoaded", "no_driver"),
                             ("NVMLError_LibRmVersionMismatch", "version_mismatch"), ("NVMLError_GpuIsLost", "gpu_lost")):
        rep = facts_of("nvml", json.dumps({"ok": False, "error": "x", "error_type": error_type, "nvml_version": "",
                                           "gpus": []}))
        e = rep.tool_error()
        assert e is not None and e.kind == kind, error_type


def test_nvml_defaults_and_trailing_noise() -> None:
    from preflight.parsers.nvml import NvmlReport

    empty = NvmlReport()
    assert (empty.ok, empty.cuda, empty.recognised, empty.records) == (False, "", False, [])
    assert empty.cuda_driver_version == 0
    assert facts_of("nvml", '{"ok": true, "gpus": [], "nvml_version": "1"}').cuda_driver_version == 0
    rep = facts_of("nvml", '{"ok": true, "gpus": [], "nvml_version": "1"}\n{"ok": tru\n')
    assert rep.ok and rep.nvml_version == "1"  # a broken object after the probe's is skipped
    rep = facts_of("nvml", 'start\n{"ok": true, "gpus": [{"index": 0}], "nvml_version": "12"}\ntrailing words\n')
    assert rep.ok and rep.recognised and len(rep.gpus) == 1
    assert rep.records[0].line == "NVML GPU 0: ?"


def test_exit_code_table_is_the_man_pages() -> None:
    from preflight.checks.gpu_driver import SMI_EXIT

    assert SMI_EXIT == {
        2: "an invalid argument or flag", 3: "the operation is not available on the device",
        4: "insufficient permissions", 6: "the GPU queried was not found", 8: "external power cables not attached",
        9: "the NVIDIA driver is not loaded", 10: "the kernel detected an interrupt issue with a GPU",
        12: "the NVML shared library could not be found or loaded",
        13: "the local NVML does not implement a needed function", 14: "the infoROM is corrupted",
        15: "a GPU has fallen off the bus or is otherwise inaccessible", 255: "another or an internal driver error"}


def test_no_devices_cause_names_every_gpu_or_a_gpu() -> None:
    r = driver({"nvidia-smi-q": "No devices were found\n",
                "kernel-log": "[ 5.1] NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x22:0x56:884)\n"
                              "[ 5.3] NVRM: GPU 0000:41:00.0: RmInitAdapter failed! (0x24:0x72:1568)\n"})
    assert r.summary.endswith("; kernel log: GPU 0000:01:00, 0000:41:00 failed to initialise (RmInitAdapter failed)")
    r = driver({"nvidia-smi-q": "No devices were found\n",
                "kernel-log": "[ 5.1] NVRM: Cannot initialize GSP firmware RM\n"})
    assert r.summary.endswith("; kernel log: a GPU failed to initialise (RmInitAdapter failed)")


def test_kernel_module_from_the_kernel_log_when_proc_is_not_shown() -> None:
    pkgs = "$ dpkg -l | grep nvidia-utils\nii  nvidia-utils-550  550.54.15-0ubuntu1  amd64  NVIDIA driver binaries\n"
    klog = "[  14.0] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.40.07  Sat Aug 19 01:15:15 UTC 2023\n"
    r = driver({"nvidia-smi-q": MISMATCH + "\n", "driver-version": pkgs, "kernel-log": klog})
    assert r.facts["mismatch"] == {"library": "550.54.15", "kernel_module": "550.40.07"}


def test_facts_exactly() -> None:
    r = one(grade("gpu.driver", {"nvml": nvml_cap()}, mode="analyze"))
    assert r.status is Status.PASS and r.summary == "driver 535.129.03, CUDA 12.2, NVML 12.535.129.03"
    assert r.facts == {"driver": "535.129.03", "cuda": "12.2", "nvml": "12.535.129.03", "error": None,
                       "kernel_module": None, "installed": [], "nvml_library": None, "nvml_file": None}
    loaded = json.dumps({**json.loads(nvml_cap().stdout), "library": "/usr/lib64/libnvidia-ml.so.535.129.03"})
    r = one(grade("gpu.driver", {"nvml": capture("nvml", loaded)}, mode="analyze"))
    assert r.facts["nvml_file"] == "/usr/lib64/libnvidia-ml.so.535.129.03"


def test_disagree_remedy_and_no_version_summary() -> None:
    head = "==============NVSMI LOG==============\nDriver Version : 535.129.03\n"
    r = one(grade("gpu.driver", {"nvidia-smi-q": capture("nvidia-smi-q", head), "nvml": nvml_cap(driver="550.54.15")}))
    assert r.remedy == "two driver libraries are visible (container mounts, LD_LIBRARY_PATH): keep one"
    r = one(grade("gpu.driver", {"nvidia-smi-q": capture("nvidia-smi-q", "???\n")}))
    assert r.summary == "no driver version found in the captures" and r.remedy == "run `nvidia-smi -q` by hand on node1"


def test_unknown_kernel_log_fault_kind_has_the_general_code() -> None:
    from preflight import registry
    from preflight.framing import Line
    from preflight.grading import FactStore, grade_check
    from preflight.parsers.kernel_log import DriverFault, KernelLog
    from preflight.profile import load as load_profile
    from preflight.registry import Options

    klog = KernelLog(driver_faults=[DriverFault("new_kind", Line(text="NVRM: something new", n=1, raw=""),
                                                "a new driver fault")])
    reg = registry.load()
    r = one(grade_check(reg.checks["gpu.driver"], "node1", FactStore(reg, facts={"kernel-log": klog}),
                        load_profile("generic"), Options(mode="analyze"), None))
    assert codes(r) == ["gpu.driver/klog-driver-fault"] and r.evidence == ["NVRM: something new"]
    assert r.summary == "kernel log: a new driver fault"


def test_missing_smi_with_nvml_driver_not_loaded_is_not_no_tooling() -> None:
    caps = {"nvidia-smi-q": missing("nvidia-smi-q", "nvidia-smi"),
            "nvml": nvml_cap(ok=False, error="Driver Not Loaded", error_type="NVMLError_DriverNotLoaded", gpus=[],
                             driver="")}
    assert codes(one(grade("gpu.driver", caps))) == ["gpu.driver/driver-not-loaded"]


def test_packages_of_two_other_versions_name_the_first() -> None:
    r = driver({"driver-version": f"$ cat /proc/driver/nvidia/version\n{PROC}\n$ dpkg -l | grep nvidia\n"
                                  "ii  nvidia-utils-550  550.54.15-0ubuntu1  amd64  x\n"
                                  "ii  nvidia-dkms-555  555.42.02-0ubuntu1  amd64  x\n"
                                  "ii  nvidia-kernel-common-535  535.129.03-0ubuntu1  amd64  x\n"})
    assert r.summary == "kernel module 535.129.03 is loaded but packages of 550.54.15 are installed"
    assert r.evidence == [PROC, "ii  nvidia-utils-550  550.54.15-0ubuntu1  amd64  x",
                          "ii  nvidia-dkms-555  555.42.02-0ubuntu1  amd64  x"]


def test_a_kernel_log_that_shows_the_module_loading_cleanly_passes_in_analyze() -> None:
    load = "[Thu Sep 28 19:29:02 2023] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023"
    klog = ("[Thu Sep 28 19:29:02 2023] nvidia: module license 'NVIDIA' taints kernel.\n" + load + "\n"
            "[Thu Sep 28 19:29:05 2023] nvidia-uvm: Loaded the UVM driver, major device number 235.\n")
    r = driver({"kernel-log": klog})
    assert r.status is Status.PASS and codes(r) == []
    assert r.summary == "kernel module 535.104.05 loaded (kernel log); no driver fault in the lines shown"
    assert r.evidence == [load]
    opened = driver({"kernel-log": "[  3.1] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.124.06  "
                                   "Release Build  (dvs-builder@U16-I3-B03-4-3)  Thu Feb 20 04:35:26 UTC 2025\n"})
    assert opened.summary.startswith("kernel module 570.124.06 loaded")
    assert grade_text("gpu.driver", {"kernel-log": "[  3.1] nvidia-uvm: Loaded the UVM driver\n"}) == []
    r = driver({"kernel-log": klog + "[Thu Sep 28 19:30:00 2023] NVRM: No NVIDIA GPU found.\n"})
    assert codes(r) == ["gpu.driver/klog-no-adapter"]
