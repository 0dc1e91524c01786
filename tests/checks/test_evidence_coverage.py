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
(graded as that file grades them) and from this file: ANALYZE_CASES (a fixture analysed as
`preflight analyze` reads a pasted file), GRADE_CASES (one check graded on captures as `run` grades
them, or on pasted text as `analyze` does; a site profile from tests/fixtures/profiles where a code
needs one) and CROSS_CASES (the cross-node graders over several nodes).

A known gap's reason is one of three: NO_CASE (no proof case written yet), ENGINE (the evidence is
preflight's own sentence, not a tool's line) or WRONG + what the shown line is instead of the
telling one (a grader to fix; then its case goes in and the gap comes out).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest

from preflight import analyze, policy, registry
from preflight.model import Capture, CaptureState, Result, Status
from preflight.report.console import FAILURES, proof
from tests.conftest import FIXTURES, capture, fixture_text, grade, grade_text

FX = "fixture:"

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
    ("nvidia-smi-fabric/proof_route_unhealthy.txt", "fabric.manager/route-unhealthy", "Route Unhealthy : True"),
    ("nvidia-smi-fabric/proof_incorrect_configuration.txt", "fabric.manager/incorrect-configuration",
     "Incorrect Configuration : Insufficient NVLinks"),
    ("nvidia-smi-fabric/proof_limited_capacity.txt", "fabric.manager/health-limited-capacity", "Summary : Limited Capacity"),
    ("nvidia-smi-fabric/proof_route_recovery.txt", "fabric.manager/route-recovery", "Route Recovery in progress : True"),
    ("nvidia-smi-fabric/proof_access_timeout_recovery.txt", "fabric.manager/access-timeout-recovery",
     "Access Timeout Recovery : True"),
    ("nvidia-smi-q/proof_gpu_health_memory_temperature_over_max.txt", "gpu.health/memory-temperature-over-max",
     "Memory Current Temp : 97 C"),
    ("ib/proof_ib_hca_pcie_narrow.txt", "ib.hca/pcie-narrow", "x8 >!<"),
    ("pdsh/proof_analyze_node_not_reached.txt", "analyze.node/not-reached",
     "ssh: connect to host gpu002 port 22: Connection refused"),
]
GRADE_CASES = [  # code, how it is graded (run or analyze; profile h100-sxm-8x where -h100, a site profile where
    # -profiles/<file>.toml), {probe: input}, token
    # an input is a fixture ("fixture:<path>"), the capture's stdout itself in the tool's format, or a dict of
    # the capture's fields (stdout, rc, stderr, state, timeout)
    ("fabric.manager/bad-command-line", "analyze",
     {"fm-log": "fixture:fabricmanager/proof_fabric_manager_bad_command_line.log"},
     "unrecognized option '--foo'"),
    ("fabric.manager/failed-without-nvswitch", "run",
     {"fm-service": "fixture:systemctl/show_fm_failed.txt", "nvidia-smi-q": "fixture:nvidia-smi-q/l40s_x1_535_no_fabric.txt"},
     "ActiveState=failed"),
    ("fabric.manager/masked", "run-h100",
     {"fm-service": "fixture:systemctl/proof_fabric_manager_masked_fm_service.txt", "nvidia-smi-q": "fixture:nvidia-smi-q/h100x8_535_healthy_idle_powerbrake.txt"},
     "LoadState=masked"),
    ("fabric.manager/nvswitch-nonfatal", "run-h100",
     {"fm-log": "fixture:fabricmanager/proof_fabric_manager_nvswitch_nonfatal.log"},
     "NVSwitch non-fatal error 12028"),
    ("fabric.manager/nvswitch-not-found", "analyze-h100",
     {"fm-service": "fixture:systemctl/proof_fabric_manager_nvswitch_not_found.txt"},
     "request to query NVSwitch device information from NVSwitch driver failed"),
    ("fabric.manager/start-failed", "analyze",
     {"fm-log": "[Nov 25 2026 10:11:12] [ERROR] [tid 1234] \"/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg\" failed! Exit code: 1"},
     "failed! Exit code: 1"),
    ("fabric.manager/unread-error", "analyze",
     {"fm-log": "[Nov 25 2026 10:11:12] [ERROR] [tid 1234] request to query NVSwitch device information from NVSwitch driver failed with error:Generic Error [NV_ERR_GENERIC]"},
     "failed with error:Generic Error"),
    ("fabric.manager/unverified", "run-h100",
     {"nvidia-smi-q": "fixture:nvidia-smi-q/l40s_x1_535_no_fabric.txt"},
     "fabric.nvswitch = true"),
    ("gpu.driver/klog-firmware-missing", "analyze",
     {"kernel-log": "[   12.345678] NVRM: No firmware image found"},
     "NVRM: No firmware image found"),
    ("gpu.driver/klog-module-symbols", "analyze",
     {"kernel-log": "[   12.345678] nvidia: Unknown symbol drm_gem_object_free (err -2)"},
     "nvidia: Unknown symbol drm_gem_object_free (err -2)"),
    ("gpu.driver/klog-no-adapter", "analyze",
     {"kernel-log": "[   12.345678] NVRM: No NVIDIA GPU found."},
     "NVRM: No NVIDIA GPU found."),
    ("gpu.driver/klog-probe-not-called", "analyze",
     {"kernel-log": "[   12.345678] NVRM: The NVIDIA probe routine was not called for 3 device(s)."},
     "NVRM: The NVIDIA probe routine was not called for 3 device(s"),
    ("gpu.driver/klog-unsupported-gpu", "analyze",
     {"kernel-log": "[   12.345678] NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:2b85) installed in this system is not supported by the NVIDIA 535.129.03 driver release."},
     "NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:2b85) instal"),
    ("gpu.driver/module-differs-from-userspace", "analyze",
     {"nvidia-smi-q": "fixture:nvidia-smi-q/proof_gpu_driver_module_differs_from_userspace_nvidia_smi_q.txt", "driver-version": "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 18:56:32 UTC 2023"},
     "Kernel Module  535.129.03"),
    ("gpu.driver/no-version-found", "run", {"nvidia-smi-q": "???\n"}, "no driver version"),
    ("gpu.driver/nvml-unusable-here", "run",
     {"nvidia-smi-q": "fixture:nvidia-smi-q/proof_gpu_driver_nvml_unusable_here_nvidia_smi_q.txt", "nvml": "fixture:nvidia-smi/proof_gpu_driver_nvml_unusable_here_nvml.json"},
     "NVMLError_LibraryNotFound"),
    ("gpu.driver/smi-nvml-disagree", "run",
     {"nvidia-smi-q": "fixture:nvidia-smi-q/proof_gpu_driver_smi_nvml_disagree_nvidia_smi_q.txt", "nvml": "{\"ok\": true, \"error\": \"\", \"error_type\": \"\", \"driver\": \"550.54.15\", \"nvml_version\": \"12.535.129.03\", \"cuda_driver_version\": 12020, \"gpus\": [{\"index\": 0}]}\n"},
     "Driver Version : 535.129.03"),
    ("gpu.health/aggregate-uncorrectable-ecc", "analyze",
     {"nvidia-smi-q": "fixture:nvidia-smi-q/proof_gpu_health_aggregate_uncorrectable_ecc.txt"},
     "DRAM Uncorrectable : 3"),
    ("gpu.health/banks-without-spare-rows", "run",
     {"nvidia-smi-query": "fixture:nvidia-smi/proof_gpu_health_banks_without_spare_rows.csv"},
     "remapped_rows.histogram.none=1"),
    ("gpu.health/channel-repair-pending", "run",
     {"nvidia-smi-q": "fixture:nvidia-smi-q/proof_gpu_health_channel_repair_pending.txt"},
     "Channel Repair Pending : Yes"),
    ("gpu.health/clock-slowdown-idle", "run",
     {"nvidia-smi-query": "fixture:nvidia-smi/proof_gpu_health_clock_slowdown_idle.csv"},
     "hw_thermal_slowdown=Active"),
    ("gpu.health/drain-and-reset-recommended", "run",
     {"nvidia-smi-q": "fixture:nvidia-smi-q/proof_gpu_health_drain_and_reset_recommended.txt"},
     "Drain and Reset Recommended : Yes"),
    ("gpu.health/ecc-disabled", "run",
     {"nvidia-smi-query": "fixture:nvidia-smi/proof_gpu_health_ecc_disabled.csv"},
     "ecc.mode.current=Disabled"),
    ("gpu.health/ecc-mode-change-pending", "run",
     {"nvidia-smi-q": "fixture:nvidia-smi-q/proof_gpu_health_ecc_mode_change_pending.txt"},
     "Pending : Disabled"),
    ("gpu.health/fan-unreadable", "analyze",
     {"nvidia-smi-table": "fixture:nvidia-smi/proof_gpu_health_fan_unreadable.txt"},
     "|ERR!"),
    ("gpu.health/needs-reset", "analyze",
     {"nvidia-smi-q": "Unable to reset GPU 00000000:55:00.0: GPU requires reset\nGPU requires reset"},
     "GPU requires reset"),
    ("gpu.health/power-limit-below-default", "run",
     {"nvidia-smi-q": "fixture:nvidia-smi-q/proof_gpu_health_power_limit_below_default.txt"},
     "Power Limit : 250.00 W"),
    ("gpu.health/power-unreadable", "run",
     {"nvidia-smi-table": "fixture:nvidia-smi/proof_gpu_health_power_unreadable.txt"},
     "ERR! /  700W"),
    ("gpu.health/recovery-bus-reset", "run",
     {"nvidia-smi-q": "fixture:nvidia-smi-q/proof_gpu_health_recovery_bus_reset.txt"},
     "GPU Recovery Action : Bus Reset"),
    ("gpu.health/recovery-drain-and-reset", "analyze",
     {"nvidia-smi-q": "GPU Recovery Action                                : None\nGPU Recovery Action                                : Drain and Reset"},
     "GPU Recovery Action : Drain and Reset"),
    ("gpu.health/recovery-drain-p2p", "run",
     {"nvidia-smi-query": "fixture:nvidia-smi/proof_gpu_health_recovery_drain_p2p.csv"},
     "gpu_recovery_action=Drain P2P"),
    ("gpu.health/recovery-imex-domain", "run",
     {"nvidia-smi-q": "fixture:nvidia-smi-q/proof_gpu_health_recovery_imex_domain.txt"},
     "GPU Recovery Action : Recover IMEX Domain"),
    ("gpu.health/recovery-unknown", "run",
     {"nvidia-smi-q": "fixture:nvidia-smi-q/proof_gpu_health_recovery_unknown.txt"},
     "GPU Recovery Action : Quarantine"),
    ("gpu.health/remap-failure", "run",
     {"nvidia-smi-query": "fixture:nvidia-smi/proof_gpu_health_remap_failure.csv"},
     "remapped_rows.failure=Yes"),
    ("gpu.health/reset-refused", "analyze",
     {"nvidia-smi-q": "The following GPUs could not be reset:\n  GPU 00000000:55:00.0: In use by another client"},
     "In use by another client"),
    ("gpu.health/retired-pages-dbe", "run",
     {"nvidia-smi-q": "fixture:nvidia-smi-q/proof_gpu_health_retired_pages_dbe.txt"},
     "Double Bit ECC : 63"),
    ("gpu.health/retired-pages-table-full", "run",
     {"nvidia-smi-q": "fixture:nvidia-smi-q/proof_gpu_health_retired_pages_table_full.txt"},
     "Single Bit ECC : 60"),
    ("gpu.health/sram-threshold-exceeded", "run",
     {"nvidia-smi-query": "fixture:nvidia-smi/proof_gpu_health_sram_threshold_exceeded.csv"},
     "sram.thresholdexceeded=Yes"),
    ("gpu.health/telemetry-unreadable", "run",
     {"nvidia-smi-table": "fixture:nvidia-smi/proof_gpu_health_telemetry_unreadable.txt"},
     "ERR!"),
    ("gpu.health/temperature-over-max-operating", "run",
     {"nvidia-smi-q": "fixture:nvidia-smi-q/proof_gpu_health_temperature_over_max_operating.txt"},
     "GPU Current Temp : 93 C"),
    ("gpu.health/temperature-shutdown", "run",
     {"nvidia-smi-q": "fixture:nvidia-smi-q/proof_gpu_health_temperature_shutdown.txt"},
     "GPU Current Temp : 98 C"),
    ("gpu.health/tpc-repair-pending", "run",
     {"nvidia-smi-q": "fixture:nvidia-smi-q/proof_gpu_health_tpc_repair_pending.txt"},
     "TPC Repair Pending : Yes"),
    ("gpu.health/unrepairable-memory", "run",
     {"nvidia-smi-q": "fixture:nvidia-smi-q/proof_gpu_health_unrepairable_memory.txt"},
     "Unrepairable Memory : Yes"),
    ("gpu.inventory/gpu-access-denied", "analyze",
     {"nvidia-smi-q": "Unable to determine the device handle for gpu 0000:2A:00.0: Insufficient Permissions\nNo devices were found"},
     "Insufficient Permissions"),
    ("gpu.inventory/gpu-insufficient-power", "analyze",
     {"nvidia-smi-q": "Unable to determine the device handle for gpu 0000:2A:00.0: Insufficient External Power\nNo devices were found"},
     "Insufficient External Power"),
    ("gpu.inventory/extra-gpus", "run-profiles/proof_gpu_count4.toml",
     {"nvidia-smi-query": "fixture:nvidia-smi/query_8xh100_ok.csv"},
     "4, NVIDIA H100 80GB HBM3, GPU-6cad4a26"),
    ("gpu.inventory/gpu-missing-by-socket-layout", "run",
     {"nvidia-smi-query": "fixture:nvidia-smi/query_7of8_gpu5_missing.csv"},
     "3 GPU(s) at bus 0x80 and above"),
    ("gpu.inventory/gpus-missing", "run-h100",
     {"nvidia-smi-query": "fixture:nvidia-smi/query_7of8_gpu5_missing.csv"},
     "no GPU at index 5"),
    ("gpu.inventory/inforom-corrupted", "analyze",
     {"nvidia-smi-table": "fixture:nvidia-smi/proof_gpu_inventory_inforom_corrupted.txt"},
     "infoROM is corrupted"),
    ("gpu.inventory/listings-disagree", "analyze-h100",
     {"nvidia-smi-query": "fixture:nvidia-smi/proof_gpu_inventory_listings_disagree_nvidia_smi_query.csv", "nvidia-smi-L": "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"},
     "8 GPUs"),
    ("gpu.inventory/mig-pending", "analyze-h100",
     {"nvidia-smi-query": "fixture:nvidia-smi/proof_gpu_inventory_mig_pending.csv"},
     "mig.mode.pending=Enabled"),
    ("gpu.inventory/mixed-models", "analyze",
     {"nvidia-smi-query": "fixture:nvidia-smi/proof_gpu_inventory_mixed_models.csv"},
     "A100-SXM4-80GB"),
    ("gpu.inventory/pcie-gen-capped", "analyze-h100",
     {"nvidia-smi-query": "fixture:nvidia-smi/proof_gpu_inventory_pcie_gen_capped.csv"},
     "pcie.link.gen.max=4"),
    ("gpu.inventory/persistence-off", "analyze-h100",
     {"nvidia-smi-query": "fixture:nvidia-smi/proof_gpu_inventory_persistence_off.csv"},
     "persistence_mode=Disabled"),
    ("gpu.inventory/unreadable-output", "run", {"nvidia-smi-query": "zzz\n"}, "without a header"),
    ("gpu.inventory/unreadable-row", "analyze",
     {"nvidia-smi-query": "fixture:nvidia-smi/proof_gpu_inventory_unreadable_row.csv"},
     "13 cells"),
    ("gpu.inventory/wrong-model", "analyze-h100",
     {"nvidia-smi-query": "fixture:nvidia-smi/proof_gpu_inventory_wrong_model.csv"},
     "NVIDIA H800"),
    ("gpu.nvlink/crc-errors", "analyze-h100",
     {"nvidia-smi-nvlink": "fixture:nvidia-smi/proof_gpu_nvlink_crc_errors.txt"},
     "CRC Errors: 7"),
    ("gpu.nvlink/gpu-not-listed", "run-h100",
     {"nvidia-smi-nvlink": "Unable to determine the device handle for GPU 0000:9D:00.0: Unknown Error\n"},
     "Unable to determine the device handle for GPU 0000:9D:00.0"),
    ("gpu.nvlink/not-graded", "run",
     {"nvidia-smi-nvlink": "Failed to initialize NVML: Driver/library version mismatch\n"},
     "Driver/library version mismatch"),
    ("gpu.nvlink/packet-errors", "analyze",
     {"nvidia-smi-nvlink": "fixture:nvidia-smi/proof_gpu_nvlink_packet_errors.txt"},
     "Rx Errors: 4"),
    ("gpu.nvlink/recovery-errors", "analyze",
     {"nvidia-smi-nvlink": "fixture:nvidia-smi/proof_gpu_nvlink_recovery_errors.txt"},
     "Total link recovery events: 5"),
    ("gpu.nvlink/recovery-failed", "analyze-h100",
     {"nvidia-smi-nvlink": "fixture:nvidia-smi/proof_gpu_nvlink_recovery_failed.txt"},
     "Link recovery failed events: 7"),
    ("gpu.nvlink/replay-errors", "analyze-h100",
     {"nvidia-smi-nvlink": "fixture:nvidia-smi/proof_gpu_nvlink_replay_errors.txt"},
     "Replay Errors: 7"),
    ("gpu.nvlink/symbol-errors", "analyze-h100",
     {"nvidia-smi-nvlink": "fixture:nvidia-smi/proof_gpu_nvlink_symbol_errors.txt"},
     "Effective Errors: 7"),
    ("gpu.nvlink/unreadable-output", "run", {"nvidia-smi-nvlink": "zzz\nqqq"}, "zzz"),
    ("gpu.topology/gpu-missing-by-numa-layout", "analyze",
     {"nvidia-smi-topo": "fixture:topo/proof_gpu_topology_gpu_missing_by_numa_layout.txt"},
     "GPU6\tCPU Affinity"),
    ("gpu.topology/gpu-not-listed", "run-h100",
     {"nvidia-smi-topo": "Unable to determine the device handle for GPU 0000:9D:00.0: Unknown Error\n"},
     "Unable to determine the device handle"),
    ("gpu.topology/no-gpu-near-a-nic", "analyze",
     {"nvidia-smi-topo": "fixture:topo/proof_gpu_topology_no_gpu_near_a_nic.txt"},
     "GPU0\t X \tNV18\tSYS\tSYS"),
    ("gpu.topology/not-graded", "run",
     {"nvidia-smi-topo": "Failed to initialize NVML: Driver/library version mismatch\n"},
     "Driver/library version mismatch"),
    ("gpu.topology/pair-fewer-nvlinks", "run-h100",
     {"nvidia-smi-topo": "fixture:topo/topo_8xh100_nv17.txt"},
     "\tNV17\t"),
    ("gpu.topology/tool-failed", "run-h100",
     {"nvidia-smi-topo": "Failed to initialize NVML: Driver/library version mismatch\n"},
     "Driver/library version mismatch"),
    ("gpu.xid/adapter-init-failed", "run",
     {"kernel-log": "[ 12.000000] NVRM: GPU 0000:41:00.0: RmInitAdapter failed! (0x26:0x56:1463)\n"},
     "RmInitAdapter failed"),
    ("gpu.xid/check-mechanicals", "run",
     {"kernel-log": "[Tue Mar  4 02:10:00 2025] NVRM: Xid (PCI:0000:3b:00): 54, aux power\n"},
     "): 54,"),
    ("gpu.xid/check-uvm", "run",
     {"kernel-log": "[Tue Mar  4 02:10:00 2025] NVRM: Xid (PCI:0000:3b:00): 159, CHI\n"},
     "): 159,"),
    ("gpu.xid/contact-support", "run",
     {"kernel-log": "[Tue Mar  4 02:10:00 2025] NVRM: Xid (PCI:0000:3b:00): 61, 0cec\n"},
     "): 61,"),
    ("gpu.xid/device-marked-unhealthy", "analyze",
     {"kernel-log": "I0310 14:02:00.418301       1 health.go:169] Error waiting for event: ERROR_UNKNOWN; Marking all devices as unhealthy"},
     "Marking all devices as unhealthy"),
    ("gpu.xid/driver-assert", "run",
     {"kernel-log": "[ 12.000000] NVRM: nvAssertFailedNoLog: Assertion failed: 0 @ a.c:1\n"},
     "Assertion failed"),
    ("gpu.xid/driver-error-status", "run",
     {"kernel-log": "[ 1.0] NVRM: nvCheckOkFailedNoLog: Check failed: Invalid argument [NV_ERR_INVALID_ARGUMENT]\n"},
     "Check failed: Invalid argument"),
    ("gpu.xid/gpu-lost", "run",
     {"kernel-log": "[ 12.000000] NVRM: GPU 0000:41:00.0: GPU lost from the bus [NV_ERR_GPU_IS_LOST]\n"},
     "GPU lost from the bus"),
    ("gpu.xid/gsp-crash", "run",
     {"kernel-log": "[ 12.000000] NVRM: GPU 0000:41:00.0: GSP-CrashCat Report\n"},
     "GSP-CrashCat Report"),
    ("gpu.xid/gsp-timeout", "run",
     {"kernel-log": "[ 12.000000] NVRM: GPU 0000:41:00.0: Heartbeat timed out\n"},
     "Heartbeat timed out"),
    ("gpu.xid/ignore", "run",
     {"kernel-log": "[Tue Mar  4 02:10:00 2025] NVRM: Xid (PCI:0000:3b:00): 63, Row Remapper: New row marked for remapping, reset gpu to activate.\n"},
     "): 63,"),
    ("gpu.xid/machine-check-corrected", "run",
     {"kernel-log": "fixture:kernel-log/proof_gpu_xid_machine_check_corrected.log"},
     "Machine check events logged"),
    ("gpu.xid/machine-check-uncorrected", "run",
     {"kernel-log": "[ 12.000000] mce: [Hardware Error]: CPU 5: Machine Check Exception: 5 Bank 7: be00000000800090\n"},
     "Machine Check Exception"),
    ("gpu.xid/memory-subsystem-error", "run",
     {"kernel-log": "[ 12.000000] NVRM: GPU 0000:41:00.0: Memory Subsystem Error detected\n"},
     "Memory Subsystem Error"),
    ("gpu.xid/not-a-kernel-log", "run", {"kernel-log": "\u0000\u0001binary\u0002"}, "none from the kernel"),
    ("gpu.xid/nvlink-training-failed", "run",
     {"kernel-log": "[ 12.000000] NVRM: GPU3 knvlinkDiscoverPostRxDetLinks_GH100: failed!\n"},
     "knvlinkDiscoverPostRxDetLinks_GH100: failed!"),
    ("gpu.xid/nvml-dbe-event", "analyze",
     {"kernel-log": "fixture:kernel-log/proof_gpu_xid_nvml_dbe_event.log"},
     "EventType:2"),
    ("gpu.xid/pcie-corrected", "run",
     {"kernel-log": "[ 12.000000] nvidia 0000:41:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)\n"},
     "severity=Corrected"),
    ("gpu.xid/pcie-fatal", "analyze",
     {"kernel-log": "[ 1.0] pcieport 0000:00:01.1: AER: Uncorrected (Fatal) error received: 0000:01:00.0"},
     "Uncorrected (Fatal)"),
    ("gpu.xid/pcie-link-bounced", "run",
     {"kernel-log": "fixture:kernel-log/proof_gpu_xid_pcie_link_bounced.log"},
     "Link Down"),
    ("gpu.xid/pcie-link-down", "run",
     {"kernel-log": "[ 12.000000] pcieport 0000:00:03.1: pciehp: Slot(3): Link Down\n"},
     "Link Down"),
    ("gpu.xid/pcie-nonfatal", "run",
     {"kernel-log": "[ 12.000000] mlx5_core 0000:17:00.0: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, (Requester ID)\n"},
     "severity=Uncorrected (Non-Fatal)"),
    ("gpu.xid/pcie-recovered", "run",
     {"kernel-log": "fixture:kernel-log/proof_gpu_xid_pcie_recovered.log"},
     "Uncorrected (Non-Fatal) error received"),
    ("gpu.xid/pmu-halted", "run",
     {"kernel-log": "[ 12.000000] NVRM: GPU 0000:41:00.0: Received signal from GSP that PMU has halted.\n"},
     "PMU has halted"),
    ("gpu.xid/recovery-drain-and-reset", "run",
     {"kernel-log": "[Tue Mar  4 02:10:00 2025] NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)\n"},
     "): 154,"),
    ("gpu.xid/recovery-drain-p2p", "run",
     {"kernel-log": "[Tue Mar  4 02:10:00 2025] NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)\n"},
     "): 154,"),
    ("gpu.xid/recovery-gpu-reset", "analyze",
     {"kernel-log": "fixture:kernel-log/proof_gpu_xid_recovery_gpu_reset.log"},
     "): 154,"),
    ("gpu.xid/recovery-imex-domain", "run",
     {"kernel-log": "[Tue Mar  4 02:10:00 2025] NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to 0x5 (Recover IMEX Domain)\n"},
     "): 154,"),
    ("gpu.xid/recovery-node-reboot", "run",
     {"kernel-log": "[Tue Mar  4 02:10:01 2025] NVRM: Xid (PCI:0000:3d:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)\n"},
     "): 154,"),
    ("gpu.xid/recovery-unknown", "analyze",
     {"kernel-log": "[  200.000000] NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to 0x9 (Unknown)"},
     "): 154,"),
    ("gpu.xid/reset-required", "run",
     {"kernel-log": "[ 12.000000] NVRM: GPU 0000:41:00.0: NV_ERR_RESET_REQUIRED\n"},
     "NV_ERR_RESET_REQUIRED"),
    ("gpu.xid/restart-vm", "run",
     {"kernel-log": "[Tue Mar  4 02:10:00 2025] NVRM: Xid (PCI:0000:3b:00): 151, key rotation\n"},
     "): 151,"),
    ("gpu.xid/sxid-fatal", "run",
     {"kernel-log": "[ 12.000000] nvidia-nvswitch3: SXid (PCI:0000:86:00.0): 20034, Fatal, Link 33 LTSSM Fault Up\n"},
     "): 20034,"),
    ("gpu.xid/sxid-nonfatal", "run",
     {"kernel-log": "[ 12.000000] SXid (PCI:0000:86:00.0): 12028, Non-fatal, Link 3 x\n"},
     "): 12028,"),
    ("gpu.xid/sxid-unclassified", "run",
     {"kernel-log": "[ 12.000000] nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 27005, Module 5 faulty\n"},
     "): 27005,"),
    ("gpu.xid/uncorrected-ecc", "analyze",
     {"kernel-log": "[  123.456789] NVRM: kgspEccServiceUncorrError_GB100: NV_PGSP_FALCON_ECC_STATUS_UNCORRECTED_ERR_IMEM PENDING"},
     "UNCORRECTED_ERR"),
    ("gpu.xid/unread-error", "analyze",
     {"kernel-log": "fixture:kernel-log/proof_gpu_xid_unread_error.log"},
     "failed to install notifier"),
    ("gpu.xid/update-swfw", "run",
     {"kernel-log": "[Tue Mar  4 02:10:00 2025] NVRM: Xid (PCI:0000:3b:00): 78, vGPU type is not supported\n"},
     "): 78,"),
    ("gpu.xid/workflow-nvlink-err", "run",
     {"kernel-log": "[Tue Mar  4 02:10:00 2025] NVRM: Xid (PCI:0000:3b:00): 74, NVLink: fatal error on link 6\n"},
     "): 74,"),
    ("gpu.xid/workflow-nvlink5-err-fatal", "run",
     {"kernel-log": "[Tue Mar  4 02:10:00 2025] NVRM: Xid (PCI:0000:3b:00): 149, NETIR Fatal XC0 i0 Link 1 (0x1)\n"},
     "): 149,"),
    ("gpu.xid/workflow-nvlink5-err-unstated", "analyze",
     {"kernel-log": "fixture:kernel-log/proof_gpu_xid_workflow_nvlink5_err_unstated.log"},
     "): 45,"),
    ("gpu.xid/workflow-xid-45", "run",
     {"kernel-log": "[Tue Mar  4 02:10:00 2025] NVRM: Xid (PCI:0000:3b:00): 45, pid=1, name=a, Ch 00000001\n"},
     "): 45,"),
    ("gpu.xid/wpr2-up", "run",
     {"kernel-log": "[ 12.000000] NVRM: GPU 0000:41:00.0: unexpected WPR2 already up\n"},
     "WPR2 already up"),
    ("hang.watchdog/agent-signalled", "run",
     {"watchdog-log": "fixture:watchdog/proof_hang_watchdog_agent_signalled.log"},
     "Received Signals.SIGTERM death signal"),
    ("hang.watchdog/collective-mismatch", "run",
     {"watchdog-log": "RuntimeError: Detected mismatch between collectives on ranks.\n"},
     "Detected mismatch between collectives"),
    ("hang.watchdog/communicator-aborted", "run",
     {"watchdog-log": "RuntimeError: NCCL communicator was aborted on rank 2.\n"},
     "NCCL communicator was aborted"),
    ("hang.watchdog/desync-report", "run",
     {"watchdog-log": "\t - To our best knowledge, ranks [5] are the lagging ranks that caused this timeout.\n"},
     "are the lagging ranks"),
    ("hang.watchdog/elastic-restarted", "run",
     {"watchdog-log": "fixture:watchdog/proof_hang_watchdog_elastic_restarted.log"},
     "restart_count=2"),
    ("hang.watchdog/fr-rank-behind", "run",
     {"fr-trace": "fixture:flight-recorder/proof_hang_watchdog_fr_rank_behind.txt"},
     "rank 1: 2 entries"),
    ("hang.watchdog/gloo-error", "run",
     {"watchdog-log": "RuntimeError: [enforce fail at /g/gloo/allreduce.cc:9] context->size > 1\n"},
     "enforce fail"),
    ("hang.watchdog/gloo-timeout", "analyze",
     {"watchdog-log": "fixture:watchdog/proof_hang_watchdog_gloo_timeout.log"},
     "Timed out waiting 1800000ms"),
    ("hang.watchdog/monitored-barrier", "run",
     {"watchdog-log": "RuntimeError: Rank 1 failed to pass monitoredBarrier in 2000 ms\n"},
     "failed to pass monitoredBarrier"),
    ("hang.watchdog/nccl-error", "run",
     {"watchdog-log": "NCCL error in: x.cpp:1, unhandled system error, NCCL version 2.21.5\n"},
     "unhandled system error"),
    ("hang.watchdog/p2p-sender-exited", "run",
     {"watchdog-log": "fixture:watchdog/proof_hang_watchdog_p2p_sender_exited.log"},
     "Connection closed by peer"),
    ("hang.watchdog/ras-aborted", "run",
     {"nccl-ras": "fixture:nccl/proof_hang_watchdog_ras_aborted.txt"},
     "status ABORT"),
    ("hang.watchdog/ras-comm-error", "run",
     {"nccl-ras": "fixture:nccl/proof_hang_watchdog_ras_comm_error.txt"},
     "ERROR"),
    ("hang.watchdog/ras-count-mismatch", "run",
     {"nccl-ras": "fixture:nccl/proof_hang_watchdog_ras_count_mismatch.txt"},
     "MISMATCH"),
    ("hang.watchdog/ras-dead", "run", {"nccl-ras": "fixture:nccl/proof_hang_watchdog_ras_dead.txt"}, "DEAD"),
    ("hang.watchdog/ras-gather-timeout", "run",
     {"nccl-ras": "fixture:nccl/proof_hang_watchdog_ras_gather_timeout.txt"},
     "TIMEOUT"),
    ("hang.watchdog/ras-mismatch-cut", "run",
     {"nccl-ras": "fixture:nccl/proof_hang_watchdog_ras_mismatch_cut.txt"},
     "MISMATCH"),
    ("hang.watchdog/ras-status-mismatch", "run",
     {"nccl-ras": "fixture:nccl/proof_hang_watchdog_ras_status_mismatch.txt"},
     "MISMATCH"),
    ("hang.watchdog/ras-uneven-job", "run",
     {"nccl-ras": "fixture:nccl/proof_hang_watchdog_ras_uneven_job.txt"},
     "differ"),
    ("hang.watchdog/remote-error", "run",
     {"watchdog-log": "[PG ID 2 PG GUID 9 Rank 1]  remote error detected from rank: 4\n"},
     "remote error detected from rank: 4"),
    ("hang.watchdog/some-failed", "run",
     {"watchdog-log": "Some NCCL operations have failed or timed out.\n"},
     "Some NCCL operations have failed or timed out"),
    ("hang.watchdog/store-failure", "run", {"watchdog-log": "RuntimeError: Socket Timeout\n"}, "Socket Timeout"),
    ("hang.watchdog/store-gone", "run",
     {"watchdog-log": "[rank3]:[W socket.cpp:470] [c10d] recvBytes failed on SocketImpl(fd=5, addr=[n1]:1, remote=[n0]:29500): Connection reset by peer\n"},
     "Connection reset by peer"),
    ("hang.watchdog/unread-error", "analyze",
     {"watchdog-log": "CRITICAL:torch.distributed.elastic.agent.server.api:Error waiting on exit barrier. Elapsed: 300.0123 seconds"},
     "Error waiting on exit barrier"),
    ("hang.watchdog/watchdog-exception", "run",
     {"watchdog-log": "[Rank 4] NCCL watchdog thread terminated with exception: unknown\n"},
     "watchdog thread terminated with exception"),
    ("hang.watchdog/watchdog-failure", "run",
     {"watchdog-log": "fixture:watchdog/proof_hang_watchdog_watchdog_failure.log"},
     "Timeout at NCCL work: 9141"),
    ("hang.watchdog/worker-restarted", "run",
     {"watchdog-log": "fixture:watchdog/proof_hang_watchdog_worker_restarted.log"},
     "Worker group failed"),
    ("ib.hca/compute-ports-missing", "run-h100",
     {"ibstat": "fixture:ib/ibstat_unknown_states.txt"},
     "ib.hca_count = 8"),
    ("ib.hca/hca-fatal", "analyze",
     {"ibstat": "fixture:ib/proof_ib_hca_hca_fatal_ibstat.txt", "rdma-kernel": "fixture:ib/proof_ib_hca_hca_fatal_rdma_kernel.txt"},
     "health compromised"),
    ("ib.hca/module-error", "analyze",
     {"link-events": "[ 1702.000021] mlx5_core 0000:c1:00.0: mlx5_port_module_event:1166:(pid 0): Port module event[error]: module 0, Cable error, High Temperature"},
     "Cable error"),
    ("ib.hca/other-port-down", "run", {"ibstat": "fixture:ib/proof_ib_hca_other_port_down.txt"}, "State: Down"),
    ("ib.hca/rate-below-adapter", "run", {"ibstat": "fixture:ib/ibstat_mlx5_2_at_200.txt"}, "Rate: 200"),
    ("ib.hca/rate-below-siblings", "run",
     {"ibstat": "fixture:ib/proof_ib_hca_rate_below_siblings.txt"},
     "rate: 100 Gb/sec"),
    ("ib.hca/unread-error", "analyze",
     {"ibstat": "libibverbs: Warning: couldn't load driver 'libmlx5-rdmav34.so'"},
     "couldn't load driver"),
    ("ib.hca/width-narrow", "run", {"ibstat": "fixture:ib/proof_ib_hca_width_narrow.txt"}, "(2X HDR)"),
    ("ib.hca/width-reduced", "analyze", {"ibstat": "fixture:ib/proof_ib_hca_width_reduced.txt"}, "(2X HDR)"),
    ("nccl.allreduce/aborted", "run-h100",
     {"nccl-tests": "fixture:nccl-tests/proof_nccl_allreduce_aborted.txt"},
     "Cuda failure 'unknown'"),
    ("nccl.allreduce/avg-mismatch", "run-h100",
     {"nccl-tests": "fixture:nccl-tests/proof_nccl_allreduce_avg_mismatch.txt"},
     "Avg bus bandwidth    : 468.8902"),
    ("nccl.allreduce/below-pcie-p2p", "run",
     {"nccl-tests": "fixture:nccl-tests/proof_nccl_allreduce_below_pcie_p2p.txt"},
     "3.99    3.99"),
    ("nccl.allreduce/crashed-before-rows", "run-h100",
     {"nccl-tests": "fixture:nccl-tests/proof_nccl_allreduce_crashed_before_rows.txt"},
     "exited on signal 11"),
    ("nccl.allreduce/latency-spike", "run-h100",
     {"nccl-tests": "fixture:nccl-tests/proof_nccl_allreduce_latency_spike.txt"},
     "1112.2 us"),
    ("nccl.allreduce/min-bw-check-failed", "run-h100",
     {"nccl-tests": "fixture:nccl-tests/proof_nccl_allreduce_min_bw_check_failed.txt"},
     "161.597 FAILED"),
    ("nccl.allreduce/not-validated", "analyze",
     {"nccl-tests": "fixture:nccl-tests/proof_nccl_allreduce_not_validated.txt"},
     "stops before its summary"),
    ("nccl.allreduce/one-nic-plateau", "run-h100",
     {"nccl-tests": "fixture:nccl-tests/proof_nccl_allreduce_one_nic_plateau.txt"},
     "40.00   40.00"),
    ("nccl.allreduce/out-of-bounds", "run-h100",
     {"nccl-tests": "fixture:nccl-tests/proof_nccl_allreduce_out_of_bounds.txt"},
     "Out of bounds values : 2 FAILED"),
    ("nccl.allreduce/single-size", "analyze",
     {"nccl-tests": "fixture:nccl-tests/proof_nccl_allreduce_single_size.txt"},
     "26214400"),
    ("nccl.allreduce/size-slow", "run-h100",
     {"nccl-tests": "fixture:nccl-tests/proof_nccl_allreduce_size_slow.txt"},
     "174.71"),
    ("nccl.allreduce/stopped-mid-row", "run-h100",
     {"nccl-tests": "fixture:nccl-tests/proof_nccl_allreduce_stopped_mid_row.txt"},
     "2 MB"),
    ("nccl.allreduce/unread-error", "run-h100",
     {"nccl-tests": "fixture:nccl-tests/proof_nccl_allreduce_unread_error.txt"},
     "Unable to register symmetric memory window"),
    ("nccl.transport/bad-interface", "run",
     {"nccl-log": "h:1:2 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>\n"},
     "Using [0]lo:"),
    ("nccl.transport/bad-interface-listed", "run",
     {"nccl-log": "fixture:nccl/proof_nccl_transport_bad_interface_listed.log"},
     "virbr0"),
    ("nccl.transport/collective-mismatch", "run",
     {"nccl-log": "fixture:nccl/proof_nccl_transport_collective_mismatch.log"},
     "Mismatched collective detected, please check your collective"),
    ("nccl.transport/collective-mismatch-suspected", "run",
     {"nccl-log": "fixture:nccl/proof_nccl_transport_collective_mismatch_suspected.log"},
     "Your program may be hanging, this may be caused by a collect"),
    ("nccl.transport/connect-failed", "run",
     {"nccl-log": "g:1:2 [0] NCCL WARN socketStartConnect: exceeded retries (20000)\n"},
     "socketStartConnect: exceeded retries (20000)"),
    ("nccl.transport/connect-retrying", "run",
     {"nccl-log": "h:1:2 [0] NCCL INFO Call to connect returned Connection refused, retrying\n"},
     "Call to connect returned Connection refused, retrying"),
    ("nccl.transport/cuda-oom", "run",
     {"nccl-log": "g:1:2 [0] NCCL WARN Cuda failure 'out of memory'\n"},
     "Cuda failure 'out of memory'"),
    ("nccl.transport/duplicate-gpu", "run",
     {"nccl-log": "g:1:2 [0] NCCL WARN Duplicate GPU detected : rank 1 and rank 9 both on CUDA device 1b000\n"},
     "Duplicate GPU detected"),
    ("nccl.transport/fewer-hcas-than-gpus", "run",
     {"nccl-log": "fixture:nccl/proof_nccl_transport_fewer_hcas_than_gpus.log"},
     "NET/IB : Using [0]mlx5_0:1/IB ;"),
    ("nccl.transport/gdr-disabled", "run",
     {"nccl-log": "g:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for GPU 0 / HCA mlx5_0 (no module)\n"},
     "GPU Direct RDMA Disabled"),
    ("nccl.transport/gdr-off-by-distance", "run",
     {"nccl-log": "fixture:nccl/proof_nccl_transport_gdr_off_by_distance.log"},
     "(distance 3 >= 2)"),
    ("nccl.transport/hcas-subset", "run",
     {"nccl-log": "u:100:200 [0] NCCL INFO NET/IB : Using [0]mlx5_10:1/IB ; OOB ib0:10.0.0.1<0>"},
     "NET/IB : Using [0]mlx5_10:1/IB ;"),
    ("nccl.transport/ib-async-event", "run",
     {"nccl-log": "g:1:2 [0] NCCL WARN NET/IB : Got async event : LID change\n"},
     "Got async event : LID change"),
    ("nccl.transport/ib-async-fatal", "run",
     {"nccl-log": "g:1:2 [0] NCCL WARN NET/IB : Got async event : port error\n"},
     "Got async event : port error"),
    ("nccl.transport/ib-completion-error", "run",
     {"nccl-log": "k2:25:58 [0] NCCL WARN NET/IB : Got completion with error 9, opcode 1, len 0\n"},
     "Got completion with error 9"),
    ("nccl.transport/ib-device-unusable", "run",
     {"nccl-log": "g:1:2 [0] NCCL WARN NET/IB : Unable to open device mlx5_1\n"},
     "Unable to open device mlx5_1"),
    ("nccl.transport/ib-incompatible-nics", "run",
     {"nccl-log": "g:1:2 [0] NCCL WARN NET/IB : Attempted to connect incompatible devices: [0]mlx5_0:1/IB and [1]mlx5_4:1/RoCE.\n"},
     "incompatible devices"),
    ("nccl.transport/ib-verbs-call-failed", "run",
     {"nccl-log": "g:1:9 [2] NCCL WARN Call to ibv_alloc_pd failed\n"},
     "Call to ibv_alloc_pd failed"),
    ("nccl.transport/mixed-link-layers", "run",
     {"nccl-log": "c:100:200 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/RoCE [3]mlx5_3:1/IB [4]mlx5_5:1/RoCE ; OOB ib0:10.0.0.1<0>\n"},
     "/RoCE"),
    ("nccl.transport/mixed-versions", "run",
     {"nccl-log": "fixture:nccl/proof_nccl_transport_mixed_versions.log"},
     "2.19.3"),
    ("nccl.transport/nccl-error", "run",
     {"nccl-log": "fixture:nccl/proof_nccl_transport_nccl_error.log"},
     "NCCL WARN something"),
    ("nccl.transport/net-plugin-error", "run",
     {"nccl-log": "g:1:2 [0] NCCL WARN Failed to initialize any NET plugin\n"},
     "Failed to initialize any NET plugin"),
    ("nccl.transport/no-usable-interface", "run",
     {"nccl-log": "g:1:2 [0] NCCL WARN Bootstrap : no socket interface found\n"},
     "NCCL WARN Bootstrap : no socket interface found"),
    ("nccl.transport/nonfatal-warn", "analyze",
     {"nccl-log": "gpu017:12345:12399 [3] NCCL WARN Could not find real path of mlx5_0"},
     "Could not find real path of mlx5_0"),
    ("nccl.transport/nvls-requested-not-used", "run",
     {"nccl-log": "fixture:nccl/proof_nccl_transport_nvls_requested_not_used.log"},
     "NCCL_NVLS_ENABLE set by environment to 1"),
    ("nccl.transport/nvls-unavailable", "run-h100",
     {"nccl-log": "fixture:nccl/proof_nccl_transport_nvls_unavailable.log"},
     "NVLS multicast support is not available on dev 0"),
    ("nccl.transport/ofi-no-provider", "run",
     {"nccl-log": "NCCL INFO NET/OFI No eligible providers were found\n"},
     "NET/OFI No eligible providers were found"),
    ("nccl.transport/ofi-no-provider-fallback", "analyze",
     {"nccl-log": "fixture:nccl/proof_nccl_transport_ofi_no_provider_fallback.log"},
     "fi_getinfo: provider efa output empty list"),
    ("fabric.manager/not-installed", "run-h100", {"fm-service": "fixture:systemctl/status_fm_not_found.txt"},
     "Unit nvidia-fabricmanager.service could not be found."),
    ("nccl.transport/p2p-disabled-nvlink", "analyze",
     {"nccl-log": "fixture:nccl/proof_nccl_transport_p2p_disabled_nvlink.log"},
     "P2P is disabled between NVLINK connected GPUs"),
    ("nccl.transport/peer-access-failed", "analyze",
     {"nccl-log": "gpu017:12345:12399 [3] NCCL WARN failed to peer with device 3: 3 mlx5_0"},
     "failed to peer with device"),
    ("nccl.transport/peer-connection-lost", "run",
     {"nccl-log": "g:1:2 [0] NCCL WARN Net : Connection closed by remote peer\n"},
     "NCCL WARN Net : Connection closed by remote peer"),
    ("nccl.transport/plugin-not-ib", "run-h100",
     {"nccl-log": "h1:1:2 [0] NCCL INFO Using network AWS Libfabric\n"},
     "Using network AWS Libfabric"),
    ("nccl.transport/rank-count-mismatch", "run",
     {"nccl-log": "g:1:2 [0] bootstrap.cc:205 NCCL WARN Bootstrap Root : mismatch in rank count from procs 16 : 8\n"},
     "mismatch in rank count"),
    ("nccl.transport/roce-cross-subnet", "run",
     {"nccl-log": "fixture:nccl/proof_nccl_transport_roce_cross_subnet.log"},
     "OOB eth0:172.16.1.2"),
    ("nccl.transport/shm-failed", "analyze",
     {"nccl-log": "gpu017:12345:12399 [3] NCCL WARN Error: failed to extend mlx5_0 to 3 bytes, error: mlx5_0 (3)"},
     "failed to extend"),
    ("nccl.transport/socket-single-host", "run",
     {"nccl-log": "fixture:nccl/proof_nccl_transport_socket_single_host.log"},
     "Using network Socket"),
    ("nccl.transport/socket-transport", "run",
     {"nccl-log": "fixture:nccl/proof_nccl_transport_socket_transport.log"},
     "Using network Socket"),
    ("nccl.transport/unread-error", "run",
     {"nccl-log": "g:1:2 [0] NCCL WARN something new\n"},
     "NCCL WARN something new"),
    ("nccl.transport/version-mismatch", "run",
     {"nccl-log": "g:1:2 [0] NCCL WARN Mismatched NCCL version detected : rank 0 version 1 rank 8 version 2\n"},
     "Mismatched NCCL version detected"),
    ("net.mtu/configured-mtu-low", "run-h100", {"ip-addr": "fixture:ip/ip_j_d_addr_data_mtu1500.json"}, "mtu 1500"),
    ("net.nic/bond-mtu-mismatch", "analyze",
     {"ip-addr": "fixture:ip/proof_net_nic_bond_mtu_mismatch.txt"},
     "mtu 1500 qdisc mq master bond0"),
    ("net.nic/declared-mtu-below-profile", "run-h100",
     {"ip-addr": "fixture:ip/ip_j_d_addr_data_mtu1500.json", "env": "fixture:ip/env_job_ok.txt"},
     "mtu 1500"),
    ("net.nic/declared-nic-down", "analyze",
     {"ip-addr": "fixture:ip/proof_net_nic_declared_nic_down_ip_addr.txt", "env": "fixture:env/proof_net_nic_declared_nic_down_env.txt"},
     "eth5: <NO-CARRIER"),
    ("net.nic/gloo-ifname-all-down", "analyze",
     {"ip-addr": "fixture:ip/proof_net_nic_gloo_ifname_all_down_ip_addr.txt", "env": "fixture:env/proof_net_nic_gloo_ifname_all_down_env.txt"},
     "GLOO_SOCKET_IFNAME=eth5"),
    ("net.nic/gloo-ifname-allows-virtual", "analyze",
     {"ip-addr": "fixture:ip/proof_net_nic_gloo_ifname_allows_virtual_ip_addr.txt", "env": "fixture:env/proof_net_nic_gloo_ifname_allows_virtual_env.txt"},
     "GLOO_SOCKET_IFNAME=eno1,docker0"),
    ("net.nic/gloo-ifname-empty", "analyze",
     {"ip-addr": "fixture:ip/proof_net_nic_gloo_ifname_empty_ip_addr.txt", "env": "fixture:env/proof_net_nic_gloo_ifname_empty_env.txt"},
     "GLOO_SOCKET_IFNAME=,"),
    ("net.nic/gloo-ifname-no-match", "analyze",
     {"ip-addr": "fixture:ip/proof_net_nic_gloo_ifname_no_match_ip_addr.txt", "env": "fixture:env/proof_net_nic_gloo_ifname_no_match_env.txt"},
     "GLOO_SOCKET_IFNAME=eth"),
    ("net.nic/ib-disabled-on-ib-profile", "run-h100",
     {"ip-addr": "fixture:ip/ip_j_d_addr_h100_healthy.json", "env": "fixture:env/proof_net_nic_ib_disabled_on_ib_profile_env.txt"},
     "NCCL_IB_DISABLE=1"),
    ("net.nic/ib-hca-excludes-all", "run",
     {"ip-addr": "fixture:ip/proof_net_nic_ib_hca_excludes_all_ip_addr.txt", "env": "fixture:env/proof_net_nic_ib_hca_excludes_all_env.txt", "ib-devices": "fixture:ib/proof_net_nic_ib_hca_excludes_all_ib_devices.txt"},
     "NCCL_IB_HCA=^mlx5"),
    ("net.nic/ib-hca-no-match", "run",
     {"ip-addr": "fixture:ip/proof_net_nic_ib_hca_no_match_ip_addr.txt", "env": "fixture:env/proof_net_nic_ib_hca_no_match_env.txt", "ib-devices": "fixture:ib/proof_net_nic_ib_hca_no_match_ib_devices.txt"},
     "NCCL_IB_HCA=mlx5_7"),
    ("net.nic/ib-hca-prefix-ambiguous", "run",
     {"ip-addr": "fixture:ip/proof_net_nic_ib_hca_prefix_ambiguous_ip_addr.txt", "env": "fixture:env/proof_net_nic_ib_hca_prefix_ambiguous_env.txt", "ib-devices": "fixture:ib/proof_net_nic_ib_hca_prefix_ambiguous_ib_devices.txt"},
     "NCCL_IB_HCA=mlx5_1,mlx5_0"),
    ("net.nic/ib-port-no-carrier", "analyze",
     {"ip-addr": "fixture:ip/proof_net_nic_ib_port_no_carrier.txt"},
     "ib0: <NO-CARRIER"),
    ("net.nic/link-flapped", "analyze",
     {"link-events": "[Mon Nov 23 09:00:01 2026] mlx5_core 0000:17:00.0 ens6f0np0: Link down\n[Mon Nov 23 09:00:03 2026] mlx5_core 0000:17:00.0 ens6f0np0: Link up"},
     "ens6f0np0: Link down"),
    ("net.nic/socket-ifname-allows-virtual", "run-h100",
     {"ip-addr": "fixture:ip/ip_j_d_addr_h100_healthy.json", "env": "fixture:ip/env_exclude_allows_lo.txt"},
     "NCCL_SOCKET_IFNAME=^docker0"),
    ("net.nic/socket-ifname-empty", "analyze",
     {"ip-addr": "fixture:ip/proof_net_nic_socket_ifname_empty_ip_addr.txt", "env": "fixture:env/proof_net_nic_socket_ifname_empty_env.txt"},
     "NCCL_SOCKET_IFNAME=,"),
    ("net.nic/socket-ifname-no-match", "run-h100",
     {"ip-addr": "fixture:ip/ip_j_d_addr_h100_healthy.json", "env": "fixture:ip/env_job_bad.txt", "ib-devices": "fixture:ip/ib_devices_12.txt"},
     "NCCL_SOCKET_IFNAME=eth"),
    ("net.nic/subnet-mtu-mismatch", "analyze",
     {"ip-addr": "fixture:ip/proof_net_nic_subnet_mtu_mismatch.txt"},
     "ib0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 4092"),
    ("net.nic/virtual-mtu-above-uplink", "analyze",
     {"ip-addr": "fixture:ip/proof_net_nic_virtual_mtu_above_uplink.txt"},
     "wg0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1341"),
    ("node.clock/daemon-exited", "analyze",
     {"clock-log": "fixture:chrony/proof_node_clock_daemon_exited.log"},
     "Fatal error : Could not open PID file"),
    ("node.clock/error-bound-high", "analyze",
     {"chronyc-tracking": "fixture:chrony/proof_node_clock_error_bound_high.txt"},
     "Root delay      : 2.200000000 seconds"),
    ("node.clock/local-reference", "analyze",
     {"ntpq-peers": "fixture:ntpq/proof_node_clock_local_reference.txt"},
     "*LOCAL(0)"),
    ("node.clock/offset-warn", "analyze",
     {"chronyc-tracking": "fixture:chrony/proof_node_clock_offset_warn.txt"},
     "0.500000000 seconds fast"),
    ("node.clock/unread-error", "analyze",
     {"chronyc-tracking": "fixture:chrony/proof_node_clock_unread_error_chronyc_tracking.txt", "clock-log": "fixture:chrony/proof_node_clock_unread_error_clock_log.log"},
     "Could not open NTP socket"),
    # captures with an exit status, stderr or a state other than ok: {probe: {stdout, rc, stderr, state, timeout}}
    ("gpu.nvlink/no-nvlink", "run-h100", {"nvidia-smi-nvlink": ""}, "listed no GPU"),
    ("gpu.topology/unreadable-output", "run", {"nvidia-smi-topo": ""}, "(no GPU0 row)"),
    ("gpu.health/no-gpu-in-output", "run", {"nvidia-smi-q": ""}, "no GPU block"),
    ("ib.hca/no-devices", "run-h100", {"ibstat": ""}, "no CA listed"),
    ("net.mtu/unparsable", "run-h100", {"ip-addr": ""}, "(empty)"),
    ("net.nic/unparsable", "run-h100", {"ip-addr": ""}, "(empty output)"),
    ("gpu.xid/log-empty", "run", {"kernel-log": ""}, "(no output)"),
    ("gpu.xid/log-unreadable", "run", {"kernel-log": {"rc": 1}}, "exit 1"),
    ("gpu.driver/smi-failed", "run", {"nvidia-smi-q": {"stdout": "\n", "rc": 9}}, "exited 9"),
    ("gpu.xid/pcie-recovery-failed", "run",
     {"kernel-log": {"stdout": "[ 1.0] pcieport 0000:00:01.0: AER: device recovery failed\n", "rc": 1}},
     "AER: device recovery failed"),
    ("gpu.nvlink/tool-failed", "run-h100",
     {"nvidia-smi-nvlink": "Failed to initialize NVML: Driver/library version mismatch\n"},
     "Driver/library version mismatch"),
    ("gpu.xid/fallen-off-bus", "run",
     {"kernel-log": {"stdout": "[ 1.0] NVRM: GPU 0000:41:00.0: GPU has fallen off the bus.\n", "rc": 1}},
     "GPU has fallen off the bus"),
    ("node.clock/output-unrecognised", "run",
     {"chronyc-tracking": "Welcome to the cluster!\n", "timedatectl": {"stderr": "System has not been booted with systemd as init system (PID 1). Can't operate.\nFailed to connect to bus: Host is down\n", "rc": 1}, "ntpstat": {"state": "missing"}, "ntpq-peers": {"state": "missing"}},
     "Welcome to the cluster!"),
    ("fabric.manager/nvidia-smi-failed", "run-h100",
     {"fm-service": "LoadState=loaded\nActiveState=active\nSubState=running\nResult=success\nExecMainStatus=0\n", "nvidia-smi-q": {"stdout": "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n\n", "rc": 9}},
     "couldn't communicate with the NVIDIA driver"),
    ("gpu.nvlink/link-down-unknown-model", "run",
     {"nvidia-smi-nvlink": {"stdout": "fixture:nvidia-smi/proof_gpu_nvlink_link_down_unknown_model.txt"}},
     "Link 7: <inactive>"),
    ("net.mtu/no-result", "analyze", {"ping": "fixture:ping/proof_net_mtu_no_result.txt"},
     "the jumbo ping printed no statistics"),
    ("net.mtu/jumbo-lossy", "analyze", {"ping": "fixture:ping/proof_net_mtu_jumbo_lossy.txt"}, "20% of jumbo pings lost"),
    ("net.mtu/peer-unresolved", "analyze", {"ping": "fixture:ping/proof_net_mtu_peer_unresolved.txt"}, "gpu-c099: unresolved"),
    ("net.mtu/unread-error", "analyze", {"ping": "fixture:ping/proof_net_mtu_unread_error.txt"}, "No buffer space available"),
    ("net.nic/ib-hca-no-rdma-devices", "run",
     {"ip-addr": "fixture:ip/proof_net_nic_ib_hca_no_rdma_devices_ip_addr.txt", "env": "PATH=/x\nHOME=/\nNCCL_IB_HCA=mlx5_0\n",
      "ib-devices": {"rc": 2}},
     "NCCL_IB_HCA=mlx5_0"),
    ("node.clock/no-time-daemon", "run",
     {"chronyc-tracking": {"stdout": "506 Cannot talk to daemon\n", "rc": 1},
      "timedatectl": {"stderr": "System has not been booted with systemd as init system (PID 1). Can't operate.\n"
                                "Failed to connect to bus: Host is down\n", "rc": 1},
      "ntpstat": {"stdout": "Unable to talk to NTP daemon. Is it running?\n", "rc": 2}, "ntpq-peers": {"state": "missing"}},
     "506 Cannot talk to daemon"),
    ("gpu.driver/driver-version-pin", "run-profiles/proof_pins.toml",
     {"nvidia-smi-q": "==============NVSMI LOG==============\nDriver Version : 535.129.03\nCUDA Version : 12.4\n"},
     "Driver Version : 535.129.03"),
    ("gpu.driver/cuda-version-pin", "run-profiles/proof_pins.toml",
     {"nvidia-smi-q": "==============NVSMI LOG==============\nDriver Version : 550.54.15\nCUDA Version : 12.2\n"},
     "CUDA Version : 12.2"),
    ("gpu.xid/site-fail", "run-profiles/proof_xid_fail.toml",
     {"kernel-log": "[Tue Mar  4 02:11:40 2025] NVRM: Xid (PCI:0000:3d:00): 31, pid=40177, name=python, Ch 0000000a, "
                    "intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_3 faulted @ 0x7f2a_5c000000. Fault is of "
                    "type FAULT_PDE ACCESS_TYPE_VIRT_READ\n"},
     "): 31,"),
    ("net.nic/declared-link-slow", "run-profiles/proof_nic_speed.toml",
     {"ip-addr": "fixture:ip/ip_j_d_addr_h100_healthy.json", "ip-speed": "fixture:ip/speed_degraded.txt"},
     "ens9f0np0/speed:100000"),
    ("ib.hca/no-infiniband-port", "run-profiles/proof_ib_fabric.toml",
     {"ibstat": "fixture:ib/ibstat_roce_mlx5_3_polling.txt"}, "ib.link_layer = InfiniBand"),
    ("ib.hca/other-port-down-required", "run-profiles/proof_ib_fabric.toml",
     {"ibstat": "fixture:ib/proof_ib_hca_other_port_down_required.txt"}, "State: Down | Physical state: Disabled"),
    ("net.mtu/configured-mtu-below-profile", "run-profiles/proof_mtu_eno1.toml",
     {"ip-addr": "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 state UNKNOWN\n    link/loopback 00:00\n"
                 "2: eno1: <UP,LOWER_UP> mtu 1500 state UP\n    link/ether aa:bb\n"
                 "3: ens9f0np0: <UP,LOWER_UP> mtu 9000 state UP\n    link/ether aa:bc\n"},
     "eno1: <UP,LOWER_UP> mtu 1500"),
    ("nccl.transport/no-log", "analyze", {}, "the nccl-log input is missing"),
    ("net.nic/half-duplex", "analyze", {"ethtool": "fixture:ethtool/proof_net_nic_half_duplex.txt"}, "Duplex: Half"),
    ("net.nic/link-flapping", "analyze", {"link-events": "fixture:netlog/proof_net_nic_link_flapping.log"},
     "ens21f0np0: Link down"),
    ("net.nic/module-error", "analyze", {"link-events": "fixture:netlog/proof_net_nic_module_error.log"},
     "Cable error, High Temperature"),
    ("ib.hca/link-lost", "analyze", {"link-events": "fixture:netlog/proof_ib_hca_link_lost.log"}, "ibp193s0: Link down"),
    ("net.nic/mtu-above-profile", "run-h100", {"ip-addr": "fixture:ip/proof_net_nic_mtu_above_profile.txt"}, "mtu 9216"),
    ("gpu.driver/module-older-than-packages", "analyze",
     {"driver-version": "fixture:nvidia-driver/proof_gpu_driver_module_older_than_packages.txt"},
     "Kernel Module  535.129.03"),
    ("gpu.driver/module-differs-from-disk", "analyze",
     {"driver-version": "fixture:nvidia-driver/proof_gpu_driver_module_differs_from_disk.txt"}, "Kernel Module  535.129.03"),
    ("gpu.driver/klog-api-mismatch", "analyze", {"kernel-log": "fixture:kernel-log/proof_gpu_driver_klog_api_mismatch.log"},
     "NVRM: API mismatch: the client has the version 535.129.03"),
    ("net.nic/link-slow", "run-profiles/proof_nic_min_speed.toml",
     {"ip-addr": "fixture:ip/ip_j_d_addr_h100_healthy.json", "ip-speed": "fixture:ip/speed_degraded.txt"}, "speed:25000"),
    ("net.nic/declared-no-link", "analyze-profiles/proof_nic_declared.toml",
     {"ethtool": "fixture:ethtool/ethtool_bond1_unknown_speed_no_link.txt"}, "Link detected: no"),
    ("net.nic/address-dadfailed", "analyze", {"ip-addr": "fixture:ip/proof_net_nic_address_dadfailed.txt"},
     "inet6 fd00:44:3::17/64 scope global dadfailed"),
    ("net.nic/link-local-dadfailed", "analyze", {"ip-addr": "fixture:ip/proof_net_nic_link_local_dadfailed.txt"},
     "inet6 fe80::e42:a1ff:fe5e:206a/64 scope link dadfailed"),
    ("net.nic/declared-nic-missing", "analyze-profiles/proof_nic_declared.toml",
     {"ip-addr": "fixture:ip/proof_net_nic_declared_nic_missing.txt"}, "no interface matching bond1"),
    ("net.nic/requested-nic-down", "analyze", {"ip-addr": "fixture:ip/proof_net_nic_requested_nic_down.txt"},
     "ens9f1np1: <BROADCAST,MULTICAST> mtu 1500"),
    ("net.nic/socket-ifname-all-down", "analyze",
     {"ip-addr": "fixture:ip/proof_net_nic_gloo_ifname_all_down_ip_addr.txt",
      "env": "fixture:env/proof_net_nic_socket_ifname_all_down_env.txt"},
     "NCCL_SOCKET_IFNAME=^eno1,docker0,lo"),
]
NO_CASE = "no proof case yet"
ENGINE = ("no tool line to show: the evidence is preflight's own sentence (the transport's reason for a capture that did "
          "not arrive or a tool that is missing, an invalid option, a fault inside a check)")
