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
from dataclasses import dataclass, field
from typing import Any

from preflight.framing import DETECT_ENDS, Doc
from preflight.parsers.base import Format, ParserSpec
from preflight.parsers.base import to_int as _int

_STATUSES = r"NOCOMM|UNKNOWN|INIT|RUNNING|FINALIZE|ABORT"
_PROCESS = re.compile(r"^Process (\d+) on node (\S+) managing GPUs? (.+)$")
_RANK = re.compile(r"^Rank (\d+)(?: (?:has launched up to operation (\d+)|(has not launched any operations)|"
                   r"has status (\w+)|reported (.+?)))? -- (?:GPU (.+?) managed by process (\d+) on node (\S+)|"
                   r"\[process information not found\])$")
_RANK_STATUS_24 = re.compile(r"^Rank ([\d,]+) has status (\w+)$")  # 2.24 - 2.25: a rank with no data
_RANK_LIST_24 = re.compile(r"^The (missing|unknown) ranks?: ([\d,]+)$")  # 2.24 - 2.25
_COUNT = re.compile(r"^(\d+) ranks have (?:launched up to operation (\d+)|(not launched any operations))$")
_STATUS_COUNT = re.compile(rf"^(\d+) ranks have status ({_STATUSES})$")
_REPORTED = re.compile(r"^(\d+) ranks reported (.+)$")
_ERRORS_ON = re.compile(r"^(Initialization|Asynchronous) errors? on (\d+) ranks?$")
_OPS = re.compile(r"^Communicator ranks have different (\w+) operation counts$")
_COMM = re.compile(r"^#(\d+)-(\d+) \(([0-9a-fA-F]+)\) (INCOMPLETE|ERROR|MISMATCH)$")
_GROUP_ROW = re.compile(rf"^(\d+)\s+(\d+)\s+(\d+)\s+(\d+(?:-\d+)?)\s+(\d+)\s+(\d+)\s+({_STATUSES})\s+([A-Z,]+)$")
_MISSING_PROCS = re.compile(r"^Missing communicator data from (\d+) job process(?:es)?$")
_MISSING_RANKS = re.compile(r"^Missing communicator data from (\d+) ranks?$")
_DEAD = re.compile(r"^(\d+) job process(?:es are| is) considered dead \(unreachable via the RAS network\)$")
_NOT_FOUND = re.compile(r"^\[could not find information on (\d+) process(?:es)?\]$")
_TIMEOUTS = re.compile(r"^Encountered (\d+) communication timeouts? while gathering communicator data$")
_OUTLIER = re.compile(r"^Node (\S+) running process(?:es)? ([\d,]+)$")
_VERSION = re.compile(r"^NCCL version (\S+) compiled with CUDA (\S+)$")
_EVENT = re.compile(r"\b(PEER_DEAD|PEER_NEW|PEER_CONNECTING): ?(.*)$")
_CLIENT_ERROR = re.compile(r"^(?:(?:Connecting to|Resolving) \S+: (?!success)(.+)|(Failed to connect to the NCCL RAS service!)|"
                           r"(NCCL unexpectedly closed the connection)|"
                           r"(Connection timed out)(?:; retrying\.\.\.)?|(Connection closed by the NCCL job\.)|"
                           r"Unexpected response from NCCL: (.*))$")
