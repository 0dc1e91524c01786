"""Small node facts read from sysfs and the environment: link speeds, RDMA device names, the
NCCL / gloo variables of a job's environment (only those: an `env` dump may carry secrets)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from preflight import lazyre
from preflight.framing import Doc
from preflight.parsers.base import Format, ParserSpec

_SPEED = lazyre.compile(r"^/sys/class/net/([^/\s]+)/speed:(-?\d+)\s*$")
_ENV_LINE = lazyre.compile(r"^(?:export\s+|declare -x\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
# Environment variables that steer NCCL and gloo onto interfaces (the only ones kept).
ENV_KEEP = lazyre.compile(r"^(NCCL_\w*|TORCH_NCCL_\w*|GLOO_SOCKET_IFNAME|GLOO_DEVICE_TRANSPORT|UCX_NET_DEVICES|"
                      r"CUDA_VISIBLE_DEVICES)$")


@dataclass
class Speeds:
    mbps: dict[str, int] = field(default_factory=dict)  # interface -> Mb/s (-1: unknown, link down)


@dataclass
class IbDevices:
    names: list[str] = field(default_factory=list)
    listed: bool = False  # False when the listing failed (no /sys/class/infiniband)


@dataclass
class Env:
    vars: dict[str, str] = field(default_factory=dict)  # only NCCL/gloo/UCX/CUDA_VISIBLE_DEVICES


def parse_speeds(doc: Doc) -> Speeds:
    out = Speeds()
    for ln in doc.lines:
        m = _SPEED.match(ln.text.strip())
        if m:
            out.mbps[m.group(1)] = int(m.group(2))
    return out


def parse_ib_devices(doc: Doc) -> IbDevices:
    out = IbDevices()
    for ln in doc.lines:
        s = ln.text.strip()
        if re.fullmatch(r"[A-Za-z0-9_.-]+", s):
            out.names.append(s)
        elif s:
            return IbDevices(names=[], listed=False)
    out.listed = True
    return out


def parse_env(doc: Doc) -> Env:
    out = Env()
    for ln in doc.lines:
        m = _ENV_LINE.match(ln.text.strip())
        if m and ENV_KEEP.match(m.group(1)):
            out.vars[m.group(1)] = m.group(2).strip().strip('"').strip("'")
    return out


def _looks_like_speed(doc: Doc) -> bool:
    lines = [ln.text for ln in doc.head(400) if ln.text.strip()]  # pragma: no mutate (how far detection reads)
    return bool(lines) and sum(1 for t in lines if _SPEED.match(t.strip())) >= max(1, len(lines) // 2)


def _looks_like_env(doc: Doc) -> bool:
    lines = [ln.text for ln in doc.head(400) if ln.text.strip()]  # pragma: no mutate (how far detection reads)
    if len(lines) < 3:
        return False
    hits = sum(1 for t in lines if _ENV_LINE.match(t.strip()))
    return hits >= 0.9 * len(lines) and any(re.match(r"(?:export\s+)?(NCCL_\w+|PATH|HOME)=", t) for t in lines)


FORMATS = [
    Format("ip-speed", detect=_looks_like_speed, priority=55, description="grep -H . /sys/class/net/*/speed"),
    Format("env", detect=_looks_like_env, priority=20, description="env (NCCL/gloo variables)"),
]
PARSERS = [ParserSpec("ip-speed", parse_speeds), ParserSpec("ib-devices", parse_ib_devices),
           ParserSpec("env", parse_env)]

__all__ = ["ENV_KEEP", "Env", "FORMATS", "IbDevices", "PARSERS", "Speeds", "parse_env", "parse_ib_devices",
           "parse_speeds"]
