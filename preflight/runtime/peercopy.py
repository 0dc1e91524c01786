"""The wire and disk side of local checkpoints' peer copies (used by `localckpt`; stdlib only).

A rank's local checkpoint is one folder `step-<step:08d>/` holding `rank<R>.pt` and a
`manifest.json` (format `preflight-local-checkpoint`: step, rank, world size, host, time, and the
shard's size and digest: sha256 by 4 MiB pieces, hashed in parallel, see `piecehash`). Each rank runs a `PeerServer`: a TCP server thread that keeps the
copies other nodes' ranks send into `<local_dir>/peers/rank<R>/step-*/`, in the same layout, and
gives them back on request.

Protocol (one request per connection): a header (4-byte big-endian length, then a JSON object,
at most 1 MiB) carrying the job's token, then for `put` the shard's bytes. Requests:

- `put`  {rank, step, manifest, size, sha256}, then `size` bytes: written into a staging folder
  while hashed, refused unless the sha256 and size match, fsynced, renamed into place, the
  rank's older copies rotated; the answer is `{ok}` or `{ok: false, error}`;
- `list` {rank}: the steps held for that rank (manifest valid, shard of the recorded size);
- `get`  {rank, step}: `{ok, manifest, size}` then the shard's bytes (the caller verifies the
  sha256 against the manifest while receiving).

Every socket wait is bounded by an idle timeout and every transfer by a deadline. The server
answers a bad request with an error and never raises; it accepts at most `max_conns` at once.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import os
import secrets
import socket
import struct
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from preflight.runtime import piecehash
from preflight.runtime.checkpoint import (
    STAGING_PREFIX,
    STEP_RE,
    TRASH_PREFIX,
    _check_file,
    _fsync_dir,
    _remove_tree,
    _shard_name,
    _start_writeback,
    step_folders,
)

log = logging.getLogger("preflight.runtime")

LOCAL_FORMAT = "preflight-local-checkpoint"
LOCAL_VERSION = 1
MANIFEST = "manifest.json"
PEERS = "peers"
MAX_HEADER = 1 << 20
_PIECE = 1 << 20
MIN_RATE = 10e6  # bytes/s: a transfer slower than this (after the idle timeout) is abandoned


class PeerError(RuntimeError):
    """A copy to or from a peer that did not succeed (always reported, never raised into training)."""


# ---------------------------------------------------------------------------- folders


def step_dir(root: Path, step: int) -> Path:
    return root / f"step-{step:08d}"


def make_manifest(step: int, rank: int, world_size: int, digest: str, size: int) -> dict[str, Any]:
    """The manifest of a local checkpoint; `digest` is the shard's piece digest (`piecehash`)."""
    return {"format": LOCAL_FORMAT, "version": LOCAL_VERSION, "hash": piecehash.ALGORITHM, "step": step, "rank": rank,
            "world_size": world_size, "time": time.time(), "host": socket.gethostname(),
            "files": {_shard_name(rank): {"sha256": digest, "size": size}}}


def check_manifest(man: Any, step: int, rank: int) -> str:
    """'' when `man` is a local checkpoint manifest of `rank` at `step`, else what is wrong."""
    if not isinstance(man, dict) or man.get("format") != LOCAL_FORMAT:
        return "manifest.json is not a local checkpoint manifest"
    if man.get("version") != LOCAL_VERSION:
        return f"manifest.json format version {man.get('version')!r} unknown"
    if man.get("hash") != piecehash.ALGORITHM:
        return f"manifest.json hash {man.get('hash')!r} unknown (expected {piecehash.ALGORITHM})"
    if man.get("step") != step or man.get("rank") != rank:
        return (f"manifest.json is of step {man.get('step')!r} rank {man.get('rank')!r}, "
                f"not step {step} rank {rank}")
    files = man.get("files")
    if not isinstance(files, dict):
        return "manifest.json lacks its files"
    meta = files.get(_shard_name(rank))
    if (not isinstance(meta, dict) or len(files) != 1 or not isinstance(meta.get("size"), int)
            or not isinstance(meta.get("sha256"), str) or len(meta["sha256"]) != 64):
        return f"manifest.json lacks a valid entry for {_shard_name(rank)}"
    return ""


def validate_local(folder: Path, rank: int) -> tuple[dict[str, Any] | None, str]:
    """(manifest, '') when `folder` holds a complete local checkpoint of `rank`, else (None, why).
    Only the shard's size is checked here: whoever reads the bytes verifies the digest."""
    m = STEP_RE.match(folder.name)
    if not m:
        return None, f"{folder.name} is not a step folder"
    try:
        man = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, "no manifest.json (the save did not complete)"
    except (OSError, ValueError) as exc:
        return None, f"manifest.json unreadable or torn: {exc}"
    why = check_manifest(man, int(m.group(1)), rank)
    if why:
        return None, why
    name = _shard_name(rank)
    why = _check_file(folder, name, man["files"][name], False)
    return (None, why) if why else (man, "")


