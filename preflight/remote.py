"""The probe bundle that travels to a remote node: one program, one round trip.

`build_script(probes)` returns a self-contained Python program (the standard-library probe
runner of `preflight.probes` plus the node's probes as JSON) that a transport runs as
`python3 -c SCRIPT` over SSH or srun. On the node it runs every probe concurrently with
its timeout and output cap, and prints one delimited JSON line per capture as soon as it
is done, so a node that hangs half-way still gives back the probes that finished:

    @@preflight <nonce> capture <json>
    @@preflight <nonce> tick <node> <seconds>
    @@preflight <nonce> done <node> <seconds>

While probes run the program writes a `tick` line every `tick_s` seconds: a live session is
never silent for long, so a transport tells a stalled connection (no bytes at all, e.g. an MTU
black hole holding everything behind one lost segment) from slow probes within seconds.

`parse_output(text, nonce)` reads that back, keyed by the node name the node reported
(srun with several nodes interleaves their lines; each line is whole).
"""

from __future__ import annotations

import inspect
import json
import secrets
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from preflight import probes as _probes
from preflight.model import Capture, CaptureState
from preflight.probes import DEFAULT_CAP, Probe

MARK = "@@preflight"
PYTHON_TOKEN = "{python}"  # replaced on the node by the Python running the bundle


def _runner_source() -> str:
    """The probe runner's source: `preflight.probes` minus its package imports."""
    src = inspect.getsource(_probes)
    keep = [line for line in src.splitlines() if not line.startswith("from preflight")]
    return "\n".join(keep)


_MAIN = r'''
import json as _json, socket as _socket, sys as _sys, time as _time, threading as _threading
from enum import Enum as _Enum

class CaptureState(str, _Enum):
    OK = "ok"; MISSING = "missing"; TIMEOUT = "timeout"; FAILED = "failed"

class Capture:
    def __init__(self, probe, argv, state, stdout="", stderr="", rc=None, duration=0.0, truncated=False,
                 timeout=0.0, reason="", source=""):
        self.probe, self.argv, self.state, self.stdout, self.stderr = probe, argv, state, stdout, stderr
        self.rc, self.duration, self.truncated, self.timeout = rc, duration, truncated, timeout
        self.reason, self.source = reason, source

def _main(bundle):
    nonce, cap = bundle["nonce"], bundle["cap"]
    import os as _os
    node = _os.environ.get("SLURMD_NODENAME") or _socket.gethostname().split(".")[0]
    lock = _threading.Lock()
    start = _time.monotonic()
    probes = []
    for p in bundle["probes"]:
        cmds = tuple(tuple(_sys.executable if a == "{python}" else a for a in c) for c in p["commands"])
        probes.append(Probe(name=p["name"], commands=cmds, timeout=p["timeout"], env=tuple(map(tuple, p["env"]))))
    stopping = []

    def _stop(signum, frame):
        # srun cancelling the step, or the session going away: end the probes (they run in their
        # own sessions, so the signal does not reach them) and leave without a traceback
        stopping.append(signum)
        kill_live()
        _os._exit(128 + signum)
    import signal as _signal
    for _sig in (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP):
        try:
            _signal.signal(_sig, _stop)
        except (ValueError, OSError):
            pass
    if bundle.get("watch_stdin"):
        # the caller keeps our stdin open; EOF means its session is gone (SSH dropped, preflight
        # killed): end the probes and leave nothing running on the node
        def _watch():
            try:
                while _sys.stdin.buffer.read(4096):
                    pass
            except Exception:
                pass
            stopping.append(0)
            kill_live()
            _os._exit(3)
        _threading.Thread(target=_watch, daemon=True).start()
    def done(c):
        rec = {"node": node, "probe": c.probe, "argv": list(c.argv), "state": c.state.value, "stdout": c.stdout,
               "stderr": c.stderr, "rc": c.rc, "duration": c.duration, "truncated": c.truncated,
               "timeout": c.timeout, "reason": c.reason}
        line = "%s %s capture %s\n" % ("@@preflight", nonce, _json.dumps(rec))
        with lock:
            if stopping:  # a probe we killed on the way out is not a result
                return
            _sys.stdout.write(line)
            _sys.stdout.flush()
    finished = _threading.Event()
    tick_s = float(bundle.get("tick_s") or 0)

    def _ticker():
        while not finished.wait(tick_s):
            with lock:
                if stopping:
                    return
                _sys.stdout.write("%s %s tick %s %.3f\n" % ("@@preflight", nonce, node, _time.monotonic() - start))
                _sys.stdout.flush()
    if tick_s > 0:
        _threading.Thread(target=_ticker, daemon=True).start()
    try:
        run_bundle(probes, cap=cap, on_done=done)
    finally:
        finished.set()
    _sys.stdout.write("%s %s done %s %.3f\n" % ("@@preflight", nonce, node, _time.monotonic() - start))
    _sys.stdout.flush()
'''


