"""gpu.health / gpu.driver (and, for the -q files, fabric.manager) over the shared corpus.

Graded with profile "auto", as `preflight analyze` does. A `nvidia-smi -q` file feeds all
three checks; the default table feeds gpu.health only. Skipped when the corpus is absent."""

from __future__ import annotations

import pytest

from preflight.model import Result
from tests.corpus import assert_expected, graded

_Q_8X_161 = "nvidia-smi/q_8xH100_535.161.08_fabric_completed_gpud.txt"
_Q_8X_183 = "nvidia-smi/q_8xH100_535.183.01_fabric_completed_gpud.txt"
_Q_A10 = "nvidia-smi/q_1xA10_535.129.03_remap_pending_gpud.txt"
_Q_590 = "nvidia-smi/q_1xH100_590.48.01_idle_recovery_action_fabric_health_nvgpuexp.txt"
_T_ERR = "nvidia-smi/smi_table_1gpu_525.125.06_fan_ERR_gpud.txt"

EXPECTED: dict[str, dict[str, str]] = {
    # healthy HGX H100: ECC 0, remaps 0/0, fabric Completed/Success (power brake at idle is not a fault)
    _Q_8X_161: {"gpu.health": "pass", "gpu.driver": "pass", "fabric.manager": "pass"},
    _Q_8X_183: {"gpu.health": "pass", "gpu.driver": "pass", "fabric.manager": "pass"},
    # remap pending on the A10 (Reset Required still says No); Fabric N/A = no NVSwitch: not flagged
    _Q_A10: {"gpu.health": "fail", "gpu.driver": "pass", "fabric.manager": "skip"},
    # 590 layout: Recovery Action None, Health block all N/A, fabric Completed/Success
    _Q_590: {"gpu.health": "pass", "gpu.driver": "pass", "fabric.manager": "pass"},
    "nvidia-smi/smi_table_8xH100_550.90.07_healthy_gpud.txt": {"gpu.health": "pass"},
    "nvidia-smi/smi_table_1xH100_590.48.01_load_nvgpuexp.txt": {"gpu.health": "pass"},
    # fan ERR! with a normal temperature: WARN (see the grader for the reasoning)
    _T_ERR: {"gpu.health": "warn"},
}

MINE = ("gpu.health", "gpu.driver")


def _results(rel: str, checks: tuple[str, ...] = MINE + ("fabric.manager",)) -> dict[str, Result]:
    return graded(rel, checks)


@pytest.mark.corpus
@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_corpus_expected(rel: str) -> None:
    got = _results(rel)
    assert_expected(rel, got, EXPECTED[rel])
    for check, status in EXPECTED[rel].items():
        if status in ("fail", "warn"):
            assert got[check].remedy, got[check]
    assert set(got) == set(EXPECTED[rel]), f"{rel}: unexpected checks {sorted(set(got) - set(EXPECTED[rel]))}"


@pytest.mark.corpus
def test_corpus_a10_remap_pending_conclusion() -> None:
    r = _results(_Q_A10)["gpu.health"]
    assert "remap pending" in r.summary and "4 rows" in r.summary
    assert "drain until a GPU reset activates the remap" in r.remedy
    g = r.facts["gpus"][0]
    assert g["remapped_pending"] is True and g["remapped_failure"] is False
    assert g["uncorrectable_ecc"] == 0 and g["remapped_rows_uncorrectable"] == 4
    assert g["reset_required"] is False  # the file says No: the grade keys on Remapped Rows


@pytest.mark.corpus
def test_corpus_8xh100_facts() -> None:
    got = _results(_Q_8X_161)
    gpus = got["gpu.health"].facts["gpus"]
    assert len(gpus) == 8
    assert all(g["uncorrectable_ecc"] == 0 and g["uncorrectable_ecc_aggregate"] == 0 for g in gpus)
    assert all(g["remapped_pending"] is False and g["remapped_failure"] is False for g in gpus)
    assert got["gpu.driver"].facts["driver"] == "535.161.08" and got["gpu.driver"].facts["cuda"] == "12.2"


@pytest.mark.corpus
def test_corpus_590_recovery_action_read() -> None:
    got = _results(_Q_590)
    assert got["gpu.health"].facts["gpus"][0]["recovery_action"] == "None"
    assert got["gpu.driver"].facts["driver"] == "590.48.01" and got["gpu.driver"].facts["cuda"] == "13.1"


@pytest.mark.corpus
def test_corpus_fan_err_names_gpu0() -> None:
    r = _results(_T_ERR)["gpu.health"]
    assert "GPU 0" in r.summary and any("ERR!" in e for e in r.evidence)
    assert r.facts["gpus"][0]["sensor_errors"] == ["fan"]
