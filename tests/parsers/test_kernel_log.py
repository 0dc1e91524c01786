"""The kernel-log parser: Xid reports, Xid-less GPU faults, driver faults, GPU identities."""

from __future__ import annotations

import pytest

from preflight.framing import Doc, Line, frame
from preflight.parsers import kernel_log as kl
from tests.conftest import FIXTURES, fixture_text


def parse(text: str) -> kl.KernelLog:
    docs = frame(text).docs
    return kl.parse(docs[0] if len(docs) == 1 else Doc.join(docs))


def test_xid_fields_gpu_index_uuid_serial():
    log = parse(fixture_text("kernel-log/dmesg_raw_xid119_stack.log"))
    assert [e.xid for e in log.events] == [119, 119]
    ev = log.events[0]
    assert ev.pci == "0000:5e:00" and ev.gpu == 2 and ev.pid == "90112" and ev.name == "dcgm-exporter"
    assert ev.line.time is None and ev.line.mono == pytest.approx(88213.44187)
    assert ev.text.startswith("Timeout after 6s")
    assert log.gpus["0000:5e:00"] == {"uuid": "GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9",
                                      "serial": "1654023019985", "index": 2}
    assert "0000:5e:00" in log.reset_notes  # "The GPU likely needs to be reset."


def test_stack_dump_and_noise_are_not_events():
    log = parse(fixture_text("kernel-log/dmesg_iso_xid48_63_94.log"))
    assert [e.xid for e in log.events] == [48, 63, 94, 94, 94, 94, 94, 94, 94]
    assert not log.faults and not log.driver_faults


def test_nvlink5_fields():
    log = parse("NVRM: Xid (PCI:0008:01:00): 147, TREX_TX Fatal XC1 i2 Link 07 (0x0000beef 0x00000001 0x0 0x0 0x0 0x0)\n"
                "NVRM: Xid (PCI:0008:02:00): 146, TLW Nonfatal XC0 i0 Link -1 (0x00000002 0x00000008 0x0 0x0 0x0 0x0)\n")
    a, b = log.events
    assert (a.unit, a.fatal, a.link, a.registers[:2]) == ("TREX_TX", True, 7, ["0x0000beef", "0x00000001"])
    assert (b.unit, b.fatal, b.link) == ("TLW", False, -1)


def test_caused_by_previous_xid_and_mig_attribution():
    log = parse("[ 10.1] NVRM: Xid (PCI:0000:3b:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x016415c6 0x0 0x0 0x0 0x0 0x0)\n"
                "[ 10.4] NVRM: Xid (PCI:0000:3b:00): 45, pid=4242, name=python3, Ch 00000010 caused by previous Xid 149\n"
                "[ 11.0] NVRM: Xid (PCI:0000:9a:00 GPU-I:02 GPU-CI:01): 13, pid=7, name=a, Graphics Exception\n")
    e149, e45, e13 = log.events
    assert e45.caused_by == 149 and e45.text == "Ch 00000010" and e45.pid == "4242"
    assert e149.caused_by is None
    assert e13.mig == "GPU-I:02 GPU-CI:01" and e13.pci == "0000:9a:00"


def test_xid154_recovery_action():
    log = parse("Aug 10 15:36:05 gpu-node-a kernel: NVRM: Xid (PCI:0000:55:00): 154, GPU recovery action changed "
                "from 0x0 (None) to 0x4 (Drain and Reset)\n")
    ev = log.events[0]
    assert (ev.recovery, ev.recovery_code) == ("Drain and Reset", 4)
    assert log.hosts == ["gpu-node-a"]


