"""`nvidia-smi -q -x` (the XML form): read into the same QReport as the text `-q`, graded alike.

Fixtures are the project's own, written in the tool's XML format (DTD nvsmi_device_v11/v12 tag
names; tests/fixtures/nvidia-smi-q/*.xml); GPUs of other shapes are built inline."""

from __future__ import annotations

import sys

import pytest

from preflight.checks.gpu_health import from_q
from preflight.framing import Doc, frame
from preflight.model import Result, Status
from preflight.parsers import nvsmi_q, nvsmi_xml
from preflight.parsers.nvsmi_q import QReport
from tests.conftest import ROOT, analyze_text, fixture_text, grade_text

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

Q = "nvidia-smi-q/"
H100 = Q + "h100x1_535_healthy.xml"
V100 = Q + "v100x1_470_retired_pending.xml"
HEAD = """<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
<nvidia_smi_log>
	<timestamp>Wed Jan 15 10:20:31 2025</timestamp>
	<driver_version>550.127.05</driver_version>
	<cuda_version>12.4</cuda_version>
	<attached_gpus>{n}</attached_gpus>
"""
TAIL = "</nvidia_smi_log>\n"
BUSES = ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]


def gpu(bus: str = "18", pending: str = "No", dram_unc: str = "0", parity: str = "0", failure: str = "No",
        none_banks: str = "0", mig: str = "Disabled", extra: str = "") -> str:
    """One H100's `<gpu>` element (the health sections) as nvidia-smi -q -x prints it."""
    return f"""	<gpu id="00000000:{bus}:00.0">
		<product_name>NVIDIA H100 80GB HBM3</product_name>
		<persistence_mode>Enabled</persistence_mode>
		<mig_mode>
			<current_mig>{mig}</current_mig>
			<pending_mig>{mig}</pending_mig>
		</mig_mode>
		<uuid>GPU-0c5e7a41-7d2b-4f3e-9a1c-00000000{bus}00</uuid>
		<gpu_reset_status>
			<reset_required>No</reset_required>
			<drain_and_reset_recommended>No</drain_and_reset_recommended>
		</gpu_reset_status>
		<pci>
			<pci_bus_id>00000000:{bus}:00.0</pci_bus_id>
			<pci_gpu_link_info>
				<pcie_gen>
					<max_link_gen>5</max_link_gen>
					<current_link_gen>5</current_link_gen>
				</pcie_gen>
				<link_widths>
					<max_link_width>16x</max_link_width>
					<current_link_width>16x</current_link_width>
				</link_widths>
			</pci_gpu_link_info>
		</pci>
		<fb_memory_usage>
			<total>81559 MiB</total>
		</fb_memory_usage>
		<ecc_mode>
			<current_ecc>Enabled</current_ecc>
			<pending_ecc>Enabled</pending_ecc>
		</ecc_mode>
		<ecc_errors>
			<volatile>
				<sram_correctable>0</sram_correctable>
				<sram_uncorrectable_parity>{parity}</sram_uncorrectable_parity>
				<sram_uncorrectable_secded>0</sram_uncorrectable_secded>
				<dram_correctable>0</dram_correctable>
				<dram_uncorrectable>{dram_unc}</dram_uncorrectable>
			</volatile>
			<aggregate>
				<sram_correctable>0</sram_correctable>
				<sram_uncorrectable_parity>{parity}</sram_uncorrectable_parity>
				<sram_uncorrectable_secded>0</sram_uncorrectable_secded>
				<dram_correctable>0</dram_correctable>
				<dram_uncorrectable>{dram_unc}</dram_uncorrectable>
				<sram_threshold_exceeded>No</sram_threshold_exceeded>
			</aggregate>
		</ecc_errors>
		<remapped_rows>
			<remapped_row_corr>0</remapped_row_corr>
			<remapped_row_unc>{0 if pending == "No" else 1}</remapped_row_unc>
			<remapped_row_pending>{pending}</remapped_row_pending>
			<remapped_row_failure>{failure}</remapped_row_failure>
			<row_remapper_histogram>
				<row_remapper_histogram_max>2560 bank(s)</row_remapper_histogram_max>
				<row_remapper_histogram_high>0 bank(s)</row_remapper_histogram_high>
				<row_remapper_histogram_partial>0 bank(s)</row_remapper_histogram_partial>
				<row_remapper_histogram_low>0 bank(s)</row_remapper_histogram_low>
				<row_remapper_histogram_none>{none_banks} bank(s)</row_remapper_histogram_none>
			</row_remapper_histogram>
		</remapped_rows>
		<temperature>
			<gpu_temp>33 C</gpu_temp>
		</temperature>{extra}
	</gpu>
"""


