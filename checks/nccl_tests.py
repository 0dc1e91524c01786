"""nccl.allreduce: what an all-reduce measured, from nccl-tests / rccl-tests output or the
collective sweep's rows (the facts of `preflight.parsers.nccl_tests`).

Correctness first (wrong results, out-of-bounds values, a failed or aborted run), then the
bandwidth against the table that applies to what the capture shows: the profile's
[nccl.allreduce.single_node] / [nccl.allreduce.multi_node] tables (the sweep reads the same), or
the [[nccl.allreduce.boards]] entry for the GPUs the rank lines name. GPUs no table is for
are graded for correctness only. all_gather and reduce_scatter tables are graded on the same
tables (their busbw is normalised to the hardware's bandwidth, nccl-tests doc/PERFORMANCE.md);
the other collectives (alltoall, sendrecv, broadcast, ...) have no table, so their bandwidth is
noted, not graded. On any board, one host whose GPUs move less than PCIe peer-to-peer gives is
slow, and ranks that share one GPU measure no interconnect.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from preflight import lazyre
from preflight.engine import register_profile_hint
from preflight.findings import Findings
from preflight.model import Result
from preflight.parsers.nccl_tests import (
    AVG_RELATIVE_SLACK,
    AVG_ROUNDING_SLACK,
    RING,
    NcclTestRow,
    NcclTests,
    primary,
)
from preflight.profile import Profile
from preflight.registry import Check, CheckContext, register

CHECK = "nccl.allreduce"
SHOW = 5  # pragma: no mutate (how many example lines a finding quotes: display only)
SHOW_CMD = 300  # pragma: no mutate (characters of a command line quoted as evidence: display only)
MIN_SWEEP = 3  # rows a sweep needs before one of them can be told slower than its neighbours
MIN_GPUS = 2  # GPUs on one host for a peer-to-peer figure to apply
_FULL_BUS = lazyre.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}(?:\.\d)?")


def _fmt_bytes(n: int) -> str:
    for unit, div in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def _num(prof: Profile, key: str) -> float:
    """A profile number; 0 (not graded) when the profile does not set it."""
    v = prof.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0


def _took(r: NcclTestRow) -> float | None:
    """The faster of the row's two measurements (out-of-place, in-place)."""
    ts = [v for v in (r.time_us, r.ip_time_us) if v is not None]
    return min(ts) if ts else None


def _best_bw(r: NcclTestRow) -> float | None:
    bws = [v for v in (r.busbw, r.ip_busbw) if v is not None]
    return max(bws) if bws else None


def allreduce_table(profile: Profile, multi_node: bool | None) -> tuple[str, dict[str, Any]]:
    """The profile table that applies ('single_node' / 'multi_node'); unknown topology takes
    the lower floors of the two."""
    single = profile.section("nccl.allreduce.single_node")
    multi = profile.section("nccl.allreduce.multi_node")
    if multi_node is True:
        return "multi_node", multi
    if multi_node is False:
        return "single_node", single
    merged = dict(single)
    for k in ("peak_busbw_warn", "peak_busbw_fail"):
        vals = [t[k] for t in (single, multi) if isinstance(t.get(k), (int, float))]
        if vals:
            merged[k] = min(vals)
    return "unknown (lower floors of single_node and multi_node)", merged


# ---------------------------------------------------------------------------------------
# what the capture shows: the topology and the table that applies


@dataclass
class Topology:
    """Hosts, GPUs per host and whether the run spans nodes, as far as the capture shows."""

    multi: bool | None  # None: not shown
    per_host: int | None  # GPUs on each host (None: not shown or uneven)
    models: list[str]
    ranks: int | None


def topology(res: NcclTests) -> Topology:
    models = sorted({r["model"] for r in res.ranks if r["model"]})
    n = res.rank_count()
    if res.complete_listing:
        counts = set(res.per_host.values())
        return Topology(len(res.hosts) > 1, counts.pop() if len(counts) == 1 else None, models, n)
    per_proc = res.params.get("ngpus", 0) * res.params.get("nthread", 1)
    if n and per_proc and n == per_proc:  # one process drives every GPU: one node
        return Topology(False, n, models, n)
    if n and n == res.cmd_ranks:  # a launcher-free command line ran one process with n GPUs
        return Topology(False, n, models, n)
    return Topology(None, None, models, n)


@dataclass
class Expectation:
    """The busbw figures a run is graded against, with where they come from."""

    name: str  # single_node, multi_node, or why none applies
    warn: float = 0.0
    fail: float = 0.0
    warn_src: str = ""
    fail_src: str = ""
    per_node: int = 0  # GPUs per node the table is for (0: any)
    latency_max_us: float = 0.0
    latency_src: str = ""
    tcp_max_busbw: float = 0.0
    tcp_src: str = ""
    sizes: list[dict[str, Any]] = field(default_factory=list)
    notes: list[tuple[str, str]] = field(default_factory=list)  # (code, note) why bandwidth is not graded
    board: dict[str, Any] | None = None  # the board whose table lacks the topology's figure

    @property
    def graded(self) -> bool:
        return bool(self.warn or self.fail) and not self.notes


def _fits(name: str, needle: str) -> bool:
    """A board's `match` in a GPU name: a case-insensitive substring not preceded by a letter
    or digit; PCIe and NVL boards never fit."""
    low = name.lower()
    if "pcie" in low or " nvl" in low:
        return False
    return bool(re.search(r"(?<![a-z0-9])" + re.escape(needle.lower()), low))


def board_for(prof: Profile, models: list[str]) -> dict[str, Any] | None:
    """The first [[nccl.allreduce.boards]] entry that every GPU model fits."""
    if not models:
        return None
    for board in prof.get("nccl.allreduce.boards") or []:
        needles = (board.get("match") or []) if isinstance(board, dict) else []
        if needles and all(any(_fits(m, n) for n in needles) for m in models):
            return board  # type: ignore[no-any-return]
    return None