@pytest.mark.parametrize("line, kind, pci, action, gpu", [
    ("NVRM: GPU 0000:13:00.0: RmInitAdapter failed! (0x26:0x56:1463)", "adapter_init_failed", "0000:13:00",
     "RESTART_BM", None),
    ("NVRM: GPU 0000:13:00.0: rm_init_adapter failed, device minor number 0", "adapter_init_failed", "0000:13:00",
     "RESTART_BM", None),
    ("NVRM: This PCI I/O region assigned to your NVIDIA device is invalid:", "adapter_init_failed", "", "RESTART_BM",
     None),
    ("nvidia: probe of 0000:01:00.0 failed with error -1", "adapter_init_failed", "0000:01:00", "RESTART_BM", None),
    ("NVRM: GPU 0000:01:00.0: GPU does not have the necessary power cables connected.", "power_cables", "0000:01:00",
     "CHECK_MECHANICALS", None),
    ("NVRM: nvCheckOkFailedNoLog: Check failed: GPU lost from the bus [NV_ERR_GPU_IS_LOST] (0x0000000F)",
     "gpu_lost", "", "RESTART_BM", None),
    ("NVRM: _threadNodeCheckTimeout: API_GPU_ATTACHED_SANITY_CHECK failed!", "gpu_lost", "", "RESTART_BM", None),
    ("NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062) returned "
     "from status @ kernel_channel.c:2874", "reset_required", "", "RESET_GPU", None),
    ("NVRM: GPU2 nvAssertFailedNoLog: Assertion failed: GPU marked for reset @ kernel_gsp.c:2628", "reset_required",
     "", "RESET_GPU", 2),
    ("NVRM: _kgspIsHeartbeatTimedOut: Heartbeat timed out, currentTimeMs 709957545 heartbeat 105067568 diff 8025 "
     "timeout 5200", "gsp_timeout", "", "RESET_GPU", None),
    ("NVRM: GPU3 _kgspClassifyGspTimeout: ================ GSP core unresponsive ===============", "gsp_timeout", "",
     "RESET_GPU", 3),
    ("NVRM: GPU1 _issueRpcAndWait: rpcRecvPoll failed with status 0x00000065 for fn 76!", "gsp_timeout", "",
     "RESET_GPU", 1),
    ("NVRM: GPU1 _issueRpcLarge: rpcRecvPoll timedout for fn 10 sequence 48213!", "gsp_timeout", "", "RESET_GPU", 1),
    ("NVRM: GPU1 kgspHealthCheck_TU102: ****** GSP-CrashCat Report ******", "gsp_crash", "", "RESET_GPU", 1),
    ("NVRM: GPU6 kgmmuCheckMemSubsysError_IMPL: Memory Subsystem Error detected. kbusSendSysmembarSingle failed.",
     "memsys_error", "", "RESET_GPU", 6),
    ("NVRM: GPU0 _kgspRpcGspEventPmuHalted: Received signal from GSP that PMU has halted.", "pmu_halted", "",
     "RESET_GPU", 0),
    ("NVRM: GPU 0000:01:00.0: _kgspBootGspRm: unexpected WPR2 already up, cannot proceed with booting GSP",
     "wpr2_up", "0000:01:00", "RESTART_BM", None),
    ("NVRM: GPU 0000:41:00.0: GPU has fallen off the bus.", "fallen_off_bus", "0000:41:00", "RESTART_BM", None),
    ("NVRM: knvlinkDiscoverPostRxDetLinks_GH100: Getting peer0's postRxDetLinkMask failed!", "nvlink_discovery_failed",
     "", "WORKFLOW_NVLINK_ERR", None),
    ("NVRM: GPU5 knvlinkDiscoverPostRxDetLinks_GH100: Getting peer0's postRxDetLinkMask failed!",
     "nvlink_discovery_failed", "", "WORKFLOW_NVLINK_ERR", 5),
    ("NVRM: nvAssertFailedNoLog: Assertion failed: 0 @ g_kern_bus_nvoc.h:2567", "driver_assert", "", "", None),
    ("NVRM: nvCheckOkFailedNoLog: Check failed: Invalid argument [NV_ERR_INVALID_ARGUMENT] (0x0000001F)", "rm_error",
     "", "", None),
])
def test_faults_without_an_xid(line: str, kind: str, pci: str, action: str, gpu: int | None):
    log = parse(f"[  5.000000] {line}\n")
    assert [(f.kind, f.pci, f.action, f.gpu) for f in log.faults] == [(kind, pci, action, gpu)]
    assert log.events == [] and log.hardware == []


