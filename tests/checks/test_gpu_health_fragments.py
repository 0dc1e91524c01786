"""Fragments of `nvidia-smi -q` read for what they show: `-d ECC` / `-d PAGE_RETIREMENT` /
`-d ROW_REMAPPER` / `-d TEMPERATURE` / `-d PERFORMANCE` single sections, and grep'd or pasted
blocks without the NVSMI LOG header or the `GPU <bus id>` lines. A finding a fragment shows is the
whole output's finding; a clean fragment PASSes what it shows and says what it cannot show (the
other health sections, the GPU count); gpu.inventory SKIPs a fragment that is no listing.
Fixtures are written here in nvidia-smi's layout (R470-R590 label widths), classified by content
as `preflight analyze` does."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight import registry
from preflight.analyze import analyze
from preflight.checks.gpu_health import gpu_count_note, not_shown, q_fragment
from preflight.model import Result, Status
from preflight.parsers.nvsmi_q import QReport
from tests.conftest import facts_of

ALL_SECTIONS = ["recovery action", "reset status", "remapped rows", "ECC errors", "retired pages",
                "clock event reasons", "temperature"]


def run(tmp_path: Path, text: str, name: str = "paste.txt") -> dict[str, Result]:
    f = tmp_path / name
    f.write_text(text)
    res = analyze(registry.load(), [f])
    by = {r.check: r for r in res}
    assert len(by) == len(res), [(r.check, r.summary) for r in res]
    return by


def parse_q(text: str) -> QReport:
    rep = facts_of("nvidia-smi-q", text)
    assert isinstance(rep, QReport)
    return rep


def header(attached: int, driver: str = "550.90.07", cuda: str = "12.4") -> str:
    return ("\n==============NVSMI LOG==============\n\n"
            "Timestamp                                 : Mon Mar  3 10:12:44 2025\n"
            f"Driver Version                            : {driver}\n"
            f"CUDA Version                              : {cuda}\n\n"
            f"Attached GPUs                             : {attached}\n")


def ecc_block(vol: int = 0, agg: int = 0, indent: str = "    ") -> str:
    """The `ECC Errors` section of an Ampere/Hopper GPU (R470+ SRAM/DRAM layout)."""
    lines = ["ECC Errors", "    Volatile",
             "        SRAM Correctable              : 0", "        SRAM Uncorrectable Parity     : 0",
             "        SRAM Uncorrectable SEC-DED    : 0", "        DRAM Correctable              : 12",
             f"        DRAM Uncorrectable            : {vol}", "    Aggregate",
             "        SRAM Correctable              : 0", "        SRAM Uncorrectable Parity     : 0",
             "        SRAM Uncorrectable SEC-DED    : 0", "        DRAM Correctable              : 40",
             f"        DRAM Uncorrectable            : {agg}", "        SRAM Threshold Exceeded       : No"]
    return "".join(f"{indent}{ln}\n" for ln in lines)


def d_ecc(bus: str, vol: int = 0, agg: int = 0) -> str:
    return (f"GPU {bus}\n    ECC Mode\n        Current                           : Enabled\n"
            f"        Pending                           : Enabled\n" + ecc_block(vol, agg))


def remapped(unc: int, pending: str, high: int = 0) -> str:
    return ("    Remapped Rows\n"
            "        Correctable Error                 : 0\n"
            f"        Uncorrectable Error               : {unc}\n"
            f"        Pending                           : {pending}\n"
            "        Remapping Failure Occurred        : No\n"
            "        Bank Remap Availability Histogram\n"
            f"            Max                           : {640 - high} bank(s)\n"
            f"            High                          : {high} bank(s)\n")


# --------------------------------------------------------------------------- -d ECC


def test_d_ecc_with_uncorrectable_errors_is_the_existing_finding(tmp_path: Path) -> None:
    text = "$ nvidia-smi -q -d ECC\n" + header(2) + d_ecc("00000000:18:00.0") + "\n" + d_ecc("00000000:2A:00.0", 2, 2)
    r = run(tmp_path, text)
    h = r["gpu.health"]
    assert h.status is Status.FAIL and h.facts["codes"] == ["gpu.health/volatile-uncorrectable-ecc"]
    assert h.summary == "GPU 1 (00000000:2A:00.0): 2 volatile uncorrectable ECC error(s)"
    assert h.evidence[0] == "GPU 1 (00000000:2A:00.0) [ECC Errors/Volatile] DRAM Uncorrectable : 2"
    assert r["gpu.inventory"].status is Status.PASS  # 2 GPU blocks of 2 attached: a listing of the node's GPUs


def test_d_ecc_clean_passes_what_it_shows_and_names_what_it_does_not(tmp_path: Path) -> None:
    text = header(2) + d_ecc("00000000:18:00.0") + "\n" + d_ecc("00000000:2A:00.0")
    h = run(tmp_path, text)["gpu.health"]
    assert h.status is Status.PASS
    assert h.summary == ("2 GPU(s) healthy in nvidia-smi -q: ECC errors, repair flags, ECC mode; not shown by this "
                         "fragment: recovery action, reset status, remapped rows, retired pages, clock event "
                         "reasons, temperature")
    assert h.facts["not_shown"] == ["recovery action", "reset status", "remapped rows", "retired pages",
                                    "clock event reasons", "temperature"]
    assert "gpu_count" not in h.facts


def test_ecc_block_pasted_without_header_and_gpu_lines(tmp_path: Path) -> None:
    r = run(tmp_path, ecc_block(vol=2, agg=2))
    h = r["gpu.health"]
    assert h.status is Status.FAIL and h.facts["codes"] == ["gpu.health/volatile-uncorrectable-ecc"]
    assert h.summary == "GPU #1 of the excerpt (bus id not shown): 2 volatile uncorrectable ECC error(s)"
    assert h.remedy.startswith("drain; reset the GPU (nvidia-smi -r -i <its index or bus id>) or reboot")
    inv = r["gpu.inventory"]
    assert inv.status is Status.SKIP and "the GPU count is not graded" in inv.summary
    assert "gpu.driver" not in r  # no driver version in the fragment: nothing to grade, no PASS


def test_clean_ecc_block_without_header(tmp_path: Path) -> None:
    r = run(tmp_path, ecc_block())
    h = r["gpu.health"]
    assert h.status is Status.PASS
    assert h.summary == ("1 GPU(s) healthy in nvidia-smi -q: ECC errors, repair flags; not shown by this fragment: "
                         "recovery action, reset status, remapped rows, retired pages, clock event reasons, "
                         "temperature; GPU count not shown (an excerpt without GPU headers)")
    assert h.facts["gpu_count"] == "GPU count not shown (an excerpt without GPU headers)"
    assert r["gpu.inventory"].status is Status.SKIP and "gpu.driver" not in r


def test_flattened_ecc_block_without_header(tmp_path: Path) -> None:
    flat = "".join(ln.strip() + "\n" for ln in ecc_block(vol=0, agg=3).splitlines())
    h = run(tmp_path, flat)["gpu.health"]
    assert h.status is Status.WARN and h.facts["codes"] == ["gpu.health/aggregate-uncorrectable-ecc"]
    assert h.summary == ("GPU #1 of the excerpt (bus id not shown): 3 uncorrectable ECC error(s) in the GPU's "
                         "lifetime (aggregate)")


def test_grep_volatile_of_two_gpus_with_separators(tmp_path: Path) -> None:
    """`grep -A6 Volatile`: each chunk one GPU's Volatile counters, read under ECC Errors (not the
    second GPU's as the first one's Aggregate)."""
    chunk = ("        Volatile\n            SRAM Correctable              : 0\n"
             "            SRAM Uncorrectable Parity     : 0\n            SRAM Uncorrectable SEC-DED    : 0\n"
             "            DRAM Correctable              : {c}\n            DRAM Uncorrectable            : {u}\n"
             "        Aggregate\n")
    text = "# nvidia-smi -q -d ECC | grep -A6 Volatile\n" + chunk.format(c=0, u=0) + "--\n" + chunk.format(c=3, u=1)
    rep = parse_q(text)
    assert [g.get("ECC Errors/Volatile/DRAM Uncorrectable") for g in rep.gpus] == ["0", "1"]
    assert not any(k.startswith("ECC Errors/Aggregate/") for g in rep.gpus for k in g.fields)
    h = run(tmp_path, text)["gpu.health"]
    assert h.status is Status.FAIL
    assert h.summary == "GPU #2 of the excerpt (bus id not shown): 1 volatile uncorrectable ECC error(s)"
    # without the command line above it: `Volatile` over an SRAM/DRAM counter is still -q's
    bare = run(tmp_path, chunk.format(c=0, u=0) + "--\n" + chunk.format(c=3, u=1), "bare.txt")["gpu.health"]
    assert bare.summary == h.summary
    assert "gpu.health" not in run(tmp_path, "Volatile\n  something : 1\n", "other.txt")


# --------------------------------------------------------------------------- other single sections


def test_grep_remapped_rows_with_separators(tmp_path: Path) -> None:
    text = "$ nvidia-smi -q | grep -A8 'Remapped Rows'\n" + remapped(0, "No") + "--\n" + remapped(1, "Yes", high=1)
    h = run(tmp_path, text)["gpu.health"]
    assert h.status is Status.FAIL and h.facts["codes"] == ["gpu.health/remap-pending"]
    assert h.summary == ("GPU #2 of the excerpt (bus id not shown): row remap pending (1 rows remapped for "
                         "uncorrectable errors)")
    clean = run(tmp_path, "$ nvidia-smi -q | grep -A8 'Remapped Rows'\n" + remapped(0, "No") + "--\n"
                + remapped(0, "No"), "clean.txt")["gpu.health"]
    assert clean.status is Status.PASS
    assert clean.summary == ("2 GPU(s) healthy in nvidia-smi -q: remapped rows; not shown by this fragment: recovery "
                             "action, reset status, ECC errors, retired pages, clock event reasons, temperature; GPU "
                             "count not shown (an excerpt without GPU headers)")


def test_d_page_retirement_pending(tmp_path: Path) -> None:
    def gpu(bus: str, sbe: int, dbe: int, pending: str) -> str:
        return (f"GPU {bus}\n    Retired Pages\n        Single Bit ECC                    : {sbe}\n"
                f"        Double Bit ECC                    : {dbe}\n"
                f"        Pending Page Blacklist            : {pending}\n")
    text = header(2, "535.86.10", "12.2") + gpu("00000001:00:00.0", 0, 0, "No") + "\n" + gpu("00000002:00:00.0", 2,
                                                                                             0, "Yes")
    h = run(tmp_path, text)["gpu.health"]
    assert h.status is Status.FAIL and h.facts["codes"] == ["gpu.health/retired-pages-pending"]
    ok = run(tmp_path, header(1, "535.86.10", "12.2") + gpu("00000001:00:00.0", 0, 0, "No"), "ok.txt")["gpu.health"]
    assert ok.status is Status.PASS and ok.summary.startswith("1 GPU(s) healthy in nvidia-smi -q: retired pages; ")
    assert ok.facts["not_shown"] == ["recovery action", "reset status", "remapped rows", "ECC errors",
                                     "clock event reasons", "temperature"]


def test_d_temperature_of_one_gpu_of_eight(tmp_path: Path) -> None:
    text = ("$ nvidia-smi -q -d TEMPERATURE -i 0\n" + header(8) + "GPU 00000000:18:00.0\n    Temperature\n"
            "        GPU Current Temp                  : 34 C\n        GPU T.Limit Temp                  : N/A\n"
            "        GPU Shutdown Temp                 : 92 C\n        GPU Slowdown Temp                 : 89 C\n"
            "        GPU Max Operating Temp            : 87 C\n        Memory Current Temp               : 42 C\n"
            "        Memory Max Operating Temp         : 95 C\n")
    r = run(tmp_path, text)
    h = r["gpu.health"]
    assert h.status is Status.PASS
    assert h.summary == ("1 GPU(s) healthy in nvidia-smi -q: temperature; not shown by this fragment: recovery "
                         "action, reset status, remapped rows, ECC errors, retired pages, clock event reasons; "
                         "1 of 8 attached GPU(s) shown")
    assert r["gpu.inventory"].status is Status.SKIP and "1 of 8 attached" in r["gpu.inventory"].summary
    hot = run(tmp_path, text.replace(": 34 C", ": 90 C"), "hot.txt")["gpu.health"]
    assert hot.facts["codes"] == ["gpu.health/temperature-slowdown"]


@pytest.mark.parametrize("section", ["Clocks Event Reasons", "Clocks Throttle Reasons"])
def test_d_performance_clock_event_reasons(tmp_path: Path, section: str) -> None:
    def perf(slow: str) -> str:
        return ("$ nvidia-smi -q -d PERFORMANCE -i 0\n" + header(8, "570.86.15", "12.8") + "GPU 00000000:18:00.0\n"
                "    Performance State                  : P0\n"
                f"    {section}\n        Idle                           : Not Active\n"
                "        SW Power Cap                   : Not Active\n"
                f"        HW Slowdown                    : {slow}\n"
                f"            HW Thermal Slowdown        : {slow}\n"
                "            HW Power Brake Slowdown    : Not Active\n"
                "        SW Thermal Slowdown            : Not Active\n")
    h = run(tmp_path, perf("Active"))["gpu.health"]
    assert h.status is Status.WARN and h.facts["codes"] == ["gpu.health/clock-slowdown-busy"]
    assert h.summary == "GPU 0 (00000000:18:00.0): hardware clock slowdown active (HW Slowdown, HW Thermal Slowdown)"
    ok = run(tmp_path, perf("Not Active"), "ok.txt")["gpu.health"]
    assert ok.status is Status.PASS
    assert ok.summary == ("1 GPU(s) healthy in nvidia-smi -q: clock event reasons; not shown by this fragment: "
                          "recovery action, reset status, remapped rows, ECC errors, retired pages, temperature; "
                          "1 of 8 attached GPU(s) shown")


def test_grep_recovery_action(tmp_path: Path) -> None:
    text = ("$ nvidia-smi -q | grep -i 'recovery action'\n"
            "    GPU Recovery Action                                : None\n"
            "    GPU Recovery Action                                : Drain and Reset\n")
    h = run(tmp_path, text)["gpu.health"]
    assert h.status is Status.FAIL and h.facts["codes"] == ["gpu.health/recovery-drain-and-reset"]
    assert h.summary == "GPU #2 of the excerpt (bus id not shown): driver requests recovery action 'Drain and Reset'"


# --------------------------------------------------------------------------- what a fragment cannot show


def whole(bus: str) -> str:
    return (f"GPU {bus}\n    Product Name                          : NVIDIA A100-SXM4-80GB\n" + ecc_block()
            + remapped(0, "No"))


def test_whole_output_names_nothing_as_not_shown() -> None:
    rep = parse_q(header(2) + whole("00000000:07:00.0") + whole("00000000:0F:00.0"))
    assert not q_fragment(rep) and not_shown(rep) == [] and gpu_count_note(rep) == ""


def test_what_a_fragment_cannot_show() -> None:
    one = parse_q(header(2) + whole("00000000:07:00.0"))  # a block of a whole listing, the other one missing
    assert not_shown(one) == [] and gpu_count_note(one) == "1 of 2 attached GPU(s) shown"
    no_head = parse_q(whole("00000000:07:00.0"))
    assert gpu_count_note(no_head) == "GPU count not shown (no Attached GPUs line)"
    d_ecc_rep = parse_q(header(1) + d_ecc("00000000:07:00.0"))
    assert q_fragment(d_ecc_rep) and gpu_count_note(d_ecc_rep) == ""
    assert not_shown(d_ecc_rep) == ["recovery action", "reset status", "remapped rows", "retired pages",
                                    "clock event reasons", "temperature"]
    anon = parse_q(ecc_block())
    assert gpu_count_note(anon) == "GPU count not shown (an excerpt without GPU headers)"
    assert not_shown(None) == [] and gpu_count_note(None) == "" and not_shown(QReport()) == []


def test_a_fragment_with_no_health_field_is_skip(tmp_path: Path) -> None:
    text = header(1) + "GPU 00000000:18:00.0\n    FB Memory Usage\n        Total                 : 81559 MiB\n"
    h = run(tmp_path, text)["gpu.health"]
    assert h.status is Status.SKIP and h.facts["codes"] == ["gpu.health/nothing-to-grade"]


def test_all_sections_named() -> None:
    rep = parse_q("GPU 00000000:18:00.0\n    FB Memory Usage\n        Total                 : 81559 MiB\n")
    assert not_shown(rep) == ALL_SECTIONS
