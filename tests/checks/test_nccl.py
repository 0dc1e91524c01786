"""nccl.transport (NCCL_DEBUG=INFO logs) and nccl.allreduce (nccl-tests output)."""

from __future__ import annotations

import pytest

from preflight import engine
from preflight import profile as profiles
from preflight.model import Status
from tests.conftest import capture, facts_of, fixture_text, grade

H100 = "h100-sxm-8x"


def transport(rel: str, profile: str = H100, text: str | None = None) -> list:
    body = text if text is not None else fixture_text(f"nccl/{rel}")
    return grade("nccl.transport", {"nccl-log": capture("nccl-log", body)}, profile=profile, mode="analyze")


def allreduce(rel: str, profile: str = H100, text: str | None = None) -> list:
    body = text if text is not None else fixture_text(f"nccl-tests/{rel}")
    return grade("nccl.allreduce", {"nccl-tests": capture("nccl-tests", body)}, profile=profile, mode="analyze")


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


# ----------------------------------------------------------------------------- nccl-tests

def test_parse_nccl_tests_rows_and_ranks() -> None:
    res = facts_of("nccl-tests", fixture_text("nccl-tests/all_reduce_perf_1node_8xH100_nvls.txt"))
    assert len(res.rows) == 14 and res.rows[0].bytes == 1 << 20 and res.rows[-1].bytes == 8 << 30
    assert res.hosts == ["gpu-c031"] and len(res.ranks) == 8
    assert res.ranks[0]["model"] == "NVIDIA H100 80GB HBM3"
    assert res.oob_values == 0
    cells = res.busbw_cells()
    assert res.avg_busbw is not None
    assert abs(sum(cells) / len(cells) - res.avg_busbw) < 0.01


def test_allreduce_single_node_passes_against_single_node_table() -> None:
    [r] = allreduce("all_reduce_perf_1node_8xH100_nvls.txt")
    assert r.status is Status.PASS, (r.summary, r.evidence)
    assert r.facts["table"] == "single_node"
    assert r.facts["peak_busbw"] > 470
    row = r.facts["rows"][0]
    assert set(row) >= {"bytes", "time_us", "algbw", "busbw"}


def test_allreduce_tcp_fallback_signature() -> None:
    [r] = allreduce("all_reduce_perf_2node_16xH100_tcp_fallback.txt")
    assert r.status is Status.FAIL
    assert r.summary.startswith("TCP-fallback signature")
    assert r.facts["table"] == "multi_node" and r.facts["hosts"] == ["node-0412", "node-0413"]
    assert any("268435456" in e for e in r.evidence)
    assert "NET/Socket" in r.remedy


def test_allreduce_wrong_results_fail() -> None:
    [r] = allreduce("all_reduce_perf_1node_wrong_results.txt")
    assert r.status is Status.FAIL
    assert "wrong results" in r.summary and r.facts["wrong"] == 4096
    assert any(" 4096 " in e for e in r.evidence)


def test_allreduce_degraded_single_node_fails_floor() -> None:
    [r] = allreduce("all_reduce_perf_1node_degraded.txt")
    assert r.status is Status.FAIL
    assert "under the single_node floor 250" in r.summary
    assert any("peak_busbw_fail" in e for e in r.evidence)


def test_allreduce_warn_band(tmp_path) -> None:  # noqa: ANN001
    prof = tmp_path / "site.toml"
    prof.write_text('[profile]\nname = "site"\nextends = "h100-sxm-8x"\n[nccl.allreduce.single_node]\n'
                    'peak_busbw_fail = { value = 200.0, source = "site" }\n')
    [r] = allreduce("all_reduce_perf_1node_degraded.txt", profile=str(prof))
    assert r.status is Status.WARN and "below the expected 330" in r.summary


def test_allreduce_crash_is_fail_and_short_sweep_peak_not_graded() -> None:
    [r] = allreduce("all_reduce_perf_2node_crash_truncated.txt")
    assert r.status is Status.FAIL
    assert any("Test NCCL failure" in e for e in r.evidence)
    assert any("peak not graded" in e for e in r.evidence)


def test_allreduce_avg_mismatch_warns() -> None:
    text = fixture_text("nccl-tests/all_reduce_perf_1node_8xH100_nvls.txt")
    import re

    text = re.sub(r"# Avg bus bandwidth    : [\d.]+", "# Avg bus bandwidth    : 401.5", text)
    [r] = allreduce("", text=text)
    assert r.status is Status.WARN and "disagrees" in r.summary


def test_allreduce_no_rank_lines_uses_lower_floors() -> None:
    text = "\n".join(line for line in fixture_text("nccl-tests/all_reduce_perf_1node_degraded.txt").splitlines()
                     if not line.startswith("#  Rank"))
    [r] = allreduce("", text=text)
    assert r.facts["table"].startswith("unknown")
    # the lower floors of single_node (330/250) and multi_node (300/200): 229 GB/s is a WARN, not a FAIL
    assert r.status is Status.WARN and "expected 300" in r.summary


def test_allreduce_per_size_ceiling_warns() -> None:
    text = fixture_text("nccl-tests/all_reduce_perf_1node_8xH100_nvls.txt")
    lines = []
    for line in text.splitlines():
        if line.strip().startswith("16777216 "):
            line = line.replace("168.1", "912.4").replace("166.9", "905.0")
        lines.append(line)
    [r] = allreduce("", text="\n".join(lines))
    assert r.status is Status.WARN
    assert any("16 MB" in s for s in [r.summary, *r.evidence])


def test_allreduce_generic_profile_grades_only_correctness() -> None:
    [r] = allreduce("all_reduce_perf_2node_16xH100_tcp_fallback.txt", profile="generic")
    assert r.status is Status.PASS
    [r] = allreduce("all_reduce_perf_1node_wrong_results.txt", profile="generic")
    assert r.status is Status.FAIL


@pytest.mark.parametrize("text", ["", "# nThread 1 nGpus 8\n", "garbage\n" * 5, "\x00"])
def test_allreduce_garbage(text: str) -> None:
    [r] = allreduce("", text=text)
    assert r.status is Status.ERROR and r.summary


def test_profile_schema_validates(registry) -> None:  # noqa: ANN001
    for name in ("generic", H100):
        prof = profiles.load(name)
        profiles.validate(prof, registry.profile_schema())
    sizes = profiles.load(H100).get("nccl.allreduce.single_node.sizes")
    assert all({"bytes", "max_time_us", "source"} <= set(s) for s in sizes)


def test_profile_hint_from_rank_lines(registry) -> None:  # noqa: ANN001
    cap = capture("nccl-tests", fixture_text("nccl-tests/all_reduce_perf_2node_16xH100_tcp_fallback.txt"))
    from preflight.grading import FactStore

    assert engine.detect_profile_name(FactStore(registry, captures={"nccl-tests": cap})) == H100


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