def _profile_fits(prof: Profile, models: list[str]) -> bool:
    """The profile is for these GPUs (or says nothing about the model, or none is shown)."""
    want = str(prof.match.get("gpu_model_contains") or prof.get("gpu.model") or "")
    return not want or not models or all(want.lower() in m.lower() for m in models)


def _profile_expectation(prof: Profile, topo: Topology, nvls: bool) -> Expectation:
    """The profile's own table for the topology (the lower floors of both when not shown; the
    NVLS floors on one node when the capture shows NVLS in use)."""
    tables = ["single_node", "multi_node"] if topo.multi is None else ["multi_node" if topo.multi else "single_node"]
    pre = "nvls_" if nvls and topo.multi is False and prof.get("nccl.allreduce.single_node.nvls_peak_busbw_warn") \
        else ""

    def pick(kind: str) -> tuple[float, str]:
        found = [(float(v), k) for t in tables for k in [f"nccl.allreduce.{t}.{pre}peak_busbw_{kind}"]
                 for v in [prof.get(k)] if isinstance(v, (int, float)) and v]
        if not found:
            return 0.0, ""
        v, k = min(found)
        return v, f"{k} = {v:g} ({prof.source(k)})"

    (warn, warn_src), (fail, fail_src) = pick("warn"), pick("fail")
    name = tables[0] if len(tables) == 1 else "unknown (lower floors of single_node and multi_node)"
    lat_k = "nccl.allreduce.multi_node.base_latency_max_us"
    sizes = prof.get(f"nccl.allreduce.{tables[0]}.sizes") if len(tables) == 1 else None
    return Expectation(name + (" (NVLS)" if pre else ""), warn, fail, warn_src, fail_src,
                       per_node=int(_num(prof, "gpu.count")),
                       latency_max_us=_num(prof, lat_k) if topo.multi else 0.0,
                       latency_src=f"{lat_k} ({prof.source(lat_k)})",
                       tcp_max_busbw=_num(prof, "nccl.allreduce.tcp_fallback_max_busbw"),
                       tcp_src=prof.source("nccl.allreduce.tcp_fallback_max_busbw"),
                       sizes=[e for e in sizes if isinstance(e, dict)] if isinstance(sizes, list) else [])


def _board_expectation(board: dict[str, Any], topo: Topology, nvls: bool) -> Expectation:
    where = f"board {board.get('name', '?')}"
    if topo.multi is None:
        return Expectation("unknown topology", notes=[("nccl.allreduce/gpus-per-node-differ", f"peak not graded: the "
                           f"capture does not show how the ranks sit on hosts ({where})")])
    table = "multi_node" if topo.multi else "single_node"
    pre = f"{table}_nvls_" if nvls and not topo.multi and board.get(f"{table}_nvls_peak_busbw_warn") else f"{table}_"
    warn, fail = board.get(pre + "peak_busbw_warn"), board.get(pre + "peak_busbw_fail")
    src = f"{where}: {board.get('source', '')}"
    exp = Expectation(table + (" (NVLS)" if "nvls" in pre else ""), float(warn or 0), float(fail or 0),
                      f"{pre}peak_busbw_warn = {warn} ({src})", f"{pre}peak_busbw_fail = {fail} ({src})",
                      per_node=int(board.get("gpus_per_node") or 0),
                      latency_max_us=float(board.get(f"{table}_base_latency_max_us") or 0), latency_src=src,
                      tcp_max_busbw=float(board.get("tcp_fallback_max_busbw") or 0), tcp_src=src)
    if not (warn or fail):
        exp.notes.append(("nccl.allreduce/no-table", f"no expected busbw for {table.replace('_', '-')} runs of "
                          f"{board.get('name', '?')}: peak not graded ({where} has no {table} figure)"))
        exp.board = board
    return exp


def _nvls_in_use(res: NcclTests) -> bool:
    """NVLS in use as the capture shows it: NCCL_ALGO naming it (or excluding it with ^), else
    the INFO lines."""
    algo = res.algo.lower()
    if algo and not algo.startswith("^"):
        return "nvls" in algo
    if "nvls" in algo:
        return False
    return res.nvls is True


def expectation(res: NcclTests, prof: Profile, topo: Topology, coll: str = "all_reduce") -> Expectation:
    """The table for the collective, GPUs and topology the capture shows, or why there is none
    (the tables are all-reduce figures, which all_gather and reduce_scatter share; the NVLS
    figures and the per-size times are the all-reduce's own)."""
    if coll not in RING:
        what = coll or " or ".join(res.candidates())
        return Expectation("none", notes=[("nccl.allreduce/collective-not-graded", f"bandwidth not graded: {what} has "
                                          "no busbw table (the tables are for all_reduce, all_gather, reduce_scatter)")])
    cpu = res.backend == "gloo" or bool(topo.models) and not _gpus_shown(res, topo)
    exp = _table_expectation(prof, topo, coll == "all_reduce" and _nvls_in_use(res), cpu)
    if coll != "all_reduce":
        exp.sizes = []
    return exp


def _table_expectation(prof: Profile, topo: Topology, nvls: bool, cpu: bool = False) -> Expectation:
    """The profile's or a board's table for the GPUs and topology, or why there is none (`cpu`:
    the ranks are the sweep's CPU ranks, for which no table is expected)."""
    has_own = any(prof.get(f"nccl.allreduce.{t}.peak_busbw_{k}") for t in ("single_node", "multi_node")
                  for k in ("warn", "fail"))
    if has_own and _profile_fits(prof, topo.models):
        exp = _profile_expectation(prof, topo, nvls)
    else:
        board = board_for(prof, topo.models)
        if board is None and cpu:
            return Expectation("none", notes=[("nccl.allreduce/cpu-ranks", "ranks on CPU tensors (gloo): a host's "
                                              "memory bandwidth is no GPU fabric's, so busbw is not graded; "
                                              "correctness is")])
        if board is None:
            what = ", ".join(topo.models) or "GPUs the capture does not name"
            return Expectation("none", notes=[("nccl.allreduce/no-table", f"no expected busbw for {what} in profile "
                                              f"{prof.name}: bandwidth not graded (correctness only)")])
        exp = _board_expectation(board, topo, nvls)
    if exp.per_node and topo.per_host is not None and topo.per_host != exp.per_node:
        exp.notes.append(("nccl.allreduce/gpus-per-node-differ", f"peak not graded: {topo.per_host} GPU(s) per host, "
                          f"the table is for {exp.per_node}"))
    return exp


