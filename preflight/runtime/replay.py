"""Replay: tell bad hardware from bad data by running a suspicious step a second time.

    replay = Replay(events=ev, on_data="skip")          # a NaN that repeats: skip the step
    for step in range(start, total):
        batch = next(loader)

        def compute():                                   # this rank's forward + backward, no collective
            loss = loss_fn(model(batch.x), batch.y)
            loss.backward()
            return loss

        out = replay.step(step, compute, model)          # SuspectHardware (exit 76) or ReproducibleFault
        if out.apply:
            all_reduce_gradients(model)                  # yours, as before (DDP: compute under no_sync())
            optimizer.step()

`step()` sets the gradients to None, saves the RNG state (CPU, and the current CUDA device's)
and the running statistics of the model's BatchNorm/InstanceNorm layers (the buffers a
forward pass changes; the model's parameters and these buffers are read once per model
object, `refresh()` reads them again), runs `compute()` and checks what it produced before
the optimizer sees it: the loss (NaN/Inf, and a spike by the `LossGuard`: the first step of a
run of spikes), this rank's *local* gradients (NaN/Inf, and a gradient-norm spike:
`grad_spike_factor` x the median norm of the last `grad_window` steps; one fused
`_foreach_norm` and one device-to-host copy for loss and norm). In a process group the ranks
agree on the trigger with one one-element all-reduce (MAX), so every rank takes the same
branch and nobody waits alone in a collective. Through `Resilience.forward_backward(compute,
model, average=True)` there is no such all-reduce: the gradients are copied into one flat
buffer (measured there), its tail carries a count per trigger kind, and the gradient
all-reduce is the agreement (`begin`, then `settle` with the agreed trigger); on a trigger the
rank's own gradients are still in place for the replay, and the replayed ones are averaged.

On a trigger (or every `audit_every` steps) every rank digests its gradients and loss bitwise
(an exact sum of the raw bits and a position-weighted sum per tensor, hashed; NaN payloads
made canonical), restores the RNG state and buffers, runs `compute()` again from the same
inputs and parameters, digests again, and the ranks exchange their digests (all_gather_object):
- a rank whose two runs differ computed the same function of the same inputs twice and got two
  answers: **suspect hardware** (silent data corruption) on that rank's node. Every rank writes
  a FAIL `runtime.replay` event naming the ranks and nodes; the lowest rank of each suspect node
  records a FAIL `runtime.replay` result for its node in the history store (`history=`, else
  $PREFLIGHT_HISTORY, else the site config's, else the default; command `runtime`;
  `preflight history` lists the node; the event's `facts.history` says where, or why not),
  and every rank raises `SuspectHardware`: a `SystemExit` with code 76
  (`EXIT_SUSPECT_HARDWARE`, distinct from the watchdog's 75 and preemption's 85), which a
  training loop can catch and which, uncaught, ends the process with that code and no
  traceback;
- every rank reproduced its result bit for bit: **the data or the model** (a batch with a NaN,
  a learning rate too high). What happens follows `on_data` for non-finite values and
  `on_spike` for a loss spike: `"stop"` raises `ReproducibleFault` (FAIL event); `"skip"`
  returns `apply=False`: the caller does not apply the step and trains on (WARN); `"report"`
  returns `apply=True` for a spike (WARN) and `apply=False` for non-finite values (NaN
  gradients are never applied). Defaults: a NaN stops (`on_data="stop"`), a spike is reported
  (`on_spike="report"`: healthy runs have spikes, a spike alone never ends a job). A reproduced
  gradient-norm spike or audit is no fault: applied (a spike is a WARN event, an audit writes
  nothing). Events list the ranks that triggered, differed or lacked a digest (at most 16).
- digests missing (a rank could not compute one): no verdict, an ERROR event naming why; the
  step is applied unless its values were non-finite.

Requirements of `compute()`: it uses the batch it closes over (never `next(loader)` inside:
a replay would see another batch), it is deterministic given the parameters, that batch and
the RNG state (`torch.use_deterministic_algorithms(True)` on GPUs), and it is free of
collectives (under DDP, run it in `no_sync()` and reduce after `step` returns). A fault that repeats identically on both
runs (a stuck bit) reads as data; a nondeterministic `compute` reads as hardware. A `compute()`
that raises on the replay only is an ERROR event on every rank naming the rank (so no peer
waits for it in the exchange) and its exception is re-raised. A replayed step takes about
twice as long: leave that room in a fixed watchdog step timeout ("auto" allows 5x).

Monitoring never breaks training: a failed digest, event, history write or agreement is logged
and leaves a result that says so. torch is imported only when `step` runs.
"""

