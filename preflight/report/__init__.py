"""Reports: console (rich), JSON, Markdown, JUnit XML. All read the same Results."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from preflight import __version__
from preflight.grading import Verdict, decide, ordered
from preflight.model import Result


@dataclass
class Report:
    """Everything a reporter needs: results, verdict and the run's context."""

    command: str
    results: list[Result]
    verdict: Verdict
    profiles: dict[str, str] = field(default_factory=dict)  # node -> profile name
    started: str = ""
    duration_s: float = 0.0
    nodes: list[str] = field(default_factory=list)

    @classmethod
    def build(cls, command: str, results: Sequence[Result], warn_as_fail: bool = False,
              profiles: dict[str, str] | None = None, duration_s: float = 0.0,
              nodes: Sequence[str] = ()) -> Report:
        res = ordered(results)
        return cls(command=command, results=res, verdict=decide(res, warn_as_fail),
                   profiles=profiles or {}, started=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                   duration_s=round(duration_s, 3), nodes=list(nodes) or sorted({r.node for r in res}))

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.verdict,
            "counts": self.verdict.counts,
            "bad_nodes": self.verdict.bad_nodes,
            "command": self.command,
            "preflight_version": __version__,
            "started": self.started,
            "duration_s": self.duration_s,
            "nodes": self.nodes,
            "profiles": self.profiles,
            "results": [r.to_dict() for r in self.results],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)


def default_out_dir(base: Path = Path("reports")) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    out = base / stamp
    n = 1
    while out.exists():
        n += 1
        out = base / f"{stamp}-{n}"
    return out


def write_all(report: Report, out_dir: Path,
              formats: Sequence[str] = ("json", "md", "junit", "html")) -> dict[str, Path]:
    """Write the report files into out_dir; returns format -> path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    if "json" in formats:
        p = out_dir / "report.json"
        p.write_text(report.to_json() + "\n", encoding="utf-8")
        written["json"] = p
    if "md" in formats:
        from preflight.report.markdown import render as md

        p = out_dir / "report.md"
        p.write_text(md(report), encoding="utf-8")
        written["md"] = p
    if "junit" in formats:
        from preflight.report.junit import render as junit

        p = out_dir / "junit.xml"
        p.write_text(junit(report), encoding="utf-8")
        written["junit"] = p
    if "html" in formats:
        from preflight.report.html import render as html

        p = out_dir / "report.html"
        p.write_text(html(report), encoding="utf-8")
        written["html"] = p
    return written
