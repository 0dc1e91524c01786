"""cluster.versions, cluster.nccl_env and cluster.nodes in detail: where each version comes
from, majorities and ties, unset variables, the node count; each finding's code."""

from __future__ import annotations

from typing import Any

from preflight import registry
from preflight.grading import FactStore
from preflight.model import Result, Status
from preflight.profile import load
from preflight.registry import ClusterContext, Options
from tests.conftest import capture

from preflight.checks.cluster import (  # isort: skip
    _majority, grade_nccl_env, grade_nodes, grade_versions, nccl_env, node_versions,
)

NODES = ["n1", "n2", "n3"]


def ctx(caps: dict[str, dict[str, Any]] | None = None, results: list[Result] | None = None,
        errors: dict[str, str] | None = None, extra: dict[str, Any] | None = None,
        nodes: list[str] | None = None) -> ClusterContext:
    nodes = nodes or NODES
    caps = caps or {}
    stores = {n: FactStore(registry.load(), captures=caps.get(n, {})) for n in nodes}
    return ClusterContext(nodes=nodes, stores=stores, results=results or [],  # type: ignore[arg-type]
                          node_errors={n: (errors or {}).get(n, "") for n in nodes},
                          node_detail={n: {} for n in nodes}, profile=load("generic"),
                          options=Options(extra=extra or {}))


def q(driver: str, cuda: str = "12.4") -> str:
    return f"==============NVSMI LOG==============\n\nDriver Version : {driver}\nCUDA Version : {cuda}\n"


def res(check: str, node: str, **facts: Any) -> Result:
    return Result(check=check, node=node, status=Status.PASS, summary="", facts=facts)


def test_where_each_version_comes_from() -> None:
    ibstat = ("CA 'mlx5_0'\n\tCA type: MT4129\n\tNumber of ports: 1\n\tFirmware version: 28.39.1002\n"
              "\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 400\n\t\tLink layer: InfiniBand\n"
              "CA 'mlx5_1'\n\tCA type: MT4129\n\tNumber of ports: 1\n\tFirmware version: 28.36.1010\n"
              "\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 400\n\t\tLink layer: InfiniBand\n")
    caps = {"n1": {"nvidia-smi-q": capture("nvidia-smi-q", q("550.90.07", "12.4")),
                   "nccl-libs": capture("nccl-libs", "libnccl.so.2.21.5\n"),
                   "ofed": capture("ofed", "MLNX_OFED_LINUX-23.10-1.1.9.0:\n"),
                   "uname-r": capture("uname-r", "5.15.0-112-generic\n"),
                   "ibstat": capture("ibstat", ibstat)},
            "n2": {"nccl-libs": capture("nccl-libs", "libnccl.so.2.21.5\n", rc=2),
                   "ofed": capture("ofed", "MLNX_OFED_LINUX-23.10-1.1.9.0:\n", rc=1)}}
    c = ctx(caps, [res("gpu.driver", "n2", driver="535.1", cuda="12.2"),
                   res("gpu.inventory", "n3", driver="530.30", cuda_version="12.1")])
    assert node_versions(c, "n1") == {"driver": "550.90.07", "cuda": "12.4", "nccl": "2.21.5",
                                      "ofed": "MLNX_OFED_LINUX-23.10-1.1.9.0", "hca_firmware": "28.36.1010,28.39.1002",
                                      "kernel": "5.15.0-112-generic"}
    assert node_versions(c, "n2") == {"driver": "535.1", "cuda": "12.2"}  # a probe that failed gives nothing
    assert node_versions(c, "n3") == {"driver": "530.30", "cuda": "12.1"}
    both = ctx({"n1": {"nvidia-smi-q": capture("nvidia-smi-q", q("550.1", "12.8"))}},
               [res("gpu.driver", "n1", driver="560.2", cuda="12.9"), res("gpu.inventory", "n1", driver="1")])
    assert node_versions(both, "n1") == {"driver": "560.2", "cuda": "12.9"}
    q_over_inv = ctx({"n1": {"nvidia-smi-q": capture("nvidia-smi-q", q("550.1", "12.8"))}},
                     [res("gpu.inventory", "n1", driver="1", cuda_version="2")])
    assert node_versions(q_over_inv, "n1") == {"driver": "550.1", "cuda": "12.8"}


