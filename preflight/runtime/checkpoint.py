"""Atomic, verified, rotating training checkpoints (one shard per rank), with optional async save.

Layout of the checkpoint directory (shared by every rank of the job)::

    step-00001200/            a checkpoint; complete only when manifest.json is present
        rank0.pt ... rank<W-1>.pt
        manifest.json         step, time, world size, format version, sha256 + size per file
    .staging-1300-<nonce>/    a save in progress (never a candidate for loading)
    .trash-...                a checkpoint being deleted (never a candidate)
    .lock                     held (flock) by rank 0 of the job that writes here

A save, in order (a crash at any point leaves nothing that `latest()` accepts unless complete):

1. rank 0 removes stale staging/trash folders of crashed saves (only when it holds `.lock`, so
   no other live writer can own them; without the lock only folders older than `stale_after_s`);
   it creates `.staging-<step>-<nonce>` and tells every rank its name;
2. every rank writes its shard `rank<R>.pt` into it (sha256 computed while writing, the disk
   write started piece by piece), fsyncs it;
3. a gather of every rank's outcome (the barrier): no rank's shard is missing or undurable;
4. rank 0 fsyncs the staging folder, renames it to `step-<step:08d>`, fsyncs the parent;
5. rank 0 writes `manifest.json` LAST (temp file, fsync, rename, fsync the folder): its presence
   marks the checkpoint complete; then rotation (keep_last) and a broadcast of the outcome, so
   every rank returns (or raises) together.

`latest()` takes the newest step folder whose manifest parses and whose files all exist with the
recorded size and sha256; others are skipped with an event naming what was wrong. `load_latest()`
is collective: rank 0 lists candidates, each rank verifies and loads only its own shard (each
byte is read once), and the ranks agree before returning, falling back together to an older
checkpoint when any shard is bad. A changed world size raises `CheckpointError` (resharding is
not done here).

Rotation runs only after the new checkpoint is complete; it keeps the `keep_last` newest complete
checkpoints and always the one just written, so the last valid checkpoint is never removed.
Deletion renames a folder to `.trash-*` first, then removes it.

Async save (`async_save=True`): the blocking part is a copy of the state to CPU memory (tensors
are copied, into the previous snapshot's buffers when shapes match; CUDA tensors through pinned
memory); the writing and the coordination run in one
background daemon thread on a dedicated gloo group, at most one save in flight (the next `save`
waits). An error in the background is written as an event at once and raised as
`CheckpointError` from the next `save()` or `wait()`; it is never dropped.

In a process group, construct the manager on every rank (it creates a gloo group: collective)
and call `save`/`load_latest` on every rank in the same order. All ranks must see the same
directory (a shared filesystem). Files are read with `torch.load(weights_only=True)` by default:
keep checkpoint state to tensors, numbers, strings and containers (`capture_rng_state` does).

Limits: saving a step that already exists replaces it (renamed aside, then the new one renamed
in: for an instant that step is absent); rotation tells complete from incomplete by the
manifest and does not re-hash older checkpoints; the `.lock` relies on flock, which a network
filesystem may not provide (then leftovers are removed only after `stale_after_s`).
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import errno
import hashlib
import io
import json
import logging
import os
import random
import secrets
import shutil
import socket
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from preflight import lazyre
from preflight.model import Status
from preflight.runtime.events import EventWriter, emit_guarded

log = logging.getLogger("preflight.runtime")

CHECK = "runtime.checkpoint"
FORMAT = "preflight-checkpoint"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
STEP_RE = lazyre.compile(r"^step-(\d+)$")
STAGING_PREFIX = ".staging-"
TRASH_PREFIX = ".trash-"
_CHUNK = 16 << 20  # hash and write large buffers in pieces of this size, concurrently

# Fault injection for tests: called with the name of each phase of a save as it is reached.
_fault_point: Callable[[str], None] | None = None


class CheckpointError(RuntimeError):
    """A save or load that did not succeed (raised on every rank alike)."""


@dataclass
class CheckpointInfo:
    """One complete checkpoint on disk."""

    step: int
    path: Path
    manifest: dict[str, Any] = field(default_factory=dict)


def _phase(name: str) -> None:
    hook = _fault_point
    if hook is not None:
        hook(name)


# ---------------------------------------------------------------------------- RNG state


def capture_rng_state() -> dict[str, Any]:
    """The RNG states of python, numpy (when installed), torch CPU and every CUDA device (when
    CUDA is initialized in this process).

    Only tensors, numbers, strings and tuples, so `torch.load(weights_only=True)` reads it back.
    """
    import torch

    state: dict[str, Any] = {"python": _py_state(random.getstate()), "torch": torch.get_rng_state()}
    try:
        import numpy as np
    except ImportError:
        np = None  # type: ignore[assignment]
    if np is not None:
        kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)  # type: ignore[misc]
        state["numpy"] = {"kind": str(kind), "keys": torch.from_numpy(np.asarray(keys).astype(np.int64)),
                          "pos": int(pos), "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: Mapping[str, Any]) -> None:
    """Put back what `capture_rng_state` captured (parts absent on either side are left alone)."""
    import torch

    if "python" in state:
        version, internal, gauss = state["python"]
        random.setstate((int(version), tuple(int(v) for v in internal), gauss))
    if "torch" in state:
        torch.set_rng_state(state["torch"])
    if "numpy" in state:
        try:
            import numpy as np
        except ImportError:
            np = None  # type: ignore[assignment]
        if np is not None:
            s = state["numpy"]
            np.random.set_state((s["kind"], s["keys"].numpy().astype(np.uint32), int(s["pos"]),
                                 int(s["has_gauss"]), float(s["cached_gaussian"])))
    if "cuda" in state and torch.cuda.is_available():
        saved = list(state["cuda"])
        if len(saved) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(saved)
        else:
            log.warning("preflight: CUDA RNG state of %d devices not restored on %d devices",
                        len(saved), torch.cuda.device_count())


def _py_state(st: tuple[Any, ...]) -> tuple[Any, ...]:
    version, internal, gauss = st
    return (int(version), tuple(int(v) for v in internal), gauss)


# ---------------------------------------------------------------------------- file helpers


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _writeback_starter() -> Callable[[int, int, int], None]:
    """sync_file_range(SYNC_FILE_RANGE_WRITE) where the C library has it, else a no-op: it starts
    the disk write of a range at once (without waiting), so the device works while the next
    pieces are hashed and written, and the final fsync has little left to do."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.sync_file_range
        fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
        fn.restype = ctypes.c_int
    except (OSError, AttributeError):
        return lambda fd, off, n: None

    def start(fd: int, off: int, n: int) -> None:
        fn(fd, off, n, 2)  # SYNC_FILE_RANGE_WRITE; a failure only loses the overlap

    return start


