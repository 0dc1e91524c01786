"""The nccl-tests corpus files, graded as analyze would: the INDEX.md conclusions."""

from __future__ import annotations

import pytest

from preflight import registry
from preflight.analyze import analyze
from tests.conftest import corpus_file

EXPECTED = {
    "nccl-tests/all_reduce_perf_2node_16xH100_gcp_a3mega.txt": {"nccl.allreduce": "pass"},
}


@pytest.mark.corpus
@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_corpus_conclusions(rel: str) -> None:
    res = analyze(registry.load(), [corpus_file(rel)], profile_name="auto")
    got = {r.check: r.status.value for r in res if r.check in EXPECTED[rel]}
    assert got == EXPECTED[rel], [(r.check, r.status.value, r.summary) for r in res]


@pytest.mark.corpus
def test_a3mega_facts_on_h100_multi_node() -> None:
    path = corpus_file("nccl-tests/all_reduce_perf_2node_16xH100_gcp_a3mega.txt")
    for profile in ("auto", "h100-sxm-8x"):
        [r] = [x for x in analyze(registry.load(), [path], profile_name=profile) if x.check == "nccl.allreduce"]
        assert r.status.value == "pass", r.summary
        assert r.facts["peak_busbw"] == 338.82
        assert r.facts["avg_busbw"] == 70.742
        assert abs(r.facts["avg_busbw_computed"] - 70.742) < 0.01
        assert r.facts["table"] == "multi_node" and len(r.facts["hosts"]) == 2 and r.facts["ranks"] == 16
        assert r.facts["rows"][0]["bytes"] == 8 and r.facts["rows"][-1]["bytes"] == 8589934592
        # nothing else in the corpus file is mistaken for another of this family's formats
        others = {x.check for x in analyze(registry.load(), [path], profile_name=profile)}
        assert not others & {"nccl.transport", "hang.watchdog", "net.nic", "net.mtu"}