_INTS = re.compile(r"^\d+(?:\s+\d+)*$")
_SECTION_WORDS = ("INCOMPLETE", "DEAD", "TIMEOUT", "Errors", "Warnings", "Job summary")


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
    counts: list[dict[str, Any]] = field(default_factory=list)  # {comm, op, count, launched}
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
        if not word:
            return
        for read in (self._header, self._process, self._rank, self._count, self._context, self._summary):
            if read(word):
                return

    def evidence(self, word: str) -> None:
        self.out.lines.append(word)

    def _header(self, word: str) -> bool:
        if word in _SECTION_WORDS:
            self.section, self.comm, self.op, self.under = word, "", "", {}
            if word.isupper():
                self.evidence(word)
            return True
        m = _COMM.match(word)
        if not m:
            return False
        self.section, self.comm, self.op, self.under = m.group(4), f"#{m.group(1)}-{m.group(2)}", "", {}
        self.evidence(word)
        return True

    def _process(self, word: str) -> bool:
        m = _PROCESS.match(word)
        if not m:
            return False
        rec = {"pid": int(m.group(1)), "node": m.group(2), "gpus": m.group(3)}
        (self.out.dead_processes if self.section == "DEAD" else self.out.missing_processes).append(rec)
        self.evidence(word)
        return True

    def _rank(self, word: str) -> bool:
        m = _RANK.match(word)
        if m:
            own = {"launched": _int(m.group(2)) if m.group(2) else (0 if m.group(3) else None),
                   "status": m.group(4) or "", "error": m.group(5) or ""}
            if own["launched"] is not None:  # a rank alone at its count: a group of one
                self.out.counts.append({"comm": self.comm, "op": self.op, "count": 1, "launched": own["launched"]})
            self._add_rank(int(m.group(1)), own, m.group(8) or "", _int(m.group(7)), m.group(6) or "")
            self.evidence(word)
            return True
        old = _RANK_STATUS_24.match(word) or _RANK_LIST_24.match(word)
        if old is None:
            return False
        status = old.group(2) if old.re is _RANK_STATUS_24 else ("UNKNOWN" if old.group(1) == "unknown" else "")
        listed = old.group(1) if old.re is _RANK_STATUS_24 else old.group(2)
        for r in re.findall(r"\d+", listed):
            self._add_rank(int(r), {"launched": None, "status": status, "error": ""}, "", None, "")
        self.evidence(word)
        return True

    def _add_rank(self, rank: int, own: dict[str, Any], node: str, pid: int | None, gpu: str) -> None:
        values = {k: own[k] if own[k] not in (None, "") else self.under.get(k, own[k]) for k in own}
        self.out.ranks.append({"rank": rank, "section": self.section, "comm": self.comm, **values, "node": node,
                               "pid": pid, "gpu": gpu, "op": self.op})

    def _count(self, word: str) -> bool:
        m = _COUNT.match(word)
        if m:
            n, launched = int(m.group(1)), 0 if m.group(3) else int(m.group(2))
            self.out.counts.append({"comm": self.comm, "op": self.op, "count": n, "launched": launched})
            self.under = {"launched": launched}
            if n > self.top:
                self.top, self.out.majority_launched = n, launched
            self.evidence(word)
            return True
        s = _STATUS_COUNT.match(word)
        if s:
            self.out.statuses.append({"comm": self.comm, "count": int(s.group(1)), "status": s.group(2)})
            self.under = {"status": s.group(2)}
            self.evidence(word)
            return True
        e = _REPORTED.match(word)
        if e:
            self.out.errors.append({"comm": self.comm, "kind": "reported", "count": int(e.group(1)),
                                    "error": e.group(2)})
            self.under = {"error": e.group(2)}
            self.evidence(word)
            return True
        return False

    def _context(self, word: str) -> bool:
        """The lines that say what the ranks listed below them have in common."""
        o = _OPS.match(word)
        if o or word in ("Communicator ranks have different collective operation counts",
                         "Communicator ranks have different status"):
            self.op = o.group(1) if o else ("collective" if "operation" in word else "")
            self.under = {}
            if self.op:
                self.out.mismatched_ops.append(self.op)
            self.evidence(word)
            return True
        e = _ERRORS_ON.match(word)
        if e:
            self.out.errors.append({"comm": self.comm, "kind": e.group(1), "count": int(e.group(2)), "error": ""})
            self.under = {}
            self.evidence(word)
            return True
        mr = _MISSING_RANKS.match(word)
        if mr:
            self.out.incomplete.append({"comm": self.comm, "missing": int(mr.group(1))})
            self.evidence(word)
            return True
        return False

    def _summary(self, word: str) -> bool:
        """The job summary, the groups table, the process counts, warnings, events, client errors."""
        return _summary_counts(self.out, word) or self._tables(word) or _summary_other(self.out, word)

    def _tables(self, word: str) -> bool:
        """The job summary's tables (their header says what a row of numbers is) and the
        communicator groups table."""
        g = _GROUP_ROW.match(word)
        if g:
            keys = ("group", "comms", "nodes", "ranks_per_node", "ranks_per_comm", "ranks_in_group")
            row: dict[str, Any] = dict(zip(keys, g.groups()[:6], strict=True))
            row.update({k: int(v) for k, v in row.items() if k != "ranks_per_node"}, status=g.group(7),
                       errors=g.group(8), line=word)
            self.out.groups.append(row)
            return True
        if word.startswith(("(total)", "per node", "per process")):
            self.table = _table_kind(word)
            return True
        if not _INTS.match(word) or not self.table:
            return False
        nums = [int(x) for x in word.split()]
        keys = _JOB_KEYS.get(self.table, ())
        if self.table == "breakdown" or len(keys) != len(nums):
            self.out.uneven = self.out.uneven or self.table == "breakdown"
            return True
        self.out.job = dict(zip(keys, nums, strict=True))
        return True


