"""Every finding code in the policy table that shows evidence has a proof test: a capture in the
tool's real format whose graded result shows (first evidence line, the one the console prints)
the line that proves that code. A code without one is a known gap here, with its reason, and the
gap list is checked both ways so it cannot rot: a gap that gets proved, or that leaves the table,
fails the test until the list says so.

A code "has evidence" when its table status is one the console shows evidence for (WARN, FAIL,
ERROR: `preflight.report.console.FAILURES`); a PASS code is a note and a SKIP code grades nothing,
so the console shows no evidence line for either. A code is "proved" by a case whose result names
it first (`facts["codes"][0]`: the worst finding, whose first evidence line is the one shown) and
whose shown line holds the case's telling token. Cases come from tests/checks/test_evidence_proof.py
(graded as that file grades them) and from ANALYZE_CASES below (analysed as `preflight analyze`
reads a pasted file).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest

from preflight import analyze, policy, registry
from preflight.model import Result, Status
from preflight.report.console import FAILURES, proof
from tests.conftest import FIXTURES, capture, fixture_text, grade

ANALYZE_CASES = [  # fixture (analysed as `preflight analyze` reads it), code proved, the token of the telling line
    ("fabricmanager/fm_abort_topology.log", "fabric.manager/aborted", "aborting fabric manager"),
    ("nvidia-smi-fabric/block_570_limited_capacity_recovery.txt", "fabric.manager/bandwidth-degraded",
     "Bandwidth : Degraded"),
    ("nvidia-smi-fabric/block_in_progress_na.txt", "fabric.manager/fabric-in-progress", "State : In Progress"),
    ("nvidia-smi-q/h100x4_535_fabric_in_progress.txt", "fabric.manager/fabric-in-progress", "State : In Progress"),
    ("nvidia-smi-q/h100x4_535_fabric_not_started.txt", "fabric.manager/fabric-not-started", "State : Not Started"),
    ("nvidia-smi-q/h100x2_535_fabric_insufficient_resources.txt", "fabric.manager/fabric-status-error",
     "Status : Insufficient Resources"),
    ("nvidia-smi-fabric/block_575_route_unhealthy_degraded.txt", "fabric.manager/health-unhealthy",
     "Summary : Unhealthy"),
    ("nvidia-smi-q/h100x1_590_fabric_degraded.txt", "fabric.manager/health-unhealthy", "Summary : Unhealthy"),
    ("fabricmanager/fm_gpu_nvl_nonfatal_multiline.log", "fabric.manager/multicast-failed", "multicast team request"),
    ("fabricmanager/fm_fatal_after_start.log", "fabric.manager/nvswitch-fatal", "NVSwitch fatal error 20034"),
    ("fabricmanager/fm_fatal_then_restart.log", "fabric.manager/nvswitch-fatal-before-restart",
     "NVSwitch fatal error 20034"),
    ("systemd-units/failed-arrow-legend.txt", "fabric.manager/service-not-running",
     "nvidia-fabricmanager.service loaded failed failed"),
    ("fabricmanager/journal_fm_killed_auto_restart.log", "fabric.manager/service-starting", "Scheduled restart job"),
    ("systemctl/show_fm_auto_restart.txt", "fabric.manager/service-starting", "ActiveState=activating"),
    ("fabricmanager/fm_log_version_mismatch.log", "fabric.manager/version-mismatch",
     "doesn't match with driver version"),
    ("nvidia-smi/query_driver_failed.txt", "gpu.driver/driver-not-loaded", "couldn't communicate with the NVIDIA driver"),
    ("nvidia-smi-q/err_no_devices.txt", "gpu.driver/no-devices", "No devices were found"),
    ("nvidia-smi-q/err_nvml_unknown.txt", "gpu.driver/nvml-init-failed", "Failed to initialize NVML: Unknown Error"),
    ("nvidia-smi/nvml_libnotfound.json", "gpu.driver/nvml-library-missing", "NVMLError_LibraryNotFound"),
    ("systemd-units/failed-arrow-legend.txt", "gpu.driver/unit-failed", "nvidia-dcgm.service"),
    ("systemd-units/persistenced-failed-status.txt", "gpu.driver/unit-failed", "Active: failed"),
    ("nvidia-smi-q/h100x2_535_busy_hw_slowdown.txt", "gpu.health/clock-slowdown-busy", "HW Slowdown : Active"),
    ("nvidia-smi-q/q_d_ecc_row_remapper_field_errors.txt", "gpu.health/field-unreadable", ": Unknown Error"),
    ("nvidia-smi-q/h100x8_535_gpu_lost.txt", "gpu.health/gpu-lost", "Unable to determine the device handle"),
    ("nvidia-smi-q/h100x8_535_truncated.txt", "gpu.health/gpus-missing-from-output", "Attached GPUs : 8"),
    ("nvidia-smi-q/err_no_devices.txt", "gpu.health/not-read-driver-error", "No devices were found"),
    ("nvidia-smi-q/h100x1_590_recovery_reboot_tpc_repair.txt", "gpu.health/recovery-reboot",
     "GPU Recovery Action : Reboot"),
    ("nvidia-smi-q/h100x1_590_recovery_reset.txt", "gpu.health/recovery-reset", "GPU Recovery Action : Reset"),
    ("nvidia-smi-q/grep_A_remapped_rows_8gpu_gpu5_pending.txt", "gpu.health/remap-pending",
     "[Remapped Rows] Pending : Yes"),
    ("nvidia-smi-q/q_d_ecc_row_remapper_i_bus_535_pending.txt", "gpu.health/remap-pending", "Pending : Yes"),
    ("nvidia-smi-q/h100x2_535_remap_failure.txt", "gpu.health/reset-required", "Reset Required : Yes"),
    ("nvidia-smi-q/v100x2_470_retired_pages_pending.txt", "gpu.health/retired-pages-pending",
     "Pending Page Blacklist : Yes"),
    ("nvidia-smi-q/q_d_temperature_old_layout_hot.txt", "gpu.health/temperature-slowdown", "GPU Current Temp : 96 C"),
    ("nvidia-smi-q/k80_352_retired_pending_old_layout.txt", "gpu.health/volatile-uncorrectable-ecc",
     "[ECC Errors/Volatile/Double Bit] Total : 1"),
    ("nvidia-smi/query_gpu_lost.csv", "gpu.inventory/gpu-lost", "Unable to determine the device handle"),
    ("nvidia-smi/smi_L_6of8_lost.txt", "gpu.inventory/gpu-lost", "Unable to determine the device handle"),
    ("nvidia-smi/query_gpu3_requires_reset.csv", "gpu.inventory/gpu-requires-reset", "[GPU requires reset]"),
    ("nvidia-smi/smi_L_2xa100_mig.txt", "gpu.inventory/mig-enabled", "MIG mode current=Enabled"),
    ("nvidia-smi/query_mig_persistence.csv", "gpu.inventory/mig-not-allowed", "mig.mode.current=Enabled"),
    ("nvidia-smi-q/err_no_driver.txt", "gpu.inventory/no-gpu-listed", "couldn't communicate with the NVIDIA driver"),
    ("nvidia-smi/nvml_libnotfound.json", "gpu.inventory/nvml-unavailable", "NVMLError_LibraryNotFound"),
    ("nvidia-smi/query_p0_slow_gen.csv", "gpu.inventory/pcie-gen-low-in-p0", "pcie.link.gen.current=3"),
    ("nvidia-smi/query_pcie_degraded.csv", "gpu.inventory/pcie-width-degraded", "pcie.link.width.current=8"),
    ("nvidia-smi/nvlink_8xh100_gpu3_link7_down.txt", "gpu.nvlink/link-down", "Link 7: <inactive>"),
    ("nvidia-smi/nvlink_8xh100_slow.txt", "gpu.nvlink/link-slow", "Link 2: 13.281 GB/s"),
    ("topo/topo_8xh100_gpu6_no_local_nic.txt", "gpu.topology/gpu-without-local-nic", "GPU6\t"),
    ("kernel-log/dmesg_raw_xid119_stack.log", "gpu.xid/reset-gpu", "): 119,"),
    ("kernel-log/syslog_kern_xid62.log", "gpu.xid/reset-gpu", "): 62,"),
    ("kernel-log/journal_short_iso_xid13_45.log", "gpu.xid/restart-app", "): 13,"),
    ("kernel-log/dmesg_T_xid79_fallen_off_bus.log", "gpu.xid/restart-bm", "): 79,"),
    ("kernel-log/kmsg_xid150_nonfatal.log", "gpu.xid/workflow-nvlink5-err-nonfatal", "): 150,"),
    ("kernel-log/dmesg_iso_xid48_63_94.log", "gpu.xid/workflow-xid-48", "): 48,"),
    ("triage/wd_versions/rank0.log", "hang.watchdog/collective-timeout", "Watchdog caught collective operation timeout"),
    ("triage/wd_versions/rank2.log", "hang.watchdog/collective-timeout", "Watchdog caught collective operation timeout"),
    ("flight-recorder/fr_trace_has_errors_type_and_size.txt", "hang.watchdog/fr-collective-mismatch",
     "sequence number: 40 has errors"),
    ("flight-recorder/fr_trace_undecided_missing_dumps.txt", "hang.watchdog/fr-dumps-missing",
     "we missed FR dumps from ranks"),
    ("flight-recorder/fr_trace_colon_sequence_missing_4to7.txt", "hang.watchdog/fr-missing-ranks",
     "Not all ranks joining collective"),
    ("flight-recorder/torchfrtrace_at_entry_missing_rank2.txt", "hang.watchdog/fr-missing-ranks",
     "Not all ranks joining collective"),
    ("flight-recorder/fr_trace_has_errors_state_mismatch.txt", "hang.watchdog/fr-state-mismatch",
     "sequence number: 12 has errors"),
    ("triage/rank1_peer_closed.log", "hang.watchdog/gloo-peer-closed", "Connection closed by peer"),
    ("watchdog/heartbeat_torch23.log", "hang.watchdog/heartbeat-timeout", "Heartbeat monitor timed out"),
    ("watchdog/heartbeat_torch27.log", "hang.watchdog/heartbeat-timeout", "watchdog got stuck for 480 seconds"),
    ("triage/ncclras_rank_behind.txt", "hang.watchdog/ras-incomplete", "INCOMPLETE"),
    ("watchdog/dump_signal_from_rank6.log", "hang.watchdog/remote-timeout", "Received a dump signal"),
    ("watchdog/torch26_two_groups_alltoall_allreduce.log", "hang.watchdog/several-groups-stuck",
     "Watchdog caught collective operation timeout"),
    ("triage/rank5_sigkill.log", "hang.watchdog/worker-failed", "exitcode  : -9"),
    ("ib/hca_table_cx7_one_down_one_init_pcie_x8.txt", "ib.hca/compute-port-down", "| down | down |"),
    ("ib/ibdev2netdev_mlx5_3_down.txt", "ib.hca/compute-port-down", "==> ibp97s0 (Down)"),
    ("ib/ibv_devinfo_roce_active_mtu1024.txt", "ib.hca/mtu-reduced", "active_mtu: 2048"),
    ("ib/ibstat_ibpanic_mlx5_6.txt", "ib.hca/tool-failed", "stat of IB device 'mlx5_6' failed"),
    ("systemd-units/failed-legacy-legend.txt", "ib.hca/unit-failed", "openibd.service"),
    ("systemd-units/openibd-failed-journal.txt", "ib.hca/unit-failed", "[FAILED]"),
    ("nccl-tests/all_reduce_perf_8node_64xV100_v2.11_error_column_4GBs.txt", "nccl.allreduce/below-slowest-fabric",
     "  4.33  "),
    ("nccl-tests/all_reduce_perf_1node_8xH100_263GBs_v2.13_rank_lines.txt", "nccl.allreduce/peak-below-expected",
     "263.66"),
    ("nccl-tests/all_reduce_perf_1node_degraded.txt", "nccl.allreduce/peak-below-floor", "229.59"),
    ("nccl-tests/all_reduce_perf_2node_16xH200_erratic_121GBs.txt", "nccl.allreduce/peak-below-floor", "120.79"),
    ("nccl-tests/all_reduce_perf_2node_16xH100_tcp_fallback.txt", "nccl.allreduce/tcp-fallback", "10.40"),
    ("nccl-tests/all_reduce_perf_2node_crash_truncated.txt", "nccl.allreduce/test-failure", "Test NCCL failure"),
    ("kernel-log/nccl_log_mentions_xid.txt", "nccl.transport/cuda-error", "NCCL WARN Cuda failure"),
    ("nccl/nccl_info_2node_socket_fallback_one_host.log", "nccl.transport/socket-fallback", "NET/Socket : Using"),
    ("ping/jumbo_frag_needed.txt", "net.mtu/frag-needed", "Frag needed, mtu 1500"),
    ("ping/transcript_old_iputils_local_error.txt", "net.mtu/local-mtu-too-small", "local MTU 1500"),
    ("ping/jumbo_silent_loss.txt", "net.mtu/no-reply", "no_reply"),
    ("ping/jumbo_unreachable.txt", "net.mtu/peer-unreachable", "destination unreachable"),
    ("ping/transcript_black_hole_pair.txt", "net.mtu/silent-loss", "jumbo pings vanish"),
    ("ip/ip_d_addr_text_mtu_mixed.txt", "net.nic/adapter-mtu-mismatch", "enp65s0f"),
    ("ip/ip_o_link_bond_two_slaves_vlans.txt", "net.nic/bond-member-down", "ens1f1: <NO-CARRIER"),
    ("ethtool/ethtool_bond1_unknown_speed_no_link.txt", "net.nic/ethtool-no-link", "Link detected: no"),
    ("netlog/dmesg_mlx5_module_error_and_flaps.log", "net.nic/link-lost", "ens21f0np0: Link down"),
    ("ip/ifconfig_two_nics.txt", "net.nic/no-carrier", "ens3f0np0: flags=4099<UP,BROADCAST,MULTICAST>"),
    ("ip/ip_j_d_addr_container_veth_only.json", "net.nic/no-data-nic", "lo: <LOOPBACK"),
    ("ip/ip_addr_show_two_prompts_one_without_ipv4.txt", "net.nic/no-ipv4-address", "enp13s0np0:"),
    ("chrony/tracking_4x_3s_fast.txt", "node.clock/offset-high", "3.000214000 seconds fast"),
    ("systemd-units/chronyd-failed-status-el7.txt", "node.clock/unit-failed", "Active: failed"),
    ("systemd-units/failed-legacy-legend.txt", "node.units/unit-failed", "rasdaemon.service"),
]
NO_CASE = "no proof case yet"
WRONG = "shown line wrong: "

KNOWN_GAPS: dict[str, str] = {  # code: why it has no proof case
    "analyze.node/not-reached": NO_CASE,
    "cluster.clock/nodes-disagree": NO_CASE,  # cross-node: test_evidence_proof.py::test_cluster_clock_shows_...
    "cluster.mtu/black-hole": NO_CASE,
    "cluster.nccl_env/env-differs": NO_CASE,
    "cluster.nodes/short": NO_CASE,
    "cluster.versions/version-differs": NO_CASE,
    "fabric.manager/access-timeout-recovery": NO_CASE,
    "fabric.manager/bad-command-line": NO_CASE,
    "fabric.manager/failed-without-nvswitch": NO_CASE,
    "fabric.manager/health-limited-capacity": NO_CASE,
    "fabric.manager/incorrect-configuration": NO_CASE,
    "fabric.manager/masked": NO_CASE,
    "fabric.manager/not-installed": NO_CASE,
    "fabric.manager/nvidia-smi-failed": NO_CASE,
    "fabric.manager/nvswitch-nonfatal": NO_CASE,
    "fabric.manager/nvswitch-not-found": NO_CASE,
    "fabric.manager/route-recovery": NO_CASE,
    "fabric.manager/route-unhealthy": NO_CASE,
    "fabric.manager/start-failed": NO_CASE,
    "fabric.manager/unread-error": NO_CASE,
    "fabric.manager/unverified": NO_CASE,
    "gpu.driver/cuda-version-pin": NO_CASE,
    "gpu.driver/driver-version-pin": NO_CASE,
    "gpu.driver/klog-api-mismatch": NO_CASE,
    "gpu.driver/klog-driver-fault": NO_CASE,
    "gpu.driver/klog-firmware-missing": NO_CASE,
    "gpu.driver/klog-module-symbols": NO_CASE,
    "gpu.driver/klog-no-adapter": NO_CASE,
    "gpu.driver/klog-probe-not-called": NO_CASE,
    "gpu.driver/klog-unsupported-gpu": NO_CASE,
    "gpu.driver/module-differs-from-disk": NO_CASE,
    "gpu.driver/module-differs-from-userspace": NO_CASE,
    "gpu.driver/module-older-than-packages": NO_CASE,
    "gpu.driver/no-tooling-required": NO_CASE,
    "gpu.driver/no-version-found": NO_CASE,
    "gpu.driver/nvml-unusable-here": NO_CASE,
    "gpu.driver/smi-failed": NO_CASE,
    "gpu.driver/smi-nvml-disagree": NO_CASE,
    "gpu.health/aggregate-uncorrectable-ecc": NO_CASE,
    "gpu.health/banks-without-spare-rows": NO_CASE,
    "gpu.health/channel-repair-pending": NO_CASE,
    "gpu.health/clock-slowdown-idle": NO_CASE,
    "gpu.health/drain-and-reset-recommended": NO_CASE,
    "gpu.health/ecc-disabled": NO_CASE,
    "gpu.health/ecc-mode-change-pending": NO_CASE,
    "gpu.health/fan-unreadable": NO_CASE,
    "gpu.health/memory-temperature-over-max": NO_CASE,
    "gpu.health/needs-reset": NO_CASE,
    "gpu.health/no-gpu-in-output": NO_CASE,
    "gpu.health/power-limit-below-default": NO_CASE,
    "gpu.health/power-unreadable": NO_CASE,
    "gpu.health/recovery-bus-reset": NO_CASE,
    "gpu.health/recovery-drain-and-reset": NO_CASE,
    "gpu.health/recovery-drain-p2p": NO_CASE,
    "gpu.health/recovery-imex-domain": NO_CASE,
    "gpu.health/recovery-unknown": NO_CASE,
    "gpu.health/remap-failure": NO_CASE,
    "gpu.health/reset-refused": NO_CASE,
    "gpu.health/retired-pages-dbe": NO_CASE,
    "gpu.health/retired-pages-table-full": NO_CASE,
    "gpu.health/sram-threshold-exceeded": NO_CASE,
    "gpu.health/telemetry-unreadable": NO_CASE,
    "gpu.health/temperature-over-max-operating": NO_CASE,
    "gpu.health/temperature-shutdown": NO_CASE,
    "gpu.health/tpc-repair-pending": NO_CASE,
    "gpu.health/unrepairable-memory": NO_CASE,
    "gpu.inventory/extra-gpus": NO_CASE,
    "gpu.inventory/gpu-access-denied": NO_CASE,
    "gpu.inventory/gpu-insufficient-power": NO_CASE,
    "gpu.inventory/gpu-missing-by-socket-layout":
        WRONG + "shows the first present GPU's row (the 'present' list), not what says a GPU is missing (checks/gpu.py)",
    "gpu.inventory/inforom-corrupted": NO_CASE,
    "gpu.inventory/listings-disagree": NO_CASE,
    "gpu.inventory/mig-pending": NO_CASE,
    "gpu.inventory/mixed-models": NO_CASE,
    "gpu.inventory/pcie-gen-capped": NO_CASE,
    "gpu.inventory/persistence-off": NO_CASE,
    "gpu.inventory/unreadable-output": NO_CASE,
    "gpu.inventory/unreadable-row": NO_CASE,
    "gpu.inventory/wrong-model": NO_CASE,
    "gpu.nvlink/crc-errors": NO_CASE,
    "gpu.nvlink/gpu-not-listed": NO_CASE,
    "gpu.nvlink/link-down-unknown-model": NO_CASE,
    "gpu.nvlink/no-nvlink": NO_CASE,
    "gpu.nvlink/not-graded": NO_CASE,
    "gpu.nvlink/packet-errors": NO_CASE,
    "gpu.nvlink/recovery-errors": NO_CASE,
    "gpu.nvlink/recovery-failed": NO_CASE,
    "gpu.nvlink/replay-errors": NO_CASE,
    "gpu.nvlink/symbol-errors": NO_CASE,
    "gpu.nvlink/tool-failed": NO_CASE,
    "gpu.nvlink/unreadable-output": NO_CASE,
    "gpu.topology/gpu-missing-by-numa-layout": NO_CASE,
    "gpu.topology/gpu-not-listed": NO_CASE,
    "gpu.topology/no-gpu-near-a-nic": NO_CASE,
    "gpu.topology/not-graded": NO_CASE,
    "gpu.topology/pair-fewer-nvlinks": NO_CASE,
    "gpu.topology/tool-failed": NO_CASE,
    "gpu.topology/unreadable-output": NO_CASE,
    "gpu.xid/adapter-init-failed": NO_CASE,
    "gpu.xid/check-mechanicals": NO_CASE,
    "gpu.xid/check-uvm": NO_CASE,
    "gpu.xid/contact-support": NO_CASE,
    "gpu.xid/device-marked-unhealthy": NO_CASE,
    "gpu.xid/driver-assert": NO_CASE,
    "gpu.xid/driver-error-status": NO_CASE,
    "gpu.xid/fallen-off-bus": NO_CASE,
    "gpu.xid/gpu-lost": NO_CASE,
    "gpu.xid/gsp-crash": NO_CASE,
    "gpu.xid/gsp-timeout": NO_CASE,
    "gpu.xid/ignore": NO_CASE,
    "gpu.xid/log-empty": NO_CASE,
    "gpu.xid/log-unreadable": NO_CASE,
    "gpu.xid/machine-check-corrected": NO_CASE,
    "gpu.xid/machine-check-uncorrected": NO_CASE,
    "gpu.xid/memory-subsystem-error": NO_CASE,
    "gpu.xid/not-a-kernel-log": NO_CASE,
    "gpu.xid/nvlink-training-failed": NO_CASE,
    "gpu.xid/nvml-dbe-event": NO_CASE,
    "gpu.xid/pcie-corrected": NO_CASE,
    "gpu.xid/pcie-fatal": NO_CASE,
    "gpu.xid/pcie-link-bounced": NO_CASE,
    "gpu.xid/pcie-link-down": NO_CASE,
    "gpu.xid/pcie-nonfatal": NO_CASE,
    "gpu.xid/pcie-recovered": NO_CASE,
    "gpu.xid/pcie-recovery-failed": NO_CASE,
    "gpu.xid/pmu-halted": NO_CASE,
    "gpu.xid/recovery-drain-and-reset": NO_CASE,
    "gpu.xid/recovery-drain-p2p": NO_CASE,
    "gpu.xid/recovery-gpu-reset": NO_CASE,
    "gpu.xid/recovery-imex-domain": NO_CASE,
    "gpu.xid/recovery-node-reboot": NO_CASE,
    "gpu.xid/recovery-unknown": NO_CASE,
    "gpu.xid/reset-required": NO_CASE,
    "gpu.xid/restart-vm": NO_CASE,
    "gpu.xid/site-fail": NO_CASE,
    "gpu.xid/sxid-fatal": NO_CASE,
    "gpu.xid/sxid-nonfatal": NO_CASE,
    "gpu.xid/sxid-unclassified": NO_CASE,
    "gpu.xid/uncorrected-ecc": NO_CASE,
    "gpu.xid/unread-error": NO_CASE,
    "gpu.xid/update-swfw": NO_CASE,
    "gpu.xid/workflow-nvlink-err": NO_CASE,
    "gpu.xid/workflow-nvlink5-err-fatal": NO_CASE,
    "gpu.xid/workflow-nvlink5-err-unstated": NO_CASE,
    "gpu.xid/workflow-xid-45": NO_CASE,
    "gpu.xid/wpr2-up": NO_CASE,
    "hang.watchdog/agent-signalled": NO_CASE,
    "hang.watchdog/collective-mismatch": NO_CASE,
    "hang.watchdog/communicator-aborted": NO_CASE,
    "hang.watchdog/desync-report": NO_CASE,
    "hang.watchdog/elastic-restarted": NO_CASE,
    "hang.watchdog/fr-rank-behind": NO_CASE,
    "hang.watchdog/gloo-error": NO_CASE,
    "hang.watchdog/gloo-timeout": NO_CASE,
    "hang.watchdog/monitored-barrier": NO_CASE,
    "hang.watchdog/nccl-error": NO_CASE,
    "hang.watchdog/p2p-sender-exited": NO_CASE,
    "hang.watchdog/ras-aborted": NO_CASE,
    "hang.watchdog/ras-comm-error": NO_CASE,
    "hang.watchdog/ras-count-mismatch": NO_CASE,
    "hang.watchdog/ras-dead": NO_CASE,
    "hang.watchdog/ras-gather-timeout": NO_CASE,
    "hang.watchdog/ras-mismatch-cut": NO_CASE,
    "hang.watchdog/ras-status-mismatch": NO_CASE,
    "hang.watchdog/ras-uneven-job": NO_CASE,
    "hang.watchdog/remote-error": NO_CASE,
    "hang.watchdog/some-failed": NO_CASE,
    "hang.watchdog/store-failure": NO_CASE,
    "hang.watchdog/store-gone": NO_CASE,
    "hang.watchdog/timeouts-differ-in-collective": NO_CASE,
    "hang.watchdog/unread-error": NO_CASE,
    "hang.watchdog/watchdog-exception": NO_CASE,
    "hang.watchdog/watchdog-failure": NO_CASE,
    "hang.watchdog/worker-restarted": NO_CASE,
    "ib.hca/compute-ports-missing": NO_CASE,
    "ib.hca/hca-fatal": NO_CASE,
    "ib.hca/link-lost": NO_CASE,
    "ib.hca/module-error": NO_CASE,
    "ib.hca/no-devices": NO_CASE,
    "ib.hca/no-infiniband-port": NO_CASE,
    "ib.hca/other-port-down": NO_CASE,
    "ib.hca/other-port-down-required": NO_CASE,
    "ib.hca/pcie-narrow": NO_CASE,
    "ib.hca/rate-below-adapter": NO_CASE,
    "ib.hca/rate-below-siblings": NO_CASE,
    "ib.hca/unread-error": NO_CASE,
    "ib.hca/width-narrow": NO_CASE,
    "ib.hca/width-reduced": NO_CASE,
    "nccl.allreduce/aborted": NO_CASE,
    "nccl.allreduce/avg-mismatch": NO_CASE,
    "nccl.allreduce/below-pcie-p2p": NO_CASE,
    "nccl.allreduce/crashed-before-rows": NO_CASE,
    "nccl.allreduce/latency-spike": NO_CASE,
    "nccl.allreduce/min-bw-check-failed": NO_CASE,
    "nccl.allreduce/not-validated": NO_CASE,
    "nccl.allreduce/one-nic-plateau": NO_CASE,
    "nccl.allreduce/out-of-bounds": NO_CASE,
    "nccl.allreduce/single-size": NO_CASE,
    "nccl.allreduce/size-slow": NO_CASE,
    "nccl.allreduce/stopped-mid-row": NO_CASE,
    "nccl.allreduce/unread-error": NO_CASE,
    "nccl.transport/bad-interface": NO_CASE,
    "nccl.transport/bad-interface-listed": NO_CASE,
    "nccl.transport/collective-mismatch": NO_CASE,
    "nccl.transport/collective-mismatch-suspected": NO_CASE,
    "nccl.transport/connect-failed": NO_CASE,
    "nccl.transport/connect-retrying": NO_CASE,
    "nccl.transport/cuda-oom": NO_CASE,
    "nccl.transport/duplicate-gpu": NO_CASE,
    "nccl.transport/fewer-hcas-than-gpus": NO_CASE,
    "nccl.transport/gdr-disabled": NO_CASE,
    "nccl.transport/gdr-off-by-distance": NO_CASE,
    "nccl.transport/hcas-subset": NO_CASE,
    "nccl.transport/ib-async-event": NO_CASE,
    "nccl.transport/ib-async-fatal": NO_CASE,
    "nccl.transport/ib-completion-error": NO_CASE,
    "nccl.transport/ib-device-unusable": NO_CASE,
    "nccl.transport/ib-incompatible-nics": NO_CASE,
    "nccl.transport/ib-verbs-call-failed": NO_CASE,
    "nccl.transport/mixed-link-layers": NO_CASE,
    "nccl.transport/mixed-versions": NO_CASE,
    "nccl.transport/nccl-error": NO_CASE,
    "nccl.transport/net-plugin-error": NO_CASE,
    "nccl.transport/no-log": NO_CASE,
    "nccl.transport/no-usable-interface": NO_CASE,
    "nccl.transport/nonfatal-warn": NO_CASE,
    "nccl.transport/nvls-requested-not-used": NO_CASE,
    "nccl.transport/nvls-unavailable": NO_CASE,
    "nccl.transport/ofi-no-provider": NO_CASE,
    "nccl.transport/ofi-no-provider-fallback": NO_CASE,
    "nccl.transport/p2p-disabled-nvlink": NO_CASE,
    "nccl.transport/peer-access-failed": NO_CASE,
    "nccl.transport/peer-connection-lost": NO_CASE,
    "nccl.transport/plugin-not-ib": NO_CASE,
    "nccl.transport/rank-count-mismatch": NO_CASE,
    "nccl.transport/roce-cross-subnet": NO_CASE,
    "nccl.transport/shm-failed": NO_CASE,
    "nccl.transport/socket-single-host": NO_CASE,
    "nccl.transport/socket-transport": NO_CASE,
    "nccl.transport/unread-error": NO_CASE,
    "nccl.transport/version-mismatch": NO_CASE,
    "net.mtu/black-hole-at-node": NO_CASE,
    "net.mtu/configured-mtu-below-profile": NO_CASE,
    "net.mtu/configured-mtu-low": NO_CASE,
    "net.mtu/invalid-peer": NO_CASE,
    "net.mtu/jumbo-lossy": NO_CASE,
    "net.mtu/no-result": NO_CASE,
    "net.mtu/peer-unresolved": NO_CASE,
    "net.mtu/ping-missing-required": NO_CASE,
    "net.mtu/unparsable": NO_CASE,
    "net.mtu/unread-error": NO_CASE,
    "net.nic/address-dadfailed": NO_CASE,
    "net.nic/bond-mtu-mismatch": NO_CASE,
    "net.nic/declared-link-slow": NO_CASE,
    "net.nic/declared-mtu-below-profile": NO_CASE,
    "net.nic/declared-nic-down": NO_CASE,
    "net.nic/declared-nic-missing": NO_CASE,
    "net.nic/declared-no-link": NO_CASE,
    "net.nic/gloo-ifname-all-down": NO_CASE,
    "net.nic/gloo-ifname-allows-virtual": NO_CASE,
    "net.nic/gloo-ifname-empty": NO_CASE,
    "net.nic/gloo-ifname-no-match": NO_CASE,
    "net.nic/half-duplex": NO_CASE,
    "net.nic/ib-disabled-on-ib-profile": NO_CASE,
    "net.nic/ib-hca-excludes-all": NO_CASE,
    "net.nic/ib-hca-no-match": NO_CASE,
    "net.nic/ib-hca-no-rdma-devices": NO_CASE,
    "net.nic/ib-hca-prefix-ambiguous": NO_CASE,
    "net.nic/ib-port-no-carrier": NO_CASE,
    "net.nic/link-flapped": NO_CASE,
    "net.nic/link-flapping": NO_CASE,
    "net.nic/link-local-dadfailed": NO_CASE,
    "net.nic/link-slow": NO_CASE,
    "net.nic/module-error": NO_CASE,
    "net.nic/mtu-above-profile": NO_CASE,
    "net.nic/requested-nic-down": NO_CASE,
    "net.nic/socket-ifname-all-down": NO_CASE,
    "net.nic/socket-ifname-allows-virtual": NO_CASE,
    "net.nic/socket-ifname-empty": NO_CASE,
    "net.nic/socket-ifname-no-match": NO_CASE,
    "net.nic/subnet-mtu-mismatch": NO_CASE,
    "net.nic/unparsable": NO_CASE,
    "net.nic/virtual-mtu-above-uplink": NO_CASE,
    "node.clock/controller-offset": NO_CASE,
    "node.clock/daemon-exited": NO_CASE,
    "node.clock/error-bound-high": NO_CASE,
    "node.clock/local-reference": NO_CASE,
    "node.clock/no-time-daemon": NO_CASE,
    "node.clock/offset-warn": NO_CASE,
    "node.clock/output-unrecognised": NO_CASE,
    "node.clock/unread-error": NO_CASE,
    "node.responsive/tools-hung": NO_CASE,
    "run.check/internal-fault": NO_CASE,
    "run.probe/not-started": NO_CASE,
    "run.probe/output-lost": NO_CASE,
    "run.probe/timed-out": NO_CASE,
    "run.result/missing": NO_CASE,
    "run.tool/missing-required": NO_CASE,
}


def first_code(r: Result) -> str:
    codes = r.facts.get("codes") or []
    return str(codes[0]) if codes else ""


def analysed(fixture: str) -> list[Result]:
    return list(analyze.analyze(registry.load(), [FIXTURES / fixture]))


def _proof_cases() -> Iterator[tuple[str, Result | None, str]]:
    """(case, the result it shows, its token) for each case of test_evidence_proof.py."""
    from tests.checks import test_evidence_proof as tp

    for check, inputs, token in tp.CASES:
        res = grade(check, {p: capture(p, fixture_text(f)) for p, f in inputs.items()}, profile="h100-sxm-8x")
        bad = [r for r in res if r.status in FAILURES]
        yield f"{check} {inputs}", bad[0] if len(bad) == 1 else None, token
    # its analysed logs, as that test reads them (the first result of the check)
    marks = getattr(tp.test_analysed_logs_show_the_telling_line, "pytestmark", [])
    for fixture, check, token in next((m.args[1] for m in marks if m.name == "parametrize"), []):
        res = [r for r in analysed(fixture) if r.check == check]
        yield fixture, res[0] if res else None, token


@functools.lru_cache(maxsize=1)
def proved() -> dict[str, str]:
    """Each code some proof case proves, with the first case that proves it."""
    out: dict[str, str] = {}
    for case, r, token in _proof_cases():
        if r is not None and r.status in FAILURES and token in proof(r):
            out.setdefault(first_code(r), case)
    for fixture, code, token in ANALYZE_CASES:
        for r in analysed(fixture):
            if first_code(r) == code and token in proof(r):
                out.setdefault(code, fixture)
    out.pop("", None)
    return out


def with_evidence() -> set[str]:
    table = policy.builtin().codes
    return {code for code, entry in table.items() if entry.status in FAILURES}


@pytest.mark.parametrize("fixture,code,token", ANALYZE_CASES, ids=[f"{c[1]}-{c[0].split('/')[-1]}"
                                                                    for c in ANALYZE_CASES])
def test_the_shown_line_proves_the_code(fixture: str, code: str, token: str) -> None:
    res = [r for r in analysed(fixture) if r.check == code.split("/")[0]]
    named = [r for r in res if first_code(r) == code]
    assert named, [(r.check, r.status, r.facts.get("codes")) for r in res]
    assert token in proof(named[0]), (proof(named[0]), named[0].evidence[:4])


def test_every_code_with_evidence_is_proved_or_a_known_gap() -> None:
    missing = sorted(with_evidence() - set(proved()) - set(KNOWN_GAPS))
    assert not missing, f"{len(missing)} code(s) with evidence have no proof case and are not a known gap: {missing}"


def test_no_known_gap_is_proved() -> None:
    stale = {code: proved()[code] for code in KNOWN_GAPS if code in proved()}
    assert not stale, f"proved now, take them out of KNOWN_GAPS: {stale}"


def test_every_known_gap_is_a_code_with_evidence_and_a_reason() -> None:
    table = policy.builtin().codes
    assert not [c for c in KNOWN_GAPS if c not in table], "KNOWN_GAPS names codes the policy table does not have"
    assert not [c for c in KNOWN_GAPS if table[c].status not in FAILURES], "KNOWN_GAPS names codes without evidence"
    assert all(r == NO_CASE or (r.startswith(WRONG) and len(r) > len(WRONG)) for r in KNOWN_GAPS.values())


def test_every_case_names_a_code_of_the_table() -> None:
    table = policy.builtin().codes
    assert not [c for _, c, _ in ANALYZE_CASES if c not in table]
    assert {Status.FAIL, Status.ERROR, Status.WARN} == set(FAILURES)
