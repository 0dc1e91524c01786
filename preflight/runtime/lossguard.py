"""Loss guard: stop at the first non-finite loss, warn on loss spikes.

    guard = LossGuard()                 # spikes: 3x the expected loss, 6 robust sigmas, the tail
    for step, batch in enumerate(loader):
        loss = forward_backward(batch)
        guard.check(step, loss)         # raises NonFiniteLoss at the step the NaN appears
        optimizer.step()

`check(step, loss)` raises `NonFiniteLoss` (naming the step and the rank) when the loss is
NaN or infinite, before the optimizer applies the bad gradients: the job stops at step k,
where the NaN appeared, and restarts from the last good checkpoint. With
`raise_on_nonfinite=False` it returns "nonfinite" instead and the loop decides.
A spike is judged on a log scale (loss noise is multiplicative) against the loss expected
at this step: the median of the last 16 log-losses carried forward by their slope (the median
of the 16 before gives it), so a fast-falling curve is followed; the median of the whole
window lagged it (on a curve falling 3x over the window a 3x spike looked like 1.7x and was
missed). A loss is a spike when its excess over that expectation is at least the largest of
three bars: `spike_factor` times the expected loss; `spike_sigmas` robust sigmas of the noise;
and the tail of the noise. The noise is measured on each log-loss against the median of the
9 around it (a bend or a fast fall is no noise there, a lone outlier is), over the last
`tail_memory` steps, spikes left out. Its sigma is their MAD; its tail, the power law through
their 90th and 99th percentiles (of |residual|), carried out to `false_alarm_rate` per step:
with heavy-tailed noise (Student-t, rare hard batches) a loss several MADs out is routine and
the bar rises with the tail, with normal noise the tail bar stays near 7 sigmas (so 3x decides
under 10% noise). The tail is measured once `TAIL_MIN` (200) residuals are kept; before, the
factor and sigma bars apply. Whatever the noise, a loss `catch_factor` (9) times the expected
one is a spike: the sigma and tail bars stop there (just after the tail is first measured, a
few large residuals of heavy noise put it at 15-150x, which let 10x spikes pass; 9 rather than
10 so that a loss 10x its true curve clears the bar despite the expected loss's own error;
None: no cap). Measured (`benchmarks/bench_detectors.py`, BENCHMARKS.md).
Checked once `warmup_steps` losses have been seen and a few noise residuals exist; "spike" is
returned and a warning event written for the first step of each run of spikes (every spike
is kept in `spikes`); otherwise "ok". A non-positive loss leaves the spike test out (it is a
ratio) until positive losses have refilled the reference. Cost: O(1) amortised per check
(two medians of 16 and one of 9; the bar is recomputed after a twentieth of the residuals).

`sync=True` all-reduces a per-rank non-finite flag every check (one small collective) so
that every rank stops at the same step, and the exception names every rank that saw it;
without it only the rank with the NaN stops (its launcher then ends the others).
Every call of check() must then happen on every rank, the collective matching.
"""

from __future__ import annotations

import itertools
import logging
import math
import statistics
import sys
from collections import deque
from collections.abc import Sequence
from typing import Any, Literal

from preflight.model import Status
from preflight.runtime.events import EventWriter, env_rank

log = logging.getLogger("preflight.runtime")

CHECK = "runtime.loss"
Decision = Literal["ok", "spike", "nonfinite"]
MAD_TO_SIGMA = 1.4826  # the MAD of a normal distribution times this is its standard deviation
LEVEL_SPAN = 16  # the reference: the median of the last 16 log-losses, carried forward by the slope
TAIL_MEMORY = 1000  # residuals kept to measure the noise and its tail
TAIL_MIN = 200  # residuals needed before the tail is measured (its 99th percentile)
TAIL_ALPHA_MIN, TAIL_ALPHA_MAX = 1.5, 8.0  # the tail's power-law exponent, bounded
NOISE_HALF = 4  # the noise: a log-loss against the median of the 9 around it
# the MAD of those residuals is 0.87 sigma for a normal noise, that of the one-step-ahead
# residual (the reference's own error included) 1.11 sigma: their ratio (measured, 200k draws)
NOISE_SIGMA_GAIN = 1.28
MIN_RESIDUALS = 5  # noise residuals needed before any loss is judged a spike
BAR_REFRESH_DIV = 20  # the bar is recomputed after len(residuals) / 20 new ones
FALSE_ALARM_RATE = 1e-4  # the tail bar: a noise this rare per step (both tails) is taken for a spike
# a loss this many times the expected one is a spike whatever the noise: the tail bar of a
# Student-t noise of 2 degrees of freedom at 5% is about 150x, and just after it is first
# measured (about step 215) from a few large residuals it overshoots, which let 10x spikes pass;
# 9, not 10: the expected loss has its own error (a few % under heavy noise), and a loss 10x
# the true curve must clear the bar every time, not half of the time
CATCH_FACTOR = 9.0


