"""preflight.parsers.nccl_tests: every layout nccl-tests and rccl-tests print, read exactly."""

from __future__ import annotations

import pytest

from preflight.framing import Doc, frame
from preflight.parsers import nccl_tests as nt
from preflight.parsers.nccl_tests import NcclTestRow, NcclTests, parse_nccl_tests
from tests.conftest import fixture_text

COLS = ("#                                                              out-of-place                       in-place\n"
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   "
        "busbw #wrong\n"
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  "
        "(GB/s)\n")
PARAMS = ("# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
          "validation: 1 graph: 0\n")
ROW_1G = "  1073741824     268435456     float     sum      -1   4484.9  239.41  448.90      0   4470.2  240.20  450.37      0"


def parsed(text: str) -> NcclTests:
    """As analyze reads it: framing peeled, then the parser."""
    docs = frame(text).docs
    return nt.parse(docs[0] if len(docs) == 1 else Doc.join(docs))


def cells(r: NcclTestRow) -> tuple:
    return (r.bytes, r.count, r.dtype, r.time_us, r.algbw, r.busbw, r.wrong, r.ip_time_us, r.ip_algbw, r.ip_busbw,
            r.ip_wrong, r.redop, r.root)


# ----------------------------------------------------------------------------- rows and layouts

def test_rows_ranks_and_summary_of_the_current_layout() -> None:
    res = parsed(fixture_text("nccl-tests/all_reduce_perf_1node_8xH100_nvls.txt"))
    assert len(res.rows) == 14 and res.rows[0].bytes == 1 << 20 and res.rows[-1].bytes == 8 << 30
    assert res.hosts == ["gpu-c031"] and len(res.ranks) == 8 and res.per_host == {"gpu-c031": 8}
    assert res.ranks[0] == {"rank": 0, "group": 0, "pid": res.ranks[0]["pid"], "host": "gpu-c031", "device": 0,
                            "bus": res.ranks[0]["bus"], "model": "NVIDIA H100 80GB HBM3"}
    assert res.oob_values == 0 and res.oob_line.startswith("# Out of bounds values")
    assert res.avg_busbw is not None and abs(sum(res.busbw_cells()) / len(res.busbw_cells()) - res.avg_busbw) < 0.01
    assert res.program == "all_reduce_perf" and res.collective() == "all_reduce"
    assert res.nccl_version == "2.21.5" and res.tables == [res]
    assert res.rank_count() == 8 and res.complete_listing and res.validated


def test_row_cells_of_the_2_13_layout() -> None:
    res = parse_nccl_tests(PARAMS + COLS + ROW_1G + "\n")
    assert [cells(r) for r in res.rows] == [(1073741824, 268435456, "float", 4484.9, 239.41, 448.9, 0, 4470.2, 240.2,
                                            450.37, 0, "sum", -1)]
    assert res.rows[0].line == ROW_1G.strip() and res.columns[:4] == ["time", "algbw", "busbw", "#wrong"]
    assert res.params == {"nthread": 1, "ngpus": 1, "min_bytes": 8, "max_bytes": 8589934592, "step": 2,
                          "warmup_iters": 5, "iters": 20, "agg_iters": 1, "validation": 1, "graph": 0}


def test_layout_before_2_13_error_column_is_a_delta_and_no_root() -> None:
    res = parsed(fixture_text("nccl-tests/all_reduce_perf_1node_8xA100_v2.9_error_column.txt"))
    first, last = res.rows[0], res.rows[-1]
    assert (first.bytes, first.redop, first.root, first.wrong, first.ip_wrong) == (8, "sum", None, None, None)
    assert last.bytes == 4 << 30 and last.busbw is not None and last.busbw > 200
    assert res.wrong_is_delta and res.validated
    assert res.ranks[0]["group"] == 0 and res.ranks[0]["pid"] == 30217 and res.ranks[0]["bus"] == "0x07"
    assert res.ranks[0]["model"] == "NVIDIA A100-SXM4-80GB" and res.params["validation"] == 1
    assert "agg_iters" not in res.params and res.collective() == "all_reduce"


def test_layout_1x_ms_times_res_column_and_summary_without_hash() -> None:
    res = parsed(fixture_text("nccl-tests/all_reduce_perf_1.x_4xP100_ms_res.txt"))
    r = res.rows[0]
    assert r.bytes == 1 << 20 and r.time_us == pytest.approx(121.0) and r.ip_time_us == pytest.approx(122.0)
    assert r.wrong is None and res.wrong_is_delta
    assert res.header.startswith("nThread 1 nGpus 4") and res.params["ngpus"] == 4
    assert res.ranks[3] == {"rank": 3, "group": 0, "pid": 0, "host": "node12", "device": 3, "bus": "0x09",
                            "model": "Tesla P100-SXM2-16GB"}
    assert res.oob_values == 0 and res.avg_busbw == pytest.approx(19.3463)


def test_per_iteration_columns_and_time_stamps() -> None:
    text = ("# nccl-tests version 2.19.6 nccl-headers=22903 nccl-library=22903\n"
            "# Collective test starting: all_reduce_perf\n" + PARAMS +
            "# Per-Iteration Report: CUDA event timing; i_* uses max over process rows \n#\n"
            "#                       out-of-place (+ per-iteration)                       in-place (+ per-iteration)\n"
            "#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    i_max"
            "    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%"
            "           timestamp\n"
            "  1073741824     268435456     float     sum      -1   3958.2  271.27  474.72       0   3941.0   3990.4"
            "   3990.4     0.31   3962.0  271.01  474.27       2   3944.1   3996.0   3996.0     0.35  2026-11-20 14:02:11\n"
            "# Out of bounds values : 1 FAILED\n# Avg bus bandwidth    : 474.495 \n#\n"
            "# Collective test concluded: all_reduce_perf\n")
    res = parse_nccl_tests(text)
    assert [cells(r) for r in res.rows] == [(1073741824, 268435456, "float", 3958.2, 271.27, 474.72, 0, 3962.0,
                                            271.01, 474.27, 2, "sum", -1)]
    assert res.nccl_version == "2.29.3" and res.concluded and res.oob_values == 1
    assert res.columns.count("i_cv%") == 2 and res.program == "all_reduce_perf"