def log(*gpus: str, attached: int | None = None) -> str:
    return HEAD.format(n=len(gpus) if attached is None else attached) + "".join(gpus) + TAIL


def xml(text: str, command: str = "") -> QReport:
    """Read as analyze frames it: the documents -q recognises, read as one."""
    docs = [d for d in frame(text).docs if nvsmi_q.detect(d)]
    assert docs, "not recognised as nvidia-smi -q"
    doc = docs[0] if len(docs) == 1 else Doc.join(docs)
    if command:
        doc.command = command
    return nvsmi_q.parse(doc)


def health(text: str, **kw: object) -> Result:
    results = grade_text("gpu.health", {"nvidia-smi-q": text}, **kw)  # type: ignore[arg-type]
    assert len(results) == 1, results
    return results[0]


def codes(r: Result) -> set[str]:
    return set(r.facts.get("codes", []))


def text_sample(entry_id: str) -> str:
    path = ROOT / "preflight" / "parsers" / "nvidia-smi-q.inventory.toml"
    entries = tomllib.loads(path.read_text(encoding="utf-8"))["entry"]
    return str(next(e for e in entries if e["id"] == entry_id)["sample"])


# ---------------------------------------------------------------------------------------
# the same facts as the text form


def test_h100_v12_paths_values_and_lines() -> None:
    rep = xml(fixture_text(H100))
    assert rep.recognised and not rep.excerpt and rep.listing
    assert rep.header == {"Timestamp": "Tue Mar  4 09:12:44 2025", "Driver Version": "535.161.08",
                          "CUDA Version": "12.2", "Attached GPUs": "1"}
    assert rep.driver == "535.161.08" and rep.cuda == "12.2" and rep.attached == 1
    assert rep.header_lines["Driver Version"] == "<driver_version>535.161.08</driver_version>"
    assert rep.header_lines["Timestamp"] == "<timestamp>Tue Mar 4 09:12:44 2025</timestamp>"
    g = rep.gpus[0]
    assert (g.index, g.bus_id, g.index_known, g.label) == (0, "00000000:1B:00.0", True, "GPU 0 (00000000:1B:00.0)")
    want = {
        "Product Name": "NVIDIA H100 80GB HBM3", "Persistence Mode": "Enabled", "MIG Mode/Current": "Disabled",
        "MIG Mode/Pending": "Disabled", "Serial Number": "1652223012345", "Minor Number": "0",
        "GPU UUID": "GPU-5b2d1e0c-8f3a-4c6d-9e17-2a4b6c8d0e1f", "VBIOS Version": "96.00.74.00.0D",
        "Board ID": "0x1b00", "MultiGPU Board": "No", "FRU Part Number": "N/A", "Module ID": "2",
        "Driver Model/Current": "N/A", "GPU Operation Mode/Pending": "N/A",
        "Conf Compute Protected Memory Usage/Total": "0 MiB",
        "GPU Reset Status/Reset Required": "No", "GPU Reset Status/Drain and Reset Recommended": "No",
        "PCI/Bus": "1B", "PCI/Bus Id": "00000000:1B:00.0", "PCI/Device Id": "233010DE",
        "PCI/GPU Link Info/PCIe Generation/Max": "5", "PCI/GPU Link Info/PCIe Generation/Current": "5",
        "PCI/GPU Link Info/Link Width/Max": "16x", "PCI/GPU Link Info/Link Width/Current": "16x",
        "PCI/Bridge Chip/Bridge Chip Type": "N/A",
        "PCI/Replays Since Reset": "0", "PCI/Replay Number Rollovers": "0",
        "Clocks Event Reasons/Idle": "Not Active", "Clocks Event Reasons/Applications Clocks Setting": "Not Active",
        "Clocks Event Reasons/SW Power Cap": "Not Active", "Clocks Event Reasons/HW Slowdown": "Not Active",
        "Clocks Event Reasons/HW Thermal Slowdown": "Not Active",
        "Clocks Event Reasons/HW Power Brake Slowdown": "Not Active",
        "Clocks Event Reasons/Display Clock Setting": "Not Active",
        "FB Memory Usage/Total": "81559 MiB", "BAR1 Memory Usage/Total": "131072 MiB",
        "Utilization/Gpu": "0 %", "Utilization/Memory": "0 %",
        "ECC Mode/Current": "Enabled", "ECC Mode/Pending": "Enabled",
        "ECC Errors/Volatile/SRAM Uncorrectable Parity": "0", "ECC Errors/Volatile/SRAM Uncorrectable SEC-DED": "0",
        "ECC Errors/Aggregate/SRAM Threshold Exceeded": "No",
        "ECC Errors/Aggregate Uncorrectable SRAM Sources/SRAM SM": "0",
        "Retired Pages/Single Bit ECC": "N/A", "Retired Pages/Double Bit ECC": "N/A",
        "Retired Pages/Pending Page Blacklist": "N/A",
        "Remapped Rows/Correctable Error": "0", "Remapped Rows/Uncorrectable Error": "0",
        "Remapped Rows/Pending": "No", "Remapped Rows/Remapping Failure Occurred": "No",
        "Remapped Rows/Bank Remap Availability Histogram/Max": "2560 bank(s)",
        "Remapped Rows/Bank Remap Availability Histogram/None": "0 bank(s)",
        "Temperature/GPU Current Temp": "31 C", "Temperature/GPU T.Limit Temp": "54 C",
        "Temperature/GPU Shutdown T.Limit Temp": "-8 C", "Temperature/GPU Slowdown T.Limit Temp": "-2 C",
        "Temperature/GPU Max Operating T.Limit Temp": "0 C", "Temperature/Memory Current Temp": "40 C",
        "Temperature/Memory Max Operating T.Limit Temp": "0 C",
        "GPU Power Readings/Current Power Limit": "700.00 W", "GPU Power Readings/Default Power Limit": "700.00 W",
        "Fabric/State": "Completed", "Fabric/Status": "Success",
        "Supported Clocks/Supported Mem Clock/Supported Graphics Clock#2": "1965 MHz",
        "Supported Clocks/Supported Mem Clock/Value#2": "1593 MHz",
    }
    assert {k: g.get(k) for k in want} == want
    assert g.line("Remapped Rows/Pending") == "<remapped_row_pending>No</remapped_row_pending>"
    assert g.line("PCI/Bus Id") == "<pci_bus_id>00000000:1B:00.0</pci_bus_id>"
    assert g.line("MIG Devices") == "<mig_devices>None</mig_devices>"  # an element over several lines
    assert "Processes" not in g.fields and "Accounted Processes" not in g.fields  # empty elements: no value
    assert not any("Retired Pagelist" in k or k.startswith("Inforom Version/Retired") for k in g.fields)
    r = rep.records[0]
    assert (r.name, r.bus_id, r.persistence, r.mig_mode, r.pcie_gen, r.pcie_width, r.memory_total_mib, r.util) == \
        ("NVIDIA H100 80GB HBM3", "00000000:1B:00.0", True, "Disabled", 5, 16, 81559, 0)


