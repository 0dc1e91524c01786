"""gpu.inventory, gpu.nvlink and gpu.topology: every finding with its code, exact summaries,
evidence and facts, the statuses the policy gives them, and the boundaries of each rule."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from preflight import policy, registry
from preflight.checks import gpu
from preflight.grading import FactStore
from preflight.model import Result, Status
from preflight.parsers.nvsmi_errors import ToolError
from tests.conftest import capture, fixture_text, grade, grade_text

H100 = "h100-sxm-8x"
BUSES = ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]
HEAD = ("index, name, pci.bus_id, persistence_mode, pstate, pcie.link.gen.current, pcie.link.gen.max, "
        "pcie.link.width.current, pcie.link.width.max, memory.total [MiB], mig.mode.current, mig.mode.pending")


def row(i: int, **over: str) -> str:
    cells = {"name": "NVIDIA H100 80GB HBM3", "bus": f"00000000:{BUSES[i]}:00.0", "pm": "Enabled", "ps": "P0",
             "gen": "5", "genmax": "5", "width": "16", "widthmax": "16", "mem": "81559 MiB", "mig": "Disabled",
             "pending": "Disabled"}
    cells.update(over)
    return ", ".join([str(i), *cells.values()])


def csv(rows: list[str]) -> str:
    return "\n".join([HEAD, *rows]) + "\n"


def eight(**changes: dict[str, str]) -> str:
    return csv([row(i, **changes.get(f"g{i}", {})) for i in range(8)])


def inv(text: str, profile: str = "generic", probe: str = "nvidia-smi-query") -> Result:
    [r] = grade_text("gpu.inventory", {probe: text}, profile)
    return r


def codes(r: Result) -> list[str]:
    return list(r.facts.get("codes", []))


@pytest.fixture
def site_policy() -> Iterator[Any]:
    tokens = []

    def use(overrides: dict[str, str]) -> None:
        tokens.append(policy.use(policy.builtin().with_overrides(overrides, "site.toml")))

    yield use
    for t in reversed(tokens):
        policy.reset(t)


# --------------------------------------------------------------------------- gpu.inventory: GPUs not answering

L_LOST = ("Unable to determine the device handle for gpu 0000:23:00.0: Unknown Error\n"
          "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n"
          "Unable to determine the device handle for gpu 0000:43:00.0: Unknown Error\n"
          "GPU 3: NVIDIA H100 80GB HBM3 (UUID: GPU-3)\n")


def test_lost_gpus_between_listed_ones() -> None:
    r = inv(L_LOST, probe="nvidia-smi-L")
    assert r.status is Status.FAIL and codes(r) == ["gpu.inventory/gpu-lost"]
    assert r.summary == "2 GPU(s) do not answer: 0000:23:00.0 (Unknown Error), 0000:43:00.0 (Unknown Error)"
    assert r.evidence[:2] == ["Unable to determine the device handle for gpu 0000:23:00.0: Unknown Error",
                              "Unable to determine the device handle for gpu 0000:43:00.0: Unknown Error"]
    assert r.remedy == gpu.LOST_REMEDY and r.facts["lost"] == ["0000:23:00.0", "0000:43:00.0"]
    assert r.facts["count"] == 2 and r.facts["source"] == "nvidia-smi-L"


def test_lost_gpu_alone_and_without_detail() -> None:
    r = inv("Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error\n", probe="nvidia-smi-q")
    assert r.status is Status.FAIL and r.summary == "no usable GPU: GPU 0000:0B:00.0 does not answer (Unknown Error)"
    assert r.facts["count"] == 0 and codes(r) == ["gpu.inventory/gpu-lost"]
    bare = inv("Unable to determine the device handle for GPU 0000:0B:00.0\n", probe="nvidia-smi-q")
    assert bare.summary == "no usable GPU: GPU 0000:0B:00.0 does not answer"
    listed = inv("GPU 0: A10 (UUID: GPU-1)\nUnable to determine the device handle for gpu 0000:0B:00.0:\n",
                 probe="nvidia-smi-L")
    assert listed.summary == "1 GPU(s) do not answer: 0000:0B:00.0"
    nobus = inv("GPU 0: A10 (UUID: GPU-1)\nGPU is lost\n", probe="nvidia-smi-L")
    assert nobus.summary == "1 GPU(s) do not answer: ?"


@pytest.mark.parametrize(("detail", "code", "status", "words"), [
    ("GPU requires reset", "gpu.inventory/gpu-requires-reset", Status.FAIL, "requires a reset"),
    ("Insufficient External Power", "gpu.inventory/gpu-insufficient-power", Status.FAIL, "is insufficiently powered"),
    ("Insufficient Permissions", "gpu.inventory/gpu-access-denied", Status.WARN, "could not be opened"),
])
def test_other_gpu_messages(detail: str, code: str, status: Status, words: str) -> None:
    line = f"Unable to determine the device handle for gpu 0000:2A:00.0: {detail}"
    r = inv(f"GPU 0: NVIDIA A10 (UUID: GPU-1)\n{line}\n", probe="nvidia-smi-L")
    assert r.status is status and codes(r) == [code]
    assert r.summary == f"GPU 0000:2A:00.0 ({detail}) {words}" and r.evidence[0] == line
    assert r.remedy != gpu.LOST_REMEDY
    # alone (no GPU listed): the same finding, and no "no GPU listed" on top of it
    alone = inv(f"{line}\nNo devices were found\n", probe="nvidia-smi-q")
    assert codes(alone) == [code] and alone.status is status


def test_inforom_warning_above_a_table() -> None:
    text = "WARNING: infoROM is corrupted at gpu 0000:3A:00.0\n" + fixture_text("nvidia-smi/table_525_2xa10.txt")
    r = inv(text, probe="nvidia-smi-table")
    assert r.status is Status.WARN and codes(r) == ["gpu.inventory/inforom-corrupted"]
    assert r.summary == "GPU 0000:3A:00.0 has a corrupted infoROM" and r.facts["count"] == 2


def test_driver_errors_when_nothing_is_listed() -> None:
    r = inv("NVIDIA: could not open the device file /dev/nvidiactl (No such file or directory).\n"
            "NVIDIA-SMI has failed because it couldn't communicate with NVIDIA driver.\n", probe="nvidia-smi-q")
    assert r.status is Status.FAIL and codes(r) == ["gpu.inventory/no-gpu-listed"]
    assert r.summary == ("no GPU listed: NVIDIA: could not open the device file /dev/nvidiactl "
                         "(No such file or directory).")
    assert len(r.evidence) == 2 and r.remedy.endswith("; " + gpu.DRIVER_REMEDY)
    assert r.remedy.startswith("load the driver")
    # a lost GPU explains the "No devices were found" after it
    lost = inv("Unable to determine the device handle for GPU0: 0000:01:00.0: Unknown Error\nNo devices were found\n",
               probe="nvidia-smi-q")
    assert codes(lost) == ["gpu.inventory/gpu-lost"]


def test_reset_refusal_alone_is_not_an_inventory() -> None:
    r = inv("The following GPUs could not be reset:\n  GPU 00000000:55:00.0: In use by another client\n",
            probe="nvidia-smi-q")
    assert r.status is Status.SKIP and codes(r) == ["gpu.inventory/not-recognised"]


def test_garbage_is_not_recognised_in_analyze_and_an_error_in_run() -> None:
    r = inv("index, name\n", probe="nvidia-smi-query")
    assert r.status is Status.SKIP and codes(r) == ["gpu.inventory/not-recognised"]
    assert r.summary.startswith("not recognised: no GPU line") and r.evidence == ["no GPU line, CSV row or table row found"]
    [run] = grade("gpu.inventory", {"nvidia-smi-query": capture("nvidia-smi-query", "zzz\n")})
    assert run.status is Status.ERROR and codes(run) == ["gpu.inventory/unreadable-output"]
    headerless = inv("0, NVIDIA H100 80GB HBM3, 81559\n")
    assert codes(headerless) == ["gpu.inventory/not-recognised"]


def test_unreadable_rows() -> None:
    r = inv(csv([row(0) + ", extra", row(1)[:20]]))
    assert r.status is Status.ERROR and codes(r) == ["gpu.inventory/unreadable-row"]
    assert r.summary == "none of the 2 --query-gpu row(s) could be read"
    assert r.evidence[0] == f"line 2: 13 cells, more than the header's 12 fields: {row(0)}, extra"
    some = inv(csv([row(0), row(1) + ", x", row(2), row(3)[:10], row(4)[:10], row(5)[:10]]))
    assert some.status is Status.ERROR and some.facts["unreadable_rows"] == [3, 5, 6, 7]
    assert some.summary.startswith("4 --query-gpu row(s) could not be read: line 3: 13 cells, more than the "
                                   "header's 12 fields; line 5: ")
    assert some.summary.count("line ") == 3


def test_nvml_library_missing() -> None:
    bad = fixture_text("nvidia-smi/nvml_libnotfound.json")
    r = inv(bad, probe="nvml")
    assert r.status is Status.ERROR and codes(r) == ["gpu.inventory/nvml-unavailable"]
    assert r.summary.startswith("no GPU listed: NVML could not be loaded (") and r.remedy.endswith("(see gpu.driver)")


def test_cells_of_a_gpu_that_stopped_answering() -> None:
    lost = eight(g3={"mem": "[GPU is lost]", "mig": "[GPU is lost]"})
    r = inv(lost)
    assert codes(r) == ["gpu.inventory/gpu-lost"] and r.summary == "GPU not answering: GPU 3 (00000000:5D:00.0) [GPU is lost]"
    reset = inv(eight(g2={"mem": "[GPU requires reset]"}))
    assert codes(reset) == ["gpu.inventory/gpu-requires-reset"] and "GPU 2 (00000000:3A:00.0)" in reset.summary


# --------------------------------------------------------------------------- gpu.inventory: count and model


def test_count_against_the_profile() -> None:
    r = inv(csv([row(i) for i in (0, 1, 2, 3, 4, 6, 7)]), H100)
    assert r.status is Status.FAIL and codes(r) == ["gpu.inventory/gpus-missing"]
    assert r.summary == "7 of 8 GPUs visible (index 5 missing)"
    assert r.evidence[0] == "nvidia-smi-query: 7 GPU(s) listed where gpu.count expects 8; no GPU at index 5"
    assert r.evidence[1].startswith("present: GPU 0 (00000000:18:00.0), GPU 1") and r.evidence[2].startswith("gpu.count = 8 (")
    tail = inv(csv([row(i) for i in range(7)]), H100)
    assert tail.summary == "7 of 8 GPUs visible"
    extra = inv(csv([row(i) for i in range(8)] + [row(7).replace("7, ", "8, ", 1).replace(":DB:", ":E1:")]), H100)
    assert codes(extra) == ["gpu.inventory/extra-gpus"] and extra.summary == "9 GPUs visible, profile expects 8"
    assert extra.status is Status.WARN
    assert inv(eight(), H100).status is Status.PASS


def test_a_fragment_of_the_table_is_not_counted() -> None:
    rows = fixture_text("nvidia-smi/table_550_8xh100_procs.txt").splitlines()[8:15]
    r = inv("\n".join(rows), H100, probe="nvidia-smi-table")
    assert r.status is Status.PASS and r.facts["partial"] is True and r.facts["count"] == 2
    assert any("fragment of the nvidia-smi table: 2 GPU(s) shown" in e for e in r.evidence)


@pytest.mark.parametrize(("buses", "fails"), [
    (["18", "2A", "3A", "5D", "9A", "AB", "BA"], True),     # 4 + 3
    (["18", "2A", "3A", "9A", "AB", "BA", "DB"], True),     # 3 + 4
    (["18", "2A", "3A", "5D", "7F", "AB", "BA"], True),     # 0x7f is the low half: 5 + 2
    (["18", "2A", "3A", "5D", "80", "AB", "BA"], True),     # 0x80 is the high half: 4 + 3
    (["18", "2A", "3A", "5D", "9A", "AB"], False),          # even
    (["18", "2A", "3A", "5D", "6A", "7A", "7B"], False),    # all on one socket: the rule does not apply
    (["18", "2A", "3A"], False),                            # 3 + 0
])
def test_socket_layout(buses: list[str], fails: bool) -> None:
    text = csv([row(i, bus=f"00000000:{b}:00.0", name="NVIDIA L40S") for i, b in enumerate(buses)])
    r = inv(text)
    assert (codes(r) == ["gpu.inventory/gpu-missing-by-socket-layout"]) is fails
    if fails:
        low = sum(int(b, 16) < 0x80 for b in buses)
        assert r.summary == (f"{len(buses)} GPUs, a GPU is probably missing ({low} on one CPU socket, "
                             f"{len(buses) - low} on the other)")
        assert r.evidence[-1].startswith("gpu.expect_symmetric_sockets = true (")
        assert r.evidence[0] == (f"nvidia-smi-query: {low} GPU(s) at bus below 0x80, {len(buses) - low} GPU(s) at bus "
                                 f"0x80 and above: a GPU is probably missing from the half with {min(low, len(buses) - low)}")


@pytest.mark.parametrize("bus", ["00000001:9A:00.0", "9A:00.0", "0000zz:9A:00.0", "[N/A]"])
def test_socket_layout_needs_domain_zero_bus_ids(bus: str) -> None:
    buses = [f"00000000:{b}:00.0" for b in ["18", "2A", "3A", "5D", "AB", "BA"]] + [bus]
    r = inv(csv([row(i, bus=b, name="NVIDIA L40S") for i, b in enumerate(buses)]))
    assert r.status is Status.PASS


def test_socket_layout_not_with_a_count_or_bad_rows() -> None:
    text = csv([row(i) for i in range(7)] + [row(7) + ", x"])
    assert "gpu.inventory/gpu-missing-by-socket-layout" not in codes(inv(text))


def test_listings_disagree() -> None:
    caps = {"nvidia-smi-query": eight(), "nvidia-smi-L": "".join(
        f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i})\n" for i in range(7))}
    [r] = grade_text("gpu.inventory", caps, H100)
    assert codes(r) == ["gpu.inventory/listings-disagree"] and r.status is Status.WARN
    assert r.summary == "GPU count differs between sources: nvidia-smi-query 8, nvidia-smi-L 7"
    assert r.evidence == ["nvidia-smi-query: 8 GPUs", "nvidia-smi-L: 7 GPUs"]
    assert r.facts["source"] == "nvidia-smi-query"


@pytest.mark.parametrize(("name", "ok"), [
    ("NVIDIA H100 80GB HBM3", True), ("nvidia  h100 80gb hbm3", True), ("NVIDIA H100 80GB ...", True),
    ("NVIDIA H100 80GB HBM3 (rev A)", True), ("NVIDIA H800", False), ("NVIDIA H100 PCIe...", False),
    ("NVIDIA H100", False), ("[N/A]", True),
])
def test_model_against_the_profile(name: str, ok: bool) -> None:
    r = inv(eight(**{f"g{i}": {"name": name} for i in range(8)}), H100)
    assert ("gpu.inventory/wrong-model" not in codes(r)) is ok
    if not ok:
        assert r.summary == f"8 GPU(s) are not NVIDIA H100 80GB HBM3: {name}" and r.status is Status.FAIL
        assert r.evidence[0] == f"GPU 0 (00000000:18:00.0): {name}"


def test_mixed_models() -> None:
    r = inv(csv([row(0, name="NVIDIA A100-SXM4-80GB"), row(1, name="NVIDIA A100-SXM4-40GB")]))
    assert codes(r) == ["gpu.inventory/mixed-models"] and r.status is Status.WARN
    assert r.summary == "mixed GPU models on one node: NVIDIA A100-SXM4-80GB, NVIDIA A100-SXM4-40GB"
    assert r.facts["models"] == ["NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-40GB"]


def test_persistence_only_where_the_profile_asks() -> None:
    text = eight(g7={"pm": "Disabled"}, g6={"pm": "[N/A]"})
    r = inv(text, H100)
    assert codes(r) == ["gpu.inventory/persistence-off"] and r.summary == "persistence mode off on GPU 7 (00000000:DB:00.0)"
    assert r.evidence[0] == "GPU 7 (00000000:DB:00.0): index=7, pci.bus_id=00000000:DB:00.0, persistence_mode=Disabled"
    assert inv(text).status is Status.PASS


# --------------------------------------------------------------------------- gpu.inventory: MIG


def test_mig_enabled_is_a_warn_a_site_may_pass(site_policy: Any) -> None:
    text = eight(g1={"mig": "Enabled", "pending": "Enabled"})
    r = inv(text)
    assert r.status is Status.WARN and codes(r) == ["gpu.inventory/mig-enabled"]
    assert r.summary == "MIG enabled on GPU 1 (00000000:2A:00.0)" and r.remedy == gpu.MIG_REMEDY
    assert r.evidence[-1].startswith("gpu.mig_allowed = true (")
    site_policy({"gpu.inventory/mig-enabled": "pass"})
    ok = inv(text)
    assert ok.status is Status.PASS and "MIG enabled on GPU 1 (00000000:2A:00.0)" in ok.evidence
    assert "gpu.inventory/mig-enabled" in ok.facts["overrides"]


def test_mig_not_allowed_and_pending() -> None:
    r = inv(eight(g1={"mig": "Enabled"}, g3={"pending": "Enabled"}), H100)
    assert r.status is Status.FAIL and codes(r) == ["gpu.inventory/mig-not-allowed", "gpu.inventory/mig-pending"]
    assert r.summary == ("MIG enabled on GPU 1 (00000000:2A:00.0); MIG will turn on at the next reset of "
                         "GPU 3 (00000000:5D:00.0)")
    assert "drain the node; " + gpu.MIG_REMEDY in r.remedy
    assert "gpu.mig_allowed = false (full-GPU training nodes run with MIG disabled)" in r.evidence


def test_mig_devices_listed_under_a_gpu() -> None:
    text = ("GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-a)\n  MIG 3g.20gb     Device  0: (UUID: MIG-b)\n"
            "  MIG 3g.20gb     Device  1: (UUID: MIG-c)\nGPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-d)\n")
    r = inv(text, probe="nvidia-smi-L")
    assert codes(r) == ["gpu.inventory/mig-enabled"] and r.summary == "MIG enabled on GPU 0"
    assert "2 MIG device(s) listed, counted as part of their physical GPU" in r.evidence
    assert r.facts["mig_devices"] == 2 and r.facts["count"] == 1 + 1


def test_mig_section_of_the_table_alone() -> None:
    text = ("| MIG devices:                  |\n| GPU  GI  CI  MIG |  Memory-Usage |\n"
            "|  0    1   0   0  |     11MiB / 20096MiB |\n|  0    2   0   1  |     11MiB / 20096MiB |\n")
    r = inv(text, probe="nvidia-smi-table")
    assert r.status is Status.WARN and codes(r) == ["gpu.inventory/mig-enabled"] and r.summary == "MIG enabled on GPU 0"


# --------------------------------------------------------------------------- gpu.inventory: PCIe


@pytest.mark.parametrize(("over", "code"), [
    ({"width": "8"}, "gpu.inventory/pcie-width-degraded"),
    ({"width": "15"}, "gpu.inventory/pcie-width-degraded"),
    ({"width": "[N/A]", "widthmax": "8"}, "gpu.inventory/pcie-width-degraded"),
    ({"gen": "4", "genmax": "4"}, "gpu.inventory/pcie-gen-capped"),
    ({"gen": "4"}, "gpu.inventory/pcie-gen-low-in-p0"),
    ({"gen": "1", "ps": "P8"}, ""),
    ({"gen": "5", "genmax": "5", "width": "16"}, ""),
    ({"width": "32"}, ""),
    ({"gen": "6", "genmax": "6"}, ""),
    ({"width": "[N/A]", "widthmax": "[N/A]", "gen": "[N/A]", "genmax": "[N/A]"}, ""),
])
def test_pcie_rules(over: dict[str, str], code: str) -> None:
    r = inv(eight(g2=over), H100)
    assert codes(r) == ([code] if code else [])


def test_pcie_summaries_and_the_idle_note() -> None:
    r = inv(eight(g2={"width": "8"}, g6={"gen": "4", "genmax": "4"}, g0={"gen": "3"}, g4={"gen": "1", "ps": "P8"}), H100)
    assert r.summary == ("PCIe link trained below x16 on GPU 2 (00000000:3A:00.0); PCIe link cannot reach Gen5 on "
                         "GPU 6 (00000000:BA:00.0); PCIe link below Gen5 while in P0 on GPU 0 (00000000:18:00.0)")
    assert "gpu.min_pcie_width = 16 (H100 SXM5 host interface is PCIe Gen5 x16 (NVIDIA H100 datasheet))" in r.evidence
    assert ("GPU 4 (00000000:9A:00.0): PCIe Gen1 now (max Gen5), pstate P8: power-saving downshift, not graded"
            in r.evidence)
    nostate = inv(csv([row(i, gen="1" if i == 4 else "5", ps="[N/A]") for i in range(8)]), H100)
    assert any("pstate unknown" in e for e in nostate.evidence) and nostate.status is Status.PASS


# --------------------------------------------------------------------------- gpu.inventory: sources and facts


def test_richest_listing_gives_the_gpus_and_facts() -> None:
    caps = {"nvidia-smi-table": fixture_text("nvidia-smi/table_550_8xh100_procs.txt"), "nvidia-smi-query": eight()}
    [r] = grade_text("gpu.inventory", caps, H100)
    assert r.status is Status.PASS and r.facts["source"] == "nvidia-smi-query"
    assert r.facts["counts_by_source"] == {"nvidia-smi-query": 8, "nvidia-smi-table": 8}
    assert r.facts["driver"] == "550.127.05" and r.facts["cuda_version"] == "12.4"
    assert r.summary == "8 x NVIDIA H100 80GB HBM3, driver 550.127.05 (profile h100-sxm-8x expects 8)"
    assert set(r.facts) == {"count", "models", "driver", "cuda_version", "source", "counts_by_source", "mig_devices",
                            "lost", "unreadable_rows", "gpus", "partial"}
    plain = inv("GPU 0: (UUID: GPU-1)\n", probe="nvidia-smi-L")
    assert plain.summary == "1 x GPU"


def test_build_inventory_reads_each_listing() -> None:
    store = FactStore(registry.load(), captures={
        "nvidia-smi-query": capture("nvidia-smi-query", 'x\nField "a" is not a valid field to query.\n'),
        "nvidia-smi-L": capture("nvidia-smi-L", "GPU 0: NVIDIA A10 (UUID: GPU-1)\n")})
    got = gpu.build_inventory(store.facts)
    assert got.source == "nvidia-smi-L" and got.counts == {"nvidia-smi-L": 1} and got.partial is False
    assert got.notes == ["--query-gpu output without a header and of unknown fields: not read", "x",
                         'Field "a" is not a valid field to query.']
    empty = gpu.Inventory()
    assert (empty.source, empty.gpus, empty.driver, empty.cuda, empty.mig_devices, empty.partial,
            empty.nvml_error, empty.seen) == ("", [], "", "", 0, False, None, 0)
    lost = ToolError("gpu_lost", "a", "s", "r", "0000:01:00.0")
    again = ToolError("gpu_lost", "b", "s", "r", "0000:01:00.0")
    other = ToolError("needs_reset", "c", "s", "r", "0000:02:00.0")
    filled = gpu.Inventory(errors=[lost, again, other, ToolError("no_driver", "d", "s", "r")])
    assert filled.lost == [again, other] and filled.about_gpus(("needs_reset",)) == [other]


def test_profile_hint() -> None:
    def hint(caps: dict[str, str]) -> tuple[str | None, int | None]:
        return gpu.profile_hint(FactStore(registry.load(), captures={k: capture(k, v) for k, v in caps.items()}))

    six = "".join(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i})\n" for i in range(6))
    lost = ("Unable to determine the device handle for gpu 0000:D1:00.0: Unknown Error\n"
            "Unable to determine the device handle for gpu 0000:DB:00.0: GPU requires reset\n"
            "Unable to determine the device handle for gpu 0000:E1:00.0: Insufficient Permissions\n")
    assert hint({"nvidia-smi-L": six + lost}) == ("NVIDIA H100 80GB HBM3", 8)
    assert hint({"nvidia-smi-L": six}) == ("NVIDIA H100 80GB HBM3", 6)
    nvl = "GPU 0: NVIDIA B200 (UUID: GPU-1)\n\t Link 0: 50 GB/s\nGPU 1: NVIDIA B200 (UUID: GPU-2)\n\t Link 0: 50 GB/s\n"
    assert hint({"nvidia-smi-nvlink": nvl}) == ("NVIDIA B200", 2)
    q = "Attached GPUs : 3\nGPU 00000000:01:00.0\n    Product Name : NVIDIA A10\n"
    assert hint({"nvidia-smi-q": q}) == ("NVIDIA A10", 3)
    assert hint({"nvidia-smi-q": "GPU 00000000:01:00.0\n    Product Name : NVIDIA A10\n"}) == ("NVIDIA A10", 1)
    assert hint({"nvidia-smi-q": "Attached GPUs : 1\nGPU 00000000:01:00.0\n    Serial Number : 1\n"}) == (None, None)
    assert hint({"nvidia-smi-L": "GPU 0: (UUID: GPU-1)\n"}) == (None, None)


# --------------------------------------------------------------------------- gpu.nvlink


def links(name: str, n: int, per: int, speed: str = "26.562", down: tuple[tuple[int, int], ...] = ()) -> str:
    out = []
    for i in range(n):
        out.append(f"GPU {i}: {name} (UUID: GPU-{i})")
        out += [f"\t Link {k}: " + ("<inactive>" if (i, k) in down else f"{speed} GB/s") for k in range(per)]
    return "\n".join(out) + "\n"


def nvl(text: str, profile: str = "generic", mode: str = "analyze") -> Result:
    if mode == "run":
        [r] = grade("gpu.nvlink", {"nvidia-smi-nvlink": capture("nvidia-smi-nvlink", text)}, profile)
    else:
        [r] = grade_text("gpu.nvlink", {"nvidia-smi-nvlink": text}, profile)
    return r


def test_expected_links() -> None:
    from preflight.profile import load

    gen, h100 = load("generic"), load(H100)
    assert gpu.expected_links(h100, "anything") == (18, "nvlink.links_per_gpu = 18 (H100 SXM5: 18 fourth-generation "
                                                        "NVLinks per GPU (NVIDIA H100 datasheet))")
    assert gpu.expected_links(gen, "NVIDIA A100-SXM4-80GB")[0] == 12
    n, src = gpu.expected_links(gen, "NVIDIA GH200 480GB")
    assert n == 18 and src.startswith("nvlink.model_links[GH200] = 18 (")  # the longest key that matches
    assert gpu.expected_links(gen, "NVIDIA H100 PCIe") == (0, "")
    assert gpu.expected_links(gen, "NVIDIA H100 NVL") == (0, "")
    assert gpu.expected_links(gen, "NVIDIA RTX A6000") == (0, "")


def test_nvlink_all_up_summary_and_facts() -> None:
    r = nvl(links("NVIDIA H100 80GB HBM3", 2, 18), H100)
    assert r.status is Status.PASS and r.summary == "36 NVLinks up on 2 GPU(s), 26.562 GB/s"
    assert r.facts == {"links_total": 36, "links_down": 0, "links_slow": 0, "gpus": [
        {"index": i, "name": "NVIDIA H100 80GB HBM3", "links_up": 18, "links_down": 0, "expected": 18,
         "speeds_gbps": [26.562]} for i in range(2)]}
    assert nvl("GPU 0: NVIDIA A10 (UUID: GPU-1)\nGPU 1: NVIDIA A10 (UUID: GPU-2)\n\t Link 0: <inactive>\n"
               "\t NVML: Unable to retrieve NVLink information as all links are inactive\n").summary \
        == "0 NVLinks up on 2 GPU(s)"


def test_nvlink_down_and_missing() -> None:
    r = nvl(links("NVIDIA H100 80GB HBM3", 2, 18, down=((1, 7), (1, 9))))
    assert r.status is Status.FAIL and codes(r) == ["gpu.nvlink/link-down"]
    assert r.summary == "NVLink down: GPU 1 (2 inactive)" and r.remedy == gpu.NVLINK_DOWN_REMEDY
    assert r.evidence[:2] == ["GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-1) / Link 7: <inactive>",
                              "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-1) / Link 9: <inactive>"]
    assert r.evidence[2].startswith("nvlink.model_links[H100 80GB HBM3] = 18 (") and len(r.evidence) == 3
    assert r.facts["links_down"] == 2 and r.facts["gpus"][1]["links_down"] == 2
    short = nvl(links("NVIDIA H100 80GB HBM3", 1, 17), H100)
    assert short.summary == "NVLink down: GPU 0 (1 missing)"
    both = nvl(links("NVIDIA H100 80GB HBM3", 1, 17, down=((0, 3),)), H100)
    assert both.summary == "NVLink down: GPU 0 (1 inactive, 1 missing)"
    gone = nvl("GPU 6: NVIDIA A100-SXM4-80GB (UUID: GPU-6)\n"
               "\t NVML: Unable to retrieve NVLink information as all links are inactive\n")
    assert gone.summary == "NVLink down: GPU 6 (12 missing)"
    assert "NVML: Unable to retrieve NVLink information as all links are inactive" in gone.evidence
    unknown = nvl("GPU 0: Example X (UUID: GPU-1)\n\t NVML: Unable to retrieve NVLink information as all links are "
                  "inactive\nGPU 1: Example X (UUID: GPU-2)\n\t Link 0: 20 GB/s\n")
    assert unknown.status is Status.WARN and codes(unknown) == ["gpu.nvlink/link-down-unknown-model"]
    assert unknown.summary == "NVLink down on a node that uses NVLink: GPU 0 (all inactive)"


def test_nvlink_not_in_use_is_a_note() -> None:
    r = nvl(links("NVIDIA A100 80GB PCIe", 2, 12, down=tuple((i, k) for i in range(2) for k in range(12))))
    assert r.status is Status.PASS and "no active NVLink on any GPU: NVLink not in use on this node" in r.evidence


@pytest.mark.parametrize(("speed", "slow"), [("13.281", True), ("25.999", True), ("26", False), ("26.562", False)])
def test_nvlink_speed_against_the_profile(speed: str, slow: bool) -> None:
    text = links("NVIDIA H100 80GB HBM3", 8, 18).replace("Link 4: 26.562", f"Link 4: {speed}", 1)
    r = nvl(text, H100)
    assert (codes(r) == ["gpu.nvlink/link-slow"]) is slow and r.facts["links_slow"] == int(slow)
    if slow:
        assert r.summary == "1 NVLink(s) below 26 GB/s" and r.status is Status.WARN
        assert r.evidence[0] == f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0) / Link 4: {speed} GB/s"
        assert r.evidence[1].startswith("nvlink.min_link_gbps = 26 (")
    assert nvl(text).status is Status.PASS  # generic: no minimum speed


def test_nvlink_errors_instead_of_links() -> None:
    lost = "Unable to determine the device handle for GPU 0000:9D:00.0: Unknown Error\n"
    r = nvl(lost + links("NVIDIA H100 80GB HBM3", 1, 18), H100)
    assert codes(r) == ["gpu.nvlink/gpu-not-listed"] and r.status is Status.FAIL
    assert r.summary == "0000:9D:00.0 not listed by nvidia-smi nvlink: a GPU does not answer the driver"
    g = nvl(lost + links("NVIDIA H100 80GB HBM3", 1, 18))
    assert codes(g) == ["gpu.nvlink/not-graded"] and g.status is Status.ERROR
    perm = nvl(lost.replace("Unknown Error", "Insufficient Permissions") + links("NVIDIA H100 80GB HBM3", 1, 18), H100)
    assert codes(perm) == ["gpu.nvlink/not-graded"]
    rom = nvl("WARNING: infoROM is corrupted at gpu 0000:9D:00.0\n" + links("NVIDIA H100 80GB HBM3", 1, 18), H100)
    assert rom.status is Status.PASS


def test_nvlink_tool_failure_alone() -> None:
    text = "Failed to initialize NVML: Driver/library version mismatch\n"
    r = nvl(text, H100, mode="run")
    assert codes(r) == ["gpu.nvlink/tool-failed"] and r.summary == f"nvidia-smi nvlink failed: {text.strip()}"
    assert r.facts["links_total"] == 0
    assert codes(nvl(text, mode="run")) == ["gpu.nvlink/not-graded"]
    lost = nvl("Unable to determine the device handle for GPU 0000:9D:00.0: Unknown Error\n", H100, mode="run")
    assert codes(lost) == ["gpu.nvlink/gpu-not-listed"]


def test_nvlink_nothing_listed() -> None:
    assert nvl("", mode="run").summary == "no NVLink on this node (nothing to grade)"
    r = nvl("", H100, mode="run")
    assert codes(r) == ["gpu.nvlink/no-nvlink"] and r.summary == "no NVLink reported; profile h100-sxm-8x expects 18 per GPU"
    assert r.evidence[0].endswith("listed no GPU") and r.evidence[1].startswith("nvlink.links_per_gpu = 18 (")
    garbage = nvl("zzz\nqqq\n", mode="run")
    assert codes(garbage) == ["gpu.nvlink/unreadable-output"] and garbage.evidence == ["zzz", "qqq"]
    assert codes(nvl("zzz\nqqq\n")) == ["gpu.nvlink/not-recognised"]
    [none] = grade("gpu.nvlink", {}, "generic", mode="analyze")
    assert none.status in (Status.SKIP, Status.PASS, Status.ERROR)


def test_nvlink_counters_are_not_link_states() -> None:
    """Error counters are graded as counters, never as links missing; another sub-command's
    Link lines (throughput, remote ids) are not recognised."""
    text = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n\t Link 0: Replay Errors: 0\n\t Link 0: CRC Errors: 0\n"
    r = nvl(text, H100)
    assert r.status is Status.PASS and codes(r) == []
    assert r.summary == "NVLink error counters 0 on 1 link(s) of 1 GPU(s) (replay, CRC)"
    assert r.facts == {"links_total": 0, "error_counters": {"gpus": 1, "links": 1, "counters_read": 2, "nonzero": {},
                                                            "unread": 0}}
    gt = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n\t Link 0: Data Tx: 1024 KiB\n\t Link 0: Data Rx: 2048 KiB\n"
    s = nvl(gt, H100)
    assert s.status is Status.SKIP and codes(s) == ["gpu.nvlink/not-recognised"]
    assert s.evidence == ["Link 0: Data Tx: 1024 KiB", "Link 0: Data Rx: 2048 KiB"]
    assert codes(nvl(gt, H100, mode="run")) == ["gpu.nvlink/unreadable-output"]
    remote = nvl("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n\t Link 0: Remote PCI Bus ID: 00000000:05:00.0\n", H100)
    assert codes(remote) == ["gpu.nvlink/not-recognised"] and remote.evidence == ["Link 0: Remote PCI Bus ID: 00000000:05:00.0"]
    mixed = gt.replace("NVIDIA H100 80GB HBM3", "Example X") + "\t Link 1: 26.562 GB/s\n"
    assert codes(nvl(mixed)) == [] and nvl(mixed).status is Status.PASS


# --------------------------------------------------------------------------- gpu.topology

NICS = [f"NIC{k}" for k in range(8)]


def matrix(cell: Any, nics: list[str] = NICS, n: int = 8, nv: str = "NV18", legend: bool = True) -> str:
    head = "\t" + "\t".join([f"GPU{i}" for i in range(n)] + nics + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])
    out = [head]
    for i in range(n):
        cells = [" X " if j == i else nv for j in range(n)] + [cell(i, k) for k in range(len(nics))]
        out.append(f"GPU{i}\t" + "\t".join(cells) + f"\t{'0-47' if i < 4 else '48-95'}\t{int(i >= 4)}\t\tN/A")
    for k, nic in enumerate(nics):
        out.append(f"{nic}\t" + "\t".join([cell(i, k) for i in range(n)] + [" X " if j == k else "SYS"
                                                                             for j in range(len(nics))]))
    if legend and nics and nics[0].startswith("NIC"):
        out += ["", "NIC Legend:", ""] + [f"  {nic}: mlx5_{k}" for k, nic in enumerate(nics)]
    return "\n".join(out) + "\n"


def pix(i: int, k: int) -> str:
    return "PIX" if i == k else ("NODE" if (i < 4) == (k < 4) else "SYS")


def topo(text: str, profile: str = "generic", mode: str = "analyze") -> Result:
    if mode == "run":
        [r] = grade("gpu.topology", {"nvidia-smi-topo": capture("nvidia-smi-topo", text)}, profile)
    else:
        [r] = grade_text("gpu.topology", {"nvidia-smi-topo": text}, profile)
    return r


def test_topology_pass_summary_and_facts() -> None:
    r = topo(matrix(pix), H100)
    assert r.status is Status.PASS and r.summary == "8 GPU(s), pairs: NV18 x28; 8 NIC(s), 8 GPU(s) with a local NIC"
    assert r.facts["gpus"][0] == {"gpu": "GPU0", "local_nics": ["mlx5_0"], "cpu_affinity": "0-47",
                                  "numa_affinity": "0", "gpu_numa_id": "N/A"}
    assert r.facts["nics"] == [f"mlx5_{k}" for k in range(8)] and r.facts["gpu_count"] == 8
    assert r.facts["pairs"]["GPU0-GPU7"] == "NV18" and len(r.facts["pairs"]) == 28
    assert r.facts["gpus_without_local_nic"] == [] and r.facts["nic_legend"]["NIC3"] == "mlx5_3"
    one = topo("\tGPU0\tCPU Affinity\nGPU0\t X \t0-7\n")
    assert one.summary == "1 GPU(s); no NIC in the matrix" and one.facts["gpus_without_local_nic"] == []


def test_topology_pairs_on_an_nvswitch_board() -> None:
    text = matrix(pix)
    lines = text.splitlines()
    for r_i, c_i in ((3, 6), (6, 3)):  # GPU2 <-> GPU5 over SYS (symmetric, as nvidia-smi prints it)
        cells = lines[r_i].split("\t")
        cells[c_i] = "SYS"
        lines[r_i] = "\t".join(cells)
    r = topo("\n".join(lines) + "\n", H100)
    assert r.status is Status.FAIL and codes(r) == ["gpu.topology/pair-not-nvlink"]
    assert r.summary == "1 GPU pair(s) not on NVLink: GPU2-GPU5 SYS"
    assert r.evidence[0].startswith("GPU2\t") and r.evidence[1].startswith("GPU5\t")  # the telling rows first
    assert r.evidence[2].startswith("GPU0\tGPU1\t")  # then the header
    assert r.evidence[3].startswith("nvlink.links_per_gpu = 18 (")
    assert topo("\n".join(lines) + "\n").status is Status.PASS  # generic: no pair grading
    few = topo(matrix(pix, nv="NV17"), H100)
    assert few.status is Status.WARN and codes(few) == ["gpu.topology/pair-fewer-nvlinks"]
    assert few.summary.startswith("28 GPU pair(s) with fewer than 18 NVLinks: GPU0-GPU1 NV17, GPU0-GPU2 NV17")
    assert few.summary.count("NV17") == 8
    assert codes(topo(matrix(pix, nv="NV19"), H100)) == []


def test_topology_one_gpu_has_no_pairs_to_grade() -> None:
    assert topo("\tGPU0\tCPU Affinity\nGPU0\t X \t0-7\n", H100).facts.get("codes", []) == [
        "gpu.topology/gpu-without-local-nic-required"]


def test_topology_nics() -> None:
    def far6(i: int, k: int) -> str:
        return "NODE" if i == 6 else pix(i, k)

    r = topo(matrix(far6), H100)
    assert codes(r) == ["gpu.topology/gpu-without-local-nic-required"] and r.status is Status.FAIL
    assert r.summary == "1 GPU(s) without a NIC at PIX/PXB: GPU6"
    assert r.evidence[-1].startswith("topology.require_local_nic = true (")
    g = topo(matrix(far6))
    assert codes(g) == ["gpu.topology/gpu-without-local-nic"] and g.status is Status.WARN
    assert g.summary == ("1 GPU(s) without a NIC at PIX/PXB: GPU6: their inter-node traffic crosses the host bridge or "
                         "the CPU interconnect")
    assert g.facts["gpus_without_local_nic"] == ["GPU6"] and g.evidence[:2] == [g.evidence[0], g.evidence[1]]
    none = topo(matrix(lambda i, k: "SYS", nics=["NIC0", "NIC1"]))
    assert codes(none) == ["gpu.topology/no-gpu-near-a-nic"]
    assert none.summary == ("0 GPU(s) with a local NIC: all 2 NIC(s) are across a host bridge or the CPU interconnect, "
                            "so GPUDirect RDMA crosses the CPU")
    bare = topo(matrix(pix, nics=[]), H100)
    assert bare.summary == "8 GPU(s) without a NIC at PIX/PXB: GPU0, GPU1, GPU2, GPU3, GPU4, GPU5, GPU6, GPU7 (no NIC in " \
                           "the matrix)"
    assert topo(matrix(pix, nics=[])).status is Status.PASS
    pxb = topo(matrix(lambda i, k: "PXB" if i // 2 == k else "SYS", nics=NICS[:4]))
    assert pxb.status is Status.PASS and pxb.facts["gpus"][3]["local_nics"] == ["mlx5_1"]
    phb = topo(matrix(lambda i, k: "PHB" if i == k else "SYS"))
    assert codes(phb) == ["gpu.topology/no-gpu-near-a-nic"]


def test_topology_unknown_cells_are_said() -> None:
    text = matrix(pix).replace("GPU3\tNV18", "GPU3\tC2C")
    r = topo(text)
    assert r.status is Status.SKIP and codes(r) == ["gpu.topology/not-recognised"]
    assert r.summary.startswith("not recognised: matrix row(s) with cells that are not a known link level: GPU3")
    assert r.evidence[1].startswith("GPU3\tC2C") and r.facts["gpus_without_local_nic"] == []
    assert codes(topo(text, mode="run")) == ["gpu.topology/unreadable-output"]


def test_topology_without_a_matrix() -> None:
    r = topo("Legend:\n  X = Self\n")
    assert r.status is Status.SKIP and codes(r) == ["gpu.topology/not-recognised"] and r.evidence == ["(no GPU0 row)"]
    assert r.facts["gpu_count"] == 0
    head = topo("\tGPU0\tCPU Affinity\nnothing\n", mode="run")
    assert codes(head) == ["gpu.topology/unreadable-output"] and head.evidence == ["GPU0\tCPU Affinity"]
    failed = topo("Failed to initialize NVML: Driver/library version mismatch\n", H100, mode="run")
    assert codes(failed) == ["gpu.topology/tool-failed"] and failed.status is Status.FAIL
    assert failed.summary == "nvidia-smi topo failed: Failed to initialize NVML: Driver/library version mismatch"
    assert codes(topo("Failed to initialize NVML: Driver/library version mismatch\n", mode="run")) == [
        "gpu.topology/not-graded"]


def test_topology_lost_gpu_above_the_matrix() -> None:
    lost = "Unable to determine the device handle for GPU0000:DB:00.0: Unknown Error\n"
    text = lost + matrix(pix, n=7, nics=NICS[:7])
    r = topo(text, H100)
    assert codes(r) == ["gpu.topology/gpu-not-listed"] and r.summary == (
        "0000:DB:00.0 not listed by nvidia-smi topo: a GPU does not answer the driver")
    assert codes(topo(text)) == ["gpu.topology/not-graded"]


def test_tool_errors_directly() -> None:
    from preflight.findings import Findings

    f = Findings()
    errs = [ToolError("inforom_corrupted", "w", "s", "r", "0000:01:00.0"),
            ToolError("no_permission", "p", "s", "r", "0000:02:00.0"),
            ToolError("needs_reset", "n", "needs", "r", "0000:03:00.0"),
            ToolError("no_driver", "d", "s", "r")]
    gpu.tool_errors("gpu.nvlink", errs, "tool", True, f)
    assert [(x.code, x.summary) for x in f.items] == [
        ("gpu.nvlink/not-graded", "0000:02:00.0 not listed by tool: s"),
        ("gpu.nvlink/gpu-not-listed", "0000:03:00.0 not listed by tool: needs"),
        ("gpu.nvlink/tool-failed", "tool failed: d")]
    g = Findings()
    gpu.tool_errors("gpu.topology", [ToolError("gpu_lost", "l", "s", "r")], "tool", False, g)
    assert [(x.code, x.summary, x.evidence, x.remedy) for x in g.items] == [
        ("gpu.topology/not-graded", "a GPU not listed by tool: s", ["l"], "r")]


def test_every_code_graders_name_is_in_the_table() -> None:
    import re
    from pathlib import Path

    src = Path(gpu.__file__).read_text() + Path(gpu.__file__).with_name("nvlink_counters.py").read_text()
    named = set(re.findall(r'"(gpu\.(?:inventory|nvlink|topology)/[a-z0-9-]+)"', src))
    table = {c for c in policy.builtin().codes if c.split("/")[0] in ("gpu.inventory", "gpu.nvlink", "gpu.topology")}
    assert named == table
    assert set(gpu.GPU_ERROR_CODES.values()) | {c for v in gpu.UNREAD_CODES.values() for c in v} | {
        c for v in gpu.LISTING_CODES.values() for c in v} <= table


# --------------------------------------------------------------------------- profiles without the keys, texts, declaration


def bare(check: str, inputs: dict[str, str], values: dict[str, Any] | None = None) -> Result:
    """Grade with a profile that holds only `values` (a site profile that extends nothing)."""
    from preflight.framing import frame
    from preflight.grading import Options, grade_check
    from preflight.profile import Profile

    reg = registry.load()
    docs = {probe: frame(text).docs for probe, text in inputs.items()}
    [r] = grade_check(reg.checks[check], "node1", FactStore(reg, docs=docs), Profile("bare", values=values or {}),
                      Options(mode="analyze"), None)
    return r


def test_a_profile_without_the_keys_grades_nothing_it_does_not_name() -> None:
    odd = csv([row(i, pm="Disabled", gen="1", width="4", name="NVIDIA L40S") for i in range(7)])
    r = bare("gpu.inventory", {"nvidia-smi-query": odd})
    assert r.status is Status.PASS and r.summary == "7 x NVIDIA L40S"
    mig = bare("gpu.inventory", {"nvidia-smi-query": eight(g0={"mig": "Enabled"})})
    assert codes(mig) == ["gpu.inventory/mig-enabled"] and "gpu.mig_allowed = true ()" in mig.evidence
    nv = bare("gpu.nvlink", {"nvidia-smi-nvlink": links("NVIDIA H100 80GB HBM3", 1, 17).replace("26.562", "1")})
    assert nv.status is Status.PASS and nv.facts["gpus"][0]["expected"] == 0
    t = bare("gpu.topology", {"nvidia-smi-topo": matrix(lambda i, k: "PXB" if i == k else "SYS")})
    assert t.status is Status.PASS and t.facts["gpus"][0]["local_nics"] == ["mlx5_0"]
    pix_only = bare("gpu.topology", {"nvidia-smi-topo": matrix(lambda i, k: "PXB" if i == k else "SYS")},
                    {"topology.local_nic_levels": ["pix"]})
    assert codes(pix_only) == ["gpu.topology/no-gpu-near-a-nic"]
    assert bare("gpu.topology", {"nvidia-smi-topo": matrix(pix, nics=[])}).status is Status.PASS
    assert bare("gpu.nvlink", {"nvidia-smi-nvlink": "zzz\n"}).facts == {"links_total": 0,
                                                                       "codes": ["gpu.nvlink/not-recognised"]}


def test_exact_texts_of_findings() -> None:
    from preflight.profile import load

    gen = load("generic")
    drv = inv("No devices were found\n", probe="nvidia-smi-q")
    assert drv.remedy.endswith("; check that the NVIDIA driver is loaded (`lsmod | grep nvidia`, `dmesg -T | grep "
                               "NVRM`); a driver/library mismatch needs a reboot after a driver update")
    bad = inv(csv([row(0), row(1) + ", x"]))
    assert bad.remedy == ("a row that does not fit the CSV header is a GPU that was listed but not read: rerun "
                          "`nvidia-smi --query-gpu=... --format=csv` on the node and check that GPU's row")
    odd = inv(csv([row(i, name="NVIDIA L40S") for i in range(7)]))
    assert odd.evidence[-1] == ("gpu.expect_symmetric_sockets = true ("
                                f"{gen.source('gpu.expect_symmetric_sockets')})")
    down = nvl(links("NVIDIA A100-SXM4-80GB", 1, 11))
    assert down.evidence[-1] == f"nvlink.model_links[A100-SXM] = 12 ({gen.source('nvlink.model_links')})"
    counters = nvl("GPU 0: A (UUID: GPU-1)\n\t Link 0: Data Tx: 1 KiB\n")
    assert counters.summary == ("not recognised: nvidia-smi nvlink output without link states or error counts "
                                "(expected `Link <n>: <speed> GB/s`, `<inactive>` or `Link <n>: <counter> Errors: "
                                "<count>`; these are another sub-command's lines)")
    assert counters.facts == {"links_total": 0, "codes": ["gpu.nvlink/not-recognised"]}
    garbage = nvl("zzz\n")
    assert garbage.summary == ("not recognised: nvidia-smi nvlink output without a GPU line (expected `GPU <n>: "
                               "<name> (UUID: ...)` and its `Link <n>:` lines)")
    assert garbage.remedy == "run `nvidia-smi nvlink --status` by hand and check its output"
    lost = "Unable to determine the device handle for GPU 0000:9D:00.0: Unknown Error\n"
    assert nvl(lost, H100, mode="run").facts == {"links_total": 0, "codes": ["gpu.nvlink/gpu-not-listed"],
                                                 "problems": [nvl(lost, H100, mode="run").summary]}
    assert topo(lost, H100, mode="run").facts["gpu_count"] == 0
    none = topo("Legend:\n")
    assert none.summary == ("not recognised: no topology matrix in the nvidia-smi topo -m output (expected a header "
                            "naming GPU0.. and a `GPU0  X ...` row)")
    assert none.remedy == "run `nvidia-smi topo -m` by hand and check its output"
    assert nvl("", H100, mode="run").facts == {"links_total": 0, "codes": ["gpu.nvlink/no-nvlink"]}


def test_exact_texts_of_topology_findings() -> None:
    text = matrix(pix)
    lines = text.splitlines()
    for r_i, c_i in ((3, 6), (6, 3)):
        cells = lines[r_i].split("\t")
        cells[c_i] = "SYS"
        lines[r_i] = "\t".join(cells)
    r = topo("\n".join(lines) + "\n", H100)
    assert r.remedy.startswith("drain the node; check the fabric manager (`systemctl status nvidia-fabricmanager`)")
    short = topo(matrix(pix).replace("GPU3\tNV18", "GPU3\tC2C").replace("GPU5\tNV18", "GPU5\tC2C"))
    assert "GPU3, GPU5 (graded on the cells read)" in short.summary
    assert short.remedy == "run `nvidia-smi topo -m` by hand and check the row(s)"
    far = topo(matrix(lambda i, k: "SYS" if i >= 4 else pix(i, k)))
    assert far.summary.startswith("4 GPU(s) without a NIC at PIX/PXB: GPU4, GPU5, GPU6, GPU7: their")
    assert far.remedy.startswith("balance the NICs over the GPUs' PCIe switches")


@pytest.mark.parametrize(("idx", "summary"), [
    ((0, 1, 2, 3, 4, 5, 7), "7 of 8 GPUs visible (index 6 missing)"),
    ((1, 2, 3, 4, 5, 6, 7), "7 of 8 GPUs visible (index 0 missing)"),
    ((0, 2, 4, 6), "4 of 8 GPUs visible (index 1, 3, 5 missing)"),
])
def test_missing_indexes(idx: tuple[int, ...], summary: str) -> None:
    assert inv(csv([row(i) for i in idx]), H100).summary == summary


def test_one_low_two_high_is_a_missing_gpu() -> None:
    text = csv([row(i, bus=f"00000000:{b}:00.0", name="NVIDIA L40S") for i, b in enumerate(["18", "9A", "AB"])])
    r = inv(text)
    assert r.summary == "3 GPUs, a GPU is probably missing (1 on one CPU socket, 2 on the other)"
    assert inv(csv([row(0, name="NVIDIA L40S")])).status is Status.PASS


def test_lost_gpus_alone_and_unnamed() -> None:
    r = inv("Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error\n"
            "Unable to determine the device handle for GPU 0000:0C:00.0: GPU is lost\n", probe="nvidia-smi-q")
    assert r.summary == ("no usable GPU: GPU 0000:0B:00.0 does not answer (Unknown Error), GPU 0000:0C:00.0 does not "
                         "answer (GPU is lost)")
    unnamed = inv("Unable to determine the device handle for GPU: Unknown Error\n", probe="nvidia-smi-q")
    assert unnamed.summary == "no usable GPU: GPU ? does not answer (Unknown Error)"


def test_mig_evidence_from_the_table() -> None:
    r = inv(fixture_text("nvidia-smi/table_590_1xh100_mig.txt"), probe="nvidia-smi-table")
    assert r.evidence[0] == "GPU 0 (00000000:4E:00.0): index=0, mig=Enabled"


def test_checks_declared() -> None:
    reg = registry.load()
    inv_c, nv_c, topo_c = reg.checks["gpu.inventory"], reg.checks["gpu.nvlink"], reg.checks["gpu.topology"]
    assert gpu.INVENTORY_KEYS == {"gpu.count": int, "gpu.model": str, "gpu.min_pcie_gen": int,
                                  "gpu.min_pcie_width": int, "gpu.persistence_mode": bool, "gpu.mig_allowed": bool,
                                  "gpu.expect_symmetric_sockets": bool}
    assert gpu.NVLINK_KEYS == {"nvlink.links_per_gpu": int, "nvlink.min_link_gbps": (int, float),
                               "nvlink.model_links": dict}
    assert gpu.TOPOLOGY_KEYS == {"topology.require_local_nic": bool, "topology.local_nic_levels": list,
                                 "nvlink.links_per_gpu": int, "gpu.count": int, "gpu.expect_symmetric_sockets": bool}
    assert (inv_c.profile_keys, nv_c.profile_keys, topo_c.profile_keys) == (gpu.INVENTORY_KEYS, gpu.NVLINK_KEYS,
                                                                          gpu.TOPOLOGY_KEYS)
    assert inv_c.inputs == gpu.LISTINGS and inv_c.required == ("nvidia-smi-query",)
    assert nv_c.required == nv_c.inputs == ("nvidia-smi-nvlink",)
    assert topo_c.required == topo_c.inputs == ("nvidia-smi-topo",)
    assert [list(c) for c in gpu.PROBE_NVLINK.commands] == [["nvidia-smi", "nvlink", "--status"],
                                                            ["nvidia-smi", "nvlink", "-s"]]
    assert [list(c) for c in gpu.PROBE_TOPO.commands] == [["nvidia-smi", "topo", "-m"]]
    assert [list(c) for c in gpu.PROBE_L.commands] == [["nvidia-smi", "-L"]]
    assert [p.name for p in (gpu.PROBE_QUERY, gpu.PROBE_L, gpu.PROBE_NVLINK, gpu.PROBE_TOPO)] == [
        "nvidia-smi-query", "nvidia-smi-L", "nvidia-smi-nvlink", "nvidia-smi-topo"]
    assert {p.timeout for p in (gpu.PROBE_QUERY, gpu.PROBE_L, gpu.PROBE_NVLINK, gpu.PROBE_TOPO)} == {15}
    assert gpu.MIG_KEYS == ("index", "pci.bus_id", "mig.mode.current", "mig.mode.pending", "mig")
    assert gpu.PCIE_KEYS == ("pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current",
                             "pcie.link.width.max", "pstate")
    assert gpu.UNUSABLE == ("gpu_lost", "needs_reset", "insufficient_power")
    assert gpu.LISTINGS == ("nvidia-smi-query", "nvml", "nvidia-smi-table", "nvidia-smi-L", "nvidia-smi-q")
    assert gpu.LOST_REMEDY.startswith("a GPU may have fallen off the bus: check Xid 79")
    assert gpu.LOST_REMEDY.endswith("otherwise reseat or replace the GPU/baseboard")
    assert gpu.MIG_REMEDY.startswith("disable MIG (`nvidia-smi -i <index> -mig 0`)")
    assert gpu.MIG_REMEDY.endswith("a site that runs MIG on purpose sets gpu.inventory/mig-enabled to pass")
    assert gpu.NVLINK_DOWN_REMEDY.startswith("drain the node; check `nvidia-smi nvlink -e` error counters")
    assert gpu.NIC_REMEDY.startswith("GPUDirect RDMA needs a NIC under the same PCIe switch")
    assert gpu.DRIVER_REMEDY.startswith("check that the NVIDIA driver is loaded")


def test_evidence_of_pcie_findings() -> None:
    r = inv(eight(g2={"width": "8"}), H100)
    assert r.evidence[0] == ("GPU 2 (00000000:3A:00.0): pcie.link.gen.current=5, pcie.link.gen.max=5, "
                             "pcie.link.width.current=8, pcie.link.width.max=16, pstate=P0")
    assert r.evidence[1].startswith("gpu.min_pcie_width = 16 (H100 SXM5")
    capped = inv(eight(g2={"gen": "4", "genmax": "4"}), H100)
    assert capped.evidence[-1].startswith("gpu.min_pcie_gen = 5 (H100 SXM5")
    pending = inv(eight(g3={"pending": "Enabled"}), H100)
    assert pending.evidence == ["GPU 3 (00000000:5D:00.0): index=3, pci.bus_id=00000000:5D:00.0, "
                                "mig.mode.current=Disabled, mig.mode.pending=Enabled",
                                "gpu.mig_allowed = false (full-GPU training nodes run with MIG disabled)"]


def test_inventory_notes_and_sources() -> None:
    def build(caps: dict[str, str]) -> gpu.Inventory:
        return gpu.build_inventory(FactStore(registry.load(), captures={k: capture(k, v) for k, v in caps.items()}).facts)

    assert build({"nvidia-smi-query": "No devices were found\n"}).notes == []
    many = build({"nvidia-smi-query": "a\nb\nc\nd\n"})
    assert many.notes == ["--query-gpu output without a header and of unknown fields: not read", "a", "b", "c"]
    q = ("Driver Version : 550.90.07\nCUDA Version : 12.4\nAttached GPUs : 1\nGPU 00000000:01:00.0\n"
         "    Product Name : NVIDIA A10\n")
    both = build({"nvidia-smi-query": "index, name, driver_version\n0, NVIDIA A10, 535.1\n", "nvidia-smi-q": q})
    assert (both.driver, both.cuda, both.source) == ("535.1", "12.4", "nvidia-smi-query")
    alone = build({"nvidia-smi-q": q})
    assert (alone.driver, alone.cuda) == ("550.90.07", "12.4")
    nvml_down = ('{"ok": false, "error": "Driver Not Loaded", "error_type": "NVMLError_DriverNotLoaded", '
                 '"driver": "", "gpus": []}')
    nd = build({"nvml": nvml_down})
    assert [e.kind for e in nd.errors] == ["no_driver"] and nd.nvml_error is None and len(nd.notes) == 1
    r = inv(nvml_down, probe="nvml")
    assert codes(r) == ["gpu.inventory/no-gpu-listed"]
    ok = build({"nvml": fixture_text("nvidia-smi/nvml_8xh100_ok.json")})
    assert ok.notes == [] and ok.errors == [] and ok.source == "nvml" and ok.counts == {"nvml": 8}
    table = build({"nvidia-smi-table": fixture_text("nvidia-smi/table_590_1xh100_mig.txt")})
    assert (table.mig_devices, table.partial, table.cuda) == (2, False, "13.1")
    lst = build({"nvidia-smi-L": "GPU 0: A (UUID: GPU-1)\n  MIG 1g.5gb Device 0: (UUID: MIG-1)\n"})
    assert lst.mig_devices == 1 and lst.counts == {"nvidia-smi-L": 1}


def test_grace_coupled_gpus_reach_their_nics_through_the_cpu_by_design() -> None:
    head = "\tGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"
    rows = ["GPU0\t X \tNV18\tSYS\tSYS\t0-71\t0,3-9,11-17\t\t2", "GPU1\tNV18\t X \tSYS\tSYS\t0-71\t0,3-9,11-17\t\t10",
            "NIC0\tSYS\tSYS\t X \tSYS", "NIC1\tSYS\tSYS\tSYS\t X "]
    r = topo("\n".join([head, *rows]) + "\n")
    assert r.status is Status.PASS and r.facts["gpus"][1]["gpu_numa_id"] == "10"
    assert any(e.startswith("GPUs with a NUMA node of their own") for e in r.evidence)
    assert codes(topo("\n".join([head, *rows]).replace("\t2\n", "\tN/A\n").replace("\t10\n", "\tN/A\n")
                      + "\n")) == ["gpu.topology/no-gpu-near-a-nic"]
    assert codes(topo("\n".join([head, *rows]) + "\n", H100)) == ["gpu.topology/gpu-without-local-nic-required"]


def test_remedies_and_joined_summaries() -> None:
    from preflight.profile import load

    h = load(H100)
    extra = inv(csv([row(i) for i in range(8)] + [row(7).replace("7, ", "8, ", 1).replace(":DB:", ":E1:")]), H100)
    assert extra.remedy == "grade this node with the profile that matches its hardware (--profile)"
    assert extra.evidence[0].startswith("8, ") and ":E1:" in extra.evidence[0]  # the row of the GPU beyond the count
    assert extra.evidence[1] == "nvidia-smi-query: 9 GPU(s) listed where gpu.count expects 8"
    assert extra.evidence[3] == f"gpu.count = 8 ({h.source('gpu.count')})"
    caps = {"nvidia-smi-query": eight(), "nvidia-smi-L": "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)\n"}
    [dis] = grade_text("gpu.inventory", caps, H100)
    assert dis.remedy.startswith("a GPU appearing and disappearing points at a failing GPU or PCIe link")
    odd = inv(csv([row(i, name="NVIDIA L40S") for i in range(7)]))
    assert odd.remedy.endswith("; if the node really has an odd GPU count, set gpu.count in a site profile")
    wrong = inv(eight(g0={"name": "NVIDIA H800"}, g1={"name": "NVIDIA A800"}), H100)
    assert wrong.summary.startswith("2 GPU(s) are not NVIDIA H100 80GB HBM3: NVIDIA A800, NVIDIA H800")
    assert f"gpu.model = NVIDIA H100 80GB HBM3 ({h.source('gpu.model')})" in wrong.evidence
    assert wrong.remedy.startswith("(1) grade this node with the profile that matches its hardware (--profile), "
                                   "or move it to the partition for that GPU model (2) mixed models")
    mixed = inv(csv([row(0, name="NVIDIA A100-SXM4-80GB"), row(1, name="NVIDIA A100-SXM4-40GB")]))
    assert mixed.remedy.startswith("mixed models make collectives run at the slowest GPU's pace")
    pers = inv(eight(g7={"pm": "Disabled"}), H100)
    assert pers.evidence[-1] == f"gpu.persistence_mode = true ({h.source('gpu.persistence_mode')})"
    assert pers.remedy.startswith("enable the persistence daemon")
    pend = inv(eight(g3={"pending": "Enabled"}), H100)
    assert pend.remedy.startswith("clear the pending MIG mode")
    for over, start in (({"width": "8"}, "drain the node; reseat the GPU/riser"),
                        ({"gen": "4", "genmax": "4"}, "check the BIOS PCIe speed setting"),
                        ({"gen": "4"}, "re-check under load")):
        assert inv(eight(g2=over), H100).remedy.startswith(start)
    fast = inv(eight(g2={"gen": "4"}), H100)
    assert not any("power-saving downshift" in e for e in fast.evidence)
    broken = inv(eight(g3={"mem": "[GPU is lost]"}, g5={"mem": "[Unknown Error]"}))
    assert broken.summary == ("GPU not answering: GPU 3 (00000000:5D:00.0) [GPU is lost], "
                              "GPU 5 (00000000:AB:00.0) [Unknown Error]")
    none = inv(csv([row(0) + ", x"]))
    assert none.remedy == "rerun `nvidia-smi --query-gpu=... --format=csv` on the node"
    unk = inv("index, name\n")
    assert unk.remedy == ("run `nvidia-smi --query-gpu=index,name,pci.bus_id --format=csv` by hand and check its "
                          "output")
    some = inv(csv([row(i) for i in range(7)] + [row(7) + ", x"]))
    assert some.facts["counts_by_source"] == {"nvidia-smi-query": 8}


def test_nvlink_texts_and_boundaries() -> None:
    from preflight.profile import load

    h = load(H100)
    r = nvl("", H100, mode="run")
    assert r.evidence[1] == f"nvlink.links_per_gpu = 18 ({h.source('nvlink.links_per_gpu')})"
    assert r.remedy.startswith("check that the fabric manager runs and the NVSwitch baseboard is seen")
    assert nvl("", mode="run").facts == {"links_total": 0}
    many = nvl("".join(f"line {i}\n" for i in range(7)))
    assert many.evidence == [f"line {i}" for i in range(5)]
    counters = "GPU 0: A (UUID: GPU-1)\n" + "".join(f"\t Link {i}: Data Rx: 0 KiB\n" for i in range(7))
    c = nvl(counters)
    assert len(c.evidence) == 5 and c.remedy == "run `nvidia-smi nvlink --status` for the link states"
    slow = nvl(links("NVIDIA H100 80GB HBM3", 8, 18).replace("Link 4: 26.562", "Link 4: 13.281", 1), H100)
    assert slow.evidence[-1] == f"nvlink.min_link_gbps = 26 ({h.source('nvlink.min_link_gbps')})"
    assert slow.remedy.startswith("a link trained at reduced speed slows every collective")
    mixed = nvl(links("Example X", 1, 2, "13.281") + links("Example X", 1, 2).replace("GPU 0", "GPU 1"))
    assert mixed.summary == "4 NVLinks up on 2 GPU(s), 13.281/26.562 GB/s"
    two = nvl(links("NVIDIA H100 80GB HBM3", 2, 18, down=((0, 1), (1, 2))))
    assert two.summary == "NVLink down: GPU 0 (1 inactive); GPU 1 (1 inactive)"
    assert sum(e.startswith("nvlink.model_links[") for e in two.evidence) == 1
    bare_gpus = nvl("GPU 0: NVIDIA A10 (UUID: GPU-1)\nGPU 1: NVIDIA A10 (UUID: GPU-2)\n")
    assert bare_gpus.status is Status.PASS and bare_gpus.evidence == []


def test_expected_links_of_pcie_and_nvl_boards() -> None:
    from preflight.profile import load

    gen = load("generic")
    assert gpu.expected_links(gen, "NVIDIA H200 NVL") == (0, "")
    assert gpu.expected_links(gen, "NVIDIA H800 PCIe") == (0, "")
    assert gpu.expected_links(gen, "NVIDIA H800")[0] == 8
    assert gpu.expected_links(gen, "NVIDIA H200")[0] == 18


def test_truncated_model_name_compares_its_prefix() -> None:
    r = inv(eight(**{f"g{i}": {"name": "NVIDIA H100 80GB HBMX..."} for i in range(8)}), H100)
    assert codes(r) == ["gpu.inventory/wrong-model"]


def test_profile_hint_counts_each_unusable_gpu_once() -> None:
    def hint(caps: dict[str, str]) -> tuple[str | None, int | None]:
        return gpu.profile_hint(FactStore(registry.load(), captures={k: capture(k, v) for k, v in caps.items()}))

    rows = csv([row(i) for i in range(7)])
    same = rows + "Unable to determine the device handle for GPU3: 0000:5D:00.0: Unknown Error\n"
    assert hint({"nvidia-smi-query": same}) == ("NVIDIA H100 80GB HBM3", 7)
    six = "".join(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i})\n" for i in range(6))
    assert hint({"nvidia-smi-L": six + "GPU is lost\n"}) == ("NVIDIA H100 80GB HBM3", 6)


def test_many_gpus_missing_quote_twelve_rows() -> None:
    r = bare("gpu.inventory", {"nvidia-smi-query": csv([row(i % 8, bus=f"00000000:{i + 16:02X}:00.0")
                                                        .replace(f"{i % 8}, ", f"{i}, ", 1) for i in range(13)])},
             {"gpu.count": 16})
    assert r.summary == "13 of 16 GPUs visible" and len(r.evidence) == 3 + 12


def test_topology_profiles_without_the_keys() -> None:
    def pix_nic(i: int, k: int) -> str:
        return "PIX" if i == k else "SYS"

    assert bare("gpu.topology", {"nvidia-smi-topo": matrix(pix_nic)}).status is Status.PASS
    only_pix = bare("gpu.topology", {"nvidia-smi-topo": matrix(lambda i, k: "PXB" if i == k else "SYS")},
                    {"topology.local_nic_levels": ["PIX"], "topology.require_local_nic": True})
    assert only_pix.summary.startswith("8 GPU(s) without a NIC at PIX: GPU0")
    assert only_pix.evidence[-1] == "topology.require_local_nic = true ()"
    lost = "Unable to determine the device handle for GPU0000:DB:00.0: Unknown Error\n" + matrix(pix, n=7,
                                                                                                   nics=NICS[:7])
    assert codes(bare("gpu.topology", {"nvidia-smi-topo": lost}, {"topology.require_local_nic": True})) == [
        "gpu.topology/gpu-not-listed"]
    assert codes(bare("gpu.topology", {"nvidia-smi-topo": lost}, {"nvlink.links_per_gpu": 18})) == [
        "gpu.topology/gpu-not-listed"]
    assert codes(bare("gpu.topology", {"nvidia-smi-topo": lost})) == ["gpu.topology/not-graded"]


def test_topology_summaries() -> None:
    from preflight.profile import load

    two = topo("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV4\t0-7\nGPU1\tNV4\t X \t0-7\n")
    assert two.summary == "2 GPU(s), pairs: NV4 x1; no NIC in the matrix"
    lines = matrix(pix).splitlines()
    for r_i, c_i in ((3, 6), (6, 3)):
        cells = lines[r_i].split("\t")
        cells[c_i] = "SYS"
        lines[r_i] = "\t".join(cells)
    text = "\n".join(lines) + "\n"
    assert topo(text).summary == "8 GPU(s), pairs: NV18 x27, SYS x1; 8 NIC(s), 8 GPU(s) with a local NIC"
    r = topo(text, H100)
    assert r.evidence[-1] == f"nvlink.links_per_gpu = 18 ({load(H100).source('nvlink.links_per_gpu')})"
    few = topo(matrix(pix, nv="NV17"), H100)
    assert few.remedy == "see gpu.nvlink for the links that are down; a reboot re-trains them"


@pytest.mark.parametrize("unread", ["ERR!", "[Unknown Error]", "Unknown Error", "[GPU is lost]", "N/A"])
def test_a_name_the_driver_could_not_read_is_no_model(unread: str) -> None:
    r = inv(csv([row(0, name=unread), row(1, name="NVIDIA A40")]))
    assert "gpu.inventory/mixed-models" not in codes(r)
    r = inv(eight(**{"g0": {"name": unread}}), H100)
    assert "gpu.inventory/wrong-model" not in codes(r)
    r = inv(eight(**{"g0": {"name": unread}, "g1": {"name": "NVIDIA A40"}}), H100)
    assert "gpu.inventory/wrong-model" in codes(r)
    assert "1 GPU(s) are not NVIDIA H100 80GB HBM3: NVIDIA A40" in r.summary
    assert f"are not NVIDIA H100 80GB HBM3: {unread}" not in r.summary


@pytest.mark.parametrize(("n", "edit", "finding"), [
    (7, None, "7 GPUs, a GPU is probably missing (4 on NUMA node 0, 3 on NUMA node 1)"),
    (8, None, ""),  # 4 + 4
    (6, None, ""),  # 4 + 2: an even count is a layout, not a loss
    (3, None, ""),  # every GPU on NUMA node 0
    (7, ("\t1\t\tN/A", "\tN/A\t\tN/A"), ""),  # a VM's matrix without NUMA nodes
    (8, ("\nGPU7\t", "\nGPU9\t"), ""),  # a row not read: the matrix is not whole (4 + 3 of 8 columns)
    (10, None, ""),  # 4 + 6: an even count
])
def test_topology_odd_uneven_numa_split(n: int, edit: tuple[str, str] | None, finding: str) -> None:
    text = matrix(lambda i, k: "SYS", nics=[], n=n)
    if edit:
        text = text.replace(*edit)
    r = topo(text)
    if finding:
        assert r.status is Status.FAIL and codes(r) == ["gpu.topology/gpu-missing-by-numa-layout"]
        assert r.summary == finding and r.evidence[0] == text.splitlines()[0].strip()
        assert r.evidence[-1].startswith("gpu.expect_symmetric_sockets = true (")
        assert r.remedy == gpu.LOST_REMEDY + "; if the node really has an odd GPU count, set gpu.count in a site profile"
        # a profile with a count: gpu.inventory grades the count
        assert "gpu.topology/gpu-missing-by-numa-layout" not in codes(topo(text, H100))
    else:
        assert "gpu.topology/gpu-missing-by-numa-layout" not in codes(r)


def test_topology_names_the_gpus_whose_nics_are_all_on_the_other_socket() -> None:
    r = topo(matrix(lambda i, k: "NODE" if i < 4 else "SYS", n=8))
    assert codes(r) == ["gpu.topology/no-gpu-near-a-nic"]
    assert r.summary.endswith("; GPU4, GPU5, GPU6, GPU7 reach a NIC only across the CPU interconnect (SYS), the "
                              "others nearer")
    every = topo(matrix(lambda i, k: "SYS", n=8))
    assert every.summary.endswith("so GPUDirect RDMA crosses the CPU")


def _q(blocks: list[str], attached: int) -> str:
    head = ("==============NVSMI LOG==============\n\nTimestamp                                 : Fri Oct 24 11:07:12 2025\n"
            "Driver Version                            : 550.90.07\nCUDA Version                              : 12.4\n\n"
            f"Attached GPUs                             : {attached}\n")
    return head + "".join(f"GPU 00000000:{b}:00.0\n    Product Name                          : NVIDIA H100 80GB HBM3\n"
                          "    Remapped Rows\n        Pending                           : No\n" for b in blocks)


@pytest.mark.parametrize(("blocks", "attached", "code"), [
    (["52"], 8, "gpu.inventory/not-a-listing"),  # -i 52:00.0
    (["18", "2A"], 8, "gpu.inventory/not-a-listing"),  # an excerpt of two blocks
    (["18", "2A"], 2, ""),  # the whole listing
])
def test_q_blocks_of_some_gpus_are_not_a_listing(blocks: list[str], attached: int, code: str) -> None:
    [r] = grade_text("gpu.inventory", {"nvidia-smi-q": _q(blocks, attached)}, "generic")
    if code:
        assert r.status is Status.SKIP and codes(r) == [code]
        assert r.summary == (f"nvidia-smi -q shows {len(blocks)} of {attached} attached GPU(s) (a -i selection or an "
                             "excerpt): the GPU count is not graded")
        assert r.evidence == [f"Attached GPUs : {attached}", *[f"GPU 00000000:{b}:00.0" for b in blocks]]
        assert r.remedy == "run `nvidia-smi -L` (or `--query-gpu=index,name,pci.bus_id --format=csv`) for the node's GPUs"
    else:
        assert r.status is Status.PASS and r.facts["count"] == len(blocks)


def test_q_blocks_without_the_header_are_not_a_listing() -> None:
    text = _q(["52"], 8).split("Attached GPUs")[1].split("\n", 1)[1]  # an excerpt from the first GPU block on
    [r] = grade_text("gpu.inventory", {"nvidia-smi-q": text}, "generic")
    assert codes(r) == ["gpu.inventory/not-a-listing"]
    assert r.summary.startswith("nvidia-smi -q shows 1 of ? attached GPU(s)")
    assert r.evidence == ["(no Attached GPUs line)", "GPU 00000000:52:00.0"]
