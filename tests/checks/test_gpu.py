"""gpu.inventory, gpu.nvlink, gpu.topology: parsers and graders on the project's fixtures."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from preflight import engine, registry
from preflight.checks import gpu
from preflight.framing import Doc
from preflight.grading import FactStore
from preflight.model import Capture, CaptureState, Result, Status
from preflight.parsers import nvml, nvsmi_csv, nvsmi_list, nvsmi_table
from preflight.parsers import topo as topo_parser
from tests.conftest import capture, facts_of, fixture_text, grade


def store(caps: dict[str, Capture]) -> FactStore:
    return FactStore(registry.load(), captures=caps)


def one(results: list[Result]) -> Result:
    assert len(results) == 1
    return results[0]


# --------------------------------------------------------------------------- query csv


def test_query_csv_parses_units_and_na() -> None:
    q = facts_of("nvidia-smi-query", fixture_text("nvidia-smi/query_wide_fields_570.csv"))
    assert "memory.total" in q.fields and "power.draw" in q.fields
    assert len(q.gpus) == 2 and q.driver == "570.86.15" and q.header_found and not q.bad_rows
    g = q.gpus[1]
    assert g.index == 1 and g.name == "NVIDIA H100 80GB HBM3"
    assert g.pcie_gen == 5 and g.pcie_width_max == 16 and g.memory_total_mib == 81559
    assert g.mig_mode is None  # [N/A]
    assert g.persistence is True
    assert q.rows[0]["display_mode"] == "[Requested functionality has been deprecated]"


def test_query_csv_detector_is_specific() -> None:
    assert nvsmi_csv.detect(Doc(fixture_text("nvidia-smi/query_8xh100_ok.csv")))
    assert not nvsmi_csv.detect(Doc("pid, process_name, used_gpu_memory [MiB]\n1, a, 2 MiB\n"))
    assert not nvsmi_csv.detect(Doc("a,b,c\n1,2,3\n"))
    assert not nvsmi_csv.detect(Doc(fixture_text("nvidia-smi/smi_L_8xh100.txt")))


@pytest.mark.parametrize("text", ["", "garbage\x00\x01", "index, name\n0", "index, name\n0, A, extra, cells\n",
                                  "\n\n", "index, name, uuid\n\"unterminated"])
def test_query_csv_garbage_never_raises(text: str) -> None:
    q = facts_of("nvidia-smi-query", text)
    assert isinstance(q.gpus, list)


def test_inventory_pass_8xh100() -> None:
    r = one(grade("gpu.inventory", {"nvidia-smi-query": capture("nvidia-smi-query",
                                                                 fixture_text("nvidia-smi/query_8xh100_ok.csv"))},
                  profile="h100-sxm-8x"))
    assert r.status is Status.PASS, r.summary
    assert r.facts["count"] == 8 and r.facts["models"] == ["NVIDIA H100 80GB HBM3"]
    assert r.facts["driver"] == "535.154.05"
    assert r.facts["gpus"][3]["pcie_gen"] == 5


def test_inventory_count_short_names_present_gpus() -> None:
    r = one(grade("gpu.inventory", {"nvidia-smi-query": capture(
        "nvidia-smi-query", fixture_text("nvidia-smi/query_7of8_gpu5_missing.csv"))}, profile="h100-sxm-8x"))
    assert r.status is Status.FAIL
    assert "7 of 8" in r.summary and "index 5 missing" in r.summary
    assert any("00000000:DF:00.0" in e for e in r.evidence)
    assert any("gpu.count = 8" in e for e in r.evidence)
    assert "Xid 79" in r.remedy
    assert r.facts["count"] == 7


def test_inventory_odd_count_split_unevenly_over_sockets_fails_on_generic() -> None:
    """7 GPUs, 4 under the first CPU's root complexes and 3 under the second: one is missing."""
    r = one(grade("gpu.inventory", {"nvidia-smi-query": capture(
        "nvidia-smi-query", fixture_text("nvidia-smi/query_7of8_gpu5_missing.csv"))}, profile="generic"))
    assert r.status is Status.FAIL and "a GPU is probably missing (4 on one CPU socket, 3 on the other)" in r.summary
    assert any("gpu.expect_symmetric_sockets" in e for e in r.evidence)