def test_majority_clear_tied_and_empty() -> None:
    assert _majority({}) == (None, True)
    assert _majority({"a": "x"}) == ("x", True)
    assert _majority({"a": "x", "b": "x", "c": "y"}) == ("x", True)
    assert _majority({"a": "x", "b": "y"}) == ("x", False)
    assert _majority({"a": "x", "b": "y", "c": "y", "d": "z"}) == ("y", True)


def _drivers(values: dict[str, str]) -> ClusterContext:
    return ctx({n: {"nvidia-smi-q": capture("nvidia-smi-q", q(v))} for n, v in values.items()},
               nodes=list(values))


def test_the_odd_node_out_is_named_with_the_majority() -> None:
    out = {r.node: r for r in grade_versions(_drivers({"n1": "550.1", "n2": "550.1", "n3": "535.9"}))}
    bad = out["n3"]
    assert bad.status is Status.FAIL and bad.summary == "driver 535.9 differs from the majority 550.1"
    assert bad.facts["codes"] == ["cluster.versions/version-differs"] and bad.source == "cross-node"
    assert bad.evidence == ["n3: driver=535.9", "n3: cuda=12.4", "majority: cuda=12.4", "majority: driver=550.1"]
    assert "bring n3 to the fleet's versions" in bad.remedy
    ok = out["n1"]
    assert ok.status is Status.PASS and ok.summary == "same as the other nodes: cuda 12.4, driver 550.1"
    assert (ok.check, ok.source, bad.check) == ("cluster.versions", "cross-node", "cluster.versions")
    assert ok.facts == {"versions": {"driver": "550.1", "cuda": "12.4"}, "reference": {"cuda": "12.4", "driver": "550.1"}}


def test_a_tie_flags_every_node_naming_the_other_side() -> None:
    out = {r.node: r for r in grade_versions(_drivers({"n1": "550.1", "n2": "535.9"}))}
    assert out["n1"].summary == "driver 550.1 differs from 535.9 on 1 node(s)"
    assert out["n2"].summary == "driver 535.9 differs from 550.1 on 1 node(s)"
    assert all(r.status is Status.FAIL for r in out.values())


def test_a_node_with_no_versions_is_skip_and_an_unreachable_node_is_not_checked() -> None:
    c = ctx({"n1": {"nvidia-smi-q": capture("nvidia-smi-q", q("550.1"))}}, errors={"n3": "ssh refused"})
    out = {r.node: r for r in grade_versions(c)}
    assert set(out) == {"n1", "n2", "n3"}  # one result per node, whatever was lost
    assert out["n3"].status is Status.ERROR and out["n3"].summary == "node not checked: ssh refused"
    assert out["n3"].remedy == "make n3 reachable, or drain it" and out["n3"].evidence == ["ssh refused"]
    assert out["n2"].status is Status.SKIP and out["n2"].summary == "no versions reported: nothing to compare"
    assert out["n2"].facts["codes"] == ["cluster.versions/not-reported"]
    assert out["n1"].status is Status.PASS


def test_nccl_env_keeps_only_nccl_variables() -> None:
    c = ctx({"n1": {"env": capture("env", "NCCL_DEBUG=INFO\nNCCL_debug=x\nXNCCL_A=1\nTORCH_NCCL_BLOCKING_WAIT=1\n"
                                          "NCCL_=1\nHOME=/root\n")}})
    assert nccl_env(c, "n1") == {"NCCL_DEBUG": "INFO", "TORCH_NCCL_BLOCKING_WAIT": "1"}
    assert nccl_env(c, "n2") is None