WRONG = "shown line wrong: "

KNOWN_GAPS: dict[str, str] = {  # code: why it has no proof case
    "gpu.driver/klog-driver-fault": NO_CASE,  # no input reaches it: every kernel_log.DRIVER_FAULTS kind has its own code
    "gpu.driver/no-tooling-required": ENGINE,
    # graded right after hang.watchdog/collective-timeout (FAIL too) on the same lines: never the shown finding
    "hang.watchdog/timeouts-differ-in-collective": NO_CASE,
    "net.mtu/invalid-peer": ENGINE,
    "net.mtu/ping-missing-required": ENGINE,
    "node.responsive/tools-hung": ENGINE,
    "run.check/internal-fault": ENGINE,
    "run.probe/not-started": ENGINE,
    "run.probe/output-lost": ENGINE,
    "run.probe/timed-out": ENGINE,
    "run.result/missing": ENGINE,
    "run.tool/missing-required": ENGINE,
}


def first_code(r: Result) -> str:
    codes = r.facts.get("codes") or []
    return str(codes[0]) if codes else ""


def analysed(fixture: str) -> list[Result]:
    return list(analyze.analyze(registry.load(), [FIXTURES / fixture]))


def graded(code: str, how: str, inputs: dict[str, Any]) -> list[Result]:
    """The results of the code's check on these inputs: as `run` grades a node's captures, or as
    `analyze` grades pasted text (framed first)."""
    mode, _, prof = how.partition("-")
    profile = "h100-sxm-8x" if prof == "h100" else str(FIXTURES / prof) if prof.endswith(".toml") else "generic"
    check = code.split("/")[0]
    if mode == "run":
        return grade(check, {p: _capture(p, v) for p, v in inputs.items()}, profile=profile)
    return grade_text(check, {p: _text(v) for p, v in inputs.items() if isinstance(v, str)}, profile=profile)


