"""nccl.allreduce: what an all-reduce measured, from nccl-tests / rccl-tests output or the
collective sweep's rows (the facts of `preflight.parsers.nccl_tests`). The expectations live in
the profile's [nccl.allreduce*] tables, which the collective sweep reuses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from preflight.engine import register_profile_hint
from preflight.findings import Findings
from preflight.model import Result, Status
from preflight.parsers.nccl_tests import AVG_ROUNDING_SLACK, NcclTests
from preflight.profile import Profile
from preflight.registry import Check, CheckContext, register

# ---------------------------------------------------------------------------------------
# nccl.allreduce


def _fmt_bytes(n: int) -> str:
    for unit, div in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


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


def _allreduce_facts(res: NcclTests) -> dict[str, Any]:
    return {
        "rows": [{"bytes": r.bytes, "time_us": r.time_us, "algbw": r.algbw, "busbw": r.busbw,
                  "ip_time_us": r.ip_time_us, "ip_algbw": r.ip_algbw, "ip_busbw": r.ip_busbw,
                  "wrong": r.wrong, "ip_wrong": r.ip_wrong} for r in res.rows],
        "hosts": res.hosts,
        "ranks": len(res.ranks),
        "avg_busbw": res.avg_busbw,
        "peak_busbw": None,
        "wrong": 0,
        "gpu_models": sorted({r["model"] for r in res.ranks if r["model"]}),
    }


def _integrity_findings(res: NcclTests, computed: float | None, f: Findings) -> None:
    """Wrong results, out-of-bounds values, a reported failure, a tampered average."""
    wrong = sum((r.wrong or 0) + (r.ip_wrong or 0) for r in res.rows)
    if wrong:
        bad = [r.line for r in res.rows if (r.wrong or 0) or (r.ip_wrong or 0)]
        f.add(Status.FAIL, f"all-reduce returned wrong results ({wrong} wrong elements)", bad[:5],
              "a GPU, NVLink or NIC corrupts data: run the test per node to isolate it, check Xid/ECC, "
              "drain the node it follows")
    if res.oob_values:
        f.add(Status.FAIL, f"{res.oob_values} out-of-bounds values", [res.oob_line],
              "data corruption: isolate the node (per-node runs) and check ECC/Xid")
    if res.errors:
        f.add(Status.FAIL, "nccl-tests reported a failure", res.errors[:5],
              "read the NCCL WARN line: it names the rank, host and device that failed")
    if res.avg_busbw is not None and computed is not None and \
            abs(res.avg_busbw - computed) > AVG_ROUNDING_SLACK + 0.001 * computed:
        f.add(Status.WARN, f"printed Avg bus bandwidth {res.avg_busbw:g} disagrees with the table's mean {computed:g} "
              "(edited or truncated output?)", [res.avg_line],
              "grade the untouched output of all_reduce_perf")


def _tcp_fallback_findings(res: NcclTests, prof: Profile, f: Findings) -> None:
    """Large messages at socket speed: NCCL fell back to TCP."""
    min_bytes = int(prof.get("nccl.allreduce.tcp_fallback_min_bytes") or 0)
    max_bw = float(prof.get("nccl.allreduce.tcp_fallback_max_busbw") or 0)
    max_t = float(prof.get("nccl.allreduce.tcp_fallback_max_time_us") or 0)
    if not min_bytes or not (max_bw or max_t):
        return
    slow = []
    for r in res.rows:
        if r.bytes < min_bytes:
            continue
        bws = [v for v in (r.busbw, r.ip_busbw) if v is not None]
        ts = [v for v in (r.time_us, r.ip_time_us) if v is not None]
        low_bw = max_bw and bws and max(bws) < max_bw
        # time scaled to the reference size: a larger message may take proportionally longer
        slow_t = max_t and ts and min(ts) * min_bytes / r.bytes > max_t
        if low_bw or slow_t:
            slow.append(r.line)
    if slow:
        f.add(Status.FAIL, f"TCP-fallback signature: {len(slow)} message size(s) >= {_fmt_bytes(min_bytes)} "
              f"under {max_bw:g} GB/s busbw", slow[:4] + [
                  f"nccl.allreduce.tcp_fallback_max_busbw = {max_bw:g} "
                  f"({prof.source('nccl.allreduce.tcp_fallback_max_busbw')})"],
              "NCCL is using NET/Socket: rerun with NCCL_DEBUG=INFO and look for 'NET/Socket : Using'; "
              "check ibstat, NCCL_IB_HCA / NCCL_IB_DISABLE and /dev/infiniband in the container")


@dataclass
class _Table:
    """The profile table the run is graded against."""

    name: str
    floors: dict[str, Any]
    partial: bool  # not every host ran the profile's GPU count: floors do not apply

    @property
    def key(self) -> str:
        return f"nccl.allreduce.{self.name}" if self.name in ("single_node", "multi_node") else "nccl.allreduce"


def _table(res: NcclTests, prof: Profile) -> _Table:
    multi: bool | None = (len(res.hosts) > 1) if res.hosts else None
    name, floors = allreduce_table(prof, multi)
    gpus = int(prof.get("gpu.count") or 0)
    per_host = {h: sum(1 for r in res.ranks if r["host"] == h) for h in res.hosts}
    return _Table(name, floors, bool(gpus and per_host and any(n != gpus for n in per_host.values())))


def _peak_findings(res: NcclTests, prof: Profile, t: _Table, peak: float | None, f: Findings) -> None:
    """The peak bus bandwidth against the table's floors (noted, not graded, when the sweep
    is too short or the hosts ran fewer GPUs than the table is for)."""
    warn_f = t.floors.get("peak_busbw_warn")
    fail_f = t.floors.get("peak_busbw_fail")
    if peak is None or not (warn_f or fail_f):
        return
    peak_min = int(prof.get("nccl.allreduce.peak_min_bytes") or 0)
    max_size = max(r.bytes for r in res.rows)
    if peak_min and max_size < peak_min:
        f.note(f"peak not graded: the sweep stops at {_fmt_bytes(max_size)} (< {_fmt_bytes(peak_min)})")
        return
    if t.partial:
        per_host = sorted({sum(1 for r in res.ranks if r["host"] == h) for h in res.hosts})
        f.note(f"peak not graded: {per_host} GPU(s) per host, the table is for {int(prof.get('gpu.count') or 0)}")
        return
    peak_ev: list[str] = [next(r.line for r in res.rows if peak in (r.busbw, r.ip_busbw))]
    key = t.key
    if fail_f and peak < float(fail_f):
        peak_ev.append(f"{key}.peak_busbw_fail = {fail_f} ({prof.source(key + '.peak_busbw_fail')})")
        f.add(Status.FAIL, f"peak busbw {peak:g} GB/s is under the {t.name} floor {fail_f:g}", peak_ev,
              "a rail, HCA or NVLink is down or slow: run per-node and per-pair tests to isolate it "
              "(ibstat, nvidia-smi nvlink -s), then drain that node")
    elif warn_f and peak < float(warn_f):
        peak_ev.append(f"{key}.peak_busbw_warn = {warn_f} ({prof.source(key + '.peak_busbw_warn')})")
        f.add(Status.WARN, f"peak busbw {peak:g} GB/s is below the expected {warn_f:g} ({t.name})", peak_ev,
              "compare nodes one by one; check NIC/GPU affinity (nvidia-smi topo -m), PCIe "
              "width/speed and the NCCL env (NCCL_IB_HCA, NCCL_ALGO)")


def _ceiling_findings(res: NcclTests, prof: Profile, t: _Table, f: Findings) -> None:
    """Per-size time ceilings of the table (`<table>.sizes`)."""
    sizes = prof.get(f"{t.key}.sizes") if t.name in ("single_node", "multi_node") else None
    if not isinstance(sizes, list) or t.partial:
        return
    for entry in sizes:
        if not isinstance(entry, dict) or "bytes" not in entry or "max_time_us" not in entry:
            continue
        for r in res.rows:
            took = min(v for v in (r.time_us, r.ip_time_us, float("inf")) if v is not None)
            if r.bytes == int(entry["bytes"]) and took != float("inf") and took > float(entry["max_time_us"]):
                f.add(Status.WARN, f"{_fmt_bytes(r.bytes)} all-reduce took {took:g} us (expected <= "
                      f"{float(entry['max_time_us']):g})",
                      [r.line, f"{t.key}.sizes: {entry.get('source', '')}"],
                      "compare with another node pair; check NVLink/NIC health and NCCL env")


def grade_allreduce(ctx: CheckContext) -> Result:
    res: NcclTests | None = ctx.facts("nccl-tests")
    if res is None:
        return ctx.result(Status.SKIP, "no nccl-tests output to grade")
    prof = ctx.profile
    facts = _allreduce_facts(res)
    if not res.rows:
        why = "crashed" if res.errors else "no result rows (truncated output or the test failed to start)"
        return ctx.result(Status.FAIL if res.errors else Status.ERROR, f"nccl-tests: {why}",
                          evidence=res.errors[:5] or [res.header or "no `size count type ... busbw` row found"],
                          remedy="rerun all_reduce_perf and read its error; an NCCL WARN names the failing rank/NIC",
                          facts=facts)
    cells = res.busbw_cells()
    peak = max(cells) if cells else None
    computed = round(sum(cells) / len(cells), 3) if cells else None
    facts["peak_busbw"] = peak
    facts["avg_busbw_computed"] = computed
    if facts["avg_busbw"] is None:
        facts["avg_busbw"] = computed
    facts["wrong"] = sum((r.wrong or 0) + (r.ip_wrong or 0) for r in res.rows)
    table = _table(res, prof)
    facts["table"] = table.name
    f = Findings()
    _integrity_findings(res, computed, f)
    _tcp_fallback_findings(res, prof, f)
    _peak_findings(res, prof, table, peak, f)
    _ceiling_findings(res, prof, table, f)
    _size_findings(res, prof, f)
    what = f"{len(res.ranks) or '?'} ranks on {len(res.hosts) or '?'} host(s)"
    avg = facts["avg_busbw"]
    proof = [r.line for r in res.rows if peak in (r.busbw, r.ip_busbw)][:1] + ([res.avg_line] if res.avg_line else [])
    return f.result(ctx, f"all-reduce peak busbw {peak:g} GB/s, avg {avg:g} GB/s ({what}, {table.name})", facts,
                    proof, named=2)


def _size_findings(res: NcclTests, prof: Profile, f: Findings) -> None:
    """A table too short for a bandwidth verdict; a plateau at one NIC while several are named."""
    sizes = sorted({r.bytes for r in res.rows})
    peak_min = int(prof.get("nccl.allreduce.peak_min_bytes") or 0)
    if len(sizes) == 1 and peak_min and sizes[0] < peak_min:
        f.add(Status.WARN, f"a single message size ({_fmt_bytes(sizes[0])}): too small for a bandwidth verdict",
              [res.rows[0].line, f"nccl.allreduce.peak_min_bytes = {peak_min} "
                                 f"({prof.source('nccl.allreduce.peak_min_bytes')})"],
              "rerun all_reduce_perf up to 8G (-b 8 -e 8G -f 2) to see the bandwidth plateau")
    if len(res.ib_hcas) < 2 or len(res.hosts) == 1:
        return
    big = [r for r in res.rows if r.bytes >= 8 << 20]
    bws = [max(v for v in (r.busbw, r.ip_busbw) if v is not None) for r in big
           if r.busbw is not None or r.ip_busbw is not None]
    if len(bws) < 2:
        return
    plateau = max(bws)
    flat = abs(bws[-1] - bws[-2]) <= 0.1 * plateau  # the last doubling of the size gained under 10%
    rate = float(prof.get("ib.rate") or 0) or 400.0
    nic = rate / 8
    if flat and plateau <= 1.2 * nic:
        f.add(Status.WARN, f"busbw plateaus at {plateau:g} GB/s, about one {rate:g} Gb/s NIC's worth, while "
                           f"NCCL_IB_HCA names {len(res.ib_hcas)} HCAs ({', '.join(res.ib_hcas)})"
              + ("; the table stops before its summary" if not res.avg_line else ""),
              [*[r.line for r in big[-3:]], f"command: {res.command}"[:300],
               f"ib.rate = {rate:g} Gb/s ({prof.source('ib.rate') or 'default when the profile does not say'})"],
              "only one rail carries the traffic: check NCCL_DEBUG=INFO 'NET/IB : Using' (all HCAs listed?), one "
              "process per GPU, NCCL_ALGO (Tree on 1 GPU per node uses one channel), NCCL_MIN_NCHANNELS and that "
              "every HCA is Active")


def _profile_hint(store: Any) -> tuple[str | None, int | None]:
    """nccl-tests prints each rank's GPU model: enough to pick a profile in analyze."""
    inp = store.input("nccl-tests")
    res = store.facts("nccl-tests") if inp is not None and inp.ok else None
    if not isinstance(res, NcclTests):
        return None, None
    models = {r["model"] for r in res.ranks if r["model"]}
    if len(models) != 1:
        return None, None
    per_host = {h: sum(1 for r in res.ranks if r["host"] == h) for h in res.hosts}
    counts = set(per_host.values())
    return models.pop(), (counts.pop() if len(counts) == 1 else None)


