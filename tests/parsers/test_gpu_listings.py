"""GPU listings as operators paste them: --query-gpu CSV variants, -L, nvlink, topo, and how
gpu.inventory / gpu.nvlink / gpu.topology grade what those parsers read."""

from __future__ import annotations

import pytest

from preflight.model import Status
from tests.conftest import facts_of, fixture_text, grade_text

HEADER = "index, name, pci.bus_id, memory.total [MiB], mig.mode.current"
ROW = "{i}, NVIDIA H100 80GB HBM3, 00000000:{bus}:00.0, 81559 MiB, Disabled"
BUSES = ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]


def csv8(*, replace: dict[int, str] | None = None) -> str:
    rows = [ROW.format(i=i, bus=b) for i, b in enumerate(BUSES)]
    for i, text in (replace or {}).items():
        rows[i] = text
    return "\n".join([HEADER, *rows]) + "\n"


def inventory(text: str, profile: str = "generic"):
    [r] = grade_text("gpu.inventory", {"nvidia-smi-query": text}, profile)
    return r


def test_extra_cell_is_an_unreadable_gpu_not_a_missing_one() -> None:
    text = csv8(replace={5: ROW.format(i=5, bus="AB") + ", surplus"})
    q = facts_of("nvidia-smi-query", text)
    assert len(q.gpus) == 7 and [b.n for b in q.bad_rows] == [7] and "more than the header's 5" in q.bad_rows[0].why
    r = inventory(text, "h100-sxm-8x")
    assert r.status is Status.ERROR, r.summary
    assert "could not be read" in r.summary and "line 7" in r.summary
    assert "of 8 GPUs visible" not in r.summary
    assert any("surplus" in e for e in r.evidence) and r.facts["unreadable_rows"] == [7]


def test_missing_cell_is_an_unreadable_gpu() -> None:
    r = inventory(csv8(replace={2: "2, NVIDIA H100 80GB HBM3, 00000000:3A:00.0, 81559 MiB"}))
    assert r.status is Status.ERROR and "fewer than the header's 5" in r.summary


def test_quoted_name_with_commas() -> None:
    text = HEADER + '\n0, "NVIDIA H100 80GB HBM3, rev A", 00000000:18:00.0, 81559 MiB, Disabled\n'
    q = facts_of("nvidia-smi-query", text)
    assert q.gpus[0].name == "NVIDIA H100 80GB HBM3, rev A" and not q.bad_rows


def test_noheader_nounits_takes_fields_from_the_prompt() -> None:
    text = ("$ nvidia-smi --query-gpu=index,pci.bus_id,name,memory.total --format=csv,noheader,nounits\n"
            "0, 00000000:18:00.0, NVIDIA H100 80GB HBM3, 81559\n1, 00000000:9A:00.0, NVIDIA H100 80GB HBM3, 81559\n")
    q = facts_of("nvidia-smi-query", text)
    assert q.noheader and q.fields == ["index", "pci.bus_id", "name", "memory.total"]
    assert [g.bus_id for g in q.gpus] == ["00000000:18:00.0", "00000000:9A:00.0"] and q.gpus[1].memory_total_mib == 81559
    assert inventory(text).status is Status.PASS


def test_headerless_csv_of_unknown_fields_is_not_guessed() -> None:
    q = facts_of("nvidia-smi-query", "0, NVIDIA H100 80GB HBM3, 81559\n")
    assert not q.fields and not q.gpus


def test_looping_query_counts_each_gpu_once() -> None:
    header = "timestamp, index, pci.bus_id, utilization.gpu [%]"
    rows = [f"2026/11/20 10:00:0{s}.000, {i}, 00000000:{b}:00.0, {s * 10} %" for s in range(3)
            for i, b in enumerate(BUSES[:2])]
    q = facts_of("nvidia-smi-query", "\n".join([header, *rows]))
    assert len(q.rows) == 6 and len(q.gpus) == 2 and q.gpus[0].util == 20


