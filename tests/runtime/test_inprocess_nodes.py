"""In-process restart across nodes: one `python -m preflight.runtime.launch` per node of the
namespace test cluster (network namespaces on a bridge, each node its own address and hostname),
node 0's launcher hosting the store, 2 ranks per node, gloo over real TCP between the
namespaces. A rank of node n2 is SIGKILLed from outside while training: the ranks of n1 go on in
the same processes (same pids, no new launch attempt); a spare takes the lost rank's number and
the loss curve equals an uninterrupted run's bit for bit, or without a spare the world shrinks
from 4 to 3. Also: the launchers' bad arguments and disagreements end with exit 2 and a clear
message, and the srun step's variables give the node layout."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from preflight.runtime import inprocess as ip
from preflight.runtime import launch
from preflight.runtime.events import read_events
from tests.conftest import need
from tests.netcluster import ROOT, NetCluster, prerequisites

WORKER = ROOT / "tests" / "runtime" / "_nodes_ranks.py"
PREFIX, SUBNET = "ipn", "10.66.32"  # apart from the other cluster tests' namespaces and subnets
SLURM_PREFIX, SLURM_SUBNET = "ips", "10.66.33"
STEPS, STEP_S = 40, 0.05
JOB_LIMIT_S = 300.0  # a loaded 2-core machine starts 8 torch processes slowly; a hang still ends here


def _env(ifname: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TORCHELASTIC_", "SLURM_", "NCCL_", "PREFLIGHT_", "TORCH_FR_"))}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    env.update({"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": ifname,
                "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": ""})
    return env


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetCluster]:
    need(not prerequisites(), f"namespace cluster prerequisites: {prerequisites()}")
    c = NetCluster(2, tmp_path_factory.mktemp("ipnodes") / "cluster", prefix=PREFIX, subnet=SUBNET)
    c.up([])
    try:
        yield c
    finally:
        c.down()


@dataclass
class Job:
    run: Path
    rcs: list[int | None]
    logs: list[str]
    pids_before_kill: dict[int, dict[str, Any]]

    def result(self, slot: int) -> dict[str, Any]:
        return dict(json.loads((self.run / f"result-slot{slot}.json").read_text()))

    def results(self) -> dict[int, dict[str, Any]]:
        return {int(p.stem.removeprefix("result-slot")): json.loads(p.read_text())
                for p in self.run.glob("result-slot*.json")}

    def losses(self) -> dict[int, dict[str, Any]]:
        """The last record of every step (a redone step's second record wins)."""
        out: dict[int, dict[str, Any]] = {}
        for line in (self.run / "losses.jsonl").read_text().splitlines():
            rec = json.loads(line)
            out[int(rec["step"])] = rec
        return out

    def why(self) -> str:
        return "\n".join(f"--- launcher of n{k + 1} (rc {rc}):\n{log[-2500:]}"
                         for k, (rc, log) in enumerate(zip(self.rcs, self.logs, strict=True)))


def _steps_done(run: Path) -> int:
    try:
        return len((run / "losses.jsonl").read_text().splitlines())
    except OSError:
        return 0


def run_job(c: NetCluster, work: Path, name: str, port: int, spares: int, kill_slot: int | None = None,
            kill_after: int = 10, kill_node: int | None = None, stop_slots: tuple[int, ...] = (),
            extra: tuple[str, ...] = (),
            worker_args: tuple[str, ...] = (), steps: int = STEPS) -> Job:
    """One launcher per node inside its namespace (its own hostname); with `kill_slot`, that
    process gets SIGKILL from outside once `kill_after` steps are done, at a random point of a
    step; with `kill_node`, that node's launcher and every process under it (a lost node); the
    `stop_slots` get SIGSTOP at the same moment."""
    run = work / name
    procs = []
    for k, node in enumerate(c.nodes):
        argv = [sys.executable, "-m", "preflight.runtime.launch", "--nnodes", str(len(c.nodes)), "--node-rank",
                str(k), "--master-addr", c.nodes[0].addr, "--master-port", str(port), "--nproc", "2",
                "--spares", str(spares), "--node-timeout", "30", *extra, str(WORKER), "--run-dir", str(run),
                "--steps", str(steps), "--step-s", str(STEP_S), *worker_args]
        cmd = ["ip", "netns", "exec", node.ns, "unshare", "--uts", "sh", "-c",
               f'hostname {node.name} && exec "$@"', "sh", *argv]
        log = work / f"{name}-n{k + 1}.log"
        with open(log, "wb") as fh:
            procs.append((log, subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=_env("eth0"),
                                                cwd=ROOT, start_new_session=True)))
    deadline = time.monotonic() + JOB_LIMIT_S
    pids: dict[int, dict[str, Any]] = {}
    try:
        if kill_slot is not None or kill_node is not None or stop_slots:
            while _steps_done(run) < kill_after:
                assert time.monotonic() < deadline, f"no {kill_after} steps within {JOB_LIMIT_S:g} s"
                assert all(p.poll() is None for _, p in procs), "a launcher ended before the fault"
                time.sleep(0.02)
            time.sleep(random.uniform(0.0, STEP_S))
            pids = {int(p.stem.removeprefix("pid-slot")): json.loads(p.read_text())
                    for p in run.glob("pid-slot*.json")}
            if kill_slot is not None:
                os.kill(int(pids[kill_slot]["pid"]), signal.SIGKILL)
            if kill_node is not None:
                os.killpg(procs[kill_node][1].pid, signal.SIGKILL)
            for slot in stop_slots:
                os.kill(int(pids[slot]["pid"]), signal.SIGSTOP)
        rcs: list[int | None] = []
        for _, p in procs:
            try:
                rcs.append(p.wait(timeout=max(1.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                rcs.append(None)
    finally:
        for _, p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
    return Job(run, rcs, [log.read_text(errors="replace") for log, _ in procs], pids)


def restart_events(run: Path) -> list[dict[str, Any]]:
    return [e for e in read_events(run) if e["check"] == ip.CHECK and e["status"] == "warn"]


def assert_n1_kept_its_processes(job: Job) -> None:
    """Slots 0 and 1 (node n1) finished in the processes that were running before the fault:
    no new launch attempt, no restart by the launcher, only the in-process re-form."""
    for slot in (0, 1):
        res = job.result(slot)
        assert res["host"] == "n1" and res["pid"] == job.pids_before_kill[slot]["pid"], (res, job.pids_before_kill)
        assert res["attempt"] == "0" and res["generation"] == 1 and res["restarts"] == 1, res
    assert "restart 1 of" not in "".join(job.logs) and "fallback" not in "".join(job.logs), job.why()


@pytest.mark.real
def test_a_rank_killed_on_node_2_is_replaced_by_a_spare_and_the_loss_curve_is_an_uninterrupted_runs(
        cluster: NetCluster, tmp_path: Path) -> None:
    base = run_job(cluster, tmp_path, "base", 29611, spares=0)  # no fault: no spare needed
    assert base.rcs == [0, 0], base.why()
    job = run_job(cluster, tmp_path, "kill", 29612, spares=1, kill_slot=3)
    assert job.rcs == [0, 0], job.why()
    assert job.pids_before_kill[3]["host"] == "n2"  # the killed rank ran on the second node
    assert_n1_kept_its_processes(job)
    results = job.results()
    assert 3 not in results  # the killed process wrote nothing more
    by_rank = {r["rank"]: r for r in results.values() if r["rank"] >= 0}
    assert sorted(by_rank) == [0, 1, 2, 3] and all(r["world"] == 4 and r["step"] == STEPS for r in by_rank.values())
    spare = by_rank[3]
    assert spare["slot"] in (4, 5) and spare["pid"] == job.pids_before_kill[spare["slot"]]["pid"]  # a warm spare
    assert by_rank[2]["pid"] == job.pids_before_kill[2]["pid"]  # n2's surviving rank kept its process too
    # the loss of every step, bit for bit, is the uninterrupted run's (redone steps included)
    got, want = job.losses(), base.losses()
    assert sorted(got) == sorted(want) == list(range(1, STEPS + 1))
    assert [got[s]["loss"] for s in got] == [want[s]["loss"] for s in got]
    assert {r["world"] for r in got.values()} == {4} and max(r["gen"] for r in got.values()) == 1
    assert [r["params"] for r in by_rank.values()] == [base.result(0)["params"]] * 4
    (ev,) = restart_events(job.run)
    facts = ev["facts"]
    assert facts["failed_ranks"] == [3] and facts["failed"][0]["host"] == "n2", facts
    assert facts["old_world_size"] == facts["new_world_size"] == 4 and facts["spares_used"] == [spare["slot"]]
    assert "SIGKILL" in facts["failed"][0]["cause"], facts  # seen from the launcher's exit record


@pytest.mark.real
def test_without_a_spare_the_world_shrinks_from_4_to_3_across_the_nodes(cluster: NetCluster, tmp_path: Path) -> None:
    job = run_job(cluster, tmp_path, "shrink", 29613, spares=0, kill_slot=3, kill_after=8)
    assert job.rcs == [0, 0], job.why()
    assert_n1_kept_its_processes(job)
    results = job.results()
    assert sorted(results) == [0, 1, 2], results  # slot 3 was killed; nothing took its place
    assert {r["world"] for r in results.values()} == {3} and sorted(r["rank"] for r in results.values()) == [0, 1, 2]
    assert results[2]["host"] == "n2" and results[2]["pid"] == job.pids_before_kill[2]["pid"]
    curve = job.losses()
    assert sorted(curve) == list(range(1, STEPS + 1))
    assert curve[1]["world"] == 4 and curve[STEPS]["world"] == 3
    (ev,) = restart_events(job.run)
    assert ev["facts"]["old_world_size"] == 4 and ev["facts"]["new_world_size"] == 3, ev["facts"]
    assert ev["facts"]["failed"][0]["host"] == "n2" and ev["facts"]["spares_used"] == []


@pytest.mark.real
def test_a_fallback_restarts_the_workers_of_every_node(cluster: NetCluster, tmp_path: Path) -> None:
    """The in-process restart is over its limit (max_restarts=0): every survivor exits 75, node
    0's launcher decides one restart for the whole job, and both nodes start their workers again."""
    job = run_job(cluster, tmp_path, "fallback", 29614, spares=0, kill_slot=3, kill_after=5, steps=15,
                  extra=("--max-restarts", "1"), worker_args=("--ip-max-restarts", "0"))
    assert job.rcs == [0, 0], job.why()
    for log in job.logs:
        assert "restart 1 of 1 on 2 nodes" in log, job.why()
    results = job.results()
    assert sorted(results) == [0, 1, 2, 3]
    for slot, res in results.items():
        assert res["attempt"] == "1" and res["world"] == 4 and res["generation"] == 0 and res["step"] == 15, res
        assert res["pid"] != job.pids_before_kill[slot]["pid"]  # a new process on each node
    assert [e for e in read_events(job.run) if e["check"] == ip.CHECK and e["status"] == "fail"]


@pytest.mark.real
def test_a_lost_node_does_not_hold_the_others(cluster: NetCluster, tmp_path: Path) -> None:
    """Node n2's launcher and its workers vanish: n1's ranks re-form alone, finish, and n1's
    launcher ends once n2 has been silent for --node-timeout, with the survivors' verdict."""
    began = time.monotonic()
    job = run_job(cluster, tmp_path, "lost", 29615, spares=0, kill_node=1, kill_after=8,
                  extra=("--node-timeout", "5"))
    assert job.rcs[0] == 0 and job.rcs[1] == -signal.SIGKILL, job.why()
    assert "node 1 is lost (its launcher silent for 5 s)" in job.logs[0], job.why()
    results = job.results()
    assert sorted(results) == [0, 1] and {r["world"] for r in results.values()} == {2}, results
    assert_n1_kept_its_processes(job)
    assert time.monotonic() - began < JOB_LIMIT_S


@pytest.mark.real
def test_a_node_whose_ranks_all_stopped_is_fenced_by_its_own_launcher(cluster: NetCluster, tmp_path: Path) -> None:
    """Both ranks of n2 are SIGSTOPped: no survivor is left on n2 to fence them and n1's leader
    may not signal another host's pids; n2's launcher SIGKILLs its own two children once the
    plan names them failed, so the job ends (n1's ranks go on with a world of 2)."""
    job = run_job(cluster, tmp_path, "stopped", 29616, spares=0, stop_slots=(2, 3), kill_after=8)
    assert job.rcs == [0, 0], job.why()
    for slot in (2, 3):
        assert f"node 1 fenced slot {slot} (pid {job.pids_before_kill[slot]['pid']})" in job.logs[1], job.why()
    results = job.results()
    assert sorted(results) == [0, 1] and {r["world"] for r in results.values()} == {2}, results
    assert_n1_kept_its_processes(job)
    (ev,) = restart_events(job.run)
    assert sorted(f["slot"] for f in ev["facts"]["failed"]) == [2, 3] and ev["facts"]["new_world_size"] == 2


# ----- the launchers' layout, bad input and disagreements (loopback, no torch in the workers) -----


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(("args", "words"), [
    (["--nnodes", "2", "--node-rank", "2", "--master-addr", "127.0.0.1"], "--node-rank 2 is not below --nnodes 2"),
    (["--nnodes", "2", "--master-addr", "127.0.0.1"], "needs --node-rank"),
    (["--nnodes", "2", "--node-rank", "1"], "needs --master-addr"),
    (["--nnodes", "2", "--node-rank", "0", "--master-addr", "127.0.0.1", "--master-port", "0"],
     "works for one node only"),
    (["--nnodes", "0"], "must be between 1 and 100000"),
    (["--node-timeout", "0.5"], "must be between 1 and 86400 seconds"),
])
def test_bad_node_arguments_exit_2_with_a_clear_message(args: list[str], words: str) -> None:
    cmd = [sys.executable, "-m", "preflight.runtime.launch", "--nproc", "2", *args, str(WORKER)]
    p = subprocess.run(cmd, env=_env("lo"), cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert words in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_the_srun_step_gives_the_layout_and_the_options_win() -> None:
    script = str(WORKER)
    step = {"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_NODES": "4", "SLURM_NODEID": "2",
            "SLURM_STEP_NODELIST": "gpu[07-10]", "SLURM_STEP_NUM_TASKS": "4"}
    ns = launch.parse_args(["--nproc", "8", script], env=step)
    assert (ns.nnodes, ns.node_rank, ns.master_addr, ns.master_port) == (4, 2, "gpu07", launch.DEFAULT_PORT)
    ns = launch.parse_args(["--nproc", "8", "--master-addr", "10.1.2.3", script], env={**step, "MASTER_PORT": "31000"})
    assert (ns.nnodes, ns.node_rank, ns.master_addr, ns.master_port) == (4, 2, "10.1.2.3", 31000)
    ns = launch.parse_args(["--nproc", "8", "--nnodes", "4", "--node-rank", "0", script], env=step)
    assert (ns.node_rank, ns.master_addr) == (0, "gpu07")
    # an sbatch script is no step: its SLURM_NODEID does not make it one of several launchers
    ns = launch.parse_args(["--nproc", "8", script], env={k: v for k, v in step.items() if k != "SLURM_STEP_ID"})
    assert (ns.nnodes, ns.node_rank, ns.master_addr, ns.master_port) == (1, 0, "127.0.0.1", 0)
    with pytest.raises(SystemExit):  # one task per GPU instead of one launcher per node
        launch.parse_args(["--nproc", "8", script], env={**step, "SLURM_STEP_NUM_TASKS": "32"})
    with pytest.raises(SystemExit):
        launch.parse_args(["--nproc", "8", script], env={**step, "SLURM_STEP_NODELIST": "gpu[07-"})


@pytest.mark.real
def test_under_a_real_srun_each_launcher_reads_its_node_from_the_step(tmp_path: Path) -> None:
    """One task per node of a real Slurm (one slurmd per namespace node): the launcher's options
    as srun's step variables fill them, and a task per GPU instead is refused; then a whole job
    under srun, where a rank of n2 is SIGKILLed and n1's processes go on."""
    from tests.slurm import slurm_cluster

    code = ("import json, sys; from preflight.runtime import launch; "
            "ns = launch.parse_args(['--nproc', '2', sys.argv[1]]); "
            "print(json.dumps([ns.nnodes, ns.node_rank, ns.master_addr, ns.master_port]))")
    with slurm_cluster(tmp_path / "cluster", SLURM_PREFIX, SLURM_SUBNET, n=2) as c:
        env = {**c.slurm_env(), "PYTHONPATH": str(ROOT)}
        p = c.client("srun", "-N2", "--ntasks-per-node=1", "--label", sys.executable, "-c", code, str(WORKER),
                     check=False, timeout=120, env=env)
        assert p.returncode == 0, p.stderr[-3000:]
        got = sorted(json.loads(line.split(":", 1)[1]) for line in p.stdout.splitlines() if line.strip())
        assert got == [[2, 0, "n1", launch.DEFAULT_PORT], [2, 1, "n1", launch.DEFAULT_PORT]], p.stdout
        p = c.client("srun", "-N2", "--ntasks-per-node=2", sys.executable, "-c", code, str(WORKER),
                     check=False, timeout=120, env=env)
        assert p.returncode != 0 and "start one launcher per node (srun --ntasks-per-node=1)" in p.stderr, p.stderr
        # the whole job under srun: a rank of n2 SIGKILLed, a spare takes its number, n1 goes on
        run = tmp_path / "srun-run"
        cmd = ["ip", "netns", "exec", c.client_ns, "srun", "-N2", "--ntasks-per-node=1", sys.executable, "-m",
               "preflight.runtime.launch", "--nproc", "2", "--spares", "1", "--master-port", "29617",
               str(WORKER), "--run-dir", str(run), "--steps", str(STEPS), "--step-s", str(STEP_S)]
        with open(tmp_path / "srun.log", "wb") as fh:
            job = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env={**env, **_env("eth0")},
                                   start_new_session=True)
        try:
            deadline = time.monotonic() + JOB_LIMIT_S
            while _steps_done(run) < 10:
                assert time.monotonic() < deadline and job.poll() is None, (tmp_path / "srun.log").read_text()[-3000:]
                time.sleep(0.02)
            time.sleep(random.uniform(0.0, STEP_S))
            before = {s: json.loads((run / f"pid-slot{s}.json").read_text()) for s in (0, 1, 3)}
            assert before[3]["host"] == "n2" and before[0]["host"] == before[1]["host"] == "n1", before
            os.kill(int(before[3]["pid"]), signal.SIGKILL)
            rc = job.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait(10)
        assert rc == 0, (tmp_path / "srun.log").read_text()[-3000:]
        res = {s: json.loads((run / f"result-slot{s}.json").read_text()) for s in (0, 1)}
        assert all(res[s]["pid"] == before[s]["pid"] and res[s]["generation"] == 1 for s in (0, 1)), res
        (ev,) = restart_events(run)
        assert ev["facts"]["failed"][0]["host"] == "n2" and ev["facts"]["new_world_size"] == 4, ev["facts"]


def test_global_slots_and_the_workers_environment() -> None:
    lz = launch.Launcher.__new__(launch.Launcher)
    lz.nproc, lz.spares, lz.nnodes, lz.node_rank, lz.world = 2, 1, 3, 1, 6
    lz.master_addr, lz.port, lz.attempt = "10.0.0.1", 29500, 0
    assert lz.local_slots() == [2, 3, 7]
    assert [lz.node_of(s) for s in range(9)] == [0, 0, 1, 1, 2, 2, 0, 1, 2]
    env = lz._env(7)
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["GROUP_RANK"]) == ("7", "2", "6", "1")
    assert (env[ip.ENV_SPARE], env[ip.ENV_NPROC], env[ip.ENV_SPARES]) == ("1", "6", "3")
    assert (lz._env(3)["LOCAL_RANK"], lz._env(3)[ip.ENV_SPARE]) == ("1", "0")


def test_a_node_that_cannot_reach_node_0_exits_2_in_bounded_time() -> None:
    cmd = [sys.executable, "-m", "preflight.runtime.launch", "--nproc", "1", "--nnodes", "2", "--node-rank", "1",
           "--master-addr", "127.0.0.1", "--master-port", str(_free_port()), "--node-timeout", "2", str(WORKER)]
    began = time.monotonic()
    p = subprocess.run(cmd, env=_env("lo"), cwd=ROOT, capture_output=True, text=True, timeout=90)
    assert p.returncode == 2 and "cannot reach node 0's store at 127.0.0.1:" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and time.monotonic() - began < 60


def test_a_launcher_that_disagrees_or_takes_a_node_rank_twice_exits_2(tmp_path: Path) -> None:
    sleeper = tmp_path / "sleep.py"
    sleeper.write_text("import os, sys, time\nfrom pathlib import Path\n"
                       "Path(sys.argv[1], os.environ['PREFLIGHT_SLOT']).touch()\ntime.sleep(120)\n")
    port = str(_free_port())

    def node(rank: int, nproc: int) -> list[str]:
        return [sys.executable, "-m", "preflight.runtime.launch", "--nproc", str(nproc), "--nnodes", "2",
                "--node-rank", str(rank), "--master-addr", "127.0.0.1", "--master-port", port,
                "--node-timeout", "20", str(sleeper), str(tmp_path)]

    started = []
    try:
        for rank in (0, 1):
            started.append(subprocess.Popen(node(rank, 2), env=_env("lo"), cwd=ROOT, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL, start_new_session=True))
            if rank == 0:
                wrong = subprocess.run(node(1, 3), env=_env("lo"), cwd=ROOT, capture_output=True, text=True,
                                       timeout=90)
                assert wrong.returncode == 2, wrong.stderr
                assert "the launchers disagree: nproc 3 here, 2 on node 0" in wrong.stderr, wrong.stderr
        deadline = time.monotonic() + 90
        while not (tmp_path / "2").exists():  # node 1's first worker: its launcher holds node rank 1
            assert time.monotonic() < deadline and started[1].poll() is None, "node 1's launcher did not start"
            time.sleep(0.05)
        twice = subprocess.run(node(1, 2), env=_env("lo"), cwd=ROOT, capture_output=True, text=True, timeout=90)
        assert twice.returncode == 2, twice.stderr
        assert "node rank 1 is already taken by another launcher" in twice.stderr, twice.stderr
        again = subprocess.run(node(0, 2), env=_env("lo"), cwd=ROOT, capture_output=True, text=True, timeout=90)
        assert again.returncode == 2 and "cannot host the store" in again.stderr, again.stderr  # the port is node 0's
        assert all(p.poll() is None for p in started)  # the job's launchers are not disturbed
        assert sorted(int(f.name) for f in tmp_path.iterdir() if f.name.isdigit()) == [0, 1, 2, 3]
    finally:
        for p in started:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)
