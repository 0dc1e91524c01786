"""The `nvidia-smi -q` parser: every release's layout, -d/-i subsets, grep excerpts, odd input.

Fixtures are the project's own, written in the tool's format (tests/fixtures/nvidia-smi-q/);
short fragments are inline."""

from __future__ import annotations

import pytest

from preflight.framing import Doc, frame
from preflight.parsers import nvsmi_q
from preflight.parsers.nvsmi_q import QReport, detect, parse, selected_gpu
from tests.conftest import fixture_text

Q = "nvidia-smi-q/"


def framed(text: str) -> QReport:
    """Parse a paste as analyze frames it: the documents -q recognises, read as one."""
    docs = [d for d in frame(text).docs if detect(d)]
    assert docs, "not recognised as nvidia-smi -q"
    return parse(docs[0] if len(docs) == 1 else Doc.join(docs))


def plain(text: str, command: str = "", excerpt: bool = False) -> QReport:
    return parse(Doc(text, command=command, excerpt=excerpt))


REMAP = """\
GPU 00000000:18:00.0
    Remapped Rows
        Correctable Error                 : 0
        Uncorrectable Error               : 1
        Pending                           : Yes
        Remapping Failure Occurred        : No
        Bank Remap Availability Histogram
            Max                           : 639 bank(s)
            None                          : 0 bank(s)
"""


# ---------------------------------------------------------------------------------------
# whole outputs, every release's layout


def test_535_layout_header_paths_and_lines() -> None:
    rep = framed(fixture_text(Q + "h100x8_535_healthy_idle_powerbrake.txt"))
    assert rep.recognised and rep.driver == "535.230.02" and rep.cuda == "12.2" and rep.attached == 8
    assert rep.listing and len(rep.records) == 8
    assert [g.bus_id for g in rep.gpus][:2] == ["00000000:1B:00.0", "00000000:43:00.0"]
    assert [g.index for g in rep.gpus] == list(range(8)) and all(g.index_known for g in rep.gpus)
    g = rep.gpus[0]
    assert g.label == "GPU 0 (00000000:1B:00.0)"
    assert g.get("Remapped Rows/Pending") == "No" and g.line("Remapped Rows/Pending") == "Pending : No"
    assert g.get("Clocks Event Reasons/HW Power Brake Slowdown") == "Active"
    assert g.line("no/such/path") == "no/such/path" and g.get("no/such/path") is None
    assert rep.header_lines["Driver Version"] == "Driver Version : 535.230.02"


def test_590_wide_labels_new_fields_and_counters_apart() -> None:
    rep = framed(fixture_text(Q + "h100x1_590_healthy.txt"))
    g = rep.gpus[0]
    assert rep.driver == "590.48.01" and rep.cuda == "13.1"
    assert g.get("GPU Recovery Action") == "None"
    assert g.get("Fabric/Health/Bandwidth") == "N/A"
    assert g.get("ECC Errors/TPC Repair Pending") == "No"
    assert g.get("Clocks Event Reasons Counters/HW Thermal Slowdown") == "0 us"
    assert g.get("Clocks Event Reasons/HW Thermal Slowdown") == "Not Active"
    assert "GPU Memory Power Readings/Average Power Draw" in g.fields  # section line with a trailing space


def test_450_throttle_reasons_alias_and_old_power_section() -> None:
    g = framed(fixture_text(Q + "q_450_a100_throttle_reasons_healthy.txt")).gpus[0]
    assert g.get("Clocks Event Reasons/Idle") == "Active"  # "Clocks Throttle Reasons" before R535
    assert "Clocks Throttle Reasons/Idle" not in g.fields
    assert g.get("ECC Mode/Current") == "Enabled"  # "Ecc Mode" spelled as R450 prints it
    assert g.get("Power Readings/Enforced Power Limit") == "400.00 W"
    rec = g.record()
    assert (rec.name, rec.pcie_gen, rec.pcie_gen_max, rec.pcie_width, rec.pcie_width_max) == \
        ("A100-SXM4-40GB", 4, 4, 16, 16)
    assert (rec.mig_mode, rec.mig_pending, rec.memory_total_mib, rec.util, rec.persistence) == \
        ("Disabled", "Disabled", 40537, 0, True)
    assert rec.bus_id == "00000000:07:00.0" and rec.line == "GPU 00000000:07:00.0 A100-SXM4-40GB"
    assert rec.uuid == "GPU-3d1e9c2a-7b54-4f0e-a8c6-5e02d9b71c3f" and rec.vbios == "92.00.19.00.01"
    assert rec.pstate == "P0" and rec.cells["Replays Since Reset"] == "0"


def test_352_layout_four_digit_domain_and_pending() -> None:
    rep = framed(fixture_text(Q + "k80_352_retired_pending_old_layout.txt"))
    assert rep.driver == "352.93" and rep.cuda == "" and rep.attached == 2
    assert [g.bus_id for g in rep.gpus] == ["0000:05:00.0", "0000:06:00.0"]
    assert rep.command == "nvidia-smi -q -d PAGE_RETIREMENT,ECC" and rep.selection == ""
    g = rep.gpus[0]
    assert g.get("Retired Pages/Pending") == "Yes"
    assert g.get("ECC Errors/Volatile/Double Bit/Total") == "1"  # "Single Bit" section lines with trailing blanks