@pytest.mark.parametrize("line, kind, meaning, detail", [
    ("NVRM: No NVIDIA graphics adapter probed!", "no_adapter", "the nvidia kernel module found no GPU to drive", {}),
    ("NVRM: No NVIDIA devices probed.", "no_adapter", "the nvidia kernel module found no GPU to drive", {}),
    ("NVRM: The NVIDIA probe routine was not called for 3 device(s).", "probe_not_called",
     "another driver (nouveau, vfio) owns the GPUs, so the nvidia module did not bind them", {"n": "3"}),
    ("NVRM: API mismatch: the client has the version 535.161.08, but this kernel module has the version "
     "535.129.03.  Please make sure that this kernel module and all NVIDIA driver components have the same version.",
     "api_mismatch", "the user-space driver and the loaded kernel module are different versions",
     {"client": "535.161.08", "kernel": "535.129.03"}),
    ("NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:1b06) installed in this system is not supported by the "
     "NVIDIA 470.82.01 driver release.", "unsupported_gpu", "the installed driver branch does not support this GPU", {}),
    ("nvidia: Unknown symbol drm_gem_object_free (err -2)", "module_symbols",
     "the nvidia kernel module does not match the running kernel (unknown symbols)", {}),
    ("NVRM: RmFetchGspRmImages: No firmware image found", "firmware_missing",
     "the GSP firmware files do not match the kernel module", {}),
])
def test_driver_faults(line: str, kind: str, meaning: str, detail: dict):
    log = parse(f"[  2.000000] {line}\n")
    assert [(d.kind, d.meaning, d.detail) for d in log.driver_faults] == [(kind, meaning, detail)]
    assert log.faults == []


def test_probe_not_called_counts_devices_and_joins_continuations():
    text = ("[188549.976351] NVRM: The NVIDIA probe routine was not called for 3 device(s).\n"
            "[188549.977053] NVRM: This can occur when a driver such as: \n"
            "NVRM: nouveau, rivafb, nvidiafb or rivatv \n")
    log = parse(text)
    assert log.driver_faults[0].detail == {"n": "3"}
    cont = [ln for ln in frame(text).docs[0].lines if ln.text.startswith("NVRM: nouveau")][0]
    assert cont.cont and cont.mono == pytest.approx(188549.977053)


def test_module_version_and_tool_errors():
    log = parse("[Thu Apr  4 18:03:56 2024] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.161.07  Sat Feb 17 "
                "22:55:48 UTC 2024\n")
    assert log.module_version == "535.161.07"
    log = parse("dmesg: read kernel buffer failed: Operation not permitted\n")
    assert log.tool_errors and log.events == []


def test_a_million_line_log_keeps_the_last_xid():
    noise = "[Mon Jun  3 10:12:01 2024] mlx5_core 0000:17:00.0: Port module event: module 0, Cable plugged\n"
    text = noise * 200_000 + "[Mon Jun  3 10:12:09 2024] NVRM: Xid (PCI:0000:9b:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"
    log = parse(text)
    assert [e.xid for e in log.events] == [79] and log.lines == 200_001
    assert log.events[0].line.n == 200_001


def test_detector():
    for p in sorted((FIXTURES / "kernel-log").iterdir()):
        if not p.name.startswith("nccl"):
            assert kl.detect(frame(p.read_text()).docs[0]), p.name
    for text in (fixture_text("kernel-log/nccl_log_mentions_xid.txt"),
                 '{"level":"warn","msg":"NVRM was mentioned"}\n{"level":"info"}\n',
                 "GPU 0: Xid 79 happened yesterday\nplease check\n",
                 "[rank0]:[W318 10:00:00.000] Xid 13\n[rank1]: hello\n",
                 "lunch at noon\n"):
        assert not kl.detect(frame(text).docs[0]), text


# ----------------------------------------------------------------------------- Xid layouts


def _xid(msg: str) -> kl.XidEvent:
    ev = kl.parse_xid(msg, Line(msg, 1, msg))
    assert ev is not None, msg
    return ev


@pytest.mark.parametrize("msg, pci, mig, xid, text", [
    ("NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=a, Graphics Exception", "0000:3b:00", "", 13, "Graphics Exception"),
    ("NVRM: Xid (0000:02:00): 13, 0004 00000000 0000a1c0", "0000:02:00", "", 13, "0004 00000000 0000a1c0"),
    ("NVRM: Xid (PCI:0000:01:00 GPU-I:05 GPU-CI:01): 94, pid=7, name=p, Contained", "0000:01:00",
     "GPU-I:05 GPU-CI:01", 94, "Contained"),
    ("NVRM: Xid (PCI:0000:9a:00 GPU-I:02): 31, pid=7, name=p, MMU Fault", "0000:9a:00", "GPU-I:02", 31, "MMU Fault"),
    ("NVRM: Xid (PCI:0000:XX:00): 48, DBE", "0000:xx:00", "", 48, "DBE"),
    ("NVRM: Xid (PCI:00000000:3B:00.0): 79, GPU has fallen off the bus.", "0000:3b:00", "", 79,
     "GPU has fallen off the bus."),
    ("NVRM: Xid (<redacted>): 79, gone", "<redacted>", "", 79, "gone"),
    ("NVRM: Xid (): 79", "", "", 79, ""),
    ("NVRM: Xid 48, DBE", "", "", 48, "DBE"),
    ("NVRM: Xid: 63", "", "", 63, ""),
])
def test_xid_attribution_forms(msg: str, pci: str, mig: str, xid: int, text: str):
    ev = _xid(msg)
    assert (ev.pci, ev.mig, ev.xid, ev.text) == (pci, mig, xid, text)


