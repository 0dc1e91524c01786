"""The kernel's hardware reports in a kernel log: PCIe AER / DPC / hot-plug, machine checks
(MCE, APEI, EDAC), NVSwitch SXids (`preflight.parsers.kernel_hw`)."""

from __future__ import annotations

import pytest

from preflight.framing import Line
from preflight.parsers import kernel_hw as kh
from preflight.parsers.kernel_hw import HwReader


def read(*msgs: str, consumed: bool | None = True) -> HwReader:
    """The reader after `msgs`; each message must be read as a report (`consumed=False`: none may be;
    None: not checked, for a sequence that mixes both)."""
    r = HwReader()
    for i, m in enumerate(msgs, 1):
        got = r.read(m, Line(m, i, m))
        assert consumed is None or got is consumed, m
    return r


def kinds(r: HwReader) -> list[tuple[str, str]]:
    return [(f.kind, f.pci) for f in r.faults]


# ----------------------------------------------------------------------------- AER


@pytest.mark.parametrize("sev, kind", [
    ("Uncorrected (Fatal)", "pcie_fatal"),
    ("Uncorrectable (Fatal)", "pcie_fatal"),
    ("Uncorrected (Non-Fatal)", "pcie_nonfatal"),
    ("Uncorrectable (Non-Fatal)", "pcie_nonfatal"),
    ("Corrected", "pcie_corrected"),
    ("Correctable", "pcie_corrected"),
])
def test_bus_error_severity_in_every_kernel_wording(sev: str, kind: str) -> None:
    r = read(f"nvidia 0000:01:00.0: PCIe Bus Error: severity={sev}, type=Transaction Layer, (Requester ID)")
    assert kinds(r) == [(kind, "0000:01:00")]
    assert r.faults[0].device == "nvidia" and r.faults[0].line.n == 1


def test_port_report_and_the_device_report_are_one_fault_with_error_names() -> None:
    r = read("pcieport 0000:00:01.1: AER: Uncorrected (Fatal) error received: 0000:01:00.0",
             "nvidia 0000:01:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Requester ID)",
             "nvidia 0000:01:00.0:   device [10de:2330] error status/mask=00104000/00100000",
             "nvidia 0000:01:00.0:    [14] CmpltTO                (First)", consumed=None)
    assert kinds(r) == [("pcie_fatal", "0000:01:00")]
    f = r.faults[0]
    assert (f.device, f.vendor, f.detail, f.line.n) == ("nvidia", "10de:2330", "CmpltTO", 2)
    assert r.by_port["0000:00:01"] is f and not r.pending


def test_a_port_report_of_another_severity_is_kept_apart() -> None:
    r = read("pcieport 0000:00:01.1: AER: Uncorrected (Non-Fatal) error received: 0000:01:00.0",
             "nvidia 0000:01:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Requester ID)")
    assert kinds(r) == [("pcie_nonfatal", "0000:01:00"), ("pcie_fatal", "0000:01:00")]
    assert r.faults[0].device == "" and r.faults[1].device == "nvidia"


def test_port_report_alone_newer_wording_and_old_id_form() -> None:
    r = read("pcieport 0000:80:03.1: AER: Multiple Uncorrectable (Fatal) error message received from 0000:81:00.0")
    assert kinds(r) == [("pcie_fatal", "0000:81:00")]
    r = read("pcieport 0000:00:03.0: AER: Uncorrected (Non-Fatal) error received: id=0018")
    assert kinds(r) == [("pcie_nonfatal", "0000:00:03")]  # a bare id: the port itself


def test_corrected_port_reports_wait_for_the_device_line() -> None:
    r = read("pcieport 0000:00:01.1: AER: Corrected error received: 0000:01:00.0")
    assert r.faults == []
    r = read("pcieport 0000:00:01.1: AER: Corrected error received: 0000:01:00.0",
             "nvidia 0000:01:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
             "nvidia 0000:01:00.0:   device [10de:249c] error status/mask=000000c1/00000040")  # 0x40 masked
    assert kinds(r) == [("pcie_corrected", "0000:01:00")]
    assert r.faults[0].detail == "RxErr, BadDLLP" and r.faults[0].vendor == "10de:249c"  # masked bits dropped


def test_masked_status_bits_are_dropped_with_the_mask_read_in_hex() -> None:
    r = read("nvidia 0000:01:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
             "nvidia 0000:01:00.0:   device [10de:249c] error status/mask=00000011/00000011")
    assert r.faults[0].detail == ""