from __future__ import annotations

import hashlib
import logging
import math
import numbers
import os
import socket
import statistics
import struct
import sys
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from preflight.model import Result, Status
from preflight.runtime.events import EventWriter, env_rank
from preflight.runtime.lossguard import LossGuard, NonFiniteLoss

log = logging.getLogger("preflight.runtime")

CHECK = "runtime.replay"
EXIT_SUSPECT_HARDWARE = 76  # distinct from the watchdog's 75 (hang) and preemption's 85 (saved, requeue)
OnData = Literal["stop", "skip", "report"]
ON_DATA = ("stop", "skip", "report")

# Triggers in priority order: the agreed trigger is the highest any rank saw.
TRIGGERS = ("", "audit", "grad-spike", "loss-spike", "nonfinite-grad", "nonfinite-loss")
NONFINITE = frozenset({"nonfinite-grad", "nonfinite-loss"})
BENIGN = frozenset({"audit", "grad-spike"})  # reproduced, these are no fault of the data


class SuspectHardware(SystemExit):
    """A rank computed the same step twice and got two results: suspect hardware on `nodes`.
    A SystemExit: catchable, and uncaught it ends the process with `code` (76 by default)."""

    def __init__(self, step: int, ranks: list[int], nodes: list[str], trigger: str,
                 code: int = EXIT_SUSPECT_HARDWARE) -> None:
        super().__init__(code)
        self.step, self.ranks, self.nodes, self.trigger = step, ranks, nodes, trigger
        self.message = (f"suspect hardware: step {step} replayed from the same inputs gave a different result on "
                        f"rank(s) {', '.join(map(str, ranks))} (node(s) {', '.join(nodes)}); trigger {trigger}")

    def __str__(self) -> str:
        return self.message


class ReproducibleFault(FloatingPointError):
    """The step's fault repeated bit for bit on replay: the data or the model, not the hardware."""

    def __init__(self, step: int, trigger: str, ranks: list[int]) -> None:
        self.step, self.trigger, self.ranks = step, trigger, ranks
        super().__init__(f"{trigger} at step {step} on rank(s) {', '.join(map(str, ranks))} repeated bit for bit on "
                         f"replay: the data or the model, not the hardware; inspect that step's batch or lower the "
                         f"learning rate, and restart from the last checkpoint before step {step}")


@dataclass
class StepOutcome:
    """What `Replay.step` decided. `apply`: apply this step's gradients (False: skip the update)."""

    step: int
    loss: Any
    apply: bool = True
    trigger: str = ""  # the agreed trigger, "" when nothing was suspicious
    cause: str = ""  # "", "data", "reproduced", "undetermined" (hardware raises)
    replayed: bool = False
    ranks: list[dict[str, Any]] = field(default_factory=list)  # every rank's digests, on a replay


@dataclass
class _Snapshot:
    cpu_rng: Any = None
    cuda_rng: Any = None
    cuda_device: int | None = None
    buffers: list[Any] = field(default_factory=list)
    saved: list[Any] = field(default_factory=list)