def _text(v: str) -> str:
    return fixture_text(v[len(FX):]) if v.startswith(FX) else v


def _capture(probe: str, v: str | dict[str, Any]) -> Capture:
    if isinstance(v, str):
        return capture(probe, _text(v))
    state = CaptureState(v.get("state", "ok"))
    return Capture(probe=probe, argv=[probe], state=state, stdout=_text(v.get("stdout", "")), stderr=v.get("stderr", ""),
                   rc=v.get("rc", 0 if state is CaptureState.OK else None), timeout=v.get("timeout", 0.0),
                   source=f"fixture:{probe}")


def _versions() -> list[Result]:
    from tests.checks.test_cluster import NODES, ctx

    from preflight.checks.cluster import grade_versions  # isort: skip

    def q(driver: str, cuda: str) -> str:
        return f"==============NVSMI LOG==============\n\nDriver Version : {driver}\nCUDA Version : {cuda}\n"

    caps = {n: {"nvidia-smi-q": capture("nvidia-smi-q", q("550.90.07", "12.4"))} for n in NODES}
    caps["n3"]["nvidia-smi-q"] = capture("nvidia-smi-q", q("535.161.08", "12.2"))
    return list(grade_versions(ctx(caps)))


def _nccl_env() -> list[Result]:
    from tests.checks.test_cluster import NODES, ctx

    from preflight.checks.cluster import grade_nccl_env  # isort: skip

    base = "NCCL_SOCKET_IFNAME=^lo,docker0\nNCCL_IB_HCA=mlx5\nHOME=/root\n"
    caps = {n: {"env": capture("env", base)} for n in NODES}
    caps["n2"]["env"] = capture("env", "NCCL_SOCKET_IFNAME=eth0\nNCCL_IB_HCA=mlx5\n")
    return list(grade_nccl_env(ctx(caps)))