_start_writeback = _writeback_starter()


class _HashingFile:
    """A write-only file object that computes sha256 while writing; big buffers are hashed in a
    second thread while the same bytes are written and their disk write is started (hashing
    and writing release the GIL). Every buffer is fully hashed before write() returns: the
    caller's memory is never read after that."""

    def __init__(self, raw: io.FileIO) -> None:
        self.raw = raw
        self.fd = raw.fileno()
        self.sha = hashlib.sha256()
        self.size = 0

    def _write_all(self, view: memoryview) -> None:
        while len(view):
            n = self.raw.write(view)
            if n is None or n <= 0:
                raise OSError(errno.EIO, f"short write to {self.raw.name}")
            view = view[n:]

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        total = len(view)
        if total < _CHUNK // 4:
            self.sha.update(view)
            self._write_all(view)
        else:
            for off in range(0, total, _CHUNK):
                piece = view[off:off + _CHUNK]
                hasher = threading.Thread(target=self.sha.update, args=(piece,), daemon=True)
                hasher.start()
                try:
                    self._write_all(piece)
                    _start_writeback(self.fd, self.size + off, len(piece))
                finally:
                    hasher.join()
        self.size += total
        return total

    def flush(self) -> None:
        self.raw.flush()


def _write_shard(path: Path, state: Any) -> tuple[str, int]:
    """torch.save `state` to `path`, fsync it; returns (sha256 hex, size)."""
    import torch

    with open(path, "xb", buffering=0) as raw:
        hf = _HashingFile(raw)
        torch.save(state, hf)  # type: ignore[arg-type]
        _phase("shard-written")
        os.fsync(raw.fileno())
    _phase("shard-synced")
    return hf.sha.hexdigest(), hf.size


def _sha256_file(path: Path) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb", buffering=0) as fh:
        buf = bytearray(_CHUNK)
        view = memoryview(buf)
        while True:
            n = fh.readinto(buf)
            if not n:
                break
            h.update(view[:n])
            size += n
    return h.hexdigest(), size


