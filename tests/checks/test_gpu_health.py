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
from tests.conftest import FIXTURES, capture, facts_of, fixture_text, grade, grade_text


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


# ---------------------------------------------------------------------------------------
# gpu.health: one finding code per decision (checks/policy.toml)
# ---------------------------------------------------------------------------------------


def block(bus: str = "00000000:18:00.0", *, pending: str = "No", failure: str = "No", unc: str = "0",
          none: str = "0", vol: str = "0", agg: str = "0", thr: str = "No", reset: str = "No", drain: str = "No",
          ecc: tuple[str, str] = ("Enabled", "Enabled"), slow: str = "Not Active", thermal: str = "Not Active",
          brake: str = "Not Active", util: str = "0 %", temp: tuple[str, str] = ("35 C", "45 C"),
          power: tuple[str, str] = ("700.00 W", "700.00 W"), recovery: str = "None", tpc: str = "No",
          channel: str = "No", unrepairable: str = "No") -> str:
    """One GPU block in the R570 layout of an H100 (T.Limit temperatures, Recovery Action)."""
    return f"""GPU {bus}
    Product Name                                   : NVIDIA H100 80GB HBM3
    GPU Reset Status
        Reset Required                             : {reset}
        Drain and Reset Recommended                : {drain}
    GPU Recovery Action                            : {recovery}
    Clocks Event Reasons
        Idle                                       : Not Active
        SW Power Cap                               : Not Active
        HW Slowdown                                : {slow}
            HW Thermal Slowdown                    : {thermal}
            HW Power Brake Slowdown                : {brake}
        SW Thermal Slowdown                        : Not Active
    Utilization
        GPU                                        : {util}
    ECC Mode
        Current                                    : {ecc[0]}
        Pending                                    : {ecc[1]}
    ECC Errors
        Volatile
            SRAM Correctable                       : 0
            SRAM Uncorrectable Parity              : 0
            SRAM Uncorrectable SEC-DED             : 0
            DRAM Correctable                       : 5
            DRAM Uncorrectable                     : {vol}
        Aggregate
            SRAM Correctable                       : 0
            SRAM Uncorrectable Parity              : 0
            SRAM Uncorrectable SEC-DED             : 0
            DRAM Correctable                       : 9
            DRAM Uncorrectable                     : {agg}
            SRAM Threshold Exceeded                : {thr}
        Channel Repair Pending                     : {channel}
        TPC Repair Pending                         : {tpc}
        Unrepairable Memory                        : {unrepairable}
    Retired Pages
        Single Bit ECC                             : N/A
        Double Bit ECC                             : N/A
        Pending Page Blacklist                     : N/A
    Remapped Rows
        Correctable Error                          : 0
        Uncorrectable Error                        : {unc}
        Pending                                    : {pending}
        Remapping Failure Occurred                 : {failure}
        Bank Remap Availability Histogram
            Max                                    : 2560 bank(s)
            High                                   : 0 bank(s)
            Partial                                : 0 bank(s)
            Low                                    : 0 bank(s)
            None                                   : {none}
    Temperature
        GPU Current Temp                           : {temp[0]}
        GPU T.Limit Temp                           : {temp[1]}
        GPU Shutdown T.Limit Temp                  : -8 C
        GPU Slowdown T.Limit Temp                  : -2 C
        GPU Max Operating T.Limit Temp             : 0 C
        Memory Current Temp                        : 44 C
        Memory Max Operating T.Limit Temp          : 0 C
    GPU Power Readings
        Instantaneous Power Draw                   : 71.20 W
        Current Power Limit                        : {power[0]}
        Default Power Limit                        : {power[1]}
"""


HEAD = ("\n==============NVSMI LOG==============\n\nTimestamp : Mon Mar  2 10:00:00 2026\n"
        "Driver Version : 570.133.20\nCUDA Version : 12.8\n\nAttached GPUs : {n}\n")


def smi(*blocks: str, profile: str = "generic", mode: str = "run") -> Result:
    text = HEAD.format(n=len(blocks)) + "\n".join(blocks)
    return one(grade("gpu.health", {"nvidia-smi-q": capture("nvidia-smi-q", text)}, profile=profile, mode=mode))


def codes(r: Result) -> list[str]:
    return list(r.facts.get("codes", []))


def test_healthy_block_passes_and_says_what_it_graded() -> None:
    r = smi(block(), block("00000000:2A:00.0"))
    assert r.status is Status.PASS and "codes" not in r.facts
    assert r.summary == ("2 GPU(s) healthy in nvidia-smi -q: recovery action, reset status, remapped rows, ECC errors, "
                         "repair flags, ECC mode, clock event reasons, temperature, power limit")
    g = r.facts["gpus"][0]
    assert g["index"] == 0 and g["gpu"] == "GPU 0 (00000000:18:00.0)" and g["ecc_mode"] is True
    assert g["temperature_c"] == 35 and g["recovery_action"] == "None" and g["field_errors"] == []
    assert g["uncorrectable_ecc"] == 0 and g["uncorrectable_ecc_aggregate"] == 0
    assert g["remapped_rows_uncorrectable"] == 0 and g["banks_without_spare_rows"] == 0


@pytest.mark.parametrize(("kw", "code", "status", "summary", "remedy"), [
    ({"pending": "Yes", "unc": "2"}, "gpu.health/remap-pending", Status.FAIL,
     "row remap pending (2 rows remapped for uncorrectable errors)", "nvidia-smi -r -i 00000000:18:00.0"),
    ({"failure": "Yes"}, "gpu.health/remap-failure", Status.FAIL, "row remapping failed", "RMA"),
    ({"none": "3 bank(s)"}, "gpu.health/banks-without-spare-rows", Status.WARN,
     "3 memory bank(s) have no spare rows left", "plan an RMA"),
    ({"vol": "1", "agg": "1"}, "gpu.health/volatile-uncorrectable-ecc", Status.FAIL,
     "1 volatile uncorrectable ECC error(s)", "reset GPU 1 (nvidia-smi -r -i 00000000:18:00.0)"),
    ({"agg": "2"}, "gpu.health/aggregate-uncorrectable-ecc", Status.WARN,
     "2 uncorrectable ECC error(s) in the GPU's lifetime", "watch for new errors"),
    ({"thr": "Yes"}, "gpu.health/sram-threshold-exceeded", Status.FAIL,
     "SRAM uncorrectable error threshold exceeded", "drain the node and RMA the GPU"),
    ({"unrepairable": "Yes"}, "gpu.health/unrepairable-memory", Status.FAIL, "unrepairable memory reported",
     "drain the node and RMA the GPU"),
    ({"channel": "Yes"}, "gpu.health/channel-repair-pending", Status.FAIL, "memory channel repair pending",
     "drain until a reset applies the repair"),
    ({"tpc": "Yes"}, "gpu.health/tpc-repair-pending", Status.FAIL, "TPC repair pending",
     "drain until a reset applies the repair"),
    ({"reset": "Yes"}, "gpu.health/reset-required", Status.FAIL, "GPU reset required", "-r -i 00000000:18:00.0"),
    ({"drain": "Yes"}, "gpu.health/drain-and-reset-recommended", Status.FAIL, "drain and reset recommended",
     "once no process uses it"),
    ({"recovery": "Reset"}, "gpu.health/recovery-reset", Status.FAIL, "recovery action 'Reset'",
     "nvidia-smi -r -i 00000000:18:00.0"),
    ({"recovery": "GPU_RESET"}, "gpu.health/recovery-reset", Status.FAIL, "recovery action 'GPU_RESET'",
     "nvidia-smi -r -i 00000000:18:00.0"),
    ({"recovery": "Reboot"}, "gpu.health/recovery-reboot", Status.FAIL, "recovery action 'Reboot'", "reboot it"),
    ({"recovery": "Node Reboot"}, "gpu.health/recovery-reboot", Status.FAIL, "'Node Reboot'", "reboot it"),
    ({"recovery": "System Reboot"}, "gpu.health/recovery-reboot", Status.FAIL, "'System Reboot'", "reboot it"),
    ({"recovery": "Drain P2P"}, "gpu.health/recovery-drain-p2p", Status.FAIL, "'Drain P2P'",
     "stop peer-to-peer traffic"),
    ({"recovery": "Drain and Reset"}, "gpu.health/recovery-drain-and-reset", Status.FAIL, "'Drain and Reset'",
     "then reset the GPU (nvidia-smi -r -i 00000000:18:00.0)"),
    ({"recovery": "Bus Reset"}, "gpu.health/recovery-bus-reset", Status.FAIL, "'Bus Reset'", "PCIe bus"),
    ({"recovery": "Recover IMEX Domain"}, "gpu.health/recovery-imex-domain", Status.FAIL, "'Recover IMEX Domain'",
     "nvidia-imex"),
    ({"recovery": "Quarantine"}, "gpu.health/recovery-unknown", Status.WARN, "'Quarantine'",
     "which preflight does not know"),
    ({"ecc": ("Disabled", "Disabled")}, "gpu.health/ecc-disabled", Status.WARN, "ECC is disabled",
     "nvidia-smi -e 1 -i 00000000:18:00.0"),
    ({"ecc": ("Enabled", "Disabled")}, "gpu.health/ecc-mode-change-pending", Status.WARN,
     "an ECC mode change waits for a GPU reset", "to apply the pending ECC mode"),
    ({"temp": ("91 C", "-9 C")}, "gpu.health/temperature-shutdown", Status.FAIL, "at or past its shutdown",
     "cooling"),
    ({"temp": ("85 C", "-2 C")}, "gpu.health/temperature-slowdown", Status.WARN, "at or past its slowdown",
     "cooling"),
    ({"temp": ("83 C", "0 C")}, "gpu.health/temperature-over-max-operating", Status.WARN,
     "at or past its maximum operating temperature", "cooling"),
    ({"power": ("500.00 W", "700.00 W")}, "gpu.health/power-limit-below-default", Status.WARN,
     "power limit 500 W is below the default 700 W", "nvidia-smi -pl 700 -i 00000000:18:00.0"),
    ({"slow": "Active", "thermal": "Active", "util": "97 %"}, "gpu.health/clock-slowdown-busy", Status.WARN,
     "hardware clock slowdown active (HW Slowdown, HW Thermal Slowdown)", "cooling"),
    ({"thermal": "Active", "util": "0 %"}, "gpu.health/clock-slowdown-idle", Status.WARN,
     "hardware clock slowdown active (HW Thermal Slowdown)", "cooling"),
])
def test_each_finding_has_its_code(kw: dict, code: str, status: Status, summary: str, remedy: str) -> None:
    r = smi(block("00000000:2A:00.0"), block(**kw))
    assert codes(r) == [code], (r.summary, r.evidence)
    assert r.status is status
    assert r.summary.startswith("GPU 1 (00000000:18:00.0): ") and summary in r.summary, r.summary
    assert remedy in r.remedy, r.remedy
    assert r.evidence and all("00000000:2A:00.0" not in e for e in r.evidence)


