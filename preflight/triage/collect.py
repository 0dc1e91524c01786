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
  `py-spy dump` of each where py-spy is installed.

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

from preflight.model import Capture, CaptureState
from preflight.probes import Probe

BUNDLE_VERSION = 1
RUN_DIR_PROBE = "triage-run-dir"
LOGS_PROBE = "triage-logs"
PROCS_PROBE = "triage-procs"
PER_FILE_BYTES = 1024 * 1024
TOTAL_BYTES = 4 * 1024 * 1024
MAX_FILES = 400
FILES_TIMEOUT = 30.0
PROCS_TIMEOUT = 45.0

# Runs on the node with its own Python (standard library only). argv: mode (dir|glob) target
# per_file total max_files. Prints one JSON document; structured small files first.
FILES_SCRIPT = r'''
import base64, glob, json, os, sys
mode, target, per_file, total, max_files = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
out = {"mode": mode, "target": target, "exists": False, "files": [], "skipped": []}
paths = []
if mode == "dir":
    out["exists"] = os.path.isdir(target)
    if out["exists"]:
        for root, dirs, names in os.walk(target):
            depth = root[len(target):].count(os.sep)
            if depth >= 2:
                dirs[:] = []
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            for n in names:
                if not n.startswith("."):
                    paths.append(os.path.join(root, n))
else:
    paths = sorted(glob.glob(target, recursive=True))
    out["exists"] = bool(paths)
def prio(p):
    n = os.path.basename(p)
    for i, pre in enumerate(("crash-", "hang-", "fr-", "heartbeat-", "events-", "stacks-", "nccl_trace")):
        if n.startswith(pre):
            return (i, n)
    return (9 if not n.endswith((".log", ".txt", ".out", ".err")) else 8, n)
used = 0
for p in sorted(paths, key=prio):
    if len(out["files"]) >= max_files or not os.path.isfile(p):
        out["skipped"].append({"path": p, "reason": "not a regular file" if len(out["files"]) < max_files
                               else "over the file-count limit"})
        continue
    try:
        st = os.stat(p)
        size = st.st_size
        keep = min(size, per_file, max(0, total - used))
        if keep <= 0 and size > 0:
            out["skipped"].append({"path": p, "reason": "over the total size limit"})
            continue
        with open(p, "rb") as fh:
            if keep < size:
                fh.seek(size - keep)
            data = fh.read(keep)
    except OSError as exc:
        out["skipped"].append({"path": p, "reason": exc.strerror or str(exc), "error": True})
        continue
    used += len(data)
    rel = os.path.relpath(p, target) if mode == "dir" else p
    out["files"].append({"name": rel, "size": size, "mtime": st.st_mtime, "truncated": keep < size,
                         "b64": base64.b64encode(data).decode()})
sys.stdout.write(json.dumps(out))
'''

# argv: pattern (regex on the command line) spy_timeout total_deadline max_procs
PROCS_SCRIPT = r'''
import json, os, re, shutil, subprocess, sys, time
pattern, spy_t, deadline, max_procs = re.compile(sys.argv[1]), float(sys.argv[2]), time.monotonic() + float(sys.argv[3]), int(sys.argv[4])
me = os.getpid()
skip = set()
pid = me
for _ in range(64):
    skip.add(pid)
    try:
        pid = int(open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[1])
    except Exception:
        break
    if pid <= 1:
        break
procs = []
for entry in os.listdir("/proc"):
    if not entry.isdigit() or int(entry) in skip:
        continue
    try:
        argv = open("/proc/%s/cmdline" % entry, "rb").read().split(b"\0")
        argv = [a.decode("utf-8", "replace") for a in argv if a]
        if not argv or "python" not in os.path.basename(argv[0]):
            continue
        cmd = " ".join(argv)
        if not pattern.search(cmd):
            continue
        stat = open("/proc/%s/stat" % entry).read()
        state = stat.rsplit(")", 1)[1].split()[0]
        rank = None
        try:
            env = open("/proc/%s/environ" % entry, "rb").read().split(b"\0")
            for kv in env:
                if kv.startswith(b"RANK="):
                    rank = int(kv[5:])
        except Exception:
            pass
        procs.append({"pid": int(entry), "state": state, "rank": rank, "cmdline": cmd[:500]})
    except Exception:
        continue
procs.sort(key=lambda p: (p["rank"] if p["rank"] is not None else 1 << 30, p["pid"]))
spy = shutil.which("py-spy")
out = {"py_spy": spy or "", "processes": procs[:max_procs]}
for p in out["processes"]:
    if not spy:
        break
    left = deadline - time.monotonic()
    if left <= 1:
        p["py_spy_error"] = "collection deadline reached"
        continue
    try:
        r = subprocess.run([spy, "dump", "--pid", str(p["pid"])], capture_output=True, text=True, timeout=min(spy_t, left))
        p["py_spy"] = r.stdout[-200000:]
        if r.returncode != 0:
            p["py_spy_error"] = (r.stderr or "").strip()[-500:]
    except subprocess.TimeoutExpired:
        p["py_spy_error"] = "py-spy dump timed out"
    except OSError as exc:
        p["py_spy_error"] = str(exc)
sys.stdout.write(json.dumps(out))
'''

