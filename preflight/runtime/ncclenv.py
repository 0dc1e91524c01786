"""The recommended NCCL / torch.distributed environment, and a cross-rank consistency check.

    os.environ.update({k: v for k, v in nccl_env("h100-sxm-8x").items() if k not in os.environ})
    dist.init_process_group("nccl")
    check_env_consistency(events=writer)       # every rank: NCCL_* / TORCH_NCCL_* identical?

`nccl_env(profile)` returns the variables as a dict and changes nothing by itself. Names are
PyTorch's current ones (TORCH_NCCL_*; the NCCL_ASYNC_ERROR_HANDLING / NCCL_BLOCKING_WAIT
spellings are deprecated). Provenance of each value is in the comments of `_BASE`: the
PyTorch "ProcessGroupNCCL Environment Variables" page (docs.pytorch.org/docs/stable/
torch_nccl_environment_variables.html), the NCCL "Environment Variables" page of the NCCL
user guide, and the names found in torch 2.13 itself (distributed_c10d.py, libtorch_cpu).

Profile: None (the base recipe), a profile name or path (preflight.profile.load), a
`Profile`, or a dict. Profile keys read: `nccl.bad_interfaces` (interfaces NCCL must not
bind to, turned into the NCCL_SOCKET_IFNAME exclusion list), `nccl.ib_hca` (string or list,
NCCL_IB_HCA) and the table `nccl.env` (variables set verbatim; an empty string removes one).
A dict may hold such dotted keys and/or variable names in capitals, taken verbatim
(None removes the variable).
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from preflight import lazyre
from preflight.model import Status
from preflight.runtime.events import EventWriter

log = logging.getLogger("preflight.runtime")

CHECK = "runtime.nccl_env"
_VAR = lazyre.compile(r"^[A-Z][A-Z0-9_]*$")

_BASE: dict[str, str] = {
    # NCCL user guide: a leading ^ excludes interfaces by prefix; loopback and the Docker
    # bridge reach no other node, and NCCL bound there cannot connect across hosts.
    "NCCL_SOCKET_IFNAME": "^lo,docker0",
    # NCCL user guide: VERSION, WARN, INFO, TRACE. WARN prints errors only; INFO for debugging.
    "NCCL_DEBUG": "WARN",
    # torch docs: 3 = tear the process down on an asynchronous NCCL error or a collective
    # timeout, without aborting the communicator (the default in current releases). The
    # launcher then restarts the job: the alternative to TORCH_NCCL_BLOCKING_WAIT=1, which makes
    # wait() block and raise in the calling thread instead.
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
    "TORCH_NCCL_BLOCKING_WAIT": "0",
    # torch docs: dump the flight recorder's debug info on a watchdog timeout or exception;
    # needs TORCH_NCCL_TRACE_BUFFER_SIZE > 0. torch 2.13 reads TORCH_FR_BUFFER_SIZE first and
    # TORCH_NCCL_TRACE_BUFFER_SIZE as its fallback (distributed_c10d.py): both are set.
    "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
    "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
    "TORCH_FR_BUFFER_SIZE": "2000",
    # torch docs: a monitoring thread aborts the process when the NCCL watchdog thread itself
    # is stuck (a hung CUDA/NCCL call) for TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC; 480 s is
    # ProcessGroupNCCL's own default, set explicitly so that every rank agrees on it.
    "TORCH_NCCL_ENABLE_MONITORING": "1",
    "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "480",
}


def _profile_values(profile: Any) -> tuple[dict[str, Any], dict[str, str | None]]:
    """(dotted profile values, verbatim variable overrides) from any accepted profile form."""
    if profile is None:
        return {}, {}
    if isinstance(profile, str):
        from preflight.profile import load

        profile = load(profile)
    if hasattr(profile, "values") and hasattr(profile, "section") and not isinstance(profile, Mapping):
        values = dict(profile.values)
    elif isinstance(profile, Mapping):
        values = dict(profile)
    else:
        raise TypeError(f"nccl_env: unsupported profile {type(profile).__name__}")
    overrides: dict[str, str | None] = {}
    for key in list(values):
        if _VAR.match(key):
            v = values.pop(key)
            overrides[key] = None if v is None else str(v)
        elif key.startswith("nccl.env."):
            var = key[len("nccl.env."):]
            v = values[key]
            overrides[var] = None if v in (None, "") else str(v)
    return values, overrides


def nccl_env(profile: str | Mapping[str, Any] | Any | None = None, *,
             run_dir: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """The recommended NCCL / torch.distributed variables for `profile` (nothing is set).

    With `run_dir`, NCCL's own timeout dumps go there (TORCH_NCCL_DEBUG_INFO_TEMP_FILE and
    TORCH_FR_DUMP_TEMP_FILE, prefixes to which torch appends the rank).
    """
    values, overrides = _profile_values(profile)
    env = dict(_BASE)
    bad = values.get("nccl.bad_interfaces")
    if isinstance(bad, (list, tuple)) and bad:
        env["NCCL_SOCKET_IFNAME"] = "^" + ",".join(str(b) for b in bad)
    hca = values.get("nccl.ib_hca")
    if isinstance(hca, (list, tuple)):
        hca = ",".join(str(h) for h in hca)
    if hca:
        env["NCCL_IB_HCA"] = str(hca)
    if run_dir is not None:
        prefix = os.path.join(os.fspath(run_dir), "nccl_trace_rank_")
        env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] = prefix
        env["TORCH_FR_DUMP_TEMP_FILE"] = prefix
    for var, val in overrides.items():
        if val is None:
            env.pop(var, None)
        else:
            env[var] = val
    return env


def env_differences(envs: Sequence[Mapping[str, str]], hosts: Sequence[str] | None = None,
                    ignore: Iterable[str] = ()) -> list[dict[str, Any]]:
    """Pure: per-rank variable dicts -> one entry per (rank, variable) that differs from the
    majority value ({rank, host, key, value, expected}; None = unset). Ties go to the lowest rank.
    """
    skip = set(ignore)
    keys = sorted({k for e in envs for k in e} - skip)
    out: list[dict[str, Any]] = []
    for key in keys:
        vals = [e.get(key) for e in envs]
        counts = Counter(vals)
        top = max(counts.values())
        expected = next(v for v in vals if counts[v] == top)
        for rank, v in enumerate(vals):
            if v != expected:
                out.append({"rank": rank, "host": hosts[rank] if hosts and rank < len(hosts) else None,
                            "key": key, "value": v, "expected": expected})
    return out


def check_env_consistency(keys_prefixes: Sequence[str] = ("NCCL_", "TORCH_NCCL_"), *,
                          events: EventWriter | None = None, group: Any = None,
                          ignore: Iterable[str] = (), report_rank: int = 0) -> list[dict[str, Any]]:
    """Gather the variables starting with `keys_prefixes` from every rank; report those that differ.

    A collective: every rank calls it. Returns the differences (same list on every rank; []
    when consistent or without a process group); `report_rank` writes one `runtime.nccl_env`
    event. A failed gather is logged and returns [].
    """
    prefixes = tuple(keys_prefixes)
    local = {k: v for k, v in os.environ.items() if k.startswith(prefixes)}
    host = socket.gethostname().split(".")[0]
    dist = sys.modules.get("torch.distributed")
    if dist is None or not (dist.is_available() and dist.is_initialized()):
        return []
    try:
        world = dist.get_world_size(group)
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, (host, local), group=group)
        rank = dist.get_rank(group)
    except Exception as exc:  # noqa: BLE001 - monitoring never takes training down
        log.warning("preflight: NCCL environment consistency check failed: %s", exc)
        return []
    hosts = [str(g[0]) for g in gathered]
    diffs = env_differences([dict(g[1]) for g in gathered], hosts, ignore)
    if events is not None and rank == report_rank:
        if diffs:
            bad = sorted({d["rank"] for d in diffs})
            events.emit(CHECK, Status.WARN,
                        f"{len(bad)} rank(s) run with a different NCCL environment: "
                        + ", ".join(f"rank {r} ({hosts[r]})" for r in bad),
                        evidence=[f"rank {d['rank']} on {d['host']}: {d['key']}={d['value']!r}, "
                                  f"most ranks {d['expected']!r}" for d in diffs[:50]],
                        remedy="launch every rank with the same environment (export the variables in the job "
                               "script, not per node; check the nodes' profile.d files and container images)",
                        facts={"differences": diffs, "ranks": bad, "prefixes": list(prefixes)})
        else:
            events.emit(CHECK, Status.PASS, f"NCCL environment identical on {world} ranks",
                        facts={"variables": sorted(local), "prefixes": list(prefixes)})
    return diffs