def test_inventory_socket_rule_spares_vms_even_counts_and_site_counts() -> None:
    text = fixture_text("nvidia-smi/query_7of8_gpu5_missing.csv")
    vm = text.replace("00000000:", "00000001:")  # a VM's passthrough domain: no socket layout to read
    assert one(grade("gpu.inventory", {"nvidia-smi-query": capture("nvidia-smi-query", vm)})).status is Status.PASS
    even = "\n".join(ln for ln in text.splitlines() if not ln.startswith("7,"))  # 4 + 2
    assert one(grade("gpu.inventory", {"nvidia-smi-query": capture("nvidia-smi-query", even)})).status is Status.PASS


def test_inventory_lost_gpu_line_fails_even_on_generic() -> None:
    r = one(grade("gpu.inventory", {"nvidia-smi-query": capture(
        "nvidia-smi-query", fixture_text("nvidia-smi/query_gpu_lost.csv"), rc=15)}, profile="generic"))
    assert r.status is Status.FAIL
    assert "0000:9D:00.0" in r.summary
    assert r.facts["lost"] == ["0000:9D:00.0"]
    assert any(e.startswith("Unable to determine the device handle") for e in r.evidence)


def test_inventory_driver_failure_is_fail_with_reason() -> None:
    r = one(grade("gpu.inventory", {"nvidia-smi-query": capture(
        "nvidia-smi-query", fixture_text("nvidia-smi/query_driver_failed.txt"), rc=9)}, profile="h100-sxm-8x"))
    assert r.status is Status.FAIL
    assert "couldn't communicate" in r.summary
    assert "lsmod" in r.remedy


def test_inventory_garbage_is_error_not_exception() -> None:
    r = one(grade("gpu.inventory", {"nvidia-smi-query": capture("nvidia-smi-query", "\x00\x01 what is this")},
                  profile="h100-sxm-8x"))
    assert r.status is Status.ERROR
    assert r.evidence


def test_inventory_missing_tool_is_skip_or_fail() -> None:
    missing = Capture("nvidia-smi-query", ["nvidia-smi"], CaptureState.MISSING, reason="nvidia-smi not found on PATH")
    # SKIP where the profile does not require nvidia-smi, FAIL where it does (both built-ins do)
    assert one(grade("gpu.inventory", {"nvidia-smi-query": missing}, profile="generic")).status in (Status.SKIP,
                                                                                                 Status.FAIL)
    r = one(grade("gpu.inventory", {"nvidia-smi-query": missing}, profile="h100-sxm-8x"))
    assert r.status is Status.FAIL and "nvidia-smi" in r.summary


def test_inventory_mig_and_persistence() -> None:
    cap = capture("nvidia-smi-query", fixture_text("nvidia-smi/query_mig_persistence.csv"))
    r = one(grade("gpu.inventory", {"nvidia-smi-query": cap}, profile="h100-sxm-8x"))
    assert r.status is Status.FAIL
    assert r.summary.startswith("MIG enabled on GPU 1")
    assert "persistence mode off on GPU 7" in r.summary and "MIG will turn on" in r.summary
    ev = "\n".join(r.evidence)
    assert "mig.mode.current=Enabled" in ev  # GPU 1
    assert "mig.mode.pending=Enabled" in ev  # GPU 3 pending
    assert "persistence_mode=Disabled" in ev  # GPU 7
    assert "nvidia-smi -i <index> -mig 0" in r.remedy and "nvidia-persistenced" in r.remedy
    assert "gpu.inventory/mig-not-allowed" in r.facts["codes"] and "gpu.inventory/mig-pending" in r.facts["codes"]
    # generic allows MIG: a WARN a site may turn into a pass; persistence is not required there
    g = one(grade("gpu.inventory", {"nvidia-smi-query": cap}, profile="generic"))
    assert g.status is Status.WARN and g.summary.startswith("MIG enabled on GPU 1")
    assert "gpu.inventory/mig-enabled" in g.facts["codes"] and "gpu.inventory/persistence-off" not in g.facts["codes"]


