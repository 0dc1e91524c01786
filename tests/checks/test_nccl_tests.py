"""nccl.allreduce: nccl-tests / rccl-tests output graded against the profile tables."""

from __future__ import annotations

import pytest

from preflight import engine
from preflight import profile as profiles
from preflight.model import Status
from tests.conftest import capture, facts_of, fixture_text, grade

H100 = "h100-sxm-8x"


def allreduce(rel: str, profile: str = H100, text: str | None = None) -> list:
    body = text if text is not None else fixture_text(f"nccl-tests/{rel}")
    return grade("nccl.allreduce", {"nccl-tests": capture("nccl-tests", body)}, profile=profile, mode="analyze")


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
    # the lower floors of single_node (330/250) and multi_node (368/245): 229 GB/s is under 245
    assert r.status is Status.FAIL and "floor 245" in r.summary
    assert "nccl.allreduce/peak-below-floor" in r.facts["codes"]


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
    text = fixture_text("nccl-tests/all_reduce_perf_2node_16xH100_tcp_fallback.txt")
    [r] = allreduce("", text=text.replace("NVIDIA H100 80GB HBM3", "NVIDIA B200"), profile="generic")
    assert r.status is Status.PASS
    assert any("no busbw table for NVIDIA B200" in e for e in r.evidence)
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


