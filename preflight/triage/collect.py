"""collect: everything triage needs from every node of a job, in one bundle.

Per node, one probe bundle through the usual transports (local, ssh, srun), in parallel and
bounded by the probes' timeouts: the registered node checks' probes (kernel log for Xids, GPU
health, fabric manager, IB ports...), plus
- `triage-run-dir`: the run directory's small files (events, hang records, heartbeats,
  flight-recorder dumps, rank logs), base64 inside one JSON document, bounded per file (the
  tail of a long log) and in total;
- `triage-logs`: the files a `--log GLOB` names (NCCL_DEBUG logs, launcher output), same bounds;
- `triage-procs`: the training processes still running (python processes whose command line
  names the run directory or `--pattern`): pid, state (a `T` is a stopped process), RANK, and a
  `py-spy dump` of each where py-spy is installed;
- `kernel-log` (a node check's probe, collected even with the node checks left out): the OOM
  killer's lines that name a rank's pid.

The bundle is a tar.gz: `manifest.json` (job, nodes, every capture's metadata) and one folder
per node with each probe's output (`<probe>.out`) and the run directory's files unpacked under
`run/`, so `preflight analyze` and a human can read it too.
"""

from __future__ import annotations

import base64
import io
import json
import re
import sys
import tarfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from preflight import lazyre
from preflight.model import Capture, CaptureState
from preflight.probes import Probe
from preflight.remote import module_text
from preflight.triage import gather

BUNDLE_VERSION = 1
RUN_DIR_PROBE = "triage-run-dir"
LOGS_PROBE = "triage-logs"
PROCS_PROBE = "triage-procs"
PER_FILE_BYTES = 1024 * 1024
TOTAL_BYTES = 4 * 1024 * 1024
MAX_FILES = 400
FILES_TIMEOUT = 30.0
PROCS_TIMEOUT = 45.0
MAX_PROCS = 64

_SAFE_NAME = lazyre.compile(r"[^A-Za-z0-9_.-]")


def gather_command(*args: str) -> list[str]:
    """The command that runs `preflight.triage.gather` with `args` on a node with only a stock
    Python: the module's own text, verbatim, as `python -c` (see the module for its arguments)."""
    return [sys.executable, "-c", module_text(gather), *args]


def files_probe(name: str, mode: str, target: str, per_file: int = PER_FILE_BYTES,
                total: int = TOTAL_BYTES) -> Probe:
    """A probe that returns the (bounded) content of a folder's files or a glob's files."""
    return Probe.of(name, gather_command("files", mode, target, str(per_file), str(total), str(MAX_FILES)),
                    timeout=FILES_TIMEOUT)


def procs_probe(pattern: str, spy_timeout: float = 10.0) -> Probe:
    """A probe that lists the python processes matching `pattern`, with their stacks."""
    return Probe.of(PROCS_PROBE, gather_command("procs", pattern, str(spy_timeout), str(PROCS_TIMEOUT - 5),
                                                str(MAX_PROCS)), timeout=PROCS_TIMEOUT)


def kernel_log_probe() -> Probe:
    """The node checks' kernel-log probe (dmesg -T, else journalctl -k): the OOM killer's lines
    that name a rank's pid."""
    from preflight.checks import xid

    return xid.PROBE


def triage_probes(run_dir: str | None, logs: Sequence[str] = (), pattern: str | None = None,
                  kernel_log: bool = False) -> list[Probe]:
    """The triage-specific probes for one node; with `kernel_log` (when the node checks, which
    read it too, are not collected) the kernel log beside the job's files."""
    probes: list[Probe] = []
    if run_dir:
        probes.append(files_probe(RUN_DIR_PROBE, "dir", run_dir))
    for i, g in enumerate(logs):
        probes.append(files_probe(LOGS_PROBE if i == 0 else f"{LOGS_PROBE}-{i}", "glob", g))
    pat = pattern or (re.escape(run_dir) if run_dir else "")
    if pat:
        probes.append(procs_probe(pat))
    if kernel_log and probes:
        probes.append(kernel_log_probe())
    return probes


def node_check_probes(registry: Any, profile_name: str = "generic") -> list[Probe]:
    """The probes of every registered node check (as `preflight node` would run them)."""
    from preflight import engine
    from preflight import profile as profiles
    from preflight.registry import Options

    checks = engine.select(registry, node_only=True)
    prof = profiles.load(profile_name)
    plan = engine.plan_node(checks, "node", prof, Options())
    probes = plan.probes()
    names = {p.name for p in probes}
    return probes + [p for p in engine.DETECT_PROBES if p.name not in names]


