"""Drain and resume: scontrol parsing and the drain-reason rules (pure), the prologue command
on this machine with fake tools, then the prologue as a real Slurm Prolog on the test cluster."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from preflight import slurm
from preflight.probes import Probe
from preflight.slurm import NodeInfo, drain_reason, parse_show_nodes, plan_drain, plan_resume
from tests import fakes
from tests.conftest import fixture_text, need
from tests.netcluster import ROOT, NetCluster, prerequisites, slurm_prerequisites
from tests.slurm import KMSG_CLEAN, KMSG_XID79, clean_kernel_logs, slurm_cluster

PREFIX, SUBNET = "psl2", "10.78.2"  # apart from the other cluster tests' namespaces and subnets
EXAMPLE_PROLOG = ROOT / "examples" / "slurm" / "prolog.sh"

# ---- scontrol parsing -----------------------------------------------------------------------


def test_one_line_form_states_and_reasons() -> None:
    nodes = parse_show_nodes(fixture_text("scontrol/show_node_o_mixed.txt"))
    assert list(nodes) == ["gpu017", "gpu018", "gpu019", "gpu020", "gpu021"]
    idle, ours, admin, down, caps = (nodes[n] for n in nodes)
    assert idle.state == "IDLE" and not idle.drained and idle.reason == ""
    assert ours.drained and ours.base_state == "IDLE" and ours.ours
    assert ours.reason == "preflight: gpu.xid GPU reset or reboot needed: GPU 0000:9a:00: Xid 79"
    assert (ours.reason_user, ours.reason_time) == ("root", "2025-03-12T09:13:51")
    # a reason full of Key=value text stays whole, and the fields after State are still read
    assert admin.reason == "RMA case 88213: GPU=3 PSU=B swap, do NOT resume" and admin.reason_user == "jdoe"
    assert admin.base_state == "MIXED" and admin.drained and not admin.ours
    assert admin.fields["Partitions"] == "batch" and admin.fields["Gres"] == "gpu:h100:8(S:0-1)"
    assert down.down and down.drained and down.flags == {"DRAIN", "NOT_RESPONDING"} and down.reason == "Not responding"
    assert caps.drained and not caps.ours  # "Preflight:" by hand is not preflight's own prefix


def test_long_form_is_joined_per_node() -> None:
    nodes = parse_show_nodes(fixture_text("scontrol/show_node_long.txt"))
    assert nodes["cn-a07"].reason == "preflight: ib.hca mlx5_3 port 1 Down" and nodes["cn-a07"].drained
    assert nodes["cn-a07"].fields["OS"].startswith("Linux 6.1.0-18-amd64 #1 SMP")
    assert nodes["cn-a08"].state == "IDLE" and nodes["cn-a08"].reason == ""


def test_reason_without_stamp_and_garbage() -> None:
    info = parse_show_nodes("NodeName=x1 State=IDLE+DRAIN Reason=preflight: gpu.health ECC Comment=none\n")["x1"]
    assert info.reason == "preflight: gpu.health ECC" and info.fields["Comment"] == "none"
    assert parse_show_nodes("") == {}
    assert parse_show_nodes("slurm_load_node error: Unable to contact slurm controller (connect failure)\n") == {}
    assert parse_show_nodes("NodeName= State=IDLE\nNodeName=ok State=IDLE Reason=(null)\n")["ok"].reason == ""
    assert list(parse_show_nodes("NodeName=cut State=IDLE+DR")) == ["cut"]  # truncated output


# ---- drain-reason rules ---------------------------------------------------------------------


def test_drain_reason_is_one_prefixed_line_of_bounded_length() -> None:
    assert drain_reason("gpu.xid", "Xid 79 on GPU 0000:9a:00") == "preflight: gpu.xid Xid 79 on GPU 0000:9a:00"
    long = drain_reason("gpu.health", "row remap failure\n  on [GPU 3] " + "x" * 500)
    assert len(long) == slurm.REASON_MAX and long.endswith("...") and "\n" not in long
    assert "[" not in long and long.startswith("preflight: gpu.health row remap failure on (GPU 3)")


def _info(state: str = "IDLE", reason: str = "") -> NodeInfo:
    return NodeInfo(name="gpu1", state=state, reason=reason)


def test_drain_only_where_no_other_reason() -> None:
    r = drain_reason("gpu.xid", "Xid 79")
    assert plan_drain(_info(), "gpu1", r).action == "drain"
    assert plan_drain(_info("MIXED"), "gpu1", r).action == "drain"
    kept = plan_drain(_info("IDLE+DRAIN", "RMA ticket 4711"), "gpu1", r)
    assert kept.action == "keep" and kept.reason == "RMA ticket 4711"
    assert plan_drain(_info("DOWN", "Not responding"), "gpu1", r).action == "keep"
    again = plan_drain(_info("IDLE+DRAIN", "preflight: ib.hca port down"), "gpu1", r)
    assert again.action == "drain" and "replaces" in again.message
    assert plan_drain(_info("IDLE+DRAIN", r), "gpu1", r).action == "keep"
    assert plan_drain(None, "gpu1", r).action == "error"


def test_resume_only_what_preflight_drained() -> None:
    assert plan_resume(_info("IDLE+DRAIN", "preflight: gpu.xid Xid 79"), "gpu1").action == "resume"
    assert plan_resume(_info("DRAINED", "preflight: gpu.xid Xid 79"), "gpu1").action == "resume"
    assert plan_resume(_info("DOWN", "preflight: net.nic eth0 down"), "gpu1").action == "resume"
    for state, reason in (("IDLE+DRAIN", "RMA ticket 4711"), ("IDLE+DRAIN", "Preflight: by hand"),
                          ("IDLE", ""), ("DOWN*+DRAIN", "Not responding"), ("IDLE", "preflight: stale")):
        assert plan_resume(_info(state, reason), "gpu1").action == "keep", (state, reason)
    assert plan_resume(None, "gpu1").action == "error"


def test_action_lines_say_what_would_happen() -> None:
    a = slurm.Action("gpu1", "resume", "preflight: gpu.xid Xid 79")
    assert a.line(dry_run=True).startswith("gpu1: would resume reason='preflight: gpu.xid Xid 79'")
    assert slurm.Action("gpu2", "keep", "RMA", "left alone").line(True) == "gpu2: keep reason='RMA' (left alone)"


# ---- runners against a fake scontrol ----------------------------------------------------------


def _fake_scontrol(tmp_path: Path, show: str, hang: bool = False) -> Path:
    log = tmp_path / "calls.log"
    out = tmp_path / "show.txt"
    out.write_text(show)
    script = tmp_path / "scontrol"
    body = "sleep 60\n" if hang else ""
    script.write_text(f'#!/bin/sh\n{body}echo "$@" >> {log}\n'
                      f'[ "$1" = show ] && cat {out}\nexit 0\n')
    script.chmod(0o755)
    return script


def test_runner_drains_and_resumes_by_the_rules(tmp_path: Path) -> None:
    show = fixture_text("scontrol/show_node_o_mixed.txt")
    sc = _fake_scontrol(tmp_path, show)
    acts = slurm.resume(["gpu017", "gpu018", "gpu019", "gpu020", "gpu021", "gpu099"], scontrol=str(sc))
    assert [a.action for a in acts] == ["keep", "resume", "keep", "keep", "keep", "error"]
    assert acts[1].done
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert calls == ["show node -o gpu[017-021,099]", "update NodeName=gpu018 State=RESUME"]
    kept = slurm.drain("gpu019", "gpu.xid", "Xid 79", scontrol=str(sc))
    assert kept.action == "keep" and kept.reason.startswith("RMA case 88213")
    done = slurm.drain("gpu017", "gpu.xid", "Xid 79", scontrol=str(sc))
    assert done.action == "drain" and done.done
    assert (tmp_path / "calls.log").read_text().splitlines()[-1] == \
        "update NodeName=gpu017 State=DRAIN Reason=preflight: gpu.xid Xid 79"


def test_dry_run_changes_nothing(tmp_path: Path) -> None:
    sc = _fake_scontrol(tmp_path, fixture_text("scontrol/show_node_o_mixed.txt"))
    acts = slurm.resume(["gpu018"], dry_run=True, scontrol=str(sc))
    assert acts[0].action == "resume" and not acts[0].done and "dry run: scontrol update" in acts[0].message
    assert (tmp_path / "calls.log").read_text().splitlines() == ["show node -o gpu018"]


def test_scontrol_missing_or_hung_is_an_error_action(tmp_path: Path) -> None:
    assert slurm.drain("gpu1", "gpu.xid", "x", scontrol=str(tmp_path / "nope")).action == "error"
    sc = _fake_scontrol(tmp_path, "", hang=True)
    start = time.monotonic()
    acts = slurm.resume(["gpu1"], timeout=1, scontrol=str(sc))
    assert acts[0].action == "error" and "did not answer within 1 s" in acts[0].message
    assert time.monotonic() - start < 5


# ---- the prologue command on this machine ---------------------------------------------------


def _prologue(tmp_path: Path, kmsg: str | None, *args: str, hang: bool = False,
              scontrol: Path | None = None) -> tuple[subprocess.CompletedProcess[str], float]:
    bin_dir = fakes.install(tmp_path / "bin", ["dmesg", "nvidia-smi"])
    rules = [{"match": ".*", "hang": True}] if hang else [{"match": ".*", "stdout": "kmsg.txt"}]
    fakes.scenario(tmp_path / "sc", {"dmesg": rules}, {"kmsg.txt": kmsg or ""})
    env = fakes.env_for(bin_dir, tmp_path / "sc")
    if scontrol is not None:
        env["PATH"] = f"{scontrol.parent}:{env['PATH']}"
    env["SLURMD_NODENAME"] = "gpu017"
    start = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "preflight.cli", "prologue", "--only", "gpu.xid", *args],
                       capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    return p, time.monotonic() - start


def test_prologue_go_on_a_clean_node(tmp_path: Path) -> None:
    p, _ = _prologue(tmp_path, KMSG_CLEAN, "--no-drain")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("preflight prologue gpu017: GO")


def test_prologue_no_go_drains_through_scontrol(tmp_path: Path) -> None:
    sc = _fake_scontrol(tmp_path, fixture_text("scontrol/show_node_o_mixed.txt"))
    p, _ = _prologue(tmp_path, KMSG_XID79, scontrol=sc)
    assert p.returncode == 1, p.stderr
    assert "FAIL gpu.xid" in p.stdout and "gpu017: drain reason='preflight: gpu.xid" in p.stdout
    update = (tmp_path / "calls.log").read_text().splitlines()[-1]
    assert update.startswith("update NodeName=gpu017 State=DRAIN Reason=preflight: gpu.xid ") and "Xid 79" in update


def test_prologue_dry_run_and_no_drain(tmp_path: Path) -> None:
    sc = _fake_scontrol(tmp_path, fixture_text("scontrol/show_node_o_mixed.txt"))
    p, _ = _prologue(tmp_path, KMSG_XID79, "--dry-run", scontrol=sc)
    assert p.returncode == 0 and "gpu017: would drain" in p.stdout and "would exit 1" in p.stdout
    assert "update" not in (tmp_path / "calls.log").read_text()
    p, _ = _prologue(tmp_path, KMSG_XID79, "--no-drain", scontrol=sc)
    assert p.returncode == 1 and "not draining (--no-drain): preflight: gpu.xid" in p.stdout
    assert "update" not in (tmp_path / "calls.log").read_text()


@pytest.mark.real
def test_prologue_stays_within_its_budget_when_a_tool_hangs(tmp_path: Path) -> None:
    p, took = _prologue(tmp_path, None, "--budget", "4", "--no-drain", hang=True)
    assert took < 4 + 0.5, (took, p.stdout, p.stderr)  # the budget counts from the process start
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert p.stdout.startswith("preflight prologue gpu017: NO-GO"), p.stdout
    # the probe's shrunk timeout ends it first; on a loaded machine the watchdog may be first
    # (it fires a moment before the budget): either way the hung probe is named as ERROR
    assert re.search(r"^  ERROR gpu\.xid: probe kernel-log (timed out|still running at the 4 s budget \(dmesg hung\))",
                     p.stdout, re.M), p.stdout
    assert "kernel-log 15s->" in p.stdout


HUNG_CONFIG = "[check_timeouts]\n" + "".join(f'"{c}" = 2\n' for c in (
    "gpu.driver", "gpu.health", "gpu.inventory", "gpu.nvlink", "gpu.topology", "fabric.manager"))


@pytest.mark.real
def test_a_hung_nvidia_smi_is_one_error_line_and_the_drain_reason_names_it(tmp_path: Path) -> None:
    """Every nvidia-smi call hangs on a healthy 8xH100 node (fake tools): the prologue prints one
    ERROR, on gpu.driver, naming nvidia-smi, and drains with that reason, never a dependent's."""
    from tests import scenarios

    sc = scenarios.healthy_h100(tmp_path / "sc")
    rules = json.loads((sc / "nvidia-smi.json").read_text())["rules"]
    (sc / "nvidia-smi.json").write_text(json.dumps({"rules": [{**r, "hang": True} for r in rules]}))
    env = fakes.env_for(fakes.install(tmp_path / "bin", scenarios.TOOLS), sc)
    show = _fake_scontrol(tmp_path, fixture_text("scontrol/show_node_o_mixed.txt"))
    (tmp_path / "config.toml").write_text(HUNG_CONFIG)  # the GPU checks' probes: 2 s (their own 15-20 s)
    env.update(PATH=f"{show.parent}:{env['PATH']}", SLURMD_NODENAME="gpu017", PREFLIGHT_HISTORY="off",
               PREFLIGHT_CONFIG=str(tmp_path / "config.toml"))
    p = subprocess.run([sys.executable, "-m", "preflight.cli", "prologue", "--profile", "h100-sxm-8x", "--only", "gpu",
                        "--only", "fabric", "--budget", "30"], capture_output=True, text=True, timeout=60, env=env,
                       cwd=tmp_path)
    assert p.returncode == 1, (p.stdout, p.stderr)
    errors = [ln for ln in p.stdout.splitlines() if ln.lstrip().startswith(("ERROR", "FAIL"))]
    assert len(errors) == 1, p.stdout
    assert errors[0].startswith("  ERROR gpu.driver: nvidia-smi did not finish within 2 s (hung): probes ")
    assert "dependent checks skipped" in errors[0], errors[0]
    update = (tmp_path / "calls.log").read_text().splitlines()[-1]
    assert update.startswith("update NodeName=gpu017 State=DRAIN Reason=preflight: gpu.driver nvidia-smi did not "
                             "finish within 2 s (hung)"), update
    assert "more)" not in update  # one cause: nothing else to count


