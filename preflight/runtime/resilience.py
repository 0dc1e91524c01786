"""One object for the training loop: the runtime layer wired in the right order.

    with Resilience(run_dir, state={"model": model, "optimizer": opt}) as res:
        for step in res.steps(total):          # resumes: state restored, the next step
            with res.step():                   # watchdog section, heartbeat, step timing
                loss = forward_backward(step)
                res.average_gradients(model)   # all_reduce, timed as the collective wait
                res.check_loss(loss)           # NaN/Inf stops, spikes warn
                opt.step()

`Resilience` owns the events, the watchdog, the crash recorder, preemption, checkpoints, the
straggler detector and the loss guard, and sets them up in the order that makes each work:

- the process group first (under torchrun in a store namespace of its own per restart, so a
  restarted worker never reads the previous attempt's stale keys), then the event writer, the
  watchdog, the crash recorder (which reads the watchdog's step and section), preemption;
- `steps(total)` restores the newest valid checkpoint into `state` (every object's
  `load_state_dict`, the RNG states) and yields from the step after the one saved: a checkpoint
  saved after step `s` completed is saved as `s + 1`, the step to run next;
- after each step: a checkpoint every `save_every` steps and at the end; the preemption check
  is local every step and collective every `stop_check_every` steps (one small all_reduce
  amortised over them); when every rank agreed to stop, every rank saves that step, rank 0
  writes the `preempted` marker once all are saved, and the process exits 0 under torchrun
  (a non-zero exit would make torchrun restart it in place) or 85 elsewhere;
- a torchrun restart that finds the marker does not train (the allocation is going away; the
  batch script requeues on the marker); a run that resumed removes it;
- `close()` (the `with` block's end) records how the rank ended: clean after the last step,
  the exception that left the block (`crash-rank<R>.json`), or preempted; the watchdog is
  closed only on a clean end, so a rank that raised never looks finished to its peers.

The parts stay usable alone (`Watchdog`, `Preemption`, `CheckpointManager`, ...); each is an
attribute here (`res.watchdog`, `res.preemption`, `res.checkpoints`, `res.straggler`,
`res.loss_guard`, `res.events`, `res.crash`). Monitoring never raises into the loop, except
the verdicts it exists for (a non-finite loss, a failed checkpoint).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

from preflight.model import Status
from preflight.runtime import crash
from preflight.runtime.events import EventWriter, say
from preflight.runtime.preemption import EXIT_PREEMPTED, Preemption, clear_marker, read_marker, write_marker

log = logging.getLogger("preflight.runtime")

CHECK = "runtime.train"
STORE_PREFIX = "/preflight/attempt_"


def under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ


def restart_count() -> int:
    try:
        return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    except ValueError:
        return 0


def init_process_group(backend: str | None = None, timeout_s: float = 600.0) -> bool:
    """Initialise torch.distributed from the launcher's environment when WORLD_SIZE > 1.

    Under torchrun the workers share the agent's store across restarts, and the keys a process
    group publishes there (gloo's peer addresses, NCCL's unique id) carry no restart number: a
    restarted worker can read the previous attempt's entries and fail to connect. Each attempt
    gets a prefix of its own. Returns True when this call created the group."""
    import torch
    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1 or dist.is_initialized():
        return False
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    timeout = timedelta(seconds=timeout_s)
    rank = int(os.environ["RANK"])
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and "MASTER_ADDR" in os.environ:
        agent = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                              is_master=False, timeout=timeout)
        store = dist.PrefixStore(f"{STORE_PREFIX}{restart_count()}", agent)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
    else:
        dist.init_process_group(backend, timeout=timeout)
    return True


class Resilience:
    """The runtime layer for one training rank; see the module docstring."""

    def __init__(self, run_dir: str | os.PathLike[str], *, state: Mapping[str, Any] | None = None,
                 step_timeout: float = 60.0, warmup_timeout: float = 1800.0, checkpoint_timeout: float = 900.0,
                 checkpoint_dir: str | os.PathLike[str] | None = None, save_every: int = 100, keep_last: int = 3,
                 async_save: bool = False, stop_check_every: int = 10, straggler_interval: int = 50,
                 monitors: bool = True, kill_stuck_peers: bool = True, backend: str | None = None,
                 init_distributed: bool = True, pg_timeout_s: float = 600.0,
                 gpu_hour_cost: float | None = None, local_dir: str | os.PathLike[str] | None = None,
                 local_every: int = 10, local_keep_last: int = 2, replicas: int = 1,
                 replay: str | None = None, inprocess: bool = False, max_restarts: int = 3,
                 max_faults_per_rank: int = 1, restart_timeout_s: float | None = None) -> None:
        if save_every < 1 or stop_check_every < 1:
            raise ValueError("save_every and stop_check_every must be at least 1")
        for name, obj in (state or {}).items():
            if not (callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))):
                raise TypeError(f"state[{name!r}] ({type(obj).__name__}) has no state_dict()/load_state_dict(): "
                                "give objects such as a model, an optimizer or an LR scheduler")
        self.run_dir = Path(run_dir)
        self.gpu_hour_cost = gpu_hour_cost
        self._progress()
        self.state: dict[str, Any] = dict(state or {})
        self.save_every = int(save_every)
        self._monitor_args = (step_timeout, warmup_timeout, checkpoint_timeout, kill_stuck_peers, straggler_interval)
        self._ckpt_args = (Path(checkpoint_dir) if checkpoint_dir else self.run_dir / "checkpoints", keep_last,
                           async_save)
        self.inprocess: Any = None
        self.spare_unused = False
        if inprocess:
            self.created_group = self._start_inprocess(backend, restart_timeout_s or step_timeout, max_restarts,
                                                       max_faults_per_rank)
        else:
            self.created_group = init_process_group(backend, pg_timeout_s) if init_distributed else False
        self.rank, self.world_size = _rank_world()
        self.events = EventWriter(self.run_dir, rank=self.rank)
        if self.inprocess is not None:
            self.inprocess._events = self.events
        self.restart = restart_count()
        self.preemption = Preemption(events=self.events, every=stop_check_every, announce=False)
        self.watchdog: Any = None
        self.straggler: Any = None
        self.loss_guard: Any = None
        self.monitors = monitors
        if monitors and not self.spare_unused:
            self._monitors(*self._monitor_args)
        self._own_crash = crash.installed() is None
        self.crash = crash.install(self.run_dir, rank=self.rank, watchdog=self.watchdog, events=self.events)
        self.checkpoints: Any = None
        if self.inprocess is None or not self.inprocess.is_spare:  # a spare's comes after the restore
            self._checkpoint_manager()
        self.local: Any = None
        self.local_every = max(1, int(local_every))
        if local_dir is not None:
            self._local_tier(local_dir, local_keep_last, replicas, async_save)
        self._averaged: tuple[int, int] | None = None  # (step, id(model)) averaged by forward_backward
        self.replay: Any = None
        if replay is not None:
            from preflight.runtime.lossguard import LossGuard
            from preflight.runtime.replay import Replay

            guard = LossGuard(events=self.events, rank=self.rank, raise_on_nonfinite=False)
            self.replay = Replay(self.events, on_data=replay, guard=guard, rank=self.rank)  # type: ignore[arg-type]

    def _progress(self) -> None:
        """Where the loop stands; and what stopped the previous attempt, read before this one
        writes anything (rank 0 reports it after the first step)."""
        self.started_at = time.time()
        self.incident: Any = None
        if os.environ.get("RANK", "0") == "0":
            from preflight.runtime import downtime

            self.incident = downtime.last_good(self.run_dir, before=self.started_at)
        self.downtime: dict[str, Any] | None = None
        self._again_at: float | None = None  # this attempt's first step: training again
        self.restored_from: str | None = None
        self._redo: int | None = None  # the step to run again after an in-process restart
        self._recovered: dict[str, Any] | None = None
        self._last_step_end = time.time()
        self.start_step = 0
        self.done = 0  # steps completed (the step to run next)
        self.finished = False
        self.stopped = False
        self._current: int | None = None
        self._closed = False

    def _checkpoint_manager(self) -> None:
        from preflight.runtime.checkpoint import CheckpointManager

        folder, keep_last, async_save = self._ckpt_args
        with self.inprocess.track() if self.inprocess is not None else nullcontext():  # its group: broken on a death
            self.checkpoints = CheckpointManager(folder, keep_last=keep_last, events=self.events,
                                                 async_save=async_save)

    def _start_inprocess(self, backend: str | None, timeout_s: float, max_restarts: int,
                         max_faults_per_rank: int) -> bool:
        """Form the process group through `InProcessRestart` (a warm spare waits here until it
        replaces a failed rank, or the job ends)."""
        from preflight.runtime.inprocess import InProcessRestart

        if backend is None:
            import torch

            backend = "nccl" if torch.cuda.is_available() else "gloo"
        self.inprocess = InProcessRestart(self.run_dir, backend=backend, timeout_s=timeout_s,
                                          max_restarts=max_restarts, max_faults_per_rank=max_faults_per_rank)
        self.spare_unused = not self.inprocess.start()
        return True

    def _monitors(self, step_timeout: float, warmup_timeout: float, checkpoint_timeout: float,
                  kill_stuck_peers: bool, interval: int) -> None:
        from preflight.runtime.lossguard import LossGuard
        from preflight.runtime.straggler import StragglerDetector
        from preflight.runtime.watchdog import Watchdog

        try:
            rs = self.inprocess
            self.watchdog = Watchdog(self.run_dir, timeouts={"step": "auto", "checkpoint": checkpoint_timeout},
                                     auto_floor_s=step_timeout, auto_initial_s=warmup_timeout,
                                     kill_stuck_peers=kill_stuck_peers, events=self.events, rank=self.rank,
                                     exit_on_hang=rs is None,
                                     on_hang=(lambda rec: rs.abort("watchdog: a peer stopped")) if rs else None)
        except Exception as exc:  # noqa: BLE001 - train unwatched rather than not at all
            log.warning("preflight: watchdog disabled: %s", exc)
        self.straggler = StragglerDetector(interval_steps=interval, events=self.events, rank=self.rank)
        self.loss_guard = LossGuard(events=self.events, rank=self.rank)

    def _local_tier(self, local_dir: str | os.PathLike[str], keep_last: int, replicas: int,
                    async_save: bool) -> None:
        """Node-local checkpoints every `local_every` steps, each rank's shard copied to the same
        local rank on the next `replicas` nodes; addresses through the process group's store."""
        from preflight.runtime.localckpt import LocalCheckpointer

        self.local = LocalCheckpointer(local_dir, keep_last=keep_last, events=self.events, async_save=async_save,
                                       replicas=replicas if self.world_size > 1 else 0, store=_job_store(),
                                       rank=self.rank, world_size=self.world_size)

    # ----- the loop ---------------------------------------------------------------------
    def steps(self, total: int) -> Iterator[int]:
        """Yield the steps still to run, from the one after the newest checkpoint to `total - 1`.

        After each step: checkpoint when due, stop and save when preempted (SystemExit)."""
        if self.spare_unused:
            self._spare_not_needed()
        if self.restart > 0 and read_marker(self.run_dir) is not None:
            self._not_restarted_in_place()
        self.resume()
        step = self.done
        while step < total:
            self._current = step
            yield step
            self._current = None
            if self._redo is not None:  # an in-process restart: the faulted step again, re-formed
                step, self._redo = self._redo, None
                continue
            if self.incident is not None and self.downtime is None:
                self._report_downtime(step, total)
            self._after_recovery()
            self._last_step_end = time.time()
            self.done = step = step + 1
            try:
                stop = self.preemption.should_stop(step)
                if stop or step % self.save_every == 0 or step == total:
                    self.save()
                elif self.local is not None and step % self.local_every == 0:
                    self.save_local()
            except Exception as exc:  # a rank lost between steps (agreement, save): re-formed as within one
                if not self.recover(exc):
                    raise
                step, self._redo = (step if self._redo is None else self._redo), None
                continue
            if stop:
                self._stop_preempted()
        self.finished = True
        if self.inprocess is not None:
            self.inprocess.done()  # waiting spares are released
        self.checkpoints.wait()  # an async save is complete before the loop says it finished
        self.events.emit(CHECK, Status.PASS, f"rank {self.rank} finished {self.done} steps", step=self.done,
                         facts={"step": self.done, "start_step": self.start_step, "world_size": self.world_size,
                                "stop_checks": self.preemption.checks})

    def step(self) -> AbstractContextManager[Any]:
        """The context of one step: watchdog section, heartbeat, straggler timing."""
        return _Step(self)

    def waiting(self) -> AbstractContextManager[Any]:
        """Time inside counts as waiting at a collective (what tells a straggler from its peers)."""
        if self.straggler is None:
            return nullcontext()
        return self.straggler.waiting()

    def average_gradients(self, model: Any) -> None:
        """All-reduce every gradient of `model` (one flat buffer in parameter order) and divide by
        the world size, timed as the collective wait. A fixed layout: a resumed run reduces in
        the same order as an uninterrupted one (bitwise equal on CPU). No-op on one rank, and
        after `forward_backward(..., average=True)` of this step (already averaged)."""
        if self.world_size <= 1 or self._averaged == (self._step_now(), id(model)):
            return
        self._all_reduce_grads([p.grad for p in model.parameters() if p.grad is not None])

    def _all_reduce_grads(self, grads: list[Any]) -> None:
        if not grads:
            return
        import torch

        from preflight.runtime.replay import FlatGrads

        self._all_reduce_flat(FlatGrads(grads, torch.cat([g.reshape(-1) for g in grads]), -1))

    def _all_reduce_flat(self, fg: Any, trigger: str | None = None) -> str:
        """Average the gradients of `fg` (a `FlatGrads`) in one all-reduce of its flat buffer.
        With `trigger` (replay's local one), its slots after the gradients carry one count per
        trigger kind and the highest kind any rank saw is returned: then the gradients are left
        as they were (this rank's own, for the replay)."""
        import torch.distributed as dist

        flat, size = fg.flat, fg.size if fg.size >= 0 else fg.flat.numel()
        if trigger is not None:
            from preflight.runtime.replay import TRIGGERS

            if TRIGGERS.index(trigger):
                flat[size + TRIGGERS.index(trigger) - 1] = 1
        with self.waiting():
            dist.all_reduce(flat)
        if trigger is not None:
            seen = flat[size:].tolist()
            agreed = next((TRIGGERS[i + 1] for i in reversed(range(len(seen))) if seen[i] > 0), "")
            if agreed:
                return agreed
        flat = flat[:size].div_(self.world_size)
        offset = 0
        for g in fg.grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()
        return ""

    def _step_now(self) -> int:
        return self._current if self._current is not None else self.done

    def forward_backward(self, compute: Callable[[], Any], model: Any, average: bool = False) -> Any:
        """Run this rank's forward and backward (`compute()` returns the loss; no collective in
        it) and return a `StepOutcome` (`.loss`, `.apply`). With `replay=` set, a suspicious step
        (NaN/Inf, a loss or gradient-norm spike) is run again from the same inputs: two different
        results on a rank raise `SuspectHardware` (exit 76, its node recorded in history); a NaN/Inf
        that repeats is the data: stop, skip (`.apply` False: do not step the optimizer) or
        report, as `replay=` says; a repeated spike is reported and applied. Without replay:
        gradients set to None, `compute()`, apply. `average=True` also averages the gradients
        (`average_gradients`) when the step applies; with replay, that all-reduce carries the
        ranks' agreement on the trigger, so watching costs no collective of its own."""
        step = self._step_now()
        self._averaged = None
        if self.replay is not None and average and self.world_size > 1:
            from preflight.runtime.replay import TRIGGERS

            pending = self.replay.begin(step, compute, model, flat_extra=len(TRIGGERS) - 1)
            if pending.flat is not None:
                agreed = self._all_reduce_flat(pending.flat, pending.local)
                out = self.replay.settle(pending, agreed)
                if agreed and out.apply:  # the replayed step's gradients, averaged
                    self._all_reduce_grads([p.grad for p in model.parameters() if p.grad is not None])
            else:  # no gradients, or not one buffer: the agreement of its own, then the average
                out = self.replay.settle(pending, self.replay._agree(pending.local))
                if out.apply:
                    self._all_reduce_grads([p.grad for p in model.parameters() if p.grad is not None])
        elif self.replay is not None:
            out = self.replay.step(step, compute, model)
            if average and out.apply:
                self.average_gradients(model)
        else:
            from preflight.runtime.replay import StepOutcome

            for p in model.parameters():
                p.grad = None
            out = StepOutcome(step=step, loss=compute())
            if average:
                self.average_gradients(model)
        if average:
            self._averaged = (step, id(model))
        return out

    def check_loss(self, loss: Any) -> str:
        """The loss guard's verdict for this step: "ok" or "spike"; a NaN/Inf raises NonFiniteLoss.
        With replay, the verdict its guard gave this step's loss in `forward_backward` (judged once)."""
        if self.loss_guard is None:
            return "ok"
        step = self._step_now()
        judged = self.replay.judged if self.replay is not None else None
        if judged is not None and judged[0] == step and judged[1] is loss and judged[2] != "nonfinite":
            return str(judged[2])
        return str(self.loss_guard.check(step, loss))

    # ----- checkpoints ------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        from preflight.runtime.checkpoint import capture_rng_state

        return {"state": {name: obj.state_dict() for name, obj in self.state.items()},
                "rng": capture_rng_state(), "step": self.done}

    def load_state_dict(self, saved: Mapping[str, Any]) -> None:
        from preflight.runtime.checkpoint import restore_rng_state

        missing = [name for name in self.state if name not in saved.get("state", {})]
        if missing:
            raise KeyError(f"checkpoint has no state for {', '.join(missing)}")
        for name, obj in self.state.items():
            obj.load_state_dict(saved["state"][name])
        if saved.get("rng"):
            restore_rng_state(saved["rng"])

    def save(self) -> None:
        """Checkpoint the state after `self.done` steps (collective: every rank calls it)."""
        wd = self.watchdog
        with wd.section("checkpoint") if wd is not None else nullcontext():
            self.checkpoints.save(self.done, self.state_dict())

    def save_local(self) -> None:
        """A node-local checkpoint of this rank after `self.done` steps (not collective), copied
        to its peers in the background."""
        wd = self.watchdog
        with wd.section("checkpoint") if wd is not None else nullcontext():
            self.local.save(self.done, self.state_dict())

    def resume(self) -> int:
        """Restore the newest checkpoint every rank can load (the shared one, or the node-local
        tier and its peer copies, whichever is newer); returns the step to run next."""
        loaded: Any
        rs = self.inprocess
        if rs is not None and rs.is_spare:  # a spare called in: the survivors' state, their step
            self.done = self.start_step = rs.restore(self.state, 0)
            self._checkpoint_manager()  # its group is made after the restore, as the survivors' is
            self.restored_from = "peer"
            self._emit_start(True)
            return self.start_step
        if self.local is not None:
            from preflight.runtime.localckpt import restore

            loaded = restore(self.local, self.checkpoints)
            if loaded is not None:
                self.restored_from = loaded[2]
        else:
            loaded = self.checkpoints.load_latest()
            self.restored_from = "shared" if loaded is not None else None
        if loaded is not None:
            step, saved = loaded[0], loaded[1]
            self.load_state_dict(saved)
            self.done = self.start_step = int(step)
        if self.rank == 0:
            clear_marker(self.run_dir)  # resumed: a later end is judged afresh
        self._emit_start(loaded is not None)
        self._say_start(loaded is not None)
        return self.start_step

    def _say_start(self, resumed: bool) -> None:
        """The console line of this start (rank 0, once): a first start, a resume after a rerun,
        or a launcher's restart (torchrun's or preflight's), with the previous attempt's end."""
        if self.rank != 0:
            return
        try:
            step_timeout = self._monitor_args[0] if self.watchdog is not None else None
            rs = self.inprocess
            say(start_line(self.run_dir, step=self.start_step, resumed=resumed, restored_from=self.restored_from,
                           world_size=self.world_size, restart=launch_restart(), save_every=self.save_every,
                           step_timeout=step_timeout, inprocess_timeout=getattr(rs, "timeout_s", None),
                           local_every=self.local_every if self.local is not None else None,
                           replay=self.replay.on_data if self.replay is not None else None,
                           incident=self.incident), rank=0)
        except Exception as exc:  # noqa: BLE001 - a console line never stops training
            log.warning("preflight: start line not written: %s", exc)

    def _emit_start(self, resumed: bool) -> None:
        how = f"resumed at step {self.start_step}" if resumed else "started from step 0"
        self.events.emit(CHECK, Status.PASS, f"rank {self.rank} {how}", step=self.start_step,
                         facts={"pid": os.getpid(), "start_step": self.start_step, "world_size": self.world_size,
                                "restart": self.restart, "resumed": resumed,
                                "restored_from": self.restored_from})

    # ----- in-process restart -----------------------------------------------------------
    def recover(self, exc: BaseException) -> bool:
        """A collective fault inside a step: with in-process restart, re-form the group with the
        survivors (and a spare), restore the state from the rank that applied the most steps and
        run the faulted step again (True). False: not a fault we handle; the exception goes on.
        Past the limits `RestartFallback` (exit 75) ends the process for the launcher to restart."""
        rs = self.inprocess
        if rs is None or not rs.is_fault(exc):
            return False
        last_good = self._last_step_end
        self._redo = rs.recover(exc, self.done, self.state, last_good_at=last_good)
        self.done = self._redo
        self.rank, self.world_size = rs.rank, rs.world_size
        self._regroup()
        self._recovered = {"last_good_at": last_good, "restart": dict(rs.last_restart or {})}
        return True

    def _regroup(self) -> None:
        """The parts bound to the old process group or rank number, made again."""
        old_wd = self.watchdog
        if old_wd is not None:
            with contextlib.suppress(Exception):
                old_wd.close()
        self.events = EventWriter(self.run_dir, rank=self.rank)
        self.inprocess._events = self.events
        if self.monitors:
            self._monitors(*self._monitor_args)
        self.crash.rank, self.crash.events, self.crash.watchdog = self.rank, self.events, self.watchdog
        self.crash.path = self.run_dir / f"crash-rank{self.rank}.json"
        self.preemption.events = self.events
        if self.checkpoints is not None:
            with contextlib.suppress(Exception):
                self.checkpoints._closed = True  # its group is gone: nothing of it is waited for
        self._checkpoint_manager()

    def _after_recovery(self) -> None:
        """After the first step following an in-process restart: its downtime (rank 0)."""
        rec, self._recovered = self._recovered, None
        if rec is None or self.rank != 0:
            return
        from preflight.runtime import downtime

        facts = rec["restart"]
        failed = facts.get("failed") or []
        try:
            price, currency = (self.gpu_hour_cost, downtime.DEFAULT_CURRENCY)
            if price is None:
                price, currency = downtime.price_from_config()
            numbers = downtime.measure(
                None, training_again_at=time.time(), world_size=self.world_size, step=self.done,
                cost_per_gpu_hour=price, currency=currency, cause=_restart_cause(failed),
                nodes=sorted({str(f.get("host")) for f in failed if f.get("host")}),
                ranks=[int(f["rank"]) for f in failed if isinstance(f.get("rank"), int)],
                run_dir=str(self.run_dir.resolve()), last_good_at=rec["last_good_at"])
            downtime.emit(self.events, numbers)
        except Exception as exc:  # noqa: BLE001 - accounting never stops training
            log.warning("preflight: downtime not measured: %s", exc)

    def _spare_not_needed(self) -> None:
        self.events.emit(CHECK, Status.PASS, "warm spare not needed: the job ended without calling it in",
                         facts={"spare": True})
        self.stopped = True
        self.crash.exit("clean", exit_code=0, summary="warm spare, not called in")
        raise SystemExit(0)

    def _report_downtime(self, step: int, total: int) -> None:
        """After each step of this attempt until it is measured: what the interruption before it
        cost (rank 0, one `runtime.downtime` event), from the last good moment to when training
        passed the failed step again (the redone steps are lost work too), GPU-hours, money."""
        if step == self.start_step:
            self._again_at = time.time()
        failed = getattr(self.incident, "step", None)
        if self.rank != 0 or (isinstance(failed, int) and step < failed and step + 1 < total):
            return
        from preflight.runtime import downtime

        try:
            price, currency = (self.gpu_hour_cost, downtime.DEFAULT_CURRENCY)
            if price is None:
                price, currency = downtime.price_from_config()
            now = time.time()
            self.downtime = downtime.measure(self.incident, training_again_at=self._again_at or now,
                                             world_size=self.world_size, step=self.start_step,
                                             cost_per_gpu_hour=price, currency=currency,
                                             run_dir=str(self.run_dir.resolve()),
                                             passed_at=now if isinstance(failed, int) and step >= failed else None)
            downtime.emit(self.events, self.downtime)
        except Exception as exc:  # noqa: BLE001 - accounting never stops training
            self.downtime = {}  # tried once
            log.warning("preflight: downtime not measured: %s", exc)

    # ----- ends -------------------------------------------------------------------------
    def _not_restarted_in_place(self) -> None:
        """A torchrun restart of a preempted job inside its dying allocation: do not train."""
        self.events.emit(CHECK, Status.WARN, f"rank {self.rank}: preempted job not restarted in place (restart "
                         f"{self.restart}); waiting for the requeue", facts={"restart": self.restart})
        if self.rank == 0:
            say(f"restart {self.restart} of a preempted job: not training in the allocation that is going away "
                f"(marker {self.run_dir / 'preempted'}); the requeued job resumes", rank=0)
        self.stopped = True
        code = 0 if under_torchrun() else EXIT_PREEMPTED
        self.crash.exit("preempted", exit_code=code,
                        summary=f"torchrun restart {self.restart} after a preemption: not trained")
        raise SystemExit(code)

    def _stop_preempted(self) -> None:
        """Every rank agreed to stop and saved: the marker, then exit (0 under torchrun, else 85)."""
        self.checkpoints.wait()
        if self.world_size > 1:
            import torch.distributed as dist

            dist.barrier()  # every rank's checkpoint is complete before the marker says so
        pre = self.preemption
        code = 0 if under_torchrun() else EXIT_PREEMPTED
        if self.rank == 0:
            marker = write_marker(self.run_dir, self.done, world_size=self.world_size, signum=pre.stop_signum,
                                  stop_rank=pre.stop_rank)
            say(preempted_line(pre.stop_what or "a stop request", pre.stop_rank, self.done, self.world_size,
                               code, marker), rank=0)
        self.events.emit(CHECK, Status.WARN, f"rank {self.rank} stopped at step {self.done} (checkpoint saved)",
                         step=self.done, remedy="run again (requeue/restart) to resume",
                         facts={"step": self.done, "exit_code": code, "stop_checks": pre.checks})
        self.stopped = True
        self.crash.exit("preempted", exit_code=code, signal=_signame(pre.stop_signum) if pre.stop_signum else None)
        raise SystemExit(code)

    def close(self, exc: BaseException | None = None, tb: TracebackType | None = None) -> None:
        """Record how this rank ended and release everything (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if exc is not None and not isinstance(exc, (SystemExit, KeyboardInterrupt)):
            self._record_exception(exc, tb)
        elif isinstance(exc, SystemExit) and not self.stopped and exc.code not in (None, 0):
            code = exc.code if isinstance(exc.code, int) else 1
            self.crash.exit("exception", exit_code=code, summary=f"{type(exc).__name__}: {exc}")
        with contextlib.suppress(Exception):
            self.checkpoints.close()
        if self.local is not None:
            with contextlib.suppress(Exception):
                self.local.close()
        clean = exc is None and self.finished
        if self.watchdog is not None and (clean or self.stopped):
            self.watchdog.close()  # "closed": peers and triage read a finished rank
        if clean:
            self.crash.exit("clean", exit_code=0)
        self.preemption.close()
        if self._own_crash:
            self.crash.uninstall()  # the end is recorded; a later Resilience in this process installs its own
        if self.inprocess is not None:
            with contextlib.suppress(Exception):
                self.inprocess.close()
        elif self.created_group:
            import torch.distributed as dist

            with contextlib.suppress(Exception):
                dist.destroy_process_group()

    def _record_exception(self, exc: BaseException, tb: TracebackType | None) -> None:
        self.crash.record(type(exc), exc, tb)
        fired = getattr(self.watchdog, "fired", None)
        if fired and fired.get("exit_code") is not None:
            self.crash.exit("hang", exit_code=int(fired["exit_code"]),
                            summary=f"after the watchdog fired: {type(exc).__name__}: {exc}")
        else:
            self.crash.exit("exception", exit_code=1, summary=f"{type(exc).__name__}: {str(exc)[:300]}")

    def __enter__(self) -> Resilience:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close(ev, tb)


class _Step:
    """One step: a watchdog "step" section and the straggler's step clock."""

    def __init__(self, res: Resilience) -> None:
        self.res = res
        self.section: Any = None

    def __enter__(self) -> _Step:
        res = self.res
        step = res._current if res._current is not None else res.done
        if res.straggler is not None:
            res.straggler.step_start()
        if res.watchdog is not None:
            self.section = res.watchdog.section("step", step=step)
            self.section.__enter__()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> bool:
        if self.section is not None:
            self.section.__exit__(et, ev, tb)
        if et is None and self.res.straggler is not None:
            self.res.straggler.step_end()
        if ev is not None and isinstance(ev, Exception):
            return self.res.recover(ev)  # True: re-formed, the step runs again
        return False