def test_notebook_indented_block_with_blank_lines() -> None:
    rep = framed(fixture_text(Q + "notebook_indented_570_v100_healthy.txt"))
    assert rep.driver == "570.124.06" and rep.attached == 1 and rep.listing
    g = rep.gpus[0]
    assert g.bus_id == "00000001:00:00.0" and g.index_known
    assert g.get("PCI/Rx Throughput") == "100 KB/s"  # blank lines inside a section
    assert g.get("GPU Reset Status/Reset Required") == "Requested functionality has been deprecated"
    assert g.get("Utilization/GPU") == "0 %" and g.record().util == 0
    assert g.get("Remapped Rows") == "N/A"


def test_indented_block_parses_without_framing_dedent() -> None:
    text = "    Driver Version : 550.54.15\n    GPU 00000000:18:00.0\n        Remapped Rows\n" \
           "            Pending : Yes\n"
    rep = plain(text)
    assert rep.driver == "550.54.15" and rep.gpus[0].get("Remapped Rows/Pending") == "Yes"


def test_mig_devices_and_processes_repeat_within_one_gpu() -> None:
    g = framed(fixture_text(Q + "a100x1_550_mig_enabled.txt")).gpus[0]
    assert "MIG Devices/MIG Device/ECC Errors/Volatile/SRAM Uncorrectable" in g.fields
    assert "MIG Devices/MIG Device/Index#2" in g.fields
    text = ("GPU 00000000:18:00.0\n    Processes\n        Process ID : 11\n            Name : python\n"
            "        Process ID : 12\n            Name : torchrun\n        Process ID : 13\n")
    g = plain(text).gpus[0]
    assert [g.get("Processes/Process ID"), g.get("Processes/Process ID#2"), g.get("Processes/Process ID#3")] == \
        ["11", "12", "13"]
    assert g.get("Processes/Name#2") == "torchrun"


def test_processes_written_with_a_colon_is_a_section() -> None:
    g = plain("GPU 00000000:18:00.0\n    Processes :\n        Process ID : 7\n").gpus[0]
    assert g.get("Processes") == "" and g.get("Processes/Process ID") == "7"


def test_a_field_with_children_keeps_them_in_its_section() -> None:
    text = ("GPU 00000000:18:00.0\n    Clocks Event Reasons\n        HW Slowdown : Active\n"
            "            HW Thermal Slowdown : Active\n        Sync Boost : Not Active\n")
    g = plain(text).gpus[0]
    assert g.get("Clocks Event Reasons/HW Thermal Slowdown") == "Active"
    assert g.get("Clocks Event Reasons/Sync Boost") == "Not Active"


# ---------------------------------------------------------------------------------------
# -d subsets, -i selections, runs joined


def test_d_subset_for_one_gpu_by_bus_id() -> None:
    rep = framed(fixture_text(Q + "q_d_ecc_row_remapper_i_bus_535_pending.txt"))
    assert rep.command == "nvidia-smi -q -d ECC,ROW_REMAPPER -i 00000000:9B:00.0"
    assert rep.selection == "00000000:9B:00.0"
    g = rep.gpus[0]
    assert not g.index_known and g.label == "GPU 00000000:9B:00.0"
    assert g.get("Remapped Rows/Pending") == "Yes"
    assert not rep.listing  # one of 8 attached


def test_i_index_gives_the_gpu_its_index() -> None:
    rep = plain(REMAP, command="nvidia-smi -i 3 -q -d ROW_REMAPPER")
    g = rep.gpus[0]
    assert (g.index, g.index_known, g.label) == (3, True, "GPU 3 (00000000:18:00.0)")
    assert rep.selection == "3"


def test_one_gpu_of_several_attached_without_i_has_no_index() -> None:
    rep = plain("Attached GPUs : 8\n" + REMAP)
    assert not rep.gpus[0].index_known and rep.gpus[0].label == "GPU 00000000:18:00.0"
    rep = plain("Attached GPUs : 1\n" + REMAP)
    assert rep.gpus[0].index_known and rep.gpus[0].label == "GPU 0 (00000000:18:00.0)"
    rep = plain(REMAP)  # no header, no command: the position stands for the index
    assert rep.gpus[0].index_known
    rep = plain(REMAP, command="nvidia-smi -q -i GPU-3d1e9c2a")  # selected by UUID: index unknown
    assert not rep.gpus[0].index_known and rep.selection == "GPU-3d1e9c2a"


def test_selection_only_from_an_nvidia_smi_command() -> None:
    assert plain(REMAP, command="ssh -i key.pem node1").selection == ""
    assert plain(REMAP + REMAP.replace("18:00", "3B:00"), command="nvidia-smi -q -i 0,1").selection == "0,1"


