"""Fleet baselines: expected values learned from a fleet run, written as a profile.

From every node's (or node group's) all-reduce peak busbw, per table (single_node,
multi_node), outliers are removed iteratively (median/MAD, or mean/stddev) until the set is
stable; the floors follow from what is left:

- warn floor: the robust center minus `warn_sigmas` spreads, never above the slowest kept node;
- fail floor: `fail_fraction` of the center (a node that far under the fleet is broken).

The profile extends the one the fleet ran with, and every value says where it came from
(`source = "learned from 14 nodes on 2026-11-23: ..."`).

A learned profile lowers or raises the floors a whole fleet is graded by, so `vet` keeps it
from poisoning them: only PASS results are learned from (a WARN or FAIL is under the fleet's
expectation already and would pull the floor down; an ERROR measured nothing); a table with
fewer than `min_samples` nodes (groups) is not learned (a spread estimated from a handful of
values is noise: the MAD's relative error is about 1.16/sqrt(n), ~40% at 8, ~67% at 3, and a
3-sigma floor from it can land below zero); a floor at or below zero is never written; a floor
under `parent_fraction` of the parent profile's, results of another backend (gloo on CPUs
under a GPU profile) or of another GPU model than the parent's are refused unless forced, and
a forced profile says so in every value's source.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from preflight import facts as result_facts
from preflight.history.store import Row
from preflight.model import CLUSTER, Status
from preflight.profile import Profile

MAD_TO_SIGMA = 1.4826  # the MAD of a normal distribution times this is its standard deviation


@dataclass(frozen=True)
class Fit:
    center: float
    spread: float  # robust standard deviation (MAD-based) or the stddev
    kept: dict[str, float]
    dropped: dict[str, float]
    iterations: int
    method: str


def robust_fit(values: Mapping[str, float], method: str = "mad", k: float = 3.0, max_iter: int = 20,
               min_keep: int = 3, min_rel_spread: float = 0.01) -> Fit:
    """Drop values more than k spreads from the center, repeat until nothing more drops.

    The spread is never taken below `min_rel_spread` of the center: a bandwidth test repeats
    to about 1%, so nodes closer than that are alike even when the measured spread is ~0."""
    if method not in ("mad", "std"):
        raise ValueError(f"method {method!r}: use mad or std")
    kept = {n: float(v) for n, v in values.items() if isinstance(v, (int, float)) and math.isfinite(v)}
    if not kept:
        raise ValueError("no values to learn from")
    dropped: dict[str, float] = {}
    it = 0
    center, spread = 0.0, 0.0
    while True:
        it += 1
        vals = list(kept.values())
        if method == "mad":
            center = statistics.median(vals)
            spread = MAD_TO_SIGMA * statistics.median(abs(v - center) for v in vals)
        else:
            center = statistics.fmean(vals)
            spread = statistics.pstdev(vals) if len(vals) > 1 else 0.0
        if it > max_iter or len(kept) <= min_keep:
            break
        limit = k * max(spread, min_rel_spread * abs(center))
        out = {n: v for n, v in kept.items() if abs(v - center) > limit}
        if not out or len(kept) - len(out) < min(min_keep, len(kept)):
            break
        dropped.update(out)
        kept = {n: v for n, v in kept.items() if n not in out}
    return Fit(center=center, spread=spread, kept=kept, dropped=dropped, iterations=it, method=method)


@dataclass
class Learned:
    table: str
    fit: Fit
    warn: float
    fail: float
    source: str
    nodes: list[str] = field(default_factory=list)
    forced: list[str] = field(default_factory=list)  # the refusals --force overrode

    @property
    def samples(self) -> int:
        """The nodes (node groups) measured for this table, outliers included."""
        return len(self.fit.kept) + len(self.fit.dropped)

    @property
    def what(self) -> str:
        return "nodes" if self.table == "single_node" else "node groups"


def fleet_values(rows: Iterable[Row]) -> dict[str, dict[str, float]]:
    """table -> node (or node group) -> all-reduce peak busbw (the median of its runs)."""
    series: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        peak = result_facts.peak_busbw(r)
        if peak is None:
            continue
        hosts = result_facts.sweep_hosts(r)
        table = str(r.facts.get("table") or "")
        if table not in ("single_node", "multi_node"):
            table = "multi_node" if len(hosts) > 1 else "single_node"
        label = "+".join(sorted(hosts)) if r.node == CLUSTER and hosts else r.node
        series.setdefault(table, {}).setdefault(label, []).append(peak)
    return {t: {n: statistics.median(v) for n, v in per.items()} for t, per in series.items()}


def learn(rows: Sequence[Row], method: str = "mad", k: float = 3.0, warn_sigmas: float = 3.0,
          fail_fraction: float = 0.75, today: str | None = None) -> list[Learned]:
    """Floors per table from a fleet run's rows."""
    day = today or datetime.now(timezone.utc).date().isoformat()
    out = []
    for table, values in sorted(fleet_values(rows).items()):
        fit = robust_fit(values, method, k)
        warn = min(min(fit.kept.values()), fit.center - warn_sigmas * fit.spread)
        fail = min(warn, fit.center * fail_fraction)
        dropped = ", ".join(f"{n} {v:.4g}" for n, v in sorted(fit.dropped.items())) or "none"
        what = "nodes" if table == "single_node" else "node groups"
        source = (f"learned from {len(fit.kept)} {what} on {day}: {'median' if method == 'mad' else 'mean'} "
                  f"{fit.center:.4g} GB/s, sigma {fit.spread:.3g} ({method}), {fit.iterations} pass(es); "
                  f"outliers dropped: {dropped}")
        out.append(Learned(table=table, fit=fit, warn=_round(warn), fail=_round(fail), source=source,
                           nodes=sorted(fit.kept)))
    return out