def launch_restart() -> int:
    """Which restart of its launcher this process is: torchrun's TORCHELASTIC_RESTART_COUNT,
    else the preflight launcher's PREFLIGHT_ATTEMPT; 0 for a first start (or a new launch)."""
    if under_torchrun():
        return restart_count()
    try:
        return max(0, int(os.environ.get("PREFLIGHT_ATTEMPT", "0")))
    except ValueError:
        return 0


_CAUSE_WORDS = {"hang": "a hang", "crash": "a crash", "killed": "a kill", "signal": "a kill by a signal",
                "suspect hardware": "suspect hardware (replay)", "bad data": "bad data (replay)",
                "unknown": "an unknown cause"}


def start_line(run_dir: str | os.PathLike[str], *, step: int, resumed: bool, restored_from: str | None,
               world_size: int, restart: int, save_every: int, step_timeout: float | None,
               inprocess_timeout: float | None = None, local_every: int | None = None, replay: str | None = None,
               incident: Any = None, now: float | None = None) -> str:
    """The console line of a start: "training RUN from step 0, 4 ranks, checkpoint every 50 steps,
    step timeout 60 s, in-process restart off" for a new launch; for a launcher's restart
    "restart N: resumed RUN at step S ..., 4 ranks", and for either, when the previous attempt
    did not end cleanly, how it ended and the time lost so far (the downtime event follows once
    training is past the failed step)."""
    ranks = f"{world_size} rank{'s' if world_size != 1 else ''}"
    where = "" if restored_from in (None, "shared") else f"{restored_from} "
    head = (f"resumed {run_dir} at step {step} ({where}checkpoint)" if resumed
            else f"training {run_dir} {'again ' if restart else ''}from step {step}"
                 f"{' (no checkpoint)' if restart or incident is not None else ''}")
    parts = [f"restart {restart}: {head}" if restart else head, ranks]
    if not restart:  # a new launch: what is on (a restart runs with its launch's settings)
        parts.append(f"checkpoint every {save_every} step{'s' if save_every != 1 else ''}")
        if local_every is not None:
            parts.append(f"node-local checkpoint every {local_every} steps")
        parts.append(f"step timeout {step_timeout:g} s" if step_timeout is not None else "no watchdog")
        parts.append(f"in-process restart on (timeout {inprocess_timeout:g} s)" if inprocess_timeout is not None
                     else "in-process restart off")
        if replay is not None:
            parts.append(f"replay on ({replay})")
    text = ", ".join(parts)
    if incident is not None:
        text += "; " + _before_text(incident, step, time.time() if now is None else now)
    return text


