"""The kernel-log parser: Xid reports, Xid-less GPU faults, driver faults, GPU identities."""

from __future__ import annotations

import pytest

from preflight.framing import Doc, frame
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


@pytest.mark.parametrize("line, kind, pci", [
    ("NVRM: GPU 0000:13:00.0: RmInitAdapter failed! (0x26:0x56:1463)", "adapter_init_failed", "0000:13:00"),
    ("NVRM: GPU 0000:13:00.0: rm_init_adapter failed, device minor number 0", "adapter_init_failed", "0000:13:00"),
    ("NVRM: nvCheckOkFailedNoLog: Check failed: GPU lost from the bus [NV_ERR_GPU_IS_LOST] (0x0000000F)",
     "gpu_lost", ""),
    ("NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062) returned "
     "from status @ kernel_channel.c:2874", "reset_required", ""),
    ("NVRM: _kgspIsHeartbeatTimedOut: Heartbeat timed out, currentTimeMs 709957545 heartbeat 105067568 diff 8025 "
     "timeout 5200", "gsp_timeout", ""),
    ("NVRM: GPU 0000:01:00.0: _kgspBootGspRm: unexpected WPR2 already up, cannot proceed with booting GSP",
     "wpr2_up", "0000:01:00"),
    ("NVRM: GPU 0000:41:00.0: GPU has fallen off the bus.", "fallen_off_bus", "0000:41:00"),
    ("NVRM: knvlinkDiscoverPostRxDetLinks_GH100: Getting peer0's postRxDetLinkMask failed!", "nvlink_discovery_failed",
     ""),
])
def test_faults_without_an_xid(line: str, kind: str, pci: str):
    log = parse(f"[  5.000000] {line}\n")
    assert [(f.kind, f.pci) for f in log.faults] == [(kind, pci)]
    assert log.events == []


@pytest.mark.parametrize("line, kind", [
    ("NVRM: No NVIDIA graphics adapter probed!", "no_adapter"),
    ("NVRM: The NVIDIA probe routine was not called for 3 device(s).", "probe_not_called"),
    ("NVRM: API mismatch: the client has the version 535.161.08, but this kernel module has the version "
     "535.129.03.  Please make sure that this kernel module and all NVIDIA driver components have the same version.",
     "api_mismatch"),
    ("nvidia: Unknown symbol drm_gem_object_free (err -2)", "module_symbols"),
    ("NVRM: RmFetchGspRmImages: No firmware image found", "firmware_missing"),
])
def test_driver_faults(line: str, kind: str):
    log = parse(f"[  2.000000] {line}\n")
    assert [d.kind for d in log.driver_faults] == [kind]
    assert log.driver_faults[0].meaning


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
