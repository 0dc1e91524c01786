"""The Xid catalog as data: code -> mnemonic, description, resolution buckets, preflight severity.

Provenance: NVIDIA, "Analyzing Xid Errors with the Xid Catalog"
(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, Ampere and newer). The
columns Mnemonic / Description / Resolution Bucket (Immediate Action) / Resolution Bucket
(Investigatory Action) follow that page; bucket names are NVIDIA's own (RESTART_APP, RESET_GPU,
RESTART_BM = reboot the bare-metal node, IGNORE, CONTACT_SUPPORT, WORKFLOW_* = a documented
multi-step flow, XID_154 = act on the recovery action printed in the message).

The `severity` column is preflight's own reading, not NVIDIA's text:
  "fail" the GPU (or node) must be reset / rebooted before it runs a job: drain it;
  "warn" an application-level fault or an event worth a look: report it, no drain;
  "info" context only (a sympathetic event that follows another Xid).
Codes 144-150 (NVLink5 units) carry a Fatal / Nonfatal word in the message; the grader reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

FAIL = "fail"
WARN = "warn"
INFO = "info"

# Immediate-action buckets after which a GPU must not take a job until the action is done.
DRAIN_BUCKETS = frozenset({
    "RESET_GPU",
    "RESTART_BM",
    "RESTART_VM",
    "WORKFLOW_XID_48",
    "WORKFLOW_NVLINK_ERR",
})


@dataclass(frozen=True)
class XidInfo:
    code: int
    mnemonic: str
    description: str
    immediate: str
    investigatory: str
    severity: str
    note: str = ""  # preflight's plain-language reading


def _row(code: int, mnemonic: str, description: str, immediate: str, investigatory: str,
         severity: str, note: str = "") -> tuple[int, XidInfo]:
    return code, XidInfo(code, mnemonic, description, immediate, investigatory, severity, note)


CATALOG: dict[int, XidInfo] = dict([
    _row(8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing",
         "RESTART_APP", "CONTACT_SUPPORT", WARN, "application-level"),
    _row(13, "ROBUST_CHANNEL_GR_EXCEPTION", "Graphics Engine Exception",
         "RESTART_APP", "WORKFLOW_XID_13", WARN, "usually an application bug; not a drain by itself"),
    _row(31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault",
         "RESTART_APP", "WORKFLOW_XID_31", WARN, "usually the application; repeated on one GPU: run a diag"),
    _row(32, "ROBUST_CHANNEL_PBDMA_ERROR", "Invalid or corrupted push buffer stream",
         "RESTART_APP", "CHECK_APP/CUDA", WARN, "application or driver"),
    _row(38, "ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "Driver firmware error",
         "IGNORE", "CONTACT_SUPPORT", WARN),
    _row(43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing",
         "IGNORE", "CONTACT_SUPPORT", WARN, "application-level; the GPU stays healthy"),
    _row(44, "ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", "Graphics Engine fault during context switch",
         "IGNORE", "CONTACT_SUPPORT", WARN),
    _row(45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "Preemptive cleanup, due to previous errors",
         "WORKFLOW_XID_45", "IGNORE", WARN, "sympathetic: follow the Xid that caused it"),
    _row(46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing",
         "RESET_GPU", "CONTACT_SUPPORT", FAIL, "the GPU needs a reset"),
    _row(48, "ROBUST_CHANNEL_GPU_ECC_DBE", "Double Bit ECC Error",
         "WORKFLOW_XID_48", "WORKFLOW_XID_48", FAIL, "uncorrectable memory error: reset to remap, check remap state"),
    _row(61, "PMU_BREAKPOINT", "Internal micro-controller breakpoint (unused on Ampere and newer)",
         "CONTACT_SUPPORT", "CONTACT_SUPPORT", WARN),
    _row(62, "PMU_HALT_ERROR", "Internal micro-controller halt",
         "RESET_GPU", "CONTACT_SUPPORT", FAIL, "the GPU needs a reset"),
    _row(63, "INFOROM_DRAM_RETIREMENT_EVENT", "GPU memory remapping event",
         "IGNORE", "IGNORE", WARN, "row remap recorded; it takes effect at the next GPU reset"),
    _row(64, "INFOROM_DRAM_RETIREMENT_FAILURE", "GPU memory remapping failure",
         "RESET_GPU", "CONTACT_SUPPORT", FAIL, "remapping failed: RMA candidate"),
    _row(68, "ROBUST_CHANNEL_NVDEC0_ERROR", "NVDEC0 Exception",
         "RESTART_APP", "CONTACT_SUPPORT", WARN),
    _row(69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "Graphics Engine class error",
         "RESTART_APP", "CHECK_APP/CUDA", WARN),
    _row(74, "NVLINK_ERROR", "NVLINK Error",
         "WORKFLOW_NVLINK_ERR", "CONTACT_SUPPORT", FAIL, "NVLink fault: decode the error bits; drain"),
    _row(79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus",
         "RESTART_BM", "CONTACT_SUPPORT", FAIL, "the GPU is gone from PCIe: reboot the node"),
    _row(80, "PBDMA_PUSHBUFFER_CRC_MISMATCH", "Corrupted data sent to GPU",
         "RESTART_APP", "CHECK_APP/CUDA", WARN),
    _row(92, "EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate",
         "IGNORE", "CONTACT_SUPPORT", WARN, "watch the trend"),
    _row(94, "ROBUST_CHANNEL_CONTAINED_ERROR", "Contained memory error",
         "RESTART_APP", "IGNORE", WARN, "restart the job; the GPU stays usable"),
    _row(95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "Uncontained memory error",
         "RESET_GPU", "IGNORE", FAIL, "the GPU needs a reset"),
    _row(109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "Context Switch Timeout Error",
         "RESET_GPU", "CONTACT_SUPPORT", FAIL, "the GPU needs a reset"),
    _row(110, "SEC_FAULT_ERROR", "Security Fault Error",
         "RESET_GPU", "INVESTIGATE_SW", FAIL, "the GPU needs a reset"),
    _row(119, "GSP_RPC_TIMEOUT", "GSP RPC Timeout",
         "RESET_GPU", "INVESTIGATE_SW", FAIL, "the GSP firmware stopped answering: reset"),
    _row(120, "GSP_ERROR", "GSP Error",
         "RESET_GPU", "INVESTIGATE_SW", FAIL, "the GPU needs a reset"),
    _row(121, "C2C_ERROR", "C2C Error",
         "IGNORE", "CONTACT_SUPPORT", WARN, "Grace systems"),
    _row(136, "ALI_TRAINING_FAIL", "Link Training Failed",
         "RESET_GPU", "INVESTIGATE_LINK_SI", FAIL, "NVLink training failed: reset"),
    _row(137, "NVLINK_PRIV_ERR", "NVLink Privilege Error",
         "IGNORE", "XID_137_FLOW", WARN),
    _row(140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "ECC Unrecovered Error",
         "RESET_GPU", "CONTACT_SUPPORT", FAIL, "the GPU needs a reset"),
    _row(143, "GPU_INIT_ERROR", "GPU Initialization Error",
         "RESET_GPU", "CONTACT_SUPPORT", FAIL, "the GPU needs a reset"),
    _row(144, "NVLINK_SAW_ERROR", "NVLink5 SAW unit error",
         "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", FAIL, "Fatal / Nonfatal printed in the message"),
    _row(145, "NVLINK_RLW_ERROR", "NVLink5 RLW unit error",
         "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", FAIL, "Fatal / Nonfatal printed in the message"),
    _row(146, "NVLINK_TLW_ERROR", "NVLink5 TLW unit error",
         "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", FAIL, "Fatal / Nonfatal printed in the message"),
    _row(147, "NVLINK_TREX_ERROR", "NVLink5 TREX unit error",
         "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", FAIL, "Fatal / Nonfatal printed in the message"),
    _row(148, "NVLINK_NVLPW_CTRL_ERROR", "NVLink5 NVLPW_CTRL unit error",
         "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", FAIL, "Fatal / Nonfatal printed in the message"),
    _row(149, "NVLINK_NETIR_ERROR", "NVLink5 NETIR unit error",
         "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", FAIL, "Fatal / Nonfatal printed in the message"),
    _row(150, "NVLINK_MSE_ERROR", "NVLink5 MSE unit error",
         "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", FAIL, "Fatal / Nonfatal printed in the message"),
    _row(154, "GPU_RECOVERY_ACTION_CHANGED", "GPU Recovery Action Changed",
         "XID_154", "N/A", WARN, "act on the recovery action printed in the message"),
    _row(155, "NVLINK_SW_DEFINED_ERROR", "NVLINK: SW Defined Error",
         "RESET_GPU", "INVESTIGATE_SW_USER", FAIL, "the GPU needs a reset"),
    _row(156, "RESOURCE_RETIREMENT_EVENT", "Resource Retirement Event",
         "RESET_GPU", "IGNORE", FAIL, "a resource was retired: reset to apply"),
    _row(157, "RESOURCE_RETIREMENT_FAILURE", "Resource Retirement Failure",
         "IGNORE", "CONTACT_SUPPORT", WARN),
    _row(158, "GPU_FATAL_TIMEOUT", "GPU Fatal Timeout",
         "RESET_GPU", "CONTACT_SUPPORT", FAIL, "the GPU needs a reset"),
])

NVLINK5_CODES = frozenset(range(144, 151))

# Sympathetic Xids: an event of the key code that follows, on the same GPU, one of the listed
# codes is a consequence of it (None: any other Xid). 45 is the driver's cleanup after another
# error; 43 follows the application fault (13, 31) that made the driver reset the channel; 94/95
# and the 63 row remap follow the uncorrectable ECC error (48) that caused them.
SYMPATHETIC: dict[int, frozenset[int] | None] = {
    45: None,
    43: frozenset({13, 31, 32}),
    63: frozenset({48}),
    94: frozenset({48}),
    95: frozenset({48}),
    154: None,
}

# Xid 154 prints the new recovery action, e.g. "changed from 0x0 (None) to 0x1 (GPU Reset Required)".
RECOVERY_ACTIONS: dict[int, tuple[str, str]] = {
    0x0: ("IGNORE", INFO),
    0x1: ("RESET_GPU", FAIL),
    0x2: ("RESTART_BM", FAIL),
    0x3: ("DRAIN_P2P", FAIL),
    0x4: ("DRAIN_AND_RESET", FAIL),
}


def lookup(code: int) -> XidInfo | None:
    """The catalog row of an Xid code, or None when the catalog does not list it."""
    return CATALOG.get(code)


def severity_of_bucket(bucket: str) -> str:
    """Preflight severity implied by an immediate-action bucket."""
    if bucket in DRAIN_BUCKETS:
        return FAIL
    return WARN
