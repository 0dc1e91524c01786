"""NCCL RAS status (`ncclras`, NCCL 2.24+) as facts: the job summary, the communicator groups,
missing and dead processes, communicators with missing ranks, errors, mismatched status and
operation counts, the monitor mode's events, and the JSON form (2.28.7+).

What the client prints comes from NVIDIA/nccl src/ras/client_support.cc (rasClientRunInit(),
rasClientRunComms(), rasClientBreakDownErrors(), rasClientsNotifyEvent(), rasDumpCommsToJSON())
and src/ras/client.cc (the `ncclras` binary's own errors); see
`preflight/parsers/nccl-ras.inventory.toml` for every line read, with its versions. Ranks listed
under a "N ranks have ..." line share that line's value (operation count, status, error). Pure:
no I/O; garbage gives empty facts, never raises; one pass over the lines.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from preflight import lazyre
from preflight.framing import DETECT_ENDS, Doc
from preflight.parsers.base import Format, ParserSpec
from preflight.parsers.base import to_int as _int

_STATUSES = r"NOCOMM|UNKNOWN|INIT|RUNNING|FINALIZE|ABORT"
_PROCESS = lazyre.compile(r"^Process (\d+) on node (\S+) managing GPUs? (.+)$")
_RANK = lazyre.compile(r"^Rank (\d+)(?: (?:has launched up to operation (\d+)|(has not launched any operations)|"
                   r"has status (\w+)|reported (.+?)))? -- (?:GPU (.+?) managed by process (\d+) on node (\S+)|"
                   r"\[process information not found\])$")
_RANK_STATUS_24 = lazyre.compile(r"^Rank ([\d,]+) has status (\w+)$")  # 2.24 - 2.25: a rank with no data
_RANK_LIST_24 = lazyre.compile(r"^The (missing|unknown) ranks?: ([\d,]+)$")  # 2.24 - 2.25
_COUNT = lazyre.compile(r"^(\d+) ranks have (?:launched up to operation (\d+)|(not launched any operations))$")
_STATUS_COUNT = lazyre.compile(rf"^(\d+) ranks have status ({_STATUSES})$")
_REPORTED = lazyre.compile(r"^(\d+) ranks reported (.+)$")
_ERRORS_ON = lazyre.compile(r"^(Initialization|Asynchronous) errors? on (\d+) ranks?$")
_DIFFER = lazyre.compile(r"^Communicator ranks have different (?:(\w+) operation counts|status)$")
_COMM = lazyre.compile(r"^#(\d+)-(\d+) \(([0-9a-fA-F]+)\) (INCOMPLETE|ERROR|MISMATCH)$")
_GROUP_ROW = lazyre.compile(rf"^(\d+)\s+(\d+)\s+(\d+)\s+(\d+(?:-\d+)?)\s+(\d+)\s+(\d+)\s+({_STATUSES})\s+([A-Z,]+)$")
_MISSING_PROCS = lazyre.compile(r"^Missing communicator data from (\d+) job process(?:es)?$")
_MISSING_RANKS = lazyre.compile(r"^Missing communicator data from (\d+) ranks?$")
_DEAD = lazyre.compile(r"^(\d+) job process(?:es are| is) considered dead \(unreachable via the RAS network\)$")
_NOT_FOUND = lazyre.compile(r"^\[could not find information on (\d+) process(?:es)?\]$")
_TIMEOUTS = lazyre.compile(r"^Encountered (\d+) communication timeouts? while gathering communicator data$")
_OUTLIER = lazyre.compile(r"^Node (\S+) running process(?:es)? ([\d,]+)$")
_VERSION = lazyre.compile(r"^NCCL version (\S+) compiled with CUDA (\S+)$")
_EVENT = lazyre.compile(r"\b(PEER_DEAD|PEER_NEW|PEER_CONNECTING): ?(.*)$")
_CLIENT_ERROR = lazyre.compile(r"^(?:(?:Connecting to|Resolving) \S+: (?!success)(.+)|(Failed to connect to the NCCL RAS service!)|"
                           r"(NCCL unexpectedly closed the connection)|"
                           r"(Connection timed out)(?:; retrying\.\.\.)?|(Connection closed by the NCCL job\.)|"
                           r"Unexpected response from NCCL: (.*))$")
_INTS = lazyre.compile(r"^\d+(?:\s+\d+)*$")


@dataclass
class RasStatus:
    version: str = ""
    job: dict[str, int] = field(default_factory=dict)  # nodes, processes, gpus (and per node/process)
    uneven: bool = False  # the job summary breaks the processes per node (or GPUs per process) down
    groups: list[dict[str, Any]] = field(default_factory=list)  # the communicator groups table
    missing_processes: list[dict[str, Any]] = field(default_factory=list)  # {pid, node, gpus}
    dead_processes: list[dict[str, Any]] = field(default_factory=list)
    missing_count: int = 0  # "Missing communicator data from N job processes" (listed or not)
    dead_count: int = 0
    unknown_processes: int = 0  # "[could not find information on N processes]"
    # {rank, section, comm, launched, status, error, node, pid, gpu, op}; a listed rank's values
    # are its own line's or the "N ranks have ..." line it is listed under
    ranks: list[dict[str, Any]] = field(default_factory=list)
    incomplete: list[dict[str, Any]] = field(default_factory=list)  # {comm, missing}: ranks missing per comm
    counts: list[dict[str, Any]] = field(default_factory=list)  # {comm, op, count, launched, where (its quoted key)}
    statuses: list[dict[str, Any]] = field(default_factory=list)  # {comm, count, status}
    errors: list[dict[str, Any]] = field(default_factory=list)  # {comm, kind, count, error}
    mismatched_ops: list[str] = field(default_factory=list)
    majority_launched: int | None = None  # the operation count of the largest group of ranks
    timeouts: int = 0
    no_comms: bool = False  # "No communicator data collected!"
    outlier_nodes: list[dict[str, Any]] = field(default_factory=list)  # {node, pids}
    events: list[dict[str, Any]] = field(default_factory=list)  # monitor mode: {event, pid, node, gpus, text}
    monitor: bool = False  # the client's monitor mode ("RAS Monitor Mode - watching for peer changes")
    client_error: str = ""  # the ncclras client could not get an answer
    json_form: bool = False
    lines: list[str] = field(default_factory=list)  # the lines that single something out, for evidence
    # the same lines by where they stand: "DEAD", "INCOMPLETE", "TIMEOUT", "#0-1 ERROR", "#0-1 MISMATCH" (a
    # communicator's header and its status lines), "#0-1 MISMATCH AllReduce" (its counts of one collective)
    quoted: dict[str, list[str]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        """Nothing singled out: no missing or dead process, rank, error or mismatch."""
        return not (self.missing_processes or self.dead_processes or self.ranks or self.mismatched_ops
                    or self.missing_count or self.dead_count or self.errors or self.incomplete)

    @property
    def recognised(self) -> bool:
        """The text holds RAS output read here (a status, a monitor event or a client error)."""
        return bool(self.version or self.job or self.groups or not self.empty or self.no_comms or self.events
                    or self.monitor or self.client_error or self.timeouts or self.json_form)


@dataclass
class _Reader:
    """The client's text, one line at a time: the section and the "N ranks have ..." line a
    listed rank belongs to."""

    out: RasStatus = field(default_factory=RasStatus)
    section: str = ""  # INCOMPLETE, DEAD, TIMEOUT, or the kind of the communicator section
    comm: str = ""  # "#0-1" while in a communicator's section
    op: str = ""  # the operation whose counts differ
    under: dict[str, Any] = field(default_factory=dict)  # the values of the "N ranks have ..." line above
    top: int = 0  # ranks in the largest group of equal operation counts
    table: str = ""  # the job summary table whose rows follow: job, total, breakdown

    def feed(self, raw: str) -> None:
        word = raw.strip()
        for rx, read, quote in _LINES:
            m = rx.search(word)
            if m:
                read(self, m)
                if quote:
                    self.out.lines.append(word)
                    self.out.quoted.setdefault(self.key, []).append(word)
                return

    @property
    def key(self) -> str:
        """Where the line read stands (`RasStatus.quoted`)."""
        return " ".join(x for x in (self.comm, self.section, self.op) if x)

    def add_rank(self, rank: int, own: dict[str, Any], node: str, pid: int | None, gpu: str) -> None:
        values = {k: own[k] if own[k] not in (None, "") else self.under.get(k, own[k]) for k in own}
        self.out.ranks.append({"rank": rank, "section": self.section, "comm": self.comm, **values, "node": node,
                               "pid": pid, "gpu": gpu, "op": self.op})


Match = re.Match[str]


def _section(r: _Reader, m: Match) -> None:
    r.section, r.comm, r.op, r.under = m.group(1), "", "", {}


def _comm(r: _Reader, m: Match) -> None:
    r.section, r.comm, r.op, r.under = m.group(4), f"#{m.group(1)}-{m.group(2)}", "", {}


def _process(r: _Reader, m: Match) -> None:
    rec = {"pid": int(m.group(1)), "node": m.group(2), "gpus": m.group(3)}
    (r.out.dead_processes if r.section == "DEAD" else r.out.missing_processes).append(rec)


def _rank(r: _Reader, m: Match) -> None:
    own = {"launched": _int(m.group(2)) if m.group(2) else (0 if m.group(3) else None),
           "status": m.group(4) or "", "error": m.group(5) or ""}
    if own["launched"] is not None:  # a rank alone at its count: a group of one
        r.out.counts.append({"comm": r.comm, "op": r.op, "count": 1, "launched": own["launched"], "where": r.key})
    r.add_rank(int(m.group(1)), own, m.group(8) or "", _int(m.group(7)), m.group(6) or "")


def _rank_status_24(r: _Reader, m: Match) -> None:
    for x in m.group(1).split(","):
        r.add_rank(int(x), {"launched": None, "status": m.group(2), "error": ""}, "", None, "")


def _rank_list_24(r: _Reader, m: Match) -> None:
    status = "UNKNOWN" if m.group(1) == "unknown" else ""
    for x in m.group(2).split(","):
        r.add_rank(int(x), {"launched": None, "status": status, "error": ""}, "", None, "")


def _count(r: _Reader, m: Match) -> None:
    n, launched = int(m.group(1)), 0 if m.group(3) else int(m.group(2))
    r.out.counts.append({"comm": r.comm, "op": r.op, "count": n, "launched": launched, "where": r.key})
    r.under = {"launched": launched}
    if n > r.top:
        r.top, r.out.majority_launched = n, launched


def _status_count(r: _Reader, m: Match) -> None:
    r.out.statuses.append({"comm": r.comm, "count": int(m.group(1)), "status": m.group(2)})
    r.under = {"status": m.group(2)}


def _reported(r: _Reader, m: Match) -> None:
    r.out.errors.append({"comm": r.comm, "kind": "reported", "count": int(m.group(1)), "error": m.group(2)})
    r.under = {"error": m.group(2)}


def _differ(r: _Reader, m: Match) -> None:
    """What the ranks listed below have in common: an operation count ("collective" before 2.26), or a status."""
    r.op, r.under = m.group(1) or "", {}
    if r.op:
        r.out.mismatched_ops.append(r.op)


def _errors_on(r: _Reader, m: Match) -> None:
    r.out.errors.append({"comm": r.comm, "kind": m.group(1), "count": int(m.group(2)), "error": ""})
    r.under = {}


def _missing_ranks(r: _Reader, m: Match) -> None:
    r.out.incomplete.append({"comm": r.comm, "missing": int(m.group(1))})


def _missing_procs(r: _Reader, m: Match) -> None:
    r.out.missing_count = int(m.group(1))


def _dead(r: _Reader, m: Match) -> None:
    r.out.dead_count = int(m.group(1))


def _not_found(r: _Reader, m: Match) -> None:
    r.out.unknown_processes += int(m.group(1))


def _timeouts(r: _Reader, m: Match) -> None:
    r.out.timeouts = int(m.group(1))


def _group_row(r: _Reader, m: Match) -> None:
    keys = ("group", "comms", "nodes", "ranks_per_node", "ranks_per_comm", "ranks_in_group")
    row: dict[str, Any] = dict(zip(keys, m.groups()[:6], strict=True))  # pragma: no mutate - equal lengths
    row.update({k: int(v) for k, v in row.items() if k != "ranks_per_node"}, status=m.group(7), errors=m.group(8),
               line=m.group(0))
    r.out.groups.append(row)


def _table_head(r: _Reader, m: Match) -> None:
    """What the rows under a job summary header are: the whole job in one row, the totals of an
    uneven job, or the breakdown of an uneven job (nodes by processes per node, ...)."""
    r.table = "breakdown" if not m.group(1) else "job" if "per node" in m.string else "total"


def _numbers(r: _Reader, m: Match) -> None:
    nums = [int(x) for x in m.group(0).split()]
    keys = _JOB_KEYS.get(r.table, ())
    if r.table == "breakdown":
        r.out.uneven = True
    elif len(keys) == len(nums):
        r.out.job = dict(zip(keys, nums, strict=True))  # pragma: no mutate - lengths compared above


def _version(r: _Reader, m: Match) -> None:
    r.out.version = m.group(1)


def _no_comms(r: _Reader, m: Match) -> None:
    r.out.no_comms = True


def _monitor(r: _Reader, m: Match) -> None:
    r.out.monitor = True


def _outlier(r: _Reader, m: Match) -> None:
    r.out.outlier_nodes.append({"node": m.group(1), "pids": [int(p) for p in m.group(2).split(",")]})


def _event(r: _Reader, m: Match) -> None:
    p = _PROCESS.match(m.group(2))
    r.out.events.append({"event": m.group(1), "pid": int(p.group(1)) if p else None,
                         "node": p.group(2) if p else m.group(2).split(" ")[0], "gpus": p.group(3) if p else "",
                         "text": m.string})


def _client_error(r: _Reader, m: Match) -> None:
    r.out.client_error = next(x for x in m.groups() if x)


_JOB_KEYS = {"job": ("nodes", "processes_per_node", "gpus_per_process", "processes", "gpus"),
             "total": ("nodes", "processes", "gpus")}

# (pattern, reader, whether the line is evidence); the patterns are disjoint, the first that matches reads the line
_LINES: tuple[tuple[re.Pattern[str], Callable[[_Reader, Match], None], bool], ...] = (
    (lazyre.compile(r"^(INCOMPLETE|DEAD|TIMEOUT)$"), _section, True),
    (lazyre.compile(r"^(Errors|Warnings|Job summary)$"), _section, False),
    (_COMM, _comm, True),
    (_PROCESS, _process, True),
    (_RANK, _rank, True),
    (_RANK_STATUS_24, _rank_status_24, True),
    (_RANK_LIST_24, _rank_list_24, True),
    (_COUNT, _count, True),
    (_STATUS_COUNT, _status_count, True),
    (_REPORTED, _reported, True),
    (_DIFFER, _differ, True),
    (_ERRORS_ON, _errors_on, True),
    (_MISSING_RANKS, _missing_ranks, True),
    (_MISSING_PROCS, _missing_procs, True),
    (_DEAD, _dead, True),
    (_NOT_FOUND, _not_found, True),
    (_TIMEOUTS, _timeouts, True),
    (_GROUP_ROW, _group_row, False),
    (lazyre.compile(r"^(\(total\))|^per (?:node|process)\b"), _table_head, False),
    (_INTS, _numbers, False),
    (_VERSION, _version, False),
    (lazyre.compile(r"^No communicator data collected!$"), _no_comms, True),
    (lazyre.compile(r"^RAS Monitor Mode - watching for peer changes"), _monitor, False),
    (_OUTLIER, _outlier, True),
    (_EVENT, _event, False),
    (_CLIENT_ERROR, _client_error, True),
)


# ---------------------------------------------------------------------------------------------
# The JSON form (`ncclras -f json`, NCCL 2.28.7+): the raw data, read into the same facts


def _quote(out: RasStatus, key: str, obj: dict[str, Any]) -> None:
    """A JSON record as an evidence line, filed where the text form would print it."""
    line = json.dumps(obj, separators=(", ", ": "))
    out.lines.append(line)
    out.quoted.setdefault(key, []).append(line)


def _json_rank(out: RasStatus, comm: str, r: dict[str, Any]) -> None:
    st = _obj(r.get("status"))
    base = {"rank": _int(r.get("rank")), "comm": comm, "node": str(r.get("host", "")), "pid": _int(r.get("pid")),
            "gpu": str(r.get("cuda_dev", "")), "op": "", "launched": None}
    if st.get("abort_flag") is True:
        out.ranks.append({**base, "section": "MISMATCH", "status": "ABORT", "error": ""})
        _quote(out, f"{comm} MISMATCH", {k: r.get(k) for k in ("rank", "host", "pid", "status")})
    for kind, key in (("Initialization", "init_state"), ("Asynchronous", "async_error")):
        code = _int(st.get(key))
        if code not in (None, 0, 7):  # ncclSuccess, ncclInProgress
            out.errors.append({"comm": comm, "kind": kind, "count": 1, "error": f"NCCL error {code}"})
            out.ranks.append({**base, "section": "ERROR", "status": "", "error": f"NCCL error {code}"})
            _quote(out, f"{comm} ERROR", {k: r.get(k) for k in ("rank", "host", "pid", "status")})


def _json_counts(out: RasStatus, comm: str, ranks: list[dict[str, Any]]) -> None:
    """Ranks whose operation count of a collective differs from the most common count."""
    ops = {op for r in ranks if isinstance(r.get("collective_counts"), dict) for op in r["collective_counts"]}
    for op in sorted(ops):
        by_rank = {_int(r.get("rank")): _int(r["collective_counts"].get(op)) for r in ranks
                   if isinstance(r.get("collective_counts"), dict)}
        values = [v for v in by_rank.values() if v is not None]
        if len(set(values)) < 2:
            continue
        common = max(sorted(set(values)), key=values.count)
        out.mismatched_ops.append(op)
        out.majority_launched = common if out.majority_launched is None else out.majority_launched
        for v in sorted(set(values), key=lambda x: (-values.count(x), x)):
            out.counts.append({"comm": comm, "op": op, "count": values.count(v), "launched": v,
                               "where": f"{comm} MISMATCH {op}"})
        for r in ranks:
            n = by_rank.get(_int(r.get("rank")))
            if n is not None and n != common:
                out.ranks.append({"rank": _int(r.get("rank")), "section": "MISMATCH", "comm": comm, "launched": n,
                                  "status": "", "error": "", "node": str(r.get("host", "")), "pid": _int(r.get("pid")),
                                  "gpu": str(r.get("cuda_dev", "")), "op": op})
                _quote(out, f"{comm} MISMATCH {op}", {"rank": r.get("rank"), "host": r.get("host"),
                                                      "collective_counts": {op: n}})


def _json_comm(out: RasStatus, i: int, c: dict[str, Any]) -> None:
    comm = f"#{i} ({c.get('hash', '?')})"
    ranks, missing = _list(c.get("ranks")), _list(c.get("missing_ranks"))
    for r in ranks:
        _json_rank(out, comm, r)
    _json_counts(out, comm, ranks)
    if missing:
        out.incomplete.append({"comm": comm, "missing": len(missing)})
    for r in missing:
        st = _obj(r.get("status"))
        section = "DEAD" if st.get("considered_dead") else "INCOMPLETE"
        out.ranks.append({"rank": _int(r.get("rank")), "section": section, "comm": comm, "launched": None,
                          "status": "", "error": "", "node": str(r.get("host", "")), "pid": _int(r.get("pid")),
                          "gpu": str(r.get("cuda_dev", "")), "op": ""})
        _quote(out, "DEAD" if section == "DEAD" else f"{comm} INCOMPLETE", r)


def _obj(value: Any) -> dict[str, Any]:
    """A JSON object (anything else: an empty one)."""
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[dict[str, Any]]:
    """The objects of a JSON list (anything else: none)."""
    return [x for x in value if isinstance(x, dict)] if isinstance(value, list) else []


def _json_docs(text: str) -> list[dict[str, Any]]:
    """The JSON objects of `text`, one after another (a status, or monitor events); [] when it
    holds none."""
    docs: list[dict[str, Any]] = []
    dec, i = json.JSONDecoder(), text.find("{")
    while i >= 0:
        try:
            doc, end = dec.raw_decode(text, i)
        except ValueError:
            return docs
        if isinstance(doc, dict):
            docs.append(doc)
        i = text.find("{", end)
    return docs


def _json_event(out: RasStatus, doc: dict[str, Any]) -> None:
    peer = _obj(doc.get("peer"))
    gpus = peer.get("cuda_devs")
    out.events.append({"event": str(doc.get("event", "")), "pid": _int(peer.get("pid")),
                       "node": str(peer.get("host") or peer.get("addr") or ""),
                       "gpus": ",".join(map(str, gpus)) if isinstance(gpus, list) else "",
                       "text": json.dumps(doc, separators=(", ", ": "))})


def parse_ras_json(text: str) -> RasStatus | None:
    """The JSON form (a status, or the monitor's events), or None when `text` holds neither."""
    docs = [d for d in _json_docs(text) if "communicators" in d or "event" in d]
    if not docs:
        return None
    out = RasStatus(json_form=True)
    for doc in docs:
        if "event" in doc:
            _json_event(out, doc)
            continue
        out.version = str(doc.get("nccl_version", ""))
        comms = _list(doc.get("communicators"))
        for i, c in enumerate(comms):
            _json_comm(out, i, c)
        ras = _obj(doc.get("ras"))
        out.timeouts = _int(ras.get("timeouts_count")) or 0
        out.no_comms = not comms
    out.dead_processes = [{"pid": r["pid"], "node": r["node"], "gpus": r["gpu"]} for r in out.ranks
                          if r["section"] == "DEAD"]
    return out


# ---------------------------------------------------------------------------------------------
# Entry points


def looks_like_ras(text: str) -> bool:
    """Whether raw text is `ncclras` output (the summary, a communicator section, the JSON form)."""
    return bool(re.search(r"^Errors\n======", text, re.M) or re.search(r"Communicators\.\.\.", text)
                or re.search(r"^Group\s+Comms\s+Nodes\s+Ranks", text, re.M)
                or re.search(r"^#\d+-\d+ \([0-9a-f]+\) (?:INCOMPLETE|ERROR|MISMATCH)$", text, re.M)
                or ('"communicators_count"' in text and '"nccl_version"' in text)
                or re.search(r'"event": "PEER_\w+"', text) is not None)


def parse_ras(text: str) -> RasStatus:
    """`ncclras` text (or its JSON form) -> the processes and ranks RAS singled out."""
    if '"communicators"' in text or '"event"' in text:
        parsed = parse_ras_json(text)
        if parsed is not None:
            return parsed
    reader = _Reader()
    for raw in text.splitlines():
        reader.feed(raw)
    return reader.out


def parse(doc: Doc) -> RasStatus:
    return parse_ras("\n".join(ln.text for ln in doc.lines))


_NEEDLES = ("Communicators...", "Comms     Nodes", ") MISMATCH", ") INCOMPLETE", ") ERROR", "RAS Monitor Mode",
            "PEER_DEAD:", "unreachable via the RAS network", "Missing communicator data from", '"communicators_count"',
            "Failed to connect to the NCCL RAS service", '"event": "PEER_', "NCCL unexpectedly closed the connection",
            "Connection closed by the NCCL job", "Unexpected response from NCCL:", "(total)", " running process",
            "while gathering communicator data")
_STRICT = lazyre.compile(r"^(?:Communicators\.\.\.|Group\s+Comms\s+Nodes\s+Ranks|#\d+-\d+ \([0-9a-fA-F]+\) "
                     r"(?:INCOMPLETE|ERROR|MISMATCH)$|RAS Monitor Mode|Missing communicator data from \d+ |"
                     r"\d+ job process(?:es are| is) considered dead|\"communicators_count\": \d+|"
                     r"Failed to connect to the NCCL RAS service!|\"event\": \"PEER_\w+\"|NCCL unexpectedly closed the connection$|"
                     r"Connection closed by the NCCL job\.$|Unexpected response from NCCL: )|"
                     r"\bPEER_DEAD: Process \d+ on node |"
                     r"^\(total\)\s+(?:per node\s+per process\s+\(total\)\s+\(total\)|\(total\)\s+\(total\))$|"
                     r"^Node \S+ running process(?:es)? \d+(?:,\d+)*$|"
                     r"^Encountered \d+ communication timeouts? while gathering communicator data$")


def detect(doc: Doc) -> bool:
    return any(_STRICT.search(doc.peel_hit(h).text.strip()) for h in doc.scan(_NEEDLES, ends=DETECT_ENDS))


FORMATS = [Format("nccl-ras", detect=detect, priority=55,  # pragma: no mutate - only its order among formats counts
                  description="NCCL RAS status (ncclras): job summary, communicators, missing/dead processes, "
                              "errors and mismatched operation counts; its monitor events and JSON form")]
PARSERS = [ParserSpec("nccl-ras", parse)]

__all__ = ["RasStatus", "detect", "looks_like_ras", "parse", "parse_ras", "parse_ras_json"]