def build_script(probes: Sequence[Probe], cap: int = DEFAULT_CAP, nonce: str | None = None,
                 watch_stdin: bool = False, tick_s: float = 0.0) -> tuple[str, str]:
    """(program text, nonce). Commands whose argv[0] is this Python run with the node's Python.
    With `watch_stdin` the program ends its probes and exits when its stdin reaches EOF (the
    SSH session that started it went away); with `tick_s` it writes a tick line that often."""
    nonce = nonce or secrets.token_hex(8)
    payload = {
        "nonce": nonce,
        "cap": cap,
        "watch_stdin": watch_stdin,
        "tick_s": tick_s,
        "probes": [
            {
                "name": p.name,
                "commands": [[PYTHON_TOKEN if (i == 0 and a == sys.executable) else a for i, a in enumerate(c)]
                             for c in p.commands],
                "timeout": p.timeout,
                "env": [list(kv) for kv in p.env],
            }
            for p in probes
        ],
    }
    script = "\n".join([
        _runner_source(),
        _MAIN,
        f"_main(_json.loads({json.dumps(json.dumps(payload))}))",
    ])
    return script, nonce


@dataclass
class ParsedOutput:
    captures: dict[str, dict[str, Capture]] = field(default_factory=dict)  # node -> probe -> capture
    finished: dict[str, float] = field(default_factory=dict)  # node -> seconds on the node
    ticks: dict[str, float] = field(default_factory=dict)  # node -> seconds on the node at its last tick
    garbage: list[str] = field(default_factory=list)  # lines that were not ours (first few)


def parse_output(text: str, nonce: str, source_prefix: str = "") -> ParsedOutput:
    """Read the delimited lines back; anything else is kept (a few lines) as evidence."""
    out = ParsedOutput()
    head = f"{MARK} {nonce} "
    for raw in text.splitlines():
        # srun --label puts "<task>: " in front; the marker may not start the line
        pos = raw.find(head)
        if pos < 0:
            if raw.strip() and len(out.garbage) < 20:
                out.garbage.append(raw[:300])
            continue
        rest = raw[pos + len(head):]
        kind, _, body = rest.partition(" ")
        if kind == "capture":
            try:
                rec = json.loads(body)
                node = str(rec.pop("node"))
                cap = Capture(
                    probe=str(rec["probe"]), argv=[str(a) for a in rec["argv"]], state=CaptureState(rec["state"]),
                    stdout=str(rec["stdout"]), stderr=str(rec["stderr"]), rc=rec["rc"],
                    duration=float(rec["duration"]), truncated=bool(rec["truncated"]),
                    timeout=float(rec["timeout"]), reason=str(rec["reason"]),
                    source=f"{source_prefix}{node}:probe:{rec['probe']}",
                )
            except (ValueError, KeyError, TypeError):
                if len(out.garbage) < 20:
                    out.garbage.append(raw[:300])
                continue
            out.captures.setdefault(node, {})[cap.probe] = cap
        elif kind in ("done", "tick"):
            parts = body.split()
            if len(parts) == 2:
                try:
                    (out.finished if kind == "done" else out.ticks)[parts[0]] = float(parts[1])
                except ValueError:
                    pass
    return out