@pytest.mark.parametrize("msg", [
    "NVRM: GPU at PCI:0000:17:00: GPU-abc",
    "NVRM: _kgspLogXid119: ***** GSP Timeout *****",
    "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32",
    "NVRM: Xid (PCI:0000:41:00) reported, see above",
])
def test_not_an_xid_report(msg: str):
    assert kl.parse_xid(msg, Line(msg, 1, msg)) is None


def test_pid_name_and_caused_by_are_taken_off_the_text():
    ev = _xid("NVRM: Xid (PCI:0000:dc:00): 45, pid='<unknown>', name=<unknown>, Ch 00000001, caused by previous Xid 149.")
    assert (ev.pid, ev.name, ev.text, ev.caused_by) == ("<unknown>", "<unknown>", "Ch 00000001", 149)
    ev = _xid("NVRM: Xid (PCI:0000:af:00): 79, pid=0, GPU has fallen off the bus.")
    assert (ev.pid, ev.name, ev.text) == ("0", "", "GPU has fallen off the bus.")
    ev = _xid("NVRM: Xid (PCI:0000:af:00): 119, pid=9, name= nvidia-smi , Timeout from GPU3 GSP!")
    assert (ev.name, ev.gpu) == ("nvidia-smi", 3)


@pytest.mark.parametrize("xid, nvlink", [(73, False), (74, True), (75, False), (143, False), (144, True),
                                         (150, True), (151, False)])
def test_nvlink_details_only_for_nvlink_xids(xid: int, nvlink: bool):
    ev = _xid(f"NVRM: Xid (PCI:0008:01:00): {xid}, TREX_TX Fatal XC1 i2 Link 07 (0x0000beef 0x1)")
    assert (ev.unit, ev.fatal, ev.link) == (("TREX_TX", True, 7) if nvlink else ("", None, None))
    assert ev.registers == (["0x0000beef", "0x1"] if nvlink else [])


@pytest.mark.parametrize("text, fatal", [
    ("NVLink: fatal error detected on link 6", True),
    ("NVLink: Non-Fatal error on link 3", False),
    ("NVLink: non fatal error on link 3", False),
    ("NVLink: NonFatal error", False),
    ("NVLink: link training error", None),
])
def test_nvlink_word_in_free_text(text: str, fatal: bool | None):
    assert _xid(f"NVRM: Xid (PCI:0000:17:00): 74, {text}").fatal is fatal


@pytest.mark.parametrize("text, name, code", [
    ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", "GPU Reset Required", 1),
    ("GPU recovery action changed from 0x0 (None) to 0x12 (Future)", "Future", 18),
    ("GPU recovery action changed from 0 (None) to 2 (Node Reboot Required)", "Node Reboot Required", 2),
    ("GPU recovery action changed from (None) to (Drain and Reset)", "Drain and Reset", 4),
    ("GPU recovery action changed from (None) to (recover IMEX domain)", "recover IMEX domain", 5),
    ("GPU recovery action changed from (None) to (Something Else)", "Something Else", None),
    ("GPU recovery action changed", "", None),
])
def test_xid154_recovery_action_by_number_or_name(text: str, name: str, code: int | None):
    ev = _xid(f"NVRM: Xid (PCI:0000:55:00): 154, {text}")
    assert (ev.recovery, ev.recovery_code) == (name, code)
    assert _xid(f"NVRM: Xid (PCI:0000:55:00): 153, {text}").recovery == ""


# ----------------------------------------------------------------------------- reading a log