def trend_reference(logs: Sequence[float], k: int = LEVEL_SPAN) -> float | None:
    """The expected log-loss of the next step from recent log-losses (oldest first), or None
    (fewer than 2). Pure, O(k). The level is the median of the last k; the slope, the difference
    of that median and the one of the k before, per step; the level is carried forward by the
    slope to the next step. A falling curve is followed (the median of a long window lags it:
    on a curve that falls 3x over the window a 3x spike looked like 1.7x), and medians keep one
    outlier (or a spike) from moving the reference."""
    n = len(logs)
    if n < 2:
        return None
    k = max(1, min(int(k), n // 2))
    recent = list(itertools.islice(logs, n - k, n))
    level = statistics.median(recent)
    if n < 2 * k or k < 2:
        return level
    before = statistics.median(itertools.islice(logs, n - 2 * k, n - k))
    return level + (level - before) / k * (k + 1) / 2.0


def spike_bar(residuals: Sequence[float], spike_factor: float, spike_sigmas: float,
              false_alarm_rate: float = FALSE_ALARM_RATE,
              sigma_gain: float = 1.0, catch_factor: float | None = None) -> tuple[float, float, float]:
    """(bar, sigma, tail) in log-loss units from noise residuals (a log-loss minus the median
    around it; centred on zero by construction). Pure, O(n log n). A loss is a spike when its
    excess over the expected log-loss is at least `bar`, the largest of:
      - log(spike_factor): at least that many times the expected loss;
      - spike_sigmas x sigma, sigma the MAD of the residuals scaled to a normal's sigma (times
        `sigma_gain`: the guard's noise residuals are narrower than a one-step prediction's);
      - the tail bar: heavy-tailed noise (Student-t, rare hard batches) puts a few losses far
        beyond any number of MADs. Its high quantiles (90th and 99th of |residual|) give the
        tail's decay, a power law, and that law carried out to `false_alarm_rate` (of steps,
        both tails) is the bar: about 7 sigmas for a normal noise, about 100 times its scale
        for a Student-t of 2 degrees of freedom. Measured once TAIL_MIN residuals are kept
        (before, a 99th percentile is a guess: one early outlier must not blind the guard).
    With `catch_factor`, the sigma and tail bars stop at log(catch_factor): a loss that many
    times the expected one is a spike however heavy the noise (None: no such cap).
    """
    n = len(residuals)
    if n < 2:
        return math.log(spike_factor), 0.0, 0.0
    dev = sorted(map(abs, residuals))
    sigma = MAD_TO_SIGMA * dev[n // 2] * sigma_gain
    tail = 0.0
    if n >= TAIL_MIN:
        q90, q99 = dev[int(0.90 * n)], dev[int(0.99 * n)]
        if q90 > 0 and q99 > q90:
            alpha = min(TAIL_ALPHA_MAX, max(TAIL_ALPHA_MIN, math.log(10.0) / math.log(q99 / q90)))
            tail = q99 * (0.01 / false_alarm_rate) ** (1.0 / alpha)
    bar = max(math.log(spike_factor), spike_sigmas * sigma, tail)
    if catch_factor is not None:
        bar = min(bar, max(math.log(spike_factor), math.log(catch_factor)))
    return bar, sigma, tail


class NonFiniteLoss(FloatingPointError):
    """The loss was NaN or infinite at `step` on `ranks` (this rank first when it saw it)."""

    def __init__(self, step: int, rank: int, value: float, ranks: list[int]) -> None:
        self.step = step
        self.rank = rank
        self.value = value
        self.ranks = ranks
        where = ", ".join(str(r) for r in ranks) or str(rank)
        super().__init__(f"non-finite loss ({value}) at step {step} on rank(s) {where} "
                         f"(raised on rank {rank}); restart from the last checkpoint before step {step}")


def _as_float(loss: Any) -> float:
    if hasattr(loss, "detach"):
        loss = loss.detach()
        if getattr(loss, "numel", lambda: 1)() != 1:
            loss = loss.float().sum()
        return float(loss.item())
    return float(loss)


class LossGuard:
    """Non-finite loss detection and spike warnings; see the module docstring.

    `window`: how many recent losses `self.window` keeps, as given (for reading; the spike
    reference uses the last 32 log-losses); `tail_memory`: how many noise residuals measure the
    noise and its tail; `false_alarm_rate`: the per-step rate of the noise's tail taken for a
    spike (lower: fewer warnings under heavy-tailed noise, fewer spikes caught there)."""

    def __init__(self, spike_factor: float = 3.0, window: int = 100, events: EventWriter | None = None, *,
                 warmup_steps: int = 10, sync: bool = False, raise_on_nonfinite: bool = True,
                 group: Any = None, rank: int | None = None, spike_sigmas: float = 6.0,
                 tail_memory: int = TAIL_MEMORY, false_alarm_rate: float = FALSE_ALARM_RATE,
                 catch_factor: float | None = CATCH_FACTOR) -> None:
        self.spike_factor = max(1.0, float(spike_factor))
        self.spike_sigmas = max(0.0, float(spike_sigmas))
        self.false_alarm_rate = min(0.01, max(1e-12, float(false_alarm_rate)))
        self.catch_factor = None if catch_factor is None else max(1.0, float(catch_factor))
        self.window: deque[float] = deque(maxlen=max(1, int(window)))  # the last losses, as given
        span = max(2 * LEVEL_SPAN, 2 * NOISE_HALF + 1)
        self._logs: deque[float] = deque(maxlen=span)  # the last log-losses, for the reference
        self._flagged: deque[bool] = deque(maxlen=span)  # which of them were spikes
        self._resid: deque[float] = deque(maxlen=max(TAIL_MIN, int(tail_memory)))  # noise residuals
        self._bar: tuple[float, float, float] | None = None
        self._bar_age = 0
        self.warmup_steps = int(warmup_steps)
        self.events = events
        self.sync = sync
        self.raise_on_nonfinite = raise_on_nonfinite
        self.group = group
        self._rank = rank
        self.seen = 0
        self.spikes: list[tuple[int, float]] = []
        self._flags: Any = None
        self._in_spike = False

    @property
    def rank(self) -> int:
        if self._rank is not None:
            return self._rank
        dist = _dist()
        return int(dist.get_rank()) if dist is not None else env_rank()

    def check(self, step: int, loss: Any) -> Decision:
        """Classify this step's loss: "ok", "spike", or NaN/Inf (raise, or "nonfinite")."""
        try:
            value = _as_float(loss)
        except (TypeError, ValueError, RuntimeError) as exc:
            log.warning("preflight: loss guard cannot read the loss at step %s: %s", step, exc)
            value = math.nan
        finite = math.isfinite(value)
        bad_ranks = [self.rank] if not finite else []
        if self.sync:
            bad_ranks = self._sync_flags(not finite, bad_ranks)
        if bad_ranks:
            return self._nonfinite(step, value, bad_ranks)
        decision: Decision = "ok"
        ref = trend_reference(self._logs) if value > 0 else None
        resid = math.log(value) - ref if ref is not None else None
        if resid is not None and self.seen >= self.warmup_steps and len(self._resid) >= MIN_RESIDUALS:
            bar = self.bar()
            if resid >= bar[0]:
                decision = "spike"
                self.spikes.append((step, value))
                if not self._in_spike:
                    self._warn(step, value, math.exp(ref or 0.0), bar)
        if value > 0:
            self._logs.append(math.log(value))
            self._flagged.append(decision == "spike")
            self._measure_noise()
        else:  # a ratio test: non-positive losses leave it out until positive ones fill in again
            self._logs.clear()
            self._flagged.clear()
            self._resid.clear()
            self._bar = None
        self._in_spike = decision == "spike"
        self.window.append(value)
        self.seen += 1
        return decision

    def _measure_noise(self) -> None:
        """Keep the residual of the log-loss NOISE_HALF steps back against the median of the
        log-losses around it (NOISE_HALF on each side): on a monotone curve that median is the
        curve itself, so a fast fall or a bend is not taken for noise (a one-step-ahead
        residual would be, and would inflate the tail), while a lone outlier stands out. A
        step flagged as a spike and the warm-up steps are left out."""
        n = len(self._logs)
        span = 2 * NOISE_HALF + 1
        if n < span or self._flagged[n - NOISE_HALF - 1] or self.seen - NOISE_HALF < self.warmup_steps:
            return  # too few yet, a spike, or a warm-up step (early losses jump around)
        around = list(itertools.islice(self._logs, n - span, n))
        self._resid.append(around[NOISE_HALF] - statistics.median(around))
        self._bar_age += 1

    def bar(self) -> tuple[float, float, float]:
        """(bar, sigma, tail) of `spike_bar` over the residuals kept, recomputed once
        every twentieth of their number (O(1) amortised per step; the noise is stationary on a
        log scale over that span)."""
        if self._bar is None or self._bar_age >= max(1, len(self._resid) // BAR_REFRESH_DIV):
            self._bar = spike_bar(self._resid, self.spike_factor, self.spike_sigmas, self.false_alarm_rate,
                                  NOISE_SIGMA_GAIN, self.catch_factor)
            self._bar_age = 0
        return self._bar

    def _warn(self, step: int, value: float, expected: float, bar: tuple[float, float, float]) -> None:
        limit, sigma, tail = bar
        threshold = expected * math.exp(limit)
        caught = self.catch_factor is not None and limit == math.log(self.catch_factor) < max(tail, sigma * self.spike_sigmas)
        which = (f"{self.catch_factor:g} x the expected loss (always a spike, whatever the noise)" if caught else
                 "the tail of this run's noise" if limit == tail else
                 f"{self.spike_sigmas:g} robust sigmas" if limit > math.log(self.spike_factor) else
                 f"{self.spike_factor:g} x the expected loss")
        self._emit(Status.WARN, f"loss spike at step {step}: {value:.4g} is {value / expected:.1f} x the "
                   f"expected loss {expected:.4g} (flagged from {threshold:.4g})", step,
                   evidence=[f"step {step}: loss {value:.6g}",
                             f"expected from the recent trend (median of the last {len(self._logs) // 2} "
                             f"log-losses carried forward by their slope): {expected:.6g}; noise "
                             f"{sigma * 100:.1f}% (robust sigma of log loss over {len(self._resid)} steps)",
                             f"a spike: >= {self.spike_factor:g} x the expected loss, >= {self.spike_sigmas:g} "
                             f"sigmas, and beyond the noise's tail at {self.false_alarm_rate:g} per step; "
                             f"this one was held to {which}"],
                   remedy="watch the next steps; if the loss does not recover, restart from the last "
                          "checkpoint with a lower learning rate or skip the offending batch",
                   facts={"loss": value, "typical": expected, "expected": expected,
                          "ratio": round(value / expected, 4), "log_sigma": round(sigma, 6),
                          "log_tail": round(tail, 6), "threshold": threshold, "spike_factor": self.spike_factor,
                          "spike_sigmas": self.spike_sigmas, "window": len(self._resid)})

    def _nonfinite(self, step: int, value: float, ranks: list[int]) -> Decision:
        me = self.rank
        mine = me in ranks
        summary = (f"non-finite loss ({value}) at step {step} on rank {me}" if mine else
                   f"non-finite loss at step {step} on rank(s) {', '.join(map(str, ranks))}; rank {me} stops too")
        self._emit(Status.FAIL, summary, step,
                   evidence=[f"step {step}: loss {value} on rank {me}",
                             f"ranks with a non-finite loss: {ranks}"],
                   remedy=f"restart from the last checkpoint before step {step}; if it repeats at the same step, "
                          "inspect that batch (data) or lower the learning rate; if it moves between runs on "
                          "one node, test that GPU (ECC, `nvidia-smi -q`)",
                   facts={"loss": None if math.isnan(value) else value, "value": str(value), "ranks": ranks,
                          "nonfinite": True})
        if self.raise_on_nonfinite:
            raise NonFiniteLoss(step, me, value, ranks)
        return "nonfinite"

    def _sync_flags(self, bad: bool, local: list[int]) -> list[int]:
        dist = _dist()
        if dist is None:
            return local
        try:
            import torch

            world = dist.get_world_size(self.group)
            if self._flags is None or self._flags.numel() != world:
                dev: Any = "cpu"
                if "nccl" in str(dist.get_backend(self.group)).lower():
                    dev = torch.device("cuda", torch.cuda.current_device())
                self._flags = torch.zeros(world, dtype=torch.int32, device=dev)
            self._flags.zero_()
            if bad:
                self._flags[dist.get_rank(self.group)] = 1
            dist.all_reduce(self._flags, group=self.group)
            return [i for i, f in enumerate(self._flags.tolist()) if f]
        except Exception as exc:  # noqa: BLE001 - the local verdict still stands
            log.warning("preflight: loss guard could not share the NaN flag: %s", exc)
            return local

    def _emit(self, status: Status, summary: str, step: int, **kw: Any) -> None:
        if self.events is None:
            return
        self.events.emit(CHECK, status, summary, step=step, **kw)


def _dist() -> Any:
    dist = sys.modules.get("torch.distributed")  # a job that did not import it has no group
    if dist is None:
        return None
    if dist.is_available() and dist.is_initialized():
        return dist
    return None