def test_inventory_pcie_width_and_capped_gen_fail_idle_downshift_is_noted() -> None:
    cap = capture("nvidia-smi-query", fixture_text("nvidia-smi/query_pcie_degraded.csv"))
    r = one(grade("gpu.inventory", {"nvidia-smi-query": cap}, profile="h100-sxm-8x"))
    assert r.status is Status.FAIL
    assert "below x16" in r.summary and "GPU 2" in r.summary
    ev = "\n".join(r.evidence)
    assert "pcie.link.width.current=8" in ev
    assert "GPU 6" in ev and "pcie.link.gen.max=4" in ev
    assert "power-saving downshift" in ev and "GPU 4" in ev  # P8 at Gen1: noted, not graded


def test_inventory_p0_slow_gen_is_warn() -> None:
    cap = capture("nvidia-smi-query", fixture_text("nvidia-smi/query_p0_slow_gen.csv"))
    r = one(grade("gpu.inventory", {"nvidia-smi-query": cap}, profile="h100-sxm-8x"))
    assert r.status is Status.WARN
    assert "P0" in r.summary and "GPU 0" in r.summary


def test_inventory_model_mismatch() -> None:
    cap = capture("nvidia-smi-table", fixture_text("nvidia-smi/table_525_2xa10.txt"))
    r = one(grade("gpu.inventory", {"nvidia-smi-table": cap}, profile="h100-sxm-8x", mode="analyze"))
    assert r.status is Status.FAIL
    assert any("NVIDIA A10" in e for e in r.evidence)
    assert any("gpu.model = NVIDIA H100 80GB HBM3" in e for e in r.evidence)


def test_inventory_sources_disagree_warns() -> None:
    caps = {"nvidia-smi-query": capture("nvidia-smi-query", fixture_text("nvidia-smi/query_8xh100_ok.csv")),
            "nvidia-smi-L": capture("nvidia-smi-L", fixture_text("nvidia-smi/smi_L_6of8_lost.txt"))}
    r = one(grade("gpu.inventory", caps, profile="h100-sxm-8x"))
    assert r.status is Status.FAIL  # the -L listing names a GPU it cannot open
    assert r.facts["counts_by_source"] == {"nvidia-smi-query": 8, "nvidia-smi-L": 6}
    assert any("nvidia-smi-L: 6 GPUs" in e for e in r.evidence)


# --------------------------------------------------------------------------- -L


def test_smi_L_counts_physical_gpus_not_mig_devices() -> None:
    parsed = facts_of("nvidia-smi-L", fixture_text("nvidia-smi/smi_L_2xa100_mig.txt"))
    assert len(parsed.gpus) == 2 and parsed.mig_devices == 5
    assert [g.mig_devices for g in parsed.gpus] == [4, 1]
    r = one(grade("gpu.inventory", {"nvidia-smi-L": capture("nvidia-smi-L",
                                                             fixture_text("nvidia-smi/smi_L_2xa100_mig.txt"))},
                  profile="generic", mode="analyze"))
    assert r.status is Status.WARN and r.facts["count"] == 2 and r.facts["mig_devices"] == 5
    assert r.facts["codes"] == ["gpu.inventory/mig-enabled"] and "GPU 0, GPU 1" in r.summary


def test_smi_L_detector() -> None:
    assert nvsmi_list.detect(Doc(fixture_text("nvidia-smi/smi_L_8xh100.txt")))
    assert nvsmi_list.detect(Doc(fixture_text("nvidia-smi/smi_L_6of8_lost.txt")))
    assert not nvsmi_list.detect(Doc(fixture_text("nvidia-smi/nvlink_8xh100_ok.txt")))
    assert not nvsmi_list.detect(Doc("GPU 0: something\nrandom text\n"))


# --------------------------------------------------------------------------- default table


def test_table_550_rows_and_header() -> None:
    text = fixture_text("nvidia-smi/table_550_8xh100_procs.txt")
    table = facts_of("nvidia-smi-table", text)
    rows = table.gpus
    assert [r["index"] for r in rows] == list(range(8))  # process rows are not GPUs
    r = rows[5]
    assert r["name"] == "NVIDIA H100 80GB HBM3" and r["persistence"] == "On"
    assert r["bus_id"] == "00000000:C3:00.0" and r["fan"] == "N/A" and r["temp"] == "35C"
    assert r["perf"] == "P0" and r["power_usage"] == "74W" and r["power_cap"] == "700W"
    assert r["memory_used"] == "5MiB" and r["memory_total"] == "81559MiB"
    assert r["util"] == "0%" and r["compute_mode"] == "Default" and r["ecc_uncorr"] == "0" and r["mig"] == "Disabled"
    assert (table.smi_version, table.driver, table.cuda) == ("550.127.05", "550.127.05", "12.4")