def publish(staging: Path, root: Path, step: int, man: Mapping[str, Any], unsynced: Sequence[int] = (),
            settle_now: bool = True) -> Path:
    """Make `staging` the step folder `root/step-*` with `man` as its manifest.

    The manifest is written and its disk write started, the folder renamed into place (an older
    folder of that step is replaced), then the open files `unsynced` are fsynced: on a
    journaling filesystem that one fsync commits the whole save (the data, the manifest written
    back, the new files and the rename), and one device flush is what a raw write pays too.
    `settle` (now, or later by the caller with `settle_now=False`) fsyncs the manifest and both
    folders as POSIX asks; on a journaling filesystem they find nothing left to write.

    A machine crash before that can leave the folder in place with a torn manifest or shard: the
    manifest then does not parse, or the shard does not match its size and digest, so it is
    skipped and never loaded (the previous step stays), or the folder is missing.
    """
    data = (json.dumps(dict(man), indent=1, sort_keys=True) + "\n").encode()
    fd = os.open(staging / MANIFEST, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data)
        while len(view):
            view = view[os.write(fd, view):]
        _start_writeback(fd, 0, len(data))
    finally:
        os.close(fd)
    target = step_dir(root, step)
    if target.exists():
        aside = root / f"{TRASH_PREFIX}{target.name}-{secrets.token_hex(4)}"
        os.rename(target, aside)
        _remove_tree(aside)
    os.rename(staging, target)
    for other in unsynced:
        os.fsync(other)
    if settle_now:
        settle(target, root)
    return target


