"""examples/captures: a healthy and a faulty 8xH100 SXM node, one file per tool output.

`preflight analyze` must give the healthy node GO with every node check graded PASS against
the H100 profile, and the faulty node NO-GO naming each planted fault with its evidence and
remedy. The captures must agree with each other (the lost GPU is missing from every listing).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from preflight import engine
from preflight import registry as reg
from preflight.analyze import classify
from preflight.framing import frame
from preflight.grading import FactStore
from preflight.model import Result, Status
from preflight.offline import analyze_paths
from preflight.parsers import nvsmi_errors
from tests.conftest import FIXTURES, ROOT, analyze_text, facts_of, grade_text

CAPTURES = ROOT / "examples" / "captures"
HEALTHY = CAPTURES / "healthy-node"
FAULTY = CAPTURES / "faulty-node"
NODE_CHECKS = ("fabric.manager", "gpu.driver", "gpu.health", "gpu.inventory", "gpu.nvlink", "gpu.topology",
               "gpu.xid", "ib.hca", "net.mtu", "net.nic")
LOST_BUS = "9D:00.0"
LOST_LINE = "Unable to determine the device handle for GPU0000:9D:00.0: Unknown Error"


def _by_check(folder: Path) -> tuple[str, dict[str, Result]]:
    report = analyze_paths([folder], engine.Config())
    by: dict[str, Result] = {}
    for r in report.results:
        assert r.check not in by, f"{r.check} graded twice: the folder was split into several nodes"
        by[r.check] = r
    return report.verdict.verdict, by


def _store(folder: Path) -> FactStore:
    registry = reg.load()
    docs: dict[str, list] = {}
    for p in sorted(folder.iterdir()):
        for doc in frame(p.read_text(encoding="utf-8"), origin=str(p)).docs:
            for fmt in classify(doc, registry):
                docs.setdefault(fmt.probe_name, []).append(doc)
    return FactStore(registry, docs=docs)


def test_healthy_node_is_go_with_every_node_check_graded() -> None:
    verdict, by = _by_check(HEALTHY)
    assert verdict == "GO"
    assert {r.node for r in by.values()} == {"healthy-node"}
    assert sorted(by) == sorted([*NODE_CHECKS, "nccl.allreduce"]), "a check the files feed was not graded"
    bad = {c: (r.status.value, r.summary) for c, r in by.items() if r.status is not Status.PASS}
    assert not bad
    assert "profile h100-sxm-8x expects 8" in by["gpu.inventory"].summary
    assert "144 NVLinks up on 8 GPU(s)" in by["gpu.nvlink"].summary
    assert "8/8 compute ports Active" in by["ib.hca"].summary
    assert by["nccl.allreduce"].facts  # the all_reduce_perf table was read and graded against the profile


@pytest.mark.parametrize("folder", [HEALTHY, FAULTY], ids=["healthy", "faulty"])
def test_profile_is_detected_as_h100_sxm_8x(folder: Path) -> None:
    """The faulty node lost a GPU: it is still an 8-GPU board and graded as one."""
    assert engine.detect_profile_name(_store(folder)) == "h100-sxm-8x"


PLANTED = {
    # check: (words in the summary, a line of evidence, words in the remedy)
    "gpu.xid": (["Xid 79", "0000:9d:00", "Xid 48"], "GPU has fallen off the bus", "reboot clears Xid 79"),
    "gpu.inventory": (["0000:9D:00.0", "7 of 8 GPUs visible"], LOST_LINE, "fallen off the bus"),
    "gpu.health": (["GPU 2 (00000000:52:00.0): row remap pending"], "[Remapped Rows] Pending : Yes",
                   "activates the remap"),
    "fabric.manager": (["nvidia-fabricmanager is failed", "stale Completed"],
                       "Active: failed (Result: exit-code)", "systemctl restart nvidia-fabricmanager"),
    "ib.hca": (["mlx5_6 Down/Polling"], "mlx5_6 port 1: State: Down", "cable"),
}


def test_faulty_node_is_no_go_naming_each_planted_fault() -> None:
    verdict, by = _by_check(FAULTY)
    assert verdict == "NO-GO"
    assert {r.node for r in by.values()} == {"faulty-node"}
    for check, (words, evidence, remedy) in PLANTED.items():
        r = by[check]
        assert r.status is Status.FAIL, (check, r.status, r.summary)
        for w in words:
            assert w in r.summary, (check, w, r.summary)
        assert any(evidence in e for e in r.evidence), (check, evidence, r.evidence)
        assert remedy in r.remedy, (check, remedy, r.remedy)
    # the listings that could not show the lost GPU do not pass it as fine: their own FAIL names
    # it, and where that is their only finding they point to gpu.inventory's (one cause, one FAIL)
    for check, tool in (("gpu.topology", "nvidia-smi topo"), ("gpu.nvlink", "nvidia-smi nvlink")):
        r = by[check]
        own = f"FAIL 0000:{LOST_BUS} not listed by {tool}"
        if r.status is Status.FAIL:
            assert own.removeprefix("FAIL ") in r.summary and r.evidence == [LOST_LINE], (check, r.summary)
        else:
            assert r.status is Status.SKIP and r.facts["depends_on"] == "gpu.inventory", (check, r.status, r.summary)
            assert r.facts["own_status"] == "fail" and any(own in e for e in r.evidence), (check, r.evidence)
    assert by["gpu.nvlink"].facts["links_total"] == 7 * 18 and by["gpu.topology"].facts["gpu_count"] == 7
    # what is not faulty is still graded PASS
    for check in ("gpu.driver", "net.nic", "net.mtu"):
        assert by[check].status is Status.PASS, (check, by[check].summary)


def _gpu_bus_ids(text: str) -> list[str]:
    return [m.upper() for m in re.findall(r"00000000:([0-9A-Fa-f]{2}:00\.0)", text)]


def test_faulty_captures_agree_on_the_lost_gpu() -> None:
    """GPU 4 (9D) is missing from every listing, and each nvidia-smi listing says it is lost."""
    listings = ["nvidia-smi.txt", "nvidia-smi-query-gpu.csv", "nvidia-smi-L.txt", "nvidia-smi-q.txt",
                "nvidia-smi-nvlink-s.txt", "nvidia-smi-topo-m.txt"]
    healthy_uuids = re.findall(r"GPU-[0-9a-f-]{36}", (HEALTHY / "nvidia-smi-L.txt").read_text())
    assert len(healthy_uuids) == 8
    lost_uuid = healthy_uuids[4]
    for name in listings:
        text = (FAULTY / name).read_text()
        assert LOST_LINE in text, name
        assert LOST_BUS not in _gpu_bus_ids(text), name
        assert lost_uuid not in text, name
    assert re.findall(r"(?m)^GPU (\d+):", (FAULTY / "nvidia-smi-L.txt").read_text()) == list("0123567")
    assert "GPU4" not in (FAULTY / "nvidia-smi-topo-m.txt").read_text()
    assert "Attached GPUs                             : 8" in (FAULTY / "nvidia-smi-q.txt").read_text()
    dmesg = (FAULTY / "dmesg.txt").read_text()
    assert f"NVRM: GPU at PCI:0000:9d:00: {lost_uuid}" in dmesg and "Xid (PCI:0000:9d:00): 79" in dmesg


@pytest.mark.parametrize("folder", [HEALTHY, FAULTY], ids=["healthy", "faulty"])
def test_captures_agree_across_files(folder: Path) -> None:
    """One node: the same GPUs (UUID, bus id), driver and HCAs in every file."""
    uuids_l = re.findall(r"UUID: (GPU-[0-9a-f-]{36})", (folder / "nvidia-smi-L.txt").read_text())
    uuids_csv = re.findall(r", (GPU-[0-9a-f-]{36}),", (folder / "nvidia-smi-query-gpu.csv").read_text())
    uuids_q = re.findall(r"GPU UUID\s+: (GPU-[0-9a-f-]{36})", (folder / "nvidia-smi-q.txt").read_text())
    uuids_nvlink = re.findall(r"UUID: (GPU-[0-9a-f-]{36})", (folder / "nvidia-smi-nvlink-s.txt").read_text())
    assert uuids_l == uuids_csv == uuids_q == uuids_nvlink and len(uuids_l) in (7, 8)
    bus_csv = _gpu_bus_ids((folder / "nvidia-smi-query-gpu.csv").read_text())
    assert bus_csv == _gpu_bus_ids((folder / "nvidia-smi.txt").read_text())
    assert bus_csv == re.findall(r"(?m)^GPU 00000000:(\S+)$", (folder / "nvidia-smi-q.txt").read_text())
    drivers = set(re.findall(r"\b5\d\d\.\d+\.\d+\b", "".join(
        (folder / n).read_text() for n in ("nvidia-smi.txt", "nvidia-smi-query-gpu.csv", "nvidia-smi-q.txt",
                                           "dmesg.txt", "proc-driver-nvidia-version.txt"))))
    assert drivers == {"535.154.05"}
    nics = re.findall(r"(?m)^\s+NIC\d+: (mlx5_\d+)$", (folder / "nvidia-smi-topo-m.txt").read_text())
    cas = re.findall(r"(?m)^CA '(mlx5_\d+)'", (folder / "ibstat.txt").read_text())
    assert sorted(nics) == sorted(cas) and len(cas) == 10


def test_every_capture_file_is_recognised() -> None:
    registry = reg.load()
    for folder in (HEALTHY, FAULTY):
        for p in sorted(folder.iterdir()):
            docs = frame(p.read_text(encoding="utf-8"), origin=str(p)).docs
            assert any(classify(d, registry) for d in docs), p


# --- the parser and profile gaps these captures showed -------------------------------------


def test_topo_matrix_with_a_lost_gpu_line_is_a_listing_not_a_bare_error() -> None:
    """`nvidia-smi topo -m` on a node with a lost GPU prints the error line above its matrix;
    topo's own parser reads that line, so the document is not also an nvidia-smi error paste
    (which would feed the -q input a second time and split a node's folder into one node per
    file)."""
    text = (FAULTY / "nvidia-smi-topo-m.txt").read_text()
    [doc] = frame(text).docs
    assert not nvsmi_errors.detect(doc)
    [doc] = frame(LOST_LINE + "\n").docs
    assert nvsmi_errors.detect(doc)  # the error alone still is one


def test_folder_with_lost_gpu_lines_in_q_and_topo_is_one_node(tmp_path: Path) -> None:
    for name in ("nvidia-smi-q.txt", "nvidia-smi-topo-m.txt"):
        (tmp_path / name).write_text((FAULTY / name).read_text())
    results = analyze_paths([tmp_path], engine.Config()).results
    assert {r.node for r in results} == {tmp_path.name}


def test_a_lost_gpu_counts_toward_the_profile_match() -> None:
    """7 GPUs listed plus one that fell off the bus is an 8-GPU board: the H100 8x profile is
    picked and the loss is graded against 8, not against a generic profile's guess."""
    csv = (FIXTURES / "nvidia-smi" / "query_gpu_lost.csv").read_text()
    results = {r.check: r for r in analyze_text(csv, name="query.csv")}
    inv = results["gpu.inventory"]
    assert inv.status is Status.FAIL
    assert "7 of 8 GPUs visible" in inv.summary and "0000:9D:00.0" in inv.summary
    # seven GPUs and no lost-GPU line stay what they are: an odd count graded generically
    seven = "\n".join(ln for ln in csv.splitlines() if not ln.startswith("Unable")) + "\n"
    store = _store_of_text(seven, "nvidia-smi-query")
    assert engine.detect_profile_name(store) == "generic"


