"""The srun transport: the program's framing and bundle table (pure), then one real srun step
over the nodes of the test cluster's Slurm (captures per node, hangs, deadlines, allocations)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from preflight.probes import Probe
from preflight.remote import MARK
from preflight.transport.srun import FRAME, SrunTransport, _about, _Reader, build_program
from tests.netcluster import ROOT, NetCluster
from tests.slurm import KMSG_XID79, clean_kernel_logs, in_client, slurm_cluster

PREFIX, SUBNET = "psl1", "10.78.1"  # apart from the other cluster tests' namespaces and subnets

# ---- pure -----------------------------------------------------------------------------------


def _run_program_locally(program: str, node: str) -> str:
    """Run the step program as one srun task would (SLURMD_NODENAME set)."""
    env = {"SLURMD_NODENAME": node, "PATH": "/usr/bin:/bin"}
    p = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=30, env=env)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_program_carries_each_distinct_bundle_once() -> None:
    same = [Probe.of("host", ["hostname"], timeout=5)]
    bundles = {f"n{i}": same for i in range(1, 50)}
    bundles["n50"] = [*same, Probe.of("echo", ["echo", "n50 only"], timeout=5)]
    program, nonce = build_program(bundles)
    one, _ = build_program({"n1": same})
    # 50 nodes, 2 distinct bundles: the program is barely larger than a single node's
    assert len(program) < len(one) + 1500
    out = _run_program_locally(program, "n50")
    assert f"{FRAME} {nonce} n50 hello" in out
    assert "n50 only" in out
    assert "n50 only" not in _run_program_locally(program, "n7")
    assert f"{FRAME} {nonce} n99 nobundle" in _run_program_locally(program, "n99")


def test_frames_stay_under_the_srun_piece_size_and_reassemble() -> None:
    probe = Probe.of("big", [sys.executable, "-c", "print('x' * 300000 + 'END')"], timeout=20)
    program, nonce = build_program({"n1": [probe]})
    out = _run_program_locally(program, "n1")
    lines = out.splitlines()
    assert max(len(line.encode()) + 1 for line in lines) <= 1024
    reader = _Reader(io.BytesIO(out.encode()), nonce, None)
    reader.run()
    assert reader.started == {"n1": ""}
    assert any(MARK in line and "END" in line for line in reader.lines)


def test_reader_separates_interleaved_nodes() -> None:
    """srun interleaves the nodes' pieces, each with its task label: lines come back whole."""
    nonce = "abc"
    stream = "\n".join([
        f"0: {FRAME} {nonce} n1 hello",
        f"1: {FRAME} {nonce} n2 hello",
        f"0: {FRAME} {nonce} n1 + {MARK} {nonce} capture {{\"node\": \"n1\", ",
        f"1: {FRAME} {nonce} n2 + {MARK} {nonce} done n2",
        "1: some stray output",
        f"0: {FRAME} {nonce} n1 . \"x\": 1}}",
        f"1: {FRAME} {nonce} n2 .  0.500",
        "",
    ])
    reader = _Reader(io.BytesIO(stream.encode()), nonce, None)
    reader.run()
    assert reader.started == {"n1": "0", "n2": "1"}
    assert f'{MARK} {nonce} capture {{"node": "n1", "x": 1}}' in reader.lines
    assert f"{MARK} {nonce} done n2 0.500" in reader.lines
    assert reader.other == ["1: some stray output"]


def test_srun_stderr_lines_are_attributed_by_name_and_label() -> None:
    lines = ["srun: error: n2: task 1: Exited with exit code 1", "srun: error: n12: task 3: Killed",
             "1: Traceback (most recent call last):", "srun: Job step aborted"]
    assert _about("n2", "1", lines) == [lines[0], lines[2]]
    assert _about("n1", "", lines) == []