def test_recovery_none_spellings_are_no_action() -> None:
    for value in ("None", "NONE", "GPU_RECOVERY_ACTION_NONE", "No action needed"):
        assert smi(block(recovery=value)).status is Status.PASS, value


def test_slowdown_reasons_from_the_profile() -> None:
    # busy: HW Power Brake is on the generic warn list; idle it is not (healthy idle HGX boards show it)
    assert codes(smi(block(slow="Active", brake="Active", util="40 %"))) == ["gpu.health/clock-slowdown-busy"]
    assert smi(block(slow="Active", brake="Active", util="0 %")).status is Status.PASS
    # busy from 1 %: the generic gpu.busy_util_pct
    assert codes(smi(block(brake="Active", util="1 %"))) == ["gpu.health/clock-slowdown-busy"]


def test_busy_when_utilization_is_not_shown() -> None:
    text = block(brake="Active").replace("    Utilization\n        GPU                                        : 0 %\n",
                                         "")
    r = smi(text)
    assert codes(r) == ["gpu.health/clock-slowdown-busy"] and r.facts["gpus"][0]["utilization"] is None


def test_temperature_absolute_layout_thresholds() -> None:
    r = one(grade("gpu.health", q("q_d_temperature_old_layout_hot.txt"), mode="analyze"))
    assert set(codes(r)) == {"gpu.health/temperature-slowdown", "gpu.health/memory-temperature-over-max"}
    assert r.summary.startswith("GPU 1 (00000000:AF:00.0): GPU temperature at or past its slowdown temperature")
    assert "GPU 1 (00000000:AF:00.0) [Temperature] GPU Slowdown Temp : 95 C" in r.evidence
    assert "GPU 1 (00000000:AF:00.0) [Temperature] Memory Max Operating Temp : 95 C" in r.evidence
    assert r.facts["gpus"][1]["temperature_c"] == 96 and r.facts["gpus"][0]["shown"] == ["temperature"]


@pytest.mark.parametrize(("current", "code"), [("92 C", ""), ("93 C", "gpu.health/temperature-over-max-operating"),
                                               ("95 C", "gpu.health/temperature-slowdown"),
                                               ("98 C", "gpu.health/temperature-shutdown")])
def test_temperature_boundaries(current: str, code: str) -> None:
    text = (f"GPU 00000000:3B:00.0\n    Temperature\n        GPU Current Temp : {current}\n"
            "        GPU Shutdown Temp : 98 C\n        GPU Slowdown Temp : 95 C\n        GPU Max Operating Temp : 93 C\n"
            "        Memory Current Temp : 94 C\n        Memory Max Operating Temp : 95 C\n")
    assert codes(smi(text)) == ([code] if code else [])


@pytest.mark.parametrize(("margin", "code"), [("1 C", ""), ("0 C", "gpu.health/temperature-over-max-operating"),
                                              ("-1 C", "gpu.health/temperature-over-max-operating"),
                                              ("-2 C", "gpu.health/temperature-slowdown"),
                                              ("-8 C", "gpu.health/temperature-shutdown")])
def test_temperature_margin_boundaries(margin: str, code: str) -> None:
    assert codes(smi(block(temp=("80 C", margin)))) == ([code] if code else [])


def test_power_limit_equal_or_above_default_is_fine() -> None:
    assert smi(block(power=("700.00 W", "700.00 W"))).status is Status.PASS
    assert smi(block(power=("700.00 W", "600.00 W"))).status is Status.PASS
    assert smi(block(power=("699.50 W", "700.00 W"))).status is Status.WARN
    assert smi(block(power=("N/A", "700.00 W"))).status is Status.PASS


def test_old_power_section_enforced_limit() -> None:
    text = ("GPU 00000000:07:00.0\n    Power Readings\n        Power Draw : 54.35 W\n        Power Limit : 400.00 W\n"
            "        Default Power Limit : 400.00 W\n        Enforced Power Limit : 300.00 W\n")
    r = smi(text)
    assert codes(r) == ["gpu.health/power-limit-below-default"] and "300 W" in r.summary
    assert "GPU 0 (00000000:07:00.0) [Power Readings] Enforced Power Limit : 300.00 W" in r.evidence
    text = text.replace("        Enforced Power Limit : 300.00 W\n", "").replace("Power Limit : 400.00 W\n        D",
                                                                                 "Power Limit : 250.00 W\n        D")
    assert "250 W" in smi(text).summary


def test_field_errors_one_finding_per_kind() -> None:
    r = one(grade("gpu.health", q("q_d_ecc_row_remapper_field_errors.txt"), mode="analyze"))
    assert r.status is Status.ERROR and codes(r) == ["gpu.health/field-unreadable"]
    assert r.summary == "GPU 1 (00000000:3B:00.0): health fields read 'Unknown Error' instead of a value (17 fields)"
    assert "GPU 1 (00000000:3B:00.0) [Remapped Rows] Pending : Unknown Error" in r.evidence
    assert "nvidia-smi -q -i 00000000:3B:00.0" in r.remedy
    g = r.facts["gpus"][1]
    assert g["remapped_pending"] is None and g["uncorrectable_ecc"] is None and len(g["field_errors"]) == 17


def test_field_errors_requires_reset_and_lost() -> None:
    text = block(pending="GPU requires reset", vol="[GPU requires reset]")
    r = smi(text)
    assert codes(r) == ["gpu.health/needs-reset"] and "(2 fields)" in r.summary
    r = smi(block(recovery="GPU is lost"))
    assert codes(r) == ["gpu.health/gpu-lost"] and r.summary == "GPU 0 (00000000:18:00.0): the driver says the GPU " \
                                                                 "is lost" and "Xid 79" in r.remedy


