"""The cost of downtime: the time, GPU-hours and money an interruption of training cost.

In a training loop, two calls (rank 0 reads and writes; `Downtime` below):

    down = downtime.Downtime(run_dir, events=ev, world_size=world)   # before this attempt writes
    ...                                                              # restore; after each step:
    down.training_again(step)      # once past the failed step again: one runtime.downtime event

The same by hand. When a run starts again (a torchrun restart, a requeue, an in-process
restart), before this attempt writes anything:

    incident = downtime.last_good(run_dir, before=started)    # None: no previous attempt
    ...                                                       # restore, then the first step
    if incident is not None and rank == 0:
        numbers = downtime.measure(incident, training_again_at=first_step_end, world_size=world,
                                   step=start_step, cost_per_gpu_hour=price,
                                   passed_at=time.time())    # once past incident.step again
        downtime.emit(events, numbers)                        # one runtime.downtime event

`last_good` (`preflight.runtime.story`, the run directory's one reader) reads what the previous attempt left in the run directory: the events of every
rank (`events-rank<R>.jsonl`), the watchdog's heartbeats and hang records, the crash records
and the preemption marker. It returns when training was last good (the latest moment a rank
recorded a completed step: a heartbeat's step start, a hang record's section start, an event
carrying a step, a crash) with that step, and why training stopped: a hang (the stale or
behind ranks the hang records name), a crash (the first crash record), a preemption (the
marker), a rank killed by a signal (a rank that left no end record while its peers lost their
connection or were ended by the launcher: SIGKILL), suspect hardware or bad data (replay and
the loss guard's verdicts), or unknown. The lost time runs from the last good moment to the
moment training passed the failed step again: the gap until training again plus the steps
redone from the checkpoint, which were lost work too (`redo_s`, `steps_redone`); GPU-hours are
world size x lost time; a price per GPU-hour
(`gpu_hour_cost` in the preflight config file, or the caller's) turns them into money.

`incidents(files)` (in the story module) reconstructs every interruption of a run from its files after the fact
(what `preflight triage` reports): each attempt's start (`runtime.train` events with a
`start_step`, `resumed from checkpoint` events, `runtime.downtime` events) closes the incident
before it; a `runtime.downtime` event the runtime wrote is taken as measured. An attempt that
stopped and never trained again is an open incident, its lost time running to a given end
(the job's end, the collection) that the result names.

Bad input is named, never graded as empty: a torn JSON line, a corrupt record, a clock that
runs backwards (a negative duration is clamped to 0 and said so). Standard library only;
never raises into a training job (`last_good` logs and returns None on a fault).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# the run directory is read by preflight.runtime.story (its one reader); these names stay here too
from preflight.runtime.story import (  # noqa: F401 - re-exported
    DEFAULT_CURRENCY,
    RESTART_CHECK,
    TAIL_BYTES,
    TAIL_MIN,
    TAIL_TOTAL,
    Incident,
    Records,
    RunFile,
    _list,
    attempts,
    incident_in,
    incidents,
    iso,
    last_good,
    measure,
    parse,
    read_run_dir,
    totals,
)

log = logging.getLogger("preflight.runtime")

CHECK = "runtime.downtime"
CAUSES = ("hang", "crash", "killed", "suspect hardware", "bad data", "preempted", "unknown")
CONFIG_ENV = "PREFLIGHT_CONFIG"
CONFIG_DEFAULT = "/etc/preflight/config.toml"
PRICE_ENV = "PREFLIGHT_GPU_HOUR_COST"
PRICE_KEY, CURRENCY_KEY = "gpu_hour_cost", "currency"

# ----- measuring -------------------------------------------------------------------------------


def describe(n: Mapping[str, Any]) -> str:
    """One line: "lost 41.2 s (0.046 GPU-h, $0.14) to a hang of rank 2 on n3: last good step 120
    at ..., training again at step 100"."""
    money = f", {money_text(n.get('cost'), n.get('currency'))}" if n.get("cost") is not None else ""
    who = ""
    if n.get("ranks"):
        who = f" of rank{'s' if len(n['ranks']) > 1 else ''} {_list(n['ranks'])}"
    if n.get("nodes"):
        who += f" on {', '.join(n['nodes'])}"
    sig = f" ({n['signal']})" if n.get("signal") else ""
    cause = {"hang": "a hang", "crash": "a crash", "killed": f"a kill by a signal{sig}", "signal": "a kill by a signal",
             "preempted": "a preemption", "suspect hardware": "suspect hardware (replay)",
             "bad data": "bad data", "unknown": "an unknown cause"}.get(str(n.get("cause")), str(n.get("cause")))
    last = (f"last good step {n['from_step']} at {n.get('last_good_iso')}" if n.get("from_step") is not None
            else f"last good at {n.get('last_good_iso')}")
    again = (f"training again at step {n['resumed_step']}" if n.get("until") == "training again"
             and n.get("resumed_step") is not None else f"not training again until {n.get('until')}")
    if n.get("redo_s") is not None and n.get("from_step") is not None:
        again += f", past step {n['from_step']} again {duration_text(float(n['redo_s']))} later (redone steps counted)"
    return (f"lost {duration_text(float(n.get('lost_s') or 0.0))} ({float(n.get('gpu_hours') or 0.0):.3g} GPU-h{money}) "
            f"to {cause}{who}: {last}, {again}")


