"""The report every output reads: results, verdict and the run's context."""

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