def test_unknown_error_outside_health_sections_is_not_graded() -> None:
    text = block().replace("    Product Name                                   : NVIDIA H100 80GB HBM3",
                           "    Product Name                                   : Unknown Error")
    assert smi(text).status is Status.PASS


def test_fragment_without_health_fields_is_skip_not_pass() -> None:
    r = one(grade("gpu.health", q("q_d_memory_no_health_fields.txt"), mode="analyze"))
    assert r.status is Status.SKIP and codes(r) == ["gpu.health/nothing-to-grade"]
    assert r.summary.startswith("not recognised: no GPU health field")
    assert r.evidence == ["fields shown: BAR1 Memory Usage/Free, BAR1 Memory Usage/Total, BAR1 Memory Usage/Used, "
                          "Conf Compute Protected Memory Usage/Free, Conf Compute Protected Memory Usage/Total, "
                          "Conf Compute Protected Memory Usage/Used, FB Memory Usage/Free, FB Memory Usage/Reserved"]
    assert "ROW_REMAPPER" in r.remedy


def test_all_na_health_fields_is_nothing_to_grade() -> None:
    text = "GPU 00000000:18:00.0\n    Remapped Rows : N/A\n    Retired Pages\n        Single Bit ECC : N/A\n"
    assert codes(smi(text, mode="analyze")) == ["gpu.health/nothing-to-grade"]


def qa(name: str) -> Result:
    """A fixture graded as analyze reads a paste (prompts and grep separators framed)."""
    return one(grade_text("gpu.health", {"nvidia-smi-q": fixture_text(Q + name)}))


def test_d_subset_for_one_gpu_pending_fails_with_its_bus() -> None:
    r = qa("q_d_ecc_row_remapper_i_bus_535_pending.txt")
    assert r.status is Status.FAIL and codes(r) == ["gpu.health/remap-pending"]
    assert r.summary == "GPU 00000000:9B:00.0: row remap pending"
    assert "reset GPU 00000000:9B:00.0 (nvidia-smi -r -i 00000000:9B:00.0)" in r.remedy
    assert r.facts["command"] == "nvidia-smi -q -d ECC,ROW_REMAPPER -i 00000000:9B:00.0"
    assert r.facts["gpus"][0]["shown"] == ["ecc", "ecc_mode", "remap", "repair"]


def test_grep_excerpt_pending_on_the_sixth_gpu() -> None:
    r = qa("grep_A_remapped_rows_8gpu_gpu5_pending.txt")
    assert r.status is Status.FAIL and codes(r) == ["gpu.health/remap-pending"]
    assert r.summary == "GPU #6 of the excerpt (bus id not shown): row remap pending (3 rows remapped for " \
                        "uncorrectable errors)"
    assert "reset the GPU (nvidia-smi -r -i <its index or bus id>)" in r.remedy
    assert len(r.facts["gpus"]) == 8  # an excerpt of 8 blocks is not a truncated listing


def test_selected_gpus_are_not_a_truncated_listing() -> None:
    text = HEAD.format(n=8) + block() + block("00000000:2A:00.0")
    caps = {"nvidia-smi-q": capture("nvidia-smi-q", text, argv=["nvidia-smi", "-q", "-i", "0,1"])}
    r = one(grade("gpu.health", caps))
    assert r.status is Status.PASS, r.summary


def test_truncated_listing_code() -> None:
    r = one(grade("gpu.health", q("h100x8_535_truncated.txt")))
    assert codes(r) == ["gpu.health/gpus-missing-from-output"] and r.evidence == ["Attached GPUs : 8"]


def test_lost_gpu_and_reset_refused_codes() -> None:
    r = one(grade("gpu.health", q("h100x8_535_gpu_lost.txt", rc=15), profile="h100-sxm-8x"))
    assert codes(r) == ["gpu.health/gpu-lost", "gpu.health/gpus-missing-from-output"]
    text = ("The following GPUs could not be reset:\n  GPU 00000000:55:00.0: In use by another client\n\n"
            "1 device is currently being used by one or more other processes (e.g., Fabric Manager, CUDA "
            "application, graphics application such as an X server, or a monitoring application such as another "
            "instance of nvidia-smi). Please first kill all processes using this device and all compute "
            "applications running in the system.\n")
    r = one(grade_text("gpu.health", {"nvidia-smi-q": text}))
    assert codes(r) == ["gpu.health/reset-refused"]
    assert r.summary == "GPU 00000000:55:00.0 could not be reset: In use by another client"


def test_requires_reset_message_outside_a_block() -> None:
    r = one(grade_text("gpu.health", {"nvidia-smi-q": "Unable to reset GPU 00000000:55:00.0: GPU requires reset\n"
                                                      "GPU requires reset\n"}))
    assert "gpu.health/needs-reset" in codes(r)


def test_tool_error_codes_and_garbage() -> None:
    r = one(grade("gpu.health", q("err_no_driver.txt", rc=9)))
    assert codes(r) == ["gpu.health/not-read-driver-error"]
    r = one(grade("gpu.health", {"nvidia-smi-q": capture("nvidia-smi-q", "hello\n")}))
    assert codes(r) == ["gpu.health/no-gpu-in-output"] and r.summary == "no GPU found in nvidia-smi -q output"
    assert grade("gpu.health", {"nvidia-smi-q": capture("nvidia-smi-q", "hello\n")}, mode="analyze") == []


def test_site_override_changes_a_status(tmp_path: Path) -> None:
    from preflight import policy

    token = policy.use(policy.builtin().with_overrides({"gpu.health/power-limit-below-default": "pass"}, "site"))
    try:
        r = smi(block(power=("500.00 W", "700.00 W")))
    finally:
        policy.reset(token)
    assert r.status is Status.PASS and r.facts["overrides"]["gpu.health/power-limit-below-default"]


