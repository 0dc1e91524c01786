"""Run SSHTransport.spawn from a JSON spec and print what each command gave back as JSON.

Runs inside the test cluster's client namespace (`cluster.client(sys.executable, _spawn_drive.py, SPEC)`).
SPEC: {"config": "<ssh_config>", "opts": {<SSHTransport keyword arguments>},
       "commands": {"<node>": ["argv", ...]}, "stdin": {"<node>": "text"}, "close_stdin": true,
       "stop_after": <seconds or null>, "stop_grace": <seconds>, "wait": <seconds>}
Output: {"<node>": {"lines": [[seconds, line], ...], "rc": rc, "ended": bool, "running_after_stop": bool,
         "failure": {"error": ..., "detail": {...}} or null, "elapsed": seconds}}
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from preflight.transport.ssh import SSHTransport  # noqa: E402


def main(argv: list[str]) -> int:
    spec: dict[str, Any] = json.loads(argv[1])
    begin = time.monotonic()
    got: dict[str, list[list[Any]]] = {n: [] for n in spec["commands"]}
    ended_at: dict[str, float] = {}
    lock = threading.Lock()

    def on_line(node: str, line: str | None) -> None:
        with lock:
            if line is None:
                ended_at[node] = round(time.monotonic() - begin, 3)
            else:
                got[node].append([round(time.monotonic() - begin, 3), line])

    result: dict[str, Any] = {}
    with SSHTransport(ssh_config=Path(spec["config"]), **spec.get("opts", {})) as transport:
        procs = transport.spawn(spec["commands"], on_line=on_line)
        for node, text in spec.get("stdin", {}).items():
            procs[node].write(text.encode())
        if spec.get("close_stdin"):
            for proc in procs.values():
                proc.close_stdin()
        stop_after = spec.get("stop_after")
        if stop_after is not None:
            time.sleep(float(stop_after))
            for proc in procs.values():
                proc.stop(float(spec.get("stop_grace", 1.0)))
        end = time.monotonic() + float(spec.get("wait", 30))
        for proc in procs.values():
            proc.wait(max(0.0, end - time.monotonic()))
        for node, proc in procs.items():
            failure = proc.failure
            result[node] = {
                "lines": got[node], "rc": proc.returncode, "ended": not proc.running(),
                "ended_at": ended_at.get(node),
                "failure": None if failure is None else {"error": failure.error, "detail": failure.detail},
            }
    result["_elapsed"] = round(time.monotonic() - begin, 3)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
