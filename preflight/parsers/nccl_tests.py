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
The collective a table measured: named by the binary (`all_gather_perf`, the start/concluded
lines, a command line such as `-t all_gather`), else read from the columns: every version prints
the size column as max(send, recv) bytes and the count as the per-rank count (src/common.cu
TimeTest(), src/<coll>.cu *GetCollByteCount()), so size = count x word size for all_reduce,
broadcast, reduce and sendrecv and count x word size x nranks for all_gather, reduce_scatter,
alltoall(v), scatter, gather and hypercube; rooted collectives print their root, reductions their
op, the others `none` (hypercube nothing); busbw/algbw is each collective's factor.
NCCL INFO/WARN lines and launcher messages may be interleaved anywhere, even inside a row
(the row's first columns are printed before the collective runs): such a row is joined back
from its pieces. A row a launcher's `[0]` tags cut is rejoined too. Several runs in one
capture are kept apart (a new parameter line or column header starts a new table).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from preflight import lazyre
from preflight.framing import DETECT_ENDS, Doc, Line
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
# How each collective prints its row (src/<coll>.cu *GetCollByteCount(), *RunTest(), *GetBw()):
# whether the size is count x word size x nranks ("total"), whether a root is printed, what the
# redop column holds ("op": the reduction, "none", "": nothing), and the busbw/algbw factors of
# its versions (all_gather and reduce_scatter printed busbw = algbw before 2.7, ec1b5e2).
COLUMNS_OF: dict[str, tuple[bool, bool, str, tuple[str, ...]]] = {
    "all_reduce": (False, False, "op", ("2(n-1)/n",)),
    "broadcast": (False, True, "none", ("1",)),
    "reduce": (False, True, "op", ("1",)),
    "sendrecv": (False, False, "op", ("1",)),
    "all_gather": (True, False, "none", ("(n-1)/n", "1")),
    "reduce_scatter": (True, False, "op", ("(n-1)/n", "1")),
    "alltoall": (True, False, "none", ("(n-1)/n",)),
    "alltoallv": (True, False, "none", ("(n-1)/n",)),
    "scatter": (True, True, "none", ("(n-1)/n",)),
    "gather": (True, True, "none", ("(n-1)/n",)),
    "hypercube": (True, False, "", ("1",)),
}
# busbw of these is normalised to the hardware's bandwidth like an all-reduce's (nccl-tests
# doc/PERFORMANCE.md, "Bus bandwidth"): the all-reduce tables apply to them
RING = ("all_reduce", "all_gather", "reduce_scatter")
_FACTORS: dict[str, Callable[[int], float]] = {"2(n-1)/n": lambda n: 2 * (n - 1) / n, "(n-1)/n": lambda n: (n - 1) / n,
                                               "1": lambda n: 1.0}
# busbw / algbw of an all-reduce is 2(n-1)/n (src/all_reduce.cu AllReduceGetBw); the ratio is
# read from cells with at least this algbw (two printed decimals: under 0.5% rounding)
RATIO_MIN_ALGBW = 1.0
RATIO_TOLERANCE = 0.02  # two printed decimals on cells of algbw >= 1 keep busbw/algbw within 1%

_NUM_RE = lazyre.compile(r"^(?:[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|N/A|-?nan|-?inf)$", re.I)
_PROGRAM = lazyre.compile(r"\b(" + "|".join(COLLECTIVES) + r")_perf(?:_mpi)?\b")
_PARAMS = lazyre.compile(r"^#?\s*nThread\s+\d+\s+nGpus\s+\d+")
_PARAM = lazyre.compile(r"(nThread|nGpus|minBytes|maxBytes|step:|warmup iters:|agg iters:|(?<![a-z] )iters:|"
                    r"validation:|graph:|unalign:)\s*(\d+)")
_PARAM_KEYS = {"nThread": "nthread", "nGpus": "ngpus", "minBytes": "min_bytes", "maxBytes": "max_bytes",
               "step:": "step", "warmup iters:": "warmup_iters", "agg iters:": "agg_iters", "iters:": "iters",
               "validation:": "validation", "graph:": "graph", "unalign:": "unalign"}
_RANK_LINE = lazyre.compile(r"^#\s*Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?(?:Pid\s+(\d+)\s+)?on\s+(\S+)\s+device\s+(\d+)"
                        r"\s+\[([^\]]*)\]\s*(.*?)\s*$")
_COLUMNS = lazyre.compile(r"^#\s*(size|bytes)\s+(count|N)\s+type\b")
_GROUPS = lazyre.compile(r"^#\s*(out-of-place|in-place)\b.*$")
_AVG = lazyre.compile(r"^#?\s*Avg bus bandwidth\s*:\s*(\S+)\s*(OK|FAILED)?")
_OOB = lazyre.compile(r"^#?\s*Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)?")
_STARTS = lazyre.compile(r"^#\s*(?:Collective test starting:\s*(\S+)|nccl-tests version\s+(\S+)(.*))|"
                     r"^rccl-tests:\s*Version\s+(\S+)")
_CONCLUDED = lazyre.compile(r"^#\s*Collective test concluded:\s*(\S+)")
_TEST_FAIL = lazyre.compile(r"Test (?:NCCL|CUDA|HIP) failure|Test failure\b|Test timeout\b|Invalid number of GPUs|"
                        r"\b(?:NCCL|Cuda) failure [\w./-]+:\d+|"
                        r"number of requested GPUs .* greater than|\bunhandled (?:system|cuda) error\b", re.I)
# the binaries' own messages that end the run before or instead of a table (src/common.cu run() and
# option parsing, src/all_reduce.cu, src/alltoall.cu, src/alltoallv.cu; each returns an error code)
_USAGE_FAIL = lazyre.compile(r"^(?:Incompatible NCCL versions\. nccl-tests was compiled with|"
                         r"Device implementation \d+ is not supported by this test|"
                         r"DeviceImplementation \d+ (?:and \d+ )?requires|"
                         r"This test requires \w+ support, but|"
                         r"NCCL [\d.]+ or later is needed for \w+|"
                         r"(?:Invalid|Unable to \w+) alltoallv traffic matrix|"
                         r"-b and -e options must be set to the same value|"
                         r"invalid sizes? (?:specified )?for '|"
                         r"invalid option\b|"
                         r"Option -\w \([^)]*\) requires NCCL|"
                         r"device implementation \(-D > 0\) requires|"
                         r"device_cta_count \(-V\) must be)")
# the binaries' own notes on options they ignore or replace: the run goes on (src/common.cu option
# parsing, src/common.h getTestDatatype/getTestOp, src/util.cu writeDeviceReport())
_OPTION_NOTE = lazyre.compile(r"^(?:.*\. (?:Ignoring|Disabling)\.?$|invalid (?:type|op) \S+, defaulting to |"
                          r"Please check the number of processes and GPUs per process|USAGE: )")
# error-level wording on a line no rule of this parser reads
_ERROR_WORDS = lazyre.compile(r"\b(?:error|errors|fail|failed|failure|invalid|unable|incompatible|not supported|"
                          r"abort(?:ed|ing)?|corrupt(?:ed|ion)?|cannot|timed out)\b", re.I)
# lines of other producers in an nccl-tests capture: Open MPI (`[host:pid] ...`, its help blocks between
# dashed lines), UCX, Slurm, ssh, a shell; their own checks read them
_FOREIGN = lazyre.compile(r"^(?:\[[\w.-]+:\d+\]|\[\d+\.\d+\]|\[[\w.-]+:\d+:\d+:\d+\]|\S*UCX\b|srun:|slurmstepd|sbatch:|"
                      r"salloc:|ssh:|Warning: Permanently added|bash:|sh:|\+ |mpirun|prterun|orterun|mpiexec|"
                      r"Primary job|Child job|Traceback|  File )", re.I)
_HELP_RULE = lazyre.compile(r"^-{20,}$")  # Open MPI's help blocks begin and end with a dashed line
# an NCCL log record (`host:pid:tid [dev] NCCL INFO ...`), also where a row's numbers run into it
_NCCL_LOG = lazyre.compile(r"(?<![A-Za-z_.-])([A-Za-z][\w.-]*):(\d+):(\d+) \[(\d+)\] NCCL (INFO|WARN|TRACE|ABORT)\b")
_NCCL_VERSION = lazyre.compile(r"\bNCCL version (\d+\.\d+\.\d+)")
_LIBRARY_CODE = lazyre.compile(r"nccl-library=(\d+)")
_TAG = lazyre.compile(r"\[\d+(?:,\d+)?\](?:<std(?:out|err)>:)?")
_ROW = lazyre.compile(r"^\s*(\d+)\s+(\d+)\s+([A-Za-z]\w*)(?=\s|$)(.*)$")
_STAMP = lazyre.compile(r"^\d{4}-\d\d-\d\d(?:\s+\d\d:\d\d:\d\d)?$")
_ALGO_ENV = lazyre.compile(r"NCCL_ALGO(?:\s+set by environment to\s+|\s*=\s*|\s+)['\"]?([\w^,;:]+)", re.I)
_NVLS_ENV = lazyre.compile(r"NCCL_NVLS_ENABLE(?:\s+set by environment to\s+|\s*=\s*|\s+)['\"]?(\d)")
_NVLS_OFF = lazyre.compile(r"NVLS multicast support is not available|NVLS disabled", re.I)
_NVLS_ON = lazyre.compile(r"NVLS multicast support is available|\bNVLS comm 0x|nvlsSupport 1|NVLS enabled", re.I)
_HCA_ARG = lazyre.compile(r"NCCL_IB_HCA[= ]['\"]?\^?=?([\w.:,-]+)")
# a wrapper's command line naming the collective (a test script's `-t all_gather`)
_NAMED = lazyre.compile(r"(?<![\w-])(" + "|".join(COLLECTIVES) + r")(?![\w-])")
# the binary's own options: GPUs and threads per process (src/common.cu: -g/--ngpus, -t/--nthreads)
_GPUS_OPT = lazyre.compile(r"(?:^|\s)(?:-g\s*|--ngpus[=\s]\s*)(\d+)\b")
_THREADS_OPT = lazyre.compile(r"(?:^|\s)(?:-t\s*|--nthreads[=\s]\s*)(\d+)\b")
# a launcher: the binary runs as several processes (one per rank or per node)
_LAUNCHER = lazyre.compile(r"\b(?:mpirun|mpiexec|orterun|prterun|srun|torchrun|jsrun|aprun|flux\s+run|horovodrun)\b|"
                       r"\s-(?:np|n|N)\s+\d")
# the process died (a signal, an abort) rather than reporting a failure of its own
_CRASH = lazyre.compile(r"Segmentation fault|core dumped|Bus error|Floating point exception|Illegal instruction|"
                    r"exited on signal \d+|killed by signal|terminate called after|Process received signal|"
                    r"\bSIG(?:SEGV|ABRT|BUS|FPE|ILL)\b", re.I)
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
    redop: str | None = None  # None: the layout has no redop column (or none shows); "": an empty one
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
    edits: list[str] = field(default_factory=list)  # a paster's own `#` note among the rows (`# Truncated ...`)
    unread: list[str] = field(default_factory=list)  # error-level lines no rule of this parser reads
    wrong_is_delta: bool = False  # the wrong column holds a max delta (before 2.13): not a count
    algo: str = ""  # NCCL_ALGO as the capture shows it
    nvls: bool | None = None  # NVLS in use (True), off (False), not shown (None)
    named: str = ""  # the collective a wrapper's command line names (`run_nccl_tests.sh -t all_gather`)
    cmd_ranks: int | None = None  # GPUs x threads of the one process a launcher-free command line runs
    crashes: list[str] = field(default_factory=list)  # the process died: a signal, an abort
    backend: str = ""  # the torch.distributed backend of preflight's own sweep ("" for an nccl-tests capture)
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

    def listed(self) -> int:
        """Ranks the rank list shows: its highest rank + 1 (lines may be missing), 0 when none."""
        return max([len(self.ranks), *(int(r["rank"]) + 1 for r in self.ranks)])

    def rank_count(self) -> int | None:
        """Ranks in the run: the rank list's, unless the table says there are more (the size
        column of a total-size collective, an all-reduce's busbw/algbw), else the launcher-free
        command line's GPUs; None when nothing shows."""
        listed = self.listed()
        coll = self.collective()
        if coll in COLUMNS_OF and COLUMNS_OF[coll][0]:
            k = self.size_factor()
            if k and k > listed:
                return k
        elif coll == "all_reduce":
            ratio, by_ratio = self.bw_ratio(), self.ratio_ranks()
            if by_ratio and (not listed or (ratio is not None and by_ratio > listed
                                            and abs(ratio - 2 * (listed - 1) / listed) > RATIO_TOLERANCE)):
                return by_ratio
        return listed or self.cmd_ranks or None

    @property
    def complete_listing(self) -> bool:
        """Every rank of the run has its `#  Rank` line."""
        return bool(self.ranks) and len({r["rank"] for r in self.ranks}) == self.rank_count()

    def size_factor(self) -> int | None:
        """size / (count x word size) of the largest row whose type and count say it: 1 when the
        size is the count's bytes, n when it is the total over n ranks; None when no row says
        or the sizes fit no collective."""
        rows = [r for r in self.rows if r.count and WORD_SIZE.get(r.dtype.lower())]
        if not rows:
            return None
        row = max(rows, key=lambda r: r.bytes)
        k, rest = divmod(row.bytes, row.count * WORD_SIZE[row.dtype.lower()])
        return k if k and not rest else None

    def candidates(self) -> tuple[str, ...]:
        """The collectives whose printed layout the table fits (COLUMNS_OF): the size relation,
        the root and redop columns, the busbw/algbw factor."""
        if not self.rows:
            return ()
        row, k, listed = self.rows[-1], self.size_factor(), self.listed()
        fits = [c for c, (_, rooted, op, _) in COLUMNS_OF.items() if _fits_columns(row, rooted, op)]
        if k == 1:
            fits = [c for c in fits if not COLUMNS_OF[c][0]] or \
                [c for c in fits if listed <= 1]  # a total-size collective on one rank
        elif k is not None:
            fits = [c for c in fits if COLUMNS_OF[c][0] and k >= listed]
        ratio = self.bw_ratio()
        if ratio:
            fits = [c for c in fits if _ratio_fits(c, ratio, listed, k)]
        return tuple(fits)

    def collective(self) -> str:
        """The collective the table measured: named by the binary, else the one the columns fit
        (the one a command line names, or all_reduce, when they fit several); "" when the
        columns fit no collective or several none of which is named."""
        if self.program:
            return _PROGRAM.sub(r"\1", self.program).split("/")[-1]
        fits = self.candidates()
        if len(fits) == 1:
            return fits[0]
        for name in (self.named, "all_reduce"):
            if name in fits:
                return name
        return ""


def _fits_columns(row: NcclTestRow, rooted: bool, op: str) -> bool:
    """The row's root and redop cells as a collective prints them (a layout without the column
    fits any)."""
    if row.root is not None and (row.root != -1) != rooted:
        return False
    if row.redop is None:  # no redop column (1.x), or no header to say
        return True
    printed = row.redop.lower()
    return op == (printed if printed in ("", "none") else "op")


def _ratio_fits(coll: str, ratio: float, listed: int, k: int | None) -> bool:
    """busbw/algbw is one of the collective's factors for the ranks the table shows (an
    all-reduce may have more ranks than listed: 2(n-1)/n gives them)."""
    total = COLUMNS_OF[coll][0]
    n = k if total and k and k > 1 else listed if listed > 1 else None
    for name in COLUMNS_OF[coll][3]:
        if name == "2(n-1)/n":
            if 1 - RATIO_TOLERANCE <= ratio < 2.0 and (
                    n is None or abs(ratio - _FACTORS[name](n)) <= RATIO_TOLERANCE or round(2 / (2 - ratio)) > n):
                return True
        elif n is None and name == "(n-1)/n":
            if 0.5 - RATIO_TOLERANCE <= ratio < 1.0:
                return True
        elif abs(ratio - _FACTORS[name](n or 1)) <= RATIO_TOLERANCE:
            return True
    return False


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
    has_op: bool = False  # the header names a redop / op column (an empty cell there is hypercube's "")
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
    return _Layout(values=vals, has_root="root" in pre, has_op=bool({"redop", "op"} & set(pre)),
                   in_place_only=groups == "in-place",
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
    if redop is None and layout.has_op:
        redop = ""  # the header's op column, printed empty (hypercube)
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

    def __init__(self, command: str, launched: bool = False) -> None:
        self.tables: list[NcclTests] = []
        self.cur = NcclTests(command=command)
        self.layout = _Layout()
        self.groups = ""
        self.pending: _Pending | None = None
        self.launched = launched  # a launcher ran the output's processes (seen so far)
        self.in_help = False  # inside an Open MPI help block (between dashed lines)
        self.next_program: tuple[str, int | None] | None = None
        # the binaries the command line(s) above the output ran, one per run in order
        found = list(_PROGRAM.finditer(command))
        self.queue = [self._launch(command, m, found[i + 1].start() if i + 1 < len(found) else len(command))
                      for i, m in enumerate(found)]
        self._env(command)
        if self.queue:
            self.cur.program, self.cur.cmd_ranks = self.queue.pop(0)

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
            (self.cur.program, self.cur.cmd_ranks), self.next_program = self.next_program, None
        elif self.queue:
            self.cur.program, self.cur.cmd_ranks = self.queue.pop(0)

    def _launch(self, text: str, m: re.Match[str], end: int) -> tuple[str, int | None]:
        """The binary a command line runs (`m`), with its ranks when it runs as one process (no
        launcher before it, on this line or an earlier one): its -g GPUs x -t threads."""
        self.launched = self.launched or bool(_LAUNCHER.search(text[:m.start()]))
        opts = text[m.end():end]
        g, t = _GPUS_OPT.search(opts), _THREADS_OPT.search(opts)
        if self.launched or g is None:
            return m.group(0), None
        return m.group(0), int(g.group(1)) * (int(t.group(1)) if t else 1)

    def _program(self, text: str) -> None:
        m = _PROGRAM.search(text)
        if not m:
            self.launched = self.launched or bool(_LAUNCHER.search(text))
            named = _NAMED.search(text)
            if named and not self.cur.rows and not self.cur.named:
                self.cur.named = named.group(1)
            return
        launch = self._launch(text, m, len(text))
        if self._started() or self.cur.program:
            self.next_program = launch
        else:
            self.cur.program, self.cur.cmd_ranks = launch

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
        if _TEST_FAIL.search(line) or _USAGE_FAIL.match(_TAG.sub(" ", line).strip()):
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
        if _CRASH.search(line):
            self.cur.crashes.append(line)
            self._after(line)
            return
        self._unread(line)
        self._env(line)
        self._program(line)
        if not self.cur.ib_hcas:
            self.cur.ib_hcas = _hcas(line)

    def _unread(self, line: str) -> None:
        """A line at error level that no rule reads (kept, never dropped); the binaries' own option
        notes are notes; other producers' lines and Open MPI's help blocks are left to their checks."""
        body = _TAG.sub(" ", line).strip()
        if _HELP_RULE.match(body):
            self.in_help = not self.in_help
            return
        if _OPTION_NOTE.match(body):
            self.cur.notes.append(line)
        elif not self.in_help and _ERROR_WORDS.search(body) and not _FOREIGN.match(body) \
                and not _PROGRAM.search(body):
            self.cur.unread.append(line)

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
        elif self.cur.columns and not (self.cur.avg_line or self.cur.oob_line) and re.search(r"[A-Za-z]{3}", line) \
                and not re.match(r"^#\s*\(", line):  # the header's units line: `#  (B)  (elements) ...`
            self.cur.edits.append(line)  # the binaries print no comment between the header and the summary

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
        return primary(tables)


def primary(tables: list[NcclTests]) -> NcclTests:
    """The run nccl.allreduce grades: the last all-reduce run with rows, else the last run of
    a collective the all-reduce tables apply to (RING), else the last run with rows, else the
    last run."""
    with_rows = [t for t in tables if t.rows]
    allreduce = [t for t in with_rows if t.collective() == "all_reduce"]
    ring = [t for t in with_rows if t.collective() in RING]
    return (allreduce or ring or with_rows or tables)[-1]


def _params(line: str) -> dict[str, int]:
    return {_PARAM_KEYS[m.group(1)]: int(m.group(2)) for m in _PARAM.finditer(line)}


def _version_of_code(code: int) -> str:
    """NCCL_VERSION_CODE (major*10000 + minor*100 + patch from 2.9) as x.y.z."""
    return f"{code // 10000}.{code // 100 % 100}.{code % 100}" if code >= 10000 else ""


def _hcas(text: str) -> list[str]:
    m = _HCA_ARG.search(text)
    return [h.split(":")[0] for h in m.group(1).split(",") if h] if m else []


def parse_nccl_tests(text: str, command: str = "", launched: bool = False) -> NcclTests:
    """The runs of a capture (the primary one, see _primary); `launched`: a launcher's tags
    framed the lines (several processes)."""
    reader = _Reader(command, launched)
    for raw in text.splitlines():
        reader.feed(raw)
    return reader.finish()


def parse(doc: Doc) -> NcclTests:
    text, command = "\n".join(ln.text for ln in doc.lines), doc.command or ""
    if _STARTS.match("# " + command) or _DETECT.match("# " + command):
        # a first line `# nccl-tests version ...` reads like a root prompt: it is the output's own
        text, command = "# " + command + "\n" + text, ""
    out = parse_nccl_tests(text, command, launched=any(ln.rank is not None for ln in doc.lines))
    hcas = _hcas(command)
    for t in out.tables:
        t.ib_hcas = hcas or t.ib_hcas
    return out


_DETECT = lazyre.compile(r"^(?:#?\s*Avg bus bandwidth\s*:|#?\s*nThread \d+ nGpus \d+|#\s*Using devices|#\s*\(B\)\s+\(elements\)|"
                     r"#\s*Collective test (?:starting|concluded):|#\s*nccl-tests version|rccl-tests: Version|"
                     r"#\s*(?:size|bytes)\s+(?:count|N)\s+type\b.*\b(?:time|cputime)\s+algbw\s+busbw)")


_DETECT_NEEDLES = ("Avg bus bandwidth", "nThread ", "Using devices", "Collective test", "nccl-tests version",
                   "rccl-tests: Version", "algbw", "(elements)")
# the binaries' own failure messages (src/common.h CUDACHECK/NCCLCHECK/TESTCHECK, 1.x's, rccl-tests'
# HIPCHECK; src/common.cu testStreamSynchronize(), src/util.cu writeDeviceReport())
_FAIL_LINE = lazyre.compile(r"\b(?:Test (?:NCCL|CUDA|HIP)|NCCL|Cuda) failure [\w./-]+\.(?:cu|cc|cpp|h):\d+|"
                        r"\bTest failure [\w./-]+\.(?:cu|cc|cpp|h):\d+|\bTest timeout \(\d+s\) [\w./-]+:\d+|"
                        r"Invalid number of GPUs: \d+ requested")
_FAIL_NEEDLES = ("failure ", "Test timeout", "Invalid number of GPUs")
_ROW_NEEDLES = tuple(f" {t} " for t in WORD_SIZE)
MIN_BARE_ROWS = 2  # rows without any header that make a capture nccl-tests output


def _bare_row(text: str) -> bool:
    """A result row of a known layout whose size fits its count and type (count x word size,
    times the ranks for the total-size collectives)."""
    m = _ROW.match(text)
    ws = WORD_SIZE.get(m.group(3).lower()) if m else None
    if m is None or ws is None:
        return False
    redop, nums, clean = _split_cells(m.group(4))
    size, count = int(m.group(1)), int(m.group(2))
    fits = size % (count * ws) == 0 if count else size == 0
    return clean and fits and _make_row(size, count, m.group(3), redop, nums, _Layout(), text) is not None


def _own_lines(lines: list[Line]) -> bool:
    """A failure line of the binaries, or result rows without a header."""
    rows = 0
    for ln in lines:
        text = ln.text.strip()
        if _FAIL_LINE.search(text):
            return True
        rows += _bare_row(text)
        if rows >= MIN_BARE_ROWS:
            return True
    return False


def detect(doc: Doc) -> bool:
    """nccl-tests output: its own lines at the top, or anywhere (a long NCCL_DEBUG=INFO log
    before the table); a failure line of the binaries; result rows pasted without a header. In a
    text larger than twice DETECT_ENDS only its first and last DETECT_ENDS characters are searched
    (the binary's header and its summary are there; a table is never buried in megabytes of
    another tool's output)."""
    head = doc.head(SNIFF_LINES)
    if any(_DETECT.match(ln.text.strip()) for ln in head) or _own_lines(head):
        return True
    if any(_DETECT.match(doc.peel_hit(h).text.strip()) for h in doc.scan(_DETECT_NEEDLES, ends=DETECT_ENDS)):
        return True
    return _own_lines([doc.peel_hit(h) for h in doc.scan(_FAIL_NEEDLES + _ROW_NEEDLES, ends=DETECT_ENDS)])


# What `detect` cannot say yes without, lower-cased: its header and summary words, the binaries'
# failure words, or a count followed by a data type (a result row).
_COULD_FAIL = ("NCCL failure ", "CUDA failure ", "HIP failure ", "Cuda failure ", "Test failure ", "Test timeout",
               "Invalid number of GPUs")  # what `_FAIL_LINE` holds (its "failure " is always after one of these)
_COULD_WORDS = tuple(dict.fromkeys(w.lower() for w in (*_DETECT_NEEDLES, *_COULD_FAIL)))
_COULD_ROW = lazyre.compile(r"\d[^\S\n]+(?:" + "|".join(map(re.escape, WORD_SIZE)) + r")(?=\s|$)", re.M)


def could(doc: Doc) -> bool:
    """A cheap necessary condition of `detect`: its words in the peeled head (letter case
    aside), or the needles its scans look for where they look (the raw text, or its two ends)."""
    head = doc.head_folded(SNIFF_LINES)
    if any(w in head for w in _COULD_WORDS):
        return True
    if any(t in head for t in _ROW_NEEDLES) and _COULD_ROW.search(head):  # a type word alone first: no regex
        return True
    if doc.count() <= SNIFF_LINES:
        return False  # the head is the whole text: its lines were searched above (framing only takes away)
    text = doc.text
    return any(text.find(nd, a, b) >= 0 for a, b in doc._scan_ranges(DETECT_ENDS)  # the ranges detect's scans read
               for nd in (*_DETECT_NEEDLES, *_COULD_FAIL, *_ROW_NEEDLES))


FORMATS = [Format("nccl-tests", detect=detect, could=could, priority=65, description="nccl-tests / rccl-tests *_perf output")]
PARSERS = [ParserSpec("nccl-tests", parse)]

__all__ = ["AVG_RELATIVE_SLACK", "AVG_ROUNDING_SLACK", "COLLECTIVES", "COLUMNS_OF", "FORMATS", "PARSERS", "RING",
           "WORD_SIZE", "NcclTestRow", "NcclTests", "detect", "parse", "parse_nccl_tests", "primary"]
