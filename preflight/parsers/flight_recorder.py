"""Flight-recorder evidence as facts: the dumps ranks write and the text `fr_trace` prints.

- dumps, JSON (`_dump_fr_trace_json`) and pickle (`_dump_fr_trace`, the files
  TORCH_NCCL_DEBUG_INFO_TEMP_FILE names). A dump does not say which rank wrote it: the rank comes
  from the file name (`fr-rank3.json`, `nccl_trace_rank_3`). gloo quirks: `pg_config` is keyed
  by "" with an empty name where NCCL uses the pg id ("0"), `ranks` is a string ("[0, 1]"), every
  entry's state stays "scheduled", `pg_status` values are strings in JSON and ints in pickle, and
  a collective that timed out can read as completed: what a rank *entered* is what counts.
- `fr_trace` findings, old and new wording ("Not all ranks joining collective, sequence number:
  N", `internal record id`, `group info: name:backend`, `expected ranks: {0, 1}`, `world size`).
- `fr_trace -j` raw view: one fixed-width column of entries per rank ("Rank 0   Rank 1"); a rank
  whose column ends early entered fewer collectives than the others.

Nothing here does I/O; garbage or truncated input gives empty facts, never raises.
"""

from __future__ import annotations

import io
import json
import pickle
import re
from dataclasses import dataclass, field
from typing import Any

from preflight import lazyre
from preflight.framing import Doc
from preflight.parsers.base import Format, ParserSpec

_RANK_IN_NAME = lazyre.compile(r"rank[_-]?(\d+)(?!.*rank[_-]?\d)", re.IGNORECASE)
_TRAILING_NUM = lazyre.compile(r"[_-](\d+)(?:\.(?:json|pkl|pickle|bin))?$")


def rank_from_name(name: str) -> int | None:
    """The rank a per-rank file belongs to, from its name (`fr-rank3.json`, `nccl_trace_rank_3`, `rank3.log`)."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    m = _RANK_IN_NAME.search(base)
    if m:
        return int(m.group(1))
    m = _TRAILING_NUM.search(base)
    return int(m.group(1)) if m else None


@dataclass
class FREntry:
    seq: int | None
    op: str  # "all_reduce" (backend prefix removed)
    profiling_name: str  # as recorded: "gloo:all_reduce", "nccl:all_reduce"
    state: str
    retired: bool | None
    pg: str  # process group id ("0")
    pg_desc: str
    is_p2p: bool = False
    p2p_seq: int | None = None
    time_created_ns: int | None = None
    timeout_ms: int | None = None
    input_sizes: list[Any] = field(default_factory=list)
    frames: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "op": self.op, "state": self.state, "retired": self.retired, "pg": self.pg,
                "pg_desc": self.pg_desc, "time_created_ns": self.time_created_ns, "timeout_ms": self.timeout_ms,
                "input_sizes": self.input_sizes}


@dataclass
class FRDump:
    rank: int | None = None
    version: str = ""
    backend: str = ""
    entries: list[FREntry] = field(default_factory=list)
    pg_ranks: dict[str, list[int]] = field(default_factory=dict)  # pg id -> member ranks
    pg_status: dict[str, dict[str, int]] = field(default_factory=dict)  # pg id -> last_* collective
    problem: str = ""

    def collectives(self, pg: str = "0") -> list[FREntry]:
        return [e for e in self.entries if e.pg == pg and not e.is_p2p and e.seq is not None]

    def last_entered(self, pg: str = "0") -> FREntry | None:
        """The last collective of `pg` this rank entered (highest sequence number)."""
        coll = self.collectives(pg)
        return max(coll, key=lambda e: e.seq or 0) if coll else None

    def at(self, seq: int, pg: str = "0") -> FREntry | None:
        return next((e for e in self.collectives(pg) if e.seq == seq), None)

    def world(self, pg: str = "0") -> list[int]:
        return self.pg_ranks.get(pg, [])


class _SafeUnpickler(pickle.Unpickler):
    """Plain containers and scalars only: a dump is data, never code."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a flight-recorder dump")