@pytest.mark.parametrize(("command", "want"), [
    ("nvidia-smi -q -i 2", "2"), ("nvidia-smi --id 00000000:18:00.0 -q", "00000000:18:00.0"),
    ("nvidia-smi -q --id=1,2", "1,2"), ("nvidia-smi -i4 -q", "4"), ("nvidia-smi -q", ""), ("nvidia-smi -q -i", ""),
    ("nvidia-smi -q -d ECC --id", ""), ("sudo nvidia-smi -q -i 'broken", "'broken"), ("nvidia-smi --ids -q", ""),
])
def test_selected_gpu(command: str, want: str) -> None:
    assert selected_gpu(command) == want


def test_two_runs_over_one_gpu_are_one_gpu_and_the_later_wins() -> None:
    first = "==============NVSMI LOG==============\nDriver Version : 550.54.15\nAttached GPUs : 1\n" + \
        REMAP.replace("Pending                           : Yes", "Pending : No")
    second = "==============NVSMI LOG==============\nDriver Version : 550.54.15\nAttached GPUs : 1\n" + \
        "GPU 00000000:18:00.0\n    ECC Errors\n        Volatile\n            DRAM Uncorrectable : 0\n" + \
        REMAP.replace("GPU 00000000:18:00.0\n", "")
    rep = plain(first + "\n" + second)
    assert len(rep.gpus) == 1
    g = rep.gpus[0]
    assert g.get("Remapped Rows/Pending") == "Yes" and "Remapped Rows/Pending#2" not in g.fields
    assert g.get("ECC Errors/Volatile/DRAM Uncorrectable") == "0"


def test_same_gpu_again_matches_bus_id_case_insensitively() -> None:
    upper = REMAP.replace("18:00.0", "9B:00.0")
    rep = plain(upper + upper.replace("9B:00.0", "9b:00.0"))
    assert len(rep.gpus) == 1 and rep.gpus[0].bus_id == "00000000:9B:00.0"


# ---------------------------------------------------------------------------------------
# grep excerpts: sections without their GPU header


def test_grep_A_excerpt_one_block_per_gpu() -> None:
    rep = framed(fixture_text(Q + "grep_A_remapped_rows_8gpu_gpu5_pending.txt"))
    assert rep.excerpt and rep.recognised and not rep.listing
    assert len(rep.gpus) == 8
    assert [g.get("Remapped Rows/Pending") for g in rep.gpus] == ["No"] * 5 + ["Yes"] + ["No"] * 2
    g = rep.gpus[5]
    assert (g.bus_id, g.index, g.index_known) == ("", 5, False)
    assert g.label == "GPU #6 of the excerpt (bus id not shown)"
    assert g.get("Remapped Rows/Bank Remap Availability Histogram/None") == "0 bank(s)"
    assert g.record().bus_id is None


def test_grep_excerpt_with_i_index_names_the_gpu() -> None:
    rep = plain(REMAP.replace("GPU 00000000:18:00.0\n", ""), command="nvidia-smi -q -i 2 | grep -A 8 Remapped")
    assert rep.gpus[0].label == "GPU 2" and rep.gpus[0].index == 2


def test_labels_imply_their_section_when_the_excerpt_drops_it() -> None:
    text = ("        Reset Required : No\n        Drain and Reset Recommended : Yes\n"
            "    GPU Recovery Action : Drain and Reset\n    IBMNPU\n        Relaxed Ordering Mode : N/A\n"
            "        Reset Required : No\n        Drain and Reset Recommended : No\n"
            "    GPU Recovery Action : None\n")
    rep = plain(text, excerpt=True)
    assert len(rep.gpus) == 2
    a, b = rep.gpus
    assert a.get("GPU Reset Status/Drain and Reset Recommended") == "Yes"
    assert a.get("GPU Recovery Action") == "Drain and Reset"
    assert a.get("IBMNPU/Relaxed Ordering Mode") == "N/A"
    assert b.get("GPU Reset Status/Reset Required") == "No" and b.get("GPU Recovery Action") == "None"


def test_single_grep_lines_each_a_gpu() -> None:
    text = ("            Pending Page Blacklist        : N/A\n        Remapping Failure Occurred        : No\n"
            "            Pending Page Blacklist        : N/A\n        Remapping Failure Occurred        : Yes\n")
    rep = framed("$ nvidia-smi -q | grep -i 'remapping failure\\|pending page'\n" + text)
    assert [g.get("Remapped Rows/Remapping Failure Occurred") for g in rep.gpus] == ["No", "Yes"]
    assert rep.gpus[1].get("Retired Pages/Pending Page Blacklist") == "N/A"


def test_implied_section_line_opens_its_section() -> None:
    g = plain("Bank Remap Availability Histogram\n    None : 2 bank(s)\n").gpus[0]
    assert g.get("Remapped Rows/Bank Remap Availability Histogram/None") == "2 bank(s)"
    g = plain(REMAP).gpus[0]  # under its own section: no doubled path
    assert "Remapped Rows/Bank Remap Availability Histogram/Max" in g.fields


def test_sram_threshold_implies_the_aggregate_section() -> None:
    g = plain("    SRAM Threshold Exceeded : Yes\n").gpus[0]
    assert g.get("ECC Errors/Aggregate/SRAM Threshold Exceeded") == "Yes"