# ----- decoding the files probes ---------------------------------------------------------------


@dataclass
class NodeFile:
    name: str
    data: bytes
    size: int = 0
    mtime: float | None = None
    truncated: bool = False

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def _document(capture: Capture | None) -> tuple[dict[str, Any] | None, str]:
    """The JSON document a gatherer probe wrote, or None and a problem sentence."""
    if capture is None:
        return None, "not collected"
    if capture.state is not CaptureState.OK:
        return None, capture.reason or capture.state.value
    try:
        doc = json.loads(capture.stdout)
    except ValueError:
        return None, f"unreadable probe output ({len(capture.stdout)} chars; {capture.stderr.strip()[-200:]})"
    if not isinstance(doc, dict):
        return None, "unreadable probe output"
    protocol = doc.get("protocol", 1)  # documents of protocol 1 did not say so
    if protocol != gather.PROTOCOL:
        return None, (f"the node's gatherer wrote protocol {str(protocol)[:20]}, this preflight reads protocol "
                      f"{gather.PROTOCOL}: run the same preflight version on the node and the controller")
    return doc, ""


def gather_problem(capture: Capture | None) -> str:
    """Why a gatherer probe's document cannot be read ("" when it can)."""
    return _document(capture)[1]


def decode_files(capture: Capture | None) -> tuple[list[NodeFile], str]:
    """The files a files probe brought back, and a problem sentence ("" when fine)."""
    doc, problem = _document(capture)
    if doc is None:
        return [], problem
    files: list[NodeFile] = []
    for f in doc.get("files") or []:
        try:
            files.append(NodeFile(name=str(f["name"]), data=base64.b64decode(f.get("b64", "")),
                                  size=int(f.get("size", 0)), mtime=f.get("mtime"),
                                  truncated=bool(f.get("truncated"))))
        except (KeyError, ValueError, TypeError, AttributeError):
            continue
    problem = "" if doc.get("exists") else f"{doc.get('target', '?')}: no such folder or no file matched"
    return files, problem


def decode_skipped(capture: Capture | None) -> list[tuple[str, str]]:
    """(path, why) for each file a files probe could not read (an error, not a size limit)."""
    doc, _ = _document(capture)
    skipped = (doc.get("skipped") or []) if doc is not None else []
    return [(str(s.get("path", "?")), str(s.get("reason", "unreadable")))
            for s in skipped if isinstance(s, dict) and s.get("error")]


def decode_procs(capture: Capture | None) -> list[dict[str, Any]]:
    """The process records of a procs probe ([] when there are none or they cannot be read)."""
    doc, _ = _document(capture)
    procs = doc.get("processes") if doc is not None else None
    return [p for p in procs or [] if isinstance(p, dict)]


# ----- the bundle ------------------------------------------------------------------------------


