"""nccl.transport: which transport NCCL chose and what went wrong, from NCCL_DEBUG=INFO/WARN
logs (the facts of `preflight.parsers.nccl_log`). The all-reduce measurements are graded by
`nccl_tests.py` (`nccl.allreduce`).

Errors: the WARN that ended the job is its root cause (a CUDA allocation failure explains the
socket errors of the other ranks; an IB completion, queue-pair or verbs failure names the HCA;
a failed connect names the peer and the interface); lost peers and proxy failures that only
follow from it are kept as its evidence; /dev/shm, GPU peer-to-peer and connects NCCL kept retrying
have rules of their own, and a WARN no rule reads is said as unread-error (never dropped). Transport: the socket transport across nodes, bad
interfaces (loopback, container and VM bridges, Docker's default network), HCAs per GPU,
InfiniBand and RoCE ports in one list, plugins (aws-ofi-nccl without a libfabric provider), RoCE
across subnets, NVLS and GPUDirect RDMA. Whether the job spans several nodes is
read from the log itself (hosts, nNodes/localRanks, network channels, ranks beyond a node's
GPUs); a log that proves one node never fails for an interface only its bootstrap uses.
Every finding has a code; its status is in `checks/policy.toml`.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from preflight import lazyre
from preflight.findings import Findings
from preflight.model import Result
from preflight.parsers.nccl_log import WC_STATUS, NcclError, NcclLog, NcclProc
from preflight.profile import Profile
from preflight.registry import Check, CheckContext, register

CHECK = "nccl.transport"  # pragma: no mutate (the registration id; the tests grade the registered check)
_MLX5 = lazyre.compile(r"^mlx5_(\d+)$")
NAMED = 4  # pragma: no mutate (hosts/processes named in a summary before "(+N)": a display limit)
QUOTED = 3  # pragma: no mutate (evidence lines quoted per finding: a display limit)
FOLLOW = 2  # pragma: no mutate (lines quoted of those that follow from a root cause: a display limit)
TEXT = 160  # pragma: no mutate (characters of a WARN quoted in a summary: a display limit)
HCAS_SHOWN = 8  # pragma: no mutate (HCAs named in a PASS summary: a display limit)


# ---------------------------------------------------------------------------------------
# who and where


def _who_one(e: NcclError) -> str:
    if e.quoted:
        return "the framework's last NCCL error"
    where = (e.host or "a process the log does not name") + (f" GPU{e.dev}" if e.dev else "")
    return where + (f" (rank {e.rank})" if e.rank is not None else "")


def _who(errs: Sequence[NcclError]) -> str:
    names = list(dict.fromkeys(_who_one(e) for e in errs))
    return ", ".join(names[:NAMED]) + (f" (+{len(names) - NAMED})" if len(names) > NAMED else "")


def _hosts(procs: Sequence[NcclProc]) -> list[str]:
    """The hosts the log names (lines without NCCL's prefix and a framing host name none)."""
    return sorted({p.host for p in procs if p.host})


def _labels(procs: Sequence[NcclProc]) -> str:
    names = list(dict.fromkeys(p.label for p in procs))
    return ", ".join(names[:NAMED]) + (f" (+{len(names) - NAMED})" if len(names) > NAMED else "")


def _proc_of(log: NcclLog, e: NcclError) -> NcclProc | None:
    return log.procs.get((e.host, e.pid))


def _hcas_of(log: NcclLog, e: NcclError) -> str:
    """The HCA a line names, else the NET/IB devices of its process ("" when unknown)."""
    if e.detail.get("hca"):
        return e.detail["hca"]
    p = _proc_of(log, e)
    return ", ".join(h.split(":")[0] for h in p.hcas) if p is not None else ""


def _ifaces_of(log: NcclLog, e: NcclError) -> str:
    p = _proc_of(log, e)
    if p is None:
        return ""
    names = list(dict.fromkeys([*p.interfaces, p.bootstrap, p.oob]))
    return ", ".join(n for n in names if n)


def _warn_text(e: NcclError) -> str:
    _, sep, text = e.line.partition(" WARN ")
    return (text if sep else e.line).strip()


# ---------------------------------------------------------------------------------------
# how far the job reaches: one node or several


@dataclass
class Scope:
    multi: list[str] = field(default_factory=list)  # lines proving several nodes
    single: list[str] = field(default_factory=list)  # lines proving one node

    @property
    def one_node(self) -> bool:
        return bool(self.single) and not self.multi


def _multi_node(procs: Sequence[NcclProc], gpus_per_node: int) -> list[str]:
    hosts = _hosts(procs)
    out = [f"{len(hosts)} hosts in the log: {', '.join(hosts[:NAMED])}"] if len(hosts) > 1 else []
    for p in procs:
        if p.local_ranks and p.nranks and p.nranks > p.local_ranks:  # nNodes > 1 prints more ranks than local
            out.append(p.evidence.get("size", ""))
        if p.net_channels:
            out.append(p.evidence.get("channel_net", ""))
        if gpus_per_node and p.nranks and p.nranks > gpus_per_node:
            out.append(f"{p.label}: nranks {p.nranks} > {gpus_per_node} GPUs per node")
    return list(dict.fromkeys(x for x in out if x))


def _world_on_one_host(procs: Sequence[NcclProc]) -> list[str]:
    """Every rank 0..N-1 of the largest communicator in the log printed by one named host: the job
    is within that node (nccl-tests -g 8 prints all 8 ranks from one process)."""
    size = max((n for p in procs for n in p.comm_ranks), default=0)  # pragma: no mutate (any default < 2 is refused)
    hosts = {p.host for p in procs if size in p.comm_ranks}
    if size < 2 or len(hosts) != 1 or "" in hosts:
        return []
    mine = [p for p in procs if size in p.comm_ranks]
    if set().union(*(p.comm_ranks[size] for p in mine)) != set(range(size)):
        return []
    return [f"all {size} ranks of the {size}-rank communicator are on {mine[0].host}",
            mine[0].evidence.get(f"comm:{size}", "")]


def _one_node(procs: Sequence[NcclProc]) -> list[str]:
    sized = [p for p in procs if p.local_ranks and p.nranks == p.local_ranks]  # nNodes 1 prints both equal
    if sized:
        return [sized[0].evidence.get("size", "")]
    whole = _world_on_one_host(procs)
    if whole:
        return whole
    intra = [p for p in procs if p.intra]
    if len({p.host for p in procs}) == 1 and intra and not any(p.net_channels for p in procs):
        return [f"every channel in the log is within the node: {intra[0].evidence.get('intra', '')}"]
    return []


def job_scope(procs: Sequence[NcclProc], prof: Profile) -> Scope:
    """NCCL refuses two ranks on one GPU, so more ranks than a node has GPUs (gpu.count, else the
    largest node there is: nccl.max_gpus_per_node) prove several nodes."""
    gpus = int(prof.get("gpu.count") or 0) or int(prof.get("nccl.max_gpus_per_node") or 0)
    return Scope(_multi_node(procs, gpus), _one_node(procs))


# ---------------------------------------------------------------------------------------
# errors: the root cause among NCCL's WARN lines


def _consequences(log: NcclLog, extra: Sequence[NcclError] = ()) -> list[str]:
    out = [e.line for e in extra[:FOLLOW]]
    if extra:
        out.append(f"{len(extra)} lost-peer / proxy error line(s) follow from it")
    if log.cascade:
        out.append(f"{log.cascade} '-> N' return-code line(s) are the error unwinding, not new errors")
    if log.service_closed:
        out.append(f"{len(log.service_closed)} '[Service thread] Connection closed by localRank N' line(s) follow "
                   "from the abort")
    return out


def _cuda(log: NcclLog, errs: list[NcclError], f: Findings, after: list[str]) -> None:
    why = re.search(r"Cuda failure (?:\d+ )?'([^']+)'", errs[0].line)
    f.add("nccl.transport/cuda-error", f"CUDA error in NCCL on {_who(errs)}" + (f": {why.group(1)}" if why else ""),
          [e.line for e in errs[:QUOTED]] + after, "read the CUDA error; check the GPU (Xid in dmesg, nvidia-smi) of that rank")


def _ib_async(log: NcclLog, errs: list[NcclError], f: Findings, after: list[str]) -> None:
    d = errs[0].detail
    where = f"{d['hca']}:{d['port']}" if d.get("hca") else _hcas_of(log, errs[0]) or "its HCA"
    f.add("nccl.transport/ib-async-fatal", f"IB fatal async event on {where} ({d.get('event') or 'fatal error'}) on "
                                  f"{_who(errs)}", [e.line for e in errs[:QUOTED]] + after,
          "the HCA, its port or a queue on it failed: check ibstat (port state), dmesg (mlx5_core errors), the "
          "link and the switch port; drain the node if the HCA reports a catastrophic error")


def _ib_completion(log: NcclLog, errs: list[NcclError], f: Findings, after: list[str]) -> None:
    """A failed IB work completion; NCCL 2.30's `Got CQE with error (...)` names no status, the
    `Got completion ... status=N` line after it does: the line with a status is the one reported."""
    e = next((x for x in errs if x.detail.get("code")), errs[0])
    num = int(e.detail["code"]) if e.detail.get("code") else None
    meaning = WC_STATUS.get(num or -1, "the RDMA operation failed")
    vendor = f", vendor err {e.detail['vendor']}" if e.detail.get("vendor") else ""
    hca = _hcas_of(log, e)
    what = f"NET/IB completion error {num} from peer {e.detail.get('peer', '?')}" if num is not None else \
        f"NET/IB work completion with error ({e.detail.get('dir', 'send/recv')}, status not in the log)"
    f.add("nccl.transport/ib-completion-error", f"{what} on {_who(errs)}" + (f" via {hca}" if hca else "")
          + f"{vendor}: {meaning}",
          [*[x.line for x in errs[:QUOTED]], *after],
          "error 4: check nvidia-peermem (lsmod | grep peermem), ACS disabled on the PCIe switches and the IOMMU "
          "setting, and memory registration limits (ulimit -l)" if num in (4, 10) else
          "the IB transfer failed and NCCL aborts the communicator (ncclRemoteError): read the 'Got completion ... "
          "status' line that follows for the status, check the HCA and link of both ends (ibstat, ibv_devinfo, the "
          "switch port counters) and the peer's logs" if num is None else
          "check the HCA and link of both ends (ibstat, ibv_devinfo, the switch port counters) and the peer's logs")


def _qp_setup(log: NcclLog, errs: list[NcclError], f: Findings, after: list[str]) -> None:
    d = errs[0].detail
    hcas = _hcas_of(log, errs[0])
    where = d["dev"] + (f":{d['port']}" if d.get("port") else "") if d.get("dev") else \
        f"{hcas} (the NET/IB devices of that process)" if hcas else "(not named in the log)"
    states = f" ({d['cur']} -> {d['next']})" if d.get("cur") else ""
    gid = f", GID index {d['gid']}" if d.get("gid") else ""
    why = f"{d.get('errno', '')} {d.get('why', '')}".strip() or "error"
    f.add("nccl.transport/ib-qp-setup-failed", f"queue pair setup failed{states} on dev {where}: {why}{gid} on {_who(errs)}",
          [x.line for x in errs[:QUOTED]] + after,
          "the two NICs cannot reach each other: on RoCE check NCCL_IB_GID_INDEX (the RoCEv2 IPv4 GID), routing "
          "between the rails and PFC/ECN; on rail-only fabrics set NCCL_CROSS_NIC=0; 'No such device': the GID or "
          "netdev of the RDMA port is gone (ibv_devinfo -v, show_gids); on IB check the subnet manager and the ports "
          "(ibstat)")


def _ib_verbs(log: NcclLog, errs: list[NcclError], f: Findings, after: list[str]) -> None:
    d = errs[0].detail
    call = d.get("call") or d["post"]
    why = d.get("why") or d.get("pwhy") or "failed"
    hca = _hcas_of(log, errs[0])
    f.add("nccl.transport/ib-verbs-call-failed", f"{call} failed ({why}) on {_who(errs)}" + (f", HCA {hca}" if hca else ""),
          [e.line for e in errs[:QUOTED]] + after,
          "'Cannot allocate memory' on ibv_create_qp/create_cq/reg_mr: raise the locked-memory limit (ulimit -l "
          "unlimited in the job and the container) and check the HCA's resource limits; otherwise check the HCA "
          "(ibstat, ibv_devinfo) and that /dev/infiniband is visible to the job")


_ERRNO_TEXT = lazyre.compile(r"(?:error:?|failed ?:)\s*([A-Za-z][^(,:]*?)\s*(?:\(\d+\))?\s*$")


def _shm(log: NcclLog, errs: list[NcclError], f: Findings, after: list[str]) -> None:
    d = {k.rstrip("0123456789"): v for e in reversed(errs) for k, v in e.detail.items()}
    why = d.get("why") or next((m.group(1) for e in errs if (m := _ERRNO_TEXT.search(_warn_text(e)))), "")
    size = f" of {int(d['size']):,} bytes" if d.get("size", "").isdigit() else ""
    f.add("nccl.transport/shm-failed", f"NCCL could not create its shared-memory segment{size}"
          + (f" {d['path']}" if d.get("path") else "") + f" on {_who(errs)}" + (f" ({why})" if why else "")
          + ": the communicator was not created",
          [e.line for e in errs[:QUOTED]] + after,
          "/dev/shm is too small or full (Docker's default is 64 MB): run the container with --shm-size=1g or more "
          "(or --ipc=host), on Kubernetes mount an emptyDir with medium: Memory at /dev/shm; check df -h /dev/shm "
          "and remove stale /dev/shm/nccl-* files of dead jobs")


def _p2p_nvlink(log: NcclLog, errs: list[NcclError], f: Findings, after: list[str]) -> None:
    pairs = list(dict.fromkeys(f"GPU{e.detail['a']}-GPU{e.detail['b']}" for e in errs))
    f.add("nccl.transport/p2p-disabled-nvlink", f"P2P is disabled between NVLink-connected GPUs ({', '.join(pairs[:NAMED])}) "
          f"on {_who(errs)}: NCCL refuses to create the communicator",
          [e.line for e in errs[:QUOTED]] + after,
          "the driver reports peer-to-peer read/write not supported across an NVLink: check nvidia-smi topo -p2p rw "
          "and nvidia-smi nvlink --status (links down), the fabric manager on NVSwitch systems (systemctl status "
          "nvidia-fabricmanager) and Xid in dmesg; NCCL_IGNORE_DISABLED_P2P=1 only hides it and sends the traffic "
          "through host memory")


def _peer_access(log: NcclLog, errs: list[NcclError], f: Findings, after: list[str]) -> None:
    d = errs[0].detail
    f.add("nccl.transport/peer-access-failed", f"CUDA peer access to GPU{d['peer']} could not be enabled on {_who(errs)}"
          + (f": {d['why']}" if d.get("why") else ""), [e.line for e in errs[:QUOTED]] + after,
          "cudaDeviceEnablePeerAccess failed between two GPUs of one process: check nvidia-smi topo -p2p rw, the "
          "NVLink state (nvidia-smi nvlink --status), IOMMU/ACS settings for PCIe peer-to-peer, and Xid in dmesg")


def _simple(code: str, what: str, remedy: str) -> Callable[[NcclLog, list[NcclError], Findings, list[str]], None]:
    def add(log: NcclLog, errs: list[NcclError], f: Findings, after: list[str]) -> None:
        f.add(code, f"{what} on {_who(errs)}: {_warn_text(errs[0])[:TEXT]}", [e.line for e in errs[:QUOTED]] + after,
              remedy)
    return add


def _collective(code: str, what: str) -> Callable[[NcclLog, list[NcclError], Findings, list[str]], None]:
    def add(log: NcclLog, errs: list[NcclError], f: Findings, after: list[str]) -> None:
        ranks = sorted({int(e.detail["rank"]) for e in errs if e.detail.get("rank")})
        around = f" around rank {', '.join(map(str, ranks[:NAMED]))}" if ranks else ""
        f.add(code, f"{what}{around} on {_who(errs)}", [e.line for e in errs[:QUOTED]] + after,
              "every rank must call the same collectives in the same order with the same counts: look for a "
              "rank-dependent branch, a skipped or extra collective, or different tensor sizes near that rank "
              "(rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL, or the PyTorch flight recorder)")
    return add


def _connect(log: NcclLog, errs: list[NcclError], f: Findings, after: list[str]) -> None:
    d = errs[0].detail
    why = d.get("why") or d.get("awhy") or _warn_text(errs[0])[:TEXT]
    ifaces = _ifaces_of(log, errs[0])
    f.add("nccl.transport/connect-failed", f"NCCL could not connect to {d.get('peer', 'a peer')} from {_who(errs)} ({why})"
          + (f" over {ifaces}" if ifaces else ""), [e.line for e in errs[:QUOTED]] + after,
          "the peer's address is not reachable on the interface NCCL uses: set NCCL_SOCKET_IFNAME to an interface "
          "every host reaches (the same subnet), check firewalls and routes, and that the peer process is alive")


def _peer_lost(log: NcclLog, errs: list[NcclError], f: Findings, after: list[str]) -> None:
    peer = next((e.detail.get("peer") or e.detail.get("rpeer") for e in errs
                 if e.detail.get("peer") or e.detail.get("rpeer")), "")
    ifaces = _ifaces_of(log, errs[0])
    f.add("nccl.transport/peer-connection-lost", f"connection to a peer lost on {_who(errs)}" + (f" (peer {peer})" if peer else "")
          + (f" over {ifaces}" if ifaces else "") + ": a peer process exited or its network path dropped",
          [x.line for x in errs[:QUOTED]] + after,
          "find the peer that exited first (its log: exception, OOM, Xid) or the interface that dropped; check "
          "that every host uses a reachable NCCL_SOCKET_IFNAME")


_NCCL_ERROR_REMEDY = ("read the NCCL WARN line and the lines before it (run with NCCL_DEBUG=INFO); the host, device "
                      "and call it names are where to look")
# root-cause kinds, most explanatory first, and how each is reported
ROOTS: tuple[tuple[str, Callable[[NcclLog, list[NcclError], Findings, list[str]], None]], ...] = (
    ("cuda", _cuda),
    ("shm", _shm),
    ("p2p_nvlink_disabled", _p2p_nvlink),
    ("peer_access", _peer_access),
    ("ib_async", _ib_async),
    ("ib_completion", _ib_completion),
    ("qp_setup", _qp_setup),
    ("ib_verbs", _ib_verbs),
    ("ib_config", _simple("nccl.transport/ib-incompatible-nics", "NCCL was asked to join NICs of different link layers",
                          "select NICs of one link type (IB or RoCE) with NCCL_IB_HCA")),
    ("plugin_error", _simple("nccl.transport/net-plugin-error", "the network plugin failed",
                             "read the plugin's WARN (aws-ofi-nccl, SHARP/IBext): provider, libfabric version and "
                             "the NIC it names")),
    ("no_interface", _simple("nccl.transport/no-usable-interface", "NCCL found no usable socket interface",
                             "NCCL_SOCKET_IFNAME (or NCCL_OOB_NET_IFNAME) names no interface that is up with an "
                             "address on this host, or none in the subnet of NCCL_COMM_ID: fix the setting")),
    ("socket_connect", _connect),
    ("duplicate_gpu", _simple("nccl.transport/duplicate-gpu", "two ranks were given the same GPU",
                              "give each rank its own GPU (CUDA_VISIBLE_DEVICES / LOCAL_RANK -> cuda device)")),
    ("version_mismatch", _simple("nccl.transport/version-mismatch", "ranks run different NCCL versions",
                                 "run the same container/NCCL build on every node")),
    ("rank_count_mismatch", _simple("nccl.transport/rank-count-mismatch",
                                    "the processes disagree on the number of ranks of the communicator",
                                    "every process must be launched with the same world size (WORLD_SIZE / nranks) "
                                    "and the same NCCL unique id: check the launcher's configuration")),
    ("collective_mismatch", _collective("nccl.transport/collective-mismatch",
                                        "ranks called different collectives (or sizes)")),
    ("collective_hang", _collective("nccl.transport/collective-mismatch-suspected",
                                    "NCCL suspects the ranks called different collectives: the job is stalled")),
)
CONSEQUENCES = ("peer_lost", "proxy")


def error_findings(log: NcclLog, f: Findings) -> None:
    """The root cause among NCCL's WARN lines, the lines that only follow from it as evidence."""
    later = log.of(*CONSEQUENCES)
    oom = log.of("cuda_oom")
    if oom:
        net = log.of("socket_connect", "ib_completion", *CONSEQUENCES)
        f.add("nccl.transport/cuda-oom", f"CUDA out of memory in NCCL on {_who(oom)}"
              + ("; the socket errors on other ranks follow from it" if net else ""),
              [*[e.line for e in oom[:QUOTED]], *[e.line for e in net[:FOLLOW]], *_consequences(log)],
              "the process ran out of GPU memory while NCCL set up its buffers: lower the job's memory use "
              "(batch size, NCCL_BUFFSIZE, NCCL_NCHANNELS) or free the GPU (another process?); not a network fault")
        _unread(log, f, set())
        return
    found = False
    for kind, report in ROOTS:
        errs = log.of(kind)
        if errs:
            report(log, errs, f, _consequences(log, later if not found else ()))
            found = True
    said: set[str] = set()
    if not found:
        said = _unexplained(log, later, f)
    elif log.connect_retries and not log.of("socket_connect"):
        _retrying(log, f)
    _lesser(log, f)
    _unread(log, f, said)


def _unread(log: NcclLog, f: Findings, said: set[str]) -> None:
    """Every WARN line no rule reads (kind "other") that no finding quotes already: said, never dropped."""
    f.unread(CHECK, "NCCL", [e.line for e in log.of("other") if e.line not in said],
             "read the NCCL WARN lines and the lines before them (NCCL_DEBUG=INFO): NCCL prints WARN for errors "
             "('messages indicating a fatal error', src/debug.cc); the host, device and call named are where to look")


def _retrying(log: NcclLog, f: Findings) -> None:
    """Connects NCCL retried (INFO lines) whose outcome the capture does not show as a failure."""
    r = log.connect_retries
    d = r[-1].detail
    peers = list(dict.fromkeys(e.detail["peer"] for e in r if e.detail.get("peer")))
    n = f" (last: {d['n']}/{d['max']})" if d.get("max") else ""
    f.add("nccl.transport/connect-retrying", f"NCCL retried {len(r)} {d.get('call', 'connect')}(s)"
          + (f" to {', '.join(peers[:NAMED])}" if peers else "") + f" on {_who(r)}: {d.get('why', '')}{n}",
          [e.line for e in r[:QUOTED]] + ([f"{len(r)} retry line(s) in all"] if len(r) > QUOTED else []),
          "NCCL could not reach a peer (its bootstrap root or a rank) for a while: check that every process started, "
          "that NCCL_SOCKET_IFNAME names an interface every host reaches (routes, firewalls: 'No route to host'), and "
          "whether the job went on or failed after these lines")


def _unexplained(log: NcclLog, later: list[NcclError], f: Findings) -> set[str]:
    """No root-cause WARN: a lost peer, a connect NCCL kept retrying before the job failed, a failed
    NCCL call whose WARN is not one we know, or a framework's report that NCCL failed. The lines
    these findings read (not to be said again as unread)."""
    lost = log.of("peer_lost")
    if lost:
        _peer_lost(log, lost, f, _consequences(log))
        return set()
    failed = [e for e in log.of("other", "proxy") if e.fatal]
    ended = bool(failed or log.job_errors or log.failed)
    if log.connect_retries and ended:
        _connect(log, log.connect_retries, f, [e.line for e in failed[:FOLLOW]] + log.job_errors[:FOLLOW]
                 + list(log.failed.values())[:FOLLOW] + _consequences(log))
        return {e.line for e in failed[:FOLLOW]}
    if ended:
        lines = [e.line for e in failed[:QUOTED]] + log.job_errors[:FOLLOW] + list(log.failed.values())[:FOLLOW]
        what = _warn_text(failed[0])[:TEXT] if failed else (log.job_errors or ["an NCCL call returned an error"])[0][:TEXT]
        f.add("nccl.transport/nccl-error", f"NCCL call failed on {_who(failed) if failed else 'a rank'}: {what}",
              lines + _consequences(log), _NCCL_ERROR_REMEDY)
        return {e.line for e in failed[:QUOTED]}
    if log.connect_retries:
        _retrying(log, f)
    return set()


def _lesser(log: NcclLog, f: Findings) -> None:
    """WARNs that do not end the job by themselves: an HCA NCCL skipped, a non-fatal IB event."""
    skipped = log.of("ib_device_skipped")
    if skipped:
        names = sorted({e.detail["hca"] for e in skipped})
        f.add("nccl.transport/ib-device-unusable", f"NCCL could not open {', '.join(names)} on {_who(skipped)} and runs "
                                          "without it", [e.line for e in skipped[:QUOTED]],
              "check the HCA (ibv_devinfo, ibstat, dmesg mlx5_core) and the job's access to /dev/infiniband")
    events = log.of("ib_event")
    if events:
        f.add("nccl.transport/ib-async-event", f"IB async event on {_who(events)}: {events[0].detail['event']}",
              [e.line for e in events[:QUOTED]], "check the port (ibstat) and the subnet manager's log for that port")
    benign = log.of("benign")
    if benign:
        f.add("nccl.transport/nonfatal-warn", f"NCCL warned and carried on on {_who(benign)}: "
              f"{_warn_text(benign[0])[:TEXT]}" + (f" (+{len(benign) - 1} more)" if len(benign) > 1 else ""),
              [e.line for e in benign[:QUOTED]],
              "NCCL ignored or clamped a setting (NCCL_* in the job's environment), could not use CollNet, or saw a "
              "socket interface without a PCI device: fix the setting or the interface it names")


# ---------------------------------------------------------------------------------------
# transport: sockets and interfaces


def _bad_networks(prof: Profile) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    out = []
    for net in prof.get("nccl.bad_networks") or []:
        try:
            out.append(ipaddress.ip_network(str(net), strict=False))
        except ValueError:
            continue
    return out


# names only a host's own ports carry (IPoIB ib0/ibp*, udev's predictable enp*/ens*/eno*/enx*, bonds): an
# address of theirs in Docker's default range is the site's own subnet (a container sees that bridge as eth0)
_HOST_PORT = lazyre.compile(r"^(?:ib|en[a-zA-Z]|bond|team)")


def bad_interface(name: str, addr: str, prof: Profile) -> str:
    """Why NCCL cannot reach other nodes over this interface ("" when it can, or it is unknown):
    loopback, container and VM bridges (nccl.bad_interfaces), an address on a network that only
    reaches the host itself (nccl.bad_networks, Docker's default bridge, unless the interface is
    one of the host's own ports)."""
    prefixes = [p for p in (prof.get("nccl.bad_interfaces") or []) if isinstance(p, str)]
    if name and (name == "lo" or any(name.startswith(p) for p in prefixes)):
        return name
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return ""
    if ip.is_loopback:
        return f"{name} ({addr})"
    if _HOST_PORT.match(name):
        return ""
    hit = next((n for n in _bad_networks(prof) if ip.version == n.version and ip in n), None)
    return f"{name} ({addr} in {hit})" if hit is not None else ""


def _paths(p: NcclProc) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(interfaces that carry NCCL traffic, interfaces only listed): the socket transport's
    interfaces when it is the network, the bootstrap and the IB out-of-band interface."""
    listed = list(zip(p.interfaces, p.addresses + [""] * len(p.interfaces), strict=False))
    used = [(p.bootstrap, p.bootstrap_addr), (p.oob, p.oob_addr)]
    if p.net == "Socket":
        return used + listed, []
    if p.socket_bootstrap_only and listed:  # NCCL 2.4 bootstraps over the first socket interface
        return used + listed[:1], listed[1:]
    return used, listed


def interface_findings(procs: Sequence[NcclProc], prof: Profile, scope: Scope, f: Findings) -> None:
    """Bad interfaces: FAIL where they carry NCCL traffic (the socket transport, the bootstrap, the
    IB out-of-band), WARN where they are only listed, a note where the log proves one node."""
    carried: dict[str, list[NcclProc]] = {}
    listed: dict[str, list[NcclProc]] = {}
    for p in procs:
        used, only = _paths(p)
        for name, addr in used:
            if (why := bad_interface(name, addr, prof)):
                carried.setdefault(why, []).append(p)
        for name, addr in only:
            if (why := bad_interface(name, addr, prof)):
                listed.setdefault(why, []).append(p)
    remedy = ("set NCCL_SOCKET_IFNAME to the data-plane interface (e.g. '=eth0' or '^lo,docker,virbr'); loopback, "
              "container and VM bridges do not reach other nodes")
    for why, ps in {**listed, **carried}.items():
        ev = [x.evidence.get(k, "") for x in ps[:FOLLOW] for k in ("socket", "net", "bootstrap") if x.evidence.get(k)]
        if scope.one_node:
            f.add("nccl.transport/bad-interface-single-node", f"NCCL lists {why} on {_labels(ps)}; the log shows one node, "
                                                     "where it carries no traffic between nodes", ev, remedy)
        elif why in carried:
            f.add("nccl.transport/bad-interface", f"NCCL bound {why} on {_labels(ps)}", ev, remedy)
        else:
            f.add("nccl.transport/bad-interface-listed", f"NCCL's socket interface list includes {why} on {_labels(ps)} "
                                                "(not its data path now)", ev, remedy)


def socket_findings(procs: Sequence[NcclProc], prof: Profile, scope: Scope, f: Findings) -> None:
    """The TCP socket transport: FAIL across nodes, WARN when nothing shows several nodes, a note
    on a log that proves one node (NCCL's network then carries nothing)."""
    socket = [p for p in procs if p.net == "Socket"]
    expect = str(prof.get("nccl.expect_net") or "").upper()
    if not socket:
        return
    if scope.one_node or expect == "SOCKET":
        f.note(f"NCCL's network is TCP sockets on {_labels(socket)}"
               + ("; the log shows one node, so no traffic crosses it" if scope.one_node else
                  f" (nccl.expect_net = {expect})"))
        return
    why = list(dict.fromkeys(line for p in procs for line in p.fallback))
    virtual = sorted({n for p in socket for n in p.virtual_nics})
    ev = [*[p.evidence.get("channel_net") or p.evidence.get("socket") or p.evidence.get("net", "") for p in socket[:QUOTED]],
          *why[:FOLLOW],
          next((p.evidence["virtual_nic"] for p in socket if "virtual_nic" in p.evidence), "")]
    note = f" (virtual NIC {', '.join(virtual)}: no PCI device)" if virtual else ""
    remedy = ("NCCL found no usable IB/RoCE device: check ibstat (ports Active), that the container sees "
              "/dev/infiniband and libibverbs (rdma-core), NCCL_IB_DISABLE / NCCL_IB_HCA / NCCL_NET in the job env")
    if scope.multi:
        code = "nccl.transport/socket-fallback" if why else "nccl.transport/socket-transport"
        f.add(code, f"NCCL runs across nodes over TCP sockets on {_labels(socket)}{note}"
              + ("; IB could not be used" if why else ""), [*ev, *scope.multi[:FOLLOW]], remedy)
    else:
        f.add("nccl.transport/socket-single-host", f"NCCL uses TCP sockets, not IB/RoCE, on {_labels(socket)}{note}; nothing "
                                          "in the log shows whether the job spans nodes", ev, remedy)


# ---------------------------------------------------------------------------------------
# transport: HCAs, plugins, subnets, versions, NVLS, GDR


def _host_hcas(procs: Sequence[NcclProc], host: str) -> tuple[list[str], int, list[NcclProc]]:
    """A host's HCAs NCCL uses, its GPU count (devices seen, or localRanks), its IB processes."""
    local = [p for p in procs if p.host == host and p.net and p.net != "Socket"]
    gpus = len({d for p in procs if p.host == host for d in p.devs})
    count = max([gpus, *(p.local_ranks for p in procs if p.host == host and p.local_ranks)])
    return sorted({h.split(":")[0] for p in local for h in p.hcas}), count, local


def _expected_hcas(hcas: list[str], prof: Profile) -> tuple[int | None, str]:
    """How many HCAs NCCL should use on a node: ib.hca_count, else a share of the RDMA devices
    the mlx5_N names prove the node has."""
    count = int(prof.get("ib.hca_count") or 0)
    if count:
        return count, f"ib.hca_count = {count} ({prof.source('ib.hca_count')})"
    idx = [int(m.group(1)) for h in hcas if (m := _MLX5.match(h))]
    if len(idx) != len(hcas):  # names that do not count the node's devices
        return None, ""
    share = float(prof.get("nccl.min_hca_share") or 0)
    bound = max(idx) + 1
    return math.ceil(bound * share), (f"the device names reach mlx5_{max(idx)}: the node has at least {bound} RDMA "
                                      f"devices (nccl.min_hca_share = {share:g}, {prof.source('nccl.min_hca_share')})")


def hca_findings(procs: Sequence[NcclProc], prof: Profile, f: Findings) -> None:
    for host in sorted({p.host for p in procs}):
        hcas, gpus, local = _host_hcas(procs, host)
        if not hcas:
            continue
        where = host or "a process the log does not name"
        env = [f"NCCL_IB_HCA={local[0].ib_hca_env}"] if local[0].ib_hca_env else []
        if gpus > len(hcas):  # hcas is not empty, so this is two GPUs or more
            f.add("nccl.transport/fewer-hcas-than-gpus", f"{len(hcas)} HCA(s) ({', '.join(hcas)}) for {gpus} GPUs on "
                                                f"{where}: fewer NICs than GPUs, inter-node bandwidth is capped by the NICs",
                  [local[0].evidence.get("net", ""), *env],
                  "if the node has more rails, list them all in NCCL_IB_HCA (or unset it); check that every HCA is "
                  "Active (ibstat)")
            continue
        want, why = _expected_hcas(hcas, prof)
        if want is not None and len(hcas) < want:
            f.add("nccl.transport/hcas-subset", f"NCCL uses {len(hcas)} HCA(s) ({', '.join(hcas)}) on {where}, fewer than "
                                       f"the {want} expected", [local[0].evidence.get("net", ""), why, *env],
                  "the other HCAs are excluded by NCCL_IB_HCA or their ports are not Active: check ibstat and the "
                  "job's NCCL_IB_HCA")


def _subnets(procs: Sequence[NcclProc]) -> dict[str, set[str]]:
    """Host -> the networks of its bootstrap/OOB addresses (IPv4; the usual data-plane prefix)."""
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


def fabric_findings(procs: Sequence[NcclProc], prof: Profile, f: Findings) -> None:
    """A network plugin where IB verbs are expected; RoCE hosts on different subnets."""
    expect = str(prof.get("nccl.expect_net") or "").upper()
    plugin = [p for p in procs if p.net and p.net != "Socket" and not p.net.upper().startswith("IB")]
    if plugin and expect == "IB":
        f.add("nccl.transport/plugin-not-ib", f"NCCL uses network plugin '{plugin[0].net}', not IB verbs",
              [plugin[0].evidence.get("net", ""), f"nccl.expect_net = {expect} ({prof.source('nccl.expect_net')})"],
              "if this plugin is intended (cloud fabric), set nccl.expect_net in a site profile")
    nets = _subnets([p for p in procs if any(h.endswith("/RoCE") for h in p.hcas)])
    if nets and not set.intersection(*nets.values()):  # one host's set is never disjoint from itself
        f.add("nccl.transport/roce-cross-subnet", "RoCE hosts bootstrap from different subnets (" + ", ".join(
            f"{h} {'/'.join(sorted(s))}" for h, s in sorted(nets.items())) + "): RDMA between them must be routed",
              [p.evidence.get("bootstrap") or p.evidence.get("net", "") for p in procs[:QUOTED]],
              "check that the hosts reach each other on the interface NCCL uses (NCCL_SOCKET_IFNAME); on RoCE the "
              "GID index and routing must allow routed (RoCEv2) traffic between those subnets")


def version_findings(procs: Sequence[NcclProc], f: Findings) -> None:
    by_v = Counter(p.version for p in procs if p.version)
    if len(by_v) > 1:
        f.add("nccl.transport/mixed-versions", f"mixed NCCL versions: {', '.join(sorted(by_v))}",
              [f"{v}: {n} process(es)" for v, n in sorted(by_v.items())], "run the same container/NCCL build on every node")


def nvls_findings(procs: Sequence[NcclProc], prof: Profile, f: Findings) -> None:
    """NVLink SHARP: requested (NCCL_ALGO names NVLS) but 0 channels or no multicast; not available
    where the profile's GPUs have it; otherwise a note."""
    if any(p.nvls for p in procs):
        return
    off = [p for p in procs if p.nvls is False]
    requested = [p for p in procs if "NVLS" in p.env.get("NCCL_ALGO", "").upper() or p.env.get("NCCL_NVLS_ENABLE") == "1"]
    disabled = [p for p in procs if p.env.get("NCCL_NVLS_ENABLE") == "0"]
    devs = ", ".join(sorted({d for p in off for d in p.devs}, key=int))
    if disabled:
        f.note(f"NVLS disabled by NCCL_NVLS_ENABLE=0 on {_labels(disabled)}")
    elif off and requested:
        f.add("nccl.transport/nvls-requested-not-used", f"NVLS was requested but NCCL built no NVLS channels on {_labels(off)}",
              [requested[0].evidence.get("env:NCCL_ALGO") or requested[0].evidence.get("env:NCCL_NVLS_ENABLE", ""),
               off[0].evidence.get("nvls", "")],
              "NVLS needs NVSwitch multicast: the fabric manager running, driver >= R530 with CUDA 12.1+, and in "
              "containers the IMEX channel device; check nvidia-smi -q (Fabric) and the fabric manager log")
    elif off and prof.get("nccl.expect_nvls"):
        f.add("nccl.transport/nvls-unavailable", f"NVLS (NVLink SHARP) not available on device(s) {devs}",
              [off[0].evidence.get("nvls", ""), f"nccl.expect_nvls ({prof.source('nccl.expect_nvls')})"],
              "check the fabric manager (systemctl status nvidia-fabricmanager), the driver/CUDA versions (R530+, "
              "CUDA 12.1+) and, in containers, the IMEX channel device")
    elif off:
        f.note(f"NVLS (NVLink SHARP) not available on device(s) {devs}: NCCL uses ring/tree on NVLink "
               "(normal on GPUs without NVSwitch multicast, such as A100)")


def gdr_findings(procs: Sequence[NcclProc], f: Findings) -> None:
    """GPUDirect RDMA off for an HCA (no nvidia-peermem, no DMA-BUF, a GPU without it): WARN; off
    by topology distance for every network channel a process shows (none via .../GDRDMA, no pair
    Enabled): WARN; off by distance for some GPU/NIC pairs only: NCCL's own choice, a note."""
    off = [p for p in procs if p.gdr_off and p.net != "Socket"]
    if off:
        hcas = list(dict.fromkeys(h for p in off for h in p.gdr_off))
        f.add("nccl.transport/gdr-disabled", f"GPUDirect RDMA is off for HCA {', '.join(hcas[:HCAS_SHOWN])} on "
                                             f"{_labels(off)}: NCCL stages network traffic through host memory",
              [p.evidence["gdr_off"] for p in off[:QUOTED]],
              "load nvidia-peermem (modprobe nvidia-peermem; nv_peer_mem on old MOFED) or use DMA-BUF (NCCL 2.13+, "
              "kernel 5.12+, open GPU kernel modules); GPUs without GPUDirect RDMA (GeForce) cannot have it")
        return
    far = [p for p in procs if p.gdr_distance]
    staged = [p for p in far if p.gdr is False and p.net_channels and p.net != "Socket"]
    if staged:
        f.add("nccl.transport/gdr-off-by-distance", f"GPUDirect RDMA is not used on {_labels(staged)}: NCCL finds "
                                                    "the GPU and its NIC too far apart, and its network channels stage "
                                                    "traffic through host memory",
              [*[p.gdr_distance for p in staged[:QUOTED]], *[p.evidence.get("channel_net", "") for p in staged[:FOLLOW]]],
              "the GPU and the HCA are not under one PCIe switch (nvidia-smi topo -m: PHB/NODE/SYS between them): "
              "put a NIC under each GPU's PCIe switch (PIX/PXB), or, where the platform forwards peer-to-peer "
              "traffic across the host bridge, raise NCCL_NET_GDR_LEVEL; check that ACS is off on the PCIe switches")
        return
    if far:
        f.note(f"GPUDirect RDMA not used for some GPU/NIC pairs by topology distance (NCCL's choice, NCCL_NET_GDR_LEVEL) "
               f"on {_labels(far)}")


def link_layer_findings(procs: Sequence[NcclProc], f: Findings) -> None:
    """NET/IB ports of two link layers (InfiniBand and RoCE) in the job: a port cannot reach the
    peers' ports of the other layer, and NCCL spreads channels over every port it lists."""
    layers: dict[str, list[str]] = {}
    users: dict[str, list[NcclProc]] = {}
    for p in procs:
        for h in p.hcas:
            port, _, layer = h.partition("/")
            if layer and port not in layers.setdefault(layer, []):
                layers[layer].append(port)
            if layer:
                users.setdefault(layer, []).append(p)
    if len(layers) < 2:
        return
    # the layer with fewer ports is the odd one; on a tie RoCE (an Ethernet port among IB rails is the usual slip)
    odd = min(layers, key=lambda k: (len(layers[k]), k != "RoCE", k))
    listed = "; ".join(f"{k}: {', '.join(v[:HCAS_SHOWN])}" for k, v in sorted(layers.items()))
    ps = list({id(p): p for p in users[odd]}.values())
    f.add("nccl.transport/mixed-link-layers", f"NCCL's NET/IB ports mix link layers ({listed}) on {_labels(ps)}: "
                                              f"the {odd} port(s) cannot reach the other layer's peers",
          [p.evidence.get("net", "") for p in ps[:QUOTED]],
          f"list only the compute ports of one link layer in NCCL_IB_HCA (e.g. exclude "
          f"{', '.join(x.split(':')[0] for x in layers[odd][:NAMED])} with NCCL_IB_HCA=^...), and check why a "
          f"{odd} port is on the node's compute fabric (ibstat: Link layer)")


def _ofi_provider(lines: Sequence[str]) -> str:
    m = next((m for m in (re.search(r"provider (\S+) (?:output|returned)", x) for x in lines) if m), None)
    return m.group(1) if m else ""


def ofi_findings(log: NcclLog, procs: Sequence[NcclProc], scope: Scope, f: Findings) -> None:
    """aws-ofi-nccl / libfabric found no provider (no EFA device): a note when a network runs
    anyway, FAIL when NCCL then ran over TCP sockets across nodes or the job failed, else WARN."""
    if not log.ofi_unavailable:
        return
    prov = _ofi_provider(log.ofi_unavailable)
    what = f"libfabric provider '{prov}' found no device" if prov else "the OFI plugin found no usable provider"
    running = log.ofi_selected + [p.net for p in procs if p.net and p.net != "Socket"]
    if running:
        f.note(f"{what}, but NCCL runs over {running[0]}")
        return
    ev = log.ofi_unavailable[:QUOTED]
    remedy = ("check that the job sees its EFA devices (fi_info -p efa; /dev/infiniband/uverbs* in the container; the "
              "pod's vpc.amazonaws.com/efa resource), that the EFA driver and libfabric of the EFA installer are "
              "installed, and FI_PROVIDER / OFI_NCCL_* in the job's environment")
    socket = [p for p in procs if p.net == "Socket"]
    failed = bool(log.job_errors or log.failed or any(e.fatal for e in log.errors))
    hosts = _hosts(procs)
    where = f" on {', '.join(hosts[:NAMED])}" if hosts else ""
    if failed or (socket and not scope.one_node):
        f.add("nccl.transport/ofi-no-provider-fallback", f"{what}{where}: no RDMA network for NCCL, and the job "
              + ("failed" if failed else f"ran over TCP sockets ({_labels(socket)})"), ev, remedy)
    else:
        f.add("nccl.transport/ofi-no-provider", f"{what}{where}: no RDMA (EFA) network for NCCL; the log does not "
                                                "show what NCCL used instead", ev, remedy)


# ---------------------------------------------------------------------------------------
# the check


def _transport_facts(log: NcclLog, procs: list[NcclProc], scope: Scope) -> dict[str, Any]:
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
        "hosts": _hosts(procs),
        "multi_node": True if scope.multi else False if scope.single else None,
        "scope_evidence": scope.multi or scope.single,
        "errors": [{"kind": e.kind, "host": e.host, "dev": e.dev, "rank": e.rank, "fatal": e.fatal, "line": e.line}
                   for e in log.errors],
        "ranks": [{"host": p.host, "pid": p.pid, "rank": p.rank, "nranks": p.nranks, "mpi_rank": p.mpi_rank,
                   "devices": sorted(p.devs, key=int), "net": p.net or None, "intra": sorted(p.intra),
                   "interfaces": p.interfaces, "hcas": p.hcas, "oob": p.oob or None, "bootstrap": p.bootstrap or None,
                   "gdr": p.gdr, "nvls": p.nvls, "version": p.version or None} for p in procs],
    }


def _ok_summary(procs: list[NcclProc], facts: dict[str, Any]) -> str:
    nets = sorted({p.net for p in procs if p.net})
    hcas = facts["hcas"]
    if nets:
        ok = f"NET/{'/'.join(nets)} on {len(procs)} process(es)" + (
            f" via {', '.join(hcas[:HCAS_SHOWN])}" + (" ..." if len(hcas) > HCAS_SHOWN else "") if hcas else "")
    elif facts["intra"]:
        ok = f"single node: {', '.join(facts['intra'])} between {len(procs)} process(es) (no network transport)"
    else:
        ok = f"{len(procs)} NCCL process(es), no network transport in the log (single node, or the log starts late)"
    if facts["nvls"] is not None:
        ok += f"; NVLS {'on' if facts['nvls'] else 'off'}"
    return ok


def grade_transport(ctx: CheckContext) -> Result:
    log: NcclLog | None = ctx.facts("nccl-log")
    if log is None:
        return ctx.finding("nccl.transport/no-log", "no NCCL log was captured", evidence=["the nccl-log input is missing"],
                           remedy="rerun the job with NCCL_DEBUG=INFO and capture its output")
    if not log.procs:
        return ctx.finding("nccl.transport/not-recognised", "not recognised: NCCL_DEBUG lines `host:pid:tid [dev] NCCL "
                                                   "INFO|WARN message`", evidence=log.warns[:FOLLOW] or log.versions[:FOLLOW],
                           remedy="rerun the job with NCCL_DEBUG=INFO and capture the lines as NCCL prints them")
    procs = sorted(log.procs.values(), key=lambda p: (p.rank if p.rank is not None else math.inf, p.host, p.pid))
    scope = job_scope(procs, ctx.profile)
    facts = _transport_facts(log, procs, scope)
    f = Findings()
    ofi_findings(log, procs, scope, f)  # first: no EFA provider is the cause of the socket fallback or failure that follows
    error_findings(log, f)
    socket_findings(procs, ctx.profile, scope, f)
    interface_findings(procs, ctx.profile, scope, f)
    hca_findings(procs, ctx.profile, f)
    fabric_findings(procs, ctx.profile, f)
    version_findings(procs, f)
    nvls_findings(procs, ctx.profile, f)
    gdr_findings(procs, f)
    link_layer_findings(procs, f)
    proof = [procs[0].evidence.get(k, "") for k in ("net", "intra", "nvls") if procs[0].evidence.get(k)]
    return f.result(ctx, _ok_summary(procs, facts), facts, proof)


register(Check(
    id=CHECK,
    title="NCCL transport",
    grade=grade_transport,
    probes=(),
    inputs=("nccl-log",),
    profile_keys={"nccl.expect_net": str, "nccl.bad_interfaces": list, "nccl.bad_networks": list,
                  "nccl.min_hca_share": (int, float), "nccl.expect_nvls": bool, "nccl.max_gpus_per_node": int},
    catches="NCCL errors with their root cause (CUDA OOM, /dev/shm full, P2P disabled on NVLink, IB completion errors, "
            "queue-pair setup, verbs calls, failed or retried connects, lost peers, ranks calling different collectives, "
            "any WARN no rule reads), TCP sockets across nodes, lo/docker/virbr "
            "bound, fewer HCAs than GPUs, IB and RoCE ports mixed, hosts on different subnets, mixed versions, NVLS "
            "requested but unused, GPUDirect RDMA off, aws-ofi-nccl/libfabric without an EFA provider",
    node_local=False,
    in_run=False,
))

__all__ = ["bad_interface", "error_findings", "grade_transport", "interface_findings", "job_scope", "socket_findings"]