def test_grep_with_gpu_headers_numbers_ambiguous_lines() -> None:
    text = ("GPU 00000000:18:00.0\n        Pending : Disabled\n        Pending : Enabled\n"
            "            Pending Page Blacklist : N/A\n        Remapping Failure Occurred : No\n")
    g = plain(text).gpus[0]
    assert g.get("Pending") == "Disabled" and g.get("Pending#2") == "Enabled"  # which section: not known
    assert g.get("Retired Pages/Pending Page Blacklist") == "N/A"
    assert "Remapped Rows/Pending" not in g.fields


def test_text_after_a_block_ends_it() -> None:
    text = REMAP + "some other tool output\n        Pending : Yes\n"
    g = plain(text).gpus[0]
    assert "Pending#2" not in "".join(g.fields) and len(plain(text).gpus) == 1


def test_header_fields_after_a_block_end_it() -> None:
    rep = plain(REMAP + "Timestamp : Mon Dec  2 10:00:00 2024\n        Pending : No\n")
    assert rep.header["Timestamp"] == "Mon Dec  2 10:00:00 2024" and len(rep.gpus) == 1
    assert rep.gpus[0].get("Remapped Rows/Pending") == "Yes"


def test_nvsmi_log_line_ends_a_block() -> None:
    rep = plain(REMAP + "==============NVSMI LOG==============\n        Pending : No\n")
    assert rep.gpus[0].get("Remapped Rows/Pending") == "Yes" and len(rep.gpus) == 1


# ---------------------------------------------------------------------------------------
# error texts read with the output


def test_nvml_library_version_line() -> None:
    rep = plain("Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.178\n")
    assert rep.nvml_library == "580.178" and rep.nvml_library_line == "NVML library version: 580.178"
    assert [e.kind for e in rep.errors] == ["version_mismatch"] and rep.gpus == []
    assert plain("NVML Library Version 570.124.06\n").nvml_library == "570.124.06"
    assert plain("library version: unknown\n").nvml_library == ""


def test_lost_gpu_between_blocks() -> None:
    rep = framed(fixture_text(Q + "h100x8_535_gpu_lost.txt"))
    assert [(e.kind, e.bus_id) for e in rep.errors] == [("gpu_lost", "0000:9D:00.0")]
    assert len(rep.gpus) == 7 and rep.attached == 8 and not rep.listing


@pytest.mark.parametrize("text", ["", "\n\n", "garbage\x00\x01 : : :", "GPU 0: something\n    : x",
                                  "Driver Version : 1\nGPU zz\n", "====\n", "\t\t\n", "    : \n"])
def test_garbage_never_raises(text: str) -> None:
    rep = plain(text)
    assert rep.gpus == []


def test_crlf_tabs_and_ansi_are_tolerated() -> None:
    text = fixture_text(Q + "h100x1_590_recovery_reset.txt").replace("\n", "\r\n")
    text = "\x1b[1m" + text.replace("    GPU Recovery Action", "\tGPU Recovery Action")
    rep = framed(text)
    assert rep.driver == "590.48.01" and len(rep.gpus) == 1
    assert rep.gpus[0].get("GPU Recovery Action") == "Reset"


def test_find_matches_whole_path_parts() -> None:
    g = plain("GPU 00000000:18:00.0\n    Product Name : NVIDIA H100\n    Utilization\n        GPU : 5 %\n").gpus[0]
    assert g.find("Product Name") == "NVIDIA H100" and g.name == "NVIDIA H100"
    assert g.find("GPU") == "5 %" and g.find("PU") == "" and g.find("Missing", "Utilization/GPU") == "5 %"
    assert list(g.under("Utilization/")) == [("Utilization/GPU", "5 %")]
    assert list(g.under("Util")) == []


# ---------------------------------------------------------------------------------------
# detection


@pytest.mark.parametrize("text", [
    "==============NVSMI LOG==============\n",
    "GPU 00000000:18:00.0\n    Product Name : NVIDIA A10\n",
    "    GPU 00000000:18:00.0\n        Remapped Rows\n            Pending : No\n",
    "Remapped Rows\n    Pending : No\n",
    "        Remapping Failure Occurred        : No\n",
    "    GPU Recovery Action : None\n",
    "Driver Version : 550.54.15\nAttached GPUs : 8\n",
    "The following GPUs could not be reset:\n  GPU 00000000:55:00.0: In use by another client\n",
])
def test_detects_every_shape(text: str) -> None:
    assert detect(Doc(text))


@pytest.mark.parametrize("text", [
    "Driver Version: 535\nsome log line\n",
    "GPU 00000000:18:00.0\nnot indented : x\n",
    "GPU 00000000:18:00.0\n    not a field\n",
    "the Remapped Rows shows Pending: Yes, so reset the GPU\n",
    "================HL-SMI LOG================\nClocks Throttle Reasons\n    HW Slowdown : Not Active\n",
    "Attached GPUs : 8\n",
])
def test_detect_is_specific(text: str) -> None:
    assert not detect(Doc(text))