def test_a_differing_or_unset_variable_is_named_per_node() -> None:
    base = "NCCL_IB_HCA=mlx5\nNCCL_SOCKET_IFNAME=eth0\n"
    caps = {"n1": {"env": capture("env", base)}, "n2": {"env": capture("env", base)},
            "n3": {"env": capture("env", "NCCL_SOCKET_IFNAME=eth1\nNCCL_PROTO=LL\n")}}
    out = {r.node: r for r in grade_nccl_env(ctx(caps))}
    bad = out["n3"]
    assert bad.status is Status.FAIL and bad.facts["codes"] == ["cluster.nccl_env/env-differs"]
    assert bad.facts["differences"] == ["NCCL_IB_HCA=(unset) where the others have mlx5",
                                        "NCCL_PROTO=LL where the others have (unset)",
                                        "NCCL_SOCKET_IFNAME=eth1 where the others have eth0"]
    assert bad.summary == "NCCL environment differs from the other nodes: NCCL_IB_HCA=(unset) where the others " \
                          "have mlx5 (+2 more)"
    assert bad.evidence == bad.facts["differences"] and bad.facts["env"] == {"NCCL_SOCKET_IFNAME": "eth1",
                                                                            "NCCL_PROTO": "LL"}
    assert bad.remedy == ("set the same NCCL_* / TORCH_NCCL_* variables on every node (job script or "
                          "/etc/nccl.conf); a single differing rank can hang init")
    assert (bad.check, bad.source) == ("cluster.nccl_env", "cross-node")
    assert out["n1"].status is Status.PASS and out["n1"].summary == "same 2 NCCL variable(s) as every other node"
    assert (out["n1"].check, out["n1"].source) == ("cluster.nccl_env", "cross-node")
    assert out["n1"].facts == {"env": {"NCCL_IB_HCA": "mlx5", "NCCL_SOCKET_IFNAME": "eth0"}}
    one = {r.node: r for r in grade_nccl_env(ctx({"n1": {"env": capture("env", "NCCL_A=1\n")},
                                                 "n2": {"env": capture("env", "NCCL_A=1\n")},
                                                 "n3": {"env": capture("env", "NCCL_A=2\n")}}))}
    assert one["n3"].summary == "NCCL environment differs from the other nodes: NCCL_A=2 where the others have 1"
    many = "".join(f"NCCL_V{i}=1\n" for i in range(25))
    odd = {r.node: r for r in grade_nccl_env(ctx({"n1": {"env": capture("env", many)},
                                                 "n2": {"env": capture("env", many)},
                                                 "n3": {"env": capture("env", "")}}))}["n3"]
    assert len(odd.evidence) == 20 and len(odd.facts["differences"]) == 25
    # what arrived from a node whose connection failed later is compared; a node that sent
    # nothing is "node not checked"; a node never asked for its environment (analyze) is left out
    gone = {r.node: r for r in grade_nccl_env(ctx({"n1": {"env": capture("env", "NCCL_A=1\n")},
                                                   "n2": {"env": capture("env", "NCCL_A=1\n")}},
                                                  errors={"n1": "stalled", "n3": "down"}))}
    assert set(gone) == {"n1", "n2", "n3"} and gone["n1"].status is Status.PASS
    assert gone["n3"].status is Status.ERROR and gone["n3"].summary == "node not checked: down"


