"""A bandwidth-vs-size chart as a standalone SVG (no plotting library): measured busbw per
message size on log-log axes, with the expected band (warn/fail floors) shaded."""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

W, H = 720, 400
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 40, 50


def _fmt_bytes(b: float) -> str:
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= div:
            return f"{b / div:g}{unit}"
    return f"{b:g}"


@dataclass
class _Axes:
    """Log-log axes: x is log10(bytes) from x0 to x1, y is log10(GB/s) decades lo..hi."""

    x0: float
    x1: float
    lo: int
    hi: int

    def px(self, x: float) -> float:
        return LEFT + (x - self.x0) / (self.x1 - self.x0) * (W - LEFT - RIGHT)

    def py(self, v: float) -> float:
        lv = math.log10(v) if v > 0 else self.lo
        return TOP + (self.hi - max(self.lo, min(self.hi, lv))) / (self.hi - self.lo) * (H - TOP - BOTTOM)


def _axes(pts: list[tuple[int, float]], floors: list[float]) -> _Axes:
    """Axes that hold every size, every positive bandwidth and the floors."""
    xs = [math.log10(s) for s, _ in pts]
    vals = [b for _, b in pts if b > 0] + floors
    lo = math.floor(math.log10(min(vals))) if vals else -3
    hi = math.ceil(math.log10(max(vals))) if vals else 0
    if hi <= lo:
        hi = lo + 1
    x0, x1 = min(xs), max(xs)
    if x1 <= x0:
        x1 = x0 + 1
    return _Axes(x0=x0, x1=x1, lo=lo, hi=hi)


def _expected_band(ax: _Axes, floor_fail: float | None, floor_warn: float | None, floor_from: int) -> list[str]:
    """The fail band (below the fail floor), the warn band above it, and the floors' lines."""
    out = []
    xf = ax.px(max(ax.x0, math.log10(floor_from))) if floor_from > 0 else LEFT
    if floor_fail:
        out.append(f'<rect x="{xf:.1f}" y="{ax.py(floor_fail):.1f}" width="{W - RIGHT - xf:.1f}" '
                   f'height="{H - BOTTOM - ax.py(floor_fail):.1f}" fill="#f8d0d0" opacity="0.7"/>')
    if floor_warn and floor_fail and floor_warn > floor_fail:
        out.append(f'<rect x="{xf:.1f}" y="{ax.py(floor_warn):.1f}" width="{W - RIGHT - xf:.1f}" '
                   f'height="{ax.py(floor_fail) - ax.py(floor_warn):.1f}" fill="#fbeec0" opacity="0.7"/>')
    for f, label in ((floor_warn, "warn"), (floor_fail, "fail")):
        if f:
            out.append(f'<line x1="{xf:.1f}" x2="{W - RIGHT}" y1="{ax.py(f):.1f}" y2="{ax.py(f):.1f}" stroke="#b00" '
                       f'stroke-dasharray="4 3"/><text x="{W - RIGHT - 4}" y="{ax.py(f) - 3:.1f}" text-anchor="end" '
                       f'fill="#b00">{label} floor {f:g} GB/s</text>')
    return out


def _grid(ax: _Axes, pts: list[tuple[int, float]]) -> list[str]:
    """Axes, a grid line per decade of bandwidth, size labels (at most about ten), titles."""
    out = [f'<line x1="{LEFT}" y1="{H - BOTTOM}" x2="{W - RIGHT}" y2="{H - BOTTOM}" stroke="black"/>',
           f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{H - BOTTOM}" stroke="black"/>']
    for e in range(ax.lo, ax.hi + 1):
        y = ax.py(10.0 ** e)
        out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{10.0 ** e:g}</text>')
    step = max(1, len(pts) // 10)
    for s, _ in pts[::step]:
        x = ax.px(math.log10(s))
        out.append(f'<text x="{x:.1f}" y="{H - BOTTOM + 16}" text-anchor="middle">{_fmt_bytes(s)}</text>')
    out.append(f'<text x="{W / 2}" y="{H - 10}" text-anchor="middle">message size (bytes)</text>')
    out.append(f'<text x="16" y="{H / 2}" text-anchor="middle" transform="rotate(-90 16 {H / 2})">'
               "busbw (GB/s)</text>")
    return out


def _measured(ax: _Axes, pts: list[tuple[int, float]], statuses: list[str] | None) -> list[str]:
    """The measured line, and a point per size coloured by its status."""
    path = " ".join(f"{'M' if i == 0 else 'L'}{ax.px(math.log10(s)):.1f},{ax.py(b):.1f}"
                    for i, (s, b) in enumerate(pts))
    out = [f'<path d="{path}" fill="none" stroke="#1f5fbf" stroke-width="2"/>']
    colours = {"fail": "#c00", "warn": "#d80", "pass": "#1f5fbf"}
    for i, (s, b) in enumerate(pts):
        st = statuses[i] if statuses and i < len(statuses) else "pass"
        out.append(f'<circle cx="{ax.px(math.log10(s)):.1f}" cy="{ax.py(b):.1f}" r="3.5" '
                   f'fill="{colours.get(st, "#1f5fbf")}"><title>{s} B: {b:.4g} GB/s ({st})</title></circle>')
    return out


def busbw_svg(sizes: list[int], busbw: list[float], title: str, floor_fail: float | None = None,
              floor_warn: float | None = None, floor_from: int = 0, statuses: list[str] | None = None) -> str:
    """The chart; sizes and busbw are parallel lists (GB/s). Floors apply from floor_from bytes."""
    pts = [(s, b) for s, b in zip(sizes, busbw, strict=False) if s > 0]
    if not pts:
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="80"><text x="10" y="40">'
                f"{escape(title)}: no data</text></svg>\n")
    ax = _axes(pts, [f for f in (floor_fail, floor_warn) if f])
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" '
           'font-size="11">', f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>']
    out += _expected_band(ax, floor_fail, floor_warn, floor_from)
    out += _grid(ax, pts)
    out += _measured(ax, pts, statuses)
    out.append("</svg>")
    return "\n".join(out) + "\n"
