"""`preflight run` on one healthy node (a faked 8xH100: fake nvidia-smi & co. on PATH).

The node checks pass, then the sweep runs across this node's GPUs, launched locally: never
over SSH (or srun) to itself. Installed as the README says (no torch), the sweep is SKIP with
its reason and the way to point it at the job's python; pointed at a python with torch, the
local gloo sweep runs one rank per GPU found and the verdict is GO.

`ssh` and `srun` on PATH are recording shims that fail: any attempt shows in their log.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import fakes, scenarios
from tests.conftest import ROOT, need

pytestmark = pytest.mark.real
GLOO_PROFILE = str(ROOT / "tests" / "sweep" / "gloo-test.toml")
TORCH_PACKAGES = ("torch", "functorch", "torchgen")


@pytest.fixture(scope="module")
def no_torch_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A virtual environment with preflight and its dependencies but no torch: the README's
    `pip install -e .`, built offline from this environment's installed packages (every
    entry of its site-packages except torch's)."""
    import sysconfig

    root = tmp_path_factory.mktemp("readme-venv") / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    src = Path(sysconfig.get_paths()["purelib"])
    dst = Path(subprocess.run([str(root / "bin" / "python"), "-c", "import sysconfig; "
                               "print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True, timeout=60).stdout.strip())
    for entry in src.iterdir():
        if entry.name.split("-")[0] in TORCH_PACKAGES:
            continue
        (dst / entry.name).symlink_to(entry.resolve())
    py = str(root / "bin" / "python")
    check = subprocess.run([py, "-c", "import importlib.util as u; import preflight.cli, typer, rich; "
                            "print(u.find_spec('torch') is None)"], capture_output=True, text=True, timeout=60)
    assert check.stdout.strip() == "True", check.stderr[-1000:]
    return py


def _has_torch() -> None:
    import importlib.util

    need(importlib.util.find_spec("torch") is not None, "torch is not installed")


def healthy_node(tmp: Path) -> tuple[dict[str, str], Path]:
    """Environment of a healthy fake 8xH100 node whose ssh and srun record every call and fail."""
    bin_dir = fakes.install(tmp / "bin", scenarios.TOOLS)
    calls = tmp / "remote-calls.log"
    for tool in ("ssh", "srun"):
        shim = bin_dir / tool
        shim.write_text(f"#!/bin/sh\necho \"{tool} $*\" >> {calls}\necho '{tool}: not allowed in this test' >&2\n"
                        "exit 255\n")
        shim.chmod(0o755)
    env = fakes.env_for(bin_dir, scenarios.healthy_h100(tmp / "sc"))
    scenarios.nvml_env(env)
    for var in [k for k in env if k.startswith("SLURM_")] + ["PREFLIGHT_CONFIG"]:
        env.pop(var, None)
    return env, calls


def run(python: str, args: list[str], env: dict[str, str], tmp: Path) -> tuple[subprocess.CompletedProcess[str],
                                                                                dict, float]:
    t = time.monotonic()
    p = subprocess.run([python, "-m", "preflight.cli", "run", "--json", "--no-report", *args], capture_output=True,
                       text=True, env=env, cwd=tmp, timeout=300)
    took = time.monotonic() - t
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    return p, json.loads(p.stdout), took


def sweep_results(doc: dict) -> dict[str, dict]:
    return {r["check"]: r for r in doc["results"] if r["source"] == "sweep"}


def node_checks_pass(doc: dict) -> None:
    node = [r for r in doc["results"] if r["source"] != "sweep"]
    assert len(node) >= 10 and all(r["status"] == "pass" for r in node), \
        [(r["check"], r["status"], r["summary"]) for r in node if r["status"] != "pass"]


def test_readme_install_without_torch_is_go_with_sweep_skip(tmp_path: Path, no_torch_python: str) -> None:
    env, calls = healthy_node(tmp_path)
    p, doc, took = run(no_torch_python, [], env, tmp_path)
    assert p.returncode == 0 and doc["verdict"] == "GO", p.stdout[-3000:]
    node_checks_pass(doc)
    ar = sweep_results(doc)["nccl.allreduce"]
    assert ar["status"] == "skip" and ar["node"] == "cluster"
    assert "torch is not importable" in ar["summary"] and no_torch_python in ar["summary"]
    assert "No module named 'torch'" in ar["evidence"][0]
    assert "--sweep-python PATH" in ar["remedy"]
    assert not calls.exists(), calls.read_text()
    assert not [r for r in doc["results"] if r["status"] in ("fail", "error")]
    print(f"one-node run, README install (no torch): {took:.1f} s")


def test_only_host_given_is_this_node_no_ssh(tmp_path: Path, no_torch_python: str) -> None:
    """--hosts <this node's own name> and a one-node allocation of this node: the sweep is
    still local (checked with --sweep-only, so the node checks' transport is not in play). The
    sweep is all that was asked and it could not run: NO-EVIDENCE, exit 3."""
    env, calls = healthy_node(tmp_path)
    me = socket.gethostname()
    p, doc, _ = run(no_torch_python, ["--sweep-only", "--sweep-nproc", "2", "--hosts", me], env, tmp_path)
    assert p.returncode == 3 and doc["verdict"] == "NO-EVIDENCE", p.stdout[-2000:]
    assert sweep_results(doc)["nccl.allreduce"]["status"] == "skip", p.stdout[-2000:]
    alloc = {**env, "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": me.split(".")[0]}
    p, doc, _ = run(no_torch_python, ["--sweep-only", "--sweep-nproc", "2"], alloc, tmp_path)
    ar = sweep_results(doc)["nccl.allreduce"]
    assert p.returncode == 3 and ar["status"] == "skip" and "torch" in ar["summary"], p.stdout[-2000:]
    assert not calls.exists(), calls.read_text()


def test_hosts_naming_this_node_checks_it_locally(tmp_path: Path, no_torch_python: str) -> None:
    """`run --hosts <this node's name>` outside an allocation: node checks and sweep both run
    here (no SSH connection to ourselves, which this machine would refuse), GO."""
    env, calls = healthy_node(tmp_path)
    me = socket.gethostname().split(".")[0]
    p, doc, _ = run(no_torch_python, ["--hosts", me], env, tmp_path)
    assert p.returncode == 0 and doc["verdict"] == "GO", p.stdout[-3000:]
    node_checks_pass(doc)
    assert {r["node"] for r in doc["results"] if r["source"] != "sweep"} == {me}
    assert not calls.exists(), calls.read_text()


def test_sweep_python_without_torch_is_skip_naming_it(tmp_path: Path) -> None:
    """--sweep-python pointing at an interpreter without torch (nor preflight installed)."""
    need(Path("/usr/bin/python3").is_file(), "no /usr/bin/python3")
    probe = subprocess.run(["/usr/bin/python3", "-c", "import importlib.util as u; print(u.find_spec('torch'))"],
                           capture_output=True, text=True, timeout=60)
    if probe.stdout.strip() != "None":
        pytest.skip("/usr/bin/python3 has torch")
    env, calls = healthy_node(tmp_path)
    p, doc, _ = run(sys.executable, ["--sweep-python", "/usr/bin/python3"], env, tmp_path)
    ar = sweep_results(doc)["nccl.allreduce"]
    assert p.returncode == 0 and doc["verdict"] == "GO", p.stdout[-2000:]
    assert ar["status"] == "skip" and "/usr/bin/python3" in ar["summary"]
    assert not calls.exists()


def test_with_torch_the_local_sweep_runs_one_rank_per_gpu_and_is_go(tmp_path: Path, no_torch_python: str) -> None:
    """preflight installed without torch, the sweep pointed at the job's python (with torch):
    8 gloo ranks on this machine (one per GPU that gpu.inventory found), GO."""
    _has_torch()
    env, calls = healthy_node(tmp_path)
    p, doc, took = run(no_torch_python, ["--sweep-python", sys.executable, "--sweep-backend", "gloo",
                                         "--sweep-profile", GLOO_PROFILE, "--sweep-max-bytes", "65536"],
                       env, tmp_path)
    assert p.returncode == 0 and doc["verdict"] == "GO", \
        [(r["node"], r["check"], r["status"], r["summary"]) for r in doc["results"] if r["status"] != "pass"]
    node_checks_pass(doc)
    ar = sweep_results(doc)["nccl.allreduce"]
    assert ar["status"] == "pass" and ar["facts"]["world"] == 8 and ar["facts"]["backend"] == "gloo"
    assert [r["bytes"] for r in ar["facts"]["rows"]] == [8, 32, 128, 512, 2048, 8192, 32768, 65536]
    assert all(r["wrong"] == 0 for r in ar["facts"]["rows"])
    assert not calls.exists(), calls.read_text()
    print(f"one-node run with torch (8 gloo ranks): {took:.1f} s")


def test_with_torch_in_preflight_own_python(tmp_path: Path) -> None:
    """preflight installed with torch: the default sweep python is preflight's own."""
    _has_torch()
    env, calls = healthy_node(tmp_path)
    p, doc, took = run(sys.executable, ["--sweep-nproc", "2", "--sweep-backend", "gloo", "--sweep-profile",
                                        GLOO_PROFILE, "--sweep-max-bytes", "8192"], env, tmp_path)
    ar = sweep_results(doc)["nccl.allreduce"]
    assert p.returncode == 0 and doc["verdict"] == "GO" and ar["status"] == "pass", p.stdout[-2000:]
    assert ar["facts"]["world"] == 2
    assert not calls.exists()


def test_one_gpu_is_skip_and_bad_sweep_options_are_usage_errors(tmp_path: Path) -> None:
    env, calls = healthy_node(tmp_path)
    p, doc, _ = run(sys.executable, ["--sweep-only", "--sweep-nproc", "1"], env, tmp_path)
    ar = sweep_results(doc)["nccl.allreduce"]
    assert p.returncode == 3 and doc["verdict"] == "NO-EVIDENCE" and ar["status"] == "skip" and "one rank" in ar["summary"]
    for bad in (["--sweep-python", "py; rm -rf /"], ["--sweep-backend", "mpi"]):
        q = subprocess.run([sys.executable, "-m", "preflight.cli", "run", "--no-report", *bad], capture_output=True,
                           text=True, env=env, cwd=tmp_path, timeout=120)
        assert q.returncode == 2 and "Traceback" not in q.stderr and bad[0] in q.stderr, q.stderr
    assert not calls.exists()


def test_cli_start_does_not_import_torch() -> None:
    code = ("import sys\nimport preflight.cli\n"
            "print(','.join(m for m in ('torch', 'pandas') if m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0 and p.stdout.strip() == "", p.stdout + p.stderr