def test_the_expected_node_count() -> None:
    assert grade_nodes(ctx()) == []
    [r] = grade_nodes(ctx(extra={"expect_nodes": 3}))
    assert r.status is Status.PASS and r.summary == "3 of 3 expected nodes answered" and r.node == "cluster"
    assert r.facts == {"expected": 3, "ok": NODES} and r.check == "cluster.nodes"
    [r] = grade_nodes(ctx(errors={"n2": "ssh: connect to host n2 port 22: No route to host"},
                          extra={"expect_nodes": "3"}))
    assert r.status is Status.FAIL and r.summary == "only 2 of 3 expected nodes answered"
    assert r.evidence == ["n2: ssh: connect to host n2 port 22: No route to host"]
    assert r.facts["codes"] == ["cluster.nodes/short"] and r.facts["missing"] == ["n2"]
    assert r.remedy == "fix or replace the missing nodes before launching; the job would start short"
    [r] = grade_nodes(ctx(errors={"n2": "x"}, extra={"expect_nodes": 2}))
    assert r.status is Status.PASS


# ---------------------------------------------------------------------------------------------
# cluster.mtu: the node-to-peer jumbo matrix, the culprit and the peers its link explains

from preflight.checks.cluster import grade_mtu  # noqa: E402  (isort: skip)


def mtu(node: str, peers: dict[str, str], status: Status = Status.FAIL, size: int = 8972,
        reasons: dict[str, str] | None = None) -> Result:
    plist = [{"peer": p, "outcome": o, **({"reason": (reasons or {})[p]} if p in (reasons or {}) else {})}
             for p, o in peers.items()]
    ok = all(o == "ok" for o in peers.values())
    return Result(check="net.mtu", node=node, status=Status.PASS if ok else status, summary="",
                  facts={"size": size, "peers": plist})


def mtu_ctx(results: list[Result], nodes: list[str] | None = None, detail: dict[str, dict[str, str]] | None = None,
            errors: dict[str, str] | None = None, addresses: dict[str, str] | None = None) -> ClusterContext:
    c = ctx(results=results, nodes=nodes, errors=errors)
    c.node_detail.update(detail or {})
    c.addresses.update(addresses or {})
    return c


def by(results: list[Result]) -> dict[tuple[str, str], Result]:
    return {(r.check, r.node): r for r in results}


def test_the_node_on_every_failing_link_is_the_culprit_and_its_peers_are_explained() -> None:
    rs = [mtu("n1", {"n2": "ok", "n3": "silent_loss"}), mtu("n2", {"n1": "ok", "n3": "silent_loss"}),
          mtu("n3", {"n1": "silent_loss", "n2": "frag_needed"}, reasons={"n1": "100% loss"})]
    out = by(list(grade_mtu(mtu_ctx(rs))))
    c = out[("net.mtu", "n3")]
    assert c.status is Status.FAIL and c.facts["codes"] == ["net.mtu/black-hole-at-node"]
    assert c.summary == ("jumbo frames to and from n3 are dropped (silent_loss): n1->n3, n2->n3, n3->n1, n3->n2; "
                         "small pings pass")
    assert c.evidence == ["n1 -> n3: silent_loss (8972-byte DF ping)", "n2 -> n3: silent_loss (8972-byte DF ping)",
                          "n3 -> n1: silent_loss (8972-byte DF ping)", "n3 -> n2: frag_needed (8972-byte DF ping)",
                          "n3 -> n1: 100% loss"]
    assert c.facts["outcome"] == "silent_loss" and c.facts["size"] == 8972 and c.facts["culprit"] is True
    assert c.facts["connection_stalled"] is False and ["n3", "n1", "silent_loss"] in c.facts["links"]
    assert c.remedy == "fix the MTU on n3's link (switch port or NIC) to match the fabric, or drain n3"
    for peer in ("n1", "n2"):
        e = out[("net.mtu", peer)]
        assert e.status is Status.PASS and e.facts["outcome"] == "ok" and e.facts["explained_by"] == ["n3"]
        assert e.summary == "jumbo path fine; losses only towards n3, whose link is at fault"
        assert e.evidence == [f"{peer} -> n3: silent_loss"]
    cl = out[("cluster.mtu", "cluster")]
    assert cl.status is Status.FAIL and cl.summary == "MTU black hole at n3" and cl.remedy.startswith("see net.mtu")
    assert cl.facts["culprits"] == ["n3"] and cl.facts["matrix"]["n1"] == {"n2": "ok", "n3": "silent_loss"}
    assert cl.evidence[0] == "n1 -> n3: silent_loss" and len(cl.evidence) == 4