def test_identity_lines_uuid_serial_and_masked_address():
    log = parse("[ 1.0] NVRM: GPU Board Serial Number: 0000000000001\n"
                "[ 1.1] NVRM: GPU at PCI:0000:xx:00: GPU-455e672a-...\n"
                "[ 1.2] NVRM: GPU Board Serial Number: 17946256XXXXX\n"
                "[ 1.3] NVRM: Xid (PCI:0000:xx:00): 79, pid=1, name=a, GPU has fallen off the bus.\n")
    assert log.gpus == {"0000:xx:00": {"uuid": "GPU-455e672a-...", "serial": "17946256XXXXX"}}
    assert log.nvrm == 4 and [e.pci for e in log.events] == ["0000:xx:00"]


def test_open_module_version_and_json_records():
    log = parse("[ 1.0] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.158.01  Release Build\n")
    assert log.module_version == "570.158.01"
    log = parse('{"MESSAGE":"NVRM: GPU at PCI:0000:18:00: GPU-aa","_HOSTNAME":"g1","SYSLOG_IDENTIFIER":"kernel",'
                '"__REALTIME_TIMESTAMP":"1714557600123456"}\n'
                '{"MESSAGE":"NVRM: Xid (PCI:0000:18:00): 79, pid=0, gone","_HOSTNAME":"g1","SYSLOG_IDENTIFIER":"kernel",'
                '"__REALTIME_TIMESTAMP":"1714557601123456"}\n')
    assert log.gpus == {"0000:18:00": {"uuid": "GPU-aa"}} and [e.xid for e in log.events] == [79]
    assert log.hosts == ["g1"] and log.nvrm == 2


def test_unparsed_xid_lines_are_kept_and_other_xid_mentions_are_not():
    log = parse("[ 1.0] NVRM: Xid (PCI:0000:41:00) reported, see above\n"
                "[ 1.1] NVRM: _kgspLogXid119: Note: Please also check logs above.\n"
                "[ 1.2] systemd[1]: Xid watcher started\n")
    assert [ln.n for ln in log.unparsed] == [1]
    assert [f.kind for f in log.faults] == ["gsp_timeout"] and log.events == []


def test_gpu_index_from_an_xid_names_later_faults_and_events():
    log = parse("[ 1.0] NVRM: GPU6 _kgspIsHeartbeatTimedOut: Heartbeat timed out, diff 6070 timeout 5200\n"
                "[ 2.0] NVRM: Xid (PCI:0000:9b:00): 119, pid=1, name=a, Timeout after 6s of waiting for RPC response "
                "from GPU6 GSP! Expected function 76\n"
                "[ 3.0] NVRM: Xid (PCI:0000:9b:00): 45, pid=1, name=a, Ch 00000001\n"
                "[ 4.0] NVRM: GPU2 _kgspRpcGspEventPmuHalted: Received signal from GSP that PMU has halted.\n"
                "[ 5.0] NVRM: Xid (PCI:0000:1b:00): 62, pid=1, name=a, GPU7 halted\n"
                "[ 6.0] NVRM: Xid (PCI:0000:1b:00): 62, pid=1, name=a, GPU8 halted\n")
    assert [(f.kind, f.pci, f.gpu) for f in log.faults] == [("gsp_timeout", "0000:9b:00", 6),
                                                            ("pmu_halted", "", 2)]
    assert [e.gpu for e in log.events] == [6, 6, 7, 8]
    assert log.gpus == {"0000:9b:00": {"index": 6}, "0000:1b:00": {"index": 7}}


def test_an_xid_without_an_address_does_not_name_a_gpu():
    log = parse("[ 1.0] NVRM: Xid 119, Timeout from GPU4 GSP\n")
    assert log.gpus == {} and log.events[0].gpu == 4


def test_a_multi_line_message_names_its_gpu_for_three_lines():
    text = ("[ 1.0] NVRM: The NVIDIA GPU 0000:b3:00.0\n"
            "[ 1.0] NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
            "[ 1.0] NVRM: fallen off the bus and is not responding to commands.\n"
            "[ 1.1] NVRM: The NVIDIA probe routine failed for 1 device(s).\n"
            "[ 1.2] NVRM: nvAssertFailedNoLog: Assertion failed: 0 @ a.c:1\n")
    log = parse(text)
    assert [(f.kind, f.pci) for f in log.faults] == [("fallen_off_bus", "0000:b3:00"),
                                                      ("adapter_init_failed", "0000:b3:00"),
                                                      ("driver_assert", "")]