@dataclass
class Bundle:
    """What collect gathered: per node, the captures by probe name; plus the job's context."""

    nodes: dict[str, dict[str, Capture]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # node -> why it could not be reached
    job: dict[str, Any] = field(default_factory=dict)  # job_id, start, nodelist, state
    run_dir: str = ""
    created: str = ""
    source: str = ""

    def manifest(self) -> dict[str, Any]:
        nodes: dict[str, Any] = {}
        for node in sorted(set(self.nodes) | set(self.errors)):
            caps = self.nodes.get(node, {})
            nodes[node] = {"error": self.errors.get(node, ""),
                           "captures": {p: {k: v for k, v in c.to_dict().items() if k != "stdout"}
                                        for p, c in sorted(caps.items())}}
        return {"preflight_bundle": BUNDLE_VERSION, "created": self.created, "job": self.job,
                "run_dir": self.run_dir, "nodes": nodes}


def _add(tar: tarfile.TarFile, name: str, data: bytes, mtime: float | None = None) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(mtime or time.time())
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def safe_name(name: str) -> str:
    return _SAFE_NAME.sub("_", name)[:120] or "_"


def write_bundle(bundle: Bundle, path: Path) -> Path:
    """Write the bundle as tar.gz at `path`."""
    bundle.created = bundle.created or datetime.now(timezone.utc).isoformat(timespec="seconds")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        _add(tar, "bundle/manifest.json", json.dumps(bundle.manifest(), indent=1, default=str).encode())
        for node, caps in sorted(bundle.nodes.items()):
            folder = f"bundle/{safe_name(node)}"
            for probe, cap in sorted(caps.items()):
                _add(tar, f"{folder}/{safe_name(probe)}.out", cap.stdout.encode("utf-8", errors="replace"))
                if probe == RUN_DIR_PROBE or probe.startswith(LOGS_PROBE):
                    files, _ = decode_files(cap)
                    sub = "run" if probe == RUN_DIR_PROBE else "logs"
                    for f in files:
                        rel = "/".join(safe_name(p) for p in f.name.strip("/").split("/") if p not in ("", ".", ".."))
                        _add(tar, f"{folder}/{sub}/{rel}", f.data, f.mtime)
    tmp.replace(path)
    return path


class BundleError(Exception):
    """A file that is not a readable preflight bundle."""


def _folder_members(path: Path) -> dict[str, bytes]:
    """manifest.json and <node>/<probe>.out of a bundle unpacked into a folder."""
    root = path / "bundle" if (path / "bundle" / "manifest.json").is_file() else path
    if not (root / "manifest.json").is_file():
        raise BundleError(f"{path}: no manifest.json (not a preflight bundle)")
    members = {"manifest.json": (root / "manifest.json").read_bytes()}
    for p in root.glob("*/*.out"):
        members[f"{p.parent.name}/{p.name}"] = p.read_bytes()
    return members


def _tar_members(path: Path) -> dict[str, bytes]:
    """manifest.json and <node>/<probe>.out of a bundle's tar.gz."""
    members: dict[str, bytes] = {}
    try:
        with tarfile.open(path, "r:*") as tar:
            for m in tar.getmembers():
                if not m.isfile() or m.name.count("/") != 2 and not m.name.endswith("manifest.json"):
                    continue
                fh = tar.extractfile(m)
                if fh is not None:
                    members[m.name.split("/", 1)[1] if m.name.startswith("bundle/") else m.name] = fh.read()
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise BundleError(f"{path}: not a readable bundle ({exc})") from None
    return members


def _node_captures(path: Path, node: str, rec: dict[str, Any], members: dict[str, bytes]) -> dict[str, Capture]:
    """One node's captures: the manifest's metadata with each probe's output file."""
    caps: dict[str, Capture] = {}
    for probe, meta in (rec.get("captures") or {}).items():
        try:
            cap = Capture.from_dict({**meta, "stdout": ""})
        except (KeyError, TypeError, ValueError):
            continue
        data = members.get(f"{safe_name(node)}/{safe_name(probe)}.out", b"")
        cap.stdout = data.decode("utf-8", errors="replace")
        cap.source = f"{path}:{node}/{safe_name(probe)}.out"
        caps[probe] = cap
    return caps


def read_bundle(path: Path) -> Bundle:
    """Read a bundle written by `write_bundle` (a tar.gz, or the folder it was unpacked into)."""
    members = _folder_members(path) if path.is_dir() else _tar_members(path)
    if "manifest.json" not in members:
        raise BundleError(f"{path}: no manifest.json (not a preflight bundle)")
    try:
        man = json.loads(members["manifest.json"])
    except ValueError as exc:
        raise BundleError(f"{path}: manifest.json is not JSON ({exc})") from None
    if not isinstance(man, dict) or not isinstance(man.get("nodes") or {}, dict):
        raise BundleError(f"{path}: manifest.json is not a preflight bundle's manifest")
    job = man.get("job")
    b = Bundle(job=dict(job) if isinstance(job, dict) else {}, run_dir=str(man.get("run_dir", "")),
               created=str(man.get("created", "")), source=str(path))
    for node, rec in (man.get("nodes") or {}).items():
        if not isinstance(rec, dict):
            continue
        if rec.get("error"):
            b.errors[node] = str(rec["error"])
        caps = _node_captures(path, node, rec, members)
        if caps:
            b.nodes[node] = caps
    return b


def from_outcomes(outcomes: dict[str, Any], job: dict[str, Any], run_dir: str) -> Bundle:
    """A Bundle from a transport's NodeOutcomes."""
    b = Bundle(job=dict(job), run_dir=run_dir)
    for node, out in outcomes.items():
        if out.captures:
            b.nodes[node] = dict(out.captures)
        if out.error:
            b.errors[node] = out.error
    return b
