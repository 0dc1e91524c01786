"""Pure parsers for what a job leaves behind after a hang or a crash: text (or bytes) in, facts out.

- flight-recorder dumps, JSON (`_dump_fr_trace_json`) and pickle (`_dump_fr_trace`, the files
  TORCH_NCCL_DEBUG_INFO_TEMP_FILE names). A dump does not say which rank wrote it: the rank comes
  from the file name (`fr-rank3.json`, `nccl_trace_rank_3`). gloo quirks: `pg_config` is keyed
  by "" with an empty name where NCCL uses the pg id ("0"), `ranks` is a string ("[0, 1]"), every
  entry's state stays "scheduled", `pg_status` values are strings in JSON and ints in pickle, and
  a collective that timed out can read as completed: what a rank *entered* is what counts.
- `fr_trace` text output ("Not all ranks joining collective, sequence number: N" blocks).
- NCCL RAS status (`ncclras`) text: missing / dead processes, ranks behind in operation counts.
- py-spy dump text: processes, threads and their Python frames.
- rank logs: Python tracebacks, torchrun's failure table (exit codes and signals); collective
  timeouts are read with `preflight.checks.hang.parse_hang_log`.
- Slurm: `scontrol show job` and `sacct --parsable2` records (node list, start time, state).

Nothing here does I/O; garbage or truncated input gives empty facts and a `problem`, never raises.
"""

from __future__ import annotations

import io
import json
import pickle
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

# ----- flight recorder ------------------------------------------------------------------------

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
    pg_names: dict[str, str] = {}
    entries = doc.get("entries") or []
    if not isinstance(entries, list):
        entries = []
    for e in entries:
        if not isinstance(e, dict):
            continue
        pg = e.get("process_group") or ("", "")
        pg_id = str(pg[0]) if isinstance(pg, (list, tuple)) and pg else str(e.get("pg_id", ""))
        pg_desc = str(pg[1]) if isinstance(pg, (list, tuple)) and len(pg) > 1 else ""
        if not pg_id and e.get("pg_id") is not None:
            pg_id = str(e.get("pg_id"))
        pg_names.setdefault(pg_id, pg_desc)
        prof = str(e.get("profiling_name", ""))
        backend, _, op = prof.partition(":") if ":" in prof else ("", "", prof)
        dump.backend = dump.backend or backend
        created = _int(e.get("time_created_ns"))
        dump.entries.append(FREntry(
            seq=_int(e.get("collective_seq_id")), op=op, profiling_name=prof, state=str(e.get("state", "")),
            retired=e.get("retired") if isinstance(e.get("retired"), bool) else None, pg=pg_id, pg_desc=pg_desc,
            is_p2p=bool(e.get("is_p2p", False)), p2p_seq=_int(e.get("p2p_seq_id")),
            time_created_ns=created or None, timeout_ms=_int(e.get("timeout_ms")),
            input_sizes=list(e.get("input_sizes") or []), frames=_frames(e.get("frames"))))
    cfg = doc.get("pg_config") or {}
    if isinstance(cfg, dict):
        for key, val in cfg.items():
            if not isinstance(val, dict):
                continue
            ranks = _ranks_list(val.get("ranks"))
            pg_id = str(key)
            if pg_id == "" or pg_id not in pg_names:
                # gloo keys its only group by "" (no name); the entries know it as "0"
                by_desc = [p for p, d in pg_names.items() if d and d == val.get("desc")]
                pg_id = by_desc[0] if by_desc else ("0" if pg_id == "" else pg_id)
            dump.pg_ranks[pg_id] = ranks
    status = doc.get("pg_status") or {}
    if isinstance(status, dict):
        for key, val in status.items():
            if isinstance(val, dict):
                dump.pg_status[str(key)] = {k: v for k, v in ((k, _int(x)) for k, x in val.items()) if v is not None}
    if not dump.entries and not entries:
        dump.problem = "the dump holds no entries (flight recorder off: set TORCH_FR_BUFFER_SIZE)"
    return dump


# ----- fr_trace text output ---------------------------------------------------------------------

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


# ----- NCCL RAS -----------------------------------------------------------------------------------

_RAS_PROCESS = re.compile(r"^\s*Process (\d+) on node (\S+) managing GPUs? (\S+)")
_RAS_RANK = re.compile(r"^\s*Rank (\d+)(?: has (?:launched up to operation (\d+)|not launched any operations|"
                       r"status (\w+)))?\s*--\s*(?:GPU (\S+) managed by process (\d+) on node (\S+)|\[process information "
                       r"not found\])")
_RAS_COUNTS = re.compile(r"^\s*(\d+) ranks have launched up to operation (\d+)")
_RAS_OPS = re.compile(r"Communicator ranks have different (\w+) operation counts")


@dataclass
class RasStatus:
    missing_processes: list[dict[str, Any]] = field(default_factory=list)  # {pid, node, gpus}
    dead_processes: list[dict[str, Any]] = field(default_factory=list)
    ranks: list[dict[str, Any]] = field(default_factory=list)  # {rank, section, launched, status, node, pid}
    majority_launched: int | None = None
    mismatched_ops: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.missing_processes or self.dead_processes or self.ranks or self.mismatched_ops)