def test_module_constants_cover_every_release() -> None:
    assert nvsmi_q.GPU_LEVEL["clocks throttle reasons"] == "Clocks Event Reasons"
    assert nvsmi_q.IMPLIED["pending page blacklist"] == "Retired Pages"
    assert "remapped rows" in nvsmi_q.DISTINCTIVE and "temperature" not in nvsmi_q.DISTINCTIVE


# every label a GPU block starts its top-level lines with, in some release R450-R590 (as printed)
TOP_LEVEL = (
    "Product Name", "Product Brand", "Product Architecture", "Display Mode", "Display Attached", "Display Active",
    "Persistence Mode", "Addressing Mode", "MIG Mode", "MIG Devices", "Accounting Mode",
    "Accounting Mode Buffer Size", "Driver Model", "Serial Number", "GPU UUID", "GPU PDI", "Minor Number",
    "VBIOS Version", "MultiGPU Board", "Board ID", "Board Part Number", "GPU Part Number", "FRU Part Number",
    "Module ID", "Platform Info", "Inforom Version", "Inforom BBX Object Flush", "GPU Operation Mode",
    "GPU C2C Mode", "GSP Firmware Version", "GPU Virtualization Mode", "GPU Reset Status", "GPU Recovery Action",
    "IBMNPU", "PCI", "Fan Speed", "Performance State", "Clocks Event Reasons", "Clocks Event Reasons Counters",
    "Sparse Operation Mode", "FB Memory Usage", "BAR1 Memory Usage", "Conf Compute Protected Memory Usage",
    "Compute Mode", "Utilization", "Encoder Stats", "FBC Stats", "DRAM Encryption Mode", "ECC Mode", "ECC Errors",
    "Retired Pages", "Remapped Rows", "Temperature", "GPU Power Readings", "Power Readings",
    "GPU Memory Power Readings", "Module Power Readings", "Power Smoothing", "Workload Power Profiles",
    "EDPp Multiplier", "Clocks", "Applications Clocks", "Default Applications Clocks", "Deferred Clocks",
    "Max Clocks", "Max Customer Boost Clocks", "Clock Policy", "Voltage", "Fabric", "Processes", "Capabilities",
    "Supported Clocks", "Accounted Processes", "Supported GPU Target Temp")


@pytest.mark.parametrize("label", TOP_LEVEL)
def test_every_top_level_label_opens_a_headerless_block(label: str) -> None:
    rep = plain(f"    {label.upper()} : x\n")  # any case: kept under one spelling
    assert rep.recognised and rep.gpus[0].fields == {label: "x"}


@pytest.mark.parametrize(("old", "new"), [("Clocks Throttle Reasons", "Clocks Event Reasons"),
                                          ("Retired pages", "Retired Pages"), ("Ecc Mode", "ECC Mode")])
def test_older_spellings_of_sections(old: str, new: str) -> None:
    assert plain(f"{old}\n    Field : 1\n").gpus[0].fields == {f"{new}/Field": "1"}


@pytest.mark.parametrize(("label", "section"), [
    ("Reset Required", "GPU Reset Status"), ("Drain and Reset Recommended", "GPU Reset Status"),
    ("Pending Page Blacklist", "Retired Pages"),
    ("Remapping Failure Occurred", "Remapped Rows"), ("Bank Remap Availability Histogram", "Remapped Rows"),
    ("Correctable Error", "Remapped Rows"), ("Uncorrectable Error", "Remapped Rows"),
    ("SRAM Threshold Exceeded", "ECC Errors/Aggregate"), ("Channel Repair Pending", "ECC Errors"),
    ("TPC Repair Pending", "ECC Errors"), ("Unrepairable Memory", "ECC Errors"),
])
def test_every_implied_label(label: str, section: str) -> None:
    assert plain(f"        {label} : No\n").gpus[0].fields == {f"{section}/{label}": "No"}


@pytest.mark.parametrize("label", [
    "Remapped Rows", "Retired Pages", "ECC Errors", "Clocks Event Reasons", "Clocks Throttle Reasons",
    "GPU Reset Status", "GPU Recovery Action", "Bank Remap Availability Histogram", "Pending Page Blacklist",
    "Remapping Failure Occurred", "Drain and Reset Recommended", "FB Memory Usage", "BAR1 Memory Usage",
    "Inforom Version", "GPU Power Readings", "Clocks Event Reasons Counters", "Max Customer Boost Clocks"])
def test_distinctive_labels_detect_a_fragment(label: str) -> None:
    assert detect(Doc(f"{label} : x\n")) and detect(Doc(f"    {label}\n"))


@pytest.mark.parametrize(("key", "name"), [("timestamp", "Timestamp"), ("driver version", "Driver Version"),
                                           ("cuda version", "CUDA Version"), ("attached gpus", "Attached GPUs")])
def test_header_keys(key: str, name: str) -> None:
    rep = plain(f"{key.upper()}   : 7\n")
    assert rep.header == {name: "7"} and rep.header_lines == {name: f"{key.upper()} : 7"}
    assert rep.recognised is (name == "Driver Version")


def test_nvsmi_log_alone_is_recognised() -> None:
    rep = plain("==============NVSMI LOG==============\n")
    assert rep.recognised and rep.gpus == [] and rep.driver == "" and rep.attached is None