def _load_dump(data: bytes | str) -> tuple[Any, str]:
    if isinstance(data, str):
        text = data
        raw = data.encode("utf-8", errors="replace")
    else:
        raw = data
        text = ""
    stripped = raw.lstrip()[:1]
    if stripped == b"{":
        try:
            return json.loads(text or raw.decode("utf-8", errors="replace")), ""
        except ValueError as exc:
            return None, f"not valid JSON: {exc}"
    if raw[:1] == b"\x80":
        try:
            return _SafeUnpickler(io.BytesIO(raw)).load(), ""
        except Exception as exc:  # noqa: BLE001 - any corruption is a problem, not a crash
            return None, f"not a readable pickle: {type(exc).__name__}: {exc}"
    return None, "neither a JSON nor a pickle flight-recorder dump"


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and re.fullmatch(r"-?\d+", v.strip()):
        return int(v.strip())
    return None


def _ranks_list(v: Any) -> list[int]:
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            return [int(x) for x in re.findall(r"-?\d+", v)]
    if isinstance(v, (list, tuple)):
        return [int(x) for x in v if _int(x) is not None]
    return []


def _frames(v: Any) -> list[str]:
    out = []
    for f in v or []:
        if isinstance(f, dict):
            out.append(f"{f.get('name', '?')} ({f.get('filename', '?')}:{f.get('line', '?')})")
    return out


def parse_fr_dump(data: bytes | str, name: str = "") -> FRDump:
    """One rank's flight-recorder dump (JSON or pickle) -> FRDump."""
    dump = FRDump(rank=rank_from_name(name) if name else None)
    doc, problem = _load_dump(data)
    if problem or not isinstance(doc, dict):
        dump.problem = problem or "dump is not a mapping"
        return dump
    dump.version = str(doc.get("version", ""))
    pg_names: dict[str, str] = {}  # process group id -> its description, as the entries name them
    entries = doc.get("entries") or []
    if not isinstance(entries, list):
        entries = []
    for e in entries:
        if not isinstance(e, dict):
            continue
        entry, backend = _entry(e)
        pg_names.setdefault(entry.pg, entry.pg_desc)
        dump.backend = dump.backend or backend
        dump.entries.append(entry)
    cfg = doc.get("pg_config") or {}
    if isinstance(cfg, dict):
        dump.pg_ranks.update(_pg_ranks(cfg, pg_names))
    status = doc.get("pg_status") or {}
    if isinstance(status, dict):
        for key, val in status.items():
            if isinstance(val, dict):
                dump.pg_status[str(key)] = {k: v for k, v in ((k, _int(x)) for k, x in val.items()) if v is not None}
    if not dump.entries and not entries:
        dump.problem = "the dump holds no entries (flight recorder off: set TORCH_FR_BUFFER_SIZE)"
    return dump


def _entry(e: dict[str, Any]) -> tuple[FREntry, str]:
    """One entry of a dump, and the backend its profiling name starts with (`nccl:all_reduce`)."""
    pg = e.get("process_group") or ("", "")
    pg_id = str(pg[0]) if isinstance(pg, (list, tuple)) and pg else str(e.get("pg_id", ""))
    pg_desc = str(pg[1]) if isinstance(pg, (list, tuple)) and len(pg) > 1 else ""
    if not pg_id and e.get("pg_id") is not None:
        pg_id = str(e.get("pg_id"))
    prof = str(e.get("profiling_name", ""))
    backend, _, op = prof.partition(":") if ":" in prof else ("", "", prof)
    created = _int(e.get("time_created_ns"))
    return FREntry(
        seq=_int(e.get("collective_seq_id")), op=op, profiling_name=prof, state=str(e.get("state", "")),
        retired=e.get("retired") if isinstance(e.get("retired"), bool) else None, pg=pg_id, pg_desc=pg_desc,
        is_p2p=bool(e.get("is_p2p", False)), p2p_seq=_int(e.get("p2p_seq_id")),
        time_created_ns=created or None, timeout_ms=_int(e.get("timeout_ms")),
        input_sizes=list(e.get("input_sizes") or []), frames=_frames(e.get("frames"))), backend


def _pg_ranks(cfg: dict[Any, Any], pg_names: dict[str, str]) -> dict[str, list[int]]:
    """Process group id -> its ranks, from the dump's `pg_config` (keyed as the entries name the groups)."""
    out: dict[str, list[int]] = {}
    for key, val in cfg.items():
        if not isinstance(val, dict):
            continue
        ranks = _ranks_list(val.get("ranks"))
        pg_id = str(key)
        if pg_id == "" or pg_id not in pg_names:
            # gloo keys its only group by "" (no name); the entries know it as "0"
            by_desc = [p for p, d in pg_names.items() if d and d == val.get("desc")]
            pg_id = by_desc[0] if by_desc else ("0" if pg_id == "" else pg_id)
        out[pg_id] = ranks
    return out


