"""`preflight node` / `run` end to end on a whole faked 8xH100 node, and on this machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import fakes, scenarios


def node_env(tmp: Path, build=scenarios.healthy_h100) -> dict[str, str]:
    bin_dir = fakes.install(tmp / "bin", scenarios.TOOLS)
    env = fakes.env_for(bin_dir, build(tmp / "sc"))
    scenarios.nvml_env(env)
    env.pop("PREFLIGHT_CONFIG", None)
    return env


def preflight(args: list[str], env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "preflight.cli", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=120)


@pytest.mark.real
def test_healthy_node_is_go(tmp_path: Path) -> None:
    p = preflight(["node", "--json"], node_env(tmp_path))
    doc = json.loads(p.stdout)
    assert doc["verdict"] == "GO", [r for r in doc["results"] if r["status"] != "pass"]
    assert p.returncode == 0
    assert doc["profiles"] == {doc["nodes"][0]: "h100-sxm-8x"}
    checks = {r["check"] for r in doc["results"]}
    assert {"gpu.inventory", "gpu.driver", "gpu.health", "gpu.xid", "fabric.manager", "gpu.nvlink",
            "gpu.topology", "net.nic", "net.mtu", "ib.hca"} <= checks


@pytest.mark.real
def test_xid79_node_is_no_go_with_remedy(tmp_path: Path) -> None:
    p = preflight(["node", "--json"], node_env(tmp_path, scenarios.with_xid79))
    doc = json.loads(p.stdout)
    assert p.returncode == 1 and doc["verdict"] == "NO-GO"
    xid = next(r for r in doc["results"] if r["check"] == "gpu.xid")
    assert xid["status"] == "fail" and "79" in xid["summary"]
    assert "reboot" in xid["remedy"].lower()
    assert xid["facts"]["events"][0]["xid"] == 79


@pytest.mark.real
def test_run_on_this_machine_is_honest_no_go(tmp_path: Path) -> None:
    """No GPU here: NO-GO naming the missing GPU tooling, with all three report files."""
    env = dict(os.environ)
    env.pop("PREFLIGHT_CONFIG", None)
    p = preflight(["run", "--out", str(tmp_path / "r")], env, cwd=tmp_path)
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr
    doc = json.loads((tmp_path / "r" / "report.json").read_text())
    assert doc["verdict"] == "NO-GO"
    bad = {r["check"]: r for r in doc["results"] if r["status"] in ("fail", "error")}
    assert "gpu.driver" in bad or "gpu.inventory" in bad
    assert any("nvidia-smi" in r["summary"] for r in bad.values())
    assert (tmp_path / "r" / "report.md").is_file() and (tmp_path / "r" / "junit.xml").is_file()
    assert "NO-GO" in p.stdout


@pytest.mark.real
def test_node_path_imports_no_torch_or_pandas(tmp_path: Path) -> None:
    env = node_env(tmp_path)
    code = ("import sys, runpy\nsys.argv = ['preflight', 'node', '--json']\n"
            "try:\n    runpy.run_module('preflight.cli', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "heavy = sorted(m for m in ('torch', 'pandas', 'numpy') if m in sys.modules)\n"
            "print('HEAVY=' + ','.join(heavy), file=sys.stderr)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert "HEAVY=\n" in p.stderr + "\n", p.stderr[-500:]