def test_command_inside_an_allocation_overlaps_and_big_programs_go_on_stdin() -> None:
    t = SrunTransport(partition="gpu", argv_limit=100)
    argv, on_stdin = t.command(["n1", "n2", "n3"], "x" * 200, {"SLURM_JOB_ID": "42"})
    assert on_stdin and argv[-2:] == ["python3", "-"]
    assert "--overlap" in argv and "--partition=gpu" not in argv
    assert argv[argv.index("-w") + 1] == "n[1-3]"
    argv, on_stdin = t.command(["n1"], "x", {})
    assert not on_stdin and "--partition=gpu" in argv and argv[-3:-1] == ["python3", "-c"]


def test_invalid_node_names_never_reach_srun() -> None:
    out = SrunTransport(srun="/nonexistent/srun").collect({"-oProxyCommand=x": [Probe.of("h", ["hostname"])]})
    assert "invalid node name" in out["-oProxyCommand=x"].error


def test_missing_srun_is_a_node_error_not_an_exception() -> None:
    out = SrunTransport(srun="/nonexistent/srun").collect({"n1": [Probe.of("h", ["hostname"])]})
    assert "cannot run /nonexistent/srun" in out["n1"].error


# The order CI once met when a step is cancelled: slurmstepd kills the step's processes (the
# hung probe among them) before the task itself, so the task reports the killed probe on its
# way out. This srun runs its one task locally and cancels it in that order on SIGINT.
_CANCEL_FIRST_SRUN = r'''#!/usr/bin/env python3
import os, signal, subprocess, sys, threading, time
argv = sys.argv[1:]
node = argv[argv.index("-w") + 1]
task = subprocess.Popen(argv[argv.index("--job-name=preflight") + 1:], stdout=subprocess.PIPE,
                        env={**os.environ, "SLURMD_NODENAME": node})
def cancel(signum, frame):
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1] == str(task.pid):
                os.kill(int(pid), signal.SIGKILL)
        except (OSError, IndexError):
            pass
    time.sleep(1.0)  # the task reports its killed probe now
    task.kill()
signal.signal(signal.SIGINT, lambda s, f: threading.Thread(target=cancel, args=(s, f)).start())
for line in task.stdout:
    sys.stdout.write("0: " + line.decode())
    sys.stdout.flush()
sys.exit(task.wait() and 1)
'''


def test_probe_killed_by_the_cancel_after_the_deadline_is_not_a_result(tmp_path) -> None:
    srun = tmp_path / "srun"
    srun.write_text(_CANCEL_FIRST_SRUN)
    srun.chmod(0o755)
    hang = Probe.of("kernel-log", ["sleep", "60"], timeout=60)
    seen: list[str] = []
    t = SrunTransport(srun=str(srun), python=sys.executable, deadline=3)
    out = t.collect({"n1": [hang, Probe.of("hostname", ["echo", "n1"])]},
                    progress=lambda node, cap: seen.append(cap.probe))
    n1 = out["n1"]
    assert "did not finish within the 3 s deadline (no result for: kernel-log)" in n1.error, n1.error
    assert set(n1.captures) == {"hostname"} and n1.detail == {"kind": "timeout", "stage": "command"}
    assert seen == ["hostname"]


# Two tasks run locally as nodes "alpha" and "beta"; beta's output stops reaching srun after its
# first capture (what an MTU black hole does to the step's I/O connection): srun keeps waiting
# for the rest. SIGINT ends it, as cancelling the step does.
_STALL_SRUN = r'''#!/usr/bin/env python3
import os, signal, subprocess, sys, threading
argv = sys.argv[1:]
cmd = argv[argv.index("--job-name=preflight") + 1:]
tasks = {}
def pump(label, node):
    p = tasks[node]
    forwarded = 0
    for line in p.stdout:
        text = line.decode()
        if node == "beta" and forwarded >= 1:
            continue
        if node == "beta" and "capture" in text:
            forwarded += 1
        sys.stdout.write("%d: %s" % (label, text))
        sys.stdout.flush()
for label, node in enumerate(("alpha", "beta")):
    tasks[node] = subprocess.Popen(cmd, stdout=subprocess.PIPE, env={**os.environ, "SLURMD_NODENAME": node})
threads = [threading.Thread(target=pump, args=(i, n), daemon=True) for i, n in enumerate(tasks)]
for t in threads:
    t.start()
def cancel(signum, frame):
    for p in tasks.values():
        p.kill()
    os._exit(1)
signal.signal(signal.SIGINT, cancel)
for p in tasks.values():
    p.wait()
while True:  # beta's output is still held on the way: srun waits for it
    signal.pause()
'''