def looks_like_ras(text: str) -> bool:
    return bool(re.search(r"^Errors\n======", text, re.M) or re.search(r"Communicators\.\.\.", text)
                or re.search(r"^Group\s+Comms\s+Nodes\s+Ranks", text, re.M))


def parse_ras(text: str) -> RasStatus:
    """`ncclras` text -> the processes and ranks RAS singled out."""
    out = RasStatus()
    section = ""
    top = 0
    for raw in text.splitlines():
        line = raw.rstrip()
        word = line.strip()
        if word in ("INCOMPLETE", "DEAD") or re.match(r"^#\d+-\d+ \([0-9a-f]+\) (INCOMPLETE|ERROR|MISMATCH)$", word):
            section = word.split()[-1]
            out.lines.append(word)
            continue
        mp = _RAS_PROCESS.match(line)
        if mp:
            rec = {"pid": int(mp.group(1)), "node": mp.group(2), "gpus": mp.group(3)}
            (out.dead_processes if section == "DEAD" else out.missing_processes).append(rec)
            out.lines.append(word)
            continue
        mr = _RAS_RANK.match(line)
        if mr:
            out.ranks.append({"rank": int(mr.group(1)), "section": section,
                              "launched": _int(mr.group(2)) if mr.group(2) else (0 if "not launched" in line else None),
                              "status": mr.group(3) or "", "node": mr.group(6) or "",
                              "pid": _int(mr.group(5)) if mr.group(5) else None})
            out.lines.append(word)
            continue
        mc = _RAS_COUNTS.match(line)
        if mc and int(mc.group(1)) > top:
            top = int(mc.group(1))
            out.majority_launched = int(mc.group(2))
            out.lines.append(word)
            continue
        mo = _RAS_OPS.search(line)
        if mo:
            out.mismatched_ops.append(mo.group(1))
            out.lines.append(word)
    return out


# ----- py-spy dump ------------------------------------------------------------------------------

_PS_PROC = re.compile(r"^Process (\d+): (.*)$")
_PS_THREAD = re.compile(r"^Thread (0x[0-9A-Fa-f]+|\d+) \(([^)]*)\)(?:: \"(.*)\")?")
_PS_FRAME = re.compile(r"^\s+(\S.*?) \((.*?)(?::(\d+))?\)\s*$")


@dataclass
class PySpyThread:
    tid: str
    state: str
    name: str
    frames: list[str] = field(default_factory=list)  # innermost first, "func (file:line)"


@dataclass
class PySpyProcess:
    pid: int
    cmdline: str
    python: str = ""
    threads: list[PySpyThread] = field(default_factory=list)

    def main_thread(self) -> PySpyThread | None:
        return next((t for t in self.threads if t.name == "MainThread"), self.threads[0] if self.threads else None)


def parse_py_spy(text: str) -> list[PySpyProcess]:
    """`py-spy dump --pid P` output (one or several) -> processes and thread stacks."""
    procs: list[PySpyProcess] = []
    thread: PySpyThread | None = None
    in_locals = False
    for raw in text.splitlines():
        line = raw.rstrip()
        mp = _PS_PROC.match(line)
        if mp:
            procs.append(PySpyProcess(pid=int(mp.group(1)), cmdline=mp.group(2).strip()))
            thread = None
            continue
        if not procs:
            continue
        if line.startswith("Python v"):
            procs[-1].python = line.split()[1] if len(line.split()) > 1 else ""
            continue
        mt = _PS_THREAD.match(line)
        if mt:
            thread = PySpyThread(tid=mt.group(1), state=mt.group(2), name=mt.group(3) or "")
            procs[-1].threads.append(thread)
            in_locals = False
            continue
        if thread is None:
            continue
        stripped = line.strip()
        if stripped in ("Arguments:", "Locals:"):
            in_locals = True
            continue
        mf = _PS_FRAME.match(line)
        if mf and len(line) - len(line.lstrip()) <= 4:
            in_locals = False
            where = mf.group(2) + (f":{mf.group(3)}" if mf.group(3) else "")
            thread.frames.append(f"{mf.group(1)} ({where})")
        elif in_locals:
            continue
    return procs


# ----- rank logs: tracebacks and exit codes -----------------------------------------------------

_TB_START = "Traceback (most recent call last):"
_EXC_LINE = re.compile(r"^(?:\[[^\]]*\]:?\s*)*([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failure|Warning)"
                       r"|KeyboardInterrupt|SystemExit)(?::\s*(.*))?$")
_TORCHRUN_KV = re.compile(r"^\s*(time|host|rank|exitcode|error_file|traceback)\s*:\s*(.*)$")
_SIGNAL = re.compile(r"Signal (\d+) \((SIG\w+)\) received by PID (\d+)")
_EXIT_PID = re.compile(r"(-?\d+) \(pid: (\d+)\)")
# exceptions that follow from another rank's failure, not a cause of their own
SECONDARY = re.compile(r"Connection closed by peer|Connection reset by peer|Timed out waiting|timed out|"
                       r"DistBackendError|NCCL communicator was aborted|Broken pipe|ProcessGroup.*aborted|"
                       r"Watchdog caught collective operation timeout|Socket Timeout|Read error", re.IGNORECASE)