def _store_of_text(text: str, probe: str) -> FactStore:
    return FactStore(reg.load(), docs={probe: frame(text).docs})


def test_topo_header_is_found_below_a_lost_gpu_line() -> None:
    """"GPU0000:9D:00.0" in the error line is not the matrix header (which names GPU0)."""
    text = (FAULTY / "nvidia-smi-topo-m.txt").read_text()
    topo = facts_of("nvidia-smi-topo", text)
    assert topo.gpus == ["GPU0", "GPU1", "GPU2", "GPU3", "GPU5", "GPU6", "GPU7"]  # type: ignore[attr-defined]
    assert topo.matrix["GPU5"]["GPU7"] == "NV18" and topo.nic_legend["NIC5"] == "mlx5_6"  # type: ignore[attr-defined]
    assert [e.pci for e in topo.errors] == ["0000:9d:00"]  # type: ignore[attr-defined]


@pytest.mark.parametrize(("check", "probe", "name"), [
    ("gpu.topology", "nvidia-smi-topo", "nvidia-smi-topo-m.txt"),
    ("gpu.nvlink", "nvidia-smi-nvlink", "nvidia-smi-nvlink-s.txt"),
])
def test_a_gpu_a_listing_could_not_read_is_not_graded_as_fine(check: str, probe: str, name: str) -> None:
    text = (FAULTY / name).read_text()
    [r] = grade_text(check, {probe: text}, profile="h100-sxm-8x")
    assert r.status is Status.FAIL and "0000:9D:00.0 not listed" in r.summary and r.evidence == [LOST_LINE]
    # where the profile expects nothing of every GPU, the GPU is not graded: ERROR, not PASS
    [r] = grade_text(check, {probe: text}, profile="generic")
    assert r.status is Status.ERROR and "0000:9D:00.0 not listed" in r.summary
    # the same listing without the lost GPU's line grades the seven GPUs it shows
    clean = "\n".join(ln for ln in text.splitlines() if ln != LOST_LINE) + "\n"
    [r] = grade_text(check, {probe: clean}, profile="h100-sxm-8x")
    assert r.status is Status.PASS, r.summary


