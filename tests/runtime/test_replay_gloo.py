"""Replay across real processes: 3 gloo ranks, the ranks agree on one branch and name the rank.

- rank 1's local gradient is corrupted once: every rank replays the step, every rank takes the
  hardware branch and exits 76, the events name rank 1 and its node, history holds that node;
- rank 2's batch holds a NaN (every run of the step sees it): every rank takes the data branch,
  skips the step's update and trains on, their weights stay identical, history holds nothing.
Each rank is given its own node name (`n<rank>`), as if the ranks ran on three nodes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from preflight.runtime.events import EventWriter, read_events
from preflight.runtime.replay import CHECK, EXIT_SUSPECT_HARDWARE, Replay, SuspectHardware
from tests.runtime._wd_ranks import init_gloo, launch, logs, wait_all

RANKS = 3
ROOT = Path(__file__).resolve().parents[2]
STEPS = 30


def rank_job(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", type=Path, required=True)
    ap.add_argument("--history", required=True)
    ap.add_argument("--corrupt", type=str, default="")  # "<rank>:<step>:<kind>"
    ap.add_argument("--nan", type=str, default="")  # "<rank>:<step>"
    ap.add_argument("--on-data", default="skip")
    ap.add_argument("--raise-on-replay", type=int, default=-1)  # this rank's compute raises when replayed
    a = ap.parse_args(argv)
    import torch
    import torch.distributed as dist

    from tests.runtime._replay_job import Corruption, Job

    torch.set_num_threads(1)
    init_gloo()
    rank, world = dist.get_rank(), dist.get_world_size()
    corruption = nan_at = None
    if a.corrupt:
        r, s, kind = a.corrupt.split(":")
        corruption = Corruption(step=int(s), rank=int(r), kind=kind, param=0, index=7)
    if a.nan:
        r, s = a.nan.split(":")
        nan_at = int(s) if int(r) == rank else None
    node = f"n{rank}"
    replay = Replay(events=EventWriter(a.run_dir, rank=rank, node=node), on_data=a.on_data, history=a.history)
    job = Job(seed=11, rank=rank, corruption=corruption, nan_at=nan_at)
    if a.raise_on_replay == rank:
        plain = job.compute_for

        def compute_for(step: int) -> object:
            inner, calls = plain(step), []

            def compute() -> object:
                calls.append(step)
                if len(calls) == 2:
                    raise RuntimeError(f"injected: the replay of step {step} failed")
                return inner()
            return compute
        job.compute_for = compute_for  # type: ignore[method-assign]

    def reduce(model: torch.nn.Module) -> None:
        for p in model.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad /= world

    result: dict[str, object] = {"rank": rank}
    try:
        job.train(STEPS, replay, reduce)
    except SuspectHardware as exc:
        result.update(verdict="hardware", step=exc.step, ranks=exc.ranks, nodes=exc.nodes, code=exc.code)
        (a.run_dir / f"result-rank{rank}.json").write_text(json.dumps(result))
        raise
    flat = torch.cat([p.detach().reshape(-1) for p in job.model.parameters()])
    result.update(verdict="trained", skipped=job.skipped, steps=len(job.losses), weights=flat.tolist(),
                  replays=[(o.step, o.trigger, o.cause) for o in replay.replays])
    (a.run_dir / f"result-rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def _results(run: Path) -> list[dict]:
    return [json.loads((run / f"result-rank{r}.json").read_text()) for r in range(RANKS)]


def _history(url: str) -> list:
    from preflight.history.store import open_store

    with open_store(url) as store:
        return store.rows(checks=[CHECK])


@pytest.mark.real
def test_a_one_time_corruption_on_rank_1_is_its_node_on_every_rank(tmp_path: Path) -> None:
    run, url = tmp_path / "run", f"sqlite:///{tmp_path / 'history.db'}"
    procs = launch("tests.runtime.test_replay_gloo:rank_job", RANKS,
                   ["--run-dir", str(run), "--history", url, "--corrupt", "1:17:nan"], run)
    assert wait_all(procs, timeout=180) == [EXIT_SUSPECT_HARDWARE] * RANKS, logs(run)
    for res in _results(run):
        assert (res["verdict"], res["step"], res["ranks"], res["nodes"]) == ("hardware", 17, [1], ["n1"]), res
    ev = {e["rank"]: e for e in read_events(run) if e["check"] == CHECK}
    assert sorted(ev) == list(range(RANKS))
    for e in ev.values():
        assert e["status"] == "fail" and e["step"] == 17 and e["facts"]["suspect_nodes"] == ["n1"]
        assert e["summary"].startswith("suspect hardware on n1: step 17 (nonfinite-grad)")
        listed = e["facts"]["ranks"]  # the ranks worth naming: rank 1, whose two runs differ
        assert [(r["rank"], r["node"], r["first"] != r["second"]) for r in listed] == [(1, "n1", True)]
        assert e["facts"]["world"] == RANKS
        assert e["facts"]["history"].startswith("recorded as run 1 in sqlite:///") if e["rank"] == 1 else \
            e["facts"]["history"] == "recorded by rank 1 (n1)"
    rows = _history(url)
    assert [(r.node, r.status.value) for r in rows] == [("n1", "fail")]  # recorded once, by the node's rank
    env = {k: v for k, v in os.environ.items() if k not in ("PREFLIGHT_CONFIG", "PREFLIGHT_HISTORY")}
    p = subprocess.run([sys.executable, "-m", "preflight.cli", "history", "--history", url, "--since", "all", "--json"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert p.returncode == 0, p.stderr
    stats = json.loads(p.stdout)["stats"]
    assert [(s["node"], s["check"], s["last_status"]) for s in stats] == [("n1", CHECK, "fail")]


@pytest.mark.real
def test_a_nan_in_rank_2s_batch_is_the_data_every_rank_skips_the_step(tmp_path: Path) -> None:
    run, url = tmp_path / "run", f"sqlite:///{tmp_path / 'history.db'}"
    procs = launch("tests.runtime.test_replay_gloo:rank_job", RANKS,
                   ["--run-dir", str(run), "--history", url, "--nan", "2:19"], run)
    assert wait_all(procs, timeout=180) == [0] * RANKS, logs(run)
    res = _results(run)
    for r in res:
        assert r["verdict"] == "trained" and r["skipped"] == [19] and r["steps"] == STEPS - 1, r
        assert r["replays"] == [[19, "nonfinite-loss", "data"]]
        assert r["weights"] == res[0]["weights"]  # the ranks stayed in step
    ev = [e for e in read_events(run) if e["check"] == CHECK]
    assert len(ev) == RANKS and {e["status"] for e in ev} == {"warn"}
    assert all(e["facts"]["trigger_ranks"] == [2] and e["facts"]["action"] == "skip" for e in ev)
    assert _history(url) == []


@pytest.mark.real
def test_a_rank_whose_replay_raises_is_named_and_nobody_waits_for_it(tmp_path: Path) -> None:
    run, url = tmp_path / "run", f"sqlite:///{tmp_path / 'history.db'}"
    procs = launch("tests.runtime.test_replay_gloo:rank_job", RANKS,
                   ["--run-dir", str(run), "--history", url, "--nan", "2:19", "--raise-on-replay", "2"], run)
    rcs = wait_all(procs, timeout=150)
    assert None not in rcs and rcs[2] == 1, (rcs, logs(run))  # every rank ended by itself; rank 2 on its error
    assert "injected: the replay of step 19 failed" in (run / "rank2.log").read_text()
    ev = {e["rank"]: e for e in read_events(run) if e["check"] == CHECK}
    assert sorted(ev) == list(range(RANKS))
    for e in ev.values():
        assert e["status"] == "error" and e["step"] == 19 and e["facts"]["cause"] == "undetermined"
        assert "rank 2: the replay raised RuntimeError: injected" in e["summary"]
    assert _history(url) == []


# ----- through Resilience: the gradient all-reduce carries the agreement --------------------------------


def rank_resilience(argv: list[str]) -> None:
    """One rank of a job written as the README's: `res.forward_backward(compute, model,
    average=...)`; counts the all_reduce calls each forward_backward makes (with
    `--average 0` the caller averages after it, as before)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", type=Path, required=True)
    ap.add_argument("--history", required=True)
    ap.add_argument("--corrupt", type=str, default="")  # "<rank>:<step>:<kind>"
    ap.add_argument("--nan", type=str, default="")  # "<rank>:<step>"
    ap.add_argument("--average", type=int, default=1)
    a = ap.parse_args(argv)
    os.environ["PREFLIGHT_HISTORY"] = a.history
    import torch
    import torch.distributed as dist

    from preflight.runtime import Resilience
    from tests.runtime._replay_job import Corruption, Job

    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    corruption = nan_at = None
    if a.corrupt:
        r, s, kind = a.corrupt.split(":")
        corruption = Corruption(step=int(s), rank=int(r), kind=kind, param=0, index=7)
    if a.nan:
        r, s = a.nan.split(":")
        nan_at = int(s) if int(r) == rank else None
    job = Job(seed=11, rank=rank, corruption=corruption, nan_at=nan_at)
    real, count = dist.all_reduce, [0]

    def counting(*args: object, **kw: object) -> object:
        count[0] += 1
        return real(*args, **kw)  # type: ignore[arg-type]

    dist.all_reduce = counting  # type: ignore[assignment]
    calls: list[int] = []
    result: dict[str, object] = {"rank": rank}
    try:
        with Resilience(a.run_dir, state={"model": job.model, "optimizer": job.opt}, replay="skip",
                        save_every=10**6) as res:
            for step in res.steps(STEPS):
                with res.step():
                    job.step_now = step
                    before = count[0]
                    out = res.forward_backward(job.compute_for(step), job.model, average=bool(a.average))
                    if out.apply and not a.average:
                        res.average_gradients(job.model)
                    calls.append(count[0] - before)
                    if out.apply:
                        job.opt.step()
                    else:
                        job.skipped.append(step)
    except SuspectHardware as exc:
        result.update(verdict="hardware", step=exc.step, ranks=exc.ranks, code=exc.code)
        (a.run_dir / f"result-rank{rank}.json").write_text(json.dumps(result))
        raise
    flat = torch.cat([p.detach().reshape(-1) for p in job.model.parameters()])
    result.update(verdict="trained", skipped=job.skipped, weights=flat.tolist(), calls=calls,
                  replays=[(o.step, o.trigger, o.cause) for o in res.replay.replays])
    (a.run_dir / f"result-rank{rank}.json").write_text(json.dumps(result))


@pytest.mark.real
def test_through_resilience_the_gradient_all_reduce_carries_the_agreement(tmp_path: Path) -> None:
    """average=True: one all_reduce per step (the gradients', carrying the trigger), where the
    caller's own averaging after forward_backward makes two; the same skipped step and
    bitwise the same weights either way (2 ranks, a NaN in rank 1's batch at step 19)."""
    runs = {}
    for average in (1, 0):
        run = tmp_path / f"run{average}"
        procs = launch("tests.runtime.test_replay_gloo:rank_resilience", 2,
                       ["--run-dir", str(run), "--history", f"sqlite:///{tmp_path / 'h.db'}", "--nan", "1:19",
                        "--average", str(average)], run)
        assert wait_all(procs, timeout=180) == [0, 0], logs(run)
        runs[average] = [json.loads((run / f"result-rank{r}.json").read_text()) for r in range(2)]
    for average, res in runs.items():
        for r in res:
            assert r["skipped"] == [19] and r["replays"] == [[19, "nonfinite-loss", "data"]], r
            plain = [c for s, c in enumerate(r["calls"]) if s != 19]
            assert plain == [1 if average else 2] * (STEPS - 1), (average, r["calls"])
        assert res[1]["weights"] == res[0]["weights"]
    assert runs[1][0]["weights"] == runs[0][0]["weights"]  # the same averaging, bit for bit


@pytest.mark.real
def test_through_resilience_a_one_time_corruption_still_ends_every_rank_with_76(tmp_path: Path) -> None:
    run = tmp_path / "run"
    procs = launch("tests.runtime.test_replay_gloo:rank_resilience", 2,
                   ["--run-dir", str(run), "--history", f"sqlite:///{tmp_path / 'h.db'}", "--corrupt", "1:17:bitflip"],
                   run)
    assert wait_all(procs, timeout=180) == [EXIT_SUSPECT_HARDWARE] * 2, logs(run)
    for r in range(2):
        res = json.loads((run / f"result-rank{r}.json").read_text())
        assert (res["verdict"], res["step"], res["ranks"]) == ("hardware", 17, [1]), res
    ev = [e for e in read_events(run) if e["check"] == CHECK]
    assert sorted(e["rank"] for e in ev) == [0, 1] and {(e["status"], e["step"]) for e in ev} == {("fail", 17)}
