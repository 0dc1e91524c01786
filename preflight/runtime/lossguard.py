"""Loss guard: stop at the first non-finite loss, warn on loss spikes.

    guard = LossGuard()                 # spikes: 3x the typical loss, and 6 robust sigmas
    for step, batch in enumerate(loader):
        loss = forward_backward(batch)
        guard.check(step, loss)         # raises NonFiniteLoss at the step the NaN appears
        optimizer.step()

`check(step, loss)` raises `NonFiniteLoss` (naming the step and the rank) when the loss is
NaN or infinite, before the optimizer applies the bad gradients: the job stops at step k,
where the NaN appeared, and restarts from the last good checkpoint. With
`raise_on_nonfinite=False` it returns "nonfinite" instead and the loop decides.
A spike is measured against a robust reference of the last `window` losses: their median
(the typical loss) and their spread, both on a log scale (loss noise is multiplicative). The
spread is the MAD of successive log-differences, so the fast drop of early training is trend,
not noise. A loss is a spike when it is at least `spike_factor` times the typical loss *and*
`spike_sigmas` robust standard deviations above it: on a curve with a few percent of noise,
3x is flagged; on a very noisy one the bar rises with the noise. The largest recent loss is
not the reference (it was: one early high loss in the window hid a 10x or 15x spike). Checked
once `warmup_steps` losses have been seen; "spike" is returned and a warning event written
for the first step of each run of spikes (every spike is kept in `spikes`); otherwise "ok".
Non-positive losses (in the window or now) leave the spike test out (it is a ratio).

`sync=True` all-reduces a per-rank non-finite flag every check (one small collective) so
that every rank stops at the same step, and the exception names every rank that saw it;
without it only the rank with the NaN stops (its launcher then ends the others).
Every call of check() must then happen on every rank, the collective matching.
"""

from __future__ import annotations

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


def spike_reference(window: Sequence[float]) -> tuple[float, float] | None:
    """(typical loss, robust sigma of its log) of recent losses, or None (too few, or a
    non-positive one). Pure. The sigma is the MAD of successive differences of log(loss),
    divided by sqrt(2): noise, with a steady trend taken out."""
    if len(window) < 2 or min(window) <= 0:
        return None
    logs = [math.log(v) for v in window]
    diffs = [b - a for a, b in zip(logs, logs[1:], strict=False)]
    med = statistics.median(diffs)
    sigma = MAD_TO_SIGMA * statistics.median(abs(d - med) for d in diffs) / math.sqrt(2.0)
    return statistics.median(window), sigma


def is_spike(value: float, reference: tuple[float, float] | None, spike_factor: float,
             spike_sigmas: float) -> bool:
    """A loss at least spike_factor x the typical one and spike_sigmas robust sigmas above it."""
    if reference is None or not value > 0:
        return False
    typical, sigma = reference
    rise = math.log(value) - math.log(typical)
    return rise >= max(math.log(spike_factor), spike_sigmas * sigma)


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
    """Non-finite loss detection and spike warnings; see the module docstring."""

    def __init__(self, spike_factor: float = 3.0, window: int = 100, events: EventWriter | None = None, *,
                 warmup_steps: int = 10, sync: bool = False, raise_on_nonfinite: bool = True,
                 group: Any = None, rank: int | None = None, spike_sigmas: float = 6.0) -> None:
        self.spike_factor = max(1.0, float(spike_factor))
        self.spike_sigmas = max(0.0, float(spike_sigmas))
        self.window: deque[float] = deque(maxlen=max(1, int(window)))
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
        if self.seen >= self.warmup_steps and len(self.window) >= 2:
            ref = spike_reference(self.window)
            if is_spike(value, ref, self.spike_factor, self.spike_sigmas):
                assert ref is not None
                typical, sigma = ref
                decision = "spike"
                self.spikes.append((step, value))
                bar = typical * math.exp(max(math.log(self.spike_factor), self.spike_sigmas * sigma))
                if not self._in_spike:
                    self._emit(Status.WARN, f"loss spike at step {step}: {value:.4g} is {value / typical:.1f} x the "
                               f"typical loss {typical:.4g} (flagged from {bar:.4g})", step,
                               evidence=[f"step {step}: loss {value:.6g}",
                                         f"median of the last {len(self.window)} losses: {typical:.6g}; noise "
                                         f"{sigma * 100:.1f}% (robust sigma of log loss)",
                                         f"a spike: >= {self.spike_factor:g} x the median and "
                                         f">= {self.spike_sigmas:g} sigmas above it"],
                               remedy="watch the next steps; if the loss does not recover, restart from the last "
                                      "checkpoint with a lower learning rate or skip the offending batch",
                               facts={"loss": value, "typical": typical, "ratio": round(value / typical, 4),
                                      "log_sigma": round(sigma, 6), "threshold": bar,
                                      "spike_factor": self.spike_factor, "spike_sigmas": self.spike_sigmas,
                                      "window": len(self.window)})
        self._in_spike = decision == "spike"
        self.window.append(value)
        self.seen += 1
        return decision

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