def test_a_node_whose_output_stalls_ends_the_step_in_seconds(tmp_path) -> None:
    srun = tmp_path / "srun"
    srun.write_text(_STALL_SRUN)
    srun.chmod(0o755)
    bundle = [Probe.of("hostname", ["echo", "up"]), Probe.of("kernel-log", ["sh", "-c", "sleep 1; echo later"]),
              Probe.of("ibstat", ["sh", "-c", "sleep 2; echo more"])]
    t = SrunTransport(srun=str(srun), python=sys.executable, deadline=120, stall_timeout=3)
    start = time.monotonic()
    out = t.collect({"alpha": bundle, "beta": bundle})
    took = time.monotonic() - start
    assert not out["alpha"].error and set(out["alpha"].captures) == {"hostname", "kernel-log", "ibstat"}
    beta = out["beta"]
    assert beta.detail == {"kind": "timeout", "stage": "command", "connection": "stalled"}, beta
    assert "stalled while the probes ran: 1 of 3 came back" in beta.error and "MTU black hole" in beta.error
    assert set(beta.captures) == {"hostname"}
    assert took < 60, took  # the deadline is 120 s: the stall ended it


# ---- real Slurm -----------------------------------------------------------------------------

DRIVE = r'''
import json, sys, time
from preflight.probes import Probe
from preflight.transport.srun import SrunTransport
spec = json.loads(sys.argv[1])
bundles = {n: [Probe.of(p[0], p[1], timeout=p[2]) for p in ps] for n, ps in spec["bundles"].items()}
t = SrunTransport(**spec.get("opts", {}))
start = time.monotonic()
seen = []
out = t.collect(bundles, progress=lambda n, c: seen.append([n, c.probe]))
res = {"elapsed": time.monotonic() - start, "argv": [a for a in t.last_argv if len(a) < 500], "progress": seen, "nodes": {}}
for n, o in out.items():
    res["nodes"][n] = {"error": o.error, "detail": o.detail, "captures": {
        k: {"state": c.state.value, "rc": c.rc, "len": len(c.stdout), "head": c.stdout[:80],
            "tail": c.stdout[-40:], "source": c.source} for k, c in o.captures.items()}}
print(json.dumps(res))
'''


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetCluster]:
    with slurm_cluster(tmp_path_factory.mktemp("srun"), PREFIX, SUBNET, n=4) as c:
        yield c


@pytest.fixture()
def clean(cluster: NetCluster) -> Iterator[NetCluster]:
    clean_kernel_logs(cluster)
    yield cluster
    clean_kernel_logs(cluster)
    deadline = time.monotonic() + 20  # a test that aborted a step: let Slurm clean it up
    while time.monotonic() < deadline and cluster.slurm("squeue", "-h", check=False).stdout.strip():
        time.sleep(0.3)