def test_cputime_header_and_16_values_without_header() -> None:
    head = COLS.replace("time", "cputime")
    res = parse_nccl_tests(head + ROW_1G + "\n")
    assert res.rows[0].time_us == 4484.9 and res.columns[0] == "cputime"
    row16 = ("  1073741824     268435456     float     sum      -1   3958.2  271.27  474.72       0   3941.0   3990.4"
             "   3990.4     0.31   3962.0  271.01  474.27       0   3944.1   3996.0   3996.0     0.35\n")
    res = parse_nccl_tests(row16)
    assert (res.rows[0].time_us, res.rows[0].ip_time_us, res.rows[0].ip_busbw) == (3958.2, 3962.0, 474.27)


def test_rccl_in_place_only_version_line_and_pci_ids() -> None:
    res = parsed(fixture_text("nccl-tests/rccl_all_reduce_perf_1node_8xMI300X_inplace_only.txt"))
    r = res.rows[0]
    assert (r.time_us, r.busbw, r.wrong) == (None, None, None) and r.ip_busbw is not None and r.ip_wrong == 0
    assert res.ranks[0]["bus"] == "0000:0c:00.0" and res.ranks[0]["model"] == "AMD Instinct MI300X"
    assert any(n.startswith("rccl-tests: Version") for n in res.notes)
    assert any("Errors with asterisks" in n for n in res.notes)
    assert res.collective() == "all_reduce" and res.rank_count() == 8


def test_single_block_rows_and_bad_cells() -> None:
    text = (PARAMS +
            "#       size         count      type   redop    root     time   algbw   busbw #wrong\n"
            "           8             2     float     sum      -1    24.11    0.00    0.00      0\n"
            "          16             4     float     sum      -1    23.90    0.00    0.00    N/A\n"
            "          32             8     float     sum      -1    22.00    0.00    0.00    0    22.1  0.00  0.00  oops\n"
            "          64            16     float     sum      -1    24.0    x    0.00    0\n")
    res = parse_nccl_tests(text)
    assert [(r.bytes, r.time_us, r.wrong, r.ip_time_us) for r in res.rows] == [(8, 24.11, 0, None), (16, 23.9, None, None)]
    assert len(res.bad_rows) == 2 and res.bad_rows[0].startswith("32 ")
    assert res.recognised


@pytest.mark.parametrize(("tok", "delta", "want"), [("0", False, 0), ("4096", False, 4096), ("1e+06", False, 1000000),
                                                    ("N/A", False, None), ("0.5", False, None), ("-1", False, None),
                                                    ("7", True, None), ("nan", False, None)])
def test_wrong_cells(tok: str, delta: bool, want: int | None) -> None:
    assert nt._wrong(tok, delta) == want


def test_number_cells() -> None:
    assert [nt._f(t) for t in ("1.5", "2e+03", "nan", "inf", "-inf", "x")] == [1.5, 2000.0, None, None, None, None]
    assert [nt._is_num(t) for t in ("1", "-1", "1.", ".5", "1e-07", "N/A", "n/a", "-nan", "x1", "1x", "")] == \
        [True, True, True, True, True, True, True, True, False, False, False]


def test_in_place_only_header_maps_the_block_to_in_place() -> None:
    head = ("#                                                        in-place\n"
            "#       size         count      type   redop    root     time   algbw   busbw #wrong\n")
    res = parse_nccl_tests(head + "  1073741824     268435456     float     sum      -1    9012.3  119.14  208.50      0\n")
    r = res.rows[0]
    assert (r.time_us, r.ip_time_us, r.ip_busbw, r.ip_wrong) == (None, 9012.3, 208.5, 0)


# ----------------------------------------------------------------------------- rows cut and interleaved

def test_rows_cut_by_nccl_lines_wrapped_and_tagged() -> None:
    text = (PARAMS + COLS +
            "   134217728      33554432     float     sum      -1gpu-a01:11001:11020 [0] NCCL INFO Channel 00/1 : 0[0] -> "
            "1[1] via P2P/CUMEM\n"
            "gpu-a01:11002:11021 [1] NCCL INFO Connected all rings, use ring PXN 0 GDR 1\n"
            "    613.3  218.85  218.85      0    614.3  218.48  218.48      0\n"
            "   268435456      67108864     float     sum      -1   1139.2  235.63  235.63      0\n"
            "   1134.8  236.56  236.56      0\n"
            "[0]   536870912     134217728     float     sum      -1[0]    2175.8  246.75  246.75      0[0]    2181.4  "
            "246.11  246.11      0\n"
            "  1073741824     268435456     float     sum      -1    4038.8  265.85  265.85      0gpu-a01:11001:11020 [0] "
            "NCCL INFO comm 0x1 rank 0 nranks 2 - Destroy COMPLETE\n"
            "    4043.6  265.54  265.54      0\n"
            "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 241.71\n")
    res = parse_nccl_tests(text)
    assert [(r.bytes, r.time_us, r.busbw, r.ip_time_us, r.ip_busbw) for r in res.rows] == [
        (134217728, 613.3, 218.85, 614.3, 218.48), (268435456, 1139.2, 235.63, 1134.8, 236.56),
        (536870912, 2175.8, 246.75, 2181.4, 246.11), (1073741824, 4038.8, 265.85, 4043.6, 265.54)]
    assert res.bad_rows == [] and res.stopped_at is None and res.warns == []
    assert res.rows[0].line.endswith("218.48      0")


def test_wrapped_row_without_header_and_info_between() -> None:
    text = ("  1073741824     268435456     float     sum      -1   4484.9  239.41  448.90      0\n"
            "node1:1:2 [0] NCCL INFO Using network IB\n"
            "     4470.2  240.20  450.37      0\n"
            "  2147483648     536870912     float     sum      -1   8729.8  245.99  461.24      0   8717.2  246.35  461.91"
            "      0\n")
    res = parse_nccl_tests(text)
    assert [(r.bytes, r.ip_time_us) for r in res.rows] == [(1073741824, 4470.2), (2147483648, 8717.2)]


def test_output_ending_inside_a_row_and_warn_after_rows() -> None:
    text = (PARAMS + COLS + ROW_1G + "\n"
            "  2147483648     536870912     float     sum      -1\n"
            "node2:881:902 [3] NCCL WARN NET/IB : Got completion from peer 10.0.0.7<51214> with error 12, opcode 0\n"
            "node2: Test NCCL failure common.cu:1005 'remote process exited or there was a network error / '\n"
            " .. node2 pid 881: Test failure common.cu:1154\n")
    res = parse_nccl_tests(text)
    assert len(res.rows) == 1 and res.stopped_at == 2147483648
    assert res.warns == [text.splitlines()[6]]
    assert res.errors == [text.splitlines()[7], text.splitlines()[8].strip()]
    assert res.after_rows == [res.warns[0], *res.errors]