# fr_trace text output (torch/distributed/flight_recorder/components/utils.py error_analysis and
# types.py EntryState.log; tools/flight_recorder/components/builder.py in 2.4 - 2.5)

# (kind, header): every wording a finding's first line has had
_FRT_HEADS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("missing", lazyre.compile(r"^Not all ranks joining collective[,:]? sequence number:\s*(\d+)")),
    ("missing", lazyre.compile(r"^Not all ranks joining collective (\d+) at entry (\d+)")),
    ("missing", lazyre.compile(r"^Not all ranks joining collective for group (\S+) collective (\S+)")),
    ("size", lazyre.compile(r"^Input/output mismatch in the collective(?: sequence number:)?\s*(\d+)(?: at entry (\d+))?")),
    ("errors", lazyre.compile(r"^Collective(?: sequence number:)?\s*(\d+)(?: at entry (\d+))? (?:has )?errors")),
    ("undecided", lazyre.compile(r"^We cannot decide what's wrong with this collective entry because we missed FR dumps "
                             r"from ranks \(([^)]*)\)")),
    ("no_errors", lazyre.compile(r"^No errors found for this collective entry")),
    ("dumps_missing", lazyre.compile(r"Missing dump files from ranks (\{[^}]*\}|\S+)")),
)
_FRT_LOGGER = lazyre.compile(r"^(?:INFO|WARNING|ERROR|DEBUG):Flight Recorder:")
_FRT_FIELD = lazyre.compile(r"^(internal record id|group info|collective|missing ranks|input sizes|output sizes|"
                        r"world size|expected ranks|collective state|error msg|error message|total input numel|"
                        r"total output numel): ?(.*)$")
_OLD_MISSING = lazyre.compile(r"Missing ranks are (\{[^}]*\}|set\(\))")
_CULPRIT = lazyre.compile(r"Culprit rank (\d+); (?:Error type: )?(?:MatchState\.)?(\w+)(?:, )?(.*)")


@dataclass
class FRTraceFinding:
    kind: str  # missing | errors | size | undecided | no_errors | dumps_missing
    seq: int | None = None
    record_id: int | None = None
    op: str = ""
    group: str = ""
    missing_ranks: list[int] = field(default_factory=list)  # ranks that never joined (or wrote no dump)
    expected_ranks: list[int] = field(default_factory=list)
    world_size: int | None = None
    state: str = ""
    culprits: list[tuple[int, str]] = field(default_factory=list)  # (rank, "ERROR_TYPE (detail)")
    lines: list[str] = field(default_factory=list)


def _ranks_in(text: str) -> list[int]:
    return sorted({int(x) for x in re.findall(r"\d+", text)})


def _culprits(text: str) -> list[tuple[int, str]]:
    """`Culprit rank 1; Error type: COLLECTIVE_STATE_MISMATCH, Expected state: ...` entries, joined by ", "."""
    out = []
    for part in re.split(r",\s*(?=Culprit rank \d+;)", text):
        m = _CULPRIT.match(part.strip())
        if m:
            detail = m.group(3).strip()
            out.append((int(m.group(1)), m.group(2) + (f" ({detail})" if detail else "")))
    return out


def _head(line: str) -> FRTraceFinding | None:
    for kind, rx in _FRT_HEADS:
        m = rx.search(line)
        if not m:
            continue
        f = FRTraceFinding(kind=kind, lines=[line])
        if kind in ("undecided", "dumps_missing"):
            f.missing_ranks = _ranks_in(m.group(1))
        elif m.re.pattern.startswith("^Not all ranks joining collective for group"):
            f.group, f.op = m.group(1), m.group(2).partition(":")[2] or m.group(2)
            old = _OLD_MISSING.search(line)
            f.missing_ranks = _ranks_in(old.group(1)) if old else []
        elif kind != "no_errors":
            f.seq = int(m.group(1))
            f.record_id = _int(m.group(2)) if m.lastindex and m.lastindex >= 2 else None
        return f
    return None


