"""The evidence line a finding shows is the one that proves it: for each check's typical failing
capture (real tool formats), the first evidence line (the one the console shows) holds the
telling token, not the first line the tool printed."""

from __future__ import annotations

import pytest

from preflight.findings import Findings, prove
from preflight.model import Status
from preflight.report.console import proof
from tests.conftest import capture, fixture_text, grade

HEALTHY_Q = "nvidia-smi-q/h100x8_535_healthy_idle_powerbrake.txt"
L8 = "nvidia-smi/smi_L_8xh100.txt"

CASES = [  # check, {probe: fixture}, the token the shown line must hold
    ("fabric.manager", {"fm-service": "systemctl/show_fm_failed.txt", "nvidia-smi-q": HEALTHY_Q}, "ActiveState=failed"),
    ("fabric.manager", {"fm-service": "systemctl/show_fm_inactive.txt", "nvidia-smi-q": HEALTHY_Q},
     "ActiveState=inactive"),
    ("fabric.manager", {"fm-service": "systemctl/status_fm_failed.txt", "nvidia-smi-q": HEALTHY_Q}, "don't match"),
    ("fabric.manager", {"fm-service": "systemctl/show_fm_active.txt",
                        "nvidia-smi-q": "nvidia-smi-q/h100x4_535_fabric_not_started.txt"}, "Not Started"),
    ("gpu.driver", {"nvidia-smi-q": "nvidia-smi-q/err_version_mismatch.txt"}, "version mismatch"),
    ("gpu.driver", {"nvidia-smi-q": "nvidia-smi-q/err_no_driver.txt"}, "couldn't communicate"),
    ("gpu.health", {"nvidia-smi-q": "nvidia-smi-q/h100x8_535_ecc_uncorrectable.txt"}, "Uncorrectable : 2"),
    ("gpu.health", {"nvidia-smi-q": "nvidia-smi-q/h100x2_535_remap_failure.txt"}, "Reset Required : Yes"),
    ("gpu.health", {"nvidia-smi-q": "nvidia-smi-q/h100x2_535_busy_hw_slowdown.txt"}, "HW Slowdown : Active"),
    ("gpu.health", {"nvidia-smi-q": "nvidia-smi-q/h100x8_535_gpu_lost.txt"}, "Unknown Error"),
    ("gpu.inventory", {"nvidia-smi-query": "nvidia-smi/query_pcie_degraded.csv", "nvidia-smi-L": L8},
     "width.current=8"),
    ("gpu.inventory", {"nvidia-smi-query": "nvidia-smi/query_mig_persistence.csv", "nvidia-smi-L": L8},
     "mig.mode.current=Enabled"),
    ("gpu.inventory", {"nvidia-smi-query": "nvidia-smi/query_gpu3_requires_reset.csv", "nvidia-smi-L": L8},
     "[GPU requires reset]"),
    ("gpu.nvlink", {"nvidia-smi-nvlink": "nvidia-smi/nvlink_8xh100_gpu3_link7_down.txt"}, "<inactive>"),
    ("gpu.nvlink", {"nvidia-smi-nvlink": "nvidia-smi/nvlink_8xh100_slow.txt"}, "13.281 GB/s"),
    ("gpu.topology", {"nvidia-smi-topo": "topo/topo_8xh100_gpu2_gpu5_sys.txt"}, "GPU2\tNV18"),
    ("gpu.topology", {"nvidia-smi-topo": "topo/topo_8xh100_gpu6_no_local_nic.txt"}, "GPU6\t"),
    ("gpu.xid", {"kernel-log": "kernel-log/dmesg_T_xid79_fallen_off_bus.log"}, "): 79,"),
    ("gpu.xid", {"kernel-log": "kernel-log/syslog_kern_xid62.log"}, "): 62,"),
    ("ib.hca", {"ibstat": "ib/ibstat_8x_cx7_down_2_frontend_active.txt"}, "State: Down"),
    ("ib.hca", {"ibstat": "ib/ibstat_mlx5_2_at_200.txt"}, "Rate: 200"),
    ("net.nic", {"ip-addr": "ip/ip_j_d_addr_data_nic_down.json"}, "state DOWN"),
    ("net.nic", {"ip-addr": "ip/ip_j_d_addr_data_mtu1500.json"}, "mtu 1500"),
    # not synchronised: each time tool's telling line (the leap status, the sync flag), not the
    # reference id or the service flag printed above it
    ("node.clock", {"chronyc-tracking": "chrony/tracking_4x_not_synchronised.txt"}, "Leap status     : Not synch"),
    ("node.clock", {"timedatectl": "timedatectl/show_ntp_on_not_synchronised.txt"}, "NTPSynchronized=no"),
    ("node.clock", {"timedatectl": "timedatectl/status_not_synchronised.txt"}, "System clock synchronized: no"),
    ("node.clock", {"timedatectl": "timedatectl/status_systemd229_not_synchronised.txt"}, "NTP synchronized: no"),
    ("node.clock", {"ntpstat": "ntpstat/unsynchronised_restarting.txt"}, "unsynchronised"),
    ("node.clock", {"ntpq-peers": "ntpq/pn_no_system_peer_init.txt"}, "none selected as system peer"),
    ("node.clock", {"ntpq-peers": "ntpq/pn_no_association.txt"}, "No association ID's returned"),
    ("node.clock", {"chronyc-sources": "chrony/sources_n_none_reachable.txt"}, "none selected ('*')"),
    ("node.clock", {"chronyc-tracking": "chrony/tracking_c_not_synchronised.csv"}, ",Not synchronised"),
    # a GPU missing: the count against the profile's (and the index that is gone), not the list of those present
    ("gpu.inventory", {"nvidia-smi-query": "nvidia-smi/query_7of8_gpu5_missing.csv"}, "no GPU at index 5"),
    ("gpu.inventory", {"nvidia-smi-table": "nvidia-smi/table_550_7of8.txt"}, "7 GPU(s) listed where gpu.count"),
    # a flap: the latest loss of the link that came back, not the first event of the log (an up)
    ("ib.hca", {"ibstat": "ib/ibstat_8x400_ib_2fe_all_active.txt",
                "link-events": "netlog/journal_networkd_ib0_flapping_then_up.log"}, "11:43:55 gpu-c114"),
    ("ib.hca", {"ibstat": "ib/ibstat_8x400_ib_2fe_all_active.txt",
                "link-events": "netlog/dmesg_mlx5_module_error_and_flaps.log"}, "ibp193s0: Link down"),
]


