"""Which NVIDIA driver is loaded and which is installed, as facts.

- `/proc/driver/nvidia/version`: `NVRM version: NVIDIA UNIX x86_64 Kernel Module  520.56.06  <date>`
  (also `NVIDIA UNIX Open Kernel Module for x86_64`, aarch64 and ppc64le builds): the loaded kernel
  module;
- `modinfo -F version nvidia` (a bare version under its prompt) or `modinfo nvidia` (`version:`):
  the module on disk, which the next boot loads;
- the installed user-space packages: `dpkg -l` rows (`ii  nvidia-utils-525  525.85.12-0ubuntu1 ...`;
  a package removed with its configuration left, `rc`, is not installed), `apt list --installed`
  (`nvidia-driver-570/jammy,now 570.124.06-0ubuntu1 amd64 [installed]`), `rpm -qa` names
  (`nvidia-driver-cuda-525.85.12-1.el8.x86_64`) and `dnf`/`yum list installed` rows
  (`nvidia-driver.x86_64  3:535.129.03-1.el8  @cuda-rhel8-x86_64`).
Packages whose version is not the driver's (container toolkit, CUDA toolkit, settings, firmware
bundles of another numbering) are left out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from preflight import lazyre
from preflight.framing import Doc
from preflight.parsers.base import Format, ParserSpec

_VERSION = r"\d{3}\.\d{1,3}(?:\.\d{1,3})?"
_NAME = r"(?:lib)?nvidia[\w.+:-]*|cuda-drivers[\w.:-]*|kmod-nvidia[\w.:-]*"
_PROC = lazyre.compile(rf"NVRM version:.*?Kernel Module(?: for \S+)?\s+({_VERSION})\b")
_MODINFO = lazyre.compile(rf"^version:\s+({_VERSION})\s*$")
_BARE = lazyre.compile(rf"^({_VERSION})$")
# dpkg -l: the first letter is the wanted state, the second the current one (i installed, c only
# configuration files left, n not installed)
_DPKG = lazyre.compile(rf"^[uihrp](?P<state>[a-zA-Z])[a-zA-Z ]?\s+(?P<name>{_NAME})\s+(?:\d+:)?(?P<v>{_VERSION})\S*\s")
_APT = lazyre.compile(rf"^(?P<name>{_NAME})/\S+\s+(?:\d+:)?(?P<v>{_VERSION})\S*\s+\S+\s+\[installed")
_RPM = lazyre.compile(rf"^(?P<name>(?:lib)?nvidia[\w.+-]*?|cuda-drivers[\w-]*?|kmod-nvidia[\w.-]*?)-(?:\d+:)?"
                  rf"(?P<v>{_VERSION})-\S+$")
_DNF = lazyre.compile(rf"^(?P<name>{_NAME})\.(?:x86_64|aarch64|ppc64le|noarch|i686)\s+(?:\d+:)?(?P<v>{_VERSION})-\S+")
# packages whose version is not the driver's (toolkits, container runtime, firmware)
_NOT_DRIVER = lazyre.compile(r"container|docker|cuda-toolkit|nvidia-cuda|persistenced-doc|firmware-\d|modprobe|"
                         r"nvidia-settings|nvidia-prime|dkms-tools|fabricmanager-dev", re.I)
# dpkg current states of a package whose files are on disk (installed, unpacked, half-configured,
# half-installed, awaiting or pending triggers); n (not installed) and c (configuration only) are not
_INSTALLED = "iUFHWt"  # pragma: no mutate (a letter added to the set is no dpkg state)
_HEAD = 200  # pragma: no mutate (lines a detector reads: the listing's first rows)
_PRIORITY = 50  # pragma: no mutate (the only format of the driver-version probe)


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


def package(line: str) -> Package | None:
    """An installed driver package in a dpkg, apt, rpm or dnf/yum listing row (None for anything else)."""
    m = _DPKG.match(line)
    if m and m.group("state") not in _INSTALLED:
        return None
    m = m or _APT.match(line) or _RPM.match(line) or _DNF.match(line)
    if m is None or _NOT_DRIVER.search(m.group("name")):
        return None
    return Package(m.group("name"), m.group("v"), line)


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
        p = package(t)
        if p is not None:
            out.packages.append(p)
    return out


def detect(doc: Doc) -> bool:
    head = [ln.text.strip() for ln in doc.head(_HEAD)]
    if any(_PROC.search(t) for t in head):
        return True
    cmd = doc.command or ""
    if "modinfo" in cmd and "nvidia" in cmd:
        return any(_MODINFO.match(t) or _BARE.match(t) for t in head)
    if re.search(r"\b(dpkg|rpm|apt|yum|dnf)\b", cmd) or any(t.startswith("||/ Name") for t in head):
        return any(package(t) for t in head)
    return False


FORMATS = [Format("driver-version", detect=detect, priority=_PRIORITY,
                  description="/proc/driver/nvidia/version, modinfo nvidia, dpkg -l / apt list / rpm -qa / dnf list "
                              "nvidia packages")]
PARSERS = [ParserSpec("driver-version", parse)]

__all__ = ["FORMATS", "PARSERS", "DriverVersions", "Package", "detect", "package", "parse"]