def _before_text(inc: Any, step: int, now: float) -> str:
    """How the previous attempt ended, as known at this start."""
    cause_key = str(getattr(inc, "cause", "unknown"))
    at, ranks, nodes = getattr(inc, "step", None), list(getattr(inc, "ranks", [])), list(getattr(inc, "nodes", []))
    detail = " ".join(str(getattr(inc, "detail", "") or "").split())
    detail = f" ({detail[:80]}{'...' if len(detail) > 80 else ''})" if detail else ""
    if cause_key == "preempted":  # it saved and stopped: nothing to redo; the detail names signal and rank
        text = f"the previous attempt was preempted{detail}"
    else:
        cause = _CAUSE_WORDS.get(cause_key, cause_key)
        if getattr(inc, "signal", None) and cause_key in ("killed", "signal"):
            cause = f"a kill by {inc.signal}"
        who = f" of rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}" if ranks else ""
        if nodes:
            who += f" on {', '.join(map(str, nodes))}"
        text = f"the previous attempt ended in {cause}{who}{detail}"
        if at is not None:
            text += f" at step {at}"
    start = getattr(inc, "start", None)
    if start is not None:
        text += f", down {max(0.0, now - start):.1f} s so far"
    if cause_key != "preempted" and at is not None and at > step:
        n = at - step
        text += f", {n} step{'s' if n != 1 else ''} to redo"
    return text