def test_one_failing_link_names_the_end_whose_connection_stalled() -> None:
    rs = [mtu("n1", {"n2": "silent_loss"}), mtu("n2", {"n1": "ok"})]
    for stage, how in (("kex", "SSH to it stalled after key exchange"),
                       ("command", "its probe output stalled in transit")):
        c = mtu_ctx(rs, nodes=["n1", "n2"], detail={"n2": {"kind": "timeout", "stage": stage}})
        out = by(list(grade_mtu(c)))
        r = out[("net.mtu", "n2")]
        assert ("net.mtu", "n1") not in out or out[("net.mtu", "n1")].status is Status.PASS
        assert r.summary.endswith(f"; small pings pass; {how} (same MTU black hole)") and r.facts["connection_stalled"]
        assert r.evidence[-1] == "n2: SSH stalled after key exchange"
    c = mtu_ctx(rs, nodes=["n1", "n2"], detail={"n2": {"kind": "timeout", "stage": "command"}},
                errors={"n2": "SSH stalled after authentication with n2: the command (40491 bytes) was never "
                              "acknowledged within 20 s"})
    r = by(list(grade_mtu(c)))[("net.mtu", "n2")]
    assert r.summary.endswith("; the command sent to it never got through (same MTU black hole)")
    assert r.facts["explains_lost"]  # what n2 did not send back depends on this FAIL (rootcause)
    c = mtu_ctx(rs, nodes=["n1", "n2"], errors={"n2": "output lost"})
    r = by(list(grade_mtu(c)))[("net.mtu", "n2")]
    assert not r.facts["connection_stalled"] and r.summary.endswith("; small pings pass") and not r.facts["explains_lost"]
    assert sorted(by(list(grade_mtu(mtu_ctx(rs, nodes=["n1", "n2"])))).keys()) == [
        ("cluster.mtu", "cluster"), ("net.mtu", "n1"), ("net.mtu", "n2")]


def test_a_peer_with_its_own_other_loss_is_not_explained_and_a_clean_matrix_passes() -> None:
    rs = [mtu("n1", {"n2": "ok", "n3": "silent_loss"}), mtu("n2", {"n3": "silent_loss", "n4": "silent_loss"}),
          mtu("n3", {"n1": "silent_loss", "n2": "silent_loss", "n4": "silent_loss"}), mtu("n4", {"n1": "ok"})]
    out = by(list(grade_mtu(mtu_ctx(rs, nodes=["n1", "n2", "n3", "n4"]))))
    assert out[("cluster.mtu", "cluster")].facts["culprits"] == ["n3"]
    assert ("net.mtu", "n2") not in out  # n2 -> n4 is lost too: not only towards the culprit
    assert out[("net.mtu", "n1")].status is Status.PASS
    clean = list(grade_mtu(mtu_ctx([mtu("n1", {"n2": "ok"}), mtu("n2", {"n1": "ok"})], nodes=["n1", "n2"])))
    [r] = clean
    assert r.check == "cluster.mtu" and r.status is Status.PASS and r.summary == "2 node-to-peer jumbo path(s) tested"
    assert r.facts == {"matrix": {"n1": {"n2": "ok"}, "n2": {"n1": "ok"}}, "culprits": [], "size": 8972}
    [none] = grade_mtu(mtu_ctx([], nodes=["n1"]))
    assert (none.check, none.node, none.status) == ("cluster.mtu", "cluster", Status.SKIP)
    assert none.facts["codes"] == ["cluster.mtu/not-measured"] and none.evidence == ["no node's net.mtu pinged a peer"]