def settle(folder: Path, root: Path) -> None:
    """fsync the manifest of a published step folder, the folder and its parent."""
    fd = os.open(folder / MANIFEST, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    _fsync_dir(folder)
    _fsync_dir(root)


def set_aside(root: Path, keep_last: int, just_saved: int) -> list[Path]:
    """Rename out of the way (never a candidate again) every step folder rotation drops, and
    return their new names for removal. Kept: `just_saved` and the newest older steps,
    `keep_last` in all. Steps newer than `just_saved` go too: saving an older step means the
    job went back to it (a restore), and those belong to a timeline that was abandoned."""
    older = [(s, f) for s, f in step_folders(root) if s < just_saved]
    doomed = [f for s, f in step_folders(root) if s > just_saved] + [f for _, f in older[max(0, keep_last - 1):]]
    aside = []
    for folder in doomed:
        trash = root / f"{TRASH_PREFIX}{folder.name}-{secrets.token_hex(4)}"
        with contextlib.suppress(OSError):
            os.rename(folder, trash)
            aside.append(trash)
    return aside


def rotate(root: Path, keep_last: int, just_saved: int) -> None:
    """`set_aside`, then remove what was set aside (only this thread writes in `root`)."""
    for trash in set_aside(root, keep_last, just_saved):
        _remove_tree(trash)


def clean_leftovers(root: Path) -> None:
    """Remove staging and trash folders of saves that did not finish (caller owns `root`)."""
    try:
        entries = list(os.scandir(root))
    except OSError:
        return
    for ent in entries:
        if ent.name.startswith((STAGING_PREFIX, TRASH_PREFIX)) and ent.is_dir(follow_symlinks=False):
            _remove_tree(Path(ent.path))


# ---------------------------------------------------------------------------- wire


def _deadline(timeout_s: float, size: int) -> float:
    return time.monotonic() + timeout_s + size / MIN_RATE


def send_msg(sock: socket.socket, obj: Mapping[str, Any]) -> None:
    data = json.dumps(dict(obj)).encode()
    sock.sendall(struct.pack(">I", len(data)) + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise PeerError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def recv_msg(sock: socket.socket) -> dict[str, Any]:
    (n,) = struct.unpack(">I", _recv_exact(sock, 4))
    if n > MAX_HEADER:
        raise PeerError(f"header of {n} bytes refused (at most {MAX_HEADER})")
    try:
        obj = json.loads(_recv_exact(sock, n))
    except ValueError as exc:
        raise PeerError(f"header is not JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise PeerError("header is not a JSON object")
    return obj


def recv_to_file(sock: socket.socket, fd: int, size: int, deadline: float) -> str:
    """Receive exactly `size` bytes into `fd` while hashing them; the piece digest."""
    sha = piecehash.PieceHash()
    buf = bytearray(min(_PIECE, max(size, 1)))
    view = memoryview(buf)
    left = size
    while left:
        if time.monotonic() > deadline:
            raise PeerError(f"transfer too slow: {size - left} of {size} bytes before the deadline")
        n = sock.recv_into(view[:min(left, len(buf))])
        if not n:
            raise PeerError(f"connection closed after {size - left} of {size} bytes")
        sha.update(view[:n])
        done = view[:n]
        while len(done):
            done = done[os.write(fd, done):]
        left -= n
    return sha.hexdigest()


def send_file(sock: socket.socket, path: Path, size: int, deadline: float) -> None:
    with open(path, "rb") as fh:
        off = 0
        while off < size:
            if time.monotonic() > deadline:
                raise PeerError(f"transfer too slow: {off} of {size} bytes before the deadline")
            sent = sock.sendfile(fh, off, min(64 << 20, size - off))
            if sent <= 0:
                raise PeerError(f"sending stopped after {off} of {size} bytes")
            off += sent


def parse_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"peer address {addr!r} is not host:port")
    return host.strip("[]"), int(port)


def _connect(addr: tuple[str, int], timeout_s: float) -> socket.socket:
    try:
        sock = socket.create_connection(addr, timeout=timeout_s)
    except OSError as exc:
        raise PeerError(f"cannot connect to {addr[0]}:{addr[1]}: {exc}") from exc
    sock.settimeout(timeout_s)
    return sock


def _answer(sock: socket.socket) -> dict[str, Any]:
    reply = recv_msg(sock)
    if not reply.get("ok"):
        raise PeerError(str(reply.get("error") or "refused"))
    return reply


def put(addr: tuple[str, int], token: str, folder: Path, man: Mapping[str, Any], timeout_s: float) -> None:
    """Send the local checkpoint in `folder` (manifest `man`) to the server at `addr`."""
    rank, step = int(man["rank"]), int(man["step"])
    meta = man["files"][_shard_name(rank)]
    try:
        with _connect(addr, timeout_s) as sock:
            send_msg(sock, {"op": "put", "token": token, "rank": rank, "step": step, "manifest": dict(man),
                            "size": meta["size"], "sha256": meta["sha256"]})
            send_file(sock, folder / _shard_name(rank), meta["size"], _deadline(timeout_s, meta["size"]))
            _answer(sock)
    except OSError as exc:
        raise PeerError(f"{type(exc).__name__}: {exc}") from exc


def list_steps(addr: tuple[str, int], token: str, rank: int, timeout_s: float) -> list[int]:
    try:
        with _connect(addr, timeout_s) as sock:
            send_msg(sock, {"op": "list", "token": token, "rank": rank})
            steps = _answer(sock).get("steps")
    except OSError as exc:
        raise PeerError(f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(steps, list) or not all(isinstance(s, int) for s in steps):
        raise PeerError("the peer's step list is malformed")
    return steps


def get(addr: tuple[str, int], token: str, rank: int, step: int, staging: Path, timeout_s: float) -> dict[str, Any]:
    """Fetch `rank`'s copy of `step` into the (existing, empty) folder `staging`, verified against
    the manifest the peer sends; the manifest (not yet written)."""
    name = _shard_name(rank)
    try:
        with _connect(addr, timeout_s) as sock:
            send_msg(sock, {"op": "get", "token": token, "rank": rank, "step": step})
            reply = _answer(sock)
            man = reply.get("manifest")
            why = check_manifest(man, step, rank)
            if why:
                raise PeerError(f"the peer's copy: {why}")
            meta = man["files"][name]  # type: ignore[index]
            if reply.get("size") != meta["size"]:
                raise PeerError(f"the peer offers {reply.get('size')!r} bytes, the manifest says {meta['size']}")
            digest = _receive_shard(sock, staging / name, meta["size"], _deadline(timeout_s, meta["size"]))
    except OSError as exc:
        raise PeerError(f"{type(exc).__name__}: {exc}") from exc
    if digest != meta["sha256"]:
        raise PeerError(f"{name} from the peer: sha256 {digest[:16]}... != {meta['sha256'][:16]}... in its manifest")
    return dict(man)  # type: ignore[arg-type]


def _receive_shard(sock: socket.socket, path: Path, size: int, deadline: float) -> str:
    """Receive the shard into `path` (created); its sha256. `publish` makes it durable."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        return recv_to_file(sock, fd, size, deadline)
    finally:
        os.close(fd)


def publish_received(staging: Path, root: Path, step: int, man: Mapping[str, Any], name: str) -> Path:
    fd = os.open(staging / name, os.O_RDONLY)
    try:
        return publish(staging, root, step, man, unsynced=[fd])
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------- server


class PeerServer:
    """Keeps other ranks' copies under `<root>/peers/rank<R>/` and serves them back; daemon threads."""

    def __init__(self, root: Path, host: str, port: int = 0, token: str = "", keep_last: int = 2,
                 timeout_s: float = 30.0, max_conns: int = 8,
                 report: Callable[[str, dict[str, Any]], None] | None = None) -> None:
        self.root = Path(root) / PEERS
        self.token = token
        self.keep_last = keep_last
        self.timeout_s = timeout_s
        self.report = report or (lambda summary, facts: log.warning("preflight: %s", summary))
        self._slots = threading.BoundedSemaphore(max_conns)
        self._sock = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
        self._sock.settimeout(0.5)
        self.host, self.port = host, int(self._sock.getsockname()[1])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="localckpt-peer-server", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def close(self, timeout: float = 2.0) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._sock.close()
        self._thread.join(timeout)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, peer = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                time.sleep(0.1)
                continue
            if not self._slots.acquire(blocking=False):
                conn.close()  # too many at once: the sender reports it and tries with the next save
                continue
            threading.Thread(target=self._handle, args=(conn, peer), name="localckpt-peer-conn",
                             daemon=True).start()

    def _handle(self, conn: socket.socket, peer: Any) -> None:
        try:
            with conn:
                conn.settimeout(self.timeout_s)
                try:
                    req = recv_msg(conn)
                    self._dispatch(conn, req, peer)
                except (PeerError, OSError, ValueError, KeyError, TypeError) as exc:
                    with contextlib.suppress(OSError):
                        send_msg(conn, {"ok": False, "error": f"{type(exc).__name__}: {exc}"})
        except Exception as exc:  # the server thread never dies of one connection
            log.warning("preflight: local checkpoint peer connection from %s: %s", peer, exc)
        finally:
            self._slots.release()

    def _dispatch(self, conn: socket.socket, req: Mapping[str, Any], peer: Any) -> None:
        if not hmac.compare_digest(str(req.get("token", "")), self.token):
            raise PeerError("wrong token (a request not from this job)")
        rank = req.get("rank")
        if not isinstance(rank, int) or rank < 0:
            raise PeerError(f"bad rank {rank!r}")
        op = req.get("op")
        if op == "put":
            self._put(conn, req, rank, peer)
        elif op == "list":
            send_msg(conn, {"ok": True, "steps": self.steps(rank)})
        elif op == "get":
            self._get(conn, req, rank)
        else:
            raise PeerError(f"unknown request {op!r}")

    def rank_dir(self, rank: int) -> Path:
        return self.root / f"rank{rank}"

    def steps(self, rank: int) -> list[int]:
        """Steps of `rank` held here whose manifest is valid and shard has the recorded size."""
        return [s for s, f in step_folders(self.rank_dir(rank)) if validate_local(f, rank)[0] is not None]

    def _put(self, conn: socket.socket, req: Mapping[str, Any], rank: int, peer: Any) -> None:
        step, size, man = req.get("step"), req.get("size"), req.get("manifest")
        if not isinstance(step, int) or step < 0 or not isinstance(size, int) or size < 0:
            raise PeerError("bad step or size")
        why = check_manifest(man, step, rank)
        if why:
            raise PeerError(why)
        meta = man["files"][_shard_name(rank)]  # type: ignore[index]
        if meta["size"] != size or meta["sha256"] != req.get("sha256"):
            raise PeerError("size or sha256 differ from the manifest")
        root = self.rank_dir(rank)
        root.mkdir(parents=True, exist_ok=True)
        staging = root / f"{STAGING_PREFIX}{step}-{secrets.token_hex(6)}"
        staging.mkdir()
        try:
            digest = _receive_shard(conn, staging / _shard_name(rank), size, _deadline(self.timeout_s, size))
            if digest != meta["sha256"]:
                self.report(f"copy of rank {rank} step {step} from {peer[0]} refused: sha256 {digest[:16]}... "
                            f"!= {meta['sha256'][:16]}... sent", {"rank": rank, "step": step, "peer": str(peer[0])})
                raise PeerError("sha256 of the received bytes differs from the manifest")
            publish_received(staging, root, step, man, _shard_name(rank))  # type: ignore[arg-type]
        except BaseException:
            _remove_tree(staging)
            raise
        rotate(root, self.keep_last, step)
        send_msg(conn, {"ok": True})

    def _get(self, conn: socket.socket, req: Mapping[str, Any], rank: int) -> None:
        step = req.get("step")
        if not isinstance(step, int) or step < 0:
            raise PeerError("bad step")
        folder = step_dir(self.rank_dir(rank), step)
        man, why = validate_local(folder, rank)
        if man is None:
            raise PeerError(f"no valid copy of rank {rank} step {step} here: {why}")
        size = man["files"][_shard_name(rank)]["size"]
        send_msg(conn, {"ok": True, "manifest": man, "size": size})
        send_file(conn, folder / _shard_name(rank), size, _deadline(self.timeout_s, size))