def test_h100_grades_as_its_text_form() -> None:
    x, t = xml(fixture_text(H100)), xml(text_sample("q-535-whole"))
    assert from_q(x.gpus[0]).facts() == from_q(t.gpus[0]).facts()
    shared = set(x.gpus[0].fields) & set(t.gpus[0].fields) - {"PCI/Bus", "PCI/Device", "PCI/Domain", "PCI/Device Id"}
    assert len(shared) > 60
    assert {k: x.gpus[0].fields[k] for k in shared} == {k: t.gpus[0].fields[k] for k in shared}
    r = health(fixture_text(H100))
    assert r.status is Status.PASS and "1 gpu(s) healthy" in r.summary.lower(), (r.summary, r.evidence)
    d = grade_text("gpu.driver", {"nvidia-smi-q": fixture_text(H100)})[0]
    assert d.status is Status.PASS and "535.161.08" in d.summary


def test_v100_single_double_bit_and_retired_pages_grade_as_text() -> None:
    rep = xml(fixture_text(V100))
    g = rep.gpus[0]
    assert g.get("Retired Pages/Single Bit ECC") == "1" and g.get("Retired Pages/Double Bit ECC") == "3"
    assert g.line("Retired Pages/Double Bit ECC") == "<retired_count>3</retired_count>"
    assert g.get("Retired Pages/Pending Page Blacklist") == "Yes"
    assert not [k for k in g.fields if "0x" in g.fields[k]]  # the retired page list is not a field
    assert g.get("Clocks Event Reasons/Idle") == "Active"  # clocks_throttle_reasons (before R535)
    assert g.get("ECC Errors/Aggregate/Double Bit/Total") == "3"
    assert g.get("ECC Errors/Volatile/Single Bit/Texture Shared") == "N/A"
    assert g.get("ECC Errors/Volatile/Double Bit/CBU") == "0"
    assert g.get("Remapped Rows") == "N/A"
    assert g.get("Temperature/GPU Shutdown Temp") == "90 C" and g.get("Temperature/GPU Slowdown Temp") == "87 C"
    assert g.get("Temperature/GPU Max Operating Temp") == "83 C"
    assert g.get("Temperature/Memory Max Operating Temp") == "85 C"
    assert g.get("Power Readings/Enforced Power Limit") == "300.00 W"
    text = xml(fixture_text(Q + "v100x2_470_retired_pages_pending.txt")).gpus[0]
    mine, theirs = from_q(g).facts(), from_q(text).facts()
    for key in ("uncorrectable_ecc", "uncorrectable_ecc_aggregate", "retired_pages_sbe", "retired_pages_dbe",
                "retired_pages_pending", "remapped_pending", "ecc_mode", "clock_events_active", "utilization"):
        assert mine[key] == theirs[key], key
    r = health(fixture_text(V100))
    assert r.status is Status.FAIL and "gpu.health/retired-pages-pending" in codes(r)
    assert any("<pending_blacklist>Yes</pending_blacklist>" in e for e in r.evidence), r.evidence


