"""Cross-node graders on constructed captures (parsed by the registered parsers) and node results."""

from __future__ import annotations

from preflight import registry
from preflight.framing import frame
from preflight.grading import FactStore
from preflight.model import Result, Status
from preflight.parsers import versions
from preflight.profile import load
from preflight.registry import ClusterContext, Options
from tests.conftest import capture

from preflight.checks.cluster import (  # isort: skip
    grade_mtu, grade_nccl_env, grade_nodes, grade_versions, nccl_env,
)

NODES = ["n1", "n2", "n3", "n4"]


def ctx(captures=None, results=None, errors=None, detail=None, addresses=None, extra=None) -> ClusterContext:
    caps = captures or {n: {} for n in NODES}
    stores = {n: FactStore(registry.load(), captures=caps.get(n, {})) for n in NODES}
    return ClusterContext(nodes=NODES, stores=stores, results=results or [],  # type: ignore[arg-type]
                          node_errors=errors or {n: "" for n in NODES}, node_detail=detail or {n: {} for n in NODES},
                          profile=load("generic"), options=Options(extra=extra or {}), addresses=addresses or {})


def q(driver: str) -> str:
    return f"==============NVSMI LOG==============\n\nDriver Version                            : {driver}\nCUDA Version : 12.4\n"


def test_versions_odd_node_out_named() -> None:
    caps = {n: {"nvidia-smi-q": capture("nvidia-smi-q", q("550.90.07")),
                "nccl-libs": capture("nccl-libs", "/usr/lib/x86_64-linux-gnu/libnccl.so.2\n"
                                                  "/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5\n"),
                "ofed": capture("ofed", "MLNX_OFED_LINUX-23.10-1.1.9.0:\n"),
                "uname-r": capture("uname-r", "5.15.0-112-generic\n")} for n in NODES}
    caps["n3"]["nvidia-smi-q"] = capture("nvidia-smi-q", q("535.161.08"))
    caps["n2"]["nccl-libs"] = capture("nccl-libs", "/usr/lib/x86_64-linux-gnu/libnccl.so.2.18.3\n")
    res = {r.node: r for r in grade_versions(ctx(caps))}
    assert res["n1"].status is Status.PASS and res["n4"].status is Status.PASS
    assert res["n3"].status is Status.FAIL and "driver 535.161.08 differs from the majority 550.90.07" in res["n3"].summary
    assert res["n2"].status is Status.FAIL and "nccl 2.18.3" in res["n2"].summary
    assert res["n1"].facts["versions"]["ofed"] == "MLNX_OFED_LINUX-23.10-1.1.9.0"


def test_versions_tie_names_both_sides() -> None:
    caps = {n: {"nvidia-smi-q": capture("nvidia-smi-q", q("550.90.07" if n in ("n1", "n2") else "535.1"))}
            for n in NODES}
    res = {r.node: r for r in grade_versions(ctx(caps))}
    assert all(r.status is Status.FAIL for r in res.values())


def test_versions_unreachable_node_is_not_checked() -> None:
    caps = {n: {"nvidia-smi-q": capture("nvidia-smi-q", q("550.90.07"))} for n in NODES if n != "n4"}
    errs = {n: "" for n in NODES}
    errs["n4"] = "unreachable"
    res = {r.node: r for r in grade_versions(ctx(caps, errors=errs))}
    assert res.pop("n4").summary == "node not checked: unreachable"
    assert all(r.status is Status.PASS for r in res.values()) and len(res) == len(NODES) - 1


def test_parsers_odd_input() -> None:
    def doc(text: str):  # noqa: ANN202
        return frame(text).docs[0] if text.strip() else frame("\n").docs[0]

    assert versions.parse_nccl_libs(doc("garbage")).value is None
    assert versions.parse_nccl_libs(doc("libnccl.so.2.9.9\nlibnccl.so.2.19.3\n")).value == "2.19.3"
    assert versions.parse_ofed(doc("ofed_info: command not found")).value is None
    assert versions.parse_kernel_release(doc("5.15.0-112-generic\n")).value == "5.15.0-112-generic"
    c = ctx({"n1": {"env": capture("env", "NCCL_DEBUG=INFO\nPATH=/bin\nTORCH_NCCL_ASYNC_ERROR_HANDLING=1\n"
                                        "not a line\nNCCL_X=a=b\n")}})
    assert nccl_env(c, "n1") == {"NCCL_DEBUG": "INFO", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "NCCL_X": "a=b"}
    assert nccl_env(c, "n2") is None


