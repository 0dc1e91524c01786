"""nvidia-smi's listings read to exact facts: the default table of each release's layout (whole,
a fragment, the MIG devices section), `-L`, `nvlink --status`, `topo -m`, and the messages
nvidia-smi prints instead of data. Texts are the project's own, in the tool's formats."""

from __future__ import annotations

import pytest

from preflight.framing import Doc
from preflight.parsers import nvlink, nvsmi_csv, nvsmi_errors, nvsmi_list, nvsmi_table, topo
from preflight.parsers.base import GpuRecord
from preflight.parsers.nvsmi_errors import ToolError, errors_in
from tests.conftest import facts_of, fixture_text


def table(text: str) -> nvsmi_table.SmiTable:
    return nvsmi_table.parse(Doc(text))


# --------------------------------------------------------------------------- default table

T535 = "nvidia-smi/table_535_2xh100_mig_procs.txt"
ROW0 = "|   0  NVIDIA H100 80GB HBM3          On  | 00000000:19:00.0 Off |                   On |"
MIG0 = "|  0    3   0   0  |              44MiB / 40192MiB  | 60      0 |  3   0    3    0    3 |"
MIG1 = "|  0    4   0   1  |              43MiB / 40192MiB  | 60      0 |  3   0    3    0    3 |"


def test_table_535_every_cell_of_a_gpu() -> None:
    t = table(fixture_text(T535))
    assert (t.smi_version, t.driver, t.cuda) == ("535.183.01", "535.183.01", "12.2")
    assert t.recognised and not t.partial and t.mig_section
    assert t.gpus[0] == {
        "index": 0, "name": "NVIDIA H100 80GB HBM3", "persistence": "On", "bus_id": "00000000:19:00.0",
        "disp_a": "Off", "fan": "N/A", "temp": "29C", "perf": "P0", "power_usage": "72W", "power_cap": "700W",
        "memory_used": "87MiB", "memory_total": "81559MiB", "util": "N/A", "ecc_uncorr": "On",
        "compute_mode": "Default", "mig": "Enabled",
        "lines": [ROW0, "| N/A   29C    P0              72W / 700W |     87MiB / 81559MiB |     N/A      Default |",
                  "|                                         |                      |              Enabled |"]}
    assert [g["index"] for g in t.gpus] == [0, 1] and t.gpus[1]["persistence"] == "Off"


def test_table_mig_devices_rows_belong_to_their_gpu() -> None:
    t = table(fixture_text(T535))
    assert t.mig == [{"gpu": 0, "gi": "3", "ci": "0", "dev": 0, "line": MIG0},
                     {"gpu": 0, "gi": "4", "ci": "0", "dev": 1, "line": MIG1}]
    assert t.mig_devices == 2
    r0, r1 = t.records
    assert r0 == GpuRecord(index=0, name="NVIDIA H100 80GB HBM3", bus_id="00000000:19:00.0", persistence=True,
                           pstate="P0", mig_mode="Enabled", memory_total_mib=81559, util=None, mig_devices=2,
                           line=ROW0, cells={k: str(v) for k, v in t.gpus[0].items() if k != "lines"})
    assert (r1.persistence, r1.util, r1.mig_mode, r1.mig_devices) == (False, 3, "Disabled", 0)


def test_table_process_rows_are_not_gpus_or_mig_devices() -> None:
    t = table(fixture_text(T535))
    assert len(t.gpus) == 2 and len(t.mig) == 2  # `|    0    3    0     118822      C ...` is a process


def test_table_defaults() -> None:
    t = nvsmi_table.SmiTable()
    assert (t.smi_version, t.driver, t.cuda, t.gpus, t.mig, t.errors) == ("", "", "", [], [], [])
    assert (t.mig_section, t.recognised, t.partial, t.mig_devices, t.records) == (False, False, False, 0, [])


def test_table_without_mig_section() -> None:
    t = table(fixture_text("nvidia-smi/table_550_8xh100_procs.txt"))
    assert not t.mig_section and t.mig == [] and t.mig_devices == 0 and len(t.records) == 8
    assert all(r.mig_devices == 0 and r.mig_mode == "Disabled" for r in t.records)


OLD = """Sat Apr 19 10:08:49 2014
+------------------------------------------------------+
| NVIDIA-SMI 5.325.15   Driver Version: 325.15         |
|-------------------------------+----------------------+----------------------+
| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |
|===============================+======================+======================|
|   0  Tesla K20m          Off  | 0000:03:00.0     N/A |                    0 |
| N/A   31C    P0    47W / 225W |      164MB /  4799MB |      0%      Default |
+-------------------------------+----------------------+----------------------+
|   1  Tesla K20m          Off  | 0000:83:00.0     N/A |                    0 |
| N/A   29C    P0    45W / 225W |      164MB /  4799MB |      0%      Default |
+-------------------------------+----------------------+----------------------+
"""


