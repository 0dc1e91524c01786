"""The downtime of a triaged run: each interruption's lost time, GPU-hours and money, as results.

`results(bundle)` reads the run directory's files from every node of the bundle (a shared
run directory is read once) through `preflight.runtime.story` (the story triage's verdict
reads too) and gives one
`runtime.downtime` Result per incident (status WARN, node: the nodes it names, else "job";
facts: the numbers, with `incident`, the key that counts it once in history). The triage
report shows them (JSON key `downtime`), and the history records them with the triage run.

An attempt that stopped and never trained again is measured to the job's end when the
scheduler gave one, else to the time the bundle was collected, else to the triage: `until`
says which. The price per GPU-hour is the config file's `gpu_hour_cost` (`currency`), or
$PREFLIGHT_GPU_HOUR_COST.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from preflight.model import JOB, Result, Status
from preflight.runtime import downtime as dt
from preflight.runtime import story
from preflight.triage.collect import RUN_DIR_PROBE, Bundle, decode_files


def run_files(bundle: Bundle) -> list[dt.RunFile]:
    """The run directory's files of every node of the bundle."""
    out: list[dt.RunFile] = []
    for node, caps in sorted(bundle.nodes.items()):
        files, _ = decode_files(caps.get(RUN_DIR_PROBE))
        for f in files:
            name = f.name.replace("\\", "/").rsplit("/", 1)[-1]
            if f.truncated and name.endswith(".json"):
                continue  # a record cut by the collection's size limit is not JSON; attribution names it
            out.append(dt.RunFile(name=name, data=f.data, node=node))
    return out


def _when(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, str) or not value.strip() or value.strip().lower() in ("unknown", "none", "n/a"):
        return None
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return (parsed if parsed.tzinfo else parsed.astimezone()).timestamp()


def end_of(bundle: Bundle, now: float | None = None) -> tuple[float, str]:
    """Where an open incident's lost time ends, and what that moment is."""
    job_end = _when(bundle.job.get("end"))
    if job_end is not None:
        return job_end, "job end"
    created = _when(bundle.created)
    if created is not None:
        return created, "collect time"
    return (time.time() if now is None else now), "triage time"


def price(config: Any = None) -> tuple[float | None, str]:
    """The price per GPU-hour: $PREFLIGHT_GPU_HOUR_COST, else the site config's."""
    env = os.environ.get(dt.PRICE_ENV, "").strip()
    if env or config is None:
        return dt.price_from_config() if env else (None, dt.DEFAULT_CURRENCY)
    return getattr(config, "gpu_hour_cost", None), getattr(config, "currency", dt.DEFAULT_CURRENCY)


def story_of(bundle: Bundle, config: Any = None, now: float | None = None) -> story.Story:
    """The story of the bundle's run (`preflight.runtime.story`): attempts, causes, where the job
    stands, and each interruption's downtime, priced."""
    cost, currency = price(config)
    end, label = end_of(bundle, now)
    return story.tell(run_files(bundle), run_dir=bundle.run_dir, end=end, end_label=label,
                      cost_per_gpu_hour=cost, currency=currency)


def measure_bundle(bundle: Bundle, cost_per_gpu_hour: float | None = None, currency: str = dt.DEFAULT_CURRENCY,
                   now: float | None = None) -> dict[str, Any]:
    """{"incidents", "total", "notes"} of the bundle's run directory."""
    end, label = end_of(bundle, now)
    return story.tell(run_files(bundle), run_dir=bundle.run_dir, end=end, end_label=label,
                      cost_per_gpu_hour=cost_per_gpu_hour, currency=currency).downtime


def to_results(items: Iterable[Mapping[str, Any]], source: str = "") -> list[Result]:
    """One runtime.downtime Result per incident."""
    out = []
    for n in items:
        ev = [*list(n.get("evidence") or [])[:12], *(f"note: {x}" for x in n.get("notes") or [])]
        out.append(Result(check=dt.CHECK, node=",".join(n.get("nodes") or []) or JOB, status=Status.WARN,
                          summary=dt.describe(n), evidence=ev, remedy=dt.remedy_for(n),
                          facts={k: v for k, v in n.items() if k != "evidence"}, source=source or "triage"))
    return out


def results(bundle: Bundle, config: Any = None, now: float | None = None,
            told: story.Story | None = None) -> list[Result]:
    """The bundle's incidents (of `told`, its story when already read) as runtime.downtime Results
    (none when the run was never interrupted). Never raises: a fault here must not cost the triage
    its verdict (it is one ERROR result)."""
    try:
        doc = (told or story_of(bundle, config, now)).downtime
        return to_results(doc["incidents"], bundle.source or "collect")
    except Exception as exc:  # noqa: BLE001
        return [Result(check=dt.CHECK, node=JOB, status=Status.ERROR,
                       summary=f"downtime not measured: {type(exc).__name__}: {exc}")]


def from_report(results_: Sequence[Any]) -> dict[str, Any]:
    """The `downtime` document of a triage report: its runtime.downtime results' numbers and the
    total ({"incidents": [], "total": ...} when there was none)."""
    items = [dict(r.facts) for r in results_ if r.check == dt.CHECK and r.status is not Status.ERROR]
    return {"incidents": items, "total": dt.totals(items)}