def test_equals_lines_are_not_fields() -> None:
    rep = plain("=====\n" + REMAP)
    assert rep.gpus[0].get("Remapped Rows/Pending") == "Yes" and rep.header == {}


def test_selection_index_only_for_a_single_gpu() -> None:
    two = REMAP + REMAP.replace("18:00.0", "3B:00.0")
    rep = plain(two, command="nvidia-smi -q -i 3")
    assert [(g.index, g.index_known) for g in rep.gpus] == [(0, True), (1, True)]


def test_gpu_header_needs_a_deeper_next_line() -> None:
    assert detect(Doc("GPU 00000000:18:00.0\n\n\n\n\n\n\n\n\n    Remapped Rows\n"))
    assert detect(Doc("GPU 00000000:18:00.0\n    Clocks\n        Graphics : 345 MHz\n"))
    assert not detect(Doc("GPU 00000000:18:00.0\n    Clocks and more\n"))
    assert not detect(Doc("    GPU 00000000:18:00.0\n    Product Name : x\n"))


@pytest.mark.parametrize(("section", "entry"), [("MIG Devices", "MIG Device"), ("Processes", "Process"),
                                                ("Accounted Processes", "Process"), ("Supported Clocks", "Memory")])
def test_repeating_sections_stay_one_gpu_in_an_excerpt(section: str, entry: str) -> None:
    rep = plain(f"{section}\n    {entry}\n        Index : 0\n    {entry}\n        Index : 1\n")
    assert len(rep.gpus) == 1
    g = rep.gpus[0]
    assert g.get(f"{section}/{entry}/Index") == "0" and g.get(f"{section}/{entry}/Index#2") == "1"


def test_a_repeated_section_in_an_excerpt_is_the_next_gpu() -> None:
    rep = plain("ECC Errors\n    Volatile\n        DRAM Uncorrectable : 0\nECC Errors\n    Volatile\n"
                "        DRAM Uncorrectable : 4\n")
    assert [g.get("ECC Errors/Volatile/DRAM Uncorrectable") for g in rep.gpus] == ["0", "4"]


def test_unframed_grep_separators_and_prose_end_an_excerpt_block() -> None:
    lines = ["    Remapped Rows", "        Pending : No", "    Temperature", "--", "    Remapped Rows",
             "        Pending : Yes", "so this one is bad", "        Pending : No"]
    rep = nvsmi_q.parse_lines(lines)
    assert [g.fields for g in rep.gpus] == [{"Remapped Rows/Pending": "No"}, {"Remapped Rows/Pending": "Yes"}]


def test_unknown_top_level_field_of_a_new_release_stays_in_the_block() -> None:
    g = plain("    Remapped Rows\n        Pending : No\n    Future Field : 3\n    ECC Errors\n").gpus
    assert len(g) == 1 and g[0].fields == {"Remapped Rows/Pending": "No", "Future Field": "3"}


# ---------------------------------------------------------------------------------------
# pastes whose indentation was lost (copied from a rendered page): read by the section schema


@pytest.mark.parametrize("name", ["h100x8_535_healthy_idle_powerbrake.txt", "a100x1_550_mig_enabled.txt",
                                  "v100x2_470_retired_pages_pending.txt", "grep_A_remapped_rows_8gpu_gpu5_pending.txt",
                                  "q_450_a100_throttle_reasons_healthy.txt", "k80_352_retired_pending_old_layout.txt",
                                  "h100x2_535_remap_failure.txt"])
def test_a_flattened_paste_reads_as_the_indented_one(name: str) -> None:
    lines = fixture_text(Q + name).split("\n")
    indented, flat = nvsmi_q.parse_lines(lines), nvsmi_q.parse_lines([ln.strip() for ln in lines])
    assert [g.bus_id for g in flat.gpus] == [g.bus_id for g in indented.gpus]
    assert [g.fields for g in flat.gpus] == [g.fields for g in indented.gpus]


def test_flattened_block_subsections_and_parents() -> None:
    text = ("GPU 00000000:18:00.0\nProduct Name : NVIDIA A100\nPCI\nBus : 0x18\nGPU Link Info\nPCIe Generation\n"
            "Max : 4\nCurrent : 4\nLink Width\nMax : 16x\nBridge Chip\nType : N/A\nReplays Since Reset : 3\n"
            "ECC Errors\nVolatile\nSingle Bit\nTotal : 0\nDouble Bit\nTotal : 2\nAggregate\nDRAM Uncorrectable : 5\n"
            "Aggregate Uncorrectable SRAM Sources\nSRAM L2 : 0\nChannel Repair Pending : No\nFabric\nState : Completed\n"
            "Health\nBandwidth : N/A\nProcesses : None\n")
    g = plain(text).gpus[0]
    assert g.fields == {
        "Product Name": "NVIDIA A100", "PCI/Bus": "0x18", "PCI/GPU Link Info/PCIe Generation/Max": "4",
        "PCI/GPU Link Info/PCIe Generation/Current": "4", "PCI/GPU Link Info/Link Width/Max": "16x",
        "PCI/Bridge Chip/Type": "N/A", "PCI/Replays Since Reset": "3",
        "ECC Errors/Volatile/Single Bit/Total": "0", "ECC Errors/Volatile/Double Bit/Total": "2",
        "ECC Errors/Aggregate/DRAM Uncorrectable": "5", "ECC Errors/Aggregate Uncorrectable SRAM Sources/SRAM L2": "0",
        "ECC Errors/Channel Repair Pending": "No", "Fabric/State": "Completed", "Fabric/Health/Bandwidth": "N/A",
        "Processes": "None"}