def test_nccl_env_difference_named() -> None:
    base = "NCCL_SOCKET_IFNAME=^lo,docker0\nNCCL_IB_HCA=mlx5\nHOME=/root\n"
    caps = {n: {"env": capture("env", base)} for n in NODES}
    caps["n2"]["env"] = capture("env", "NCCL_SOCKET_IFNAME=eth0\nNCCL_IB_HCA=mlx5\n")
    caps["n4"]["env"] = capture("env", base + "NCCL_P2P_DISABLE=1\n")
    res = {r.node: r for r in grade_nccl_env(ctx(caps))}
    assert res["n1"].status is Status.PASS and res["n3"].status is Status.PASS
    assert res["n2"].status is Status.FAIL and "NCCL_SOCKET_IFNAME=eth0" in res["n2"].summary
    assert res["n4"].status is Status.FAIL and "NCCL_P2P_DISABLE=1" in res["n4"].summary


def mtu_result(node: str, peers: list[tuple[str, str]]) -> Result:
    bad = [p for p in peers if p[1] != "ok"]
    return Result(check="net.mtu", node=node, status=Status.FAIL if bad else Status.PASS, summary="x",
                  facts={"outcome": bad[0][1] if bad else "ok", "size": 8972,
                         "peers": [{"peer": p, "outcome": o, "jumbo_loss": 100.0 if o != "ok" else 0.0,
                                    "small_loss": 0.0} for p, o in peers]})


ADDR = {f"10.0.0.{i}": f"n{i}" for i in range(1, 5)}


def ring(bad: str, outcome: str = "silent_loss") -> list[Result]:
    out = []
    for i, n in enumerate(NODES):
        peers = [NODES[(i + 1) % 4], NODES[(i - 1) % 4]]
        out.append(mtu_result(n, [(f"10.0.0.{p[1]}", outcome if bad in (n, p) else "ok") for p in peers]))
    return out


def test_mtu_black_hole_named_and_peers_pass() -> None:
    res = list(grade_mtu(ctx(results=ring("n3"), addresses=ADDR)))
    by = {(r.check, r.node): r for r in res}
    culprit = by[("net.mtu", "n3")]
    assert culprit.status is Status.FAIL and culprit.facts["outcome"] == "silent_loss" and culprit.facts["culprit"]
    for n in ("n2", "n4"):
        assert by[("net.mtu", n)].status is Status.PASS and by[("net.mtu", n)].facts["explained_by"] == ["n3"]
    assert ("net.mtu", "n1") not in by  # n1 was fine already
    assert by[("cluster.mtu", "cluster")].facts["culprits"] == ["n3"]


def test_mtu_ssh_stall_breaks_a_tie_and_is_in_the_summary() -> None:
    results = [mtu_result("n2", [("10.0.0.3", "silent_loss"), ("10.0.0.1", "ok")]),
               mtu_result("n1", [("10.0.0.2", "ok")])]
    detail = {n: {} for n in NODES}
    detail["n3"] = {"kind": "timeout", "stage": "auth"}
    errors = {n: "" for n in NODES}
    errors["n3"] = "SSH stalled after key exchange"
    res = {(r.check, r.node): r for r in grade_mtu(ctx(results=results, errors=errors, detail=detail,
                                                          addresses=ADDR))}
    assert res[("net.mtu", "n3")].status is Status.FAIL
    assert "stalled after key exchange" in res[("net.mtu", "n3")].summary
    assert res[("net.mtu", "n2")].status is Status.PASS


def test_mtu_all_ok_and_no_data() -> None:
    res = list(grade_mtu(ctx(results=ring("none"), addresses=ADDR)))
    assert [r.status for r in res] == [Status.PASS]
    [none] = grade_mtu(ctx())
    assert none.status is Status.SKIP and none.summary.startswith("no jumbo path between the nodes was measured")


def test_expected_nodes() -> None:
    errors = {n: "" for n in NODES}
    errors["n2"] = "unreachable"
    (r,) = grade_nodes(ctx(errors=errors, extra={"expect_nodes": 4}))
    assert r.status is Status.FAIL and "only 3 of 4" in r.summary and "n2: unreachable" in r.evidence
    (r,) = grade_nodes(ctx(extra={"expect_nodes": 4}))
    assert r.status is Status.PASS
    assert list(grade_nodes(ctx())) == []
