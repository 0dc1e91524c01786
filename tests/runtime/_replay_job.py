"""A tiny deterministic training job for the replay tests and benchmark.

An MLP with dropout (so a replay must restore the RNG) and optionally a BatchNorm (so it must
restore buffers), batches derived from (seed, step, rank), SGD. Faults to inject:
- `Corruption`: a one-time change of one element of one parameter's local gradient, at one
  step (a backward hook, so the replay of that step is clean): "nan", "inf" or "bitflip"
  (bit 30 of the float32: the exponent jumps by 128);
- `nan_at`: the batch of that step holds a NaN (deterministic: every run of the step sees it);
- `spike_at`: the batch of that step has its targets x `spike_scale` (a deterministic loss spike).
`train(...)` runs the loop through a `Replay` (or plainly with `replay=None`) and returns the
losses of the applied steps; `reduce` (a callable over the parameters) is the all-reduce of a
process group.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from preflight.runtime.replay import Replay

DIM = 16


def model_for(seed: int, batchnorm: bool = False, hidden: int = 32) -> nn.Module:
    torch.manual_seed(seed)
    layers: list[nn.Module] = [nn.Linear(DIM, hidden)]
    if batchnorm:
        layers.append(nn.BatchNorm1d(hidden))
    layers += [nn.Tanh(), nn.Dropout(0.2), nn.Linear(hidden, 1)]
    return nn.Sequential(*layers)


def batch(seed: int, step: int, rank: int, size: int = 32, dim: int = DIM) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed * 1_000_003 + step * 101 + rank)
    x = torch.randn(size, dim, generator=g)
    y = x[:, :1] * 0.5 + 0.1 * torch.randn(size, 1, generator=g)
    return x, y


@dataclass
class Corruption:
    """One-time corruption of element `index` of parameter `param`'s gradient at `step` on `rank`."""

    step: int
    rank: int = 0
    kind: str = "nan"  # nan, inf, bitflip
    param: int = 0
    index: int = 0
    fired: list[int] = field(default_factory=list)

    def hook(self, current: Callable[[], tuple[int, int]]) -> Callable[[torch.Tensor], torch.Tensor]:
        def fn(grad: torch.Tensor) -> torch.Tensor:
            step, rank = current()
            if self.fired or step != self.step or rank != self.rank:
                return grad
            self.fired.append(step)
            g = grad.clone().reshape(-1)
            i = self.index % g.numel()
            if self.kind == "nan":
                g[i] = float("nan")
            elif self.kind == "inf":
                g[i] = float("inf")
            else:
                bits = g.view(torch.int32)
                bits[i] = bits[i] ^ (1 << 30)
            return g.reshape(grad.shape)
        return fn

    @classmethod
    def seeded(cls, seed: int, steps: int, ranks: int = 1, kind: str | None = None) -> Corruption:
        r = random.Random(seed)
        return cls(step=r.randrange(12, steps - 2), rank=r.randrange(ranks),
                   kind=kind or r.choice(["nan", "inf", "bitflip"]), param=r.randrange(4), index=r.randrange(16))


@dataclass
class Job:
    seed: int = 0
    rank: int = 0
    batchnorm: bool = False
    hidden: int = 32
    batch_size: int = 32
    lr: float = 0.05
    corruption: Corruption | None = None
    nan_at: int | None = None
    spike_at: int | None = None
    spike_scale: float = 20.0
    losses: list[float] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    step_now: int = -1

    def __post_init__(self) -> None:
        self.model = model_for(self.seed, self.batchnorm, self.hidden)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=self.lr)
        if self.corruption is not None:
            params = [p for p in self.model.parameters() if p.requires_grad]
            params[self.corruption.param % len(params)].register_hook(
                self.corruption.hook(lambda: (self.step_now, self.rank)))

    def compute_for(self, step: int) -> Callable[[], torch.Tensor]:
        x, y = batch(self.seed, step, self.rank, self.batch_size, DIM)
        if self.nan_at == step:
            x[3, 5] = float("nan")
        if self.spike_at == step:
            y = y * self.spike_scale

        def compute() -> torch.Tensor:
            loss = nn.functional.mse_loss(self.model(x), y)
            loss.backward()
            return loss
        return compute

    def train(self, steps: int, replay: Replay | None, reduce: Callable[[nn.Module], Any] | None = None,
              start: int = 0) -> list[float]:
        self.model.train()
        for step in range(start, steps):
            self.step_now = step
            compute = self.compute_for(step)
            if replay is None:
                self.opt.zero_grad(set_to_none=True)
                loss = compute()
                apply = True
            else:
                out = replay.step(step, compute, self.model)
                loss, apply = out.loss, out.apply
            if not apply:
                self.skipped.append(step)
                continue
            if reduce is not None:
                reduce(self.model)
            self.opt.step()
            self.losses.append(float(loss.detach()))
        return self.losses
