"""benchmarks/device_check.sh: its dry run here (no GPU), and its non-dry plumbing against the
fake nvidia-smi and the fake libnvidia-ml (step 1 in full; the torch steps fail with the cause
where torch has no CUDA)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests import fakes, scenarios

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "device_check.sh"


def run(args: list[str], env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=timeout,
                          cwd=ROOT)


def bare_env() -> dict[str, str]:
    """This machine as it is, with the python that runs the tests."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFLIGHT_FAKE")}
    env["PYTHON"] = sys.executable
    env.pop("DEVICE_CHECK_DEVICE", None)
    return env


def gpu_env(tmp: Path, build=scenarios.healthy_h100) -> dict[str, str]:
    """A GPU machine as the fakes make it: nvidia-smi and libnvidia-ml.so.1 answering for 8
    H100s, and a stand-in for /dev/nvidia0."""
    bin_dir = fakes.install(tmp / "bin", scenarios.TOOLS)
    env = scenarios.nvml_env(fakes.env_for(bin_dir, build(tmp / "sc")))
    (tmp / "nvidia0").write_text("")
    env.update({"PYTHON": sys.executable, "DEVICE_CHECK_DEVICE": str(tmp / "nvidia0"), "PREFLIGHT_HISTORY": "off"})
    env.pop("PREFLIGHT_CONFIG", None)
    return env


def assert_plan(out: str) -> None:
    for step in ("node", "sweep", "restart", "replay"):
        assert f"step {step} (timeout" in out
    # the exact commands the probes run, and each step's own
    for cmd in ("nvidia-smi -q", "nvidia-smi -L", "nvidia-smi topo -m", "nvidia-smi nvlink --status",
                "nvidia-smi --query-gpu=index,name", "probe nvml:", "nvidia-smi -q -x", "-m preflight.cli node --json",
                "-m preflight.cli sweep --nproc 8 --backend nccl", "allreduce.py",
                "-m preflight.runtime.launch --nproc 4", "replay.py --rank-out"):
        assert cmd in out, cmd
    assert out.rstrip().splitlines()[-1] == "no GPU: skipped"