# ---------------------------------------------------------------------------------------
# findings


def _integrity_findings(res: NcclTests, computed: float | None, label: str, f: Findings) -> None:
    """Wrong results, out-of-bounds values, a failed run, the run's own bandwidth check, a
    tampered average."""
    wrong = sum((r.wrong or 0) + (r.ip_wrong or 0) for r in res.rows)
    if wrong:
        bad = [r.line for r in res.rows if (r.wrong or 0) or (r.ip_wrong or 0)]
        f.add("nccl.allreduce/wrong-results", f"{label} returned wrong results ({wrong} wrong elements)", bad[:SHOW],
              "a GPU, NVLink or NIC corrupts data: run the test per node to isolate it, check Xid/ECC, "
              "drain the node it follows")
    if res.oob_values:
        f.add("nccl.allreduce/out-of-bounds", f"{res.oob_values} out-of-bounds values", [res.oob_line],
              "data corruption: isolate the node (per-node runs) and check ECC/Xid")
    if res.errors:
        f.add("nccl.allreduce/test-failure", "nccl-tests reported a failure", res.errors[:SHOW],
              "read the failure line: it names the host; an NCCL WARN above it names the rank and device")
    if res.avg_check == "FAILED":
        f.add("nccl.allreduce/min-bw-check-failed", "the run's own bandwidth check failed (NCCL_TESTS_MIN_BW)",
              [res.avg_line], "the average bus bandwidth is under the site's NCCL_TESTS_MIN_BW: see the "
              "bandwidth findings, compare nodes one by one")
    if res.avg_busbw is None or computed is None:
        return
    gap = abs(res.avg_busbw - computed)
    slack = AVG_ROUNDING_SLACK + AVG_RELATIVE_SLACK * computed
    if gap > slack and res.edits:  # pragma: no mutate (> or >=: as below)
        f.add("nccl.allreduce/table-edited", f"the printed Avg bus bandwidth {res.avg_busbw:g} covers rows the paste "
              f"left out ({res.edits[0].lstrip('# ').strip()}): graded on the rows shown", [res.edits[0], res.avg_line])
    elif gap > slack:  # pragma: no mutate (> or >=: the edge of a float tolerance, never met by rounded cells)
        f.add("nccl.allreduce/avg-mismatch", f"printed Avg bus bandwidth {res.avg_busbw:g} disagrees with the table's "
              f"mean {computed:g} (edited or truncated output?)", [res.avg_line],
              "grade the untouched output of all_reduce_perf")


def _ending_findings(res: NcclTests, label: str, f: Findings) -> None:
    """How the run ended: an abort after an NCCL WARN or a signal, a row that never finished, a
    table cut before its summary, results not validated."""
    finished = res.avg_busbw is not None or res.oob_values is not None or res.concluded
    if finished or _aborted(res, label, f):
        pass
    elif res.stopped_at is not None and not res.errors:
        f.add("nccl.allreduce/stopped-mid-row", f"the output ends inside the {_fmt_bytes(res.stopped_at)} row: the "
              "run hung there or the capture was cut", [f"last row started: {_fmt_bytes(res.stopped_at)}"],
              "check whether the job still runs (a hang at one size: py-spy / cuda-gdb the ranks); capture the "
              "whole output")
    else:
        f.add("nccl.allreduce/truncated", "the table stops before its summary")
    if not res.validated:
        f.add("nccl.allreduce/not-validated", "results not validated (-c 0: #wrong is N/A): wrong results would go unseen")


def _aborted(res: NcclTests, label: str, f: Findings) -> bool:
    """The run stopped before its summary after an NCCL WARN or a signal (no failure line of
    its own, which says more)."""
    finished = res.avg_busbw is not None or res.oob_values is not None or res.concluded
    warns = [w for w in res.after_rows if "NCCL WARN" in w or w in res.crashes]
    if finished or not warns or res.errors:
        return False
    f.add("nccl.allreduce/aborted", "the run stopped after " + ("an NCCL WARN" if "NCCL WARN" in warns[0] else
                                                        "its process died") + (
        f" during the {_fmt_bytes(res.stopped_at)} {label}" if res.stopped_at else ""), warns[:SHOW],
        "read the NCCL WARN or signal line: it names the failing rank, host and device; rerun with NCCL_DEBUG=INFO")
    return True


def _tcp_fallback_findings(res: NcclTests, prof: Profile, exp: Expectation, f: Findings) -> None:
    """Large messages at socket speed: NCCL fell back to TCP (a network in the path: not one
    host, whose GPUs talk over PCIe, NVLink or shared memory)."""
    min_bytes = int(_num(prof, "nccl.allreduce.tcp_fallback_min_bytes"))
    max_bw = exp.tcp_max_busbw
    max_t = _num(prof, "nccl.allreduce.tcp_fallback_max_time_us")
    if not min_bytes or not (max_bw or max_t) or topology(res).multi is False:
        return
    slow = []
    for r in res.rows:
        if r.bytes < min_bytes:
            continue
        best = _best_bw(r)
        took = _took(r)
        low_bw = bool(max_bw) and best is not None and best < max_bw
        # time scaled to the reference size: a larger message may take proportionally longer
        slow_t = bool(max_t) and took is not None and took * min_bytes / r.bytes > max_t
        if low_bw or slow_t:
            slow.append(r.line)
    if slow:
        f.add("nccl.allreduce/tcp-fallback", f"TCP-fallback signature: {len(slow)} message size(s) >= "
              f"{_fmt_bytes(min_bytes)} under {max_bw:g} GB/s busbw",
              slow[:SHOW] + [f"tcp_fallback_max_busbw = {max_bw:g} ({exp.tcp_src})"],
              "NCCL is using NET/Socket: rerun with NCCL_DEBUG=INFO and look for 'NET/Socket : Using'; "
              "check ibstat, NCCL_IB_HCA / NCCL_IB_DISABLE and /dev/infiniband in the container")