def test_remap_pending_fails_with_the_xml_line() -> None:
    r = health(log(gpu(pending="Yes")))
    assert r.status is Status.FAIL and "gpu.health/remap-pending" in codes(r)
    assert "row remap pending" in r.summary
    assert any("<remapped_row_pending>Yes</remapped_row_pending>" in e for e in r.evidence), r.evidence


def test_remap_failure_and_banks_without_spares() -> None:
    r = health(log(gpu(failure="Yes", none_banks="2")))
    assert {"gpu.health/remap-failure", "gpu.health/banks-without-spare-rows"} <= codes(r), r.summary


@pytest.mark.parametrize(("kw", "count"), [({"dram_unc": "2"}, 2), ({"parity": "3"}, 3)])
def test_volatile_uncorrectable_ecc(kw: dict[str, str], count: int) -> None:
    r = health(log(gpu(**kw)))
    assert r.status is Status.FAIL and "gpu.health/volatile-uncorrectable-ecc" in codes(r)
    assert f"{count} volatile uncorrectable" in r.summary, r.summary


def test_eight_gpus_one_pending() -> None:
    text = log(*(gpu(b, pending="Yes" if b == "9A" else "No") for b in BUSES))
    rep = xml(text)
    assert rep.listing and rep.attached == 8 and len(rep.records) == 8
    assert [g.index for g in rep.gpus] == list(range(8))
    assert [g.bus_id for g in rep.gpus] == [f"00000000:{b}:00.0" for b in BUSES]
    r = health(text)
    assert r.status is Status.FAIL and "GPU 4 (00000000:9A:00.0)" in r.summary, r.summary
    inv = grade_text("gpu.inventory", {"nvidia-smi-q": text}, profile="h100-sxm-8x")[0]
    assert inv.status is Status.PASS, (inv.summary, inv.evidence)


