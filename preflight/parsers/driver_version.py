"""Which NVIDIA driver is loaded and which is installed, as facts.

- `/proc/driver/nvidia/version`: `NVRM version: NVIDIA UNIX x86_64 Kernel Module  520.56.06  <date>`
  (also `NVIDIA UNIX Open Kernel Module for x86_64`, aarch64 builds): the loaded kernel module;
- `modinfo -F version nvidia` (a bare version under its prompt) or `modinfo nvidia` (`version:`):
  the module on disk, which the next boot loads;
- `dpkg -l` rows (`ii  nvidia-utils-525  525.85.12-0ubuntu1  amd64 ...`), `rpm -qa` names
  (`nvidia-driver-cuda-525.85.12-1.el8.x86_64`): the installed user-space packages.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from preflight.framing import Doc
from preflight.parsers.base import Format, ParserSpec

_VERSION = r"\d{3}\.\d{1,3}(?:\.\d{1,3})?"
_PROC = re.compile(rf"NVRM version:.*?Kernel Module(?: for \S+)?\s+({_VERSION})\b")
_MODINFO = re.compile(rf"^version:\s+({_VERSION})\s*$")
_BARE = re.compile(rf"^({_VERSION})$")
_DPKG = re.compile(rf"^[a-z][a-zA-Z ]?\s+((?:lib)?nvidia[\w.+:-]*|cuda-drivers[\w.-]*)\s+(?:\d+:)?({_VERSION})\S*\s")
_RPM = re.compile(rf"^((?:lib)?nvidia[\w.+-]*?|cuda-drivers[\w-]*?|kmod-nvidia[\w.-]*?)-(?:\d+:)?({_VERSION})-\S+$")
# packages whose version is not the driver's (toolkits, container runtime, firmware)
_NOT_DRIVER = re.compile(r"container|docker|cuda-toolkit|nvidia-cuda|persistenced-doc|firmware-\d|modprobe|"
                         r"nvidia-settings|nvidia-prime|dkms-tools|fabricmanager-dev", re.I)


@dataclass
class Package:
    name: str
    version: str
    line: str


@dataclass
class DriverVersions:
    loaded: str = ""  # the kernel module in memory (/proc/driver/nvidia/version)
    loaded_line: str = ""
    on_disk: str = ""  # modinfo's version of the module the next boot loads
    on_disk_line: str = ""
    packages: list[Package] = field(default_factory=list)

    @property
    def recognised(self) -> bool:
        return bool(self.loaded or self.on_disk or self.packages)

    @property
    def installed(self) -> list[str]:
        """Distinct driver versions of the installed packages, in order seen."""
        return list(dict.fromkeys(p.version for p in self.packages))


def parse(doc: Doc) -> DriverVersions:
    out = DriverVersions()
    modinfo = "modinfo" in (doc.command or "")
    for ln in doc.lines:
        t = ln.text.strip()
        if not t:
            continue
        m = _PROC.search(t)
        if m:
            out.loaded, out.loaded_line = m.group(1), t
            continue
        m = _MODINFO.match(t) or (_BARE.match(t) if modinfo else None)
        if m:
            out.on_disk, out.on_disk_line = m.group(1), t
            continue
        m = _DPKG.match(t) or _RPM.match(t)
        if m and not _NOT_DRIVER.search(m.group(1)):
            out.packages.append(Package(m.group(1), m.group(2), t))
    return out


def detect(doc: Doc) -> bool:
    head = [ln.text.strip() for ln in doc.head(200)]
    if any(_PROC.search(t) for t in head):
        return True
    cmd = doc.command or ""
    if "modinfo" in cmd and "nvidia" in cmd:
        return any(_MODINFO.match(t) or _BARE.match(t) for t in head)
    if re.search(r"\b(dpkg|rpm|apt|yum|dnf)\b", cmd) or any(t.startswith("||/ Name") for t in head):
        return any((_DPKG.match(t) or _RPM.match(t)) for t in head)
    return False


FORMATS = [Format("driver-version", detect=detect, priority=50,
                  description="/proc/driver/nvidia/version, modinfo nvidia, dpkg -l / rpm -qa nvidia packages")]
PARSERS = [ParserSpec("driver-version", parse)]

__all__ = ["FORMATS", "PARSERS", "DriverVersions", "Package", "detect", "parse"]