def test_flattened_mig_devices_keep_their_own_ecc() -> None:
    text = ("GPU 00000000:18:00.0\nMIG Devices\nMIG Device\nIndex : 0\nDevice Attributes\nShared\nCopy Engine count : 7\n"
            "ECC Errors\nVolatile\nSRAM Uncorrectable : 1\nFB Memory Usage\nTotal : 9984 MiB\nMIG Device\nIndex : 1\n"
            "Accounting Mode : Disabled\nECC Errors\nVolatile\nDRAM Uncorrectable : 0\n")
    g = plain(text).gpus[0]
    assert g.get("MIG Devices/MIG Device/ECC Errors/Volatile/SRAM Uncorrectable") == "1"
    assert g.get("MIG Devices/MIG Device/Device Attributes/Shared/Copy Engine count") == "7"
    assert g.get("MIG Devices/MIG Device/FB Memory Usage/Total") == "9984 MiB"
    assert g.get("MIG Devices/MIG Device/Index#2") == "1" and g.get("Accounting Mode") == "Disabled"
    assert g.get("ECC Errors/Volatile/DRAM Uncorrectable") == "0"


def test_flattened_excerpt_without_header() -> None:
    rep = plain("Remapped Rows\nPending : No\nRemapping Failure Occurred : No\nRemapped Rows\nPending : Yes\n")
    assert [g.get("Remapped Rows/Pending") for g in rep.gpus] == ["No", "Yes"]


def test_sections_of_a_normal_paste_are_not_taken_for_flattening() -> None:
    text = "    Temperature\n--\n    Remapped Rows\n        Pending : Yes\n    ECC Errors\n    Remapped Rows\n"
    rep = nvsmi_q.parse_lines(text.split("\n"))
    assert [g.fields for g in rep.gpus] == [{}, {"Remapped Rows/Pending": "Yes"}, {}]
    assert nvsmi_q.SUBSECTIONS["remapped rows"] == frozenset({"bank remap availability histogram"})


@pytest.mark.parametrize(("chain", "path"), [
    ("ECC Errors\nVolatile\nSingle Bit", "ECC Errors/Volatile/Single Bit"),
    ("ECC Errors\nAggregate\nDouble Bit", "ECC Errors/Aggregate/Double Bit"),
    ("ECC Errors\nAggregate Uncorrectable SRAM Sources", "ECC Errors/Aggregate Uncorrectable SRAM Sources"),
    ("Remapped Rows\nBank Remap Availability Histogram", "Remapped Rows/Bank Remap Availability Histogram"),
    ("PCI\nGPU Link Info\nPCIe Generation", "PCI/GPU Link Info/PCIe Generation"),
    ("PCI\nGPU Link Info\nLink Width", "PCI/GPU Link Info/Link Width"), ("PCI\nBridge Chip", "PCI/Bridge Chip"),
    ("MIG Devices\nMIG Device\nDevice Attributes\nShared", "MIG Devices/MIG Device/Device Attributes/Shared"),
    ("MIG Devices\nMIG Device\nECC Errors\nVolatile", "MIG Devices/MIG Device/ECC Errors/Volatile"),
    ("MIG Devices\nMIG Device\nFB Memory Usage", "MIG Devices/MIG Device/FB Memory Usage"),
    ("MIG Devices\nMIG Device\nBAR1 Memory Usage", "MIG Devices/MIG Device/BAR1 Memory Usage"),
    ("Fabric\nHealth", "Fabric/Health"),
])
def test_every_subsection_of_a_flattened_block(chain: str, path: str) -> None:
    g = plain(f"GPU 00000000:18:00.0\n{chain}\nValue : 1\n").gpus[0]
    assert g.fields == {f"{path}/Value": "1"}


@pytest.mark.parametrize("label", ["Replays Since Reset", "Replay Number Rollovers", "Tx Throughput", "Rx Throughput",
                                   "Atomic Caps Inbound", "Atomic Caps Outbound"])
def test_pci_fields_after_its_subsections(label: str) -> None:
    text = f"GPU 00000000:18:00.0\n    PCI\n        Bridge Chip\n            Type : N/A\n        {label} : 0\n"
    assert plain(text).gpus[0].get(f"PCI/{label}") == "0"
    assert plain(f"GPU 00000000:18:00.0\nPCI\nBridge Chip\nType : N/A\n{label} : 0\n").gpus[0].get(f"PCI/{label}") == "0"


def test_report_defaults_and_excerpt_from_a_grep_command() -> None:
    assert QReport().excerpt is False and QReport().selection == "" and QReport().nvml_library == ""
    rep = plain(REMAP, command="nvidia-smi -q | grep -A 8 Remapped")
    assert rep.excerpt and rep.selection == ""
    assert not plain(REMAP, command="nvidia-smi -q").excerpt


