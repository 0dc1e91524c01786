"""fabric.manager: systemctl parsing, the fabric manager log, and grading with -q fabric states."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight.framing import Doc, frame
from preflight.model import Capture, CaptureState, Result, Status
from preflight.parsers import fabricmanager, systemd
from preflight.parsers.fabricmanager import FmEvent
from preflight.parsers.systemd import UnitState
from tests.conftest import capture, facts_of, fixture_text, grade


def parse_fm_service(text: str) -> UnitState:
    return facts_of("fm-service", text)  # type: ignore[return-value]


def parse_fm_log(text: str) -> list[FmEvent]:
    return facts_of("fm-log", text).events  # type: ignore[attr-defined]


def looks_like_fm_service(text: str) -> bool:
    return systemd.detect(Doc.join(frame(text).docs))


def looks_like_fm_log(text: str) -> bool:
    return fabricmanager.detect(Doc.join(frame(text).docs))


def svc(name: str) -> Capture:
    return capture("fm-service", fixture_text("systemctl/" + name))


def q(name: str) -> Capture:
    return capture("nvidia-smi-q", fixture_text("nvidia-smi-q/" + name))


def log(name: str) -> Capture:
    return capture("fm-log", fixture_text("fabricmanager/" + name))


def fabric(profile: str = "h100-sxm-8x", mode: str = "run", **caps: Capture) -> Result:
    names = {"svc": "fm-service", "q": "nvidia-smi-q", "log": "fm-log"}
    res = grade("fabric.manager", {names[k]: v for k, v in caps.items()}, profile=profile, mode=mode)
    assert len(res) == 1
    return res[0]


HEALTHY_Q = "h100x8_535_healthy_idle_powerbrake.txt"

# ---------------------------------------------------------------------------------------
# parsers and detectors
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name,form,load,active,sub", [
    ("show_fm_active.txt", "show", "loaded", "active", "running"),
    ("show_fm_failed.txt", "show", "loaded", "failed", "failed"),
    ("show_fm_inactive.txt", "show", "loaded", "inactive", "dead"),  # properties in another order
    ("show_fm_not_found.txt", "show", "not-found", "inactive", "dead"),
    ("show_fm_auto_restart.txt", "show", "loaded", "activating", "auto-restart"),
    ("status_fm_failed.txt", "status", "loaded", "failed", "failed"),
    ("status_fm_active.txt", "status", "loaded", "active", "running"),
    ("status_fm_not_found.txt", "status", "not-found", "inactive", ""),
    ("is_active_failed.txt", "is-active", "", "failed", ""),
])
def test_parse_fm_service(name: str, form: str, load: str, active: str, sub: str) -> None:
    s = parse_fm_service(fixture_text("systemctl/" + name))
    assert (s.form, s.load, s.active, s.sub) == (form, load, active, sub)
    assert s.lines


def test_parse_fm_service_details() -> None:
    s = parse_fm_service(fixture_text("systemctl/status_fm_failed.txt"))
    assert s.result == "exit-code" and s.exec_status == 1
    assert any("don't match with driver version" in ln for ln in s.lines)  # the daemon's journal line
    s = parse_fm_service(fixture_text("systemctl/show_fm_auto_restart.txt"))
    assert s.exec_status == 255 and "exit status 255" in s.describe()
    s = parse_fm_service(fixture_text("systemctl/no_systemd.txt"))
    assert s.error.startswith("System has not been booted with systemd")
    for junk in ("", "\x00\x01", "LoadState", "=====", "active active\n"):
        parse_fm_service(junk)  # never raises


def test_fm_service_detector() -> None:
    for name in ("show_fm_active.txt", "show_fm_failed.txt", "status_fm_failed.txt", "status_fm_not_found.txt"):
        assert looks_like_fm_service(fixture_text("systemctl/" + name)), name
    assert not looks_like_fm_service("Id=sshd.service\nLoadState=loaded\nActiveState=active\n")
    assert not looks_like_fm_service("NCCL_DEBUG=INFO\nNCCL_IB_HCA=mlx5\n")
    assert not looks_like_fm_service(fixture_text("fabricmanager/fm_start_configured_clean.log"))


def test_fm_log_detector() -> None:
    for name in ("fm_start_configured_clean.log", "fm_gpu_nvl_nonfatal_multiline.log", "fm_abort_topology.log"):
        assert looks_like_fm_log(fixture_text("fabricmanager/" + name)), name
    dmesg = "[Mon Mar  3 10:00:00 2025] nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 12028, Non-fatal, Link 17\n"
    assert not looks_like_fm_log(dmesg)
    assert not looks_like_fm_log("node1:123:456 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB\n")
    assert not looks_like_fm_log(fixture_text("systemctl/status_fm_active.txt"))


def test_parse_fm_log_multiline_records() -> None:
    evs = parse_fm_log(fixture_text("fabricmanager/fm_gpu_nvl_nonfatal_multiline.log"))
    kinds = [e.kind for e in evs]
    # the payload and key : value continuation lines are not records of their own
    assert kinds == ["multicast", "nonfatal", "nonfatal"]
    nvl = evs[1]
    assert "portNum : 33" in nvl.detail and "errorCode : 0x02" in nvl.quote
    assert evs[0].detail == []  # the blank line ends the team-setup payload before it
    sx = evs[2]
    assert sx.code == 12028 and sx.port == 40 and sx.switch == "00000000:06:00.0 (physical id 1)"


def test_parse_fm_log_restarts() -> None:
    evs = parse_fm_log(fixture_text("fabricmanager/fm_fatal_then_restart.log"))
    assert [e.kind for e in evs] == ["fatal", "start", "configured"]
    assert parse_fm_log("") == [] and parse_fm_log("\x00garbage\n[x] [y]\n") == []


# ---------------------------------------------------------------------------------------
# grading: service + fabric state
# ---------------------------------------------------------------------------------------


def test_healthy_service_and_fabric_pass() -> None:
    r = fabric(svc=svc("show_fm_active.txt"), q=q(HEALTHY_Q))
    assert r.status is Status.PASS, (r.summary, r.evidence)
    assert r.facts["service"] == "active" and r.facts["fabric_state"] == "Completed"
    assert r.facts["fabric_status"] == "Success" and len(r.facts["gpus"]) == 8


@pytest.mark.parametrize("name", ["show_fm_failed.txt", "show_fm_inactive.txt", "status_fm_failed.txt",
                                  "is_active_failed.txt"])
def test_dead_service_next_to_stale_completed_fails(name: str) -> None:
    r = fabric(svc=svc(name), q=q(HEALTHY_Q))
    assert r.status is Status.FAIL
    assert "stale Completed" in r.summary
    assert "systemctl restart nvidia-fabricmanager" in r.remedy
    assert any("fabric.nvswitch = true" in e for e in r.evidence)
    assert r.facts["fabric_state"] == "Completed" and r.facts["service"] in ("failed", "inactive")


def test_service_restarting_fails() -> None:
    r = fabric(svc=svc("show_fm_auto_restart.txt"), q=q(HEALTHY_Q))
    assert r.status is Status.FAIL and "still starting" in r.summary


@pytest.mark.parametrize("name,needle", [
    ("h100x4_535_fabric_in_progress.txt", "still in progress"),
    ("h100x4_535_fabric_not_started.txt", "not started"),
    ("h100x2_535_fabric_insufficient_resources.txt", "Insufficient Resources"),
])
def test_fabric_states_fail(name: str, needle: str) -> None:
    r = fabric(svc=svc("show_fm_active.txt"), q=q(name))
    assert r.status is Status.FAIL and needle in r.summary
    assert any("[Fabric] State : " in e for e in r.evidence)
    assert r.facts["fabric_state"] != "Completed" or r.facts["fabric_status"] != "Success"


def test_fabric_in_progress_names_the_gpus() -> None:
    r = fabric(q=q("h100x4_535_fabric_in_progress.txt"))
    assert r.status is Status.FAIL and "GPU 2" in r.summary
    assert r.facts["fabric_state"] == "In Progress"


def test_590_health_block_unhealthy_fails() -> None:
    r = fabric(q=q("h100x1_590_fabric_degraded.txt"))
    assert r.status is Status.FAIL
    assert any("Summary : Unhealthy" in e for e in r.evidence)
    assert any("Bandwidth : Degraded" in e for e in r.evidence)


def test_590_health_block_all_na_passes() -> None:
    assert fabric(q=q("h100x1_590_healthy.txt"), profile="generic").status is Status.PASS


def test_not_installed_but_fabric_completed_passes_with_note() -> None:
    r = fabric(svc=svc("show_fm_not_found.txt"), q=q("h100x1_590_healthy.txt"))
    assert r.status is Status.PASS
    assert any("outside this OS" in e for e in r.evidence)


def test_not_installed_and_fabric_not_started_fails() -> None:
    r = fabric(svc=svc("status_fm_not_found.txt"), q=q("h100x4_535_fabric_not_started.txt"))
    assert r.status is Status.FAIL
    assert any("not installed" in p for p in r.summary.split(";")) or "not started" in r.summary
    assert "nvidia-fabricmanager" in r.remedy


def test_no_systemd_grades_on_fabric_state() -> None:
    r = fabric(svc=svc("no_systemd.txt"), q=q(HEALTHY_Q))
    assert r.status is Status.PASS
    assert any("service state unknown" in e for e in r.evidence)


def test_generic_node_without_nvswitch_is_not_flagged() -> None:
    for s in ("show_fm_not_found.txt", "show_fm_failed.txt"):
        r = fabric(profile="generic", svc=svc(s), q=q("l40s_x1_535_no_fabric.txt"))
        assert r.status is Status.SKIP, (s, r.summary)
        assert r.facts["fabric_state"] == "N/A"


def test_h100_profile_with_fabric_na_is_not_verified() -> None:
    r = fabric(q=q("l40s_x1_535_no_fabric.txt"))
    assert r.status is Status.WARN and "not verified" in r.summary and r.remedy


def test_generic_profile_but_gpus_on_a_fabric_is_graded() -> None:
    r = fabric(profile="generic", svc=svc("show_fm_failed.txt"), q=q(HEALTHY_Q))
    assert r.status is Status.FAIL


def test_service_only_analyze() -> None:
    assert fabric(mode="analyze", svc=svc("show_fm_active.txt")).status is Status.PASS
    assert fabric(mode="analyze", svc=svc("status_fm_failed.txt")).status is Status.FAIL
    # a unit that failed is evidence of an NVSwitch node, whatever the profile: without it the node cannot train
    r = fabric(mode="analyze", profile="generic", svc=svc("status_fm_failed.txt"))
    assert r.status is Status.FAIL
    assert r.facts["codes"] == ["fabric.manager/version-mismatch", "fabric.manager/service-not-running"]
    assert fabric(mode="analyze", profile="generic", svc=svc("show_fm_not_found.txt")).status is Status.SKIP


def test_nvidia_smi_error_makes_fabric_state_unknown() -> None:
    err = capture("nvidia-smi-q", fixture_text("nvidia-smi-q/err_no_driver.txt"), rc=9)
    r = fabric(svc=svc("show_fm_active.txt"), q=err)
    assert r.status is Status.ERROR and "fabric state unknown" in r.summary and "modprobe" in r.remedy
    assert fabric(profile="generic", q=err).status is Status.SKIP


def test_missing_nvidia_smi(tmp_path: Path) -> None:
    miss = Capture(probe="nvidia-smi-q", argv=["nvidia-smi", "-q"], state=CaptureState.MISSING,
                   reason="nvidia-smi not found on PATH")
    r = fabric(q=miss)
    assert r.status is Status.FAIL and "nvidia-smi" in r.summary
    p = tmp_path / "notools.toml"
    p.write_text('[profile]\nname = "notools"\nextends = "generic"\n[tools]\nrequired = []\n')
    assert fabric(profile=str(p), q=miss).status is Status.SKIP


# ---------------------------------------------------------------------------------------
# grading: fabric manager log
# ---------------------------------------------------------------------------------------


def test_log_clean_passes() -> None:
    r = fabric(mode="analyze", log=log("fm_start_configured_clean.log"))
    assert r.status is Status.PASS, (r.summary, r.evidence)
    assert r.facts["log_configured_after_last_start"] is True and r.facts["log_nonfatal"] == 0


def test_log_fatal_after_start_fails() -> None:
    r = fabric(mode="analyze", log=log("fm_fatal_after_start.log"))
    assert r.status is Status.FAIL and "fatal" in r.summary and "20034" in r.summary
    assert any("detected NVSwitch fatal error 20034" in e for e in r.evidence)
    assert "reboot" in r.remedy
    assert r.facts["log_sxids"] == [20034]


def test_log_fatal_before_restart_warns() -> None:
    r = fabric(mode="analyze", log=log("fm_fatal_then_restart.log"))
    assert r.status is Status.WARN and "before the fabric manager's last restart" in r.summary


def test_log_multicast_failure_fails_and_nonfatal_errors_are_named() -> None:
    r = fabric(mode="analyze", log=log("fm_gpu_nvl_nonfatal_multiline.log"))
    assert r.status is Status.FAIL
    assert "NVLS multicast team setup failed" in r.summary and "non-fatal" in r.summary
    assert r.facts["log_nonfatal"] == 2 and r.facts["log_multicast_failures"] == 1 and r.facts["log_errors"] == 0
    assert "NVLS" in r.remedy


def test_log_abort_fails() -> None:
    r = fabric(mode="analyze", log=log("fm_abort_topology.log"))
    assert r.status is Status.FAIL and "aborted" in r.summary


def test_log_fatal_with_healthy_service_still_fails() -> None:
    r = fabric(mode="analyze", svc=svc("show_fm_active.txt"), q=q(HEALTHY_Q), log=log("fm_fatal_after_start.log"))
    assert r.status is Status.FAIL