@pytest.mark.parametrize("check,inputs,token", CASES, ids=[f"{c[0]}-{list(c[1].values())[0].split('/')[-1]}"
                                                            for c in CASES])
def test_the_shown_evidence_line_is_the_telling_one(check: str, inputs: dict[str, str], token: str) -> None:
    res = grade(check, {p: capture(p, fixture_text(f)) for p, f in inputs.items()}, profile="h100-sxm-8x")
    bad = [r for r in res if r.status in (Status.FAIL, Status.ERROR, Status.WARN)]
    assert len(bad) == 1, res
    assert token in proof(bad[0]), (proof(bad[0]), bad[0].evidence)


def test_cluster_versions_shows_the_differing_driver_first() -> None:
    from tests.checks.test_cluster import NODES, ctx

    from preflight.checks.cluster import grade_versions  # isort: skip

    def q(driver: str, cuda: str) -> str:
        return f"==============NVSMI LOG==============\n\nDriver Version : {driver}\nCUDA Version : {cuda}\n"

    caps = {n: {"nvidia-smi-q": capture("nvidia-smi-q", q("550.90.07", "12.4"))} for n in NODES}
    caps["n3"]["nvidia-smi-q"] = capture("nvidia-smi-q", q("535.161.08", "12.2"))
    res = {r.node: r for r in grade_versions(ctx(caps))}
    assert res["n3"].status is Status.FAIL and "cuda 12.2" in res["n3"].summary
    assert proof(res["n3"]) == "n3: driver=535.161.08", res["n3"].evidence


