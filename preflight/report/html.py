"""Self-contained HTML report: one file, no external assets (inline CSS and SVG).

Verdict first, then a per-node table (bad nodes first), the findings with evidence and remedy,
the sweep's busbw per message size against the profile's expected band, and, when a history
summary is given, flapping and lemon nodes and each node's bandwidth over time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from html import escape
from typing import Any

from preflight.model import Result, Status, is_node
from preflight.report.base import natural

_COLORS = {"pass": "#1a7f37", "warn": "#9a6700", "fail": "#cf222e", "error": "#8250df", "skip": "#6e7781"}
_PALETTE = ("#0969da", "#cf222e", "#1a7f37", "#8250df", "#bc4c00", "#1b7c83", "#bf3989", "#57606a")
_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#1f2328;max-width:1150px}
h1{margin:0 0 8px 0} h2{border-bottom:1px solid #d0d7de;padding-bottom:4px;margin-top:28px}
.verdict{padding:14px 18px;border-radius:8px;color:#fff;font-size:26px;font-weight:700}
.go{background:#1a7f37} .nogo{background:#cf222e}
.meta{color:#57606a;margin:10px 0} table{border-collapse:collapse;margin:8px 0;font-size:14px}
th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top} th{background:#f6f8fa}
.st{font-weight:700;text-transform:uppercase;font-size:12px}
.finding{border-left:4px solid #cf222e;padding:4px 12px;margin:12px 0;background:#fff8f8}
.finding.warn{border-color:#9a6700;background:#fffbf0} .finding.error{border-color:#8250df;background:#fbf8ff}
pre{background:#f6f8fa;padding:8px;overflow-x:auto;font-size:12px;margin:6px 0}
.remedy{font-weight:600} svg{background:#fff;border:1px solid #d0d7de;margin:8px 0}
.legend span{margin-right:14px;font-size:13px}
"""


def _st(status: str) -> str:
    return f'<span class="st" style="color:{_COLORS.get(status, "#000")}">{escape(status)}</span>'


def _fmt_bytes(b: float) -> str:
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= div:
            v = b / div
            return f"{v:g}{unit}" if v == int(v) else f"{v:.1f}{unit}"
    return f"{int(b)}"


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.ceil(lo / step) * step
    out = []
    v = start
    while v <= hi + 1e-9:
        out.append(round(v, 10))
        v += step
    return out


# ---- sweep plot -----------------------------------------------------------------------------


def _band(r: Result, profile: Any) -> tuple[float | None, float | None, int]:
    """(fail floor, warn floor, from which size) for this all-reduce result's table."""
    if profile is None:
        return None, None, 0
    table = str(r.facts.get("table") or "single_node")
    try:
        fail = profile.get(f"nccl.allreduce.{table}.peak_busbw_fail")
        warn = profile.get(f"nccl.allreduce.{table}.peak_busbw_warn")
        min_b = int(profile.get("nccl.allreduce.peak_min_bytes") or 0)
    except Exception:
        return None, None, 0
    return (float(fail) if isinstance(fail, (int, float)) else None,
            float(warn) if isinstance(warn, (int, float)) else None, min_b)


@dataclass
class _SweepFrame:
    """The sweep plot's plot area: log2 of the size across, busbw (GB/s, from 0) up."""

    width: int
    height: int
    x_lo: float
    x_hi: float
    y_hi: float
    ml: int = 64
    mr: int = 20
    mt: int = 30
    mb: int = 48

    @property
    def pw(self) -> int:
        return self.width - self.ml - self.mr

    @property
    def ph(self) -> int:
        return self.height - self.mt - self.mb

    def x(self, b: float) -> float:
        return self.ml + (math.log2(b) - self.x_lo) / (self.x_hi - self.x_lo) * self.pw

    def y(self, v: float) -> float:
        return self.mt + self.ph - v / self.y_hi * self.ph


