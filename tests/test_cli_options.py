"""Options several commands share say what they do: `--probe-timeout`'s help against the
registry's real per-probe limits; `--per-node` on every command that prints findings."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import typing
from pathlib import Path

from preflight import engine, profile
from preflight.cli import checks as cli_checks
from preflight.cli import options as opt
from preflight.probes import DEFAULT_TIMEOUT
from preflight.registry import Options
from tests import fakes, scenarios
from tests.conftest import FIXTURES


def _help(alias: object) -> str:
    return str(typing.get_args(alias)[1].help)


def _planned(probe_timeout: float = DEFAULT_TIMEOUT) -> dict[str, float]:
    """Every probe of every check, planned for a node with a peer under each built-in profile
    that plans more probes: probe name -> its timeout."""
    reg = engine.load_registry([], engine.Config())
    got: dict[str, float] = {}
    for name in ("generic", "h100-sxm-8x"):
        plan = engine.plan_node(engine.select(reg, mode="all"), "n1", profile.load(name),
                                Options(peers=["n2"], probe_timeout=probe_timeout))
        assert not plan.failed, plan.failed
        got.update({p.name: p.timeout for p in plan.probes()})
    return got


def test_probe_timeout_help_says_the_default_and_the_real_range_of_the_probes_own_limits() -> None:
    # before: "Seconds before a hung probe is killed." while a hung `nvidia-smi -q` is killed at 20 s
    text = _help(opt.TimeoutOpt)
    own = {n: t for n, t in _planned().items() if t != DEFAULT_TIMEOUT}
    longest = max(own.values())
    assert f"default {DEFAULT_TIMEOUT:g} s" in text, text
    assert f"from {min(own.values()):g} s" in text, text
    names = sorted(n for n, t in own.items() if t == longest)
    assert f"up to {longest:g} s ({', '.join(names)})" in text, text
    for command in (cli_checks.run, cli_checks.node):
        assert inspect.signature(command).parameters["probe_timeout"].default == DEFAULT_TIMEOUT


def test_probe_timeout_replaces_only_the_default_limit() -> None:
    default, given = _planned(), _planned(probe_timeout=3.0)
    assert {n for n, t in default.items() if t == DEFAULT_TIMEOUT}  # some probes take the option
    for name, t in default.items():
        assert given[name] == (3.0 if t == DEFAULT_TIMEOUT else t), name


# ---- --per-node on the prologue and triage, as on run ------------------------------------------


def _cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([sys.executable, "-m", "preflight.cli", *args], capture_output=True, text=True, env=env,
                       cwd=cwd, timeout=120)
    assert "Traceback" not in p.stderr, p.stderr
    return p


def _per_node_line(line: str, node: str, check: str) -> bool:
    return line.startswith(f"FAIL {node} {check}: ") and " | evidence: " in line and " | remedy: " in line


def test_prologue_per_node_prints_each_finding_as_one_line_naming_the_node(tmp_path: Path) -> None:
    # before: "No such option: --per-node" (exit 2)
    bin_dir = fakes.install(tmp_path / "bin", scenarios.TOOLS)
    env = fakes.env_for(bin_dir, scenarios.with_xid79(tmp_path / "sc"))
    for key in ("PREFLIGHT_ONLY", "PREFLIGHT_SKIP", "PREFLIGHT_PROFILE"):
        env.pop(key, None)
    config = tmp_path / "config.toml"
    config.write_text('history = "off"\n')
    env.update(PREFLIGHT_CONFIG=str(config), XDG_DATA_HOME=str(tmp_path / "data"))
    args = ["prologue", "--only", "gpu.xid", "--dry-run", "--node", "gpu016", "--budget", "60"]
    grouped = _cli(args, env, tmp_path)
    assert "  FAIL gpu.xid: " in grouped.stdout, grouped.stdout + grouped.stderr
    p = _cli([*args, "--per-node"], env, tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr  # --dry-run: NO-GO said, exit 0
    out = p.stdout.splitlines()
    assert out[0].startswith("preflight prologue gpu016: NO-GO"), p.stdout
    assert _per_node_line(out[1], "gpu016", "gpu.xid") and "Xid 79" in out[1], p.stdout
    assert "  FAIL gpu.xid: " not in p.stdout and "\n    remedy: " not in p.stdout


def test_triage_per_node_prints_every_failing_finding_as_one_line_naming_its_node(tmp_path: Path) -> None:
    # before: "No such option: --per-node" (exit 2)
    from preflight.triage.collect import write_bundle
    from tests.triage._bundles import files_capture, kernel_capture, make_bundle

    wd = FIXTURES / "triage" / "wd_versions"
    xid = (FIXTURES / "kernel-log" / "dmesg_iso_xid48_63_94.log").read_text()
    nodes = {f"gpu{n:03d}": {"triage-run-dir": files_capture({f"rank{r}.log": wd / f"rank{r}.log" for r in ranks}),
                             "kernel-log": kernel_capture(xid)}
             for n, ranks in ((12, (0, 1, 2)), (3, (3, 4, 5)))}
    bundle = write_bundle(make_bundle(nodes), tmp_path / "job.tar.gz")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFLIGHT_")}
    env.update(XDG_DATA_HOME=str(tmp_path / "data"), PREFLIGHT_HISTORY="off")
    short = _cli(["triage", str(bundle)], env, tmp_path)
    assert "  FAIL gpu003 gpu.xid: " in short.stdout, short.stdout + short.stderr
    p = _cli(["triage", str(bundle), "--per-node"], env, tmp_path)
    assert p.returncode == short.returncode == 1, p.stdout + p.stderr
    found = [ln for ln in p.stdout.splitlines() if ln.startswith(("FAIL", "ERROR"))]
    assert [ln.split()[1] for ln in found] == ["gpu003", "gpu012"], p.stdout  # natural order, one line each
    assert all(_per_node_line(ln, ln.split()[1], "gpu.xid") for ln in found), found