def test_peers_named_by_address_are_mapped_to_nodes() -> None:
    rs = [mtu("n1", {"10.0.0.2": "frag_needed"}), mtu("n2", {"10.0.0.1": "frag_needed"})]
    c = mtu_ctx(rs, nodes=["n1", "n2"], addresses={"10.0.0.1": "n1", "10.0.0.2": "n2"},
                detail={"n1": {"kind": "timeout", "stage": "auth"}})
    out = by(list(grade_mtu(c)))
    assert out[("cluster.mtu", "cluster")].facts["matrix"] == {"n1": {"n2": "frag_needed"}, "n2": {"n1": "frag_needed"}}
    assert out[("cluster.mtu", "cluster")].facts["culprits"] == ["n1"]
    assert out[("net.mtu", "n1")].facts["outcome"] == "frag_needed"


def test_where_results_come_from_and_how_their_parts_are_joined() -> None:
    c = ctx({"n1": {"nvidia-smi-q": capture("nvidia-smi-q", q("550.1"))}}, errors={"n3": "ssh refused"})
    skip = {r.node: r for r in grade_versions(c)}["n2"]
    assert (skip.check, skip.source) == ("cluster.versions", "cross-node")
    two = {r.node: r for r in grade_versions(ctx({n: {"nvidia-smi-q": capture("nvidia-smi-q", q(d, cu))}
                                                  for n, d, cu in (("n1", "550.1", "12.4"), ("n2", "550.1", "12.4"),
                                                                   ("n3", "535.9", "12.2"))}))}["n3"]
    assert two.summary == "cuda 12.2 differs from the majority 12.4; driver 535.9 differs from the majority 550.1"
    rs = [mtu("n1", {"n2": "ok", "n3": "silent_loss"}), mtu("n2", {"n1": "ok", "n3": "silent_loss"}),
          mtu("n3", {"n1": "silent_loss", "n2": "silent_loss"})]
    out = list(grade_mtu(mtu_ctx(rs)))
    assert {r.source for r in out} == {"cross-node"}
    clean = list(grade_mtu(mtu_ctx([mtu("n1", {"n2": "ok"}), mtu("n2", {"n1": "ok"})], nodes=["n1", "n2"])))
    assert clean[0].source == "cross-node"
    # two culprits on a tie, joined; the evidence list is capped at 30 links
    tie = [mtu("n1", {"n2": "frag_needed"}), mtu("n2", {"n1": "frag_needed"})]
    cl = by(list(grade_mtu(mtu_ctx(tie, nodes=["n1", "n2"]))))[("cluster.mtu", "cluster")]
    assert cl.summary == "MTU black hole at n1, n2"
    many = [f"m{i:02d}" for i in range(8)]
    big = [mtu(a, {b: "silent_loss" for b in many if b != a}) for a in many]
    cl = by(list(grade_mtu(mtu_ctx(big, nodes=many))))[("cluster.mtu", "cluster")]
    assert len(cl.evidence) == 30
    # a timeout in another stage, or another kind of fault in a stall stage, is no stall
    for detail in ({"kind": "timeout", "stage": "connect"}, {"kind": "refused", "stage": "kex"}):
        r = by(list(grade_mtu(mtu_ctx([mtu("n1", {"n2": "silent_loss"}), mtu("n2", {"n1": "ok"})],
                                      nodes=["n1", "n2"], detail={"n2": detail}))))
        assert all(not x.facts.get("connection_stalled") for x in r.values() if x.check == "net.mtu")


def test_the_node_count_facts() -> None:
    ok = grade_nodes(ctx(extra={"expect_nodes": 2}))
    assert ok[0].facts == {"expected": 2, "ok": ["n1", "n2", "n3"]}


def _no_data_nic(node: str) -> Result:
    """net.mtu of a node with no peer to ping and only a veth (the namespace cluster's eth0)."""
    from preflight.findings import coded_result
    return coded_result("net.mtu/no-data-nic", "net.mtu", node, "no Ethernet data-plane interface up: MTU not graded",
                        ["2: eth0@if7: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 9000 qdisc noqueue state UP (veth)"])


