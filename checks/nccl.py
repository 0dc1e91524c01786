"""NCCL checks: which transport NCCL chose (`nccl.transport`, from NCCL_DEBUG=INFO logs) and
what an all-reduce measured (`nccl.allreduce`, from nccl-tests `all_reduce_perf` output).

Both are analyze-only for now: they grade logs of a job or of a benchmark run. The
all-reduce expectations live in the profile's [nccl.allreduce*] tables, which the
collective sweep reuses.

NCCL log lines look like `host:pid:tid [dev] NCCL INFO <message>`, where [dev] is the
local CUDA device; the global rank of a process comes from its `comm ... rank R nranks N`
lines. Launchers may prefix lines (`[1,3]<stdout>:`, `3: `, `[default3]:`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from preflight.engine import register_profile_hint
from preflight.model import Capture, Result, Status
from preflight.profile import Profile
from preflight.registry import Check, CheckContext, Format, register, register_format

# ---------------------------------------------------------------------------------------
# NCCL_DEBUG=INFO logs

_NCCL_LINE = re.compile(
    r"(?P<host>[A-Za-z0-9][\w.-]*):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] NCCL (?P<level>INFO|WARN|TRACE) "
    r"(?P<msg>.*)$")
_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)(?:\+cuda([\d.]+))?")
_COMM = re.compile(r"\bcomm 0x[0-9a-f]+ rank (\d+) nranks (\d+)")
_NET_USING_IB = re.compile(r"NET/IB\s*:\s*Using (.*?)(?:;\s*OOB\s+(\S+?):([^<\s]*)(?:<\d+>)?)?\s*$")
_NET_USING_SOCKET = re.compile(r"NET/Socket\s*:\s*Using (.*)$")
_HCA_ENTRY = re.compile(r"\[\d+\]([\w.-]+:\d+)(?:/(\w+))?")
_IF_ENTRY = re.compile(r"\[\d+\]([\w.-]+):([^<\s]+)(?:<\d+>)?")
_USING_NETWORK = re.compile(r"Using network (.+?)\s*$")
_BOOTSTRAP = re.compile(r"Bootstrap\s*:\s*Using (\S+?):([^<\s]+)")
_CHANNEL_NET = re.compile(r"via NET/([A-Za-z0-9_]+)(?:/(\d+))?(?:/(GDRDMA))?")
_CHANNEL = re.compile(r"Channel \d+(?:/\d+)? : (\d+)\[[0-9a-fx]+\] -> (\d+)\[[0-9a-fx]+\]")
_NVLS_ON = re.compile(r"NVLS multicast support is available|NVLS comm 0x|\b([1-9]\d*) nvls channels")
_NVLS_OFF = re.compile(r"NVLS multicast support is not available|NCCL_NVLS_ENABLE set by environment to 0|"
                       r"\b0 nvls channels")
_IB_NO_DEVICE = re.compile(r"NET/IB\s*:\s*No device found")


@dataclass
class NcclProc:
    host: str
    pid: str
    devs: set[str] = field(default_factory=set)
    rank: int | None = None
    nranks: int | None = None
    version: str = ""
    net: str = ""  # IB, Socket or a plugin network name
    hcas: list[str] = field(default_factory=list)  # mlx5_0:1/IB
    interfaces: list[str] = field(default_factory=list)  # socket interfaces NCCL uses
    oob: str = ""  # IB out-of-band / bootstrap interface
    bootstrap: str = ""
    gdr: bool | None = None
    nvls: bool | None = None
    evidence: dict[str, str] = field(default_factory=dict)  # kind -> first line proving it

    @property
    def label(self) -> str:
        r = f"rank {self.rank}" if self.rank is not None else f"pid {self.pid}"
        return f"{self.host} {r}"


@dataclass
class NcclLog:
    procs: dict[tuple[str, str], NcclProc] = field(default_factory=dict)
    warns: list[str] = field(default_factory=list)
    ib_no_device: list[str] = field(default_factory=list)
    lines: int = 0



Finding = tuple[str, list[str], str]  # (message, evidence lines, remedy)


def _findings_result(ctx: CheckContext, fails: list[Finding], warns: list[Finding], facts: dict[str, Any],
                     notes: Sequence[str] = ()) -> Result:
    """FAIL (or WARN) from the findings: the first message is the summary, all evidence kept."""
    status = Status.FAIL if fails else Status.WARN
    top = fails or warns
    msgs = [t[0] for t in top]
    ev: list[str] = []
    for t in top:
        ev.extend(e for e in t[1] if e and e not in ev)
    summary = msgs[0] if len(msgs) == 1 else f"{msgs[0]} (+{len(msgs) - 1} more)"
    return ctx.result(status, summary, evidence=[*msgs[1:], *ev, *notes],
                      remedy="; ".join(dict.fromkeys(t[2] for t in top)), facts=facts)

def parse_nccl_log(text: str) -> NcclLog:
    log = NcclLog()
    for raw in text.splitlines():
        m = _NCCL_LINE.search(raw)
        if not m:
            continue
        log.lines += 1
        line = raw.strip()
        key = (m.group("host"), m.group("pid"))
        p = log.procs.get(key)
        if p is None:
            p = log.procs[key] = NcclProc(host=m.group("host"), pid=m.group("pid"))
        p.devs.add(m.group("dev"))
        msg = m.group("msg")
        if m.group("level") == "WARN":
            log.warns.append(line)
        mv = _VERSION.search(msg)
        if mv and not p.version:
            p.version = mv.group(1) + (f"+cuda{mv.group(2)}" if mv.group(2) else "")
            p.evidence.setdefault("version", line)
        mc = _COMM.search(msg)
        if mc:
            nranks = int(mc.group(2))
            if p.nranks is None or nranks > p.nranks:  # the largest communicator is the world
                p.rank, p.nranks = int(mc.group(1)), nranks
        if _IB_NO_DEVICE.search(msg):
            log.ib_no_device.append(line)
        mi = _NET_USING_IB.search(msg)
        if mi:
            p.net = "IB"
            p.hcas = [f"{h}/{t}" if t else h for h, t in _HCA_ENTRY.findall(mi.group(1))]
            if mi.group(2):
                p.oob = mi.group(2)
            p.evidence["net"] = line
            continue
        ms = _NET_USING_SOCKET.search(msg)
        if ms:
            if p.net != "IB":
                p.net = "Socket"
                p.evidence["net"] = line
            p.interfaces = [name for name, _ in _IF_ENTRY.findall(ms.group(1))]
            p.evidence["socket"] = line
            continue
        mu = _USING_NETWORK.search(msg)
        if mu:
            name = mu.group(1).strip()
            p.net = "IB" if name == "IB" else "Socket" if name == "Socket" else name
            p.evidence.setdefault("net", line)
            p.evidence["using_network"] = line
            continue
        mb = _BOOTSTRAP.search(msg)
        if mb:
            p.bootstrap = mb.group(1)
            p.evidence.setdefault("bootstrap", line)
            continue
        mch = _CHANNEL_NET.search(msg)
        if mch:
            transport = mch.group(1)
            if not p.net:
                p.net = "IB" if transport == "IB" else "Socket" if transport == "Socket" else transport
                p.evidence.setdefault("net", line)
            if transport == "IB":
                p.gdr = bool(mch.group(3)) or bool(p.gdr)
            p.evidence.setdefault("channel_net", line)
            continue
        if _NVLS_OFF.search(msg):
            if p.nvls is None:
                p.nvls = False
                p.evidence.setdefault("nvls", line)
        elif _NVLS_ON.search(msg):
            p.nvls = True
            p.evidence["nvls"] = line
    return log


def _bad_iface(name: str, profile: Profile) -> bool:
    if not name:
        return False
    if name == "lo":
        return True
    prefixes = [p for p in (profile.get("nccl.bad_interfaces") or []) if isinstance(p, str)]
    return any(name.startswith(p) for p in prefixes)


def grade_transport(ctx: CheckContext) -> Result:
    cap = ctx.capture("nccl-log")
    if cap is None:
        return ctx.result(Status.SKIP, "no NCCL log to grade")
    log = parse_nccl_log(cap.text)
    if not log.procs:
        return ctx.result(Status.ERROR, "no NCCL INFO lines found (was NCCL_DEBUG=INFO set?)",
                          evidence=cap.text.splitlines()[:3], remedy="rerun the job with NCCL_DEBUG=INFO")
    prof = ctx.profile
    expect = str(prof.get("nccl.expect_net") or "any")
    procs = sorted(log.procs.values(), key=lambda p: (p.rank if p.rank is not None else 1 << 30, p.host, p.pid))
    nets = sorted({p.net for p in procs if p.net})
    versions = sorted({p.version for p in procs if p.version})
    ifaces = sorted({i for p in procs for i in p.interfaces} | {p.oob for p in procs if p.oob})
    hcas = sorted({h for p in procs for h in p.hcas})
    nvls_vals = {p.nvls for p in procs if p.nvls is not None}
    nvls: bool | None = (True in nvls_vals) if nvls_vals else None
    facts: dict[str, Any] = {
        "net": nets[0] if len(nets) == 1 else (nets if nets else None),
        "interfaces": ifaces,
        "hcas": hcas,
        "nvls": nvls,
        "version": versions[0] if len(versions) == 1 else versions,
        "hosts": sorted({p.host for p in procs}),
        "ranks": [
            {"host": p.host, "pid": p.pid, "rank": p.rank, "nranks": p.nranks, "devices": sorted(p.devs, key=int),
             "net": p.net or None, "interfaces": p.interfaces, "hcas": p.hcas, "oob": p.oob or None,
             "bootstrap": p.bootstrap or None, "gdr": p.gdr, "nvls": p.nvls, "version": p.version or None}
            for p in procs
        ],
        "warnings": log.warns[:20],
    }
    fails: list[tuple[str, list[str], str]] = []
    warns: list[tuple[str, list[str], str]] = []
    src = f"nccl.expect_net = {expect} ({prof.source('nccl.expect_net')})"

    socket_procs = [p for p in procs if p.net == "Socket"]
    if socket_procs and expect.upper() != "SOCKET":
        who = ", ".join(p.label for p in socket_procs[:6]) + (f" (+{len(socket_procs) - 6})" if len(socket_procs) > 6 else "")
        sock_ev = [p.evidence.get("socket") or p.evidence.get("net", "") for p in socket_procs[:4]]
        sock_ev += log.ib_no_device[:2] + [src]
        msg = f"NCCL fell back to TCP sockets on {who}"
        rem = ("NCCL found no usable IB/RoCE device: check ibstat (ports Active), that the container sees "
               "/dev/infiniband and libibverbs, NCCL_IB_DISABLE / NCCL_IB_HCA / NCCL_NET in the job env")
        (fails if expect.upper() == "IB" else warns).append((msg, sock_ev, rem))
    other = [p for p in procs if p.net and p.net not in ("IB", "Socket")]
    if other and expect.upper() == "IB":
        warns.append((f"NCCL uses network plugin '{other[0].net}', not IB verbs",
                      [other[0].evidence.get("net", ""), src],
                      "if this plugin is intended (cloud fabric), set nccl.expect_net in a site profile"))
    if len(nets) > 1 and not socket_procs:
        warns.append((f"ranks use different networks: {', '.join(nets)}",
                      [p.evidence.get("net", "") for p in procs if p.net][:4],
                      "make every node's NCCL environment identical"))
    for p in procs:
        bad = [i for i in (*p.interfaces, p.oob, p.bootstrap) if _bad_iface(i, prof)]
        if bad:
            bound_ev = [p.evidence.get(k, "") for k in ("socket", "net", "bootstrap") if p.evidence.get(k)]
            fails.append((f"NCCL bound {', '.join(sorted(set(bad)))} on {p.label}", bound_ev,
                          "set NCCL_SOCKET_IFNAME to the data-plane interface (e.g. '=eth0' or '^lo,docker'); "
                          "lo/docker0/virbr do not reach other nodes"))
    if len(versions) > 1:
        by_v: dict[str, list[str]] = {}
        for p in procs:
            if p.version:
                by_v.setdefault(p.version, []).append(p.label)
        warns.append((f"mixed NCCL versions: {', '.join(versions)}",
                      [f"{v}: {', '.join(ls[:4])}" for v, ls in by_v.items()],
                      "run the same container/NCCL build on every node"))

    if not nets:
        summary_net = "no network transport chosen in the log (single node, or the log starts late)"
    else:
        summary_net = f"NET/{'/'.join(nets)}"
    if fails or warns:
        return _findings_result(ctx, fails, warns, facts)
    if not nets:
        return ctx.result(Status.SKIP, summary_net, evidence=[], facts=facts)
    detail = f"{summary_net} on {len(procs)} process(es)"
    if hcas:
        detail += f" via {', '.join(hcas[:8])}" + (" ..." if len(hcas) > 8 else "")
    if nvls is not None:
        detail += f"; NVLS {'on' if nvls else 'off'}"
    proof = [procs[0].evidence.get("net", "")] + ([procs[0].evidence["nvls"]] if "nvls" in procs[0].evidence else [])
    return ctx.result(Status.PASS, detail, evidence=[e for e in proof if e], facts=facts)


# ---------------------------------------------------------------------------------------
# nccl-tests output

_ROW_HEAD = re.compile(r"^\s*(\d+)\s+(\d+)\s+\S+")
_NUM = r"(?:[\d.]+(?:[eE][+-]?\d+)?|N/A|nan|-?inf)"
_RANK_LINE = re.compile(r"^#\s+Rank\s+(\d+)\s+Group\s+(\d+)\s+Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+"
                        r"\[([^\]]*)\]\s*(.*?)\s*$")
_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*([\d.]+(?:[eE][+-]?\d+)?)")
_OOB = re.compile(r"#\s*Out of bounds values\s*:\s*(\d+)\s+(\w+)")
_TEST_FAIL = re.compile(r"Test NCCL failure|Test CUDA failure|Test failure|NCCL WARN|"
                        r"\bunhandled (?:system|cuda) error\b", re.I)

# Printed busbw cells have two decimals: their mean may differ from the printed average by
# rounding only. A larger gap means an edited or truncated table.
AVG_ROUNDING_SLACK = 0.01


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


@dataclass
class NcclTests:
    rows: list[NcclTestRow] = field(default_factory=list)
    ranks: list[dict[str, Any]] = field(default_factory=list)
    avg_busbw: float | None = None
    oob_values: int | None = None
    oob_line: str = ""
    avg_line: str = ""
    header: str = ""
    errors: list[str] = field(default_factory=list)

    @property
    def hosts(self) -> list[str]:
        return list(dict.fromkeys(r["host"] for r in self.ranks))

    def busbw_cells(self) -> list[float]:
        out: list[float] = []
        for r in self.rows:
            out.extend(v for v in (r.busbw, r.ip_busbw) if v is not None)
        return out


def _f(tok: str) -> float | None:
    try:
        v = float(tok)
    except ValueError:
        return None
    return v if v == v and v not in (float("inf"), float("-inf")) else None


def _i(tok: str) -> int | None:
    return int(tok) if tok.isdigit() else None


def parse_nccl_tests(text: str) -> NcclTests:
    out = NcclTests()
    for raw in text.splitlines():
        line = raw.rstrip()
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            if s.startswith("# nThread") and not out.header:
                out.header = s
            mr = _RANK_LINE.match(s)
            if mr:
                out.ranks.append({"rank": int(mr.group(1)), "group": int(mr.group(2)), "pid": int(mr.group(3)),
                                  "host": mr.group(4), "device": int(mr.group(5)), "bus": mr.group(6),
                                  "model": mr.group(7)})
            ma = _AVG.search(s)
            if ma:
                out.avg_busbw = float(ma.group(1))
                out.avg_line = s
            mo = _OOB.search(s)
            if mo:
                out.oob_values = int(mo.group(1))
                out.oob_line = s
            continue
        if _TEST_FAIL.search(s):
            out.errors.append(s)
            continue
        m = _ROW_HEAD.match(line)
        if not m:
            continue
        toks = s.split()
        # size count type [redop root] + (time algbw busbw #wrong) x 2
        if len(toks) < 3 + 8:
            if len(toks) >= 3 + 4 and all(_f(t) is not None or t == "N/A" for t in toks[-4:]):
                tail = toks[-4:]
                out.rows.append(NcclTestRow(bytes=int(toks[0]), count=int(toks[1]), dtype=toks[2],
                                            time_us=_f(tail[0]), algbw=_f(tail[1]), busbw=_f(tail[2]),
                                            wrong=_i(tail[3]), line=s))
            continue
        tail = toks[-8:]
        if not all(re.fullmatch(_NUM, t) for t in tail):
            continue
        out.rows.append(NcclTestRow(
            bytes=int(toks[0]), count=int(toks[1]), dtype=toks[2],
            time_us=_f(tail[0]), algbw=_f(tail[1]), busbw=_f(tail[2]), wrong=_i(tail[3]),
            ip_time_us=_f(tail[4]), ip_algbw=_f(tail[5]), ip_busbw=_f(tail[6]), ip_wrong=_i(tail[7]), line=s))
    return out


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


def grade_allreduce(ctx: CheckContext) -> Result:
    cap = ctx.capture("nccl-tests")
    if cap is None:
        return ctx.result(Status.SKIP, "no nccl-tests output to grade")
    res = parse_nccl_tests(cap.text)
    prof = ctx.profile
    hosts = res.hosts
    facts: dict[str, Any] = {
        "rows": [{"bytes": r.bytes, "time_us": r.time_us, "algbw": r.algbw, "busbw": r.busbw,
                  "ip_time_us": r.ip_time_us, "ip_algbw": r.ip_algbw, "ip_busbw": r.ip_busbw,
                  "wrong": r.wrong, "ip_wrong": r.ip_wrong} for r in res.rows],
        "hosts": hosts,
        "ranks": len(res.ranks),
        "avg_busbw": res.avg_busbw,
        "peak_busbw": None,
        "wrong": 0,
        "gpu_models": sorted({r["model"] for r in res.ranks if r["model"]}),
    }
    if not res.rows:
        why = "crashed" if res.errors else "no result rows (truncated output or the test failed to start)"
        return ctx.result(Status.FAIL if res.errors else Status.ERROR, f"nccl-tests: {why}",
                          evidence=res.errors[:5] or cap.text.splitlines()[-3:],
                          remedy="rerun all_reduce_perf and read its error; an NCCL WARN names the failing rank/NIC",
                          facts=facts)
    cells = res.busbw_cells()
    peak = max(cells) if cells else None
    computed = round(sum(cells) / len(cells), 3) if cells else None
    facts["peak_busbw"] = peak
    facts["avg_busbw_computed"] = computed
    if facts["avg_busbw"] is None:
        facts["avg_busbw"] = computed
    wrong = sum((r.wrong or 0) + (r.ip_wrong or 0) for r in res.rows)
    facts["wrong"] = wrong
    multi: bool | None = (len(hosts) > 1) if hosts else None
    table_name, table = allreduce_table(prof, multi)
    facts["table"] = table_name
    fails: list[tuple[str, list[str], str]] = []
    warns: list[tuple[str, list[str], str]] = []
    notes: list[str] = []

    if wrong:
        bad = [r.line for r in res.rows if (r.wrong or 0) or (r.ip_wrong or 0)]
        fails.append((f"all-reduce returned wrong results ({wrong} wrong elements)", bad[:5],
                      "a GPU, NVLink or NIC corrupts data: run the test per node to isolate it, check Xid/ECC, "
                      "drain the node it follows"))
    if res.oob_values:
        fails.append((f"{res.oob_values} out-of-bounds values", [res.oob_line],
                      "data corruption: isolate the node (per-node runs) and check ECC/Xid"))
    if res.errors:
        fails.append(("nccl-tests reported a failure", res.errors[:5],
                      "read the NCCL WARN line: it names the rank, host and device that failed"))
    if res.avg_busbw is not None and computed is not None and abs(res.avg_busbw - computed) > AVG_ROUNDING_SLACK + 0.001 * computed:
        warns.append((f"printed Avg bus bandwidth {res.avg_busbw:g} disagrees with the table's mean {computed:g} "
                      "(edited or truncated output?)", [res.avg_line],
                      "grade the untouched output of all_reduce_perf"))

    # TCP-fallback signature on large messages
    min_bytes = int(prof.get("nccl.allreduce.tcp_fallback_min_bytes") or 0)
    max_bw = float(prof.get("nccl.allreduce.tcp_fallback_max_busbw") or 0)
    max_t = float(prof.get("nccl.allreduce.tcp_fallback_max_time_us") or 0)
    if min_bytes and (max_bw or max_t):
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
            fails.append((f"TCP-fallback signature: {len(slow)} message size(s) >= {_fmt_bytes(min_bytes)} "
                          f"under {max_bw:g} GB/s busbw", slow[:4] + [
                              f"nccl.allreduce.tcp_fallback_max_busbw = {max_bw:g} "
                              f"({prof.source('nccl.allreduce.tcp_fallback_max_busbw')})"],
                          "NCCL is using NET/Socket: rerun with NCCL_DEBUG=INFO and look for 'NET/Socket : Using'; "
                          "check ibstat, NCCL_IB_HCA / NCCL_IB_DISABLE and /dev/infiniband in the container"))

    # peak bus bandwidth against the table
    peak_min = int(prof.get("nccl.allreduce.peak_min_bytes") or 0)
    max_size = max(r.bytes for r in res.rows)
    gpus = int(prof.get("gpu.count") or 0)
    per_host = {h: sum(1 for r in res.ranks if r["host"] == h) for h in hosts}
    partial = bool(gpus and per_host and any(n != gpus for n in per_host.values()))
    warn_f = table.get("peak_busbw_warn")
    fail_f = table.get("peak_busbw_fail")
    key = f"nccl.allreduce.{table_name}" if table_name in ("single_node", "multi_node") else "nccl.allreduce"
    if peak is not None and (warn_f or fail_f):
        if peak_min and max_size < peak_min:
            notes.append(f"peak not graded: the sweep stops at {_fmt_bytes(max_size)} (< {_fmt_bytes(peak_min)})")
        elif partial:
            notes.append(f"peak not graded: {sorted(set(per_host.values()))} GPU(s) per host, the table is for {gpus}")
        else:
            peak_row = next(r.line for r in res.rows if peak in (r.busbw, r.ip_busbw))
            peak_ev: list[str] = [peak_row]
            if fail_f and peak < float(fail_f):
                peak_ev.append(f"{key}.peak_busbw_fail = {fail_f} ({prof.source(key + '.peak_busbw_fail')})")
                fails.append((f"peak busbw {peak:g} GB/s is under the {table_name} floor {fail_f:g}", peak_ev,
                              "a rail, HCA or NVLink is down or slow: run per-node and per-pair tests to isolate it "
                              "(ibstat, nvidia-smi nvlink -s), then drain that node"))
            elif warn_f and peak < float(warn_f):
                peak_ev.append(f"{key}.peak_busbw_warn = {warn_f} ({prof.source(key + '.peak_busbw_warn')})")
                warns.append((f"peak busbw {peak:g} GB/s is below the expected {warn_f:g} ({table_name})", peak_ev,
                              "compare nodes one by one; check NIC/GPU affinity (nvidia-smi topo -m), PCIe "
                              "width/speed and the NCCL env (NCCL_IB_HCA, NCCL_ALGO)"))
    # per-size ceilings
    sizes = prof.get(f"nccl.allreduce.{table_name}.sizes") if table_name in ("single_node", "multi_node") else None
    if isinstance(sizes, list) and not partial:
        for entry in sizes:
            if not isinstance(entry, dict) or "bytes" not in entry or "max_time_us" not in entry:
                continue
            for r in res.rows:
                took = min(v for v in (r.time_us, r.ip_time_us, float("inf")) if v is not None)
                if r.bytes == int(entry["bytes"]) and took != float("inf") and took > float(entry["max_time_us"]):
                    warns.append((f"{_fmt_bytes(r.bytes)} all-reduce took {took:g} us (expected <= "
                                  f"{float(entry['max_time_us']):g})",
                                  [r.line, f"{key}.sizes: {entry.get('source', '')}"],
                                  "compare with another node pair; check NVLink/NIC health and NCCL env"))
    what = f"{len(res.ranks) or '?'} ranks on {len(hosts) or '?'} host(s)"
    if fails or warns:
        return _findings_result(ctx, fails, warns, facts, notes)
    avg = facts["avg_busbw"]
    summary = f"all-reduce peak busbw {peak:g} GB/s, avg {avg:g} GB/s ({what}, {table_name})"
    proof = [r.line for r in res.rows if peak in (r.busbw, r.ip_busbw)][:1] + ([res.avg_line] if res.avg_line else [])
    return ctx.result(Status.PASS, summary, evidence=proof + notes, facts=facts)


# ---------------------------------------------------------------------------------------
# Formats

_NCCL_DETECT = re.compile(r"(?m)[A-Za-z0-9][\w.-]*:\d+:\d+ \[\d+\] NCCL (?:INFO|WARN) ")


def _looks_like_nccl_log(text: str) -> bool:
    return bool(_NCCL_DETECT.search(text))


def _looks_like_nccl_tests(text: str) -> bool:
    if re.search(r"(?m)^#\s*Avg bus bandwidth\s*:", text):
        return True
    return bool(re.search(r"(?m)^# nThread \d+ nGpus \d+", text)) or bool(
        re.search(r"(?m)^#\s+size\s+count\s+type\b.*\btime\s+algbw\s+busbw", text))


def _profile_hint(captures: dict[str, Capture]) -> tuple[str | None, int | None]:
    """nccl-tests prints each rank's GPU model: enough to pick a profile in analyze."""
    cap = captures.get("nccl-tests")
    if cap is None or not cap.ok:
        return None, None
    res = parse_nccl_tests(cap.text)
    models = {r["model"] for r in res.ranks if r["model"]}
    if len(models) != 1:
        return None, None
    per_host = {h: sum(1 for r in res.ranks if r["host"] == h) for h in res.hosts}
    counts = set(per_host.values())
    return models.pop(), (counts.pop() if len(counts) == 1 else None)


register_profile_hint(_profile_hint)

register_format(Format("nccl-log", detect=_looks_like_nccl_log, description="NCCL_DEBUG=INFO log", priority=40))
register_format(Format("nccl-tests", detect=_looks_like_nccl_tests, description="nccl-tests *_perf output",
                       priority=65))

register(Check(
    id="nccl.transport",
    title="NCCL transport",
    grade=grade_transport,
    probes=(),
    profile_keys={"nccl.expect_net": str, "nccl.bad_interfaces": list},
    formats=("nccl-log",),
    catches="NCCL fell back to TCP sockets, bound lo/docker0, mixed NCCL versions; reports IB/Socket, HCAs, NVLS per rank",
    node_local=False,
    in_run=False,
))

register(Check(
    id="nccl.allreduce",
    title="NCCL all-reduce bandwidth",
    grade=grade_allreduce,
    probes=(),
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
    formats=("nccl-tests",),
    catches="wrong results, TCP-fallback bandwidth, peak busbw under the profile floor (single vs multi node)",
    node_local=False,
    in_run=False,
))