def test_table_525_layout_fan_err_and_na_power() -> None:
    rows = facts_of("nvidia-smi-table", fixture_text("nvidia-smi/table_525_2xa10.txt")).gpus
    assert len(rows) == 2
    assert rows[1]["fan"] == "ERR!" and rows[1]["power_usage"] == "N/A" and rows[1]["power_cap"] == "N/A"
    assert rows[1]["persistence"] == "Off" and rows[1]["ecc_uncorr"] == "2"
    assert rows[1]["compute_mode"] == "E. Process" and rows[1]["mig"] == "N/A"
    assert rows[0]["fan"] == "0%"


def test_table_590_mig_devices_table_ignored() -> None:
    text = fixture_text("nvidia-smi/table_590_1xh100_mig.txt")
    rows = facts_of("nvidia-smi-table", text).gpus
    assert len(rows) == 1 and rows[0]["mig"] == "Enabled" and rows[0]["util"] == "N/A"
    r = one(grade("gpu.inventory", {"nvidia-smi-table": capture("nvidia-smi-table", text)}, profile="h100-sxm-8x",
                  mode="analyze"))
    assert r.status is Status.FAIL and "MIG enabled" in "\n".join([r.summary, *r.evidence])


def test_table_without_blank_line_before_processes() -> None:
    text = fixture_text("nvidia-smi/table_550_8xh100_procs.txt").replace("\n\n", "\n")
    assert len(facts_of("nvidia-smi-table", text).gpus) == 8


@pytest.mark.parametrize("text", ["", "|===|", "| NVIDIA-SMI 1 Driver Version: 2 |\n|=====|\n|  x |\n", "+---+\n|\n"])
def test_table_garbage(text: str) -> None:
    assert isinstance(facts_of("nvidia-smi-table", text).gpus, list)


def test_table_detector() -> None:
    assert nvsmi_table.detect(Doc(fixture_text("nvidia-smi/table_525_2xa10.txt")))
    assert not nvsmi_table.detect(Doc(fixture_text("nvidia-smi/query_8xh100_ok.csv")))


# --------------------------------------------------------------------------- NVML JSON


def test_nvml_json_ok_grades_like_query() -> None:
    text = fixture_text("nvidia-smi/nvml_8xh100_ok.json")
    assert nvml.detect(Doc(text))
    r = one(grade("gpu.inventory", {"nvml": capture("nvml", text)}, profile="h100-sxm-8x", mode="analyze"))
    assert r.status is Status.PASS and r.facts["count"] == 8 and r.facts["cuda_version"] == "12.4"


def test_nvml_json_field_errors_tolerated() -> None:
    parsed = facts_of("nvml", fixture_text("nvidia-smi/nvml_1xh100_mig_notsupported.json"))
    assert parsed.ok and parsed.gpus[0].pcie_gen is None
    r = one(grade("gpu.inventory", {"nvml": capture("nvml", fixture_text("nvidia-smi/nvml_1xh100_mig_notsupported.json"))},
                  profile="generic", mode="analyze"))
    assert r.status is Status.WARN and r.facts["codes"] == ["gpu.inventory/mig-enabled"]  # MIG on, nothing else


def test_nvml_json_library_missing_is_error_alone_and_noted_beside_smi() -> None:
    bad = capture("nvml", fixture_text("nvidia-smi/nvml_libnotfound.json"))
    r = one(grade("gpu.inventory", {"nvml": bad}, profile="generic", mode="analyze"))
    assert r.status is Status.ERROR and r.facts["codes"] == ["gpu.inventory/nvml-unavailable"]
    assert any("NVMLError_LibraryNotFound" in e for e in r.evidence)
    ok = capture("nvidia-smi-query", fixture_text("nvidia-smi/query_8xh100_ok.csv"))
    r2 = one(grade("gpu.inventory", {"nvidia-smi-query": ok, "nvml": bad}, profile="h100-sxm-8x"))
    assert r2.status is Status.PASS