def _base_latency(res: NcclTests, prof: Profile) -> float | None:
    """The fabric's base latency: the fastest of the latency-bound rows."""
    limit = int(_num(prof, "nccl.allreduce.latency_max_bytes"))
    small = [t for r in res.rows if r.bytes <= limit for t in [_took(r)] if t is not None]
    return min(small) if small else None


def _shared_bus(res: NcclTests) -> str:
    """Hosts whose GPUs share one PCIe bus (a virtual machine's flattened topology: on HGX
    boards each GPU sits on its own bus)."""
    seen: dict[tuple[str, str], int] = {}
    for r in res.ranks:
        m = re.fullmatch(r"([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):[0-9a-fA-F]{2}(?:\.\d)?", str(r.get("bus", "")))
        if m:
            key = (r["host"], f"{m.group(1)}:{m.group(2)}")
            seen[key] = seen.get(key, 0) + 1
    shared = sorted({h for (h, _), n in seen.items() if n > 1})
    if not shared:
        return ""
    return (f"GPUs share one PCIe bus on {', '.join(shared[:SHOW])}: a virtual machine's topology; NCCL cannot pair "
            "GPUs with NICs there without NCCL_TOPO_FILE")


def _known_figures(prof: Profile, topo: Topology, nvls: bool) -> list[tuple[float, str]]:
    """(expected peak busbw, where it comes from) of every table the profile holds for the topology
    the capture shows (both when it does not show it; the NVLS figures only when NVLS is shown in
    use): the profile's own tables and every board's."""
    tables = ["single_node", "multi_node"] if topo.multi is None else ["multi_node" if topo.multi else "single_node"]
    kinds = ["peak_busbw_warn", *(["nvls_peak_busbw_warn"] if nvls else [])]
    out = []
    for t in tables:
        for k in kinds:
            v = prof.get(f"nccl.allreduce.{t}.{k}")
            if isinstance(v, (int, float)) and v:
                out.append((float(v), f"profile {prof.name} nccl.allreduce.{t}.{k}"))
    for board in prof.get("nccl.allreduce.boards") or []:
        for t in tables:
            for k in kinds:
                v = board.get(f"{t}_{k}") if isinstance(board, dict) else None
                if isinstance(v, (int, float)) and v:
                    out.append((float(v), f"board {board.get('name', '?')} {t}_{k}"))
    return out


def _untabled_findings(res: NcclTests, prof: Profile, exp: Expectation, peak: float | None, f: Findings) -> None:
    """No table gives an expected busbw for what the capture shows: said (SKIP), unless a general rule
    concludes: multi-node under what one NIC of the slowest fabric GPU nodes are built with gives
    (WARN), or at least what the best table applicable gives (a multi-node run at its board's own
    single-node figure, any other at every table's figure for the topology shown: PASS)."""
    topo = topology(res)
    slowest = _num(prof, "nccl.allreduce.inter_node_min_busbw")
    plateau = int(_num(prof, "nccl.allreduce.plateau_min_bytes"))
    bound = [bw for r in res.rows if r.bytes >= plateau for bw in [_best_bw(r)] if bw is not None]
    if topo.multi and slowest and bound and max(bound) < slowest:
        row = next(r.line for r in res.rows if r.bytes >= plateau and _best_bw(r) == max(bound))
        f.add("nccl.allreduce/below-slowest-fabric", f"peak busbw {max(bound):g} GB/s across {len(res.hosts)} hosts is "
              f"under what one NIC of the slowest fabric GPU nodes are built with gives ({slowest:g} GB/s)",
              [row, f"nccl.allreduce.inter_node_min_busbw = {slowest:g} "
                    f"({prof.source('nccl.allreduce.inter_node_min_busbw')})"],
              "the inter-node path runs far under one 100 Gb/s NIC: check NCCL_DEBUG=INFO 'NET/IB : Using' or "
              "'NET/Socket' (a TCP fallback), ibstat (ports Active, rate), the NIC count per node and "
              "NCCL_IB_HCA; compare node pairs to find a slow one")
    if exp.board is not None and topo.multi:
        own = exp.board.get("single_node_peak_busbw_warn")
        figures = [(float(own), f"board {exp.board.get('name', '?')} single_node_peak_busbw_warn")] \
            if isinstance(own, (int, float)) and own else []
    else:
        figures = _known_figures(prof, topo, _nvls_in_use(res))
    if peak is not None and figures and peak >= max(figures)[0]:
        best, src = max(figures)
        f.add("nccl.allreduce/above-known-tables", f"no expected busbw for what the capture shows, but peak busbw "
              f"{peak:g} GB/s meets the highest applicable figure preflight holds ({best:g}, {src})")
        return
    shown = f"{_label(res, res.collective())} peak busbw {peak:g} GB/s, " if peak is not None else ""
    for code, note in exp.notes:
        f.add(code, shown + note)