@dataclass
class Pending:
    """A step begun by `Replay.begin`: what `settle` needs. `local`: this rank's trigger."""

    step: int
    compute: Callable[[], Any]
    tensors: list[Any]
    snap: _Snapshot
    loss: Any
    value: float
    norm: float
    local: str
    flat: FlatGrads | None = None


@dataclass
class FlatGrads:
    """This rank's gradients copied into one flat buffer in parameter order (`size` elements),
    followed by `flat.numel() - size` slots for what rides along in the same all-reduce."""

    grads: list[Any]
    flat: Any
    size: int


class Replay:
    """Runs each step through `step()`; see the module docstring."""

    def __init__(self, events: EventWriter | None = None, run_dir: str | os.PathLike[str] | None = None, *,
                 on_data: OnData = "stop", on_spike: OnData = "report", history: str | None = None,
                 exit_code: int = EXIT_SUSPECT_HARDWARE,
                 guard: LossGuard | None = None, grad_spike_factor: float | None = 100.0, grad_window: int = 50,
                 warmup_steps: int = 10, audit_every: int = 0, group: Any = None, rank: int | None = None,
                 node: str | None = None, record_history: bool = True) -> None:
        for name, value in (("on_data", on_data), ("on_spike", on_spike)):
            if value not in ON_DATA:
                raise ValueError(f"{name} must be one of {', '.join(ON_DATA)}, not {value!r}")
        if events is None and run_dir is not None:
            events = EventWriter(run_dir, rank=rank, node=node)
        self.events = events
        self.on_data: OnData = on_data
        self.on_spike: OnData = on_spike
        self.history = history
        self.record_history = record_history
        self.exit_code = int(exit_code)
        self.guard = guard if guard is not None else LossGuard(raise_on_nonfinite=False, rank=rank)
        self.grad_spike_factor = grad_spike_factor
        self.grad_norms: deque[float] = deque(maxlen=max(2, int(grad_window)))
        self.warmup_steps = int(warmup_steps)
        self.audit_every = max(0, int(audit_every))
        self.group = group
        self._rank = rank
        self.node = node or (events.node if events is not None else socket.gethostname().split(".")[0])
        self.replays: list[StepOutcome] = []
        self._flag: Any = None
        self._spiking = False
        self._walked: tuple[Any, list[Any], list[Any]] | None = None
        self._decision = "ok"
        self.judged: tuple[int, Any, str] | None = None  # (step, loss, the guard's verdict), the last step begun

    @property
    def rank(self) -> int:
        if self._rank is not None:
            return self._rank
        dist = _dist()
        return int(dist.get_rank(self.group)) if dist is not None else env_rank()

    # ----- the step ----------------------------------------------------------------------
    def step(self, step: int, compute: Callable[[], Any], params: Any) -> StepOutcome:
        """Run `compute()` (zero grads first), check it, replay it on a trigger; see the docstring."""
        pending = self.begin(step, compute, params)
        return self.settle(pending, self._agree(pending.local))

    def begin(self, step: int, compute: Callable[[], Any], params: Any, flat_extra: int | None = None) -> Pending:
        """This rank's part of a step, no collective: snapshot, `compute()`, the local trigger.
        `settle(pending, trigger)` ends the step once the ranks agree on the trigger: `step()`
        agrees with one one-element all-reduce; a caller whose own collective follows (the
        gradient all-reduce) can carry `pending.local` in it (`TRIGGERS.index`, the highest
        wins) and must leave this rank's gradients unchanged until `settle` returns. With
        `flat_extra`, the gradients are also copied into one flat buffer (`pending.flat`, with
        that many zeroed slots after them) and measured there: the all-reduce's own copy."""
        tensors, norm_buffers = self._walk(params)
        snap = _snapshot(norm_buffers)
        loss = _run(compute, tensors)
        flat = _flatten(tensors, flat_extra) if flat_extra is not None else None
        value, norm = _measure_flat(loss, flat) if flat is not None else _measure(loss, tensors)
        local = self._local_trigger(step, value, norm)
        self.judged = (step, loss, self._decision)
        return Pending(step, compute, tensors, snap, loss, value, norm, local, flat)

    def settle(self, pending: Pending, trigger: str) -> StepOutcome:
        """End the step begun by `begin` under the trigger every rank agreed on ("" when none):
        nothing to do, or the replay, the exchange of digests (collective) and the verdict."""
        step, compute, tensors, loss, value, norm = (pending.step, pending.compute, pending.tensors, pending.loss,
                                                     pending.value, pending.norm)
        if not trigger:
            self._remember(norm)
            return StepOutcome(step, loss)
        local = pending.local
        first = _safe_digest(value, tensors)
        _restore(pending.snap)
        loss2, value2, norm2, failed = loss, math.nan, math.nan, None
        try:
            loss2 = _run(compute, tensors)
            value2, norm2 = _measure(loss2, tensors)
        except Exception as exc:  # the peers must still hear from this rank, then it is re-raised
            failed = exc
        second = None if failed is not None else _safe_digest(value2, tensors)
        mine = {"rank": self.rank, "node": self.node, "trigger": local, "first": first, "second": second,
                "loss": [_num(value), _num(value2)], "grad_norm": [_num(norm), _num(norm2)]}
        if failed is not None:
            mine["missing"] = f"rank {mine['rank']}: the replay raised {type(failed).__name__}: {failed}"
        ranks = self._exchange(mine)
        outcome = self._decide(step, trigger, ranks, loss2)
        if failed is not None:
            raise failed
        if outcome.apply:
            self._remember(norm2)
        self.replays.append(outcome)
        return outcome

    def _walk(self, params: Any) -> tuple[list[Any], list[Any]]:
        """(parameters, running-statistics buffers) of a module, read once per module object
        (walking a large model every step costs milliseconds); a list is read every step."""
        if self._walked is not None and self._walked[0] is params:
            return self._walked[1], self._walked[2]
        walked = _params(params), _norm_buffers(params)
        if hasattr(params, "parameters"):
            self._walked = (params, *walked)
        return walked

    def refresh(self) -> None:
        """Read the model's parameters and buffers again at the next step (after adding layers)."""
        self._walked = None

    def _local_trigger(self, step: int, value: float, norm: float) -> str:
        try:
            decision = self.guard.check(step, value)
        except NonFiniteLoss:
            decision = "nonfinite"
        except Exception as exc:  # noqa: BLE001 - a monitoring fault never stops training
            log.warning("preflight: replay: the loss guard failed at step %s: %s", step, exc)
            decision = "ok"
        self._decision = str(decision)
        if not math.isfinite(value) or decision == "nonfinite":
            return "nonfinite-loss"
        if not math.isfinite(norm):
            return "nonfinite-grad"
        spiking, self._spiking = self._spiking, decision == "spike"
        if decision == "spike" and not spiking:  # the first step of a run of spikes
            return "loss-spike"
        if self._grad_spike(norm):
            return "grad-spike"
        if self.audit_every and step % self.audit_every == 0:
            return "audit"
        return ""

    def _grad_spike(self, norm: float) -> bool:
        if not self.grad_spike_factor or len(self.grad_norms) < max(2, self.warmup_steps):
            return False
        typical = statistics.median(self.grad_norms)
        return typical > 0 and norm >= self.grad_spike_factor * typical

    def _remember(self, norm: float) -> None:
        if math.isfinite(norm):
            self.grad_norms.append(norm)

    # ----- agreement across ranks --------------------------------------------------------
    def _agree(self, local: str) -> str:
        """The highest trigger any rank saw (one one-element all-reduce); local when alone."""
        dist = _dist()
        if dist is None or dist.get_world_size(self.group) < 2:
            return local
        try:
            import torch

            if self._flag is None:
                dev: Any = "cpu"
                if "nccl" in str(dist.get_backend(self.group)).lower():
                    dev = torch.device("cuda", torch.cuda.current_device())
                self._flag = torch.zeros(1, dtype=torch.int32, device=dev)
            self._flag.fill_(TRIGGERS.index(local))
            dist.all_reduce(self._flag, op=dist.ReduceOp.MAX, group=self.group)
            return TRIGGERS[int(self._flag.item())]
        except Exception as exc:  # noqa: BLE001 - the local decision still stands
            log.warning("preflight: replay: the ranks could not agree on the trigger: %s", exc)
            return local

    def _exchange(self, mine: dict[str, Any]) -> list[dict[str, Any]]:
        dist = _dist()
        if dist is None or dist.get_world_size(self.group) < 2:
            return [mine]
        try:
            out: list[Any] = [None] * dist.get_world_size(self.group)
            dist.all_gather_object(out, mine, group=self.group)
            return [o for o in out if isinstance(o, dict)]
        except Exception as exc:  # noqa: BLE001
            log.warning("preflight: replay: the ranks could not exchange their digests: %s", exc)
            return [dict(mine, missing=f"digests of the other ranks not exchanged: {exc}")]

    # ----- verdicts ----------------------------------------------------------------------
    def _decide(self, step: int, trigger: str, ranks: list[dict[str, Any]], loss: Any) -> StepOutcome:
        differ = [r for r in ranks if r["first"] is not None and r["second"] is not None
                  and r["first"] != r["second"]]
        if differ:
            self._hardware(step, trigger, ranks, differ)  # raises
        missing = [r for r in ranks if r["first"] is None or r["second"] is None or r.get("missing")]
        if missing:
            return self._undetermined(step, trigger, ranks, missing, loss)
        return self._reproduced(step, trigger, ranks, loss)

    def _hardware(self, step: int, trigger: str, ranks: list[dict[str, Any]], differ: list[dict[str, Any]]) -> None:
        bad = sorted(int(r["rank"]) for r in differ)
        nodes = sorted({str(r["node"]) for r in differ})
        summary = (f"suspect hardware on {', '.join(nodes)}: step {step} ({trigger}) replayed from the same inputs "
                   f"gave a different result on rank(s) {', '.join(map(str, bad))}")
        evidence = [_line(r) for r in _notable(ranks)]
        remedy = (f"drain {', '.join(nodes)} and test its GPUs (`preflight run --hosts {','.join(nodes)}`, DCGM "
                  f"diagnostics level 3, ECC counters in `nvidia-smi -q`); resume from the last checkpoint "
                  f"without {'it' if len(nodes) == 1 else 'them'}")
        facts = {"step": step, "trigger": trigger, "cause": "hardware", "suspect_ranks": bad,
                 "suspect_nodes": nodes, "ranks": _notable(ranks),
                 "world": len(ranks), "exit_code": self.exit_code}
        facts["history"] = self._record(nodes, differ, summary, evidence, remedy, facts)
        self._emit(Status.FAIL, summary, step, evidence=evidence, remedy=remedy, facts=facts)
        raise SuspectHardware(step, bad, nodes, trigger, code=self.exit_code)

    def _reproduced(self, step: int, trigger: str, ranks: list[dict[str, Any]], loss: Any) -> StepOutcome:
        seen = sorted(int(r["rank"]) for r in ranks if r.get("trigger")) or [self.rank]
        evidence = [_line(r) for r in _notable(ranks)]
        facts: dict[str, Any] = {"step": step, "trigger": trigger, "ranks": _notable(ranks), "world": len(ranks),
                                 "trigger_ranks": seen}
        if trigger in BENIGN:
            if trigger == "grad-spike":
                self._emit(Status.WARN, f"gradient-norm spike at step {step} on rank(s) {_join(seen)} repeated bit "
                           "for bit on replay: not the hardware; applied", step, evidence=evidence,
                           remedy="watch the loss; clip gradients or lower the learning rate if spikes repeat",
                           facts=dict(facts, cause="reproduced", action="apply"))
            return StepOutcome(step, loss, True, trigger, "reproduced", True, ranks)
        policy = self.on_data if trigger in NONFINITE else self.on_spike
        action = {"stop": "stop", "skip": "skip"}.get(policy, "skip" if trigger in NONFINITE else "apply")
        status = Status.FAIL if action == "stop" else Status.WARN
        summary = (f"{trigger} at step {step} on rank(s) {_join(seen)} repeated bit for bit on replay: the data or "
                   f"the model, not the hardware; " + {"stop": "training stops", "skip": "the step's update is skipped",
                                                       "apply": "reported, applied"}[action])
        self._emit(status, summary, step, evidence=evidence,
                   remedy=f"inspect the batch of step {step} on rank(s) {_join(seen)} (NaN/Inf in the inputs, "
                          "labels out of range) or lower the learning rate; restart from the last checkpoint",
                   facts=dict(facts, cause="data", action=action, policy=policy))
        if action == "stop":
            raise ReproducibleFault(step, trigger, seen)
        return StepOutcome(step, loss, action == "apply", trigger, "data", True, ranks)

    def _undetermined(self, step: int, trigger: str, ranks: list[dict[str, Any]], missing: list[dict[str, Any]],
                      loss: Any) -> StepOutcome:
        why = "; ".join(str(r.get("missing") or f"rank {r['rank']} could not digest its gradients") for r in missing)
        apply = trigger not in NONFINITE
        self._emit(Status.ERROR, f"{trigger} at step {step}: replayed, but hardware or data cannot be told: {why}; "
                   + ("applied" if apply else "the step's update is skipped"), step,
                   evidence=[_line(r) for r in _notable(ranks)],
                   remedy="see the warning in this rank's log for the cause",
                   facts={"step": step, "trigger": trigger, "cause": "undetermined", "ranks": _notable(ranks),
                          "world": len(ranks), "why": why})
        return StepOutcome(step, loss, apply, trigger, "undetermined", True, ranks)

    # ----- outputs -----------------------------------------------------------------------
    def _emit(self, status: Status, summary: str, step: int, **kw: Any) -> None:
        if self.events is None:
            return
        try:
            self.events.emit(CHECK, status, summary, step=step, **kw)
        except Exception as exc:  # noqa: BLE001
            log.warning("preflight: replay: could not write the event: %s", exc)

    def _record(self, nodes: list[str], differ: list[dict[str, Any]], summary: str,
                evidence: list[str], remedy: str, facts: dict[str, Any]) -> str:
        """The lowest rank of each suspect node records a FAIL result for its node (once per
        node); what happened, in words, for the event."""
        first = {n: min(int(r["rank"]) for r in differ if r["node"] == n) for n in nodes}
        mine = [n for n, r in first.items() if r == self.rank]
        if not self.record_history:
            return "not recorded (record_history=False)"
        if not mine:
            return "recorded by " + ", ".join(f"rank {r} ({n})" for n, r in first.items())
        return record_suspects(mine, summary, evidence, remedy, facts, self.history)