def _per_node_logs(cluster: NetCluster, size: int = 200_000) -> dict[str, int]:
    lengths = {}
    for node in cluster.nodes:
        text = f"[Wed Mar 12 07:41:02 2025] boot of {node.name}\n" + f"{node.name} line\n" * (size // 9) + \
               f"END-{node.name}\n"
        cluster.scenario(node.name, {"dmesg": [{"match": ".*", "stdout": "kmsg.txt"}]}, {"kmsg.txt": text})
        lengths[node.name] = len(text)
    return lengths


def _bundle(timeout: float = 5) -> list[list[Any]]:
    return [["kernel-log", ["dmesg", "-T"], timeout], ["hostname", ["hostname"], timeout]]


@pytest.mark.real
def test_one_step_brings_back_every_nodes_captures(clean: NetCluster) -> None:
    lengths = _per_node_logs(clean)
    bundles = {n.name: _bundle() for n in clean.nodes}
    bundles["n4"] = [*_bundle(), ["only-n4", ["echo", "peer list of n4"], 5]]
    res = in_client(clean, DRIVE, {"bundles": bundles})
    assert res["argv"][:2] == ["srun", "-N4"] and "n[1-4]" in res["argv"]
    for name, got in res["nodes"].items():
        assert got["error"] == "", got
        kl = got["captures"]["kernel-log"]
        assert kl["state"] == "ok" and f"boot of {name}" in kl["head"] and kl["tail"].endswith(f"END-{name}\n")
        assert kl["len"] == lengths[name] and kl["source"] == f"srun:{name}:probe:kernel-log"
        assert got["captures"]["hostname"]["head"] == f"{name}\n"  # each task ran on its own node
    assert set(res["nodes"]["n4"]["captures"]) == {"kernel-log", "hostname", "only-n4"}
    assert "only-n4" not in res["nodes"]["n1"]["captures"]
    assert len(res["progress"]) == 9
    assert res["elapsed"] < 15


@pytest.mark.real
def test_program_on_stdin_when_too_big_for_argv(clean: NetCluster) -> None:
    res = in_client(clean, DRIVE, {"bundles": {n.name: _bundle() for n in clean.nodes},
                                   "opts": {"argv_limit": 1000}})
    assert res["argv"][-1] == "-"
    assert all(not got["error"] and got["captures"]["hostname"]["head"] == f"{name}\n"
               for name, got in res["nodes"].items())


@pytest.mark.real
def test_hung_probe_on_one_node_is_bounded_by_its_timeout(clean: NetCluster) -> None:
    clean.scenario("n3", {"dmesg": [{"match": ".*", "hang": True}]})
    res = in_client(clean, DRIVE, {"bundles": {n.name: _bundle(timeout=3) for n in clean.nodes}})
    n3 = res["nodes"]["n3"]
    assert n3["error"] == "" and n3["captures"]["kernel-log"]["state"] == "timeout"
    assert n3["captures"]["hostname"]["state"] == "ok"
    assert all(res["nodes"][n]["captures"]["kernel-log"]["state"] == "ok" for n in ("n1", "n2", "n4"))
    assert res["elapsed"] < 3 + 10


@pytest.mark.real
def test_deadline_aborts_the_step_and_keeps_what_came_back(clean: NetCluster) -> None:
    clean.scenario("n2", {"dmesg": [{"match": ".*", "hang": True}]})
    res = in_client(clean, DRIVE, {"bundles": {n.name: _bundle(timeout=60) for n in clean.nodes},
                                   "opts": {"deadline": 4}})
    assert res["elapsed"] < 4 + 8
    n2 = res["nodes"]["n2"]
    assert "did not finish within the 4 s deadline" in n2["error"] and "kernel-log" in n2["error"]
    assert n2["detail"] == {"kind": "timeout", "stage": "command"}
    assert n2["captures"]["hostname"]["state"] == "ok"  # what finished before the deadline counts
    assert all(res["nodes"][n]["error"] == "" for n in ("n1", "n3", "n4"))


@pytest.mark.real
def test_srun_failure_is_quoted_in_every_nodes_error(clean: NetCluster) -> None:
    res = in_client(clean, DRIVE, {"bundles": {"n1": _bundle(), "n77": _bundle()}})
    for name in ("n1", "n77"):
        err = res["nodes"][name]["error"]
        assert err.startswith("no output from the node (srun exited 1)") and "srun: error:" in err, err


@pytest.mark.real
def test_inside_an_allocation_the_step_runs_in_it(clean: NetCluster) -> None:
    """salloc gives SLURM_JOB_ID: the step joins the allocation (--overlap) instead of making one."""
    code = DRIVE.replace("spec = json.loads(sys.argv[1])",
                         "spec = json.loads(sys.argv[1]); import os; spec['opts'] = {}; "
                         "assert os.environ.get('SLURM_JOB_ID')")
    bundles = {"n1": _bundle(), "n2": _bundle()}
    full = {**clean.slurm_env(), "PYTHONPATH": str(ROOT)}
    p = clean.client("salloc", "-N2", "-w", "n[1-2]", sys.executable, "-c", code, json.dumps({"bundles": bundles}),
                     env=full, check=False, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert "--overlap" in res["argv"]
    assert {n: g["captures"]["hostname"]["head"] for n, g in res["nodes"].items()} == {"n1": "n1\n", "n2": "n2\n"}


@pytest.mark.real
def test_engine_over_srun_grades_each_node(clean: NetCluster) -> None:
    """The whole run path (plan, srun transport, grade) with the kernel-log check: n2 has an Xid 79."""
    clean.scenario("n2", {"dmesg": [{"match": ".*", "stdout": "kmsg.txt"}]}, {"kmsg.txt": KMSG_XID79})
    code = r'''
import json, sys
from preflight import engine, registry
from preflight.transport.srun import SrunTransport
reg = registry.load()
checks = engine.select(reg, ["gpu.xid"])
results, _ = engine.run(reg, checks, ["n1", "n2", "n3", "n4"], SrunTransport(), profile_name="generic")
print(json.dumps({r.node: [r.status.value, r.summary] for r in results}))
'''
    res = in_client(clean, code, {})
    assert res["n2"][0] == "fail" and "Xid 79" in res["n2"][1]
    assert all(res[n][0] == "pass" for n in ("n1", "n3", "n4")), res


# alpha runs locally; srun could not launch beta's task: `why` is what srun says about it
_LAUNCH_FAIL_SRUN = r'''#!/usr/bin/env python3
import os, subprocess, sys
argv = sys.argv[1:]
cmd = argv[argv.index("--job-name=preflight") + 1:]
sys.stderr.write("srun: error: Task launch for StepId=7.0 failed on node beta: %s\n" % os.environ["WHY"])
sys.stderr.write("srun: error: Application launch failed: %s\n" % os.environ["WHY"])
p = subprocess.run(cmd, capture_output=True, env={**os.environ, "SLURMD_NODENAME": "alpha"})
sys.stdout.write("".join("0: " + ln + "\n" for ln in p.stdout.decode().splitlines()))
sys.exit(1)
'''


@pytest.mark.parametrize("why, stalled", [
    ("Zero Bytes were transmitted or received", True),
    ("Socket timed out on send/recv operation", True),
    ("Communication connection failure", False),
    ("Connection refused", False),
])
def test_a_task_launch_that_opened_and_carried_nothing_is_a_stall(tmp_path, monkeypatch, why, stalled) -> None:
    """A launch whose connection to slurmd opened and then carried nothing is the black-hole
    signature (the node stays in the MTU ping ring); a refused or failed connection is not."""
    srun = tmp_path / "srun"
    srun.write_text(_LAUNCH_FAIL_SRUN)
    srun.chmod(0o755)
    monkeypatch.setenv("WHY", why)
    bundle = [Probe.of("hostname", ["echo", "up"])]
    out = SrunTransport(srun=str(srun), python=sys.executable, deadline=60).collect({"alpha": bundle, "beta": bundle})
    assert not out["alpha"].error and set(out["alpha"].captures) == {"hostname"}
    beta = out["beta"]
    assert why in beta.error and not beta.captures
    if stalled:
        assert beta.detail == {"kind": "timeout", "stage": "command", "connection": "stalled"}, beta
        assert "never acknowledged" in beta.error and "MTU black hole" in beta.error
    else:
        assert beta.detail == {"kind": "lost", "stage": "launch"}, beta