def emit(events: Any, numbers: Mapping[str, Any]) -> dict[str, Any] | None:
    """Write one `runtime.downtime` event (status warn, facts = the numbers) through an
    EventWriter; never raises."""
    try:
        ev = list(numbers.get("evidence") or []) + [f"note: {x}" for x in numbers.get("notes") or []]
        facts = {k: v for k, v in numbers.items() if k != "evidence"}
        return events.emit(CHECK, "warn", describe(numbers), evidence=ev[:20], facts=facts,
                           step=numbers.get("resumed_step"),
                           remedy=remedy_for(numbers))
    except Exception as exc:  # noqa: BLE001
        log.warning("preflight: downtime event not written: %s", exc)
        return None


def remedy_for(n: Mapping[str, Any]) -> str:
    cause = n.get("cause")
    if cause == "preempted":
        return "none: a preemption; checkpoint more often to lose fewer steps"
    if cause == "bad data":
        return "inspect the batch of the failed step on the ranks named; restart from the last checkpoint"
    if n.get("nodes") and cause in ("hang", "crash", "signal", "killed", "suspect hardware"):
        return f"check the node(s) {', '.join(n['nodes'])} (preflight triage / preflight run --hosts ...)"
    return "see preflight triage --run-dir for the cause"


class Downtime:
    """The downtime of this (re)start, for a training loop: two calls.

        down = Downtime(run_dir, events=ev, world_size=world)  # at the start, before this attempt
                                                                # writes anything (watchdog included)
        ...                                                    # restore the checkpoint, first step
        down.training_again(step)                              # once: one runtime.downtime event

    Rank 0 reads the previous attempt (`last_good`) and writes the event; the other ranks do
    nothing. The price is `cost_per_gpu_hour`, else `price_from_config()`. An in-process restart,
    which knows the cause, calls `restarted(...)` after the re-formed group's first step. Never
    raises."""

    def __init__(self, run_dir: str | os.PathLike[str], *, events: Any = None, world_size: int = 1,
                 rank: int | None = None, cost_per_gpu_hour: float | None = None, currency: str | None = None,
                 started: float | None = None) -> None:
        self.run_dir = str(Path(run_dir).resolve())
        self.events = events
        self.world_size = max(1, int(world_size))
        self.rank = _env_rank() if rank is None else int(rank)
        self.started = time.time() if started is None else float(started)
        self.incident = last_good(self.run_dir, before=self.started) if self.rank == 0 else None
        if cost_per_gpu_hour is None and self.rank == 0:
            cost_per_gpu_hour, label = price_from_config()
            currency = currency or label
        self.price = cost_per_gpu_hour
        self.currency = currency or DEFAULT_CURRENCY
        self.numbers: dict[str, Any] | None = None
        self._again: tuple[float, int] | None = None  # (time, step) of this attempt's first step

    def training_again(self, step: int, at: float | None = None) -> dict[str, Any] | None:
        """After each step of this attempt (`step`: the step just completed; the first call is
        training again): once training has passed the step that failed, measure the previous stop
        (once, the redone steps included) and emit it. When the failed step is not known, the
        first call measures it."""
        if self.rank != 0 or self.incident is None or self.numbers is not None:
            return None
        now = time.time() if at is None else at
        if self._again is None:
            self._again = (now, step)
        failed = self.incident.step
        if failed is not None and step < failed:
            return None
        self.numbers = measure(self.incident, training_again_at=self._again[0], world_size=self.world_size,
                               step=self._again[1], cost_per_gpu_hour=self.price, currency=self.currency,
                               run_dir=self.run_dir, passed_at=now if failed is not None else None)
        if self.events is not None:
            emit(self.events, self.numbers)
        return self.numbers

    def restarted(self, *, last_good_at: float, step: int, cause: str, nodes: Sequence[str] = (),
                  ranks: Sequence[int] = (), world_size: int | None = None,
                  at: float | None = None) -> dict[str, Any] | None:
        """An in-process restart's downtime, its cause known: from `last_good_at` (the last step
        completed before the fault) to now (the re-formed group's first step)."""
        if self.rank != 0:
            return None
        n = measure(None, training_again_at=time.time() if at is None else at,
                    world_size=world_size or self.world_size, step=step, cost_per_gpu_hour=self.price,
                    currency=self.currency, cause=cause, nodes=list(nodes), ranks=list(ranks),
                    run_dir=self.run_dir, last_good_at=last_good_at)
        if self.events is not None:
            emit(self.events, n)
        return n