def _write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{secrets.token_hex(4)}")
    data = (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode()
    with open(tmp, "xb", buffering=0) as fh:
        fh.write(data)
        os.fsync(fh.fileno())
    _phase("manifest-tmp-written")
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _to_cpu(obj: Any, path: tuple[Any, ...], memo: dict[int, Any], pool: dict[tuple[Any, ...], Any],
            used: dict[tuple[Any, ...], Any], cuda_used: list[bool]) -> Any:
    """A copy of `obj` that shares no tensor memory with it; tensors land in CPU memory, in the
    buffer of the previous snapshot at the same place when shape and dtype match."""
    import torch

    key = id(obj)
    if key in memo:
        return memo[key]
    out: Any
    if isinstance(obj, torch.Tensor):
        t = obj.detach()
        pin = t.device.type == "cuda"
        buf = pool.get(path)
        if (isinstance(buf, torch.Tensor) and buf.shape == t.shape and buf.dtype == t.dtype
                and buf.layout == t.layout == torch.strided and buf.is_pinned() == pin):
            out = buf
        elif t.device.type == "cpu" and t.layout != torch.strided:
            out = t.clone()  # sparse and other layouts: no buffer reuse
            memo[key] = out
            return out
        else:
            out = torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=pin)
        out.copy_(t, non_blocking=pin)
        cuda_used[0] = cuda_used[0] or pin
        used[path] = out
    elif isinstance(obj, dict):
        out = type(obj)() if type(obj) is not dict else {}
        for k, v in obj.items():
            out[k] = _to_cpu(v, (*path, k), memo, pool, used, cuda_used)
    elif isinstance(obj, list):
        out = [_to_cpu(v, (*path, i), memo, pool, used, cuda_used) for i, v in enumerate(obj)]
    elif isinstance(obj, tuple):
        items = [_to_cpu(v, (*path, i), memo, pool, used, cuda_used) for i, v in enumerate(obj)]
        out = type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    else:
        out = copy.deepcopy(obj)
    memo[key] = out
    return out


def snapshot_to_cpu(state: Any, pool: dict[tuple[Any, ...], Any] | None = None) -> Any:
    """A deep copy of `state` with every tensor copied into CPU memory (what async save blocks on).

    With `pool` (a dict kept between calls), tensors are copied into the buffers of the previous
    snapshot where shape and dtype match, and the pool is refilled with this snapshot's buffers:
    the caller must no longer use the previous snapshot.
    """
    import torch

    cuda_used = [False]
    used: dict[tuple[Any, ...], Any] = {}
    out = _to_cpu(state, (), {}, pool if pool is not None else {}, used, cuda_used)
    if cuda_used[0]:
        torch.cuda.synchronize()
    if pool is not None:
        pool.clear()
        pool.update(used)
    return out


# ---------------------------------------------------------------------------- validation


def _read_manifest(folder: Path) -> tuple[dict[str, Any] | None, str]:
    mpath = folder / MANIFEST
    try:
        text = mpath.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, "no manifest.json (the save did not complete)"
    except OSError as exc:
        return None, f"manifest.json unreadable: {exc}"
    try:
        man = json.loads(text)
    except ValueError as exc:
        return None, f"manifest.json does not parse: {exc}"
    if not isinstance(man, dict) or man.get("format") != FORMAT:
        return None, "manifest.json is not a checkpoint manifest"
    if man.get("version") != FORMAT_VERSION:
        return None, f"manifest.json format version {man.get('version')!r} unknown"
    m = STEP_RE.match(folder.name)
    if not m or man.get("step") != int(m.group(1)):
        return None, f"manifest.json step {man.get('step')!r} does not match the folder name"
    files = man.get("files")
    ws = man.get("world_size")
    if not isinstance(ws, int) or ws < 1 or not isinstance(files, dict):
        return None, "manifest.json lacks world_size or files"
    for name, meta in files.items():
        if (not isinstance(name, str) or "/" in name or name in ("", ".", "..") or not isinstance(meta, dict)
                or not isinstance(meta.get("size"), int) or not isinstance(meta.get("sha256"), str)):
            return None, f"manifest.json has a bad file entry {name!r}"
    for r in range(ws):
        if _shard_name(r) not in files:
            return None, f"manifest.json lacks the shard of rank {r}"
    return man, ""


