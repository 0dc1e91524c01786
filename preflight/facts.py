"""The facts one part of preflight reads from another's Result: typed, in one place.

A check's grader writes `Result.facts` (plain JSON: it goes into reports and the history
store); flap damping, history analysis, triage, the Prometheus and HTML reports and the sweep
gate read some of those keys back. The keys they read are declared here as TypedDicts, and
read through the accessors below, so a renamed key is a type error in the writer and a failed
test (`tests/test_facts.py` grades the fixtures and checks every result against `SCHEMAS`)
instead of a hard fault that silently stops draining.

The accessors are tolerant: facts read back from an older run's history row may lack a key or
hold another type, and a reader must not raise on them; an item that does not fit is left out.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from typing import Any, Protocol, TypedDict, Union


class Graded(Protocol):
    """What the readers need of a result: a `Result`, or a history row read back."""

    @property
    def check(self) -> str: ...

    @property
    def facts(self) -> Mapping[str, Any]: ...

# ---------------------------------------------------------------------------------------------
# gpu.xid


class _XidEventBase(TypedDict):
    xid: int
    pci: str
    severity: str  # xid_catalog's FAIL / WARN / INFO, or "ignored"
    action: str  # the immediate-action bucket (xid_catalog.DRAIN_ACTIONS: drain-level)
    count: int  # lines in the burst
    time: str | None  # ISO time of the first line, None when the log has no wall clock
    time_text: str
    last_time: str | None
    caused_by: int | None


class XidEventFact(_XidEventBase, total=False):
    gpu: int | None  # GPU index
    uuid: str
    mnemonic: str
    text: str
    code: str  # the finding code (preflight.policy) its group was graded with
    implied: bool  # named only by a later Xid ("caused by previous Xid N"), not logged itself
    cleared: bool  # a later Xid 154 set the GPU's recovery action back to None


class _XidFaultBase(TypedDict):
    kind: str  # e.g. "fallen_off_bus", "gpu_lost", "gsp_timeout"
    pci: str
    action: str
    severity: str
    time: str | None
    time_text: str


class XidFaultFact(_XidFaultBase, total=False):
    code: str  # the finding code (preflight.policy)
    count: int  # lines of this fault
    device: str  # the device the kernel named (an NVSwitch, a PCIe port)
    detail: str
    text: str


class _XidBase(TypedDict):
    events: list[XidEventFact]
    source_command: str


class XidFacts(_XidBase, total=False):
    counts: dict[str, dict[str, int]]  # pci -> xid -> lines
    faults: list[XidFaultFact]
    since: str | None
    dropped_before_since: int


# ---------------------------------------------------------------------------------------------
# gpu.health, gpu.inventory


class GpuHealthFact(TypedDict):
    index: int
    gpu: str
    uncorrectable_ecc: int | float | None  # volatile uncorrectable ECC errors
    remapped_failure: bool | None
    remapped_pending: bool | None


class GpuHealthFacts(TypedDict, total=False):
    gpus: list[GpuHealthFact]


class InventoryFacts(TypedDict, total=False):
    count: int  # GPUs on the node: the sweep's default ranks per node
    models: list[str]  # the GPU names the listing gives


# ---------------------------------------------------------------------------------------------
# ib.hca, net.nic: the port states history watches for flapping


class IbPortFact(TypedDict):
    ca: str
    port: int
    state: str


class IbFacts(TypedDict, total=False):
    ports: list[IbPortFact]


class NicFact(TypedDict):
    name: str
    state: str


class NicFacts(TypedDict, total=False):
    interfaces: list[NicFact]


# ---------------------------------------------------------------------------------------------
# nccl.allreduce (sweep or nccl-tests table), nccl.pingpong


class _SweepRowBase(TypedDict):
    bytes: int
    busbw: float | None  # None: an nccl-tests row with only its in-place half (RCCL -O 1)


class SweepRowFact(_SweepRowBase, total=False):
    count: int | None  # elements
    dtype: str | None
    time_us: float | None  # the mean per op (nccl-tests' time): algbw = bytes / time_us
    median_us: float | None  # the sweep's extras (the slowest rank's median and p99)
    p99_us: float | None
    algbw: float | None
    wrong: int | None
    ip_time_us: float | None  # nccl-tests' in-place half of the row
    ip_algbw: float | None
    ip_busbw: float | None
    ip_wrong: int | None


class AllreduceFacts(TypedDict, total=False):
    peak_busbw: float | None  # GB/s; None when no row measured it
    table: str  # which table it was read from ("single_node", "multi_node", ...)
    hosts: list[str]  # the nodes of a cluster-wide sweep
    rows: list[SweepRowFact]
    rows_measured: int  # a launch that failed: how many rows were measured before it did
    backend: str  # the sweep's torch.distributed backend (gloo, nccl); none: an all_reduce_perf table (NCCL)
    gpu_models: list[str]  # the ranks' devices ("cpu" for a gloo run on CPUs)


class PairFact(TypedDict, total=False):
    a: str
    b: str
    status: str  # "ok" when measured
    bw_gbps: float


class PingpongFacts(TypedDict, total=False):
    pairs: list[PairFact]


# The TypedDict of each result id's facts, for the conformance test and `problems`.
SCHEMAS: dict[str, type] = {
    "gpu.xid": XidFacts,
    "gpu.health": GpuHealthFacts,
    "gpu.inventory": InventoryFacts,
    "ib.hca": IbFacts,
    "net.nic": NicFacts,
    "nccl.allreduce": AllreduceFacts,
    "nccl.pingpong": PingpongFacts,
}


# ---------------------------------------------------------------------------------------------
# Checking a value against a TypedDict (plain JSON types only)


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__required_keys__")


def _union_args(tp: Any) -> tuple[Any, ...] | None:
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is Union:
        return typing.get_args(tp)
    return None


def _fits(value: Any, tp: Any) -> bool:
    """Whether a JSON value has the declared type (a float accepts an int; a bool is no int)."""
    if tp is Any:
        return True
    args = _union_args(tp)
    if args is not None:
        return any(_fits(value, a) for a in args)
    if tp is type(None):
        return value is None
    if _is_typeddict(tp):
        return isinstance(value, Mapping) and not _dict_problems(value, tp, "")
    origin = typing.get_origin(tp)
    if origin is list:
        (item,) = typing.get_args(tp)
        return isinstance(value, list) and all(_fits(v, item) for v in value)
    if origin is dict:
        kt, vt = typing.get_args(tp)
        return isinstance(value, dict) and all(_fits(k, kt) and _fits(v, vt) for k, v in value.items())
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, tp)


def _dict_problems(value: Mapping[str, Any], schema: type, where: str) -> list[str]:
    hints = typing.get_type_hints(schema)
    required: frozenset[str] = getattr(schema, "__required_keys__", frozenset())
    out = [f"{where}{key}: missing" for key in sorted(required) if key not in value]
    for key, tp in hints.items():
        if key in value and not _fits(value[key], tp):
            out.append(f"{where}{key}: {value[key]!r:.80} is not {tp}")
    return out


def problems(check: str, facts: Mapping[str, Any]) -> list[str]:
    """What in `facts` does not fit the declared facts of result id `check` (empty: it fits,
    or the id declares none)."""
    schema = SCHEMAS.get(check)
    return _dict_problems(facts, schema, f"{check} facts ") if schema is not None else []


# ---------------------------------------------------------------------------------------------
# Typed readers (tolerant of facts from older runs)


# What a reader assumes for a key an older run's facts lack. A key not listed here is one
# without which the item means nothing (an Xid event without its code): such an item is left out.
_DEFAULTS: dict[type, dict[str, Any]] = {
    XidEventFact: {"pci": "", "severity": "fail", "action": "", "count": 1, "time": None, "time_text": "",
                   "last_time": None, "caused_by": None},
    XidFaultFact: {"pci": "", "action": "", "severity": "fail", "time": None, "time_text": ""},
    GpuHealthFact: {"gpu": "", "uncorrectable_ecc": None, "remapped_failure": None, "remapped_pending": None},
    IbPortFact: {"port": 1, "state": ""},
    NicFact: {"state": ""},
    SweepRowFact: {"bytes": 0},
    PairFact: {},
}


def _normalized(item: Any, schema: type) -> dict[str, Any] | None:
    """`item` with the defaults of the keys it lacks; None when it does not fit `schema`."""
    if not isinstance(item, Mapping):
        return None
    defaults = _DEFAULTS.get(schema, {})
    required: frozenset[str] = getattr(schema, "__required_keys__", frozenset())
    if any(key not in item and key not in defaults for key in required):
        return None
    full = {**defaults, **item}
    return full if not _dict_problems(full, schema, "") else None


def _items(r: Graded, key: str, schema: type) -> list[Any]:
    raw = r.facts.get(key)
    if not isinstance(raw, list):
        return []
    return [x for x in (_normalized(i, schema) for i in raw) if x is not None]


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def xid_events(r: Graded) -> list[XidEventFact]:
    """The Xid event bursts of a gpu.xid result."""
    return _items(r, "events", XidEventFact) if r.check == "gpu.xid" else []


def xid_faults(r: Graded) -> list[XidFaultFact]:
    """The GPU faults without an Xid (fallen off the bus, GSP timeout, ...) of a gpu.xid result."""
    return _items(r, "faults", XidFaultFact) if r.check == "gpu.xid" else []


def gpu_health(r: Graded) -> list[GpuHealthFact]:
    """The per-GPU memory health of a gpu.health result."""
    return _items(r, "gpus", GpuHealthFact) if r.check == "gpu.health" else []


def gpu_count(r: Graded) -> int | None:
    """The GPUs a gpu.inventory result counted (None: not an inventory, or not counted)."""
    n = r.facts.get("count") if r.check == "gpu.inventory" else None
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def ib_ports(r: Graded) -> list[IbPortFact]:
    return _items(r, "ports", IbPortFact) if r.check == "ib.hca" else []


def nic_interfaces(r: Graded) -> list[NicFact]:
    return _items(r, "interfaces", NicFact) if r.check == "net.nic" else []


def peak_busbw(r: Graded) -> float | None:
    """The peak bus bandwidth (GB/s) of an nccl.allreduce result."""
    return _number(r.facts.get("peak_busbw")) if r.check == "nccl.allreduce" else None


def sweep_hosts(r: Graded) -> list[str]:
    """The nodes of an nccl.allreduce result's sweep (empty when it names none)."""
    hosts = r.facts.get("hosts") if r.check == "nccl.allreduce" else None
    return [str(h) for h in hosts] if isinstance(hosts, list) else []