def _sweep_band(fr: _SweepFrame, fail: float | None, warn: float | None, min_b: int) -> list[str]:
    """The floors as dashed lines across, and from peak_min_bytes on the fail, warn and ok bands."""
    if fail is None and warn is None:
        return []
    ml, pw, mt, y = fr.ml, fr.pw, fr.mt, fr.y
    parts = []
    # the floors hold from peak_min_bytes on; the band stays visible when that is the last size
    bx = min(max(ml, fr.x(min_b)), ml + pw - 0.06 * pw) if min_b > 0 else ml
    bw = ml + pw - bx
    for floor, color in ((warn, "#9a6700"), (fail, "#cf222e")):
        if floor is not None:
            parts.append(f'<line class="floor" x1="{ml}" x2="{ml + pw}" y1="{y(floor):.1f}" y2="{y(floor):.1f}" '
                         f'stroke="{color}" stroke-dasharray="5,4" stroke-width="1"/>')
    if bw <= 0:
        return parts
    if fail is not None:
        parts.append(f'<rect class="band-fail" x="{bx:.1f}" y="{y(fail):.1f}" width="{bw:.1f}" '
                     f'height="{y(0) - y(fail):.1f}" fill="#cf222e" fill-opacity="0.10"/>')
    if warn is not None:
        lo = fail if fail is not None else 0.0
        parts.append(f'<rect class="band-warn" x="{bx:.1f}" y="{y(warn):.1f}" width="{bw:.1f}" '
                     f'height="{y(lo) - y(warn):.1f}" fill="#d4a72c" fill-opacity="0.18"/>')
        parts.append(f'<rect class="band-ok" x="{bx:.1f}" y="{mt}" width="{bw:.1f}" '
                     f'height="{y(warn) - mt:.1f}" fill="#1a7f37" fill-opacity="0.08"/>')
        parts.append(f'<text x="{ml + pw - 4}" y="{y(warn) - 4:.1f}" font-size="11" text-anchor="end" '
                     f'fill="#1a7f37">expected &gt;= {warn:g} GB/s</text>')
    if fail is not None:
        parts.append(f'<text x="{ml + pw - 4}" y="{y(fail) + 13:.1f}" font-size="11" text-anchor="end" '
                     f'fill="#cf222e">fail &lt; {fail:g} GB/s</text>')
    return parts


def _sweep_axes(fr: _SweepFrame, rows: list[dict[str, Any]]) -> list[str]:
    """Grid and busbw ticks, size labels (about ten), the axes and their titles."""
    ml, pw, mt, ph, x, y = fr.ml, fr.pw, fr.mt, fr.ph, fr.x, fr.y
    parts = []
    for v in _ticks(0, fr.y_hi):
        parts.append(f'<line x1="{ml}" x2="{ml + pw}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#eaeef2"/>'
                     f'<text x="{ml - 6}" y="{y(v) + 4:.1f}" font-size="11" text-anchor="end">{v:g}</text>')
    step = max(1, math.ceil(len(rows) / 10))
    for row in rows[::step]:
        parts.append(f'<text x="{x(row["bytes"]):.1f}" y="{mt + ph + 16}" font-size="11" '
                     f'text-anchor="middle">{_fmt_bytes(row["bytes"])}</text>')
    parts.append(f'<line x1="{ml}" x2="{ml + pw}" y1="{mt + ph}" y2="{mt + ph}" stroke="#57606a"/>'
                 f'<line x1="{ml}" x2="{ml}" y1="{mt}" y2="{mt + ph}" stroke="#57606a"/>')
    parts.append(f'<text x="{ml + pw / 2:.0f}" y="{fr.height - 8}" font-size="12" text-anchor="middle">'
                 'message size (bytes)</text>'
                 f'<text x="14" y="{mt + ph / 2:.0f}" font-size="12" text-anchor="middle" '
                 f'transform="rotate(-90 14 {mt + ph / 2:.0f})">busbw (GB/s)</text>')
    return parts


def _sweep_line(fr: _SweepFrame, rows: list[dict[str, Any]]) -> list[str]:
    """The measured busbw line, a point per size coloured by its status."""
    pts = " ".join(f"{fr.x(row['bytes']):.1f},{fr.y(float(row['busbw'])):.1f}" for row in rows)
    parts = [f'<polyline class="busbw" points="{pts}" fill="none" stroke="#0969da" stroke-width="2"/>']
    for row in rows:
        color = _COLORS.get(str(row.get("status") or "pass"), "#0969da")
        parts.append(f'<circle cx="{fr.x(row["bytes"]):.1f}" cy="{fr.y(float(row["busbw"])):.1f}" r="3.5" '
                     f'fill="{color}"><title>{_fmt_bytes(row["bytes"])}: {float(row["busbw"]):.4g} GB/s'
                     f'</title></circle>')
    return parts