def test_warns_before_rows_are_not_after_rows() -> None:
    res = parse_nccl_tests("node2:881:902 [3] NCCL WARN Cuda failure 'out of memory'\n" + PARAMS)
    assert res.warns and res.after_rows == [] and not res.rows


@pytest.mark.parametrize("line", [
    "gpu01: Test CUDA failure common.cu:892 'an illegal memory access was encountered'",
    " .. gpu01 pid 1234: Test failure common.cu:401",
    "gpu01: Test timeout (300s) common.cu:533",
    "Invalid number of GPUs: 8 requested but only 7 were found.",
    "[ERROR] The number of requested GPUs (8) is greater than the number of GPUs available (4) on node (mi-04)",
    "gpu01: Test NCCL failure common.cu:1005 'unhandled system error (run with NCCL_DEBUG=INFO for details) / '",
])
def test_failure_lines(line: str) -> None:
    res = parse_nccl_tests(PARAMS + line + "\n")
    assert res.errors == [line.strip()]


def test_mpi_help_lines_inside_the_rank_list_are_skipped() -> None:
    text = ("# Using devices\n"
            "#  Rank  0 Group  0 Pid  29262 on bm-h100-01 device  0 [0000:19:00] NVIDIA H100 80GB HBM3\n"
            "[bm-h100-01:29250] 15 more processes have sent help message help-btl-vader.txt / xpmem-make-failed\n"
            "#  Rank  1 Group  0 Pid  29263 on bm-h100-01 device  1 [0000:3b:00] NVIDIA H100 80GB HBM3\n"
            "NCCL version 2.26.2+cuda12.8\n" + COLS + ROW_1G + "\n")
    res = parse_nccl_tests(text)
    assert [r["rank"] for r in res.ranks] == [0, 1] and len(res.rows) == 1 and res.nccl_version == "2.26.2"
    assert len(res.tables) == 1


# ----------------------------------------------------------------------------- runs, names, environment

def test_two_runs_in_one_capture_each_with_its_binary() -> None:
    ag = ("  1073741824      16777216     float    none      -1   4101.1  261.82  245.45      0   4090.7  262.48  246.08"
          "      0\n")
    text = ("$ mpirun -np 16 ./build/all_gather_perf -b 1G -e 1G -g 1\n" + PARAMS + COLS + ag +
            "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 245.765\n"
            "$ mpirun -np 16 ./build/all_reduce_perf -b 1G -e 1G -g 1\n" + PARAMS + COLS + ROW_1G + "\n"
            "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 449.635\n")
    res = parsed(text)
    assert [(t.program, t.collective(), len(t.rows)) for t in res.tables] == [
        ("all_gather_perf", "all_gather", 1), ("all_reduce_perf", "all_reduce", 1)]
    assert res is res.tables[1] and res.avg_busbw == 449.635


def test_a_new_run_starts_at_its_parameters_header_rank_list_or_start_line() -> None:
    one = PARAMS + COLS + ROW_1G + "\n# Avg bus bandwidth    : 449.635\n"
    assert len(parse_nccl_tests(one + one).tables) == 2
    assert len(parse_nccl_tests(COLS + ROW_1G + "\n" + COLS + ROW_1G + "\n").tables) == 2
    rank = "#  Rank  0 Group  0 Pid  1 on h1 device  0 [0x18] NVIDIA H100 80GB HBM3\n"
    assert len(parse_nccl_tests(rank + COLS + ROW_1G + "\n" + rank + COLS + ROW_1G + "\n").tables) == 2
    start = "# Collective test starting: all_reduce_perf\n"
    assert len(parse_nccl_tests(start + COLS + ROW_1G + "\n" + start + COLS + ROW_1G + "\n").tables) == 2
    using = "# Using devices\n"
    assert len(parse_nccl_tests(using + COLS + ROW_1G + "\n" + using + COLS + ROW_1G + "\n").tables) == 2
    rccl = "rccl-tests: Version develop:7d1fa3c\n"
    assert len(parse_nccl_tests(rccl + COLS + ROW_1G + "\n" + rccl + COLS + ROW_1G + "\n").tables) == 2
    assert len(parse_nccl_tests(PARAMS + "#\n# Using devices\n" + rank + COLS + ROW_1G + "\n").tables) == 1


def test_the_primary_run_is_the_last_all_reduce() -> None:
    ar = COLS + ROW_1G + "\n"
    ag = "# Collective test starting: all_gather_perf\n" + COLS + ROW_1G + "\n"
    res = parse_nccl_tests(ar + ag)
    assert res.tables[0] is res and res.tables[1].program == "all_gather_perf"
    res = parse_nccl_tests(ag)
    assert res.program == "all_gather_perf"
    res = parse_nccl_tests(PARAMS + "# Using devices\n")
    assert res.header and not res.rows and res.tables == [res]


@pytest.mark.parametrize(("text", "collective"), [
    ("# Collective test starting: alltoall_perf\n", "alltoall"),
    ("mpirun -np 16 /opt/nccl-tests/build/all_reduce_perf_mpi -b 8 -e 8G\n", "all_reduce"),
    ("srun ./sendrecv_perf -b 1G\n", "sendrecv"),
    ("+ ./build/alltoallv_perf -g 8\n", "alltoallv"),
    ("./gather_perf -g 8\n", "gather"),
])
def test_binary_named_by_the_capture(text: str, collective: str) -> None:
    res = parse_nccl_tests(text + PARAMS + COLS + ROW_1G + "\n")
    assert res.collective() == collective


def test_binary_named_by_the_concluding_line() -> None:
    res = parse_nccl_tests(PARAMS + COLS + ROW_1G + "\n# Collective test concluded: reduce_scatter_perf\n")
    assert res.collective() == "reduce_scatter" and res.concluded


def test_a_first_line_that_reads_like_a_root_prompt_is_output() -> None:
    res = parsed("# nccl-tests version 2.17.1 nccl-headers=22703 nccl-library=22703\n" + PARAMS + COLS + ROW_1G)
    assert res.nccl_version == "2.27.3" and res.command == "" and len(res.rows) == 1


