"""The runtime resilience layer training jobs import.

Public interface: Resilience (the one object for a training loop, wiring the rest), Preemption, Watchdog, CheckpointManager, StragglerDetector, LossGuard,
nccl_env, check_env_consistency, EventWriter, CrashRecorder (`preflight.runtime.crash.install`
records every way a rank ends), and the preemption marker (write_marker, read_marker). Submodules load lazily so that importing
`preflight.runtime` stays cheap; torch is imported only where a component needs it.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "EventWriter": "preflight.runtime.events",
    "read_events": "preflight.runtime.events",
    "Preemption": "preflight.runtime.preemption",
    "write_marker": "preflight.runtime.preemption",
    "read_marker": "preflight.runtime.preemption",
    "CrashRecorder": "preflight.runtime.crash",
    "Watchdog": "preflight.runtime.watchdog",
    "CheckpointManager": "preflight.runtime.checkpoint",
    "StragglerDetector": "preflight.runtime.straggler",
    "LossGuard": "preflight.runtime.lossguard",
    "Replay": "preflight.runtime.replay",
    "SuspectHardware": "preflight.runtime.replay",
    "ReproducibleFault": "preflight.runtime.replay",
    "nccl_env": "preflight.runtime.ncclenv",
    "Resilience": "preflight.runtime.resilience",
    "LocalCheckpointer": "preflight.runtime.localckpt",
    "check_env_consistency": "preflight.runtime.ncclenv",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'preflight.runtime' has no attribute {name!r}")