def test_table_325_two_rows_no_cuda_no_mig_column() -> None:
    t = table(OLD)
    assert (t.smi_version, t.driver, t.cuda) == ("5.325.15", "325.15", "")
    g = t.gpus[1]
    assert (g["index"], g["name"], g["persistence"], g["bus_id"], g["disp_a"]) == (1, "Tesla K20m", "Off",
                                                                                   "0000:83:00.0", "N/A")
    assert (g["memory_used"], g["memory_total"], g["util"], g["mig"]) == ("164MB", "4799MB", "0%", "")
    assert len(g["lines"]) == 2 and t.records[1].mig_mode is None


WIN = """| NVIDIA-SMI 566.36                 Driver Version: 566.36         CUDA Version: 12.7     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                  Driver-Model | Bus-Id          Disp.A | Volatile Uncorr. ECC |
|=========================================+========================+======================|
|   0  NVIDIA RTX A6000             WDDM  |   00000000:01:00.0  On |                  Off |
| 30%   41C    P8             21W /  300W |     812MiB /  49140MiB |      2%      Default |
|                                         |                        |                  N/A |
+-----------------------------------------+------------------------+----------------------+
"""


@pytest.mark.parametrize("model", ["WDDM", "TCC", "MCDM", "N/A"])
def test_table_driver_model_column_is_not_part_of_the_name(model: str) -> None:
    t = table(WIN.replace("WDDM ", f"{model:<4} "))
    g = t.gpus[0]
    assert (g["name"], g["persistence"], g["disp_a"]) == ("NVIDIA RTX A6000", model, "On")
    assert t.records[0].persistence is None and t.records[0].util == 2


def test_table_name_without_persistence_cell() -> None:
    t = table(WIN.replace("WDDM ", "     "))
    assert t.gpus[0]["name"] == "NVIDIA RTX A6000" and t.gpus[0]["persistence"] == ""


def test_table_second_row_without_power_and_memory_without_spaces() -> None:
    text = WIN.replace("| 30%   41C    P8             21W /  300W |     812MiB /  49140MiB |",
                       "| 30%   41C    P8                      N/A |812MiB/49140MiB         |")
    g = table(text).gpus[0]
    assert (g["fan"], g["temp"], g["perf"], g["power_usage"], g["power_cap"]) == ("30%", "41C", "P8", "", "")
    assert (g["memory_used"], g["memory_total"]) == ("812MiB", "49140MiB")


def test_table_rows_without_rules_between_gpus_and_extra_rows() -> None:
    rows = fixture_text("nvidia-smi/table_550_8xh100_procs.txt").splitlines()
    no_rules = [ln for ln in rows if not ln.startswith("+---------------------------------------"
                                                        "--+------------------------+")]
    t = table("\n".join(no_rules))
    assert [g["index"] for g in t.gpus] == list(range(8)) and all(len(g["lines"]) == 3 for g in t.gpus)
    assert t.gpus[7]["mig"] == "Disabled"
    # a fourth row under a GPU (a wrapped cell) is not read as that GPU's rows
    four = WIN.replace("|                                         |                        |                  N/A |",
                       "|                                         |                        |                  N/A |\n"
                       "|                                         |                        |              Enabled |")
    g = table(four).gpus[0]
    assert len(g["lines"]) == 3 and g["mig"] == "N/A"


def test_table_rule_line_variants_end_a_block() -> None:
    text = WIN.replace("+-----------------------------------------+------------------------+----------------------+",
                       "|-----------------------------------------+------------------------+----------------------|")
    text += "| some text row that is not the GPU's          |\n"
    assert table(text).gpus[0]["lines"][-1].endswith("N/A |")


def test_table_cells_of_a_row() -> None:
    cells = nvsmi_table._cells
    assert cells("| a | b |") == ["a", "b"] and cells("a | b") == ["a", "b"] and cells("| a |   |") == ["a", ""]
    assert cells("|   | a |") == ["", "a"] and cells("") == [] and cells("|") == []


def test_table_block_of_one_row_and_bus_cell_alone() -> None:
    g = table("|   0  NVIDIA A10   On  | 00000000:17:00.0 |   0 |\n").gpus[0]
    assert (g["bus_id"], g["disp_a"], g["fan"], g["mig"], g["ecc_uncorr"]) == ("00000000:17:00.0", "", "", "", "0")
    assert g["lines"] == ["|   0  NVIDIA A10   On  | 00000000:17:00.0 |   0 |"]


def test_table_text_between_rows_and_pipe_rules_end_a_block() -> None:
    text = OLD.replace("| N/A   31C    P0    47W / 225W |", "some text\n| N/A   31C    P0    47W / 225W |")
    g = table(text).gpus[0]
    assert len(g["lines"]) == 1 and g["fan"] == ""
    piped = OLD.replace("+-------------------------------+----------------------+----------------------+\n|   1",
                        "|-------------------------------+----------------------+----------------------|\n"
                        "|                               |                      |          Enabled     |\n|   1")
    g0 = table(piped).gpus[0]
    assert len(g0["lines"]) == 2 and g0["mig"] == ""