def test_binary_named_on_the_prompt() -> None:
    res = parsed("[root@gpu01 ~]# NCCL_IB_HCA=mlx5_0:1,mlx5_3:1 ./build/broadcast_perf -b 1G\n" + PARAMS + COLS + ROW_1G)
    assert res.program == "broadcast_perf" and res.collective() == "broadcast"
    assert res.ib_hcas == ["mlx5_0", "mlx5_3"] and "broadcast_perf" in res.command


def test_hcas_from_a_command_in_the_text() -> None:
    res = parse_nccl_tests("mpirun -x NCCL_IB_HCA=mlx5_0,mlx5_1 -np 2 ./all_reduce_perf\n" + COLS + ROW_1G + "\n")
    assert res.ib_hcas == ["mlx5_0", "mlx5_1"] and res.program == "all_reduce_perf"


def ag_row(n: int, redop: str = "none", root: int = -1, ratio: float | None = None, count_div: int | None = None) -> str:
    size = 1 << 30
    count = size // 4 // (count_div if count_div is not None else n)
    factor = ratio if ratio is not None else (n - 1) / n
    alg = 250.0
    return (f"{size:12d}  {count:12d}  {'float':>8s}  {redop:>6s}  {root:6d}  {size / alg / 1e3:7.1f}  {alg:6.2f}"
            f"  {alg * factor:6.2f}  {0:6d}  {size / alg / 1e3:7.1f}  {alg:6.2f}  {alg * factor:6.2f}  {0:6d}\n")


def ranks(n: int) -> str:
    return "".join(f"#  Rank {r:2d} Group  0 Pid {100 + r:6d} on {f'h{r // 8}':>10s} device {r % 8:2d} [0x18] "
                   "NVIDIA H100 80GB HBM3\n" for r in range(n))


@pytest.mark.parametrize(("body", "want", "fits"), [
    # size = count x 4 x n, no op, root -1: all_gather and alltoall print alike
    (ag_row(16), "", ("all_gather", "alltoall", "alltoallv")),
    (ag_row(16, ratio=1.0), "all_gather", ("all_gather",)),  # before 2.7: all_gather's busbw = algbw
    (ag_row(16, redop="sum", count_div=16), "reduce_scatter", ("reduce_scatter",)),
    (ag_row(16, redop="sum", count_div=16, ratio=1.0), "reduce_scatter", ("reduce_scatter",)),
    (ag_row(16, root=3), "", ("scatter", "gather")),
    (ag_row(16, redop="sum", count_div=1, ratio=1.875), "all_reduce", ("all_reduce",)),
    (ag_row(16, redop="sum", root=0, count_div=1, ratio=1.0), "reduce", ("reduce",)),
    (ag_row(16, redop="none", root=2, count_div=1, ratio=1.0), "broadcast", ("broadcast",)),
    (ag_row(16, redop="none", count_div=1, ratio=1.0), "", ()),  # no op, unrooted, size = count: none
    (ag_row(16, redop="sum", count_div=1, ratio=1.0), "sendrecv", ("sendrecv",)),  # factor 1 with 16 ranks
    (ag_row(16, redop="sum", count_div=1, ratio=0.9375), "", ()),  # a gather factor on a count-sized row
    (ag_row(16, redop="sum", count_div=8), "", ()),  # size = count x 4 x 8 while 16 ranks are listed
    (ag_row(16, redop="none", count_div=16, ratio=0.5), "", ()),  # the factor of 2 ranks, 16 listed
])
def test_collective_from_the_columns(body: str, want: str, fits: tuple[str, ...]) -> None:
    res = parse_nccl_tests(ranks(16) + COLS + body)
    assert res.collective() == want and res.candidates() == fits


def test_hypercube_prints_no_op_and_a_root() -> None:
    row = ("  1073741824      16777216     float              -1   4503.9  238.40  238.40      0   4517.4  237.69"
           "  237.69      0\n")
    res = parse_nccl_tests(ranks(16) + COLS + row)
    assert res.rows[0].redop == "" and res.rows[0].root == -1
    assert res.candidates() == ("hypercube",) and res.collective() == "hypercube" and res.size_factor() == 16
    # without the header the empty op column does not show: the factor 1 fits all_gather before 2.7 too
    res = parse_nccl_tests(ranks(16) + row)
    assert res.rows[0].redop is None and res.candidates() == ("all_gather", "reduce_scatter", "hypercube")


def test_rooted_1x_layout_without_an_op_column() -> None:
    head = ("#                                         out-of-place\n"
            "#      bytes             N    type    root     time  algbw  busbw      res\n")
    row = "    67108864      16777216   float       0    6.421  10.45  10.45    0e+00\n"
    res = parse_nccl_tests(ranks(4) + head + row)
    assert (res.rows[0].redop, res.rows[0].root, res.rows[0].time_us) == (None, 0, 6421.0)
    assert res.candidates() == ("broadcast", "reduce") and res.collective() == ""
    res = parse_nccl_tests("./build/broadcast_perf -b 64M -e 64M -g 4\n" + ranks(4) + head + row)
    assert res.collective() == "broadcast" and res.cmd_ranks == 4


def test_size_factor_gives_the_rank_count_of_total_size_collectives() -> None:
    res = parse_nccl_tests(COLS + ag_row(16))
    assert res.size_factor() == 16 and res.listed() == 0 and res.candidates() == ("all_gather", "alltoall",
                                                                                  "alltoallv")
    res.named = "alltoall"
    assert res.collective() == "alltoall" and res.rank_count() == 16
    res = parse_nccl_tests("# Collective test starting: all_gather_perf\n" + ranks(2) + COLS + ag_row(16))
    assert res.rank_count() == 16 and not res.complete_listing
    res = parse_nccl_tests("# Collective test starting: all_gather_perf\n" + ranks(16) + COLS + ag_row(16))
    assert res.rank_count() == 16 and res.complete_listing
    # the largest row with a known type and count decides; rows of count 0 say nothing
    zero = "           0             0     float    none      -1    12.97    0.00    0.00      0    12.86    0.00    0.00    0\n"
    assert parse_nccl_tests(COLS + zero + ag_row(4)).size_factor() == 4
    assert parse_nccl_tests(COLS + zero).size_factor() is None
    assert parse_nccl_tests(COLS + ag_row(4).replace("float", "bogus")).size_factor() is None
    odd = "        1000           3     float    none      -1    12.97    0.00    0.00      0    12.86    0.00    0.00    0\n"
    assert parse_nccl_tests(COLS + odd).size_factor() is None
    small = "         512           128     float    none      -1    12.97    0.04    0.04      0    12.86    0.04    0.04    0\n"
    assert parse_nccl_tests(COLS + small + ag_row(2)).size_factor() == 2