def test_mig_enabled_is_the_inventory_warning() -> None:
    inv = grade_text("gpu.inventory", {"nvidia-smi-q": log(gpu(mig="Enabled"))})[0]
    assert "gpu.inventory/mig-enabled" in codes(inv), (inv.summary, inv.evidence)


def test_fabric_health_read_by_fabric_manager() -> None:
    fabric = """
		<fabric>
			<state>Completed</state>
			<status>Success</status>
			<cliqueId>4</cliqueId>
			<clusterUuid>5e0b1a2c-0000-4000-8000-00000000abcd</clusterUuid>
			<health>
				<bandwidth>Degraded</bandwidth>
				<route_recovery_in_progress>False</route_recovery_in_progress>
			</health>
		</fabric>"""
    rep = xml(log(gpu(extra=fabric)))
    g = rep.gpus[0]
    assert g.get("Fabric/CliqueId") == "4" and g.get("Fabric/ClusterUUID") == "5e0b1a2c-0000-4000-8000-00000000abcd"
    assert g.get("Fabric/Health/Bandwidth") == "Degraded"
    assert g.get("Fabric/Health/Route Recovery In Progress") == "False"
    r = grade_text("fabric.manager", {"nvidia-smi-q": log(gpu(extra=fabric))}, profile="h100-sxm-8x")
    assert "fabric.manager/bandwidth-degraded" in {c for x in r for c in codes(x)}, [x.summary for x in r]


def test_mig_devices_kept_apart_from_the_gpu_counters() -> None:
    mig = """
		<mig_devices>
			<mig_device>
				<index>0</index>
				<ecc_error_count>
					<volatile_count>
						<sram_uncorrectable>5</sram_uncorrectable>
					</volatile_count>
					<aggregate_count>
						<sram_uncorrectable>6</sram_uncorrectable>
					</aggregate_count>
				</ecc_error_count>
			</mig_device>
			<mig_device>
				<index>1</index>
			</mig_device>
		</mig_devices>"""
    g = xml(log(gpu(mig="Enabled", extra=mig))).gpus[0]
    assert g.get("MIG Devices/MIG Device/ECC Errors/Volatile/SRAM Uncorrectable") == "5"
    assert g.get("MIG Devices/MIG Device/ECC Errors/Aggregate/SRAM Uncorrectable") == "6"
    assert g.get("MIG Devices/MIG Device/Index#2") == "1"
    assert from_q(g).ecc_volatile == 0


# ---------------------------------------------------------------------------------------
# framings, excerpts, damage


@pytest.mark.parametrize("frame_line", [
    lambda ln: ln, lambda ln: f"gpu017: {ln}", lambda ln: f"0: {ln}", lambda ln: f"> {ln}"])
def test_framed_as_analyze_frames_text(frame_line: object) -> None:
    body = log(gpu("18"), gpu("2A", pending="Yes")).rstrip("\n").split("\n")
    text = "[root@gpu017 ~]# nvidia-smi -q -x\n" + "\n".join(frame_line(ln) for ln in body) + "\n"  # type: ignore[operator]
    rep = xml(text)
    assert [g.bus_id for g in rep.gpus] == ["00000000:18:00.0", "00000000:2A:00.0"]
    assert rep.gpus[1].get("Remapped Rows/Pending") == "Yes"
    r = health(text)
    assert "gpu.health/remap-pending" in codes(r)


def test_analyze_a_file() -> None:
    results = analyze_text(fixture_text(H100), name="nvidia-smi-q-x.xml")
    got = {r.check: r.status for r in results}
    assert got["gpu.health"] is Status.PASS and got["gpu.driver"] is Status.PASS, got


def test_one_line_document() -> None:
    text = log(gpu("18"), gpu("2A", dram_unc="1")).replace("\n", "").replace("\t", "")
    rep = xml(text)
    assert len(rep.gpus) == 2 and rep.attached == 2 and not rep.excerpt
    assert rep.gpus[1].line("ECC Errors/Volatile/DRAM Uncorrectable") == \
        "<dram_uncorrectable>1</dram_uncorrectable>"
    assert rep.header_lines["Attached GPUs"] == "<attached_gpus>2</attached_gpus>"


