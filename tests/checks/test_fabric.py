"""fabric.manager: systemctl parsing, the fabric manager log, and grading with -q fabric states."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight.framing import Doc, frame
from preflight.model import Capture, CaptureState, Result, Status
from preflight.parsers import fabricmanager, systemd
from preflight.parsers.fabricmanager import FmEvent
from preflight.parsers.systemd import UnitState
from tests.conftest import capture, facts_of, fixture_text, grade, grade_text


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
    r = fabric(profile="generic", svc=svc("show_fm_not_found.txt"), q=q("l40s_x1_535_no_fabric.txt"))
    assert r.status is Status.SKIP and r.facts["fabric_state"] == "N/A"
    assert r.summary == ("no NVSwitch fabric on this node (NVIDIA L40S: no NVSwitch); fabric manager not required by "
                         "profile generic")
    # a unit that failed where it is not needed: a misconfiguration worth a look, not a fault
    r = fabric(profile="generic", svc=svc("show_fm_failed.txt"), q=q("l40s_x1_535_no_fabric.txt"))
    assert r.status is Status.WARN and r.facts["codes"] == ["fabric.manager/failed-without-nvswitch"]
    assert r.summary == ("nvidia-fabricmanager is failed (result exit-code, exit status 1); not applicable where there "
                         "is no NVSwitch (NVIDIA L40S: no NVSwitch) (profile generic expects none)")
    assert r.remedy.startswith("on a node without NVSwitch: disable the unit (systemctl disable nvidia-fabricmanager)")


GEFORCE_TABLE = """+-----------------------------------------------------------------------------+
| NVIDIA-SMI 510.47.03    Driver Version: 510.47.03    CUDA Version: 11.6     |
|-------------------------------+----------------------+----------------------+
| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |
|                               |                      |               MIG M. |
|===============================+======================+======================|
|   0  {name}  Off  | 00000000:05:00.0 Off |                  N/A |
| N/A   51C    P0    15W /  N/A |      0MiB /  4096MiB |      0%      Default |
|                               |                      |                  N/A |
+-------------------------------+----------------------+----------------------+
"""
START_FAILED = ("Job for nvidia-fabricmanager.service failed because the control process exited with error code.\n"
                "See \"systemctl status nvidia-fabricmanager.service\" and \"journalctl -xe\" for details.\n")


@pytest.mark.parametrize("name,status", [
    ("NVIDIA GeForce ...", Status.WARN), ("NVIDIA RTX A6000   ", Status.WARN), ("Tesla T4           ", Status.WARN),
    ("NVIDIA A10         ", Status.WARN), ("NVIDIA A100-SXM... ", Status.FAIL), ("NVIDIA H100 80GB...", Status.FAIL),
])
def test_failed_start_next_to_gpu_models(name: str, status: Status) -> None:
    [r] = grade_text("fabric.manager", {"fm-service": START_FAILED, "nvidia-smi-table": GEFORCE_TABLE.format(name=name)})
    assert r.status is status, r.summary
    [r] = grade_text("fabric.manager", {"fm-service": START_FAILED, "nvidia-smi-table": GEFORCE_TABLE.format(name=name)},
                     profile="h100-sxm-8x")
    assert r.status is Status.FAIL  # the profile says NVSwitch: the models do not overrule it


def test_switchless_needs_every_gpu_and_a_list(tmp_path: Path) -> None:
    two = GEFORCE_TABLE.format(name="NVIDIA GeForce ...").replace(
        "+-------------------------------+----------------------+----------------------+\n", "", 2)
    mixed = GEFORCE_TABLE.format(name="NVIDIA GeForce ...") + GEFORCE_TABLE.format(name="NVIDIA A100-SXM... ")
    [r] = grade_text("fabric.manager", {"fm-service": START_FAILED, "nvidia-smi-table": mixed})
    assert r.status is Status.FAIL, r.summary
    prof = tmp_path / "p.toml"
    prof.write_text('[profile]\nname = "p"\nextends = "generic"\n[fabric]\n'
                    'no_nvswitch_gpus = { value = [], source = "t" }\n')
    [r] = grade_text("fabric.manager", {"fm-service": START_FAILED, "nvidia-smi-table": two}, profile=str(prof))
    assert r.status is Status.FAIL


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


# ---------------------------------------------------------------------------------------
# finding codes of the existing cases
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name,code", [
    ("show_fm_failed.txt", "fabric.manager/service-not-running"),
    ("show_fm_inactive.txt", "fabric.manager/service-not-running"),
    ("show_fm_auto_restart.txt", "fabric.manager/service-starting"),
])
def test_service_codes(name: str, code: str) -> None:
    r = fabric(svc=svc(name), q=q(HEALTHY_Q))
    assert r.facts["codes"] == [code]


@pytest.mark.parametrize("name,code", [
    ("h100x4_535_fabric_in_progress.txt", "fabric.manager/fabric-in-progress"),
    ("h100x4_535_fabric_not_started.txt", "fabric.manager/fabric-not-started"),
    ("h100x2_535_fabric_insufficient_resources.txt", "fabric.manager/fabric-status-error"),
])
def test_fabric_state_codes(name: str, code: str) -> None:
    r = fabric(svc=svc("show_fm_active.txt"), q=q(name))
    assert r.facts["codes"] == [code]


def test_not_installed_and_masked_codes() -> None:
    r = fabric(svc=svc("status_fm_not_found.txt"), q=q("h100x4_535_fabric_not_started.txt"))
    assert r.facts["codes"] == ["fabric.manager/fabric-not-started", "fabric.manager/not-installed"]
    masked = capture("fm-service", "LoadState=masked\nActiveState=inactive\nSubState=dead\n")
    r = fabric(svc=masked, q=q(HEALTHY_Q))
    assert r.status is Status.FAIL and r.facts["codes"] == ["fabric.manager/masked"]
    assert "unmask" in r.remedy


def test_log_codes() -> None:
    assert fabric(mode="analyze", log=log("fm_fatal_after_start.log")).facts["codes"] == [
        "fabric.manager/nvswitch-fatal"]
    assert fabric(mode="analyze", log=log("fm_fatal_then_restart.log")).facts["codes"] == [
        "fabric.manager/nvswitch-fatal-before-restart"]
    assert fabric(mode="analyze", log=log("fm_gpu_nvl_nonfatal_multiline.log")).facts["codes"] == [
        "fabric.manager/multicast-failed", "fabric.manager/nvswitch-nonfatal"]
    assert fabric(mode="analyze", log=log("fm_abort_topology.log")).facts["codes"] == ["fabric.manager/aborted"]


def test_other_error_lines_warn() -> None:
    text = ("[Mar 05 2025 08:00:12] [INFO] [tid 1950] Fabric Manager version 535.230.02 is running\n"
            "[Mar 05 2025 08:00:13] [ERROR] [tid 1950] failed to read NVSwitch temperature sensor 2\n")
    r = fabric(mode="analyze", log=capture("fm-log", text))
    assert r.status is Status.WARN and r.facts["codes"] == ["fabric.manager/unread-error"]
    assert r.facts["log_errors"] == 1 and "failed to read NVSwitch temperature sensor 2" in r.summary
    assert any("[ERROR] [tid 1950] failed to read NVSwitch temperature sensor 2" in e for e in r.evidence)


def test_no_input_and_unverified_codes() -> None:
    r = grade("fabric.manager", {}, profile="h100-sxm-8x")[0]
    assert r.status is Status.SKIP and r.facts["codes"] == ["fabric.manager/no-input"]
    r = fabric(q=q("l40s_x1_535_no_fabric.txt"))
    assert r.facts["codes"] == ["fabric.manager/unverified"]
    assert "Fabric State N/A" in r.summary and any("fabric.nvswitch = true" in e for e in r.evidence)


def test_not_required_code() -> None:
    r = fabric(profile="generic", svc=svc("show_fm_not_found.txt"), q=q("l40s_x1_535_no_fabric.txt"))
    assert r.facts["codes"] == ["fabric.manager/not-required"]
    assert r.summary == ("no NVSwitch fabric on this node (NVIDIA L40S: no NVSwitch); fabric manager not required by "
                         "profile generic")
    r = fabric(mode="analyze", profile="generic", svc=svc("show_fm_not_found.txt"))
    assert r.summary.endswith("(nothing shows one)") and r.facts["codes"] == ["fabric.manager/not-required"]


def test_inactive_unit_on_generic_is_not_required() -> None:
    """A unit installed but never started on a node whose profile expects no NVSwitch proves nothing."""
    r = fabric(mode="analyze", profile="generic", svc=svc("show_fm_inactive.txt"))
    assert r.status is Status.SKIP and r.facts["codes"] == ["fabric.manager/not-required"]
    assert any("inactive (dead) (harmless without NVSwitch)" in e for e in r.evidence)


def test_smi_error_codes() -> None:
    err = capture("nvidia-smi-q", fixture_text("nvidia-smi-q/err_no_driver.txt"), rc=9)
    r = fabric(svc=svc("show_fm_active.txt"), q=err)
    assert r.facts["codes"] == ["fabric.manager/nvidia-smi-failed"]
    r = fabric(profile="generic", q=err)
    assert r.facts["codes"] == ["fabric.manager/no-fabric-data"] and r.summary.startswith("fabric not checked")


# ---------------------------------------------------------------------------------------
# the Fabric block on its own (nvidia-smi-fabric)
# ---------------------------------------------------------------------------------------


def fab_text(name: str) -> str:
    return fixture_text("nvidia-smi-fabric/" + name)


def fab(name: str, profile: str = "generic", **extra: str) -> Result:
    inputs = {"nvidia-smi-fabric": fab_text(name), **extra}
    [r] = grade_text("fabric.manager", inputs, profile=profile)
    return r


def test_fabric_block_detector() -> None:
    d = lambda text: fabricmanager.detect_fabric(Doc.join(frame(text).docs))  # noqa: E731
    for name in ("grep_A2_4gpu_completed_535.txt", "block_575_route_unhealthy_degraded.txt",
                 "block_580_incorrect_configuration_partition.txt", "block_in_progress_na.txt"):
        assert d(fab_text(name)), name
    assert not d(fixture_text("nvidia-smi-q/" + HEALTHY_Q))  # a whole -q is nvidia-smi-q's
    assert not d("Fabric\nsomething else : 1\n")
    assert not d("    Fabric\n    State : Completed\n")  # not indented under it
    assert not d("State : Completed\nStatus : Success\n")
    assert not d("")


def test_parse_fabric_block_fields() -> None:
    rep = fabricmanager.parse_fabric(Doc.join(frame(fab_text("block_575_route_unhealthy_degraded.txt")).docs))
    [b] = rep.blocks
    assert b.index == 0 and b.label == "Fabric block 1" and b.bus_id == ""
    assert b.fields == {
        "Fabric/State": "Completed", "Fabric/Status": "Success", "Fabric/CliqueId": "32766",
        "Fabric/ClusterUUID": "6c7a1d2e-7f3b-4b52-9a1e-0c5d4e3f2a10", "Fabric/Health/Summary": "Unhealthy",
        "Fabric/Health/Bandwidth": "Degraded", "Fabric/Health/Route Recovery in progress": "False",
        "Fabric/Health/Route Unhealthy": "True", "Fabric/Health/Access Timeout Recovery": "False",
        "Fabric/Health/Incorrect Configuration": "None"}
    assert b.line("Fabric/Health/Route Unhealthy") == "Route Unhealthy : True"
    assert b.line("Fabric/Nope") == "Fabric/Nope" and b.get("Fabric/Nope") is None
    assert [k for k, _ in b.under("Fabric/Health")][0] == "Fabric/Health/Summary"


def test_parse_fabric_blocks_end_at_a_shallower_line() -> None:
    text = ("    Fabric\n        State : Completed\n        Status : Success\n    Processes : None\n"
            "        Stray : 1\n    Fabric\n\t\tState : In Progress\n")
    rep = fabricmanager.parse_fabric(Doc.join(frame(text).docs))
    assert [b.fields for b in rep.blocks] == [{"Fabric/State": "Completed", "Fabric/Status": "Success"},
                                              {"Fabric/State": "In Progress"}]
    assert fabricmanager.parse_fabric(Doc.join(frame("garbage\n\x00\n").docs)).blocks == []


def test_blocks_from_q() -> None:
    rep = facts_of("nvidia-smi-q", fixture_text("nvidia-smi-q/h100x1_590_fabric_degraded.txt"))
    [b] = fabricmanager.blocks_from_q(rep)  # type: ignore[arg-type]
    assert b.label.startswith("GPU 0 (") and b.bus_id and b.fields["Fabric/State"] == "Completed"
    assert all(k.startswith("Fabric/") for k in b.fields)
    assert fabricmanager.blocks_from_q(facts_of("nvidia-smi-q", fixture_text(  # type: ignore[arg-type]
        "nvidia-smi-q/err_no_driver.txt"))) == []


def test_grep_a2_completed_passes_saying_liveness_is_not_shown() -> None:
    r = fab("grep_A2_4gpu_completed_535.txt")
    assert r.status is Status.PASS and "codes" not in r.facts
    assert r.summary.startswith("fabric Completed/Success on 4 GPU(s); fabric manager liveness not shown")
    assert r.facts["fabric_state"] == "Completed" and r.facts["fabric_status"] == "Success"
    assert [g["index"] for g in r.facts["gpus"]] == [0, 1, 2, 3]
    assert "GPU block 1: Fabric State Completed, Status Success" in r.evidence


def test_running_service_shows_liveness() -> None:
    r = fab("grep_A2_4gpu_completed_535.txt", **{"fm-service": fixture_text("systemctl/show_fm_active.txt")})
    assert r.status is Status.PASS and "liveness" not in r.summary
    assert r.summary == "fabric Completed/Success on 4 GPU(s); nvidia-fabricmanager active (running)"


def test_dead_service_next_to_a_grepped_completed_block_fails() -> None:
    r = fab("grep_A2_4gpu_completed_535.txt", **{"fm-service": fixture_text("systemctl/status_fm_failed.txt")})
    assert r.status is Status.FAIL and "stale Completed" in r.summary


@pytest.mark.parametrize("name,status,codes", [
    ("block_575_route_unhealthy_degraded.txt", Status.FAIL,
     ["fabric.manager/health-unhealthy", "fabric.manager/route-unhealthy", "fabric.manager/bandwidth-degraded"]),
    ("block_580_incorrect_configuration_partition.txt", Status.FAIL,
     ["fabric.manager/health-unhealthy", "fabric.manager/incorrect-configuration"]),
    ("block_570_limited_capacity_recovery.txt", Status.WARN,
     ["fabric.manager/bandwidth-degraded", "fabric.manager/route-recovery", "fabric.manager/access-timeout-recovery",
      "fabric.manager/health-limited-capacity"]),
    ("block_in_progress_na.txt", Status.FAIL, ["fabric.manager/fabric-in-progress"]),
    ("block_unknown_state_and_health.txt", Status.SKIP,
     ["fabric.manager/fabric-state-unknown", "fabric.manager/health-value-unknown"]),
])
def test_fabric_block_grading(name: str, status: Status, codes: list[str]) -> None:
    r = fab(name)
    assert r.status is status and r.facts["codes"] == codes, (r.summary, r.facts.get("codes"))


def test_fabric_block_facts_and_evidence() -> None:
    r = fab("block_580_incorrect_configuration_partition.txt")
    assert r.facts["gpus"] == [{"index": 0, "bus_id": None, "state": "Completed", "status": "Success",
                                "clique_id": "4", "cluster_uuid": "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"}]
    assert "Fabric block 1 [Fabric/Health] Incorrect Configuration : Insufficient NVLinks" in r.evidence
    assert "Fabric block 1: fabric health: Incorrect Configuration = Insufficient NVLinks" in r.summary
    r = fab("block_unknown_state_and_health.txt")
    assert "not recognised: Fabric block 1 fabric state 'Quiescing'" in r.summary
    assert "Fabric block 2: not recognised: fabric health Bandwidth = Reduced By Half" in r.summary
    r = fab("block_in_progress_na.txt")
    assert r.facts["gpus"][0]["clique_id"] is None and r.facts["fabric_state"] == "In Progress"
    assert "Fabric block 1 [Fabric] State : In Progress" in r.evidence


def test_insufficient_resources_block_alone() -> None:
    text = ("Fabric\n    State : Completed\n    Status : Insufficient Resources\n    CliqueId : 0\n"
            "    ClusterUUID : 00000000-0000-0000-0000-000000000000\n")
    [r] = grade_text("fabric.manager", {"nvidia-smi-fabric": text})
    assert r.facts["codes"] == ["fabric.manager/fabric-status-error"]
    assert "finished with status 'Insufficient Resources'" in r.summary and r.facts["fabric_status"] == \
        "Insufficient Resources"


# ---------------------------------------------------------------------------------------
# version mismatch, nothing to do, the unit's journal
# ---------------------------------------------------------------------------------------


def jrnl(name: str, profile: str = "generic") -> Result:
    [r] = grade_text("fabric.manager", {"fm-service": fixture_text("fabricmanager/" + name)}, profile=profile)
    return r


@pytest.mark.parametrize("msg,fm,driver", [
    ("fabric manager NVIDIA GPU driver interface version 535.230.02 don't match with driver version 550.54.15. "
     "Please update with matching NVIDIA driver package.", "535.230.02", "550.54.15"),
    ("fabric manager NVIDIA GPU driver interface version 550.127.05 doesn't match with driver version 550.120. "
     "Please update with the matching NVIDIA driver package.", "550.127.05", "550.120"),
    ("fabric manager NVIDIA GPU driver interface version 550.90.07 don\u2019t match with driver version 550.107.02. "
     "Please update with matching NVIDIA driver package", "550.90.07", "550.107.02"),
])
def test_classify_version_mismatch(msg: str, fm: str, driver: str) -> None:
    ev = fabricmanager.classify(msg, "", msg)
    assert ev is not None and ev.kind == "version-mismatch"
    assert ev.values == {"fabric_manager": fm, "driver": driver}


@pytest.mark.parametrize("msg,kind", [
    ("request to query NVSwitch device information from NVSwitch driver failed with error:WARNING Nothing to do "
     "[NV_WARN_NOTHING_TO_DO]", "nothing-to-do"),
    ("Successfully configured all the available GPUs and NVSwitches.", "configured"),
    ("Successfully configured all the available NVSwitches to route GPU NVLink traffic.", "configured"),
    ("Fabric Manager version 550.54.15 is running with the following configuration options", "start"),
    ("detected NVSwitch fatal error 20034 on fid 0 on NVSwitch pci bus id 00000000:86:00.0 physical id 3 port 33",
     "fatal"),
    ("detected GPU NVL Fatal error on GPU pci bus id 00000000:18:00.0", "fatal"),
    ("detected NVSwitch non-fatal error 12028 on fid 0 on NVSwitch pci bus id 00000000:86:00.0", "nonfatal"),
    ("failed to find the GPU handle 5410063385821516767 in the multicast team request setup 6130285411925746235.",
     "multicast"),
])
def test_classify_kinds(msg: str, kind: str) -> None:
    ev = fabricmanager.classify(msg, "", msg)
    assert ev is not None and ev.kind == kind


def test_classify_routine_and_levels() -> None:
    assert fabricmanager.classify("Connected to 1 node.", "INFO", "x") is None
    assert fabricmanager.classify("Detected Pre-NVL5 system", "", "x") is None
    ev = fabricmanager.classify("aborting fabric manager", "ERROR", "x")
    assert ev is not None and ev.kind == "abort"
    ev = fabricmanager.classify("something odd", "CRITICAL", "x")
    assert ev is not None and ev.kind == "error"
    assert fabricmanager.classify("something odd", "WARNING", "x") is None
    ev = fabricmanager.classify("detected NVSwitch fatal error 20034 on fid 0 on NVSwitch pci bus id 0000:86:00.0 "
                                "physical id 3 port 33", "ERROR", "x")
    assert ev is not None and (ev.code, ev.switch, ev.port) == (20034, "0000:86:00.0 (physical id 3)", 33)
    ev = fabricmanager.classify("detected NVSwitch non-fatal error 12028", "ERROR", "x")
    assert ev is not None and (ev.code, ev.switch, ev.port) == (12028, "", None)


def test_version_mismatch_in_the_fm_log_fails() -> None:
    r = fabric(mode="analyze", log=log("fm_log_version_mismatch.log"))
    assert r.status is Status.FAIL and r.facts["codes"] == ["fabric.manager/version-mismatch"]
    assert r.summary == ("the fabric manager (550.127.05) refuses to run with driver 550.120: their versions differ")
    assert "exactly the driver's version (550.120)" in r.remedy
    assert r.facts["log_version_mismatch"] == {"fabric_manager": "550.127.05", "driver": "550.120"}


def test_version_mismatch_in_a_journal_fails_on_any_profile() -> None:
    for profile in ("generic", "h100-sxm-8x"):
        r = jrnl("journal_fm_version_mismatch_doesnt.log", profile)
        assert r.status is Status.FAIL
        assert r.facts["codes"] == ["fabric.manager/version-mismatch", "fabric.manager/service-not-running"]
        assert r.facts["service"] == "failed"


def test_failure_then_a_later_start_is_history() -> None:
    r = jrnl("journal_fm_failed_then_started_running.log", "h100-sxm-8x")
    assert r.status is Status.PASS, r.summary
    assert r.facts["service"] == "active" and r.facts["log_version_mismatch"] is None
    assert r.facts["log_restarts"] == 2 and r.facts["log_configured_after_last_start"] is True
    assert "the fabric manager configured every NVSwitch at its last start" in r.summary


def test_killed_and_restarting_unit() -> None:
    r = jrnl("journal_fm_killed_auto_restart.log", "h100-sxm-8x")
    assert r.status is Status.FAIL and r.facts["codes"] == ["fabric.manager/service-starting"]


@pytest.mark.parametrize("profile", ["generic", "h100-sxm-8x"])
def test_nothing_to_do(profile: str) -> None:
    r = jrnl("journal_fm_nothing_to_do_l40s_pcie.log", profile)
    if profile == "generic":
        assert r.status is Status.PASS and "codes" not in r.facts
        assert r.summary == "fabric manager not applicable: no NVSwitch on this node (NV_WARN_NOTHING_TO_DO)"
        assert any("found no NVSwitch to manage" in e for e in r.evidence)
        assert any("harmless here" in e for e in r.evidence)
        assert r.facts["nvswitch_found"] is False
    else:
        assert r.status is Status.FAIL
        assert r.facts["codes"] == ["fabric.manager/nvswitch-not-found", "fabric.manager/service-not-running"]
        assert "passed through" in r.remedy


def test_nothing_to_do_next_to_gpus_on_a_fabric_is_a_fault() -> None:
    [r] = grade_text("fabric.manager", {"fm-service": fixture_text("fabricmanager/journal_fm_nothing_to_do_l40s_pcie.log"),
                                        "nvidia-smi-fabric": fab_text("block_in_progress_na.txt")})
    assert r.status is Status.FAIL
    assert r.facts["codes"] == ["fabric.manager/fabric-in-progress", "fabric.manager/nvswitch-not-found",
                                "fabric.manager/service-not-running"]


def test_nothing_to_do_site_override(tmp_path: Path) -> None:
    from preflight import policy
    token = policy.use(policy.builtin().with_overrides({"fabric.manager/no-nvswitch": "warn"}, "site.toml"))
    try:
        r = jrnl("journal_fm_nothing_to_do_l40s_pcie.log")
    finally:
        policy.reset(token)
    assert r.status is Status.WARN and r.facts["codes"] == ["fabric.manager/no-nvswitch"]


# ---------------------------------------------------------------------------------------
# systemd: the journal form and its transitions
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("msg,want", [
    ("Starting NVIDIA fabric manager service...", ("activating", "start", "")),
    ("Starting nvidia-fabricmanager.service - NVIDIA fabric manager service...", ("activating", "start", "")),
    ("Started NVIDIA fabric manager service.", ("active", "running", "success")),
    ("Stopping NVIDIA fabric manager service...", ("deactivating", "stop", "")),
    ("Stopped NVIDIA fabric manager service.", ("inactive", "dead", "success")),
    ("Failed to start NVIDIA fabric manager service.", ("failed", "failed", "")),
    ("Dependency failed for NVIDIA fabric manager service.", ("failed", "failed", "dependency")),
    ("nvidia-fabricmanager.service: Succeeded.", ("inactive", "dead", "success")),
    ("nvidia-fabricmanager.service: Deactivated successfully.", ("inactive", "dead", "success")),
    ("nvidia-fabricmanager.service: Failed with result 'exit-code'.", ("failed", "failed", "exit-code")),
    ("nvidia-fabricmanager.service: Unit entered failed state.", ("failed", "failed", "")),
    ("nvidia-fabricmanager.service: Start request repeated too quickly.", ("failed", "failed", "start-limit-hit")),
    ("nvidia-fabricmanager.service: Scheduled restart job, restart counter is at 5.",
     ("activating", "auto-restart", "")),
    ("nvidia-fabricmanager.service: Main process exited, code=killed, status=9/KILL", ("failed", "failed", "signal")),
    ("nvidia-fabricmanager.service: Main process exited, code=dumped, status=6/ABRT", ("failed", "failed", "signal")),
    ("nvidia-fabricmanager.service: Control process exited, code=exited, status=1/FAILURE",
     ("failed", "failed", "exit-code")),
    ("nvidia-fabricmanager.service: main process exited, code=exited, status=0/SUCCESS", None),
    ("Started Session 4 of user root.", None),
    ("sshd.service: Failed with result 'exit-code'.", None),
    ("nvidia-fabricmanager.service: Consumed 1.861s CPU time.", None),
])
def test_systemd_transitions(msg: str, want: tuple[str, str, str] | None) -> None:
    assert systemd.transition(msg) == want


@pytest.mark.parametrize("name,active,sub,result", [
    ("journal_fm_nothing_to_do_l40s_pcie.log", "failed", "failed", "exit-code"),
    ("journal_fm_version_mismatch_doesnt.log", "failed", "failed", "exit-code"),
    ("journal_fm_failed_then_started_running.log", "active", "running", "success"),
    ("journal_fm_killed_auto_restart.log", "activating", "start", ""),
])
def test_parse_unit_journal(name: str, active: str, sub: str, result: str) -> None:
    s = parse_fm_service(fixture_text("fabricmanager/" + name))
    assert (s.form, s.load, s.active, s.sub, s.result) == ("journal", "loaded", active, sub, result)
    assert 1 <= len(s.lines) <= 3 and all("systemd" in ln for ln in s.lines)
    assert looks_like_fm_service(fixture_text("fabricmanager/" + name))
    assert not looks_like_fm_log(fixture_text("fabricmanager/" + name))


def test_journal_failure_keeps_its_result() -> None:
    text = ("Oct 09 17:20:03 n1 systemd[1]: nvidia-fabricmanager.service: Main process exited, code=killed, "
            "status=9/KILL\nOct 09 17:20:03 n1 systemd[1]: Failed to start NVIDIA fabric manager service.\n")
    s = parse_fm_service(text)
    assert (s.active, s.result) == ("failed", "signal") and len(s.lines) == 2


def test_journal_in_another_locale() -> None:
    text = ("11\u6708 15 14:15:47 box systemd[1]: Starting NVIDIA fabric manager service...\n"
            "11\u6708 15 14:15:47 box nv-fabricmanager[4177]: request to query NVSwitch device information from "
            "NVSwitch driver failed with error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]\n"
            "11\u6708 15 14:15:47 box systemd[1]: nvidia-fabricmanager.service: Control process exited, code=exited, "
            "status=1/FAILURE\n")
    s = parse_fm_service(text)
    assert s.form == "journal" and s.active == "failed" and [j.ident for j in s.journal] == [
        "systemd", "nv-fabricmanager", "systemd"]
    [r] = grade_text("fabric.manager", {"fm-service": text})
    assert r.status is Status.PASS and "not applicable" in r.summary


def test_fm_log_reads_a_journal_in_another_locale() -> None:
    text = ("11\u6708 15 14:15:47 box nv-fabricmanager[4177]: request to query NVSwitch device information from "
            "NVSwitch driver failed with error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]\n")
    assert looks_like_fm_log(text)
    assert [e.kind for e in parse_fm_log(text)] == ["nothing-to-do"]


def test_status_and_start_forms_quote_the_daemon() -> None:
    s = parse_fm_service(fixture_text("systemctl/status_fm_failed.txt"))
    assert s.lines[0].startswith("Active: failed")
    text = ("Job for nvidia-fabricmanager.service failed because the control process exited with error code.\n"
            "See \"systemctl status nvidia-fabricmanager.service\" and \"journalctl -xe\" for details.\n"
            "Mar 01 04:12:09 gpu-c07 nv-fabricmanager[2214]: fabric manager NVIDIA GPU driver interface version "
            "535.230.02 don't match with driver version 550.54.15. Please update with matching NVIDIA driver package.\n"
            "Mar 01 04:12:09 gpu-c07 systemd[1]: nvidia-fabricmanager.service: Failed with result 'exit-code'.\n")
    s = parse_fm_service(text)
    assert (s.form, s.active, s.result) == ("start", "failed", "start-failed")
    assert len(s.lines) == 3 and "don't match" in s.lines[1] and "Failed with result" in s.lines[2]


# ---------------------------------------------------------------------------------------
# systemd parser and detector: every form, exactly
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("word", ["active", "inactive", "failed", "activating", "deactivating", "reloading",
                                  "maintenance"])
def test_is_active_words(word: str) -> None:
    s = parse_fm_service(word + "\n")
    assert (s.form, s.active, s.lines) == ("is-active", word, [word])
    doc = Doc(word + "\n", command="systemctl is-active nvidia-fabricmanager")
    assert systemd.detect(doc)


def test_is_active_unknown_and_detector_limits() -> None:
    s = parse_fm_service("unknown\n")
    assert (s.form, s.active) == ("is-active", "")
    assert not systemd.detect(Doc("failed\n"))  # no command: a bare word is not recognised
    assert not systemd.detect(Doc("failed\nactive\n", command="systemctl is-active nvidia-fabricmanager"))
    assert not systemd.detect(Doc("running\n", command="systemctl is-active nvidia-fabricmanager"))
    assert not systemd.detect(Doc("failed\n", command="systemctl is-active sshd"))
    assert systemd.detect(Doc("failed\n", command="systemctl is-active fabricmanager"))
    assert not systemd.detect(Doc(""))


def test_unit_state_describe_and_recognised() -> None:
    assert UnitState(active="failed", sub="failed", result="exit-code", exec_status=1).describe() == \
        "failed (result exit-code, exit status 1)"
    assert UnitState(active="active", sub="running", result="success").describe() == "active (running)"
    assert UnitState(active="inactive").describe() == "inactive"
    assert UnitState().describe() == "unknown"
    assert UnitState(active="failed", sub="auto-restart", exec_status=0).describe() == "failed (auto-restart)"
    assert not UnitState().recognised and UnitState(error="x").recognised and UnitState(form="show").recognised
    assert UnitState(load="not-found").installed is False and UnitState(load="loaded").installed is True
    assert UnitState().installed is None


def test_show_forms() -> None:
    s = parse_fm_service("Id=nvidia-fabricmanager.service\nActiveState=failed\nSubState=failed\nResult=signal\n"
                         "ExecMainStatus=-1\n")
    assert (s.form, s.unit, s.load, s.active, s.sub, s.result, s.exec_status) == (
        "show", "nvidia-fabricmanager.service", "", "failed", "failed", "signal", -1)
    assert s.lines == ["ActiveState=failed", "SubState=failed", "Result=signal", "ExecMainStatus=-1"]
    s = parse_fm_service("LoadState=not-found\n")
    assert (s.form, s.load, s.exec_status) == ("show", "not-found", None)
    s = parse_fm_service("SubState=running\nResult=success\n")
    assert s.form == "none"
    s = parse_fm_service(fixture_text("systemctl/show_fm_inactive.txt"))
    assert s.lines == ["LoadState=loaded", "ActiveState=inactive", "SubState=dead", "Result=success",
                       "ExecMainStatus=0"]


def test_show_detector() -> None:
    base = "LoadState=loaded\nActiveState=active\n"
    assert systemd.detect(Doc(base))
    assert systemd.detect(Doc("Names=nvidia-fabricmanager.service\n" + base))
    assert not systemd.detect(Doc("Names=sshd.service\n" + base))
    assert not systemd.detect(Doc("Id=sshd.service\n" + base))
    assert not systemd.detect(Doc("LoadState=loaded\nSubState=running\n"))
    assert not systemd.detect(Doc("ActiveState=active\nSubState=running\n"))
    assert systemd.detect(Doc("LoadState=loaded\nActiveState=active\nDescription=a=b\n"))


def test_status_details() -> None:
    s = parse_fm_service(fixture_text("systemctl/status_fm_active.txt"))
    assert (s.unit, s.form, s.sub, s.exec_status) == ("nvidia-fabricmanager", "status", "running", None)
    text = ("\u25cf nvidia-fabricmanager.service - NVIDIA fabric manager service\n"
            "     Loaded: loaded (/lib/systemd/system/nvidia-fabricmanager.service; enabled)\n")
    s = parse_fm_service(text)
    assert (s.form, s.load, s.unit) == ("status", "loaded", "nvidia-fabricmanager")
    forking = ("\u00d7 nvidia-fabricmanager.service - NVIDIA fabric manager service\n"
               "     Loaded: loaded (/lib/systemd/system/nvidia-fabricmanager.service; enabled)\n"
               "     Active: failed (Result: exit-code) since Sat 2025-03-01 04:12:09 UTC; 1h ago\n"
               "    Process: 2214 ExecStart=/usr/bin/nv-fabricmanager (code=exited, status=0/SUCCESS)\n"
               "   Main PID: 2220 (code=exited, status=1/FAILURE)\n"
               "    Process: 2299 ExecStopPost=/bin/true (code=exited, status=0/SUCCESS)\n")
    s = parse_fm_service(forking)
    assert s.exec_status == 1 and s.result == "exit-code" and s.sub == "failed"
    assert s.lines[0].startswith("Active: failed")


def test_status_detector_needs_the_unit_loaded_and_active() -> None:
    ok = ("nvidia-fabricmanager.service - NVIDIA fabric manager service\nLoaded: loaded (x)\nActive: active "
          "(running)\n")
    assert systemd.detect(Doc(ok))
    assert not systemd.detect(Doc(ok.replace("nvidia-fabricmanager", "sshd")))
    assert not systemd.detect(Doc(ok.replace("Loaded:", "Loading:")))
    assert not systemd.detect(Doc(ok.replace("Active:", "Acting:")))
    assert systemd.detect(Doc("Unit nvidia-fabricmanager.service could not be found.\n"))
    assert not systemd.detect(Doc("Unit sshd.service could not be found.\n"))
    assert not systemd.detect(Doc(ok, command="systemctl status sshd"))
    assert systemd.detect(Doc(ok, command="systemctl status nvidia-fabricmanager"))


def test_start_failed_details() -> None:
    text = ("Job for nvidia-fabricmanager.service failed because the control process exited with error code.\n"
            + "".join(f"Mar 01 04:12:0{i} gpu-c07 nv-fabricmanager[2214]: line {i}\n" for i in range(5))
            + "".join(f"Mar 01 04:12:0{i} gpu-c07 systemd[1]: nvidia-fabricmanager.service: Failed with result "
                      f"'exit-code'.\n" for i in range(3))
            + "Mar 01 04:12:09 gpu-c07 systemd[1]: Starting NVIDIA fabric manager service...\n")
    s = parse_fm_service(text)
    assert (s.unit, s.form, s.load, s.active, s.result) == ("nvidia-fabricmanager", "start", "loaded", "failed",
                                                            "start-failed")
    assert len(s.lines) == 6 and [ln.split(": ", 1)[-1] for ln in s.lines[1:4]] == ["line 2", "line 3", "line 4"]
    assert all("Failed with result" in ln for ln in s.lines[4:])
    assert len(s.journal) == 9


def test_unpeeled_journal_lines_are_all_read() -> None:
    text = "".join(f"11\u6708 15 14:15:4{i} box nv-fabricmanager[4177]: line {i}\n" for i in range(3))
    s = parse_fm_service("Job for nvidia-fabricmanager.service failed.\n" + text)
    assert [j.message for j in s.journal] == ["line 0", "line 1", "line 2"]


def test_journal_items() -> None:
    d = frame("Mar 02 11:41:10 n1 systemd[1]: Started NVIDIA fabric manager service.\n"
              "11\u6708 15 14:15:47 box nv-fabricmanager[4177]: hello\nnot a journal line\n").docs[0]
    assert systemd.journal_items(d.lines) == [("systemd", "Started NVIDIA fabric manager service."),
                                              ("nv-fabricmanager", "hello")]


def test_journal_state_lines_and_a_daemon_line_that_looks_like_systemd() -> None:
    text = ("Jan 14 03:40:52 n systemd[1]: Starting NVIDIA fabric manager service...\n"
            "Jan 14 03:40:55 n nv-fabricmanager[4410]: Started NVIDIA fabric manager service.\n"
            "Jan 14 03:40:56 n systemd[1]: nvidia-fabricmanager.service: Main process exited, code=exited, "
            "status=0/SUCCESS\n")
    s = parse_fm_service(text)
    assert (s.form, s.active) == ("journal", "active")
    text = "".join(f"Jan 14 03:40:5{i} n systemd[1]: Starting NVIDIA fabric manager service...\n" for i in range(5))
    s = parse_fm_service(text)
    assert len(s.lines) == 3 and s.lines[-1].startswith("Jan 14 03:40:54")


def test_fm_service_is_a_format_analyze_reads() -> None:
    from tests.conftest import analyze_text
    res = [r for r in analyze_text(fixture_text("systemctl/status_fm_failed.txt")) if r.check == "fabric.manager"]
    assert [r.status for r in res] == [Status.FAIL]
    res = [r for r in analyze_text(fixture_text("fabricmanager/fm_fatal_after_start.log"), name="fm.log")
           if r.check == "fabric.manager"]
    assert [r.status for r in res] == [Status.FAIL]
    res = [r for r in analyze_text(fab_text("block_in_progress_na.txt")) if r.check == "fabric.manager"]
    assert [r.status for r in res] == [Status.FAIL]


def test_check_registration() -> None:
    from preflight import registry
    from preflight.checks import fabric as fab_check
    assert registry.load().checks["fabric.manager"] is fab_check.CHECK
    c = fab_check.CHECK
    assert c.inputs == ("fm-service", "nvidia-smi-q", "nvidia-smi-fabric", "fm-log")
    assert c.required == ("nvidia-smi-q",) and c.node_local and c.in_run
    assert c.profile_keys == {"fabric.nvswitch": bool, "fabric.no_nvswitch_gpus": list}
    assert fab_check.PROBE_FM_SERVICE.commands == ((
        "systemctl", "show", "nvidia-fabricmanager",
        "--property=LoadState,ActiveState,SubState,Result,ExecMainStatus", "--no-pager"),)
    assert fab_check.PROBE_FM_SERVICE.timeout == 10


# ---------------------------------------------------------------------------------------
# fabric manager log parser: exactly
# ---------------------------------------------------------------------------------------


def test_log_records_and_quotes() -> None:
    log_ = facts_of("fm-log", fixture_text("fabricmanager/fm_gpu_nvl_nonfatal_multiline.log"))
    assert log_.records == 5  # type: ignore[attr-defined]
    nvl = log_.events[1]  # type: ignore[attr-defined]
    assert len(nvl.detail) > 6 and nvl.quote == nvl.line + " | " + "; ".join(nvl.detail[:6])
    assert fabricmanager.FmLog().records == 0 and not fabricmanager.FmLog().recognised
    assert fabricmanager.FmLog(records=1).recognised and fabricmanager.FmLog(wrapper_lines=["x"]).recognised


def test_log_continuation_lines_collapse_spaces_and_blank_lines_end_records() -> None:
    text = ("[Mar 02 2025 06:15:00] [ERROR] [tid 7] detected NVSwitch non-fatal error 12028 on fid 0 on NVSwitch pci "
            "bus id 00000000:06:00.0 physical id 1 port 40\n"
            "    portNum    :    40\n"
            "\n"
            "    orphan : 1\n"
            "[Mar 02 2025 06:15:01] [ERROR] [tid 7] detected NVSwitch fatal error 20034 on fid 0\n")
    evs = parse_fm_log(text)
    assert [e.kind for e in evs] == ["nonfatal", "fatal"]
    assert evs[0].detail == ["portNum : 40"] and evs[1].detail == []


def test_init_line_is_a_start_with_its_time() -> None:
    ev = fabricmanager.classify("Fabric Manager Log initializing at: 3/2/2025 06:14:22.513", "", "x")
    assert ev is not None and (ev.kind, ev.time_text) == ("start", "3/2/2025 06:14:22.513")
    ev = fabricmanager.classify("Fabric Manager Log initializing at: 3/2/2025 06:14:22.513", "", "x",
                                time_text="Mar 02 06:14:22")
    assert ev is not None and ev.time_text == "Mar 02 06:14:22"
    ev = fabricmanager.classify("x", "FATAL", "x")
    assert ev is not None and ev.kind == "error"
    ev = fabricmanager.classify("detected NVSwitch non-fatal error 12028 on fid 0 on NVSwitch pci bus id "
                                "00000000:06:00.0 physical id 1", "ERROR", "x")
    assert ev is not None and (ev.switch, ev.port) == ("00000000:06:00.0 (physical id 1)", None)


@pytest.mark.parametrize("ident", ["nv-fabricmanager", "nvidia-fabricmanager", "fabricmanager",
                                   "nvidia-fabricmanager-start.sh"])
def test_every_identifier_of_the_daemon(ident: str) -> None:
    text = (f"Mar 02 06:14:22 n1 {ident}[2011]: Connected to 1 node.\n"
            f"Mar 02 06:14:23 n1 {ident}[2011]: Successfully configured all the available NVSwitches to route GPU "
            "NVLink traffic.\n")
    assert looks_like_fm_log(text)
    assert [e.kind for e in parse_fm_log(text)] == ["configured"]


def test_log_detector_needs_a_fabric_word() -> None:
    assert not looks_like_fm_log("[Mar 02 2025 06:14:22] [INFO] [tid 2011] Logging level = 4\n")
    assert looks_like_fm_log("[Mar 02 2025 06:14:22] [INFO] [tid 2011] getting NVSwitch device information\n")


def test_wrapper_lines() -> None:
    text = ("2025/11/03 10:02:11 nvidia-fabricmanager-wrapper: found NVSwitch LPF: device=mlx5_8 guid=0xcc40f3030027f62e\n"
            "2025/11/03 10:02:11 nvidia-fabricmanager-wrapper: using NVSwitch management port GUID: 0xcc40f3030027f62f\n")
    assert looks_like_fm_log(text)
    log_ = facts_of("fm-log", text)
    assert log_.lpf_found == [("mlx5_8", "0xcc40f3030027f62e")]  # type: ignore[attr-defined]
    assert log_.lpf_used == "0xcc40f3030027f62f" and len(log_.wrapper_lines) == 2  # type: ignore[attr-defined]
    assert log_.records == 0 and log_.recognised  # type: ignore[attr-defined]


def test_from_journal() -> None:
    items = [("t1", "Starting NVIDIA fabric manager service...", "l1"),
             ("t2", "[Jul 23 2024 07:53:55] [ERROR] [tid 841] detected NVSwitch fatal error 20034 on fid 0", "l2"),
             ("t3", "nvidia-fabricmanager-wrapper: found NVSwitch LPF: device=mlx5_9 guid=0x1", "l3"),
             ("t4", "[ERROR] something broke", "l4"),
             ("t5", "Stopped NVIDIA fabric manager service.", "l5"),
             ("t6", "[INFO] [tid 9] Connected to 1 node.", "l6")]
    log_ = fabricmanager.from_journal(items)
    assert [(e.kind, e.time_text, e.line) for e in log_.events] == [("start", "t1", "l1"), ("fatal", "t2", "l2"),
                                                                     ("error", "t4", "l4")]
    assert log_.records == 3 and log_.lpf_found == [("mlx5_9", "0x1")]
    assert fabricmanager._split_prefix("[May 16 2025 15:10:21] [INFO] [tid 30042] GPU probe") == ("INFO", "GPU probe")
    assert fabricmanager._split_prefix("plain message") == ("", "plain message")


def test_fabric_block_paths_and_sections() -> None:
    text = ("Fabric\n    State : Completed\n    Health\n        Bandwidth : Full\n        Deeper\n"
            "            Leaf : 1\n        Back : 2\n    CliqueId : 3\n    Named :\n        Inner : 4\n\n"
            "    After : 5\n")
    [b] = fabricmanager.parse_fabric(Doc.join(frame(text).docs)).blocks
    assert b.fields == {"Fabric/State": "Completed", "Fabric/Health/Bandwidth": "Full",
                        "Fabric/Health/Deeper/Leaf": "1", "Fabric/Health/Back": "2", "Fabric/CliqueId": "3",
                        "Fabric/Named/Inner": "4", "Fabric/After": "5"}
    b2 = fabricmanager.FabricBlock(0, "x", fields={"Fabric/Health/Summary": "a", "Fabric/HealthX": "b"})
    assert b2.under("Fabric/Health") == [("Fabric/Health/Summary", "a")] == b2.under("Fabric/Health/")


def test_fabric_detector_reads_past_other_lines_and_tabs() -> None:
    d = lambda text: fabricmanager.detect_fabric(Doc.join(frame(text).docs))  # noqa: E731
    assert d("Timestamp : x\nFabric\n\tState : Completed\n")
    assert d("    Fabric\n\n        State : Completed\n")
    assert not d("State : Completed\nFabric\n")
    assert not d("Fabric\n\n\n\nStatus : Success\n")


def test_blocks_from_q_skips_gpus_without_a_fabric() -> None:
    from preflight.parsers.nvsmi_q import QGpu, QReport
    rep = QReport(gpus=[QGpu(0, "00000000:18:00.0", {"Product Name": "x"}),
                        QGpu(1, "00000000:2A:00.0", {"Fabric/State": "Completed", "Fabric/Status": "Success",
                                                     "Product Name": "y"}, {"Fabric/State": "State : Completed"})])
    [b] = fabricmanager.blocks_from_q(rep)
    assert (b.index, b.bus_id, b.fields) == (1, "00000000:2A:00.0", {"Fabric/State": "Completed",
                                                                     "Fabric/Status": "Success"})
    assert b.lines == {"Fabric/State": "State : Completed", "Fabric/Status": "Fabric/Status"}


def test_wrapper_log_with_a_status_journal_is_unverified_exactly() -> None:
    wrapper = ("2025/11/03 10:02:11 nvidia-fabricmanager-wrapper: found NVSwitch LPF: device=mlx5_8 guid=0xa\n"
               "2025/11/03 10:02:11 nvidia-fabricmanager-wrapper: found NVSwitch LPF: device=mlx5_9 guid=0xb\n"
               "2025/11/03 10:02:12 nvidia-fabricmanager-wrapper: using NVSwitch management port GUID: 0xb\n")
    status = ("\u25cf nvidia-fabricmanager.service - NVIDIA fabric manager service\n"
              "     Loaded: loaded (/lib/systemd/system/nvidia-fabricmanager.service; enabled)\n"
              "     Active: activating (start) since Mon 2025-11-03 10:02:10 UTC; 5s ago\n\n"
              "Nov 03 10:02:12 n1 nvidia-fabricmanager-wrapper[77]: nvidia-fabricmanager-wrapper: found NVSwitch LPF: "
              "device=mlx5_10 guid=0xc\n"
              "Nov 03 10:02:12 n1 nv-fabricmanager[78]: [INFO] [tid 78] Connected to 1 node.\n")
    r = fabric(mode="analyze", profile="generic", log=capture("fm-log", wrapper), svc=capture("fm-service", status))
    assert r.facts["lpf_candidates"] == ["mlx5_8 0xa", "mlx5_9 0xb", "mlx5_10 0xc"] and r.facts["lpf_used"] == "0xb"
    assert r.facts["codes"] == ["fabric.manager/service-starting"]
    r = fabric(mode="analyze", profile="generic", log=capture("fm-log", wrapper))
    assert r.summary == ("NVSwitch fabric not verified: the fabric manager wrapper found 2 NVSwitch management port(s) "
                         "(mlx5_8 0xa, mlx5_9 0xb) and picked GUID 0xb, which proves neither a running NVLink subnet "
                         "manager nor a Completed fabric; the service state is unknown")
    r = fabric(mode="analyze", profile="generic", log=capture("fm-log", wrapper.splitlines()[0] + "\n"))
    assert r.facts["lpf_used"] is None and "picked GUID" not in r.summary


def test_unverified_without_any_fabric_data() -> None:
    r = fabric(mode="analyze", svc=capture("fm-service", "nothing systemd would print\n"))
    assert r.summary == "NVSwitch fabric not verified: no fabric data"


def test_health_all_healthy_values_pass() -> None:
    text = ("    Fabric\n        State : Completed\n        Status : Success\n        Health\n"
            "            Summary : Healthy\n            Bandwidth : Full\n            Route Recovery in progress : False\n"
            "            Route Unhealthy : False\n            Access Timeout Recovery : False\n"
            "            Incorrect Configuration : None\n            Partition Assigned : N/A\n")
    [r] = grade_text("fabric.manager", {"nvidia-smi-fabric": text})
    assert r.status is Status.PASS and "codes" not in r.facts


def test_many_events_and_switches_are_counted_not_all_quoted() -> None:
    lines = "".join(f"[Mar 02 2025 06:15:{i:02d}] [ERROR] [tid 7] detected NVSwitch non-fatal error 12028 on fid 0 on "
                    f"NVSwitch pci bus id 00000000:0{i % 6}:00.0 physical id {i % 6} port {i}\n" for i in range(10))
    r = fabric(mode="analyze", log=capture("fm-log", lines))
    assert "10 x NVSwitch non-fatal error(s) (SXid 12028) on NVSwitch 00000000:00:00.0 (physical id 0) port 0, " \
           "00000000:00:00.0 (physical id 0) port 6, 00000000:01:00.0 (physical id 1) port 1, 00000000:01:00.0 " \
           "(physical id 1) port 7" in r.summary
    assert "... 2 more such lines (10 in all)" in r.evidence


# ---------------------------------------------------------------------------------------
# systemd's and the daemon's lines pasted without the journal's time and host

CUT = ("nv-fabricmanager[27360]: fabric manager NVIDIA GPU driver interface version 570.211.01 don't match...\n"
       "nvidia-fabricmanager.service: Main process exited, code=exited, status=1/FAILURE\n"
       "Failed to start NVIDIA fabric manager service.\n")


def test_bare_journal_lines_and_a_cut_version_mismatch() -> None:
    assert looks_like_fm_service(CUT) and not looks_like_fm_log(CUT)
    st = parse_fm_service(CUT)
    assert [(j.ident, j.message[:24]) for j in st.journal] == [
        ("nv-fabricmanager", "fabric manager NVIDIA GP"), ("systemd", "nvidia-fabricmanager.ser"),
        ("systemd", "Failed to start NVIDIA f")]
    assert (st.active, st.result) == ("failed", "exit-code")
    [r] = grade_text("fabric.manager", {"fm-service": CUT}, profile="h100-sxm-8x")
    assert r.status is Status.FAIL
    assert r.facts["codes"][:2] == ["fabric.manager/version-mismatch", "fabric.manager/service-not-running"]
    assert r.summary.startswith("the fabric manager (570.211.01) refuses to run with the loaded driver (its version "
                                "cut off): their versions differ")
    assert "(`cat /proc/driver/nvidia/version` shows it)" in r.remedy


def test_a_bare_systemd_line_about_another_unit_is_not_the_fabric_manager() -> None:
    assert not looks_like_fm_service("sshd.service: Main process exited, code=exited, status=1/FAILURE\n")
    assert looks_like_fm_service("Started NVIDIA fabric manager service.\n")


# ---------------------------------------------------------------------------------------
# the daemon's lines without framing, its usage text, level-less journal messages: exactly
# ---------------------------------------------------------------------------------------

FM_USAGE = ["Usage: nv-fabricmanager [options]", "Options include:", "[-h | --help]: Displays help information",
            "[-c | --config]: Provides Fabric Manager config file path/name which controls all the config options."]
FM_JOURNAL = "Nov 25 10:11:12 gpu017 nv-fabricmanager[1234]: "


def test_journal_messages_without_a_level_are_errors_of_the_daemons_own_lines_only() -> None:
    unable = "unable to open NVSwitch device /dev/nvidia-nvswitch2"
    dump = "Option when facing NVSwitch failure = 0"  # the start-up configuration dump
    other = "Failed to initialize NVML: Driver/library version mismatch"  # an ExecStartPre program's line
    items = [("t1", unable, FM_JOURNAL + unable), ("t2", dump, FM_JOURNAL + dump),
             ("t3", other, "Nov 25 10:11:13 gpu017 nvidia-smi[2300]: " + other),
             ("t4", unable, "Nov 25 10:11:14 gpu017 nvidia-fabricmanager-start.sh[2291]: " + unable)]
    log_ = fabricmanager.from_journal(items)
    assert [(e.kind, e.time_text) for e in log_.events] == [("error", "t1"), ("error", "t4")]
    assert log_.records == 4
    assert fabricmanager.error_words(unable) and not fabricmanager.error_words(dump)
    assert fabricmanager.error_words("Abort CUDA jobs failed") and not fabricmanager.error_words(
        "Abort CUDA jobs when FM exits = 1")


def test_usage_text_in_the_units_journal_is_a_refused_command_line() -> None:
    usage = [("t", u, FM_JOURNAL + u) for u in FM_USAGE]
    log_ = fabricmanager.from_journal(usage)
    [ev] = log_.events
    assert (ev.kind, ev.line, ev.detail) == ("bad-option", FM_JOURNAL + FM_USAGE[0], [FM_JOURNAL + u for u in FM_USAGE])
    assert log_.usage and log_.recognised and log_.records == 4
    refusal = "unrecognized option '--foo'"
    log_ = fabricmanager.from_journal([("t", refusal, FM_JOURNAL + refusal), *usage])
    [ev] = log_.events  # the refusal's event, the usage text its detail
    assert (ev.kind, ev.line, ev.detail) == ("bad-option", FM_JOURNAL + refusal, [FM_JOURNAL + u for u in FM_USAGE])
    assert log_.records == 5


def test_usage_text_pasted_with_the_daemons_prefix_is_a_refused_command_line() -> None:
    log_ = facts_of("fm-log", "".join(f"nv-fabricmanager[27360]: {u}\n" for u in FM_USAGE))
    [ev] = log_.events  # type: ignore[attr-defined]
    assert (ev.kind, ev.line, ev.detail) == ("bad-option", "nv-fabricmanager[27360]: " + FM_USAGE[0], FM_USAGE)
    assert log_.usage and log_.recognised and log_.records == 4  # type: ignore[attr-defined]


def test_usage_text_alone_without_a_refusal_or_the_journal_is_no_event() -> None:
    log_ = fabricmanager.parse(Doc("".join(u + "\n" for u in FM_USAGE)))
    assert not log_.events and not log_.usage and log_.records == 0


def test_usage_text_asked_for_just_before_is_no_event() -> None:
    journal = "".join(FM_JOURNAL + u + "\n" for u in FM_USAGE)
    assert not fabricmanager.parse(Doc("$ nv-fabricmanager -h\n" + journal)).events
    # the help asked for four lines up (another command and its output between): the unit's own usage text
    far = ("$ nv-fabricmanager -h > /dev/null\n$ journalctl -u nvidia-fabricmanager -n 5 --no-pager\n"
           "-- Logs begin at Mon 2026-11-23 08:00:01 UTC, end at Wed 2026-11-25 10:11:12 UTC. --\n"
           "Nov 25 10:11:11 gpu017 systemd[1]: Starting NVIDIA fabric manager service...\n")
    assert [e.kind for e in fabricmanager.parse(Doc(far + journal)).events] == ["bad-option"]


def test_usage_text_is_the_detail_of_the_last_refusal_or_its_own_event() -> None:
    bare = "nv-fabricmanager[27360]: "
    usage = "".join(f"{bare}{u}\n" for u in FM_USAGE)
    log_ = facts_of("fm-log", f"{bare}unrecognized option '--foo'\n{bare}unrecognized option '--bar'\n"
                              f"{bare}unrecognized option '--baz'\n" + usage)
    assert [(e.kind, len(e.detail)) for e in log_.events] == [  # type: ignore[attr-defined]
        ("bad-option", 0), ("bad-option", 0), ("bad-option", 4)]
    log_ = facts_of("fm-log", f"{bare}unable to open NVSwitch device /dev/nvidia-nvswitch2\n"
                              f"{bare}Fabric Manager Log initializing at: 11/25/2026 10:11:11.100\n" + usage)
    assert [(e.kind, len(e.detail)) for e in log_.events] == [  # type: ignore[attr-defined]
        ("error", 0), ("start", 0), ("bad-option", 4)]


def test_a_daemon_line_pasted_with_its_prefix_only_is_its_record() -> None:
    line = "nv-fabricmanager[27360]: unable to open NVSwitch device /dev/nvidia-nvswitch2"
    log_ = facts_of("fm-log", line + "\n")
    assert [(e.kind, e.line) for e in log_.events] == [("error", line)]  # type: ignore[attr-defined]
    assert log_.records == 1  # type: ignore[attr-defined]
    assert looks_like_fm_log("nv-fabricmanager[27360]: Successfully configured all the available NVSwitches to "
                             "route GPU NVLink traffic.\n")


def test_start_script_failure_keeps_the_exit_code() -> None:
    line = '"/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg" failed! Exit code: 1'
    ev = fabricmanager.classify(line, "", line)
    assert ev is not None and (ev.kind, ev.values) == ("start-failed", {"exit_code": "1"})