def test_status_line_without_a_report_or_of_another_device_is_consumed() -> None:
    r = read("nvidia 0000:01:00.0:   device [10de:2330] error status/mask=00004000/00000000")
    assert r.faults == []
    r = read("nvidia 0000:01:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
             "mlx5_core 0000:17:00.0:   device [15b3:1021] error status/mask=00000001/00000000")
    assert r.faults[0].vendor == "" and r.faults[0].detail == ""


def test_aer_names() -> None:
    assert kh.aer_names(0x00004000, kh.AER_UNCORRECTABLE) == ["CmpltTO"]
    assert kh.aer_names(0x00100001, kh.AER_UNCORRECTABLE) == ["Undefined", "UnsupReq"]
    assert kh.aer_names(0x00001001, kh.AER_CORRECTABLE) == ["RxErr", "Timeout"]
    assert kh.aer_names(0x2, kh.AER_CORRECTABLE) == ["bit1"]
    assert kh.aer_names(0x80000000, kh.AER_CORRECTABLE) == ["bit31"]
    assert kh.aer_names(0, kh.AER_CORRECTABLE) == []
    assert kh.aer_names(1 << 32, kh.AER_CORRECTABLE) == []  # the register has 32 bits


def test_recovery_failed_once_per_error_and_named_by_the_device_behind_the_port() -> None:
    r = read("pcieport 0000:00:01.1: AER: Uncorrected (Fatal) error received: 0000:01:00.0",
             "nvidia 0000:01:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Requester ID)",
             "nvidia 0000:01:00.0: AER: can't recover (no error_detected callback)",
             "pcieport 0000:00:01.1: AER: device recovery failed")
    assert kinds(r) == [("pcie_fatal", "0000:01:00"), ("pcie_recovery_failed", "0000:01:00")]
    assert r.faults[1].device == "nvidia" and r.faults[1].line.n == 3
    assert r.read("pcieport 0000:00:01.1: AER: Uncorrected (Fatal) error received: 0000:01:00.0", Line("", 5, ""))
    assert r.read("pcieport 0000:00:01.1: AER: Device recovery failed", Line("", 6, ""))
    assert [f.kind for f in r.faults].count("pcie_recovery_failed") == 2  # a second error, a second failure


def test_recovery_failed_without_a_known_cause_names_the_port() -> None:
    r = read("pcieport 0000:00:01.1: AER: device recovery failed")
    assert kinds(r) == [("pcie_recovery_failed", "0000:00:01")] and r.faults[0].device == "pcieport"
    r = read("nvidia 0000:3b:00.0: can't recover (no error_detected callback)")
    assert kinds(r) == [("pcie_recovery_failed", "0000:3b:00")] and r.faults[0].device == "nvidia"


def test_recovery_successful_resolves_the_ports_error_once() -> None:
    r = read("pcieport 0000:16:02.0: AER: Uncorrected (Non-Fatal) error received: 0000:17:00.0",
             "mlx5_core 0000:17:00.0: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, "
             "(Requester ID)",
             "pcieport 0000:16:02.0: AER: Device recovery successful")
    assert r.faults[0].resolved is True and "0000:16:02" not in r.by_port
    r = read("pcieport 0000:16:02.0: AER: device recovery successful")
    assert r.faults == []


def test_dpc_containment_is_fatal_on_the_port() -> None:
    r = read("pcieport 0000:80:01.1: DPC: containment event, status:0x1f01 source:0x0000",
             "pcieport 0000:80:01.1: DPC: unmasked uncorrectable error detected")
    assert kinds(r) == [("pcie_fatal", "0000:80:01")]
    assert r.faults[0].detail == "DPC containment" and r.by_port["0000:80:01"] is r.faults[0]
    assert len(r.faults) == 1


def test_hotplug_link_down_once_until_it_comes_back() -> None:
    r = read("pcieport 0000:00:03.1: pciehp: Slot(3): Link Down",
             "pcieport 0000:00:03.1: pciehp: Slot(3): Card not present",
             "pcieport 0000:00:03.1: pciehp: Slot(3): Link Down")
    assert kinds(r) == [("pcie_link_down", "0000:00:03")]
    assert r.faults[0].detail == "slot 3" and r.faults[0].resolved is False
    assert r.read("pcieport 0000:00:03.1: pciehp: Slot(3): Card present", Line("", 4, ""))
    assert r.faults[0].resolved is True
    assert r.read("pcieport 0000:00:03.1: pciehp: Slot(3): Link Down", Line("", 5, ""))
    assert len(r.faults) == 2 and r.faults[1].resolved is False