def test_collective_from_the_columns_without_rank_list() -> None:
    assert parse_nccl_tests(COLS + ag_row(2, redop="sum", count_div=1, ratio=1.0)).collective() == "all_reduce"
    assert parse_nccl_tests(COLS + ag_row(8, redop="sum", count_div=1, ratio=0.875)).collective() == ""
    assert parse_nccl_tests(COLS + ag_row(8, redop="sum", count_div=1, ratio=1.75)).collective() == "all_reduce"
    small = "           8             2     float     sum      -1    24.11    0.00    0.00      0    24.0   0.00   0.00  0\n"
    assert parse_nccl_tests(COLS + small).collective() == "all_reduce"  # nothing says otherwise
    odd = small.replace("float", "bogus")
    assert parse_nccl_tests(COLS + odd).collective() == "all_reduce"
    assert NcclTests().collective() == ""


def test_rank_count_from_a_partial_listing_and_from_the_ratio() -> None:
    last = "#  Rank 71 Group  0 Pid  14840 on slurm-gb200-207-171 device  3 [0x01] NVIDIA Graphics Device\n"
    res = parse_nccl_tests(last + COLS + ag_row(72, redop="sum", count_div=1, ratio=2 * 71 / 72))
    assert res.rank_count() == 72 and not res.complete_listing and res.hosts == ["slurm-gb200-207-171"]
    res = parse_nccl_tests(ranks(1) + COLS + ag_row(8, redop="sum", count_div=1, ratio=1.75))
    assert res.rank_count() == 8 and not res.complete_listing  # one line of eight
    res = parse_nccl_tests(ranks(16) + COLS + ag_row(16, redop="sum", count_div=1, ratio=1.875))
    assert res.rank_count() == 16 and res.complete_listing
    assert parse_nccl_tests(COLS + ag_row(16, redop="sum", count_div=1, ratio=1.875)).rank_count() == 16
    assert NcclTests().rank_count() is None and not NcclTests().complete_listing
    assert parse_nccl_tests(COLS + ag_row(16)).ratio_ranks() is None


def test_versions_environment_and_nvls() -> None:
    res = parse_nccl_tests("gpu1:1:2 [0] NCCL INFO NCCL version 2.18.1+cuda12.1\n"
                           "gpu1:1:2 [0] NCCL INFO NCCL_ALGO set by environment to NVLSTree\n"
                           "gpu1:1:2 [0] NCCL INFO NVLS multicast support is available on dev 0\n" + COLS + ROW_1G)
    assert (res.nccl_version, res.algo, res.nvls) == ("2.18.1", "NVLSTree", True)
    res = parse_nccl_tests("gpu1:1:2 [0] NCCL INFO NVLS multicast support is not available on dev 0\n"
                           "gpu1:1:2 [1] NCCL INFO NVLS multicast support is available on dev 1\n")
    assert res.nvls is False
    res = parse_nccl_tests("export NCCL_NVLS_ENABLE=0\nexport NCCL_ALGO=RING\n" + COLS + ROW_1G)
    assert (res.nvls, res.algo) == (False, "RING")
    res = parsed("[root@n1 ~]# mpirun -x NCCL_ALGO=Ring -x NCCL_NVLS_ENABLE=1 ./all_reduce_perf\n" + COLS + ROW_1G)
    assert (res.nvls, res.algo) == (True, "Ring")
    res = parse_nccl_tests("gpu1:1:2 [0] NCCL INFO NVLS comm 0x55a7be5601c0 headRank 0 nHeads 8 buffSize 4194304\n")
    assert res.nvls is True
    assert parse_nccl_tests(COLS + ROW_1G).nvls is None


def test_summary_lines() -> None:
    res = parse_nccl_tests(COLS + ROW_1G + "\n# Out of bounds values : 3 FAILED\n"
                           "# Avg bus bandwidth    : 449.635 FAILED\n#\n")
    assert (res.oob_values, res.avg_busbw, res.avg_check) == (3, 449.635, "FAILED")
    res = parse_nccl_tests(COLS + ROW_1G + "\n# Avg bus bandwidth    : -nan \n")
    assert res.avg_busbw is None and res.avg_line
    res = parse_nccl_tests(COLS + ROW_1G + "\n# Avg bus bandwidth    : 449.6 OK\n")
    assert res.avg_check == "OK"


def test_notes_the_binary_prints_about_its_run() -> None:
    lines = ["# Reducing maxBytes to 17179869184 due to memory limitation",
             "# Blocking Enabled: wait for completion and barrier after each collective ",
             "# Parallel Init Enabled: threads call into NcclInitRank concurrently ",
             "# Testing 2 cycle.", "# GPU memory usage     : Initialization 1.2 GB | Total  9.5 GB",
             "# error: remote process exited or there was a network error"]
    res = parse_nccl_tests("\n".join(lines) + "\n# just a comment\n")
    assert res.notes == [ln.strip() for ln in lines]


def test_rank_line_variants() -> None:
    text = ("#  Rank  0 Group  0 Pid  11 on      gpu-1 device  0 [0000:1b:00] NVIDIA H100 80GB HBM3\n"
            "#   Rank  1 Pid     12 on      gpu-1 device  1 [0x2a] NVIDIA H100 80GB HBM3\n"
            "#   Rank  2 on      gpu-1 device  2 [0x3a] NVIDIA H100 80GB HBM3\n"
            "#   Rank  3 Pid  13 on gpu-1 device  3 [0000:c1:00.0] AMD Instinct MI250X\n"
            "#  Rank  4 Group  2 Pid  14 on gpu-1 device  4 [0x4a] NVIDIA H100 80GB HB...\n")
    res = parse_nccl_tests(text)
    assert [(r["rank"], r["group"], r["pid"], r["bus"], r["model"]) for r in res.ranks] == [
        (0, 0, 11, "0000:1b:00", "NVIDIA H100 80GB HBM3"), (1, 0, 12, "0x2a", "NVIDIA H100 80GB HBM3"),
        (2, 0, 0, "0x3a", "NVIDIA H100 80GB HBM3"), (3, 0, 13, "0000:c1:00.0", "AMD Instinct MI250X"),
        (4, 2, 14, "0x4a", "NVIDIA H100 80GB HB")]


