"""Fleet baselines: expected values learned from a fleet run, written as a profile.

From every node's (or node group's) all-reduce peak busbw, per table (single_node,
multi_node), outliers are removed iteratively (median/MAD, or mean/stddev) until the set is
stable; the floors follow from what is left:

- warn floor: the robust center minus `warn_sigmas` spreads, never above the slowest kept node;
- fail floor: `fail_fraction` of the center (a node that far under the fleet is broken).

The profile extends the one the fleet ran with, and every value says where it came from
(`source = "learned from 14 nodes on 2026-11-23: ..."`).
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
from preflight.model import CLUSTER

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
        out.append(Learned(table=table, fit=fit, warn=round(warn, 1), fail=round(fail, 1), source=source,
                           nodes=sorted(fit.kept)))
    return out


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def profile_toml(learned: Sequence[Learned], name: str, extends: str, description: str = "") -> str:
    """The profile file: `extends` the fleet's profile, overriding the learned floors."""
    lines = [f"# {name}: expected values learned from a fleet run by `preflight baseline learn`.", "",
             "[profile]", f"name = {_q(name)}",
             f"description = {_q(description or 'fleet baseline learned by preflight baseline learn')}",
             f"extends = {_q(extends)}", ""]
    for lr in learned:
        lines += [f"[nccl.allreduce.{lr.table}]",
                  f"peak_busbw_warn = {{ value = {lr.warn!r}, source = {_q(lr.source + '; warn floor')} }}",
                  f"peak_busbw_fail = {{ value = {lr.fail!r}, source = {_q(lr.source + '; fail floor')} }}",
                  f"learned_median_busbw = {{ value = {round(lr.fit.center, 3)!r}, source = {_q(lr.source)} }}",
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