def test_hotplug_link_up_and_old_port_service_prefix() -> None:
    r = read("pciehp 0000:00:1c.0:pcie004: Slot(0-3): Link Down", "pciehp 0000:00:1c.0:pcie004: Slot(0-3): Link Up")
    assert kinds(r) == [("pcie_link_down", "0000:00:1c")] and r.faults[0].resolved
    assert r.faults[0].detail == "slot 0-3"


def test_card_not_present_alone_or_up_without_down_is_no_fault() -> None:
    assert read("pcieport 0000:00:1c.0: pciehp: Slot(1): Card not present").faults == []
    assert read("pcieport 0000:00:1c.0: pciehp: Slot(1): Link Up").faults == []


def test_a_port_link_down_without_a_slot_and_a_nic_link_down_that_is_not_pcie() -> None:
    r = read("pcieport 0000:00:01.0: link down")
    assert kinds(r) == [("pcie_link_down", "0000:00:01")] and r.faults[0].detail == ""
    r = read("mlx5_core 0000:17:00.0 ib0: Link down", "mlx5_core 0000:17:00.0: Port module event: module 0, Cable plugged",
             "nvme 0000:5e:00.0: link down", consumed=False)
    assert r.faults == []
    assert read("pcieport 0000:00:01.0: AER: enabled with IRQ 30", consumed=False).faults == []


# ----------------------------------------------------------------------------- machine checks


@pytest.mark.parametrize("msg, kind, detail", [
    ("mce: [Hardware Error]: CPU 34: Machine Check: 0 Bank 13: cc00008000010090", "mce_corrected",
     "bank 13 status cc00008000010090"),
    ("mce: [Hardware Error]: CPU 5: Machine Check Exception: 5 Bank 7: be00000000800090", "mce_uncorrected",
     "bank 7 status be00000000800090"),
    ("mce: [Hardware Error]: CPU 2: Machine Check: 0 Bank 1: a000000000000000", "mce_uncorrected",
     "bank 1 status a000000000000000"),
    ("mce: [Hardware Error]: CPU 2: Machine Check: 0 Bank 1: 8000000000000000", "mce_corrected",
     "bank 1 status 8000000000000000"),
    ("EDAC MC0: 1 CE memory read error on CPU_SrcID#0_MC#0_Chan#1_DIMM#0 (channel:1 slot:0)", "mce_corrected",
     "EDAC 1 CE"),
    ("EDAC skx MC2: 3 UE memory read error on CPU_SrcID#1_MC#0_Chan#0_DIMM#0", "mce_uncorrected", "EDAC 3 UE"),
    ("mce: [Hardware Error]: Machine check events logged", "mce_corrected", ""),
    ("mce: [Hardware Error]: Machine check from unknown source", "mce_uncorrected", ""),
    ("[Hardware Error]: Corrected error, no action required.", "mce_corrected", ""),
    ("[Hardware Error]: Deferred error, no action required.", "mce_corrected", ""),
    ("mce: [Hardware Error]: Machine check: Processor context corrupt", "mce_uncorrected", ""),
    ("Kernel panic - not syncing: Fatal machine check", "mce_uncorrected", ""),
    ("Kernel panic - not syncing: Fatal local machine check", "mce_uncorrected", ""),
    ("mce: Uncorrected hardware memory error in user-access at 3ad5c9b400", "mce_uncorrected", ""),
    ("Memory failure: 0x3ad5c9b: recovery action for dirty LRU page: Recovered", "mce_uncorrected", ""),
    ("[Hardware Error]: Uncorrected, software restartable error.", "mce_uncorrected", ""),
    ("[Hardware Error]: System Fatal error.", "mce_uncorrected", ""),
])
def test_machine_checks(msg: str, kind: str, detail: str) -> None:
    r = read(msg)
    assert [(f.kind, f.pci, f.detail) for f in r.faults] == [(kind, "", detail)]


def test_mce_lines_that_report_nothing() -> None:
    assert read("mce: [Hardware Error]: Run the above through 'mcelog --ascii'", consumed=False).faults == []
    assert read("mce: CPU12: Core temperature above threshold, cpu clock throttled (total events = 1)",
                consumed=False).faults == []
    assert read("mce: [Hardware Error]: TSC 0 ADDR 3fa4c9b480 MISC 200400c008002086", consumed=False).faults == []


# ----------------------------------------------------------------------------- APEI / GHES