def test_reset_notes_need_an_address():
    log = parse("[ 1.0] NVRM: GPU 0000:17:00.0: GPU needs to be reset to recover.\n"
                "[ 1.1] NVRM: Please reboot the system\n")
    assert list(log.reset_notes) == ["0000:17:00"] and log.faults == []


def test_tool_errors_are_capped_and_only_the_tools_own():
    text = "".join(f"dmesg: read kernel buffer failed: Operation not permitted ({i})\n" for i in range(8))
    log = parse(text + "[ 1.0] pcieport 0000:00:01.0: AER: device recovery failed\n")
    assert len(log.tool_errors) == 5 and log.tool_errors[0].endswith("(0)")
    assert [f.kind for f in log.hardware] == ["pcie_recovery_failed"]


def test_kernel_hardware_reports_are_kept_apart_from_gpu_faults():
    log = parse("[ 1.0] pcieport 0000:00:01.1: AER: Uncorrected (Fatal) error received: 0000:01:00.0\n"
                "[ 1.1] NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.\n")
    assert [f.kind for f in log.hardware] == ["pcie_fatal"] and [f.kind for f in log.faults] == ["fallen_off_bus"]


def test_hosts_once_each_in_order():
    log = parse("Jan 10 12:00:00 g2 kernel: NVRM: Xid (PCI:0000:01:00): 13, pid=1, name=a, x\n"
                "Jan 10 12:00:01 g1 kernel: NVRM: Xid (PCI:0000:01:00): 13, pid=1, name=a, x\n"
                "Jan 10 12:00:02 g2 kernel: NVRM: Xid (PCI:0000:01:00): 13, pid=1, name=a, x\n")
    assert log.hosts == ["g2", "g1"]


@pytest.mark.parametrize("text, stamped", [
    ("a\n[ 1.0] b\n[ 2.0] c\n", True),
    ("a\nb\n[ 1.0] c\n", False),
    ("a\n[ 1.0] b\n", True),
    ("\n\n", False),
])
def test_stamped_when_half_the_head_carries_kernel_stamps(text: str, stamped: bool):
    assert parse(text).stamped is stamped


# ----------------------------------------------------------------------------- recognising a kernel log


@pytest.mark.parametrize("text", [
    "NVRM: GPU at PCI:0000:01:00: GPU-aa\n",
    "something Xid (PCI:0000:01:00): 79, gone\n",
    "nvidia-nvswitch3: SXid (PCI:0000:86:00.0): 20034, Fatal, Link 33 LTSSM Fault Up\n",
    "mce: Uncorrected hardware memory error in user-access at 3ad5c9b400\n",
    "Memory failure: 0x3ad5c9b: recovery action for dirty LRU page: Recovered\n",
    "nvidia 0000:01:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)\n",
    "pcieport 0000:80:03.1: AER: Uncorrectable (Fatal) error message received from 0000:81:00.0\n",
    "pcieport 0000:00:01.1: AER: Uncorrected (Fatal) error received: 0000:01:00.0\n",
    "mce: [Hardware Error]: Machine check events logged\n",
    "{1}[Hardware Error]: event severity: fatal\n",
    "pcieport 0000:00:03.1: pciehp: Slot(3): Link Down\n",
    "pcieport 0000:80:01.1: DPC: containment event, status:0x1f01 source:0x0000\n",
    "EDAC MC0: 1 CE memory read error on DIMM_A1\n",
])
def test_one_report_line_is_a_kernel_log(text: str):
    assert kl.detect(frame(text).docs[0]), text


def test_mostly_kernel_framed_lines_are_a_kernel_log():
    kern = "Jan 10 12:00:0{i} g1 kernel: usb 1-1: new device {i}\n"
    other = "Jan 10 12:00:0{i} g1 sshd[22]: accepted {i}\n"
    three = "".join(kern.format(i=i) for i in range(3))
    assert kl.detect(frame(three + "".join(other.format(i=i) for i in range(3))).docs[0])
    assert not kl.detect(frame(three + "".join(other.format(i=i) for i in range(4))).docs[0])
    assert not kl.detect(frame("".join(kern.format(i=i) for i in range(2))).docs[0])
    msgs = "[ 1.0] pcieport 0000:00:01.0: enabled\n[ 1.1] ACPI: done\n[ 1.2] mce: CPU0: Thermal monitoring\n"
    assert kl.detect(frame(msgs).docs[0])


