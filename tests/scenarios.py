"""Whole-node scenarios for fake tools: which capture each tool prints for which arguments.

`healthy_h100(folder)` is an 8xH100 node where every check passes; the fault helpers change
one thing. Used by the end-to-end tests, the test cluster's nodes, and the benchmarks.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests import fakes
from tests.fakes import fake_nvml

FIX = fakes.FIXTURES

TOOLS = ["nvidia-smi", "dmesg", "journalctl", "systemctl", "ibstat", "ip", "ofed_info", "chronyc"]

XID79 = ("[Mon Nov 23 09:12:44 2026] NVRM: GPU at PCI:0000:5d:00: GPU-2b1e4c7a-90d3-4f6e-b1a2-7c8d9e0f1a2b\n"
         "[Mon Nov 23 09:12:44 2026] NVRM: Xid (PCI:0000:5d:00): 79, pid=0, GPU has fallen off the bus.\n"
         "[Mon Nov 23 09:12:44 2026] NVRM: GPU 0000:5d:00.0: GPU has fallen off the bus.\n")
CLEAN_DMESG = ("[Mon Nov 23 06:00:01 2026] Linux version 5.15.0-112-generic (buildd@lcy02-amd64-051)\n"
               "[Mon Nov 23 06:00:09 2026] nvidia: module license 'NVIDIA' taints kernel.\n"
               "[Mon Nov 23 06:00:10 2026] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.127.05\n")


DRIVER = "535.154.05"  # one driver everywhere on a healthy node


def _nvml_json() -> str:
    data = json.loads((FIX / "nvidia-smi" / "nvml_8xh100_ok.json").read_text())
    data.update({"driver": DRIVER, "cuda_driver_version": 12020, "nvml_version": "12." + DRIVER})
    return json.dumps(data)


def healthy_h100(folder: Path, dmesg_text: str = CLEAN_DMESG) -> Path:
    q = (FIX / "nvidia-smi-q" / "h100x8_535_healthy_idle_powerbrake.txt").read_text().replace("535.230.02", DRIVER)
    files: dict[str, str | Path] = {
        "query.csv": FIX / "nvidia-smi" / "query_8xh100_ok.csv",
        "L.txt": FIX / "nvidia-smi" / "smi_L_8xh100.txt",
        "q.txt": q,
        "nvlink.txt": FIX / "nvidia-smi" / "nvlink_8xh100_ok.txt",
        "topo.txt": FIX / "topo" / "topo_8xh100_10nic_ok.txt",
        "fm.txt": FIX / "systemctl" / "show_fm_active.txt",
        "ibstat.txt": FIX / "ib" / "ibstat_8x400_ib_2fe_all_active.txt",
        "ip-addr.out": FIX / "ip" / "ip_j_d_addr_h100_healthy.json",
        "nvml.json": _nvml_json(),
        "dmesg.out": dmesg_text,
        "chrony.txt": FIX / "chrony" / "tracking_4x_synced.txt",
    }
    spec = {
        "nvidia-smi": [
            {"match": "^--query-gpu", "stdout": "query.csv"},
            {"match": "^-L$", "stdout": "L.txt"},
            {"match": "^-q$", "stdout": "q.txt"},
            {"match": "^nvlink", "stdout": "nvlink.txt"},
            {"match": "^topo -m", "stdout": "topo.txt"},
        ],
        "dmesg": [{"match": ".*", "stdout": "dmesg.out"}],
        "systemctl": [{"match": "nvidia-fabricmanager", "stdout": "fm.txt"}],
        "ibstat": [{"match": ".*", "stdout": "ibstat.txt"}],
        "ip": [{"match": "addr", "stdout": "ip-addr.out"}],
        "ofed_info": [{"match": "-s", "text": "MLNX_OFED_LINUX-24.04-0.6.6.0:\n"}],
        "chronyc": [{"match": "tracking", "stdout": "chrony.txt"}],
    }
    return fakes.scenario(folder, spec, files)


def nvml_env(env: dict[str, str], variant: str = "") -> dict[str, str]:
    """`env` with the fake libnvidia-ml.so.1 first on LD_LIBRARY_PATH: the NVML probe reads the
    scenario's nvml.json through it. Skips the test where it cannot be built (no gcc), fails
    under CI=true."""
    from tests.conftest import need

    try:
        return fake_nvml.with_library(env, variant)
    except fake_nvml.Unavailable as exc:
        need(False, str(exc))
        raise


def with_xid79(folder: Path) -> Path:
    return healthy_h100(folder, CLEAN_DMESG + XID79)
