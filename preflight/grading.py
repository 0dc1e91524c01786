"""The go/no-go verdict and the exit codes that go with it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from preflight.model import Result, Status

GO = "GO"
NO_GO = "NO-GO"

EXIT_GO = 0
EXIT_NO_GO = 1
EXIT_USAGE = 2  # could not run: bad arguments, bad profile, broken site check

BLOCKING = (Status.FAIL, Status.ERROR)


@dataclass
class Verdict:
    verdict: str
    counts: dict[str, int] = field(default_factory=dict)
    blocking: list[Result] = field(default_factory=list)  # the results that made it NO-GO
    bad_nodes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return EXIT_GO if self.verdict == GO else EXIT_NO_GO


def decide(results: Iterable[Result], warn_as_fail: bool = False) -> Verdict:
    """GO when no node has a FAIL or ERROR (or a WARN, with warn_as_fail), else NO-GO."""
    results = list(results)
    blocking_statuses = BLOCKING + ((Status.WARN,) if warn_as_fail else ())
    blocking = [r for r in results if r.status in blocking_statuses]
    counts = Counter(r.status.value for r in results)
    return Verdict(
        verdict=NO_GO if blocking else GO,
        counts={s.value: counts.get(s.value, 0) for s in Status},
        blocking=sorted(blocking, key=lambda r: (-r.status.rank, r.node, r.check)),
        bad_nodes=sorted({r.node for r in blocking}),
    )


def ordered(results: Iterable[Result]) -> list[Result]:
    """Failures first, then by node and check: the order every report uses."""
    return sorted(results, key=lambda r: (-r.status.rank, r.node, r.check))