def test_detection_reads_at_most_400_lines():
    noise = "".join(f"line {i} of a report\n" for i in range(400))
    assert not kl.detect(frame(noise + "NVRM: Xid (PCI:0000:01:00): 79, gone\n").docs[0])
    assert kl.detect(frame(noise[noise.index("\n") + 1:] + "NVRM: Xid (PCI:0000:01:00): 79, gone\n").docs[0])


@pytest.mark.parametrize("line", [
    "dmesg: read kernel buffer failed: Operation not permitted",
    "journalctl: Failed to open journal directory: Permission denied",
    "No journal files were found.",
    "klogctl: Operation not permitted",
])
def test_the_tools_own_complaints(line: str):
    assert parse(line + "\n").tool_errors == [line]


@pytest.mark.parametrize("name, code", [("None", 0), ("GPU Reset Required", 1), ("Node Reboot Required", 2),
                                        ("Drain P2P", 3), ("Drain and Reset", 4), ("Recover IMEX Domain", 5)])
def test_every_recovery_action_name(name: str, code: int):
    assert _xid(f"NVRM: Xid (PCI:0000:55:00): 154, GPU recovery action changed to ({name})").recovery_code == code


def test_parsed_events_are_printed_not_implied_and_the_caused_text_keeps_its_last_char():
    ev = _xid("NVRM: Xid (PCI:0000:dc:00): 45, pid=1, name=a, Ch 0000000X, caused by previous Xid 149")
    assert ev.text == "Ch 0000000X" and ev.implied is False


def test_an_unparsed_xid_line_is_not_also_a_fault():
    log = parse("[ 1.0] NVRM: Xid (PCI:0000:41:00) GPU has fallen off the bus\n")
    assert len(log.unparsed) == 1 and log.faults == []


def test_a_fault_with_its_address_keeps_it_whatever_index_it_names():
    log = parse("[ 1.0] NVRM: GPU1 RmInitAdapter: Cannot initialize GSP firmware RM (PCI:0000:02:00)\n")
    assert [(f.pci, f.gpu) for f in log.faults] == [("0000:02:00", 1)]


def test_gsp_crash_report_banner_alone():
    log = parse("[ 1.0] NVRM: GPU1 _kgspLogCrash: ****** GSP-CrashCat Report ******\n"
                "[ 1.1] NVRM: GPU2 kgspIsFatal: NV_PGSP_FALCON_IRQSTAT_FATAL_ERROR ECC pending (mask: 0x4)\n")
    assert [f.kind for f in log.faults] == ["gsp_crash", "gsp_crash"]


def test_json_record_messages_are_read_unescaped():
    log = parse('{"MESSAGE":"NVRM: GPU at PCI:0000:18:00: GPU-aa\\u0042","SYSLOG_IDENTIFIER":"kernel",'
                '"__REALTIME_TIMESTAMP":"1714557600123456"}\n'
                '{"MESSAGE":"NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=a, x","SYSLOG_IDENTIFIER":"kernel",'
                '"__REALTIME_TIMESTAMP":"1714557601123456"}\n')
    assert log.gpus == {"0000:18:00": {"uuid": "GPU-aaB"}}


@pytest.mark.parametrize("stamp", ["[ 1.0] ", "[Mon Jan  6 10:00:00 2025] ", "4,123,456,-;", "kern  :info  : ",
                                   "<6>", "kernel: "])
def test_lines_framed_as_kernel_messages(stamp: str):
    three = "".join(f"{stamp}usb 1-{i}: new high-speed USB device\n" for i in range(3))
    assert kl.detect(frame(three).docs[0])


def test_kernel_messages_under_another_time_stamp_and_blank_lines():
    three = "".join(f"2026-11-25T10:11:0{i}.123456Z pcieport 0000:00:0{i}.0: enabled\n" for i in range(3))
    assert kl.detect(frame(three).docs[0])
    other = "".join(f"2026-11-25T10:11:0{i}.123456Z usb 1-{i}: enabled\n" for i in range(3))
    assert not kl.detect(frame(other).docs[0])
    assert kl.detect(frame("\n\n   \nNVRM: GPU at PCI:0000:01:00: GPU-aa\n").docs[0])


def test_format_and_parser_registration():
    assert [(f.name, f.probe_name, f.priority) for f in kl.FORMATS] == [("kernel-log", "kernel-log", 40)]
    assert [(p.probe, p.parse) for p in kl.PARSERS] == [("kernel-log", kl.parse)]
