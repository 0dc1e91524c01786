"""The report every output reads: results, verdict and the run's context."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from preflight import __version__
from preflight.grading import Verdict, decide, ordered
from preflight.model import Result, is_node, natural, real_nodes

# The version of every JSON document preflight writes (report.json, `--json` on stdout, the
# history summary). It goes up when a key is removed or changes meaning; new keys keep it.
SCHEMA_VERSION = 1


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
    warn_as_fail: bool = False  # a WARN made the verdict NO-GO (JUnit reports it as a failure)

    @classmethod
    def build(cls, command: str, results: Sequence[Result], warn_as_fail: bool = False,
              profiles: dict[str, str] | None = None, duration_s: float = 0.0,
              nodes: Sequence[str] = ()) -> Report:
        res = ordered(results)
        start = datetime.now(timezone.utc) - timedelta(seconds=max(duration_s, 0.0))  # built when the run ends
        return cls(command=command, results=res, verdict=decide(res, warn_as_fail),
                   profiles=profiles or {}, started=start.isoformat(timespec="seconds"),
                   duration_s=round(duration_s, 3), nodes=sorted((n for n in nodes if is_node(n)), key=natural) or real_nodes(r.node for r in res),
                   warn_as_fail=warn_as_fail)

    def to_dict(self) -> dict[str, Any]:
        return {**self._head(), "results": [r.to_dict() for r in self.results]}

    def _head(self) -> dict[str, Any]:
        """Every key of the document but the results (which come last)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "verdict": self.verdict.verdict,
            "counts": self.verdict.counts,
            "bad_nodes": self.verdict.bad_nodes,
            "warn_as_fail": self.warn_as_fail,
            "command": self.command,
            "preflight_version": __version__,
            "started": self.started,
            "duration_s": self.duration_s,
            "nodes": self.nodes,
            "profiles": self.profiles,
        }

    def bad_hostlist(self) -> str:
        """The NO-GO nodes as one Slurm hostlist (`gpu[001-003,007],login2`); '' when none. Only
        names a scheduler knows: real nodes with plain host names; a node named by a hostlist
        (analyze of clush output: `gpu[001-002]`) is its hosts; an analysed folder path is none."""
        from preflight.inventory import HostlistError, compress, expand

        names: list[str] = []
        for node in self.verdict.bad_nodes:
            try:
                names += expand(node)
            except HostlistError:  # not a host name (an analysed file's path): nothing to exclude
                continue
        return compress(names)

    def to_json(self) -> str:
        return "".join(self.json_chunks())

    def json_chunks(self) -> Iterator[str]:
        """The JSON document (`json.dumps(to_dict(), indent=2)`, byte for byte) in pieces, one
        result at a time: a report of 10,000 nodes is written without holding it twice more
        (as dictionaries and as one string)."""
        head = {**self._head(), "results": []}  # the results, last, are made one at a time below
        results = self.results
        text = json.dumps(head, indent=2, default=str)
        if not results:
            yield text
            return
        cut = text.rfind("[]")  # the empty results list, the document's last value
        yield text[:cut] + "[\n"
        last = len(results) - 1
        for i, r in enumerate(results):
            item = json.dumps(r.to_dict(), indent=2, default=str)
            yield "    " + item.replace("\n", "\n    ") + (",\n" if i < last else "\n")  # strings hold no raw newline
        yield "  ]" + text[cut + 2:]


def default_out_dir(base: Path = Path("reports")) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    out = base / stamp
    n = 1
    while out.exists():
        n += 1
        out = base / f"{stamp}-{n}"
    return out