def test_cluster_clock_shows_the_node_that_is_off_then_the_one_it_is_off_from() -> None:
    from preflight.checks.clock import agreement
    from preflight.profile import load

    spans = {"node1": (-0.05, 0.05), "node2": (29.55, 29.7), "node3": (0.0, 0.1), "node4": (0.01, 0.08)}
    r = agreement(spans, load("h100-sxm-8x"))
    assert r.status is Status.FAIL and r.summary.startswith("node2's clock is at least 29.5 s ahead of node1's")
    assert proof(r).startswith("node2: offset from the controller +29.550"), r.evidence
    assert r.evidence[1].startswith("node1: offset from the controller -0.050"), r.evidence
    assert len([e for e in r.evidence if "offset from the controller" in e]) == 4  # every node's reading kept
    behind = agreement({"node1": (0.0, 0.1), "node7": (-40.0, -39.9)}, load("h100-sxm-8x"))
    assert behind.summary.startswith("node1's clock is at least 39.9 s ahead of node7's"), behind.summary
    assert behind.evidence[0].startswith("node7: offset from the controller -40.000"), behind.evidence


def test_prove_moves_the_first_line_holding_the_first_token_found() -> None:
    lines = ["LoadState=loaded", "ActiveState=failed", "SubState=failed"]
    assert prove(lines, "activestate=") == ["ActiveState=failed", "LoadState=loaded", "SubState=failed"]
    assert prove(lines, ("nothing", "SubState")) == ["SubState=failed", "LoadState=loaded", "ActiveState=failed"]
    assert prove(lines, ("SubState", "ActiveState")) == ["SubState=failed", "LoadState=loaded", "ActiveState=failed"]
    assert prove(lines, "absent") == lines and prove(lines) == lines and prove([], "x") == []
    f = Findings()
    f.add(Status.FAIL, "dead", lines, proof="ActiveState")
    assert f.items[0].evidence[0] == "ActiveState=failed"


@pytest.mark.parametrize("fixture,check,token", [
    ("triage/rank3_crash.log", "hang.watchdog", "RuntimeError: shape"),
    ("triage/rank5_sigkill.log", "hang.watchdog", "exitcode"),
    ("watchdog/torch25_allreduce_timeout_rank3_missing.log", "hang.watchdog", "timeout"),
    ("nccl/nccl_warn_qp_unreachable_then_proxy_and_socket.log", "nccl.transport", "ibv_modify_qp failed"),
    ("nccl-tests/all_reduce_perf_1node_wrong_results.txt", "nccl.allreduce", " 4096 "),
    ("nvidia-smi-q/h100x2_535_fabric_insufficient_resources.txt", "fabric.manager", "Status : Insufficient"),
    ("nvidia-smi-q/v100x2_470_retired_pages_pending.txt", "gpu.health", "Pending Page Blacklist : Yes"),
    ("nvidia-smi-q/v100x1_470_retired_pending.xml", "gpu.health", "<pending_blacklist>Yes"),
    ("ethtool/ethtool_bond1_unknown_speed_no_link.txt", "net.nic", "Link detected: no"),
    ("nvidia-smi-q/a100x1_550_mig_enabled.txt", "gpu.inventory", "MIG mode current=Enabled"),
    ("netlog/dmesg_mlx5_link_down_stays_down.log", "net.nic", "Link down"),
])
def test_analysed_logs_show_the_telling_line(fixture: str, check: str, token: str) -> None:
    from preflight import analyze, registry
    from tests.conftest import FIXTURES

    res = [r for r in analyze.analyze(registry.load(), [FIXTURES / fixture]) if r.check == check]
    assert res and token in proof(res[0]), [r.evidence[:3] for r in res]


def test_ctx_finding_puts_the_proof_first() -> None:
    from preflight import registry
    from preflight.grading import FactStore
    from preflight.profile import load
    from preflight.registry import CheckContext, Options

    r = registry.load()
    ctx = CheckContext(check=r.checks["gpu.xid"], node="n1", store=FactStore(r, captures={}),
                       profile=load("generic"), options=Options())
    res = ctx.finding("gpu.xid/restart-bm", "Xid 79", ["boot line", "NVRM: Xid (PCI:0000:5d:00): 79"], proof="Xid (")
    assert res.evidence[0] == "NVRM: Xid (PCI:0000:5d:00): 79" and res.status is Status.FAIL