def _peak_gate(res: NcclTests, prof: Profile, exp: Expectation, f: Findings) -> bool:
    """Whether the peak can be graded against the table (else a note says why not)."""
    for code, note in exp.notes:
        if code != "nccl.allreduce/no-table":
            f.add(code, note)
    if any(code == "nccl.allreduce/no-table" for code, _ in exp.notes):
        cells = res.busbw_cells()
        _untabled_findings(res, prof, exp, max(cells) if cells else None, f)
    if not exp.graded:
        return False
    peak_min = int(_num(prof, "nccl.allreduce.peak_min_bytes"))
    max_size = max(r.bytes for r in res.rows)
    if peak_min and max_size < peak_min:
        f.add("nccl.allreduce/short-sweep", f"peak not graded: the sweep stops at {_fmt_bytes(max_size)} "
              f"(< {_fmt_bytes(peak_min)})")
        return False
    lat = _base_latency(res, prof)
    if exp.latency_max_us and lat is not None and lat > exp.latency_max_us:
        f.add("nccl.allreduce/non-rdma-latency", f"peak not graded against the {exp.name} table: the smallest all-reduce "
              f"takes {lat:g} us (> {exp.latency_max_us:g}), a TCP-based fabric the table is not for")
        return False
    return True


def _peak_findings(res: NcclTests, prof: Profile, exp: Expectation, peak: float | None, f: Findings) -> None:
    """The peak bus bandwidth against the table's floors."""
    if peak is None or not _peak_gate(res, prof, exp, f):
        return
    peak_ev = [next(r.line for r in res.rows if peak in (r.busbw, r.ip_busbw))]
    vm = _shared_bus(res)
    if exp.fail and peak < exp.fail:
        f.add("nccl.allreduce/peak-below-floor", f"peak busbw {peak:g} GB/s is under the {exp.name} floor {exp.fail:g}",
              [*peak_ev, exp.fail_src, vm],
              "a rail, HCA or NVLink is down or slow: run per-node and per-pair tests to isolate it "
              "(ibstat, nvidia-smi nvlink -s), then drain that node")
    elif exp.warn and peak < exp.warn:
        f.add("nccl.allreduce/peak-below-expected", f"peak busbw {peak:g} GB/s is below the expected {exp.warn:g} "
              f"({exp.name})", [*peak_ev, exp.warn_src, vm],
              "compare nodes one by one; check NIC/GPU affinity (nvidia-smi topo -m), PCIe "
              "width/speed and the NCCL env (NCCL_IB_HCA, NCCL_ALGO)")


def _ceiling_findings(res: NcclTests, exp: Expectation, f: Findings) -> None:
    """Per-size time ceilings of the table (`<table>.sizes`)."""
    if not exp.graded:
        return
    for entry in exp.sizes:
        if "bytes" not in entry or "max_time_us" not in entry:
            continue
        for r in res.rows:
            took = _took(r)
            if r.bytes == int(entry["bytes"]) and took is not None and took > float(entry["max_time_us"]):
                f.add("nccl.allreduce/size-slow", f"{_fmt_bytes(r.bytes)} all-reduce took {took:g} us (expected <= "
                      f"{float(entry['max_time_us']):g})", [r.line, f"{exp.name}.sizes: {entry.get('source', '')}"],
                      "compare with another node pair; check NVLink/NIC health and NCCL env")


def _sweeps(res: NcclTests) -> list[list[tuple[NcclTestRow, float]]]:
    """(row, time) of each type and op by size (-d all / -o all print one sweep per pair)."""
    groups: dict[tuple[str, str | None], list[tuple[NcclTestRow, float]]] = {}
    for r in res.rows:
        took = _took(r)
        if took is not None:
            groups.setdefault((r.dtype, r.redop), []).append((r, took))
    return [sorted(g, key=lambda rt: rt[0].bytes) for g in groups.values()]


def _spikes(sweep: list[tuple[NcclTestRow, float]], ratio: float, excess: float) -> dict[int, str]:
    """Rows of one sweep far slower than their neighbours: slower than `ratio` x a larger
    message, or grown in time more than `ratio` x as fast as in size."""
    spikes: dict[int, str] = {}
    later = float("inf")
    for i in range(len(sweep) - 1, -1, -1):  # against the fastest larger message
        took = sweep[i][1]
        if took > ratio * later and took - later >= excess:
            spikes[i] = f"{took:g} us, a larger message took {later:g} us"
        later = min(later, took)
    for i in range(1, len(sweep)):  # against the next smaller message, scaled by the size
        (prev, before), (cur, took) = sweep[i - 1], sweep[i]
        if not prev.bytes:
            continue
        grown = before * cur.bytes / prev.bytes
        if took > ratio * grown and took - grown >= excess:
            spikes.setdefault(i, f"{took:g} us after {before:g} us at {_fmt_bytes(prev.bytes)}")
    return spikes


def _spike_findings(res: NcclTests, prof: Profile, f: Findings) -> None:
    """Latency spikes: rows far slower than their neighbours (`nccl.allreduce.spike_ratio`). Not
    on the sweep's gloo backend: its times are the CPUs' scheduling and TCP, not a GPU fabric."""
    if res.backend == "gloo":
        return
    ratio = _num(prof, "nccl.allreduce.spike_ratio")
    excess = _num(prof, "nccl.allreduce.spike_min_excess_us")
    found: list[tuple[NcclTestRow, str]] = []
    for sweep in _sweeps(res):
        if ratio and len(sweep) >= MIN_SWEEP:
            found += [(sweep[i][0], why) for i, why in sorted(_spikes(sweep, ratio, excess).items())]
    if not found:
        return
    sizes = ", ".join(_fmt_bytes(r.bytes) for r, _ in found[:SHOW]) + (" ..." if len(found) > SHOW else "")
    f.add("nccl.allreduce/latency-spike", f"latency spikes at {len(found)} message size(s) ({sizes})",
          [f"{_fmt_bytes(r.bytes)}: {why}" for r, why in found[:SHOW]] + [r.line for r, _ in found[:SHOW]] +
          [f"nccl.allreduce.spike_ratio = {ratio:g} ({prof.source('nccl.allreduce.spike_ratio')})"],
          "an intermittent fabric problem at mid-size messages (adaptive routing, congestion, a flapping link, "
          "PCIe relaxed ordering, ACS): rerun to see whether it moves, test node pairs, check the switch "
          "counters and ibstat error counters")


