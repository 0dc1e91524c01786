"""Building bundles in memory for the attribution tests (what collect would have brought back)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from preflight.model import Capture, CaptureState
from preflight.triage.collect import RUN_DIR_PROBE, Bundle
from tests.conftest import FIXTURES

TRIAGE = FIXTURES / "triage"


def files_capture(files: dict[str, bytes | str | Path], probe: str = RUN_DIR_PROBE,
                  mtimes: dict[str, float] | None = None, target: str = "/runs/exp") -> Capture:
    """A files-probe capture holding `files` (name -> content or fixture path)."""
    out = []
    for name, content in files.items():
        if isinstance(content, Path):
            data = content.read_bytes()
        elif isinstance(content, str):
            data = content.encode()
        else:
            data = content
        out.append({"name": name, "size": len(data), "mtime": (mtimes or {}).get(name, 1795431000.0),
                    "truncated": False, "b64": base64.b64encode(data).decode()})
    doc = {"mode": "dir", "target": target, "exists": True, "files": out, "skipped": []}
    return Capture(probe=probe, argv=["python3", "-c", "..."], state=CaptureState.OK, stdout=json.dumps(doc), rc=0)


def kernel_capture(text: str) -> Capture:
    return Capture(probe="kernel-log", argv=["dmesg", "-T"], state=CaptureState.OK, stdout=text, rc=0)


def make_bundle(nodes: dict[str, dict[str, Capture]], job: dict | None = None) -> Bundle:
    return Bundle(nodes=nodes, job=dict(job or {}), run_dir="/runs/exp", source="memory")