_JOB_KEYS = {"job": ("nodes", "processes_per_node", "gpus_per_process", "processes", "gpus"),
             "total": ("nodes", "processes", "gpus")}


def _table_kind(header: str) -> str:
    """What the rows under a job summary header are: the whole job in one row, the totals of an
    uneven job, or the breakdown of an uneven job (nodes by processes per node, ...)."""
    if not header.startswith("(total)"):
        return "breakdown"
    return "job" if "per node" in header else "total"


def _summary_counts(out: RasStatus, word: str) -> bool:
    m = _MISSING_PROCS.match(word)
    if m:
        out.missing_count = int(m.group(1))
        out.lines.append(word)
        return True
    d = _DEAD.match(word)
    if d:
        out.dead_count = int(d.group(1))
        out.lines.append(word)
        return True
    n = _NOT_FOUND.match(word)
    if n:
        out.unknown_processes += int(n.group(1))
        out.lines.append(word)
        return True
    t = _TIMEOUTS.match(word)
    if t:
        out.timeouts = int(t.group(1))
        out.lines.append(word)
        return True
    return False


def _summary_other(out: RasStatus, word: str) -> bool:
    v = _VERSION.match(word)
    if v:
        out.version = v.group(1)
        return True
    if word == "No communicator data collected!":
        out.no_comms = True
        out.lines.append(word)
        return True
    if word.startswith("RAS Monitor Mode - watching for peer changes"):
        out.monitor = True
        return True
    o = _OUTLIER.match(word)
    if o:
        out.outlier_nodes.append({"node": o.group(1), "pids": [int(p) for p in o.group(2).split(",")]})
        out.lines.append(word)
        return True
    ev = _EVENT.search(word)
    if ev:
        p = _PROCESS.match(ev.group(2))
        out.events.append({"event": ev.group(1), "pid": int(p.group(1)) if p else None,
                           "node": p.group(2) if p else ev.group(2).split(" ")[0], "gpus": p.group(3) if p else "",
                           "text": word})
        return True
    c = _CLIENT_ERROR.match(word)
    if c:
        out.client_error = next(x for x in c.groups() if x)
        out.lines.append(word)
        return True
    return False


# ---------------------------------------------------------------------------------------------
# The JSON form (`ncclras -f json`, NCCL 2.28.7+): the raw data, read into the same facts


