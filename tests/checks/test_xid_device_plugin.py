"""gpu.xid on the Kubernetes device plugin's log: its Xids graded by the catalog like kernel Xid
lines with the GPU named by UUID, the devices it withdraws for other reasons, the ECC events it
skips; summaries, evidence, remedies and facts. Lines written here in the plugin's log formats."""

from __future__ import annotations

from typing import Any

from preflight.checks import xid as xm
from preflight.model import Result, Status
from preflight.parsers.kernel_log import REPORTER
from tests.conftest import capture, grade, grade_text

U = "GPU-7d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
U2 = "GPU-2a3b4c5d-6e7f-4081-92a3-b4c5d6e7f809"
MIG = "MIG-5c6d7e8f-9a0b-5c1d-8e2f-3a4b5c6d7e8f"
KLOG = "I0310 14:02:{s:02d}.418301       1 health.go:169] "
EV = "{Device:{Handle:0x7f3b2c001a40} EventType:%d EventData:%d GpuInstanceId:4294967295 ComputeInstanceId:4294967295}"


def klog(*msgs: str) -> str:
    return "".join(KLOG.format(s=i) + m + "\n" for i, m in enumerate(msgs))


def xid(text: str, profile: str = "generic", **extra: Any) -> Result:
    [r] = grade_text("gpu.xid", {"kernel-log": text}, profile, **extra)
    return r


def codes(r: Result) -> list[str]:
    return list(r.facts.get("codes", []))


def test_the_audit_shape_xid69_marked_unhealthy() -> None:
    r = xid(f"2020/08/10 19:09:42 XidCriticalError: Xid=69 on Device={U}, the device will go unhealthy.\n"
            f"2020/08/10 19:09:42 'nvidia.com/gpu' device marked unhealthy: {U}\n")
    assert r.status is Status.WARN and codes(r) == ["gpu.xid/restart-app"]
    assert r.summary == f"{U}: Xid 69 ROBUST_CHANNEL_GR_CLASS_ERROR (Kubernetes device plugin: GPU marked unhealthy)"
    assert r.evidence == [
        f"2020/08/10 19:09:42 XidCriticalError: Xid=69 on Device={U}, the device will go unhealthy.",
        f"2020/08/10 19:09:42 'nvidia.com/gpu' device marked unhealthy: {U}"]
    assert r.remedy == "report to the job owner (application-level Xid 69); no drain; " + xm.PLUGIN_REMEDY
    [fact] = r.facts["events"]
    assert fact["xid"] == 69 and fact["pci"] == "" and fact["uuid"] == U and fact["reporter"] == REPORTER
    assert fact["code"] == "gpu.xid/restart-app" and fact["severity"] == "warn"
    assert r.facts["counts"] == {U: {"69": 1}}


def test_drain_level_xid_names_the_uuid_in_its_remedy() -> None:
    r = xid(klog(f"XidCriticalError: Xid=79 on Device={U}; marking device as unhealthy."))
    assert r.status is Status.FAIL and codes(r) == ["gpu.xid/restart-bm"]
    assert r.summary == f"{U}: Xid 79 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS (Kubernetes device plugin: GPU " \
                        "marked unhealthy)"
    assert r.remedy.startswith(f"drain node; reboot clears Xid 79 on {U};")
    assert r.remedy.endswith("; " + xm.PLUGIN_REMEDY)
    reset = xid(klog(f"XidCriticalError: Xid=62 on Device={U2}; marking device as unhealthy."))
    assert codes(reset) == ["gpu.xid/reset-gpu"] and f"`nvidia-smi -r -i {U2}`" in reset.remedy


def test_two_gpus_are_two_findings() -> None:
    r = xid(klog(f"XidCriticalError: Xid=79 on Device={U}; marking device as unhealthy.",
                 f"XidCriticalError: Xid=79 on Device={U2}; marking device as unhealthy."))
    assert codes(r) == ["gpu.xid/restart-bm"] and r.summary.count("Xid 79") == 2
    assert r.summary.startswith(f"{U}: Xid 79") and f"; {U2}: Xid 79" in r.summary
    assert r.facts["counts"] == {U: {"79": 1}, U2: {"79": 1}}


def test_a_flood_on_one_gpu_is_one_burst() -> None:
    r = xid(klog(*[f"XidCriticalError: Xid=69 on Device={U}; marking device as unhealthy."] * 3))
    assert r.summary.startswith(f"{U}: Xid 69 ROBUST_CHANNEL_GR_CLASS_ERROR x3 (")
    assert f"(Xid 69 on {U}: 3 lines, up to " in " ".join(r.evidence)


def test_skipped_app_xid_is_graded_without_the_plugin_part() -> None:
    r = xid(klog("Ignoring the following XIDs for health checks: map[13:true 31:true 43:true]",
                 "Skipping event " + EV % (8, 13)))
    assert r.status is Status.WARN and codes(r) == ["gpu.xid/restart-app"]
    assert r.summary == "a GPU: Xid 13 ROBUST_CHANNEL_GR_EXCEPTION (Kubernetes device plugin)"
    assert r.remedy == "report to the job owner (application-level Xid 13); no drain"


def test_processing_event_without_action() -> None:
    r = xid(klog("Processing event " + EV % (8, 95), f"Ignoring event for unexpected device: {U}"))
    assert r.status is Status.FAIL and codes(r) == ["gpu.xid/reset-gpu"]
    assert r.summary == "a GPU: Xid 95 ROBUST_CHANNEL_UNCONTAINED_ERROR (Kubernetes device plugin)"


