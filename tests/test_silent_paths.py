"""No silent paths: a fault anywhere in a check is ERROR naming it; one deadline bounds a run.

Site checks are real modules in a temporary --checks-dir, run by the real command line; the
tools they call are fake executables (tests/fakes) that print, fail or hang.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from preflight.grading import grade_cluster
from preflight.model import CaptureState, Status
from preflight.probes import Probe
from preflight.registry import ClusterCheck, Options
from preflight.transport.local import LocalTransport
from tests import fakes
from tests.conftest import fixture_text

HEAD = '''
from preflight.model import Status
from preflight.probes import Probe
from preflight.registry import Check, register, register_parser

TOOL = Probe.of("site-tool", ["site-tool", "--status"])


def ok(ctx):
    ctx.facts("site-tool")
    return ctx.result(Status.PASS, "site tool answered")
'''

PLAN_RAISES = HEAD + '''

def plan(ctx):
    raise KeyError("gpu.count missing from the profile")


register(Check(id="site.plan", title="Plans badly", grade=ok, probes=plan))
register(Check(id="site.fine", title="Fine", grade=ok, probes=(TOOL,)))
'''

PARSER_RAISES = HEAD + '''

def parse(doc):
    raise ValueError("cannot read line 1 of the site tool")


register_parser("site-tool", parse)
register(Check(id="site.parse", title="Parses badly", grade=ok, probes=(TOOL,)))
'''

GRADER_RAISES = HEAD + '''

def grade(ctx):
    lines = ctx.facts("site-tool").lines
    errors = [ln for ln in lines if ln.text.startswith("ERR")]
    share = len(lines) / len(errors)  # a clean output has no error line: a division by zero
    return ctx.result(Status.PASS, f"one error line in {share:.0f}")


register(Check(id="site.grade", title="Grades badly", grade=grade, probes=(TOOL,)))
'''

TWO_PHASES = HEAD + '''

SLOW = Probe.of("site-slow", ["site-tool", "--slow"])


def late(ctx):  # planned from the profile: a phase-2 probe
    return [Probe.of("site-late", ["site-tool", "--late"])]


register(Check(id="site.slow", title="Phase 1", grade=ok, probes=(SLOW,)))
register(Check(id="site.late", title="Phase 2", grade=ok, probes=late))
'''


def cli(args: list[str], env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "preflight.cli", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def site_run(tmp_path: Path, module: str, rules: list[dict], *extra: str) -> tuple[subprocess.CompletedProcess[str],
                                                                                   dict, float]:
    checks = tmp_path / "checks"
    checks.mkdir(exist_ok=True)
    (checks / "site.py").write_text(module)
    bin_dir = fakes.install(tmp_path / "bin", ["site-tool"])
    env = fakes.env_for(bin_dir, fakes.scenario(tmp_path / "sc", {"site-tool": rules}))
    env["PREFLIGHT_CONFIG"] = str(tmp_path / "config.toml")
    (tmp_path / "config.toml").write_text("")
    start = time.monotonic()
    p = cli(["run", "--profile", "generic", "--checks-dir", str(checks), "--only", "site", "--json", "--no-report",
             *extra], env=env)
    took = time.monotonic() - start
    assert "Traceback" not in p.stderr, p.stderr
    return p, json.loads(p.stdout), took


def by_check(doc: dict) -> dict[str, dict]:
    return {r["check"]: r for r in doc["results"]}


OK_RULES = [{"match": "--status", "text": "OK\n"}]


# ---- a fault inside a check ------------------------------------------------------------------


def test_planning_that_raises_is_error_naming_the_exception(tmp_path: Path) -> None:
    p, doc, _ = site_run(tmp_path, PLAN_RAISES, OK_RULES)
    r = by_check(doc)["site.plan"]
    assert r["status"] == "error", r
    assert "KeyError" in r["summary"] and "gpu.count missing from the profile" in r["summary"]
    assert "site.plan" in r["summary"] and "planning" in r["summary"]
    assert any("site.py" in e for e in r["evidence"]), r["evidence"]  # which site check it was
    assert "report" in r["remedy"]
    assert by_check(doc)["site.fine"]["status"] == "pass"  # the other checks still ran
    assert doc["verdict"] == "NO-GO" and p.returncode == 1


def test_parser_that_raises_is_error_naming_the_exception(tmp_path: Path) -> None:
    p, doc, _ = site_run(tmp_path, PARSER_RAISES, OK_RULES)
    r = by_check(doc)["site.parse"]
    assert r["status"] == "error" and "ValueError" in r["summary"], r
    assert "cannot read line 1 of the site tool" in r["summary"] and "site.parse" in r["summary"]
    assert doc["verdict"] == "NO-GO" and p.returncode == 1


def test_grader_that_raises_is_error_naming_the_exception(tmp_path: Path) -> None:
    p, doc, _ = site_run(tmp_path, GRADER_RAISES, OK_RULES)
    r = by_check(doc)["site.grade"]
    assert r["status"] == "error" and "ZeroDivisionError" in r["summary"] and "site.grade" in r["summary"], r
    assert "report this as a preflight bug" in r["remedy"]
    assert doc["verdict"] == "NO-GO" and p.returncode == 1


HINT_RAISES = HEAD + '''
from preflight.engine import register_profile_hint


def hint(store):
    model = store.facts("site-tool").lines[0].text.split(":")[1]  # "OK" has no model field
    return model, None


register_profile_hint(hint)
register(Check(id="site.fine", title="Fine", grade=ok, probes=(TOOL,)))
'''


def test_profile_detection_that_raises_is_error_not_a_silent_generic(tmp_path: Path) -> None:
    p, doc, _ = site_run(tmp_path, HINT_RAISES, OK_RULES, "--profile", "auto")
    r = by_check(doc)["profile.detect"]
    assert r["status"] == "error", r
    assert ".hint: IndexError: list index out of range" in r["summary"], r["summary"]
    assert "graded with profile generic" in r["summary"]
    assert "--profile" in r["remedy"]
    assert by_check(doc)["site.fine"]["status"] == "pass"
    assert doc["verdict"] == "NO-GO" and p.returncode == 1


def test_cross_node_grading_that_raises_is_error_and_keeps_the_node_results() -> None:
    from preflight.model import Result

    def grade(ctx: object) -> list[Result]:
        raise RuntimeError("no matrix for 0 nodes")

    node_results = [Result(check="gpu.xid", node=n, status=Status.PASS, summary="clean") for n in ("a", "b")]
    out = grade_cluster([ClusterCheck(id="cluster.mtu", title="MTU", grade=grade)], ["a", "b"], {}, node_results,
                        {}, Options(), {}, {})
    bad = [r for r in out if r.check == "cluster.mtu"]
    assert len(bad) == 1 and bad[0].status is Status.ERROR
    assert "RuntimeError: no matrix for 0 nodes" in bad[0].summary and "report" in bad[0].remedy
    assert [r.status for r in out if r.check == "gpu.xid"] == [Status.PASS, Status.PASS]


def test_site_check_that_cannot_import_is_a_usage_error(tmp_path: Path) -> None:
    checks = tmp_path / "checks"
    checks.mkdir()
    (checks / "broken.py").write_text("from preflight.registry import no_such_name\n")
    p = cli(["run", "--profile", "generic", "--checks-dir", str(checks), "--no-report"])
    assert p.returncode == 2, p.stdout + p.stderr
    assert "broken.py failed to load" in p.stderr and "ImportError" in p.stderr and "Traceback" not in p.stderr


# ---- one deadline for the whole run ---------------------------------------------------------


def test_one_deadline_bounds_both_phases_and_names_the_probes(tmp_path: Path) -> None:
    hang = [{"match": "--slow", "hang": True}, {"match": "--late", "hang": True}]
    p, doc, took = site_run(tmp_path, TWO_PHASES, hang, "--deadline", "3")
    assert took < 3 + 3, took  # per phase it would be twice the deadline; each probe's own timeout is 10 s
    res = by_check(doc)
    slow, late = res["site.slow"], res["site.late"]
    assert slow["status"] == "error" and late["status"] == "error", (slow, late)
    assert "site-slow" in slow["summary"] and "3 s deadline" in slow["summary"], slow
    assert "still running" in slow["summary"]
    assert "site-late" in late["summary"] and "3 s deadline" in late["summary"], late
    assert doc["verdict"] == "NO-GO" and p.returncode == 1


def test_a_run_that_ends_in_time_is_not_touched_by_its_deadline(tmp_path: Path) -> None:
    ok = [{"match": "--slow", "text": "OK\n"}, {"match": "--late", "text": "OK\n"}]
    p, doc, _ = site_run(tmp_path, TWO_PHASES, ok, "--deadline", "30")
    assert {r["status"] for r in doc["results"]} == {"pass"}, doc["results"]
    assert p.returncode == 0 and doc["verdict"] == "GO"


def test_node_command_takes_the_deadline_too(tmp_path: Path) -> None:
    checks = tmp_path / "checks"
    checks.mkdir()
    (checks / "site.py").write_text(TWO_PHASES)
    bin_dir = fakes.install(tmp_path / "bin", ["site-tool"])
    env = fakes.env_for(bin_dir, fakes.scenario(tmp_path / "sc", {"site-tool": [{"match": ".", "hang": True}]}))
    env["PREFLIGHT_CONFIG"] = str(tmp_path / "config.toml")
    (tmp_path / "config.toml").write_text("")
    start = time.monotonic()
    p = cli(["node", "--profile", "generic", "--checks-dir", str(checks), "--only", "site", "--deadline", "2",
             "--json"], env=env)
    assert time.monotonic() - start < 2 + 3
    res = by_check(json.loads(p.stdout))
    assert res["site.slow"]["status"] == "error" and "2 s deadline" in res["site.slow"]["summary"], res
    assert res["site.late"]["status"] == "error" and "2 s deadline" in res["site.late"]["summary"], res
    assert p.returncode == 1


@pytest.mark.parametrize("value", ["0", "-5", "nan"])
def test_a_deadline_that_is_not_positive_is_a_usage_error(value: str) -> None:
    for command in ("run", "node"):
        p = cli([command, "--deadline", value, "--no-report"] if command == "run" else [command, "--deadline", value])
        assert p.returncode == 2, (command, value, p.stdout, p.stderr)
        assert "--deadline" in p.stderr and "positive number of seconds" in p.stderr and "Traceback" not in p.stderr


def test_sweep_does_not_start_once_the_run_deadline_passed() -> None:
    from preflight import engine
    from preflight.model import Result

    checked = [Result(check="gpu.xid", node=n, status=Status.PASS, summary="clean") for n in ("n1", "n2")]
    req = engine.CheckRequest(nodes=["n1", "n2"], transport="ssh",
                              transport_options=engine.TransportOptions(deadline=3))
    out = engine.sweep_after_checks(checked, ["n1", "n2"], req, engine.SweepRequest(nproc=8), engine.Config(),
                                    until=time.monotonic() - 0.5)
    assert len(out) == 1 and out[0].check == "nccl.allreduce" and out[0].status is Status.ERROR, out
    assert "collective sweep not run: the 3 s --deadline of the run had passed" in out[0].summary
    assert "--sweep-deadline" in out[0].remedy


def test_local_transport_collects_share_the_run_deadline(tmp_path: Path) -> None:
    bin_dir = fakes.install(tmp_path / "bin", ["site-tool"])
    sc = fakes.scenario(tmp_path / "sc", {"site-tool": [{"match": "--hang", "hang": True},
                                                        {"match": "--ok", "text": "OK\n"}]})
    os.environ.update(fakes.env_for(bin_dir, sc))  # restored by the autouse fixture below
    t = LocalTransport(deadline=2)
    t.start_clock()
    start = time.monotonic()
    first = t.collect({"n": [Probe.of("hung", ["site-tool", "--hang"]), Probe.of("quick", ["site-tool", "--ok"])]})
    second = t.collect({"n": [Probe.of("after", ["site-tool", "--ok"])]})
    took = time.monotonic() - start
    assert took < 2 + 2, took
    caps = first["n"].captures
    assert caps["quick"].state is CaptureState.OK
    assert caps["hung"].state is CaptureState.LOST and "2 s deadline" in caps["hung"].reason
    assert "hung" in caps["hung"].reason and "still running" in caps["hung"].reason
    after = second["n"].captures["after"]
    assert after.state is CaptureState.LOST and "before probe after could start" in after.reason
    assert t.running() == {}


@pytest.fixture(autouse=True)
def _keep_environ() -> Iterator[None]:
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


# ---- the prologue's watchdog -------------------------------------------------------------------

STUCK_DMESG = '''#!/bin/sh
# dmesg stuck in the kernel: a kill does not end it at once (its helper keeps the output open)
setsid sleep 120 &
echo $! > "{pids}"
exec sleep 120
'''


FAKE_SCONTROL = '''#!/bin/sh
echo "$@" >> "{log}"
[ "$1" = show ] && cat "{show}"
exit 0
'''


def stuck_prologue(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """`preflight prologue --only gpu.xid --budget 4` on a node whose dmesg never comes back."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pids = tmp_path / "pids"
    (bin_dir / "dmesg").write_text(STUCK_DMESG.format(pids=pids))
    (bin_dir / "scontrol").write_text(FAKE_SCONTROL.format(log=tmp_path / "scontrol.log", show=tmp_path / "show.txt"))
    (tmp_path / "show.txt").write_text(fixture_text("scontrol/show_node_o_mixed.txt"))
    for tool in ("dmesg", "scontrol"):
        (bin_dir / tool).chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", SLURMD_NODENAME="gpu017",
               PREFLIGHT_CONFIG=str(tmp_path / "config.toml"))
    (tmp_path / "config.toml").write_text("")
    start = time.monotonic()
    try:
        p = subprocess.run([sys.executable, "-m", "preflight.cli", "prologue", "--only", "gpu.xid", "--budget", "4",
                            *args], capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
        return p, time.monotonic() - start
    finally:
        if pids.exists():
            for pid in pids.read_text().split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (OSError, ValueError):
                    continue


def test_prologue_watchdog_names_the_probe_still_running(tmp_path: Path) -> None:
    p, took = stuck_prologue(tmp_path, "--no-drain")
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert took < 4 + 1.0, took  # from before the process started
    first = p.stdout.splitlines()[0]
    assert first.startswith("preflight prologue gpu017: NO-GO") and "4 s budget ran out" in first, p.stdout
    assert "ERROR gpu.xid: probe kernel-log still running at the 4 s budget" in p.stdout, p.stdout
    assert "not draining (--no-drain): preflight: gpu.xid probe kernel-log still running" in p.stdout
    assert not (tmp_path / "scontrol.log").exists()


def test_prologue_watchdog_drains_with_the_probe_as_reason(tmp_path: Path) -> None:
    p, took = stuck_prologue(tmp_path)
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert took < 4 + 1.0, took
    assert "ERROR gpu.xid: probe kernel-log still running at the 4 s budget" in p.stdout, p.stdout
    assert "gpu017: drain reason='preflight: gpu.xid probe kernel-log still running at the 4 s budget (dmesg hung)'" \
        in p.stdout
    calls = (tmp_path / "scontrol.log").read_text().splitlines()
    assert calls == ["show node -o gpu017", "update NodeName=gpu017 State=DRAIN "
                     "Reason=preflight: gpu.xid probe kernel-log still running at the 4 s budget (dmesg hung)"]


# ---- over SSH: the namespace test cluster --------------------------------------------------------


@pytest.fixture(scope="module")
def hung_n2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """Two faked 8xH100 nodes (real sshd, real Slurm); n2's kernel log readers hang."""
    from tests import scenarios
    from tests.conftest import need
    from tests.netcluster import NetCluster, prerequisites

    need(not prerequisites(), f"namespace cluster prerequisites: {prerequisites()}")
    c = NetCluster(2, tmp_path_factory.mktemp("silent"), prefix="psil", subnet="10.76.5")
    try:
        c.up(scenarios.TOOLS)
        for node in c.nodes:
            scenarios.healthy_h100(node.home / "scenario")
        fakes.scenario(c.node("n2").home / "scenario", {"dmesg": [{"match": ".*", "hang": True}],
                                                        "journalctl": [{"match": ".*", "hang": True}]})
        yield c
    finally:
        c.down()


RUN = ["--deadline", "8", "--probe-timeout", "60", "--json", "--no-report", "--no-sweep", "--profile", "h100-sxm-8x"]


def deadline_errors(p: subprocess.CompletedProcess[str], took: float) -> dict[str, list[str]]:
    """The run ended within the 8 s deadline (not twice it), NO-GO; node -> its ERROR texts."""
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    doc = json.loads(p.stdout[p.stdout.index("{"):])
    # seen from outside, start-up included, it ends before twice the deadline (a loaded machine
    # starts python slowly: 13.8 s at load 37); the run's own clock holds it to the deadline
    assert took < 2 * 8, took
    assert doc["duration_s"] < 8 + 2, doc["duration_s"]  # the run itself, as it measured
    assert p.returncode == 1 and doc["verdict"] == "NO-GO"
    out: dict[str, list[str]] = {}
    for r in doc["results"]:
        if r["status"] == "error":
            out.setdefault(r["node"], []).append(r["summary"] + " | " + " ".join(r["evidence"]))
    return out


@pytest.mark.real
def test_ssh_run_deadline_bounds_both_phases(hung_n2: Any) -> None:
    """n2's dmesg hangs in phase 1; phase 2 (n1's MTU pings) would start after the deadline: both
    are ERROR naming the deadline, and the run ends within it."""
    c = hung_n2
    start = time.monotonic()
    p = c.client(sys.executable, "-m", "preflight.cli", "run", "--hosts", "n[1-2]", "--ssh-config", str(c.ssh_config),
                 "--transport", "ssh", "--connect-timeout", "5", "--command-timeout", "60", *RUN, check=False,
                 timeout=120)
    errors = deadline_errors(p, time.monotonic() - start)
    assert any("8 s deadline" in t and "kernel-log" in t for t in errors.get("n2", [])), errors
    # its phase-2 probes were never sent: the deadline had passed
    assert any("8 s deadline" in t and "passed before n1 was contacted" in t for t in errors.get("n1", [])), errors


@pytest.mark.real
def test_srun_run_deadline_bounds_both_phases(hung_n2: Any) -> None:
    from tests.conftest import need
    from tests.netcluster import slurm_prerequisites

    need(not slurm_prerequisites(), f"Slurm prerequisites: {slurm_prerequisites()}")
    c = hung_n2
    c.start_slurm()
    try:
        start = time.monotonic()
        p = c.client("salloc", "-N2", "--time=5", sys.executable, "-m", "preflight.cli", "run", "--transport", "srun",
                     *RUN, check=False, timeout=180, env=c.slurm_env())
        took = time.monotonic() - start
    finally:
        c.stop_slurm()
    errors = deadline_errors(p, took - 3)  # salloc's allocation and release are not the run's
    assert any("8 s deadline" in t and "kernel-log" in t for t in errors.get("n2", [])), errors
    assert any("8 s deadline of the run passed before the srun step could start" in t
               for t in errors.get("n1", [])), errors


FIRE = '''
import sys, threading, time
from pathlib import Path
from preflight.probes import Probe
from preflight.prologue import BudgetTransport, Watchdog

pidfile = Path(sys.argv[1])
watch = Watchdog(100.0, "n1", no_drain=True)  # not started: fired by hand below
watch.transport = BudgetTransport("n1", time.monotonic() + 60, budget=100.0)
watch.planned({"n1": {"gpu.xid": ["kernel-log"]}})
probe = Probe.of("kernel-log", ["sh", "-c", f"echo $$ > {pidfile}; exec sleep 120"], timeout=60)
threading.Thread(target=watch.transport.collect, args=({"n1": [probe]},), daemon=True).start()
while not pidfile.exists() or not pidfile.read_text().strip():
    time.sleep(0.05)
watch.stage = "running the checks"
watch.fire()
'''


def test_watchdog_ends_the_probes_still_running(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    p = subprocess.run([sys.executable, "-c", FIRE, str(pidfile)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "ERROR gpu.xid: probe kernel-log still running at the 100 s budget" in p.stdout, p.stdout
    pid = int(pidfile.read_text())
    for _ in range(100):  # killed with its process group; reaped by init once orphaned
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        pytest.fail(f"the probe's process {pid} outlived the prologue's watchdog")