def _check_file(folder: Path, name: str, meta: Mapping[str, Any], hashes: bool) -> str:
    path = folder / name
    try:
        size = path.stat().st_size
    except OSError:
        return f"{name} missing"
    if size != meta["size"]:
        return f"{name} size {size} != {meta['size']} in the manifest"
    if hashes:
        try:
            digest, _ = _sha256_file(path)
        except OSError as exc:
            return f"{name} unreadable: {exc}"
        if digest != meta["sha256"]:
            return f"{name} sha256 {digest[:16]}... != {str(meta['sha256'])[:16]}... in the manifest"
    return ""


def validate(folder: Path, hashes: bool = True) -> tuple[dict[str, Any] | None, str]:
    """(manifest, "") when `folder` is a complete checkpoint, else (None, what is wrong)."""
    man, why = _read_manifest(folder)
    if man is None:
        return None, why
    for name, meta in man["files"].items():
        why = _check_file(folder, name, meta, hashes)
        if why:
            return None, why
    return man, ""


def _shard_name(rank: int) -> str:
    return f"rank{rank}.pt"


# ---------------------------------------------------------------------------- the manager


def step_folders(root: Path) -> list[tuple[int, Path]]:
    """(step, folder) of every `step-*` folder in `root`, newest first."""
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    found = []
    for ent in entries:
        m = STEP_RE.match(ent.name)
        if m and ent.is_dir(follow_symlinks=False):
            found.append((int(m.group(1)), Path(ent.path)))
    return sorted(found, reverse=True)


def join_background(owner: Any, timeout: float | None, what: str) -> None:
    """Wait for `owner._thread` (a background save) and raise what it left in `owner._error`."""
    th = owner._thread
    if th is not None:
        th.join(timeout)
        if th.is_alive():
            raise CheckpointError(f"{what} still running after {timeout} s")
        owner._thread = None
    err, owner._error = owner._error, None
    if err is not None:
        raise CheckpointError(f"background {what} failed: {err}") from err