def _size_findings(res: NcclTests, prof: Profile, f: Findings) -> None:
    """A table too short for a bandwidth verdict; a plateau at one NIC while several are named."""
    sizes = sorted({r.bytes for r in res.rows})
    peak_min = int(_num(prof, "nccl.allreduce.peak_min_bytes"))
    if len(sizes) == 1 and peak_min and sizes[0] < peak_min:
        f.add("nccl.allreduce/single-size", f"a single message size ({_fmt_bytes(sizes[0])}): too small for a bandwidth "
              "verdict", [res.rows[0].line, f"nccl.allreduce.peak_min_bytes = {peak_min} "
                                            f"({prof.source('nccl.allreduce.peak_min_bytes')})"],
              "rerun all_reduce_perf up to 8G (-b 8 -e 8G -f 2) to see the bandwidth plateau")
    if len(res.ib_hcas) < 2 or len(res.hosts) == 1:
        return
    big = [(r, bw) for r in res.rows for bw in [_best_bw(r)]
           if bw is not None and r.bytes >= int(_num(prof, "nccl.allreduce.plateau_min_bytes"))]
    bws = [bw for _, bw in big]
    if len(bws) < 2:
        return
    plateau = max(bws)
    flat = abs(bws[-1] - bws[-2]) <= _num(prof, "nccl.allreduce.plateau_flat_ratio") * plateau
    rate_key = "ib.rate" if prof.get("ib.rate") else "nccl.allreduce.nic_rate_gbps"
    rate = _num(prof, rate_key)
    nic = rate / 8  # Gb/s to GB/s
    if flat and rate and plateau <= _num(prof, "nccl.allreduce.plateau_nic_ratio") * nic:
        f.add("nccl.allreduce/one-nic-plateau", f"busbw plateaus at {plateau:g} GB/s, about one {rate:g} Gb/s NIC's "
              f"worth, while NCCL_IB_HCA names {len(res.ib_hcas)} HCAs ({', '.join(res.ib_hcas)})"
              + ("; the table stops before its summary" if not res.avg_line else ""),
              [*[r.line for r, _ in big[-SHOW:]], f"command: {res.command}"[:SHOW_CMD],
               f"{rate_key} = {rate:g} Gb/s ({prof.source(rate_key)})"],
              "only one rail carries the traffic: check NCCL_DEBUG=INFO 'NET/IB : Using' (all HCAs listed?), one "
              "process per GPU, NCCL_ALGO (Tree on 1 GPU per node uses one channel), NCCL_MIN_NCHANNELS and that "
              "every HCA is Active")


# ---------------------------------------------------------------------------------------
# the grader


def _one_rank(res: NcclTests, topo: Topology, cells: list[float]) -> bool:
    """A run of one rank (an all-reduce's busbw factor 2(n-1)/n is 0): every busbw cell is 0
    while data moved, or the rank list shows one rank."""
    moved = any((r.algbw or 0) > 0 or (r.ip_algbw or 0) > 0 for r in res.rows)
    return topo.ranks == 1 or bool(cells and moved and max(cells) == 0)


def _allreduce_facts(res: NcclTests, topo: Topology) -> dict[str, Any]:
    return {
        "rows": [{"bytes": r.bytes, "time_us": r.time_us, "algbw": r.algbw, "busbw": r.busbw,
                  "ip_time_us": r.ip_time_us, "ip_algbw": r.ip_algbw, "ip_busbw": r.ip_busbw,
                  "wrong": r.wrong, "ip_wrong": r.ip_wrong} for r in res.rows],
        "hosts": res.hosts,
        "ranks": topo.ranks or len(res.ranks),
        "avg_busbw": res.avg_busbw,
        "peak_busbw": None,
        "wrong": sum((r.wrong or 0) + (r.ip_wrong or 0) for r in res.rows),
        "gpu_models": topo.models,
        "collective": res.collective(),
        "program": res.program,
        "nvls": res.nvls,
        "algo": res.algo,
        "nccl_version": res.nccl_version,
    }


def _no_rows(ctx: CheckContext, res: NcclTests) -> Result:
    """No result row: a run that failed or died before its table, a layout this parser does not
    read, or output cut before the table."""
    facts = _allreduce_facts(res, topology(res))
    unread = [ln for t in (res.tables or [res]) for ln in t.unread]
    if unread and not (res.errors or res.warns):
        f = Findings()
        f.unread(CHECK, "nccl-tests", unread)
        f.add("nccl.allreduce/no-rows", "no result row: nothing was measured",
              [res.header or "no `size count type ... busbw` row found"],
              "read the error line: the run stopped on it; capture the whole output of the *_perf binary")
        return f.result(ctx, "", facts)
    if res.errors or res.warns:
        return ctx.finding("nccl.allreduce/test-failure", "nccl-tests failed before its first result row",
                           evidence=(res.errors + res.warns)[:SHOW],
                           remedy="read the failure line and the NCCL WARN above it: they name the host, rank and "
                                  "device", facts=facts)
    if res.bad_rows:
        return ctx.finding("nccl.allreduce/not-recognised", "not recognised: rows `size count type [redop root] time algbw "
                           "busbw #wrong` (out-of-place, in-place) were expected; "
                           f"{len(res.bad_rows)} row(s) have another layout", evidence=res.bad_rows[:SHOW],
                           remedy="grade the untouched output of the *_perf binary; report the layout if it is a "
                                  "newer nccl-tests", facts=facts)
    if res.crashes:
        return ctx.finding("nccl.allreduce/crashed-before-rows", "nccl-tests died before its first result row",
                           evidence=[res.header, *res.crashes[:SHOW]] if res.header else res.crashes[:SHOW],
                           remedy="read the signal and the lines above it (a core dump, dmesg, the launcher's log); "
                                  "rerun with NCCL_DEBUG=INFO", facts=facts)
    return ctx.finding("nccl.allreduce/no-rows", "the table was cut before its first row: nothing was measured",
                       evidence=[res.header or "no `size count type ... busbw` row found", *res.notes[:SHOW]],
                       remedy="capture the whole output of the *_perf binary (it prints one row per size, then "
                              "'# Avg bus bandwidth')", facts=facts)