def sweep_svg(r: Result, profile: Any = None, width: int = 820, height: int = 360) -> str:
    """busbw per message size (log scale), with the expected band from the profile."""
    rows = [row for row in r.facts.get("rows") or [] if isinstance(row, dict)
            and isinstance(row.get("bytes"), (int, float)) and row["bytes"] > 0
            and isinstance(row.get("busbw"), (int, float))]
    if not rows:
        return ""
    rows.sort(key=lambda row: row["bytes"])
    fail, warn, min_b = _band(r, profile)
    x_lo, x_hi = math.log2(rows[0]["bytes"]), math.log2(rows[-1]["bytes"])
    fr = _SweepFrame(width=width, height=height, x_lo=x_lo, x_hi=x_hi if x_hi > x_lo else x_lo + 1,
                     y_hi=max([float(row["busbw"]) for row in rows] + [warn or 0.0, fail or 0.0]) * 1.12 or 1.0)
    parts = [f'<svg id="sweep-plot" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="all-reduce busbw per message size">',
             f'<text x="{fr.ml}" y="18" font-size="14" font-weight="600">all-reduce busbw on {escape(r.node)} '
             f'({escape(str(r.facts.get("table") or ""))})</text>']
    parts += _sweep_band(fr, fail, warn, min_b)
    parts += _sweep_axes(fr, rows)
    parts += _sweep_line(fr, rows)
    parts.append("</svg>")
    return "\n".join(parts)


# ---- history plot ---------------------------------------------------------------------------