def record_suspects(nodes: Iterable[str], summary: str, evidence: list[str], remedy: str, facts: dict[str, Any],
                    url: str | None = None) -> str:
    """Record a FAIL `runtime.replay` result per node in the history store: `url`, else
    $PREFLIGHT_HISTORY, else the site config's (`history`), else the default. Returns what
    happened in words ("recorded as run 3 in sqlite:///...", "not recorded: <why>"); never raises."""
    try:
        from preflight.engine import load_config
        from preflight.history.store import describe, open_store, resolve_url

        resolved = resolve_url(load_config().resolve_history(url))
        if resolved is None:
            return "not recorded: history is off"
        results = [Result(check=CHECK, node=n, status=Status.FAIL, summary=summary, evidence=evidence, remedy=remedy,
                          facts=facts, source="runtime") for n in nodes]
        with open_store(resolved, timeout=5.0) as store:
            run = store.record(results, "runtime")
        return f"recorded as run {run} in {describe(resolved)}"
    except Exception as exc:  # noqa: BLE001 - the verdict stands; the store is a convenience
        log.warning("preflight: replay: suspect node(s) not recorded in history: %s", exc)
        return f"not recorded: {type(exc).__name__}: {exc}"


# ----- tensors ------------------------------------------------------------------------------


def _params(params: Any) -> list[Any]:
    """Every parameter (a frozen one has no gradient and is skipped where gradients are read)."""
    if hasattr(params, "parameters"):
        params = params.parameters()
    return [p for p in params if hasattr(p, "grad")]