def _round(v: float) -> float:
    """Four significant digits: 331.2 GB/s, and a CPU run's 0.2631 GB/s does not round to 0."""
    return float(f"{v:.4g}")


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def profile_toml(learned: Sequence[Learned], name: str, extends: str, description: str = "") -> str:
    """The profile file: `extends` the fleet's profile, overriding the learned floors."""
    lines = [f"# {name}: expected values learned from a fleet run by `preflight baseline learn`.", "",
             "[profile]", f"name = {_q(name)}",
             f"description = {_q(description or 'fleet baseline learned by preflight baseline learn')}",
             f"extends = {_q(extends)}", ""]
    for lr in learned:
        source = lr.source + (f"; FORCED (--force) despite: {'; '.join(lr.forced)}" if lr.forced else "")
        if lr.forced:
            lines.insert(1, f"# {lr.table} written with --force despite: {'; '.join(lr.forced)}")
        lines += [f"[nccl.allreduce.{lr.table}]",
                  f"peak_busbw_warn = {{ value = {lr.warn!r}, source = {_q(source + '; warn floor')} }}",
                  f"peak_busbw_fail = {{ value = {lr.fail!r}, source = {_q(source + '; fail floor')} }}",
                  f"learned_median_busbw = {{ value = {round(lr.fit.center, 3)!r}, source = {_q(source)} }}",
                  ""]
    return "\n".join(lines)


def fleet_profile(rows: Sequence[Any]) -> str:
    """The profile most of the fleet's runs used ("generic" when none is known)."""
    names: dict[str, int] = {}
    for p in rows:
        for name in str(p).split(","):
            if name:
                names[name] = names.get(name, 0) + 1
    return max(sorted(names), key=lambda n: names[n]) if names else "generic"


# ---------------------------------------------------------------------------------------------
# What keeps a learned profile from poisoning the fleet's floors


@dataclass(frozen=True)
class Safety:
    min_samples: int = 8  # nodes (node groups) per table: fewer is not learned
    parent_fraction: float = 0.5  # a floor under this fraction of the parent's is refused (0: no check)
    force: bool = False  # write despite the fraction, backend and model refusals


@dataclass
class Picked:
    """The results learned from, and how many others were left out, by reason."""

    rows: list[Row]
    left_out: dict[str, int] = field(default_factory=dict)

    def left_out_text(self) -> str:
        if not self.left_out:
            return ""
        counts = ", ".join(f"{n} {why}" for why, n in sorted(self.left_out.items()))
        return (f"learned from PASS results only; left out {counts} (a WARN or FAIL is already under the "
                "fleet's expectation and would pull the floor down; an ERROR or SKIP measured nothing)")


def pick(rows: Iterable[Row]) -> Picked:
    """The nccl.allreduce results that passed, with a peak busbw above zero."""
    out = Picked(rows=[])
    for r in rows:
        if r.check != "nccl.allreduce":
            continue
        peak = result_facts.peak_busbw(r)
        why = Status(r.status).value.upper() if Status(r.status) is not Status.PASS else \
            "PASS without a peak busbw" if peak is None or not math.isfinite(peak) or peak <= 0 else ""
        if why:
            out.left_out[why] = out.left_out.get(why, 0) + 1
        else:
            out.rows.append(r)
    return out


@dataclass
class Hardware:
    """What the learned results ran on: backend -> results, GPU model -> results."""

    backends: dict[str, int] = field(default_factory=dict)
    models: dict[str, int] = field(default_factory=dict)
    unknown_model: int = 0  # results that name no GPU model (no gpu_models, no inventory of that run)


