"""The NVML probe: one JSON object on stdout, exit 0, whatever NVML does."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from typing import Any

import pytest

from preflight import nvml_probe
from preflight.checks import gpu
from preflight.model import Status
from preflight.probes import run_probe
from tests.conftest import ROOT, capture, grade


def _has_nvml() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:
        return False


@pytest.mark.skipif(_has_nvml(), reason="this machine has a working NVML")
def test_subprocess_without_gpu_reports_library_not_found() -> None:
    proc = subprocess.run([sys.executable, "-m", "preflight.nvml_probe"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1
    data = json.loads(lines[0])
    assert data["ok"] is False
    assert "LibraryNotFound" in data["error_type"] or "NVML" in data["error"]
    assert data["gpus"] == [] and data["driver"] == ""
    assert set(data) >= {"ok", "error", "error_type", "driver", "nvml_version", "cuda_driver_version", "gpus"}


def test_probe_through_the_runner_grades_cleanly() -> None:
    cap = run_probe(gpu.PROBE_NVML)
    assert cap.ok and cap.rc == 0
    data = json.loads(cap.stdout)
    assert isinstance(data["ok"], bool)
    r = grade("gpu.inventory", {"nvml": cap}, profile="generic", mode="analyze")[0]
    assert r.status in (Status.PASS, Status.ERROR)  # ERROR (no GPU) names the NVML error
    if not data["ok"]:
        assert any(data["error_type"] in e for e in r.evidence)


def test_probe_imports_nothing_heavy() -> None:
    code = ("import sys, preflight.nvml_probe as p; p.collect(); "
            "print(','.join(m for m in ('torch', 'pandas', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == ""


class _Err(Exception):
    pass


class NVMLError_NotSupported(_Err):  # noqa: N801 - the name NVML gives it
    pass


def _fake_nvml(count: int = 2, fail_init: bool = False) -> Any:
    """A stand-in for pynvml with per-field NotSupported errors (as under MIG)."""
    m = types.SimpleNamespace()

    def init() -> None:
        if fail_init:
            raise _Err("Driver Not Loaded")

    def not_supported(_h: object) -> None:
        raise NVMLError_NotSupported("Not Supported")

    m.nvmlInit = init
    m.nvmlShutdown = lambda: None
    m.nvmlSystemGetDriverVersion = lambda: "550.127.05"
    m.nvmlSystemGetNVMLVersion = lambda: b"12.550.127.05"
    m.nvmlSystemGetCudaDriverVersion = lambda: 12040
    m.nvmlDeviceGetCount = lambda: count
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetName = lambda h: b"NVIDIA H100 80GB HBM3"
    m.nvmlDeviceGetUUID = lambda h: f"GPU-{h:08d}"
    m.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=f"00000000:{0x1B + h:02X}:00.0".encode())
    m.nvmlDeviceGetVbiosVersion = lambda h: "96.00.99.00.01"
    m.nvmlDeviceGetPersistenceMode = lambda h: 1
    m.nvmlDeviceGetCurrPcieLinkGeneration = not_supported
    m.nvmlDeviceGetMaxPcieLinkGeneration = lambda h: 5
    m.nvmlDeviceGetCurrPcieLinkWidth = lambda h: 16
    m.nvmlDeviceGetMaxPcieLinkWidth = lambda h: 16
    m.nvmlDeviceGetMigMode = lambda h: (1, 1) if h == 1 else (0, 0)
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=81559 * 1024 * 1024)
    return m


def test_collect_with_fake_nvml_tolerates_field_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml())
    data = nvml_probe.collect()
    assert data["ok"] is True and data["driver"] == "550.127.05" and data["nvml_version"] == "12.550.127.05"
    assert data["cuda_driver_version"] == 12040
    g0, g1 = data["gpus"]
    assert g0["pcie_gen"] is None and "NotSupported" in g0["errors"]["pcie_gen"]
    assert g0["pci_bus_id"] == "00000000:1B:00.0" and g0["memory_total_mib"] == 81559
    assert g1["mig_mode"] == "Enabled" and g0["mig_mode"] == "Disabled"
    # the JSON grades: MIG on GPU 1 fails the H100 profile, and 2 of 8 GPUs are there
    r = grade("gpu.inventory", {"nvml": capture("nvml", json.dumps(data))}, profile="h100-sxm-8x", mode="analyze")[0]
    assert r.status is Status.FAIL
    assert "2 of 8 GPUs visible" in r.summary and "MIG enabled on GPU 1" in r.summary


def test_collect_init_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(fail_init=True))
    data = nvml_probe.collect()
    assert data["ok"] is False and data["error"] == "Driver Not Loaded" and data["error_type"] == "_Err"


def test_main_prints_one_object_even_when_collect_explodes(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    def boom() -> dict[str, Any]:
        raise RuntimeError("library segfault stand-in")

    monkeypatch.setattr(nvml_probe, "collect", boom)
    assert nvml_probe.main() == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False and data["error_type"] == "RuntimeError"