def _norm_buffers(model: Any) -> list[Any]:
    """The buffers a forward pass changes: BatchNorm/InstanceNorm running statistics."""
    if not hasattr(model, "modules"):
        return []
    from torch.nn.modules.batchnorm import _NormBase

    return [b for m in model.modules() if isinstance(m, _NormBase) for b in m.buffers(recurse=False)
            if b is not None]


def _grads(tensors: list[Any]) -> list[Any]:
    return [p.grad for p in tensors if p.grad is not None]


def _run(compute: Callable[[], Any], tensors: list[Any]) -> Any:
    for p in tensors:
        p.grad = None
    return compute()


def _measure(loss: Any, tensors: list[Any]) -> tuple[float, float]:
    """(loss, total local gradient norm) as floats, in one device-to-host copy."""
    import torch

    if not hasattr(loss, "detach") and not isinstance(loss, numbers.Real):
        raise TypeError(f"Replay.step: compute() must return the loss (a tensor or a number), not "
                        f"{type(loss).__name__}")

    grads = [g.to_dense() if g.is_sparse else g for g in _grads(tensors)]
    try:
        parts = [torch.stack(torch._foreach_norm(grads, 2, dtype=torch.float32)).norm()] if grads else []
        if hasattr(loss, "detach"):
            lt = loss.detach().float()
            parts.append((lt.sum() if lt.numel() != 1 else lt.reshape(())).to(parts[0].device if parts else lt.device))
            vals = torch.stack(parts).tolist()
            return float(vals[-1]), float(vals[0]) if grads else 0.0
        norm = float(parts[0].item()) if parts else 0.0
        return float(loss), norm
    except Exception as exc:  # noqa: BLE001 - mixed devices or dtypes: one by one
        log.debug("preflight: replay: fused measure failed (%s), one by one", exc)
        total = math.fsum(float(g.detach().float().norm()) ** 2 for g in grads)
        value = float(loss.detach().float().sum()) if hasattr(loss, "detach") else float(loss)
        return value, math.sqrt(total)


