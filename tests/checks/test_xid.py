"""gpu.xid: Xid catalog grading over kernel-log facts (parsing: tests/parsers/test_kernel_log.py)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from preflight import policy
from preflight.checks import xid as xm
from preflight.checks import xid_catalog as cat
from preflight.framing import Line
from preflight.model import Status
from preflight.parsers.kernel_log import XidEvent
from preflight.probes import run_probe
from tests.conftest import FIXTURES, capture, fixture_text, grade, grade_text
from tests.fakes import install, scenario

KL = "kernel-log"


def _ev(code: int, **kw: Any) -> XidEvent:
    return XidEvent(xid=code, pci="0000:01:00", line=Line("", 1, ""), text="", **kw)


def one(text: str, profile: str = "generic", rc: int = 0, stderr: str = "", argv: list[str] | None = None,
        **extra: Any):
    res = grade("gpu.xid", {KL: capture(KL, text, rc=rc, stderr=stderr, argv=argv or ["dmesg", "-T"])},
                profile=profile, **extra)
    assert len(res) == 1
    return res[0]


# --------------------------------------------------------------------------------------------
# sympathetic links and windows (graded facts)


def _caused(r) -> dict:
    return {(e["pci"], e["xid"]): e["caused_by"] for e in r.facts["events"]}


def test_sympathetic_links():
    r = one(fixture_text("kernel-log/dmesg_iso_xid48_63_94.log"))
    assert {e["xid"]: e["caused_by"] for e in r.facts["events"]} == {48: None, 63: 48, 94: 48}
    c = _caused(one(fixture_text("kernel-log/journal_short_iso_xid13_45.log")))
    assert c[("0000:4f:00", 45)] == 13
    assert c[("0000:ce:00", 45)] is None  # a solo 45 on another GPU


def test_sympathetic_needs_the_same_gpu_and_the_window(tmp_path: Path):
    text = ("[100.000000] NVRM: Xid (PCI:0000:01:00): 13, pid=1, name=a, Graphics Exception\n"
            "[100.100000] NVRM: Xid (PCI:0000:02:00): 43, pid=1, name=a, Ch 00000008\n"
            "[900.000000] NVRM: Xid (PCI:0000:01:00): 43, pid=1, name=a, Ch 00000008\n")
    assert set(_caused(one(text)).values()) == {None}
    prof = tmp_path / "wide.toml"
    prof.write_text('[profile]\nname = "wide"\nextends = "generic"\n[xid]\n'
                    'sympathetic_window_s = { value = 1000, source = "test" }\n')
    c = _caused(one(text, profile=str(prof)))
    assert c[("0000:01:00", 43)] == 13 and c[("0000:02:00", 43)] is None


def test_driver_annotation_ties_45_to_its_cause_beyond_the_window():
    text = ("[  10.000000] NVRM: Xid (PCI:0000:3b:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x016415c6 0x0)\n"
            "[5000.000000] NVRM: Xid (PCI:0000:3b:00): 45, pid=9, name=py, Ch 00000010 caused by previous Xid 149\n")
    r = one(text)
    assert r.status is Status.FAIL
    ev = {e["xid"]: e for e in r.facts["events"]}
    assert ev[45]["caused_by"] == 149 and ev[45]["severity"] == "info"
    assert "(after Xid 149)" in r.summary


def test_xid154_recovery_action():
    text = ("[Tue Mar  4 02:10:01 2025] NVRM: Xid (PCI:0000:3d:00): 154, GPU recovery action changed from 0x0 "
            "(None) to 0x2 (Node Reboot Required)\n")
    r = one(text)
    assert r.status is Status.FAIL
    assert r.facts["events"][0]["action"] == "RESTART_BM"
    assert "reboot" in r.remedy


def test_since_filters_wall_time_and_keeps_monotonic():
    text = ("2025-01-01T00:00:00,000000+00:00 NVRM: Xid (PCI:0000:01:00): 79, pid=1, name=a, GPU has fallen off the bus.\n"
            "[  500.000000] NVRM: Xid (PCI:0000:02:00): 13, pid=1, name=a, Graphics Exception\n")
    r = one(text, xid_since=datetime(2025, 2, 1, tzinfo=timezone.utc))
    assert [e["xid"] for e in r.facts["events"]] == [13]
    assert r.facts["dropped_before_since"] == 1 and r.status is Status.WARN


def test_syslog_times_without_a_year_are_placed_before_the_window_start():
    text = "Dec 30 23:59:59 n1 kernel: NVRM: Xid (PCI:0000:01:00): 79, pid=1, name=a, GPU has fallen off the bus.\n"
    r = one(text, xid_since=datetime(2025, 1, 2))
    assert r.status is Status.PASS and r.facts["dropped_before_since"] == 1  # 30 Dec 2024
    r = one(text, xid_since=datetime(2024, 12, 30))
    assert r.status is Status.FAIL and r.facts["events"][0]["time"] == "2024-12-30T23:59:59"


def test_grep_fragment_that_cannot_show_xids_is_not_a_pass():
    text = ("root@n1:~# dmesg | grep bond0\n"
            "[   34.508774] bond0: Enslaving eth0 as a backup interface with a down link\n"
            "[   34.559816] bond0: Enslaving eth1 as a backup interface with a down link\n")
    r = grade_text("gpu.xid", {KL: text})[0]
    assert r.status is Status.SKIP and "grep bond0" in r.summary
    r = grade_text("gpu.xid", {KL: "root@n1:~# dmesg -T | grep -i xid\n"
                                   "[Mon Jun  3 10:12:01 2024] NVRM: Xid (PCI:0000:01:00): 13, pid=1, name=a, x\n"})[0]
    assert r.status is Status.WARN and r.facts["filter"] == ["xid"]


def test_driver_that_drives_no_gpu_is_skipped_here_and_named():
    r = one("[188497.595099] NVRM: No NVIDIA graphics adapter probed!\n[188497.6] nvidia-nvlink: Unregistered\n")
    assert r.status is Status.SKIP and "gpu.driver" in r.summary


# --------------------------------------------------------------------------------------------
# grading


def test_xid79_fail_reboot_remedy_and_fallen_line_not_double_counted():
    r = one(fixture_text("kernel-log/dmesg_T_xid79_fallen_off_bus.log"))
    assert r.status is Status.FAIL
    assert "Xid 79" in r.summary and "0000:bd:00" in r.summary
    assert "reboot clears Xid 79" in r.remedy and r.remedy.startswith("(1) drain node")
    assert r.facts["codes"] == ["gpu.xid/restart-bm", "gpu.xid/restart-app"]
    assert "report to the job owner" in r.remedy  # the Xid 31 on the other GPU
    assert not r.facts["faults"]  # the "fallen off the bus" line belongs to the Xid 79
    assert any("79" in e for e in r.evidence)
    ev79 = next(e for e in r.facts["events"] if e["xid"] == 79)
    assert ev79["action"] == "RESTART_BM" and ev79["uuid"].startswith("GPU-99aa")
    assert ev79["time"] == "2025-03-04T02:12:09"


def test_fallen_off_bus_without_xid_fails():
    r = one("[  10.0] NVRM: GPU 0000:41:00.0: GPU has fallen off the bus.\n[  11.0] eth0: link up\n[ 12.0] x: y\n")
    assert r.status is Status.FAIL
    assert r.facts["faults"][0]["kind"] == "fallen_off_bus" and r.facts["faults"][0]["pci"] == "0000:41:00"
    assert "reboot" in r.remedy


def test_nvlink_discovery_failure_fails():
    r = one("Jul 09 10:42:47 n1 kernel: NVRM: knvlinkCoreDiscoverLinks_GH100: link training failed!\n")
    assert r.status is Status.FAIL
    assert r.facts["faults"][0]["kind"] == "nvlink_discovery_failed"
    assert "NVLink" in r.remedy


def test_dbe_group_and_remap_remedy():
    r = one(fixture_text("kernel-log/dmesg_iso_xid48_63_94.log"), profile="h100-sxm-8x")
    assert r.status is Status.FAIL
    assert "Xid 48" in r.summary and "Xid 94" in r.summary and "after Xid 48" in r.summary
    assert "ROW_REMAPPER" in r.remedy
    ev = {e["xid"]: e for e in r.facts["events"]}
    assert ev[94]["count"] == 7 and ev[94]["caused_by"] == 48 and ev[94]["severity"] == "info"
    assert not any("peermem" in e for e in r.evidence)


def test_app_flood_is_warn_deduplicated_not_a_drain():
    r = one(fixture_text("kernel-log/dmesg_decode_xid13_flood_two_gpus.log"))
    assert r.status is Status.WARN
    assert "no drain" in r.remedy and "drain node" not in r.remedy
    assert r.facts["counts"] == {"0000:1b:00": {"13": 18, "43": 3}, "0000:9c:00": {"13": 18}}
    assert "x18 in 3 bursts" in r.summary
    assert len(r.facts["events"]) == 9  # bursts, not 39 lines
    assert all(e["severity"] in ("warn", "info") for e in r.facts["events"])


def test_repeat_warn_suggests_a_diag(tmp_path: Path):
    prof = tmp_path / "p.toml"
    prof.write_text('[profile]\nname = "p"\nextends = "generic"\n[xid]\nrepeat_warn = { value = 3, source = "test" }\n')
    r = one(fixture_text("kernel-log/dmesg_decode_xid13_flood_two_gpus.log"), profile=str(prof))
    assert r.status is Status.WARN and "dcgmi diag" in r.remedy


def test_raw_monotonic_keeps_seconds():
    r = one(fixture_text("kernel-log/dmesg_raw_xid119_stack.log"), argv=["dmesg"])
    assert r.status is Status.FAIL
    ev = r.facts["events"][0]
    assert ev["time"] is None and ev["uptime_s"] == pytest.approx(88213.44187) and ev["gpu"] == 2
    assert "nvidia-smi -r -i 0000:5e:00.0" in r.remedy and "(GPU2)" in r.remedy
    assert any("likely needs to be reset" in e for e in r.evidence)


def test_syslog_kern_log_xid62():
    r = one(fixture_text("kernel-log/syslog_kern_xid62.log"))
    assert r.status is Status.FAIL and "Xid 62" in r.summary


def test_nvlink5_nonfatal_warn_fatal_fail():
    r = one(fixture_text("kernel-log/kmsg_xid150_nonfatal.log"))
    assert r.status is Status.WARN
    ev = r.facts["events"][0]
    assert ev["unit"] == "MSE_WATCHDOG" and ev["fatal"] is False and ev["registers"][0] == "0x00000004"
    r = one("4,1,2,-;NVRM: Xid (PCI:0008:01:00): 150, MSE Fatal XC0 i0 Link 3 (0x00000010 0x0 0x0 0x0 0x0 0x0)\n")
    assert r.status is Status.FAIL and "NVLink5" in r.remedy


def test_solo_45_warns_and_sympathetic_45_is_info():
    r = one(fixture_text("kernel-log/journal_short_iso_xid13_45.log"),
            argv=["journalctl", "-k", "--no-pager", "-o", "short-iso"])
    assert r.status is Status.WARN
    sev = {(e["pci"], e["xid"]): e["severity"] for e in r.facts["events"]}
    assert sev[("0000:4f:00", 45)] == "info" and sev[("0000:ce:00", 45)] == "warn"
    assert r.facts["source_command"].startswith("journalctl")


def test_clean_log_passes():
    r = one(fixture_text("kernel-log/journal_short_clean.log"))
    assert r.status is Status.PASS and r.facts["events"] == []


def test_profile_fail_and_ignore(tmp_path: Path):
    prof = tmp_path / "site.toml"
    prof.write_text('[profile]\nname = "site"\nextends = "generic"\n[xid]\n'
                    'fail = { value = [31], source = "site policy: MMU faults drain" }\n'
                    'ignore = { value = [79], source = "lab node" }\n')
    r = one(fixture_text("kernel-log/dmesg_T_xid79_fallen_off_bus.log"), profile=str(prof))
    assert r.status is Status.FAIL
    assert "Xid 31" in r.summary and "Xid 79" not in r.summary
    assert any("site policy" in e for e in r.evidence) and any("lab node" in e for e in r.evidence)
    assert {e["xid"]: e["severity"] for e in r.facts["events"]} == {31: "fail", 79: "ignored"}


def test_since_from_options_extra():
    text = fixture_text("kernel-log/dmesg_iso_xid48_63_94.log")
    r = one(text, xid_since="2025-02-11T10:00:00+00:00")
    assert r.status is Status.PASS and r.facts["dropped_before_since"] == 9
    assert "since 2025-02-11" in r.summary
    r = one(text, xid_since=datetime(2025, 2, 11, 9, 0, tzinfo=timezone.utc))
    assert r.status is Status.FAIL


def test_unknown_code_is_not_recognised():
    r = one("[  1.0] NVRM: Xid (PCI:0000:01:00): 999, pid=1, name=x, something new\n")
    assert r.status is Status.SKIP and "not in catalog" in r.summary
    assert r.facts["codes"] == ["gpu.xid/not-in-catalog"]


@pytest.mark.parametrize("text, rc, stderr, status", [
    ("", 1, "dmesg: read kernel buffer failed: Operation not permitted\n", Status.ERROR),
    ("", 0, "", Status.ERROR),
    ("-- No entries --\n", 0, "", Status.ERROR),
    ("random words\nwith no kernel prefix at all\n", 0, "", Status.ERROR),
    ("\x00\x01binary\x02", 0, "", Status.ERROR),
])
def test_bad_input_gives_a_result(text, rc, stderr, status):
    r = one(text, rc=rc, stderr=stderr)
    assert r.status is status
    assert r.summary and r.remedy


def test_truncated_capture_does_not_raise():
    text = fixture_text("kernel-log/dmesg_T_xid79_fallen_off_bus.log")
    cut = text[: len(text) // 2] + "\n[preflight: 1234 bytes of output dropped here]\n" + text[len(text) // 2 + 17:]
    r = one(cut)
    assert r.status in (Status.FAIL, Status.WARN)


def test_missing_probe_skips():
    res = grade("gpu.xid", {})
    assert res[0].status is Status.SKIP


def test_catalog_consistency():
    for code, info in cat.CATALOG.items():
        assert info.code == code
        assert info.bucket in cat.BUCKET_CODES or info.bucket in ("WORKFLOW_NVLINK5_ERR", "XID_154"), code
    for code in (48, 62, 64, 74, 79, 95, 109, 119, 120, 140, 143, 171, 175):
        assert policy.status(xm.code_of(_ev(code), set())[1]) is Status.FAIL, code
    for code in (13, 31, 43, 94):
        assert policy.status(xm.code_of(_ev(code), set())[1]) is Status.WARN, code
    assert cat.lookup(12345) is None


def test_probe_falls_back_to_journalctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    bin_dir = install(tmp_path / "bin", ["dmesg", "journalctl"])
    scen = scenario(tmp_path / "scen", {
        "dmesg": [{"match": "", "stderr": "dmesg: read kernel buffer failed: Operation not permitted\n", "rc": 1}],
        "journalctl": [{"match": "-k", "stdout": "j.log"}],
    }, {"j.log": FIXTURES / "kernel-log" / "journal_short_iso_xid13_45.log"})
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    monkeypatch.setenv("PREFLIGHT_FAKE_DIR", str(scen))
    cap = run_probe(xm.PROBE)
    assert cap.argv[0] == "journalctl" and "short-iso" in cap.argv
    r = grade("gpu.xid", {KL: cap})[0]
    assert r.status is Status.WARN