@pytest.mark.parametrize("text", ["", "not json", "[1, 2]", '{"ok": true, "gpus": [1, "x", null]}'])
def test_nvml_json_garbage(text: str) -> None:
    parsed = facts_of("nvml", text)
    assert isinstance(parsed.gpus, list) and (parsed.ok or parsed.tool_error() is not None)


# --------------------------------------------------------------------------- profile hint


def test_profile_hint_from_each_listing() -> None:
    h100 = ("NVIDIA H100 80GB HBM3", 8)
    assert gpu.profile_hint(store({"nvidia-smi-query": capture("nvidia-smi-query",
                                                         fixture_text("nvidia-smi/query_8xh100_ok.csv"))})) == h100
    assert gpu.profile_hint(store({"nvidia-smi-L": capture("nvidia-smi-L", fixture_text("nvidia-smi/smi_L_8xh100.txt"))})) == h100
    assert gpu.profile_hint(store({"nvidia-smi-table": capture(
        "nvidia-smi-table", fixture_text("nvidia-smi/table_550_8xh100_procs.txt"))})) == h100
    assert gpu.profile_hint(store({"nvml": capture("nvml", fixture_text("nvidia-smi/nvml_8xh100_ok.json"))})) == h100
    q = "Attached GPUs : 2\nGPU 00000000:01:00.0\n    Product Name : NVIDIA A10\nGPU 00000000:02:00.0\n    Product Name : NVIDIA A10\n"
    assert gpu.profile_hint(store({"nvidia-smi-q": capture("nvidia-smi-q", q)})) == ("NVIDIA A10", 2)
    assert gpu.profile_hint(store({})) == (None, None)
    assert gpu.profile_hint(store({"nvidia-smi-query": capture("nvidia-smi-query", "garbage")})) == (None, None)


def test_profile_hint_picks_h100_profile() -> None:
    registry.load()
    caps = {"nvidia-smi-query": capture("nvidia-smi-query", fixture_text("nvidia-smi/query_8xh100_ok.csv"))}
    assert engine.detect_profile_name(store(caps)) == "h100-sxm-8x"
    caps7 = {"nvidia-smi-query": capture("nvidia-smi-query", fixture_text("nvidia-smi/query_7of8_gpu5_missing.csv"))}
    assert engine.detect_profile_name(store(caps7)) == "generic"


def test_probes_declared() -> None:
    assert gpu.PROBE_NVML.commands[0][1] == "-c" and "b85decode" in gpu.PROBE_NVML.commands[0][2]  # shipped, packed
    q = gpu.PROBE_QUERY.commands[0]
    assert q[0] == "nvidia-smi" and q[-1] == "--format=csv" and "pci.bus_id" in q[1]
    assert gpu.PROBE_QUERY in engine.DETECT_PROBES


# --------------------------------------------------------------------------- nvlink


def nvlink(rel: str, profile: str = "h100-sxm-8x") -> Result:
    return one(grade("gpu.nvlink", {"nvidia-smi-nvlink": capture("nvidia-smi-nvlink", fixture_text(rel))},
                     profile=profile))


def test_nvlink_all_up() -> None:
    r = nvlink("nvidia-smi/nvlink_8xh100_ok.txt")
    assert r.status is Status.PASS
    assert r.facts["links_total"] == 144 and r.facts["links_down"] == 0
    assert r.facts["gpus"][0]["speeds_gbps"] == [26.562]


def test_nvlink_inactive_link_fails_with_lines() -> None:
    r = nvlink("nvidia-smi/nvlink_8xh100_gpu3_link7_down.txt")
    assert r.status is Status.FAIL and "GPU 3" in r.summary
    assert r.evidence[0].endswith(" / Link 7: <inactive>") and r.facts["links_down"] == 2  # GPU and link on one line
    assert "nvlink -e" in r.remedy
    # H100 SXM has 18 NVLinks by construction: a down link FAILs with the generic profile too
    g = nvlink("nvidia-smi/nvlink_8xh100_gpu3_link7_down.txt", "generic")
    assert g.status is Status.FAIL and any("nvlink.model_links[H100 80GB HBM3] = 18" in e for e in g.evidence)