def _flatten(tensors: list[Any], extra: int) -> FlatGrads | None:
    """The gradients in one flat buffer with `extra` zeroed slots after them (mixed dtypes are
    promoted, as the all-reduce of `Resilience.average_gradients` does); None when there is no
    gradient or they cannot share one buffer (sparse, several devices)."""
    import torch

    grads = _grads(tensors)
    if not grads:
        return None
    try:
        parts = [g.reshape(-1) for g in grads]
        size = sum(int(x.numel()) for x in parts)
        if extra:
            parts.append(torch.zeros(extra, dtype=grads[0].dtype, device=grads[0].device))
        return FlatGrads(grads, torch.cat(parts), size)
    except (RuntimeError, TypeError, NotImplementedError) as exc:
        log.debug("preflight: replay: the gradients do not fit one buffer (%s): measured one by one", exc)
        return None


def _measure_flat(loss: Any, fg: FlatGrads) -> tuple[float, float]:
    """(loss, local gradient norm) from the flat copy: one norm, read with the loss."""
    import torch

    norm = float(torch.linalg.vector_norm(fg.flat[:fg.size], dtype=torch.float32))
    if not hasattr(loss, "detach"):
        return _measure(loss, [])[0], norm
    lt = loss.detach()
    return float(lt.sum() if lt.numel() != 1 else lt), norm