@pytest.mark.parametrize("value", ["[GPU is lost]", "[GPU requires reset]", "[Unknown Error]"])
def test_cells_of_a_gpu_that_stopped_answering_fail_it(value: str) -> None:
    r = inventory(csv8(replace={3: f"3, NVIDIA H100 80GB HBM3, 00000000:5D:00.0, {value}, {value}"}))
    assert r.status is Status.FAIL and "GPU 3" in r.summary and value in r.summary


@pytest.mark.parametrize("value", ["[N/A]", "[Not Supported]", "N/A", "[Insufficient Permissions]",
                                   "[Requested functionality has been deprecated]"])
def test_not_available_cells_are_absent_values(value: str) -> None:
    q = facts_of("nvidia-smi-query", csv8(replace={0: f"0, NVIDIA H100 80GB HBM3, 00000000:18:00.0, {value}, {value}"}))
    assert q.gpus[0].memory_total_mib is None and q.gpus[0].mig_mode is None and not q.gpus[0].broken
    assert inventory(csv8(replace={0: f"0, NVIDIA H100 80GB HBM3, 00000000:18:00.0, {value}, {value}"})).status \
        is Status.PASS


def test_smi_L_lost_gpu_line() -> None:
    text = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n"
            "Unable to determine the device handle for GPU 00000000:2A:00.0: Unknown Error\n"
            "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-3)\n")
    lst = facts_of("nvidia-smi-L", text)
    assert len(lst.gpus) == 2 and lst.errors[0].kind == "gpu_lost" and lst.errors[0].pci == "0000:2a:00"
    [r] = grade_text("gpu.inventory", {"nvidia-smi-L": text})
    assert r.status is Status.FAIL and "00000000:2A:00.0 (Unknown Error)" in r.summary


def test_old_smi_L_without_uuid() -> None:
    lst = facts_of("nvidia-smi-L", "GPU 0: Tesla K80 (S/N: 0324114102927)\nGPU 1: Tesla K80 (S/N: 0324114102927)\n")
    assert [g.name for g in lst.gpus] == ["Tesla K80", "Tesla K80"]


def test_q_error_only_paste_is_a_lost_gpu() -> None:
    text = ("Unable to determine the device handle for GPU0: 0000:01:00.0: Unknown Error\n"
            "No devices were found\n")
    [r] = grade_text("gpu.inventory", {"nvidia-smi-q": text})
    assert r.status is Status.FAIL and "no usable GPU" in r.summary and "0000:01:00.0" in r.summary


def test_nvlink_listing_of_one_gpu_grades_that_gpu_only() -> None:
    text = "GPU 6: NVIDIA A100-SXM4-80GB (UUID: GPU-9667)\n" + "".join(
        f"\t Link {n}: 25 GB/s\n" for n in range(12))
    [r] = grade_text("gpu.nvlink", {"nvidia-smi-nvlink": text})
    assert r.status is Status.PASS and "12 NVLinks up on 1 GPU(s)" in r.summary


def test_nvlink_all_inactive_on_pcie_board_is_not_a_fault() -> None:
    text = ("GPU 0: NVIDIA A100 80GB PCIe (UUID: GPU-1)\n"
            "\t NVML: Unable to retrieve NVLink information as all links are inactive\n")
    [r] = grade_text("gpu.nvlink", {"nvidia-smi-nvlink": text})
    assert r.status is Status.PASS


def test_topology_with_nics_none_local_warns_on_generic() -> None:
    text = fixture_text("topo/topo_8xh100_10nic_ok.txt")
    rows = []
    for ln in text.splitlines():
        if ln.startswith("GPU"):
            ln = ln.replace("PIX", "SYS")
        rows.append(ln)
    [r] = grade_text("gpu.topology", {"nvidia-smi-topo": "\n".join(rows)})
    assert r.status is Status.WARN and "0 GPU(s) with a local NIC" in r.summary
    [ok] = grade_text("gpu.topology", {"nvidia-smi-topo": text})
    assert ok.status is Status.PASS and "8 GPU(s) with a local NIC" in ok.summary
