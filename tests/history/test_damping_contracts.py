"""Flap damping reads the gpu.xid and gpu.health facts through `preflight.facts`, and takes the
Xid drain actions from the catalog: the grader and damping agree on which Xid drains at once."""

from __future__ import annotations

import pytest

from preflight.checks import xid_catalog as cat
from preflight.history.damping import Damping, decide, hard_fault
from tests.history import res


def _xid(code: int, action: str, severity: str = "fail") -> dict[str, object]:
    return {"xid": code, "pci": "0000:5d:00", "severity": severity, "action": action, "count": 1, "time": None,
            "time_text": "", "last_time": None, "caused_by": None}


@pytest.mark.parametrize("action", sorted(cat.DRAIN_ACTIONS))
def test_every_catalog_drain_action_is_a_hard_fault(action: str) -> None:
    r = res("gpu.xid", "n1", "fail", events=[_xid(48, action)])
    assert hard_fault(r, Damping()) == "Xid 48 needs a GPU reset or reboot"
    assert decide("n1", [r], [], Damping()).drain


def test_the_catalog_rows_and_damping_agree() -> None:
    drains = [row for row in cat.CATALOG.values() if cat.needs_drain(row.immediate)]
    assert {48, 79} <= {row.code for row in drains}
    for row in drains:
        assert hard_fault(res("gpu.xid", "n1", "fail", events=[_xid(row.code, row.immediate)]), Damping())
    app = [row for row in cat.CATALOG.values() if row.immediate == "RESTART_APP"]
    assert app and not any(hard_fault(res("gpu.xid", "n1", "fail", events=[_xid(row.code, row.immediate)]),
                                      Damping()) for row in app)


def test_a_warning_level_event_or_a_renamed_key_is_not_hard() -> None:
    assert not hard_fault(res("gpu.xid", "n1", "fail", events=[_xid(79, "RESTART_BM", severity="warn")]), Damping())
    renamed = {k: v for k, v in _xid(79, "RESTART_BM").items() if k != "xid"} | {"code": 79}
    assert not hard_fault(res("gpu.xid", "n1", "fail", events=[renamed]), Damping())
    fault = res("gpu.xid", "n1", "fail", events=[], faults=[{"kind": "fallen_off_bus", "pci": "0000:5d:00"}])
    assert hard_fault(fault, Damping()) == "GPU fallen off the bus"


def test_faults_without_an_xid_that_no_retry_clears_are_hard() -> None:
    for kind, why in (("gpu_lost", "GPU lost (no longer answers the driver)"),
                      ("pcie_fatal", "fatal PCIe error on a GPU or NIC"),
                      ("sxid_fatal", "fatal NVSwitch error (SXid)"),
                      ("gsp_timeout", "GPU System Processor timed out (GPU reset needed)"),
                      ("gsp_crash", "GPU System Processor crashed (GPU reset needed)")):
        fault = res("gpu.xid", "n1", "fail", events=[], faults=[{"kind": kind, "pci": "0000:5d:00"}])
        assert hard_fault(fault, Damping()) == why
    for kind in ("pcie_nonfatal", "sxid_nonfatal"):
        soft = res("gpu.xid", "n1", "fail", events=[], faults=[{"kind": kind, "pci": "0000:5d:00"}])
        assert hard_fault(soft, Damping()) == ""


def test_memory_faults_from_gpu_health() -> None:
    gpu = {"index": 2, "gpu": "GPU 2", "uncorrectable_ecc": 0, "remapped_failure": None, "remapped_pending": None}
    assert hard_fault(res("gpu.health", "n1", "fail", gpus=[gpu]), Damping()) == ""
    assert hard_fault(res("gpu.health", "n1", "fail", gpus=[gpu | {"remapped_pending": True}]), Damping()) \
        == "row remap pending on GPU 2"
    assert hard_fault(res("gpu.health", "n1", "fail", gpus=[gpu | {"uncorrectable_ecc": 3}]), Damping()) \
        == "uncorrectable ECC on GPU 2"
    assert hard_fault(res("gpu.health", "n1", "warn", gpus=[gpu | {"uncorrectable_ecc": 3}]), Damping()) == ""


def test_a_root_cause_that_a_hard_check_folded_into_is_hard() -> None:
    """Without nvidia-smi the fabric manager's FAIL folds into gpu.driver's: the node is still
    drained at once, as when fabric.manager said it itself."""
    from preflight.rootcause import fold
    from tests.test_rootcause import _graded, _no_nvidia_smi

    results, caps = _graded("n1", _no_nvidia_smi)
    folded = fold(results, {"n1": caps})
    root = next(r for r in folded if r.check == "gpu.driver")
    assert "fabric.manager" in root.facts["dependents"]
    assert hard_fault(root, Damping()) == "gpu.driver is a hard fault (fabric.manager depends on it)"
    assert decide("n1", folded, [], Damping()).drain
    assert not hard_fault(root, Damping(hard_checks=("ib.hca",)))
