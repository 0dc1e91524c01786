"""The probe bundle that travels to a remote node: one program, one round trip.

`build_script(probes)` returns a self-contained Python program that a transport runs as
`python3 -c SCRIPT` over SSH or srun: the text of `preflight.probe_runner` exactly as it is in
the package, then one fixed line, `sys.exit(serve(PAYLOAD))`, whose payload names the probes.
On the node it runs every probe concurrently with its timeout and output cap, and prints one
delimited line per capture as soon as it is done, so a node that hangs half-way still gives
back the probes that finished (the line formats are in `preflight.probe_runner`).

While probes run the program writes a `tick` line every `tick_s` seconds: a live session is
never silent for long, so a transport tells a stalled connection (no bytes at all, e.g. an MTU
black hole holding everything behind one lost segment) from slow probes within seconds.

`parse_output(text, nonce)` reads that back, keyed by the node name the node reported
(srun with several nodes interleaves their lines; each line is whole). The node states its
protocol version in its first line, in every capture and in its last line; output of another
version is never read as captures: the node gets an entry in `errors` (and in `garbage`).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import ModuleType

from preflight import probe_runner
from preflight.model import Capture
from preflight.probe_runner import DEFAULT_CAP, MARK, PROTOCOL, PYTHON_TOKEN, Probe, Result, encode_payload
from preflight.probes import capture_of

__all__ = ["MARK", "PROTOCOL", "PYTHON_TOKEN", "ParsedOutput", "build_script", "module_text", "parse_output"]
_GARBAGE_KEPT = 20


def module_text(module: ModuleType) -> str:
    """A module's own source file, verbatim: what travels to a node for a node-side module."""
    return _file_text(str(module.__file__))


@cache
def _file_text(path: str) -> str:
    return Path(path).read_text(encoding="utf-8")


def build_script(probes: Sequence[Probe], cap: int = DEFAULT_CAP, nonce: str | None = None,
                 watch_stdin: bool = False, tick_s: float = 0.0) -> tuple[str, str]:
    """(program text, nonce). Commands whose argv[0] is this Python run with the node's Python.
    With `watch_stdin` the program ends its probes and exits when its stdin reaches EOF (the
    SSH session that started it went away); with `tick_s` it writes a tick line that often.
    The last line of the program is the only one that depends on the probes."""
    nonce = nonce or secrets.token_hex(8)
    payload = encode_payload(probes, nonce, cap=cap, watch_stdin=watch_stdin, tick_s=tick_s)
    script = "\n".join([module_text(probe_runner).rstrip("\n"), f"sys.exit(serve({payload!r}))"])
    return script, nonce


def mismatch(node: str, protocol: int) -> str:
    """The sentence for a node whose probe runner speaks another protocol."""
    return (f"{node} runs a probe bundle of protocol {protocol}, this preflight speaks protocol {PROTOCOL}: "
            f"its output was not read; run the same preflight version on the node and the controller")


@dataclass
class ParsedOutput:
    captures: dict[str, dict[str, Capture]] = field(default_factory=dict)  # node -> probe -> capture
    finished: dict[str, float] = field(default_factory=dict)  # node -> seconds on the node
    ticks: dict[str, float] = field(default_factory=dict)  # node -> seconds on the node at its last tick
    garbage: list[str] = field(default_factory=list)  # lines that were not ours (first few)
    protocols: dict[str, int] = field(default_factory=dict)  # node -> the protocol its hello stated
    errors: dict[str, str] = field(default_factory=dict)  # node -> why its output was not read

    def keep_garbage(self, line: str) -> None:
        if line.strip() and len(self.garbage) < _GARBAGE_KEPT:
            self.garbage.append(line[:300])

    def speaks(self, node: str, protocol: int) -> bool:
        """True when `protocol` is ours; else the node's output is refused with an error."""
        if protocol == PROTOCOL:
            return True
        if node not in self.errors:
            self.errors[node] = mismatch(node, protocol)
            self.keep_garbage(self.errors[node])
        return False

    def take(self, kind: str, body: str, source_prefix: str) -> bool:
        """Read one of our lines; False when it is damaged (it is then evidence, not data)."""
        if kind == "capture":
            return self._capture(body, source_prefix)
        parts = body.split()
        try:
            if kind == "hello" and len(parts) == 2:
                self.protocols[parts[0]] = int(parts[1])
                self.speaks(parts[0], int(parts[1]))
            elif kind == "tick" and len(parts) == 2:
                self.ticks[parts[0]] = float(parts[1])
            elif kind == "done" and len(parts) in (2, 3):
                # a done line without a protocol is the format of protocol 1
                if self.speaks(parts[0], int(parts[2]) if len(parts) == 3 else 1):
                    self.finished[parts[0]] = float(parts[1])
        except ValueError:
            pass
        return True

    def _capture(self, body: str, source_prefix: str) -> bool:
        try:
            rec = json.loads(body)
            node = str(rec.pop("node"))
            protocol = int(rec.pop("protocol", 1))
            if not self.speaks(node, protocol):
                return True
            result = Result.from_record(rec)
        except (ValueError, KeyError, TypeError, AttributeError):
            return False
        source = f"{source_prefix}{node}:probe:{result.probe}"
        self.captures.setdefault(node, {})[result.probe] = capture_of(result, source)
        return True


def parse_output(text: str, nonce: str, source_prefix: str = "") -> ParsedOutput:
    """Read the delimited lines back; anything else is kept (a few lines) as evidence."""
    out = ParsedOutput()
    head = f"{MARK} {nonce} "
    for raw in text.splitlines():
        # srun --label puts "<task>: " in front; the marker may not start the line
        pos = raw.find(head)
        if pos < 0:
            out.keep_garbage(raw)
            continue
        kind, _, body = raw[pos + len(head):].partition(" ")
        if not out.take(kind, body, source_prefix):
            out.keep_garbage(raw)
    return out