_INT_VIEW = {2: "int16", 4: "int32", 8: "int64", 1: "uint8"}


def tensor_bits(t: Any) -> tuple[int, int]:
    """(sum of the raw bits, position-weighted sum) of a tensor, exact in int64 (wrapping):
    a change of any one element changes the first. NaNs are made canonical."""
    import torch

    t = t.detach()
    if t.is_sparse:
        t = t.to_dense()
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.is_floating_point():
        t = torch.where(torch.isnan(t), torch.full((), math.nan, dtype=t.dtype, device=t.device), t)
    flat = t.contiguous().reshape(-1)
    bits = flat.view(getattr(torch, _INT_VIEW[flat.element_size()])).to(torch.int64)
    pos = torch.arange(1, bits.numel() + 1, dtype=torch.int64, device=bits.device)
    sums = torch.stack([bits.sum(), (bits * pos).sum()]).tolist()
    return int(sums[0]), int(sums[1])


def digest(loss: float, tensors: list[Any]) -> int:
    """A 63-bit digest of the loss and every gradient's bits (order matters)."""
    h = hashlib.blake2b(digest_size=8)
    h.update(b"nan" if math.isnan(loss) else struct.pack("<d", loss))
    for g in _grads(tensors):
        a, b = tensor_bits(g)
        h.update(struct.pack("<qq", a, b))
    return int.from_bytes(h.digest(), "little") >> 1