def test_not_validated_runs() -> None:
    na = ROW_1G.replace("      0", "    N/A")
    assert not parse_nccl_tests(COLS + na + "\n").validated
    assert not parse_nccl_tests(PARAMS.replace("validation: 1", "validation: 0") + COLS + ROW_1G + "\n").validated
    assert parse_nccl_tests(COLS + ROW_1G + "\n").validated and NcclTests().validated


def test_garbage_gives_empty_facts() -> None:
    for text in ("", "garbage\n" * 5, "\x00", "1 2\n", "#\n#\n"):
        res = parse_nccl_tests(text)
        assert not res.recognised and res.rows == [] and res.tables == [res]
    assert parse_nccl_tests("# nThread 1 nGpus 8\n").recognised


# ----------------------------------------------------------------------------- detection

@pytest.mark.parametrize("line", [
    "# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20",
    "nThread 1 nGpus 4 minBytes 1048576 maxBytes 4194304 step: 2(factor) warmup iters: 5 iters: 20 validation: 1",
    "# Avg bus bandwidth    : 439.369", " Avg bus bandwidth    : 20.5067",
    "# Using devices", "# Collective test starting: all_reduce_perf", "# Collective test concluded: all_reduce_perf",
    "# nccl-tests version 2.19.6 nccl-headers=22903 nccl-library=22903", "rccl-tests: Version develop:7d1fa3c",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw",
    "#       bytes             N    type      op     time  algbw  busbw      res     time  algbw  busbw      res",
    "#       size         count      type   redop    root  cputime   algbw   busbw #wrong  cputime   algbw   busbw",
])
def test_detect(line: str) -> None:
    assert nt.detect(Doc(line + "\n"))


@pytest.mark.parametrize("text", [
    "#  Rank  1 Group  0 Pid   4940 on ai-worker03 device  0 [0x61] NVIDIA L40\n"
    "ai-worker03:4940:4990 [0] NCCL INFO NET/IB : Using [0]irdma0:1/RoCE\n",
    "size count type\n", "Avg bus bandwidth is what we want\n", "",
])
def test_not_detected(text: str) -> None:
    assert not nt.detect(Doc(text))


def test_version_code() -> None:
    assert nt._version_of_code(22903) == "2.29.3" and nt._version_of_code(21805) == "2.18.5"
    assert nt._version_of_code(2908) == "" and nt._version_of_code(10000) == "1.0.0"


def test_a_single_rank_table_is_an_all_reduce_of_factor_0() -> None:
    row = "  1073741824     268435456     float     sum      -1   2386.1  450.00    0.00       0   2386.1  450.00    0.00  0\n"
    res = parse_nccl_tests(COLS + row)
    assert res.bw_ratio() == 0.0 and res.ratio_ranks() is None and res.collective() == "all_reduce"


def test_detected_after_a_long_info_log() -> None:
    info = "".join(f"gpu01:1234:{1300 + i} [{i % 8}] NCCL INFO Channel {i % 32:02d}/0 : {i % 8}[{i % 8}] -> "
                   f"{(i + 1) % 8}[{(i + 1) % 8}] via P2P/CUMEM\n" for i in range(600))
    assert nt.detect(Doc(info + COLS + ROW_1G + "\n"))
    assert nt.detect(Doc(info + "# Avg bus bandwidth    : 449.6\n"))
    assert not nt.detect(Doc(info + "algbw is what we want\n"))
    assert not nt.detect(Doc(info))


# ----------------------------------------------------------------------------- pastes without a header

UNITS = ("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  "
         "(GB/s)\n")
ROW_2G = "  2147483648     536870912     float     sum      -1   8060.1  266.43  466.26      0   8084.3  265.64  464.86      0"
INFO = "".join(f"gpu01:1234:{1300 + i} [{i % 8}] NCCL INFO Channel {i % 32:02d}/0 : {i % 8}[{i % 8}] -> "
               f"{(i + 1) % 8}[{(i + 1) % 8}] via P2P/CUMEM\n" for i in range(600))


@pytest.mark.parametrize("text", [
    UNITS,  # the paste starts at the units row
    ROW_1G + "\n" + ROW_2G + "\n",  # two rows, no header
    "gpu018: Test NCCL failure common.cu:1204 'unhandled cuda error (run with NCCL_DEBUG=INFO for details) / '\n",
    "gpu018: Test NCCL failure common.cu:775 'unhandled system error'\n",
    "gpu017: Test CUDA failure common.cu:892 'out of memory'\n",
    "mi250-n01: Test HIP failure common.cu:1010 'hipErrorOutOfMemory'\n",
    " .. HCA-128 pid 757466: Test failure common.cu:915\n",
    " .. mi250-n01: Test failure common.cu:1254\n",
    "gpu018: Test timeout (300s) common.cu:533\n",
    "NCCL failure all_reduce.cu:95 'unhandled cuda error'\n",
    "Cuda failure common.cu:54 'invalid device ordinal'\n",
    "Invalid number of GPUs: 8 requested but only 7 were found.\n",
    # count 0 rows of a total-size collective (8 B over 2 ranks, aligned to 16 B)
    "           0             0     float    none      -1    12.97    0.00    0.00      0    12.86    0.00    0.00    N/A\n"
    "          32             4     float    none      -1    13.51    0.00    0.00      0    13.11    0.00    0.00    N/A\n",
])
def test_detected_without_a_header(text: str) -> None:
    assert nt.detect(Doc(text)) and nt.detect(Doc(INFO + text))


@pytest.mark.parametrize("text", [
    ROW_1G + "\n",  # one row alone proves nothing
    ROW_1G + "\n" + ROW_2G.replace("float", "bogus") + "\n",  # a type nccl-tests never prints
    ROW_1G + "\n" + ROW_2G.replace("536870912", "536870911") + "\n",  # the size fits no count
    ROW_1G + "\n" + ROW_2G.replace("     0\n", "").rstrip() + " extra\n",  # text after the cells
    ROW_1G + "\n" + "  2147483648     536870912     float     sum      -1   8060.1  266.43\n",  # too few cells
    "           8             0     float    none      -1    12.97    0.00    0.00      0    12.86    0.00    0.00    N/A\n"
    "          16             0     float    none      -1    13.51    0.00    0.00      0    13.11    0.00    0.00    N/A\n",
    "Test failure in my own script\n", "NCCL failure somewhere\n", "the test timed out\n",
])
def test_not_detected_without_a_header(text: str) -> None:
    assert not nt.detect(Doc(text)) and not nt.detect(Doc(INFO + text))


