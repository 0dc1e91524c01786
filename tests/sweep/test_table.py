"""The sweep's all-reduce table in all_reduce_perf's conventions: size in bytes, count, type,
redop, root, time (us), algbw, busbw, #wrong (the out-of-place group; no in-place group since
none is measured), and a time that is the one the bandwidths come from."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from preflight.profile import load
from preflight.sweep import launch, outcome
from preflight.sweep import report as pages
from preflight.sweep.spec import SweepSpec, busbw_factor
from tests.conftest import need

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
H100 = load("h100-sxm-8x")
HEADER = ["size (B)", "count (elements)", "type", "redop", "root", "time (us)", "algbw (GB/s)", "busbw (GB/s)",
          "#wrong"]


def _row(size: int, mean_us: float, median_us: float, dtype: str = "bfloat16", elem: int = 2) -> dict:
    """A row event as the worker emits it: bandwidth from the mean (bytes / mean time)."""
    algbw = size / (mean_us * 1e-6) / 1e9
    return {"ev": "row", "bytes": size, "count": size // elem, "dtype": dtype, "iters": 20, "time_us": mean_us,
            "median_us": median_us, "p99_us": mean_us * 1.3, "min_us": median_us * 0.9, "algbw": algbw,
            "busbw": algbw * busbw_factor(8), "wrong": 0}


def _outcome(rows: list[dict], dtype: str = "bfloat16") -> outcome.SweepOutcome:
    hello = [{"ev": "hello", "rank": r, "world": 8, "local_rank": r, "node": "gpu001", "pid": 100 + r,
              "device": f"0000:{r:02x}:00.0", "model": "NVIDIA H100 80GB HBM3", "backend": "nccl"} for r in range(8)]
    spec = SweepSpec(backend="nccl", dtype=dtype, min_bytes=1 << 20, max_bytes=1 << 30, iters=20)
    return outcome.collect(launch.Launched(events=[{"ev": "agent", "node": "gpu001"}, *hello, *rows]), spec,
                           ["gpu001"])


def _table(md: str) -> tuple[list[str], list[list[str]]]:
    """The all-reduce table of a sweep page: its header cells and its rows' cells."""
    lines = md[md.index("### All-reduce"):].splitlines()
    grid = [ln for ln in lines[1:] if ln.startswith("|")]
    grid = grid[:next((i for i, ln in enumerate(grid) if i and not ln.startswith("|")), len(grid))]

    def cells(line: str) -> list[str]:
        return [c.strip() for c in line.strip().strip("|").split("|")]

    return cells(grid[0]), [cells(ln) for ln in grid[2:] if ln.startswith("| ")]


def test_header_and_rows_follow_all_reduce_perf() -> None:
    # a skewed size: the mean (12 ms) is well above the median (9 ms), as with a few slow iterations
    out = _outcome([_row(1 << 20, 110.0, 100.0), _row(1 << 30, 12000.0, 9000.0)])
    md = pages.markdown(out, [], H100, None)
    head, rows = _table(md)
    assert head[:9] == HEADER and head[9] == "p99 (us)"
    assert "in-place not measured" in md and not any("in-place" in h for h in head)
    assert rows[0][:9] == ["1048576", "524288", "bfloat16", "sum", "-1", "110.0", "9.53", "16.68", "0"]
    big = rows[1]
    assert big[:6] == ["1073741824", "536870912", "bfloat16", "sum", "-1", "12000"]
    # the time shown is the one the bandwidth follows from: 1 GiB in 12 ms is 89.48 GB/s, not the
    # 119.30 GB/s the 9 ms median would give
    assert float(big[6]) == pytest.approx(1073741824 / 12000.0 / 1e3, abs=0.005)
    assert float(big[7]) == pytest.approx(float(big[6]) * busbw_factor(8), abs=0.01)


def test_time_and_bandwidth_agree_in_every_row() -> None:
    sizes = [1 << k for k in range(20, 31, 2)]
    out = _outcome([_row(s, 20.0 + s / 120e3, 18.0 + s / 125e3, "float32", 4) for s in sizes], "float32")
    _, rows = _table(pages.markdown(out, [], H100, None))
    assert [int(r[0]) for r in rows] == sizes and {r[2] for r in rows} == {"float"}
    for r in rows:
        size, count, t, algbw = int(r[0]), int(r[1]), float(r[5]), float(r[6])
        assert count * 4 == size
        # within the rounding of the printed time and bandwidth
        assert size / t / 1e3 == pytest.approx(algbw, rel=0.005, abs=0.006)


def test_the_graded_table_uses_the_same_time() -> None:
    out = _outcome([_row(1 << 30, 12000.0, 9000.0)])
    facts = outcome.nccl_tests_facts(out)
    assert facts.rows[0].time_us == 12000.0 and facts.rows[0].algbw == pytest.approx(89.48, abs=0.01)
    results, _ = outcome.grade(out, H100)
    row = next(r for r in results if r.check == "nccl.allreduce").facts["rows"][0]
    assert row["time_us"] == 12000.0 and row["median_us"] == 9000.0
    assert row["bytes"] / row["time_us"] / 1e3 == pytest.approx(row["algbw"])


@pytest.mark.real
def test_a_real_sweep_table_agrees_with_its_bandwidths(tmp_path: Path) -> None:
    need(importlib.util.find_spec("torch") is not None, "torch is not installed")
    p = subprocess.run([sys.executable, "-c", "from preflight.cli import main; main()", "sweep", "--nproc", "2",
                        "--max-bytes", "256K", "--iters", "5", "--warmup", "1", "--dtype", "bfloat16",
                        "--pingpong", "none", "--profile", str(HERE / "gloo-test.toml"), "--op-timeout", "20",
                        "--deadline", "120", "--out", str(tmp_path), "--json"],
                       capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    facts = next(r for r in json.loads(p.stdout)["results"] if r["check"] == "nccl.allreduce")["facts"]
    head, rows = _table((tmp_path / "sweep.md").read_text())
    assert head[:9] == HEADER and len(rows) == len(facts["rows"]) > 3
    for cells, fact in zip(rows, facts["rows"], strict=True):
        assert int(cells[0]) == fact["bytes"] == fact["count"] * 2 and cells[2:5] == ["bfloat16", "sum", "-1"]
        assert fact["bytes"] / fact["time_us"] / 1e3 == pytest.approx(fact["algbw"])
        assert float(cells[5]) == pytest.approx(fact["time_us"], rel=0.01, abs=0.01)
        assert float(cells[6]) == pytest.approx(fact["algbw"], rel=0.06, abs=0.006)
