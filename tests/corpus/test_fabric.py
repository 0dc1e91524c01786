"""fabric.manager over the shared corpus's fabric manager logs (skipped when absent).

The `nvidia-smi -q` files also feed fabric.manager; their expectations live with the
gpu.health corpus test (tests/corpus/test_gpu_health.py), which grades those files."""

from __future__ import annotations

import pytest

from preflight import registry
from preflight.analyze import analyze
from preflight.model import Result
from tests.conftest import corpus_file

_RESTART = "fabricmanager/fabricmanager_log_restart_hgxh100_535.161.08_nvswitch_nonfatal_gpud.log"
_MULTICAST = "fabricmanager/fabricmanager_log_multicast_nvswitch_nonfatal_12028_gpud.log"

EXPECTED: dict[str, dict[str, str]] = {
    # 18 non-fatal SXid 12028 before a clean restart: WARN, not FAIL
    _RESTART: {"fabric.manager": "warn"},
    # multicast team setup/release is normal; one non-fatal 12028 at the end: WARN
    _MULTICAST: {"fabric.manager": "warn"},
}


def _result(rel: str) -> Result:
    res = [r for r in analyze(registry.load(), [corpus_file(rel)], profile_name="auto")
           if r.check == "fabric.manager"]
    assert len(res) == 1, res
    return res[0]


@pytest.mark.corpus
@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_corpus_expected(rel: str) -> None:
    r = _result(rel)
    assert r.status.value == EXPECTED[rel]["fabric.manager"], (r.summary, r.evidence)
    assert r.summary and r.evidence and r.remedy


@pytest.mark.corpus
def test_corpus_restart_log_conclusions() -> None:
    r = _result(_RESTART)
    assert "18 NVSwitch non-fatal error(s) (SXid 12028)" in r.summary and "4 NVSwitches" in r.summary
    assert r.facts["log_fatal"] == 0 and r.facts["log_nonfatal"] == 18 and r.facts["log_errors"] == 0
    assert r.facts["log_restarts"] == 2 and r.facts["log_configured_after_last_start"] is True


@pytest.mark.corpus
def test_corpus_multicast_log_is_not_a_fault_apart_from_the_sxid() -> None:
    r = _result(_MULTICAST)
    assert r.facts["log_nonfatal"] == 1 and r.facts["log_errors"] == 0 and r.facts["log_fatal"] == 0
    assert any("physical id 3 port 61" in e for e in r.evidence)
