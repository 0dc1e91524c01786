"""What a sweep measures (the spec every rank receives) and the event lines ranks print.

Pure: no torch, no I/O. The launcher builds a `SweepSpec`, ships it to every node as one
base64 argument, and reads back `@@pfsweep {json}` lines from the ranks' stdout.
"""

from __future__ import annotations

import base64
import json
from dataclasses import asdict, dataclass, field
from typing import Any

EVENT_MARK = "@@pfsweep "

# element sizes of the dtypes a sweep may use (bytes); names as torch spells them
DTYPE_SIZES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int32": 4, "int64": 8, "uint8": 1}
# names nccl-tests prints for the same dtypes (the synthesized table is graded by the same parser)
NCCL_TESTS_DTYPE = {"float32": "float", "float16": "half", "bfloat16": "bfloat16", "float64": "double",
                    "int32": "int32", "int64": "int64", "uint8": "uint8"}

DEFAULT_MIN_BYTES = 8
DEFAULT_MAX_BYTES = 1 << 30  # NCCL on GPUs: up to 1 GB, where busbw plateaus
DEFAULT_MAX_BYTES_GLOO = 64 << 20  # gloo on CPUs: 64 MB keeps a sweep within seconds per size
DEFAULT_FACTOR = 4


class SpecError(ValueError):
    """A sweep option that cannot work (sizes, dtype, factor)."""


@dataclass
class SweepSpec:
    backend: str = "gloo"  # gloo | nccl
    dtype: str = "float32"
    min_bytes: int = DEFAULT_MIN_BYTES
    max_bytes: int = DEFAULT_MAX_BYTES_GLOO
    factor: int = DEFAULT_FACTOR
    warmup: int = 3
    iters: int = 10
    op_timeout_s: float = 60.0  # process-group timeout: one collective may take this long
    deadline_s: float = 600.0  # the whole run, launch included (outer watchdog)
    deadline_epoch: float = 0.0  # absolute time.time() after which ranks give up
    allreduce: bool = True
    pingpong: str = "ring"  # ring | all | none
    pp_small_bytes: int = 8
    pp_mid_bytes: int = 4096  # fits one jumbo frame, not a 1500-byte one
    pp_large_bytes: int = 1 << 20
    pp_iters: int = 10
    isolate: bool = True
    # pair grading: absolute floor (GB/s; 0 = none) and outlier ratio against the median pair
    pair_min_gbps: float = 0.0
    pair_slow_ratio: float = 0.5
    # group expectation (from the profile), so the ranks know when to isolate
    group_floor_busbw: float = 0.0
    group_floor_min_bytes: int = 0
    max_isolation_rounds: int = 4
    nodes: list[str] = field(default_factory=list)  # node names in order (ssh / local launches)
    socket_ifname: str = ""
    nccl_debug: bool = True
    heartbeat_s: float = 2.0  # the agent's "still here" line; 0: none (the launcher's stall timer reads it)
    calibrate: int = 0  # also time a bare all_reduce loop per size, this many times (benchmarks)

    def sizes(self) -> list[int]:
        return message_sizes(self.min_bytes, self.max_bytes, self.factor, DTYPE_SIZES.get(self.dtype, 4))

    def encode(self) -> str:
        return base64.urlsafe_b64encode(json.dumps(asdict(self), separators=(",", ":")).encode()).decode()

    @classmethod
    def decode(cls, text: str) -> SweepSpec:
        data = json.loads(base64.urlsafe_b64decode(text.encode()).decode())
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    def validate(self) -> None:
        if self.backend not in ("gloo", "nccl"):
            raise SpecError(f"backend {self.backend!r}: use gloo or nccl")
        if self.dtype not in DTYPE_SIZES:
            raise SpecError(f"dtype {self.dtype!r}: use one of {', '.join(DTYPE_SIZES)}")
        if self.factor < 2:
            raise SpecError(f"factor {self.factor}: use 2 or more")
        if self.min_bytes < 1 or self.max_bytes < self.min_bytes:
            raise SpecError(f"sizes {self.min_bytes}..{self.max_bytes}: need 1 <= min <= max")
        if self.iters < 1 or self.warmup < 0 or self.pp_iters < 1:
            raise SpecError("iterations: need iters >= 1 and warmup >= 0")
        if self.pingpong not in ("ring", "all", "none"):
            raise SpecError(f"pingpong {self.pingpong!r}: use ring, all or none")
        if self.op_timeout_s <= 0 or self.deadline_s <= 0:
            raise SpecError("timeouts must be positive")


def message_sizes(min_bytes: int, max_bytes: int, factor: int, elem: int = 1) -> list[int]:
    """min, min*factor, ... up to max (max included when the steps miss it), each rounded to
    whole elements."""
    out: list[int] = []
    b = max(min_bytes, elem)
    while b <= max_bytes:
        out.append(b - b % elem)
        b *= factor
    top = max_bytes - max_bytes % elem
    if top >= elem and (not out or out[-1] < top):
        out.append(top)
    return sorted(set(out))


def busbw_factor(world: int) -> float:
    """nccl-tests PERFORMANCE.md: all-reduce busbw = algbw * 2(n-1)/n."""
    return 2.0 * (world - 1) / world if world > 0 else 0.0


def event_line(ev: str, **fields: Any) -> str:
    return EVENT_MARK + json.dumps({"ev": ev, **fields}, separators=(",", ":"), default=str)


def parse_event(line: str) -> dict[str, Any] | None:
    """The event of a `@@pfsweep {...}` line (anywhere in the line: launchers prefix lines)."""
    i = line.find(EVENT_MARK)
    if i < 0:
        return None
    try:
        ev = json.loads(line[i + len(EVENT_MARK):])
    except ValueError:
        return None
    return ev if isinstance(ev, dict) and "ev" in ev else None