def test_ghes_pcie_section_names_the_device_and_vendor() -> None:
    r = read("{1}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 1",
             "{1}[Hardware Error]: event severity: fatal",
             "{1}[Hardware Error]:  Error 0, type: fatal",
             "{1}[Hardware Error]:   section_type: PCIe error",
             "{1}[Hardware Error]:   device_id: 0000:17:00.0",
             "{1}[Hardware Error]:   vendor_id: 0x10DE, device_id: 0x2330", consumed=None)
    assert kinds(r) == [("pcie_fatal", "0000:17:00")]
    assert (r.faults[0].vendor, r.faults[0].detail, r.faults[0].line.n) == ("10de", "APEI fatal", 2)


@pytest.mark.parametrize("sev, plain, pcie", [
    ("fatal", "mce_uncorrected", "pcie_fatal"),
    ("recoverable", "mce_uncorrected", "pcie_nonfatal"),
    ("corrected", "mce_corrected", "pcie_corrected"),
])
def test_ghes_severities(sev: str, plain: str, pcie: str) -> None:
    assert [f.kind for f in read(f"{{2}}[Hardware Error]: event severity: {sev}").faults] == [plain]
    r = read(f"{{2}}[Hardware Error]: event severity: {sev}", "{2}[Hardware Error]:   section_type: PCIe error")
    assert [f.kind for f in r.faults] == [pcie]


def test_ghes_info_records_and_other_records_lines() -> None:
    r = read("{3}[Hardware Error]: event severity: info", "{3}[Hardware Error]:   section_type: PCIe error",
             consumed=None)
    assert r.faults == [] and r.ghes is None
    r = read("{1}[Hardware Error]: event severity: fatal", "{3}[Hardware Error]: event severity: info")
    assert r.ghes is None and len(r.faults) == 1
    r = read("{4}[Hardware Error]: event severity: fatal", "{5}[Hardware Error]:   section_type: PCIe error",
             "{5}[Hardware Error]:   device_id: 0000:17:00.0", consumed=None)
    assert kinds(r) == [("mce_uncorrected", "")]  # another record's section says nothing about this one
    r = read("[Hardware Error]: event severity: corrected", "[Hardware Error]:   section_type: PCIe error",
             "[Hardware Error]:   port_type: 0, PCIe end point", consumed=None)
    assert kinds(r) == [("pcie_corrected", "")] and r.ghes_rec == ""
    assert read("{1}[Hardware Error]:   device_id: 0000:17:00.0", consumed=False).faults == []
    r = read("{6}[Hardware Error]: event severity: fatal")
    assert r.read("{6}[Hardware Error]:   port_type: 0, PCIe end point", Line("", 2, "")) is False
    assert kinds(r) == [("mce_uncorrected", "")]


def test_ghes_lines_of_the_record_are_read() -> None:
    r = read("{1}[Hardware Error]: event severity: recoverable", "{1}[Hardware Error]:   section_type: PCIe error",
             "{1}[Hardware Error]:   device_id: 0000:3b:00.0", "{1}[Hardware Error]:   vendor_id: 0x15b3, device_id: 0x1021")
    assert kinds(r) == [("pcie_nonfatal", "0000:3b:00")] and r.faults[0].vendor == "15b3"
    r2 = HwReader()
    assert r2.read("{1}[Hardware Error]:  Error 0, type: fatal", Line("", 1, "")) is False


# ----------------------------------------------------------------------------- SXids


def test_sxid_fatal_with_its_detail_lines() -> None:
    r = read("nvidia-nvswitch3: SXid (PCI:0000:86:00.0): 20034, Fatal, Link 33 LTSSM Fault Up",
             "nvidia-nvswitch3: SXid (PCI:0000:86:00.0): 20034, Severity 5 Engine instance 33 Sub-engine instance 00",
             "nvidia-nvswitch3: SXid (PCI:0000:86:00.0): 20034, Data {0x00000000, 0x00000000}")
    assert kinds(r) == [("sxid_fatal", "0000:86:00")]
    f = r.faults[0]
    assert (f.number, f.device, f.detail) == (20034, "nvswitch3", "Link 33 LTSSM Fault Up")