def _field(cur: FRTraceFinding, key: str, val: str) -> None:
    if key == "collective":
        cur.op = val.partition(":")[2] or val
    elif key == "group info":
        cur.group = val
    elif key == "missing ranks":
        cur.missing_ranks = _ranks_in(val)
    elif key == "expected ranks":  # a set of ranks (2.6+), a count before
        count = _int(val)
        if count is not None:
            cur.world_size = count
        else:
            cur.expected_ranks = _ranks_in(val)
    elif key == "world size":
        cur.world_size = _int(val)
    elif key == "collective state":
        cur.state = val
    elif key == "internal record id":
        cur.record_id = _int(val)
    elif key in ("error msg", "error message"):
        cur.culprits = _culprits(val)


def parse_fr_trace_text(text: str) -> list[FRTraceFinding]:
    """The findings `fr_trace` printed, in order."""
    found: list[FRTraceFinding] = []
    cur: FRTraceFinding | None = None
    for raw in text.splitlines():
        line = _FRT_LOGGER.sub("", raw.strip())
        head = _head(line)
        if head is not None:
            cur = head
            found.append(cur)
            continue
        f = _FRT_FIELD.match(line) if cur is not None else None
        if cur is None or f is None:
            continue
        cur.lines.append(line)
        _field(cur, f.group(1), f.group(2).strip())
    return found


# fr_trace -j: the entries of every rank side by side

_J_HEAD = lazyre.compile(r"^\s*Rank\s+\d+(?:\s{2,}Rank\s+\d+)+\s*$")
_J_ENTRY = lazyre.compile(r"([a-z_]+)\(([^()]*(?:\([^()]*\)[^()]*)*)\)")


@dataclass
class SideBySide:
    ranks: list[int] = field(default_factory=list)
    entries: dict[int, list[str]] = field(default_factory=dict)  # rank -> "all_reduce(...)" in order
    header: str = ""

    @property
    def behind(self) -> list[int]:
        """Ranks with fewer entries than the most any rank has."""
        most = max((len(v) for v in self.entries.values()), default=0)
        return [r for r in self.ranks if len(self.entries.get(r, [])) < most]


def parse_side_by_side(lines: list[str]) -> SideBySide | None:
    head_i = next((i for i, t in enumerate(lines) if _J_HEAD.match(t)), None)
    if head_i is None:
        return None
    head = lines[head_i]
    starts = [m.start() for m in re.finditer(r"Rank\s+\d+", head)]
    out = SideBySide(ranks=[int(x) for x in re.findall(r"Rank\s+(\d+)", head)], header=head.strip())
    out.entries = {r: [] for r in out.ranks}
    for t in lines[head_i + 1:]:
        if not t.strip() or set(t.strip()) <= {"-", " "}:
            continue
        for k, r in enumerate(out.ranks):
            end = starts[k + 1] if k + 1 < len(starts) else len(t)
            cell = t[starts[k]:end].strip() if starts[k] < len(t) else ""
            if cell and _J_ENTRY.match(cell):
                out.entries[r].append(cell)
    return out


@dataclass
class FrText:
    findings: list[FRTraceFinding] = field(default_factory=list)
    side_by_side: SideBySide | None = None

    @property
    def recognised(self) -> bool:
        return bool(self.findings or self.side_by_side)


def parse(doc: Doc) -> FrText:
    lines = [ln.text for ln in doc.lines]
    return FrText(parse_fr_trace_text("\n".join(lines)), parse_side_by_side(lines))


def detect(doc: Doc) -> bool:
    head = [ln.text for ln in doc.head(200)]
    return any(_head(_FRT_LOGGER.sub("", t.strip())) is not None for t in head) or any(_J_HEAD.match(t) for t in head)


# Words `detect` cannot say yes without (lower-cased): each `_FRT_HEADS` message names a
# collective or the missing dump files; `_J_HEAD` is a row of "Rank N" columns.
_COULD = ("collective", "missing dump files", "rank ")


def could(doc: Doc) -> bool:
    """A cheap necessary condition of `detect` (C-speed searches of the head)."""
    head = doc.head_folded(200)  # pragma: no mutate (the lines detect reads)
    return any(w in head for w in _COULD)


FORMATS = [Format("fr-trace", detect=detect, could=could, priority=60,
                  description="fr_trace output: findings, or the -j side-by-side view of every rank's entries")]
PARSERS = [ParserSpec("fr-trace", parse)]

