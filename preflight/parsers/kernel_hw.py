"""The Linux kernel's own hardware reports in a kernel log, as facts: PCIe AER errors, DPC
containment, PCIe hot-plug link changes, machine checks (MCE, APEI/GHES, EDAC, memory failure),
and the NVSwitch driver's SXid reports.

Every message here is printed by the kernel or a driver, never by the NVIDIA GPU driver's
resource manager (that is `kernel_log`). Each report becomes a `KernelFault` with a kind
(`pcie_fatal`, `pcie_nonfatal`, `pcie_corrected`, `pcie_recovery_failed`, `pcie_link_down`,
`mce_uncorrected`, `mce_corrected`, `sxid_fatal`, ...), the PCI address it names and what the
line adds (error names, vendor, whether the kernel recovered the device or the link came back).

Sources of the message formats: Linux drivers/pci/pcie/aer.c (`aer_print_error`,
`aer_print_port_info`), drivers/pci/pcie/err.c (`pcie_do_recovery`, `report_error_detected`),
drivers/pci/pcie/dpc.c, drivers/pci/hotplug/pciehp_ctrl.c, arch/x86/kernel/cpu/mce/core.c
(`print_mce`, `mce_panic`), drivers/acpi/apei/ghes.c + drivers/firmware/efi/cper.c, drivers/edac,
mm/memory-failure.c; NVIDIA/open-gpu-kernel-modules src/common/nvswitch (NVSWITCH_PRINT_SXID).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from preflight import lazyre
from preflight.framing import Line
from preflight.parsers.base import pci_id

_PCI_FULL = r"(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
# `<driver> <domain:bus:dev.fn>: ` (dev_printk), `pciehp 0000:00:01.0:pcie004: ` (older port services)
_DEV = lazyre.compile(rf"(?:^|\s)(?P<drv>[\w.-]+) (?P<pci>{_PCI_FULL})(?::pcie\d+)?: ")
_SEVERITY = lazyre.compile(r"severity=(?P<sev>(?:Uncorrect(?:ed|able) \((?:Non-Fatal|Fatal)\))|Correct(?:ed|able))",
                       re.IGNORECASE)
_RECEIVED = lazyre.compile(r"(?:Multiple )?(?P<sev>Uncorrect(?:ed|able) \((?:Non-Fatal|Fatal)\)|Correct(?:ed|able)) "
                       r"error (?:message )?received(?: from|:)\s*(?:id=)?(?P<src>\S+)", re.IGNORECASE)
_STATUS = lazyre.compile(r"device \[(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})\] error status/mask="
                     r"(?P<status>[0-9a-fA-F]{8})/(?P<mask>[0-9a-fA-F]{8})")
_SLOT = lazyre.compile(r"Slot\((?P<slot>[^)]*)\): (?P<what>Link Down|Link Up|Card not present|Card present)",
                   re.IGNORECASE)
_MCE_BANK = lazyre.compile(r"Machine Check(?P<exc> Exception)?: ?(?P<mcg>[0-9a-fA-F]+) Bank (?P<bank>\d+): "
                       r"(?P<status>[0-9a-fA-F]{1,16})")
_GHES_SEV = lazyre.compile(r"(?P<rec>\{\d+\})?\[Hardware Error\]:\s+event severity: (?P<sev>\w+)")
_GHES_REC = lazyre.compile(r"(?P<rec>\{\d+\})\[Hardware Error\]:")
_GHES_DEV = lazyre.compile(rf"\[Hardware Error\]:\s+device_id: (?P<pci>{_PCI_FULL})")
_GHES_VENDOR = lazyre.compile(r"\[Hardware Error\]:\s+vendor_id: 0x(?P<vendor>[0-9a-fA-F]{4})")
_EDAC = lazyre.compile(r"EDAC \w*\s*MC\d+: (?P<n>\d+) (?P<kind>UE|CE)\b")
# the `nvidia-nvswitchN: ` prefix may be gone (read as a host label by a framing that peels `host: `)
_SXID = lazyre.compile(r"(?:nvidia-(?P<sw>nvswitch\d+): )?SXid \(PCI:(?P<pci>[^)]*)\): (?P<sxid>\d+), (?P<msg>.*)$")
_SXID_WORD = lazyre.compile(r"^(?P<word>Fatal|Non-fatal|Nonfatal|Correctable)\b,?\s*", re.IGNORECASE)
_SXID_DETAIL = lazyre.compile(r"^(?:Severity \d+ Engine instance|Data \{)")

# AER status register bits -> error names (drivers/pci/pcie/aer.c, aer_*_error_string)
AER_CORRECTABLE = {0: "RxErr", 6: "BadTLP", 7: "BadDLLP", 8: "Rollover", 12: "Timeout", 13: "NonFatalErr",
                   14: "CorrIntErr", 15: "HeaderOF"}
AER_UNCORRECTABLE = {0: "Undefined", 4: "DLP", 5: "SDES", 12: "TLP", 13: "FCP", 14: "CmpltTO", 15: "CmpltAbrt",
                     16: "UnxCmplt", 17: "RxOF", 18: "MalfTLP", 19: "ECRC", 20: "UnsupReq", 21: "ACSViol",
                     22: "UncorrIntErr", 23: "BlockedTLP", 24: "AtomicOpBlocked", 25: "TLPBlockedErr",
                     26: "PoisonTLPBlocked"}
MCI_STATUS_UC = 61  # IA32_MCi_STATUS bit 61: the error was not corrected (Intel SDM vol. 3B, 16.3.2.2)

# what a machine-check line holds somewhere (one cheap search before the machine-check patterns)
_MCE_HINT = lazyre.compile(r"achine [cC]heck|mce:|Hardware Error|EDAC|Memory failure")
# the port drivers whose "link down" is a PCIe link going away (not a network link)
PORT_DRIVERS = frozenset({"pcieport", "pciehp"})

# machine-check lines that say the error was not corrected, and those that say it was
_MCE_UNCORRECTED = lazyre.compile(r"Fatal (?:local )?machine check|Machine check: Processor context corrupt|"
                              r"Machine check from unknown source|Uncorrected hardware memory error|"
                              r"\[Hardware Error\]: Uncorrected, |\[Hardware Error\]: System Fatal error|"
                              r"Memory failure: 0x[0-9a-fA-F]+: recovery action", re.IGNORECASE)
_MCE_CORRECTED = lazyre.compile(r"Machine check events logged|\[Hardware Error\]: Corrected error|"
                            r"\[Hardware Error\]: Deferred error", re.IGNORECASE)


@dataclass
class KernelFault:
    """One fault report without an Xid number: a GPU fault the NVIDIA driver printed, or a PCIe,
    machine-check or NVSwitch report of the kernel."""

    kind: str
    pci: str
    line: Line
    action: str = ""
    detail: str = ""  # error names, SXid message, slot ...
    device: str = ""  # the driver that printed the line ("nvidia", "mlx5_core"), the NVSwitch ("nvswitch3")
    vendor: str = ""  # the PCI vendor:device ids the report gives ("10de:2330")
    gpu: int | None = None  # a GPU index the line names ("GPU6")
    number: int | None = None  # the SXid
    resolved: bool = False  # the kernel recovered the device / the link came back up


def aer_names(status: int, table: dict[int, str]) -> list[str]:
    """The error names of the bits set in an AER status register."""
    return [table.get(bit, f"bit{bit}") for bit in range(32) if status >> bit & 1]


def _severity_kind(word: str) -> str:
    w = word.lower()
    if "fatal" in w and "non" not in w:
        return "pcie_fatal"
    return "pcie_nonfatal" if w.startswith("uncorrect") else "pcie_corrected"


@dataclass
class HwReader:
    """Reads the kernel's hardware reports of one log, in order, into `faults`."""

    faults: list[KernelFault] = field(default_factory=list)
    by_port: dict[str, KernelFault] = field(default_factory=dict)  # port -> its last uncorrectable report
    pending: dict[str, KernelFault] = field(default_factory=dict)  # device -> a port's report of it, unconfirmed
    last_aer: dict[str, KernelFault] = field(default_factory=dict)  # device -> its last AER report
    slots: dict[str, KernelFault] = field(default_factory=dict)  # port -> its last link-down report
    failed: dict[str, KernelFault | None] = field(default_factory=dict)  # device -> the report it failed after
    ghes: KernelFault | None = None  # the APEI record being read
    ghes_rec: str = ""

    def read(self, msg: str, line: Line) -> bool:
        """True when the message was one of the kernel's hardware reports (read or not)."""
        if "SXid (" in msg:
            return self._sxid(msg, line)
        if "[Hardware Error]" in msg and self._ghes(msg, line):
            return True
        if _MCE_HINT.search(msg) and self._mce(msg, line):
            return True
        dm = _DEV.search(msg)
        if dm is None:
            return False
        return self._pcie(msg, line, dm.group("drv"), pci_id(dm.group("pci")))

    # -- PCIe ------------------------------------------------------------------------------

    def _pcie(self, msg: str, line: Line, drv: str, dev: str) -> bool:
        for handler in (self._bus_error, self._received, self._status, self._recovery, self._dpc, self._slot):
            if handler(msg, line, drv, dev):
                return True
        return False

    def _add(self, kind: str, pci: str, line: Line, device: str = "", detail: str = "") -> KernelFault:
        f = KernelFault(kind, pci, line, device=device, detail=detail)
        self.faults.append(f)
        return f

    def _bus_error(self, msg: str, line: Line, drv: str, dev: str) -> bool:
        sm = _SEVERITY.search(msg) if "PCIe Bus Error" in msg else None
        if sm is None:
            return False
        kind = _severity_kind(sm.group("sev"))
        prior = self.pending.pop(dev, None)
        if prior is not None and prior.kind == kind:
            prior.line, prior.device = line, drv  # the device's own report of what its port announced
            return True
        self.last_aer[dev] = self._add(kind, dev, line, device=drv)
        return True

    def _received(self, msg: str, line: Line, drv: str, dev: str) -> bool:
        rm = _RECEIVED.search(msg)
        if rm is None:
            return False
        kind = _severity_kind(rm.group("sev"))
        src = rm.group("src")
        source = pci_id(src) if re.fullmatch(_PCI_FULL, src) else dev
        if kind == "pcie_corrected":
            return True  # the device's own "PCIe Bus Error" line follows and is the report
        f = self._add(kind, source, line)
        self.by_port[dev] = self.pending[source] = self.last_aer[source] = f
        return True

    def _status(self, msg: str, line: Line, drv: str, dev: str) -> bool:
        stm = _STATUS.search(msg)
        if stm is None:
            return False
        f = self.last_aer.get(dev)
        if f is not None:
            table = AER_CORRECTABLE if f.kind == "pcie_corrected" else AER_UNCORRECTABLE
            status = int(stm.group("status"), 16) & ~int(stm.group("mask"), 16)
            f.detail = ", ".join(aer_names(status, table))
            f.vendor = f"{stm.group('vendor').lower()}:{stm.group('device').lower()}"
        return True

    def _recovery(self, msg: str, line: Line, drv: str, dev: str) -> bool:
        low = msg.lower()
        if "can't recover" in low or "device recovery failed" in low:
            cause = self.by_port.get(dev)
            pci = cause.pci if cause is not None else dev
            report = self.last_aer.get(pci)
            if pci not in self.failed or self.failed[pci] is not report:  # the device's and its port's line: one
                self._add("pcie_recovery_failed", pci, line, device=drv if cause is None else "")
                self.failed[pci] = report
            return True
        if "device recovery successful" in low:
            cause = self.by_port.pop(dev, None)
            if cause is not None:
                cause.resolved = True
            return True
        return False

    def _dpc(self, msg: str, line: Line, drv: str, dev: str) -> bool:
        if "DPC: containment event" in msg:
            f = self._add("pcie_fatal", dev, line, device=drv, detail="DPC containment")
            self.by_port[dev] = f
            return True
        return "DPC: " in msg  # the details of a containment already read

    def _slot(self, msg: str, line: Line, drv: str, dev: str) -> bool:
        sm = _SLOT.search(msg)
        # a link that goes down says so first; "Card not present" alone is also printed for an empty slot
        down = sm.group("what").lower() == "link down" if sm else "link down" in msg.lower()
        if sm is None and (drv not in PORT_DRIVERS or not down):
            return False
        slot = f"slot {sm.group('slot')}" if sm else ""
        what = sm.group("what").lower() if sm else ""
        if down:
            prior = self.slots.get(dev)
            if prior is None or prior.resolved:
                self.slots[dev] = self._add("pcie_link_down", dev, line, device=drv, detail=slot)
        elif dev in self.slots and what in ("link up", "card present"):
            self.slots[dev].resolved = True
        return True

    # -- machine checks --------------------------------------------------------------------

    def _mce(self, msg: str, line: Line) -> bool:
        bm = _MCE_BANK.search(msg)
        if bm is not None:
            uncorrected = bool(bm.group("exc")) or bool(int(bm.group("status"), 16) >> MCI_STATUS_UC & 1)
            kind = "mce_uncorrected" if uncorrected else "mce_corrected"
            self._add(kind, "", line, detail=f"bank {bm.group('bank')} status {bm.group('status')}")
            return True
        em = _EDAC.search(msg)
        if em is not None:
            kind = "mce_uncorrected" if em.group("kind") == "UE" else "mce_corrected"
            self._add(kind, "", line, detail=f"EDAC {em.group('n')} {em.group('kind')}")
            return True
        if _MCE_UNCORRECTED.search(msg):
            self._add("mce_uncorrected", "", line)
            return True
        if _MCE_CORRECTED.search(msg):
            self._add("mce_corrected", "", line)
            return True
        return False

    def _ghes(self, msg: str, line: Line) -> bool:
        """APEI (firmware-first) records: `event severity:` opens one; a PCIe section names the device."""
        sm = _GHES_SEV.search(msg)
        if sm is not None:
            sev = sm.group("sev").lower()
            if sev not in ("fatal", "recoverable", "corrected"):
                self.ghes = None
                return True
            kind = "mce_corrected" if sev == "corrected" else "mce_uncorrected"
            self.ghes, self.ghes_rec = self._add(kind, "", line, detail=f"APEI {sev}"), sm.group("rec") or ""
            return True
        rec = _GHES_REC.search(msg)
        g = self.ghes
        if g is None or (rec is not None and rec.group("rec") != self.ghes_rec):
            return False
        if "section_type: PCIe error" in msg:
            g.kind = {"APEI fatal": "pcie_fatal", "APEI recoverable": "pcie_nonfatal"}.get(g.detail, "pcie_corrected")
            return True
        dm = _GHES_DEV.search(msg)
        if dm is not None:
            g.pci = pci_id(dm.group("pci"))
            return True
        vm = _GHES_VENDOR.search(msg)
        if vm is not None:
            g.vendor = vm.group("vendor").lower()
        return vm is not None

    # -- NVSwitch --------------------------------------------------------------------------

    def _sxid(self, msg: str, line: Line) -> bool:
        m = _SXID.search(msg)
        if m is None:
            return False
        text = m.group("msg").strip()
        if _SXID_DETAIL.match(text):
            return True  # the detail lines of a report already read
        wm = _SXID_WORD.match(text)
        word = wm.group("word").lower().replace("-", "") if wm else ""
        kind = {"fatal": "sxid_fatal", "nonfatal": "sxid_nonfatal", "correctable": "sxid_correctable"}.get(word,
                                                                                                       "sxid_other")
        detail = text[wm.end():] if wm else text
        f = self._add(kind, pci_id(m.group("pci")), line, device=m.group("sw") or "", detail=detail)
        f.number = int(m.group("sxid"))
        return True


# what a kernel log line must hold to be read here (substring needles for `Doc.scan`, each one a
# scan of the whole log: as few as cover every report). SXid lines hold `Xid`, a needle of the
# driver's lines.
# A port's announcement of a corrected error (thousands in a noisy log) holds none of them: the
# device's own `PCIe Bus Error` line is the report read.
NEEDLES = ("PCIe Bus Error", "Uncorrect", "ecover", "status/mask", "DPC:", "Slot(", "Link Down", "link down",
           "Hardware Error", "achine check", "EDAC", "Memory failure")

__all__ = ["AER_CORRECTABLE", "AER_UNCORRECTABLE", "HwReader", "KernelFault", "NEEDLES", "PORT_DRIVERS",
           "aer_names"]