def test_the_watchdog_names_a_hung_tool_once_on_its_owner_check() -> None:
    from preflight.prologue import Watchdog

    class Running:
        def running(self, node: str | None = None) -> dict[str, float]:
            return {"nvidia-smi-q": 1.0, "nvidia-smi-topo": 1.0, "kernel-log": 2.0}

    w = Watchdog(8, "gpu017", no_drain=True)
    w.transport = Running()  # type: ignore[assignment]
    w.planned({"gpu017": {"gpu.driver": ["nvidia-smi-q"], "gpu.health": ["nvidia-smi-q"],
                          "fabric.manager": ["nvidia-smi-q"], "gpu.topology": ["nvidia-smi-topo"],
                          "gpu.xid": ["kernel-log"]}})
    w.probe_tools({"nvidia-smi-q": "nvidia-smi", "nvidia-smi-topo": "nvidia-smi", "kernel-log": "dmesg"})
    d = w.at_budget()
    errors = [ln for ln in d.lines if ln.startswith("  ERROR")]
    assert errors == ["  ERROR gpu.xid: probe kernel-log still running at the 8 s budget (dmesg hung)",
                      "  ERROR gpu.driver: nvidia-smi still running at the 8 s budget (hung): probes nvidia-smi-q, "
                      "nvidia-smi-topo (3 dependent checks not graded)"]
    assert d.drain == ("gpu.xid", "probe kernel-log still running at the 8 s budget (dmesg hung)")
    w.tools.clear()  # tools not told: each probe stands for itself
    assert [ln for ln in w.at_budget().lines if ln.startswith("  ERROR")][0] == \
        "  ERROR gpu.xid: probe kernel-log still running at the 8 s budget"