# Every finding of one view, exactly: the summary after the GPU label, the evidence, the remedy.
G = "GPU 1 (00000000:18:00.0)"
EXACT = [
    ({'pending': 'Yes', 'unc': '2'},
     'row remap pending (2 rows remapped for uncorrectable errors)',
     [G + ' [Remapped Rows] Pending : Yes',
      G + ' [Remapped Rows] Uncorrectable Error : 2'],
     'drain until a GPU reset activates the remap: reset GPU 1 (nvidia-smi -r -i 00000000:18:00.0) '
     'or reboot, then return the node to service (not an RMA)'),
    ({'failure': 'Yes'},
     'row remapping failed (no spare rows left for a bad row)',
     [G + ' [Remapped Rows] Remapping Failure Occurred : Yes',
      G + ' [Remapped Rows] Uncorrectable Error : 0'],
     'drain the node and RMA the GPU: its memory can no longer repair itself'),
    ({'none': '3 bank(s)'},
     '3 memory bank(s) have no spare rows left',
     [G + ' [Remapped Rows/Bank Remap Availability Histogram] None : 3 bank(s)'],
     'the next uncorrectable error in those banks cannot be remapped: plan an RMA'),
    ({'vol': '1', 'agg': '1'},
     '1 volatile uncorrectable ECC error(s)',
     [G + ' [ECC Errors/Volatile] DRAM Uncorrectable : 1',
      'profile generic: gpu.max_uncorrectable_ecc = 0 (NVIDIA GPU Memory Error Management: any '
      'uncorrectable error needs attention)'],
     'drain; reset GPU 1 (nvidia-smi -r -i 00000000:18:00.0) or reboot to clear them; if they come '
     'back, check Remapped Rows / Retired Pages and RMA the GPU'),
    ({'agg': '2'},
     "2 uncorrectable ECC error(s) in the GPU's lifetime (aggregate)",
     [G + ' [ECC Errors/Aggregate] DRAM Uncorrectable : 2',
      'profile generic: gpu.max_uncorrectable_ecc = 0 (NVIDIA GPU Memory Error Management: any '
      'uncorrectable error needs attention)'],
     'none since the last reset: check that the bad memory was retired (Remapped Rows, or Retired '
     'Pages on older GPUs), watch for new errors, RMA the GPU if they recur'),
    ({'thr': 'Yes'},
     'SRAM uncorrectable error threshold exceeded',
     [G + ' [ECC Errors/Aggregate] SRAM Threshold Exceeded : Yes'],
     'drain the node and RMA the GPU'),
    ({'unrepairable': 'Yes'},
     'unrepairable memory reported',
     [G + ' [ECC Errors] Unrepairable Memory : Yes'],
     'drain the node and RMA the GPU'),
    ({'channel': 'Yes'},
     'memory channel repair pending',
     [G + ' [ECC Errors] Channel Repair Pending : Yes'],
     'drain until a reset applies the repair: reset GPU 1 (nvidia-smi -r -i 00000000:18:00.0) or '
     'reboot'),
    ({'tpc': 'Yes'},
     'TPC repair pending',
     [G + ' [ECC Errors] TPC Repair Pending : Yes'],
     'drain until a reset applies the repair: reset GPU 1 (nvidia-smi -r -i 00000000:18:00.0) or '
     'reboot'),
    ({'reset': 'Yes'},
     'GPU reset required',
     [G + ' [GPU Reset Status] Reset Required : Yes'],
     'drain the node and reset the GPU (nvidia-smi -r -i 00000000:18:00.0) once no process uses it, '
     'or reboot'),
    ({'drain': 'Yes'},
     'drain and reset recommended',
     [G + ' [GPU Reset Status] Drain and Reset Recommended : Yes'],
     'drain the node and reset the GPU (nvidia-smi -r -i 00000000:18:00.0) once no process uses it, '
     'or reboot'),
    ({'recovery': 'Reset'},
     "driver requests recovery action 'Reset'",
     [G + ' GPU Recovery Action : Reset'],
     'drain the node and reset the GPU (nvidia-smi -r -i 00000000:18:00.0) once no process uses it, '
     'or reboot'),
    ({'recovery': 'GPU_RESET'},
     "driver requests recovery action 'GPU_RESET'",
     [G + ' GPU Recovery Action : GPU_RESET'],
     'drain the node and reset the GPU (nvidia-smi -r -i 00000000:18:00.0) once no process uses it, '
     'or reboot'),
    ({'recovery': 'Reboot'},
     "driver requests recovery action 'Reboot'",
     [G + ' GPU Recovery Action : Reboot'],
     'drain the node and reboot it (the driver asks for a node reboot)'),
    ({'recovery': 'Node Reboot'},
     "driver requests recovery action 'Node Reboot'",
     [G + ' GPU Recovery Action : Node Reboot'],
     'drain the node and reboot it (the driver asks for a node reboot)'),
    ({'recovery': 'System Reboot'},
     "driver requests recovery action 'System Reboot'",
     [G + ' GPU Recovery Action : System Reboot'],
     'drain the node and reboot it (the driver asks for a node reboot)'),
    ({'recovery': 'Drain P2P'},
     "driver requests recovery action 'Drain P2P'",
     [G + ' GPU Recovery Action : Drain P2P'],
     'drain the node: stop peer-to-peer traffic to this GPU, then reset it (nvidia-smi -r -i '
     '00000000:18:00.0)'),
    ({'recovery': 'Drain and Reset'},
     "driver requests recovery action 'Drain and Reset'",
     [G + ' GPU Recovery Action : Drain and Reset'],
     'drain the node, then reset the GPU (nvidia-smi -r -i 00000000:18:00.0) once no process uses '
     'it'),
    ({'recovery': 'Bus Reset'},
     "driver requests recovery action 'Bus Reset'",
     [G + ' GPU Recovery Action : Bus Reset'],
     "drain the node and reset the GPU's PCIe bus (or reboot)"),
    ({'recovery': 'Recover IMEX Domain'},
     "driver requests recovery action 'Recover IMEX Domain'",
     [G + ' GPU Recovery Action : Recover IMEX Domain'],
     "drain the node and recover its IMEX domain (restart nvidia-imex on the domain's nodes)"),
    ({'recovery': 'Quarantine'},
     "driver requests recovery action 'Quarantine'",
     [G + ' GPU Recovery Action : Quarantine'],
     "the driver asks for recovery action 'Quarantine', which preflight does not know: read "
     "NVIDIA's GPU memory error management guide for it, and drain the node until it is done"),
    ({'ecc': ('Disabled', 'Disabled')},
     'ECC is disabled',
     [G + ' [ECC Mode] Current : Disabled'],
     'enable it (nvidia-smi -e 1 -i 00000000:18:00.0) and reset the GPU or reboot: without ECC, '
     'memory errors corrupt results silently'),
    ({'ecc': ('Enabled', 'Disabled')},
     'an ECC mode change waits for a GPU reset',
     [G + ' [ECC Mode] Pending : Disabled',
      G + ' [ECC Mode] Current : Enabled'],
     'reset GPU 1 (nvidia-smi -r -i 00000000:18:00.0) or reboot to apply the pending ECC mode'),
    ({'temp': ('91 C', '-9 C')},
     'GPU temperature at or past its shutdown temperature',
     [G + ' [Temperature] GPU Current Temp : 91 C',
      G + ' [Temperature] GPU T.Limit Temp : -9 C',
      G + ' [Temperature] GPU Shutdown T.Limit Temp : -8 C',
      G + ' [Temperature] GPU Slowdown T.Limit Temp : -2 C',
      G + ' [Temperature] GPU Max Operating T.Limit Temp : 0 C'],
     'drain the GPU until it is cool; check cooling (inlet air temperature, fans, airflow, heatsink '
     "contact) and the GPU's clocks"),
    ({'temp': ('85 C', '-2 C')},
     'GPU temperature at or past its slowdown temperature',
     [G + ' [Temperature] GPU Current Temp : 85 C',
      G + ' [Temperature] GPU T.Limit Temp : -2 C',
      G + ' [Temperature] GPU Shutdown T.Limit Temp : -8 C',
      G + ' [Temperature] GPU Slowdown T.Limit Temp : -2 C',
      G + ' [Temperature] GPU Max Operating T.Limit Temp : 0 C'],
     'drain the GPU until it is cool; check cooling (inlet air temperature, fans, airflow, heatsink '
     "contact) and the GPU's clocks"),
    ({'temp': ('83 C', '0 C')},
     'GPU temperature at or past its maximum operating temperature',
     [G + ' [Temperature] GPU Current Temp : 83 C',
      G + ' [Temperature] GPU T.Limit Temp : 0 C',
      G + ' [Temperature] GPU Shutdown T.Limit Temp : -8 C',
      G + ' [Temperature] GPU Slowdown T.Limit Temp : -2 C',
      G + ' [Temperature] GPU Max Operating T.Limit Temp : 0 C'],
     'drain the GPU until it is cool; check cooling (inlet air temperature, fans, airflow, heatsink '
     "contact) and the GPU's clocks"),
    ({'power': ('500.00 W', '700.00 W')},
     'power limit 500 W is below the default 700 W',
     [G + ' [GPU Power Readings] Current Power Limit : 500.00 W',
      G + ' [GPU Power Readings] Default Power Limit : 700.00 W'],
     'the GPU runs capped: restore the default limit (nvidia-smi -pl 700 -i 00000000:18:00.0) '
     'unless the site caps power on purpose'),
    ({'slow': 'Active', 'thermal': 'Active', 'util': '97 %'},
     'hardware clock slowdown active (HW Slowdown, HW Thermal Slowdown)',
     [G + ' [Clocks Event Reasons] HW Slowdown : Active',
      G + ' [Clocks Event Reasons] HW Thermal Slowdown : Active',
      G + ' [Utilization] GPU : 97 %',
      "profile generic: gpu.clock_events_warn = ['HW Slowdown', 'HW Thermal Slowdown', 'HW Power "
      "Brake Slowdown'] (nvidia-smi clock event reasons that cut clocks in hardware (nvidia-smi -q "
      '-d PERFORMANCE); WARN when Active on a working GPU)'],
     "check cooling (inlet air, fans, heatsink) and power (PSU redundancy, the baseboard's "
     'power-brake signal); `nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER` shows which'),
    ({'thermal': 'Active', 'util': '0 %'},
     'hardware clock slowdown active (HW Thermal Slowdown)',
     [G + ' [Clocks Event Reasons] HW Thermal Slowdown : Active',
      G + ' [Utilization] GPU : 0 %',
      "profile generic: gpu.clock_events_warn_idle = ['HW Thermal Slowdown'] (a GPU that throttles "
      'for heat while idle has a cooling fault; HW Slowdown / Power Brake also show during P-state '
      'changes and read Active on healthy idle HGX H100 (corpus 8xH100 535.161.08))'],
     "check cooling (inlet air, fans, heatsink) and power (PSU redundancy, the baseboard's "
     'power-brake signal); `nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER` shows which'),
]