def test_table_fragment_of_gpu_rows() -> None:
    rows = fixture_text("nvidia-smi/table_550_8xh100_procs.txt").splitlines()[8:15]
    t = table("\n".join(rows))
    assert t.partial and t.recognised and t.driver == "" and [g["index"] for g in t.gpus] == [0, 1]
    header_only = table("| GPU  Name   Persistence-M | Bus-Id   Disp.A |\n" + "\n".join(rows))
    assert not header_only.partial and len(header_only.gpus) == 2


MIG_ONLY = """+-----------------------------------------------------------------------------+
| MIG devices:                                                                |
+------------------+----------------------+-----------+-----------------------+
| GPU  GI  CI  MIG |         Memory-Usage |        Vol|         Shared        |
|      ID  ID  Dev |           BAR1-Usage | SM     Unc| CE  ENC  DEC  OFA  JPG|
|==================+======================+===========+=======================|
|  1    1   0   0  |     11MiB / 20096MiB | 42      0 |  3   0    2    0    0 |
|                  |      0MiB / 32767MiB |           |                       |
+------------------+----------------------+-----------+-----------------------+
|  1    2   0   1  |     11MiB / 20096MiB | 42      0 |  3   0    2    0    0 |
+------------------+----------------------+-----------+-----------------------+
|  3    1   0   0  |     11MiB / 20096MiB | 42      0 |  3   0    2    0    0 |
+------------------+----------------------+-----------+-----------------------+
"""


def test_table_mig_section_alone_names_the_gpus_with_mig() -> None:
    t = table(MIG_ONLY)
    assert t.gpus == [] and t.mig_devices == 3 and t.partial and t.recognised and t.mig_section
    first = "|  1    1   0   0  |     11MiB / 20096MiB | 42      0 |  3   0    2    0    0 |"
    assert t.records == [
        GpuRecord(index=1, mig_mode="Enabled", mig_devices=2, line=first, cells={"mig": "Enabled (MIG devices section)"}),
        GpuRecord(index=3, mig_mode="Enabled", mig_devices=1,
                  line="|  3    1   0   0  |     11MiB / 20096MiB | 42      0 |  3   0    2    0    0 |",
                  cells={"mig": "Enabled (MIG devices section)"})]


def test_table_gpu_with_mig_devices_but_no_mig_column_is_mig_enabled() -> None:
    t = table(OLD.replace("|   1  Tesla K20m", "|   1  Tesla K20m") + MIG_ONLY)
    assert [r.mig_mode for r in t.records] == [None, "Enabled", "Enabled"]
    assert [r.mig_devices for r in t.records] == [0, 2, 1] and [r.index for r in t.records] == [0, 1, 3]


def test_table_mig_section_with_no_devices() -> None:
    t = table(WIN + "\n| MIG devices:        |\n| No MIG devices found |\n")
    assert t.mig_section and t.mig == [] and len(t.gpus) == 1


@pytest.mark.parametrize(("text", "want"), [
    (fixture_text(T535), True),
    ("| NVIDIA-SMI 550.1  Driver Version: 550.1 |\n|===|\n", True),
    ("| NVIDIA-SMI 550.1  Driver Version: 550.1 |\n| GPU Name | Bus-Id |\n", True),
    ("| NVIDIA-SMI 550.1  Driver Version: 550.1 |\n", False),
    ("|===|\n| GPU | Bus-Id |\n", False),
    (ROW0, True),
    (MIG_ONLY, True),
    ("| MIG devices: |\n| No MIG devices found |\n", False),
    (MIG0, False),
    ("|    0   N/A  N/A      2231      G   /usr/lib/xorg/Xorg                  4MiB |", False),
])
def test_table_detector(text: str, want: bool) -> None:
    assert nvsmi_table.detect(Doc(text)) is want


def test_table_errors_above_the_table() -> None:
    t = table("WARNING: infoROM is corrupted at gpu 0000:3A:00.0\n" + WIN)
    assert [(e.kind, e.bus_id) for e in t.errors] == [("inforom_corrupted", "0000:3A:00.0")] and len(t.gpus) == 1


def test_formats_and_parsers_declared() -> None:
    for mod, name, prio in ((nvsmi_table, "nvidia-smi-table", 55), (nvsmi_list, "nvidia-smi-L", 55),
                            (nvlink, "nvidia-smi-nvlink", 60), (topo, "nvidia-smi-topo", 60),
                            (nvsmi_csv, "nvidia-smi-query", 60)):
        [fmt] = mod.FORMATS
        [spec] = mod.PARSERS
        assert (fmt.name, fmt.priority, fmt.probe_name, spec.probe) == (name, prio, name, name)
    [err] = nvsmi_errors.FORMATS
    assert (err.name, err.probe_name, err.priority) == ("nvidia-smi-error", "nvidia-smi-q", 30)


# --------------------------------------------------------------------------- -L

L3 = ("GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-aaaa)\n"
      "  MIG 3g.20gb     Device  0: (UUID: MIG-bbbb)\n"
      "  MIG 3g.20gb     Device  1: (UUID: MIG-cccc)\n"
      "GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-dddd)\n")


