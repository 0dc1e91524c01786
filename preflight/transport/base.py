"""The one small interface every transport (local, ssh, srun) implements."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from preflight.model import Capture
from preflight.probes import Probe

STALL_STAGES = ("kex", "auth", "command")  # past the TCP connect and the banner: small packets got through


def stalled(detail: Mapping[str, str]) -> bool:
    """A node fault (`NodeOutcome.detail`) that is the signature of an MTU black hole, not of a
    node that is down: the session stalled while open (`connection: stalled`), or it timed out
    after the TCP connect and the banner (key exchange, authentication, the command) and its
    connection did not answer a new session (`connection: alive` means the probes hang on the
    node instead)."""
    if detail.get("connection") == "stalled":
        return True
    return detail.get("kind") in ("timeout", "deadline") and detail.get("stage") in STALL_STAGES \
        and detail.get("connection") != "alive"


@dataclass
class NodeOutcome:
    """Everything a transport brought back from one node.

    `error` is set when the node itself could not be reached or its bundle was lost
    (unreachable, authentication, deadline); the captures it did bring back still count."""

    node: str
    captures: dict[str, Capture] = field(default_factory=dict)
    error: str = ""
    duration: float = 0.0
    # structured facts about a node-level fault, e.g. {"kind": "timeout", "stage": "auth"}
    # (stage: connect, banner, kex, auth, command): an SSH stall right after key exchange
    # next to a lost jumbo ping is the signature of an MTU black hole.
    detail: dict[str, str] = field(default_factory=dict)


ProgressFn = Callable[[str, Capture], None]


class Transport(ABC):
    name = "abstract"
    deadline: float | None = None  # seconds for a whole run's collection (--deadline), None: unbounded
    until: float | None = None  # time.monotonic() at which the current run's collection ends

    def start_clock(self, until: float | None = None) -> None:
        """Start one run: every `collect` until the next call ends by `until` (default: the
        transport's `deadline` seconds from now), so a run's phases share one deadline."""
        if until is None and self.deadline is not None:
            until = time.monotonic() + float(self.deadline)
        self.until = until

    def collect_end(self) -> float | None:
        """When the collect starting now must end: the run's end once `start_clock` was called,
        else `deadline` seconds from now (None: no bound beyond the probes' own timeouts)."""
        if self.until is not None:
            return self.until
        return None if self.deadline is None else time.monotonic() + float(self.deadline)

    @abstractmethod
    def collect(
        self,
        bundles: Mapping[str, Sequence[Probe]],
        progress: ProgressFn | None = None,
    ) -> dict[str, NodeOutcome]:
        """Run each node's probes (concurrently, within the probes' timeouts) and return
        one outcome per node. Must not raise for node-level faults: they go into `error`."""

    def resolve_addresses(self, nodes: Sequence[str]) -> dict[str, str]:
        """node -> the address its peers should reach it at (for pings, rendezvous).

        The default is the node's own name; a transport that knows better (Slurm's NodeAddr,
        an ssh config's HostName) overrides this. Must not raise: a node it cannot resolve
        maps to its own name."""
        return {node: node for node in nodes}

    def close(self) -> None:  # noqa: B027 - a deliberate no-op default, not an abstract method
        """Let go of what the transport holds open (connections, control sockets). Idempotent."""

    def abort(self) -> None:
        """The run was interrupted (SIGINT, SIGTERM): end every probe process this transport
        started, local or remote, now; a collect in progress is abandoned. Never raises."""
        try:
            self.close()
        except Exception:  # noqa: BLE001 - ending what runs is best effort and must not raise
            pass