def preempted_line(what: str, rank: int | None, step: int, world_size: int, exit_code: int,
                   marker: Path | None) -> str:
    """The console line of a preemption, once every rank saved: the signal, its rank, the step
    saved, how the job ends."""
    on = f" on rank {rank}" if rank is not None and rank >= 0 else ""
    saved = f"{'all ' + str(world_size) + ' ranks' if world_size > 1 else 'the rank'} saved step {step}"
    if exit_code == 0:  # under torchrun: the marker tells the batch script
        end = (f"exiting 0 for the requeue (marker {marker})" if marker is not None
               else "exiting 0; the marker could not be written: requeue by hand")
    else:
        end = f"exiting {exit_code} (preempted): run again to resume"
    return f"preempted: {what}{on}; {saved}, {end}"


def _restart_cause(failed: list[dict[str, Any]]) -> str:
    """The downtime cause of an in-process restart, from the failed ranks' causes."""
    text = " ".join(str(f.get("cause") or "") for f in failed).lower()
    if "sigkill" in text or "signal" in text or "killed" in text:
        return "signal"
    if "stopped" in text or "did not rejoin" in text or "timed out" in text:
        return "hang"
    return "crash" if failed else "unknown"


def _job_store() -> Any:
    """The process group's key-value store (None without one)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not (dist.is_available() and dist.is_initialized()):
        return None
    try:
        from torch.distributed import distributed_c10d

        return distributed_c10d._get_default_store()
    except Exception:  # noqa: BLE001 - a private API: without it there is no peer copy
        return None


def _rank_world() -> tuple[int, int]:
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank()), int(dist.get_world_size())
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def _signame(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


__all__ = ["Resilience", "init_process_group", "under_torchrun", "restart_count", "launch_restart"]