def test_nvlink_down_on_unknown_model_warns_on_generic() -> None:
    text = fixture_text("nvidia-smi/nvlink_8xh100_gpu3_link7_down.txt").replace("H100 80GB HBM3", "Example GPU")
    r = one(grade("gpu.nvlink", {"nvidia-smi-nvlink": capture("nvidia-smi-nvlink", text)}, profile="generic"))
    assert r.status is Status.WARN and "node that uses NVLink" in r.summary


def test_nvlink_missing_link_counted_against_profile() -> None:
    r = nvlink("nvidia-smi/nvlink_8xh100_17links_gpu0.txt")
    assert r.status is Status.FAIL and "1 missing" in r.summary
    assert nvlink("nvidia-smi/nvlink_8xh100_17links_gpu0.txt", "generic").status is Status.FAIL  # 18 by model


def test_nvlink_slow_link_warns() -> None:
    r = nvlink("nvidia-smi/nvlink_8xh100_slow.txt")
    assert r.status is Status.WARN and r.facts["links_slow"] == 1
    assert any("13.281 GB/s" in e for e in r.evidence)


def test_nvlink_all_inactive_pcie_cards() -> None:
    assert nvlink("nvidia-smi/nvlink_2xa100_pcie_all_inactive.txt", "generic").status is Status.PASS
    r = nvlink("nvidia-smi/nvlink_2xa100_pcie_all_inactive.txt")
    assert r.status is Status.FAIL and "GPU 0 (18 missing)" in r.summary


def test_nvlink_empty_output() -> None:
    empty = {"nvidia-smi-nvlink": capture("nvidia-smi-nvlink", "")}
    assert one(grade("gpu.nvlink", empty, profile="generic")).status is Status.PASS
    r = one(grade("gpu.nvlink", empty, profile="h100-sxm-8x"))
    assert r.status is Status.FAIL and "no NVLink" in r.summary


def test_nvlink_garbage_and_failure() -> None:
    r = one(grade("gpu.nvlink", {"nvidia-smi-nvlink": capture("nvidia-smi-nvlink", "zzz\nqqq")}, profile="generic"))
    assert r.status is Status.ERROR
    fail = capture("nvidia-smi-nvlink", fixture_text("nvidia-smi/query_driver_failed.txt"), rc=9)
    assert one(grade("gpu.nvlink", {"nvidia-smi-nvlink": fail}, profile="h100-sxm-8x")).status is Status.FAIL


def test_nvlink_detector() -> None:
    from preflight.parsers import nvlink as nvlink_parser

    assert nvlink_parser.detect(Doc(fixture_text("nvidia-smi/nvlink_8xh100_slow.txt")))
    assert nvlink_parser.detect(Doc(fixture_text("nvidia-smi/nvlink_2xa100_pcie_all_inactive.txt")))
    assert not nvlink_parser.detect(Doc(fixture_text("nvidia-smi/smi_L_8xh100.txt")))


# --------------------------------------------------------------------------- topology


def topo(rel: str, profile: str = "h100-sxm-8x") -> Result:
    return one(grade("gpu.topology", {"nvidia-smi-topo": capture("nvidia-smi-topo", fixture_text(rel))},
                     profile=profile))


def test_topo_parse_dgx_like_with_ansi_and_legend() -> None:
    t = facts_of("nvidia-smi-topo", fixture_text("topo/topo_8xh100_10nic_ok.txt"))
    assert t.devices[:8] == [f"GPU{i}" for i in range(8)] and len(t.devices) == 18
    assert t.matrix["GPU3"]["NIC3"] == "PIX" and t.matrix["GPU3"]["GPU3"] == "X"
    assert t.nic_legend["NIC9"] == "mlx5_9"
    assert t.affinity["GPU5"] == {"CPU Affinity": "56-111,168-223", "NUMA Affinity": "1", "GPU NUMA ID": "N/A"}
    r = topo("topo/topo_8xh100_10nic_ok.txt")
    assert r.status is Status.PASS
    assert r.facts["gpu_count"] == 8 and r.facts["gpus_without_local_nic"] == []
    assert r.facts["gpus"][2]["local_nics"] == ["mlx5_2"]