def hardware(picked: Sequence[Row], everything: Iterable[Row]) -> Hardware:
    """The backends and GPU models of the picked results: the all-reduce's own facts (backend,
    the ranks' GPU models) and the gpu.inventory results of the same run on the same nodes."""
    inventory: dict[tuple[int, str], list[str]] = {}
    for r in everything:
        if r.check == "gpu.inventory":
            inventory.setdefault((r.run_id, r.node), []).extend(result_facts.gpu_models(r))
    hw = Hardware()
    for r in picked:
        backend = result_facts.allreduce_backend(r)
        hw.backends[backend] = hw.backends.get(backend, 0) + 1
        nodes = result_facts.sweep_hosts(r) or [r.node]
        models = set(result_facts.gpu_models(r)) | {m for n in nodes for m in inventory.get((r.run_id, n), [])}
        for m in models:
            hw.models[m] = hw.models.get(m, 0) + 1
        if not models:
            hw.unknown_model += 1
    return hw


def _model_fits(name: str, expected: str) -> bool:
    n, e = " ".join(name.lower().split()), " ".join(expected.lower().split())
    return e in n


def hardware_objections(hw: Hardware, parent: Profile) -> list[str]:
    """Why the results cannot extend `parent`: another backend or GPU model than it describes."""
    model = str(parent.get("gpu.model") or "")
    gpus = bool(model) or bool(parent.get("gpu.count"))
    out = []
    other = {b: n for b, n in hw.backends.items() if b != "nccl"}
    if gpus and other:
        out.append(f"{', '.join(f'{n} result(s) ran {b}' for b, n in sorted(other.items()))}, but profile "
                   f"{parent.name} describes GPU nodes graded over NCCL")
    if model:
        wrong = {m: n for m, n in hw.models.items() if not _model_fits(m, model)}
        if wrong:
            out.append(f"{', '.join(f'{n} result(s) ran on {m}' for m, n in sorted(wrong.items()))}, but profile "
                       f"{parent.name} is for {model}")
        if hw.unknown_model:
            out.append(f"{hw.unknown_model} result(s) name no GPU model (no gpu_models fact, no gpu.inventory "
                       f"result of the same run), and profile {parent.name} is for {model}")
    return out


def _floor_objections(lr: Learned, parent: Profile, fraction: float) -> list[str]:
    out = []
    for kind, value in (("warn", lr.warn), ("fail", lr.fail)):
        theirs = parent.get(f"nccl.allreduce.{lr.table}.peak_busbw_{kind}")
        if fraction and isinstance(theirs, (int, float)) and theirs > 0 and value < fraction * theirs:
            out.append(f"{lr.table}: learned {kind} floor {value:g} GB/s is under {fraction:g} x the {kind} floor "
                       f"of {parent.name} ({float(theirs):g} GB/s)")
    return out


@dataclass
class Vetted:
    """The tables to write, and why the others are not written (or the whole profile is not)."""

    learned: list[Learned] = field(default_factory=list)
    too_few: list[str] = field(default_factory=list)  # tables left out for want of samples
    refused: list[str] = field(default_factory=list)  # never written, --force or not
    objections: list[str] = field(default_factory=list)  # written only with --force
    forced: bool = False

    @property
    def blocked(self) -> list[str]:
        """Why nothing may be written (empty: write `learned`)."""
        if self.refused:
            return self.refused
        if not self.learned:
            return self.too_few or ["no table to learn"]
        return [] if self.forced else self.objections


def vet(learned: Sequence[Learned], parent: Profile, hw: Hardware, safety: Safety) -> Vetted:
    """Which learned tables may be written over `parent`, under `safety`."""
    out = Vetted(forced=safety.force)
    general = hardware_objections(hw, parent)
    for lr in learned:
        if lr.samples < safety.min_samples:
            out.too_few.append(f"{lr.table}: {lr.samples} {lr.what} with a passing all-reduce, fewer than "
                               f"--min-samples {safety.min_samples}")
            continue
        if lr.warn <= 0 or lr.fail <= 0:
            out.refused.append(f"{lr.table}: the learned floors would be warn {lr.warn:g}, fail {lr.fail:g} GB/s "
                               f"(center {lr.fit.center:.4g}, sigma {lr.fit.spread:.3g} over {lr.samples} "
                               f"{lr.what}): the spread is too wide for a floor; learn from one kind of node at a time")
            continue
        objections = general + _floor_objections(lr, parent, safety.parent_fraction)
        out.objections += [o for o in objections if o not in out.objections]
        if safety.force:
            lr.forced = objections
        out.learned.append(lr)
    return out
