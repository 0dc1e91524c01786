"""The Xid catalog as data (checks/xid_catalog.py): rows, preflight's readings, the bucket ->
policy code map, Xid 154's recovery actions and the drain-level actions."""

from __future__ import annotations

import pytest

from preflight import policy
from preflight.checks import xid_catalog as cat
from preflight.model import Status


def test_the_table_loads_every_row_once():
    assert cat._load() == cat.CATALOG
    assert sorted(cat.CATALOG) == list(range(1, 177))
    assert all(info.code == code for code, info in cat.CATALOG.items())


@pytest.mark.parametrize("code, mnemonic, immediate, investigatory, bucket", [
    (1, "ROBUST_CHANNEL_FIFO_ERROR_FIFO_METHOD", "CONTACT_SUPPORT", "", "CONTACT_SUPPORT"),
    (13, "ROBUST_CHANNEL_GR_EXCEPTION/ ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY", "RESTART_APP", "WORKFLOW_XID_13",
     "RESTART_APP"),
    (45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "WORKFLOW_XID_45", "Solo: RESTART_FM; Not Solo: IGNORE (follow other Xid)",
     "WORKFLOW_XID_45"),
    (48, "ROBUST_CHANNEL_GPU_ECC_DBE", "WORKFLOW_XID_48", "WORKFLOW_XID_48", "WORKFLOW_XID_48"),
    (79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM", "CONTACT_SUPPORT", "RESTART_BM"),
    (154, "GPU_RECOVERY_ACTION_CHANGED", "XID_154", "N/A Informational only regarding another Xid", "XID_154"),
    (172, "UNCORRECTABLE_SRAM_ERROR", "", "", "WORKFLOW_XID_48"),
])
def test_rows_as_nvidia_prints_them(code: int, mnemonic: str, immediate: str, investigatory: str, bucket: str):
    info = cat.lookup(code)
    assert info is not None
    assert (info.mnemonic, info.immediate, info.investigatory, info.bucket) == (mnemonic, immediate, investigatory,
                                                                                bucket)


def test_readings_fill_empty_buckets_and_add_newer_codes():
    for code, (bucket, mnemonic, description, why) in cat.READINGS.items():
        info = cat.lookup(code)
        assert info is not None and info.bucket == bucket and info.reading == why and why
        if mnemonic:
            assert (info.mnemonic, info.description, info.immediate) == (mnemonic, description, "")
    assert cat.lookup(106).immediate == "IGNORE" and cat.lookup(106).bucket == "INFO"  # type: ignore[union-attr]
    assert cat.lookup(13).reading == ""  # type: ignore[union-attr]
    assert {c: r[0] for c, r in cat.READINGS.items()} == {
        106: "INFO", 107: "INFO", 162: "INFO", 163: "IGNORE", 164: "IGNORE", 165: "IGNORE", 166: "IGNORE",
        167: "RESET_GPU", 168: "IGNORE", 169: "RESET_GPU", 170: "IGNORE", 171: "WORKFLOW_XID_48",
        172: "WORKFLOW_XID_48", 173: "RESTART_BM", 174: "RESTART_APP", 175: "RESET_GPU", 176: "IGNORE"}
    assert cat.lookup(177) is None and cat.lookup(0) is None


def test_every_bucket_has_a_policy_code():
    buckets = {info.bucket for info in cat.CATALOG.values()} - {"WORKFLOW_NVLINK5_ERR", "XID_154"}
    assert buckets == set(cat.BUCKET_CODES)
    known = policy.builtin().codes
    codes = [*cat.BUCKET_CODES.values(), *cat.NVLINK5_CODES_BY_WORD.values(),
             *(c for _, c in cat.RECOVERY_ACTIONS.values()), cat.RECOVERY_UNKNOWN[1], cat.NOT_IN_CATALOG, cat.SITE_FAIL]
    assert all(c in known for c in codes)


def test_bucket_codes_and_their_statuses():
    assert cat.BUCKET_CODES == {
        "RESTART_APP": "gpu.xid/restart-app", "RESET_GPU": "gpu.xid/reset-gpu", "RESTART_BM": "gpu.xid/restart-bm",
        "RESTART_VM": "gpu.xid/restart-vm", "IGNORE": "gpu.xid/ignore", "CONTACT_SUPPORT": "gpu.xid/contact-support",
        "CHECK_MECHANICALS": "gpu.xid/check-mechanicals", "UPDATE_SWFW": "gpu.xid/update-swfw",
        "CHECK_UVM": "gpu.xid/check-uvm", "WORKFLOW_XID_48": "gpu.xid/workflow-xid-48",
        "WORKFLOW_XID_45": "gpu.xid/workflow-xid-45", "WORKFLOW_NVLINK_ERR": "gpu.xid/workflow-nvlink-err",
        "INFO": "gpu.xid/informational"}
    fail = {b for b, c in cat.BUCKET_CODES.items() if policy.status(c) is Status.FAIL}
    assert fail == {"RESET_GPU", "RESTART_BM", "RESTART_VM", "CHECK_MECHANICALS", "WORKFLOW_XID_48",
                    "WORKFLOW_NVLINK_ERR"}
    assert cat.NVLINK5_CODES_BY_WORD == {True: "gpu.xid/workflow-nvlink5-err-fatal",
                                         False: "gpu.xid/workflow-nvlink5-err-nonfatal",
                                         None: "gpu.xid/workflow-nvlink5-err-unstated"}
    assert (cat.NOT_IN_CATALOG, cat.SITE_FAIL) == ("gpu.xid/not-in-catalog", "gpu.xid/site-fail")


def test_nvlink5_codes():
    assert cat.NVLINK5_CODES == frozenset({144, 145, 146, 147, 148, 149, 150})


def test_sympathetic_table():
    assert cat.SYMPATHETIC == {45: None, 43: frozenset({13, 31, 32}), 63: frozenset({48}), 94: frozenset({48}),
                               95: frozenset({48}), 154: None, 171: frozenset({48}), 172: frozenset({48})}


def test_recovery_actions():
    assert cat.RECOVERY_ACTIONS == {
        0: ("IGNORE", "gpu.xid/recovery-none"), 1: ("RESET_GPU", "gpu.xid/recovery-gpu-reset"),
        2: ("RESTART_BM", "gpu.xid/recovery-node-reboot"), 3: ("DRAIN_P2P", "gpu.xid/recovery-drain-p2p"),
        4: ("DRAIN_AND_RESET", "gpu.xid/recovery-drain-and-reset"),
        5: ("RECOVER_IMEX_DOMAIN", "gpu.xid/recovery-imex-domain"), 6: ("BUS_RESET", "gpu.xid/recovery-gpu-reset"),
        7: ("RESTART_BM", "gpu.xid/recovery-node-reboot")}
    assert cat.recovery(2) == ("RESTART_BM", "gpu.xid/recovery-node-reboot")
    assert cat.recovery(8) == cat.recovery(None) == ("XID_154", "gpu.xid/recovery-unknown")
    assert cat.RECOVERY_NONE == 0


def test_drain_actions():
    assert cat.DRAIN_ACTIONS == {"RESET_GPU", "RESTART_BM", "RESTART_VM", "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR",
                                 "WORKFLOW_NVLINK5_ERR", "CHECK_MECHANICALS", "DRAIN_P2P", "DRAIN_AND_RESET",
                                 "RECOVER_IMEX_DOMAIN", "BUS_RESET"}
    assert cat.needs_drain("RESET_GPU") and not cat.needs_drain("RESTART_APP") and not cat.needs_drain("IGNORE")
    for action, _code in cat.RECOVERY_ACTIONS.values():
        assert cat.needs_drain(action) is (action != "IGNORE")
