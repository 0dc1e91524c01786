"""The NVIDIA Kubernetes device plugin's health-check lines (NVIDIA/k8s-device-plugin, and the GKE
plugin of GoogleCloudPlatform/container-engine-accelerators) as records.

The plugin waits on NVML events and logs what it does with each (any klog or Go log framing
around the message is left to the caller, the message is searched anywhere in the line):

- an Xid it acts on: `XidCriticalError: Xid=%d on Device=%s; marking device as unhealthy.`
  (v0.14 and later, `internal/rm/health.go` `checkHealth`), `... on Device=%s, the device will go
  unhealthy.` (v0.5 - v0.13, `nvidia.go` / `internal/rm/health.go`), `... on GPU=%s, the device
  will go unhealthy.` (1.0.0-beta4), `... on Device=%s, uuid=%s, the device will go unhealthy.`
  (GKE), and with no device: `XidCriticalError: Xid=%d, All devices will go unhealthy.` (the
  GKE plugin also logs that with Xid=0 when a wait returns no event: no Xid);
- each event, `Processing event %+v` / `Skipping event %+v` (an Xid the plugin is told to
  skip: the application Xids 13, 31, 43, 45, 68, 109 and DP_DISABLE_HEALTHCHECKS) and `Skipping
  non-nvmlEventTypeXidCriticalError event: %+v` (v0.13 and later), the event printed as a Go
  struct: `{Device:{Handle:0x..} EventType:8 EventData:79 GpuInstanceId:.. ComputeInstanceId:..}`
  (older bindings: `Etype:8 Edata:79`); event type 8 is an Xid (its data the Xid), 2 a
  double-bit and 1 a single-bit ECC error (NVML nvmlEventType*);
- `'%s' device marked unhealthy: %s` (the resource and the device), `device marked unhealthy:
  %s` (1.0.0-beta);
- devices marked unhealthy without an Xid: `unable to get device handle from UUID: %v; marking
  it as unhealthy`, `unable to determine the supported events for %v: %v; marking it as
  unhealthy`, `Could not determine device placement for %v: %v; Marking it unhealthy.`,
  `Marking device %v as unhealthy: %v`, `Error waiting for event: %v; Marking all devices as
  unhealthy`, `Failed to determine uuid for event %v: %v; Marking all devices as unhealthy.`,
  `Warning: %s is too old to support healthchecking: %s. Marking it unhealthy.` (before v0.13);
- context: `Ignoring the following XIDs for health checks: %v`, `Device %v is too old to
  support healthchecking.`, `Failed to start health check: %v; continuing with health checks
  disabled`, `Ignoring event for unexpected device: %v`, `Ignoring malformed Xid value %v: %v`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from preflight import lazyre

NEEDLES = ("XidCriticalError", "unhealthy", "Processing event", "Skipping event", "healthcheck", "health check",
           "Ignoring event for unexpected device", "Ignoring malformed Xid", "for health checks")
# what a scan of a whole log looks for: every line NEEDLES finds holds one of these
SCAN_NEEDLES = ("Xid", "ealth", "ing event")

_XID_CRITICAL = lazyre.compile(r"XidCriticalError: Xid=(?P<xid>\d+)(?: on (?:Device|GPU)=(?P<dev>[^\s,;]+))?"
                           r"(?:,\s*uuid=(?P<uuid>[^\s,;]+))?")
_EVENT = lazyre.compile(r"\b(?P<verb>Processing|Skipping)(?P<non> non-nvmlEventTypeXidCriticalError)? event:?\s*&?\{")
_EVENT_TYPE = lazyre.compile(r"\b(?:EventType|Etype):(?P<type>\d+)")
_EVENT_DATA = lazyre.compile(r"\b(?:EventData|Edata):(?P<data>\d+)")
_MARKED = lazyre.compile(r"(?:'(?P<resource>[^']+)' )?device marked unhealthy: (?P<dev>\S+)")
# a device marked unhealthy for a reason that is no Xid: (pattern with the device and the error)
_UNHEALTHY: tuple[re.Pattern[str], ...] = (
    lazyre.compile(r"unable to get device handle from UUID: (?P<err>.*?); marking it as unhealthy", re.I),
    lazyre.compile(r"unabled? to determine the supported events for (?P<dev>\S+): (?P<err>.*?); marking it as unhealthy",
               re.I),
    lazyre.compile(r"could not determine device placement for (?P<dev>\S+): (?P<err>.*?); Marking it unhealthy", re.I),
    lazyre.compile(r"Marking device (?P<dev>\S+) as unhealthy: (?P<err>.*)$"),
    lazyre.compile(r"(?P<err>Error waiting for event: .*?); Marking (?P<all>all) devices as unhealthy"),
    lazyre.compile(r"(?P<err>Failed to determine uuid for event) .*; Marking (?P<all>all) devices as unhealthy"),
    lazyre.compile(r"(?:Warning: )?(?P<dev>\S+) is too old to support healthchecking: (?P<err>.*?)\.? Marking it unhealthy"),
)
_CONTEXT = lazyre.compile(r"Ignoring the following XIDs for health checks: .*|Device \S+ is too old to support "
                      r"healthchecking\.?$|Failed to start health check: .*|Ignoring event for unexpected device: \S+|"
                      r"Ignoring malformed Xid value .*")
_DEVICE_ID = lazyre.compile(r"^(?:GPU|MIG)-[0-9A-Za-z./*-]+$")

EVENT_XID = 8  # nvmlEventTypeXidCriticalError
EVENT_DBE = 2  # nvmlEventTypeDoubleBitEccError
EVENT_SBE = 1  # nvmlEventTypeSingleBitEccError


@dataclass
class PluginRecord:
    """One health-check line of the device plugin.

    kind: "xid" (an Xid the plugin acted on), "event" (an Xid event it processed or skipped:
    `xid` set, `skipped` when it skipped it), "nvml_event" (an event of another type:
    `event_type`), "unhealthy" (a device marked unhealthy for a reason that is no Xid:
    `detail`), "marked" (the plugin withdrew a device: the consequence of one of the others),
    "context" (configuration and health-check state: `detail`)."""

    kind: str
    text: str  # the message from the plugin's words on
    xid: int | None = None
    device: str = ""  # the device id the plugin names (a GPU or MIG UUID, or its own name)
    uuid: str = ""  # the GPU / MIG UUID when the line gives one
    all_devices: bool = False
    skipped: bool = False
    event_type: int | None = None
    detail: str = ""


def _uuid(dev: str, uuid: str = "") -> str:
    return uuid if uuid else dev if _DEVICE_ID.match(dev) else ""


def _xid_line(msg: str) -> PluginRecord | None:
    m = _XID_CRITICAL.search(msg)
    if m is None:
        return None
    dev = m.group("dev") or ""
    return PluginRecord("xid", msg[m.start():], xid=int(m.group("xid")), device=dev,
                        uuid=_uuid(dev, m.group("uuid") or ""), all_devices=not dev)


def _event_line(msg: str) -> PluginRecord | None:
    m = _EVENT.search(msg)
    if m is None:
        return None
    body = msg[m.end():]
    tm, dm = _EVENT_TYPE.search(body), _EVENT_DATA.search(body)
    if tm is None:
        return None
    etype = int(tm.group("type"))
    text = msg[m.start():]
    if etype == EVENT_XID and dm is not None and not m.group("non"):
        return PluginRecord("event", text, xid=int(dm.group("data")), skipped=m.group("verb") == "Skipping",
                            event_type=etype)
    return PluginRecord("nvml_event", text, event_type=etype, skipped=True)


def _unhealthy_line(msg: str) -> PluginRecord | None:
    for pat in _UNHEALTHY:
        m = pat.search(msg)
        if m is not None:
            gd = m.groupdict()
            dev = gd.get("dev") or ""
            return PluginRecord("unhealthy", msg[m.start():], device=dev, uuid=_uuid(dev),
                                all_devices=bool(gd.get("all")), detail=(gd.get("err") or "").strip())
    m = _MARKED.search(msg)
    if m is not None:
        return PluginRecord("marked", msg[m.start():], device=m.group("dev"), uuid=_uuid(m.group("dev")),
                            detail=m.group("resource") or "")
    return None


def read(msg: str) -> PluginRecord | None:
    """The device plugin's record in one message, None when the line is none of its lines."""
    if not any(nd in msg for nd in NEEDLES):
        return None
    rec = _xid_line(msg) or _event_line(msg) or _unhealthy_line(msg)
    if rec is not None:
        return rec
    m = _CONTEXT.search(msg)
    return PluginRecord("context", m.group(0), detail=m.group(0)) if m else None


def shows_plugin(msg: str) -> bool:
    """A line only the device plugin prints about a GPU's health (an Xid, an event, a device
    withdrawn): enough to call a document its log."""
    rec = read(msg)
    return rec is not None and rec.kind != "context"


__all__ = ["EVENT_DBE", "EVENT_SBE", "EVENT_XID", "NEEDLES", "SCAN_NEEDLES", "PluginRecord", "read", "shows_plugin"]