def test_topo_pair_off_nvlink_fails() -> None:
    r = topo("topo/topo_8xh100_gpu2_gpu5_sys.txt")
    assert r.status is Status.FAIL and "GPU2-GPU5 SYS" in r.summary
    assert any(e.startswith("GPU2") for e in r.evidence)
    assert topo("topo/topo_8xh100_gpu2_gpu5_sys.txt", "generic").status is Status.PASS


def test_topo_fewer_nvlinks_warns() -> None:
    r = topo("topo/topo_8xh100_nv17.txt")
    assert r.status is Status.WARN and "NV17" in r.summary


def test_topo_gpu_without_local_nic() -> None:
    r = topo("topo/topo_8xh100_gpu6_no_local_nic.txt")  # the profile requires a local NIC per GPU
    assert r.status is Status.FAIL and r.facts["gpus_without_local_nic"] == ["GPU6"]
    assert r.facts["codes"] == ["gpu.topology/gpu-without-local-nic-required"]
    g = topo("topo/topo_8xh100_gpu6_no_local_nic.txt", "generic")  # NICs shown, GPU6 has none near it
    assert g.status is Status.WARN and g.facts["gpus_without_local_nic"] == ["GPU6"]
    assert g.facts["codes"] == ["gpu.topology/gpu-without-local-nic"] and "GPU6" in g.summary


def test_topo_spaces_and_merged_header() -> None:
    t = facts_of("nvidia-smi-topo", fixture_text("topo/topo_4xpcie_spaces_merged_header.txt"))
    assert t.devices == ["GPU0", "GPU1", "GPU2", "GPU3"]
    assert t.matrix["GPU2"] == {"GPU0": "SYS", "GPU1": "SYS", "GPU2": "X", "GPU3": "PIX"}
    assert t.affinity["GPU2"]["CPU Affinity"] == "24-47,72-95"
    assert topo("topo/topo_4xpcie_spaces_merged_header.txt", "generic").status is Status.PASS
    r = topo("topo/topo_4xpcie_spaces_merged_header.txt")
    assert r.status is Status.FAIL and "not on NVLink" in r.summary


def test_topo_cells_running_together_and_mlx_columns() -> None:
    t = facts_of("nvidia-smi-topo", fixture_text("topo/topo_2gpu_mlx_columns_merged_cells.txt"))
    assert t.devices == ["GPU0", "GPU1", "mlx5_0", "mlx5_1"]
    assert t.matrix["GPU0"] == {"GPU0": "X", "GPU1": "NV12", "mlx5_0": "PXB", "mlx5_1": "SYS"}
    r = topo("topo/topo_2gpu_mlx_columns_merged_cells.txt", "generic")
    assert r.status is Status.PASS and r.facts["gpus"][1]["local_nics"] == ["mlx5_1"]


def test_topo_single_gpu_no_nic_is_not_an_error() -> None:
    r = topo("topo/topo_1gpu_no_nic.txt", "generic")
    assert r.status is Status.PASS and r.facts["gpu_count"] == 1


@pytest.mark.parametrize("text", ["", "GPU0 X\n", "\x1b[4m\x1b[0m", "Legend:\n  X = Self\n"])
def test_topo_garbage_is_error(text: str) -> None:
    r = one(grade("gpu.topology", {"nvidia-smi-topo": capture("nvidia-smi-topo", text)}, profile="generic"))
    assert r.status is Status.ERROR and r.evidence


def test_topo_detector() -> None:
    assert topo_parser.detect(Doc(fixture_text("topo/topo_1gpu_no_nic.txt")))
    assert topo_parser.detect(Doc(fixture_text("topo/topo_4xpcie_spaces_merged_header.txt")))
    assert not topo_parser.detect(Doc(fixture_text("nvidia-smi/table_525_2xa10.txt")))


# --------------------------------------------------------------------------- facts contract


def test_facts_are_json_serialisable() -> None:
    for rid, probe, rel in [("gpu.inventory", "nvidia-smi-query", "nvidia-smi/query_pcie_degraded.csv"),
                            ("gpu.nvlink", "nvidia-smi-nvlink", "nvidia-smi/nvlink_8xh100_gpu3_link7_down.txt"),
                            ("gpu.topology", "nvidia-smi-topo", "topo/topo_8xh100_10nic_ok.txt")]:
        r = one(grade(rid, {probe: capture(probe, fixture_text(rel))}, profile="h100-sxm-8x"))
        json.dumps(r.to_dict())
    inv = one(grade("gpu.inventory", {"nvidia-smi-query": capture("nvidia-smi-query",
                                                                   fixture_text("nvidia-smi/query_8xh100_ok.csv"))}))
    assert {"count", "models", "driver"} <= set(inv.facts)


