"""The controller's wall-clock times around each capture: when the collect that carried it began
and when it came back. A probe's reading of a node's clock (node.clock's `date-wall`) was taken
between the two, so the node's offset from the controller lies in a known interval whatever the
transport's latency: `[reading - came_back, reading - began]`.

`Arrivals` stands in for a run's progress callback (every transport calls it as each capture
arrives) and passes each call on. The engine stores its table in the options' `extra` under
`KEY` for the cross-node checks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from preflight.model import Capture

KEY = "controller_times"  # options.extra key: node -> probe -> (began, came back), time.time() seconds


class Arrivals:
    """A progress callback that notes when each capture came back, then calls `inner`."""

    def __init__(self, inner: Callable[[str, Capture], None] | None = None) -> None:
        self.inner = inner
        self.began = time.time()
        self.times: dict[str, dict[str, tuple[float, float]]] = {}
        self._lock = threading.Lock()

    def phase(self) -> Arrivals:
        """Start a collect now: the captures that come back next were taken after this time."""
        self.began = time.time()
        return self

    def __call__(self, node: str, capture: Capture) -> None:
        now = time.time()
        with self._lock:
            self.times.setdefault(node, {}).setdefault(capture.probe, (self.began, now))
        if self.inner is not None:
            self.inner(node, capture)

    def into(self, options: Any) -> Any:
        """A copy of `options` (registry.Options) whose extra holds the table under KEY."""
        with self._lock:
            table = {n: dict(t) for n, t in self.times.items()}
        return replace(options, extra={**options.extra, KEY: table})


__all__ = ["KEY", "Arrivals"]