class CheckpointManager:
    """Saves and finds checkpoints in `directory`; see the module docstring for the protocol."""

    def __init__(self, directory: str | os.PathLike[str], keep_last: int = 3, events: EventWriter | None = None,
                 async_save: bool = False, rank: int | None = None, world_size: int | None = None,
                 *, stale_after_s: float = 3600.0, exit_wait_s: float = 300.0) -> None:
        if keep_last < 1:
            raise ValueError("keep_last must be at least 1")
        self.directory = Path(directory)
        self.keep_last = keep_last
        self.events = events
        self.async_save = async_save
        self.stale_after_s = stale_after_s
        self.exit_wait_s = exit_wait_s  # at interpreter exit, how long an in-flight save may finish
        self._group: Any = None
        d_rank, d_world = 0, 1
        dist = _dist()
        if dist is not None:
            d_rank, d_world = dist.get_rank(), dist.get_world_size()
        self.rank = d_rank if rank is None else rank
        self.world_size = d_world if world_size is None else world_size
        if self.world_size > 1:
            if dist is None or d_world != self.world_size or d_rank != self.rank:
                raise ValueError("world_size > 1 needs an initialized torch.distributed process group "
                                 "with the same rank and world size")
            # a group of its own: saves coordinate from a background thread without interleaving
            # with the training loop's collectives, and on CPU whatever the training backend is
            self._group = dist.new_group(backend="gloo")
        self.stats: dict[str, float] = {}
        self._pool: dict[tuple[Any, ...], Any] = {}
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._lock_fd: int | None = None
        self._reported: set[tuple[str, str]] = set()
        self._closed = False
        if self.rank == 0:
            self.directory.mkdir(parents=True, exist_ok=True)
        ref = weakref.ref(self)
        self._atexit = lambda: _wait_at_exit(ref)
        atexit.register(self._atexit)

    # ------------------------------------------------------------------ public

    def save(self, step: int, state: Mapping[str, Any]) -> None:
        """Save this rank's `state` as checkpoint `step` (collective). Sync: returns when the
        checkpoint is complete on disk. Async: returns once `state` is copied to CPU memory."""
        if self._closed:
            raise CheckpointError("checkpoint manager is closed")
        step = int(step)
        t0 = time.perf_counter()
        self.wait()  # at most one in flight; raises the error of the previous one
        waited = time.perf_counter() - t0
        if not self.async_save:
            self._save_now(step, state)
            self.stats.update(blocking_s=time.perf_counter() - t0, waited_s=waited)
            return
        t1 = time.perf_counter()
        snapshot = snapshot_to_cpu(state, self._pool)  # the previous snapshot is written: reuse
        self.stats.update(copy_s=time.perf_counter() - t1)
        self._thread = threading.Thread(target=self._background, args=(step, snapshot),
                                        name=f"checkpoint-save-{step}", daemon=True)
        self._thread.start()
        self.stats.update(blocking_s=time.perf_counter() - t0, waited_s=waited)

    def wait(self, timeout: float | None = None) -> None:
        """Wait for an in-flight async save; raise `CheckpointError` if a background save failed."""
        join_background(self, timeout, "checkpoint save")

    def latest(self, verify: bool = True) -> CheckpointInfo | None:
        """The newest complete checkpoint (every file present, size and sha256 as in the manifest).

        Local, not collective. Invalid ones are skipped with a warn event naming what is wrong.
        """
        for step, folder in self._step_folders():
            man, why = validate(folder, hashes=verify)
            if man is not None:
                return CheckpointInfo(step=step, path=folder, manifest=man)
            self._report_invalid(step, folder, why)
        return None

    def load_latest(self, map_location: Any = "cpu", weights_only: bool = True) -> tuple[int, Any] | None:
        """(step, this rank's state) of the newest checkpoint valid on every rank, or None (collective)."""
        self.wait()
        if self._group is None:
            cands = self._candidates()
        else:
            box = [self._candidates() if self.rank == 0 else None]
            self._d().broadcast_object_list(box, src=0, group=self._group)
            cands = box[0] or []
        for step, folder, man in cands:
            if man["world_size"] != self.world_size:
                raise CheckpointError(f"checkpoint {folder} was written by {man['world_size']} ranks, this job "
                                      f"has {self.world_size}: restart with the same world size or reshard it")
            state, why = self._load_shard(folder, man, map_location, weights_only)
            whys = [why]
            if self._group is not None:
                whys = [None] * self.world_size
                self._d().all_gather_object(whys, why, group=self._group)
            bad = [f"rank {r}: {w}" for r, w in enumerate(whys) if w]
            if not bad:
                self._emit(Status.PASS, f"resumed from checkpoint step {step}", step=step,
                           facts={"step": step, "path": str(folder)})
                return step, state
            self._report_invalid(step, folder, "; ".join(bad))
        return None

    def close(self) -> None:
        """Wait for an in-flight save (raising its error) and release the directory lock."""
        if self._closed:
            return
        try:
            self.wait()
        finally:
            self._closed = True
            with contextlib.suppress(Exception):
                atexit.unregister(self._atexit)
            if self._lock_fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._lock_fd)
                self._lock_fd = None

    def __enter__(self) -> CheckpointManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ save internals

    def _background(self, step: int, snapshot: Mapping[str, Any]) -> None:
        try:
            self._save_now(step, snapshot)
        except BaseException as exc:  # kept and raised on the next save()/wait()
            if not isinstance(exc, CheckpointError):  # CheckpointError was reported by _fail
                self._emit(Status.ERROR, f"checkpoint step {step} not saved: {type(exc).__name__}: {exc}",
                           step=step, evidence=[repr(exc)], facts={"step": step, "error": repr(exc)},
                           remedy="see the training log of this rank; the previous checkpoint stays valid")
            self._error = exc

    def _save_now(self, step: int, state: Mapping[str, Any]) -> None:
        """Every rank writes its shard into one staging folder; rank 0 publishes it when every
        shard is durable. Every rank learns the outcome, and all raise on a failure."""
        t0 = time.perf_counter()
        staging = self._agree_staging(step)
        outcomes = self._write_and_gather(staging, state)
        total = self._conclude(step, staging, outcomes)
        secs = time.perf_counter() - t0
        self.stats.update(write_s=secs, bytes=float(total))
        if self.rank == 0:
            self._emit(Status.PASS, f"checkpoint step {step} saved ({total / 1e6:.1f} MB in {secs:.2f} s)",
                       step=step, facts={"step": step, "bytes": total, "seconds": round(secs, 4),
                                         "path": str(self._step_dir(step)), "async": self.async_save,
                                         "world_size": self.world_size})

    def _agree_staging(self, step: int) -> Path:
        """Rank 0 creates the step's staging folder and tells every rank its name (or why not)."""
        staging: Path | None = None
        err = ""
        if self.rank == 0:
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                self._clean_stale()
                staging = self.directory / f"{STAGING_PREFIX}{step}-{secrets.token_hex(6)}"
                staging.mkdir()
                _phase("staging-created")
            except OSError as exc:
                err = f"cannot create the staging folder in {self.directory}: {exc}"
        if self._group is not None:
            box: list[Any] = [(str(staging) if staging else None, err)]
            self._d().broadcast_object_list(box, src=0, group=self._group)
            name, err = box[0]
            staging = Path(name) if name else None
        if staging is None:
            self._fail(step, err or "no staging folder")
        return staging

    def _write_and_gather(self, staging: Path, state: Mapping[str, Any]) -> list[Any]:
        """This rank's shard written (or why not); rank 0 gets every rank's outcome, once every
        shard is durable: (name, sha256, size) or an error text."""
        mine: tuple[str, str, int] | str
        try:
            name = _shard_name(self.rank)
            digest, size = _write_shard(staging / name, state)
            mine = (name, digest, size)
        except Exception as exc:
            mine = f"rank {self.rank}: writing its shard failed: {type(exc).__name__}: {exc}"
        if self._group is not None:
            gathered: list[Any] | None = [None] * self.world_size if self.rank == 0 else None
            self._d().gather_object(mine, gathered, dst=0, group=self._group)  # every shard durable
            outcomes: list[Any] = gathered or []
        else:
            outcomes = [mine]
        _phase("gathered")
        return outcomes

    def _conclude(self, step: int, staging: Path, outcomes: list[Any]) -> int:
        """Rank 0 publishes the step (or removes the staging folder after a rank's failure) and
        tells every rank the result; the bytes written, raising CheckpointError on a failure."""
        result = ""
        total = 0
        if self.rank == 0:
            errors = [o for o in outcomes if isinstance(o, str)]
            if errors:
                result = "; ".join(errors)
                _remove_tree(staging)
            else:
                try:
                    total = sum(o[2] for o in outcomes)
                    self._publish(step, staging, outcomes)
                except Exception as exc:
                    result = f"publishing step {step} failed: {type(exc).__name__}: {exc}"
        if self._group is not None:
            rbox: list[Any] = [result]
            self._d().broadcast_object_list(rbox, src=0, group=self._group)
            result = rbox[0]
        if result:
            self._fail(step, result)
        return total

    def _publish(self, step: int, staging: Path, outcomes: list[Any]) -> None:
        _fsync_dir(staging)
        target = self._step_dir(step)
        if target.exists():  # an older save of this step (complete or not): replace it
            aside = self.directory / f"{TRASH_PREFIX}{target.name}-{secrets.token_hex(4)}"
            os.rename(target, aside)
            _remove_tree(aside)
        os.rename(staging, target)
        _fsync_dir(self.directory)
        _phase("renamed")
        manifest = {
            "format": FORMAT, "version": FORMAT_VERSION, "step": step, "time": time.time(),
            "world_size": self.world_size, "host": socket.gethostname(),
            "files": {name: {"sha256": digest, "size": size} for name, digest, size in outcomes},
        }
        _write_json_atomic(target / MANIFEST, manifest)
        _phase("manifest-renamed")
        try:
            self._rotate(step)
        except OSError as exc:  # the checkpoint is complete; a failed cleanup is only reported
            self._emit(Status.WARN, f"rotation after step {step} failed: {exc}", step=step,
                       remedy=f"free space in {self.directory}; old checkpoints may remain")
        _phase("rotated")

    def _rotate(self, just_saved: int) -> None:
        complete: list[int] = []
        for step, folder in self._step_folders():
            if (folder / MANIFEST).exists():
                complete.append(step)
            elif step != just_saved and self._may_clean(folder):
                self._delete(folder)  # a step folder whose manifest never came: a crashed save
        keep = set(sorted(complete, reverse=True)[: self.keep_last]) | {just_saved}
        for step in complete:
            if step not in keep:
                self._delete(self._step_dir(step))

    def _delete(self, folder: Path) -> None:
        aside = self.directory / f"{TRASH_PREFIX}{folder.name}-{secrets.token_hex(4)}"
        try:
            os.rename(folder, aside)  # from here on never a candidate, even half-deleted
        except FileNotFoundError:
            return
        _remove_tree(aside)

    def _have_lock(self) -> bool:
        if self._lock_fd is not None:
            return True
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not on Linux
            return False
        try:
            fd = os.open(self.directory / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            if ("lock", "") not in self._reported:
                self._reported.add(("lock", ""))
                self._emit(Status.WARN, f"another live process holds {self.directory / '.lock'}",
                           remedy="give each job its own checkpoint directory",
                           facts={"directory": str(self.directory)})
            return False
        self._lock_fd = fd
        return True

    def _may_clean(self, folder: Path) -> bool:
        """Leftovers of crashed saves may go when no other live writer can own them."""
        if self._have_lock():
            return True
        try:
            return time.time() - folder.stat().st_mtime > self.stale_after_s
        except OSError:
            return False

    def _clean_stale(self) -> None:
        try:
            entries = list(os.scandir(self.directory))
        except OSError:
            return
        for ent in entries:
            if ent.name.startswith((STAGING_PREFIX, TRASH_PREFIX)) and ent.is_dir(follow_symlinks=False):
                path = Path(ent.path)
                if self._may_clean(path):
                    _remove_tree(path)

    def _fail(self, step: int, why: str) -> NoReturn:
        self._emit(Status.ERROR, f"checkpoint step {step} not saved: {why}", step=step,
                   evidence=[why], remedy=f"check free space and health of {self.directory}; "
                                          "training continues from the previous checkpoint",
                   facts={"step": step, "error": why})
        raise CheckpointError(f"checkpoint step {step} not saved: {why}")

    # ------------------------------------------------------------------ load internals

    def _candidates(self) -> list[tuple[int, Path, dict[str, Any]]]:
        out = []
        for step, folder in self._step_folders():
            man, why = validate(folder, hashes=False)  # hashes: each rank checks its own shard
            if man is None:
                self._report_invalid(step, folder, why)
            else:
                out.append((step, folder, man))
        return out

    def _load_shard(self, folder: Path, man: Mapping[str, Any], map_location: Any,
                    weights_only: bool) -> tuple[Any, str | None]:
        import torch

        name = _shard_name(self.rank)
        meta = man["files"][name]
        try:
            data = (folder / name).read_bytes()
        except OSError as exc:
            return None, f"{name} unreadable: {exc}"
        if len(data) != meta["size"]:
            return None, f"{name} size {len(data)} != {meta['size']} in the manifest"
        digest = hashlib.sha256(data).hexdigest()
        if digest != meta["sha256"]:
            return None, f"{name} sha256 {digest[:16]}... != {str(meta['sha256'])[:16]}... in the manifest"
        try:
            return torch.load(io.BytesIO(data), map_location=map_location, weights_only=weights_only), None
        except Exception as exc:
            return None, f"{name} does not load: {type(exc).__name__}: {exc}"

    # ------------------------------------------------------------------ misc

    def _step_dir(self, step: int) -> Path:
        return self.directory / f"step-{step:08d}"

    def _step_folders(self) -> list[tuple[int, Path]]:
        return step_folders(self.directory)

    def _report_invalid(self, step: int, folder: Path, why: str) -> None:
        key = (str(folder), why)
        if key in self._reported:
            return
        self._reported.add(key)
        self._emit(Status.WARN, f"checkpoint step {step} skipped: {why}", step=step,
                   evidence=[f"{folder}: {why}"],
                   remedy="an older checkpoint is used; inspect or delete the damaged folder",
                   facts={"step": step, "path": str(folder), "reason": why})

    def _emit(self, status: Status, summary: str, **kw: Any) -> None:
        emit_guarded(self.events, CHECK, status, summary, what="checkpoint", **kw)  # events never break a save

    @staticmethod
    def _d() -> Any:
        import torch.distributed as dist

        return dist


def _dist() -> Any:
    """torch.distributed when a default process group is up, else None (without importing torch
    when the caller never did)."""
    import sys

    if "torch" not in sys.modules:
        return None
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if dist.is_available() and dist.is_initialized():
        return dist
    return None


def _wait_at_exit(ref: weakref.ref[CheckpointManager]) -> None:
    """At interpreter exit, let an in-flight async save finish (its thread is a daemon)."""
    mgr = ref()
    if mgr is None:
        return
    try:
        mgr.wait(timeout=mgr.exit_wait_s)
    except Exception as exc:
        log.warning("preflight: checkpoint at exit: %s", exc)