register_profile_hint(_profile_hint)

register(Check(
    id="nccl.allreduce",
    title="NCCL all-reduce bandwidth",
    grade=grade_allreduce,
    probes=(),
    inputs=("nccl-tests",),
    profile_keys={
        "nccl.allreduce.tcp_fallback_max_busbw": float,
        "nccl.allreduce.tcp_fallback_max_time_us": float,
        "nccl.allreduce.tcp_fallback_min_bytes": int,
        "nccl.allreduce.peak_min_bytes": int,
        "nccl.allreduce.single_node.peak_busbw_warn": float,
        "nccl.allreduce.single_node.peak_busbw_fail": float,
        "nccl.allreduce.single_node.nvls_peak_busbw": float,
        "nccl.allreduce.single_node.sizes": list,
        "nccl.allreduce.multi_node.peak_busbw_warn": float,
        "nccl.allreduce.multi_node.peak_busbw_fail": float,
        "nccl.allreduce.multi_node.sizes": list,
    },
    catches="wrong results, TCP-fallback bandwidth, peak busbw under the profile floor (single vs multi node), "
            "a table too short for a verdict, a bandwidth plateau at one NIC while several are named",
    node_local=False,
    in_run=False,
))

__all__ = ["allreduce_table", "grade_allreduce"]