def test_smi_L_records_and_mig_devices() -> None:
    lst = nvsmi_list.parse(Doc(L3))
    assert lst.gpus == [
        GpuRecord(index=0, name="NVIDIA A100-SXM4-40GB", uuid="GPU-aaaa", mig_mode="Enabled", mig_devices=2,
                  line="GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-aaaa)"),
        GpuRecord(index=1, name="NVIDIA A100-SXM4-40GB", uuid="GPU-dddd", line="GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-dddd)")]
    assert lst.mig_devices == 2 and lst.other == [] and lst.errors == [] and lst.recognised


def test_smi_L_lines_around_and_mig_line_before_any_gpu() -> None:
    text = "NVIDIA_VISIBLE_DEVICES=all\n\n  MIG 1g.5gb Device 0: (UUID: MIG-GPU-x/7/0)\n" + L3 + "done\n"
    lst = nvsmi_list.parse(Doc(text))
    assert lst.other == ["NVIDIA_VISIBLE_DEVICES=all", "MIG 1g.5gb Device 0: (UUID: MIG-GPU-x/7/0)", "done"]
    assert lst.mig_devices == 2 and len(lst.gpus) == 2


def test_smi_L_lost_gpu_lines_are_errors_not_other() -> None:
    text = ("GPU 0: NVIDIA GeForce RTX 4090 (UUID: GPU-aaaa)\n"
            "Unable to determine the device handle for gpu 0000:2A:00.0:\n"
            "GPU is lost. Reboot the system to recover this GPU\n")
    lst = nvsmi_list.parse(Doc(text))
    assert lst.other == [] and [(e.kind, e.bus_id, e.detail) for e in lst.errors] == [
        ("gpu_lost", "0000:2A:00.0", "GPU is lost. Reboot the system to recover this GPU")]
    assert not nvsmi_list.SmiList().recognised and nvsmi_list.SmiList().mig_devices == 0


def test_smi_L_name_without_parentheses_and_empty_name() -> None:
    lst = nvsmi_list.parse(Doc("GPU 0: NVIDIA H100 80GB HBM3\nGPU 1: (UUID: GPU-x)\n"))
    assert [(g.index, g.name, g.uuid) for g in lst.gpus] == [(0, "NVIDIA H100 80GB HBM3", None), (1, None, "GPU-x")]


@pytest.mark.parametrize(("text", "command", "want"), [
    (L3, "", True),
    ("GPU 0: Tesla M2090 (S/N: 0323711004472)\n", "", True),
    ("GPU 0: NVIDIA H100 80GB HBM3\n", "", False),  # no UUID: not -L for sure
    ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n\t Link 0: 26.562 GB/s\n", "", False),
    ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\nNVML: Unable to retrieve NVLink information as all links are "
     "inactive\n", "", False),
    ("env line\nGPU 0: A (UUID: GPU-1)\n", "", True),  # as many -L lines as others
    ("env line\nother line\nGPU 0: A (UUID: GPU-1)\n", "", False),
    ("env line\nother line\nGPU 0: A (UUID: GPU-1)\n", "nvidia-smi -L", True),
    ("env line\nother line\nGPU 0: A (UUID: GPU-1)\n", "nvidia-smi --list-gpus", True),
    ("env line\nother line\nGPU 0: A (UUID: GPU-1)\n", "nvidia-smi -q", False),
    ("a\nb\nGPU 0: A (UUID: GPU-1)\nUnable to determine the device handle for gpu 0000:2A:00.0: Unknown Error\n", "",
     True),
])
def test_smi_L_detector(text: str, command: str, want: bool) -> None:
    assert nvsmi_list.detect(Doc(text, command=command)) is want


# --------------------------------------------------------------------------- nvlink


def test_nvlink_links_states_and_other_lines() -> None:
    text = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaa)\n\t Link 0: 26.562 GB/s\n\t Link 1: <inactive>\n"
            "\t Link 2: 0 GB/s\n\t Link 3: inactive\n\t Link 4: Replay Errors: 0\n\t some note\n\n"
            "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-bbbb)\n"
            "\t NVML: Unable to retrieve NVLink information as all links are inActive\n")
    rep = nvlink.parse(Doc(text))
    g0, g1 = rep.gpus
    assert (g0.index, g0.name, g0.uuid, g0.line) == (0, "NVIDIA H100 80GB HBM3", "GPU-aaaa",
                                                      "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaa)")
    half = nvlink.parse(Doc("GPU 0: A (UUID: GPU-1)\n\t Link 0: 0.5 GB/s\n")).gpus[0].links[0]
    assert half.up and half.gbps == 0.5
    assert [(ln.n, ln.up, ln.gbps, ln.line) for ln in g0.links] == [
        (0, True, 26.562, "Link 0: 26.562 GB/s"), (1, False, None, "Link 1: <inactive>"),
        (2, False, 0.0, "Link 2: 0 GB/s"), (3, False, None, "Link 3: inactive")]
    assert [ln.n for ln in g0.up] == [0] and [ln.n for ln in g0.down] == [1, 2, 3]
    assert g0.other == [] and g0.notes == ["some note"] and not g0.all_inactive
    assert [(c.link, c.name, c.value, c.text, c.kind) for c in g0.counters] == [(4, "Replay Errors", 0, "0", "replay")]
    assert g1.all_inactive and g1.links == [] and g1.other == []
    assert rep.other == [] and rep.unparsed == [] and rep.recognised


