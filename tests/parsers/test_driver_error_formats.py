"""Every error-level format the NVIDIA driver can print to the kernel log (extracted from the
open kernel modules' source by benchmarks/extract_driver_errors.py into
tests/fixtures/nvidia-driver/error-formats.txt), filled with plausible values, in three framings
(raw dmesg, journal, pasted after a prompt). Each line is read: by a rule of the kernel-log
parser, or kept as an unread error; gpu.xid is never PASS and nothing is "not recognised"."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from preflight import registry
from preflight.analyze import analyze
from preflight.framing import Doc
from preflight.model import Result, Status
from preflight.parsers import kernel_log

ROOT = Path(__file__).resolve().parents[2]
FORMATS_FILE = ROOT / "tests" / "fixtures" / "nvidia-driver" / "error-formats.txt"
# formats printed at NV_DBG_ERRORS that say nothing is wrong (read as informational by design)
INFORMATIONAL = ("NVRM: Persistence mode is deprecated",)


def _rows() -> list[tuple[str, str, str, str]]:
    rows = []
    for ln in FORMATS_FILE.read_text(encoding="utf-8").splitlines():
        if ln.startswith("#") or not ln.strip():
            continue
        _tag, where, macro, _level, fmt = ln.split("\t", 4)
        rows.append((where, macro, _level, fmt))
    return rows


ROWS = _rows()
# the formats that print a line of the driver's own (`NVRM...`): the others are continuations
# (KERN_CONT) or lines of sub-components with no prefix of their own
# (a banner rule, `NVRM: *****`, frames a dump whose other lines are the errors: it says nothing alone)
_RULE = re.compile(r"^NVRM: [*=-]+(?:\\n)?$")
NVRM_ROWS = [r for r in ROWS if r[3].startswith("NVRM") and not r[3].startswith(INFORMATIONAL)
             and not _RULE.match(r[3])]

_SPEC = re.compile(r"%(?P<flags>[-+ #0]*)(?P<width>\*|\d+)?(?:\.(?:\*|\d+))?(?:hh|h|ll|l|L|q|j|z|t|I64)?"
                   r"(?P<conv>[diouxXeEfgGcspn%])")
_FILL = {"d": "3", "i": "3", "u": "7", "o": "17", "x": "1f", "X": "1F", "e": "1.5e+00", "E": "1.5E+00", "f": "1.5",
         "g": "1.5", "G": "1.5", "c": "x", "s": "word", "p": "00000000deadbeef", "n": "", "%": "%"}
_ESC = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "'": "'", "r": "", "0": ""}


def fill(fmt: str) -> list[str]:
    """A C format -> the kernel-log lines it prints with plausible values."""
    text = re.sub(r"\\(.)", lambda m: _ESC.get(m.group(1), m.group(1)), fmt)
    text = _SPEC.sub(lambda m: _FILL[m.group("conv")], text)
    return [ln for ln in text.split("\n") if ln.strip()]


def _dmesg(lines: list[str]) -> list[str]:
    return [f"[  123.{456789 + i:06d}] {ln}" for i, ln in enumerate(lines)]


def _journal(lines: list[str]) -> list[str]:
    return [f"Nov 25 10:11:{12 + i % 40:02d} gpu017 kernel: {ln}" for i, ln in enumerate(lines)]


def _prompt(lines: list[str]) -> list[str]:
    return ["[root@gpu017 ~]# dmesg", *_dmesg(lines), "[root@gpu017 ~]# "]


FRAMINGS = {"dmesg": _dmesg, "journal": _journal, "prompt": _prompt}
SEPARATOR = "usb 1-1: new high-speed USB device number 2 using xhci_hcd"  # a kernel line of no driver


def _grade(text: str) -> list[Result]:
    return analyze(registry.load(), [Path("-")], profile_name="auto", stdin=io.BytesIO(text.encode()))


def _read_lines(log: kernel_log.KernelLog) -> set[str]:
    """The messages a rule read or kept as unread errors."""
    lines = [ev.line for ev in log.events] + [f.line for f in log.faults] + [d.line for d in log.driver_faults]
    lines += log.unparsed + log.unread + [ln for notes in log.reset_notes.values() for ln in notes]
    return {ln.text.strip() for ln in lines}


def test_the_extraction_is_whole() -> None:
    # 595.45.04: 3,411 formats, 3,366 of them with the driver's own NVRM prefix
    assert len(ROWS) >= 3000 and len(NVRM_ROWS) >= 3000
    macros = {r[1] for r in ROWS}
    assert {"NV_PRINTF", "NV_PRINTF_COND", "nv_printf", "NV_DEV_PRINTF", "NV_ERROR_LOG"} <= macros
    assert any("kfspSendBootCommands_GH100: FSP boot cmds failed. RM cannot boot." in r[3] for r in ROWS)


def test_fill_handles_widths_flags_and_escapes() -> None:
    assert fill(r"NVRM: %s: a=%08x b=%-4d c=%llx d=%p e=%c %% f=%.*s g=%5.2f\n") == [
        "NVRM: word: a=1f b=3 c=1f d=00000000deadbeef e=x % f=word g=1.5"]
    assert fill(r"NVRM: one\nNVRM: two") == ["NVRM: one", "NVRM: two"]


@pytest.mark.parametrize("framing", list(FRAMINGS))
def test_every_format_is_read_by_the_parser(framing: str) -> None:
    """Each format alone in a log: its line (of a multi-line message, one of its lines: `The
    NVIDIA GPU ...` is read on its `fallen off the bus` line) is read by a rule or kept as unread."""
    missed = []
    for where, _macro, _level, fmt in NVRM_ROWS:
        lines = fill(fmt)
        log = kernel_log.parse(Doc("\n".join(FRAMINGS[framing](lines)) + "\n"))
        if not {ln.strip() for ln in lines} & _read_lines(log):
            missed.append(f"{where}: {lines[0]}")
    assert not missed, f"{len(missed)} of {len(NVRM_ROWS)} not read, e.g. {missed[:5]}"


BATCH = 60


@pytest.mark.parametrize("framing", list(FRAMINGS))
def test_no_format_grades_pass(framing: str) -> None:
    """gpu.xid over every format (in batches, each format's lines set apart by a kernel line of
    another driver so that no message takes its neighbour's reading): never PASS, never "not
    recognised"; the unread lines each reach the result (facts `unread_count`)."""
    for start in range(0, len(NVRM_ROWS), BATCH):
        batch = NVRM_ROWS[start:start + BATCH]
        lines: list[str] = []
        for *_, fmt in batch:
            lines += [*fill(fmt), SEPARATOR]
        results = _grade("\n".join(FRAMINGS[framing](lines)) + "\n")
        assert not [r for r in results if "not recognised" in r.summary], [r.summary for r in results]
        xid = [r for r in results if r.check == "gpu.xid"]
        assert xid and all(r.status is not Status.PASS for r in xid), [r.summary for r in xid]


@pytest.mark.parametrize("turn", range(len(FRAMINGS)))
def test_each_format_alone_never_passes(turn: int) -> None:
    """Each format alone through analyze, in one of the three framings in turn (format i in
    framing i mod 3; the batches above put every format in every framing): gpu.xid is never PASS,
    nothing is "not recognised". Alone, no neighbour's reading can hide a PASS."""
    framing = list(FRAMINGS)[turn]
    passed = []
    rows = NVRM_ROWS[turn::len(FRAMINGS)]
    for where, _macro, _level, fmt in rows:
        results = _grade("\n".join(FRAMINGS[framing](fill(fmt))) + "\n")
        xid = [r for r in results if r.check == "gpu.xid"]
        if not xid or xid[0].status is Status.PASS or any("not recognised" in r.summary for r in results):
            passed.append(f"{where}: {fill(fmt)[0]} -> {[r.summary for r in results]}")
    assert len(rows) > 1000 and not passed, f"{len(passed)} of {len(rows)}: {passed[:5]}"


@pytest.mark.parametrize("framing", list(FRAMINGS))
@pytest.mark.parametrize("where", ["src/nvidia/src/kernel/gpu/fsp/arch/hopper/kern_fsp_gh100.c",
                                   "src/nvidia/src/kernel/gpu/gsp/arch/hopper/kernel_gsp_gh100.c"])
def test_formats_one_by_one_of_a_file_never_pass(framing: str, where: str) -> None:
    rows = [r for r in NVRM_ROWS if r[0].startswith(where + ":")]
    assert rows
    for _where, _macro, _level, fmt in rows:
        xid = [r for r in _grade("\n".join(FRAMINGS[framing](fill(fmt))) + "\n") if r.check == "gpu.xid"]
        assert xid and xid[0].status is not Status.PASS, (fmt, xid[0].summary if xid else None)


# --- the rule, line by line ---------------------------------------------------------------------

FSP = "NVRM: GPU0 kfspSendBootCommands_GH100: FSP boot cmds failed. RM cannot boot."
WATCHDOG = "NVRM: GPU1 krcWatchdogInit_IMPL: Unable to setup watchdog. Status: 0x56"


def _xid(text: str) -> Result:
    return [r for r in _grade(text) if r.check == "gpu.xid"][0]


@pytest.mark.parametrize("line", [
    WATCHDOG,
    "NVRM krcWatchdogInit_IMPL: Unable to setup watchdog. Status: 0x56",  # no colon after NVRM
    "NVRM: _kgspWaitForResetComplete: Timeout waiting for GSP reset to complete",  # no GPU number
    "NVRM: GPU 0000:3b:00.0: nv_acpi_dsm failed with an unexpected status",  # kernel interface, NV_DEV_PRINTF
])
@pytest.mark.parametrize("framing", list(FRAMINGS))
def test_an_unread_error_line_alone_is_warn_unread_error(line: str, framing: str) -> None:
    r = _xid("\n".join(FRAMINGS[framing]([line])) + "\n")
    assert r.status is Status.WARN and r.facts["codes"] == ["gpu.xid/unread-error"], r.summary
    assert any(line in e for e in r.evidence) and line in r.summary
    assert r.facts["unread_count"] == 1


@pytest.mark.parametrize("line", [FSP, FSP.replace("NVRM: GPU0 ", "NVRM "),
                                  "NVRM: kfspPrepareBootCommands_GH100: Preparing FSP boot cmds failed. RM cannot boot.",
                                  "NVRM: RmInitAdapter: GSP-RM proxy boot command failed."])
def test_a_gpu_that_cannot_boot_fails(line: str) -> None:
    r = _xid(f"[   12.345678] {line}\n")
    assert r.status is Status.FAIL and r.facts["codes"] == ["gpu.xid/adapter-init-failed"], r.summary


def test_informational_driver_lines_stay_pass() -> None:
    text = ("[    5.100000] nvidia: loading out-of-tree module taints kernel.\n"
            "[    5.200000] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  595.45.04  Release Build\n"
            "[    6.000000] NVRM: GPU at PCI:0000:3b:00: GPU-7c1f20aa-5d3e-4b11-9c0e-2f6a8b4d1e90\n"
            "[    6.000001] NVRM: GPU Board Serial Number: 1652823012345\n"
            "[    9.000000] NVRM: Persistence mode is deprecated and will be removed in a future release. "
            "Please use nvidia-persistenced instead.\n")
    r = _xid(text)
    assert r.status is Status.PASS and "unread" not in r.facts, r.summary


def test_a_multi_line_message_read_on_one_line_adds_no_unread_line() -> None:
    text = ("[  100.000001] NVRM: The NVIDIA GPU 0000:3b:00.0\n"
            "[  100.000002] NVRM: (PCI ID: 10de:2330) installed in this system has\n"
            "[  100.000003] NVRM: fallen off the bus and is not responding to commands.\n")
    r = _xid(text)
    assert r.facts["codes"] == ["gpu.xid/fallen-off-bus"] and "unread" not in r.facts


def test_unread_lines_beside_a_failure_are_a_note_of_it() -> None:
    text = (f"[   12.000000] {FSP}\n[   12.100000] {WATCHDOG}\n")
    r = _xid(text)
    assert r.status is Status.FAIL and r.facts["codes"] == ["gpu.xid/adapter-init-failed"]
    assert r.facts["unread_count"] == 1
    assert any("1 more NVIDIA driver error line(s) no rule reads" in e and WATCHDOG in e for e in r.evidence)


def test_a_kernel_interface_line_next_to_an_identity_line_is_still_read() -> None:
    text = ("[    6.000000] NVRM: GPU at PCI:0000:3b:00: GPU-7c1f20aa-5d3e-4b11-9c0e-2f6a8b4d1e90\n"
            "[    6.000001] NVRM: GPU 0000:3b:00.0: Failed to allocate the NUMA memory partition\n")
    r = _xid(text)
    assert r.facts["codes"] == ["gpu.xid/unread-error"]


def test_the_proc_version_file_pasted_with_a_log_is_no_error() -> None:
    r = _xid("[ 1.0] usb 1-1: new device\n"
             "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.173.02  Tue Jun 23 08:38:17 UTC 2026\n"
             "[ 2.0] usb 1-2: new device\n[ 3.0] usb 1-3: new device\n")
    assert "unread" not in r.facts


def test_explain_says_what_unread_error_means() -> None:
    from typer.testing import CliRunner

    from preflight.cli import app

    out = CliRunner().invoke(app, ["explain", "gpu.xid/unread-error"])
    assert out.exit_code == 0, out.output
    assert "status: WARN" in out.output and "error level" in out.output and "inventory" in out.output


# --- Xid 154 ------------------------------------------------------------------------------------

def test_xid154_unknown_action_is_a_problem() -> None:
    r = _xid("[  200.000000] NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) "
             "to 0x9 (Unknown)\n")
    assert r.status is Status.WARN and r.facts["codes"] == ["gpu.xid/recovery-unknown"], r.summary


def test_xid154_inventory_versions_start_where_the_message_does() -> None:
    import tomllib

    inv = tomllib.loads((ROOT / "preflight/parsers/nvidia-driver.inventory.toml").read_text(encoding="utf-8"))
    xid154 = {e["id"]: e["versions"] for e in inv["entry"] if e["id"].startswith("xid154")}
    assert len(xid154) >= 6
    # `GPU recovery action changed` is absent from 560.35.03 and present from 565.57.01 (gpu.c);
    # `Drain and Reset` from 570.86.15; `Recover IMEX Domain` from 575
    assert xid154.pop("xid154-drain-and-reset").startswith("570.86.15")
    assert xid154.pop("xid154-imex").startswith("575")
    assert all(v.startswith("565.57.01") for v in xid154.values()), xid154


def test_the_proc_version_file_alone_is_no_kernel_log() -> None:
    text = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.173.02  Tue Jun 23 08:38:17 UTC 2026\n"
            "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
    assert not kernel_log.detect(Doc(text))
    assert kernel_log.detect(Doc("NVRM kfspSendBootCommands_GH100: FSP boot cmds failed. RM cannot boot.\n"))


# --- uncorrected ECC without an Xid -------------------------------------------------------------

@pytest.mark.parametrize("line", [
    "NVRM: GPU3 kgspEccServiceUncorrError_GB100: NV_PGSP_FALCON_ECC_STATUS_UNCORRECTED_ERR_DMEM PENDING",
    "NVRM: GPU0 _kgspProcessRpcEvent: received event from GPU0: 0x1004 (GSP UNCORRECTED ECC) status: 0x0 size: 32",
    "NVRM: GPU 0000:3b:00.0: uncorrectable ECC error detected in SRAM",
])
def test_an_uncorrected_ecc_error_without_an_xid_fails(line: str) -> None:
    r = _xid(f"[   55.000001] {line}\n")
    assert r.status is Status.FAIL and r.facts["codes"] == ["gpu.xid/uncorrected-ecc"], r.summary
    assert "uncorrected ECC error" in r.summary and "reset" in r.remedy


def test_corrected_ecc_words_are_no_uncorrected_error() -> None:
    r = _xid("[   55.000001] NVRM: GPU0 someFunc_IMPL: corrected ECC error count 3 over threshold\n")
    assert "gpu.xid/uncorrected-ecc" not in r.facts["codes"], r.summary