@dataclass
class Crash:
    exception: str
    message: str
    lines: list[str]
    secondary: bool
    rank: int | None = None


@dataclass
class ChildFailure:
    rank: int | None
    host: str
    exitcode: int | None
    pid: int | None
    signal: str
    time: str
    lines: list[str]


@dataclass
class RankLog:
    crashes: list[Crash] = field(default_factory=list)
    failures: list[ChildFailure] = field(default_factory=list)


def _tag_rank(line: str) -> int | None:
    m = re.match(r"^\s*\[(?:rank|default)(\d+)\]:", line)
    return int(m.group(1)) if m else None


def parse_rank_log(text: str) -> RankLog:
    """Python tracebacks (the exception ending each) and torchrun's per-rank failure records."""
    out = RankLog()
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if _TB_START in line:
            prefix_rank = _tag_rank(line)
            block = [line.strip()]
            j = i + 1
            while j < len(lines) and j - i < 400:
                cur = lines[j]
                body = re.sub(r"^\s*\[(?:rank|default)\d+\]:", "", cur)
                block.append(cur.strip())
                if body and not body.startswith((" ", "\t")) and _TB_START not in body:
                    m = _EXC_LINE.match(body.strip())
                    if m or (":" in body and not body.startswith("During handling")):
                        exc = m.group(1) if m else body.split(":", 1)[0].strip()
                        msg = (m.group(2) or "") if m else body.split(":", 1)[1].strip()
                        if body.startswith(("During handling", "The above exception")):
                            j += 1
                            continue
                        out.crashes.append(Crash(exception=exc, message=msg.strip(), lines=block[-12:],
                                                 secondary=bool(SECONDARY.search(body)), rank=prefix_rank))
                        break
                j += 1
            i = j + 1
            continue
        kv = _TORCHRUN_KV.match(line)
        if kv and kv.group(1) == "time":
            rec: dict[str, str] = {"time": kv.group(2).strip()}
            block = [line.strip()]
            j = i + 1
            while j < len(lines) and j - i < 12:
                m2 = _TORCHRUN_KV.match(lines[j])
                if not m2:
                    break
                rec[m2.group(1)] = m2.group(2).strip()
                block.append(lines[j].strip())
                j += 1
            if "exitcode" in rec:
                rk = re.match(r"(\d+)", rec.get("rank", ""))
                ex = _EXIT_PID.search(rec["exitcode"])
                sig = _SIGNAL.search(rec.get("traceback", ""))
                out.failures.append(ChildFailure(
                    rank=int(rk.group(1)) if rk else None, host=rec.get("host", ""),
                    exitcode=int(ex.group(1)) if ex else _int(rec["exitcode"]),
                    pid=int(ex.group(2)) if ex else None, signal=sig.group(2) if sig else "",
                    time=rec["time"], lines=block))
            i = j
            continue
        i += 1
    return out


def torchrun_time(text: str) -> datetime | None:
    """torchrun's failure-table time ("2024-06-03_10:12:01")."""
    try:
        return datetime.strptime(text.strip(), "%Y-%m-%d_%H:%M:%S")
    except ValueError:
        return None


# ----- Slurm job records --------------------------------------------------------------------------


@dataclass
class SlurmJob:
    job_id: str = ""
    nodelist: str = ""
    start: str = ""  # ISO-like as Slurm prints it ("2026-11-23T09:02:11"), or ""
    end: str = ""
    state: str = ""
    exit_code: str = ""
    problem: str = ""


_KV_SLURM = re.compile(r"(\w+)=(\S*)")


def parse_scontrol_job(text: str) -> SlurmJob:
    """`scontrol show job J` -> SlurmJob (first record)."""
    fields = dict(_KV_SLURM.findall(text))
    if "JobId" not in fields:
        return SlurmJob(problem=(text.strip().splitlines() or ["no output"])[0][:200])
    return SlurmJob(job_id=fields.get("JobId", ""), nodelist=fields.get("NodeList", "").replace("(null)", ""),
                    start=_slurm_time(fields.get("StartTime", "")), end=_slurm_time(fields.get("EndTime", "")),
                    state=fields.get("JobState", ""), exit_code=fields.get("ExitCode", ""))


def parse_sacct(text: str) -> SlurmJob:
    """`sacct -j J -X -n -P -o JobID,NodeList,Start,End,State,ExitCode` -> SlurmJob."""
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 6 and parts[0]:
            return SlurmJob(job_id=parts[0], nodelist="" if parts[1] in ("None assigned", "(null)") else parts[1],
                            start=_slurm_time(parts[2]), end=_slurm_time(parts[3]), state=parts[4],
                            exit_code=parts[5])
    return SlurmJob(problem=(text.strip().splitlines() or ["no output"])[0][:200])


def _slurm_time(v: str) -> str:
    v = v.strip()
    return v if re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}", v) else ""
