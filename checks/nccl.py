"""NCCL checks: which transport NCCL chose and what went wrong (`nccl.transport`, from
NCCL_DEBUG=INFO/WARN logs) and what an all-reduce measured (`nccl.allreduce`, from nccl-tests
/ rccl-tests output or the collective sweep's rows).

Graders read the facts of `preflight.parsers.nccl_log` and `preflight.parsers.nccl_tests`.
The all-reduce expectations live in the profile's [nccl.allreduce*] tables, which the
collective sweep reuses.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from preflight.engine import register_profile_hint
from preflight.findings import Findings
from preflight.model import Result, Status
from preflight.parsers.nccl_log import WC_STATUS, NcclError, NcclLog, NcclProc
from preflight.parsers.nccl_tests import AVG_ROUNDING_SLACK, NcclTests
from preflight.profile import Profile
from preflight.registry import Check, CheckContext, register

# ---------------------------------------------------------------------------------------
# nccl.transport


def _bad_iface(name: str, profile: Profile) -> bool:
    """lo, docker0, virbr...: interfaces that do not reach other nodes."""
    prefixes = [p for p in (profile.get("nccl.bad_interfaces") or []) if isinstance(p, str)]
    return bool(name) and (name == "lo" or any(name.startswith(p) for p in prefixes))


def _who(errs: list[NcclError]) -> str:
    names = list(dict.fromkeys(f"{e.host} GPU{e.dev}" + (f" (rank {e.rank})" if e.rank is not None else "")
                               for e in errs))
    return ", ".join(names[:4]) + (f" (+{len(names) - 4})" if len(names) > 4 else "")


def _consequences(log: NcclLog) -> list[str]:
    out = []
    if log.cascade:
        out.append(f"{log.cascade} '-> N' return-code line(s) are the error unwinding, not new errors")
    if log.service_closed:
        out.append(f"{len(log.service_closed)} '[Service thread] Connection closed by localRank N' line(s) follow "
                   "from the abort")
    return out


def error_findings(log: NcclLog, f: Findings) -> None:
    """The root cause among NCCL's WARN lines: a CUDA allocation failure explains the socket and
    proxy errors of the other ranks; an IB completion or queue-pair error names the HCA and peer."""
    after = _consequences(log)
    oom, cuda = log.of("cuda_oom"), log.of("cuda")
    if oom:
        net = log.of("socket_closed", "socket", "ib_completion")
        f.add(Status.FAIL, f"CUDA out of memory in NCCL on {_who(oom)}"
              + ("; the socket errors on other ranks follow from it" if net else ""),
              [*[e.line for e in oom[:3]], *[e.line for e in net[:2]], *after],
              "the process ran out of GPU memory while NCCL set up its buffers: lower the job's memory use "
              "(batch size, NCCL_BUFFSIZE, NCCL_NCHANNELS) or free the GPU (another process?); not a network fault")
        return
    if cuda:
        f.add(Status.FAIL, f"CUDA error in NCCL on {_who(cuda)}", [e.line for e in cuda[:3]] + after,
              "read the CUDA error; check the GPU (Xid in dmesg, nvidia-smi) of that rank")
    comp = log.of("ib_completion")
    if comp:
        e = comp[0]
        code = int(e.detail.get("code", "-1"))
        meaning = WC_STATUS.get(code, "the RDMA operation failed")
        peer = e.detail.get("peer", "?")
        vendor = f", vendor err {e.detail['vendor']}" if e.detail.get("vendor") else ""
        f.add(Status.FAIL, f"NET/IB completion error {code} from peer {peer} on {_who(comp)}{vendor}: {meaning}",
              [*[x.line for x in comp[:3]], *after],
              "error 4: check nvidia-peermem (lsmod | grep peermem), ACS disabled on the PCIe switches and the IOMMU "
              "setting, and memory registration limits (ulimit -l); error 12/13: check the link and the peer's node "
              "(ibstat, its logs)" if code in (4, 10) else
              "check the HCA and link of both ends (ibstat, ibv_devinfo, the switch port counters) and the peer's logs")
    qp = log.of("qp_setup")
    if qp:
        d = qp[0].detail
        where = d.get("dev", "?") + (f":{d['port']}" if d.get("port") else "")
        states = f" ({d['cur']} -> {d['next']})" if d.get("cur") and d.get("next") else ""
        gid = f", GID index {d['gid']}" if d.get("gid") else ""
        why = f"{d.get('errno', '')} {d.get('why', '')}".strip() or "error"
        f.add(Status.FAIL, f"queue pair setup failed{states} on dev {where}: {why}{gid} on {_who(qp)}",
              [x.line for x in qp[:3]] + after,
              "the two NICs cannot reach each other: on RoCE check NCCL_IB_GID_INDEX (the RoCEv2 IPv4 GID), routing "
              "between the rails and PFC/ECN; on rail-only fabrics set NCCL_CROSS_NIC=0; on IB check the subnet "
              "manager and the ports (ibstat)")
    closed = log.of("socket_closed", "socket")
    if closed and not comp and not qp:
        f.add(Status.FAIL, f"connection to a peer lost on {_who(closed)}: a peer process exited or its network path "
              "dropped", [x.line for x in closed[:3]] + after,
              "find the peer that exited first (its log: exception, OOM, Xid) or the interface that dropped; check "
              "that every host uses a reachable NCCL_SOCKET_IFNAME")
    other = log.of("other")
    if other and not f:
        f.add(Status.WARN, f"{len(other)} NCCL warning(s): {other[0].line.split('WARN', 1)[-1].strip()[:120]}",
              [x.line for x in other[:4]], "read the NCCL WARN lines: they name the host, device and call that failed")


def _subnets(procs: list[NcclProc]) -> dict[str, set[str]]:
    """Host -> the /24 networks of its bootstrap/OOB addresses (IPv4 only; the usual data-plane prefix)."""
    out: dict[str, set[str]] = {}
    for p in procs:
        for addr in (p.oob_addr, p.bootstrap_addr):
            try:
                ip = ipaddress.ip_address(addr)
            except ValueError:
                continue
            if ip.version == 4 and not ip.is_loopback:
                out.setdefault(p.host, set()).add(str(ipaddress.ip_network(f"{addr}/24", strict=False)))
    return out


def topology_findings(procs: list[NcclProc], prof: Profile, f: Findings, why: Sequence[str] = ()) -> None:
    """Transport choices: socket fallback (`why`: NCCL's own lines saying it found no IB device),
    bad interfaces, plugins, HCAs per GPU, RoCE across subnets."""
    expect = str(prof.get("nccl.expect_net") or "any").upper()
    src = f"nccl.expect_net = {expect} ({prof.source('nccl.expect_net')})"
    hosts = {p.host for p in procs}
    socket = [p for p in procs if p.net == "Socket"]
    if socket and expect != "SOCKET" and (len(hosts) > 1 or any("channel_net" in p.evidence for p in socket)):
        who = ", ".join(p.label for p in socket[:6]) + (f" (+{len(socket) - 6})" if len(socket) > 6 else "")
        f.add(Status.FAIL if expect == "IB" else Status.WARN, f"NCCL fell back to TCP sockets on {who}",
              [*[p.evidence.get("channel_net") or p.evidence.get("socket") or p.evidence.get("net", "")
                 for p in socket[:4]], *why[:2], src],
              "NCCL found no usable IB/RoCE device: check ibstat (ports Active), that the container sees "
              "/dev/infiniband and libibverbs, NCCL_IB_DISABLE / NCCL_IB_HCA / NCCL_NET in the job env")
    for p in procs:
        bad = sorted({i for i in (*p.interfaces, p.oob, p.bootstrap) if _bad_iface(i, prof)})
        if bad:
            f.add(Status.FAIL, f"NCCL bound {', '.join(bad)} on {p.label}",
                  [p.evidence.get(k, "") for k in ("socket", "net", "bootstrap") if p.evidence.get(k)],
                  "set NCCL_SOCKET_IFNAME to the data-plane interface (e.g. '=eth0' or '^lo,docker'); "
                  "lo/docker0/virbr do not reach other nodes")
    plugin = [p for p in procs if p.net and p.net not in ("IB", "Socket") and not p.net.upper().startswith("IB")]
    if plugin and expect == "IB":
        f.add(Status.WARN, f"NCCL uses network plugin '{plugin[0].net}', not IB verbs",
              [plugin[0].evidence.get("net", ""), src],
              "if this plugin is intended (cloud fabric), set nccl.expect_net in a site profile")
    for host in sorted(hosts):
        local = [p for p in procs if p.host == host and p.net and p.net != "Socket"]
        gpus = {d for p in procs if p.host == host for d in p.devs}
        hcas = sorted({h.split("/")[0] for p in local for h in p.hcas})
        if hcas and len(gpus) > len(hcas) and len(gpus) > 1:
            f.add(Status.WARN, f"{len(hcas)} HCA(s) ({', '.join(hcas)}) for {len(gpus)} GPUs on {host}: fewer NICs "
                               "than GPUs, inter-node bandwidth is capped by the NICs",
                  [local[0].evidence.get("net", "")] + ([f"NCCL_IB_HCA={local[0].ib_hca_env}"] if local[0].ib_hca_env
                                                        else []),
                  "if the node has more rails, list them all in NCCL_IB_HCA (or unset it); check that every HCA is "
                  "Active (ibstat)")
    nets = _subnets([p for p in procs if any(h.endswith("/RoCE") for h in p.hcas)])
    if len(nets) > 1 and not set.intersection(*nets.values()):
        f.add(Status.WARN, "RoCE hosts bootstrap from different subnets (" + ", ".join(
            f"{h} {'/'.join(sorted(s))}" for h, s in sorted(nets.items())) + "): RDMA between them must be routed",
              [p.evidence.get("bootstrap") or p.evidence.get("net", "") for p in procs[:4]],
              "check that the hosts reach each other on the interface NCCL uses (NCCL_SOCKET_IFNAME); on RoCE the "
              "GID index and routing must allow routed (RoCEv2) traffic between those subnets")


def _transport_facts(log: NcclLog, procs: list[NcclProc]) -> dict[str, Any]:
    nets = sorted({p.net for p in procs if p.net})
    versions = sorted({p.version for p in procs if p.version})
    nvls = {p.nvls for p in procs if p.nvls is not None}
    return {
        "net": nets[0] if len(nets) == 1 else (nets or None),
        "intra": sorted({t for p in procs for t in p.intra}),
        "interfaces": sorted({i for p in procs for i in p.interfaces} | {p.oob for p in procs if p.oob}),
        "hcas": sorted({h for p in procs for h in p.hcas}),
        "nvls": (True in nvls) if nvls else None,
        "version": versions[0] if len(versions) == 1 else versions,
        "hosts": sorted({p.host for p in procs}),
        "errors": [{"kind": e.kind, "host": e.host, "dev": e.dev, "rank": e.rank, "line": e.line} for e in log.errors],
        "ranks": [{"host": p.host, "pid": p.pid, "rank": p.rank, "nranks": p.nranks, "mpi_rank": p.mpi_rank,
                   "devices": sorted(p.devs, key=int), "net": p.net or None, "intra": sorted(p.intra),
                   "interfaces": p.interfaces, "hcas": p.hcas, "oob": p.oob or None, "bootstrap": p.bootstrap or None,
                   "gdr": p.gdr, "nvls": p.nvls, "version": p.version or None} for p in procs],
    }


def grade_transport(ctx: CheckContext) -> Result:
    log: NcclLog | None = ctx.facts("nccl-log")
    if log is None or not log.procs:
        return ctx.result(Status.ERROR, "no NCCL INFO lines found (was NCCL_DEBUG=INFO set?)",
                          evidence=["no `host:pid:tid [dev] NCCL INFO` line in the log"],
                          remedy="rerun the job with NCCL_DEBUG=INFO")
    procs = sorted(log.procs.values(), key=lambda p: (p.rank if p.rank is not None else 1 << 30, p.host, p.pid))
    facts = _transport_facts(log, procs)
    f = Findings()
    error_findings(log, f)
    topology_findings(procs, ctx.profile, f, [e.line for e in log.of("ib_no_device", "libibverbs")])
    versions = facts["version"] if isinstance(facts["version"], list) else []
    if len(versions) > 1:
        by_v = Counter(p.version for p in procs if p.version)
        f.add(Status.WARN, f"mixed NCCL versions: {', '.join(versions)}", [f"{v}: {n} process(es)" for v, n in
                                                                          by_v.items()],
              "run the same container/NCCL build on every node")
    nets = sorted({p.net for p in procs if p.net})
    off = sorted({d for p in procs if p.nvls is False for d in p.devs}, key=int)
    if off and not any(p.nvls for p in procs):
        f.note(f"NVLS (NVLink SHARP) not available on device(s) {', '.join(off)}: NCCL uses ring/tree on NVLink")
    hcas = facts["hcas"]
    if nets:
        ok = f"NET/{'/'.join(nets)} on {len(procs)} process(es)" + (
            f" via {', '.join(hcas[:8])}" + (" ..." if len(hcas) > 8 else "") if hcas else "")
    elif facts["intra"]:
        ok = f"single node: {', '.join(facts['intra'])} between {len(procs)} process(es) (no network transport)"
    else:
        ok = f"{len(procs)} NCCL process(es), no network transport in the log (single node, or the log starts late)"
    if facts["nvls"] is not None:
        ok += f"; NVLS {'on' if facts['nvls'] else 'off'}"
    proof = [procs[0].evidence.get(k, "") for k in ("net", "intra", "nvls") if procs[0].evidence.get(k)]
    return f.result(ctx, ok, facts, proof)


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
    id="nccl.transport",
    title="NCCL transport",
    grade=grade_transport,
    probes=(),
    inputs=("nccl-log",),
    profile_keys={"nccl.expect_net": str, "nccl.bad_interfaces": list},
    catches="NCCL errors with their root cause (CUDA OOM, IB completion errors, queue-pair setup, lost peers), TCP "
            "socket fallback, lo/docker0 bound, fewer HCAs than GPUs, hosts on different subnets, mixed versions",
    node_local=False,
    in_run=False,
))

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

__all__ = ["allreduce_table", "error_findings", "grade_allreduce", "grade_transport", "topology_findings"]
