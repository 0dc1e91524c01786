"""nccl.transport: which transport NCCL chose and what went wrong, from NCCL_DEBUG=INFO/WARN
logs (the facts of `preflight.parsers.nccl_log`). The all-reduce measurements are graded by
`nccl_tests.py` (`nccl.allreduce`).
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Sequence
from typing import Any

from preflight.findings import Findings
from preflight.model import Result, Status
from preflight.parsers.nccl_log import WC_STATUS, NcclError, NcclLog, NcclProc
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

__all__ = ["error_findings", "grade_transport", "topology_findings"]
