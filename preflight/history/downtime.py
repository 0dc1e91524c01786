"""Downtime in the history: time, GPU-hours and money lost, totalled per cause and per node.

The incidents reach the store as `runtime.downtime` results: `preflight triage` records its
report (one result per interruption of the run it triaged), and `preflight record --run-dir
DIR` measures a run directory and records its incidents without a triage. The same incident
triaged (or recorded) twice is counted once: its key is the run directory and the start of its
lost time (`facts.incident`); of its records the one measured to training again wins over one
that was still open (never trained again, measured to the triage), then the newest.

`summarize(rows)` gives `{"incidents", "total": {lost_s, gpu_hours, cost, by_cause,
by_node}, "recent": [...]}`; `lines(doc)` the console's plain lines (`downtime-cause hang: ...`,
`downtime-node gpu007: ...`), which `preflight history` prints after its tables, and
`--json` carries the document under `downtime`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from preflight.history.store import Row
from preflight.model import Status
from preflight.runtime import downtime as dt

RECENT = 10  # incidents listed, newest first


def _key(row: Row) -> str:
    inc = row.facts.get("incident")
    return str(inc) if inc else f"run {row.run_id}/{row.node}/{row.summary}"


def unique(rows: Iterable[Row]) -> list[Row]:
    """One row per incident: closed over open, then the newest record."""
    best: dict[str, Row] = {}
    for r in rows:
        if r.check != dt.CHECK or r.status is Status.ERROR or not isinstance(r.facts.get("lost_s"), (int, float)):
            continue
        k = _key(r)
        old = best.get(k)
        if old is None or (bool(old.facts.get("open")), -old.ts) > (bool(r.facts.get("open")), -r.ts):
            best[k] = r
    return sorted(best.values(), key=lambda r: (float(r.facts.get("last_good") or r.ts), r.run_id))


def priced(facts: dict[str, Any], cost_per_gpu_hour: float | None, currency: str) -> dict[str, Any]:
    """An incident recorded without a price, priced at the configured one (said in `priced_at`)."""
    if facts.get("cost") is not None or cost_per_gpu_hour is None:
        return facts
    gh = float(facts.get("gpu_hours") or 0.0)
    return {**facts, "cost": round(gh * cost_per_gpu_hour, 4), "currency": currency,
            "cost_per_gpu_hour": cost_per_gpu_hour, "priced_at": "history (config price)"}


def summarize(rows: Sequence[Row], cost_per_gpu_hour: float | None = None,
              currency: str = dt.DEFAULT_CURRENCY) -> dict[str, Any]:
    """The downtime document of the rows in the window; incidents recorded without a price are
    priced at `cost_per_gpu_hour` when one is given (those recorded with one keep theirs)."""
    kept = unique(rows)
    items = [priced(dict(r.facts), cost_per_gpu_hour, currency) for r in kept]
    recorded = sum(1 for r in rows if r.check == dt.CHECK and r.status is not Status.ERROR)
    return {"incidents": len(items), "records": recorded, "total": dt.totals(items),
            "recent": [{"summary": dt.describe(n), "run_id": r.run_id, **{k: n.get(k) for k in (
                "incident", "cause", "nodes", "ranks", "lost_s", "gpu_hours", "cost", "currency", "until",
                "last_good_iso")}} for r, n in reversed(list(zip(kept, items, strict=True))[-RECENT:])]}


def _cost(row: dict[str, Any], currency: Any) -> str:
    return f", {dt.money_text(row['cost'], currency)}" if row.get("cost") is not None else ""


def lines(doc: dict[str, Any]) -> list[str]:
    """Plain lines, one per row, each starting with its kind (grep-able); none without incidents."""
    total = doc.get("total") or {}
    if not doc.get("incidents"):
        return ["downtime: no interruption recorded in this window"]
    cur = total.get("currency")
    dup = doc.get("records", 0) - doc["incidents"]
    out = [f"downtime: {doc['incidents']} incident(s), lost {dt.duration_text(float(total.get('lost_s') or 0))}, "
           f"{float(total.get('gpu_hours') or 0):.3g} GPU-h{_cost(total, cur)}"
           + (f" ({dup} repeated record(s) of the same incidents counted once)" if dup > 0 else "")]
    for table, kind in (("by_cause", "downtime-cause"), ("by_node", "downtime-node")):
        rows = sorted((total.get(table) or {}).items(), key=lambda kv: -float(kv[1].get("gpu_hours") or 0))
        out += [f"{kind} {k}: {v['incidents']} incident(s), lost {dt.duration_text(float(v['lost_s']))}, "
                f"{float(v['gpu_hours']):.3g} GPU-h{_cost(v, cur)}" for k, v in rows]
    out += [f"downtime-incident {r['summary']}" for r in doc.get("recent") or []]
    return out


def render(doc: dict[str, Any], console: Any = None) -> None:
    """On a terminal a table per cause and per node; anywhere else the plain `lines`."""
    import sys

    from rich.console import Console
    from rich.table import Table

    con = console or Console(force_terminal=sys.stdout.isatty())
    if not con.is_terminal or not doc.get("incidents"):
        con.file.write("".join(f"{line}\n" for line in lines(doc)))
        con.file.flush()
        return
    total, cur = doc.get("total") or {}, (doc.get("total") or {}).get("currency")
    con.print(lines(doc)[0], highlight=False, markup=False)
    for table, title in (("by_cause", "downtime per cause"), ("by_node", "downtime per node")):
        t = Table(title=title)
        for col in ("cause" if table == "by_cause" else "node", "incidents", "lost", "GPU-h", "cost"):
            t.add_column(col)
        for k, v in sorted((total.get(table) or {}).items(), key=lambda kv: -float(kv[1].get("gpu_hours") or 0)):
            t.add_row(k, str(v["incidents"]), dt.duration_text(float(v["lost_s"])), f"{float(v['gpu_hours']):.3g}",
                      dt.money_text(v.get("cost"), cur) or "-")
        con.print(t)
