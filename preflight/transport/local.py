"""The local transport: probes run on this machine, all at once."""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping, Sequence

from preflight.probes import DEFAULT_CAP, Probe, run_bundle
from preflight.transport.base import NodeOutcome, ProgressFn, Transport


def local_node_name() -> str:
    return socket.gethostname().split(".")[0] or "localhost"


class LocalTransport(Transport):
    name = "local"

    def __init__(self, cap: int = DEFAULT_CAP) -> None:
        self.cap = cap

    def fit(self, probes: Sequence[Probe]) -> list[Probe]:
        """The probes as they will run (a subclass may shrink their timeouts)."""
        return list(probes)

    def collect(
        self,
        bundles: Mapping[str, Sequence[Probe]],
        progress: ProgressFn | None = None,
    ) -> dict[str, NodeOutcome]:
        out: dict[str, NodeOutcome] = {}
        for node, probes in bundles.items():
            start = time.monotonic()
            on_done = (lambda c, n=node: progress(n, c)) if progress else None
            captures = run_bundle(self.fit(probes), cap=self.cap, on_done=on_done)
            out[node] = NodeOutcome(node=node, captures=captures, duration=time.monotonic() - start)
        return out
