"""Replay: a one-time gradient corruption is suspect hardware, a deterministic fault is the data.

One process, a tiny MLP with dropout (and a BatchNorm where buffers matter), CPU, deterministic.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from preflight.history.store import open_store  # noqa: E402
from preflight.runtime.events import EventWriter, read_events  # noqa: E402
from preflight.runtime.lossguard import LossGuard  # noqa: E402
from preflight.runtime.replay import (  # noqa: E402
    CHECK,
    EXIT_SUSPECT_HARDWARE,
    Replay,
    ReproducibleFault,
    SuspectHardware,
    digest,
    tensor_bits,
)
from tests.runtime._replay_job import Corruption, Job  # noqa: E402

STEPS = 40


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _replay(tmp_path: Path, **kw: object) -> Replay:
    kw.setdefault("history", f"sqlite:///{tmp_path / 'history.db'}")
    return Replay(events=EventWriter(tmp_path / "run", rank=0, node="gpu007"), **kw)  # type: ignore[arg-type]


def _events(tmp_path: Path) -> list[dict]:
    return [e for e in read_events(tmp_path / "run") if e["check"] == CHECK]


def _history(tmp_path: Path) -> list:
    with open_store(f"sqlite:///{tmp_path / 'history.db'}") as store:
        return store.rows(checks=[CHECK])


# ----- nothing wrong: training is untouched ---------------------------------------------------


def test_a_clean_run_never_replays_and_trains_exactly_as_without(tmp_path: Path) -> None:
    plain = Job(seed=3).train(STEPS, None)
    rep = _replay(tmp_path)
    job = Job(seed=3)
    assert job.train(STEPS, rep) == plain
    assert rep.replays == [] and _events(tmp_path) == []


@pytest.mark.parametrize("batchnorm", [False, True])
def test_an_audit_replay_of_every_step_reproduces_dropout_and_buffers(tmp_path: Path, batchnorm: bool) -> None:
    """Replaying restores the RNG (dropout) and the BatchNorm buffers: every step reproduces
    bit for bit, and the run equals a run without replay, running statistics included."""
    plain = Job(seed=5, batchnorm=batchnorm)
    plain.train(25, None)
    rep = _replay(tmp_path, audit_every=1)
    job = Job(seed=5, batchnorm=batchnorm)
    assert job.train(25, rep) == plain.losses
    assert len(rep.replays) == 25 and {o.cause for o in rep.replays} == {"reproduced"}
    for a, b in zip(job.model.state_dict().values(), plain.model.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert _events(tmp_path) == []  # an audit that reproduces writes nothing


def test_only_the_buffers_a_forward_pass_changes_are_saved_and_the_model_is_walked_once() -> None:
    model = Job(seed=0, batchnorm=True).model
    model.register_buffer("mask", torch.ones(256, 256))  # constant: never copied per step
    rep = Replay(history="off")
    tensors, buffers = rep._walk(model)
    bn = model[1]
    assert [id(b) for b in buffers] == [id(bn.running_mean), id(bn.running_var), id(bn.num_batches_tracked)]
    assert tensors == list(model.parameters())
    model.add_module("head", torch.nn.Linear(1, 1))
    assert rep._walk(model)[0] is tensors  # read once per model object ...
    rep.refresh()
    assert len(rep._walk(model)[0]) == len(tensors) + 2  # ... until refresh()


# ----- a one-time corruption: suspect hardware ------------------------------------------------


@pytest.mark.parametrize("kind", ["nan", "inf", "bitflip"])
def test_a_one_time_gradient_corruption_is_suspect_hardware(tmp_path: Path, kind: str) -> None:
    rep = _replay(tmp_path)
    job = Job(seed=1, corruption=Corruption(step=17, kind=kind, param=2, index=5))
    with pytest.raises(SuspectHardware) as info:
        job.train(STEPS, rep)
    exc = info.value
    assert exc.code == EXIT_SUSPECT_HARDWARE == 76 and isinstance(exc, SystemExit)
    assert (exc.step, exc.ranks, exc.nodes) == (17, [0], ["gpu007"])
    assert exc.trigger in {"nonfinite-grad", "grad-spike"}
    assert "suspect hardware" in str(exc) and "gpu007" in str(exc)
    ev = _events(tmp_path)
    assert len(ev) == 1 and ev[0]["status"] == "fail" and ev[0]["step"] == 17
    assert ev[0]["summary"].startswith("suspect hardware on gpu007: step 17")
    assert ev[0]["facts"]["suspect_ranks"] == [0] and ev[0]["facts"]["cause"] == "hardware"
    assert "DIFFERENT" in ev[0]["evidence"][0] and "drain gpu007" in ev[0]["remedy"]
    rows = _history(tmp_path)
    assert [(r.node, r.status.value, r.command) for r in rows] == [("gpu007", "fail", "runtime")]
    assert rows[0].facts["step"] == 17
    assert ev[0]["facts"]["history"] == f"recorded as run {rows[0].run_id} in sqlite:///{tmp_path / 'history.db'}"


def test_the_suspect_goes_to_the_site_configs_store_when_none_is_named(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'history = "sqlite:///{tmp_path / "history.db"}"\n')
    monkeypatch.setenv("PREFLIGHT_CONFIG", str(cfg))
    monkeypatch.delenv("PREFLIGHT_HISTORY", raising=False)
    with pytest.raises(SuspectHardware):
        Job(seed=1, corruption=Corruption(step=15)).train(30, _replay(tmp_path, history=None))
    assert [r.node for r in _history(tmp_path)] == ["gpu007"]
    monkeypatch.setenv("PREFLIGHT_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(SuspectHardware):
        Job(seed=1, corruption=Corruption(step=15)).train(30, _replay(tmp_path, history=None))
    why = _events(tmp_path)[-1]["facts"]["history"]
    assert why.startswith("not recorded: UsageError: config file") and "missing.toml" in why


def test_an_uncaught_suspect_hardware_ends_the_process_with_its_code(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = ("import torch; torch.set_num_threads(1)\n"
            "from preflight.runtime.replay import Replay\n"
            "from tests.runtime._replay_job import Corruption, Job\n"
            f"Job(seed=1, corruption=Corruption(step=15)).train(30, Replay(run_dir={str(tmp_path)!r}, "
            "history='off', exit_code=79))\n")
    root = Path(__file__).resolve().parents[2]
    p = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert p.returncode == 79, p.stderr
    assert "Traceback" not in p.stderr


# ----- deterministic faults: the data ------------------------------------------------------------


def test_a_nan_in_the_batch_is_the_data_and_stops_by_default(tmp_path: Path) -> None:
    rep = _replay(tmp_path)
    with pytest.raises(ReproducibleFault) as info:
        Job(seed=2, nan_at=21).train(STEPS, rep)
    assert (info.value.step, info.value.trigger, info.value.ranks) == (21, "nonfinite-loss", [0])
    assert "not the hardware" in str(info.value)
    ev = _events(tmp_path)
    assert len(ev) == 1 and ev[0]["status"] == "fail" and ev[0]["facts"]["cause"] == "data"
    assert ev[0]["facts"]["action"] == "stop" and "(same)" in ev[0]["evidence"][0]
    assert _history(tmp_path) == []  # the data is no node's fault


def test_skip_drops_the_bad_step_and_trains_on(tmp_path: Path) -> None:
    rep = _replay(tmp_path, on_data="skip")
    job = Job(seed=2, nan_at=21)
    losses = job.train(STEPS, rep)
    assert job.skipped == [21] and len(losses) == STEPS - 1 and all(math.isfinite(v) for v in losses)
    # the same as a run that computed step 21 (its dropout draws) and did not apply it
    plain = Job(seed=2)
    plain.train(21, None)
    plain.compute_for(21)()
    plain.train(STEPS, None, start=22)
    assert losses == plain.losses
    ev = _events(tmp_path)
    assert [(e["status"], e["facts"]["action"]) for e in ev] == [("warn", "skip")]


def test_a_reproduced_loss_spike_is_reported_and_applied_by_default(tmp_path: Path) -> None:
    rep = _replay(tmp_path)  # on_data="stop" is for NaN/Inf; a spike follows on_spike="report"
    job = Job(seed=4, spike_at=30)
    job.train(STEPS, rep)
    assert job.skipped == [] and [(o.step, o.trigger, o.cause, o.apply) for o in rep.replays] == \
        [(30, "loss-spike", "data", True)]  # once: the steps after it, still high, are one run of spikes
    ev = _events(tmp_path)
    assert len(ev) == 1 and ev[0]["status"] == "warn" and "reported, applied" in ev[0]["summary"]
    assert ev[0]["facts"]["policy"] == "report"


def test_a_loss_spike_can_skip_or_stop(tmp_path: Path) -> None:
    job = Job(seed=4, spike_at=30)
    job.train(STEPS, _replay(tmp_path, on_spike="skip"))
    assert job.skipped == [30]
    with pytest.raises(ReproducibleFault) as info:
        Job(seed=4, spike_at=30).train(STEPS, _replay(tmp_path, on_spike="stop"))
    assert (info.value.step, info.value.trigger) == (30, "loss-spike")


def test_report_never_applies_non_finite_gradients(tmp_path: Path) -> None:
    rep = _replay(tmp_path, on_data="report")
    job = Job(seed=2, nan_at=12)
    job.train(20, rep)
    assert job.skipped == [12] and all(torch.isfinite(p).all() for p in job.model.parameters())


def test_a_given_loss_guard_that_raises_is_still_a_trigger(tmp_path: Path) -> None:
    guard = LossGuard(raise_on_nonfinite=True, rank=0)
    rep = _replay(tmp_path, guard=guard, on_data="skip")
    job = Job(seed=2, nan_at=14)
    job.train(20, rep)
    assert job.skipped == [14] and rep.replays[0].trigger == "nonfinite-loss"


# ----- the 10/10: seeded injections against deterministic faults -----------------------------------


def test_ten_corruptions_and_ten_bad_batches_are_told_apart(tmp_path: Path) -> None:
    hardware = data = 0
    for seed in range(10):
        c = Corruption.seeded(seed, 30)
        try:
            Job(seed=seed, corruption=c).train(30, Replay(history="off"))
        except SuspectHardware as exc:
            hardware += exc.step == c.step
        try:
            Job(seed=seed, nan_at=12 + seed).train(30, Replay(history="off"))
        except ReproducibleFault as exc:
            data += exc.step == 12 + seed
    assert (hardware, data) == (10, 10)


# ----- digests and bad input -------------------------------------------------------------------------


def test_one_bit_anywhere_changes_the_digest_and_nan_payloads_do_not() -> None:
    t = torch.randn(1000)
    base = tensor_bits(t)
    for i in (0, 499, 999):
        u = t.clone()
        u.view(torch.int32)[i] ^= 1  # the least significant mantissa bit
        assert tensor_bits(u)[0] != base[0]
    swapped = t.clone()
    swapped[[3, 4]] = t[[4, 3]]
    assert tensor_bits(swapped)[0] == base[0] and tensor_bits(swapped)[1] != base[1]
    a, b = torch.zeros(4), torch.zeros(4)
    a[1] = float("nan")
    b.view(torch.int32)[1] = 0x7FC00001  # another NaN payload
    assert tensor_bits(a) == tensor_bits(b)
    for dtype in (torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.complex64):
        assert isinstance(tensor_bits(torch.ones(3, dtype=dtype))[0], int)
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.ones(3)
    assert digest(1.0, [p]) == digest(1.0, [p]) != digest(float("nan"), [p])


def test_bad_settings_and_odd_steps_give_clear_results(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="on_data must be one of stop, skip, report"):
        Replay(on_data="ignore")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="on_spike must be one of stop, skip, report"):
        Replay(on_spike="warn")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="compute\\(\\) must return the loss"):
        Replay(history="off").step(0, lambda: None, [])
    rep = Replay(history="off")
    assert rep.step(0, lambda: 1.5, []).apply  # a float loss, no parameters
    w = torch.nn.Parameter(torch.ones(2))
    with pytest.raises(ReproducibleFault) as info:  # a NaN float loss, parameters without gradients
        rep.step(1, lambda: float("nan"), [w])
    assert info.value.trigger == "nonfinite-loss"


def test_a_compute_that_raises_on_the_replay_only_is_said_and_re_raised(tmp_path: Path) -> None:
    rep = _replay(tmp_path)
    w = torch.nn.Parameter(torch.ones(3))
    calls: list[int] = []

    def compute() -> torch.Tensor:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        loss = (w * float("nan")).sum()
        loss.backward()
        return loss

    with pytest.raises(RuntimeError, match="illegal memory access"):
        rep.step(7, compute, [w])
    ev = _events(tmp_path)
    assert len(ev) == 1 and ev[0]["status"] == "error" and ev[0]["facts"]["cause"] == "undetermined"
    assert "rank 0: the replay raised RuntimeError: CUDA error" in ev[0]["summary"]


def test_a_history_store_that_cannot_be_written_does_not_hide_the_verdict(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    rep = _replay(tmp_path, history=f"sqlite:///{blocker / 'h.db'}")
    with pytest.raises(SuspectHardware):
        Job(seed=1, corruption=Corruption(step=15)).train(30, rep)
    ev = _events(tmp_path)[0]
    assert ev["status"] == "fail" and ev["facts"]["history"].startswith("not recorded: HistoryError: ")
