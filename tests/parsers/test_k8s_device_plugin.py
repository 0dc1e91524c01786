"""The Kubernetes device plugin's health-check lines: `k8s_device_plugin.read` on every wording
of NVIDIA/k8s-device-plugin (1.0.0-beta .. v0.20) and of the GKE plugin, and what the kernel-log
parser makes of them (Xid events by UUID, faults, notes). Lines written here in the plugin's klog
and Go log formats."""

from __future__ import annotations

import pytest

from preflight.framing import Doc, frame
from preflight.parsers import k8s_device_plugin as plugin
from preflight.parsers import kernel_log
from preflight.parsers.k8s_device_plugin import PluginRecord

U = "GPU-7d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
U2 = "GPU-2a3b4c5d-6e7f-4081-92a3-b4c5d6e7f809"
MIG = "MIG-5c6d7e8f-9a0b-5c1d-8e2f-3a4b5c6d7e8f"
KLOG = "I0310 14:02:11.418301       1 health.go:169] "
EV = "{Device:{Handle:0x7f3b2c001a40} EventType:%d EventData:%d GpuInstanceId:4294967295 ComputeInstanceId:4294967295}"


def rec(msg: str) -> PluginRecord | None:
    return plugin.read(msg)


# --------------------------------------------------------------------------- the Xid lines


@pytest.mark.parametrize(("msg", "xid", "device", "uuid", "all_devices"), [
    (f"XidCriticalError: Xid=79 on Device={U}; marking device as unhealthy.", 79, U, U, False),
    (f"XidCriticalError: Xid=69 on Device={U}, the device will go unhealthy.", 69, U, U, False),
    (f"XidCriticalError: Xid=48 on GPU={U}, the device will go unhealthy.", 48, U, U, False),
    (f"XidCriticalError: Xid=74 on Device=nvidia3, uuid={U2}, the device will go unhealthy.", 74, "nvidia3", U2, False),
    (f"XidCriticalError: Xid=94 on Device={MIG}; marking device as unhealthy.", 94, MIG, MIG, False),
    ("XidCriticalError: Xid=94 on Device=MIG-GPU-7d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d/1/0; marking device as "
     "unhealthy.", 94, "MIG-GPU-7d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d/1/0",
     "MIG-GPU-7d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d/1/0", False),
    ("XidCriticalError: Xid=31 on Device=3; marking device as unhealthy.", 31, "3", "", False),
    ("XidCriticalError: Xid=62, All devices will go unhealthy.", 62, "", "", True),
    ("XidCriticalError: Xid=0, All devices will go unhealthy.", 0, "", "", True),
])
def test_xid_lines(msg: str, xid: int, device: str, uuid: str, all_devices: bool) -> None:
    for line in (msg, KLOG + msg, "2021/03/04 09:12:44 " + msg):
        r = rec(line)
        assert r is not None and r.kind == "xid" and r.text == msg
        assert (r.xid, r.device, r.uuid, r.all_devices, r.skipped) == (xid, device, uuid, all_devices, False)


@pytest.mark.parametrize(("msg", "kind", "xid", "etype", "skipped"), [
    ("Processing event " + EV % (8, 79), "event", 79, 8, False),
    ("Skipping event " + EV % (8, 43), "event", 43, 8, True),
    ("Skipping event &{UUID:0xc0001 Etype:8 Edata:13 GpuInstanceId:0xc0002 ComputeInstanceId:0xc0003}", "event", 13,
     8, True),
    ("Processing event {Device:{Handle:0x1} EventType:8 GpuInstanceId:0}", "nvml_event", None, 8, True),
    ("Skipping non-nvmlEventTypeXidCriticalError event: " + EV % (2, 0), "nvml_event", None, 2, True),
    ("Skipping non-nvmlEventTypeXidCriticalError event: " + EV % (1, 0), "nvml_event", None, 1, True),
    ("Skipping non-nvmlEventTypeXidCriticalError event: " + EV % (4, 0), "nvml_event", None, 4, True),
])
def test_event_lines(msg: str, kind: str, xid: int | None, etype: int, skipped: bool) -> None:
    r = rec(KLOG + msg)
    assert r is not None and r.text == msg
    assert (r.kind, r.xid, r.event_type, r.skipped, r.device) == (kind, xid, etype, skipped, "")