def test_nvlink_lines_before_the_first_gpu() -> None:
    text = ("Unable to determine the device handle for GPU 0000:9D:00.0: Unknown Error\nstray text\n"
            "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaa)\n\t Link 0: 26.562 GB/s\n")
    rep = nvlink.parse(Doc(text))
    assert rep.unparsed == ["stray text"] and [e.bus_id for e in rep.errors] == ["0000:9D:00.0"]
    assert len(rep.gpus) == 1 and len(rep.gpus[0].links) == 1
    empty = nvlink.NvlinkReport()
    assert not empty.recognised and empty.other == [] and nvlink.NvlinkGpu(0, "", "", "").all_inactive is False


@pytest.mark.parametrize(("text", "want"), [
    ("GPU 0: A (UUID: GPU-1)\n\t Link 0: 25 GB/s\n", True),
    ("GPU 0: A (UUID: GPU-1)\n\t NVML: Unable to retrieve NVLink information as all links are inactive\n", True),
    ("GPU 0: A (UUID: GPU-1)\n", False),
    ("\t Link 0: 25 GB/s\n", False),
])
def test_nvlink_detector(text: str, want: bool) -> None:
    assert nvlink.detect(Doc(text)) is want


# --------------------------------------------------------------------------- topo


def test_topo_header_devices() -> None:
    assert topo.header_devices("\tGPU0\tGPU1\tmlx5_bond_0\tCPU Affinity\tNUMA Affinity") == ["GPU0", "GPU1",
                                                                                           "mlx5_bond_0"]
    assert topo.header_devices("GPU0GPU1NIC0CPU AffinityNUMA AffinityGPU NUMA ID") == ["GPU0", "GPU1", "NIC0"]
    assert topo.header_devices("GPU0GPU1mlx5_2CPU Affinity") == ["GPU0", "GPU1", "mlx5_2"]
    assert topo.header_devices("\tGPU0\tGPU1") == ["GPU0", "GPU1"]
    assert topo.header_devices("GPU0") == ["GPU0"]
    assert topo.header_devices("  GPU0   GPU1  CPU Affinity NUMA Affinity") == ["GPU0", "GPU1"]
    assert topo.header_devices("\tGPU0\tGPU1\tib0\tCPU Affinity") == ["GPU0", "GPU1", "ib0"]
    assert topo.header_devices("\tGPU0\tib0\tCPU Affinity") == ["GPU0", "ib0"]
    assert topo.header_devices("\tGPU0\tCPU Affinity") == ["GPU0"] and topo.header_devices("CPU Affinity") == []


def test_topo_cells_run_together_when_a_copy_lost_the_tabs() -> None:
    text = ("GPU0GPU1GPU2CPU AffinityNUMA AffinityGPU NUMA ID\nGPU0XNODENODE0-310N/A\nGPU1NODEXNODE0-310N/A\n"
            "GPU2NODENODEX0-310N/A\n")
    t = topo.parse(Doc(text))
    assert t.gpus == ["GPU0", "GPU1", "GPU2"] and t.short == []
    assert t.matrix["GPU1"] == {"GPU0": "NODE", "GPU1": "X", "GPU2": "NODE"}
    assert t.affinity["GPU2"] == {"CPU Affinity": "0-310N/A"}  # merged cells stay merged, never split by guess
    assert topo.detect(Doc(text))


def test_topo_short_row_and_legend_and_rows_not_in_the_header() -> None:
    text = ("\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\n"
            "GPU0\t X \tC2C\tPIX\t0-7\t0\n"
            "GPU1\tNV4\t X \tSYS\t8-15\t1\n"
            "NIC0\tPIX\tSYS\t X \n"
            "NIC7\tPIX\tSYS\t X \n\nNIC Legend:\n\n  NIC0: mlx5_4\n  NIC1 : mlx5_5 \n")
    t = topo.parse(Doc(text))
    assert t.devices == ["GPU0", "GPU1", "NIC0"] and t.gpus == ["GPU0", "GPU1"] and t.nics == ["NIC0"]
    assert t.matrix["GPU0"] == {"GPU0": "X"} and t.short == ["GPU0"]
    assert t.matrix["GPU1"] == {"GPU0": "NV4", "GPU1": "X", "NIC0": "SYS"}
    assert t.affinity["GPU1"] == {"CPU Affinity": "8-15", "NUMA Affinity": "1"}
    assert t.nic_legend == {"NIC0": "mlx5_4", "NIC1": "mlx5_5"} and t.nic_name("NIC0") == "mlx5_4"
    assert t.nic_name("NIC9") == "NIC9" and "NIC7" not in t.matrix
    assert t.lines["GPU1"] == "GPU1\tNV4\t X \tSYS\t8-15\t1" and t.header.startswith("GPU0")


