"""LossGuard: NaN/Inf detected at the step it appears, spikes warned, ranks stop together."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest

from preflight.runtime.events import EventWriter, read_events
from preflight.runtime.lossguard import LossGuard, NonFiniteLoss
from tests.runtime._wd_ranks import init_gloo, launch, logs, wait_all


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nonfinite_raises_at_the_step_it_appears(tmp_path: Path, bad: float) -> None:
    guard = LossGuard(events=EventWriter(tmp_path, rank=3), rank=3)
    for step in range(37):
        assert guard.check(step, 2.0 - step * 0.01) == "ok"
    with pytest.raises(NonFiniteLoss) as info:
        guard.check(37, bad)
    assert info.value.step == 37 and info.value.rank == 3 and info.value.ranks == [3]
    assert "step 37" in str(info.value) and "rank" in str(info.value)
    ev = [e for e in read_events(tmp_path) if e["check"] == "runtime.loss"]
    assert len(ev) == 1 and ev[0]["status"] == "fail" and ev[0]["step"] == 37
    assert ev[0]["facts"]["nonfinite"] is True and ev[0]["remedy"]


def test_nonfinite_can_return_a_decision() -> None:
    guard = LossGuard(raise_on_nonfinite=False)
    assert guard.check(0, 1.0) == "ok"
    assert guard.check(1, float("nan")) == "nonfinite"


def test_spike_warns_after_warmup_only(tmp_path: Path) -> None:
    guard = LossGuard(spike_factor=10, window=20, warmup_steps=5, events=EventWriter(tmp_path, rank=0), rank=0)
    assert guard.check(0, 1.0) == "ok"
    assert guard.check(1, 50.0) == "ok"  # warm-up: early losses jump around
    for step in range(2, 30):
        assert guard.check(step, 1.0) == "ok"
    assert guard.check(30, 9.0) == "ok"  # under 10 x the recent max
    for step in range(31, 60):
        guard.check(step, 1.0)
    assert guard.check(60, 11.0) == "spike"
    assert guard.spikes == [(60, 11.0)]
    ev = [e for e in read_events(tmp_path) if e["check"] == "runtime.loss"]
    assert len(ev) == 1 and ev[0]["status"] == "warn" and ev[0]["step"] == 60
    assert ev[0]["facts"]["window_max"] == 1.0  # the 9.0 has left the 20-step window


def test_tensor_losses_and_garbage() -> None:
    torch = pytest.importorskip("torch")
    guard = LossGuard()
    assert guard.check(0, torch.tensor(1.5)) == "ok"
    with pytest.raises(NonFiniteLoss):
        guard.check(1, torch.tensor([1.0, float("nan")]))
    with pytest.raises(NonFiniteLoss):  # an unreadable loss is treated as non-finite
        guard.check(2, "not a number")


def test_negative_losses_disable_spike_test() -> None:
    guard = LossGuard(warmup_steps=1)
    for step in range(10):
        assert guard.check(step, -5.0) == "ok"
    assert guard.check(10, 100.0) == "ok"


# ----- real: 4 gloo ranks, NaN on one rank, sync=True ---------------------------------------


def rank_nan(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", type=Path, required=True)
    ap.add_argument("--nan-rank", type=int, default=2)
    ap.add_argument("--nan-step", type=int, default=37)
    a = ap.parse_args(argv)
    import torch
    import torch.distributed as dist

    init_gloo()
    rank = dist.get_rank()
    guard = LossGuard(sync=True, events=EventWriter(a.run_dir, rank=rank))
    w = torch.ones(8)
    result: dict[str, object] = {"rank": rank, "stopped_at": None}
    for step in range(100):
        loss = w.sum() / 8 + 0.01 * step
        if rank == a.nan_rank and step == a.nan_step:
            loss = loss * float("nan")
        try:
            guard.check(step, loss)
        except NonFiniteLoss as exc:
            result.update(stopped_at=exc.step, ranks=exc.ranks, message=str(exc))
            break
        dist.all_reduce(w)
        w /= dist.get_world_size()
    (a.run_dir / f"result-rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


@pytest.mark.real
def test_nan_on_one_rank_stops_every_rank_at_that_step(tmp_path: Path) -> None:
    run = tmp_path / "run"
    procs = launch("tests.runtime.test_lossguard:rank_nan", 4, ["--run-dir", str(run)], run)
    assert wait_all(procs, timeout=90) == [0, 0, 0, 0], logs(run)
    for rank in range(4):
        res = json.loads((run / f"result-rank{rank}.json").read_text())
        assert res["stopped_at"] == 37 and res["ranks"] == [2], res
    ev = {e["rank"]: e for e in read_events(run) if e["check"] == "runtime.loss"}
    assert sorted(ev) == [0, 1, 2, 3]
    assert ev[2]["summary"].startswith("non-finite loss (nan) at step 37 on rank 2")
    assert all(e["step"] == 37 and e["facts"]["ranks"] == [2] for e in ev.values())