def _env_rank() -> int:
    for key in ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"):
        if os.environ.get(key, "").isdigit():
            return int(os.environ[key])
    return 0



# ----- the price ---------------------------------------------------------------------------------


def check_price(value: Any, currency: Any = None) -> tuple[float | None, str, str]:
    """(price per GPU-hour or None, currency label, problem or "") of config values."""
    label = DEFAULT_CURRENCY
    if currency is not None:
        if not isinstance(currency, str) or not currency.strip() or len(currency) > 8:
            return None, label, f"{CURRENCY_KEY} must be a short text such as \"$\", \"EUR\" (got {currency!r})"
        label = currency.strip()
    if value is None:
        return None, label, ""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1e6:
        return None, label, f"{PRICE_KEY} must be a number of money per GPU-hour, 0 or more (got {value!r})"
    return float(value), label, ""


def price_from_config(path: str | os.PathLike[str] | None = None) -> tuple[float | None, str]:
    """The price per GPU-hour for the runtime: $PREFLIGHT_GPU_HOUR_COST, else `gpu_hour_cost` (and
    `currency`) of the preflight config file ($PREFLIGHT_CONFIG, else /etc/preflight/config.toml).
    (None, "$") when not set; a bad value is logged, never raised."""
    env = os.environ.get(PRICE_ENV, "").strip()
    if env:
        try:
            price, label, problem = check_price(float(env))
        except ValueError:
            price, label, problem = None, DEFAULT_CURRENCY, f"{PRICE_ENV}={env!r} is not a number"
        if problem:
            log.warning("preflight: %s", problem)
        return price, label
    cfg = Path(path or os.environ.get(CONFIG_ENV) or CONFIG_DEFAULT)
    try:
        import tomllib

        data = tomllib.loads(cfg.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, DEFAULT_CURRENCY
    except Exception as exc:  # noqa: BLE001
        log.warning("preflight: cannot read the GPU-hour price from %s: %s", cfg, exc)
        return None, DEFAULT_CURRENCY
    price, label, problem = check_price(data.get(PRICE_KEY), data.get(CURRENCY_KEY))
    if problem:
        log.warning("preflight: config file %s: %s", cfg, problem)
    return price, label



def money_text(cost: Any, currency: Any) -> str:
    if cost is None:
        return ""
    label = str(currency or DEFAULT_CURRENCY)
    amount = f"{float(cost):,.2f}"
    return f"{label}{amount}" if len(label) == 1 else f"{amount} {label}"


def duration_text(s: float) -> str:
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.2f} h"