def test_an_event_without_its_type_is_no_record() -> None:
    assert rec("Processing event {Device:{Handle:0x1}}") is None
    assert rec("Processing event later") is None


@pytest.mark.parametrize(("msg", "device", "uuid", "all_devices", "detail"), [
    ("unable to get device handle from UUID: ERROR_NOT_FOUND; marking it as unhealthy", "", "", False,
     "ERROR_NOT_FOUND"),
    (f"unable to determine the supported events for {U}: Unknown Error; marking it as unhealthy", U, U, False,
     "Unknown Error"),
    (f"Unable to determine the supported events for {U}: Unknown Error; marking it as unhealthy", U, U, False,
     "Unknown Error"),
    (f"unabled to determine the supported events for {U}: x; marking it as unhealthy", U, U, False, "x"),
    (f"Could not determine device placement for {MIG}: failed; Marking it unhealthy.", MIG, MIG, False, "failed"),
    (f"Warning: could not determine device placement for {MIG}: failed; Marking it unhealthy.", MIG, MIG, False,
     "failed"),
    (f"Marking device {U2} as unhealthy: ERROR_UNKNOWN", U2, U2, False, "ERROR_UNKNOWN"),
    ("Error waiting for event: ERROR_GPU_IS_LOST; Marking all devices as unhealthy", "", "", True,
     "Error waiting for event: ERROR_GPU_IS_LOST"),
    ("Failed to determine uuid for event {{0x7f} 8 95 4294967295 4294967295}: ERROR_UNKNOWN; Marking all devices "
     "as unhealthy.", "", "", True, "Failed to determine uuid for event"),
    (f"Warning: {U} is too old to support healthchecking: Not Supported. Marking it unhealthy.", U, U, False,
     "Not Supported"),
])
def test_unhealthy_lines(msg: str, device: str, uuid: str, all_devices: bool, detail: str) -> None:
    r = rec(KLOG + msg)
    assert r is not None and r.kind == "unhealthy"
    assert (r.device, r.uuid, r.all_devices, r.detail, r.xid) == (device, uuid, all_devices, detail, None)


@pytest.mark.parametrize(("msg", "device", "uuid", "resource"), [
    (f"'nvidia.com/gpu' device marked unhealthy: {U}", U, U, "nvidia.com/gpu"),
    (f"'nvidia.com/mig-1g.10gb' device marked unhealthy: {MIG}", MIG, MIG, "nvidia.com/mig-1g.10gb"),
    (f"device marked unhealthy: {U}", U, U, ""),
    ("'nvidia.com/gpu' device marked unhealthy: 2", "2", "", "nvidia.com/gpu"),
])
def test_marked_lines(msg: str, device: str, uuid: str, resource: str) -> None:
    r = rec("2020/08/10 19:09:42 " + msg)
    assert r is not None and r.kind == "marked" and r.text == msg
    assert (r.device, r.uuid, r.detail) == (device, uuid, resource)


@pytest.mark.parametrize("msg", [
    "Ignoring the following XIDs for health checks: map[13:true 31:true 43:true 45:true 68:true 109:true]",
    f"Device {U} is too old to support healthchecking.",
    "Failed to start health check: failed to create event set: ERROR_UNKNOWN; continuing with health checks disabled",
    f"Ignoring event for unexpected device: {U}",
    "Ignoring malformed Xid value abc: strconv.ParseUint: parsing \"abc\": invalid syntax",
])
def test_context_lines(msg: str) -> None:
    r = rec(KLOG + msg)
    assert r is not None and r.kind == "context" and r.text == msg and r.detail == msg
    assert not plugin.shows_plugin(KLOG + msg)


@pytest.mark.parametrize("msg", [
    "", "Starting GRPC server for 'nvidia.com/gpu'", "Registered device plugin for 'nvidia.com/gpu' with Kubelet",
    "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.", "health check passed",
    "the pod is unhealthy", "XidCriticalError: Xid=abc", "Processing events now",
])
def test_lines_of_no_record(msg: str) -> None:
    assert rec(msg) is None and not plugin.shows_plugin(msg)