def test_topo_lost_gpu_line_is_not_the_header() -> None:
    text = ("Unable to determine the device handle for GPU0000:9D:00.0: Unknown Error\n"
            "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV18\t0-1\nGPU1\tNV18\t X \t0-1\n")
    t = topo.parse(Doc(text))
    assert t.header == "GPU0\tGPU1\tCPU Affinity" and t.gpus == ["GPU0", "GPU1"] and t.errors[0].kind == "gpu_lost"
    assert topo.parse(Doc("GPU0\t X \tNV18\n")).header == "" and not topo.TopoMatrix().recognised
    assert topo.parse(Doc("GPU0 CPU Affinity\nGPU0  X  0-1\n")).matrix == {"GPU0": {"GPU0": "X"}}
    assert topo.parse(Doc("\tCPU Affinity GPU0\nGPU0 X\n")).devices == []


@pytest.mark.parametrize(("text", "want"), [
    ("\tGPU0\tCPU Affinity\nGPU0\t X \t0-1\n", True),
    ("GPU0\t X \t0-1\n", False),
    ("\tGPU0\nGPU0XNV4\n", True),
    ("\tGPU0\nGPU0 Xeon\n", False),
    ("\tGPU1\nGPU1\t X \n", False),
])
def test_topo_detector(text: str, want: bool) -> None:
    assert topo.detect(Doc(text)) is want


# --------------------------------------------------------------------------- tool errors

LOST = "Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error"


def one_error(text: str) -> ToolError:
    [e] = errors_in(text.splitlines())
    return e


@pytest.mark.parametrize(("line", "bus", "detail"), [
    (LOST, "0000:0B:00.0", "Unknown Error"),
    ("Unable to determine the device handle for GPU0000:17:00.0: Unknown Error", "0000:17:00.0", "Unknown Error"),
    ("Unable to determine the device handle for GPU0: 0000:23:00.0: Unknown Error", "0000:23:00.0", "Unknown Error"),
    ("Unable to determine the device handle for gpu 0000:23:00.0: GPU is lost", "0000:23:00.0", "GPU is lost"),
    ("Unable to detect the device handle for GPU 00000000:B1:00.0: Not Found", "00000000:B1:00.0", "Not Found"),
    ("Unable to determine the device handle for GPU 000:BA:80.0: Unknown Error", "000:BA:80.0", "Unknown Error"),
    ("agent: nvidia-smi said Unable to determine the device handle for GPU 0000:0B:00.0: Timeout", "0000:0B:00.0",
     "Timeout"),
    ("Unable to determine the device handle for GPU: Unknown Error", "", "Unknown Error"),
])
def test_device_handle_spellings(line: str, bus: str, detail: str) -> None:
    e = one_error(line)
    assert e == ToolError("gpu_lost", line, "a GPU does not answer the driver", nvsmi_errors.LOST_REMEDY, bus, detail)
    assert e.lines == (line,)


def test_device_handle_detail_on_the_next_line_and_explanation_lines() -> None:
    text = ("Unable to determine the device handle for gpu 0000:01:00.0:\n"
            "GPU is lost. Reboot the system to recover this GPU\n")
    e = one_error(text)
    assert (e.kind, e.bus_id, e.detail, e.more) == ("gpu_lost", "0000:01:00.0",
                                                    "GPU is lost. Reboot the system to recover this GPU",
                                                    ("GPU is lost. Reboot the system to recover this GPU",))
    assert e.lines == ("Unable to determine the device handle for gpu 0000:01:00.0:",
                       "GPU is lost. Reboot the system to recover this GPU")
    power = ("Unable to determine the device handle for GPU 0000:02:00.0: Unable to communicate with GPU because it "
             "is insufficiently powered.\nThis may be because not all required external power cables are\n"
             "attached, or the attached cables are not seated properly.\n")
    p = one_error(power)
    assert (p.kind, p.bus_id, p.summary) == ("insufficient_power", "0000:02:00.0",
                                             "a GPU does not get enough power to start")
    assert p.more == ("This may be because not all required external power cables are",
                      "attached, or the attached cables are not seated properly.")
    assert p.remedy.startswith("check the GPU's auxiliary power cables")
    # the next line is not taken as the detail where the message has its own, or where it is not an error string
    two = errors_in(["Unable to determine the device handle for gpu 0000:01:00.0:", "GPU 1: A (UUID: GPU-1)"])
    assert [(e.detail, e.more) for e in two] == [("", ())]
    last = errors_in(["Unable to determine the device handle for gpu 0000:01:00.0:"])
    assert [(e.detail, e.more) for e in last] == [("", ())]
    chained = errors_in(["Unable to determine the device handle for gpu 0000:01:00.0:",
                         "Unable to determine the device handle for gpu 0000:02:00.0: Unknown Error"])
    assert [(e.bus_id, e.detail) for e in chained] == [("0000:01:00.0", ""), ("0000:02:00.0", "Unknown Error")]