def allreduce_backend(r: Graded) -> str:
    """The backend an nccl.allreduce result measured: the sweep's `backend`; a result without
    one was graded from an nccl-tests (all_reduce_perf) table, which is NCCL."""
    backend = r.facts.get("backend") if r.check == "nccl.allreduce" else None
    return backend if isinstance(backend, str) and backend else "nccl"


def gpu_models(r: Graded) -> list[str]:
    """The GPU models a gpu.inventory listed, or the ranks of an nccl.allreduce ran on."""
    key = {"gpu.inventory": "models", "nccl.allreduce": "gpu_models"}.get(r.check)
    raw = r.facts.get(key) if key else None
    return [m for m in raw if isinstance(m, str) and m] if isinstance(raw, list) else []


def sweep_rows(r: Graded) -> list[SweepRowFact]:
    return _items(r, "rows", SweepRowFact) if r.check == "nccl.allreduce" else []


def pingpong_pairs(r: Graded) -> list[PairFact]:
    return _items(r, "pairs", PairFact) if r.check == "nccl.pingpong" else []


__all__ = [
    "SCHEMAS", "AllreduceFacts", "GpuHealthFact", "GpuHealthFacts", "IbFacts", "IbPortFact", "InventoryFacts",
    "NicFact", "NicFacts", "PairFact", "PingpongFacts", "SweepRowFact", "XidEventFact", "XidFacts",
    "XidFaultFact", "allreduce_backend", "gpu_count", "gpu_health", "gpu_models", "ib_ports", "nic_interfaces",
    "peak_busbw", "pingpong_pairs", "problems", "sweep_hosts", "sweep_rows", "xid_events", "xid_faults",
]