def test_truncated_keeps_the_complete_gpus_and_says_nothing_wrong() -> None:
    whole = log(*(gpu(b) for b in BUSES))
    cut = whole[:whole.index("<remapped_row_pending>", whole.index('id="00000000:3A:00.0"')) + 25]
    rep = xml(cut)
    assert rep.excerpt and rep.attached == 8
    assert [g.bus_id for g in rep.gpus] == [f"00000000:{b}:00.0" for b in BUSES[:3]]
    assert rep.gpus[1].get("Remapped Rows/Pending") == "No"
    third = rep.gpus[2]
    assert third.get("ECC Errors/Volatile/DRAM Uncorrectable") == "0"
    assert third.get("Remapped Rows/Pending") is None  # `<remapped_row_pending>No` cut before its end tag
    r = health(cut)
    assert r.status is Status.PASS, (r.summary, r.evidence)
    assert "gpu.health/gpus-missing-from-output" not in codes(r)


def test_complete_document_with_fewer_gpus_than_attached_is_said() -> None:
    rep = xml(log(gpu("18"), gpu("2A"), attached=8))
    assert not rep.excerpt
    r = health(log(gpu("18"), gpu("2A"), attached=8))
    assert "gpu.health/gpus-missing-from-output" in codes(r)


def test_a_line_that_does_not_read_is_skipped() -> None:
    good = log(gpu("18"), gpu("2A", pending="Yes"), gpu("3A"))
    broken = good.replace("<gpu_temp>33 C</gpu_temp>", "<memory_temp>40 C</memory_tmp>\n<gpu_temp>33 C</gpu_temp>", 1)
    rep = xml(broken)
    assert rep.excerpt
    assert [g.bus_id for g in rep.gpus] == ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0"]
    assert rep.gpus[0].get("Temperature/Memory Current Temp") is None
    assert rep.gpus[0].get("Temperature/GPU Current Temp") == "33 C"  # read on in the elements open before
    assert rep.gpus[1].get("Remapped Rows/Pending") == "Yes" and rep.gpus[1].get("Product Name")


def test_a_gpu_element_without_the_root_and_a_selection() -> None:
    rep = xml(gpu("5D", pending="Yes"), command="nvidia-smi -i 3 -q -x")
    assert rep.recognised and rep.excerpt  # the root never closes: an excerpt
    assert rep.selection == "3" and rep.gpus[0].index == 3 and rep.gpus[0].index_known
    assert rep.gpus[0].get("Remapped Rows/Pending") == "Yes"


def test_the_same_gpu_twice_is_one_gpu_the_later_reading_wins() -> None:
    rep = xml(log(gpu("18")) + log(gpu("18", pending="Yes")))
    assert len(rep.gpus) == 1 and rep.gpus[0].get("Remapped Rows/Pending") == "Yes"
    assert "Remapped Rows/Pending#2" not in rep.gpus[0].fields
    assert not rep.excerpt  # junk after the first root is the second document, not damage


def test_no_entity_or_dtd_is_loaded() -> None:
    evil = ('<?xml version="1.0"?>\n<!DOCTYPE nvidia_smi_log [<!ENTITY y "Yes"><!ENTITY e SYSTEM "file:///etc/passwd">]>'
            "\n<nvidia_smi_log>\n" + gpu("18").replace("<remapped_row_pending>No", "<remapped_row_pending>&y;")
            + gpu("2A").replace("<product_name>NVIDIA H100 80GB HBM3", "<product_name>&e;") + TAIL)
    rep = xml(evil)
    assert rep.excerpt and len(rep.gpus) == 2
    assert rep.gpus[0].get("Remapped Rows/Pending") is None
    assert rep.gpus[1].get("Product Name") is None and rep.gpus[1].get("Remapped Rows/Pending") == "No"


def test_escaped_values_and_attribute_quotes() -> None:
    text = log(gpu("18").replace("NVIDIA H100 80GB HBM3", "A &amp; B").replace('id="00000000:18:00.0"',
                                                                            "id='00000000:18:00.0'"))
    g = xml(text).gpus[0]
    assert g.bus_id == "00000000:18:00.0" and g.get("Product Name") == "A & B"
    assert g.line("Product Name") == "<product_name>A &amp; B</product_name>"