def test_dry_run_on_this_machine_says_what_it_would_run() -> None:
    env = bare_env()
    if shutil.which("nvidia-smi", path=env.get("PATH")) and Path("/dev/nvidia0").exists():
        env["DEVICE_CHECK_DEVICE"] = "/nonexistent/nvidia0"  # a GPU machine: still the no-GPU path
    p = run([], env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "dry run: no " in p.stdout
    assert_plan(p.stdout)
    assert "Traceback" not in p.stdout + p.stderr


@pytest.mark.real
def test_dry_run_flag_runs_nothing_even_with_a_gpu(tmp_path: Path) -> None:
    env = gpu_env(tmp_path)
    out = tmp_path / "dc.json"
    p = run(["--dry-run", "--out", str(out)], env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert_plan(p.stdout)
    assert not out.exists()


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    assert run(["--steps", "node,nope"], bare_env()).returncode == 2
    assert run(["--frobnicate"], bare_env()).returncode == 2
    assert run(["--steps", ","], bare_env()).returncode == 2
    assert run(["--out"], bare_env()).returncode == 2


@pytest.mark.real
def test_node_step_records_the_driver_and_keeps_the_raw_captures(tmp_path: Path) -> None:
    env = gpu_env(tmp_path)
    out = tmp_path / "out" / "dc.json"
    p = run(["--steps", "node,sweep", "--out", str(out)], env)
    doc = json.loads(out.read_text())
    steps = {s["step"]: s for s in doc["steps"]}
    assert doc["environment"]["preflight_cli"] == "ok" and doc["environment"]["python"] == sys.executable
    node = steps["node"]
    assert node["status"] == "pass", node["reason"]
    figs = node["figures"]
    assert figs["node"]["verdict"] == "GO" and figs["node"]["checks"]["gpu.inventory"] == "pass"
    assert figs["nvml"]["ok"] is True and figs["nvml"]["gpus"] == 8
    assert figs["analyze"]["unread"] == []
    probes = {c["probe"] for c in figs["captures"]}
    assert {"nvidia-smi-q", "nvidia-smi-query", "nvidia-smi-L", "nvidia-smi-nvlink", "nvidia-smi-topo", "nvml"} <= probes
    cap = out.parent / "captures"
    q = (tmp_path / "sc" / "q.txt").read_text()
    assert (cap / "nvidia-smi-q.out").read_text() == q  # the tool's output, byte for byte
    assert json.loads((cap / "nvml.out").read_text())["driver"] == scenarios.DRIVER
    assert (cap / "nvidia-smi-nvlink.1.out").is_file()  # the alternative command's format too
    assert any(c.startswith("nvidia-smi -q") for c in node["commands"])
    assert node["duration_s"] > 0 and node["wall_s"] > 0 and node["timeout_s"] > 0
    sweep = steps["sweep"]
    import torch

    if not torch.cuda.is_available():  # torch without CUDA on a GPU machine: FAIL with the cause
        assert sweep["status"] == "fail" and "cannot use CUDA" in sweep["reason"]
        assert doc["ok"] is False and doc["failed"] == ["sweep"] and p.returncode == 1
    assert "node     pass" in p.stdout


def node_step(tmp_path: Path, scenario: Callable[[Path], Path]) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """The device check's node step alone on a node built by `scenario`: the process and the step's record."""
    out = tmp_path / "dc.json"
    p = run(["--steps", "node", "--out", str(out)], gpu_env(tmp_path, scenario))
    return p, json.loads(out.read_text())["steps"][0]


def topo_garbage(folder: Path) -> Path:
    scenarios.healthy_h100(folder)
    (folder / "topo.txt").write_text("GPU0 ??? this is no topology matrix\nsomething else entirely\n")
    return folder


@pytest.mark.real
def test_output_the_parsers_cannot_read_fails_the_node_step(tmp_path: Path) -> None:
    p, node = node_step(tmp_path, topo_garbage)
    assert p.returncode == 1, p.stdout + p.stderr
    assert node["status"] == "fail"
    assert "gpu.topology" in node["reason"] and "not read" in node["reason"], node["reason"]


def no_kernel_log(folder: Path) -> Path:
    scenarios.healthy_h100(folder)
    (folder / "dmesg.json").unlink()  # dmesg and journalctl exit 127: gpu.xid is ERROR
    return folder


@pytest.mark.real
def test_an_error_outside_the_gpu_tools_is_recorded_not_failed(tmp_path: Path) -> None:
    p, node = node_step(tmp_path, no_kernel_log)
    assert node["figures"]["node"]["checks"]["gpu.xid"] == "error"
    assert node["status"] == "pass", node["reason"]
    assert p.returncode == 0


@pytest.mark.real
def test_a_step_killed_by_its_limit_is_failed_and_leaves_no_process(tmp_path: Path) -> None:
    env = gpu_env(tmp_path)
    env["PREFLIGHT_FAKE_DELAY"] = "600"  # every nvidia-smi call hangs, far past any limit of the script
    env["DEVICE_CHECK_LIMIT_NODE"] = "4"
    out = tmp_path / "dc.json"
    p = run(["--steps", "node", "--out", str(out)], env, timeout=120)  # only a call waited on unbounded reaches 120 s
    assert p.returncode == 1
    node = json.loads(out.read_text())["steps"][0]
    assert node["status"] == "fail" and ("time limit" in node["reason"] or "timed out" in node["reason"])
    assert started_with(f"PREFLIGHT_FAKE_DIR={tmp_path / 'sc'}") == []


def started_with(marker: str) -> list[int]:
    """The live processes whose environment holds `marker` (this test's fake tools)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if marker.encode() in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


# The torch steps' plumbing on CPU (gloo): the same programs, records and figures as on the GPUs.

def step_on_cpu(tmp: Path, name: str, *args: str, timeout: float = 200) -> dict:
    from tests.conftest import need

    need(importlib.util.find_spec("torch") is not None, "torch is not installed")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFLIGHT_FAKE", "TORCHELASTIC_"))}
    env.update({"CUDA_VISIBLE_DEVICES": "", "PREFLIGHT_HISTORY": "off"})
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "device_check" / f"{name}.py"), "--dir", str(tmp),
                        *args], capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads((tmp / "steps" / f"{name}.json").read_text())


@pytest.mark.real
def test_sweep_step_compares_the_sweep_with_a_bare_loop_on_gloo(tmp_path: Path) -> None:
    rec = step_on_cpu(tmp_path, "sweep", "--backend", "gloo", "--nproc", "2", "--max-bytes", "64K")
    assert rec["status"] == "pass", rec["reason"]
    table = rec["figures"]["table"]
    from preflight.sweep.spec import message_sizes

    assert [r["bytes"] for r in table] == message_sizes(8, 64 << 10, 4, 4)  # every size the sweep measured
    for r in table:
        assert r["sweep_busbw"] > 0 and r["bare_busbw"] > 0 and r["ratio"] == r["sweep_busbw"] / r["bare_busbw"]
    assert rec["figures"]["sweep"]["checks"]["nccl.allreduce"][0] == "pass"


@pytest.mark.real
def test_restart_step_measures_kill_to_next_step_on_gloo(tmp_path: Path) -> None:
    rec = step_on_cpu(tmp_path, "restart", "--backend", "gloo")
    assert rec["status"] == "pass", rec["reason"]
    f = rec["figures"]
    assert f["done"]["last_step"] == 119 and f["done"]["world"] == 2  # 3 ranks, one killed, the job went on
    assert 0 < f["kill_to_detect_s"] <= f["kill_to_reform_s"] <= f["kill_to_next_step_s"] < 30
    assert "SIGKILL" in f["cause"]


@pytest.mark.real
def test_replay_step_is_bitwise_and_its_control_differs_on_cpu(tmp_path: Path) -> None:
    rec = step_on_cpu(tmp_path, "replay", "--device", "cpu")
    assert rec["status"] == "pass", rec["reason"]
    one = rec["figures"]["world1"]
    assert one["replays"] == one["bitwise_same"] == 8 and one["control_differs"] is True
    assert rec["figures"]["world2"] == "skipped: needs 2 GPUs" and "needs 2 GPUs" in rec["reason"]


@pytest.mark.real
def test_a_python_without_preflight_installed_runs_it_from_the_checkout_and_packed_deps(tmp_path: Path) -> None:
    """The GPU machine's python has torch but neither preflight nor its dependencies (and no
    network): `--pack` copies the dependencies, the shim maps preflight.checks to checks/."""
    env = gpu_env(tmp_path)
    deps = tmp_path / "deps"
    packed = run(["--pack", str(deps)], env, timeout=180)
    assert packed.returncode == 0, packed.stderr
    assert (deps / "site" / "typer").is_dir() and (deps / "site" / "tabulate").exists()
    bare = tmp_path / "bare-python"  # no site-packages: no preflight, no typer, no editable install
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    bare.chmod(0o755)
    env.update({"PYTHON": str(bare), "DEVICE_CHECK_DEPS": str(deps)})
    out = tmp_path / "dc.json"
    p = run(["--steps", "node", "--out", str(out)], env)
    assert "preflight's dependencies from" in p.stdout and "preflight is not installed" in p.stdout, p.stdout
    node = json.loads(out.read_text())["steps"][0]
    assert node["status"] == "pass", node["reason"]
    assert p.returncode == 0
