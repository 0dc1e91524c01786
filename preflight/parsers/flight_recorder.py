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

from preflight.framing import Doc
from preflight.parsers.base import Format, ParserSpec

_RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)(?!.*rank[_-]?\d)", re.IGNORECASE)
_TRAILING_NUM = re.compile(r"[_-](\d+)(?:\.(?:json|pkl|pickle|bin))?$")


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


# fr_trace text output

_FRT_HEAD = re.compile(r"^(Not all ranks joining collective|Collective sequence number: (\d+) has errors|"
                       r"Input/output mismatch in the collective sequence number)(?:, sequence number)?:?\s*(\d+)?")
_FRT_FIELD = re.compile(r"^(internal record id|group info|collective|missing ranks|input sizes|output sizes|"
                        r"world size|expected ranks|collective state|error msg): ?(.*)$")
_CULPRIT = re.compile(r"Culprit rank (\d+); Error type: (\w+)(?:, (.*))?")


@dataclass
class FRTraceFinding:
    kind: str  # missing | errors | size
    seq: int | None = None
    op: str = ""
    group: str = ""
    missing_ranks: list[int] = field(default_factory=list)
    expected_ranks: list[int] = field(default_factory=list)
    world_size: int | None = None
    state: str = ""
    culprits: list[tuple[int, str]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


def parse_fr_trace_text(text: str) -> list[FRTraceFinding]:
    """The findings `fr_trace` printed, in order."""
    found: list[FRTraceFinding] = []
    cur: FRTraceFinding | None = None
    for raw in text.splitlines():
        line = raw.strip()
        m = _FRT_HEAD.match(line)
        if m:
            kind = "missing" if m.group(1).startswith("Not all") else ("errors" if "has errors" in m.group(1) else "size")
            seq = m.group(2) or m.group(3)
            cur = FRTraceFinding(kind=kind, seq=int(seq) if seq else None, lines=[line])
            found.append(cur)
            continue
        if cur is None:
            continue
        f = _FRT_FIELD.match(line)
        if not f:
            continue
        cur.lines.append(line)
        key, val = f.group(1), f.group(2).strip()
        if key == "collective":
            cur.op = val.partition(":")[2] or val
        elif key == "group info":
            cur.group = val
        elif key == "missing ranks":
            cur.missing_ranks = sorted(int(x) for x in re.findall(r"\d+", val))
        elif key == "expected ranks":
            cur.expected_ranks = sorted(int(x) for x in re.findall(r"\d+", val))
        elif key == "world size":
            cur.world_size = _int(val)
        elif key == "collective state":
            cur.state = val
        elif key == "error msg":
            cur.culprits = [(int(r), t + (f" ({d})" if d else "")) for r, t, d in _CULPRIT.findall(val)]
    return found


# fr_trace -j: the entries of every rank side by side

_J_HEAD = re.compile(r"^\s*Rank\s+\d+(?:\s{2,}Rank\s+\d+)+\s*$")
_J_ENTRY = re.compile(r"([a-z_]+)\(([^()]*(?:\([^()]*\)[^()]*)*)\)")


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
    return any(_FRT_HEAD.match(t.strip()) for t in head) or any(_J_HEAD.match(t) for t in head)


FORMATS = [Format("fr-trace", detect=detect, priority=60,
                  description="fr_trace output: findings, or the -j side-by-side view of every rank's entries")]
PARSERS = [ParserSpec("fr-trace", parse)]