def _json_rank(out: RasStatus, comm: str, r: dict[str, Any]) -> None:
    st = r.get("status") if isinstance(r.get("status"), dict) else {}
    base = {"rank": _int(r.get("rank")), "comm": comm, "node": str(r.get("host", "")), "pid": _int(r.get("pid")),
            "gpu": str(r.get("cuda_dev", "")), "op": "", "launched": None}
    if st.get("abort_flag") is True:
        out.ranks.append({**base, "section": "MISMATCH", "status": "ABORT", "error": ""})
    for kind, key in (("Initialization", "init_state"), ("Asynchronous", "async_error")):
        code = _int(st.get(key))
        if code not in (None, 0, 7):  # ncclSuccess, ncclInProgress
            out.errors.append({"comm": comm, "kind": kind, "count": 1, "error": f"NCCL error {code}"})
            out.ranks.append({**base, "section": "ERROR", "status": "", "error": f"NCCL error {code}"})


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
            out.counts.append({"comm": comm, "op": op, "count": values.count(v), "launched": v})
        for r in ranks:
            n = by_rank.get(_int(r.get("rank")))
            if n is not None and n != common:
                out.ranks.append({"rank": _int(r.get("rank")), "section": "MISMATCH", "comm": comm, "launched": n,
                                  "status": "", "error": "", "node": str(r.get("host", "")), "pid": _int(r.get("pid")),
                                  "gpu": str(r.get("cuda_dev", "")), "op": op})


def _json_comm(out: RasStatus, i: int, c: dict[str, Any]) -> None:
    comm = f"#{i} ({c.get('hash', '?')})"
    ranks, missing = _list(c.get("ranks")), _list(c.get("missing_ranks"))
    for r in ranks:
        _json_rank(out, comm, r)
    _json_counts(out, comm, ranks)
    if missing:
        out.incomplete.append({"comm": comm, "missing": len(missing)})
    for r in missing:
        st = r.get("status") if isinstance(r.get("status"), dict) else {}
        out.ranks.append({"rank": _int(r.get("rank")), "section": "DEAD" if st.get("considered_dead") else "INCOMPLETE",
                          "comm": comm, "launched": None, "status": "", "error": "", "node": str(r.get("host", "")),
                          "pid": _int(r.get("pid")), "gpu": str(r.get("cuda_dev", "")), "op": ""})


def _list(value: Any) -> list[dict[str, Any]]:
    """The objects of a JSON list (anything else: none)."""
    return [x for x in value if isinstance(x, dict)] if isinstance(value, list) else []


def _json_docs(text: str) -> list[dict[str, Any]]:
    """The JSON objects of `text`, one after another (a status, or monitor events); [] when it
    holds none."""
    docs, dec, i = [], json.JSONDecoder(), text.find("{")
    while 0 <= i < len(text):
        try:
            doc, end = dec.raw_decode(text, i)
        except ValueError:
            return docs
        if isinstance(doc, dict):
            docs.append(doc)
        i = text.find("{", end)
    return docs


def _json_event(out: RasStatus, doc: dict[str, Any]) -> None:
    peer = doc.get("peer") if isinstance(doc.get("peer"), dict) else {}
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
        ras = doc.get("ras") if isinstance(doc.get("ras"), dict) else {}
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
    if "{" in text and ('"communicators"' in text or '"event"' in text):
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
            "Failed to connect to the NCCL RAS service", '"event": "PEER_')
_STRICT = re.compile(r"^(?:Communicators\.\.\.|Group\s+Comms\s+Nodes\s+Ranks|#\d+-\d+ \([0-9a-fA-F]+\) "
                     r"(?:INCOMPLETE|ERROR|MISMATCH)$|RAS Monitor Mode|Missing communicator data from \d+ |"
                     r"\d+ job process(?:es are| is) considered dead|\"communicators_count\": \d+|"
                     r"Failed to connect to the NCCL RAS service!|\"event\": \"PEER_\w+\")|"
                     r"\bPEER_DEAD: Process \d+ on node ")


def detect(doc: Doc) -> bool:
    return any(_STRICT.search(doc.peel_hit(h).text.strip()) for h in doc.scan(_NEEDLES, ends=DETECT_ENDS))


FORMATS = [Format("nccl-ras", detect=detect, priority=55,  # pragma: no mutate - only its order among formats counts
                  description="NCCL RAS status (ncclras): job summary, communicators, missing/dead processes, "
                              "errors and mismatched operation counts; its monitor events and JSON form")]
PARSERS = [ParserSpec("nccl-ras", parse)]

__all__ = ["RasStatus", "detect", "looks_like_ras", "parse", "parse_ras", "parse_ras_json"]
