"""The one result schema, and the capture a probe leaves behind.

Every part of preflight (run, node, analyze, and later sweep, runtime events, triage and
history) speaks `Result`. A `Capture` is what a transport brings back from one probe.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from enum import Enum
from typing import Any

from preflight import lazyre

_ATOMS = (str, int, float, bool, type(None))


def plain(obj: Any) -> Any:
    """What `dataclasses.asdict` makes of `obj` (dataclasses as dicts, containers rebuilt, other
    values deep-copied), without copying the strings and numbers that are most of a result:
    a report of 10,000 nodes writes every result once."""
    if isinstance(obj, _ATOMS):
        return obj
    if is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: plain(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, list):
        return [plain(v) for v in obj]
    if isinstance(obj, dict):
        return type(obj)((plain(k), plain(v)) for k, v in obj.items())
    if isinstance(obj, tuple):
        return _tuple(obj)
    return copy.deepcopy(obj)


def _tuple(obj: tuple[Any, ...]) -> Any:
    """A tuple as `asdict` rebuilds it (a named tuple by its fields)."""
    if hasattr(obj, "_fields"):
        return type(obj)(*[plain(v) for v in obj])
    return type(obj)(plain(v) for v in obj)


class Status(str, Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"
    ERROR = "error"

    @property
    def rank(self) -> int:
        """Severity order used to pick the worst status: pass < skip < warn < error < fail."""
        return _RANK[self]


_RANK = {Status.PASS: 0, Status.SKIP: 1, Status.WARN: 2, Status.ERROR: 3, Status.FAIL: 4}


CLUSTER = "cluster"  # the pseudo-node of results about the nodes together (cross-node checks, the sweep)
JOB = "job"  # the pseudo-node of a triage verdict that names no node
LINK_SEP = "<->"  # a result on a link between two nodes is on the pseudo-node "a<->b"


def is_node(name: str) -> bool:
    """True for a real node's name; False for the pseudo-nodes (CLUSTER, JOB, a link "a<->b")
    that results about several nodes carry. Bad-node lists, node counts and node listings hold
    real nodes only: a scheduler cannot drain "cluster"."""
    return bool(name) and name not in (CLUSTER, JOB) and LINK_SEP not in name


def real_nodes(names: Iterable[str]) -> list[str]:
    """The real nodes of `names` (pseudo-nodes left out), sorted, once each. A result naming
    several nodes carries them comma-separated (triage's verdict: its culprits); a node name
    never holds a comma, so each is counted on its own. Natural order: node3 before node12."""
    return sorted({part for n in names for part in n.split(",") if is_node(part)}, key=natural)


_DIGITS = lazyre.compile(r"(\d+)")


def natural(name: str) -> tuple[tuple[int, str, int], ...]:
    """Sort key of a node name in natural order: node2 before node10, gpu009 before gpu010."""
    return tuple((0, "", int(part)) if part.isdigit() else (1, part, 0) for part in _DIGITS.split(name) if part)


def prove(lines: Iterable[str], proof: str | Sequence[str] = "") -> list[str]:
    """`lines` with the line that proves a finding moved to the front: the first line holding
    `proof` (a text, or the first of several texts, in order, that some line holds; case
    ignored); unchanged when no line holds any."""
    kept = [str(line) for line in lines]
    for token in [proof] if isinstance(proof, str) else proof:
        i = next((i for i, line in enumerate(kept) if token and token.lower() in line.lower()), None)
        if i is not None:
            return [kept[i], *kept[:i], *kept[i + 1:]]
    return kept


def worst(statuses: list[Status]) -> Status:
    """The most severe status of a list (PASS for an empty list)."""
    return max(statuses, key=lambda s: s.rank, default=Status.PASS)


@dataclass
class Result:
    """One check's outcome on one node."""

    check: str
    node: str
    status: Status
    summary: str
    evidence: list[str] = field(default_factory=list)
    remedy: str = ""
    facts: dict[str, Any] = field(default_factory=dict)
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = plain(self)
        d["status"] = self.status.value
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Result:
        return cls(
            check=str(d["check"]),
            node=str(d["node"]),
            status=Status(d["status"]),
            summary=str(d.get("summary", "")),
            evidence=list(d.get("evidence", [])),
            remedy=str(d.get("remedy", "")),
            facts=dict(d.get("facts", {})),
            source=str(d.get("source", "")),
        )


class CaptureState(str, Enum):
    OK = "ok"  # the command ran (whatever its exit code)
    MISSING = "missing"  # the tool is not installed / not on PATH
    TIMEOUT = "timeout"  # killed after its timeout
    FAILED = "failed"  # could not be started on the node
    LOST = "lost"  # sent, but its output never came back (connection lost or stalled, deadline, node fault)


@dataclass
class Capture:
    """What one probe produced on one node."""

    probe: str
    argv: list[str]
    state: CaptureState
    stdout: str = ""
    stderr: str = ""
    rc: int | None = None
    duration: float = 0.0
    truncated: bool = False
    timeout: float = 0.0
    reason: str = ""  # for MISSING / TIMEOUT / FAILED / LOST: a human sentence
    source: str = ""  # the file it was read from (analyze) or "probe:<name>"

    @property
    def ok(self) -> bool:
        return self.state is CaptureState.OK

    @property
    def text(self) -> str:
        """stdout and stderr together, as a log reader would see them."""
        if self.stderr and self.stdout:
            return self.stdout + "\n" + self.stderr
        return self.stdout or self.stderr

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["state"] = self.state.value
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Capture:
        d = dict(d)
        d["state"] = CaptureState(d["state"])
        return cls(**d)