def test_budget_transport_shrinks_timeouts() -> None:
    from preflight.prologue import BudgetTransport

    t = BudgetTransport("n1", time.monotonic() + 3)
    fitted = t.fit([Probe.of("slow", ["x"], timeout=15), Probe.of("quick", ["y"], timeout=1)])
    assert 2 < fitted[0].timeout <= 3 and fitted[1].timeout == 1
    assert t.shrunk and t.shrunk[0].startswith("slow 15s->")


def test_prologue_imports_neither_torch_nor_pandas(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "preflight.cli", "prologue", "--only", "gpu.xid",
                        "--no-drain", "--budget", "5"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    modules = {line.split("|")[-1].strip().split(".")[0] for line in p.stderr.splitlines() if "|" in line}
    assert "typer" in modules and not modules & {"torch", "pandas", "numpy"}


# ---- resume command -------------------------------------------------------------------------


def test_resume_command_rejects_a_bad_hostlist() -> None:
    p = subprocess.run([sys.executable, "-m", "preflight.cli", "resume", "gpu[3-1]"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and "descending range" in p.stderr


# ---- a real Slurm: the example Prolog drains the Xid node, the job runs elsewhere ---------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetCluster]:
    work = tmp_path_factory.mktemp("slurm")
    # the Prolog slurmd runs: the example script, told to run the Xid check only (the fake
    # nodes have no GPU tools for the other node checks) and to log into the workdir
    prolog = work / "site_prolog.sh"
    prolog.write_text("#!/bin/sh\nexport PREFLIGHT_ARGS='--only gpu.xid' "
                      f"PREFLIGHT_LOG={work}/prolog.log PREFLIGHT_BUDGET=10\nexec {EXAMPLE_PROLOG} \"$@\"\n")
    prolog.chmod(0o755)
    with slurm_cluster(work, PREFIX, SUBNET, n=4, prolog=prolog) as c:
        yield c


def _reasons(cluster: NetCluster) -> dict[str, NodeInfo]:
    return parse_show_nodes(cluster.slurm("scontrol", "show", "node", "-o").stdout)


def _preflight(cluster: NetCluster, *args: str, node: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**cluster.slurm_env(), "PYTHONPATH": str(ROOT)}
    if node:
        n = cluster.node(node)
        env.update(fakes.env_for(n.home / "bin", n.home / "scenario"))
        env["SLURM_CONF"] = str(cluster.slurm_conf)
    return cluster.client(sys.executable, "-m", "preflight.cli", *args, check=False, env=env, timeout=60)


def _wait_job(cluster: NetCluster, job: str, limit: float = 90) -> str:
    deadline = time.monotonic() + limit
    state = ""
    while time.monotonic() < deadline:
        state = cluster.slurm("squeue", "-h", "-j", job, "-o", "%T", check=False).stdout.strip()
        if not state:
            return "gone"
        time.sleep(0.5)
    raise AssertionError(f"job {job} still {state} after {limit:g} s")


@pytest.mark.real
def test_prolog_drains_the_xid_node_and_the_job_runs_elsewhere(cluster: NetCluster) -> None:
    clean_kernel_logs(cluster)
    cluster.scenario("n2", {"dmesg": [{"match": ".*", "stdout": "kmsg.txt"}]}, {"kmsg.txt": KMSG_XID79})
    cluster.slurm("scontrol", "update", "NodeName=n3", "State=DRAIN", "Reason=RMA ticket 4711")
    out = cluster.workdir / "job.out"
    start = time.monotonic()
    # n3 is drained: the scheduler first picks n[1-2] (lowest names, equal weights); the Prolog
    # fails on n2, Slurm requeues the job and it runs on n1 and n4
    sub = cluster.slurm("sbatch", "--parsable", "-N2", "--requeue", "-o", str(out), "--wrap", "srun -l hostname")
    job = sub.stdout.strip().split(";")[0]
    _wait_job(cluster, job)
    took = time.monotonic() - start
    info = _reasons(cluster)
    assert info["n2"].drained and info["n2"].reason.startswith("preflight: gpu.xid "), info["n2"]
    assert "Xid 79" in info["n2"].reason
    assert info["n3"].reason == "RMA ticket 4711"  # the admin's drain is untouched
    ran = sorted(line.split(": ", 1)[1] for line in out.read_text().splitlines() if ": " in line)
    assert ran == ["n1", "n4"], out.read_text()
    log = (cluster.workdir / "prolog.log").read_text()
    assert "node=n2 rc=1" in log and "FAIL gpu.xid" in log
    print(f"submit -> drained n2 -> job done on {ran}: {took:.1f} s")


@pytest.mark.real
def test_prologue_never_overwrites_an_admin_reason(cluster: NetCluster) -> None:
    cluster.scenario("n3", {"dmesg": [{"match": ".*", "stdout": "kmsg.txt"}]}, {"kmsg.txt": KMSG_XID79})
    try:
        p = _preflight(cluster, "prologue", "--only", "gpu.xid", "--node", "n3", node="n3")
    finally:
        clean_kernel_logs(cluster)
    assert p.returncode == 1 and "n3: keep reason='RMA ticket 4711'" in p.stdout, p.stdout + p.stderr
    assert _reasons(cluster)["n3"].reason == "RMA ticket 4711"


@pytest.mark.real
def test_resume_restores_only_what_preflight_drained(cluster: NetCluster) -> None:
    before = _reasons(cluster)
    assert before["n2"].ours and before["n3"].reason == "RMA ticket 4711"
    dry = _preflight(cluster, "resume", "n[1-4]", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "n2: would resume reason='preflight: gpu.xid" in dry.stdout
    assert "n3: keep reason='RMA ticket 4711'" in dry.stdout
    assert _reasons(cluster)["n2"].drained  # nothing changed
    real = _preflight(cluster, "resume", "n[1-4]")
    assert real.returncode == 0 and "n2: resume" in real.stdout, real.stdout + real.stderr
    after = _reasons(cluster)
    assert not after["n2"].drained and after["n2"].reason == ""
    assert after["n3"].drained and after["n3"].reason == "RMA ticket 4711"
    cluster.slurm("scontrol", "update", "NodeName=n3", "State=RESUME")
    cluster.wait_slurm_idle(30)


@pytest.mark.real
def test_json_report_from_the_prologue(cluster: NetCluster) -> None:
    p = _preflight(cluster, "prologue", "--only", "gpu.xid", "--node", "n1", "--json", node="n1")
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert data["verdict"] == "GO" and data["nodes"] == ["n1"] and data["command"] == "prologue"
    assert os.path.isfile(EXAMPLE_PROLOG) and os.access(EXAMPLE_PROLOG, os.X_OK)


@pytest.mark.real
def test_health_check_program_drains_at_slurmd_start(tmp_path_factory: pytest.TempPathFactory) -> None:
    """`preflight prologue` as HealthCheckProgram: slurmd runs it when it starts (and every
    HealthCheckInterval); the Xid node drains itself before any job lands on it."""
    work = tmp_path_factory.mktemp("healthcheck")
    hc = work / "site_healthcheck.sh"
    hc.write_text(f"#!/bin/sh\nexec preflight prologue --only gpu.xid --budget 10 >>{work}/hc.log 2>&1\n")
    hc.chmod(0o755)
    missing = prerequisites() + slurm_prerequisites()
    need(not missing, f"Slurm test cluster prerequisites missing: {', '.join(missing)}")
    c = NetCluster(2, work, prefix="psl3", subnet="10.78.3")
    try:
        c.up(["dmesg"])
        clean_kernel_logs(c)
        c.scenario("n2", {"dmesg": [{"match": ".*", "stdout": "kmsg.txt"}]}, {"kmsg.txt": KMSG_XID79})
        c.start_slurm(health_check=hc, wait_for=["n1"])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not _reasons(c)["n2"].ours:
            time.sleep(0.3)
        info = _reasons(c)
        assert info["n2"].drained and info["n2"].reason.startswith("preflight: gpu.xid "), info["n2"]
        assert not info["n1"].drained and info["n1"].reason == ""
    finally:
        c.down()
