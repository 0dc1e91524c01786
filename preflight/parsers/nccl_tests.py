"""nccl-tests / rccl-tests `*_perf` output as facts: one `NcclTests` per run of a binary.

What the binaries print (NVIDIA/nccl-tests src/common.cu, src/util.cu; ROCm/rccl-tests
src/common.cu), across versions:
- a parameter line `# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor) ...`
  (no `#` in 1.x; `agg iters`, `graph`, `unalign` added over time), from 2.17 framed by
  `# Collective test starting: all_reduce_perf` ... `# Collective test concluded: ...`, from
  2.18 preceded by `# nccl-tests version ...`; rccl-tests prints `rccl-tests: Version ...`;
- the rank list under `# Using devices`: `#   Rank  0 on host device  0 [0x1b] <GPU>` (1.x),
  `#   Rank  0 Pid 123 on host device ...` (2.0-2.13, rccl-tests), `#  Rank  0 Group  0 Pid 123
  on host device  0 [0x1b] <GPU>` (2.13+), the bus as `[0000:1b:00]` from 2.16;
- a column header (`size count type redop root time algbw busbw #wrong` out-of-place then
  in-place; `error` (a max delta) before 2.13, `bytes N type op ... res` in 1.x with the time
  in ms, `cputime` with -C, four per-iteration columns per block with -I, a time stamp column
  with -S, one in-place block in rccl-tests' in-place-only mode), then one row per size;
- `# Out of bounds values : N OK|FAILED` and `# Avg bus bandwidth : X [OK|FAILED]`.
NCCL INFO/WARN lines and launcher messages may be interleaved anywhere, even inside a row
(the row's first columns are printed before the collective runs): such a row is joined back
from its pieces. A row a launcher's `[0]` tags cut is rejoined too. Several runs in one
capture are kept apart (a new parameter line or column header starts a new table).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from preflight.framing import Doc
from preflight.parsers.base import Format, ParserSpec

# Printed busbw cells have two decimals: their mean may differ from the printed average by
# rounding only. A larger gap means an edited or truncated table.
AVG_ROUNDING_SLACK = 0.01
AVG_RELATIVE_SLACK = 0.001  # and 0.1% of it: the average is printed with %g (six significant digits)

COLLECTIVES = ("all_reduce", "all_gather", "alltoallv", "alltoall", "broadcast", "reduce_scatter", "reduce",
               "sendrecv", "scatter", "gather", "hypercube")
# bytes per element of the type names nccl-tests and rccl-tests print (1.x: char, int)
WORD_SIZE = {"int8": 1, "uint8": 1, "char": 1, "f8e4m3": 1, "f8e5m2": 1, "fp8_e4m3": 1, "fp8_e5m2": 1,
             "half": 2, "bfloat16": 2, "int32": 4, "uint32": 4, "int": 4, "float": 4, "int64": 8,
             "uint64": 8, "double": 8}
# busbw / algbw of an all-reduce is 2(n-1)/n (src/all_reduce.cu AllReduceGetBw); the ratio is
# read from cells with at least this algbw (two printed decimals: under 0.5% rounding)
RATIO_MIN_ALGBW = 1.0
RATIO_TOLERANCE = 0.02  # two printed decimals on cells of algbw >= 1 keep busbw/algbw within 1%

_NUM_RE = re.compile(r"^(?:[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|N/A|-?nan|-?inf)$", re.I)
_PROGRAM = re.compile(r"\b(" + "|".join(COLLECTIVES) + r")_perf(?:_mpi)?\b")
_PARAMS = re.compile(r"^#?\s*nThread\s+\d+\s+nGpus\s+\d+")
_PARAM = re.compile(r"(nThread|nGpus|minBytes|maxBytes|step:|warmup iters:|agg iters:|(?<![a-z] )iters:|"
                    r"validation:|graph:|unalign:)\s*(\d+)")
_PARAM_KEYS = {"nThread": "nthread", "nGpus": "ngpus", "minBytes": "min_bytes", "maxBytes": "max_bytes",
               "step:": "step", "warmup iters:": "warmup_iters", "agg iters:": "agg_iters", "iters:": "iters",
               "validation:": "validation", "graph:": "graph", "unalign:": "unalign"}
_RANK_LINE = re.compile(r"^#\s*Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?(?:Pid\s+(\d+)\s+)?on\s+(\S+)\s+device\s+(\d+)"
                        r"\s+\[([^\]]*)\]\s*(.*?)\s*$")
_COLUMNS = re.compile(r"^#\s*(size|bytes)\s+(count|N)\s+type\b")
_GROUPS = re.compile(r"^#\s*(out-of-place|in-place)\b.*$")
_AVG = re.compile(r"^#?\s*Avg bus bandwidth\s*:\s*(\S+)\s*(OK|FAILED)?")
_OOB = re.compile(r"^#?\s*Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)?")
_STARTS = re.compile(r"^#\s*(?:Collective test starting:\s*(\S+)|nccl-tests version\s+(\S+)(.*))|"
                     r"^rccl-tests:\s*Version\s+(\S+)")
_CONCLUDED = re.compile(r"^#\s*Collective test concluded:\s*(\S+)")
_TEST_FAIL = re.compile(r"Test (?:NCCL|CUDA) failure|Test failure\b|Test timeout\b|Invalid number of GPUs|"
                        r"number of requested GPUs .* greater than|\bunhandled (?:system|cuda) error\b", re.I)
# an NCCL log record (`host:pid:tid [dev] NCCL INFO ...`), also where a row's numbers run into it
_NCCL_LOG = re.compile(r"(?<![A-Za-z_.-])([A-Za-z][\w.-]*):(\d+):(\d+) \[(\d+)\] NCCL (INFO|WARN|TRACE|ABORT)\b")
_NCCL_VERSION = re.compile(r"\bNCCL version (\d+\.\d+\.\d+)")
_LIBRARY_CODE = re.compile(r"nccl-library=(\d+)")
_TAG = re.compile(r"\[\d+(?:,\d+)?\](?:<std(?:out|err)>:)?")
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([A-Za-z]\w*)(?=\s|$)(.*)$")
_STAMP = re.compile(r"^\d{4}-\d\d-\d\d(?:\s+\d\d:\d\d:\d\d)?$")
_ALGO_ENV = re.compile(r"NCCL_ALGO(?:\s+set by environment to\s+|\s*=\s*|\s+)['\"]?([\w^,;:]+)", re.I)
_NVLS_ENV = re.compile(r"NCCL_NVLS_ENABLE(?:\s+set by environment to\s+|\s*=\s*|\s+)['\"]?(\d)")
_NVLS_OFF = re.compile(r"NVLS multicast support is not available|NVLS disabled", re.I)
_NVLS_ON = re.compile(r"NVLS multicast support is available|\bNVLS comm 0x|nvlsSupport 1|NVLS enabled", re.I)
_HCA_ARG = re.compile(r"NCCL_IB_HCA[= ]['\"]?\^?=?([\w.:,-]+)")
SNIFF_LINES = 400  # lines of the top a detector reads before it searches the whole text
_BLOCK_SIZES = (4, 8, 16)  # values per row: one block of 4, two of 4, two of 8 (per-iteration columns)


@dataclass
class NcclTestRow:
    bytes: int
    count: int
    dtype: str
    time_us: float | None
    algbw: float | None
    busbw: float | None
    wrong: int | None
    ip_time_us: float | None = None
    ip_algbw: float | None = None
    ip_busbw: float | None = None
    ip_wrong: int | None = None
    line: str = ""
    redop: str | None = None  # None: the layout has no redop column
    root: int | None = None  # None: the layout has no root column
    delta: bool = False  # the wrong cells were a max delta (before 2.13), not counts


@dataclass
class NcclTests:
    """One run of one `*_perf` binary (its parameters, ranks, rows and summary). `tables` holds
    every run of the capture, this one included (empty when built by hand, e.g. by the sweep)."""

    rows: list[NcclTestRow] = field(default_factory=list)
    ranks: list[dict[str, Any]] = field(default_factory=list)
    avg_busbw: float | None = None
    oob_values: int | None = None
    oob_line: str = ""
    avg_line: str = ""
    header: str = ""
    errors: list[str] = field(default_factory=list)
    command: str = ""  # the command line above the table (a prompt), when pasted
    ib_hcas: list[str] = field(default_factory=list)  # NCCL_IB_HCA devices named on that command line
    program: str = ""  # the binary (all_reduce_perf ...) when the capture names it
    params: dict[str, int] = field(default_factory=dict)  # the `# nThread ...` line's values
    columns: list[str] = field(default_factory=list)  # the value columns of the header (time algbw ...)
    avg_check: str = ""  # OK / FAILED when NCCL_TESTS_MIN_BW was set
    concluded: bool = False  # `# Collective test concluded` printed
    nccl_version: str = ""
    warns: list[str] = field(default_factory=list)  # NCCL WARN lines
    after_rows: list[str] = field(default_factory=list)  # failure / WARN lines after the last row
    stopped_at: int | None = None  # a row whose size was printed but whose numbers never came
    bad_rows: list[str] = field(default_factory=list)  # row-like lines no known layout reads
    notes: list[str] = field(default_factory=list)  # lines the binary prints about its own run
    wrong_is_delta: bool = False  # the wrong column holds a max delta (before 2.13): not a count
    algo: str = ""  # NCCL_ALGO as the capture shows it
    nvls: bool | None = None  # NVLS in use (True), off (False), not shown (None)
    tables: list[NcclTests] = field(default_factory=list)

    @property
    def recognised(self) -> bool:
        return bool(self.rows or self.ranks or self.errors or self.header or self.bad_rows or self.columns)

    @property
    def hosts(self) -> list[str]:
        return list(dict.fromkeys(r["host"] for r in self.ranks))

    @property
    def validated(self) -> bool:
        """False when the run did not check its results (`-c 0`: `#wrong` is N/A)."""
        if self.params.get("validation") == 0:
            return False
        return not self.rows or self.wrong_is_delta or \
            any(r.wrong is not None or r.ip_wrong is not None for r in self.rows)

    @property
    def per_host(self) -> dict[str, int]:
        """Ranks listed per host."""
        out: dict[str, int] = {}
        for r in self.ranks:
            out[r["host"]] = out.get(r["host"], 0) + 1
        return out

    def busbw_cells(self) -> list[float]:
        out: list[float] = []
        for r in self.rows:
            out.extend(v for v in (r.busbw, r.ip_busbw) if v is not None)
        return out

    def bw_ratio(self) -> float | None:
        """busbw / algbw over the cells precise enough to read it (the median)."""
        ratios = [b / a for r in self.rows for a, b in ((r.algbw, r.busbw), (r.ip_algbw, r.ip_busbw))
                  if a is not None and b is not None and a >= RATIO_MIN_ALGBW]
        return median(ratios) if ratios else None

    def ratio_ranks(self) -> int | None:
        """The rank count an all-reduce's busbw/algbw = 2(n-1)/n gives (None: no cell precise
        enough, or a ratio no all-reduce has)."""
        ratio = self.bw_ratio()
        if ratio is None or not 1 - RATIO_TOLERANCE <= ratio < 2.0:
            return None
        return max(2, round(2 / (2 - ratio)))

    def rank_count(self) -> int | None:
        """Ranks in the run: the rank list's (its highest rank + 1 when lines are missing),
        unless the all-reduce ratio says there are more; None when nothing shows."""
        listed = max([len(self.ranks), *(int(r["rank"]) + 1 for r in self.ranks)])
        ratio, by_ratio = self.bw_ratio(), self.ratio_ranks()
        if by_ratio and (not listed or (ratio is not None and by_ratio > listed
                                        and abs(ratio - 2 * (listed - 1) / listed) > RATIO_TOLERANCE)):
            return by_ratio
        return listed or None

    @property
    def complete_listing(self) -> bool:
        """Every rank of the run has its `#  Rank` line."""
        return bool(self.ranks) and len({r["rank"] for r in self.ranks}) == self.rank_count()

    def collective(self) -> str:
        """The collective the table measured: named by the capture, else read from the columns
        ("" when the columns fit no collective or several)."""
        if self.program:
            return _PROGRAM.sub(r"\1", self.program).split("/")[-1]
        return _collective_of_columns(self)


def _collective_of_columns(res: NcclTests) -> str:
    """all_reduce when the columns fit it and nothing else: the size is count x word size, the
    root is -1 or absent, a reduction op is named, and busbw/algbw is 2(n-1)/n (> 1 for n > 2;
    only an all-reduce has a factor above 1)."""
    if not res.rows:
        return ""
    row = res.rows[-1]
    ws = WORD_SIZE.get(row.dtype.lower())
    if ws and row.count * ws != row.bytes:
        return ""  # all_gather, reduce_scatter, alltoall, scatter, gather, hypercube
    if row.root not in (None, -1) or (row.redop is not None and row.redop.lower() in ("", "none")):
        return ""  # rooted (broadcast, reduce) or no reduction (sendrecv of 2.13's layout, ...)
    ratio = res.bw_ratio()
    if ratio is None or ratio == 0:
        return "all_reduce"  # nothing measured precisely enough says otherwise, or one rank (factor 0)
    n = res.rank_count() if res.ranks else None
    if n is not None and n > 2:
        return "all_reduce" if abs(ratio - 2 * (n - 1) / n) <= RATIO_TOLERANCE else ""
    return "all_reduce" if 1 - RATIO_TOLERANCE <= ratio < 2.0 else ""


# ---------------------------------------------------------------------------------------
# values


def _f(tok: str) -> float | None:
    try:
        v = float(tok)
    except ValueError:
        return None
    return v if v == v and v not in (float("inf"), float("-inf")) else None


def _wrong(tok: str, delta: bool) -> int | None:
    """A `#wrong` cell as a count (`%g`: 1e+06 is a count); None for N/A and for the max-delta
    column of versions before 2.13 (`error`, `res`: a float, not a count)."""
    if delta:
        return None
    v = _f(tok)
    if v is None or v < 0 or v != int(v):
        return None
    return int(v)


def _is_num(tok: str) -> bool:
    return bool(_NUM_RE.match(tok))


# ---------------------------------------------------------------------------------------
# the table layout


@dataclass
class _Layout:
    """What the column header says: the value columns, which blocks the row holds, the unit."""

    values: list[str] = field(default_factory=list)
    has_root: bool | None = None  # None: no header, decide per row
    in_place_only: bool = False
    time_scale: float = 1.0  # 1.x prints ms
    delta: bool | None = None  # the wrong column holds a max delta (before 2.13)
    _groups: str = ""

    def expected(self) -> int | None:
        """Numeric cells a complete row has (root included), when the header says."""
        if not self.values or self.has_root is None:
            return None
        return len(self.values) + int(self.has_root)


def _layout_from_header(cols: list[str], groups: str) -> _Layout:
    first = next((i for i, c in enumerate(cols) if c in ("time", "cputime")), len(cols))
    pre, vals = cols[:first], [c for c in cols[first:] if c != "timestamp"]
    wrong_names = {c for c in vals if c in ("#wrong", "error", "res")}
    return _Layout(values=vals, has_root="root" in pre, in_place_only=groups == "in-place",
                   time_scale=1000.0 if pre[:2] == ["bytes", "N"] else 1.0,
                   delta=bool(wrong_names & {"error", "res"}) if wrong_names else None, _groups=groups)


def _block_cells(layout: _Layout, n: int) -> list[tuple[int, int | None, int | None, int | None]] | None:
    """(time, algbw, busbw, wrong) positions of each block in a row of n values: from the
    header's names, else the layouts without one (4: one block; 8: two; 16: two with the
    per-iteration columns). None: n values fit no layout."""
    if layout.values:
        if n != len(layout.values):
            return None
        starts = [i for i, c in enumerate(layout.values) if c in ("time", "cputime")]
        out = []
        for k, s in enumerate(starts):
            names = layout.values[s:starts[k + 1] if k + 1 < len(starts) else n]
            idx = {c: s + i for i, c in enumerate(names)}
            out.append((s, idx.get("algbw"), idx.get("busbw"),
                        next((idx[c] for c in ("#wrong", "error", "res") if c in idx), None)))
        return out or None
    if n not in _BLOCK_SIZES:
        return None
    per = 8 if n == 16 else 4
    return [(i, i + 1, i + 2, i + 3) for i in range(0, n, per)]


_NO_CELLS: tuple[float | None, float | None, float | None, int | None] = (None, None, None, None)


def _make_row(size: int, count: int, dtype: str, redop: str | None, nums: list[str], layout: _Layout,
              line: str) -> NcclTestRow | None:
    """A row from its numeric cells (root first when the layout prints it)."""
    root: int | None = None
    has_root = layout.has_root if layout.has_root is not None else len(nums) % 4 == 1
    if has_root:
        if not nums or not re.fullmatch(r"-?\d+", nums[0]):
            return None
        root, nums = int(nums[0]), nums[1:]
    blocks = _block_cells(layout, len(nums))
    if blocks is None:
        return None
    wrong_toks = [nums[w] for _, _, _, w in blocks if w is not None]
    delta = layout.delta if layout.delta is not None else any("e-" in t for t in wrong_toks)

    def cell(i: int | None) -> float | None:
        return _f(nums[i]) if i is not None else None

    cells = []
    for t, a, b, w in blocks:
        took = cell(t)
        cells.append((took * layout.time_scale if took is not None else None, cell(a), cell(b),
                      _wrong(nums[w], delta) if w is not None else None))
    if layout.in_place_only and len(cells) == 1:
        cells.insert(0, _NO_CELLS)
    oop = cells[0]
    ip = cells[1] if len(cells) > 1 else _NO_CELLS
    return NcclTestRow(bytes=size, count=count, dtype=dtype, time_us=oop[0], algbw=oop[1], busbw=oop[2],
                       wrong=oop[3], ip_time_us=ip[0], ip_algbw=ip[1], ip_busbw=ip[2], ip_wrong=ip[3],
                       line=line, redop=redop, root=root, delta=bool(delta))


@dataclass
class _Pending:
    """A row whose first columns were printed and whose numbers may follow on later lines."""

    size: int
    count: int
    dtype: str
    redop: str | None
    nums: list[str]
    line: str


def _split_cells(rest: str) -> tuple[str | None, list[str], bool]:
    """(redop, numeric cells, clean) of the text after `size count type`: a word first is the
    redop; numbers follow; a time stamp may close the row. `clean` is False when other text
    is left (a row this layout does not read)."""
    toks = rest.split()
    redop: str | None = None
    if toks and not _is_num(toks[0]):
        redop = toks.pop(0)
    nums: list[str] = []
    while toks and _is_num(toks[0]):
        nums.append(toks.pop(0))
    tail = " ".join(toks)
    return redop, nums, not tail or bool(_STAMP.match(tail))


# ---------------------------------------------------------------------------------------
# the reader


class _Reader:
    """Reads a capture line by line (once each) into one NcclTests per run."""

    def __init__(self, command: str) -> None:
        self.tables: list[NcclTests] = []
        self.cur = NcclTests(command=command)
        self.layout = _Layout()
        self.groups = ""
        self.pending: _Pending | None = None
        self.next_program = ""
        # the binaries the command line(s) above the output ran, one per run in order
        self.queue = [m.group(0) for m in _PROGRAM.finditer(command)]
        self._env(command)
        self.cur.program = self.queue.pop(0) if self.queue else ""

    # -- runs -----------------------------------------------------------------------------

    def _started(self) -> bool:
        c = self.cur
        return bool(c.rows or c.avg_line or c.oob_line or c.bad_rows or c.concluded)

    def _new_run(self) -> None:
        """A new run starts (a parameter line or column header after rows)."""
        self._flush()
        self.tables.append(self.cur)
        prev = self.cur
        self.cur = NcclTests(command=prev.command, algo=prev.algo, nvls=prev.nvls, nccl_version=prev.nccl_version)
        self.layout = _Layout()
        self.groups = ""
        if self.next_program:
            self.cur.program, self.next_program = self.next_program, ""
        elif self.queue:
            self.cur.program = self.queue.pop(0)

    def _program(self, text: str) -> None:
        m = _PROGRAM.search(text)
        if not m:
            return
        if self._started() or self.cur.program:
            self.next_program = m.group(0)
        else:
            self.cur.program = m.group(0)

    # -- lines ----------------------------------------------------------------------------

    def feed(self, raw: str) -> None:
        line = raw.strip()
        if not line:
            return
        log = _NCCL_LOG.search(line)
        if log:
            head = _TAG.sub(" ", line[:log.start()])
            if head.strip():
                self._other(head)  # a row (or its numbers) an NCCL line was printed into
            self._log(line[log.start():])
            return
        if line.startswith("#") or re.match(r"^(?:nThread|Out of bounds|Avg bus bandwidth)\b", line):
            self._comment(line)
            return
        self._other(line)

    def _other(self, line: str) -> None:
        if _TEST_FAIL.search(line):
            self.cur.errors.append(line)
            self._after(line)
            return
        body = _TAG.sub(" ", line)
        if _ROW.match(body):
            self._row_text(body, line)
            return
        if self.pending is not None and all(_is_num(t) for t in body.split()):
            self._continue(body)
            return
        if "NCCL WARN" in line:
            self._warn(line)
            return
        self._misc(line)

    def _misc(self, line: str) -> None:
        """Lines around the table: the NCCL version, a command line, the environment."""
        mv = _NCCL_VERSION.search(line)
        if mv:
            self.cur.nccl_version = mv.group(1)
            return
        ms = _STARTS.match(line)
        if ms:  # rccl-tests: Version ...
            if self._started():
                self._new_run()
            self.cur.notes.append(line)
            return
        self._env(line)
        self._program(line)
        if not self.cur.ib_hcas:
            self.cur.ib_hcas = _hcas(line)

    def _env(self, text: str) -> None:
        ma = _ALGO_ENV.search(text)
        if ma:
            self.cur.algo = ma.group(1)
        mn = _NVLS_ENV.search(text)
        if mn:
            self.cur.nvls = mn.group(1) != "0"

    def _log(self, line: str) -> None:
        """An NCCL INFO/WARN line: the algorithm, NVLS, the version; WARN lines kept."""
        self._env(line)
        if _NVLS_OFF.search(line):
            self.cur.nvls = False
        elif _NVLS_ON.search(line) and self.cur.nvls is None:
            self.cur.nvls = True
        mv = _NCCL_VERSION.search(line)
        if mv:
            self.cur.nccl_version = mv.group(1)
        if " NCCL WARN" in line:
            self._warn(line)

    def _warn(self, line: str) -> None:
        self.cur.warns.append(line)
        self._after(line)

    def _after(self, line: str) -> None:
        if self.cur.rows or self.pending is not None:
            self.cur.after_rows.append(line)

    # -- comment lines ----------------------------------------------------------------------

    def _comment(self, line: str) -> None:
        self._flush()
        for handler in (self._params, self._starts, self._rank, self._columns, self._summary):
            if handler(line):
                return
        if line.startswith("# Using devices") and self._started():
            self._new_run()
        elif re.match(r"^#\s*(?:Reducing maxBytes|Blocking Enabled|Parallel Init|Testing \d+ cycle|"
                      r"GPU memory usage|error:|Errors with asterisks)", line):
            self.cur.notes.append(line)

    def _params(self, line: str) -> bool:
        if not _PARAMS.match(line):
            return False
        if self._started() or self.cur.header:
            self._new_run()
        self.cur.header = line
        self.cur.params = _params(line)
        return True

    def _starts(self, line: str) -> bool:
        ms = _STARTS.match(line)
        if ms:
            if self._started():
                self._new_run()
            if ms.group(1):
                self.cur.program = ms.group(1)
            lib = _LIBRARY_CODE.search(ms.group(3) or "")
            if lib:
                self.cur.nccl_version = _version_of_code(int(lib.group(1)))
            return True
        mc = _CONCLUDED.match(line)
        if mc:
            self.cur.concluded = True
            self.cur.program = self.cur.program or mc.group(1)
            return True
        return False

    def _rank(self, line: str) -> bool:
        mr = _RANK_LINE.match(line)
        if not mr:
            return False
        if self._started():
            self._new_run()
        g, pid = mr.group(2), mr.group(3)
        self.cur.ranks.append({"rank": int(mr.group(1)), "group": int(g) if g else 0, "pid": int(pid) if pid else 0,
                               "host": mr.group(4), "device": int(mr.group(5)), "bus": mr.group(6),
                               "model": mr.group(7).rstrip(". ")})
        return True

    def _columns(self, line: str) -> bool:
        mg = _GROUPS.match(re.sub(r"^#\s*", "# ", line))
        if mg and "size" not in line:
            self.groups = "in-place" if "out-of-place" not in line else "both"
            return True
        if not _COLUMNS.match(line):
            return False
        if self.cur.rows:
            self._new_run()
        cols = line.lstrip("#").split()
        self.layout = _layout_from_header(cols, self.groups)
        self.cur.columns = self.layout.values
        return True

    def _summary(self, line: str) -> bool:
        ma = _AVG.match(line)
        if ma:
            self.cur.avg_busbw = _f(ma.group(1))
            self.cur.avg_line = line
            self.cur.avg_check = ma.group(2) or ""
            return True
        mo = _OOB.match(line)
        if mo:
            self.cur.oob_values = int(mo.group(1))
            self.cur.oob_line = line
            return True
        return False

    # -- rows -----------------------------------------------------------------------------

    def _row_text(self, body: str, line: str) -> None:
        """A line that starts a row: `size count type` and what of the rest arrived."""
        self._flush()
        m = _ROW.match(body)
        assert m is not None  # pragma: no mutate (callers matched _ROW already)
        redop, nums, clean = _split_cells(m.group(4))
        if not clean:
            self.cur.bad_rows.append(line)
            return
        self.pending = _Pending(int(m.group(1)), int(m.group(2)), m.group(3), redop, nums, line.strip())
        self._complete_if_full()

    def _continue(self, body: str) -> None:
        assert self.pending is not None  # pragma: no mutate (the caller checked)
        self.pending.nums.extend(body.split())
        self.pending.line += " " + body.strip()
        self._complete_if_full()

    def _complete_if_full(self) -> None:
        p = self.pending
        expected = self.layout.expected()
        full = (len(p.nums) >= expected) if (p is not None and expected is not None) else False
        if full:
            self._flush()

    def _flush(self) -> None:
        """Close the pending row: kept when its cells fit a layout, else the size it stopped at."""
        p, self.pending = self.pending, None
        if p is None:
            return
        row = _make_row(p.size, p.count, p.dtype, p.redop, p.nums, self.layout, p.line)
        if row is not None:
            self.cur.rows.append(row)
            self.cur.wrong_is_delta = self.cur.wrong_is_delta or row.delta
        elif len(p.nums) <= 1:
            self.cur.stopped_at = p.size
        else:
            self.cur.bad_rows.append(p.line)

    def finish(self) -> NcclTests:
        self._flush()
        self.tables.append(self.cur)
        tables = [t for t in self.tables if t.recognised or t.program] or [self.tables[-1]]
        for t in tables:
            t.tables = tables
        return _primary(tables)


def _primary(tables: list[NcclTests]) -> NcclTests:
    """The run nccl.allreduce grades first: the last all-reduce run with rows, else the last
    run with rows, else the last run."""
    with_rows = [t for t in tables if t.rows]
    allreduce = [t for t in with_rows if t.collective() == "all_reduce"]
    return (allreduce or with_rows or tables)[-1]


def _params(line: str) -> dict[str, int]:
    return {_PARAM_KEYS[m.group(1)]: int(m.group(2)) for m in _PARAM.finditer(line)}


def _version_of_code(code: int) -> str:
    """NCCL_VERSION_CODE (major*10000 + minor*100 + patch from 2.9) as x.y.z."""
    return f"{code // 10000}.{code // 100 % 100}.{code % 100}" if code >= 10000 else ""


def _hcas(text: str) -> list[str]:
    m = _HCA_ARG.search(text)
    return [h.split(":")[0] for h in m.group(1).split(",") if h] if m else []


def parse_nccl_tests(text: str, command: str = "") -> NcclTests:
    reader = _Reader(command)
    for raw in text.splitlines():
        reader.feed(raw)
    return reader.finish()


def parse(doc: Doc) -> NcclTests:
    text, command = "\n".join(ln.text for ln in doc.lines), doc.command or ""
    if _STARTS.match("# " + command) or _DETECT.match("# " + command):
        # a first line `# nccl-tests version ...` reads like a root prompt: it is the output's own
        text, command = "# " + command + "\n" + text, ""
    out = parse_nccl_tests(text, command)
    hcas = _hcas(command)
    for t in out.tables:
        t.ib_hcas = hcas or t.ib_hcas
    return out


_DETECT = re.compile(r"^(?:#?\s*Avg bus bandwidth\s*:|#?\s*nThread \d+ nGpus \d+|#\s*Using devices|"
                     r"#\s*Collective test (?:starting|concluded):|#\s*nccl-tests version|rccl-tests: Version|"
                     r"#\s*(?:size|bytes)\s+(?:count|N)\s+type\b.*\b(?:time|cputime)\s+algbw\s+busbw)")


_DETECT_NEEDLES = ("Avg bus bandwidth", "nThread ", "Using devices", "Collective test", "nccl-tests version",
                   "rccl-tests: Version", "algbw")


def detect(doc: Doc) -> bool:
    """nccl-tests output: its own lines at the top, or anywhere (a long NCCL_DEBUG=INFO log
    before the table)."""
    if any(_DETECT.match(ln.text.strip()) for ln in doc.head(SNIFF_LINES)):
        return True
    return any(_DETECT.match(ln.text.strip()) for ln in doc.select(_DETECT_NEEDLES))


FORMATS = [Format("nccl-tests", detect=detect, priority=65, description="nccl-tests / rccl-tests *_perf output")]
PARSERS = [ParserSpec("nccl-tests", parse)]

__all__ = ["AVG_RELATIVE_SLACK", "AVG_ROUNDING_SLACK", "COLLECTIVES", "FORMATS", "PARSERS", "WORD_SIZE", "NcclTestRow", "NcclTests",
           "detect", "parse", "parse_nccl_tests"]