def test_a_node_with_no_peer_because_no_other_node_answered_says_so() -> None:
    """In a run over several nodes, a node whose peers all failed to answer pinged nobody: its
    net.mtu SKIP names that cause (the nodes that sent nothing back), not a missing data-plane
    NIC, and so does the path matrix's evidence."""
    errors = {"n2": "n2 (10.0.0.2:22) refused the connection", "n3": "no route to host n3 (10.0.0.3)"}
    out = by(list(grade_mtu(mtu_ctx([_no_data_nic("n1")], errors=errors))))
    r = out[("net.mtu", "n1")]
    assert (r.status, r.facts["codes"]) == (Status.SKIP, ["net.mtu/no-peer-answered"]), r
    assert r.summary == "no peer answered: n[2-3] sent nothing back, so no jumbo path was pinged; MTU not graded"
    assert r.evidence[:2] == [f"{n}: {e}" for n, e in errors.items()]
    assert r.evidence[2].startswith("2: eth0@if7:") and "n[2-3]" in r.remedy
    assert r.facts["unanswered"] == ["n2", "n3"] and r.source == "cross-node"
    cl = out[("cluster.mtu", "cluster")]
    assert cl.evidence == [f"n1: net.mtu SKIP {r.summary}"]
    # with a data-plane NIC its configured MTU is graded: the PASS says why the path was not tested
    ok = Result(check="net.mtu", node="n1", status=Status.PASS, summary="data-plane MTU 9000 on eno1 (no peers given: "
                "path not tested)", evidence=["2: eno1: <UP> mtu 9000"], facts={
                    "outcome": "ok", "size": 8972, "mtu": 9000, "peers": [], "interfaces": [{"name": "eno1", "mtu": 9000}]})
    r = by(list(grade_mtu(mtu_ctx([ok], nodes=["n1", "n2"], errors=errors))))[("net.mtu", "n1")]
    assert r.status is Status.PASS and r.summary == ("data-plane MTU 9000 on eno1 (no peer answered: n2 sent nothing "
                                                     "back; path not tested)")
    assert r.evidence == ["2: eno1: <UP> mtu 9000", f"n2: {errors['n2']}"] and r.facts["unanswered"] == ["n2"]
    # a finding on the configured MTU stands; so does every result when every node answered (analyze,
    # or a single node: no ring was drawn)
    low = Result(check="net.mtu", node="n1", status=Status.FAIL, summary="MTU below 9000 on eno1 (1500)",
                 facts={"outcome": "local_too_small", "peers": [], "interfaces": [{"name": "eno1", "mtu": 1500}]})
    assert ("net.mtu", "n1") not in by(list(grade_mtu(mtu_ctx([low], nodes=["n1", "n2"], errors=errors))))
    for alone in (_no_data_nic("n1"), ok):
        assert ("net.mtu", "n1") not in by(list(grade_mtu(mtu_ctx([alone]))))


def test_the_stall_fact_is_named_for_any_transport() -> None:
    """The culprit's fact says its connection stalled, whichever transport carried it (ssh or
    srun), and names that transport when the run told it."""
    rs = [mtu("n1", {"n2": "silent_loss"}), mtu("n2", {"n1": "ok"})]
    for transport in ("ssh", "srun"):
        c = mtu_ctx(rs, nodes=["n1", "n2"], detail={"n2": {"kind": "timeout", "stage": "command",
                                                           "connection": "stalled", "transport": transport}})
        r = by(list(grade_mtu(c)))[("net.mtu", "n2")]
        assert r.facts["connection_stalled"] is True and r.facts["transport"] == transport, r.facts
        assert "ssh_stalled" not in r.facts
    r = by(list(grade_mtu(mtu_ctx(rs, nodes=["n1", "n2"]))))[("net.mtu", "n2")]
    assert r.facts["connection_stalled"] is False and "transport" not in r.facts