def _nodes_short() -> list[Result]:
    from tests.checks.test_cluster import NODES, ctx

    from preflight.checks.cluster import grade_nodes  # isort: skip

    errors = {n: "" for n in NODES} | {"n2": "unreachable"}
    return list(grade_nodes(ctx(errors=errors, extra={"expect_nodes": 4})))


def _black_hole() -> list[Result]:
    from tests.checks.test_cluster import ADDR, ctx, ring

    from preflight.checks.cluster import grade_mtu  # isort: skip

    return list(grade_mtu(ctx(results=ring("n3"), addresses=ADDR)))


def _clocks() -> list[Result]:
    from preflight.checks.clock import agreement
    from preflight.profile import load

    spans = {"node1": (-0.05, 0.05), "node2": (29.55, 29.7), "node3": (0.0, 0.1), "node4": (0.01, 0.08)}
    return [agreement(spans, load("h100-sxm-8x"))]


def _controller_offset() -> list[Result]:
    from tests.checks.test_clock import CHRONY4, SHOW, _cluster, caps, one

    from preflight.checks.clock import grade_cluster_clock  # isort: skip

    graded = [one(caps(CHRONY4, SHOW)) for _ in range(2)]
    graded[0].node, graded[1].node = "n1", "n2"
    t0 = 1764129000.0
    return list(grade_cluster_clock(_cluster({"n1": f"{t0 + 0.1:.9f}\n", "n2": f"{t0 + 30.3:.9f}\n"},
                                             {"n1": (t0, t0 + 0.4), "n2": (t0, t0 + 0.4)}, graded)))


