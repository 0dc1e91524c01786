"""Run SSHTransport.collect from a JSON spec and print the outcomes as JSON.

The SSH transport is in-process Python, so tests run this script inside the test cluster's
client namespace (`cluster.client(sys.executable, _drive.py, SPEC)`). SPEC:
  {"config": "<ssh_config>", "opts": {<SSHTransport keyword arguments>}, "rounds": 1,
   "bundles": {"<node>": [["<probe>", ["argv", ...], <timeout>], ...]}}
Output: {"rounds": [{"elapsed": s, "outcomes": {node: {...}}}], "progress": [[node, probe], ...],
        "total": s}
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from preflight.model import Capture  # noqa: E402
from preflight.probes import Probe  # noqa: E402
from preflight.transport.ssh import SSHTransport  # noqa: E402


def main(argv: list[str]) -> int:
    spec: dict[str, Any] = json.loads(argv[1])
    bundles = {node: [Probe.of(name, cmd, timeout=float(timeout)) for name, cmd, timeout in probes]
               for node, probes in spec["bundles"].items()}
    seen: list[list[str]] = []

    def progress(node: str, cap: Capture) -> None:
        seen.append([node, cap.probe])

    rounds = []
    opts = dict(spec.get("opts", {}))
    begin = time.monotonic()
    with SSHTransport(ssh_config=Path(spec["config"]), **opts) as transport:
        for _ in range(int(spec.get("rounds", 1))):
            start = time.monotonic()
            outcomes = transport.collect(bundles, progress)
            elapsed = time.monotonic() - start
            rounds.append({
                "elapsed": round(elapsed, 3),
                "outcomes": {
                    node: {
                        "error": o.error,
                        "detail": o.detail,
                        "duration": o.duration,
                        "captures": {p: {"state": c.state.value, "stdout": c.stdout[:2000], "rc": c.rc,
                                         "source": c.source} for p, c in o.captures.items()},
                    }
                    for node, o in outcomes.items()
                },
            })
    total = round(time.monotonic() - begin, 3)  # closing included
    print(json.dumps({"rounds": rounds, "progress": seen, "total": total}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
