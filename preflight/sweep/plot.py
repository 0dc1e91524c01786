"""A bandwidth-vs-size chart as a standalone SVG (no plotting library): measured busbw per
message size on log-log axes, with the expected band (warn/fail floors) shaded."""

from __future__ import annotations

import math
from html import escape

W, H = 720, 400
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 40, 50


def _fmt_bytes(b: float) -> str:
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= div:
            return f"{b / div:g}{unit}"
    return f"{b:g}"


def busbw_svg(sizes: list[int], busbw: list[float], title: str, floor_fail: float | None = None,
              floor_warn: float | None = None, floor_from: int = 0, statuses: list[str] | None = None) -> str:
    """The chart; sizes and busbw are parallel lists (GB/s). Floors apply from floor_from bytes."""
    pts = [(s, b) for s, b in zip(sizes, busbw, strict=False) if s > 0]
    if not pts:
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="80"><text x="10" y="40">'
                f"{escape(title)}: no data</text></svg>\n")
    xs = [math.log10(s) for s, _ in pts]
    vals = [b for _, b in pts if b > 0] + [f for f in (floor_fail, floor_warn) if f]
    lo = math.floor(math.log10(min(vals))) if vals else -3
    hi = math.ceil(math.log10(max(vals))) if vals else 0
    if hi <= lo:
        hi = lo + 1
    x0, x1 = min(xs), max(xs)
    if x1 <= x0:
        x1 = x0 + 1

    def px(x: float) -> float:
        return LEFT + (x - x0) / (x1 - x0) * (W - LEFT - RIGHT)

    def py(v: float) -> float:
        lv = math.log10(v) if v > 0 else lo
        return TOP + (hi - max(lo, min(hi, lv))) / (hi - lo) * (H - TOP - BOTTOM)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" '
           'font-size="11">', f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>']
    # expected band
    xf = px(max(x0, math.log10(floor_from))) if floor_from > 0 else LEFT
    if floor_fail:
        out.append(f'<rect x="{xf:.1f}" y="{py(floor_fail):.1f}" width="{W - RIGHT - xf:.1f}" '
                   f'height="{H - BOTTOM - py(floor_fail):.1f}" fill="#f8d0d0" opacity="0.7"/>')
    if floor_warn and floor_fail and floor_warn > floor_fail:
        out.append(f'<rect x="{xf:.1f}" y="{py(floor_warn):.1f}" width="{W - RIGHT - xf:.1f}" '
                   f'height="{py(floor_fail) - py(floor_warn):.1f}" fill="#fbeec0" opacity="0.7"/>')
    for f, label in ((floor_warn, "warn"), (floor_fail, "fail")):
        if f:
            out.append(f'<line x1="{xf:.1f}" x2="{W - RIGHT}" y1="{py(f):.1f}" y2="{py(f):.1f}" stroke="#b00" '
                       f'stroke-dasharray="4 3"/><text x="{W - RIGHT - 4}" y="{py(f) - 3:.1f}" text-anchor="end" '
                       f'fill="#b00">{label} floor {f:g} GB/s</text>')
    # axes and grid
    out.append(f'<line x1="{LEFT}" y1="{H - BOTTOM}" x2="{W - RIGHT}" y2="{H - BOTTOM}" stroke="black"/>')
    out.append(f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{H - BOTTOM}" stroke="black"/>')
    for e in range(lo, hi + 1):
        y = py(10.0 ** e)
        out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{10.0 ** e:g}</text>')
    step = max(1, len(pts) // 10)
    for s, _ in pts[::step]:
        x = px(math.log10(s))
        out.append(f'<text x="{x:.1f}" y="{H - BOTTOM + 16}" text-anchor="middle">{_fmt_bytes(s)}</text>')
    out.append(f'<text x="{W / 2}" y="{H - 10}" text-anchor="middle">message size (bytes)</text>')
    out.append(f'<text x="16" y="{H / 2}" text-anchor="middle" transform="rotate(-90 16 {H / 2})">'
               "busbw (GB/s)</text>")
    # measured line
    path = " ".join(f"{'M' if i == 0 else 'L'}{px(math.log10(s)):.1f},{py(b):.1f}" for i, (s, b) in enumerate(pts))
    out.append(f'<path d="{path}" fill="none" stroke="#1f5fbf" stroke-width="2"/>')
    colours = {"fail": "#c00", "warn": "#d80", "pass": "#1f5fbf"}
    for i, (s, b) in enumerate(pts):
        st = statuses[i] if statuses and i < len(statuses) else "pass"
        out.append(f'<circle cx="{px(math.log10(s)):.1f}" cy="{py(b):.1f}" r="3.5" '
                   f'fill="{colours.get(st, "#1f5fbf")}"><title>{s} B: {b:.4g} GB/s ({st})</title></circle>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