@pytest.mark.parametrize(("kw", "summary", "evidence", "remedy"), EXACT)
def test_each_finding_exactly(kw: dict, summary: str, evidence: list[str], remedy: str) -> None:
    r = smi(block("00000000:2A:00.0"), block(**kw))
    assert (r.summary, r.evidence, r.remedy) == (f"{G}: {summary}", evidence, remedy)


# ---------------------------------------------------------------------------------------
# page retirement (pre-Ampere): the table's size and the near-full rule come from the profile


def retired(sbe: int, dbe: int, pending: str) -> str:
    return (f"GPU 00000000:18:00.0\n    Retired Pages\n        Single Bit ECC : {sbe}\n"
            f"        Double Bit ECC : {dbe}\n        Pending Page Blacklist : {pending}\n")


@pytest.mark.parametrize(("sbe", "dbe", "pending", "want", "summary"), [
    (60, 4, "No", ["gpu.health/retired-pages-table-full"], "page retirement table full (64 pages retired)"),
    (62, 1, "No", ["gpu.health/retired-pages-dbe"], "1 page(s) retired after double-bit ECC errors"),
    (61, 1, "Yes", ["gpu.health/retired-pages-table-full"], "page retirement table full (62 pages retired, more "
                                                            "pending)"),
    (60, 1, "Yes", ["gpu.health/retired-pages-pending", "gpu.health/retired-pages-dbe"], "page retirement pending"),
    (2, 0, "Yes", ["gpu.health/retired-pages-pending"], "page retirement pending"),
    (2, 0, "No", [], "1 GPU(s) healthy in nvidia-smi -q: retired pages"),
])
def test_page_retirement(sbe: int, dbe: int, pending: str, want: list[str], summary: str) -> None:
    r = smi(retired(sbe, dbe, pending))
    assert codes(r) == want and summary in r.summary, r.summary


def test_page_retirement_evidence_names_the_profile_rule() -> None:
    r = smi(retired(61, 1, "Yes"))
    assert r.evidence == [
        "GPU 0 (00000000:18:00.0) [Retired Pages] Single Bit ECC : 61",
        "GPU 0 (00000000:18:00.0) [Retired Pages] Double Bit ECC : 1",
        "GPU 0 (00000000:18:00.0) [Retired Pages] Pending Page Blacklist : Yes",
        "profile generic: gpu.retired_pages_full_pending = 62 (Azure HPC node health checks: 62 or more retired "
        "pages with more pending = retirement table full)"]
    assert r.remedy == ("the GPU's page retirement table is exhausted: drain the node and RMA the GPU (NVIDIA retires "
                        "at most 64 pages per GPU)")
    r = smi(retired(60, 4, "No"))
    assert r.evidence[-1].startswith("profile generic: gpu.retired_pages_table = 64 (")
    r = smi(retired(2, 0, "Yes"))
    assert r.remedy == "drain; reset GPU 0 (nvidia-smi -r -i 00000000:18:00.0) or reboot so the pending pages are retired"
    r = smi(retired(0, 2, "No"))
    assert r.evidence == ["GPU 0 (00000000:18:00.0) [Retired Pages] Double Bit ECC : 2",
                          "profile generic: gpu.max_retired_pages = 0 (NVIDIA dynamic page retirement: pages retired "
                          "on DBE are a memory fault)"]
    assert "raise gpu.max_retired_pages" in r.remedy


def test_page_retirement_old_pending_label() -> None:
    r = smi(retired(1, 0, "No").replace("Pending Page Blacklist", "Pending"))
    assert r.facts["gpus"][0]["retired_pages_pending"] is False and r.status is Status.PASS


def test_profile_without_thresholds_grades_what_it_can(tmp_path: Path) -> None:
    p = tmp_path / "bare.toml"
    p.write_text('[profile]\nname = "bare"\n[tools]\nrequired = []\n')
    r = smi(retired(70, 3, "Yes"), profile=str(p))
    assert codes(r) == ["gpu.health/retired-pages-pending"]  # no table size, no DBE limit in this profile
    r = smi(block(vol="3", brake="Active", util="50 %"), profile=str(p))
    assert codes(r) == []


def test_busy_threshold_from_the_profile(tmp_path: Path) -> None:
    p = tmp_path / "busy.toml"
    p.write_text('[profile]\nname = "busy"\nextends = "generic"\n[gpu]\nbusy_util_pct = { value = 50, source = "s" }\n')
    assert smi(block(brake="Active", util="49 %"), profile=str(p)).status is Status.PASS
    assert codes(smi(block(brake="Active", util="50 %"), profile=str(p))) == ["gpu.health/clock-slowdown-busy"]


# ---------------------------------------------------------------------------------------
# the --query-gpu CSV and the default table as sources


CSV_HEAD = ("index, pci.bus_id, utilization.gpu [%], ecc.mode.current, ecc.mode.pending, "
            "ecc.errors.uncorrected.volatile.total, ecc.errors.uncorrected.aggregate.total, "
            "ecc.errors.uncorrected.aggregate.sram.thresholdExceeded, retired_pages.single_bit_ecc.count, "
            "retired_pages.double_bit.count, retired_pages.pending, remapped_rows.uncorrectable, "
            "remapped_rows.pending, remapped_rows.failure, remapped_rows.histogram.none, gpu_recovery_action, "
            "clocks_event_reasons.hw_slowdown, clocks_throttle_reasons.hw_thermal_slowdown, "
            "enforced.power.limit [W], power.default_limit [W], temperature.gpu\n")


def csv_row(i: int, *, vol: str = "0", agg: str = "0", thr: str = "No", pending: str = "No", failure: str = "No",
            unc: str = "0", none: str = "0", recovery: str = "None", slow: str = "Not Active",
            thermal: str = "Not Active", util: str = "0 %", ecc: str = "Enabled", limit: str = "700.00 W",
            rp: tuple[str, str, str] = ("[N/A]", "[N/A]", "[N/A]")) -> str:
    return (f"{i}, 00000000:{0x18 + i:02X}:00.0, {util}, {ecc}, {ecc}, {vol}, {agg}, {thr}, {rp[0]}, {rp[1]}, {rp[2]}, "
            f"{unc}, {pending}, {failure}, {none}, {recovery}, {slow}, {thermal}, {limit}, 700.00 W, 41\n")


def csv(*rows: str) -> Result:
    return one(grade("gpu.health", {"nvidia-smi-query": capture("nvidia-smi-query", CSV_HEAD + "".join(rows))},
                     mode="analyze"))


def test_csv_healthy() -> None:
    r = csv(csv_row(0), csv_row(1))
    assert r.status is Status.PASS
    assert r.summary == ("2 GPU(s) healthy in the --query-gpu CSV: recovery action, remapped rows, ECC errors, repair "
                         "flags, ECC mode, clock event reasons, power limit")
    g = r.facts["gpus"][1]
    assert g["gpu"] == "GPU 1 (00000000:19:00.0)" and g["temperature_c"] == 41 and g["utilization"] == 0