def test_rows_after_the_units_row_are_read_with_their_failure_lines() -> None:
    text = (UNITS + ROW_1G + "\n" + ROW_2G + "\n"
            "HCA-128: Test NCCL failure common.cu:1204 'unhandled cuda error (run with NCCL_DEBUG=INFO for details) / '\n"
            " .. HCA-128 pid 757466: Test failure common.cu:915\n")
    res = parsed(text)
    assert [r.bytes for r in res.rows] == [1 << 30, 2 << 30] and res.rows[1].root == -1 and res.rows[1].redop == "sum"
    assert res.errors == ["HCA-128: Test NCCL failure common.cu:1204 'unhandled cuda error (run with NCCL_DEBUG=INFO "
                          "for details) / '", ".. HCA-128 pid 757466: Test failure common.cu:915"]
    assert res.after_rows == res.errors and res.collective() == "all_reduce"


# ----------------------------------------------------------------------------- command lines, crashes

@pytest.mark.parametrize(("command", "ranks"), [
    ("./build/all_reduce_perf -b 8 -e 1G -f 2 -g 4", 4),
    ("CUDA_VISIBLE_DEVICES=0,1 NCCL_P2P_DISABLE=1 ./build/all_reduce_perf -g2 -b 1G", 2),
    ("./all_reduce_perf -g 4 -t 2 -b 1G", 8),
    ("./all_reduce_perf --ngpus 8 --nthreads 1", 8),
    ("./all_reduce_perf --ngpus=8", 8),
    ("./build/all_reduce_perf -b 8 -e 1G", None),  # no -g: the capture does not say
    ("mpirun -np 2 ./build/all_reduce_perf -g 4", None),  # a launcher runs several processes
    ("srun -N 2 ./build/all_reduce_perf -g 4", None),
    ("docker exec c1 mpiexec -n 16 ./all_reduce_perf -g 1", None),
    ("./build/all_reduce_perf -n 20 -g 4", 4),  # the binary's own -n (iterations) is no launcher
])
def test_ranks_of_a_launcher_free_command_line(command: str, ranks: int | None) -> None:
    assert parse_nccl_tests(command + "\n" + COLS + ROW_1G + "\n").cmd_ranks == ranks
    assert parse_nccl_tests(COLS + ROW_1G + "\n", command=command).cmd_ranks == ranks


def test_a_launcher_on_an_earlier_line_or_in_the_framing() -> None:
    text = "srun --nodes=2 --ntasks-per-node=1 \\\n  ./build/all_reduce_perf -g 8\n" + COLS + ROW_1G + "\n"
    assert parse_nccl_tests(text).cmd_ranks is None
    text = "./build/all_reduce_perf -g 8\n" + COLS + ROW_1G + "\n"
    assert parse_nccl_tests(text, launched=True).cmd_ranks is None
    tagged = "".join(f"[1,0]<stdout>:{ln}\n" for ln in text.splitlines())
    assert parsed(tagged).cmd_ranks is None and parsed(text).cmd_ranks == 8


def test_each_run_keeps_its_command_lines_ranks() -> None:
    text = ("./build/all_reduce_perf -g 2\n" + COLS + ROW_1G + "\n# Avg bus bandwidth    : 449.635\n"
            "./build/all_gather_perf -g 4\n" + COLS + ROW_1G + "\n# Avg bus bandwidth    : 449.635\n")
    res = parse_nccl_tests(text)
    assert [(t.program, t.cmd_ranks) for t in res.tables] == [("all_reduce_perf", 2), ("all_gather_perf", 4)]
    res = parse_nccl_tests(COLS + ROW_1G + "\n" + COLS + ROW_1G + "\n",
                           command="./all_reduce_perf -g 2; ./all_gather_perf -g 4 -b 1G")
    assert [(t.program, t.cmd_ranks) for t in res.tables] == [("all_reduce_perf", 2), ("all_gather_perf", 4)]


def test_rank_count_falls_back_to_the_command_lines_ranks() -> None:
    res = parse_nccl_tests("./build/sendrecv_perf -g 8\n" + COLS + ROW_1G + "\n")
    assert res.collective() == "sendrecv" and res.listed() == 0 and res.rank_count() == 8
    res = parse_nccl_tests("./build/sendrecv_perf -b 1G\n" + COLS + ROW_1G + "\n")
    assert res.rank_count() is None


def test_a_wrapper_names_the_collective_of_the_next_table_only() -> None:
    ag = ("  1073741824      16777216     float    none      -1   4101.1  261.82  245.45      0   4090.7  262.48  246.08"
          "      0\n")
    res = parse_nccl_tests("run_nccl_tests.sh -t alltoall -b 1G\n" + COLS + ag)
    assert res.named == "alltoall" and res.collective() == "alltoall" and res.program == ""
    res = parse_nccl_tests(COLS + ag + "run_nccl_tests.sh -t alltoall -b 1G\n")
    assert res.named == "" and res.collective() == ""
    res = parse_nccl_tests("run_nccl_tests.sh -t all_gather\nrun_nccl_tests.sh -t alltoall\n" + COLS + ag)
    assert res.named == "all_gather"
    # a name the columns do not fit is not taken
    res = parse_nccl_tests("run_nccl_tests.sh -t sendrecv\n" + COLS + ag)
    assert res.named == "sendrecv" and res.collective() == ""
    # the binary's own name is the program, never a wrapper's word
    res = parse_nccl_tests("./build/all_gather_perf -b 1G\n" + COLS + ag)
    assert res.named == "" and res.program == "all_gather_perf"


@pytest.mark.parametrize("line", [
    "srun: error: gpu018: task 1: Segmentation fault (core dumped)",
    "Aborted (core dumped)",
    "Bus error",
    "Floating point exception",
    "Illegal instruction",
    "mpirun noticed that process rank 3 with PID 0 on node gpu018 exited on signal 11 (Segmentation fault).",
    "srun: error: gpu018: task 0: Killed by signal 9",
    "terminate called after throwing an instance of 'std::runtime_error'",
    "[gpu018:04108] *** Process received signal ***",
    "[gpu018:04108] Signal: SIGSEGV",
])
def test_a_process_that_died(line: str) -> None:
    res = parse_nccl_tests(PARAMS + COLS + ROW_1G + "\n" + line + "\n")
    assert res.crashes == [line] and res.after_rows == [line]
    assert parse_nccl_tests(PARAMS + line + "\n").crashes == [line]
    assert parse_nccl_tests(PARAMS + line + "\n").after_rows == []