def _label(res: NcclTests, coll: str) -> str:
    """How a summary names the collective."""
    if coll == "all_reduce":
        return "all-reduce"
    return coll or " or ".join(res.candidates())


def _shared_gpus(res: NcclTests) -> list[str]:
    """Ranks on a GPU another rank already uses: the same host, device and PCI bus id (the
    full domain:bus:device nccl-tests prints from 2.16; older ones print the bus number only)."""
    seen: dict[tuple[str, str, int], int] = {}
    out = []
    for r in res.ranks:
        bus = str(r.get("bus", "")).lower()
        if not _FULL_BUS.fullmatch(bus):
            continue
        key = (str(r["host"]), bus, int(r.get("device", 0)))
        if key in seen:
            out.append(f"ranks {seen[key]} and {r['rank']} run on the same GPU: {r['host']} [{bus}]")
        else:
            seen[key] = int(r["rank"])
    return out


# the model the sweep's ranks name when they run on CPU tensors (preflight/sweep/worker.py, gloo)
CPU_MODEL = "cpu"


def _gpus_shown(res: NcclTests, topo: Topology) -> bool:
    """The ranks are GPUs (the sweep's gloo ranks are CPUs): a GPU model or PCI bus id on the
    rank lines, or the binary's -g on its command line."""
    buses = any(_FULL_BUS.fullmatch(str(r.get("bus", "")).lower()) for r in res.ranks)
    return buses or any(m.lower() != CPU_MODEL for m in topo.models) or bool(res.cmd_ranks)


def _pcie_findings(res: NcclTests, prof: Profile, topo: Topology, label: str, peak: float | None,
                   f: Findings) -> None:
    """One host's GPUs under what PCIe peer-to-peer gives, on any board (a board's own table,
    when one graded the peak, says more)."""
    floor = _num(prof, "nccl.allreduce.pcie_min_busbw")
    min_bytes = int(_num(prof, "nccl.allreduce.pcie_min_bytes"))
    if not floor or peak is None or topo.multi is not False or (topo.ranks or 0) < MIN_GPUS:
        return
    graded = {"nccl.allreduce/peak-below-floor", "nccl.allreduce/peak-below-expected"} & set(f.codes())
    if graded or peak >= floor or max(r.bytes for r in res.rows) < min_bytes or not _gpus_shown(res, topo):
        return
    row = next(r.line for r in res.rows if peak in (r.busbw, r.ip_busbw))
    f.add("nccl.allreduce/below-pcie-p2p", f"{label} peak busbw {peak:g} GB/s between the {topo.ranks} GPUs of one host is "
          f"under what PCIe peer-to-peer gives ({floor:g} GB/s)",
          [row, f"nccl.allreduce.pcie_min_busbw = {floor:g} ({prof.source('nccl.allreduce.pcie_min_busbw')})"],
          "the GPUs exchange data through host memory (peer-to-peer off or unsupported: GeForce boards, "
          "NCCL_P2P_DISABLE, ACS/IOMMU redirecting peer traffic) or over a narrow or cross-socket path: check "
          "nvidia-smi topo -m and topo -p2p r, each GPU's PCIe link generation and width (nvidia-smi -q), "
          "NCCL_P2P_DISABLE / NCCL_P2P_LEVEL and ACS")


def _bandwidth_findings(res: NcclTests, prof: Profile, exp: Expectation, coll: str, peak: float | None,
                        f: Findings) -> None:
    """Bandwidth against the table that applies (the all-reduce tables' collectives), then the
    PCIe figure any board's GPUs reach on one host."""
    if coll in RING:
        _tcp_fallback_findings(res, prof, exp, f)
        _peak_findings(res, prof, exp, peak, f)
        _ceiling_findings(res, exp, f)
        _spike_findings(res, prof, f)
        _size_findings(res, prof, f)
    else:
        for code, note in exp.notes:
            f.add(code, note)
    _pcie_findings(res, prof, topology(res), _label(res, coll), peak, f)


def _other_runs(res: NcclTests, f: Findings) -> None:
    """The capture's other runs (a script running several binaries): their failures, wrong
    results and aborts fail the job too."""
    for t in res.tables:
        if t is not res:
            label = _label(t, t.collective()) or "a run"
            _integrity_findings(t, None, label, f)
            _aborted(t, label, f)