# --------------------------------------------------------------------------- run mode with a fake nvidia-smi


def test_run_mode_with_fake_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real probes against a fake nvidia-smi: a driver without the MIG query fields gets
    the fallback field list; nvlink --status falls back to nvlink -s."""
    from preflight.probes import run_probe
    from tests import fakes

    old_fields = ",".join(f for f in gpu.QUERY_FIELDS if not f.startswith("mig."))
    rows = fixture_text("nvidia-smi/query_8xh100_ok.csv").splitlines()
    old_csv = "\n".join(", ".join(line.split(", ")[:-2]) for line in rows) + "\n"
    spec: dict[str, list[dict[str, Any]]] = {"nvidia-smi": [
        {"match": r"--query-gpu=.*mig\.mode", "stderr": 'Field "mig.mode.current" is not a valid field to query.\n',
         "rc": 2},
        {"match": "--query-gpu=" + re.escape(old_fields), "stdout": "old.csv"},
        {"match": r"^-L$", "stdout": "L.txt"},
        {"match": r"nvlink --status", "stderr": "Invalid combination of input arguments.\n", "rc": 2},
        {"match": r"nvlink -s", "stdout": "nvlink.txt"},
        {"match": r"topo -m", "stdout": "topo.txt"},
    ]}
    files: dict[str, str | Path] = {"old.csv": old_csv, "L.txt": fixtures_path("nvidia-smi/smi_L_8xh100.txt"),
             "nvlink.txt": fixtures_path("nvidia-smi/nvlink_8xh100_gpu3_link7_down.txt"),
             "topo.txt": fixtures_path("topo/topo_8xh100_10nic_ok.txt")}
    scen = fakes.scenario(tmp_path / "scen", spec, files)
    bin_dir = fakes.install(tmp_path / "bin", ["nvidia-smi"])
    for k, v in fakes.env_for(bin_dir, scen).items():
        monkeypatch.setenv(k, v)
    caps = {p.name: run_probe(p) for p in (gpu.PROBE_QUERY, gpu.PROBE_L, gpu.PROBE_NVLINK, gpu.PROBE_TOPO)}
    assert caps["nvidia-smi-query"].rc == 0 and "mig" not in " ".join(caps["nvidia-smi-query"].argv)
    assert caps["nvidia-smi-nvlink"].argv[-1] == "-s"
    inv = one(grade("gpu.inventory", caps, profile="h100-sxm-8x"))
    assert inv.status is Status.PASS, inv.summary
    assert inv.facts["counts_by_source"] == {"nvidia-smi-query": 8, "nvidia-smi-L": 8}
    nv = one(grade("gpu.nvlink", caps, profile="h100-sxm-8x"))
    assert nv.status is Status.FAIL and nv.facts["links_down"] == 2
    assert one(grade("gpu.topology", caps, profile="h100-sxm-8x")).status is Status.PASS


def fixtures_path(rel: str) -> Path:
    from tests.conftest import FIXTURES

    return FIXTURES / rel


def test_inventory_gpu_answering_with_error_values_fails() -> None:
    cap = capture("nvidia-smi-query", fixture_text("nvidia-smi/query_gpu3_requires_reset.csv"))
    r = one(grade("gpu.inventory", {"nvidia-smi-query": cap}, profile="generic"))
    assert r.status is Status.FAIL and "GPU 3" in r.summary and "[GPU requires reset]" in r.summary
    assert "Xid 79" in r.remedy and r.facts["count"] == 8


def test_nvlink_zero_speed_is_down() -> None:
    text = fixture_text("nvidia-smi/nvlink_8xh100_ok.txt").replace("Link 4: 26.562 GB/s", "Link 4: 0 GB/s", 1)
    r = one(grade("gpu.nvlink", {"nvidia-smi-nvlink": capture("nvidia-smi-nvlink", text)}, profile="h100-sxm-8x"))
    assert r.status is Status.FAIL and r.facts["links_down"] == 1 and r.facts["links_slow"] == 0
