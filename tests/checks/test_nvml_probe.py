"""The NVML probe: the node's own libnvidia-ml through ctypes, one JSON object on stdout, exit 0,
whatever NVML does. Run as it runs on a node: `python -I -S -c <the module's text>` (no site
packages, nothing of preflight importable), against a real shared library built from
tests/fakes/nvml/fake_nvml.c that speaks NVML's C API and return codes."""

from __future__ import annotations

import ast
import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from preflight import nvml_probe
from preflight.checks import gpu, gpu_health
from preflight.framing import Doc
from preflight.model import Status
from preflight.parsers import nvml as nvml_parser
from preflight.probes import run_probe
from preflight.remote import module_text
from tests import fakes, scenarios
from tests.conftest import capture, grade

FIX = fakes.FIXTURES / "nvidia-smi"
HEALTHY = json.loads((FIX / "nvml_8xh100_ok.json").read_text())


def run_shipped(env: dict[str, str]) -> dict[str, Any]:
    """The probe as a node runs it: the program PROBE_NVML ships, with an isolated python and no
    site packages."""
    program = gpu_health.PROBE_NVML.commands[0][2]
    p = subprocess.run([sys.executable, "-I", "-S", "-c", program], env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, p.stdout
    data: dict[str, Any] = json.loads(lines[0])
    assert set(data) >= {"ok", "error", "error_type", "error_code", "library", "driver", "nvml_version",
                         "cuda_driver_version", "gpus"}
    return data


def probe(tmp_path: Path, data: dict[str, Any] | None, variant: str = "") -> dict[str, Any]:
    """Run the probe against the fake library answering `data` (None: no data file, a machine
    whose kernel driver is not loaded)."""
    sc = tmp_path / f"sc{variant}"
    sc.mkdir(exist_ok=True)
    if data is not None:
        fakes.scenario(sc, {}, {"nvml.json": json.dumps(data)})
    env = scenarios.nvml_env({"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PREFLIGHT_FAKE_DIR": str(sc)}, variant)
    return run_shipped(env)


def without(data: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k not in keys}


def test_the_healthy_node_reads_back_exactly_what_the_library_holds(tmp_path: Path) -> None:
    out = probe(tmp_path, HEALTHY)
    assert out["ok"] is True and out["error"] == "" and out["error_type"] == ""
    assert out["library"].endswith("/libnvidia-ml.so.1") and "preflight-fake-nvml-" in out["library"]
    assert out["driver"] == "550.127.05" and out["nvml_version"] == "12.550.127.05"
    assert out["cuda_driver_version"] == 12040
    assert out["gpus"] == HEALTHY["gpus"]  # every field, every GPU, through the C structs and back
    r = grade("gpu.inventory", {"nvml": capture("nvml", json.dumps(out))}, profile="h100-sxm-8x", mode="analyze")[0]
    assert r.status is Status.PASS, r


def test_a_field_the_gpu_does_not_support_is_null_with_nvmls_reason(tmp_path: Path) -> None:
    data = json.loads((FIX / "nvml_1xh100_mig_notsupported.json").read_text())
    out = probe(tmp_path, data)
    g = out["gpus"][0]
    assert out["ok"] is True and g["pcie_gen"] is None
    assert g["errors"] == {"pcie_gen": "NVML_ERROR_NOT_SUPPORTED: Not Supported"}
    assert g["mig_mode"] == "Enabled" and g["mig_mode_pending"] == "Disabled"
    assert g["pcie_gen_max"] == 5 and g["memory_total_mib"] == 81559
    r = grade("gpu.inventory", {"nvml": capture("nvml", json.dumps(out))}, profile="h100-sxm-8x", mode="analyze")[0]
    assert r.status is Status.FAIL and "MIG enabled on GPU 0" in r.summary


def test_a_lost_gpu_is_one_gpu_with_every_field_null(tmp_path: Path) -> None:
    data = copy.deepcopy(HEALTHY)
    data["gpus"][3] = {"index": 3, "errors": {"handle": "NVML_ERROR_GPU_IS_LOST: GPU is lost"}}
    out = probe(tmp_path, data)
    assert out["ok"] is True and len(out["gpus"]) == 8
    lost = out["gpus"][3]
    assert lost["errors"] == {"handle": "NVML_ERROR_GPU_IS_LOST: GPU is lost"}
    assert all(lost[k] is None for k in ("name", "uuid", "pci_bus_id", "memory_total_mib", "mig_mode"))
    assert [g["uuid"] for i, g in enumerate(out["gpus"]) if i != 3] == \
        [g["uuid"] for i, g in enumerate(HEALTHY["gpus"]) if i != 3]
    # NVML alone shows it: the lost GPU is a FAIL naming it, never one of 8 healthy GPUs
    r = grade("gpu.inventory", {"nvml": capture("nvml", json.dumps(out))}, profile="h100-sxm-8x", mode="analyze")[0]
    assert r.status is Status.FAIL and r.facts["codes"] == ["gpu.inventory/gpu-lost"], r
    assert "GPU 3" in r.summary and "GPU is lost" in r.summary, r.summary


def test_a_gpu_that_needs_a_reset_is_named_from_any_field(tmp_path: Path) -> None:
    data = copy.deepcopy(HEALTHY)
    data["gpus"][5]["memory_total_mib"] = None
    data["gpus"][5]["errors"] = {"memory_total_mib": "NVML_ERROR_RESET_REQUIRED: GPU requires reset"}
    out = probe(tmp_path, data)
    assert out["gpus"][5]["errors"] == {"memory_total_mib": "NVML_ERROR_RESET_REQUIRED: GPU requires reset"}
    r = grade("gpu.inventory", {"nvml": capture("nvml", json.dumps(out))}, profile="h100-sxm-8x", mode="analyze")[0]
    assert r.status is Status.FAIL and r.facts["codes"] == ["gpu.inventory/gpu-requires-reset"], r
    assert "GPU 5 (00000000:C3:00.0)" in r.summary, r.summary


@pytest.mark.parametrize(("error_type", "code", "text", "kind"), [
    ("NVML_ERROR_LIB_RM_VERSION_MISMATCH", 18, "Driver/library version mismatch", "version_mismatch"),
    ("NVML_ERROR_NO_PERMISSION", 4, "Insufficient Permissions", "nvml_init"),
    ("NVML_ERROR_UNKNOWN", 999, "Unknown Error", "nvml_init"),
])
def test_an_init_error_carries_nvmls_code_and_sentence(tmp_path: Path, error_type: str, code: int, text: str,
                                                        kind: str) -> None:
    out = probe(tmp_path, {"ok": False, "error_type": error_type})
    assert out["ok"] is False and out["gpus"] == [] and out["driver"] == ""
    assert (out["error_type"], out["error_code"], out["error"]) == (error_type, code, text)
    assert out["library"].endswith("libnvidia-ml.so.1")
    err = nvml_parser.parse(Doc(json.dumps(out))).tool_error()
    assert err is not None and err.kind == kind and error_type in err.line and out["library"] in err.line


def test_no_data_is_a_machine_whose_driver_is_not_loaded(tmp_path: Path) -> None:
    out = probe(tmp_path, None)
    assert (out["ok"], out["error_type"], out["error_code"], out["error"]) == (
        False, "NVML_ERROR_DRIVER_NOT_LOADED", 9, "Driver Not Loaded")
    err = nvml_parser.parse(Doc(json.dumps(out))).tool_error()
    assert err is not None and err.kind == "no_driver"
    r = grade("gpu.driver", {"nvml": capture("nvml", json.dumps(out))}, mode="analyze")[0]
    assert r.status is not Status.PASS and "Driver Not Loaded" in r.summary, r


def test_a_device_count_failure_is_the_probes_error(tmp_path: Path) -> None:
    out = probe(tmp_path, {**HEALTHY, "fake_kv": {"count": "!999"}})
    assert out["ok"] is False and out["error_type"] == "NVML_ERROR_UNKNOWN" and out["error"] == "Unknown Error"
    assert out["driver"] == "550.127.05"  # what was read before the failure is kept


def test_an_old_driver_library_without_newer_functions_is_per_field(tmp_path: Path) -> None:
    out = probe(tmp_path, HEALTHY, variant="old")
    assert out["ok"] is True and len(out["gpus"]) == 8
    assert out["cuda_driver_version"] == 12040  # nvmlSystemGetCudaDriverVersion, the older name
    g = out["gpus"][0]
    assert g["mig_mode"] is None and g["pci_bus_id"] is None and g["name"] == "NVIDIA H100 80GB HBM3"
    assert g["errors"]["mig_mode"].startswith("NVML_ERROR_FUNCTION_NOT_FOUND: nvmlDeviceGetMigMode not in ")
    assert g["errors"]["pci_bus_id"].startswith("NVML_ERROR_FUNCTION_NOT_FOUND: nvmlDeviceGetPciInfo_v3 not in ")


def _real_nvml_loads() -> bool:
    try:
        nvml_probe.load(())
        return True
    except nvml_probe.NoLibrary:
        return False


def test_no_library_names_it_and_where_it_looked(tmp_path: Path) -> None:
    if _real_nvml_loads():
        pytest.skip("this machine has a libnvidia-ml.so.1")
    out = run_shipped({"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    assert out["ok"] is False and out["error_type"] == "LibraryNotFound" and out["library"] == ""
    assert out["error"] == "libnvidia-ml.so.1 not found" and "/usr/lib64/nvidia" in out["searched"]
    err = nvml_parser.parse(Doc(json.dumps(out))).tool_error()
    assert err is not None and err.kind == "library_missing"


def test_a_library_that_cannot_be_loaded_says_why(tmp_path: Path) -> None:
    if _real_nvml_loads():
        pytest.skip("this machine has a libnvidia-ml.so.1")
    (tmp_path / "libnvidia-ml.so.1").write_text("not an ELF file\n")
    out = nvml_probe.collect((str(tmp_path),))
    assert out["ok"] is False and out["error_type"] == "LibraryLoadError"
    assert str(tmp_path / "libnvidia-ml.so.1") in out["error"] and "cannot be loaded" in out["error"]
    err = nvml_parser.parse(Doc(json.dumps(out))).tool_error()
    assert err is not None and err.kind == "library_missing"


def test_the_library_is_found_in_a_driver_folder_off_the_loader_path(tmp_path: Path) -> None:
    sc = tmp_path / "sc"
    fakes.scenario(sc, {}, {"nvml.json": json.dumps(HEALTHY)})
    from tests.fakes import fake_nvml

    try:
        folder = fake_nvml.library_dir()
    except fake_nvml.Unavailable as exc:
        scenarios.nvml_env({}, "")  # skips, or fails under CI
        raise AssertionError(str(exc)) from exc
    text = module_text(nvml_probe).replace('if __name__ == "__main__":\n    sys.exit(main())', "")
    code = f"{text}\nprint(json.dumps(collect(({str(tmp_path / 'nowhere')!r}, {str(folder)!r}))))\n"
    p = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60,
                       env={"PATH": os.environ.get("PATH", ""), "PREFLIGHT_FAKE_DIR": str(sc)})
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["ok"] is True and out["library"] == str(folder / "libnvidia-ml.so.1"), out


def test_the_probe_ships_as_its_own_text_packed() -> None:
    """The module's own text, zlib + base85 (a third of its size: the bundle is one SSH command,
    and a black-holed path passes a smaller one), with nothing to escape in JSON or shell quotes."""
    import base64
    import re
    import zlib

    argv = gpu_health.PROBE_NVML.commands[0]
    assert argv[0] == sys.executable and argv[1] == "-c" and len(argv) == 3
    packed = re.fullmatch(r"import base64,zlib;exec\(compile\(zlib\.decompress\(base64\.b85decode\('([^'\\\"]+)'\)\),"
                          r"'nvml_probe\.py','exec'\)\)", argv[2])
    assert packed is not None, argv[2][:200]
    assert zlib.decompress(base64.b85decode(packed.group(1))).decode() == Path(nvml_probe.__file__).read_text()
    assert len(argv[2]) < len(Path(nvml_probe.__file__).read_text()) / 2
    assert gpu.PROBE_NVML is gpu_health.PROBE_NVML


def test_the_probe_module_needs_nothing_but_the_standard_library() -> None:
    tree = ast.parse(Path(nvml_probe.__file__).read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names <= set(sys.stdlib_module_names) | {"__future__"}, names


def test_probe_through_the_runner_grades_cleanly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sc = scenarios.healthy_h100(tmp_path / "sc")
    env = scenarios.nvml_env({"LD_LIBRARY_PATH": os.environ.get("LD_LIBRARY_PATH", "")})
    monkeypatch.setenv("LD_LIBRARY_PATH", env["LD_LIBRARY_PATH"])
    monkeypatch.setenv("PREFLIGHT_FAKE_DIR", str(sc))
    cap = run_probe(gpu.PROBE_NVML)
    assert cap.ok and cap.rc == 0
    data = json.loads(cap.stdout)
    assert data["ok"] is True and data["driver"] == scenarios.DRIVER
    r = grade("gpu.inventory", {"nvml": cap}, profile="h100-sxm-8x", mode="analyze")[0]
    assert r.status is Status.PASS, r


def test_main_prints_one_object_even_when_collect_explodes(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    def boom() -> dict[str, Any]:
        raise RuntimeError("library segfault stand-in")

    monkeypatch.setattr(nvml_probe, "collect", boom)
    assert nvml_probe.main() == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False and data["error_type"] == "RuntimeError" and data["gpus"] == []


def test_the_fake_data_file_keeps_the_scenario_shape() -> None:
    from tests.fakes import fake_nvml

    kv = fake_nvml.kv_text(HEALTHY)
    assert "count=8\n" in kv and "gpu.7.memory_total=85520809984\n" in kv and "cuda=12040\n" in kv
    assert fake_nvml.kv_text({"ok": False, "error_type": "NVMLError_DriverNotLoaded"}) == "init=9\n"
    assert fake_nvml.kv_text({"ok": False, "error": "?"}) == "init=999\n"
    assert without(HEALTHY, "gpus")["ok"] is True


@pytest.mark.parametrize(("line", "kind"), [
    ("NVML_ERROR_GPU_IS_LOST GPU is lost", "gpu_lost"),
    ("NVML_ERROR_RESET_REQUIRED GPU requires reset", "needs_reset"),
    ("NVML_ERROR_LIBRARY_NOT_FOUND NVML Shared Library Not Found", "library_missing"),
    ("NVML_ERROR_DRIVER_NOT_LOADED Driver Not Loaded", "no_driver"),
    ("NVML_ERROR_LIB_RM_VERSION_MISMATCH Driver/library version mismatch", "version_mismatch"),
    ("NVML_ERROR_OPERATING_SYSTEM GPU access blocked by the operating system", "nvml_init"),
    ("LibraryLoadError libnvidia-ml.so.1 cannot be loaded: /usr/lib64/libnvidia-ml.so.1: invalid ELF header",
     "library_missing"),
    ("LibraryNotFound libnvidia-ml.so.1 not found: not on the loader's path", "library_missing"),
])
def test_the_probes_error_names_are_classified(line: str, kind: str) -> None:
    from preflight.parsers.nvsmi_errors import errors_in

    found = errors_in([line])
    assert [e.kind for e in found] == [kind]


@pytest.mark.parametrize("answer", [
    "NVML_ERROR_GPU_IS_LOST", "NVMLError_GpuIsLost", "GPU is lost", "NVML_ERROR_RESET_REQUIRED",
    "NVMLError_ResetRequired", "GPU requires reset", "NVML_ERROR_UNKNOWN", "Unknown Error",
])
def test_each_way_nvml_says_a_gpu_stopped_answering_marks_it_broken(answer: str) -> None:
    """The code name alone (a probe that printed no sentence), pynvml's class, or NVML's sentence."""
    text = json.dumps({"ok": True, "nvml_version": "12.535", "gpus": [
        {"index": 0, "errors": {"handle": answer}}, {"index": 1, "errors": {"vbios": "NVML_ERROR_NOT_SUPPORTED"}}]})
    rep = nvml_parser.parse(Doc(text))
    assert rep.gpus[0].broken == [f"[handle: {answer}]"] and rep.gpus[1].broken == []