def _grade_table(ctx: CheckContext, res: NcclTests) -> Result:
    prof = ctx.profile
    topo = topology(res)
    coll = res.collective()
    label = _label(res, coll)
    facts = _allreduce_facts(res, topo)
    cells = res.busbw_cells()
    peak = max(cells) if cells else None
    computed = round(sum(cells) / len(cells), 3) if cells else None
    facts.update(peak_busbw=peak, avg_busbw_computed=computed)
    if facts["avg_busbw"] is None:
        facts["avg_busbw"] = computed
    exp = expectation(res, prof, topo, coll)
    facts["table"] = exp.name
    f = Findings()
    _integrity_findings(res, computed, label, f)
    _ending_findings(res, label, f)
    _other_runs(res, f)
    f.unread(CHECK, "nccl-tests", [ln for t in (res.tables or [res]) for ln in t.unread])
    shared = _shared_gpus(res)
    if _one_rank(res, topo, cells):
        f.add("nccl.allreduce/one-rank", "a single-rank run: it measures no communication" +
              (" (busbw is 0 by definition)" if cells and max(cells) == 0 else ""),
              [r.line for r in res.rows[-1:]],
              "run one *_perf binary across the GPUs: -g <GPUs> in one process, or an MPI build (make MPI=1) "
              "under mpirun/srun; a binary built without MPI runs one separate copy per launched process")
    elif shared:
        f.add("nccl.allreduce/ranks-share-gpu", f"ranks share a GPU ({len(shared)} rank(s) on a GPU another rank uses): "
              "the run measures no interconnect", shared[:SHOW],
              "give each rank its own GPU (CUDA_VISIBLE_DEVICES per rank, -g with as many GPUs as the host has, "
              "one rank per GPU in the launcher)")
    else:
        _bandwidth_findings(res, prof, exp, coll, peak, f)
    hosts = len(res.hosts) if res.complete_listing else 1 if topo.multi is False else 0
    what = f"{topo.ranks or '?'} ranks on {hosts or '?'} host(s)"
    avg = facts["avg_busbw"]
    proof = [r.line for r in res.rows if peak in (r.busbw, r.ip_busbw)][:1] + ([res.avg_line] if res.avg_line else [])
    summary = f"{label} peak busbw {peak:g} GB/s, avg {avg:g} GB/s ({what}, {exp.name})" if peak is not None \
        else f"{label} table of {len(res.rows)} row(s) without bandwidth cells ({what})"
    return f.result(ctx, summary, facts, proof, named=2)


def grade_allreduce(ctx: CheckContext) -> Result:
    res: NcclTests | None = ctx.facts("nccl-tests")
    if res is None:
        return ctx.finding("nccl.allreduce/no-output", "no nccl-tests output to grade")
    tables = res.tables or [res]
    with_rows = [t for t in tables if t.rows]
    if not with_rows:
        return _no_rows(ctx, res)
    chosen = primary(with_rows)
    if not chosen.collective() and not chosen.candidates():
        return _unrecognised_columns(ctx, chosen)
    return _grade_table(ctx, chosen)


def _unrecognised_columns(ctx: CheckContext, res: NcclTests) -> Result:
    """A table that names no binary and whose columns fit no collective's layout."""
    row = res.rows[-1]
    n = res.listed()
    ratio = res.bw_ratio()
    return ctx.finding("nccl.allreduce/not-recognised", "not recognised: a nccl-tests table was expected (size = count x "
                       "word size, or x the ranks; the root, redop and busbw/algbw of one collective); the columns "
                       "fit none", evidence=[row.line, f"busbw/algbw = {ratio:.3f}" if ratio else "no bandwidth cells",
                                             f"ranks listed: {n}" if n else "no rank list"],
                       remedy="grade the untouched output of a *_perf binary; name the binary (the command line) "
                              "when pasting", facts=_allreduce_facts(res, topology(res)))


def _profile_hint(store: Any) -> tuple[str | None, int | None]:
    """nccl-tests prints each rank's GPU model: enough to pick a profile in analyze."""
    inp = store.input("nccl-tests")
    res = store.facts("nccl-tests") if inp is not None and inp.ok else None
    if not isinstance(res, NcclTests):
        return None, None
    models = {r["model"] for r in res.ranks if r["model"]}
    if len(models) != 1:
        return None, None
    counts = set(res.per_host.values())
    return models.pop(), (counts.pop() if len(counts) == 1 and res.complete_listing else None)


register_profile_hint(_profile_hint)

register(Check(
    id=CHECK,
    title="NCCL all-reduce bandwidth",
    grade=grade_allreduce,
    probes=(),
    inputs=("nccl-tests",),
    profile_keys={
        "nccl.allreduce.tcp_fallback_max_busbw": float,
        "nccl.allreduce.tcp_fallback_max_time_us": float,
        "nccl.allreduce.tcp_fallback_min_bytes": int,
        "nccl.allreduce.peak_min_bytes": int,
        "nccl.allreduce.spike_ratio": float,
        "nccl.allreduce.spike_min_excess_us": float,
        "nccl.allreduce.latency_max_bytes": int,
        "nccl.allreduce.plateau_min_bytes": int,
        "nccl.allreduce.plateau_flat_ratio": float,
        "nccl.allreduce.plateau_nic_ratio": float,
        "nccl.allreduce.nic_rate_gbps": float,
        "nccl.allreduce.pcie_min_busbw": float,
        "nccl.allreduce.pcie_min_bytes": int,
        "nccl.allreduce.inter_node_min_busbw": float,
        "nccl.allreduce.boards": list,
        "nccl.allreduce.single_node.peak_busbw_warn": float,
        "nccl.allreduce.single_node.peak_busbw_fail": float,
        "nccl.allreduce.single_node.nvls_peak_busbw_warn": float,
        "nccl.allreduce.single_node.nvls_peak_busbw_fail": float,
        "nccl.allreduce.single_node.sizes": list,
        "nccl.allreduce.multi_node.peak_busbw_warn": float,
        "nccl.allreduce.multi_node.peak_busbw_fail": float,
        "nccl.allreduce.multi_node.base_latency_max_us": float,
        "nccl.allreduce.multi_node.sizes": list,
    },
    catches="wrong results, a failed, aborted or crashed run, TCP-fallback bandwidth, peak busbw under the table "
            "for the GPUs and topology shown (single or multi node, NVLS, board; all_reduce, all_gather, "
            "reduce_scatter), one host's GPUs under PCIe peer-to-peer speed on any board, ranks sharing a GPU, "
            "mid-size latency spikes, a table too short for a verdict, a plateau at one NIC while several are named",
    node_local=False,
    in_run=False,
))

__all__ = ["Expectation", "Topology", "allreduce_table", "board_for", "expectation", "grade_allreduce", "topology"]