def test_bus_id_from_pci_when_the_id_attribute_is_empty() -> None:
    rep = xml(log(gpu("18").replace('<gpu id="00000000:18:00.0">', "<gpu>")))
    assert rep.gpus[0].bus_id == "00000000:18:00.0"


def test_tool_errors_above_the_document_are_kept() -> None:
    text = "Unable to determine the device handle for GPU 0000:9A:00.0: Unknown Error\n" + log(gpu("18"))
    rep = xml(text)
    assert [e.bus_id for e in rep.errors] == ["0000:9A:00.0"] and len(rep.gpus) == 1


# ---------------------------------------------------------------------------------------
# detection


@pytest.mark.parametrize("text", [
    log(gpu()),
    HEAD.format(n=8),
    '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v10.dtd">\n',
    gpu(),
    '<gpu id="00000000:18:00.0"><ecc_errors><volatile>',
    '<gpu id="00000000:18:00.0">\n\n  <clocks_throttle_reasons>\n',
    '<gpu id="00000000:18:00.0">   \n  <product_name>NVIDIA H100</product_name>\n  <name>x</name>\n',
])
def test_detected(text: str) -> None:
    assert nvsmi_q.detect(Doc(text)) and nvsmi_xml.detect(Doc(text))


@pytest.mark.parametrize("text", [
    "<html><head><title>502 Bad Gateway</title></head><body><h1>nginx</h1></body></html>\n",
    '<?xml version="1.0"?>\n<domain type="kvm">\n  <hostdev mode="subsystem" type="pci">\n',
    '<gpu id="0">\n  <product_name>NVIDIA H100</product_name>\n',
    '<gpu id="00000000:18:00.0">\n  <name>NVIDIA H100</name>\n',
    '<gpu id="00000000:18:00.0">\n',
    "nvidia_smi_log is the root of nvidia-smi -q -x\n",
    "\x00\x01garbage <<< >>> </gpu>\n",
])
def test_not_detected(text: str) -> None:
    assert not nvsmi_xml.detect(Doc(text))
    assert not nvsmi_q.detect(Doc(text))


def test_garbage_reads_to_nothing() -> None:
    rep = nvsmi_xml.parse(Doc("<html><body>no</body></html>\n"))
    assert not rep.recognised and not rep.gpus and not rep.header and not rep.excerpt
    rep = nvsmi_xml.parse(Doc("<nvidia_smi_log>\n<driver_version>5\x00</driver_version>\n"))
    assert rep.recognised and rep.excerpt and not rep.header


def test_text_form_still_read_by_the_text_reader() -> None:
    rep = xml(text_sample("remapped-rows-pending"))
    assert rep.gpus[0].line("Remapped Rows/Pending") == "Pending : Yes"


# ---------------------------------------------------------------------------------------
# names