@pytest.mark.parametrize("text, kind, detail", [
    ("12028, Non-fatal, Link 32 egress non-posted PRIV error (First)", "sxid_nonfatal",
     "Link 32 egress non-posted PRIV error (First)"),
    ("12028, Nonfatal, Link 32 x", "sxid_nonfatal", "Link 32 x"),
    ("22013, Correctable, Link 12 minion link DLREQ interrupt", "sxid_correctable", "Link 12 minion link DLREQ interrupt"),
    ("27005, Module 5 faulty", "sxid_other", "Module 5 faulty"),
])
def test_sxid_words(text: str, kind: str, detail: str) -> None:
    r = read(f"SXid (PCI:0000:05:00.0): {text}")  # the nvswitch prefix taken as a host label
    assert [(f.kind, f.detail, f.device) for f in r.faults] == [(kind, detail, "")]


def test_sxid_not_in_the_layout_is_not_read() -> None:
    r = HwReader()
    assert r.read("nvidia-nvswitch0: SXid errors were seen", Line("", 1, "")) is False
    assert r.read("nvidia-nvswitch0: SXid (PCI:0000:05:00.0) cut here", Line("", 2, "")) is False
    assert r.faults == []


def test_every_needle_selects_its_lines_from_a_whole_log() -> None:
    from preflight.framing import frame
    from preflight.parsers import kernel_log

    lines = {
        "PCIe Bus Error": "nvidia 0000:01:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
        "Uncorrect": "pcieport 0000:00:01.1: AER: Uncorrected (Fatal) error received: 0000:01:00.0",
        "ecover": "pcieport 0000:00:01.1: AER: device recovery failed",
        "status/mask": "nvidia 0000:01:00.0:   device [10de:2330] error status/mask=00004000/00000000",
        "DPC:": "pcieport 0000:80:01.1: DPC: containment event, status:0x1f01 source:0x0000",
        "Slot(": "pcieport 0000:00:1c.0: pciehp: Slot(2): Card present",
        "Link Down": "pcieport 0000:00:01.0: Link Down",
        "link down": "pciehp 0000:00:1c.0:pcie004: link down",
        "Hardware Error": "{1}[Hardware Error]: event severity: fatal",
        "achine check": "Kernel panic - not syncing: Fatal machine check",
        "EDAC": "EDAC MC0: 1 CE memory read error on DIMM_A1",
        "Memory failure": "Memory failure: 0x3ad5c9b: recovery action for dirty LRU page: Recovered",
    }
    assert set(lines) == set(kh.NEEDLES)
    corrected = "[ 1.0] pcieport 0000:00:01.1: AER: Corrected error received: 0000:01:00.0\n"
    assert frame(corrected).docs[0].scan(kh.NEEDLES) == []  # the device's own line is the report
    for needle, line in lines.items():
        text = f"[ 0.5] Linux version 6.8.0\n[ 0.6] Command line: ro quiet\n[ 1.0] {line}\n"
        hits = frame(text).docs[0].scan(kh.NEEDLES)
        assert [h.raw for h in hits] == [f"[ 1.0] {line}"], needle
    sxid = "nvidia-nvswitch3: SXid (PCI:0000:86:00.0): 20034, Fatal, Link 33 LTSSM Fault Up"  # a driver needle's line
    log = kernel_log.parse(frame("[ 1.0] " + lines["link down"] + "\n[ 2.0] " + sxid + "\n").docs[0])
    assert [f.kind for f in log.hardware] == ["pcie_link_down", "sxid_fatal"]


def test_error_name_tables() -> None:
    assert kh.aer_names(0xFFFFFFFF, kh.AER_UNCORRECTABLE) == [
        "Undefined", "bit1", "bit2", "bit3", "DLP", "SDES", "bit6", "bit7", "bit8", "bit9", "bit10", "bit11", "TLP",
        "FCP", "CmpltTO", "CmpltAbrt", "UnxCmplt", "RxOF", "MalfTLP", "ECRC", "UnsupReq", "ACSViol", "UncorrIntErr",
        "BlockedTLP", "AtomicOpBlocked", "TLPBlockedErr", "PoisonTLPBlocked", "bit27", "bit28", "bit29", "bit30",
        "bit31"]
    assert kh.aer_names(0xFFFF, kh.AER_CORRECTABLE) == [
        "RxErr", "bit1", "bit2", "bit3", "bit4", "bit5", "BadTLP", "BadDLLP", "Rollover", "bit9", "bit10", "bit11",
        "Timeout", "NonFatalErr", "CorrIntErr", "HeaderOF"]


def test_a_line_of_nothing_known() -> None:
    r = HwReader()
    assert r.read("usb 1-1: new high-speed USB device number 2 using xhci_hcd", Line("", 1, "")) is False
    assert r.read("nvidia 0000:01:00.0: enabling device (0000 -> 0003)", Line("", 1, "")) is False
    assert r.faults == []
