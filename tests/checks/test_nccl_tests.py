"""nccl.allreduce: nccl-tests / rccl-tests output graded against the table for what the capture
shows (topology, NVLS, GPU board), with the codes of checks/policy.toml."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from preflight import engine, policy
from preflight import profile as profiles
from preflight.checks import nccl_tests as grader
from preflight.model import Status
from preflight.parsers.nccl_tests import NcclTestRow, NcclTests, parse_nccl_tests
from tests.conftest import ROOT, capture, fixture_text, grade

H100 = "h100-sxm-8x"
H100_NAME = "NVIDIA H100 80GB HBM3"
NO_TABLE = "nccl.allreduce/no-table"
COLS = ("#                                                              out-of-place                       in-place\n"
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   "
        "busbw #wrong\n"
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  "
        "(GB/s)\n")


def allreduce(rel: str, profile: str = H100, text: str | None = None) -> list:
    body = text if text is not None else fixture_text(f"nccl-tests/{rel}")
    return grade("nccl.allreduce", {"nccl-tests": capture("nccl-tests", body)}, profile=profile, mode="analyze")


def one(text: str, profile: str = H100):  # noqa: ANN201
    [r] = allreduce("", profile=profile, text=text)
    return r


def codes(r) -> list[str]:  # noqa: ANN001
    return list(r.facts.get("codes", []))


def rank_lines(hosts: int, per_host: int, model: str = H100_NAME, bus: str = "0000:{b:02x}:00") -> str:
    out = []
    for r in range(hosts * per_host):
        out.append(f"#  Rank {r:2d} Group  0 Pid {4000 + r:6d} on {f'node{r // per_host:02d}':>10s} device "
                   f"{r % per_host:2d} [{bus.format(b=0x18 + 0x11 * (r % per_host))}] {model}")
    return "\n".join(out) + "\n"


def fmt_time(us: float) -> str:
    return f"{us:7.0f}" if us > 10000 else f"{us:7.1f}" if us > 100 else f"{us:7.2f}"


def row(size: int, us: float, n: int, ip_us: float | None = None, wrong: str = "0") -> str:
    ip = ip_us if ip_us is not None else us
    f = 2 * (n - 1) / n
    cells = ""
    for t in (us, ip):
        alg = size / t / 1e3
        cells += f"  {fmt_time(t)}  {alg:6.2f}  {alg * f:6.2f}  {wrong:>6s}"
    return f"{size:12d}  {size // 4:12d}  {'float':>8s}  {'sum':>6s}  {-1:6d}{cells}"


def curve(n: int, peak: float, lat: float = 30.0, lo: int = 8, hi: int = 8 << 30) -> list[tuple[int, float]]:
    """(size, time) of a healthy all-reduce reaching `peak` GB/s busbw from `lat` us."""
    f = 2 * (n - 1) / n
    out, size = [], lo
    while size <= hi:
        out.append((size, lat + size / (peak / f * 1e3)))
        size *= 2
    return out


def table(n_hosts: int, per_host: int, peak: float, lat: float = 30.0, model: str = H100_NAME, lo: int = 8,
          hi: int = 8 << 30, head: str = "", times: dict[int, float] | None = None, footer: bool = True) -> str:
    n = n_hosts * per_host
    rows = curve(n, peak, lat, lo, hi)
    body = "\n".join(row(s, (times or {}).get(s, t), n) for s, t in rows)
    text = (head + f"# nThread 1 nGpus 1 minBytes {lo} maxBytes {hi} step: 2(factor) warmup iters: 5 iters: 20 "
            "agg iters: 1 validation: 1 graph: 0\n#\n# Using devices\n" + rank_lines(n_hosts, per_host, model) +
            "#\n" + COLS + body + "\n")
    if footer:
        res = parse_nccl_tests(text)
        cells = res.busbw_cells()
        text += f"# Out of bounds values : 0 OK\n# Avg bus bandwidth    : {sum(cells) / len(cells):g}\n#\n"
    return text


# ----------------------------------------------------------------------------- fixtures

def test_allreduce_single_node_passes_against_single_node_table() -> None:
    [r] = allreduce("all_reduce_perf_1node_8xH100_nvls.txt")
    assert r.status is Status.PASS, (r.summary, r.evidence)
    assert r.facts["table"] == "single_node" and r.facts["collective"] == "all_reduce"
    assert r.facts["peak_busbw"] > 470 and r.facts["ranks"] == 8 and r.facts["gpu_models"] == [H100_NAME]
    assert r.summary.startswith("all-reduce peak busbw") and "(8 ranks on 1 host(s), single_node)" in r.summary
    row0 = r.facts["rows"][0]
    assert set(row0) >= {"bytes", "time_us", "algbw", "busbw", "ip_busbw", "wrong"}


def test_allreduce_tcp_fallback_signature() -> None:
    [r] = allreduce("all_reduce_perf_2node_16xH100_tcp_fallback.txt")
    assert r.status is Status.FAIL and "nccl.allreduce/tcp-fallback" in codes(r)
    assert r.summary.startswith("TCP-fallback signature: 3 message size(s) >= 256 MB under 30 GB/s")
    assert r.facts["table"] == "multi_node" and r.facts["hosts"] == ["node-0412", "node-0413"]
    assert any("268435456" in e for e in r.evidence)
    assert "NET/Socket" in r.remedy


def test_allreduce_wrong_results_fail() -> None:
    [r] = allreduce("all_reduce_perf_1node_wrong_results.txt")
    assert r.status is Status.FAIL and codes(r)[0] == "nccl.allreduce/wrong-results"
    assert "wrong results (4096 wrong elements)" in r.summary and r.facts["wrong"] == 4096
    assert any(" 4096 " in e for e in r.evidence)


def test_allreduce_degraded_single_node_fails_floor() -> None:
    [r] = allreduce("all_reduce_perf_1node_degraded.txt")
    assert r.status is Status.FAIL and codes(r) == ["nccl.allreduce/peak-below-floor", "nccl.allreduce/size-slow"]
    assert "under the single_node floor 250" in r.summary
    assert any("peak_busbw_fail = 250" in e and "#212" in e for e in r.evidence)


def test_allreduce_warn_band(tmp_path: Path) -> None:
    prof = tmp_path / "site.toml"
    prof.write_text('[profile]\nname = "site"\nextends = "h100-sxm-8x"\n[nccl.allreduce.single_node]\n'
                    'peak_busbw_fail = { value = 200.0, source = "site" }\n')
    [r] = allreduce("all_reduce_perf_1node_degraded.txt", profile=str(prof))
    assert r.status is Status.WARN and "below the expected 330" in r.summary
    assert codes(r) == ["nccl.allreduce/peak-below-expected", "nccl.allreduce/size-slow"]


def test_allreduce_crash_is_fail_and_short_sweep_peak_not_graded() -> None:
    [r] = allreduce("all_reduce_perf_2node_crash_truncated.txt")
    assert r.status is Status.FAIL and "nccl.allreduce/test-failure" in codes(r)
    assert any("Test NCCL failure" in e for e in r.evidence)
    assert any("peak not graded: the sweep stops at" in e for e in r.evidence)


def test_h200_erratic_121_gbs_fails_against_the_board_table() -> None:
    [r] = allreduce("all_reduce_perf_2node_16xH200_erratic_121GBs.txt", profile="generic")
    assert r.status is Status.FAIL
    assert codes(r) == ["nccl.allreduce/peak-below-floor", "nccl.allreduce/latency-spike"]
    assert "120.79 GB/s is under the multi_node floor 245" in r.summary
    assert any(e.startswith("multi_node_peak_busbw_fail = 245.0 (board HGX/DGX H100 or H200") for e in r.evidence)
    assert r.facts["gpu_models"] == ["NVIDIA H200"] and r.facts["nccl_version"] == "2.27.3"
    assert any(e.startswith("256 MB: ") for e in r.evidence)


def test_h100_263_gbs_with_rank_lines_without_group_warns() -> None:
    [r] = allreduce("all_reduce_perf_1node_8xH100_263GBs_v2.13_rank_lines.txt")
    assert r.status is Status.WARN and codes(r) == ["nccl.allreduce/peak-below-expected"]
    assert "263.66 GB/s is below the expected 330 (single_node)" in r.summary


def test_h100_263_gbs_with_nvls_in_use_fails_the_nvls_floor() -> None:
    text = fixture_text("nccl-tests/all_reduce_perf_1node_8xH100_263GBs_v2.13_rank_lines.txt")
    text = text.replace("NCCL version 2.18.3+cuda12.2", "gpu-b117:118243:118270 [0] NCCL INFO NVLS multicast "
                        "support is available on dev 0")
    r = one(text)
    assert r.status is Status.FAIL and r.facts["table"] == "single_node (NVLS)"
    assert "under the single_node (NVLS) floor 320" in r.summary
    assert any("nvls_peak_busbw_fail = 320" in e for e in r.evidence)


def test_all_gather_is_graded_on_the_all_reduce_tables() -> None:
    [r] = allreduce("all_gather_perf_1node_8xH100_2.17_named.txt")
    assert r.status is Status.PASS and codes(r) == [] and r.facts["collective"] == "all_gather"
    assert r.summary == "all_gather peak busbw 362.46 GB/s, avg 357.849 GB/s (8 ranks on 1 host(s), single_node)"
    text = fixture_text("nccl-tests/all_gather_perf_1node_8xH100_2.17_named.txt")
    r = one(text.replace("# Out of bounds values : 0 OK", "# Out of bounds values : 2 FAILED"))
    assert r.status is Status.FAIL and codes(r) == ["nccl.allreduce/out-of-bounds"]
    slow = text.replace("362.46", "300.12").replace("358.45", "297.01").replace("359.27", "296.40").replace(
        "358.33", "295.10").replace("358.87", "296.33").replace("354.79", "294.91").replace("355.72", "295.11").replace(
        "354.90", "294.90").replace("357.849", "296.235")
    r = one(slow)
    assert r.status is Status.WARN and codes(r) == ["nccl.allreduce/peak-below-expected"]
    assert r.summary == "peak busbw 300.12 GB/s is below the expected 330 (single_node)"


def test_all_gather_is_never_graded_on_the_nvls_figures() -> None:
    text = fixture_text("nccl-tests/all_gather_perf_1node_8xH100_2.17_named.txt")
    r = one("gpu-c031:91844:91850 [0] NCCL INFO NVLS multicast support is available on dev 0\n" + text)
    assert r.status is Status.PASS and r.facts["table"] == "single_node"
    r = one("gpu-c031:91844:91850 [0] NCCL INFO NVLS multicast support is available on dev 0\n" +
            text.replace("all_gather_perf", "all_reduce_perf").replace("33554432 ", "268435456 ").replace(
                "67108864 ", "536870912 ").replace("134217728 ", "1073741824 ").replace(" 268435456 ", " 2147483648 "))
    assert r.facts["table"] == "single_node (NVLS)"


def test_reduce_scatter_has_no_per_size_ceilings() -> None:
    text = fixture_text("nccl-tests/all_gather_perf_1node_8xH100_2.17_named.txt").replace(
        "all_gather_perf", "reduce_scatter_perf").replace("    none  ", "     sum  ")
    exp = grader.expectation(parse_nccl_tests(text), profiles.load(H100), grader.topology(parse_nccl_tests(text)),
                             "reduce_scatter")
    assert exp.sizes == [] and exp.name == "single_node" and exp.warn == 330.0
    exp = grader.expectation(parse_nccl_tests(text), profiles.load(H100), grader.topology(parse_nccl_tests(text)))
    assert [e["bytes"] for e in exp.sizes] == [1048576, 16777216, 268435456, 1073741824]


@pytest.mark.parametrize("binary", ["broadcast_perf", "alltoall_perf", "sendrecv_perf", "scatter_perf",
                                    "hypercube_perf"])
def test_collectives_without_a_table_are_noted_not_graded(binary: str) -> None:
    text = fixture_text("nccl-tests/all_gather_perf_1node_8xH100_2.17_named.txt").replace("all_gather_perf", binary)
    r = one(text)
    assert r.status is Status.PASS and codes(r) == [] and r.facts["collective"] == binary[:-5]
    note = f"bandwidth not graded: {binary[:-5]} has no busbw table (the tables are for all_reduce, all_gather, " \
           "reduce_scatter)"
    assert note in r.evidence and r.facts["table"] == "none"
    assert r.summary.startswith(f"{binary[:-5]} peak busbw 362.46 GB/s")
    r = one(text.replace("# Out of bounds values : 0 OK", "# Out of bounds values : 2 FAILED"))
    assert r.status is Status.FAIL and codes(r) == ["nccl.allreduce/out-of-bounds"]


def test_unnamed_table_that_fits_all_gather_and_alltoall_is_noted() -> None:
    text = fixture_text("nccl-tests/all_gather_perf_1node_8xH100_2.17_named.txt")
    text = text.replace("# Collective test starting: all_gather_perf\n", "").replace(
        "# Collective test concluded: all_gather_perf\n", "")
    r = one(text)
    assert r.status is Status.PASS and codes(r) == [] and r.facts["collective"] == ""
    assert r.summary.startswith("all_gather or alltoall or alltoallv peak busbw 362.46 GB/s")
    assert ("bandwidth not graded: all_gather or alltoall or alltoallv has no busbw table (the tables are for "
            "all_reduce, all_gather, reduce_scatter)") in r.evidence
    # a wrapper's command line naming the collective decides
    r = one("kubectl exec -it t-0 -- /scripts/run_nccl_tests.sh -t all_gather -b 1G -e 8G\n" + text)
    assert r.status is Status.PASS and r.facts["collective"] == "all_gather" and r.facts["table"] == "single_node"


def test_unnamed_table_whose_columns_fit_no_collective_is_not_recognised() -> None:
    text = fixture_text("nccl-tests/all_gather_perf_1node_8xH100_2.17_named.txt")
    text = text.replace("# Collective test starting: all_gather_perf\n", "").replace(
        "# Collective test concluded: all_gather_perf\n", "")
    r = one(text.replace("    none      -1", "     sum       3"))
    assert r.status is Status.SKIP and codes(r) == ["nccl.allreduce/not-recognised"]
    assert r.summary.startswith("not recognised: a nccl-tests table was expected")
    assert "busbw/algbw = 0.875" in r.evidence and "ranks listed: 8" in r.evidence


def test_rccl_mi300x_is_graded_on_its_board() -> None:
    [r] = allreduce("rccl_all_reduce_perf_1node_8xMI300X_inplace_only.txt", profile="generic")
    assert r.status is Status.PASS and r.facts["table"] == "single_node" and r.facts["peak_busbw"] == 312.6
    text = fixture_text("nccl-tests/rccl_all_reduce_perf_1node_8xMI300X_inplace_only.txt")
    slow = re.sub(r"(\d+\.\d\d)  (\d{3}\.\d\d)(?=\s+0$)", lambda m: f"{float(m.group(1)) * 0.93:6.2f}  {float(m.group(2)) * 0.93:6.2f}",
                  text, flags=re.M)
    r = one(slow.replace("# Avg bus bandwidth", "# Avg bus-bandwidth"), "generic")
    assert r.status is Status.WARN and "below the expected 300 (single_node)" in r.summary
    assert any("board AMD Instinct MI300X platform" in e and "7 x 48 = 336" in e for e in r.evidence)


def test_a100_board_single_node() -> None:
    [r] = allreduce("all_reduce_perf_1node_8xA100_v2.9_error_column.txt", profile="generic")
    assert r.status is Status.PASS and r.facts["table"] == "single_node"
    text = fixture_text("nccl-tests/all_reduce_perf_1node_8xA100_v2.9_error_column.txt")
    slow = re.sub(r"(\d+\.\d\d)  (\d+\.\d\d)  (\de[-+]\d\d)", lambda m: f"{float(m.group(1)):.2f}  "
                  f"{float(m.group(2)) * 0.6:6.2f}  {m.group(3)}", text)
    r = one(slow.replace("# Avg bus bandwidth", "# Avg bus-bandwidth"), "generic")
    assert r.status is Status.FAIL and "under the single_node floor 155" in r.summary


def test_a100_several_nodes_have_no_table() -> None:
    r = one(table(2, 8, 95.0, model="NVIDIA A100-SXM4-80GB"), "generic")
    assert r.status is Status.SKIP and codes(r) == [NO_TABLE]
    assert r.summary == (f"all-reduce peak busbw {r.facts['peak_busbw']:g} GB/s, "
                         "no expected busbw for multi-node runs of HGX/DGX A100 SXM4, 8 GPUs on NVSwitch (single node "
                         "only): peak not graded (board HGX/DGX A100 SXM4, 8 GPUs on NVSwitch (single node only) has no "
                         "multi_node figure)")


def test_a100_several_nodes_at_their_own_single_node_figure_pass() -> None:
    """Across nodes the board's single-node (NVLink) figure is what the GPUs reach among themselves:
    a multi-node run at it is not held back by the network."""
    r = one(table(2, 8, 215.0, model="NVIDIA A100-SXM4-80GB"), "generic")
    assert r.status is Status.PASS and r.facts["peak_busbw"] >= 210
    assert (f"no expected busbw for what the capture shows, but peak busbw {r.facts['peak_busbw']:g} GB/s meets the "
            "highest applicable figure preflight holds (210, board HGX/DGX A100 SXM4, 8 GPUs on NVSwitch (single node only) "
            "single_node_peak_busbw_warn)") in r.evidence
    r = one(table(2, 8, 205.0, model="NVIDIA A100-SXM4-80GB"), "generic")
    assert r.facts["peak_busbw"] < 210 and r.status is Status.SKIP


def test_1x_and_v2_9_layouts_grade() -> None:
    [r] = allreduce("all_reduce_perf_1.x_4xP100_ms_res.txt", profile="generic")
    assert r.status is Status.SKIP and codes(r) == [NO_TABLE] and r.facts["ranks"] == 4 and r.facts["rows"][0]["time_us"] == pytest.approx(121)


# ----------------------------------------------------------------------------- thresholds by topology

@pytest.mark.parametrize(("peak", "status", "code"), [
    (469.2, Status.PASS, None), (368.0, Status.PASS, None), (367.9, Status.WARN, "peak-below-expected"),
    (245.0, Status.WARN, "peak-below-expected"), (244.9, Status.FAIL, "peak-below-floor"),
])
def test_multi_node_floors(peak: float, status: Status, code: str | None) -> None:
    text = table(2, 8, peak, lo=1 << 30, times={8 << 30: (8 << 30) / (peak / 1.875 * 1e3)})
    r = one(text)
    assert r.status is status, (r.summary, r.evidence)
    assert codes(r) == ([f"nccl.allreduce/{code}"] if code else [])
    assert r.facts["table"] == "multi_node"


@pytest.mark.parametrize(("peak", "status"), [(330.0, Status.PASS), (329.9, Status.WARN), (250.0, Status.WARN),
                                              (249.9, Status.FAIL)])
def test_single_node_floors(peak: float, status: Status) -> None:
    text = table(1, 8, peak, lo=1 << 30, times={8 << 30: (8 << 30) / (peak / 1.75 * 1e3)})
    assert one(text).status is status


@pytest.mark.parametrize(("env", "table_name", "status"), [
    ("", "single_node", Status.PASS),
    ("gpu1:1:2 [0] NCCL INFO NVLS multicast support is available on dev 0\n", "single_node (NVLS)", Status.WARN),
    ("gpu1:1:2 [0] NCCL INFO NCCL_ALGO set by environment to NVLS\n", "single_node (NVLS)", Status.WARN),
    ("export NCCL_ALGO=Ring\ngpu1:1:2 [0] NCCL INFO NVLS multicast support is available on dev 0\n", "single_node",
     Status.PASS),
    ("export NCCL_ALGO=^NVLS\ngpu1:1:2 [0] NCCL INFO NVLS multicast support is available on dev 0\n", "single_node",
     Status.PASS),
    ("export NCCL_ALGO=^Tree\ngpu1:1:2 [0] NCCL INFO NVLS multicast support is available on dev 0\n",
     "single_node (NVLS)", Status.WARN),
])
def test_nvls_in_use_raises_the_single_node_expectation(env: str, table_name: str, status: Status) -> None:
    r = one(table(1, 8, 400.0, lo=1 << 30, head=env))
    assert r.facts["table"] == table_name and r.status is status
    if status is Status.WARN:
        assert "below the expected 430" in r.summary


def test_nvls_does_not_change_the_multi_node_table() -> None:
    env = "gpu1:1:2 [0] NCCL INFO NVLS multicast support is available on dev 0\n"
    r = one(table(2, 8, 400.0, lo=1 << 30, head=env))
    assert r.status is Status.PASS and r.facts["table"] == "multi_node"


def test_fewer_gpus_per_host_than_the_table_is_for() -> None:
    r = one(table(2, 4, 150.0, lo=1 << 30))
    assert r.status is Status.PASS
    assert "peak not graded: 4 GPU(s) per host, the table is for 8" in r.evidence


def test_one_process_driving_eight_gpus_is_one_node() -> None:
    text = table(1, 8, 300.0, lo=1 << 30).replace("nGpus 1", "nGpus 8")
    text = "\n".join(ln for ln in text.splitlines() if "Rank" not in ln)
    r = one(text)
    assert r.facts["table"] == "single_node" and r.status is Status.WARN


def test_allreduce_no_rank_lines_uses_lower_floors() -> None:
    text = "\n".join(line for line in fixture_text("nccl-tests/all_reduce_perf_1node_degraded.txt").splitlines()
                     if not line.startswith("#  Rank"))
    [r] = allreduce("", text=text)
    assert r.facts["table"].startswith("unknown")
    # the lower floors of single_node (330/250) and multi_node (368/245): 229 GB/s is under 245
    assert r.status is Status.FAIL and "floor 245" in r.summary
    assert codes(r) == ["nccl.allreduce/peak-below-floor"]
    assert any(e.startswith("nccl.allreduce.multi_node.peak_busbw_fail = 245") for e in r.evidence)


def test_unknown_topology_on_a_board_table_is_not_graded() -> None:
    text = table(2, 8, 100.0, lo=1 << 30, model="NVIDIA H200")
    lines = text.splitlines()
    partial = "\n".join(ln for ln in lines if "Rank  3 " not in ln)
    r = one(partial, "generic")
    assert r.status is Status.PASS and r.facts["table"] == "unknown topology"
    assert any("does not show how the ranks sit on hosts" in e for e in r.evidence)


def test_a_profile_for_other_gpus_uses_the_board_table() -> None:
    r = one(table(2, 8, 300.0, lo=1 << 30, model="NVIDIA H200"), H100)
    assert r.status is Status.WARN and any("board HGX/DGX H100 or H200" in e for e in r.evidence)
    r = one(table(2, 8, 300.0, lo=1 << 30, model="NVIDIA B200"), H100)
    assert r.status is Status.SKIP and r.facts["table"] == "none"
    assert r.summary == (f"all-reduce peak busbw {r.facts['peak_busbw']:g} GB/s, "
                         "no expected busbw for NVIDIA B200 in profile h100-sxm-8x: bandwidth not graded (correctness "
                         "only)")


def test_allreduce_generic_profile_grades_only_correctness() -> None:
    text = fixture_text("nccl-tests/all_reduce_perf_2node_16xH100_tcp_fallback.txt")
    [r] = allreduce("", text=text.replace(H100_NAME, "NVIDIA B200"), profile="generic")
    assert r.status is Status.SKIP and codes(r) == [NO_TABLE]
    assert "no expected busbw for NVIDIA B200" in r.summary
    [r] = allreduce("all_reduce_perf_1node_wrong_results.txt", profile="generic")
    assert r.status is Status.FAIL


def test_base_latency_of_a_tcp_fabric_leaves_the_ndr_table_out() -> None:
    r = one(table(2, 8, 338.0, lat=123.0))
    assert r.status is Status.PASS
    assert any("the smallest all-reduce takes 123" in e and "a TCP-based fabric" in e for e in r.evidence)
    r = one(table(2, 8, 338.0, lat=99.0))
    assert r.status is Status.WARN
    r = one(table(2, 8, 338.0, lat=101.0, lo=8192))  # no latency-bound row: graded
    assert r.status is Status.WARN


def test_shared_pci_bus_is_named_as_a_vm_topology() -> None:
    text = table(2, 8, 360.0, lo=1 << 30)
    vm = re.sub(r"\[0000:([0-9a-f]{2}):00\]", lambda m: f"[0000:04:{int(m.group(1), 16) % 16:02x}]", text)
    r = one(vm)
    assert r.status is Status.WARN
    assert any(e.startswith("GPUs share one PCIe bus on node00, node01") for e in r.evidence)
    assert not any("PCIe bus" in e for e in one(text).evidence)


def test_a_single_size_of_1_gb_is_enough() -> None:
    r = one(table(2, 8, 400.0, lo=1 << 30, hi=1 << 30))
    assert r.status is Status.PASS and "nccl.allreduce/single-size" not in codes(r)


def test_short_sweep_and_single_size() -> None:
    r = one(table(2, 8, 100.0, hi=256 << 20))
    assert r.status is Status.PASS and "peak not graded: the sweep stops at 256 MB (< 1 GB)" in r.evidence
    r = one(table(2, 8, 100.0, lo=25 << 20, hi=25 << 20))
    assert r.status is Status.WARN and codes(r) == ["nccl.allreduce/single-size"]
    assert r.summary.startswith("a single message size (25 MB)")


# ----------------------------------------------------------------------------- latency spikes

def test_mid_size_latency_spikes_warn() -> None:
    times = {32768: 1112.2, 65536: 1651.7, 131072: 783.8}
    r = one(table(2, 8, 470.0, times=times))
    assert r.status is Status.WARN and codes(r) == ["nccl.allreduce/latency-spike"]
    assert "latency spikes at 3 message size(s) (32 KB, 64 KB, 128 KB)" in r.summary
    assert any(e.startswith("32 KB: 1112.2 us, a larger message took") for e in r.evidence)


@pytest.mark.parametrize(("backend", "spike"), [("gloo", False), ("nccl", True), ("", True)])
def test_the_sweeps_gloo_backend_is_not_graded_for_spikes(backend: str, spike: bool) -> None:
    """The sweep's rows come as an NcclTests built by hand; on gloo (CPUs and TCP) a slow row
    says nothing about a GPU fabric."""
    from preflight.grading import FactStore, grade_check
    from preflight.registry import Options
    from tests.conftest import reg

    res = parse_nccl_tests(table(2, 8, 470.0, times={32768: 1112.2, 65536: 1651.7, 131072: 783.8}))
    res.backend = backend
    r = reg.load()
    [out] = grade_check(r.checks["nccl.allreduce"], "cluster", FactStore(r, facts={"nccl-tests": res}),
                        profiles.load(H100), Options(mode="run"), None)
    assert ("nccl.allreduce/latency-spike" in codes(out)) is spike, (out.summary, out.evidence)


def test_a_step_up_that_never_recovers_is_a_spike() -> None:
    base = dict(curve(16, 470.0))
    times = {s: t + (2000.0 if s >= 65536 else 0.0) for s, t in base.items()}
    r = one(table(2, 8, 470.0, times=times))
    assert "nccl.allreduce/latency-spike" in codes(r)
    assert "(64 KB)" in r.summary and any("after" in e and "at 32 KB" in e for e in r.evidence)


@pytest.mark.parametrize("times", [
    {8: 68.0},  # a slow first call
    {256: 94.4},  # one slow cell under the minimum excess
    {1 << 20: 130.0},  # over 2x a larger size's time but under 100 us more
])
def test_jitter_is_not_a_spike(times: dict[int, float]) -> None:
    r = one(table(2, 8, 470.0, times=times))
    assert r.status is Status.PASS, (r.summary, r.evidence)


def test_spikes_need_three_rows() -> None:
    r = one(table(2, 8, 470.0, lo=1 << 30, hi=2 << 30, times={1 << 30: 20000.0}))
    assert "nccl.allreduce/latency-spike" not in codes(r)


# ----------------------------------------------------------------------------- how the run ended

def test_aborted_after_nccl_warn() -> None:
    text = table(2, 8, 470.0, hi=1 << 20, footer=False)
    text += ("     2097152        524288     float     sum      -1\n"
             "node01:4012:4090 [4] NCCL WARN NET/IB : Got completion from peer 10.0.0.7<51214> with error 12\n")
    r = one(text)
    assert r.status is Status.FAIL and codes(r) == ["nccl.allreduce/aborted"]
    assert r.summary == "the run stopped after an NCCL WARN during the 2 MB all-reduce"
    assert any("Got completion" in e for e in r.evidence)


def test_aborted_without_a_size() -> None:
    text = table(2, 8, 470.0, hi=1 << 20, footer=False) + "node01:4012:4090 [4] NCCL WARN Cuda failure 'unknown'\n"
    r = one(text)
    assert r.summary == "the run stopped after an NCCL WARN" and r.status is Status.FAIL


def test_a_warn_in_a_finished_run_is_not_an_abort() -> None:
    text = table(2, 8, 470.0, hi=1 << 20).replace("# Out of bounds", "node01:4012:4090 [4] NCCL WARN NET/IB : async "
                                                   "event: port error\n# Out of bounds")
    assert "nccl.allreduce/aborted" not in codes(one(text))


def test_output_ending_inside_a_row() -> None:
    text = table(2, 8, 470.0, hi=1 << 20, footer=False) + "     2097152        524288     float     sum      -1\n"
    r = one(text)
    assert r.status is Status.WARN and codes(r) == ["nccl.allreduce/stopped-mid-row"]
    assert "ends inside the 2 MB row" in r.summary


def test_truncated_table_is_a_note() -> None:
    r = one(table(2, 8, 470.0, footer=False))
    assert r.status is Status.PASS and "the table stops before its summary" in r.evidence


def test_not_validated_is_a_warn() -> None:
    """`#wrong` N/A: the run did not check its results, so it cannot show the data was right."""
    text = table(2, 8, 470.0).replace("validation: 1", "validation: 0")
    text = re.sub(r"      0(?=\s|$)", "    N/A", text)
    r = one(text)
    assert r.status is Status.WARN and codes(r) == ["nccl.allreduce/not-validated"]
    assert r.summary.startswith("results not validated (-c 0")
    # the N/A cells alone say it (a table without its parameter line)
    r = one(re.sub(r"(?m)^# nThread.*\n", "", text))
    assert codes(r) == ["nccl.allreduce/not-validated"]


def test_min_bw_check_failed() -> None:
    text = re.sub(r"(# Avg bus bandwidth\s*: \S+)", r"\1 FAILED", table(2, 8, 470.0))
    r = one(text)
    assert r.status is Status.FAIL and codes(r) == ["nccl.allreduce/min-bw-check-failed"]


def test_out_of_bounds_fail() -> None:
    text = table(2, 8, 470.0).replace("# Out of bounds values : 0 OK", "# Out of bounds values : 3 FAILED")
    r = one(text)
    assert r.status is Status.FAIL and codes(r) == ["nccl.allreduce/out-of-bounds"]
    assert r.summary == "3 out-of-bounds values"


def test_allreduce_avg_mismatch_warns() -> None:
    text = fixture_text("nccl-tests/all_reduce_perf_1node_8xH100_nvls.txt")
    text = re.sub(r"# Avg bus bandwidth    : [\d.]+", "# Avg bus bandwidth    : 401.5", text)
    r = one(text)
    assert r.status is Status.WARN and "disagrees" in r.summary and codes(r) == ["nccl.allreduce/avg-mismatch"]
    exact = re.sub(r"# Avg bus bandwidth    : [\d.]+", "# Avg bus bandwidth    : 401.5", text)
    assert one(exact).status is Status.WARN


def test_avg_within_rounding_passes() -> None:
    text = table(1, 8, 470.0, lo=1 << 30)
    mean = float(re.search(r"Avg bus bandwidth\s*: (\S+)", text).group(1))  # type: ignore[union-attr]
    ok = re.sub(r"(Avg bus bandwidth\s*: )\S+", rf"\g<1>{mean + 0.01 + 0.0009 * mean:.4f}", text)
    assert one(ok).status is Status.PASS
    off = re.sub(r"(Avg bus bandwidth\s*: )\S+", rf"\g<1>{mean + 0.02 + 0.0011 * mean:.4f}", text)
    assert one(off).status is Status.WARN


def test_allreduce_per_size_ceiling_warns() -> None:
    text = fixture_text("nccl-tests/all_reduce_perf_1node_8xH100_nvls.txt")
    lines = []
    for line in text.splitlines():
        if line.strip().startswith("16777216 "):
            line = line.replace("168.1", "912.4").replace("166.9", "905.0")
        lines.append(line)
    r = one("\n".join(lines))
    assert r.status is Status.WARN and codes(r) == ["nccl.allreduce/size-slow", "nccl.allreduce/latency-spike"]
    assert "16 MB all-reduce took 905 us (expected <= 500)" in r.summary
    assert any(e.startswith("single_node.sizes: 8xH100 SXM cookbook") for e in r.evidence)


def test_ceiling_not_applied_to_multi_node_or_other_sizes() -> None:
    assert "nccl.allreduce/size-slow" not in codes(one(table(2, 8, 400.0, lat=600.0)))
    assert one(table(1, 8, 470.0, lo=1 << 30)).status is Status.PASS


# ----------------------------------------------------------------------------- no rows, failures

@pytest.mark.parametrize("text", ["", "# nThread 1 nGpus 8\n", "garbage\n" * 5, "\x00"])
def test_allreduce_garbage(text: str) -> None:
    r = one(text)
    assert r.status is Status.SKIP and r.summary and codes(r) == ["nccl.allreduce/no-rows"]


def test_failure_before_any_row() -> None:
    text = ("# nThread 1 nGpus 8 minBytes 8 maxBytes 128 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
            "validation: 1 graph: 0\n"
            "gpu1: Test CUDA failure common.cu:892 'out of memory'\n .. gpu1 pid 77: Test failure common.cu:1041\n")
    r = one(text)
    assert r.status is Status.FAIL and codes(r) == ["nccl.allreduce/test-failure"]
    assert r.summary == "nccl-tests failed before its first result row" and "out of memory" in r.evidence[0]
    warn = "# Using devices\ngpu1:1:2 [0] NCCL WARN Cuda failure 'out of memory'\n"
    assert one(warn).status is Status.FAIL


def test_rows_of_an_unknown_layout_are_not_recognised() -> None:
    text = COLS + "  1073741824     268435456     float     sum      -1   4484.9  239.41  448.90      0  x  y\n"
    r = one(text)
    assert r.status is Status.SKIP and codes(r) == ["nccl.allreduce/not-recognised"]
    assert "1 row(s) have another layout" in r.summary


def test_no_output() -> None:
    from preflight import registry
    from preflight.grading import FactStore, grade_check
    from preflight.registry import Options

    reg = registry.load()
    [r] = grade_check(reg.checks["nccl.allreduce"], "n1", FactStore(reg, facts={}), profiles.load(H100),
                      Options(mode="analyze"), None)
    assert r.status in (Status.SKIP, Status.ERROR)


def test_grader_direct_without_facts() -> None:
    class Ctx:
        profile = profiles.load(H100)

        def facts(self, probe: str) -> None:
            return None

        def finding(self, code: str, summary: str, **kw: object) -> tuple[str, str]:
            return code, summary

    assert grader.grade_allreduce(Ctx()) == ("nccl.allreduce/no-output", "no nccl-tests output to grade")  # type: ignore


def test_rows_without_bandwidth_cells() -> None:
    res = NcclTests(rows=[NcclTestRow(bytes=b, count=b // 4, dtype="float", time_us=None, algbw=None, busbw=None,
                                      wrong=0, line=f"{b} float") for b in (8, 16)], avg_busbw=0.0)
    from preflight import registry
    from preflight.grading import FactStore, grade_check
    from preflight.registry import Options

    reg = registry.load()
    [r] = grade_check(reg.checks["nccl.allreduce"], "n1", FactStore(reg, facts={"nccl-tests": res}),
                      profiles.load(H100), Options(mode="analyze"), None)
    assert r.status is Status.PASS and r.summary.startswith("all-reduce table of 2 row(s) without bandwidth cells")


# ----------------------------------------------------------------------------- one NIC's worth

def test_plateau_at_one_nic_while_several_named() -> None:
    text = ("[root@n1 ~]# mpirun -x NCCL_IB_HCA=mlx5_0,mlx5_1,mlx5_4,mlx5_5 -np 2 ./all_reduce_perf -b 8M -e 32M\n"
            + table(2, 1, 41.5, lo=8 << 20, hi=32 << 20, footer=False))
    r = one(text)
    assert r.status is Status.WARN and codes(r) == ["nccl.allreduce/one-nic-plateau"]
    assert "about one 400 Gb/s NIC's worth, while NCCL_IB_HCA names 4 HCAs (mlx5_0, mlx5_1, mlx5_4, mlx5_5); the " \
           "table stops before its summary" in r.summary
    assert any(e.startswith("ib.rate = 400 Gb/s (NDR") for e in r.evidence)
    g = one(text, "generic")
    assert g.status is Status.WARN and any(e.startswith("nccl.allreduce.nic_rate_gbps = 400") for e in g.evidence)


@pytest.mark.parametrize(("peak", "hcas", "hosts", "status"), [
    (41.5, "mlx5_0", 2, Status.PASS),  # one HCA named
    (41.5, "mlx5_0,mlx5_1", 1, Status.PASS),  # one host
    (64.0, "mlx5_0,mlx5_1", 2, Status.PASS),  # more than one NIC's worth (1.2 x 50 = 60)
    (59.0, "mlx5_0,mlx5_1", 2, Status.WARN),
])
def test_plateau_boundaries(peak: float, hcas: str, hosts: int, status: Status) -> None:
    per = 2 // hosts
    text = (f"[root@n1 ~]# mpirun -x NCCL_IB_HCA={hcas} -np 2 ./all_reduce_perf\n"
            + table(hosts, per, peak, lo=8 << 20, hi=64 << 20))
    assert one(text).status is status


def test_a_rising_curve_is_not_a_plateau() -> None:
    times = {32 << 20: (32 << 20) / (20.0 * 1e3), 64 << 20: (64 << 20) / (40.0 * 1e3)}
    text = "[root@n1 ~]# mpirun -x NCCL_IB_HCA=mlx5_0,mlx5_1 ./all_reduce_perf\n" + table(2, 1, 40.0, lo=8 << 20,
                                                                                          hi=64 << 20, times=times)
    assert one(text).status is Status.PASS


# ----------------------------------------------------------------------------- helpers, tables, policy

@pytest.mark.parametrize(("name", "needle", "fits"), [
    ("NVIDIA H200", "H200", True), ("NVIDIA GH200 480GB", "H200", False), ("NVIDIA H200 NVL", "H200", False),
    ("NVIDIA H100 PCIe", "H100", False), ("NVIDIA H100 80GB HBM3", "h100 80gb hbm3", True),
    ("NVIDIA A100-SXM4-80GB", "A100-SXM4", True), ("H200", "H200", True), ("NVIDIA H20", "H200", False),
])
def test_board_name_fits(name: str, needle: str, fits: bool) -> None:
    assert grader._fits(name, needle) is fits


def test_board_for() -> None:
    prof = profiles.load("generic")
    assert grader.board_for(prof, ["NVIDIA H200"])["gpus_per_node"] == 8  # type: ignore[index]
    assert grader.board_for(prof, ["NVIDIA H200", "NVIDIA B200"]) is None
    assert grader.board_for(prof, []) is None
    assert "A100" in grader.board_for(prof, ["NVIDIA A100-SXM4-40GB"])["name"]  # type: ignore[index]


def test_the_h100_board_repeats_the_h100_profile() -> None:
    board = grader.board_for(profiles.load("generic"), [H100_NAME])
    prof = profiles.load(H100)
    assert board is not None
    for table_name in ("single_node", "multi_node"):
        for kind in ("warn", "fail"):
            assert board[f"{table_name}_peak_busbw_{kind}"] == prof.get(f"nccl.allreduce.{table_name}.peak_busbw_{kind}")
    for kind in ("warn", "fail"):
        assert board[f"single_node_nvls_peak_busbw_{kind}"] == prof.get(f"nccl.allreduce.single_node.nvls_peak_busbw_{kind}")
    assert board["multi_node_base_latency_max_us"] == prof.get("nccl.allreduce.multi_node.base_latency_max_us")
    assert board["tcp_fallback_max_busbw"] == prof.get("nccl.allreduce.tcp_fallback_max_busbw")


def test_allreduce_table_lower_floors() -> None:
    prof = profiles.load(H100)
    assert grader.allreduce_table(prof, True)[0] == "multi_node"
    assert grader.allreduce_table(prof, False)[1]["peak_busbw_warn"] == 330.0
    name, merged = grader.allreduce_table(prof, None)
    assert name.startswith("unknown") and (merged["peak_busbw_warn"], merged["peak_busbw_fail"]) == (330.0, 245.0)


def test_topology() -> None:
    res = parse_nccl_tests(table(2, 8, 400.0, lo=1 << 30))
    assert grader.topology(res) == grader.Topology(True, 8, [H100_NAME], 16)
    res = parse_nccl_tests(table(1, 8, 400.0, lo=1 << 30))
    assert grader.topology(res) == grader.Topology(False, 8, [H100_NAME], 8)
    uneven = table(2, 8, 400.0, lo=1 << 30).replace("on     node01 device  7", "on     node02 device  7")
    assert grader.topology(parse_nccl_tests(uneven)).per_host is None
    assert grader.topology(NcclTests()) == grader.Topology(None, None, [], None)


def test_every_code_the_grader_names_is_in_the_policy_table() -> None:
    source = (ROOT / "checks" / "nccl_tests.py").read_text()
    used = set(re.findall(r'"(nccl\.allreduce/[a-z0-9-]+)"', source))
    assert 'f.unread(CHECK, "nccl-tests"' in source  # Findings.unread names <check>/unread-error
    used.add("nccl.allreduce/unread-error")
    table_codes = {c for c in policy.builtin().codes if c.startswith("nccl.allreduce/")}
    assert used == table_codes
    statuses = {c: policy.builtin().entry(c).status for c in table_codes}
    assert statuses["nccl.allreduce/wrong-results"] is Status.FAIL
    assert statuses["nccl.allreduce/latency-spike"] is Status.WARN
    assert statuses["nccl.allreduce/collective-not-graded"] is Status.PASS
    assert statuses["nccl.allreduce/no-rows"] is Status.SKIP
    assert statuses["nccl.allreduce/no-table"] is Status.SKIP  # no expectation is never a PASS
    assert statuses["nccl.allreduce/not-validated"] is Status.WARN
    assert statuses["nccl.allreduce/unread-error"] is Status.WARN
    assert statuses["nccl.allreduce/below-slowest-fabric"] is Status.WARN
    assert statuses["nccl.allreduce/above-known-tables"] is Status.PASS
    assert statuses["nccl.allreduce/crashed-before-rows"] is Status.ERROR
    assert statuses["nccl.allreduce/below-pcie-p2p"] is Status.WARN
    assert statuses["nccl.allreduce/ranks-share-gpu"] is Status.SKIP


def test_profile_schema_validates(registry) -> None:  # noqa: ANN001
    for name in ("generic", H100):
        prof = profiles.load(name)
        profiles.validate(prof, registry.profile_schema())
    sizes = profiles.load(H100).get("nccl.allreduce.single_node.sizes")
    assert all({"bytes", "max_time_us", "source"} <= set(s) for s in sizes)
    for board in profiles.load("generic").get("nccl.allreduce.boards"):
        assert {"name", "match", "gpus_per_node", "source"} <= set(board)


def test_profile_hint_from_rank_lines(registry) -> None:  # noqa: ANN001
    cap = capture("nccl-tests", fixture_text("nccl-tests/all_reduce_perf_2node_16xH100_tcp_fallback.txt"))
    from preflight.grading import FactStore

    assert engine.detect_profile_name(FactStore(registry, captures={"nccl-tests": cap})) == H100
    partial = "\n".join(ln for ln in table(2, 8, 400.0, lo=1 << 30).splitlines() if "Rank  3 " not in ln)
    assert grader._profile_hint(FactStore(registry, captures={"nccl-tests": capture("nccl-tests", partial)})) == \
        (H100_NAME, None)
    mixed = table(1, 8, 400.0, lo=1 << 30).replace("device  3 [0000:4b:00] " + H100_NAME,
                                                   "device  3 [0000:4b:00] NVIDIA H200")
    assert grader._profile_hint(FactStore(registry, captures={"nccl-tests": capture("nccl-tests", mixed)})) == \
        (None, None)
    assert grader._profile_hint(FactStore(registry, captures={})) == (None, None)


# ----------------------------------------------------------------------------- exact evidence, remedies, edges

def site(tmp_path: Path, body: str, base: str = "generic") -> str:
    prof = tmp_path / "site.toml"
    prof.write_text(f'[profile]\nname = "site"\nextends = "{base}"\n' + body)
    return str(prof)


def test_a_table_with_only_a_warn_floor_or_only_a_fail_floor(tmp_path: Path) -> None:
    warn_only = site(tmp_path, '[nccl.allreduce.single_node]\npeak_busbw_warn = { value = 400.0, source = "site" }\n')
    r = one(table(1, 8, 300.0, lo=1 << 30), warn_only)
    assert r.status is Status.WARN and "below the expected 400" in r.summary
    assert any(e.startswith("nccl.allreduce.single_node.peak_busbw_warn = 400 (site)") for e in r.evidence)
    fail_only = site(tmp_path, '[nccl.allreduce.multi_node]\npeak_busbw_fail = { value = 200.0, source = "site" }\n')
    r = one(table(2, 8, 150.0, lo=1 << 30), fail_only)
    assert r.status is Status.FAIL and "under the multi_node floor 200" in r.summary


def test_a_board_without_name_or_gpu_count_or_figures() -> None:
    topo = grader.Topology(True, 8, ["NVIDIA X1"], 16)
    exp = grader._board_expectation({"match": ["X1"], "multi_node_peak_busbw_warn": 100.0}, topo, False)
    assert exp.warn == 100.0 and exp.fail == 0.0 and exp.per_node == 0 and exp.graded
    assert exp.warn_src.startswith("multi_node_peak_busbw_warn = 100.0 (board ?: ")
    bare = grader._board_expectation({"match": ["X1"]}, topo, False)
    assert not bare.graded and bare.notes == [(NO_TABLE, "no expected busbw for multi-node runs of ?: peak not graded "
                                                          "(board ? has no multi_node figure)")]
    single = grader._board_expectation({"single_node_peak_busbw_warn": 50.0, "single_node_nvls_peak_busbw_warn": 90.0},
                                       grader.Topology(False, 8, [], 8), True)
    assert (single.name, single.warn) == ("single_node (NVLS)", 90.0)
    plain = grader._board_expectation({"single_node_peak_busbw_warn": 50.0}, grader.Topology(False, 8, [], 8), True)
    assert (plain.name, plain.warn) == ("single_node", 50.0)


def test_wrong_counts_of_both_blocks_add_up() -> None:
    text = table(1, 8, 470.0, lo=1 << 30)
    lines = text.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.strip().startswith("2147483648"))
    cells = lines[i].split()
    cells[8], cells[12] = "3", "5"
    lines[i] = "  ".join(cells)
    j = next(k for k, ln in enumerate(lines) if ln.strip().startswith("4294967296"))
    cells = lines[j].split()
    cells[12] = "7"
    lines[j] = "  ".join(cells)
    r = one("\n".join(lines))
    assert "(15 wrong elements)" in r.summary and r.facts["wrong"] == 15
    assert lines[i].strip() in r.evidence and lines[j].strip() in r.evidence
    assert "drain the node it follows" in r.remedy


def test_remedies_name_the_next_step() -> None:
    assert "ECC/Xid" in one(table(2, 8, 470.0).replace("0 OK", "3 FAILED")).remedy
    failed = table(2, 8, 470.0, hi=1 << 20, footer=False) + "gpu1: Test NCCL failure common.cu:1005 'internal error'\n"
    r = one(failed)
    assert codes(r) == ["nccl.allreduce/test-failure"] and r.summary == "nccl-tests reported a failure"
    assert "names the host" in r.remedy and "gpu1: Test NCCL failure" in r.evidence[0]
    assert "NCCL_TESTS_MIN_BW" in one(re.sub(r"(Avg bus bandwidth\s*: \S+)", r"\1 FAILED", table(2, 8, 470.0))).remedy
    assert "untouched output" in one(re.sub(r"(Avg bus bandwidth\s*: )\S+", r"\g<1>1.5", table(2, 8, 470.0))).remedy
    aborted = table(2, 8, 470.0, hi=1 << 20, footer=False) + "n1:1:2 [0] NCCL WARN Cuda failure 'unknown'\n"
    assert "NCCL_DEBUG=INFO" in one(aborted).remedy
    stopped = table(2, 8, 470.0, hi=1 << 20, footer=False) + "     2097152        524288     float     sum      -1\n"
    r = one(stopped)
    assert "py-spy" in r.remedy and r.evidence[0] == "last row started: 2 MB"
    assert "ibstat" in one(table(2, 8, 150.0, lo=1 << 30)).remedy
    assert "nvidia-smi topo -m" in one(table(2, 8, 300.0, lo=1 << 30)).remedy
    assert "adaptive routing" in one(table(2, 8, 470.0, times={32768: 1112.2, 65536: 1651.7})).remedy
    assert "-b 8 -e 8G" in one(table(2, 8, 100.0, lo=25 << 20, hi=25 << 20)).remedy


def test_tcp_fallback_evidence_names_its_source() -> None:
    r = one(table(2, 8, 3.0, lat=95.0, lo=1 << 30))
    assert any(e.startswith("tcp_fallback_max_busbw = 30 (a 256 MB all-reduce under 30") for e in r.evidence)
    assert r.remedy.startswith("(1) NCCL is using NET/Socket: rerun with NCCL_DEBUG=INFO")
    r = one(table(2, 8, 3.0, lat=95.0, lo=1 << 30, model="NVIDIA H200"), "generic")
    assert "nccl.allreduce/tcp-fallback" in codes(r)
    assert any(e.startswith("tcp_fallback_max_busbw = 30 (board HGX/DGX H100 or H200") for e in r.evidence)


def test_tcp_fallback_by_time_alone(tmp_path: Path) -> None:
    prof = site(tmp_path, '[nccl.allreduce]\ntcp_fallback_max_time_us = { value = 30000.0, source = "site" }\n')
    r = one(table(2, 8, 10.0, lo=256 << 20, hi=1 << 30, model="NVIDIA B200"), prof)
    assert codes(r) == ["nccl.allreduce/tcp-fallback", NO_TABLE]
    r = one(table(2, 8, 40.0, lo=256 << 20, hi=1 << 30, model="NVIDIA B200"), prof)
    assert codes(r) == [NO_TABLE]


def test_the_latency_bound_rows_end_at_4_kb() -> None:
    r = one(table(2, 8, 338.0, lat=123.0, lo=4096))
    assert r.status is Status.PASS  # the 4 KB row is latency-bound: not graded against NDR
    r = one(table(2, 8, 338.0, lat=123.0, lo=8192))
    assert r.status is Status.WARN


def test_two_gpus_on_one_bus_are_enough_for_the_vm_note() -> None:
    text = table(2, 8, 360.0, lo=1 << 30)
    two = text.replace("device  1 [0000:29:00]", "device  1 [0000:18:01]", 1)
    r = one(two)
    assert any(e.startswith("GPUs share one PCIe bus on node00:") for e in r.evidence)


def test_a_size_at_its_ceiling_passes() -> None:
    lines = []
    for line in fixture_text("nccl-tests/all_reduce_perf_1node_8xH100_nvls.txt").splitlines():
        if line.strip().startswith("16777216 "):
            cells = line.split()
            cells[5], cells[9] = "500.0", "500.0"
            line = "  ".join(cells)
        lines.append(line)
    r = one("\n".join(lines))
    assert "nccl.allreduce/size-slow" not in codes(r)


def test_row_facts_and_the_pass_evidence() -> None:
    r = one(table(1, 8, 470.0, lo=1 << 30))
    row0 = r.facts["rows"][0]
    assert set(row0) == {"bytes", "time_us", "algbw", "busbw", "ip_time_us", "ip_algbw", "ip_busbw", "wrong",
                         "ip_wrong"}
    assert row0["ip_wrong"] == 0 and row0["bytes"] == 1 << 30
    assert r.evidence[0].startswith("8589934592") and r.evidence[1].startswith("# Avg bus bandwidth")
    assert r.facts["avg_busbw_computed"] == pytest.approx(r.facts["avg_busbw"], abs=0.01)


def test_summary_without_rank_list() -> None:
    text = "\n".join(ln for ln in table(2, 8, 400.0, lo=1 << 30).splitlines() if "Rank" not in ln)
    r = one(text)
    assert "(16 ranks on ? host(s)" in r.summary
    r = one(COLS + "           8             2     float     sum      -1    24.11    0.00    0.00      0    24.0   0.00"
                   "   0.00  0\n          16             4     float     sum      -1    24.11    0.00    0.00      0"
                   "    24.0   0.00   0.00  0\n")
    assert "(? ranks on ? host(s)" in r.summary


def test_other_collective_evidence_is_the_peak_row_and_the_note() -> None:
    text = fixture_text("nccl-tests/all_gather_perf_1node_8xH100_2.17_named.txt").replace("all_gather", "alltoall")
    r = one(text)
    assert r.evidence[0].startswith("4294967296") and r.evidence[1].startswith("# Avg bus bandwidth")
    assert r.evidence[2].startswith("bandwidth not graded: alltoall has no busbw table")


def test_unrecognised_columns_quote_the_last_row() -> None:
    text = fixture_text("nccl-tests/all_gather_perf_1node_8xH100_2.17_named.txt")
    text = text.replace("# Collective test starting: all_gather_perf\n", "").replace(
        "# Collective test concluded: all_gather_perf\n", "")
    text = text.replace("    none      -1", "     sum       3")  # total size, rooted, reduced: no collective's
    r = one(text)
    assert r.evidence[0].startswith("8589934592") and "name the binary" in r.remedy
    no_list = "\n".join(ln for ln in text.splitlines() if "Rank" not in ln)
    assert "no rank list" in one(no_list).evidence


def test_no_rows_quotes_the_header_and_notes() -> None:
    text = ("# nThread 1 nGpus 8 minBytes 8 maxBytes 128 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
            "validation: 1 graph: 0\n#\n# Reducing maxBytes to 64 due to memory limitation\n")
    r = one(text)
    assert r.evidence == [text.splitlines()[0], "# Reducing maxBytes to 64 due to memory limitation"]
    assert "capture the whole output" in r.remedy
    r = one(COLS + "  1073741824     268435456     float     sum      -1   4484.9  239.41  448.90  x\n")
    assert "report the layout" in r.remedy


def test_profile_hint_with_uneven_hosts(registry) -> None:  # noqa: ANN001
    from preflight.grading import FactStore

    uneven = table(2, 8, 400.0, lo=1 << 30).replace("on     node01 device  7", "on     node02 device  7")
    cap = capture("nccl-tests", uneven)
    assert grader._profile_hint(FactStore(registry, captures={"nccl-tests": cap})) == (H100_NAME, None)
    whole = capture("nccl-tests", table(2, 8, 400.0, lo=1 << 30))
    assert grader._profile_hint(FactStore(registry, captures={"nccl-tests": whole})) == (H100_NAME, 8)


def test_num() -> None:
    prof = profiles.load("generic")
    assert grader._num(prof, "nccl.allreduce.spike_ratio") == 2.0
    assert grader._num(prof, "nccl.allreduce.no_such_key") == 0.0
    assert grader._num(prof, "gpu.persistence_mode") == 0.0  # a bool is not a number
    assert grader._num(prof, "nccl.allreduce.peak_min_bytes") == 1073741824.0


def test_fmt_bytes() -> None:
    assert [grader._fmt_bytes(n) for n in (1 << 30, 3 << 20, 1024, 1536, 25 << 20, 7)] == \
        ["1 GB", "3 MB", "1 KB", "1536 B", "25 MB", "7 B"]


# ----------------------------------------------------------------------------- tables, edges and boundaries

def test_allreduce_table_names_and_the_lower_of_each_floor(tmp_path: Path) -> None:
    prof = profiles.load(site(tmp_path, '[nccl.allreduce.single_node]\npeak_busbw_warn = 400.0\npeak_busbw_fail = 100.0\n'
                                        '[nccl.allreduce.multi_node]\npeak_busbw_warn = 300.0\npeak_busbw_fail = 200.0\n'))
    assert grader.allreduce_table(prof, False) == ("single_node", {"peak_busbw_warn": 400.0, "peak_busbw_fail": 100.0})
    assert grader.allreduce_table(prof, True) == ("multi_node", {"peak_busbw_warn": 300.0, "peak_busbw_fail": 200.0})
    name, merged = grader.allreduce_table(prof, None)
    assert merged == {"peak_busbw_warn": 300.0, "peak_busbw_fail": 100.0}


def test_unknown_topology_takes_the_lower_nonzero_floors(tmp_path: Path) -> None:
    prof = profiles.load(site(tmp_path, '[nccl.allreduce.single_node]\npeak_busbw_warn = 0.0\n', base=H100))
    topo = grader.Topology(None, None, [], None)
    exp = grader._profile_expectation(prof, topo, False)
    assert (exp.warn, exp.fail) == (368.0, 245.0) and exp.sizes == [] and exp.latency_max_us == 0.0
    assert exp.warn_src.startswith("nccl.allreduce.multi_node.peak_busbw_warn = 368 (")
    exp = grader._profile_expectation(profiles.load(H100), topo, False)
    assert (exp.warn, exp.fail) == (330.0, 245.0)
    only_fail = profiles.load(site(tmp_path, '[nccl.allreduce.multi_node]\npeak_busbw_fail = 100.0\n'))
    exp = grader._profile_expectation(only_fail, grader.Topology(True, 8, [], 16), False)
    assert (exp.warn, exp.warn_src, exp.fail) == (0.0, "", 100.0) and exp.graded
    exp = grader._profile_expectation(profiles.load(H100), grader.Topology(True, 8, [], 16), False)
    assert exp.latency_max_us == 100.0 and exp.per_node == 8 and exp.tcp_max_busbw == 30.0
    assert exp.latency_src.startswith("nccl.allreduce.multi_node.base_latency_max_us (the smallest")
    exp = grader._profile_expectation(profiles.load(H100), grader.Topology(False, 8, [], 8), False)
    assert [e["bytes"] for e in exp.sizes] == [1048576, 16777216, 268435456, 1073741824]


def test_expectation_defaults() -> None:
    e = grader.Expectation("x")
    assert (e.warn, e.fail, e.warn_src, e.fail_src, e.per_node, e.latency_max_us, e.latency_src, e.tcp_max_busbw,
            e.tcp_src, e.sizes, e.notes) == (0.0, 0.0, "", "", 0, 0.0, "", 0.0, "", [], [])
    assert not e.graded and grader.Expectation("x", warn=1.0).graded and grader.Expectation("x", fail=1.0).graded


def test_profile_fits(tmp_path: Path) -> None:
    h100 = profiles.load(H100)
    assert grader._profile_fits(h100, [H100_NAME]) and grader._profile_fits(h100, [])
    assert not grader._profile_fits(h100, ["NVIDIA H200"]) and not grader._profile_fits(h100, [H100_NAME, "NVIDIA H200"])
    assert grader._profile_fits(profiles.load("generic"), ["NVIDIA H200"])
    model_only = profiles.load(site(tmp_path, '[gpu]\nmodel = "NVIDIA H200"\n'))
    assert grader._profile_fits(model_only, ["NVIDIA H200"]) and not grader._profile_fits(model_only, [H100_NAME])


@pytest.mark.parametrize(("params", "multi"), [("nThread 2 nGpus 4", False), ("nThread 1 nGpus 8", False),
                                                ("nThread 1 nGpus 1", None), ("nThread 8 nGpus 0", None)])
def test_topology_of_one_process(params: str, multi: bool | None) -> None:
    text = "\n".join(ln for ln in table(1, 8, 300.0, lo=1 << 30).splitlines() if "Rank" not in ln)
    res = parse_nccl_tests(text.replace("nThread 1 nGpus 1", params))
    topo = grader.topology(res)
    assert topo.multi is multi and topo.ranks == 8 and topo.per_host == (8 if multi is False else None)
    no_threads = parse_nccl_tests(text)
    no_threads.params = {"ngpus": 8}
    assert grader.topology(no_threads).multi is False
    no_gpus = parse_nccl_tests(text)
    no_gpus.params = {"nthread": 8}
    assert grader.topology(no_gpus).multi is None


def test_boards_quote_their_source_and_gpu_count() -> None:
    board = grader.board_for(profiles.load("generic"), ["NVIDIA H200"])
    assert board is not None
    exp = grader._board_expectation(board, grader.Topology(True, 8, ["NVIDIA H200"], 16), False)
    assert exp.per_node == 8 and exp.tcp_max_busbw == 30.0 and exp.latency_max_us == 100.0
    assert board["source"] in exp.fail_src and exp.tcp_src.endswith(board["source"])
    bare = grader._board_expectation({"match": ["X1"]}, grader.Topology(True, 8, [], 16), False)
    assert (bare.warn, bare.fail, bare.tcp_max_busbw, bare.latency_max_us) == (0.0, 0.0, 0.0, 0.0)


def test_no_table_names_the_gpus() -> None:
    r = one(re.sub(r"(device  7 \[\S+\]) NVIDIA B200", r"\1 NVIDIA X9", table(1, 8, 300.0, lo=1 << 30, model="NVIDIA B200")),
            "generic")
    assert r.summary == (f"all-reduce peak busbw {r.facts['peak_busbw']:g} GB/s, "
                         "no expected busbw for NVIDIA B200, NVIDIA X9 in profile generic: bandwidth not graded "
                         "(correctness only)")
    bare = "\n".join(ln for ln in table(1, 8, 300.0, lo=1 << 30).splitlines() if "Rank" not in ln)
    assert "no expected busbw for GPUs the capture does not name" in one(bare, "generic").summary


def test_summaries_and_remedies_of_each_finding() -> None:
    r = one(table(2, 8, 470.0).replace("# Out of bounds values : 0 OK", "# Out of bounds values : 3 FAILED"))
    assert r.remedy.startswith("data corruption: isolate the node") and r.remedy.endswith("check ECC/Xid")
    wrong = table(1, 8, 470.0, lo=1 << 30).replace("      0\n  2147483648", "     12\n  2147483648", 1)
    r = one(wrong)
    assert r.remedy.startswith("a GPU, NVLink or NIC corrupts data") and r.remedy.endswith("drain the node it follows")
    failed = table(2, 8, 470.0, hi=1 << 20, footer=False) + "gpu1: Test NCCL failure common.cu:1005 'internal error'\n"
    r = one(failed)
    assert r.remedy.startswith("read the failure line: it names the host") and r.remedy.endswith("rank and device")
    r = one(re.sub(r"(Avg bus bandwidth\s*: \S+)", r"\1 FAILED", table(2, 8, 470.0)))
    assert r.summary == "the run's own bandwidth check failed (NCCL_TESTS_MIN_BW)"
    assert r.remedy.startswith("the average bus bandwidth is under") and r.remedy.endswith("compare nodes one by one")
    r = one(re.sub(r"(Avg bus bandwidth\s*: )\S+", r"\g<1>1.5", table(2, 8, 470.0)))
    assert r.remedy.startswith("grade the untouched output") and r.remedy.endswith("of all_reduce_perf")
    aborted = table(2, 8, 470.0, hi=1 << 20, footer=False) + "n1:1:2 [0] NCCL WARN Cuda failure 'unknown'\n"
    r = one(aborted)
    assert r.remedy.startswith("read the NCCL WARN or signal line") and r.remedy.endswith("rerun with NCCL_DEBUG=INFO")
    stopped = table(2, 8, 470.0, hi=1 << 20, footer=False) + "     2097152        524288     float     sum      -1\n"
    r = one(stopped)
    assert r.remedy.startswith("check whether the job still runs") and r.remedy.endswith("capture the whole output")
    r = one(table(2, 8, 150.0, lo=1 << 30))
    assert r.remedy.startswith("a rail, HCA or NVLink is down or slow") and r.remedy.endswith("then drain that node")
    r = one(table(2, 8, 300.0, lo=1 << 30))
    assert r.remedy.startswith("compare nodes one by one") and r.remedy.endswith("(NCCL_IB_HCA, NCCL_ALGO)")
    r = one(table(2, 8, 100.0, lo=25 << 20, hi=25 << 20))
    assert r.remedy.startswith("rerun all_reduce_perf up to 8G") and r.remedy.endswith("to see the bandwidth plateau")
    assert r.evidence[1].startswith("nccl.allreduce.peak_min_bytes = 1073741824 (nccl-tests busbw plateaus")


def test_no_rows_summaries_and_remedies() -> None:
    r = one("# Using devices\ngpu1:1:2 [0] NCCL WARN Cuda failure 'out of memory'\n")
    assert r.remedy.startswith("read the failure line and the NCCL WARN") and r.remedy.endswith("rank and device")
    r = one(COLS + "  1073741824     268435456     float     sum      -1   4484.9  239.41  448.90  x\n")
    assert r.summary.startswith("not recognised: rows `size count type") and r.summary.endswith("have another layout")
    assert r.remedy.startswith("grade the untouched output of the *_perf binary") and r.remedy.endswith("nccl-tests")
    r = one("# nThread 1 nGpus 8\n")
    assert r.summary == "the table was cut before its first row: nothing was measured"
    assert r.remedy.startswith("capture the whole output of the *_perf binary") and r.remedy.endswith("bandwidth')")
    assert one("# Using devices\n").evidence[0] == "no `size count type ... busbw` row found"


def test_unrecognised_columns_texts() -> None:
    text = fixture_text("nccl-tests/all_gather_perf_1node_8xH100_2.17_named.txt")
    text = text.replace("# Collective test starting: all_gather_perf\n", "").replace(
        "# Collective test concluded: all_gather_perf\n", "")
    r = one(text.replace("    none      -1", "     sum       3"))
    assert r.summary.startswith("not recognised: a nccl-tests table was expected")
    assert r.summary.endswith("the columns fit none")
    assert r.remedy.startswith("grade the untouched output of a *_perf binary") and r.remedy.endswith("when pasting")
    tiny = COLS + ("        8192           128     float     sum       3    24.11    0.34    0.30      0    24.00    0.34"
                   "    0.30      0\n")
    assert "no bandwidth cells" in one(tiny).evidence and "no rank list" in one(tiny).evidence


@pytest.mark.parametrize(("busbw", "tcp"), [(30.0, False), (29.99, True)])
def test_tcp_fallback_busbw_boundary(busbw: float, tcp: bool) -> None:
    size = 256 << 20
    us = size / (busbw / 1.875 * 1e3)
    alg = size / us / 1e3
    line = (f"{size:12d}  {size // 4:12d}     float     sum      -1  {us:7.1f}  {alg:6.2f}  {busbw:6.2f}       0"
            f"  {us:7.1f}  {alg:6.2f}  {busbw:6.2f}       0")
    r = one(table(2, 8, 1.0, lo=8 << 20, hi=8 << 20, footer=False) + line + "\n")
    assert ("nccl.allreduce/tcp-fallback" in codes(r)) is tcp


@pytest.mark.parametrize(("us", "tcp"), [("30000", False), ("30001", True)])
def test_tcp_fallback_time_boundary(tmp_path: Path, us: str, tcp: bool) -> None:
    prof = site(tmp_path, '[nccl.allreduce]\ntcp_fallback_max_time_us = { value = 30000.0, source = "site" }\n')
    size = 256 << 20
    line = (f"{size:12d}  {size // 4:12d}     float     sum      -1  {us:>7s}    8.95   16.78       0  {us:>7s}    8.95"
            "   16.78       0")
    r = one(table(2, 8, 1.0, lo=8 << 20, hi=8 << 20, footer=False, model="NVIDIA B200") + line + "\n", prof)
    assert ("nccl.allreduce/tcp-fallback" in codes(r)) is tcp


def test_the_same_bus_number_in_two_pci_domains_is_not_shared() -> None:
    text = table(1, 8, 360.0, lo=1 << 30)
    two = text.replace("device  1 [0000:29:00]", "device  1 [0001:18:00]", 1)
    assert not any("PCIe bus" in e for e in one(two).evidence)
    slow = table(1, 8, 300.0, lo=1 << 30)
    r = one(slow.replace("device  1 [0000:29:00]", "device  1 [0001:18:00]", 1))
    assert r.status is Status.WARN and not any("PCIe bus" in e for e in r.evidence)
    r = one(slow.replace("device  1 [0000:29:00]", "device  1 [0000:18:01]", 1))
    assert any("PCIe bus on node00" in e for e in r.evidence)


def test_a_sweep_ending_at_1_gb_is_graded() -> None:
    assert one(table(2, 8, 150.0, lo=256 << 20, hi=1 << 30)).status is Status.FAIL
    assert one(table(2, 8, 150.0, lo=256 << 20, hi=512 << 20)).status is Status.PASS


def test_base_latency_at_the_limit_is_graded() -> None:
    small = [8 << k for k in range(10)]  # 8 B to 4 KB
    r = one(table(2, 8, 338.0, lo=8, hi=1 << 30, times={s: 100.0 for s in small}))
    assert r.status is Status.WARN
    r = one(table(2, 8, 338.0, lo=8, hi=1 << 30, times={s: 100.1 for s in small}))
    assert r.status is Status.PASS


def test_a_malformed_size_ceiling_is_skipped(tmp_path: Path) -> None:
    prof = site(tmp_path, "[[nccl.allreduce.single_node.sizes]]\nbytes = 1073741824\n"
                          "[[nccl.allreduce.single_node.sizes]]\nmax_time_us = 10.0\n"
                          "[[nccl.allreduce.single_node.sizes]]\nbytes = 2147483648\nmax_time_us = 100.0\n"
                          "source = \"site\"\n", base=H100)
    r = one(table(1, 8, 470.0, lo=1 << 30), prof)
    assert codes(r) == ["nccl.allreduce/size-slow"] and r.summary.startswith("2 GB all-reduce took")
    assert r.remedy.startswith("compare with another node pair") and r.remedy.endswith("and NCCL env")


# ----------------------------------------------------------------------------- spikes, exactly

def spike_table(times: dict[int, float], lo: int = 1 << 20, hi: int = 64 << 20) -> str:
    """A sweep whose times grow as 40 us + size / 10 GB/s, some rows replaced."""
    base = {s: 40 + s / 10e3 for s in (lo << k for k in range(40)) if s <= hi}
    base.update(times)
    return table(2, 8, 470.0, lo=lo, hi=hi, times=base)


def spikes_of(times: dict[int, float], **kw: int) -> list[str]:
    r = one(spike_table(times, **kw))
    return [e for e in r.evidence if re.match(r"^\d+ [KMG]?B: ", e)]


def test_spike_needs_twice_a_larger_message_and_100_us_more() -> None:
    assert spikes_of({1 << 20: 520.0}) == ["1 MB: 520 us, a larger message took 249.7 us"]
    assert spikes_of({1 << 20: 500.0, 2 << 20: 250.0}) == []  # exactly twice is not more than twice
    assert spikes_of({1 << 20: 374.5}) == []  # 125 us more, but only 1.5x
    exact = {8192: 140.5, 16384: 40.5, 32768: 41.0}
    assert spikes_of(exact, lo=8192, hi=32768) == ["8 KB: 140.5 us, a larger message took 40.5 us"]  # 100 us more
    assert spikes_of({**exact, 8192: 140.0}, lo=8192, hi=32768) == []  # 99.5 us more


def test_spike_in_the_second_and_the_next_to_last_rows() -> None:
    assert spikes_of({2 << 20: 1000.0}) == ["2 MB: 1000 us, a larger message took 459.4 us"]
    assert spikes_of({32 << 20: 13701.8}) == ["32 MB: 13702 us, a larger message took 6750.9 us"]


def test_spike_by_growth_faster_than_the_size() -> None:
    grown = {2 << 20: 100.0, 4 << 20: 500.0, 8 << 20: 1000.0, 16 << 20: 2000.0, 32 << 20: 4000.0, 64 << 20: 8000.0}
    assert spikes_of(grown) == ["4 MB: 500 us after 100 us at 2 MB"]
    assert spikes_of({**grown, 4 << 20: 400.0}) == []  # exactly twice what doubling the size gives
    early = {1 << 20: 25.0, 2 << 20: 150.0, 4 << 20: 300.0, 8 << 20: 600.0, 16 << 20: 1200.0, 32 << 20: 2400.0,
             64 << 20: 4800.0}
    assert spikes_of(early) == ["2 MB: 150 us after 25 us at 1 MB"]  # exactly 100 us over 2 x 2 x 25
    assert spikes_of({**early, 2 << 20: 149.5}) == []


def test_spike_summary_lists_five_sizes() -> None:
    five = {s: 9000.0 for s in (1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20)}
    r = one(spike_table(five, hi=64 << 20))
    assert r.summary.endswith("(1 MB, 2 MB, 4 MB, 8 MB, 16 MB)")
    r = one(spike_table({**five, 512 << 10: 9000.0}, lo=512 << 10))
    assert r.summary.endswith("(512 KB, 1 MB, 2 MB, 4 MB, 8 MB ...)")
    assert any(e.startswith("nccl.allreduce.spike_ratio = 2 (on a healthy fabric") for e in r.evidence)
    assert r.remedy.startswith("an intermittent fabric problem") and r.remedy.endswith("ibstat error counters")


def test_spikes_are_read_per_type_and_op() -> None:
    def mk(dtype: str, size: int, us: float) -> NcclTestRow:
        return NcclTestRow(bytes=size, count=size // 4, dtype=dtype, time_us=us, algbw=1.0, busbw=1.75, wrong=0,
                           redop="sum", line=f"{size} {dtype}")
    rows = [mk("float", 1 << 20, 50.0), mk("float", 2 << 20, 90.0), mk("double", 1 << 20, 400.0),
            mk("double", 2 << 20, 700.0), mk("float", 4 << 20, 170.0), mk("double", 4 << 20, 1300.0)]
    sweeps = grader._sweeps(NcclTests(rows=rows))
    assert [[r.line for r, _ in sw] for sw in sweeps] == [["1048576 float", "2097152 float", "4194304 float"],
                                                          ["1048576 double", "2097152 double", "4194304 double"]]
    assert all(grader._spikes(sw, 2.0, 100.0) == {} for sw in sweeps)
    assert grader._spikes(sweeps[0][:2], 2.0, 100.0) == {}
    assert spikes_of({1 << 20: 4000.0}, hi=4 << 20) and not spikes_of({1 << 20: 4000.0}, hi=2 << 20)
    assert grader._spikes([(mk("float", 0, 30.0), 30.0), (mk("float", 8, 400.0), 400.0)], 2.0, 100.0) == {}
    zero_first = [(mk("float", 0, 30.0), 30.0), (mk("float", 8, 31.0), 31.0), (mk("float", 16, 32.0), 32.0),
                  (mk("float", 32, 400.0), 400.0)]
    assert grader._spikes(zero_first, 2.0, 100.0) == {3: "400 us after 32 us at 16 B"}


# ----------------------------------------------------------------------------- plateau, exactly

def plateau(bws: list[float], lo: int = 8 << 20, hcas: str = "mlx5_0,mlx5_1") -> str:
    lines, size = [], lo
    for bw in bws:
        us = size / (bw * 1e3)
        lines.append(f"{size:12d}  {size // 4:12d}     float     sum      -1  {us:7.1f}  {bw:6.2f}  {bw:6.2f}       0"
                     f"  {us:7.1f}  {bw:6.2f}  {bw:6.2f}       0")
        size *= 2
    return (f"mpirun -x NCCL_IB_HCA={hcas} -np 2 ./all_reduce_perf\n" + rank_lines(2, 1) + COLS + "\n".join(lines)
            + "\n")


def test_plateau_from_two_rows_of_8_mb_and_up() -> None:
    r = one(plateau([40.0, 41.0]))
    assert codes(r) == ["nccl.allreduce/one-nic-plateau"]
    assert r.remedy.startswith("only one rail carries the traffic") and r.remedy.endswith("every HCA is Active")
    assert one(plateau([40.0, 41.0], lo=4 << 20)).status is Status.PASS  # 4 MB is under the plateau rows
    r = one(plateau([5.0, 10.0, 20.0, 40.0, 41.0], lo=2 << 20))
    assert not any(e.startswith(("2097152", "4194304")) for e in r.evidence)


def test_plateau_boundaries_exactly() -> None:
    assert one(plateau([54.0, 60.0])).status is Status.WARN  # 60 = 1.2 x 50 GB/s, a last step of 10%
    assert one(plateau([53.9, 60.0])).status is Status.PASS
    assert one(plateau([60.0, 60.01])).status is Status.PASS


def test_plateau_reads_the_last_two_sizes() -> None:
    r = one(plateau([10.0, 20.0, 41.0, 35.0, 40.0, 40.5, 41.0]))
    assert codes(r) == ["nccl.allreduce/one-nic-plateau"]
    assert any(e.startswith("134217728") for e in r.evidence)  # the fifth of seven rows is quoted
    assert one(plateau([40.0, 41.0, 30.0, 41.0])).status is Status.PASS  # the last doubling gained more than 10%


# ----------------------------------------------------------------------------- facts, proof, summary

def test_facts_of_a_partial_listing_and_of_the_environment() -> None:
    text = table(1, 8, 470.0, lo=1 << 30, head="export NCCL_ALGO=NVLS\n")
    partial = "\n".join(ln for ln in text.splitlines() if "Rank  1 " not in ln)
    r = one(partial.replace("minBytes", "x minBytes"))
    assert r.facts["ranks"] == 8 and r.facts["algo"] == "NVLS" and r.facts["nvls"] is None
    assert r.facts["program"] == "" and r.facts["collective"] == "all_reduce" and r.facts["peak_busbw"] > 460
    named = one("# Collective test starting: all_reduce_perf\n" + text)
    assert named.facts["program"] == "all_reduce_perf"


def test_computed_average_has_three_decimals() -> None:
    r = one(table(1, 8, 471.3, lo=1 << 30))
    res = parse_nccl_tests(table(1, 8, 471.3, lo=1 << 30))
    mean = sum(res.busbw_cells()) / len(res.busbw_cells())
    assert r.facts["avg_busbw_computed"] == round(mean, 3) != mean


def test_proof_is_the_first_peak_row_and_the_average() -> None:
    t = (4 << 30) / (470.0 / 1.75 * 1e3)
    r = one(table(1, 8, 470.0, lo=4 << 30, hi=8 << 30, times={4 << 30: t, 8 << 30: 2 * t}))
    assert r.status is Status.PASS and r.facts["rows"][0]["busbw"] == r.facts["rows"][1]["busbw"]
    assert len(r.evidence) == 2 and r.evidence[0].startswith("4294967296")
    assert r.evidence[1].startswith("# Avg bus bandwidth")


def test_the_summary_names_two_findings() -> None:
    text = table(2, 8, 150.0, times={32768: 1112.2, 65536: 1651.7})
    text = text.replace("# Out of bounds values : 0 OK", "# Out of bounds values : 3 FAILED")
    r = one(text)
    assert r.summary.endswith("(+1 more)") and r.summary.count(";") == 1


def test_two_tables_of_other_collectives_grade_the_one_a_table_applies_to() -> None:
    ag = fixture_text("nccl-tests/all_gather_perf_1node_8xH100_2.17_named.txt")
    bc = ag.replace("all_gather_perf", "broadcast_perf")
    r = one(ag + bc)
    assert r.summary.startswith("all_gather peak busbw") and r.facts["table"] == "single_node"
    r = one(bc + bc.replace("broadcast_perf", "alltoall_perf"))
    assert r.summary.startswith("alltoall peak busbw") and r.facts["table"] == "none"


def one_rank(footer: str = "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0\n", ranks: bool = True) -> str:
    rows = "".join(f"{s:12d}  {s // 4:12d}     float     sum      -1   {s / 4.5e5:7.1f}  450.00    0.00       0"
                   f"   {s / 4.5e5:7.1f}  450.00    0.00       0\n" for s in (1 << 30, 2 << 30, 4 << 30))
    return (rank_lines(1, 1) if ranks else "") + COLS + rows + footer


def test_a_single_rank_measures_nothing() -> None:
    r = one(one_rank())
    assert r.status is Status.SKIP and codes(r) == ["nccl.allreduce/one-rank"]
    assert r.summary.startswith("a single-rank run: it measures") and r.summary.endswith("(busbw is 0 by definition)")
    assert r.remedy.startswith("run one *_perf binary across the GPUs") and r.evidence[0].startswith("4294967296")
    assert codes(one(one_rank(ranks=False))) == ["nccl.allreduce/one-rank"]
    assert one(one_rank("# Out of bounds values : 2 FAILED\n")).status is Status.FAIL


# ----------------------------------------------------------------------------- PCIe, shared GPUs, endings

GEFORCE = "NVIDIA GeForce RTX 2080 Ti"
PARAMS_LINE = ("# nThread 1 nGpus 1 minBytes 8 maxBytes 1048576 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
               "validation: 1 graph: 0\n")


def pcie(peak: float, coll: str = "all_reduce", n: int = 2, hi: int = 1 << 30, model: str = GEFORCE,
         bus: str = "0000:{b:02x}:00", head: str = "", hosts: int = 1) -> str:
    """A one-host table of `n` PCIe GPUs whose busbw plateaus at `peak` (the all-reduce's sizes,
    the collective's name on the start line)."""
    text = table(hosts, n // hosts, peak, lat=12.0, model=model, lo=1 << 20, hi=hi)
    text = text.replace("# Using devices\n", "# Using devices\n", 1)
    ranks_text = rank_lines(hosts, n // hosts, model, bus)
    text = re.sub(r"(?m)^#  Rank .*\n", "", text).replace("# Using devices\n", "# Using devices\n" + ranks_text)
    return head + f"# Collective test starting: {coll}_perf\n" + text


def test_two_pcie_gpus_under_peer_to_peer_speed_warn_on_any_board() -> None:
    r = one(pcie(4.0), profile="generic")
    assert r.status is Status.WARN and codes(r) == ["nccl.allreduce/below-pcie-p2p", NO_TABLE]
    assert r.summary.startswith("all-reduce peak busbw 4 GB/s between the 2 GPUs of one host is under what PCIe "
                                "peer-to-peer gives (6 GB/s); all-reduce peak busbw 4 GB/s, no expected busbw for")
    assert r.evidence[0].split()[:2] == ["67108864", "16777216"] and r.evidence[1].startswith(
        "nccl.allreduce.pcie_min_busbw = 6 (one PCIe Gen3 x16 link carries 15.75 GB/s")
    assert r.remedy.startswith("the GPUs exchange data through host memory") and r.remedy.endswith(
        "NCCL_P2P_DISABLE / NCCL_P2P_LEVEL and ACS")
    assert ("all-reduce peak busbw 4 GB/s, no expected busbw for NVIDIA GeForce RTX 2080 Ti in profile generic: "
            "bandwidth not graded (correctness only)") in r.facts["problems"]
    # the same on the H100 profile: no table is for these GPUs
    assert codes(one(pcie(4.0))) == ["nccl.allreduce/below-pcie-p2p", NO_TABLE]


# at or over the PCIe figure: no expected busbw for these GPUs (SKIP), under it: WARN
@pytest.mark.parametrize(("peak", "status"), [(6.0, Status.SKIP), (5.99, Status.WARN), (24.0, Status.SKIP)])
def test_pcie_floor_boundary(peak: float, status: Status) -> None:
    assert one(pcie(peak), profile="generic").status is status


def test_pcie_figure_needs_one_host_of_gpus_and_a_sweep_to_its_plateau(tmp_path: Path) -> None:
    # no table is for these GPUs: SKIP where the PCIe figure does not apply
    assert one(pcie(4.0, hi=8 << 20), profile="generic").status is Status.SKIP  # stops under pcie_min_bytes
    assert one(pcie(4.0, hi=16 << 20), profile="generic").status is Status.WARN  # reaches it
    assert codes(one(pcie(4.0, n=4, hosts=2), profile="generic")) == [  # across hosts: a network
        "nccl.allreduce/below-slowest-fabric", NO_TABLE]
    # the sweep's gloo ranks: correctness graded, busbw by design not (a PASS note, not no-table)
    r = one(pcie(4.0, model="cpu", bus=""), profile="generic")
    assert r.status is Status.PASS and "ranks on CPU tensors" in " ".join(r.evidence + [r.summary]), r
    # a model other than "cpu", or a PCI bus id, shows GPUs
    assert one(pcie(4.0, model="cpu"), profile="generic").status is Status.WARN
    assert one(pcie(4.0, bus=""), profile="generic").status is Status.WARN
    site = tmp_path / "site.toml"
    site.write_text('[profile]\nname = "site"\nextends = "generic"\n[nccl.allreduce]\n'
                    'pcie_min_busbw = { value = 0.0, source = "site: not graded" }\n')
    assert one(pcie(4.0), profile=str(site)).status is Status.SKIP


def test_a_graded_table_says_more_than_the_pcie_figure() -> None:
    r = one(pcie(4.0, n=8, model=H100_NAME))
    assert "nccl.allreduce/peak-below-floor" in codes(r) and "nccl.allreduce/below-pcie-p2p" not in codes(r)
    r = one(pcie(300.0, n=8, model=H100_NAME))
    assert codes(r) == ["nccl.allreduce/peak-below-expected"]
    r = one(pcie(4.0, n=2, model=H100_NAME))  # 2 H100s: the 8-GPU table does not apply, the PCIe figure does
    assert codes(r) == ["nccl.allreduce/below-pcie-p2p"]


def test_alltoall_between_two_pcie_gpus_under_peer_to_peer_speed() -> None:
    cells = [(s, 9.2 * s / (s + 2e5)) for s in (1 << k for k in range(20, 31))]  # algbw reaching 9.2 GB/s
    rows_text = "".join(f"{s:12d}  {s // 8:12d}     float    none      -1  {s / a / 1e3:7.1f}  {a:6.2f}  {a / 2:6.2f}"
                        f"       0  {s / a / 1e3:7.1f}  {a:6.2f}  {a / 2:6.2f}     N/A\n" for s, a in cells)
    head = ("# Collective test starting: alltoall_perf\n# Using devices\n" +
            rank_lines(1, 2, GEFORCE).replace("Pid   4001", "Pid   4000"))
    r = one(head + COLS + rows_text, profile="generic")
    assert r.status is Status.WARN and codes(r) == ["nccl.allreduce/below-pcie-p2p"]
    assert r.summary.startswith("alltoall peak busbw 4.6 GB/s between the 2 GPUs of one host")
    assert ("bandwidth not graded: alltoall has no busbw table (the tables are for all_reduce, all_gather, "
            "reduce_scatter)") in r.evidence


def test_a_command_line_with_g_shows_one_host() -> None:
    body = COLS + "\n".join(row(s, t, 4) for s, t in curve(4, 1.44, lo=1 << 30, hi=8 << 30)) + "\n"
    cmd = "CUDA_VISIBLE_DEVICES=0,1,6,7 NCCL_P2P_DISABLE=1 ./build/all_reduce_perf -b 1G -e 8G -f 2 -g 4\n"
    res = parse_nccl_tests(cmd + body)
    assert res.cmd_ranks == 4 and res.rank_count() == 4
    assert grader.topology(res) == grader.Topology(False, 4, [], 4)
    r = one(cmd + body, profile="generic")
    assert r.status is Status.WARN and codes(r) == ["nccl.allreduce/below-pcie-p2p", NO_TABLE]
    assert "(4 ranks on 1 host(s), none)" not in r.summary and "between the 4 GPUs of one host" in r.summary
    # under a launcher the -g is per process: the hosts are not shown
    for launched in ("mpirun -np 2 ./build/all_reduce_perf -g 4\n", "srun -N 2 \\\n./build/all_reduce_perf -g 4\n"):
        assert grader.topology(parse_nccl_tests(launched + body)).multi is None
        assert one(launched + body, profile="generic").status is Status.SKIP


def test_sendrecv_on_nvlink_passes_with_its_bandwidth_noted() -> None:
    def table_of(bws: tuple[float, ...]) -> str:
        return "./build/sendrecv_perf -b 128M -e 1G -f 2 -g 8\n#\n" + COLS + "".join(
            f"{s:12d}  {s // 4:12d}     float     sum      -1  {s / b / 1e3:7.1f}  {b:6.2f}  {b:6.2f}"
            f"       0  {s / b / 1e3:7.1f}  {b:6.2f}  {b:6.2f}     N/A\n"
            for s, b in zip((128 << 20, 256 << 20, 512 << 20, 1 << 30), bws, strict=True))
    r = one(table_of((110.81, 188.6, 192.75, 195.1)), profile="generic")
    assert r.status is Status.PASS and r.facts["collective"] == "sendrecv" and r.facts["ranks"] == 8
    assert r.summary == "sendrecv peak busbw 195.1 GB/s, avg 171.815 GB/s (8 ranks on 1 host(s), none)"
    r = one(table_of((3.81, 3.9, 3.95, 3.97)), profile="generic")
    assert r.status is Status.WARN and codes(r) == ["nccl.allreduce/below-pcie-p2p"]
    assert "between the 8 GPUs of one host" in r.summary


def shared_gpu(bus: str = "0000:02:00", devices: tuple[int, int] = (0, 0), wrong: str = "0") -> str:
    head = "".join(f"#  Rank  {r} Group  0 Pid {2994447 + r} on        lab device  {d} [{bus}] NVIDIA GeForce RTX 5090\n"
                   for r, d in enumerate(devices))
    rows_text = "\n".join(row(s, t, 2, wrong=wrong) for s, t in curve(2, 2.3, lat=4360.0, lo=1 << 20, hi=128 << 20))
    return "# Collective test starting: all_reduce_perf_mpi\n# Using devices\n" + head + COLS + rows_text + "\n"


def test_two_ranks_on_one_gpu_measure_no_interconnect() -> None:
    r = one(shared_gpu(), profile="generic")
    assert r.status is Status.SKIP and codes(r) == ["nccl.allreduce/ranks-share-gpu"]
    assert r.summary == "ranks share a GPU (1 rank(s) on a GPU another rank uses): the run measures no interconnect"
    assert r.evidence[0] == "ranks 0 and 1 run on the same GPU: lab [0000:02:00]"
    assert r.remedy.startswith("give each rank its own GPU") and r.remedy.endswith("one rank per GPU in the launcher)")
    assert one(shared_gpu(wrong="7"), profile="generic").status is Status.FAIL  # wrong results still fail
    # other GPUs: another bus id, another device, or the bus number alone (older versions) say nothing
    for text in (shared_gpu().replace("device  0 [0000:02:00] NVIDIA GeForce RTX 5090\n#  Rank  1",
                                      "device  0 [0000:02:00] NVIDIA GeForce RTX 5090\n#  Rank  1", 1)
                 .replace("Pid 2994448 on        lab device  0 [0000:02:00]", "Pid 2994448 on        lab device  0 [0000:03:00]"),
                 shared_gpu(devices=(0, 1)), shared_gpu(bus="0x02"),
                 shared_gpu().replace("Pid 2994448 on        lab", "Pid 2994448 on       lab2")):
        assert "nccl.allreduce/ranks-share-gpu" not in codes(one(text, profile="generic")), text


def test_a_table_cut_before_its_first_row_is_skip_and_a_crash_before_it_error() -> None:
    head = PARAMS_LINE + "#\n# Using devices\n" + rank_lines(2, 1, "Tesla V100-SXM2-32GB", bus="0x00")
    r = one(head)
    assert r.status is Status.SKIP and codes(r) == ["nccl.allreduce/no-rows"]
    assert r.summary == "the table was cut before its first row: nothing was measured"
    r = one(head + "srun: error: gpu018: task 1: Segmentation fault (core dumped)\n")
    assert r.status is Status.ERROR and codes(r) == ["nccl.allreduce/crashed-before-rows"]
    assert r.summary == "nccl-tests died before its first result row"
    assert r.evidence == [PARAMS_LINE.strip(), "srun: error: gpu018: task 1: Segmentation fault (core dumped)"]
    assert r.remedy.startswith("read the signal and the lines above it") and r.remedy.endswith("NCCL_DEBUG=INFO")
    r = one("mpirun noticed that process rank 3 with PID 0 on node gpu018 exited on signal 11 (Segmentation fault).\n"
            "# Using devices\n")
    assert codes(r) == ["nccl.allreduce/crashed-before-rows"] and r.evidence[0].startswith("mpirun noticed")
    # a failure message of the binary says more than the signal
    r = one(head + "gpu018: Test CUDA failure common.cu:892 'out of memory'\nAborted (core dumped)\n")
    assert codes(r) == ["nccl.allreduce/test-failure"]


def test_a_process_that_died_after_rows_aborted_the_run() -> None:
    text = table(2, 8, 470.0, hi=1 << 30, footer=False) + f"{2 << 30:12d}  {(2 << 30) // 4:12d}     float     sum      -1\n"
    r = one(text + "[gpu018:04108] *** Process received signal ***\n[gpu018:04108] Signal: Segmentation fault (11)\n")
    assert r.status is Status.FAIL and codes(r) == ["nccl.allreduce/aborted"]
    assert r.summary == "the run stopped after its process died during the 2 GB all-reduce"
    assert r.evidence[:2] == ["[gpu018:04108] *** Process received signal ***",
                              "[gpu018:04108] Signal: Segmentation fault (11)"]
    r = one(text + "gpu018:4108:4190 [0] NCCL WARN NET/IB : Got completion with status=12\n")
    assert r.summary == "the run stopped after an NCCL WARN during the 2 GB all-reduce"
    r = one(table(2, 8, 470.0, hi=1 << 30, footer=False) + "Bus error (core dumped)\n")
    assert r.summary == "the run stopped after its process died"


def test_headerless_rows_then_failure_lines_fail() -> None:
    rows_text = "\n".join(row(s, t, 16) for s, t in curve(16, 367.0, lo=1 << 30, hi=16 << 30))
    text = ("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  "
            "(GB/s)\n" + rows_text + "\nHCA-128: Test NCCL failure common.cu:1204 'unhandled cuda error (run with "
            "NCCL_DEBUG=INFO for details) / '\n .. HCA-128 pid 757466: Test failure common.cu:915\n")
    r = one(text, profile="generic")
    assert r.status is Status.FAIL and codes(r) == ["nccl.allreduce/test-failure", NO_TABLE]
    assert r.evidence[:2] == ["HCA-128: Test NCCL failure common.cu:1204 'unhandled cuda error (run with "
                              "NCCL_DEBUG=INFO for details) / '", ".. HCA-128 pid 757466: Test failure common.cu:915"]


def test_ambiguous_table_names_every_candidate() -> None:
    text = fixture_text("nccl-tests/all_gather_perf_1node_8xH100_2.17_named.txt")
    text = text.replace("# Collective test starting: all_gather_perf\n", "").replace(
        "# Collective test concluded: all_gather_perf\n", "")
    res = parse_nccl_tests(text)
    assert grader._label(res, "") == "all_gather or alltoall or alltoallv"
    assert grader._label(res, "all_reduce") == "all-reduce" and grader._label(res, "scatter") == "scatter"


def test_the_other_runs_of_a_capture_fail_it_too() -> None:
    ar = table(1, 8, 470.0, lo=1 << 30)
    ag = fixture_text("nccl-tests/all_gather_perf_1node_8xH100_2.17_named.txt")
    assert one(ar + ag).status is Status.PASS and one(ar + ag).summary.startswith("all-reduce peak busbw")
    bad = ag.replace("  4294967296     134217728     float    none      -1    10368  414.24  362.46      0",
                     "  4294967296     134217728     float    none      -1    10368  414.24  362.46     12")
    r = one(ar + bad)
    assert r.status is Status.FAIL and codes(r) == ["nccl.allreduce/wrong-results"]
    assert r.summary == "all_gather returned wrong results (12 wrong elements)"
    r = one(ar + ag.replace("# Out of bounds values : 0 OK", "# Out of bounds values : 1 FAILED"))
    assert codes(r) == ["nccl.allreduce/out-of-bounds"]
    # a run that failed before its rows, after the graded one
    r = one(ar + "# Collective test starting: alltoall_perf\n" + PARAMS_LINE +
            "gpu017: Test NCCL failure common.cu:1005 'unhandled system error'\n")
    assert r.status is Status.FAIL and codes(r) == ["nccl.allreduce/test-failure"]
    # a run that stopped after a WARN; a finished one with a WARN among its rows did not
    cut = ag.split("# Out of bounds")[0]
    warn = "gpu-c031:91844:91990 [3] NCCL WARN NET/IB : Got completion from peer with status=12\n"
    r = one(ar + cut + warn)
    assert r.status is Status.FAIL and codes(r) == ["nccl.allreduce/aborted"]
    assert r.summary == "the run stopped after an NCCL WARN"
    assert one(ar + cut + warn + "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 357.849\n").status \
        is Status.PASS
    r = one(ar + "# Collective test starting: reduce_scatter_perf\n" + cut.split("# Collective test starting")[1]
            .split("\n", 1)[1].replace("    none  ", "     sum  ") + "Segmentation fault (core dumped)\n")
    assert codes(r) == ["nccl.allreduce/aborted"] and r.summary == "the run stopped after its process died"


def test_a_table_the_paster_cut_and_said_so_is_graded_on_its_rows() -> None:
    t = table(1, 8, 470.0, lo=1 << 30, hi=8 << 30)
    lines = t.split("\n")
    first_row = next(i for i, ln in enumerate(lines) if ln.strip().startswith(str(1 << 30)))
    note = "# Truncated  smaller message sizes"
    edited = "\n".join([*lines[:first_row], note, *lines[first_row:]])
    edited = re.sub(r"# Avg bus bandwidth    : [\d.]+", "# Avg bus bandwidth    : 301.5", edited)
    res = parse_nccl_tests(edited)
    assert res.edits == [note] and len(res.rows) == 4
    r = one(edited)
    assert r.status is Status.PASS and codes(r) == []  # a PASS code is a note
    assert ("the printed Avg bus bandwidth 301.5 covers rows the paste left out (Truncated  smaller message sizes): "
            "graded on the rows shown") in r.evidence
    same_avg = re.sub(r"# Avg bus bandwidth    : [\d.]+", "# Avg bus bandwidth    : 301.5", t)
    assert codes(one(same_avg)) == ["nccl.allreduce/avg-mismatch"]  # no note: an edit nobody owned up to
    units = parse_nccl_tests(t)
    assert units.edits == []  # the header's units line `#  (B)  (elements) ...` is no note
    after = parse_nccl_tests(t + "# my comment after the summary\n")
    assert after.edits == []


# ----------------------------------------------------------------------------- no expected busbw: said, never a PASS

V100 = "all_reduce_perf_8node_64xV100_v2.11_error_column_4GBs.txt"


def test_old_format_v100_across_eight_nodes_is_not_a_pass() -> None:
    """8 x 8 V100 at 4.3 GB/s: no table is for V100 (said), and across nodes that is under what one
    100 Gb/s NIC per node gives, whatever NIC the nodes have (the capture does not show it: WARN)."""
    [r] = allreduce(V100, profile="generic")
    assert r.status is Status.WARN
    assert codes(r) == ["nccl.allreduce/below-slowest-fabric", NO_TABLE]
    assert r.summary.startswith("peak busbw 4.33 GB/s across 8 hosts is under what one NIC of the slowest fabric GPU "
                                "nodes are built with gives (7.5 GB/s)")
    assert r.evidence[0].split()[:2] == ["536870912", "134217728"]
    assert r.evidence[1].startswith("nccl.allreduce.inter_node_min_busbw = 7.5 (the slowest fabric")
    assert "all-reduce peak busbw 4.33 GB/s, no expected busbw for Tesla V100-SXM2-32GB in profile generic" \
        in r.summary
    assert r.facts["ranks"] == 64 and len(r.facts["hosts"]) == 8 and r.facts["gpu_models"] == ["Tesla V100-SXM2-32GB"]
    # the H100 profile's own socket-speed figure (30 GB/s at >= 256 MB) reads it as a TCP fallback
    [r] = allreduce(V100, profile=H100)
    assert r.status is Status.FAIL and codes(r)[0] == "nccl.allreduce/tcp-fallback"


def test_slowest_fabric_rule_edges() -> None:
    text = fixture_text(f"nccl-tests/{V100}")
    # one 100G NIC's worth: no rule concludes, the bandwidth is not graded (SKIP)
    fast = text.replace("    4.31  1e-06", "   11.00  1e-06").replace("    4.32  1e-06", "   11.00  1e-06").replace(
        "    4.33  1e-06", "   11.00  1e-06").replace("2.19 ", "5.59 ").replace("2.20 ", "5.59 ")
    r = one(fast.replace("# Avg bus bandwidth", "# Avg bus-bandwidth"), "generic")
    assert r.status is Status.SKIP and codes(r) == [NO_TABLE]
    # at the figure itself: not under it
    at = table(2, 8, 7.5, lo=256 << 20, hi=1 << 30, model="Tesla V100-SXM2-32GB")
    assert "nccl.allreduce/below-slowest-fabric" not in codes(one(at, "generic"))
    under = table(2, 8, 7.4, lo=256 << 20, hi=1 << 30, model="Tesla V100-SXM2-32GB")
    assert "nccl.allreduce/below-slowest-fabric" in codes(one(under, "generic"))
    # only bandwidth-bound sizes count (plateau_min_bytes: 8 MB): a sweep that stops under it says nothing
    small = table(2, 8, 2.0, lo=8, hi=4 << 20, model="Tesla V100-SXM2-32GB")
    assert "nccl.allreduce/below-slowest-fabric" not in codes(one(small, "generic"))
    # one host: a network is not in the path
    one_host = table(1, 8, 4.0, lo=256 << 20, hi=1 << 30, model="Tesla V100-SXM2-32GB")
    assert "nccl.allreduce/below-slowest-fabric" not in codes(one(one_host, "generic"))
    # a table for the GPUs grades them instead
    assert codes(one(table(2, 8, 4.0, lo=1 << 30, model=H100_NAME))) == ["nccl.allreduce/tcp-fallback",
                                                                        "nccl.allreduce/peak-below-floor"]


def test_no_gpu_named_meets_every_table_or_is_said() -> None:
    """A table without its rank lines: at or over the highest figure of every table for the topology
    it shows (the NVLS ones only when NVLS is shown) it passes; under it, no expectation (SKIP)."""
    bare = "\n".join(ln for ln in table(2, 8, 380.0, lo=1 << 30).splitlines() if "Rank" not in ln)
    r = one(bare, "generic")
    assert r.status is Status.PASS and r.facts["table"] == "none"
    assert any(e.startswith(f"no expected busbw for what the capture shows, but peak busbw {r.facts['peak_busbw']:g} "
                            "GB/s meets the highest applicable figure preflight holds (368, board HGX/DGX H100 or "
                            "H200") for e in r.evidence)
    low = "\n".join(ln for ln in table(2, 8, 360.0, lo=1 << 30).splitlines() if "Rank" not in ln)
    assert one(low, "generic").status is Status.SKIP
    # NVLS shown in use: its figure (430) is the one to meet
    assert one("NCCL_ALGO=NVLS\n" + bare, "generic").status is Status.SKIP
    assert grader._known_figures(profiles.load("generic"), grader.Topology(None, None, [], 16), True)[0][0] == 330.0
    assert max(grader._known_figures(profiles.load("generic"), grader.Topology(None, None, [], 16), True))[0] == 430.0
    assert max(grader._known_figures(profiles.load("generic"), grader.Topology(False, 8, [], 8), False))[0] == 330.0


def test_multi_node_run_of_untabled_gpus_meets_the_multi_node_figures() -> None:
    """GPUs no table names across nodes: the figure to meet is the highest multi-node one (368), not
    the single-node ones (330); between them no rule concludes."""
    fast = one(table(2, 8, 380.0, lo=1 << 30, model="Tesla V100-SXM2-32GB"), "generic")
    assert fast.status is Status.PASS and codes(fast) == []
    assert fast.evidence[-1].endswith("meets the highest applicable figure preflight holds (368, board HGX/DGX H100 or "
                                      "H200, 8 GPUs on NVSwitch, 8 x 400G NDR multi_node_peak_busbw_warn)")
    between = one(table(2, 8, 350.0, lo=1 << 30, model="Tesla V100-SXM2-32GB"), "generic")
    assert between.status is Status.SKIP and codes(between) == [NO_TABLE]
    assert [src for _, src in grader._known_figures(profiles.load("generic"), grader.Topology(True, 8, [], 16),
                                                    False)] == ["board HGX/DGX H100 or H200, 8 GPUs on NVSwitch, "
                                                                "8 x 400G NDR multi_node_peak_busbw_warn"]


def test_unread_nccl_tests_error_line_is_said() -> None:
    line = "Unable to register symmetric memory window on rank 3: falling back to a regular buffer"
    text = table(1, 8, 470.0, lo=1 << 30).replace("# Using devices\n", line + "\n# Using devices\n", 1)
    r = one(text)
    assert r.status is Status.WARN and codes(r) == ["nccl.allreduce/unread-error"]
    assert r.summary == f"nccl-tests error line not in preflight's inventory of nccl-tests messages: {line}"
    assert r.evidence[0] == line
    # before any row: said with the run's missing rows
    r = one("# nThread 1 nGpus 8 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20 validation: 1\n"
            + line + "\n")
    assert r.status is Status.WARN and codes(r) == ["nccl.allreduce/unread-error", "nccl.allreduce/no-rows"]
    # a known failure of the binaries is read as one (no unread-error)
    r = one(table(1, 8, 470.0, lo=1 << 30) + "Device implementation 2 is not supported by this test\n")
    assert codes(r) == ["nccl.allreduce/test-failure"]
    # an option note is not an error: the run passes
    r = one("Option -m not supported before NCCL 2.2. Ignoring\n" + table(1, 8, 470.0, lo=1 << 30))
    assert r.status is Status.PASS


def test_healthy_tables_with_launcher_noise_stay_clean() -> None:
    noise = ("[gpu01:1234] 7 more processes have sent help message help-mpi-btl-openib.txt / error in device init\n"
             "--------------------------------------------------------------------------\n"
             "WARNING: There was an error initializing an OpenFabrics device.\n"
             "--------------------------------------------------------------------------\n")
    assert one(noise + table(1, 8, 470.0, lo=1 << 30)).status is Status.PASS


def test_cpu_ranks_only_where_no_table_applies() -> None:
    """cpu-ranks (a PASS note) stands for no-table only: a profile with its own table grades the
    sweep's CPU ranks against it, and GPUs without a table stay no-table (SKIP)."""
    generic = profiles.load("generic")
    topo = grader.Topology(False, 4, ["cpu"], 4)
    assert [c for c, _ in grader._table_expectation(generic, topo, False, cpu=True).notes] == \
        ["nccl.allreduce/cpu-ranks"]
    assert [c for c, _ in grader._table_expectation(generic, topo, False).notes] == [NO_TABLE]
    assert policy.status("nccl.allreduce/cpu-ranks") is Status.PASS
