"""nccl.transport: NCCL_DEBUG=INFO/WARN logs graded (the all-reduce tables: test_nccl_tests.py)."""

from __future__ import annotations

import pytest

from preflight.model import Status
from tests.conftest import capture, facts_of, fixture_text, grade

H100 = "h100-sxm-8x"


def transport(rel: str, profile: str = H100, text: str | None = None) -> list:
    body = text if text is not None else fixture_text(f"nccl/{rel}")
    return grade("nccl.transport", {"nccl-log": capture("nccl-log", body)}, profile=profile, mode="analyze")



# ----------------------------------------------------------------------------- NCCL INFO logs

def test_parse_log_maps_processes_to_ranks() -> None:
    log = facts_of("nccl-log", fixture_text("nccl/nccl_info_2node_ib_nvls.log"))
    assert len(log.procs) == 16
    ranks = sorted(p.rank for p in log.procs.values() if p.rank is not None)
    assert ranks == list(range(16))
    p7 = next(p for p in log.procs.values() if p.rank == 7)
    assert p7.host == "trn-b07" and p7.net == "IB" and p7.gdr is True
    assert p7.hcas[0] == "mlx5_0:1/IB" and len(p7.hcas) == 8
    assert p7.oob == "ens9f0np0" and p7.bootstrap == "ens9f0np0"
    assert p7.nvls is True and p7.version == "2.21.5+cuda12.4"


def test_transport_ib_passes_with_facts() -> None:
    [r] = transport("nccl_info_2node_ib_nvls.log")
    assert r.status is Status.PASS, r.summary
    assert r.facts["net"] == "IB" and r.facts["nvls"] is True
    assert "ens9f0np0" in r.facts["interfaces"]
    assert r.facts["hosts"] == ["trn-b07", "trn-b08"]
    assert len(r.facts["ranks"]) == 16 and r.facts["version"] == "2.21.5+cuda12.4"
    assert any("NET/IB : Using" in e for e in r.evidence)


def test_transport_socket_fallback_fails_on_ib_profile() -> None:
    [r] = transport("nccl_info_2node_socket_fallback_one_host.log")
    assert r.status is Status.FAIL
    assert "NCCL fell back to TCP sockets" in r.summary and "trn-b08" in r.summary
    assert "trn-b07" not in r.summary
    assert any("NET/Socket : Using" in e for e in r.evidence)
    assert any("No device found" in e for e in r.evidence)
    assert "ibstat" in r.remedy
    by_rank = {x["rank"]: x["net"] for x in r.facts["ranks"]}
    assert by_rank[0] == "IB" and by_rank[8] == "Socket"


def test_transport_socket_is_only_warn_when_profile_expects_any() -> None:
    [r] = transport("nccl_info_2node_socket_fallback_one_host.log", profile="generic")
    assert r.status is Status.WARN


def test_transport_lo_bound_fails_even_on_generic() -> None:
    [r] = transport("nccl_info_lo_bound_srun_prefix.log", profile="generic")
    assert r.status is Status.FAIL
    assert "NCCL bound lo" in r.summary
    assert r.facts["net"] == "Socket" and r.facts["nvls"] is False
    assert "NCCL_SOCKET_IFNAME" in r.remedy


def test_transport_docker0_and_mixed_versions() -> None:
    text = "\n".join([
        "hostA:100:100 [0] NCCL INFO NCCL version 2.19.3+cuda12.3",
        "hostA:100:100 [0] NCCL INFO Bootstrap : Using docker0:172.17.0.1<0>",
        "hostA:100:120 [0] NCCL INFO NET/Socket : Using [0]docker0:172.17.0.1<0>",
        "hostA:100:120 [0] NCCL INFO Using network Socket",
        "hostB:200:200 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
        "hostB:200:220 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE ; OOB eth0:10.0.0.2<0>",
        "hostB:200:220 [0] NCCL INFO Using network IB",
    ])
    [r] = transport("", profile="generic", text=text)
    assert r.status is Status.FAIL
    problems = " ".join([r.summary, *r.evidence])
    assert "docker0" in problems
    assert r.facts["version"] == ["2.19.3+cuda12.3", "2.21.5+cuda12.4"]
    host_b = next(x for x in r.facts["ranks"] if x["host"] == "hostB")
    assert host_b["hcas"] == ["mlx5_0:1/RoCE"] and host_b["oob"] == "eth0"


def test_transport_net_from_channel_lines_only() -> None:
    text = "\n".join([
        "[1,0]<stdout>:nodeA:5:9 [3] NCCL INFO comm 0x1 rank 3 nranks 16 cudaDev 3 busId 5d000 - Init START",
        "[1,0]<stdout>:nodeA:5:9 [3] NCCL INFO Channel 00/0 : 3[5d000] -> 11[5d000] [send] via NET/IB/3/GDRDMA",
        "[1,0]<stdout>:nodeA:5:9 [3] NCCL INFO Channel 01/0 : 3[5d000] -> 11[5d000] [send] via NET/IB/3/GDRDMA",
    ])
    [r] = transport("", text=text)
    assert r.status is Status.PASS
    assert r.facts["ranks"][0]["rank"] == 3 and r.facts["ranks"][0]["gdr"] is True


def test_transport_plugin_network_warns_on_ib_profile() -> None:
    text = "h1:1:2 [0] NCCL INFO Using network AWS Libfabric\n"
    [r] = transport("", text=text)
    assert r.status is Status.WARN and "AWS Libfabric" in r.summary


def test_transport_nvls_disabled_by_env() -> None:
    text = "\n".join([
        "h1:1:1 [0] NCCL INFO NCCL_NVLS_ENABLE set by environment to 0.",
        "h1:1:2 [0] NCCL INFO Using network IB",
        "h1:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>",
    ])
    [r] = transport("", text=text)
    assert r.status is Status.PASS and r.facts["nvls"] is False


@pytest.mark.parametrize("text", ["", "nothing here\n", "\x00\x01garbage", "h:1:2 [0] NCCL INFO"])
def test_transport_garbage_never_raises(text: str) -> None:
    [r] = transport("", text=text)
    assert r.status in (Status.ERROR, Status.SKIP)


def test_detectors_are_specific(registry) -> None:  # noqa: ANN001
    from preflight.analyze import classify
    from preflight.framing import Doc

    def kinds(rel: str) -> set[str]:
        return {f.name for f in classify(Doc(fixture_text(rel)), registry)}

    assert "nccl-log" in kinds("nccl/nccl_info_2node_ib_nvls.log")
    assert "nccl-tests" not in kinds("nccl/nccl_info_2node_ib_nvls.log")
    assert "watchdog-log" not in kinds("nccl/nccl_info_2node_ib_nvls.log")
    assert "nccl-tests" in kinds("nccl-tests/all_reduce_perf_1node_8xH100_nvls.txt")
    assert "nccl-log" not in kinds("nccl-tests/all_reduce_perf_1node_8xH100_nvls.txt")
    assert not kinds("watchdog/torch25_allreduce_timeout_rank3_missing.log") & {"nccl-log", "nccl-tests"}
    # a training log with NCCL INFO lines and a watchdog timeout feeds both checks
    both = fixture_text("nccl/nccl_info_2node_ib_nvls.log") + fixture_text(
        "watchdog/torch25_allreduce_timeout_rank3_missing.log")
    names = {f.name for f in classify(Doc(both), registry)}
    assert {"nccl-log", "watchdog-log"} <= names
