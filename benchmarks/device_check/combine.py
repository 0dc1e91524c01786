"""The device check's one JSON: every step's record, and the exit status.

    python combine.py DIR OUT.json STEP:RC:SECONDS:TIMEOUT ...

A step that left no record (it crashed, or `timeout` killed it: rc 124/137) is failed here with
that cause and the end of its log. Prints one line per step; exits 1 when any step failed.
"""

from __future__ import annotations

import json
import platform
import socket
import sys
import time
from pathlib import Path
from typing import Any


def record(folder: Path, name: str, rc: int, seconds: float, limit: float) -> dict[str, Any]:
    path = folder / "steps" / f"{name}.json"
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        log = folder / "steps" / f"{name}.log"
        end = log.read_text(errors="replace").strip().splitlines()[-6:] if log.is_file() else []
        why = (f"timed out after {limit:g} s" if rc in (124, 137) else f"exited {rc} without writing its record")
        rec = {"step": name, "status": "fail", "reason": f"{why}: {' | '.join(end)}".rstrip(": "),
               "duration_s": seconds, "commands": [], "figures": {}}
    rec["wall_s"] = seconds
    rec["timeout_s"] = limit
    if rc not in (0, 124, 137) and rec.get("status") != "fail":
        rec["status"], rec["reason"] = "fail", f"exited {rc} after writing its record: {rec.get('reason', '')}"
    return rec


def main(argv: list[str]) -> int:
    folder, out = Path(argv[0]), Path(argv[1])
    steps = []
    for spec in argv[2:]:
        name, rc, seconds, limit = spec.split(":")
        steps.append(record(folder, name, int(rc), float(seconds), float(limit)))
    failed = [s["step"] for s in steps if s.get("status") == "fail"]
    try:
        environment = json.loads((folder / "environment.json").read_text())
    except (OSError, ValueError):
        environment = {}
    doc = {"schema_version": 1, "ok": not failed, "failed": failed, "host": socket.gethostname(),
           "platform": platform.platform(), "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "folder": str(folder), "environment": environment, "steps": steps}
    out.write_text(json.dumps(doc, indent=1, default=str))
    for s in steps:
        print(f"{s['step']:8} {s['status']:8} {s.get('wall_s', 0):6.1f}s  {s.get('reason', '')}"[:300])
    print(f"device check: {'FAIL (' + ', '.join(failed) + ')' if failed else 'PASS'}; {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
