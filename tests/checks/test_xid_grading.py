"""gpu.xid grading, function by function: windows and sympathetic links, the code of each Xid
and fault, what covers what, facts, summaries, evidence and remedies (checks/xid.py)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from preflight.checks import xid as xm
from preflight.checks import xid_catalog as cat
from preflight.framing import Line
from preflight.model import Status
from preflight.parsers.kernel_hw import KernelFault
from preflight.parsers.kernel_log import XidEvent
from tests.conftest import capture, grade

KL = "kernel-log"
T0 = datetime(2025, 3, 4, 2, 10, 0)


def ln(n: int = 1, t: datetime | None = None, mono: float | None = None, raw: str = "") -> Line:
    return Line(raw or f"line {n}", n, raw or f"line {n}", time=t, mono=mono, time_text=t.isoformat() if t else "")


def ev(xid: int, pci: str = "0000:01:00", n: int = 1, **kw: Any) -> XidEvent:
    line = kw.pop("line", None) or ln(n, T0 + timedelta(seconds=n))
    return XidEvent(xid=xid, pci=pci, line=line, text=kw.pop("text", ""), **kw)


def one(text: str, profile: str = "generic", rc: int = 0, argv: list[str] | None = None, **extra: Any):
    res = grade("gpu.xid", {KL: capture(KL, text, rc=rc, argv=argv or ["dmesg", "-T"])}, profile=profile, **extra)
    assert len(res) == 1
    return res[0]


def xid_line(pci: str, code: int, rest: str, s: int = 0) -> str:
    return f"[Tue Mar  4 02:10:{s:02d} 2025] NVRM: Xid (PCI:{pci}): {code}, {rest}\n"


# ----------------------------------------------------------------------------- time


def test_seconds_between_wall_times_and_uptimes():
    a, b = ln(1, T0), ln(2, T0 + timedelta(seconds=30))
    assert xm._seconds_between(a, b) == 30 and xm._seconds_between(b, a) == 30
    aware = ln(3, T0.replace(tzinfo=timezone.utc))
    assert xm._seconds_between(a, aware) is None
    assert xm._seconds_between(ln(1, mono=5.0), ln(2, mono=1.5)) == 3.5
    assert xm._seconds_between(ln(1, T0, mono=1.0), ln(2, mono=3.0)) == 2.0
    assert xm._seconds_between(ln(1), ln(2)) is None


def test_within_a_window():
    a = ln(1, T0)
    assert xm._within(a, ln(2, T0 + timedelta(seconds=60)), 60)
    assert not xm._within(a, ln(2, T0 + timedelta(seconds=61)), 60)
    assert xm._within(a, ln(2), 0)  # no time known: linked


def test_before_the_window_start():
    since = datetime(2025, 3, 4, 3, 0, 0)
    assert xm._before(T0, since) and not xm._before(since, since) and not xm._before(since + timedelta(1), since)
    assert not xm._before(None, since) and not xm._before(T0, None)
    utc = timezone.utc
    local = since.astimezone()
    assert xm._before((local - timedelta(seconds=1)).replace(tzinfo=None), local.astimezone(utc))
    assert not xm._before((local + timedelta(seconds=1)).astimezone(utc), local.replace(tzinfo=None))
    assert xm._before((local - timedelta(seconds=1)).astimezone(utc), local.replace(tzinfo=None))


def test_dated_puts_a_yearless_syslog_time_in_the_reference_year():
    line = ln(1, datetime(1900, 12, 30, 23, 59, 59))
    assert xm._dated(line, datetime(2025, 1, 2)).time == datetime(2024, 12, 30, 23, 59, 59)
    line = ln(1, datetime(2023, 5, 1))
    assert xm._dated(line, datetime(2025, 1, 2)).time == datetime(2023, 5, 1)
    assert xm._dated(ln(1), datetime(2025, 1, 2)).time is None


# ----------------------------------------------------------------------------- causes


def test_implied_causes_are_added_once_per_gpu_and_only_when_not_shown():
    events = [ev(45, n=1, caused_by=149, gpu=3), ev(45, n=2, caused_by=149), ev(45, "0000:02:00", n=3, caused_by=149),
              ev(145, "0000:03:00", n=4), ev(45, "0000:03:00", n=5, caused_by=145), ev(13, n=6)]
    out = xm._with_implied_causes(events)
    assert [(e.xid, e.pci, e.implied) for e in out] == [
        (149, "0000:01:00", True), (45, "0000:01:00", False), (45, "0000:01:00", False),
        (149, "0000:02:00", True), (45, "0000:02:00", False), (145, "0000:03:00", False), (45, "0000:03:00", False),
        (13, "0000:01:00", False)]
    implied = out[0]
    assert implied.line is events[0].line and implied.gpu == 3
    assert implied.text == "named by a later Xid 45: caused by previous Xid 149"


def test_sympathetic_links_by_table_annotation_and_window():
    events = [ev(48, n=1), ev(94, n=2), ev(63, n=3), ev(13, n=4), ev(43, n=5), ev(45, n=6),
              ev(45, "0000:02:00", n=7), ev(31, "0000:02:00", n=8), ev(45, "0000:02:00", n=9, caused_by=79)]
    assert xm._link_sympathetic(events, 60) == {1: 48, 2: 48, 4: 13, 5: 13, 8: 79}
    late = [ev(48, n=1), ev(94, line=ln(2, T0 + timedelta(seconds=500)))]
    assert xm._link_sympathetic(late, 60) == {}
    chain = [ev(48, n=1), ev(94, n=2), ev(45, n=3)]  # a 45 after a sympathetic 94 goes to 94's cause
    assert xm._link_sympathetic(chain, 60) == {1: 48, 2: 48}
    same = [ev(45, n=1), ev(45, n=2)]
    assert xm._link_sympathetic(same, 60) == {}


def test_group_bursts_per_gpu_cause_unit_word_and_action():
    events = [ev(13, n=1), ev(13, n=2), ev(13, "0000:02:00", n=3), ev(13, line=ln(4, T0 + timedelta(seconds=200))),
              ev(149, n=5, unit="NETIR", fatal=True), ev(149, n=6, unit="NETIR", fatal=False),
              ev(154, n=7, recovery_code=1), ev(154, n=8, recovery_code=0), ev(154, n=9, recovery_code=1)]
    groups = xm._group(events, {2: 48}, 60)
    assert [(g.first.xid, g.first.pci, g.count, g.end, g.caused_by) for g in groups] == [
        (13, "0000:01:00", 2, 1, None), (13, "0000:02:00", 1, 2, 48), (13, "0000:01:00", 1, 3, None),
        (149, "0000:01:00", 1, 4, None), (149, "0000:01:00", 1, 5, None), (154, "0000:01:00", 2, 8, None),
        (154, "0000:01:00", 1, 7, None)]
    assert groups[5].last is events[8] and groups[0].last is events[1] and groups[0].key == (13, "0000:01:00")


# ----------------------------------------------------------------------------- codes


@pytest.mark.parametrize("event, fail, action, code", [
    (ev(31), set(), "RESTART_APP", "gpu.xid/restart-app"),
    (ev(31), {31}, "RESET_GPU", "gpu.xid/site-fail"),
    (ev(79), set(), "RESTART_BM", "gpu.xid/restart-bm"),
    (ev(144, fatal=True), set(), "WORKFLOW_NVLINK5_ERR", "gpu.xid/workflow-nvlink5-err-fatal"),
    (ev(150, fatal=False), set(), "WORKFLOW_NVLINK5_ERR", "gpu.xid/workflow-nvlink5-err-nonfatal"),
    (ev(149), set(), "WORKFLOW_NVLINK5_ERR", "gpu.xid/workflow-nvlink5-err-unstated"),
    (ev(154, recovery_code=3), set(), "DRAIN_P2P", "gpu.xid/recovery-drain-p2p"),
    (ev(154), set(), "XID_154", "gpu.xid/recovery-unknown"),
    (ev(143), set(), "RESET_GPU", "gpu.xid/reset-gpu"),
    (ev(151), set(), "RESTART_VM", "gpu.xid/restart-vm"),
    (ev(162), set(), "INFO", "gpu.xid/informational"),
    (ev(200), set(), "UNKNOWN", "gpu.xid/not-in-catalog"),
])
def test_code_of(event: XidEvent, fail: set[int], action: str, code: str):
    assert xm.code_of(event, fail) == (action, code)


def test_code_of_a_bucket_without_a_code(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(cat.CATALOG, 31, cat.XidInfo(31, "M", "d", "NEW_BUCKET", "", "NEW_BUCKET"))
    assert xm.code_of(ev(31), set()) == ("NEW_BUCKET", "gpu.xid/not-in-catalog")


def test_classify():
    g = xm.Group(first=ev(31), last=ev(31))
    xm._classify(g, set(), {31})
    assert (g.severity, g.code, g.action) == ("ignored", "gpu.xid/restart-app", "RESTART_APP")
    g = xm.Group(first=ev(94), last=ev(94), caused_by=48)
    xm._classify(g, set(), set())
    assert g.severity == "info"
    g = xm.Group(first=ev(95), last=ev(95), caused_by=48)
    xm._classify(g, set(), set())
    assert g.severity == "fail"  # a sympathetic Xid that needs a reset on its own keeps its status
    g = xm.Group(first=ev(154, recovery_code=5), last=ev(154), caused_by=62)
    xm._classify(g, set(), set())
    assert (g.severity, g.code) == ("fail", "gpu.xid/recovery-imex-domain")
    g = xm.Group(first=ev(154, recovery_code=9), last=ev(154), caused_by=62)
    xm._classify(g, set(), set())
    assert g.severity == "warn"  # Xid 154 with an Unknown action: a problem, not a skip
    g = xm.Group(first=ev(31), last=ev(31))
    xm._classify(g, set(), set())
    assert g.severity == "warn"


def test_a_recovery_action_back_to_none_clears_that_gpus_earlier_failures():
    events = [ev(62, n=1), ev(79, "0000:02:00", n=2), ev(13, n=3), ev(154, n=4, recovery_code=0), ev(48, n=5)]
    groups = xm._group(events, {}, 60)
    for g in groups:
        xm._classify(g, set(), set())
    xm._clear_recovered(groups)
    assert [(g.first.xid, g.severity, g.cleared) for g in groups] == [
        (62, "info", True), (79, "fail", False), (13, "warn", False), (154, "pass", False), (48, "fail", False)]
    groups = xm._group([ev(62, n=1), ev(154, n=2, recovery_code=1)], {}, 60)
    for g in groups:
        xm._classify(g, set(), set())
    xm._clear_recovered(groups)
    assert [g.severity for g in groups] == ["fail", "fail"]


# ----------------------------------------------------------------------------- faults


def fault(kind: str, pci: str = "", n: int = 1, **kw: Any) -> KernelFault:
    return KernelFault(kind, pci, ln(n, T0 + timedelta(seconds=n)), **kw)


@pytest.mark.parametrize("f, code", [
    (fault("pcie_fatal", "0000:17:00"), "gpu.xid/pcie-fatal"),
    (fault("pcie_fatal", "0000:17:00", resolved=True), "gpu.xid/pcie-recovered"),
    (fault("pcie_nonfatal", "0000:17:00", resolved=True), "gpu.xid/pcie-recovered"),
    (fault("pcie_link_down", "0000:00:03", resolved=True), "gpu.xid/pcie-link-bounced"),
    (fault("pcie_link_down", "0000:00:03"), "gpu.xid/pcie-link-down"),
    (fault("sxid_fatal", "0000:86:00", resolved=True), "gpu.xid/sxid-fatal"),
    (fault("pcie_corrected", "0000:00:1c"), "gpu.xid/pcie-corrected-other"),
    (fault("pcie_corrected", "0000:00:1c", device="mlx5_core"), "gpu.xid/pcie-corrected"),
    (fault("pcie_corrected", "0000:00:1c", vendor="15b3:1021"), "gpu.xid/pcie-corrected"),
    (fault("pcie_corrected", "0000:00:1c", vendor="10de"), "gpu.xid/pcie-corrected"),
    (fault("pcie_corrected", "0000:18:00"), "gpu.xid/pcie-corrected"),
    (fault("pcie_corrected", "0000:00:1c", vendor="8086:a114"), "gpu.xid/pcie-corrected-other"),
    (fault("gsp_timeout"), "gpu.xid/gsp-timeout"),
    (fault("power_cables"), "gpu.xid/check-mechanicals"),
    (fault("rm_error"), "gpu.xid/driver-error-status"),
    (fault("sxid_correctable"), "gpu.xid/sxid-correctable"),
])
def test_fault_code(f: KernelFault, code: str):
    assert xm.fault_code(f, {"0000:18:00": {"index": 0}}) == code


def test_covered_gpu_faults():
    fail = {"0000:01:00"}
    assert xm._covered(fault("gsp_timeout", "0000:01:00"), fail, False, set())
    assert not xm._covered(fault("gsp_timeout", "0000:02:00"), fail, False, set())
    assert not xm._covered(fault("pcie_fatal", "0000:01:00"), fail, True, {"0000:01:00"})
    assert xm._covered(fault("gsp_timeout"), fail, False, set())
    assert xm._covered(fault("gsp_timeout"), set(), True, set())
    assert not xm._covered(fault("gsp_timeout"), set(), False, set())
    gone = {"0000:03:00"}
    assert xm._covered(fault("adapter_init_failed", "0000:03:00"), set(), True, gone)
    assert not xm._covered(fault("fallen_off_bus", "0000:03:00"), set(), True, gone)
    assert not xm._covered(fault("memsys_error", "0000:03:00"), set(), True, gone)
    assert not xm._covered(fault("adapter_init_failed", "0000:04:00"), set(), True, gone)


def test_fault_groups_by_code_and_device_with_details():
    faults = [fault("pcie_corrected", "0000:01:00", 1, device="nvidia", detail="RxErr"),
              fault("pcie_corrected", "0000:01:00", 2, device="nvidia", detail="RxErr"),
              fault("pcie_corrected", "0000:01:00", 3, device="nvidia", detail="BadTLP"),
              fault("pcie_corrected", "0000:01:00", 4, device="nvidia"),
              fault("gsp_timeout", "", 5, gpu=6), fault("gsp_timeout", "", 6, gpu=7), fault("gsp_timeout", "", 7, gpu=6)]
    sx = fault("sxid_fatal", "0000:86:00", 8, detail="Link 33 LTSSM Fault Up")
    sx.number = 20034
    sx2 = fault("sxid_fatal", "0000:86:00", 9)
    sx2.number = 20035
    groups = xm._fault_groups([*faults, sx, sx2], {})
    assert [(g.kind, g.code, g.first.line.n, g.count, g.severity, g.details) for g in groups] == [
        ("pcie_corrected", "gpu.xid/pcie-corrected", 1, 4, "warn", ["RxErr", "BadTLP"]),
        ("gsp_timeout", "gpu.xid/gsp-timeout", 5, 2, "fail", []),
        ("gsp_timeout", "gpu.xid/gsp-timeout", 6, 1, "fail", []),
        ("sxid_fatal", "gpu.xid/sxid-fatal", 8, 2, "fail", ["SXid 20034 (Link 33 LTSSM Fault Up)", "SXid 20035"])]


# ----------------------------------------------------------------------------- whole logs


def test_facts_of_an_xid_burst():
    text = ("[Tue Mar  4 02:10:00 2025] NVRM: GPU at PCI:0000:3b:00: GPU-aa\n"
            + xid_line("0000:3b:00 GPU-I:02", 31, "pid=7, name=py, MMU Fault from GPU2", 1)
            + xid_line("0000:3b:00 GPU-I:02", 31, "pid=7, name=py, MMU Fault from GPU2", 2)
            + "[Tue Mar  4 02:10:03 2025] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.161.08  Sat\n")
    r = one(text)
    assert r.facts["events"] == [{
        "xid": 31, "pci": "0000:3b:00", "gpu": 2, "time": "2025-03-04T02:10:01", "uptime_s": None,
        "time_text": "Tue Mar  4 02:10:01 2025", "last_time": "2025-03-04T02:10:02", "count": 2,
        "action": "RESTART_APP", "severity": "warn", "code": "gpu.xid/restart-app",
        "mnemonic": "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "text": "MMU Fault from GPU2", "caused_by": None,
        "pid": "7", "name": "py", "mig": "GPU-I:02", "uuid": "GPU-aa"}]
    assert r.facts["counts"] == {"0000:3b:00": {"31": 2}} and r.facts["faults"] == []
    assert r.facts["gpus"] == {"0000:3b:00": {"uuid": "GPU-aa", "index": 2}}
    assert r.facts["driver_module"] == "535.161.08" and r.facts["since"] is None
    assert r.facts["dropped_before_since"] == 0 and r.facts["source_command"] == "dmesg -T"
    assert "hosts" not in r.facts and "truncated" not in r.facts and "excerpt" not in r.facts
    assert r.summary == "GPU 0000:3b:00 (GPU2): Xid 31 ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT x2"


def test_facts_of_an_nvlink5_event_and_a_fault():
    text = (xid_line("0019:01:00", 149, "NETIR_LINK_EVT Fatal XC0 i0 Link 03 (0x000fe406 0x0)", 1)
            + "Mar  4 02:10:05 n1 kernel: pcieport 0000:00:01.1: AER: Uncorrected (Fatal) error received: "
              "0000:01:00.0\n")
    r = one(text)
    e = r.facts["events"][0]
    assert (e["unit"], e["fatal"], e["link"], e["registers"]) == ("NETIR_LINK_EVT", True, 3, ["0x000fe406", "0x0"])
    f = r.facts["faults"][0]
    assert {k: f[k] for k in ("kind", "pci", "gpu", "action", "severity", "code", "count", "device", "detail")} == {
        "kind": "pcie_fatal", "pci": "0000:01:00", "gpu": None, "action": "", "severity": "fail",
        "code": "gpu.xid/pcie-fatal", "count": 1, "device": "", "detail": ""}
    assert f["text"].startswith("pcieport 0000:00:01.1: AER:")


def test_implied_and_cleared_events_in_the_facts():
    r = one(xid_line("0000:dc:00", 45, "pid=1, name=a, Ch 00000001 caused by previous Xid 13", 1)
            + xid_line("0000:dc:00", 62, "halt", 2)
            + xid_line("0000:dc:00", 154, "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)", 3))
    events = {e["xid"]: e for e in r.facts["events"]}
    assert events[13]["implied"] is True and "implied" not in events[45]
    assert events[62]["cleared"] is True and events[62]["severity"] == "info"
    assert events[154]["recovery"] == "None" and events[154]["severity"] == "pass"
    assert r.facts["counts"] == {"0000:dc:00": {"45": 1, "62": 1, "154": 1}}
    assert r.status is Status.WARN and r.facts["codes"] == ["gpu.xid/restart-app"]
    assert r.summary == "GPU 0000:dc:00: Xid 13 ROBUST_CHANNEL_GR_EXCEPTION (named by a later Xid 45) (with Xid 45 " \
                        "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL (after Xid 13))"
    assert "cleared: Xid 62 on GPU 0000:dc:00 (a later Xid 154 set the recovery action back to None)" in r.evidence


def test_hosts_truncated_excerpt_and_filter_facts():
    text = ("root@n1:~# dmesg -T | grep -i -e xid -e nvrm\n"
            "Jan 10 12:00:00 g7 kernel: NVRM: Xid (PCI:0000:01:00): 13, pid=1, name=a, x\n")
    from tests.conftest import grade_text

    r = grade_text("gpu.xid", {KL: text})[0]
    assert r.facts["hosts"] == ["g7"] and r.facts["excerpt"] is True and r.facts["filter"] == ["xid", "nvrm"]
    assert "unparsed" not in r.facts


def test_window_drops_older_events_and_faults():
    text = ("2025-01-01T00:00:00,000000+00:00 NVRM: Xid (PCI:0000:01:00): 79, pid=1, name=a, gone\n"
            "2025-01-01T00:00:01,000000+00:00 NVRM: GPU 0000:41:00.0: GPU has fallen off the bus.\n"
            "2025-03-01T00:00:01,000000+00:00 NVRM: Xid (PCI:0000:02:00): 13, pid=1, name=a, x\n")
    r = one(text, xid_since=datetime(2025, 2, 1, tzinfo=timezone.utc))
    assert r.status is Status.WARN and r.facts["dropped_before_since"] == 1 and r.facts["faults"] == []
    assert r.facts["since"] == "2025-02-01T00:00:00+00:00"
    assert "1 older event(s) before the window" in r.evidence
    r = one(text, xid_since="2025-02-01 00:00:00")
    assert r.facts["dropped_before_since"] == 1
    assert one(text, xid_since=12345).facts["since"] is None
    assert one(text, xid_since="garbage").facts["since"] is None


def test_profile_code_lists_tolerate_junk(tmp_path):
    assert xm._codes([31, "48", "x", None, 3.0]) == {31, 48, 3}
    assert xm._codes(None) == set()


# ----------------------------------------------------------------------------- what the log cannot show


def test_unreadable_log_is_an_error_unless_something_was_read():
    r = one("", rc=1)
    assert (r.status, r.facts["codes"]) == (Status.ERROR, ["gpu.xid/log-unreadable"])
    assert r.summary == "cannot read the kernel log (dmesg -T exited 1)" and r.evidence == ["dmesg -T: exit 1"]
    r = one("[ 1.0] pcieport 0000:00:01.0: AER: device recovery failed\n", rc=1)
    assert r.facts["codes"] == ["gpu.xid/pcie-recovery-failed"]
    r = one("[ 1.0] NVRM: GPU 0000:41:00.0: GPU has fallen off the bus.\n", rc=1)
    assert r.facts["codes"] == ["gpu.xid/fallen-off-bus"]
    r = one("[ 1.0] NVRM: Xid (PCI:0000:01:00): 13, pid=1, name=a, x\n", rc=1)
    assert r.facts["codes"] == ["gpu.xid/restart-app"]
    r = one("[ 1.0] usb 1-1: new device\n", rc=None)  # type: ignore[arg-type]
    assert r.status is Status.PASS


def test_empty_and_foreign_output():
    r = one("")
    assert (r.status, r.facts["codes"], r.evidence) == (Status.ERROR, ["gpu.xid/log-empty"], ["(no output)"])
    r = one("hello\nworld\n")
    assert r.facts["codes"] == ["gpu.xid/not-a-kernel-log"] and r.evidence == ["2 line(s), none from the kernel"]
    r = one("hello\nmce: [Hardware Error]: Machine check events logged\n")
    assert r.facts["codes"] == ["gpu.xid/machine-check-corrected"]


def test_a_filtered_excerpt_with_reports_grades_them_and_says_xids_were_not_checked():
    from tests.conftest import grade_text

    r = grade_text("gpu.xid", {KL: "root@n1:~# dmesg | grep -i aer\n[ 1.0] pcieport 0000:00:01.1: AER: Uncorrected (Fatal) "
                                   "error received: 0000:01:00.0\n"})[0]
    assert r.status is Status.FAIL and r.facts["codes"] == ["gpu.xid/pcie-fatal", "gpu.xid/log-filtered"]
    assert "kernel log excerpt filtered by grep aer: NVIDIA driver lines not shown; Xids not checked" in r.summary
    r = grade_text("gpu.xid", {KL: "root@n1:~# dmesg | grep -i eth0\n[ 1.0] e1000e 0000:00:1f.6 eth0: link up\n"})[0]
    assert r.status is Status.SKIP and r.facts["codes"] == ["gpu.xid/log-filtered"]
    assert r.evidence == ["command: dmesg | grep -i eth0"] and r.facts["filter"] == ["eth0"]


def test_a_driver_that_binds_no_gpu_with_other_reports():
    r = one("[ 1.0] NVRM: No NVIDIA devices probed.\n[ 2.0] mce: [Hardware Error]: Machine check events logged\n")
    assert r.facts["codes"] == ["gpu.xid/machine-check-corrected", "gpu.xid/driver-not-bound"]
    assert r.status is Status.WARN
    r = one("[ 1.0] NVRM: No NVIDIA devices probed.\n[ 2.0] NVRM: GPU 0000:41:00.0: GPU has fallen off the bus.\n")
    assert r.facts["codes"] == ["gpu.xid/fallen-off-bus"]
    r = one("[ 1.0] NVRM: No NVIDIA devices probed.\n" + xid_line("0000:01:00", 13, "x"))
    assert r.facts["codes"] == ["gpu.xid/restart-app"]


def test_unparsed_xid_lines_are_not_recognised():
    r = one("[ 1.0] NVRM: Xid (PCI:0000:41:00) reported, see above\n[ 2.0] NVRM: Xid (PCI:0000:41:00) again\n")
    assert r.status is Status.SKIP and r.facts["codes"] == ["gpu.xid/xid-layout-unknown"]
    assert r.summary == "not recognised: 2 NVRM line(s) name an Xid in a layout not known (expected `NVRM: Xid " \
                        "(PCI:dddd:bb:dd): N, ...`)"
    assert r.facts["unparsed"] == ["NVRM: Xid (PCI:0000:41:00) reported, see above", "NVRM: Xid (PCI:0000:41:00) again"]
    assert r.remedy.startswith("look the Xid up in NVIDIA's current Xid catalog")


# ----------------------------------------------------------------------------- findings, remedies


@pytest.mark.parametrize("code, rest, status, summary, remedy", [
    (79, "pid=1, name=a, GPU has fallen off the bus.", "fail", "GPU 0000:3b:00: Xid 79 "
     "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "drain node; reboot clears Xid 79 on GPU 0000:3b:00; if it returns "
     "after the reboot, reseat or RMA the GPU"),
    (48, "DBE", "fail", "GPU 0000:3b:00: Xid 48 ROBUST_CHANNEL_GPU_ECC_DBE", "drain node; reset GPU 0000:3b:00 with "
     "`nvidia-smi -r -i 0000:3b:00.0` (or reboot) to apply the row remap, then check `nvidia-smi -q -d ROW_REMAPPER` "
     "(Remapping Failure: Yes means RMA)"),
    (74, "NVLink: fatal error on link 6", "fail", "GPU 0000:3b:00: Xid 74 NVLINK_ERROR", "drain node; Xid 74 is an "
     "NVLink fault on GPU 0000:3b:00: check `nvidia-smi nvlink -s` and the fabric manager, reset the GPU with "
     "`nvidia-smi -r -i 0000:3b:00.0` or reboot; if links stay down, open a hardware case"),
    (149, "NETIR Fatal XC0 i0 Link 1 (0x1)", "fail", "GPU 0000:3b:00: Xid 149 NVLINK_NETIR_ERROR", "drain node; "
     "NVLink5 error (Xid 149) on GPU 0000:3b:00: reset the GPU with `nvidia-smi -r -i 0000:3b:00.0` or reboot, per "
     "NVIDIA's Xid 144-150 decode; then check `nvidia-smi nvlink -s`"),
    (154, "GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)", "fail", "GPU 0000:3b:00: Xid 154 "
     "GPU_RECOVERY_ACTION_CHANGED", "drain node; GPU 0000:3b:00 reports peer-to-peer unusable (Xid 154): reset the "
     "GPU with `nvidia-smi -r -i 0000:3b:00.0` or reboot"),
    (154, "GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)", "fail", "GPU 0000:3b:00: Xid 154 "
     "GPU_RECOVERY_ACTION_CHANGED", "drain node; GPU 0000:3b:00 asks to be drained and reset (Xid 154): reset it "
     "with `nvidia-smi -r -i 0000:3b:00.0` once idle, then check `nvidia-smi -q -d ROW_REMAPPER`"),
    (154, "GPU recovery action changed from 0x0 (None) to 0x5 (Recover IMEX Domain)", "fail", "GPU 0000:3b:00: "
     "Xid 154 GPU_RECOVERY_ACTION_CHANGED", "drain node; GPU 0000:3b:00 cannot allocate fabric memory (Xid 154, "
     "Recover IMEX Domain): restart the IMEX daemons of the NVLink domain, or reboot"),
    (54, "aux power", "fail", "GPU 0000:3b:00: Xid 54 SILENT_RUNNING_PWR_REDUCED_CLOCKING", "drain node; GPU "
     "0000:3b:00 runs without its auxiliary power (Xid 54): power off and connect the board's power cables"),
    (151, "key rotation", "fail", "GPU 0000:3b:00: Xid 151 ROBUST_CHANNEL_KEY_ROTATION_ERROR", "drain node; restart "
     "the VM (or the node) to restore GPU 0000:3b:00's secure session (Xid 151)"),
    (62, "halt", "fail", "GPU 0000:3b:00: Xid 62 PMU_HALT_ERROR", "drain node; reset GPU 0000:3b:00 with "
     "`nvidia-smi -r -i 0000:3b:00.0` (no process may hold it) or reboot, drained until then; if Xid 62 recurs after "
     "the reset, run `dcgmi diag -r 3` and open a case"),
    (63, "Row Remapper: New row marked for remapping, reset gpu to activate.", "warn", "GPU 0000:3b:00: Xid 63 "
     "INFOROM_DRAM_RETIREMENT_EVENT", "no action by NVIDIA's catalog: watch the GPU for repeats (a pending row remap "
     "is applied at the next GPU reset)"),
    (61, "0cec", "warn", "GPU 0000:3b:00: Xid 61 PMU_BREAKPOINT", "collect nvidia-bug-report.sh and report the Xid to "
     "NVIDIA; watch the GPU"),
    (78, "vGPU type is not supported", "warn", "GPU 0000:3b:00: Xid 78 VGPU_START_ERROR", "update the vGPU guest or "
     "host driver so they match"),
    (159, "CHI", "warn", "GPU 0000:3b:00: Xid 159 ROBUST_CHANNEL_CHI_NON_DATA_ERROR", "check the UVM / "
     "coherent-memory setup of the job; look for the Xid it accompanies"),
    (45, "pid=1, name=a, Ch 00000001", "warn", "GPU 0000:3b:00: Xid 45 ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "the driver "
     "cleaned up a job's channels with no other Xid shown: check the job (killed, out of memory); no drain"),
    (145, "RLW Nonfatal XC0 i0 Link 2 (0x8)", "warn", "GPU 0000:3b:00: Xid 145 NVLINK_RLW_ERROR", "non-fatal NVLink5 "
     "errors: watch `nvidia-smi nvlink -e` counters; drain if they repeat or turn Fatal"),
    (154, "GPU recovery action changed from 0x0 (None) to 0x8 (Unknown)", "warn", "GPU 0000:3b:00: Xid 154 "
     "GPU_RECOVERY_ACTION_CHANGED", "read the recovery action in the Xid 154 line and act on it; update preflight"),
    (190, "new", "skip", "GPU 0000:3b:00: Xid 190 not in catalog", "look the Xid up in NVIDIA's current Xid catalog "
     "(docs.nvidia.com/deploy/xid-errors)"),
    (13, "pid=1, name=a, Graphics Exception", "warn", "GPU 0000:3b:00: Xid 13 ROBUST_CHANNEL_GR_EXCEPTION",
     "report to the job owner (application-level Xid 13); no drain"),
])
def test_one_xid_summary_status_and_remedy(code: int, rest: str, status: str, summary: str, remedy: str):
    r = one(xid_line("0000:3b:00", code, rest))
    assert (r.status.value, r.summary, r.remedy) == (status, summary, remedy)
    assert r.evidence[0].endswith(f"Xid (PCI:0000:3b:00): {code}, {rest}")


def test_a_site_fail_code_and_an_unlisted_bucket_drain_with_a_reset(tmp_path):
    prof = tmp_path / "site.toml"
    prof.write_text('[profile]\nname = "site"\nextends = "generic"\n[xid]\n'
                    'fail = { value = [13], source = "site: graphics exceptions drain" }\n')
    r = one(xid_line("0000:3b:00", 13, "pid=1, name=a, x"), profile=str(prof))
    assert r.facts["codes"] == ["gpu.xid/site-fail"] and r.remedy.startswith("drain node; reset GPU 0000:3b:00 with")
    assert "xid.fail = [13] (site: graphics exceptions drain)" in r.evidence


def test_an_xid_without_an_address_has_a_generic_reset_command():
    r = one("[ 1.0] NVRM: Xid 62, halt\n")
    assert r.summary == "a GPU: Xid 62 PMU_HALT_ERROR"
    assert "`nvidia-smi -r -i <gpu>`" in r.remedy


def test_bursts_sympathetic_and_repeats_in_the_summary(tmp_path):
    text = "".join(xid_line("0000:3b:00", 13, "pid=1, name=a, x", s) for s in (0, 1, 2))
    text += xid_line("0000:3b:00", 43, "pid=1, name=a, Ch 1", 3)
    text += "[Tue Mar  4 02:20:00 2025] NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=a, x\n"
    prof = tmp_path / "p.toml"
    prof.write_text('[profile]\nname = "p"\nextends = "generic"\n[xid]\nrepeat_warn = { value = 2, source = "t" }\n')
    r = one(text, profile=str(prof))
    assert r.summary == "GPU 0000:3b:00: Xid 13 ROBUST_CHANNEL_GR_EXCEPTION x4 in 2 bursts (with Xid 43 " \
                        "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR (after Xid 13))"
    assert r.remedy == "report to the job owner (application-level Xid 13); no drain; repeated on GPU 0000:3b:00 " \
                       "Xid 13 (2 times): run `dcgmi diag -r 2` on that GPU if it recurs across jobs"
    assert "(Xid 13 on 0000:3b:00: 3 lines, up to Tue Mar  4 02:10:02 2025)" in r.evidence
    r = one(text)
    assert r.remedy == "report to the job owner (application-level Xid 13); no drain"  # repeat_warn 10


def test_evidence_of_a_drain_names_its_sympathetic_xids_notes_and_covered_faults():
    text = ("[Tue Mar  4 02:10:00 2025] NVRM: GPU 0000:9b:00.0: GSP RPC timeout heartbeat: Heartbeat timed out\n"
            + xid_line("0000:9b:00", 119, "pid=1, name=a, Timeout after 6s of waiting for RPC response from GPU4 GSP!", 1)
            + xid_line("0000:9b:00", 45, "pid=1, name=a, Ch 00000001", 2)
            + "[Tue Mar  4 02:10:03 2025] NVRM: Rate limiting GSP RPC error prints for GPU at PCI:0000:9b:00 (printing "
              "1 of every 30).  The GPU likely needs to be reset.\n")
    r = one(text)
    assert r.facts["codes"] == ["gpu.xid/reset-gpu"] and r.facts["faults"] == []
    assert r.summary == "GPU 0000:9b:00 (GPU4): Xid 119 GSP_RPC_TIMEOUT (with Xid 45 ROBUST_CHANNEL_PREEMPTIVE_REMOVAL " \
                        "(after Xid 119))"
    starts = ["NVRM: Xid (PCI:0000:9b:00): 119,", "NVRM: Xid (PCI:0000:9b:00): 45,", "NVRM: Rate limiting GSP",
              "NVRM: GPU 0000:9b:00.0: GSP RPC timeout"]
    assert len(r.evidence) == 4
    assert all(e.split("] ", 1)[1].startswith(p) for e, p in zip(r.evidence, starts, strict=True)), r.evidence


def test_ignored_xids_are_a_note():
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        prof = Path(d) / "p.toml"
        prof.write_text('[profile]\nname = "p"\nextends = "generic"\n[xid]\nignore = { value = [79], source = "lab" }\n')
        r = one(xid_line("0000:3b:00", 79, "gone"), profile=str(prof))
    assert r.status is Status.PASS
    assert r.summary == "no Xid needing action since boot (1 informational or ignored event(s))"
    assert r.evidence == ["xid.ignore = [79] (lab): 1 event(s) not graded"]


@pytest.mark.parametrize("kind_line, status, summary, remedy_start", [
    ("NVRM: GPU 0000:41:00.0: GPU has fallen off the bus.", "fail", "GPU 0000:41:00: fallen off the bus (no Xid)",
     "drain node; reboot clears the fallen-off-the-bus GPU GPU 0000:41:00"),
    ("NVRM: GPU 0000:41:00.0: GPU lost from the bus [NV_ERR_GPU_IS_LOST]", "fail",
     "GPU 0000:41:00: lost to the driver (no Xid)", "drain node; GPU 0000:41:00 is lost to the driver: reboot"),
    ("NVRM: GPU 0000:41:00.0: RmInitAdapter failed! (0x26:0x56:1463)", "fail",
     "GPU 0000:41:00: failed to initialise (no Xid)", "drain node; the driver could not initialise GPU 0000:41:00"),
    ("NVRM: GPU 0000:41:00.0: GPU does not have the necessary power cables connected.", "fail",
     "GPU 0000:41:00: auxiliary power cables not connected (no Xid)",
     "drain node; GPU 0000:41:00 runs without its auxiliary power"),
    ("NVRM: GPU 0000:41:00.0: unexpected WPR2 already up", "fail", "GPU 0000:41:00: WPR2 left up, GSP cannot boot "
     "(no Xid)", "drain node; a crash left GPU 0000:41:00's protected memory region (WPR2) up"),
    ("NVRM: GPU 0000:41:00.0: NV_ERR_RESET_REQUIRED", "fail", "GPU 0000:41:00: the driver asks for a reset (no Xid)",
     "drain node; the driver asks for a reset of GPU 0000:41:00"),
    ("NVRM: GPU 0000:41:00.0: Heartbeat timed out", "fail", "GPU 0000:41:00: GSP firmware not answering (no Xid)",
     "drain node; the GPU's GSP firmware stopped answering on GPU 0000:41:00"),
    ("NVRM: GPU 0000:41:00.0: GSP-CrashCat Report", "fail", "GPU 0000:41:00: GSP firmware crashed (no Xid)",
     "drain node; the GSP firmware of GPU 0000:41:00 crashed"),
    ("NVRM: GPU 0000:41:00.0: Memory Subsystem Error detected", "fail", "GPU 0000:41:00: memory subsystem error "
     "(no Xid)", "drain node; GPU 0000:41:00's memory subsystem failed"),
    ("NVRM: GPU 0000:41:00.0: Received signal from GSP that PMU has halted.", "fail", "GPU 0000:41:00: PMU halted "
     "(no Xid)", "drain node; GPU 0000:41:00's PMU halted"),
    ("NVRM: GPU3 knvlinkDiscoverPostRxDetLinks_GH100: failed!", "fail", "GPU3: NVLink discovery or training failed "
     "(no Xid)", "drain node; NVLink discovery failed, so the NVLink fabric is not fully trained"),
    ("NVRM: nvAssertFailedNoLog: Assertion failed: 0 @ a.c:1", "warn", "NVIDIA driver: driver assertion failed "
     "(no Xid)", "an NVIDIA driver assertion failed: collect nvidia-bug-report.sh"),
    ("pcieport 0000:00:01.1: AER: Uncorrected (Fatal) error received: 0000:41:00.0", "fail",
     "device 0000:41:00: uncorrectable fatal PCIe error", "drain node; a fatal PCIe error took device 0000:41:00's link "
     "down"),
    ("mlx5_core 0000:17:00.0: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, "
     "(Requester ID)", "warn", "mlx5_core 0000:17:00: uncorrectable non-fatal PCIe error",
     "uncorrectable PCIe errors on mlx5_core 0000:17:00"),
    ("nvidia 0000:41:00.0: can't recover (no error_detected callback)", "fail",
     "GPU 0000:41:00: not recovered after a PCIe error", "drain node; the kernel could not recover GPU 0000:41:00"),
    ("nvidia 0000:41:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)", "warn",
     "GPU 0000:41:00: corrected PCIe errors", "corrected PCIe errors on GPU 0000:41:00"),
    ("pcieport 0000:00:03.1: pciehp: Slot(3): Link Down", "fail", "pcieport 0000:00:03: PCIe link down: slot 3",
     "drain node; the PCIe link of pcieport 0000:00:03 went down"),
    ("mce: [Hardware Error]: CPU 5: Machine Check Exception: 5 Bank 7: be00000000800090", "fail",
     "host CPU/memory: uncorrected machine check: bank 7 status be00000000800090",
     "drain node; an uncorrected machine check: drain the node"),
    ("mce: [Hardware Error]: Machine check events logged", "warn", "host CPU/memory: corrected machine checks",
     "corrected machine checks: watch the trend"),
    ("nvidia-nvswitch3: SXid (PCI:0000:86:00.0): 20034, Fatal, Link 33 LTSSM Fault Up", "fail",
     "NVSwitch nvswitch3 (0000:86:00): fatal NVSwitch error: SXid 20034 (Link 33 LTSSM Fault Up)",
     "drain node; a fatal NVSwitch error on NVSwitch nvswitch3 (0000:86:00)"),
    ("SXid (PCI:0000:86:00.0): 12028, Non-fatal, Link 3 x", "warn", "NVSwitch 0000:86:00: non-fatal NVSwitch error: "
     "SXid 12028 (Link 3 x)", "non-fatal NVSwitch errors on NVSwitch 0000:86:00: no drain"),
    ("nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 27005, Module 5 faulty", "warn", "NVSwitch nvswitch2 (0000:07:00): "
     "NVSwitch error of unstated severity: SXid 27005 (Module 5 faulty)", "an NVSwitch error on NVSwitch nvswitch2"),
])
def test_one_fault_summary_status_and_remedy(kind_line: str, status: str, summary: str, remedy_start: str):
    r = one(f"[ 12.000000] {kind_line}\n")
    assert (r.status.value, r.summary) == (status, summary)
    assert r.remedy.startswith(remedy_start), r.remedy
    assert r.evidence == [f"[ 12.000000] {kind_line}"]


@pytest.mark.parametrize("text, summary, remedy_start", [
    ("[ 1.0] pcieport 0000:16:02.0: AER: Uncorrected (Non-Fatal) error received: 0000:17:00.0\n"
     "[ 1.1] pcieport 0000:16:02.0: AER: device recovery successful\n",
     "device 0000:17:00: uncorrectable non-fatal PCIe error (recovered)",
     "the kernel recovered device 0000:17:00 after an uncorrectable PCIe error"),
    ("[ 1.0] pcieport 0000:00:03.1: pciehp: Slot(3): Link Down\n[ 1.1] pcieport 0000:00:03.1: pciehp: Slot(3): Link Up\n",
     "pcieport 0000:00:03: PCIe link down (link came back): slot 3",
     "the PCIe link of pcieport 0000:00:03 went down and came back"),
    ("[ 1.0] {1}[Hardware Error]: event severity: fatal\n[ 1.1] {1}[Hardware Error]:   section_type: PCIe error\n"
     "[ 1.2] {1}[Hardware Error]:   vendor_id: 0x10de, device_id: 0x2330\n",
     "a GPU: uncorrectable fatal PCIe error: APEI fatal", "drain node; a fatal PCIe error took a GPU's link down"),
    ("[ 1.0] {1}[Hardware Error]: event severity: recoverable\n[ 1.1] {1}[Hardware Error]:   section_type: PCIe error\n"
     "[ 1.2] {1}[Hardware Error]:   vendor_id: 0x8086, device_id: 0x2030\n",
     "device [8086]: uncorrectable non-fatal PCIe error: APEI recoverable", "uncorrectable PCIe errors on device [8086]"),
    ("[ 1.0] nvidia 0000:18:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)\n"
     "[ 1.1] nvidia 0000:18:00.0:   device [10de:2330] error status/mask=00000001/00000000\n"
     "[ 1.2] nvidia 0000:18:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)\n",
     "GPU 0000:18:00: corrected PCIe errors (2 reports): RxErr", "corrected PCIe errors on GPU 0000:18:00"),
])
def test_fault_summaries_of_report_sequences(text: str, summary: str, remedy_start: str):
    r = one(text)
    assert r.summary == summary and r.remedy.startswith(remedy_start), (r.summary, r.remedy)


def test_corrected_errors_on_other_devices_are_a_note():
    r = one("[ 1.0] pcieport 0000:00:1c.5: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)\n")
    assert r.status is Status.PASS and r.summary == "no Xid needing action since boot"
    assert r.evidence == ["pcieport 0000:00:1c: corrected PCIe errors"]


def test_gpu_labels():
    log_gpus = {"0000:3b:00": {"index": 3}}
    from preflight.parsers.kernel_log import KernelLog

    gr = xm._Graded(KernelLog(gpus=log_gpus), None, 0, [], [], [], set(), set(), {})
    assert gr.label("0000:3b:00") == "GPU 0000:3b:00 (GPU3)"
    assert gr.label("0000:3b:00", 5) == "GPU 0000:3b:00 (GPU3)"
    assert gr.label("0000:4b:00", 5) == "GPU 0000:4b:00 (GPU5)"
    assert gr.label("0000:4b:00") == "GPU 0000:4b:00"
    assert gr.label("", 2) == "GPU2" and gr.label("") == "a GPU"
    assert gr.fail_pcis == set() and gr.of("fail") == []


def test_quiet_summaries():
    r = one("[ 1.0] usb 1-1: new device\n")
    assert r.summary == "no Xid needing action since boot" and r.status is Status.PASS
    from tests.conftest import grade_text

    r = grade_text("gpu.xid", {KL: "root@n1:~# dmesg | grep -i nvrm\n[ 1.0] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  "
                                   "535.161.08\n"})[0]
    assert r.summary == "no Xid needing action since boot (excerpt filtered by grep nvrm)"
    r = grade_text("gpu.xid", {KL: "[ 1.0] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.161.08\n...\n"
                                   "[ 2.0] usb 1-1: new device\n"})[0]
    assert r.summary == "no Xid needing action since boot (excerpt)"
    r = one("2025-03-01T00:00:01,000000+00:00 NVRM: Xid (PCI:0000:02:00): 13, pid=1, name=a, x\n",
            xid_since=datetime(2025, 4, 1, tzinfo=timezone.utc))
    assert r.summary == "no Xid needing action since 2025-04-01T00:00:00+00:00; 1 older event(s) before the window"


def test_informational_xids_count_as_quiet():
    r = one(xid_line("0000:3b:00", 162, "Power Smoothing HW Circuitry capability reengaged"))
    assert r.status is Status.PASS and r.summary == "no Xid needing action since boot (1 informational or ignored " \
                                                    "event(s))"
    assert r.evidence == ["GPU 0000:3b:00: Xid 162 PSHC_REENGAGED"]


def test_no_kernel_log_captured():
    res = grade("gpu.xid", {})
    assert res[0].status is Status.SKIP


# ----------------------------------------------------------------------------- pinned details


def test_one_uptime_is_not_a_gap():
    assert xm._seconds_between(ln(1, mono=1.0), ln(2)) is None
    assert xm._seconds_between(ln(1), ln(2, mono=1.0)) is None


def test_an_xid_on_a_gpu_covers_every_driver_report_about_it():
    lines = ["GPU lost from the bus [NV_ERR_GPU_IS_LOST]", "NV_ERR_RESET_REQUIRED", "Heartbeat timed out",
             "nvAssertFailedNoLog: Assertion failed: 0 @ a.c:1", "Check failed [NV_ERR_INVALID_STATE]",
             "RmInitAdapter failed! (0x26:0x56:1463)", "GSP-CrashCat Report", "PMU has halted",
             "Memory Subsystem Error detected", "unexpected WPR2 already up", "power cables connected",
             "knvlinkFoo: link training failed"]
    text = xid_line("0000:41:00", 79, "gone") + "".join(
        f"[Tue Mar  4 02:10:0{i % 10} 2025] NVRM: GPU 0000:41:00.0: {t}\n" for i, t in enumerate(lines))
    r = one(text)
    assert r.facts["codes"] == ["gpu.xid/restart-bm"] and r.facts["faults"] == []
    assert len(r.evidence) == 4  # the Xid and three of the lines it stands for


def test_a_gpu_that_fell_off_the_bus_stands_for_its_symptoms():
    lines = ["GPU lost from the bus [NV_ERR_GPU_IS_LOST]", "NV_ERR_RESET_REQUIRED", "Heartbeat timed out",
             "nvAssertFailedNoLog: Assertion failed: 0 @ a.c:1", "Check failed [NV_ERR_INVALID_STATE]",
             "RmInitAdapter failed! (0x26:0x56:1463)"]
    text = "[ 1.0] NVRM: GPU 0000:41:00.0: GPU has fallen off the bus.\n" + "".join(
        f"[ 2.0] NVRM: GPU 0000:41:00.0: {t}\n" for t in lines)
    r = one(text + "[ 3.0] NVRM: GPU 0000:41:00.0: PMU has halted\n")
    assert r.facts["codes"] == ["gpu.xid/fallen-off-bus", "gpu.xid/pmu-halted"]
    assert not any("driver error status" in e for e in r.evidence)  # the NV_ERR line is a symptom, not a note


def test_an_unaddressed_gpu_fault_beside_a_pcie_report_is_kept():
    r = one("[ 1.0] pcieport 0000:00:01.1: AER: Uncorrected (Fatal) error received: 0000:01:00.0\n"
            "[ 2.0] NVRM: GPU6 _kgspIsHeartbeatTimedOut: Heartbeat timed out\n")
    assert r.facts["codes"] == ["gpu.xid/gsp-timeout", "gpu.xid/pcie-fatal"]


@pytest.mark.parametrize("drv", ["nvidia-nvswitch", "mlx4_core", "mlx5_core", "nvidia"])
def test_corrected_errors_on_the_data_path_by_driver(drv: str):
    assert xm.fault_code(fault("pcie_corrected", "0000:07:00", device=drv), {}) == "gpu.xid/pcie-corrected"


def test_event_facts_with_a_host_and_a_word_without_a_unit():
    r = one("Mar  4 02:10:05 g7 kernel: NVRM: Xid (PCI:0000:17:00): 74, pid=1, name=a, NVLink: fatal error on link 6\n")
    e = r.facts["events"][0]
    assert e["host"] == "g7" and (e["unit"], e["fatal"], e["link"], e["registers"]) == ("", True, 6, [])
    r = one(xid_line("0000:17:00", 74, "pid=1, name=a, NVLink: training error"))
    assert "unit" not in r.facts["events"][0]


def test_fault_facts_in_full():
    text = ("[Tue Mar  4 02:10:01 2025] NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=a, x from GPU3\n"
            "[Tue Mar  4 02:10:02 2025] nvidia 0000:18:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, "
            "(Receiver ID)\n"
            "[Tue Mar  4 02:10:02 2025] nvidia 0000:18:00.0:   device [10de:2330] error status/mask=00000001/00000000\n"
            "[Tue Mar  4 02:10:03 2025] nvidia 0000:18:00.0: PCIe Bus Error: severity=Corrected, type=Data Link Layer, "
            "(Transmitter ID)\n"
            "[Tue Mar  4 02:10:03 2025] nvidia 0000:18:00.0:   device [10de:2330] error status/mask=00001000/00000000\n")
    r = one(text)
    assert r.facts["faults"] == [{
        "kind": "pcie_corrected", "pci": "0000:18:00", "gpu": 3, "time": "2025-03-04T02:10:02",
        "time_text": "Tue Mar  4 02:10:02 2025", "action": "", "severity": "warn", "code": "gpu.xid/pcie-corrected",
        "count": 2, "device": "nvidia", "detail": "RxErr; Timeout",
        "text": "nvidia 0000:18:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)"}]
    assert r.summary.endswith("; GPU 0000:18:00 (GPU3): corrected PCIe errors (2 reports): RxErr; Timeout")


def test_a_truncated_capture_and_many_unparsed_lines():
    from preflight.model import Capture, CaptureState

    cap = Capture(probe=KL, argv=["dmesg", "-T"], state=CaptureState.OK, stdout="".join(
        f"[ {i}.0] NVRM: Xid (PCI:0000:41:00) odd {i}\n" for i in range(6)), rc=0, truncated=True)
    r = grade("gpu.xid", {KL: cap})[0]
    assert r.facts["truncated"] is True and len(r.facts["unparsed"]) == 5
    assert len([e for e in r.evidence if "odd" in e]) == 3


def test_grep_patterns_are_matched_against_driver_lines():
    from tests.conftest import grade_text

    for pattern, status in (("xx", Status.SKIP), ("fallen", Status.PASS), ("kernel: NVRM", Status.PASS),
                            ("Xid 48", Status.PASS)):
        r = grade_text("gpu.xid", {KL: f"root@n1:~# dmesg | grep '{pattern}'\n[ 1.0] usb 1-1: x\n"})[0]
        assert r.status is status, pattern


def test_early_results_in_full():
    r = one("", rc=1)
    assert r.facts == {"events": [], "source_command": "dmesg -T", "codes": ["gpu.xid/log-unreadable"]}
    assert r.remedy == "run preflight as root (or with CAP_SYSLOG), or set kernel.dmesg_restrict=0 / add the user to " \
                       "the systemd-journal group"
    errs = "".join(f"dmesg: read kernel buffer failed: Operation not permitted ({i})\n" for i in range(4))
    r = one(errs, rc=1)
    assert [e[-3:] for e in r.evidence] == ["(1)", "(2)", "(3)"]
    r = one(errs, rc=0)
    assert r.facts["codes"] == ["gpu.xid/not-a-kernel-log"] and [e[-3:] for e in r.evidence] == ["(0)", "(1)", "(2)"]
    assert r.summary == "output of dmesg -T is not a kernel log (no kernel time stamps, no NVRM lines)"
    assert r.remedy == "run `dmesg -T` by hand and check its output"
    r = one("")
    assert r.summary == "the kernel log is empty (dmesg -T); Xids not checked"
    assert r.remedy == "check that the kernel ring buffer / journald keeps kernel messages on this node"


def test_filtered_excerpts_name_every_pattern():
    from tests.conftest import grade_text

    text = "root@n1:~# dmesg | grep -e eth0 -e bond0\n[ 1.0] e1000e 0000:00:1f.6 eth0: link up\n"
    r = grade_text("gpu.xid", {KL: text})[0]
    assert r.summary == "kernel log excerpt filtered by grep eth0 / bond0: NVIDIA driver lines not shown; Xids not " \
                        "checked"
    assert r.remedy == "capture the whole kernel log (`dmesg -T` or `journalctl -k`) to grade Xids"
    text = "root@n1:~# dmesg | grep -e aer -e mce\n[ 1.0] mce: [Hardware Error]: Machine check events logged\n"
    r = grade_text("gpu.xid", {KL: text})[0]
    assert r.remedy == "(1) corrected machine checks: watch the trend with `ras-mc-ctl --summary`; replace the DIMM if " \
                       "they keep coming (2) capture the whole kernel log (`dmesg -T` or `journalctl -k`) to grade Xids"
    r = grade_text("gpu.xid", {KL: "root@n1:~# dmesg | grep -e nvrm -e usb\n[ 1.0] usb 1-1: x\n"})[0]
    assert r.summary == "no Xid needing action since boot (excerpt filtered by grep nvrm / usb)"


def test_reset_command_without_an_address():
    assert xm._reset_cmd("") == "`nvidia-smi -r -i <gpu>`"
    assert xm._reset_cmd("0000:1b:00") == "`nvidia-smi -r -i 0000:1b:00.0`"


def test_correctable_sxids_are_notes_and_driver_error_statuses_warn():
    r = one("[ 2.0] nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 22013, Correctable, Link 12 minion\n")
    assert r.status is Status.PASS
    assert r.evidence == ["NVSwitch nvswitch1 (0000:06:00): correctable NVSwitch error: SXid 22013 (Link 12 minion)"]
    # an RM line carrying an NV_ERR_* status is printed at the driver's error level: never a PASS
    r = one("[ 1.0] NVRM: nvCheckOkFailedNoLog: Check failed: Invalid argument [NV_ERR_INVALID_ARGUMENT]\n")
    assert r.status is Status.WARN and r.facts["codes"] == ["gpu.xid/driver-error-status"]
    assert "NVIDIA driver: driver error status (no Xid)" in r.summary


def test_fault_wording_fallbacks():
    from preflight.parsers.kernel_log import KernelLog

    gr = xm._Graded(KernelLog(), None, 0, [], [], [], set(), set(), {})
    g = xm.FaultGroup("something_new", "gpu.xid/driver-error-status", fault("something_new", "0000:01:00"), "pass",
                      details=["a", "b", "c", "d"])
    assert xm._fault_summary(g, gr) == "device 0000:01:00: something new: a; b; c"
    assert xm._fault_remedy(g, gr) == "look at the line quoted"
    g = xm.FaultGroup("rm_error", "gpu.xid/driver-error-status", fault("rm_error", "", gpu=2), "pass")
    assert xm._fault_summary(g, gr) == "GPU2: driver error status (no Xid)"


def test_app_level_xids_on_several_gpus_and_codes(tmp_path):
    prof = tmp_path / "p.toml"
    prof.write_text('[profile]\nname = "p"\nextends = "generic"\n[xid]\nrepeat_warn = { value = 1, source = "t" }\n')
    text = (xid_line("0000:3b:00", 13, "pid=1, name=a, x", 1) + xid_line("0000:3b:00", 31, "pid=1, name=a, y", 2)
            + xid_line("0000:4b:00", 13, "pid=1, name=a, x", 3))
    r = one(text, profile=str(prof))
    assert r.summary == "GPU 0000:3b:00: Xid 13 ROBUST_CHANNEL_GR_EXCEPTION, Xid 31 " \
                        "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT; GPU 0000:4b:00: Xid 13 ROBUST_CHANNEL_GR_EXCEPTION"
    assert r.remedy == "(1) report to the job owner (application-level Xid 13, 31); no drain; repeated on GPU " \
                       "0000:3b:00 Xid 13 (1 times), GPU 0000:3b:00 Xid 31 (1 times): run `dcgmi diag -r 2` on that " \
                       "GPU if it recurs across jobs (2) report to the job owner (application-level Xid 13); no drain; " \
                       "repeated on GPU 0000:4b:00 Xid 13 (1 times): run `dcgmi diag -r 2` on that GPU if it recurs " \
                       "across jobs"


def test_a_failing_sympathetic_xid_is_its_own_finding():
    r = one(xid_line("0000:19:00", 48, "DBE", 1) + xid_line("0000:19:00", 95, "Uncontained", 2))
    assert r.summary == "GPU 0000:19:00: Xid 48 ROBUST_CHANNEL_GPU_ECC_DBE; GPU 0000:19:00: Xid 95 " \
                        "ROBUST_CHANNEL_UNCONTAINED_ERROR"


def test_two_xids_of_one_bucket_on_one_gpu_are_one_finding():
    r = one(xid_line("0000:19:00", 62, "halt", 1) + xid_line("0000:19:00", 109, "ctx", 2))
    assert r.summary == "GPU 0000:19:00: Xid 62 PMU_HALT_ERROR, Xid 109 ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR"


def test_burst_evidence_of_two_lines_without_a_time():
    r = one("NVRM: Xid (PCI:0000:19:00): 62, halt\nNVRM: Xid (PCI:0000:19:00): 62, halt\n")
    assert "(Xid 62 on 0000:19:00: 2 lines, up to the end of the log)" in r.evidence


def test_evidence_keeps_to_its_gpu():
    text = (xid_line("0000:19:00", 62, "halt", 1) + xid_line("0000:29:00", 62, "halt", 2)
            + xid_line("0000:29:00", 45, "pid=1, name=a, Ch 1", 3)
            + "[Tue Mar  4 02:10:04 2025] NVRM: GPU 0000:29:00.0: GPU needs to be reset to recover.\n"
            + "[Tue Mar  4 02:10:05 2025] NVRM: GPU 0000:19:00.0: GPU needs to be reset to recover.\n"
            + "[Tue Mar  4 02:10:06 2025] NVRM: GPU 0000:19:00.0: GPU needs to be reset, again.\n")
    r = one(text)
    first = [e for e in r.evidence if "0000:19:00" in e]
    assert len(first) == 2 and not any("): 45," in e for e in first)


def test_a_site_that_lowers_a_drain_code_gets_the_generic_remedy():
    from preflight import policy

    token = policy.use(policy.builtin().with_overrides({"gpu.xid/reset-gpu": "warn"}, "site.toml"))
    try:
        r = one(xid_line("0000:19:00", 62, "halt"))
    finally:
        policy.reset(token)
    assert r.status is Status.WARN and r.remedy == "look at the lines quoted"


def test_special_findings_evidence_caps():
    text = "".join(f"[ {i}.0] NVRM: No NVIDIA devices probed ({i}).\n" for i in range(5))
    r = one(text)
    assert len(r.evidence) == 4 and r.remedy == "fix the driver first (gpu.driver names the cause), then re-check " \
                                                "the kernel log"


def test_a_profile_list_without_a_source(tmp_path):
    prof = tmp_path / "p.toml"
    prof.write_text('[profile]\nname = "p"\nextends = "generic"\n[xid]\nignore = [79]\nfail = [13]\n')

    class Bare:
        def __init__(self, real):
            self.real = real

        def get(self, key, default=None):
            return self.real.get(key, default)

        def source(self, key):
            return ""

    from preflight import profile as profiles

    real = profiles.load(str(prof))
    r = one(xid_line("0000:19:00", 79, "gone", 1) + xid_line("0000:19:00", 13, "x", 2), profile=str(prof))
    assert r.status is Status.FAIL
    ctx = type("Ctx", (), {"profile": Bare(real)})()
    gr = xm._Graded(__import__("preflight.parsers.kernel_log", fromlist=["KernelLog"]).KernelLog(), None, 0,
                    [xm.Group(first=ev(79), last=ev(79), severity="ignored"),
                     xm.Group(first=ev(13), last=ev(13), severity="fail")], [], [], {13}, {79}, {})
    f = xm.Findings()
    xm._notes(ctx, gr, f)  # type: ignore[arg-type]
    assert f.notes == ["xid.ignore = [79] (profile): 1 event(s) not graded", "xid.fail = [13] (profile)"]


def test_no_facts_for_a_capture_is_a_skip():
    class Ctx:
        def input(self, name):
            return object()

        def facts(self, name):
            return None

        def finding(self, code, summary, **kw):
            return (code, summary)

    assert xm.grade_xid(Ctx()) == ("gpu.xid/no-kernel-log", "no kernel log captured; Xids not checked")  # type: ignore


def test_evidence_of_one_finding_keeps_to_its_gpu_and_live_causes():
    from preflight.parsers.kernel_log import KernelLog

    a62, b62 = ev(62, "0000:19:00", 1), ev(62, "0000:29:00", 2)
    b45 = ev(45, "0000:29:00", 3)
    c13 = ev(13, "0000:19:00", 4)
    groups = [xm.Group(first=a62, last=a62, severity="fail"), xm.Group(first=b62, last=b62, severity="fail"),
              xm.Group(first=b45, last=b45, severity="info", caused_by=62),
              xm.Group(first=c13, last=c13, severity="info", caused_by=62, cleared=True)]
    gr = xm._Graded(KernelLog(), None, 0, groups, [], [], set(), set(), {})
    assert xm._evidence(gr, [groups[0]], "0000:19:00") == ["line 1"]
    assert xm._evidence(gr, [groups[1]], "0000:29:00") == ["line 2", "line 3"]