def test_shows_plugin() -> None:
    assert plugin.shows_plugin(f"XidCriticalError: Xid=79 on Device={U}; marking device as unhealthy.")
    assert plugin.shows_plugin("Skipping event " + EV % (8, 43))
    assert plugin.shows_plugin(f"'nvidia.com/gpu' device marked unhealthy: {U}")


# --------------------------------------------------------------------------- the kernel-log parser


def parse(text: str) -> kernel_log.KernelLog:
    docs = frame(text).docs
    return kernel_log.parse(docs[0] if len(docs) == 1 else Doc.join(docs))


def test_xid_line_is_an_xid_event_by_uuid() -> None:
    log = parse(f"2020/08/10 19:09:42 XidCriticalError: Xid=69 on Device={U}, the device will go unhealthy.\n"
                f"2020/08/10 19:09:42 'nvidia.com/gpu' device marked unhealthy: {U}\n")
    [ev] = log.events
    assert (ev.xid, ev.pci, ev.uuid, ev.device, ev.reporter, ev.gpu) == (69, "", U, U, kernel_log.REPORTER, None)
    assert ev.text == f"XidCriticalError: Xid=69 on Device={U}, the device will go unhealthy."
    assert ev.line.time is not None and ev.line.time.isoformat() == "2020-08-10T19:09:42"
    assert log.faults == [] and log.plugin_lines == 2 and list(log.plugin_marked) == [U]
    assert log.plugin_marked[U].n == 2 and log.nvrm == 0


def test_processing_then_acting_is_one_event() -> None:
    log = parse(KLOG + "Processing event " + EV % (8, 79) + "\n"
                + KLOG + f"XidCriticalError: Xid=79 on Device={U}; marking device as unhealthy.\n")
    [ev] = log.events
    assert ev.uuid == U and ev.line.n == 2


def test_processing_not_acted_on_is_an_event_without_a_gpu() -> None:
    log = parse(KLOG + "Processing event " + EV % (8, 119) + "\n"
                + KLOG + f"Ignoring event for unexpected device: {U}\n"
                + KLOG + "Processing event " + EV % (8, 48) + "\n"
                + KLOG + f"XidCriticalError: Xid=48 on Device={U2}; marking device as unhealthy.\n"
                + KLOG + "Processing event " + EV % (8, 62) + "\n")
    assert [(e.xid, e.uuid, e.line.n) for e in log.events] == [(119, "", 1), (48, U2, 4), (62, "", 5)]
    assert log.plugin_notes == [f"Ignoring event for unexpected device: {U}"]


def test_processing_then_another_xid_keeps_both() -> None:
    log = parse(KLOG + "Processing event " + EV % (8, 79) + "\n"
                + KLOG + f"XidCriticalError: Xid=48 on Device={U}; marking device as unhealthy.\n")
    assert sorted((e.xid, e.uuid) for e in log.events) == [(48, U), (79, "")]


def test_skipped_xids_are_events_and_explain_no_withdrawal() -> None:
    log = parse(KLOG + "Skipping event " + EV % (8, 43) + "\n"
                + KLOG + f"'nvidia.com/gpu' device marked unhealthy: {U}\n")
    [ev] = log.events
    assert (ev.xid, ev.uuid, ev.reporter) == (43, "", kernel_log.REPORTER)
    [f] = log.faults
    assert (f.kind, f.device, f.detail, f.pci) == ("plugin_unhealthy", U, "the reason is not in the log", "")


def test_nvml_ecc_events_are_faults() -> None:
    log = parse(KLOG + "Skipping non-nvmlEventTypeXidCriticalError event: " + EV % (2, 0) + "\n"
                + KLOG + "Skipping non-nvmlEventTypeXidCriticalError event: " + EV % (1, 0) + "\n"
                + KLOG + "Skipping non-nvmlEventTypeXidCriticalError event: " + EV % (4, 0) + "\n")
    assert [(f.kind, f.device) for f in log.faults] == [("nvml_dbe_event", kernel_log.REPORTER),
                                                       ("nvml_sbe_event", kernel_log.REPORTER)]
    assert log.faults[0].detail.startswith("Skipping non-nvmlEventTypeXidCriticalError event: {") and not log.events