@pytest.mark.parametrize(("tag", "parent", "top", "want"), [
    ("sram_uncorrectable_secded", "volatile", False, "SRAM Uncorrectable SEC-DED"),
    ("fb_memory_usage", "gpu", True, "FB Memory Usage"),
    ("clocks_throttle_reasons", "gpu", True, "Clocks Event Reasons"),
    ("mig_mode", "gpu", True, "MIG Mode"),
    ("board_id", "gpu", True, "Board ID"),
    ("serial", "gpu", True, "Serial Number"),
    ("gpu_fru_part_number", "gpu", True, "FRU Part Number"),
    ("unknown_new_tag", "gpu", True, "Unknown New Tag"),
    ("current_ecc", "ecc_mode", False, "Current"),
    ("pending_dm", "driver_model", False, "Pending"),
    ("current_power_limit", "gpu_power_readings", False, "Current Power Limit"),
    ("pci_bus_id", "pci", False, "Bus Id"),
    ("pci_bus_id", "other", False, "PCI Bus Id"),
    ("clocks_event_reason_gpu_idle", "clocks_event_reasons", False, "Idle"),
    ("clocks_throttle_reason_sw_power_cap", "clocks_throttle_reasons", False, "SW Power Cap"),
    ("clocks_event_reason_display_clocks_setting", "clocks_event_reasons", False, "Display Clock Setting"),
    ("row_remapper_histogram_partial", "row_remapper_histogram", False, "Partial"),
    ("retired_count", "double_bit_retirement", False, ""),
    ("retired_pagelist", "double_bit_retirement", False, None),
    ("route_unhealthy", "health", False, "Route Unhealthy"),
    ("cliqueId", "fabric", False, "CliqueId"),
    ("l1_cache", "single_bit", False, "L1 Cache"),
    ("sm_clock", "clocks", False, "SM Clock"),
    ("tpc_repair_pending", "ecc_errors", False, "TPC Repair Pending"),
    ("bar1_memory_usage", "mig_device", False, "BAR1 Memory Usage"),
    ("hw_slowdown", "x", False, "HW Slowdown"),
    ("host_vgpu_mode", "x", False, "Host Vgpu Mode"),
    ("platformInfo", "gpu", True, "Platform Info"),
    ("pdi", "gpu", True, "GPU PDI"),
    ("inforom_bbx_flush", "gpu", True, "Inforom BBX Object Flush"),
    ("c2c_mode", "gpu", True, "GPU C2C Mode"),
    ("power_profiles", "gpu", True, "Workload Power Profiles"),
    ("sram_pcie", "aggregate_uncorrectable_sram_sources", False, "SRAM PCIE"),
    ("uuid", "mig_device", False, "UUID"),
])
def test_label(tag: str, parent: str, top: bool, want: str | None) -> None:
    assert nvsmi_xml.label(tag, parent, top) == want


def test_words() -> None:
    assert nvsmi_xml.words("gpu_temp_tlimit") == "GPU Temp Tlimit"
    assert nvsmi_xml.words("clusterUuid") == "Cluster UUID"
    assert nvsmi_xml.words("a__b_") == "A B"
    assert nvsmi_xml.words("dram_encryption_mode") == "DRAM Encryption Mode"
    assert nvsmi_xml.words("ecc_object") == "ECC Object" and nvsmi_xml.words("fb_x") == "FB X"


def test_a_document_after_a_cut_one_is_read_as_its_own() -> None:
    first = log(gpu("18"), gpu("2A"))
    cut = first[:first.index('<gpu id="00000000:2A:00.0">') + 60]
    for second in (log(gpu("3A", pending="Yes")), log(gpu("3A", pending="Yes")).split("\n", 2)[2]):
        rep = xml(cut + "\n" + second)
        assert rep.excerpt and [g.bus_id for g in rep.gpus] == [f"00000000:{b}:00.0" for b in ("18", "2A", "3A")]
        assert rep.gpus[2].get("Remapped Rows/Pending") == "Yes" and rep.gpus[2].index == 2
        assert not any(k.startswith("Nvidia") for k in rep.gpus[1].fields)


def test_mixed_content_and_an_id_less_gpu_without_pci() -> None:
    text = log(gpu("18").replace("<pci>", "<pci>stray").replace('<gpu id="00000000:18:00.0">', "<gpu>")
               .replace("<pci_bus_id>00000000:18:00.0</pci_bus_id>", ""))
    g = xml(text).gpus[0]
    assert g.bus_id == "" and "PCI" not in g.fields and g.get("PCI/GPU Link Info/Link Width/Max") == "16x"


def test_a_broken_root_line_and_text_between_documents() -> None:
    one = log(gpu("18")).replace("\n", "").replace("\t", "")
    two = log(gpu("2A", pending="Yes")).replace("\n", "").replace("\t", "")
    rep = xml(one + "\nreal 0m0.412s\n" + two + "\n")
    assert [g.bus_id for g in rep.gpus] == ["00000000:18:00.0", "00000000:2A:00.0"] and not rep.excerpt
    broken = "<nvidia_smi_log><driver_version>5 & 6</driver_version>\n" + gpu("3A")
    rep = xml(broken)
    assert not rep.header and [g.bus_id for g in rep.gpus] == ["00000000:3A:00.0"]