@pytest.mark.parametrize(("kw", "want"), [
    ({"vol": "2"}, "gpu.health/volatile-uncorrectable-ecc"), ({"agg": "1"}, "gpu.health/aggregate-uncorrectable-ecc"),
    ({"thr": "Yes"}, "gpu.health/sram-threshold-exceeded"), ({"pending": "Yes"}, "gpu.health/remap-pending"),
    ({"failure": "Yes"}, "gpu.health/remap-failure"), ({"none": "1"}, "gpu.health/banks-without-spare-rows"),
    ({"recovery": "Drain P2P"}, "gpu.health/recovery-drain-p2p"), ({"ecc": "Disabled"}, "gpu.health/ecc-disabled"),
    ({"slow": "Active", "util": "80 %"}, "gpu.health/clock-slowdown-busy"),
    ({"thermal": "Active"}, "gpu.health/clock-slowdown-idle"),
    ({"limit": "450.00 W"}, "gpu.health/power-limit-below-default"),
    ({"rp": ("1", "0", "Yes")}, "gpu.health/retired-pages-pending"),
    ({"pending": "[GPU requires reset]"}, "gpu.health/needs-reset"),
    ({"unc": "[Unknown Error]"}, "gpu.health/field-unreadable"),
])
def test_csv_findings(kw: dict, want: str) -> None:
    r = csv(csv_row(0), csv_row(1, **kw))
    assert codes(r) == [want], r.summary
    assert r.summary.startswith("GPU 1 (00000000:19:00.0): ")


def test_csv_evidence_quotes_the_column() -> None:
    r = csv(csv_row(0, pending="Yes", unc="2"))
    assert r.evidence == ["GPU 0 (00000000:18:00.0) remapped_rows.pending=Yes",
                          "GPU 0 (00000000:18:00.0) remapped_rows.uncorrectable=2"]
    r = csv(csv_row(0, thr="Yes"))
    assert r.evidence == ["GPU 0 (00000000:18:00.0) ecc.errors.uncorrected.aggregate.sram.thresholdexceeded=Yes"]


def test_csv_without_index_or_bus_uses_the_position() -> None:
    text = "ecc.errors.uncorrected.volatile.total, remapped_rows.pending\n0, No\n3, No\n"
    r = one(grade("gpu.health", {"nvidia-smi-query": capture("nvidia-smi-query", text)}, mode="analyze"))
    assert codes(r) == ["gpu.health/volatile-uncorrectable-ecc"] and r.summary.startswith("GPU 1: 3 volatile")


def test_csv_without_health_columns_is_left_to_inventory() -> None:
    text = "index, name, pci.bus_id\n0, NVIDIA H100 80GB HBM3, 00000000:18:00.0\n"
    assert grade("gpu.health", {"nvidia-smi-query": capture("nvidia-smi-query", text)}, mode="analyze") == []


def test_q_fragment_without_health_gives_way_to_the_csv() -> None:
    caps = {"nvidia-smi-q": capture("nvidia-smi-q", fixture_text(Q + "q_d_memory_no_health_fields.txt")),
            "nvidia-smi-query": capture("nvidia-smi-query", CSV_HEAD + csv_row(0, pending="Yes"))}
    r = one(grade("gpu.health", caps, mode="analyze"))
    assert r.facts["source"] == "the --query-gpu CSV" and codes(r) == ["gpu.health/remap-pending"]


def test_table_summary_and_source() -> None:
    r = one(grade("gpu.health", table(_row(0, "1B")), mode="analyze"))
    assert r.summary == ("1 GPU(s) healthy in the nvidia-smi table: volatile uncorrectable ECC and sensors (the table "
                         "does not show row remapping; `nvidia-smi -q` does)")
    assert r.facts["source"] == "the nvidia-smi table" and r.facts["gpus"][0]["gpu"] == "GPU 0 (00000000:1B:00.0)"


def test_table_sensor_codes_and_evidence() -> None:
    r = one(grade("gpu.health", table(_row(0, "1B"), _row(1, "43", fan="ERR!")), mode="analyze"))
    assert codes(r) == ["gpu.health/fan-unreadable"]
    assert r.summary == "GPU 1 (00000000:43:00.0): fan reading is ERR! (fan or its tachometer failed)"
    assert len(r.evidence) == 2 and r.evidence[1].startswith("GPU 1 (00000000:43:00.0) |   1  NVIDIA H100")
    assert r.evidence[0].startswith("GPU 1 (00000000:43:00.0) | ERR!")  # the row that holds the ERR! is shown
    r = one(grade("gpu.health", table(_row(0, "1B", pw="ERR!")), mode="analyze"))
    assert codes(r) == ["gpu.health/power-unreadable"] and r.status is Status.WARN
    assert r.summary == "GPU 0 (00000000:1B:00.0): power reading is ERR! (temperature and memory read normally)"
    assert r.remedy.startswith("the power sensor read failed (often transient on passthrough VMs): read it again")
    r = one(grade("gpu.health", table(_row(0, "1B", pw="ERR!", fan="ERR!")), mode="analyze"))
    assert codes(r) == ["gpu.health/telemetry-unreadable"]
    r = one(grade("gpu.health", table(_row(0, "1B", temp="ERR!", pw="ERR!")), mode="analyze"))
    assert codes(r) == ["gpu.health/telemetry-unreadable"]
    assert r.summary == "GPU 0 (00000000:1B:00.0): GPU telemetry unreadable (ERR! in temp, power_usage)"
    assert r.remedy.startswith("the GPU's own sensors cannot be read: drain, reset GPU 0 (nvidia-smi -r -i "
                               "00000000:1B:00.0) or reboot")


# ---------------------------------------------------------------------------------------
# messages in place of data, registration


def test_message_without_a_bus_id() -> None:
    r = one(grade_text("gpu.health", {"nvidia-smi-q": "Unable to determine the device handle for gpu: GPU is lost\n"}))
    assert codes(r) == ["gpu.health/gpu-lost"] and r.summary.startswith("GPU ?: a GPU does not answer the driver")
    assert r.facts["lost"] == ["Unable to determine the device handle for gpu: GPU is lost"]


def test_registration() -> None:
    c = registry.load().checks["gpu.health"]
    assert c.required == ("nvidia-smi-q",) and c.inputs == ("nvidia-smi-q", "nvidia-smi-query", "nvidia-smi-table")
    assert c.profile_keys == {"gpu.max_uncorrectable_ecc": int, "gpu.max_retired_pages": int,
                              "gpu.retired_pages_table": int, "gpu.retired_pages_full_pending": int,
                              "gpu.clock_events_warn": list, "gpu.clock_events_warn_idle": list,
                              "gpu.busy_util_pct": int}
    assert c.node_local and c.in_run and [p.name for p in c.probes] == ["nvidia-smi-q"]
    d = registry.load().checks["gpu.driver"]
    assert d.inputs == ("nvidia-smi-q", "nvml", "kernel-log", "driver-version") and d.required == ()
    assert d.profile_keys == {"gpu.driver_version": str, "gpu.cuda_version": str}
    assert [p.name for p in d.probes] == ["nvidia-smi-q", "nvml"] and d.node_local and d.in_run


@pytest.mark.parametrize(("column", "value"), [
    ("ecc.errors.uncorrected.volatile.total", "0"), ("remapped_rows.pending", "No"), ("retired_pages.pending", "No"),
    ("reset_status.reset_required", "No"), ("gpu_recovery_action", "None"),
    ("clocks_event_reasons.hw_slowdown", "Not Active"), ("clocks_throttle_reasons.hw_slowdown", "Not Active")])
def test_each_kind_of_health_column_makes_the_csv_a_source(column: str, value: str) -> None:
    caps = {"nvidia-smi-query": capture("nvidia-smi-query", f"index, {column}\n0, {value}\n"),
            "nvidia-smi-table": capture("nvidia-smi-table", _TABLE_HEAD + _ROW.format(**_row(0, "1B", ecc="4")))}
    r = one(grade("gpu.health", caps, mode="analyze"))
    assert r.facts["source"] == "the --query-gpu CSV"


def test_csv_without_health_columns_gives_way_to_the_table() -> None:
    caps = {"nvidia-smi-query": capture("nvidia-smi-query", "index, name\n0, NVIDIA H100 80GB HBM3\n"),
            "nvidia-smi-table": capture("nvidia-smi-table", _TABLE_HEAD + _ROW.format(**_row(0, "1B", ecc="4")))}
    r = one(grade("gpu.health", caps, mode="analyze"))
    assert r.facts["source"] == "the nvidia-smi table" and codes(r) == ["gpu.health/volatile-uncorrectable-ecc"]


def test_only_double_bit_pages_shown() -> None:
    r = smi("GPU 00000000:18:00.0\n    Retired Pages\n        Single Bit ECC : N/A\n        Double Bit ECC : 64\n")
    assert codes(r) == ["gpu.health/retired-pages-table-full"] and "(64 pages retired)" in r.summary