def test_the_primary_run_prefers_a_table_the_all_reduce_figures_apply_to() -> None:
    ag = "# Collective test starting: all_gather_perf\n" + COLS + ROW_1G + "\n"
    a2a = "# Collective test starting: alltoall_perf\n" + COLS + ROW_1G + "\n"
    ar = "# Collective test starting: all_reduce_perf\n" + COLS + ROW_1G + "\n"
    assert parse_nccl_tests(ag + a2a).program == "all_gather_perf"
    assert parse_nccl_tests(a2a + ag + a2a).program == "all_gather_perf"
    assert parse_nccl_tests(ar + ag).program == "all_reduce_perf"
    assert parse_nccl_tests(a2a + a2a.replace("alltoall", "broadcast")).program == "broadcast_perf"
    assert nt.primary([NcclTests(), NcclTests(header="x")]).header == "x"


# ----------------------------------------------------------------------------- old layout, unread lines

V100 = "nccl-tests/all_reduce_perf_8node_64xV100_v2.11_error_column_4GBs.txt"


def test_old_error_column_across_eight_nodes_of_v100() -> None:
    """2.0-2.12: `error` holds the max delta (`%5.0le`), the rank lines carry a Pid and a one-byte bus."""
    res = parsed(fixture_text(V100))
    assert res.wrong_is_delta and res.validated and res.columns[3] == "error"
    assert [cells(r) for r in res.rows] == [
        (268435456, 67108864, "float", 122570.0, 2.19, 4.31, None, 122346.0, 2.19, 4.32, None, "sum", None),
        (536870912, 134217728, "float", 244318.0, 2.20, 4.33, None, 244020.0, 2.20, 4.33, None, "sum", None)]
    assert all(r.delta for r in res.rows)
    assert len(res.hosts) == 8 and set(res.per_host.values()) == {8} and res.rank_count() == 64
    assert res.complete_listing and {r["model"] for r in res.ranks} == {"Tesla V100-SXM2-32GB"}
    assert res.ranks[9] == {"rank": 9, "group": 0, "pid": 41231, "host": "v100-n02", "device": 1, "bus": "0x07",
                            "model": "Tesla V100-SXM2-32GB"}
    assert (res.avg_busbw, res.oob_values) == (4.3225, 0)
    # a delta printed with more digits (`0.000e+00`) is a delta too, never a count of wrong elements
    wide = fixture_text(V100).replace("  1e-06", "  1.000e-06")
    assert [r.wrong for r in parsed(wide).rows] == [None, None] and parsed(wide).wrong_is_delta


def test_unread_error_lines_are_kept() -> None:
    line = "Unable to register symmetric memory window on rank 3: falling back to a regular buffer"
    res = parse_nccl_tests(PARAMS + line + "\n" + COLS + ROW_1G + "\n")
    assert res.unread == [line] and not res.errors and len(res.rows) == 1


@pytest.mark.parametrize("line", [
    "Incompatible NCCL versions. nccl-tests was compiled with NCCL 22905, but is running with NCCL 22807. The 22905 "
    "Device API is not compatible with versions before 2.29.",
    "Device implementation 2 is not supported by this test",
    "This test requires multimem support, but multimem support is not enabled for this communicator.",
    "This test requires GIN support, but GIN support is not enabled for this communicator.",
    "NCCL 2.7 or later is needed for alltoallv. This test was compiled with 2.6.",
    "Unable to open alltoallv traffic matrix file /tmp/tm.txt.",
    "Invalid alltoallv traffic matrix, file /tmp/tm.txt must be square (got 3x4).",
    "invalid sizes for 'minbytes' and 'maxbytes': 8589934592 > 1073741824",
    "invalid size specified for 'maxbytes'",
    "invalid option 'Q'",
    "Option -D (device implementation) requires NCCL >= 2.28.0",
    "device implementation (-D > 0) requires enabling symmetric memory registration (-R 2)",
])
def test_the_binaries_usage_failures_are_failures(line: str) -> None:
    res = parsed(PARAMS + line + "\n")
    assert res.errors == [line] and res.unread == []


@pytest.mark.parametrize("line", [
    "per-iteration timing (-I) is incompatible with CUDA graph mode (-G). Disabling.",
    "Option -m not supported before NCCL 2.2. Ignoring",
    "invalid type bfloat17, defaulting to float .. ",
    "invalid op prod2, defaulting to sum .. ",
])
def test_the_binaries_option_notes_are_notes(line: str) -> None:
    res = parse_nccl_tests(line + "\n" + PARAMS + COLS + ROW_1G + "\n")
    assert res.notes == [line.strip()] and res.unread == [] and res.errors == []


def test_other_producers_error_lines_are_not_nccl_tests_own() -> None:
    """Open MPI (`[host:pid]` lines, the text of its help blocks), UCX, Slurm and ssh lines are read by
    their own checks, not taken for nccl-tests' error lines."""
    others = ("[bm-h100-01:29250] 15 more processes have sent help message help-btl-vader.txt / xpmem-make-failed\n"
              "--------------------------------------------------------------------------\n"
              "WARNING: There was an error initializing an OpenFabrics device.\n"
              "  Local device: mlx5_0\n"
              "--------------------------------------------------------------------------\n"
              "[1700000000.123456] [gpu01:1234:0]    ucp_context.c:1021 UCX  WARN  network device 'mlx5_4:1' is not "
              "available\n"
              "srun: error: gpu02: task 9: Exited with exit code 1\n"
              "ssh: connect to host gpu03 port 22: Connection refused\n")
    res = parse_nccl_tests(PARAMS + others + COLS + ROW_1G + "\n")
    assert res.unread == [] and len(res.rows) == 1
    # after a help block closes, an error line is read again
    res = parse_nccl_tests(PARAMS + others + "Unable to pin host memory\n" + COLS + ROW_1G + "\n")
    assert res.unread == ["Unable to pin host memory"]


def test_unread_line_under_a_framing() -> None:
    text = (PARAMS + "Unable to pin host memory\n" + COLS + ROW_1G + "\n")
    framed = "".join(f"gpu01: {ln}\n" for ln in text.splitlines())
    assert parsed(framed).unread == ["Unable to pin host memory"]