def history_svg(trends: Sequence[Any], kind: str, width: int = 820, height: int = 320) -> str:
    """Each node's (pair's) bandwidth over time, one line per label."""
    series = [t for t in trends if t.kind == kind and t.points]
    if not series:
        return ""
    ml, mr, mt, mb = 64, 20, 30, 60
    pw, ph = width - ml - mr, height - mt - mb
    ts = [p[0] for t in series for p in t.points]
    vs = [p[1] for t in series for p in t.points]
    t_lo, t_hi = min(ts), max(ts)
    t_hi = t_hi if t_hi > t_lo else t_lo + 1
    y_hi = max(vs) * 1.12 or 1.0

    def x(t: float) -> float:
        return ml + (t - t_lo) / (t_hi - t_lo) * pw

    def y(v: float) -> float:
        return mt + ph - v / y_hi * ph

    what = "all-reduce peak busbw" if kind == "allreduce" else "ping-pong bandwidth per pair"
    parts = [f'<svg id="history-plot-{kind}" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{what} over time">',
             f'<text x="{ml}" y="18" font-size="14" font-weight="600">{what} over time (GB/s)</text>']
    for v in _ticks(0, y_hi):
        parts.append(f'<line x1="{ml}" x2="{ml + pw}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#eaeef2"/>'
                     f'<text x="{ml - 6}" y="{y(v) + 4:.1f}" font-size="11" text-anchor="end">{v:g}</text>')
    for t, anchor in ((t_lo, "start"), ((t_lo + t_hi) / 2, "middle"), (t_hi, "end")):
        label = datetime.fromtimestamp(t, timezone.utc).strftime("%m-%d %H:%M")
        parts.append(f'<text x="{x(t):.1f}" y="{mt + ph + 16}" font-size="11" text-anchor="{anchor}">{label}</text>')
    parts.append(f'<line x1="{ml}" x2="{ml + pw}" y1="{mt + ph}" y2="{mt + ph}" stroke="#57606a"/>')
    for i, t in enumerate(series):
        color = _PALETTE[i % len(_PALETTE)]
        pts = " ".join(f"{x(a):.1f},{y(b):.1f}" for a, b in t.points)
        parts.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2">'
                     f'<title>{escape(t.label)}</title></polyline>')
        for a, b in t.points:
            parts.append(f'<circle cx="{x(a):.1f}" cy="{y(b):.1f}" r="2.5" fill="{color}"/>')
        lx = ml + (i % 4) * (pw / 4)
        ly = mt + ph + 34 + (i // 4) * 14
        parts.append(f'<rect x="{lx:.0f}" y="{ly - 9}" width="10" height="10" fill="{color}"/>'
                     f'<text x="{lx + 14:.0f}" y="{ly}" font-size="11">{escape(t.label)}'
                     f'{" (low)" if t.low else ""}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


# ---- the page -------------------------------------------------------------------------------


def _profile_for(report: Any, profile: Any) -> Any:
    if profile is not None:
        return profile
    names = sorted(set((getattr(report, "profiles", None) or {}).values()))
    if not names:
        return None
    try:
        from preflight.profile import load

        return load(names[0])
    except Exception:
        return None


def _node_table(results: Sequence[Result], nodes: Sequence[str]) -> str:
    by: dict[str, list[Result]] = {n: [] for n in nodes if is_node(n)}
    for r in results:
        if is_node(r.node):  # results about the nodes together are in the findings, not a node's row
            by.setdefault(r.node, []).append(r)

    def worst(rs: list[Result]) -> Status:
        return max((r.status for r in rs), key=lambda s: s.rank, default=Status.SKIP)

    order = sorted(by, key=lambda n: (-worst(by[n]).rank, natural(n)))
    rows = ["<table id=\"nodes\"><tr><th>node</th><th>status</th><th>fail/error</th><th>warn</th><th>pass</th>"
            "<th>blocking checks</th></tr>"]
    for n in order:
        rs = by[n]
        bad = sorted({r.check for r in rs if r.status in (Status.FAIL, Status.ERROR)})
        rows.append(f"<tr><td>{escape(n)}</td><td>{_st(worst(rs).value) if rs else ''}</td>"
                    f"<td>{sum(r.status in (Status.FAIL, Status.ERROR) for r in rs)}</td>"
                    f"<td>{sum(r.status is Status.WARN for r in rs)}</td>"
                    f"<td>{sum(r.status is Status.PASS for r in rs)}</td><td>{escape(', '.join(bad))}</td></tr>")
    rows.append("</table>")
    return "\n".join(rows)


def _findings(results: Sequence[Result]) -> str:
    out = []
    for r in results:
        if r.status in (Status.PASS, Status.SKIP):
            continue
        ev = "\n".join(r.evidence[:20]) + (f"\n... {len(r.evidence) - 20} more lines" if len(r.evidence) > 20 else "")
        out.append(f'<div class="finding {escape(r.status.value)}"><h3>{_st(r.status.value)} {escape(r.check)} on '
                   f"{escape(r.node)}</h3><p>{escape(r.summary)}</p>"
                   + (f"<pre>{escape(ev)}</pre>" if r.evidence else "")
                   + (f'<p class="remedy">Remedy: {escape(r.remedy)}</p>' if r.remedy else "")
                   + (f"<p><small>source: {escape(r.source)}</small></p>" if r.source else "") + "</div>")
    return "\n".join(out)


def _history_section(history: Any) -> str:
    out = ["<h2>History</h2>",
           f'<p class="meta">{history.runs} run(s) on {len(history.nodes)} node(s)'
           + (f" since {escape(history.to_dict()['since'])}" if history.since is not None else "") + "</p>"]
    if history.flapping:
        out.append('<h3>Flapping</h3><table id="flapping"><tr><th>node</th><th>check</th><th>failure episodes</th>'
                   "<th>runs (oldest first)</th></tr>")
        out += [f"<tr><td>{escape(f.node)}</td><td>{escape(f.check)}</td><td>{f.episodes}</td>"
                f"<td><code>{escape(f.sequence)}</code></td></tr>" for f in history.flapping]
        out.append("</table>")
    if history.lemons:
        out.append('<h3>Lemon nodes</h3><table id="lemons"><tr><th>node</th><th>kind</th><th>what</th>'
                   "<th>finding</th></tr>")
        out += [f"<tr><td>{escape(lm.node)}</td><td>{escape(lm.kind)}</td><td>{escape(lm.key)}</td>"
                f"<td>{escape(lm.summary)}</td></tr>" for lm in history.lemons]
        out.append("</table>")
    unchecked = getattr(history, "unchecked", [])
    if unchecked:
        out.append('<h3>Nodes not checked</h3><p class="meta">unreachable, or output lost: not counted as '
                   'failures</p><table id="not-checked"><tr><th>node</th><th>not checked</th><th>runs</th>'
                   "<th>most common cause</th></tr>")
        out += [f"<tr><td>{escape(u.node)}</td><td>{u.count}</td><td>{u.runs}</td>"
                f"<td>{escape(u.cause)} ({u.cause_count} runs)</td></tr>" for u in unchecked]
        out.append("</table>")
    if not history.flapping and not history.lemons:
        out.append("<p>No flapping or lemon node in this window.</p>")
    if history.trends:
        out.append('<h3>Bandwidth against each node\'s own past</h3><table id="trends"><tr><th>node / pair</th>'
                   "<th>latest</th><th>against its past</th></tr>")
        low = ' style="color:#cf222e;font-weight:600"'
        out += [f"<tr><td>{escape(t.label)}</td><td>{t.last:.4g} {escape(t.unit)}</td>"
                f"<td{low if t.low else ''}>{escape(t.summary)}</td></tr>" for t in history.trends]
        out.append("</table>")
        out += [svg for svg in (history_svg(history.trends, "allreduce"), history_svg(history.trends, "pingpong"))
                if svg]
    return "\n".join(out)


def render(report: Any, history: Any = None, profile: Any = None) -> str:
    """The whole report as one HTML page. `history`: a history Summary (optional);
    `profile`: the Profile for the sweep's expected band (default: the report's profile)."""
    v = report.verdict
    prof = _profile_for(report, profile)
    cls = "go" if v.verdict == "GO" else "nogo"
    counts = ", ".join(f"{k} {n}" for k, n in v.counts.items() if n) or "no results"
    head = (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>preflight {escape(report.command)}: {escape(v.verdict)}</title><style>{_CSS}</style></head><body>")
    body = [f'<div id="verdict" class="verdict {cls}">preflight {escape(report.command)}: {escape(v.verdict)}</div>',
            f'<p class="meta">started {escape(report.started or "-")}, took {report.duration_s:.2f} s; '
            f"{len(report.nodes)} node(s); {escape(counts)}"
            + (f"; profile {escape(', '.join(sorted(set(report.profiles.values()))))}" if report.profiles else "")
            + "</p>"]
    if v.bad_nodes:
        body.append(f"<p><b>Nodes blocking the job:</b> {escape(report.bad_hostlist() or ', '.join(v.bad_nodes))}</p>")
    body += ["<h2>Nodes</h2>", _node_table(report.results, report.nodes)]
    findings = _findings(report.results)
    if findings:
        body += ["<h2>Findings</h2>", findings]
    plots = [sweep_svg(r, prof) for r in report.results if r.check == "nccl.allreduce" and r.facts.get("rows")]
    plots = [p for p in plots if p]
    if plots:
        body += ["<h2>Sweep</h2>",
                 '<p class="legend"><span style="color:#1a7f37">&#9632; expected</span>'
                 '<span style="color:#9a6700">&#9632; warn</span><span style="color:#cf222e">&#9632; fail</span></p>',
                 *plots]
    if history is not None:
        body.append(_history_section(history))
    passed = [r for r in report.results if r.status in (Status.PASS, Status.SKIP)]
    if passed:
        body.append(f"<h2>Passed and skipped</h2><details><summary>{len(passed)} result(s)</summary><table>"
                    "<tr><th>node</th><th>check</th><th>status</th><th>summary</th></tr>"
                    + "".join(f"<tr><td>{escape(r.node)}</td><td>{escape(r.check)}</td><td>{_st(r.status.value)}</td>"
                              f"<td>{escape(r.summary)}</td></tr>" for r in passed)
                    + "</table></details>")
    return head + "\n".join(body) + "\n</body></html>\n"