def test_unhealthy_reasons_are_faults() -> None:
    log = parse(KLOG + f"Marking device {U2} as unhealthy: ERROR_UNKNOWN\n"
                + KLOG + f"'nvidia.com/gpu' device marked unhealthy: {U2}\n"
                + KLOG + "Error waiting for event: ERROR_GPU_IS_LOST; Marking all devices as unhealthy\n"
                + KLOG + "unable to get device handle from UUID: ERROR_NOT_FOUND; marking it as unhealthy\n")
    assert [(f.kind, f.device, f.detail) for f in log.faults] == [
        ("plugin_unhealthy", U2, "ERROR_UNKNOWN"),
        ("plugin_unhealthy", "all devices", "Error waiting for event: ERROR_GPU_IS_LOST"),
        ("plugin_unhealthy", "", "ERROR_NOT_FOUND")]


def test_marked_devices_an_all_devices_line_explains() -> None:
    log = parse("2020/11/02 03:15:27 XidCriticalError: Xid=62, All devices will go unhealthy.\n"
                f"2020/11/02 03:15:27 'nvidia.com/gpu' device marked unhealthy: {U}\n"
                f"2020/11/02 03:15:27 'nvidia.com/gpu' device marked unhealthy: {U2}\n")
    assert [(e.xid, e.device) for e in log.events] == [(62, "")] and log.faults == []
    wait = parse(KLOG + "Error waiting for event: ERROR_UNKNOWN; Marking all devices as unhealthy\n"
                 + KLOG + f"'nvidia.com/gpu' device marked unhealthy: {U}\n")
    assert [f.device for f in wait.faults] == ["all devices"]
    pending = parse(KLOG + "Processing event " + EV % (8, 95) + "\n"
                    + KLOG + f"'nvidia.com/gpu' device marked unhealthy: {U}\n")
    assert [e.xid for e in pending.events] == [95] and pending.faults == []


def test_marked_device_named_by_another_line_is_no_fault() -> None:
    log = parse(KLOG + f"XidCriticalError: Xid=79 on Device={U}; marking device as unhealthy.\n"
                + KLOG + f"'nvidia.com/gpu' device marked unhealthy: {U}\n"
                + KLOG + f"'nvidia.com/gpu' device marked unhealthy: {U2}\n")
    assert [(f.kind, f.device) for f in log.faults] == [("plugin_unhealthy", U2)]
    reason = parse(KLOG + f"Marking device {U2} as unhealthy: ERROR_UNKNOWN\n"
                   + KLOG + f"'nvidia.com/gpu' device marked unhealthy: {U2}\n")
    assert len(reason.faults) == 1


def test_xid_zero_is_a_note() -> None:
    log = parse("I0101 00:00:05.000000 1 health_checker.go:150] XidCriticalError: Xid=0, All devices will go "
                "unhealthy.\n")
    assert log.events == [] and log.plugin_notes == ["XidCriticalError: Xid=0, All devices will go unhealthy."]


def test_device_index_and_uuid_resolution() -> None:
    log = parse(KLOG + "XidCriticalError: Xid=31 on Device=3; marking device as unhealthy.\n")
    assert log.events[0].gpu == 3 and log.events[0].uuid == ""
    both = parse(f"[ 5.1] NVRM: GPU at PCI:0000:3b:00: {U}\n"
                 f"[ 9.2] XidCriticalError: Xid=79 on Device={U}; marking device as unhealthy.\n")
    assert both.events[0].pci == "0000:3b:00" and both.events[0].device == "0000:3b:00"


def test_detection() -> None:
    line = f"XidCriticalError: Xid=69 on Device={U}, the device will go unhealthy.\n"
    assert kernel_log.detect(frame("2020/08/10 19:09:42 " + line).docs[0])
    start = "".join(f"I0310 14:00:{i % 60:02d}.000000 1 main.go:{i}] Starting FS watcher.\n" for i in range(500))
    assert kernel_log.detect(frame(start + KLOG + line).docs[0])
    assert not kernel_log.detect(frame(start).docs[0])
    context = KLOG + "Ignoring the following XIDs for health checks: map[13:true]\n"
    assert not kernel_log.detect(frame(context).docs[0])