def test_failed_unit_evidence_says_how_its_process_ended() -> None:
    """`systemctl status` of a failed fabric manager: the evidence has systemd's lines on how
    the process ended, next to the daemon's own last lines."""
    svc = facts_of("fm-service", (FAULTY / "systemctl-status-nvidia-fabricmanager.txt").read_text())
    lines = svc.lines  # type: ignore[attr-defined]
    assert any("Main process exited, code=exited, status=1/FAILURE" in ln for ln in lines)
    assert any("Failed with result 'exit-code'" in ln for ln in lines)
    assert any("nv-fabricmanager[2013]: Successfully configured" in ln for ln in lines)
    svc = facts_of("fm-service", (FIXTURES / "systemctl" / "status_fm_failed.txt").read_text())
    assert any("don't match with driver version" in ln for ln in svc.lines)  # type: ignore[attr-defined]
    assert any("Control process exited" in ln for ln in svc.lines)  # type: ignore[attr-defined]
    svc = facts_of("fm-service", (HEALTHY / "systemctl-status-nvidia-fabricmanager.txt").read_text())
    assert not any("exited" in ln for ln in svc.lines)  # type: ignore[attr-defined]


def test_forking_daemon_exit_status_is_its_main_pid() -> None:
    """`Process:` is the start command (exit 0 once the daemon forked); `Main PID:` says how the
    daemon itself ended. The state line comes first in the evidence."""
    svc = facts_of("fm-service", (FAULTY / "systemctl-status-nvidia-fabricmanager.txt").read_text())
    assert svc.exec_status == 1 and "exit status 1" in svc.describe()  # type: ignore[attr-defined]
    assert svc.lines[0].startswith("Active: failed")  # type: ignore[attr-defined]
    svc = facts_of("fm-service", (FIXTURES / "systemctl" / "status_fm_failed.txt").read_text())
    assert svc.exec_status == 1 and svc.lines[0].startswith("Active: failed")  # type: ignore[attr-defined]
    svc = facts_of("fm-service", (HEALTHY / "systemctl-status-nvidia-fabricmanager.txt").read_text())
    assert svc.exec_status is None and svc.lines[0].startswith("Active: active")  # type: ignore[attr-defined]


def test_both_folders_at_once_are_two_nodes_and_only_the_faulty_one_is_bad() -> None:
    report = analyze_paths([CAPTURES], engine.Config())
    graded = {r.node for r in report.results if r.check != "analyze.unrecognised"}
    assert graded == {"healthy-node", "faulty-node"}
    assert report.verdict.verdict == "NO-GO" and report.verdict.bad_nodes == ["faulty-node"]
    assert not [r for r in report.results if r.node == "healthy-node" and r.status is not Status.PASS]
    # the folder's README.md is reported as text no check reads, never graded
    [readme] = [r for r in report.results if r.check == "analyze.unrecognised"]
    assert readme.status is Status.SKIP and readme.source.endswith("README.md")