_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]")


def files_probe(name: str, mode: str, target: str, per_file: int = PER_FILE_BYTES,
                total: int = TOTAL_BYTES) -> Probe:
    """A probe that returns the (bounded) content of a folder's files or a glob's files."""
    return Probe.of(name, [sys.executable, "-c", FILES_SCRIPT, mode, target, str(per_file), str(total),
                           str(MAX_FILES)], timeout=FILES_TIMEOUT)


def procs_probe(pattern: str, spy_timeout: float = 10.0) -> Probe:
    return Probe.of(PROCS_PROBE, [sys.executable, "-c", PROCS_SCRIPT, pattern, str(spy_timeout),
                                  str(PROCS_TIMEOUT - 5), "64"], timeout=PROCS_TIMEOUT)


def triage_probes(run_dir: str | None, logs: Sequence[str] = (), pattern: str | None = None) -> list[Probe]:
    """The triage-specific probes for one node."""
    probes: list[Probe] = []
    if run_dir:
        probes.append(files_probe(RUN_DIR_PROBE, "dir", run_dir))
    for i, g in enumerate(logs):
        probes.append(files_probe(LOGS_PROBE if i == 0 else f"{LOGS_PROBE}-{i}", "glob", g))
    pat = pattern or (re.escape(run_dir) if run_dir else "")
    if pat:
        probes.append(procs_probe(pat))
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


def decode_files(capture: Capture | None) -> tuple[list[NodeFile], str]:
    """The files a files probe brought back, and a problem sentence ("" when fine)."""
    if capture is None:
        return [], "not collected"
    if capture.state is not CaptureState.OK:
        return [], capture.reason or capture.state.value
    try:
        doc = json.loads(capture.stdout)
    except ValueError:
        return [], f"unreadable probe output ({len(capture.stdout)} chars; {capture.stderr.strip()[-200:]})"
    if not isinstance(doc, dict):
        return [], "unreadable probe output"
    files: list[NodeFile] = []
    for f in doc.get("files") or []:
        try:
            files.append(NodeFile(name=str(f["name"]), data=base64.b64decode(f.get("b64", "")),
                                  size=int(f.get("size", 0)), mtime=f.get("mtime"),
                                  truncated=bool(f.get("truncated"))))
        except (KeyError, ValueError, TypeError):
            continue
    problem = "" if doc.get("exists") else f"{doc.get('target', '?')}: no such folder or no file matched"
    return files, problem


def decode_skipped(capture: Capture | None) -> list[tuple[str, str]]:
    """(path, why) for each file a files probe could not read (an error, not a size limit)."""
    if capture is None or capture.state is not CaptureState.OK:
        return []
    try:
        doc = json.loads(capture.stdout)
    except ValueError:
        return []
    out = []
    for s in (doc.get("skipped") or []) if isinstance(doc, dict) else []:
        if isinstance(s, dict) and s.get("error"):
            out.append((str(s.get("path", "?")), str(s.get("reason", "unreadable"))))
    return out


def decode_procs(capture: Capture | None) -> list[dict[str, Any]]:
    if capture is None or capture.state is not CaptureState.OK:
        return []
    try:
        doc = json.loads(capture.stdout)
    except ValueError:
        return []
    procs = doc.get("processes") if isinstance(doc, dict) else None
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


def read_bundle(path: Path) -> Bundle:
    """Read a bundle written by `write_bundle` (a tar.gz, or the folder it was unpacked into)."""
    members: dict[str, bytes] = {}
    if path.is_dir():
        root = path / "bundle" if (path / "bundle" / "manifest.json").is_file() else path
        if not (root / "manifest.json").is_file():
            raise BundleError(f"{path}: no manifest.json (not a preflight bundle)")
        members["manifest.json"] = (root / "manifest.json").read_bytes()
        for p in root.glob("*/*.out"):
            members[f"{p.parent.name}/{p.name}"] = p.read_bytes()
    else:
        try:
            with tarfile.open(path, "r:*") as tar:
                for m in tar.getmembers():
                    if not m.isfile() or m.name.count("/") != 2 and not m.name.endswith("manifest.json"):
                        continue
                    fh = tar.extractfile(m)
                    if fh is None:
                        continue
                    rel = m.name.split("/", 1)[1] if m.name.startswith("bundle/") else m.name
                    members[rel] = fh.read()
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise BundleError(f"{path}: not a readable bundle ({exc})") from None
    if "manifest.json" not in members:
        raise BundleError(f"{path}: no manifest.json (not a preflight bundle)")
    try:
        man = json.loads(members["manifest.json"])
    except ValueError as exc:
        raise BundleError(f"{path}: manifest.json is not JSON ({exc})") from None
    b = Bundle(job=dict(man.get("job") or {}), run_dir=str(man.get("run_dir", "")),
               created=str(man.get("created", "")), source=str(path))
    for node, rec in (man.get("nodes") or {}).items():
        if rec.get("error"):
            b.errors[node] = str(rec["error"])
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