def test_error_in_a_block_and_a_message_after_it() -> None:
    text = block(pending="GPU requires reset") + "Unable to determine the device handle for GPU 0000:9D:00.0: " \
                                                  "Unknown Error\n"
    r = smi(text)
    assert codes(r) == ["gpu.health/needs-reset", "gpu.health/gpu-lost"]
    assert r.summary == ("GPU 0 (00000000:18:00.0): the driver says the GPU requires a reset; GPU 0000:9D:00.0: a GPU "
                         "does not answer the driver (Unknown Error)")


def test_exact_texts_of_the_rarer_results() -> None:
    r = one(grade("gpu.health", q("q_d_memory_no_health_fields.txt"), mode="analyze"))
    assert r.remedy == "run `nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT,PERFORMANCE` for the health fields"
    r = one(grade("gpu.health", {"nvidia-smi-q": capture("nvidia-smi-q", "hello\n")}))
    assert r.evidence == ["no GPU block, row or health field in the output"]
    assert r.remedy == ("run `nvidia-smi -q` by hand on node1; empty or garbled output means the tool or driver is in "
                        "trouble")
    r = one(grade("gpu.health", table(_row(0, "1B", fan="ERR!")), mode="analyze"))
    assert r.remedy == ("the temperature still reads normally: check the fan and its connector at the next maintenance "
                        "window and watch the GPU temperature until then")
    r = smi(block(recovery="GPU is lost"))
    assert r.remedy == ("the GPU fell off the bus or hung (Xid 79 class): drain the node and reboot it; reseat or RMA "
                        "the GPU if it happens again")
    r = smi(block(reset="[GPU requires reset]"))
    assert r.remedy == "drain the node and reset GPU 0 (nvidia-smi -r -i 00000000:18:00.0) or reboot"
    r = one(grade("gpu.health", q("h100x8_535_truncated.txt")))
    assert r.remedy == "run `nvidia-smi -q` by hand; a GPU missing from the listing is not healthy"
    r = one(grade("gpu.health", q("err_version_mismatch.txt", rc=9)))
    assert r.remedy.endswith("(see gpu.driver)") and r.remedy.startswith("the loaded NVIDIA kernel module and the "
                                                                         "user-space driver library differ: ")
    assert r.summary == "GPU health not read: Failed to initialize NVML: Driver/library version mismatch"


def test_temperature_evidence_shows_every_threshold() -> None:
    r = one(grade("gpu.health", q("q_d_temperature_old_layout_hot.txt"), mode="analyze"))
    gpu = "GPU 1 (00000000:AF:00.0) [Temperature] "
    assert r.evidence[:4] == [gpu + "GPU Current Temp : 96 C", gpu + "GPU Shutdown Temp : 98 C",
                              gpu + "GPU Slowdown Temp : 95 C", gpu + "GPU Max Operating Temp : 93 C"]
    assert r.evidence[4:] == [gpu + "Memory Current Temp : 97 C", gpu + "Memory Max Operating Temp : 95 C"]


# ---------------------------------------------------------------------------------------
# the views themselves


def test_view_facts_exactly() -> None:
    r = smi(block(recovery="Reset", reset="Yes", drain="Yes", thr="Yes", slow="Active", util="55 %"))
    g = r.facts["gpus"][0]
    assert g == {
        "index": 0, "gpu": "GPU 0 (00000000:18:00.0)", "uncorrectable_ecc": 0, "uncorrectable_ecc_aggregate": 0,
        "remapped_pending": False, "remapped_failure": False, "remapped_rows_uncorrectable": 0,
        "banks_without_spare_rows": 0, "retired_pages_sbe": None, "retired_pages_dbe": None,
        "retired_pages_pending": None, "recovery_action": "Reset", "reset_required": True,
        "drain_and_reset_recommended": True, "ecc_mode": True, "repairs": ["SRAM uncorrectable error threshold exceeded"],
        "clock_events_active": ["HW Slowdown"], "utilization": 55, "temperature_c": 35, "sensor_errors": [],
        "field_errors": [], "shown": ["clocks", "ecc", "ecc_mode", "power", "recovery", "remap", "repair", "reset",
                                      "temperature"]}


def test_view_of_an_excerpt_block_has_no_target() -> None:
    from preflight.checks.gpu_health_views import GpuHealth

    assert GpuHealth(2, "x", index_known=False).target == "<its index or bus id>"
    assert GpuHealth(2, "x").target == "2" and GpuHealth(2, "x", "0000:01:00.0").target == "0000:01:00.0"


def test_bracketed_error_values_in_q_fields() -> None:
    r = smi(block(pending="[Unknown Error]"))
    assert codes(r) == ["gpu.health/field-unreadable"] and r.summary.endswith("instead of a value")
    assert r.evidence == ["GPU 0 (00000000:18:00.0) [Remapped Rows] Pending : [Unknown Error]"]


def test_field_error_values() -> None:
    from preflight.checks.gpu_health_views import field_error

    assert [field_error(v) for v in ("Unknown Error", "[Unknown Error]", " [GPU requires reset] ", "GPU requires reset",
                                     "GPU is lost", "[GPU is lost]", "N/A", None, "0", "Unknown")] == \
        ["unknown_error", "unknown_error", "needs_reset", "needs_reset", "gpu_lost", "gpu_lost", "", "", "", ""]


@pytest.mark.parametrize("cell", ["memory_used", "util", "perf", "power_cap", "ecc_uncorr"])
def test_table_err_cells_named(cell: str) -> None:
    from preflight.checks.gpu_health_views import from_table

    h = from_table({"index": 0, "bus_id": "00000000:1B:00.0", cell: "ERR!", "lines": ["| a |", "| b |", "| c |"]})
    assert h.sensor_errors == [cell] and h.ev["sensor_errors"] == ["GPU 0 (00000000:1B:00.0) | a |",
                                                                   "GPU 0 (00000000:1B:00.0) | b |"]
    assert from_table({"index": 3}).label == "GPU 3 (?)" and from_table({"index": 3}).ev["sensor_errors"] == ["GPU 3 (?)"]


def test_csv_view_evidence_per_column() -> None:
    from preflight.checks.gpu_health_views import from_csv

    row = {"index": "2", "pci.bus_id": "00000000:1A:00.0", "retired_pages.double_bit.count": "3",
           "retired_pages.single_bit_ecc.count": "1", "reset_status.reset_required": "Yes",
           "reset_status.drain_and_reset_recommended": "No", "ecc.mode.current": "Enabled",
           "ecc.mode.pending": "Disabled", "temperature.gpu": "71", "utilization.gpu": "12 %",
           "clocks_throttle_reasons.sw_thermal_slowdown": "Active"}
    h = from_csv(row, 0)
    assert (h.index, h.label, h.bus) == (2, "GPU 2 (00000000:1A:00.0)", "00000000:1A:00.0")
    assert (h.retired_dbe, h.retired_sbe, h.reset_required, h.drain_and_reset) == (3, 1, True, False)
    assert (h.ecc_mode, h.ecc_mode_pending, h.temps.current, h.util) == (True, False, 71, 12)
    assert h.clock_events == ["SW Thermal Slowdown"]
    assert h.ev["retired_dbe"] == ["GPU 2 (00000000:1A:00.0) retired_pages.double_bit.count=3"]
    assert h.ev["reset_required"] == ["GPU 2 (00000000:1A:00.0) reset_status.reset_required=Yes"]
    assert h.ev["ecc_mode_pending"] == ["GPU 2 (00000000:1A:00.0) ecc.mode.pending=Disabled"]
    assert h.ev["temp.current"] == ["GPU 2 (00000000:1A:00.0) temperature.gpu=71"]
    assert h.ev["util"] == ["GPU 2 (00000000:1A:00.0) utilization.gpu=12 %"]
    assert h.shown == {"retired", "reset", "ecc_mode", "clocks"}
    assert from_csv({"index": "[N/A]"}, 4).label == "GPU 4"


@pytest.mark.parametrize(("field", "name"), [
    ("hw_slowdown", "HW Slowdown"), ("hw_thermal_slowdown", "HW Thermal Slowdown"),
    ("hw_power_brake_slowdown", "HW Power Brake Slowdown"), ("sw_thermal_slowdown", "SW Thermal Slowdown"),
    ("sw_power_cap", "SW Power Cap"), ("gpu_idle", "Idle"), ("sync_boost", "Sync Boost"),
    ("applications_clocks_setting", "Applications Clocks Setting")])
