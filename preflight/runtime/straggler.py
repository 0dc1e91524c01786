"""Straggler detection: per-rank step times compared across ranks every interval.

    strag = StragglerDetector()         # interval_steps=50, threshold=0.8, confirm_intervals=2
    for batch in loader:
        strag.step_start()
        loss = forward_backward(batch)
        with strag.waiting():           # the collective the step already does (optional)
            all_reduce_gradients()
        optimizer.step()
        strag.step_end()                # every interval: one small all_gather

Every `interval_steps` steps each rank shares the medians of its last interval (step time,
time waiting at collectives, busy time = step - wait) with one all_gather over the default
group (host names are gathered once). A rank's score is its peers' median divided by its own
(1.0: as fast as the others; a rank 1.4x slower scores 0.71); a rank under `threshold` in
`confirm_intervals` intervals in a row is a straggler, reported in a `runtime.straggler` event
(by `report_rank`) with its score and host, and returned by `step_end()` on every rank.

The defaults (0.8, 50 steps, 2 intervals in a row) come from measurements
(benchmarks/bench_detectors.py, BENCHMARKS.md): a rank 1.4x slower is reported in every
interval from its second, 1.3x in most, 1.2x rarely; on healthy 4-rank gloo runs under two CPU hogs no rank was
reported, and with synthetic noise (20% jitter, delayed steps, noisy neighbours for up to
40% of an interval) 0 of 150 intervals reported a healthy rank with 4 or 32 ranks, where a
single interval under 0.8 does in up to 10%. The old 0.7 against the fastest rank missed a
rank 1.4x slower.

Why the wait: a synchronous all-reduce evens out wall-clock step times, since every rank
leaves the collective together. The slow rank arrives last and waits least; the others wait
for it. Busy time (step minus wait) keeps the difference visible. Measure the wait by wrapping
a collective the step already does in `waiting()`, or with `sync_point()`, a one-element
all_reduce that times this rank's arrival until the collective completes.

Contract: every rank calls step_end()/record() (and sync_point()) the same number of times,
as the collectives must match. Without torch.distributed initialised the detector only keeps
local statistics. On GPUs, call step_end() after a synchronising call (loss.item()) for the
host clock to see device time. Monitoring faults are logged, never raised.
"""

from __future__ import annotations

import logging
import socket
import statistics
import sys
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from preflight.model import Status
from preflight.runtime.events import EventWriter, env_rank

log = logging.getLogger("preflight.runtime")

CHECK = "runtime.straggler"
# Below this fraction of the median step, busy time is mostly noise (a step that is all
# collective): the score falls back to wall-clock step times.
BUSY_MIN_FRACTION = 0.05


def interval_stats(steps: Sequence[float], waits: Sequence[float]) -> list[float]:
    """One rank's statistics of an interval: [median step s, median busy s, median wait s, samples].

    Busy = step - wait (never negative). Medians, so that a few steps delayed by the scheduler
    (or a checkpoint, a data-loader hiccup) do not move the rank's figure."""
    busy = [max(s - w, 0.0) for s, w in zip(steps, waits, strict=True)]
    if not steps:
        return [0.0, 0.0, 0.0, 0.0]
    return [statistics.median(steps), statistics.median(busy), statistics.median(waits), float(len(steps))]


def _peer_median(values: Sequence[float], i: int) -> float:
    """The median of every value but the i-th (the value itself when it is alone)."""
    others = [v for j, v in enumerate(values) if j != i]
    return statistics.median(others) if others else values[i]


def score_ranks(stats: Sequence[Sequence[float]], threshold: float) -> list[dict[str, Any]]:
    """Pure scoring. stats[r] = (median step s, median busy s, median wait s, samples).

    A rank's score is its peers' typical time divided by its own: the median of the other
    ranks' medians (step time, and busy time when steps are not all collective), the lower
    of the two, capped at 1. The peers' median, not the fastest rank: with many ranks the
    fastest one is an outlier of the noise, and measuring against it flags healthy ranks.
    A rank 1.4x slower than its peers scores 0.71. Returns one dict per rank: rank, score,
    step_score, busy_score, the medians, straggler (score under `threshold`).
    """
    valid = [i for i, s in enumerate(stats) if s[3] > 0 and s[0] > 0]
    if not valid:
        return []
    steps = [float(stats[i][0]) for i in valid]
    busys = [float(stats[i][1]) for i in valid]
    median_step = statistics.median(steps)
    use_busy = min(busys) > BUSY_MIN_FRACTION * median_step
    pos = {rank: k for k, rank in enumerate(valid)}
    out: list[dict[str, Any]] = []
    for rank, s in enumerate(stats):
        step_s, busy_s, wait_s, n = s[0], s[1], s[2], s[3]
        if rank not in pos:
            out.append({"rank": rank, "score": None, "straggler": False, "samples": int(n)})
            continue
        k = pos[rank]
        step_ref = _peer_median(steps, k)
        busy_ref = _peer_median(busys, k)
        step_score = min(1.0, step_ref / step_s)
        busy_score = min(1.0, busy_ref / busy_s) if use_busy and busy_s > 0 else 1.0
        score = min(step_score, busy_score)
        out.append({"rank": rank, "score": round(score, 4), "step_score": round(step_score, 4),
                    "busy_score": round(busy_score, 4), "step_ms": round(step_s * 1e3, 3),
                    "busy_ms": round(busy_s * 1e3, 3), "wait_ms": round(wait_s * 1e3, 3),
                    "peer_step_ms": round(step_ref * 1e3, 3), "peer_busy_ms": round(busy_ref * 1e3, 3),
                    "samples": int(n), "straggler": score < threshold})
    return out