def _safe_digest(loss: float, tensors: list[Any]) -> int | None:
    try:
        return digest(loss, tensors)
    except Exception as exc:  # noqa: BLE001 - no digest: no verdict, said so
        log.warning("preflight: replay: cannot digest the gradients: %s", exc)
        return None


def _snapshot(buffers: list[Any]) -> _Snapshot:
    import torch

    snap = _Snapshot(cpu_rng=torch.get_rng_state(), buffers=buffers)
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        snap.cuda_device = torch.cuda.current_device()
        snap.cuda_rng = torch.cuda.get_rng_state(snap.cuda_device)
    snap.saved = [b.detach().clone() for b in buffers]
    return snap


def _restore(snap: _Snapshot) -> None:
    import torch

    torch.set_rng_state(snap.cpu_rng)
    if snap.cuda_rng is not None and snap.cuda_device is not None:
        torch.cuda.set_rng_state(snap.cuda_rng, snap.cuda_device)
    with torch.no_grad():
        for b, s in zip(snap.buffers, snap.saved, strict=True):
            b.copy_(s)


def _num(v: float) -> float | str:
    return v if math.isfinite(v) else str(v)


def _join(ranks: Iterable[int]) -> str:
    return ", ".join(map(str, ranks))


NOTABLE = 16  # ranks listed in an event: those that triggered, differed or lack a digest


def _notable(ranks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def odd(r: dict[str, Any]) -> bool:
        return bool(r.get("trigger")) or r.get("first") is None or r.get("first") != r.get("second") \
            or bool(r.get("missing"))
    picked = [r for r in ranks if odd(r)] or ranks[:1]
    return picked[:NOTABLE]


def _line(r: dict[str, Any]) -> str:
    same = "same" if r.get("first") is not None and r.get("first") == r.get("second") else "DIFFERENT"
    if r.get("first") is None or r.get("second") is None:
        same = "no digest"
    return (f"rank {r.get('rank')} on {r.get('node')}: trigger {r.get('trigger') or '-'}, loss {r.get('loss')}, "
            f"grad norm {r.get('grad_norm')}, digests {r.get('first')} / {r.get('second')} ({same})")


def _dist() -> Any:
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    if dist.is_available() and dist.is_initialized():
        return dist
    return None
