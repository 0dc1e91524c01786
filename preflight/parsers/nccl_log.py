"""NCCL_DEBUG=INFO/WARN logs of every NCCL era as facts: per process, the transport NCCL chose
and what it used; the errors it reported and the lines that merely follow from them.

A line is `host:pid:tid [dev] [source:line ]NCCL INFO|WARN message`; NCCL 2.3 writes `INFO` /
`WARN` without the word NCCL and puts a `file.cu:line` source before or after the level; a
redacted or older line may lack the tid (`host:XXXXXX [5]`). `[dev]` is the local CUDA device;
the global rank of a process comes from `comm 0x... rank R nranks N` (2.3: `rank R nranks N`).
Launchers' prefixes (`[1,3]<stdout>:`, mpirun `[N] `, `srun -l`, `[rankN]:`) and time stamps
are peeled by framing (an mpirun tag is `line.rank`: the MPI rank, not the device).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from preflight.framing import DETECT_ENDS, Doc, Line
from preflight.parsers.base import Format, ParserSpec

LINE = re.compile(
    r"(?P<host>[A-Za-z0-9][\w.-]*):(?P<pid>[^:\s\[\]]+)(?::(?P<tid>\d+))? \[(?P<dev>\d+)\] "
    r"(?:(?P<src>[\w./-]+\.(?:cc|cu|c|h|cpp|hpp):\d+) )?(?:NCCL )?(?P<level>INFO|WARN|TRACE|ABORT) (?P<msg>.*)$")
_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)(?:\+cuda([\d.]+))?")
_COMM = re.compile(r"(?:\bcomm 0x[0-9a-f]+ )?\brank (\d+) nranks (\d+)")
_NET_USING_IB = re.compile(r"NET/IB\s*:\s*Using (.*?)(?:;\s*OOB\s+(\S+?):([^<\s]*)(?:<\d+>)?)?\s*$")
_NET_USING_SOCKET = re.compile(r"NET/Socket\s*:\s*Using (.*)$")
_OLD_IFACE = re.compile(r"^NET\s*:\s*Using interface ([\w.@-]+):([^<\s]+)")
_INTERNAL_SOCKET = re.compile(r"Using internal Network Socket|NET/Socket : \d+ interfaces? found")
_HCA_ENTRY = re.compile(r"\[\d+\]([\w.-]+:\d+)(?:/(\w+))?")
_IF_ENTRY = re.compile(r"\[\d+\]([\w.@-]+):([^<\s]+)(?:<\d+>)?")
_USING_NETWORK = re.compile(r"Using network (.+?)\s*$")
_BOOTSTRAP = re.compile(r"Bootstrap\s*:\s*Using (\S+?):([^<\s]+)")
_CHANNEL = re.compile(r"Channel \d+(?:/\d+)? : (\d+)\[[0-9a-fx]+\] -> (\d+)\[[0-9a-fx]+\](?: \[\w+\])? via (\S+(?: pointer)?)")
_NVLS_ON = re.compile(r"NVLS multicast support is available|NVLS comm 0x|\b([1-9]\d*) nvls channels")
_NVLS_OFF = re.compile(r"NVLS multicast support is not available|NCCL_NVLS_ENABLE set by environment to 0|"
                       r"\b0 nvls channels")
_IB_HCA_ENV = re.compile(r"NCCL_IB_HCA set (?:by environment )?to (\S+)")
_CASCADE = re.compile(r"^(?:[\w./-]+\.(?:cc|cu|c|h|cpp):\d+ )?-> \d+\b")
_NO_DEVICE = re.compile(r"NET/IB\s*:\s*No device found", re.I)
_SERVICE_CLOSED = re.compile(r"\[Service thread\] Connection closed by localRank (\d+)")

# WARN messages by kind: (kind, pattern). The first that matches wins.
ERRORS: list[tuple[str, re.Pattern[str]]] = [
    ("cuda_oom", re.compile(r"Cuda failure 'out of memory'|Failed to CUDA (?:calloc|malloc)|cudaMalloc.*failed|"
                            r"Cuda failure 2\b", re.I)),
    ("cuda", re.compile(r"Cuda failure|CUDA error", re.I)),
    ("ib_completion", re.compile(r"Got completion from peer (?P<peer>[^\s<,]+)(?:<\d+>)?\s+with (?:error|status)[ =]?"
                                 r"(?P<code>\d+)(?:.*?vendor err (?P<vendor>\d+))?(?:\s*\((?P<dir>\w+)\))?", re.I)),
    ("qp_setup", re.compile(r"Call to ibv_modify_qp failed with (?:error )?(?P<errno>\d+)?\s*(?P<why>[^,]*)"
                            r"(?:, on dev (?P<dev>[\w.-]+)(?::(?P<port>\d+))?)?(?:, curr state (?P<cur>\w+))?"
                            r"(?:, next state (?P<next>\w+))?(?:, local GID index (?P<gid>\d+))?", re.I)),
    ("ib_no_device", re.compile(r"NET/IB\s*:\s*No device found", re.I)),
    ("libibverbs", re.compile(r"Failed to open libibverbs", re.I)),
    ("socket_closed", re.compile(r"Connection closed by remote peer(?:\s+(?P<peer>\S+))?", re.I)),
    ("socket", re.compile(r"Socket recv failed|socketPoll|Connection refused|Connection reset|Call to (?:recv|connect)"
                          r"|socket(?:Progress|Wait)", re.I)),
]
# IB work-completion status codes (ibv_wc_status) NCCL prints as "error N"
WC_STATUS = {
    4: "local protection error: the NIC rejected a memory access (memory registration / GPUDirect RDMA: "
       "nvidia-peermem, ACS or IOMMU settings), not a link down",
    5: "work request flushed: the queue pair had already failed (a consequence of an earlier error)",
    10: "remote access error: the peer rejected the memory key (registration on the remote side)",
    12: "transport retry counter exceeded: the peer stopped answering (link down, peer crashed, or a fabric/"
        "routing problem)",
    13: "RNR retry counter exceeded: the receiver was not ready (peer stalled or crashed)",
}


@dataclass
class NcclError:
    kind: str
    host: str
    pid: str
    dev: str
    line: str
    rank: int | None = None  # the process's global rank when known
    detail: dict[str, str] = field(default_factory=dict)


@dataclass
class NcclProc:
    host: str
    pid: str
    devs: set[str] = field(default_factory=set)
    rank: int | None = None
    nranks: int | None = None
    mpi_rank: int | None = None  # the launcher's rank tag on its lines
    version: str = ""
    net: str = ""  # IB, Socket or a plugin network name
    hcas: list[str] = field(default_factory=list)  # mlx5_0:1/IB
    interfaces: list[str] = field(default_factory=list)  # socket interfaces NCCL uses
    addresses: list[str] = field(default_factory=list)  # their addresses
    oob: str = ""  # IB out-of-band interface
    oob_addr: str = ""
    bootstrap: str = ""
    bootstrap_addr: str = ""
    gdr: bool | None = None
    nvls: bool | None = None
    intra: set[str] = field(default_factory=set)  # P2P/CUMEM, SHM/direct/direct ... (within the node)
    ib_hca_env: str = ""
    evidence: dict[str, str] = field(default_factory=dict)  # kind -> first line proving it

    @property
    def label(self) -> str:
        who = f"rank {self.rank}" if self.rank is not None else f"GPU{min(self.devs, key=int)} pid {self.pid}" \
            if self.devs else f"pid {self.pid}"
        return f"{self.host} {who}"


@dataclass
class NcclLog:
    procs: dict[tuple[str, str], NcclProc] = field(default_factory=dict)
    errors: list[NcclError] = field(default_factory=list)
    warns: list[str] = field(default_factory=list)  # every WARN line
    cascade: int = 0  # "-> N" return-code lines that follow an error
    service_closed: list[str] = field(default_factory=list)  # "[Service thread] Connection closed by localRank N"
    versions: list[str] = field(default_factory=list)  # "NCCL version X" lines without a process prefix
    lines: int = 0

    @property
    def recognised(self) -> bool:
        return bool(self.lines)

    def of(self, *kinds: str) -> list[NcclError]:
        return [e for e in self.errors if e.kind in kinds]


def _transport(name: str) -> str:
    base = name.split("/")[0]
    return "IB" if base == "IB" else "Socket" if base == "Socket" else base


def _line(log: NcclLog, ln: Line) -> None:
    text = ln.text.strip()
    m = LINE.search(text)
    if not m:
        mv = _VERSION.search(text)
        if mv and text.startswith("NCCL version"):
            log.versions.append(mv.group(1) + (f"+cuda{mv.group(2)}" if mv.group(2) else ""))
        return
    log.lines += 1
    key = (m.group("host"), m.group("pid"))
    p = log.procs.get(key)
    if p is None:
        p = log.procs[key] = NcclProc(host=m.group("host"), pid=m.group("pid"))
    p.devs.add(m.group("dev"))
    if ln.rank is not None and p.mpi_rank is None:
        p.mpi_rank = ln.rank
    msg = m.group("msg").strip()
    if m.group("level") == "WARN":
        log.warns.append(text)
        for kind, pattern in ERRORS:
            e = pattern.search(msg)
            if e:
                log.errors.append(NcclError(kind, p.host, p.pid, m.group("dev"), text,
                                            detail={k: v for k, v in e.groupdict().items() if v}))
                break
        else:
            log.errors.append(NcclError("other", p.host, p.pid, m.group("dev"), text))
        return
    if _NO_DEVICE.search(msg):  # INFO on most versions: the reason for a socket fallback
        log.errors.append(NcclError("ib_no_device", p.host, p.pid, m.group("dev"), text))
        return
    if _CASCADE.search(msg) or _CASCADE.search(f"{m.group('src') or ''} {msg}".strip()):
        log.cascade += 1
        return
    if _SERVICE_CLOSED.search(msg):
        log.service_closed.append(text)
        return
    _info(p, msg, text)


def _info(p: NcclProc, msg: str, line: str) -> None:
    """An INFO message: what it says about the process (identity, network, NVLS)."""
    _identity(p, msg, line)
    for pattern, on_match in _NETWORK_LINES:  # the first that matches says what the line is
        m = pattern.search(msg)
        if m is not None:
            on_match(p, m, line)
            break
    _nvls(p, msg, line)


def _identity(p: NcclProc, msg: str, line: str) -> None:
    """The NCCL version, the rank in the largest communicator, the NCCL_IB_HCA setting."""
    mv = _VERSION.search(msg)
    if mv and not p.version:
        p.version = mv.group(1) + (f"+cuda{mv.group(2)}" if mv.group(2) else "")
        p.evidence.setdefault("version", line)
    mc = _COMM.search(msg)
    if mc and (p.nranks is None or int(mc.group(2)) > p.nranks):  # the largest communicator is the world
        p.rank, p.nranks = int(mc.group(1)), int(mc.group(2))
    if (mh := _IB_HCA_ENV.search(msg)) is not None:
        p.ib_hca_env = mh.group(1)


def _on_net_ib(p: NcclProc, mi: re.Match[str], line: str) -> None:
    p.net = "IB" if not p.net or p.net == "Socket" else p.net
    p.hcas = [f"{h}/{t}" if t else h for h, t in _HCA_ENTRY.findall(mi.group(1))]
    p.oob, p.oob_addr = (mi.group(2) or p.oob), (mi.group(3) or p.oob_addr)
    p.evidence["net"] = line


def _on_net_socket(p: NcclProc, ms: re.Match[str], line: str) -> None:
    if p.net != "IB":
        p.net = "Socket"
        p.evidence["net"] = line
    entries = _IF_ENTRY.findall(ms.group(1))
    p.interfaces, p.addresses = [n for n, _ in entries], [a for _, a in entries]
    p.evidence["socket"] = line


def _on_old_iface(p: NcclProc, mo: re.Match[str], line: str) -> None:
    """NCCL 2.3: one line per interface."""
    p.interfaces.append(mo.group(1))
    p.addresses.append(mo.group(2))
    p.evidence.setdefault("socket", line)


def _on_internal_socket(p: NcclProc, m: re.Match[str], line: str) -> None:
    if p.net != "IB":
        p.net = "Socket"
        p.evidence.setdefault("net", line)


def _on_using_network(p: NcclProc, mu: re.Match[str], line: str) -> None:
    p.net = _transport(mu.group(1).strip()) if p.net in ("", "Socket") or mu.group(1).strip() != "Socket" else p.net
    p.evidence["using_network"] = line
    p.evidence.setdefault("net", line)


def _on_bootstrap(p: NcclProc, mb: re.Match[str], line: str) -> None:
    p.bootstrap, p.bootstrap_addr = mb.group(1), mb.group(2)
    p.evidence.setdefault("bootstrap", line)


def _on_channel(p: NcclProc, mch: re.Match[str], line: str) -> None:
    """A ring/tree channel: over the network (NET/IB, NET/Socket ...) or within the node."""
    via = mch.group(3)
    if via.startswith("NET/"):
        transport = _transport(via[4:])
        p.net = p.net or transport
        p.evidence.setdefault("net", line)
        p.evidence.setdefault("channel_net", line)
        if transport == "IB":
            p.gdr = "GDRDMA" in via or bool(p.gdr)
    else:
        p.intra.add(via)
        p.evidence.setdefault("intra", line)


# INFO lines that say which network a process uses, and how: tried in order, the first match wins
_NETWORK_LINES: tuple[tuple[re.Pattern[str], Callable[[NcclProc, re.Match[str], str], None]], ...] = (
    (_NET_USING_IB, _on_net_ib), (_NET_USING_SOCKET, _on_net_socket), (_OLD_IFACE, _on_old_iface),
    (_INTERNAL_SOCKET, _on_internal_socket), (_USING_NETWORK, _on_using_network), (_BOOTSTRAP, _on_bootstrap),
    (_CHANNEL, _on_channel),
)


def _nvls(p: NcclProc, msg: str, line: str) -> None:
    """NVLink SHARP: off as soon as a line says so, on when a line shows it in use."""
    if _NVLS_OFF.search(msg):
        if p.nvls is None:
            p.nvls = False
            p.evidence.setdefault("nvls", line)
    elif _NVLS_ON.search(msg):
        p.nvls = True
        p.evidence["nvls"] = line


def parse(doc: Doc) -> NcclLog:
    log = NcclLog()
    for ln in doc.lines:
        _line(log, ln)
    for p in log.procs.values():  # a bare "NCCL version" line belongs to the processes that printed none
        if not p.version and len(set(log.versions)) == 1:
            p.version = log.versions[0]
    ranks = {(p.host, p.pid): p.rank for p in log.procs.values()}
    for e in log.errors:
        e.rank = ranks.get((e.host, e.pid))
    return log


_DETECT = re.compile(r"[A-Za-z0-9][\w.-]*:[^:\s\[\]]+(?::\d+)? \[\d+\] (?:[\w./-]+:\d+ )?(?:NCCL )?(?:INFO|WARN) ")


def detect(doc: Doc) -> bool:
    return any(_DETECT.search(ln.text) and ("NCCL" in ln.text or ".cu:" in ln.text)
               for ln in (doc.peel_hit(h) for h in doc.scan((" INFO ", " WARN "), ends=DETECT_ENDS)))


FORMATS = [Format("nccl-log", detect=detect, priority=40, description="NCCL_DEBUG=INFO/WARN log (any NCCL era)")]
PARSERS = [ParserSpec("nccl-log", parse)]

__all__ = ["ERRORS", "FORMATS", "LINE", "PARSERS", "WC_STATUS", "NcclError", "NcclLog", "NcclProc", "detect", "parse"]
