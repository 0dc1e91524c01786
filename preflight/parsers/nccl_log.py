"""NCCL_DEBUG=INFO/WARN logs of every NCCL era (2.3 - 2.28) as facts: per process, the transport
NCCL chose and what it used (HCAs, socket interfaces, bootstrap, NVLS, GDR), what the log says
about the job's size (hosts, nNodes, localRanks, network channels); the errors NCCL reported,
each classified, and the lines that only follow from them.

A line is `host:pid:tid [dev] [source:line ]NCCL INFO|WARN message`; NCCL 2.3 writes `INFO` /
`WARN` without the word NCCL and puts a `file.cu:line` source before or after the level; a
redacted or older line may lack the tid (`host:XXXXXX [5]`) or hide the host (`<cluster_name>`,
`[hostname]`, `***`); a paste may cut the prefix off (`init.cc:1247 NCCL WARN msg`, `NCCL INFO
msg`): those lines are one unnamed process (on the host their framing names, if any), and a
CloudWatch export may glue its time stamp to the host. `[dev]` is the local CUDA device;
the global rank of a process comes from `comm 0x... rank R nranks N` (2.3: `rank R nranks N`,
2.21+: `rank R nRanks N nNodes M localRanks L`). Launchers' prefixes and time stamps are peeled
by framing (an mpirun tag is `line.rank`: the MPI rank, not the device).

Which network a process uses: `Using network X` (2.5+), `Using internal|external Network X`
(2.3), `NET/IB : Using [0]mlx5_0:1/IB ...`, the network channels (`via NET/IB/0/GDRDMA`). A
`NET/Socket : Using ...` line means the socket transport, except in NCCL 2.4, which lists the
socket interfaces before it loads a plugin or IB (the bootstrap uses them): a `NET/Plugin` line
after it on the same process marks that layout. The aws-ofi-nccl plugin's `NET/OFI` lines and
libfabric's own `libfabric:pid:time:...<warn>` lines say whether a libfabric provider (EFA) was
found. The messages and their sources are listed in `nccl.inventory.toml`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from preflight import lazyre
from preflight.framing import DETECT_ENDS, Doc, Line
from preflight.parsers.base import Format, ParserSpec

# the source before WARN is NCCL's __FILE__:__LINE__, or a plugin's function name (aws-ofi-nccl passes
# __PRETTY_FUNCTION__: "int nccl_net_ofi_foo(bar*):1463")
# NCCL 2.30.7+ writes the function after the source: `file:line (func) NCCL WARN` (src/debug.cc ncclDebugLogV;
# a lambda's __func__ is `operator()`)
_FUNC = r"(?: \((?:[^()\s]|\(\))*\))?"
# The host: a name, or what a paste put in its place (`<cluster_name>`, `[hostname]`, `${HOST}`, `(host)`,
# `***`, `gpu***`, `...`); a redacted pid or tid is any token (`host:XXXXXX [5]`, `host:<pid>:<tid> [0]`).
_HOST = (r"(?:<[^<>\s]{1,64}>|\[[A-Za-z][^\[\]\s]{0,63}\]|\$?\{[^{}\s]{1,64}\}|\([^()\s]{1,64}\)|(?:\.\.\.|\u2026)[\w.-]*|"
         r"[A-Za-z0-9*][\w.*-]*)")
# a CloudWatch table export glues its ISO time stamp to the line: "...07:00ip-10-0-0-1:79:79 [0] NCCL"
_GLUED_TIME = r"(?:\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)?"
LINE = lazyre.compile(
    _GLUED_TIME + r"(?P<host>" + _HOST + r"):(?P<pid>[^:\s\[\]]+)(?::(?P<tid>[^:\s\[\]]+))? \[(?P<dev>\d+)\] "
    r"(?:(?P<src>[\w./-]+\.(?:cc|cu|c|h|cpp|hpp):\d+)" + _FUNC + r" (?:NCCL )?|(?:[^\[\]]*?:\d+" + _FUNC + r" )?NCCL )?"
    r"(?P<level>INFO|WARN|TRACE|ABORT) (?P<msg>.*)$")
# NCCL before 2.3 (`[dev] include/socket.h:185 WARN msg`, no word NCCL) with its `host:pid:tid` hidden behind
# a placeholder of several words ("*server name*"), a time stamp or nothing: the source file after `[dev]` marks it,
# and the line is one unnamed process (the prefix names no host)
MASKED_LINE = lazyre.compile(r"^(?:\S[^\[\]]{0,63}? )?\[(?P<dev>\d+)\] (?P<src>[\w./-]+\.(?:cc|cu|c|h|cpp|hpp):\d+)" + _FUNC +
                         r" (?:NCCL )?"
                         r"(?P<level>INFO|WARN) (?P<msg>.*)$")
# An NCCL line whose `host:pid:tid [dev]` prefix a paste left out: `init.cc:1247 NCCL WARN msg`,
# `NCCL INFO msg` (the word NCCL is required: the 2.3 layout without it is read only with its prefix)
BARE_LINE = lazyre.compile(r"(?:^|[\s`'\"|>(\[:])(?:(?P<src>[\w./-]{1,200}:\d+)" + _FUNC + r" )?NCCL (?P<level>INFO|WARN|TRACE|ABORT) "
                       r"(?P<msg>.*)$")
_VERSION = lazyre.compile(r"NCCL version (\d+\.\d+\.\d+)(?:[-+]cuda([\d.]+))?")
_COMM = lazyre.compile(r"(?:\bcomm 0x[0-9a-f]+ )?\brank (?P<rank>\d+) nranks (?P<nranks>\d+)"
                   r"(?: nNodes (?P<nnodes>\d+) localRanks (?P<local>\d+))?", re.I)
_ENV = lazyre.compile(r"\b(NCCL_[A-Z0-9_]+) set (?:by environment )?to (\S(?:.*\S)?)")
_NET_USING_IB = lazyre.compile(r"NET/IB\s*:\s*Using (?!interface)(.*?)(?:;\s*OOB\s+(\S+?):([^<\s]*)(?:<\d+>)?)?\s*$")
_OLD_IB_DEV = lazyre.compile(r"NET/IB\s*:\s*\[\d+\]\s*([\w.-]+:\d+)/(\w+)")
_OLD_IB_OOB = lazyre.compile(r"NET/IB\s*:\s*Using interface ([\w.@-]+) for sideband")
_NET_USING_SOCKET = lazyre.compile(r"NET/Socket\s*:\s*Using(?! \d+ threads)\s*(.*)$")
_OLD_IFACE = lazyre.compile(r"^NET\s*:\s*Using interface ([\w.@-]+):([^<\s]*)")
_INTERNAL_SOCKET = lazyre.compile(r"NET/Socket\s*:\s*\d+ interfaces? found")
# ' [0]mlx5_0:1/IB', and in a merged device (2.19+) ' [0]={[0] mlx5_0:1/RoCE, [1] mlx5_1:1/RoCE}'
_HCA_ENTRY = lazyre.compile(r"\[\d+\] ?([\w.+-]+:\d+)(?:/(\w+))?")
_IF_ENTRY = lazyre.compile(r"\[\d+\]([\w.@-]+):([^<\s]*)(?:<\d+>)?")
_USING_NETWORK = lazyre.compile(r"Using (?:network|(?:internal|external) Network) (.+?)\s*$")
_BOOTSTRAP = lazyre.compile(r"Bootstrap\s*:\s*Using\s*(?:\[\d+\])?([\w.@-]+):([^<\s]*)")
_CHANNEL = lazyre.compile(r"\b(?:Channel|Ring) \d+(?:/\d+)? : (\d+)(?:\[[0-9a-fx]+\])? -> (\d+)(?:\[[0-9a-fx]+\])?"
                      r"(?: \[\w+\])? via (.+?)\s*$")
_COLLNET = lazyre.compile(r"\bCollNet \d+(?:/\d+)? : \d+ \[\w+\] via COLLNET/")
_NVLS_ON = lazyre.compile(r"NVLS multicast support is available|NVLS comm 0x|\bNVLS Head\b|\b([1-9]\d*) nvls channels")
_NVLS_OFF = lazyre.compile(r"NVLS multicast support is not available|NCCL_NVLS_ENABLE set by environment to 0")
_NVLS_CHANNELS = lazyre.compile(r"\b(\d+) nvls channels")
_CASCADE = lazyre.compile(r"^(?:(?P<src>[\w./-]+\.(?:cc|cu|c|h|cpp)):\d+ )?-> (?P<code>\d+)\b(?P<tag>.*)$")
_FAILURE_SOURCES = {"init", "group", "enqueue", "proxy", "bootstrap", "transport", "collectives"}
IN_PROGRESS = "7"  # ncclResult_t ncclInProgress (src/nccl.h.in)
_PLUGIN = lazyre.compile(r"NET/Plugin\s*:|Plugin Path|P2P plugin|Loaded net plugin")
_FALLBACK = lazyre.compile(r"NET/IB\s*:\s*No device found|Failed to open libibverbs|NET/IB\s*:\s*No IP interface found", re.I)
# aws-ofi-nccl could not start: no libfabric provider (EFA) fits, or its protocols failed to initialise
# (src/nccl_ofi_net.cpp, nccl_ofi_rdma.cpp, nccl_ofi_sendrecv.cpp; NCCL_OFI_WARN/INFO prefix 'NET/OFI ')
OFI_UNAVAILABLE = lazyre.compile(
    r"NET/OFI\s+(?:No eligible providers|Could(?:n't| not) find (?:any|an) optimal provider|"
    r"Unable to find a (?:usable provider|protocol that worked)|OFI fi_getinfo\(\) call failed|"
    r"Failed to initiali[sz]e (?:\w+ )?protocol|\S+ initiali[sz]ation failed|No viable endpoint found|"
    r"EFA provider requires)", re.I)
_OFI_SELECTED = lazyre.compile(r"NET/OFI Selected [Pp]rovider is ([^,\s(]+)")
# libfabric's own log (FI_LOG_LEVEL): "libfabric:PID:TIME:[DOMAIN:]PROV:SUBSYS:FUNC():LINE<LEVEL> MSG"
# (src/log.c ofi_log(): 1.5 - 1.17 without the domain field, 1.18+ with it)
LIBFABRIC = lazyre.compile(r"libfabric:\d+:\d+:(?:[^:\s]*:){2,3}[^:\s]*\(\):\d+<(?P<level>\w+)> (?P<msg>.*)$")
# src/fabric.c fi_getinfo_(): a provider that found no device (warn: always for an empty list, and for
# an error when the hints named that provider)
_OFI_NO_PROVIDER = lazyre.compile(r"fi_getinfo: provider (?P<prov>\S+) (?:output empty list|returned -\d+)")
_VIRTUAL_NIC = lazyre.compile(r"Could not (?:find real path of|get speed from) /sys/class/net/([\w.@-]+)/")
# GPUDirect RDMA: per HCA (2.3 'for GPU %d / HCA %s (no module)', 2.4 'for GPU %d[%d] / HCA %d '%s' (no
# module or not supported by GPU)', 2.5 - 2.12 'for HCA %d '%s' (no module)', 2.13+ 'NET/%s : GPU Direct RDMA
# %s for HCA %d '%s''), or per GPU/NIC pair by topology ('(distance %d > %d)', a normal choice)
_GDR = lazyre.compile(r"(?:NET/(?P<net>[^:]+?)\s*:\s*)?GPU Direct RDMA (?P<state>Enabled|Disabled) for "
                  r"(?:GPU \S+ / )?HCA (?P<idx>[^\s']+)(?: '(?P<hca>[^']*)')?(?: \((?P<why>[^)]*)\))?")
# A connect (or accept) NCCL retries: INFO lines. 2.4 - 2.23 socket.h/socket.cc "Call to connect returned %s,
# retrying" (2.7+: every 1000th refused retry), 2.24 - 2.26 "%s: connect returned %s, retrying (%d/%ld) after sleep
# for %u msec", 2.27+ "%s: connect to %s returned %s, retrying (%d/%ld) ..." (misc/socket.cc, 2.30 os/linux.cc);
# "Call to accept returned %s, retrying" (2.24+). When the retries run out NCCL prints a WARN ("exceeded retries",
# "exceeded error retry count"), read as socket_connect.
CONNECT_RETRY = lazyre.compile(
    r"(?:Call to )?(?P<call>connect|accept) (?:to (?P<peer>[^\s<]+)(?:<\d+>)? )?returned (?P<why>[^,]+?),? retrying"
    r"(?: \((?P<n>\d+)/(?P<max>\d+)\))?")
_SERVICE_CLOSED = lazyre.compile(r"\[Service thread\] Connection closed by localRank (\d+)")
# A framework's message after NCCL returned an error (PyTorch: "NCCL error in: file:line, <string>,
# NCCL version X" and "Last error:" followed by NCCL's last WARN text): proof that the job failed
_TORCH_NCCL_ERROR = lazyre.compile(r"NCCL error in: \S+, (.+?)(?:, NCCL version [\d.]+\S*)?\s*$")
# nccl-tests' NCCLCHECK: "<host>: Test NCCL failure <file>:<line> '<ncclGetErrorString> / <ncclGetLastError>'"
_TESTS_FAILURE = lazyre.compile(r"Test NCCL failure \S+ '(?P<result>[^']*?) / (?P<last>[^']*)'")
_NCCL_RESULT = lazyre.compile(r"\b(ncclSystemError|ncclRemoteError|ncclInternalError|ncclUnhandledCudaError|"
                          r"ncclInvalidUsage|ncclInvalidArgument)\b|remote process exited or there was a network error|"
                          r"unhandled (?:system|cuda) error")

# WARN messages by kind: (kind, pattern). The first that matches wins; "other" is none of them.
ERRORS: list[tuple[str, re.Pattern[str]]] = [
    ("benign", lazyre.compile(
        r"Could not find real path|greater than the maximum allowed|Cannot initialize CollNet|CollNet currently only|"
        r"(?:min|max)CTAs|NCCL_CGA_CLUSTER_SIZE|NCCL_WORK_FIFO|old driver, disabling|Profiler init failed|"
        r"GID table changed|Failed to set CPU affinity|remote FLID configured|CC On,|"
        r"Failed to open mlx5dv|splitShare \d+ is not a valid", re.I)),
    ("fallback", _FALLBACK),
    ("ofi_unavailable", OFI_UNAVAILABLE),
    ("collective_hang", lazyre.compile(r"may be hanging, this may be caused by a collective mismatch"
                                   r"(?: around rank (?P<rank>\d+))?", re.I)),
    ("collective_mismatch", lazyre.compile(r"Mismatched collective detected(?:.*? around rank (?P<rank>\d+))?|"
                                       r"collective mismatch error", re.I)),
    ("rank_count_mismatch", lazyre.compile(r"Bootstrap Root : mismatch in (?:rank count|info)", re.I)),
    ("cuda_oom", lazyre.compile(r"Cuda failure (?:2 )?'?out of memory|Cuda failure 2\b|Failed to CUDA (?:calloc|malloc|host)|"
                            r"cudaMalloc.*failed|CUDA_ERROR_OUT_OF_MEMORY|cuMem\w+.* out of memory", re.I)),
    # /dev/shm could not hold a shared-memory segment (src/misc/shmutils.cc ncclShmOpen(); 2.4 - 2.11 include/shm.h
    # SYSCHECK "posix_fallocate"; 2.30 src/os/linux.cc): the communicator is not created
    ("shm", lazyre.compile(
        r"Error while (?:creating|attaching to) shared memory segment (?P<path>\S+) \(size (?P<size>\d+)\)"
        r"(?:, error: (?P<why>[^(]*?)\s*(?:\(\d+\))?$)?|"
        r"Error: (?:failed to create shared memory file|failed to extend|Could not map) (?P<path2>\S+?),? "
        r"(?:to (?P<size2>\d+) bytes|size \d+|error)(?:.*?error:? (?P<why2>[^(]*?)\s*(?:\(\d+\))?$)?|"
        r"Call to (?:posix_fallocate|shm_open|fallocate) failed ?: ?(?P<why3>.*)$|Could not map (?P<path4>/\S+)", re.I)),
    # NVML reports P2P read/write not OK between GPUs joined by NVLink (src/graph/paths.cc p2pCanConnect():
    # ncclUnhandledCudaError unless NCCL_IGNORE_DISABLED_P2P=1, which silences it and stages through host memory)
    ("p2p_nvlink_disabled", lazyre.compile(r"P2P is disabled between NVLINK connected GPUs (?P<a>\d+) and (?P<b>\d+)", re.I)),
    # cudaDeviceEnablePeerAccess failed (src/transport/p2p.cc, net.cc: ncclInternalError)
    ("peer_access", lazyre.compile(r"failed to peer with device (?P<peer>\d+)(?:\(=(?P<bus>[0-9a-fx]+)\))?:\s*(?P<err>\d+)?"
                               r"\s*(?P<why>.*)$", re.I)),
    ("cuda", lazyre.compile(r"Cuda failure|CUDA error|CUDA_ERROR_|Cuda API|Failed to (?:set|create) CUDA|"
                        r"Failed to set CUDA device|CUDA driver version is insufficient", re.I)),
    ("ib_async", lazyre.compile(
        r"NET/IB\s*:\s*(?:(?P<hca>[\w.-]+):(?P<port>\d+) )?(?:async fatal event|Got (?:non-fatal )?async (?:error )?event)"
        r"(?: on (?:CQ|QP|SRQ)[^:]*)?\s*:\s*(?P<event>.*?)\s*$|communicator encountered a fatal error", re.I)),
    ("ib_completion", lazyre.compile(
        r"Got completion (?:from peer (?P<peer>[^\s<,]+)(?:<\d+>)? )?with (?:error |status=?)(?:(?P<status>\w+)\()?"
        r"(?P<code>\d+)\)?(?:.*?vendor[ _]err[ =](?P<vendor>\d+))?(?:.*?\bhca (?P<hca>[\w.-]+))?|"
        # 2.30 src/transport/net_ib/p2p.cc: a failed work completion without resiliency (ncclRemoteError); the
        # status follows on its own "Got completion ... with status=" line
        r"Got CQE with error \((?:devIndex=(?P<devidx>\d+))?.*?\((?P<dir>send|recv)\)", re.I)),
    ("qp_setup", lazyre.compile(r"Call to ibv_modify_qp failed with (?:error )?(?P<errno>\d+)?\s*(?P<why>[^,]*?)"
                            r"(?: errno \d+)?(?:, on dev (?P<dev>[\w.-]+)(?::(?P<port>\d+))?)?"
                            r"(?:, curr state (?P<cur>\w+), next state (?P<next>\w+))?"
                            r"(?:, local GID index (?P<gid>\d+))?(?:,.*)?$", re.I)),
    ("ib_device_skipped", lazyre.compile(r"NET/IB\s*:\s*Unable to (?:open|query) (?:device|port(?:_num)?) (?P<hca>[\w.-]+)",
                                     re.I)),
    ("ib_verbs", lazyre.compile(r"Call to (?P<call>ibv_\w+) failed(?: with error (?P<why>.*?))?(?: errno \d+)?\s*$|"
                            r"(?P<post>ibv_post_(?:send|recv))\(\) failed(?: with error (?P<pwhy>[^,]*))?", re.I)),
    ("ib_config", lazyre.compile(r"incompatible devices|Remote \S+ device is incompatible", re.I)),
    ("plugin_error", lazyre.compile(r"NET/OFI .*(?:completed with error|Couldn't open a fabric|error (?:entry|reading))|"
                                r"NET/OFI .*fi_\w+ failed|Failed to initialize any NET plugin|Error: network .* not found|"
                                r"Network returned 0 device", re.I)),
    ("no_interface", lazyre.compile(r"no socket interface found|no interface found|No usable listening interface|"
                                r"no device found (?:matching|after excluding)|Invalid NCCL_COMM_ID", re.I)),
    ("socket_connect", lazyre.compile(
        r"[Cc]onnect(?: to (?P<peer>[^\s<]+)(?:<\d+>)?)?(?: poll\(\))? (?:failed|returned)(?: with error)?\s*:?\s*"
        r"(?P<why>[^,]*)|"
        r"exceeded (?:retries|timeouts|error retry count)|Accept failed:?\s*(?P<awhy>.*)$", re.I)),
    ("duplicate_gpu", lazyre.compile(r"Duplicate GPU detected", re.I)),
    ("version_mismatch", lazyre.compile(r"Mismatched NCCL version", re.I)),
    ("peer_lost", lazyre.compile(r"Connection closed by remote peer(?:\s+(?P<peer>[^\s<]+))?|Call to recv (?:from (?P<rpeer>"
                             r"[^\s<]+)(?:<\d+>)? )?failed\s*:?\s*(?P<why>.*)$|Socket recv failed|socket progress error|"
                             r"[Mm]essage truncated|Could not receive type from localRank|Software caused connection abort",
                             re.I)),
    ("proxy", lazyre.compile(r"Proxy Call to rank|\[Proxy Service \d*\] Failed to execute|Failed to execute operation|"
                         r"Proxy Service.*Poll failed|Error encountered progressing operation", re.I)),
]
# WARN kinds that always end the job (NCCL returns an error right after printing them)
FATAL = frozenset({"cuda_oom", "cuda", "shm", "p2p_nvlink_disabled", "peer_access", "ib_completion", "qp_setup", "ib_verbs", "ib_config", "plugin_error",
                   "no_interface", "socket_connect", "duplicate_gpu", "version_mismatch", "peer_lost", "proxy",
                   "collective_mismatch", "rank_count_mismatch"})
# ibv_event_type_str() strings of events that end the QP, CQ or port
_FATAL_EVENT = lazyre.compile(r"fatal|catastrophic|CQ error|work queue.*error|port error|migration request error|"
                          r"communicator encountered", re.I)
# IB work-completion status codes (ibv_wc_status) NCCL prints as "error N" / "status=N"
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
    fatal: bool = False  # pragma: no mutate (every caller passes it) - the job ended on it: a job-ending kind, or a failure cascade followed
    quoted: bool = False  # a framework's quote of NCCL's last error (no NCCL line of its own)


@dataclass
class NcclProc:
    host: str
    pid: str
    devs: set[str] = field(default_factory=set)
    rank: int | None = None
    nranks: int | None = None
    nnodes: int | None = None
    local_ranks: int | None = None
    comm_ranks: dict[int, set[int]] = field(default_factory=dict)  # communicator size -> the ranks this process printed
    mpi_rank: int | None = None  # the launcher's rank tag on its lines
    version: str = ""
    net: str = ""  # IB, Socket or a plugin network name ("" = the log does not say)
    socket_listed: bool = False  # a NET/Socket interface list (NCCL 2.4: also printed when IB is used)
    socket_bootstrap_only: bool = False  # that list came before the plugin/IB lines (the 2.4 layout)
    hcas: list[str] = field(default_factory=list)  # mlx5_0:1/IB
    interfaces: list[str] = field(default_factory=list)  # socket interfaces NCCL lists
    addresses: list[str] = field(default_factory=list)  # their addresses
    oob: str = ""  # IB out-of-band interface
    oob_addr: str = ""
    bootstrap: str = ""
    bootstrap_addr: str = ""
    gdr: bool | None = None
    gdr_off: list[str] = field(default_factory=list)  # HCAs NCCL says GPUDirect RDMA is off for: "mlx5_0 (no module)"
    gdr_distance: str = ""  # a line saying GDR is off for a GPU/NIC pair by topology distance (NCCL's choice)
    nvls: bool | None = None
    nvls_channels: int | None = None
    intra: set[str] = field(default_factory=set)  # P2P/CUMEM, SHM/direct/direct ... (within the node)
    net_channels: int = 0  # channels over a network transport (NET/..., COLLNET)
    env: dict[str, str] = field(default_factory=dict)  # NCCL_* set by environment
    fallback: list[str] = field(default_factory=list)  # lines saying IB could not be used
    virtual_nics: set[str] = field(default_factory=set)  # socket interfaces without a device (veth, bridge, lo)
    evidence: dict[str, str] = field(default_factory=dict)  # kind -> first line proving it

    @property
    def ib_hca_env(self) -> str:
        return self.env.get("NCCL_IB_HCA", "")

    @property
    def label(self) -> str:
        if self.rank is not None:
            who = f"rank {self.rank}"
        elif self.devs:
            who = f"GPU{min(self.devs, key=int)} pid {self.pid}"
        else:
            who = f"pid {self.pid}" if self.pid else "(lines without NCCL's host:pid prefix)"
        return f"{self.host or 'a process'} {who}"


@dataclass
class NcclLog:
    procs: dict[tuple[str, str], NcclProc] = field(default_factory=dict)
    errors: list[NcclError] = field(default_factory=list)
    warns: list[str] = field(default_factory=list)  # every WARN line
    cascade: int = 0  # "-> N" return-code lines that follow an error
    failed: dict[tuple[str, str], str] = field(default_factory=dict)  # process -> first failure-cascade line
    service_closed: list[str] = field(default_factory=list)  # "[Service thread] Connection closed by localRank N"
    connect_retries: list[NcclError] = field(default_factory=list)  # connects/accepts NCCL retried (INFO lines)
    versions: list[str] = field(default_factory=list)  # "NCCL version X" lines without a process prefix
    job_errors: list[str] = field(default_factory=list)  # a framework's "NCCL error in: ..." lines
    ofi_unavailable: list[str] = field(default_factory=list)  # the OFI plugin / libfabric found no provider
    ofi_selected: list[str] = field(default_factory=list)  # providers the OFI plugin selected
    lines: int = 0

    @property
    def recognised(self) -> bool:
        return bool(self.lines)

    def of(self, *kinds: str) -> list[NcclError]:
        return [e for e in self.errors if e.kind in kinds]


def _transport(name: str) -> str:
    """The network's name in `NET/<name>/<dev>...` or `Using network <name>`: IB, Socket, a plugin's."""
    return name.strip().split("/")[0].strip()


def classify(msg: str) -> tuple[str, dict[str, str]]:
    """The kind of a WARN message and the fields its pattern names ("other": none matched)."""
    for kind, pattern in ERRORS:
        m = pattern.search(msg)
        if m:
            detail = {k: v.strip() for k, v in m.groupdict().items() if v and v.strip()}
            if kind == "ib_async" and (not _FATAL_EVENT.search(msg) or "non-fatal" in msg.lower()):
                kind = "ib_event"
            return kind, detail
    return "other", {}


def _proc(log: NcclLog, host: str, pid: str, ln: Line) -> NcclProc:
    """The process of `host:pid` (a line without NCCL's prefix: the host its framing names, no pid)."""
    p = log.procs.get((host, pid))
    if p is None:
        p = log.procs[(host, pid)] = NcclProc(host=host, pid=pid)
    if ln.rank is not None and p.mpi_rank is None:
        p.mpi_rank = ln.rank
    return p


def _bare(log: NcclLog, lines: list[Line], i: int, text: str) -> None:
    """A line that is not NCCL's INFO/WARN: a bare version line, libfabric's own log, or a
    framework's NCCL error report."""
    mv = _VERSION.search(text)
    mf = LIBFABRIC.search(text)
    if mf is not None:
        if mf.group("level") == "warn" and _OFI_NO_PROVIDER.search(mf.group("msg")):
            log.ofi_unavailable.append(text)
    elif mv and text.startswith("NCCL version"):
        log.versions.append(mv.group(1) + (f"+cuda{mv.group(2)}" if mv.group(2) else ""))
    elif _TORCH_NCCL_ERROR.search(text) or _NCCL_RESULT.search(text):
        log.job_errors.append(text)
        if (mt := _TESTS_FAILURE.search(text)) is not None:
            _last_error(log, mt.group("last"))
    elif text.startswith("Last error"):  # "Last error:" then NCCL's message, on its line or the next
        rest = text.partition(":")[2]
        _last_error(log, rest if rest.strip() or i + 1 == len(lines) else lines[i + 1].text)


def _last_error(log: NcclLog, text: str) -> None:
    """NCCL's last WARN as a framework quotes it (ncclGetLastError): a root cause when we know its kind."""
    text = text.strip()
    kind, detail = classify(text)
    if text and kind not in ("benign", "other"):
        log.errors.append(NcclError(kind, "", "", "", text, detail=detail, fatal=True, quoted=True))


def _warn(log: NcclLog, p: NcclProc, dev: str, msg: str, text: str) -> None:
    log.warns.append(text)
    kind, detail = classify(msg)
    if kind == "fallback":
        p.fallback.append(text)
    elif kind == "ofi_unavailable":
        log.ofi_unavailable.append(text)
    elif (mv := _VIRTUAL_NIC.search(msg)) is not None:
        _on_virtual_nic(p, mv, text)
    log.errors.append(NcclError(kind, p.host, p.pid, dev, text, detail=detail, fatal=kind in FATAL))


def _line(log: NcclLog, lines: list[Line], i: int, host: str = "") -> None:
    """One line; `host`: the document's host (a pdsh/clush split), for lines without NCCL's prefix."""
    ln = lines[i]
    text = ln.text.strip()
    m = LINE.search(text)
    if m is not None:
        p = _proc(log, m.group("host"), m.group("pid"), ln)
        p.devs.add(m.group("dev"))
    elif (m := MASKED_LINE.search(text)) is not None:
        p = _proc(log, ln.host or host, "", ln)
        p.devs.add(m.group("dev"))
    elif "NCCL " in text and (m := BARE_LINE.search(text)) is not None:
        p = _proc(log, ln.host or host, "", ln)
    else:
        _bare(log, lines, i, text)
        return
    log.lines += 1
    msg = m.group("msg").strip()
    if m.group("level") == "WARN":
        _warn(log, p, m.groupdict().get("dev") or "", msg, text)
        return
    if m.group("level") != "INFO":
        return
    _ofi(log, msg, text)
    mc = _CASCADE.search(msg)  # INFO lines carry the source in the message: "init.cc:1079 -> 3"
    if mc:
        _on_cascade(log, p, mc, text)
        return
    if _SERVICE_CLOSED.search(msg):
        log.service_closed.append(text)
        return
    if (mr := CONNECT_RETRY.search(msg)) is not None:
        detail = {k: v.strip() for k, v in mr.groupdict().items() if v and v.strip()}
        log.connect_retries.append(NcclError("connect_retry", p.host, p.pid, m.groupdict().get("dev") or "", text,
                                             detail=detail))
        return
    _info(p, msg, text)


def _ofi(log: NcclLog, msg: str, text: str) -> None:
    """aws-ofi-nccl's INFO lines: the provider it selected, or that it found none."""
    if (ms := _OFI_SELECTED.search(msg)) is not None:
        log.ofi_selected.append(ms.group(1))
    elif OFI_UNAVAILABLE.search(msg):
        log.ofi_unavailable.append(text)


def _on_cascade(log: NcclLog, p: NcclProc, mc: re.Match[str], text: str) -> None:
    """`file:line -> N`: an error code handed up the stack. Through init, group, proxy, transport
    or bootstrap code, or on an NCCL thread, it proves the call failed (a helper's own `-> N`,
    such as a PCI path lookup, does not)."""
    log.cascade += 1
    base = (mc.group("src") or "").rpartition("/")[2].partition(".")[0]
    if mc.group("code") == IN_PROGRESS:  # ncclInProgress: a non-blocking call still running, not an error
        return
    if base in _FAILURE_SOURCES or "thread]" in mc.group("tag").lower():
        log.failed.setdefault((p.host, p.pid), text)


def _info(p: NcclProc, msg: str, line: str) -> None:
    """An INFO message: what it says about the process (identity, network, NVLS)."""
    _identity(p, msg, line)
    for pattern, on_match in _NETWORK_LINES:  # the first that matches says what the line is
        m = pattern.search(msg)
        if m is not None:
            on_match(p, m, line)
            break  # pragma: no mutate (no NCCL message matches two of these patterns: break = continue)
    _nvls(p, msg, line)


def _identity(p: NcclProc, msg: str, line: str) -> None:
    """The NCCL version, the rank in the largest communicator, the NCCL_* environment."""
    mv = _VERSION.search(msg)
    if mv and not p.version:
        p.version = mv.group(1) + (f"+cuda{mv.group(2)}" if mv.group(2) else "")
        p.evidence.setdefault("version", line)
    mc = _COMM.search(msg)
    if mc and (p.nranks is None or int(mc.group("nranks")) > p.nranks):  # the largest communicator is the world
        p.rank, p.nranks = int(mc.group("rank")), int(mc.group("nranks"))
    if mc:  # a process driving several GPUs (nccl-tests -g 8) prints one line per rank
        p.comm_ranks.setdefault(int(mc.group("nranks")), set()).add(int(mc.group("rank")))
        p.evidence.setdefault(f"comm:{mc.group('nranks')}", line)
    if mc and mc.group("nnodes"):
        p.nnodes, p.local_ranks = int(mc.group("nnodes")), int(mc.group("local"))
        p.evidence.setdefault("size", line)
    if (me := _ENV.search(msg)) is not None:
        p.env[me.group(1)] = me.group(2).removesuffix(".")
        p.evidence.setdefault(f"env:{me.group(1)}", line)


def _on_net_ib(p: NcclProc, mi: re.Match[str], line: str) -> None:
    p.net = "IB" if not p.net or p.net == "Socket" else p.net
    p.hcas = [f"{h}/{t}" if t else h for h, t in _HCA_ENTRY.findall(mi.group(1))]
    p.oob, p.oob_addr = (mi.group(2) or p.oob), (mi.group(3) or p.oob_addr)
    p.evidence["net"] = line


def _on_old_ib_dev(p: NcclProc, mo: re.Match[str], line: str) -> None:
    """NCCL 2.3: one `NET/IB: [N] mlx5_0:1/IB` line per device."""
    p.net = "IB" if not p.net or p.net == "Socket" else p.net
    entry = f"{mo.group(1)}/{mo.group(2)}"
    if entry not in p.hcas:
        p.hcas.append(entry)
    p.evidence.setdefault("net", line)


def _on_old_ib_oob(p: NcclProc, mo: re.Match[str], line: str) -> None:
    p.oob = mo.group(1)


def _on_net_socket(p: NcclProc, ms: re.Match[str], line: str) -> None:
    entries = _IF_ENTRY.findall(ms.group(1))
    if entries:
        p.interfaces, p.addresses = [n for n, _ in entries], [a for _, a in entries]
    p.socket_listed = True
    p.evidence["socket"] = line


def _on_old_iface(p: NcclProc, mo: re.Match[str], line: str) -> None:
    """NCCL 2.3: one line per interface."""
    if mo.group(1) not in p.interfaces:
        p.interfaces.append(mo.group(1))
        p.addresses.append(mo.group(2))
    p.socket_listed = True
    p.evidence.setdefault("socket", line)


def _on_internal_socket(p: NcclProc, m: re.Match[str], line: str) -> None:
    p.socket_listed = True
    p.evidence.setdefault("socket", line)


def _on_using_network(p: NcclProc, mu: re.Match[str], line: str) -> None:
    p.net = _transport(mu.group(1))
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
        p.net_channels += 1
        p.evidence.setdefault("net", line)
        p.evidence.setdefault("channel_net", line)
        if transport == "IB":
            p.gdr = "GDRDMA" in via or bool(p.gdr)
    else:
        p.intra.add(via)
        p.evidence.setdefault("intra", line)


def _on_collnet(p: NcclProc, m: re.Match[str], line: str) -> None:
    p.net_channels += 1
    p.evidence.setdefault("channel_net", line)


def _on_plugin(p: NcclProc, m: re.Match[str], line: str) -> None:
    """A NET/Plugin line after a socket list on a process with no network yet: NCCL 2.4's layout,
    where the socket list is printed for the bootstrap before the plugin and IB are tried."""
    if p.socket_listed and not p.net:
        p.socket_bootstrap_only = True


def _on_fallback(p: NcclProc, m: re.Match[str], line: str) -> None:
    """INFO on most versions: IB could not be used (the reason for a socket fallback)."""
    p.fallback.append(line)


def _on_virtual_nic(p: NcclProc, m: re.Match[str], line: str) -> None:
    p.virtual_nics.add(m.group(1))
    p.evidence.setdefault("virtual_nic", line)


def _on_gdr(p: NcclProc, m: re.Match[str], line: str) -> None:
    """GPUDirect RDMA on or off for an HCA (the module, the GPU, DMA-BUF), or off for one GPU/NIC
    pair by topology distance. The `NET/<name> :` it starts with names the network NCCL uses."""
    net = _transport(m.group("net") or "")
    if net == "Socket":  # the socket transport never has GPUDirect RDMA
        return
    if net and not p.net:
        p.net = net
        p.evidence.setdefault("net", line)
    why = m.group("why") or ""
    if why.startswith("distance"):
        p.gdr_distance = p.gdr_distance or line
        p.gdr = p.gdr or m.group("state") == "Enabled"
    elif m.group("state") == "Enabled":
        p.gdr = p.gdr if p.gdr is False else True
    else:
        p.gdr = False
        name = m.group("hca") or m.group("idx")
        p.gdr_off.append(f"{name} ({why})" if why else name)
        p.evidence.setdefault("gdr_off", line)


# INFO lines that say which network a process uses, and how: tried in order, the first match wins
_NETWORK_LINES: tuple[tuple[re.Pattern[str], Callable[[NcclProc, re.Match[str], str], None]], ...] = (
    (_NET_USING_IB, _on_net_ib), (_OLD_IB_DEV, _on_old_ib_dev), (_OLD_IB_OOB, _on_old_ib_oob),
    (_NET_USING_SOCKET, _on_net_socket), (_OLD_IFACE, _on_old_iface), (_INTERNAL_SOCKET, _on_internal_socket),
    (_USING_NETWORK, _on_using_network), (_BOOTSTRAP, _on_bootstrap), (_CHANNEL, _on_channel),
    (_COLLNET, _on_collnet), (_FALLBACK, _on_fallback), (_PLUGIN, _on_plugin), (_VIRTUAL_NIC, _on_virtual_nic),
    (_GDR, _on_gdr),
)


def _nvls(p: NcclProc, msg: str, line: str) -> None:
    """NVLink SHARP: off as soon as a line says so, on when a line shows it in use."""
    if (mn := _NVLS_CHANNELS.search(msg)) is not None:
        p.nvls_channels = int(mn.group(1))
        p.evidence.setdefault("nvls_channels", line)
    if _NVLS_OFF.search(msg) or p.nvls_channels == 0 and mn is not None:
        if p.nvls is None:
            p.nvls = False
            p.evidence.setdefault("nvls", line)
    elif _NVLS_ON.search(msg):
        p.nvls = True
        p.evidence["nvls"] = line


def _finish(log: NcclLog) -> None:
    """What only the whole log says: the socket transport of processes that named no network,
    the version of processes that printed none, ranks on errors, which errors ended the job."""
    for p in log.procs.values():
        if not p.net and ((p.socket_listed and not p.socket_bootstrap_only) or p.fallback):
            p.net = "Socket"
            p.evidence.setdefault("net", p.evidence.get("socket") or p.fallback[0])
        if not p.version and len(set(log.versions)) == 1:  # a bare "NCCL version" line belongs to them
            p.version = log.versions[0]
    ranks = {(p.host, p.pid): p.rank for p in log.procs.values()}
    for e in log.connect_retries:
        e.rank = ranks.get((e.host, e.pid))
    for e in log.errors:
        e.rank = ranks.get((e.host, e.pid))
        if (e.host, e.pid) in log.failed and e.kind not in ("benign", "fallback", "ib_event", "ofi_unavailable"):
            e.fatal = True


def parse(doc: Doc) -> NcclLog:
    log = NcclLog()
    lines = doc.lines
    for i in range(len(lines)):
        _line(log, lines, i, doc.host)
    _finish(log)
    return log


_DETECT = lazyre.compile(_HOST + r":[^:\s\[\]]+(?::[^:\s\[\]]+)? \[\d+\] (?:[\w./-]+:\d+" + _FUNC + r" |[^\[\]]*?:\d+" + _FUNC +
                     r" NCCL )?"
                     r"(?:NCCL )?(?:INFO|WARN) ")


# what _DETECT and the pre-2.3 WARN need (`[dev] `, `src.h:N WARN `): a cheap search that spares the full
# patterns on the other INFO/WARN lines of a large application log
_DEV_TAG = lazyre.compile(r"\[\d+\] ")
_SRC_WARN = lazyre.compile(r"\.(?:cc|cu|c|h|cpp|hpp):\d+ WARN ")


def _detected(text: str) -> bool:
    """An NCCL line: its prefix with the word NCCL (or a .cu source), a bare `NCCL INFO|WARN`, or a
    WARN in NCCL's layout of a version without the word (2.0 - 2.2): with the whole `host:pid:tid`
    prefix any message, behind a masked prefix only a message NCCL is known to print."""
    tagged = _DEV_TAG.search(text) is not None
    if tagged and _DETECT.search(text) and ("NCCL" in text or ".cu:" in text) or BARE_LINE.search(text):
        return True
    if not tagged or _SRC_WARN.search(text) is None:
        return False
    m = LINE.search(text)
    if m is not None and m.group("tid") and m.group("src") and m.group("level") == "WARN":
        return True  # NCCL's whole `host:pid:tid [dev] file:line WARN` prefix: any message is NCCL's
    m = m or MASKED_LINE.search(text)
    return m is not None and m.group("level") == "WARN" and classify(m.group("msg"))[0] not in ("other", "benign")


def detect(doc: Doc) -> bool:
    return any(_detected(ln.text) for ln in (doc.peel_hit(h) for h in doc.scan((" INFO ", " WARN "), ends=DETECT_ENDS)))


FORMATS = [Format("nccl-log", detect=detect, priority=40,  # pragma: no mutate - only its order among formats counts
                  description="NCCL_DEBUG=INFO/WARN log (any NCCL era)")]
PARSERS = [ParserSpec("nccl-log", parse)]

__all__ = ["ERRORS", "FATAL", "FORMATS", "LINE", "MASKED_LINE", "PARSERS", "WC_STATUS", "NcclError", "NcclLog", "NcclProc", "classify",
           "detect", "parse"]