@pytest.mark.parametrize(("detail", "kind", "summary", "remedy"), [
    ("GPU requires reset", "needs_reset", "a GPU needs a reset before it can be used", "drain the node and reset"),
    ("Insufficient External Power", "insufficient_power", "a GPU does not get enough power to start", "check the"),
    ("Insufficient Permissions", "no_permission", "the user that ran nvidia-smi may not open this GPU",
     "check the permissions of /dev/nvidia*"),
    ("No Permission", "no_permission", "the user that ran nvidia-smi may not open this GPU", "check the"),
])
def test_device_handle_detail_kinds(detail: str, kind: str, summary: str, remedy: str) -> None:
    e = one_error(f"Unable to determine the device handle for GPU 0000:41:00.0: {detail}")
    assert (e.kind, e.bus_id, e.detail, e.summary) == (kind, "0000:41:00.0", detail, summary)
    assert e.remedy.startswith(remedy) and e.pci == "0000:41:00"


@pytest.mark.parametrize(("line", "kind", "summary", "remedy"), [
    ("Failed to initialize NVML: Driver/library version mismatch", "version_mismatch",
     "the loaded NVIDIA kernel module and the user-space driver library differ", "a driver upgrade without a reboot"),
    ("NVML/RM version mismatch", "version_mismatch", "", ""),
    ("nvml.NVMLError_LibRmVersionMismatch", "version_mismatch", "", ""),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA "
     "driver is installed and running.", "no_driver", "the NVIDIA kernel driver is not loaded", "load the driver"),
    ("NVIDIA-SMI has failed because it couldn't communicate with NVIDIA driver. Make sure that latest NVIDIA driver "
     "is installed and running.", "no_driver", "", ""),
    ("NVIDIA: could not open the device file /dev/nvidiactl (No such file or directory).", "no_driver", "", ""),
    ("Failed to initialize NVML: Driver Not Loaded", "no_driver", "", ""),
    ("pynvml.NVMLError_DriverNotLoaded: Driver Not Loaded", "no_driver", "", ""),
    ("Unable to load the NVIDIA kernel module", "no_driver", "", ""),
    ("NVIDIA kernel module missing. Falling back to nouveau", "no_driver", "", ""),
    ("[GPU is lost]", "gpu_lost", "a GPU does not answer the driver", "the GPU fell off the bus"),
    ("pynvml.NVMLError_GpuIsLost: GPU is lost", "gpu_lost", "", ""),
    ("[GPU requires reset]", "needs_reset", "a GPU needs a reset before it can be used", "drain the node"),
    ("NVMLError_ResetRequired", "needs_reset", "", ""),
    ("Unable to reset this GPU because it's being used by some other process", "reset_failed",
     "a GPU reset did not happen", "stop every process holding the GPU"),
    ("Unable to reset GPU 00000000:55:00.0", "reset_failed", "", ""),
    ("No devices were found", "no_devices", "the driver is loaded but finds no GPU", "check the PCIe link"),
    ("No devices found.", "no_devices", "", ""),
    ("No devices found", "no_devices", "", ""),
    ("No NVIDIA GPU found", "no_devices", "", ""),
    ("NVML: device count is 0", "no_devices", "", ""),
    ("NVML Shared Library Not Found", "library_missing",
     "the NVML library (libnvidia-ml.so) was not found", "install the NVIDIA"),
    ("pynvml.NVMLError_LibraryNotFound", "library_missing", "", ""),
    ("libnvidia-ml.so.1: cannot open shared object file", "library_missing", "", ""),
    ("NVIDIA-SMI couldn't find libnvidia-ml.so library in your system.", "library_missing", "", ""),
    ("bash: nvidia-smi: command not found", "library_missing", "", ""),
    ("WARNING: infoROM is corrupted at gpu 0000:04:00.0", "inforom_corrupted", "a GPU's infoROM is corrupted",
     "the GPU still works"),
    ("Failed to initialize NVML: Unknown Error", "nvml_init", "NVML could not be initialised", "run nvidia-smi by hand"),
    ("pynvml.NVMLError_Uninitialized", "nvml_init", "", ""),
    ("pynvml cannot be imported: No module named pynvml", "nvml_init", "", ""),
    ("NVIDIA-SMI has failed because of something new", "nvml_init", "", ""),
])
def test_every_message_kind(line: str, kind: str, summary: str, remedy: str) -> None:
    e = one_error(line)
    assert e.kind == kind and e.line == line
    if summary:
        assert e.summary == summary and e.remedy.startswith(remedy)
        assert nvsmi_errors.error_for(kind, "x") == ToolError(kind, "x", summary, e.remedy)


