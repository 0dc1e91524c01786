"""The Xid catalog as data: code -> mnemonic, description, NVIDIA's resolution buckets, and the
bucket preflight grades by (one policy code per bucket, `checks/policy.toml`).

Provenance (REVISION): NVIDIA, "Analyzing Xid Errors with the Xid Catalog"
(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, Ampere and newer), sheet
"Catalog", as published on 2025-10-29 (the copy leptonai/gpud generated that day,
components/accelerator/nvidia/xid/catalog_generated.go): columns Code / Mnemonic / Description /
Resolution Bucket (Immediate Action) / Resolution Bucket (Investigatory Action). Bucket names are
NVIDIA's own: RESTART_APP, RESET_GPU, RESTART_BM (reboot the bare-metal node), RESTART_VM,
IGNORE, CONTACT_SUPPORT, CHECK_MECHANICALS, UPDATE_SWFW, CHECK_UVM, WORKFLOW_* (a documented
multi-step flow) and XID_154 (act on the recovery action the message prints).

Where that revision leaves the immediate bucket empty (Xid 162-172) or does not list a code the
driver defines (Xid 173-176, NVIDIA/open-gpu-kernel-modules 595.45.04
src/common/sdk/nvidia/inc/nverror.h), `READINGS` gives preflight's own bucket and says why;
preflight never invents a bucket for a code in neither (an Xid not listed is "not recognised").
Codes 144-150 (NVLink5 units) print a Fatal / Non-fatal word (the sheet "XID 144-150 Decode");
the grader reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

REVISION = "NVIDIA Xid catalog (docs.nvidia.com/deploy/xid-errors) as of 2025-10-29; Xid 173-176: driver 595.45.04"
INFO = "info"  # an event graded as context only (a sympathetic Xid that follows its cause)

# code | mnemonic | description | immediate bucket | investigatory bucket   (NVIDIA, REVISION)
_TABLE = """
1|ROBUST_CHANNEL_FIFO_ERROR_FIFO_METHOD|Unused|CONTACT_SUPPORT|
2|ROBUST_CHANNEL_FIFO_ERROR_SW_METHOD|Unused|CONTACT_SUPPORT|
3|ROBUST_CHANNEL_FIFO_ERROR_UNK_METHOD|Unused|CONTACT_SUPPORT|
4|ROBUST_CHANNEL_FIFO_ERROR_CHANNEL_BUSY|Unused|CONTACT_SUPPORT|
5|ROBUST_CHANNEL_FIFO_ERROR_RUNOUT_OVERFLOW|Unused|CONTACT_SUPPORT|
6|ROBUST_CHANNEL_FIFO_ERROR_PARSE_ERR|Unused|CONTACT_SUPPORT|
7|ROBUST_CHANNEL_FIFO_ERROR_PTE_ERR|Unused|CONTACT_SUPPORT|
8|ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT|GPU stopped processing|RESTART_APP|CONTACT_SUPPORT
9|ROBUST_CHANNEL_GR_ERROR_INSTANCE|Unused|CONTACT_SUPPORT|
10|ROBUST_CHANNEL_GR_ERROR_SINGLE_STEP|Unused|CONTACT_SUPPORT|
11|ROBUST_CHANNEL_GR_ERROR_MISSING_HW|Invalid or corrupted push buffer stream|RESTART_APP|CHECK_APP/CUDA
12|ROBUST_CHANNEL_GR_ERROR_SW_METHOD|Unused|CONTACT_SUPPORT|
13|ROBUST_CHANNEL_GR_EXCEPTION/ ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY|Graphics Engine Exception|RESTART_APP|WORKFLOW_XID_13
14|ROBUST_CHANNEL_FAKE_ERROR|Unused|IGNORE|CONTACT_SUPPORT
15|ROBUST_CHANNEL_SCANLINE_TIMEOUT|Unused|CONTACT_SUPPORT|
16|ROBUST_CHANNEL_VBLANK_CALLBACK_TIMEOUT|Unused|CONTACT_SUPPORT|CONTACT_SUPPORT
17|ROBUST_CHANNEL_PARAMETER_ERROR|Unused|CONTACT_SUPPORT|
18|ROBUST_CHANNEL_BUS_MASTER_TIMEOUT_ERROR|Unused|CONTACT_SUPPORT|
19|ROBUST_CHANNEL_DISP_MISSED_NOTIFIER|Unused|CONTACT_SUPPORT|
20|ROBUST_CHANNEL_MPEG_ERROR_SW_METHOD|Unused|CONTACT_SUPPORT|
21|ROBUST_CHANNEL_ME_ERROR_SW_METHOD|Unused|CONTACT_SUPPORT|
22|ROBUST_CHANNEL_VP_ERROR_SW_METHOD|Unused|CONTACT_SUPPORT|
23|ROBUST_CHANNEL_RC_LOGGING_ENABLED|Unused|CONTACT_SUPPORT|
24|ROBUST_CHANNEL_GR_SEMAPHORE_TIMEOUT|Unused|CONTACT_SUPPORT|
25|ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY|Invalid or illegal push buffer stream|RESTART_APP|CHECK_APP/CUDA
26|ROBUST_CHANNEL_FIFO_ERROR_FBISTATE_TIMEOUT|Unused|CONTACT_SUPPORT|
27|ROBUST_CHANNEL_VP_ERROR|Unused|CONTACT_SUPPORT|
28|ROBUST_CHANNEL_VP2_ERROR|Unused|CONTACT_SUPPORT|
29|ROBUST_CHANNEL_BSP_ERROR|Unused|CONTACT_SUPPORT|
30|ROBUST_CHANNEL_BAD_ADDR_ACCESS|Unused|CONTACT_SUPPORT|
31|ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT|GPU memory page fault|RESTART_APP|WORKFLOW_XID_31
32|ROBUST_CHANNEL_PBDMA_ERROR|Invalid or corrupted push buffer stream|RESTART_APP|CHECK_APP/CUDA
33|ROBUST_CHANNEL_SEC_ERROR|Unused|CONTACT_SUPPORT|
34|ROBUST_CHANNEL_MSVLD_ERROR|Unused|CONTACT_SUPPORT|
35|ROBUST_CHANNEL_MSPDEC_ERROR|Unused|CONTACT_SUPPORT|
36|ROBUST_CHANNEL_MSPPP_ERROR|Unused|CONTACT_SUPPORT|
37|ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD|Driver firmware error|IGNORE|CHECK_APP/CUDA
38|ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT|Driver firmware error|IGNORE|CONTACT_SUPPORT
39|ROBUST_CHANNEL_CE0_ERROR|Copy Engine Exception|RESTART_APP|CONTACT_SUPPORT
40|ROBUST_CHANNEL_CE1_ERROR|Copy Engine Exception|RESTART_APP|CONTACT_SUPPORT
41|ROBUST_CHANNEL_CE2_ERROR|Copy Engine Exception|RESTART_APP|CONTACT_SUPPORT
42|ROBUST_CHANNEL_VIC_ERROR|Unused|CONTACT_SUPPORT|
43|ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR|GPU stopped processing|IGNORE|CONTACT_SUPPORT
44|ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW|Graphics Engine fault during context switch|IGNORE|CONTACT_SUPPORT
45|ROBUST_CHANNEL_PREEMPTIVE_REMOVAL|Preemptive cleanup, due to previous errors -- Most likely to see when running multiple cuda applications and hitting a DBE|WORKFLOW_XID_45|Solo: RESTART_FM; Not Solo: IGNORE (follow other Xid)
46|ROBUST_CHANNEL_GPU_TIMEOUT_ERROR|GPU stopped processing|RESET_GPU|CONTACT_SUPPORT
47|ROBUST_CHANNEL_NVENC0_ERROR|Unused|CONTACT_SUPPORT|
48|ROBUST_CHANNEL_GPU_ECC_DBE|Double Bit ECC Error|WORKFLOW_XID_48|WORKFLOW_XID_48
49|SILENT_RUNNING_CONSTANT_LEVEL_SET_BY_REGISTRY|Unused|CONTACT_SUPPORT|
50|SILENT_RUNNING_LEVEL_TRANSITION_DUE_TO_RC_ERROR|Unused|CONTACT_SUPPORT|
51|SILENT_RUNNING_STRESS_TEST_FAILURE|Unused|CONTACT_SUPPORT|
52|SILENT_RUNNING_LEVEL_TRANS_DUE_TO_TEMP_RISE|Unused|CONTACT_SUPPORT|
53|SILENT_RUNNING_TEMP_REDUCED_CLOCKING|Unused|CONTACT_SUPPORT|
54|SILENT_RUNNING_PWR_REDUCED_CLOCKING|Auxiliary power is not connected to the GPU board|CHECK_MECHANICALS|CONTACT_SUPPORT
55|SILENT_RUNNING_TEMPERATURE_READ_ERROR|Unused|CONTACT_SUPPORT|
56|DISPLAY_CHANNEL_EXCEPTION|Unused|CONTACT_SUPPORT|
57|FB_LINK_TRAINING_FAILURE_ERROR|Unused|CONTACT_SUPPORT|
58|FB_MEMORY_ERROR|Unused|CONTACT_SUPPORT|
59|PMU_ERROR|Unused|CONTACT_SUPPORT|
60|ROBUST_CHANNEL_SEC2_ERROR|Video processor exception|RESTART_APP|INVESTIGATE_SW
61|PMU_BREAKPOINT|Unused|CONTACT_SUPPORT|
62|PMU_HALT_ERROR|Internal micro-controller halt (newer drivers)|RESET_GPU|CONTACT_SUPPORT
63|INFOROM_DRAM_RETIREMENT_EVENT|GPU memory remapping event|IGNORE|IGNORE
64|INFOROM_DRAM_RETIREMENT_FAILURE|GPU memory remapping failure|RESET_GPU|CONTACT_SUPPORT
65|ROBUST_CHANNEL_NVENC1_ERROR|Unused|CONTACT_SUPPORT|
66|ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION|Illegal access by driver|IGNORE|INVESTIGATE_SW
67|ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION|Illegal access by driver|IGNORE|CONTACT_SUPPORT
68|ROBUST_CHANNEL_NVDEC0_ERROR|NVDEC0 Exception|RESTART_APP|CONTACT_SUPPORT
69|ROBUST_CHANNEL_GR_CLASS_ERROR|Graphics Engine class error|RESTART_APP|CHECK_APP/CUDA
70|ROBUST_CHANNEL_CE3_ERROR|CE3: Unknown Error|RESTART_APP|CONTACT_SUPPORT
71|ROBUST_CHANNEL_CE4_ERROR|CE4: Unknown Error|RESTART_APP|CONTACT_SUPPORT
72|ROBUST_CHANNEL_CE5_ERROR|CE5: Unknown Error|RESTART_APP|CONTACT_SUPPORT
73|ROBUST_CHANNEL_NVENC2_ERROR|Unused|CONTACT_SUPPORT|
74|NVLINK_ERROR|NVLINK Error|WORKFLOW_NVLINK_ERR|CONTACT_SUPPORT
75|ROBUST_CHANNEL_CE6_ERROR|CE6: Unknown Error|RESTART_APP|CONTACT_SUPPORT
76|ROBUST_CHANNEL_CE7_ERROR|CE7: Unknown Error|RESTART_APP|CONTACT_SUPPORT
77|ROBUST_CHANNEL_CE8_ERROR|CE8: Unknown Error|RESTART_APP|CONTACT_SUPPORT
78|VGPU_START_ERROR|vGPU Start Error|UPDATE_SWFW|UPDATE_SWFW
79|ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS|GPU has fallen off the bus|RESTART_BM|CONTACT_SUPPORT
80|PBDMA_PUSHBUFFER_CRC_MISMATCH|Corrupted data sent to GPU|RESTART_APP|CHECK_APP/CUDA
81|ROBUST_CHANNEL_VGA_SUBSYSTEM_ERROR|Unused|CONTACT_SUPPORT|
82|ROBUST_CHANNEL_NVJPG0_ERROR|NVJPG0 Error|RESTART_APP|CONTACT_SUPPORT
83|ROBUST_CHANNEL_NVDEC1_ERROR|NVDEC1 Error|RESTART_APP|CONTACT_SUPPORT
84|ROBUST_CHANNEL_NVDEC2_ERROR|NVDEC2 Error|RESTART_APP|CONTACT_SUPPORT
85|ROBUST_CHANNEL_CE9_ERROR|CE9: Unknown Error|RESTART_APP|CONTACT_SUPPORT
86|ROBUST_CHANNEL_OFA0_ERROR|OFA Exception|RESTART_APP|CONTACT_SUPPORT
87|NVTELEMETRY_DRIVER_REPORT|Unused|CONTACT_SUPPORT|
88|ROBUST_CHANNEL_NVDEC3_ERROR|NVDEC3 Error|RESTART_APP|CONTACT_SUPPORT
89|ROBUST_CHANNEL_NVDEC4_ERROR|NVDEC4 Error|RESTART_APP|CONTACT_SUPPORT
90|LTC_ERROR|Unused|CONTACT_SUPPORT|
91|RESERVED_XID|Unused|CONTACT_SUPPORT|
92|EXCESSIVE_SBE_INTERRUPTS|High single-bit ECC error rate|IGNORE|CONTACT_SUPPORT
93|INFOROM_ERASE_LIMIT_EXCEEDED|Non-fatal violation of provisioned InfoROM wear limit|IGNORE|CONTACT_SUPPORT
94|ROBUST_CHANNEL_CONTAINED_ERROR|Contained memory error|RESTART_APP|IGNORE (sympathetic)
95|ROBUST_CHANNEL_UNCONTAINED_ERROR|Uncontained memory error|RESET_GPU|IGNORE (sympathetic)
96|ROBUST_CHANNEL_NVDEC5_ERROR|NVDEC5 Error|RESTART_APP|CONTACT_SUPPORT
97|ROBUST_CHANNEL_NVDEC6_ERROR|NVDEC6 Error|RESTART_APP|CONTACT_SUPPORT
98|ROBUST_CHANNEL_NVDEC7_ERROR|NVDEC7 Error|RESTART_APP|CONTACT_SUPPORT
99|ROBUST_CHANNEL_NVJPG1_ERROR|NVJPG1 Error|RESTART_APP|CONTACT_SUPPORT
100|ROBUST_CHANNEL_NVJPG2_ERROR|NVJPG2 Error|RESTART_APP|CONTACT_SUPPORT
101|ROBUST_CHANNEL_NVJPG3_ERROR|NVJPG3 Error|RESTART_APP|CONTACT_SUPPORT
102|ROBUST_CHANNEL_NVJPG4_ERROR|NVJPG4 Error|RESTART_APP|CONTACT_SUPPORT
103|ROBUST_CHANNEL_NVJPG5_ERROR|NVJPG5 Error|RESTART_APP|CONTACT_SUPPORT
104|ROBUST_CHANNEL_NVJPG6_ERROR|NVJPG6 Error|RESTART_APP|CONTACT_SUPPORT
105|ROBUST_CHANNEL_NVJPG7_ERROR|NVJPG7 Error|RESTART_APP|CONTACT_SUPPORT
106|SMBPBI_TEST_MESSAGE|SMBPBI Test Message|IGNORE|IGNORE
107|SMBPBI_TEST_MESSAGE_SILENT|SMBPBI Test Message Silent|IGNORE|IGNORE
108|NVLINK_REMOTE_TRANSLATION_ERROR|Unused|IGNORE|XID_137_FLOW
109|ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR|Context Switch Timeout Error|RESET_GPU|CONTACT_SUPPORT
110|SEC_FAULT_ERROR|Security Fault Error|RESET_GPU|INVESTIGATE_SW
111|BUNDLE_ERROR_EVENT|Unused|CONTACT_SUPPORT|
112|DISP_SUPERVISOR_ERROR|Unused|CONTACT_SUPPORT|
113|DP_LT_FAILURE|Unused|CONTACT_SUPPORT|
114|HEAD_RG_UNDERFLOW|Unused|CONTACT_SUPPORT|
115|CORE_CHANNEL_REGS|Unused|CONTACT_SUPPORT|
116|WINDOW_CHANNEL_REGS|Unused|CONTACT_SUPPORT|
117|CURSOR_CHANNEL_REGS|Unused|CONTACT_SUPPORT|
118|HEAD_REGS|Unused|CONTACT_SUPPORT|
119|GSP_RPC_TIMEOUT|GSP RPC Timeout|RESET_GPU|INVESTIGATE_SW
120|GSP_ERROR|GSP Error|RESET_GPU|INVESTIGATE_SW
121|C2C_ERROR|C2C Error|IGNORE|CONTACT_SUPPORT
122|SPI_PMU_RPC_READ_FAIL|Unused|CONTACT_SUPPORT|
123|SPI_PMU_RPC_WRITE_FAIL|Unused|CONTACT_SUPPORT|
124|SPI_PMU_RPC_ERASE_FAIL|Unused|CONTACT_SUPPORT|
125|INFOROM_FS_ERROR|Unused|CONTACT_SUPPORT|
126|ROBUST_CHANNEL_CE10_ERROR|CE10: Unknown Error|RESTART_APP|CONTACT_SUPPORT
127|ROBUST_CHANNEL_CE11_ERROR|CE11: Unknown Error|RESTART_APP|CONTACT_SUPPORT
128|ROBUST_CHANNEL_CE12_ERROR|CE12: Unknown Error|RESTART_APP|CONTACT_SUPPORT
129|ROBUST_CHANNEL_CE13_ERROR|CE13: Unknown Error|RESTART_APP|CONTACT_SUPPORT
130|ROBUST_CHANNEL_CE14_ERROR|CE14: Unknown Error|RESTART_APP|CONTACT_SUPPORT
131|ROBUST_CHANNEL_CE15_ERROR|CE15: Unknown Error|RESTART_APP|CONTACT_SUPPORT
132|ROBUST_CHANNEL_CE16_ERROR|CE16: Unknown Error|RESTART_APP|CONTACT_SUPPORT
133|ROBUST_CHANNEL_CE17_ERROR|CE17: Unknown Error|RESTART_APP|CONTACT_SUPPORT
134|ROBUST_CHANNEL_CE18_ERROR|CE18: Unknown Error|RESTART_APP|CONTACT_SUPPORT
135|ROBUST_CHANNEL_CE19_ERROR|CE19: Unknown Error|RESTART_APP|CONTACT_SUPPORT
136|ALI_TRAINING_FAIL|Link Training Failed|RESET_GPU|INVESTIGATE_LINK_SI
137|NVLINK_PRIV_ERR|NVLink Privilege Error|IGNORE|XID_137_FLOW
138|ROBUST_CHANNEL_DLA_ERROR|Unused|CONTACT_SUPPORT|
139|ROBUST_CHANNEL_OFA1_ERROR|OFA1 Error|RESTART_APP|CONTACT_SUPPORT
140|UNRECOVERABLE_ECC_ERROR_ESCAPE|ECC Unrecovered Error|RESET_GPU|CONTACT_SUPPORT
141|ROBUST_CHANNEL_FAST_PATH_ERROR|CUDA Fast Path Error|IGNORE|CONTACT_SUPPORT
142|ROBUST_CHANNEL_NVENC3_ERROR|NVENC3 Error|CONTACT_SUPPORT|
143|GPU_INIT_ERROR|GPU Initialization Error|RESET_GPU|CONTACT_SUPPORT
144|NVLINK_SAW_ERROR|NVLINK: SAW Error|WORKFLOW_NVLINK5_ERR|WORKFLOW_NVLINK5_ERR
145|NVLINK_RLW_ERROR|NVLINK: RLW Error|WORKFLOW_NVLINK5_ERR|WORKFLOW_NVLINK5_ERR
146|NVLINK_TLW_ERROR|NVLINK: TLW Error|WORKFLOW_NVLINK5_ERR|WORKFLOW_NVLINK5_ERR
147|NVLINK_TREX_ERROR|NVLINK: TREX Error|WORKFLOW_NVLINK5_ERR|WORKFLOW_NVLINK5_ERR
148|NVLINK_NVLPW_CTRL_ERROR|NVLINK: NVLPW_CTRL Error|WORKFLOW_NVLINK5_ERR|WORKFLOW_NVLINK5_ERR
149|NVLINK_NETIR_ERROR|NVLINK: NETIR Error|WORKFLOW_NVLINK5_ERR|WORKFLOW_NVLINK5_ERR
150|NVLINK_MSE_ERROR|NVLINK: MSE Error|WORKFLOW_NVLINK5_ERR|WORKFLOW_NVLINK5_ERR
151|ROBUST_CHANNEL_KEY_ROTATION_ERROR|Key rotation Error|RESTART_VM|CONTACT_SUPPORT
152|ROBUST_CHANNEL_DLA_SMMU_ERROR|DLA SMMU Error|IGNORE|CONTACT_SUPPORT
153|ROBUST_CHANNEL_DLA_TIMEOUT|DLA timeout Error|IGNORE|CONTACT_SUPPORT
154|GPU_RECOVERY_ACTION_CHANGED|GPU Recovery Action Changed|XID_154|N/A Informational only regarding another Xid
155|NVLINK_SW_DEFINED_ERROR|NVLINK: SW Defined Error|RESET_GPU|INVESTIGATE_SW_USER
156|RESOURCE_RETIREMENT_EVENT|Resource Retirement Event|RESET_GPU|IGNORE
157|RESOURCE_RETIREMENT_FAILURE|Resource Retirement Failure|IGNORE|CONTACT_SUPPORT
158|GPU_FATAL_TIMEOUT|GPU Fatal Timeout|RESET_GPU|CONTACT_SUPPORT
159|ROBUST_CHANNEL_CHI_NON_DATA_ERROR|CHI Non-Data Error|CHECK_UVM|SYMPATHETIC_REPORT_SOLO
160|CHANNEL_RETIREMENT_EVENT|Channel Retirement Event|IGNORE|INVESTIGATE_SW
161|CHANNEL_RETIREMENT_FAILURE|Channel Retirement Failure|IGNORE|INVESTIGATE_SW
162|PSHC_REENGAGED|Power Smoothing HW Circuitry capability reengaged||
163|PSHC_DISENGAGED|Power Smoothing HW Circuitry capability disengaged||
164|PSHC_LOW_LIFETIME|Power Smoothing HW Circuitry low lifetime reached||
165|PSHC_ZERO_LIFETIME|Power Smoothing HW Circuitry lifetime exhausted||
166|NVLINK_SECURE_CRYPTO_ERR|CC traffic seen prior to link properly being configured for encrypted traffic||
167|PCIE_FATAL_TIMEOUT|PCIE_FATAL_TIMEOUT||
168|REDUCED_GPU_MEMORY_CAPACITY|Errors found in WPR (write protected region)||
169|SEC2_HALT_ERROR|Internal micro-controller halt||
170|NVLINK_SECURE_OTHER|Interrupt seen in CC mode||
171|UNCORRECTABLE_DRAM_ERROR|Additional to Xid 48 providing more details on particulars of fault to differentiate DRAM/SRAM||
172|UNCORRECTABLE_SRAM_ERROR|Additional to Xid 48 providing more details on particulars of fault to differentiate DRAM/SRAM||
"""


@dataclass(frozen=True)
class XidInfo:
    code: int
    mnemonic: str
    description: str
    immediate: str  # NVIDIA's immediate-action bucket ("" where the catalog leaves it empty)
    investigatory: str
    bucket: str  # the bucket preflight grades by: `immediate`, or preflight's reading (READINGS)
    reading: str = ""  # why preflight reads a bucket NVIDIA did not give


# Preflight's readings: code -> (bucket, mnemonic, description, why). Mnemonic and description
# are only used for codes the catalog revision does not list.
READINGS: dict[int, tuple[str, str, str, str]] = {
    106: ("INFO", "", "", "a test message of the SMBPBI out-of-band interface: nothing happened to the GPU"),
    107: ("INFO", "", "", "a test message of the SMBPBI out-of-band interface: nothing happened to the GPU"),
    162: ("INFO", "", "", "power smoothing came back: good news, nothing to do"),
    163: ("IGNORE", "", "", "power smoothing is off: the GPU runs, but power draw swings reach the facility"),
    164: ("IGNORE", "", "", "the power smoothing circuit nears its end of life: plan a board replacement"),
    165: ("IGNORE", "", "", "the power smoothing circuit is worn out: plan a board replacement"),
    166: ("IGNORE", "", "", "a confidential-computing NVLink configuration event: nothing wrong with the hardware"),
    167: ("RESET_GPU", "", "", "a fatal PCIe timeout leaves the GPU unusable until it is reset"),
    168: ("IGNORE", "", "", "the GPU keeps running with less usable memory: jobs sized to the full memory may not fit"),
    169: ("RESET_GPU", "", "", "a halted SEC2 micro-controller needs a reset, as a halted PMU does (Xid 62)"),
    170: ("IGNORE", "", "", "an interrupt seen in confidential-computing mode: nothing wrong with the hardware"),
    171: ("WORKFLOW_XID_48", "", "", "details of an Xid 48 (uncorrectable DRAM error): handled as Xid 48"),
    172: ("WORKFLOW_XID_48", "", "", "details of an Xid 48 (uncorrectable SRAM error): handled as Xid 48"),
    173: ("RESTART_BM", "C2C_FATAL_LINK_FAILURE", "Fatal failure of the chip-to-chip (C2C) link",
          "the CPU-GPU chip-to-chip link is down: only a node reboot brings it back"),
    174: ("RESTART_APP", "ROBUST_CHANNEL_RESETCHANNEL_KILL_PROCESS_SILENT", "Channel reset, process killed silently",
          "an application's channel was torn down: the application is restarted, the GPU is fine"),
    175: ("RESET_GPU", "MEMORY_SUBSYSTEM_ERROR", "GPU memory subsystem error or timeout",
          "the driver classifies a GSP timeout caused by the memory subsystem as this Xid: the GPU needs a reset"),
    176: ("IGNORE", "PCIE_CORRECTABLE_ERROR_FAULT", "PCIe correctable errors past the driver's threshold",
          "correctable PCIe errors are corrected by the link: a signal-integrity warning, not a failure"),
}


def _load() -> dict[int, XidInfo]:
    out: dict[int, XidInfo] = {}
    for row in _TABLE.strip().split("\n"):
        code_s, mnemonic, description, immediate, investigatory = row.split("|")
        code = int(code_s)
        out[code] = XidInfo(code, mnemonic, description, immediate, investigatory, immediate)
    for code, (bucket, mnemonic, description, why) in READINGS.items():
        base = out.get(code)
        if base is None:
            out[code] = XidInfo(code, mnemonic, description, "", "", bucket, why)
        else:
            out[code] = XidInfo(code, base.mnemonic, base.description, base.immediate, base.investigatory, bucket, why)
    return out


CATALOG: dict[int, XidInfo] = _load()

NVLINK5_CODES = frozenset(range(144, 151))

# Bucket -> the policy code a Xid of that bucket gets (its status is the policy's).
BUCKET_CODES: dict[str, str] = {
    "RESTART_APP": "gpu.xid/restart-app",
    "RESET_GPU": "gpu.xid/reset-gpu",
    "RESTART_BM": "gpu.xid/restart-bm",
    "RESTART_VM": "gpu.xid/restart-vm",
    "IGNORE": "gpu.xid/ignore",
    "CONTACT_SUPPORT": "gpu.xid/contact-support",
    "CHECK_MECHANICALS": "gpu.xid/check-mechanicals",
    "UPDATE_SWFW": "gpu.xid/update-swfw",
    "CHECK_UVM": "gpu.xid/check-uvm",
    "WORKFLOW_XID_48": "gpu.xid/workflow-xid-48",
    "WORKFLOW_XID_45": "gpu.xid/workflow-xid-45",
    "WORKFLOW_NVLINK_ERR": "gpu.xid/workflow-nvlink-err",
    "INFO": "gpu.xid/informational",
}
# Xid 144-150 by the word the message prints (None: it prints none, or the Xid is only known
# from a later Xid 45 that names it)
NVLINK5_CODES_BY_WORD: dict[bool | None, str] = {
    True: "gpu.xid/workflow-nvlink5-err-fatal",
    False: "gpu.xid/workflow-nvlink5-err-nonfatal",
    None: "gpu.xid/workflow-nvlink5-err-unstated",
}
NOT_IN_CATALOG = "gpu.xid/not-in-catalog"
SITE_FAIL = "gpu.xid/site-fail"

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
    171: frozenset({48}),
    172: frozenset({48}),
}

# Xid 154 prints the new recovery action, e.g. "changed from 0x0 (None) to 0x1 (GPU Reset Required)":
# action code -> (action, policy code). 0-5: the driver's NV2080_CTRL_GPU_RECOVERY_ACTION_* (gpu.c
# `_gpuRecoveryActionName`); 6-7: NVML nvmlDeviceGpuRecoveryAction_t (BUS_RESET, SYSTEM_REBOOT).
RECOVERY_ACTIONS: dict[int, tuple[str, str]] = {
    0x0: ("IGNORE", "gpu.xid/recovery-none"),
    0x1: ("RESET_GPU", "gpu.xid/recovery-gpu-reset"),
    0x2: ("RESTART_BM", "gpu.xid/recovery-node-reboot"),
    0x3: ("DRAIN_P2P", "gpu.xid/recovery-drain-p2p"),
    0x4: ("DRAIN_AND_RESET", "gpu.xid/recovery-drain-and-reset"),
    0x5: ("RECOVER_IMEX_DOMAIN", "gpu.xid/recovery-imex-domain"),
    0x6: ("BUS_RESET", "gpu.xid/recovery-gpu-reset"),
    0x7: ("RESTART_BM", "gpu.xid/recovery-node-reboot"),
}
RECOVERY_UNKNOWN = ("XID_154", "gpu.xid/recovery-unknown")
RECOVERY_NONE = 0x0


def lookup(code: int) -> XidInfo | None:
    """The catalog row of an Xid code, or None when neither the catalog nor a reading lists it."""
    return CATALOG.get(code)


def recovery(action_code: int | None) -> tuple[str, str]:
    """(action, policy code) of an Xid 154 recovery action code."""
    return RECOVERY_ACTIONS.get(action_code, RECOVERY_UNKNOWN) if action_code is not None else RECOVERY_UNKNOWN


# Every action after which a GPU must not take a job until it is done: the catalog's drain
# buckets, the Fatal NVLink5 decode (Xid 144-150) and Xid 154's recovery actions. The one list
# the grader (which remedy to print) and flap damping (which Xid drains at once) read.
DRAIN_ACTIONS = frozenset({"RESET_GPU", "RESTART_BM", "RESTART_VM", "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR",
                           "WORKFLOW_NVLINK5_ERR", "CHECK_MECHANICALS", "DRAIN_P2P", "DRAIN_AND_RESET",
                           "RECOVER_IMEX_DOMAIN", "BUS_RESET"})


def needs_drain(action: str) -> bool:
    """True when an event's action means the GPU must be reset or the node rebooted first."""
    return action in DRAIN_ACTIONS


__all__ = ["BUCKET_CODES", "CATALOG", "DRAIN_ACTIONS", "INFO", "NOT_IN_CATALOG", "NVLINK5_CODES",
           "NVLINK5_CODES_BY_WORD", "READINGS", "RECOVERY_ACTIONS", "RECOVERY_NONE", "RECOVERY_UNKNOWN", "REVISION",
           "SITE_FAIL", "SYMPATHETIC", "XidInfo", "lookup", "needs_drain", "recovery"]