def test_all_devices_xid() -> None:
    r = xid(klog("XidCriticalError: Xid=62, All devices will go unhealthy.",
                 f"'nvidia.com/gpu' device marked unhealthy: {U}"))
    assert codes(r) == ["gpu.xid/reset-gpu"]
    assert r.summary == "a GPU: Xid 62 PMU_HALT_ERROR (Kubernetes device plugin: GPU marked unhealthy)"
    assert r.remedy.endswith(xm.PLUGIN_REMEDY)


def test_mig_device() -> None:
    r = xid(klog(f"XidCriticalError: Xid=94 on Device={MIG}; marking device as unhealthy."))
    assert codes(r) == ["gpu.xid/restart-app"] and r.summary.startswith(f"{MIG}: Xid 94")


def test_device_named_by_index() -> None:
    r = xid(klog("XidCriticalError: Xid=79 on Device=3; marking device as unhealthy."))
    assert r.summary.startswith("GPU3: Xid 79") and "`nvidia-smi -r -i <gpu>`" not in r.remedy


def test_device_marked_unhealthy_faults() -> None:
    r = xid(klog(f"unable to determine the supported events for {U}: Unknown Error; marking it as unhealthy",
                 f"'nvidia.com/gpu' device marked unhealthy: {U}"))
    assert r.status is Status.WARN and codes(r) == ["gpu.xid/device-marked-unhealthy"]
    assert r.summary == f"{U}: marked unhealthy by the Kubernetes device plugin: Unknown Error"
    assert r.remedy.startswith(f"the Kubernetes device plugin withdrew {U} from the node's allocatable GPUs")
    assert r.remedy.endswith(xm.PLUGIN_REMEDY)
    [fault] = r.facts["faults"]
    assert fault["kind"] == "plugin_unhealthy" and fault["device"] == U and fault["code"] == "gpu.xid/device-marked-unhealthy"
    alone = xid(klog(f"'nvidia.com/gpu' device marked unhealthy: {U2}"))
    assert alone.summary == f"{U2}: marked unhealthy by the Kubernetes device plugin: the reason is not in the log"
    everything = xid(klog("Error waiting for event: ERROR_UNKNOWN; Marking all devices as unhealthy"))
    assert everything.summary == ("all devices: marked unhealthy by the Kubernetes device plugin: Error waiting for "
                                  "event: ERROR_UNKNOWN")
    nameless = xid(klog("unable to get device handle from UUID: ERROR_NOT_FOUND; marking it as unhealthy"))
    assert nameless.summary == "a GPU: marked unhealthy by the Kubernetes device plugin: ERROR_NOT_FOUND"


def test_nvml_ecc_events() -> None:
    dbe = xid(klog("Skipping non-nvmlEventTypeXidCriticalError event: " + EV % (2, 0)))
    assert dbe.status is Status.WARN and codes(dbe) == ["gpu.xid/nvml-dbe-event"]
    assert dbe.summary == ("a GPU: double-bit ECC error event (the device plugin's NVML event type 2): Skipping "
                           "non-nvmlEventTypeXidCriticalError event: " + EV % (2, 0))
    assert dbe.remedy.startswith("an uncorrectable (double-bit) ECC error on a GPU of the node")
    sbe = xid(klog("Skipping non-nvmlEventTypeXidCriticalError event: " + EV % (1, 0)))
    assert sbe.status is Status.PASS and codes(sbe) == []
    assert any(e.startswith("a GPU: single-bit ECC error event") for e in sbe.evidence)


def test_quiet_plugin_log() -> None:
    r = xid(klog("Skipping non-nvmlEventTypeXidCriticalError event: " + EV % (1, 0)))
    assert r.summary == "no Xid needing action in the Kubernetes device plugin's log"
    kernel = xid("[ 5.000001] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15\n"
                 + "[ 6.000001] " + KLOG.format(s=1) + "Skipping non-nvmlEventTypeXidCriticalError event: "
                 + EV % (1, 0) + "\n")
    assert kernel.summary.startswith("no Xid needing action since boot")
    since = xid(klog("Skipping non-nvmlEventTypeXidCriticalError event: " + EV % (1, 0)),
                xid_since="2020-01-01T00:00:00")
    assert since.summary.startswith("no Xid needing action since 2020-01-01T00:00:00")


def test_plugin_and_kernel_xids_of_one_gpu() -> None:
    """The kernel names the GPU by PCI address and its UUID: the plugin's line is the same GPU."""
    text = (f"[Tue Mar  4 02:10:00 2025] NVRM: GPU at PCI:0000:3b:00: {U}\n"
            f"[Tue Mar  4 02:10:05 2025] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"
            f"[Tue Mar  4 02:10:05 2025] XidCriticalError: Xid=79 on Device={U}; marking device as unhealthy.\n")
    r = xid(text)
    assert codes(r) == ["gpu.xid/restart-bm"] and r.summary.startswith("GPU 0000:3b:00: Xid 79")
    assert r.facts["counts"] == {"0000:3b:00": {"79": 2}}


def test_label_and_reset_command() -> None:
    assert xm._is_uuid(U) and xm._is_uuid(MIG) and not xm._is_uuid("0000:3b:00") and not xm._is_uuid("")
    assert xm._reset_cmd(U) == f"`nvidia-smi -r -i {U}`"
    assert xm._reset_cmd("0000:3b:00") == "`nvidia-smi -r -i 0000:3b:00.0`"
    assert xm._reset_cmd("") == "`nvidia-smi -r -i <gpu>`"


def test_run_mode_capture_of_a_plugin_log() -> None:
    text = klog(f"XidCriticalError: Xid=48 on Device={U}; marking device as unhealthy.")
    [r] = grade("gpu.xid", {"kernel-log": capture("kernel-log", text, argv=["kubectl", "logs"])})
    assert codes(r) == ["gpu.xid/workflow-xid-48"] and r.status is Status.FAIL