def test_inforom_names_its_gpu_and_error_for_unknown_kind() -> None:
    e = one_error("WARNING: infoROM is corrupted at gpu 0000:04:00.0")
    assert (e.bus_id, e.pci) == ("0000:04:00.0", "0000:04:00")
    assert nvsmi_errors.error_for("made_up", "x") == ToolError(
        "made_up", "x", "GPU tooling error", "run nvidia-smi by hand on the node and check dmesg")
    assert ToolError("gpu_lost", "l", "s", "r").pci == ""


@pytest.mark.parametrize("line", ["Disabled persistence mode for GPU 00000000:18:00.0.", "All done.",
                                  "GPU 00000000:55:00.0 was successfully reset.", "", "   ", "GPU 0: A (UUID: x)"])
def test_benign_lines(line: str) -> None:
    assert errors_in([line]) == []


def test_reset_block_and_gpu_lines_under_it() -> None:
    text = ("The following GPUs could not be reset:\n"
            "  GPU 00000000:55:00.0: In use by another client\n"
            "  GPU 00000000:56:00.0: GPU reset failed\n")
    errs = errors_in(text.splitlines())
    assert [(e.kind, e.bus_id, e.detail) for e in errs] == [("reset_failed", "00000000:55:00.0", "In use by another client"),
                                                            ("reset_failed", "00000000:56:00.0", "GPU reset failed")]
    # the same GPU line without the block header is not a reset failure (another message in it still counts)
    assert errors_in(["GPU 00000000:55:00.0: In use by another client"]) == []
    [e] = errors_in(["GPU 00000000:55:00.0: reset failed, No devices were found"])
    assert e.kind == "no_devices"


def test_one_message_per_gpu_and_kind() -> None:
    errs = errors_in([LOST, f"agent: {LOST}", "GPU is lost", LOST.replace("0B", "0C"),
                      "Failed to initialize NVML: Unknown Error", "Failed to initialize NVML: Unknown Error"])
    assert [(e.kind, e.bus_id) for e in errs] == [("gpu_lost", "0000:0B:00.0"), ("gpu_lost", "0000:0C:00.0"),
                                                 ("nvml_init", "")]
    # a bare message of a kind no GPU is named for stays
    assert [e.kind for e in errors_in(["GPU is lost", "[GPU requires reset]"])] == ["gpu_lost", "needs_reset"]
    both = errors_in([LOST, "Unable to determine the device handle for GPU 0000:0B:00.0: GPU requires reset"])
    assert [e.kind for e in both] == ["gpu_lost", "needs_reset"]


@pytest.mark.parametrize(("text", "want"), [
    (LOST, True),
    ("Failed to initialize NVML: Driver/library version mismatch", True),
    ("No devices found.", True),
    ("some tool: No devices found in the system", False),
    ("NVIDIA-SMI couldn't find libnvidia-ml.so library in your system.", True),
    ("The following GPUs could not be reset:", True),
    ("[GPU requires reset]", True),
    ("Unable to detect the device handle for GPU0000:B1:00.0: Unknown Error", True),
    (LOST + "\nGPU 0: A (UUID: GPU-1)\n", False),
    (LOST + "\n|=====|\n", False),
    (LOST + "\n|   0  NVIDIA A10   On  | 00000000:17:00.0 Off |   0 |\n", False),
    (LOST + "\nindex, name\n", False),
    (LOST + "\nGPU 00000000:17:00.0\n", False),
    ("The following GPUs could not be reset:\n  GPU 00000000:55:00.0: In use by another client\n", True),
    (LOST + "\n==============NVSMI LOG==============\n", False),
    (LOST + "\nGPU0\t X \tNV18\n", False),
    (LOST + "\n\t Link 0: 26.562 GB/s\n", False),
    ("nothing here", False),
])
def test_error_detector(text: str, want: bool) -> None:
    assert nvsmi_errors.detect(Doc(text)) is want


def test_find_and_first_line() -> None:
    doc = Doc("\n\n" + LOST + "\n")
    assert [e.bus_id for e in nvsmi_errors.find(doc)] == ["0000:0B:00.0"]
    first = nvsmi_errors.first_line(doc)
    assert first is not None and first.text == LOST and nvsmi_errors.first_line(Doc("\n \n")) is None


# --------------------------------------------------------------------------- csv between rows


def test_csv_explanation_lines_with_commas_are_the_message_not_rows() -> None:
    text = ("index, name, pci.bus_id\n0, NVIDIA RTX A6000, 00000000:01:00.0\n"
            "Unable to determine the device handle for GPU1: 0000:02:00.0: Unable to communicate with GPU because it "
            "is insufficiently powered.\nThis may be because not all required external power cables are\n"
            "attached, or the attached cables are not seated properly.\n")
    q = facts_of("nvidia-smi-query", text)
    assert len(q.gpus) == 1 and q.bad_rows == [] and q.other == []
    assert [(e.kind, e.bus_id) for e in q.errors] == [("insufficient_power", "0000:02:00.0")]


def test_csv_other_lines_kept() -> None:
    q = facts_of("nvidia-smi-query", 'Field "mig.mode.current" is not a valid field to query.\n')
    assert q.other == ['Field "mig.mode.current" is not a valid field to query.'] and not q.recognised