def test_csv_clock_reason_names(field: str, name: str) -> None:
    from preflight.checks.gpu_health_views import from_csv

    assert from_csv({f"clocks_event_reasons.{field}": "Active"}, 0).clock_events == [name]


@pytest.mark.parametrize("section", ["ECC Errors", "Remapped Rows", "Retired Pages", "GPU Recovery Action",
                                     "GPU Reset Status", "Clocks Event Reasons", "Temperature", "ECC Mode"])
def test_unknown_error_in_each_health_section(section: str) -> None:
    text = f"GPU 00000000:18:00.0\n    Product Name : Unknown Error\n    {section}\n        Some Field : Unknown Error\n"
    r = smi(text)
    assert codes(r) == ["gpu.health/field-unreadable"]
    assert r.evidence == [f"GPU 0 (00000000:18:00.0) [{section}] Some Field : Unknown Error"]


@pytest.mark.parametrize("section", ["MIG Devices", "Processes", "Accounted Processes"])
def test_error_values_outside_the_gpu_itself_are_not_graded(section: str) -> None:
    text = f"GPU 00000000:18:00.0\n    {section}\n        Used GPU Memory : GPU requires reset\n" + \
        "    Remapped Rows\n        Pending : No\n"
    assert smi(text).status is Status.PASS


def test_mig_gpu_volatile_na_still_shows_ecc() -> None:
    r = one(grade("gpu.health", q("a100x1_550_mig_enabled.txt")))
    assert "ecc" in r.facts["gpus"][0]["shown"] and r.facts["gpus"][0]["uncorrectable_ecc"] is None


def test_csv_groups_and_table_shown() -> None:
    from preflight.checks.gpu_health_views import from_csv, from_table

    h = from_csv({"retired_pages.pending": "No", "enforced.power.limit": "600.00 W", "power.default_limit": "700.00 W"}, 0)
    assert h.shown == {"retired", "power"} and h.ev["default_power_limit"] == ["GPU 0 power.default_limit=700.00 W"]
    t = from_table({"index": 0, "ecc_uncorr": "2", "lines": ["| x |"]})
    assert t.shown == {"table"} and t.ecc_volatile == 2 and t.ev["ecc_volatile"] == ["GPU 0 (?) | x |"]


# ---------------------------------------------------------------------------------------
# boundaries and texts the mutation run asked about


def test_library_missing_message_is_a_driver_error_for_health() -> None:
    r = one(grade("gpu.health", {"nvidia-smi-q": capture("nvidia-smi-q", "NVML Shared Library Not Found\n")}))
    assert codes(r) == ["gpu.health/not-read-driver-error"]


@pytest.mark.parametrize(("attached", "shown", "missing"), [(8, 1, False), (8, 2, True), (3, 2, True), (2, 2, False),
                                                            (2, 3, False)])
def test_listing_shorter_than_attached(attached: int, shown: int, missing: bool) -> None:
    text = HEAD.format(n=attached) + "\n".join(block(f"00000000:{0x18 + i:02X}:00.0") for i in range(shown))
    r = one(grade("gpu.health", {"nvidia-smi-q": capture("nvidia-smi-q", text)}))
    assert (codes(r) == ["gpu.health/gpus-missing-from-output"]) is missing, r.summary
    if missing:
        assert r.summary == f"only {shown} of {attached} attached GPUs in the nvidia-smi -q output"


def test_anonymous_block_remedy() -> None:
    r = smi("    Remapped Rows\n        Pending : Yes\n", mode="analyze")
    assert r.remedy == ("drain until a GPU reset activates the remap: reset the GPU (nvidia-smi -r -i <its index or "
                        "bus id>) or reboot, then return the node to service (not an RMA)")


def test_retired_pages_with_one_count_not_shown() -> None:
    r = smi("GPU 00000000:18:00.0\n    Retired Pages\n        Single Bit ECC : N/A\n        Double Bit ECC : 63\n")
    assert codes(r) == ["gpu.health/retired-pages-dbe"]
    assert r.remedy == ("the GPU's memory has failed before: RMA it when past NVIDIA's page retirement limit, or raise "
                        "gpu.max_retired_pages in a site profile if the site accepts it")
    r = smi("GPU 00000000:18:00.0\n    Retired Pages\n        Single Bit ECC : 64\n        Double Bit ECC : N/A\n")
    assert codes(r) == ["gpu.health/retired-pages-table-full"]


def test_empty_table_in_analyze_is_nothing() -> None:
    assert grade("gpu.health", {"nvidia-smi-table": capture("nvidia-smi-table", _TABLE_HEAD)}, mode="analyze") == []


def test_telemetry_evidence_is_the_table_rows() -> None:
    r = one(grade("gpu.health", table(_row(0, "1B", temp="ERR!")), mode="analyze"))
    assert len(r.evidence) == 2 and all(e.startswith("GPU 0 (00000000:1B:00.0) | ") for e in r.evidence)


def test_q_with_only_unreadable_fields_is_still_the_source() -> None:
    text = "GPU 00000000:18:00.0\n    Remapped Rows\n        Pending : Unknown Error\n"
    caps = {"nvidia-smi-q": capture("nvidia-smi-q", text),
            "nvidia-smi-query": capture("nvidia-smi-query", CSV_HEAD + csv_row(0))}
    r = one(grade("gpu.health", caps, mode="analyze"))
    assert r.facts["source"] == "nvidia-smi -q" and codes(r) == ["gpu.health/field-unreadable"]


def test_csv_view_evidence_and_groups_for_every_column() -> None:
    from preflight.checks.gpu_health_views import from_csv

    row = dict(zip([c.split(" [")[0].strip().lower() for c in CSV_HEAD.strip().split(",")],
                   [v.strip() for v in csv_row(0, rp=("1", "2", "No")).strip().split(",")], strict=True))
    row["reset_status.drain_and_reset_recommended"] = "No"
    h = from_csv(row, 0)
    assert set(h.ev) == {"ecc_volatile", "ecc_aggregate", "SRAM uncorrectable error threshold exceeded",
                         "remap_pending", "remap_failure", "remap_uncorrectable", "banks_without_spares", "retired_sbe",
                         "retired_dbe", "retired_pending", "recovery_action", "drain_and_reset", "ecc_mode",
                         "ecc_mode_pending", "power_limit", "default_power_limit", "temp.current", "HW Slowdown",
                         "HW Thermal Slowdown", "util"}
    assert h.shown == {"ecc", "repair", "remap", "retired", "recovery", "reset", "ecc_mode", "power", "clocks"}
    for key, column in (("ecc_volatile", "ecc.errors.uncorrected.volatile.total"),
                        ("ecc_aggregate", "ecc.errors.uncorrected.aggregate.total"),
                        ("remap_failure", "remapped_rows.failure"), ("banks_without_spares", "remapped_rows.histogram.none"),
                        ("retired_sbe", "retired_pages.single_bit_ecc.count"), ("retired_pending", "retired_pages.pending"),
                        ("recovery_action", "gpu_recovery_action"), ("ecc_mode", "ecc.mode.current"),
                        ("power_limit", "enforced.power.limit"),
                        ("drain_and_reset", "reset_status.drain_and_reset_recommended")):
        assert h.ev[key] == [f"GPU 0 (00000000:18:00.0) {column}={row[column]}"], key


@pytest.mark.parametrize(("field", "group"), [("Single Bit ECC : 1", "retired"), ("Double Bit ECC : 0", "retired"),
                                              ("Pending Page Blacklist : No", "retired")])
def test_each_retired_field_alone_shows_the_group(field: str, group: str) -> None:
    r = smi(f"GPU 00000000:18:00.0\n    Retired Pages\n        {field}\n")
    assert r.facts["gpus"][0]["shown"] == [group]


def test_clock_reason_names_under_the_section() -> None:
    r = smi(block(slow="Active", thermal="Active", util="60 %"))
    assert r.facts["gpus"][0]["clock_events_active"] == ["HW Slowdown", "HW Thermal Slowdown"]