CROSS_CASES = [  # cross-node codes: code, the graded results of several nodes, the token of the telling line
    ("cluster.versions/version-differs", _versions, "n3: driver=535.161.08"),
    ("cluster.nccl_env/env-differs", _nccl_env, "NCCL_SOCKET_IFNAME=eth0"),
    ("cluster.nodes/short", _nodes_short, "n2: unreachable"),
    ("cluster.mtu/black-hole", _black_hole, "-> n3: silent_loss"),
    ("cluster.clock/nodes-disagree", _clocks, "node2: offset from the controller +29.550"),
    ("net.mtu/black-hole-at-node", _black_hole, "-> n3: silent_loss (8972-byte DF ping)"),
    ("node.clock/controller-offset", _controller_offset, "offset from the controller between +29.900 s and +30.300 s"),
]


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
    for code, how, inputs, token in GRADE_CASES:
        for r in graded(code, how, inputs):
            if first_code(r) == code and token in proof(r):
                out.setdefault(code, f"{how} {inputs}")
    for code, build, token in CROSS_CASES:
        if any(first_code(r) == code and token in proof(r) for r in build()):
            out.setdefault(code, build.__name__)
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


@pytest.mark.parametrize("code,how,inputs,token", GRADE_CASES, ids=[c[0] for c in GRADE_CASES])
def test_the_graded_result_shows_the_telling_line(code: str, how: str, inputs: dict[str, Any], token: str) -> None:
    res = graded(code, how, inputs)
    named = [r for r in res if first_code(r) == code]
    assert named, [(r.check, r.status, r.facts.get("codes")) for r in res]
    assert token in proof(named[0]), (proof(named[0]), named[0].evidence[:4])


@pytest.mark.parametrize("code,build,token", CROSS_CASES, ids=[c[0] for c in CROSS_CASES])
def test_the_cross_node_result_shows_the_telling_line(code: str, build: Any, token: str) -> None:
    named = [r for r in build() if first_code(r) == code]
    assert len(named) == 1, [(r.check, r.node, r.status, r.facts.get("codes")) for r in build()]
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
    assert all(r in (NO_CASE, ENGINE) or (r.startswith(WRONG) and len(r) > len(WRONG)) for r in KNOWN_GAPS.values())


def test_every_case_names_a_code_of_the_table() -> None:
    table = policy.builtin().codes
    assert not [c for _, c, _ in ANALYZE_CASES if c not in table]
    assert not [c for c, *_ in GRADE_CASES if c not in table]
    assert not [c for c, *_ in CROSS_CASES if c not in table]
    assert {Status.FAIL, Status.ERROR, Status.WARN} == set(FAILURES)