def test_tab_indented_lines() -> None:
    rep = nvsmi_q.parse_lines(["GPU 00000000:18:00.0", "\tRemapped Rows", "\t\tPending : Yes"])
    assert rep.gpus[0].fields == {"Remapped Rows/Pending": "Yes"}


def test_flattening_inside_a_nested_section() -> None:
    text = ("GPU 00000000:18:00.0\n    Remapped Rows\n        Pending : No\n        Bank Remap Availability Histogram\n"
            "        None : 3 bank(s)\n")
    assert plain(text).gpus[0].get("Remapped Rows/Bank Remap Availability Histogram/None") == "3 bank(s)"


def test_two_attached_one_shown_has_no_index() -> None:
    assert not plain("Attached GPUs : 2\n" + REMAP).gpus[0].index_known


def test_a_new_top_level_field_after_a_known_field_stays_top_level() -> None:
    g = plain("GPU 00000000:18:00.0\n    Product Name : A\n    Custom Field : 1\n").gpus[0]
    assert g.fields == {"Product Name": "A", "Custom Field": "1"}


def test_detect_reads_the_line_after_the_header_not_before() -> None:
    assert not detect(Doc("    Foo : 1\nGPU 00000000:18:00.0\nplain\n"))


def test_registration() -> None:
    from preflight import registry
    from preflight.analyze import classify

    reg = registry.load()
    assert reg.parser_for("nvidia-smi-q") is nvsmi_q.parse
    assert [f.name for f in classify(Doc(REMAP), reg)] == ["nvidia-smi-q"]


@pytest.mark.parametrize(("shown", "value"), [
    ("Yes                      <===", "Yes"), ("Yes <-- this one", "Yes"), ("Yes  <<<", "Yes"), ("Yes \u2190", "Yes"),
    ("Yes  ==> reset needed", "Yes"), ("Yes --> see dmesg", "Yes"), ("No", "No"), ("<= 2 rows", "<= 2 rows"),
    ("Yes<==", "Yes<=="), ("8 of 16 <-1", "8 of 16 <-1")])
def test_a_readers_mark_after_a_value_is_not_the_value(shown: str, value: str) -> None:
    rep = plain("GPU 00000000:52:00.0\n    Remapped Rows\n        Pending                           : "
                f"{shown}\n        Remapping Failure Occurred        : No\n")
    assert rep.gpus[0].get("Remapped Rows/Pending") == value
    assert rep.gpus[0].get("Remapped Rows/Remapping Failure Occurred") == "No"


def test_counters_grepped_out_of_q_are_read_in_q_order() -> None:
    rep = framed("$ nvidia-smi -q | grep -i correctable | grep -v 0\n"
                 "            SRAM Uncorrectable            : 1\n            SRAM Uncorrectable            : 5\n")
    [g] = rep.gpus
    assert g.fields == {"ECC Errors/Volatile/SRAM Uncorrectable": "1", "ECC Errors/Aggregate/SRAM Uncorrectable": "5"}
    assert g.line("ECC Errors/Volatile/SRAM Uncorrectable") == "SRAM Uncorrectable : 1"
    assert not g.index_known and g.bus_id == "" and rep.recognised


@pytest.mark.parametrize(("lines", "fields"), [
    (["DRAM Uncorrectable : 2"], {"ECC Errors/Aggregate/DRAM Uncorrectable": "2"}),
    (["SRAM Uncorrectable SEC-DED : 3", "DRAM Correctable : 7"],
     {"ECC Errors/Aggregate/SRAM Uncorrectable SEC-DED": "3", "ECC Errors/Aggregate/DRAM Correctable": "7"}),
    (["SRAM Uncorrectable Parity : 1"] * 3,
     {f"ECC Errors/Aggregate/SRAM Uncorrectable Parity#{n}": "1" for n in (1, 2, 3)}),
])
def test_counters_seen_once_or_from_several_gpus_are_only_aggregate(lines: list[str], fields: dict[str, str]) -> None:
    rep = plain("".join(f"    {ln}\n" for ln in lines), command="nvidia-smi --query | grep Uncorr")
    assert rep.gpus[0].fields == fields


@pytest.mark.parametrize("command", ["", "nvidia-smi --query-gpu=ecc.errors.uncorrected.volatile.total --format=csv",
                                     "grep -r Uncorrectable /var/log", "dcgmi diag -r 1"])
def test_counter_lines_without_a_q_command_are_not_q(command: str) -> None:
    doc = Doc("    SRAM Uncorrectable : 1\n", command=command)
    assert not detect(doc) and parse(doc).gpus == []


def test_counters_under_their_section_are_read_by_the_section() -> None:
    rep = plain("GPU 00000000:52:00.0\n    ECC Errors\n        Aggregate\n            SRAM Uncorrectable : 5\n",
                command="nvidia-smi -q")
    assert rep.gpus[0].fields == {"ECC Errors/Aggregate/SRAM Uncorrectable": "5"}