class _Waiting:
    __slots__ = ("_det", "_t0")

    def __init__(self, det: StragglerDetector) -> None:
        self._det = det
        self._t0 = 0.0

    def __enter__(self) -> _Waiting:
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._det._wait += time.perf_counter() - self._t0


class StragglerDetector:
    """Flags ranks whose steps are slower than the fastest rank's; see the module docstring."""

    def __init__(self, interval_steps: int = 50, threshold: float = 0.8, events: EventWriter | None = None, *,
                 group: Any = None, rank: int | None = None, report_rank: int = 0,
                 confirm_intervals: int = 2) -> None:
        self.interval_steps = max(1, int(interval_steps))
        self.threshold = float(threshold)
        self.confirm_intervals = max(1, int(confirm_intervals))
        self._under: dict[int, int] = {}  # rank -> intervals in a row under the threshold
        self.events = events
        self.group = group
        self._rank = rank
        self.report_rank = report_rank
        self.host = socket.gethostname().split(".")[0]
        self.hosts: list[str] | None = None
        self.steps = 0
        self.intervals = 0
        self.last: list[dict[str, Any]] = []  # the latest interval's scores, every rank
        self.flagged: list[dict[str, Any]] = []  # every straggler report so far
        self.faults = 0
        self._disabled = False
        self._t0: float | None = None
        self._wait = 0.0
        self._step_times: list[float] = []
        self._wait_times: list[float] = []
        self._probe: Any = None

    # ----- per-step API ---------------------------------------------------------------------
    def step_start(self) -> None:
        self._t0 = time.perf_counter()
        self._wait = 0.0

    def step_end(self) -> list[dict[str, Any]] | None:
        """Close the step; at an interval boundary returns the stragglers (possibly [])."""
        if self._t0 is None:
            return None
        dt = time.perf_counter() - self._t0
        self._t0 = None
        return self.record(dt)

    def waiting(self) -> _Waiting:
        """Context manager: time spent inside counts as waiting at a collective."""
        return _Waiting(self)

    def record(self, step_time: float, wait_time: float | None = None) -> list[dict[str, Any]] | None:
        """Add one step's duration (and its wait, default: what waiting()/sync_point() measured)."""
        try:
            wait = self._wait if wait_time is None else float(wait_time)
            step_s = float(step_time)
        except (TypeError, ValueError) as exc:  # the step still counts: collectives stay aligned
            self._fault("record", exc, disable=False)
            wait = step_s = 0.0
        self._wait = 0.0
        self._step_times.append(step_s)
        self._wait_times.append(wait)
        self.steps += 1
        if self.steps % self.interval_steps:
            return None
        return self._interval()

    def sync_point(self) -> float:
        """A one-element all_reduce: the time from this rank's arrival to its completion.

        Added to the current step's wait; returns it (0.0 without a process group).
        """
        dist = self._dist()
        if dist is None:
            return 0.0
        t0 = time.perf_counter()
        try:
            if self._probe is None:
                self._probe = self._torch().zeros(1, device=self._device(dist))
            dist.all_reduce(self._probe, group=self.group)
        except Exception as exc:  # noqa: BLE001
            self._fault("sync point", exc)
            return 0.0
        wait = time.perf_counter() - t0
        self._wait += wait
        return wait

    @property
    def rank(self) -> int:
        dist = self._dist()
        if self._rank is not None:
            return self._rank
        return int(dist.get_rank()) if dist is not None else env_rank()

    # ----- interval ---------------------------------------------------------------------------
    def _local_stats(self) -> list[float]:
        try:
            stats = interval_stats(self._step_times[-self.interval_steps:], self._wait_times[-self.interval_steps:])
        except Exception as exc:  # noqa: BLE001 - a bad sample must not skip the collective
            self._fault("statistics", exc, disable=False)
            stats = [0.0, 0.0, 0.0, 0.0]
        self._step_times.clear()
        self._wait_times.clear()
        return stats

    def _interval(self) -> list[dict[str, Any]]:
        self.intervals += 1
        local = self._local_stats()
        dist = self._dist()
        if dist is None:
            all_stats = [local]
            self.hosts = [self.host]
        else:
            gathered = self._gather(dist, local)
            if gathered is None:
                return []
            all_stats = gathered
        scores = score_ranks(all_stats, self.threshold)
        hosts = self.hosts or []
        for s in scores:
            s["host"] = hosts[s["rank"]] if s["rank"] < len(hosts) else None
            under = self._under.get(s["rank"], 0) + 1 if s["straggler"] else 0
            self._under[s["rank"]] = under
            s["below"] = bool(s["straggler"])  # under the threshold in this interval
            s["intervals_below"] = under
            s["straggler"] = under >= self.confirm_intervals
        self.last = scores
        bad = [s for s in scores if s["straggler"]]
        if bad:
            self.flagged.extend(dict(s, interval=self.intervals, step=self.steps) for s in bad)
            if self.events is not None and self.rank == self.report_rank:
                self._report(bad, scores)
        return bad

    def _gather(self, dist: Any, local: list[float]) -> list[list[float]] | None:
        try:
            if self.hosts is None:
                hosts: list[Any] = [None] * dist.get_world_size(self.group)
                dist.all_gather_object(hosts, self.host, group=self.group)
                self.hosts = [str(h) for h in hosts]
            torch = self._torch()
            dev = self._device(dist)
            mine = torch.tensor(local, dtype=torch.float64, device=dev)
            out = [torch.zeros_like(mine) for _ in range(dist.get_world_size(self.group))]
            dist.all_gather(out, mine, group=self.group)
            return [[float(x) for x in t.tolist()] for t in out]
        except Exception as exc:  # noqa: BLE001
            self._fault("all_gather", exc)
            return None

    def _report(self, bad: list[dict[str, Any]], scores: list[dict[str, Any]]) -> None:
        assert self.events is not None
        fastest = min((s for s in scores if s.get("score") is not None), key=lambda s: s["busy_ms"])
        names = ", ".join(f"rank {s['rank']} ({s['host']}) score {s['score']:.2f}, "
                          f"{s['busy_ms'] / max(s['peer_busy_ms'], 1e-9):.2f}x its peers' busy time" for s in bad)
        evidence = [f"rank {s['rank']} on {s['host']}: step {s['step_ms']:.1f} ms, busy {s['busy_ms']:.1f} ms, "
                    f"waiting at collectives {s['wait_ms']:.1f} ms (median of {s['samples']} steps)"
                    for s in scores]
        evidence.append(f"fastest: rank {fastest['rank']} busy {fastest['busy_ms']:.1f} ms; score = the peers' "
                        f"median / the rank's own; threshold {self.threshold:g} in {self.confirm_intervals} "
                        f"interval(s) of {self.interval_steps} steps in a row")
        self.events.emit(CHECK, Status.WARN,
                         f"straggler{'s' if len(bad) > 1 else ''} at step {self.steps}: {names}",
                         evidence=evidence,
                         remedy="check the slow ranks' nodes (GPU clocks and thermals, `nvidia-smi -q -d "
                                "PERFORMANCE`, CPU contention, data-loader workers); drain the node if it "
                                "stays slow, or restart the job without it",
                         facts={"stragglers": [s["rank"] for s in bad],
                                "hosts": sorted({str(s["host"]) for s in bad}),
                                "threshold": self.threshold, "interval_steps": self.interval_steps,
                                "confirm_intervals": self.confirm_intervals,
                                "ranks": scores}, step=self.steps)

    # ----- plumbing ---------------------------------------------------------------------------
    def _dist(self) -> Any:
        if self._disabled:
            return None
        dist = sys.modules.get("torch.distributed")  # a job that did not import it has no group
        if dist is None:
            return None
        if not (dist.is_available() and dist.is_initialized()):
            return None
        return dist

    @staticmethod
    def _torch() -> Any:
        import torch

        return torch

    def _device(self, dist: Any) -> Any:
        backend = str(dist.get_backend(self.group)).lower()
        if "nccl" in backend:
            torch = self._torch()
            return torch.device("cuda", torch.cuda.current_device())
        return "cpu"

    def _fault(self, what: str, exc: BaseException, disable: bool = True) -> None:
        self.faults += 1
        if disable:
            # a failed collective leaves the ranks out of step: issue no more of ours
            self._disabled = True
        if self.faults <= 3:
            log.warning("preflight: straggler detector %s failed%s: %s", what,
                        ", detector disabled" if disable else "", exc)
