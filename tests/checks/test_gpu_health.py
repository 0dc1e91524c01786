"""gpu.health and gpu.driver: the `nvidia-smi -q` parser, tool errors, NVML JSON, grading."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from preflight import engine, registry
from preflight.checks.gpu_health import from_q
from preflight.framing import Doc
from preflight.model import Capture, CaptureState, Result, Status
from preflight.parsers import nvsmi_errors, nvsmi_q
from preflight.parsers.base import to_bool, to_int
from preflight.parsers.nvsmi_q import QReport
from preflight.transport.local import LocalTransport
from tests import fakes
from tests.conftest import FIXTURES, capture, facts_of, fixture_text, grade


def parse_q(text: str) -> QReport:
    rep = facts_of("nvidia-smi-q", text)
    assert isinstance(rep, QReport)
    return rep


def find_tool_errors(text: str) -> list[nvsmi_errors.ToolError]:
    return nvsmi_errors.errors_in(text.splitlines())

Q = "nvidia-smi-q/"


def q(name: str, rc: int = 0) -> dict[str, Capture]:
    return {"nvidia-smi-q": capture("nvidia-smi-q", fixture_text(Q + name), rc=rc)}


def nvml(**fields: object) -> Capture:
    doc = {"ok": True, "error": "", "error_type": "", "driver": "535.230.02", "nvml_version": "12.535.230.02",
           "cuda_driver_version": 12020, "gpus": [{"index": 0}]}
    doc.update(fields)
    return capture("nvml", json.dumps(doc, sort_keys=True) + "\n")


def missing(probe: str, tool: str) -> Capture:
    return Capture(probe=probe, argv=[tool], state=CaptureState.MISSING, reason=f"{tool} not found on PATH")


def no_tools_profile(tmp_path: Path) -> str:
    """A profile that requires no tool (a site that runs preflight on mixed nodes)."""
    p = tmp_path / "notools.toml"
    p.write_text('[profile]\nname = "notools"\nextends = "generic"\n[tools]\nrequired = []\n')
    return str(p)


def one(results: list[Result]) -> Result:
    assert len(results) == 1, results
    return results[0]


# ---------------------------------------------------------------------------------------
# parser
# ---------------------------------------------------------------------------------------


def test_parse_535_layout_header_and_paths() -> None:
    rep = parse_q(fixture_text(Q + "h100x8_535_healthy_idle_powerbrake.txt"))
    assert rep.recognised and rep.driver == "535.230.02" and rep.cuda == "12.2" and rep.attached == 8
    assert [g.bus_id for g in rep.gpus][:2] == ["00000000:1B:00.0", "00000000:43:00.0"]
    g = rep.gpus[0]
    assert g.get("Remapped Rows/Pending") == "No"
    assert g.get("ECC Errors/Volatile/DRAM Uncorrectable") == "0"
    # deeper-indented children of a field that has a value attach to the enclosing section
    assert g.get("Clocks Event Reasons/HW Power Brake Slowdown") == "Active"
    assert g.get("Fabric/State") == "Completed"
    assert g.line("Remapped Rows/Pending") == "Pending : No"
    # a long label leaves one space before the colon
    assert g.get("Temperature/Memory Max Operating T.Limit Temp") == "0 C"


def test_parse_590_wider_label_column_and_new_fields() -> None:
    rep = parse_q(fixture_text(Q + "h100x1_590_healthy.txt"))
    g = rep.gpus[0]
    assert rep.driver == "590.48.01" and rep.cuda == "13.1"
    assert g.get("GPU Recovery Action") == "None"
    assert g.get("Fabric/Health/Bandwidth") == "N/A"
    assert g.get("ECC Errors/TPC Repair Pending") == "No"
    assert g.get("Utilization/GPU") == "0 %"
    # the counters section repeats reason names; it must not be read as the reasons themselves
    assert g.get("Clocks Event Reasons Counters/HW Thermal Slowdown") == "0 us"
    assert g.get("Clocks Event Reasons/HW Thermal Slowdown") == "Not Active"
    assert "GPU Memory Power Readings/Average Power Draw" in g.fields  # section header with trailing space


def test_parse_old_layout_throttle_reasons_alias_and_double_bit() -> None:
    rep = parse_q(fixture_text(Q + "v100x2_470_retired_pages_pending.txt"))
    g = rep.gpus[0]
    assert g.get("Clocks Event Reasons/Idle") == "Active"
    h = from_q(g)
    assert h.ecc_volatile == 0
    assert h.ecc_aggregate == 3  # Double Bit/Total only, not the per-unit lines too
    f = h.facts()
    assert f["retired_pages_dbe"] == 3 and f["retired_pages_pending"] is True
    assert f["remapped_pending"] is None  # `Remapped Rows : N/A`


def test_parse_mig_counts_only_the_gpu_level_ecc() -> None:
    g = parse_q(fixture_text(Q + "a100x1_550_mig_enabled.txt")).gpus[0]
    f = from_q(g).facts()
    assert f["uncorrectable_ecc"] is None  # N/A under MIG
    assert f["uncorrectable_ecc_aggregate"] == 0
    assert f["utilization"] is None
    assert "MIG Devices/MIG Device/ECC Errors/Volatile/SRAM Uncorrectable" in g.fields
    assert "MIG Devices/MIG Device/Index#2" in g.fields  # the second MIG device


def test_parse_crlf_tabs_and_ansi_are_tolerated() -> None:
    text = fixture_text(Q + "h100x1_590_recovery_reset.txt").replace("\n", "\r\n")
    text = "\x1b[1m" + text.replace("    GPU Recovery Action", "\tGPU Recovery Action")
    rep = parse_q(text)
    assert rep.driver == "590.48.01" and len(rep.gpus) == 1
    assert rep.gpus[0].get("GPU Recovery Action") == "Reset"


@pytest.mark.parametrize("text", ["", "\n\n", "garbage\x00\x01 : : :", "GPU 0: something\n    : x",
                                  "Driver Version : 1\nGPU zz\n"])
def test_parse_garbage_never_raises(text: str) -> None:
    rep = parse_q(text)
    assert rep.gpus == []


def test_value_helpers() -> None:
    assert to_int("2560 bank(s)") == 2560 and to_int("N/A") is None and to_int(None) is None
    assert to_bool("Not Active") is False and to_bool("Active") is True and to_bool("[N/A]") is None


@pytest.mark.parametrize("name,kind", [
    ("err_version_mismatch.txt", "version_mismatch"),
    ("err_no_driver.txt", "no_driver"),
    ("err_no_devices.txt", "no_devices"),
    ("err_nvml_unknown.txt", "nvml_init"),
])
def test_tool_errors(name: str, kind: str) -> None:
    text = fixture_text(Q + name)
    errs = find_tool_errors(text)
    assert errs and errs[0].kind == kind
    assert nvsmi_errors.detect(Doc(text)) and not nvsmi_q.detect(Doc(text))


def test_lost_gpu_error_names_the_bus_id() -> None:
    errs = find_tool_errors(fixture_text(Q + "h100x8_535_gpu_lost.txt"))
    assert [(e.kind, e.bus_id) for e in errs] == [("gpu_lost", "0000:9D:00.0")]


def test_detectors_are_specific() -> None:
    assert nvsmi_q.detect(Doc(fixture_text(Q + "h100x1_590_healthy.txt")))
    assert not nvsmi_q.detect(Doc("Driver Version: 535\nsome log line\n"))


def test_nvml_json_helpers() -> None:
    rep = facts_of("nvml", 'noise\n{"ok": true, "gpus": [], "nvml_version": "12"}\n')
    assert rep.ok and rep.gpus == [] and rep.tool_error().kind == "no_devices"
    assert not facts_of("nvml", "not json").ok

    def err(**d: object) -> str:
        e = facts_of("nvml", json.dumps({"nvml_version": "", **d})).tool_error()
        return e.kind if e else ""

    assert err(ok=False, error="NVML Shared Library Not Found", error_type="NVMLError_LibraryNotFound") == \
        "library_missing"
    assert err(ok=False, error="Driver Not Loaded", error_type="NVMLError_DriverNotLoaded") == "no_driver"
    assert err(ok=True, gpus=[{"index": 0}]) == ""
    assert facts_of("nvml", json.dumps({"ok": True, "gpus": [], "nvml_version": "1",
                                        "cuda_driver_version": 13010})).cuda == "13.1"


# ---------------------------------------------------------------------------------------
# gpu.health
# ---------------------------------------------------------------------------------------


def test_health_pass_with_power_brake_on_idle_gpus() -> None:
    r = one(grade("gpu.health", q("h100x8_535_healthy_idle_powerbrake.txt"), profile="h100-sxm-8x"))
    assert r.status is Status.PASS, r.summary
    gpus = r.facts["gpus"]
    assert len(gpus) == 8 and all(g["remapped_pending"] is False for g in gpus)
    assert "HW Power Brake Slowdown" in gpus[0]["clock_events_active"]


def test_health_volatile_ecc_fails_and_names_gpu() -> None:
    r = one(grade("gpu.health", q("h100x8_535_ecc_uncorrectable.txt"), profile="h100-sxm-8x"))
    assert r.status is Status.FAIL
    assert "GPU 3 (00000000:61:00.0)" in r.summary and "volatile uncorrectable ECC" in r.summary
    assert any("DRAM Uncorrectable : 2" in e for e in r.evidence)
    assert any("gpu.max_uncorrectable_ecc = 0" in e for e in r.evidence)
    assert any("GPU 6" in e for e in r.evidence)  # the aggregate-only GPU is listed too (WARN)
    assert "RMA" in r.remedy and "drain" in r.remedy
    assert r.facts["gpus"][3]["uncorrectable_ecc"] == 2 and r.facts["gpus"][6]["uncorrectable_ecc_aggregate"] == 1


def test_health_remap_failure_is_rma() -> None:
    r = one(grade("gpu.health", q("h100x2_535_remap_failure.txt")))
    assert r.status is Status.FAIL
    assert "GPU 1" in r.summary
    assert any("Remapping Failure Occurred : Yes" in e for e in r.evidence)
    assert any("Drain and Reset Recommended : Yes" in e for e in r.evidence)
    assert "RMA" in r.remedy
    assert r.facts["gpus"][1]["remapped_failure"] is True and r.facts["gpus"][1]["banks_without_spare_rows"] == 2


def test_health_hw_slowdown_on_busy_gpu_warns() -> None:
    r = one(grade("gpu.health", q("h100x2_535_busy_hw_slowdown.txt"), profile="h100-sxm-8x"))
    assert r.status is Status.WARN
    assert "hardware clock slowdown" in r.summary
    assert any("HW Thermal Slowdown : Active" in e for e in r.evidence)
    assert any("Gpu : 97 %" in e for e in r.evidence)
    assert "cooling" in r.remedy


def test_health_idle_warn_list_comes_from_profile(tmp_path: Path) -> None:
    p = tmp_path / "strict.toml"
    p.write_text('[profile]\nname = "strict"\nextends = "h100-sxm-8x"\n[gpu]\n'
                 'clock_events_warn_idle = { value = ["HW Power Brake Slowdown"], source = "site rule" }\n')
    r = one(grade("gpu.health", q("h100x8_535_healthy_idle_powerbrake.txt"), profile=str(p)))
    assert r.status is Status.WARN and any("site rule" in e for e in r.evidence)


@pytest.mark.parametrize("name,needle,remedy", [
    ("h100x1_590_recovery_reset.txt", "recovery action 'Reset'", "nvidia-smi -r -i 0"),
    ("h100x1_590_recovery_reboot_tpc_repair.txt", "recovery action 'Reboot'", "reboot"),
])
def test_health_590_recovery_action(name: str, needle: str, remedy: str) -> None:
    r = one(grade("gpu.health", q(name)))
    assert r.status is Status.FAIL and needle in r.summary
    assert any("GPU Recovery Action : " in e for e in r.evidence)
    assert remedy in r.remedy
    assert r.facts["gpus"][0]["recovery_action"] in ("Reset", "Reboot")


def test_health_590_healthy_passes() -> None:
    assert one(grade("gpu.health", q("h100x1_590_healthy.txt"))).status is Status.PASS


def test_health_old_driver_retired_pages() -> None:
    r = one(grade("gpu.health", q("v100x2_470_retired_pages_pending.txt")))
    assert r.status is Status.FAIL
    assert any("Pending Page Blacklist : Yes" in e for e in r.evidence)
    assert any("Double Bit ECC : 3" in e for e in r.evidence)
    assert r.facts["gpus"][1]["retired_pages_dbe"] == 0


def test_health_mig_na_fields_tolerated() -> None:
    r = one(grade("gpu.health", q("a100x1_550_mig_enabled.txt")))
    assert r.status is Status.PASS, (r.summary, r.evidence)


def test_health_lost_gpu_fails() -> None:
    r = one(grade("gpu.health", q("h100x8_535_gpu_lost.txt", rc=15), profile="h100-sxm-8x"))
    assert r.status is Status.FAIL and "0000:9D:00.0" in r.summary
    assert "Xid 79" in r.remedy
    assert r.facts["lost"] == ["0000:9D:00.0"] and len(r.facts["gpus"]) == 7


def test_health_truncated_output_is_error() -> None:
    r = one(grade("gpu.health", q("h100x8_535_truncated.txt")))
    assert r.status is Status.ERROR and "of 8 attached GPUs" in r.summary
    assert r.evidence and r.remedy


@pytest.mark.parametrize("name", ["err_version_mismatch.txt", "err_no_driver.txt", "err_no_devices.txt"])
def test_health_tool_error_is_error_not_pass(name: str) -> None:
    r = one(grade("gpu.health", q(name, rc=9)))
    assert r.status is Status.ERROR and "GPU health not read" in r.summary
    assert r.evidence and "gpu.driver" in r.remedy


@pytest.mark.parametrize("text", ["", "hello world\n", "\x00\x01\x02"])
def test_health_garbage_is_error(text: str) -> None:
    r = one(grade("gpu.health", {"nvidia-smi-q": capture("nvidia-smi-q", text)}))
    assert r.status is Status.ERROR and r.remedy


def test_health_missing_tool_skip_or_fail_by_profile(tmp_path: Path) -> None:
    caps = {"nvidia-smi-q": missing("nvidia-smi-q", "nvidia-smi")}
    assert one(grade("gpu.health", caps, profile=no_tools_profile(tmp_path))).status is Status.SKIP
    r = one(grade("gpu.health", caps, profile="h100-sxm-8x"))
    assert r.status is Status.FAIL and "nvidia-smi" in r.summary and r.remedy


def test_health_timeout_is_error() -> None:
    cap = Capture(probe="nvidia-smi-q", argv=["nvidia-smi", "-q"], state=CaptureState.TIMEOUT,
                  reason="probe nvidia-smi-q (nvidia-smi -q) timed out after 20 s", timeout=20)
    r = one(grade("gpu.health", {"nvidia-smi-q": cap}))
    assert r.status is Status.ERROR and "hung" in r.remedy


# the default table (analyze only): synthesised rows in the 535 layout
_TABLE_HEAD = """Sat Mar  1 12:00:00 2025
+---------------------------------------------------------------------------------------+
| NVIDIA-SMI 535.230.02             Driver Version: 535.230.02   CUDA Version: 12.2     |
|-----------------------------------------+----------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |         Memory-Usage | GPU-Util  Compute M. |
|                                         |                      |               MIG M. |
|=========================================+======================+======================|
"""
_ROW = """|   {i}  NVIDIA H100 80GB HBM3          On  | 00000000:{bus}:00.0 Off |                    {ecc} |
| {fan}   {temp}    P0              {pw} /  700W |      4MiB / 81559MiB |      0%      Default |
|                                         |                      |             Disabled |
+-----------------------------------------+----------------------+----------------------+
"""


def table(*rows: dict[str, str]) -> dict[str, Capture]:
    text = _TABLE_HEAD + "".join(_ROW.format(**r) for r in rows)
    return {"nvidia-smi-table": capture("nvidia-smi-table", text)}


def _row(i: int, bus: str, ecc: str = "0", fan: str = "N/A", temp: str = "30C", pw: str = " 70W") -> dict[str, str]:
    return {"i": str(i), "bus": bus, "ecc": ecc, "fan": fan, "temp": temp, "pw": pw}


def test_table_healthy_passes() -> None:
    r = one(grade("gpu.health", table(_row(0, "1B"), _row(1, "43")), mode="analyze"))
    assert r.status is Status.PASS and "2 GPU(s)" in r.summary


def test_table_fan_err_warns_sensor_err_fails() -> None:
    r = one(grade("gpu.health", table(_row(0, "1B", fan="ERR!"), _row(1, "43")), mode="analyze"))
    assert r.status is Status.WARN and "GPU 0" in r.summary and "fan" in r.summary
    assert any("ERR!" in e for e in r.evidence)
    r = one(grade("gpu.health", table(_row(0, "1B"), _row(1, "43", fan="ERR!", temp="ERR!", pw="ERR!")),
                  mode="analyze"))
    assert r.status is Status.FAIL and "GPU 1" in r.summary and "Xid 79" in r.remedy


def test_table_volatile_ecc_fails() -> None:
    r = one(grade("gpu.health", table(_row(0, "1B", ecc="2"), _row(1, "43")), mode="analyze"))
    assert r.status is Status.FAIL and "2 volatile uncorrectable ECC" in r.summary
    assert r.facts["gpus"][0]["uncorrectable_ecc"] == 2


# ---------------------------------------------------------------------------------------
# gpu.driver
# ---------------------------------------------------------------------------------------


def test_driver_pass_reports_versions() -> None:
    caps = q("h100x8_535_healthy_idle_powerbrake.txt")
    caps["nvml"] = nvml()
    r = one(grade("gpu.driver", caps, profile="h100-sxm-8x"))
    assert r.status is Status.PASS, (r.summary, r.evidence)
    assert {k: r.facts[k] for k in ("driver", "cuda", "nvml", "error")} == \
        {"driver": "535.230.02", "cuda": "12.2", "nvml": "12.535.230.02", "error": None}
    assert "driver 535.230.02" in r.summary and "CUDA 12.2" in r.summary


@pytest.mark.parametrize("name,remedy", [
    ("err_version_mismatch.txt", "reboot"),
    ("err_no_driver.txt", "dmesg"),
    ("err_no_devices.txt", "Xid 79"),
    ("err_nvml_unknown.txt", "dmesg"),
])
def test_driver_tool_errors_fail_with_remedy(name: str, remedy: str) -> None:
    r = one(grade("gpu.driver", q(name, rc=9)))
    assert r.status is Status.FAIL
    line = fixture_text(Q + name).splitlines()[0].strip()
    assert line in r.summary and line in r.evidence
    assert remedy in r.remedy
    assert r.facts["error"] == line


def test_driver_no_tooling_skip_or_fail_by_profile(tmp_path: Path) -> None:
    lib = nvml(ok=False, error="NVML Shared Library Not Found", error_type="NVMLError_LibraryNotFound",
               driver="", nvml_version="", cuda_driver_version=0, gpus=[])
    caps = {"nvidia-smi-q": missing("nvidia-smi-q", "nvidia-smi"), "nvml": lib}
    r = one(grade("gpu.driver", caps, profile=no_tools_profile(tmp_path)))
    assert r.status is Status.SKIP and "no GPU tooling" in r.summary
    r = one(grade("gpu.driver", caps, profile="h100-sxm-8x"))
    assert r.status is Status.FAIL and "no GPU tooling" in r.summary
    assert any("NVML Shared Library Not Found" in e for e in r.evidence)
    assert r.facts["error"].startswith("NVML: NVML Shared Library Not Found")


def test_driver_nvml_driver_not_loaded_fails_even_without_required_tools(tmp_path: Path) -> None:
    caps = {"nvidia-smi-q": missing("nvidia-smi-q", "nvidia-smi"),
            "nvml": nvml(ok=False, error="Driver Not Loaded", error_type="NVMLError_DriverNotLoaded", driver="",
                         gpus=[])}
    r = one(grade("gpu.driver", caps, profile=no_tools_profile(tmp_path)))
    assert r.status is Status.FAIL and "Driver Not Loaded" in r.summary and "modprobe" in r.remedy


def test_driver_nvml_only_analyze() -> None:
    r = one(grade("gpu.driver", {"nvml": nvml()}, mode="analyze"))
    assert r.status is Status.PASS and r.facts["cuda"] == "12.2"


def test_driver_nvml_fails_but_smi_works_is_warn() -> None:
    caps = q("h100x1_590_healthy.txt")
    caps["nvml"] = nvml(ok=False, error="NVML Shared Library Not Found", error_type="NVMLError_LibraryNotFound",
                        driver="", gpus=[])
    r = one(grade("gpu.driver", caps))
    assert r.status is Status.WARN and "libnvidia-ml" in r.remedy


def test_driver_smi_and_nvml_disagree_warns() -> None:
    caps = q("h100x1_590_healthy.txt")
    caps["nvml"] = nvml(driver="550.54.15")
    r = one(grade("gpu.driver", caps))
    assert r.status is Status.WARN and "550.54.15" in r.summary


def test_driver_version_pins(tmp_path: Path) -> None:
    def prof(driver: str, cuda: str) -> str:
        p = tmp_path / f"pin_{driver}_{cuda}.toml".replace(".", "_").replace("_toml", ".toml")
        p.write_text(f'[profile]\nname = "pin"\nextends = "h100-sxm-8x"\n[gpu]\n'
                     f'driver_version = {{ value = "{driver}", source = "site pin" }}\n'
                     f'cuda_version = {{ value = "{cuda}", source = "site pin" }}\n')
        return str(p)

    caps = q("h100x8_535_healthy_idle_powerbrake.txt")
    assert one(grade("gpu.driver", caps, profile=prof("535", "12.2"))).status is Status.PASS
    assert one(grade("gpu.driver", caps, profile=prof("535.230.02", ""))).status is Status.PASS
    r = one(grade("gpu.driver", caps, profile=prof("550.54.15", "")))
    assert r.status is Status.FAIL and "not the pinned 550.54.15" in r.summary
    assert "Driver Version : 535.230.02" in r.evidence and any("site pin" in e for e in r.evidence)
    r = one(grade("gpu.driver", caps, profile=prof("", "12.4")))
    assert r.status is Status.FAIL and "CUDA" in r.summary
    # 535.2 is not a dot-boundary prefix of 535.230.02
    assert one(grade("gpu.driver", caps, profile=prof("535.2", ""))).status is Status.FAIL


def test_driver_garbage_is_error() -> None:
    r = one(grade("gpu.driver", {"nvidia-smi-q": capture("nvidia-smi-q", "???\n")}))
    assert r.status is Status.ERROR and r.remedy
    r = one(grade("gpu.driver", {"nvidia-smi-q": capture("nvidia-smi-q", "boom\n", rc=3)}))
    assert r.status is Status.FAIL and "exit code 3" in r.summary


# ---------------------------------------------------------------------------------------
# through the engine, with real processes
# ---------------------------------------------------------------------------------------


def _run(profile: str) -> dict[str, Result]:
    reg = registry.load()
    checks = [reg.checks[c] for c in ("gpu.driver", "gpu.health", "fabric.manager")]
    results, _ = engine.run(reg, checks, ["node1"], LocalTransport(), profile_name=profile)
    return {r.check: r for r in results}


@pytest.mark.real
def test_engine_on_a_machine_without_gpu_is_honest(tmp_path: Path) -> None:
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi")
    got = _run(no_tools_profile(tmp_path))
    assert all(r.status is Status.SKIP for r in got.values()), {k: r.summary for k, r in got.items()}
    assert "nvidia-smi" in got["gpu.driver"].summary
    got = _run("h100-sxm-8x")
    # one cause, one FAIL: the checks that need nvidia-smi too depend on gpu.driver's
    assert got["gpu.driver"].status is Status.FAIL and "nvidia-smi" in got["gpu.driver"].summary
    for check in ("gpu.health", "fabric.manager"):
        assert got[check].status is Status.SKIP and got[check].facts["own_status"] == "fail", got[check]
        assert got[check].summary == "depends on gpu.driver: nvidia-smi is missing"


@pytest.mark.real
def test_engine_with_fake_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = fakes.install(tmp_path / "bin", ["nvidia-smi", "systemctl"])
    sc = fakes.scenario(tmp_path / "sc", {
        "nvidia-smi": [{"match": "^-q$", "stdout": "q.txt"}],
        "systemctl": [{"match": "nvidia-fabricmanager", "stdout": "show.txt"}],
    }, {"q.txt": FIXTURES / Q / "h100x8_535_ecc_uncorrectable.txt",
        "show.txt": FIXTURES / "systemctl" / "show_fm_failed.txt"})
    for k, v in fakes.env_for(bin_dir, sc).items():
        monkeypatch.setenv(k, v)
    got = _run("h100-sxm-8x")
    assert got["gpu.health"].status is Status.FAIL and "GPU 3" in got["gpu.health"].summary
    assert got["fabric.manager"].status is Status.FAIL and "stale Completed" in got["fabric.manager"].summary
    # the driver answers through nvidia-smi; NVML in this Python may or may not load
    assert got["gpu.driver"].status in (Status.PASS, Status.WARN)
    assert got["gpu.driver"].facts["driver"] == "535.230.02"
