"""Node-local checkpoints, each rank's shard copied to a peer on another node.

A job saves to node-local storage (an NVMe folder, `local_dir`) often and cheaply, and to shared
storage (`CheckpointManager`) less often. Each rank owns its folder; the copy on a peer node is
what makes a lost node's shard recoverable::

    <local_dir>/rank<R>/step-00001200/rank<R>.pt, manifest.json   this rank's own checkpoints
    <local_dir>/rank<R>/.staging-*                                 a save in progress
    <local_dir>/peers/rank<Q>/step-*/...                           copies of rank Q (another node)

A save: this rank's state is written with torch.save into a staging folder, its digest computed
while writing (no second pass over the data: sha256 of 4 MiB pieces on several cores, then of
their digests, `piecehash`; one sha256 stream is slower than an NVMe drive); the manifest (step,
rank, digest, size) is written into the folder, which is renamed to `step-*`, and the shard is
fsynced (one device flush, as a raw write pays; on a journaling filesystem it commits the whole
step, see `peercopy.publish`); the other fsyncs, the copy and the rotation (`keep_last`) follow
in the background. With `async_save` the blocking part is a copy of the state to CPU
memory (`snapshot_to_cpu`) and the writing runs in a daemon thread, one save in flight.

The copy: after each local save, a daemon thread streams the shard over TCP to the same local
rank on the next `replicas` nodes of the ring (node k sends to nodes k+1 .. k+R, mod the node
count), where a `PeerServer` verifies the digest on arrival and renames it into place. Only the
newest pending copy is sent (a slow link skips steps, never queues them); the sender never
blocks training, and a failed copy is a `runtime.checkpoint` warn event, not an exception.
Addresses are exchanged through a key-value store (`store=`: anything with `set(key, value)`
and `get(key)`, e.g. the process group's TCPStore) or given as `peers={rank: "host:port"}`.
The server binds to the address this node uses to reach MASTER_ADDR (or `bind_host`).

A restore (`load_latest`): each rank lists the steps it can restore (its own valid local
checkpoints, then the copies its peers hold), the ranks agree on the newest step all of them
can restore (`agree_step`: an all_gather of the step lists when a process group is up), and each
rank loads it: from its local folder when valid (digest checked on the bytes read), else fetched from
the peer holding its copy (verified, and written back to the local folder). Bytes are restored
exactly. When a rank fails to load, all retry the next older common step. Local steps newer
than the one restored (or than a step saved) are dropped: they belong to an abandoned timeline.
The peer's copies of them go with the next copy.

Combining with shared storage: `restore(local, shared)` loads the newest of the two (the local
step agreed by every rank, or the shared `CheckpointManager`'s newest valid checkpoint).
"""

from __future__ import annotations

import io
import json
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from preflight.model import Status
from preflight.runtime import peercopy as pc
from preflight.runtime.checkpoint import (
    CHECK,
    STAGING_PREFIX,
    CheckpointError,
    _dist,
    _remove_tree,
    _shard_name,
    join_background,
    snapshot_to_cpu,
)
from preflight.runtime.events import EventWriter, emit_guarded
from preflight.runtime.piecehash import PieceHashingFile, digest_bytes

log = logging.getLogger("preflight.runtime")

KEY_PREFIX = "preflight/localckpt"


def ring_targets(rank: int, world_size: int, local_world_size: int, replicas: int) -> list[int]:
    """The ranks that keep `rank`'s copies: the same local rank on the next `replicas` nodes of the
    ring (fewer when there are fewer other nodes). Ranks are laid out node by node, as torchrun does."""
    if local_world_size < 1 or world_size % local_world_size:
        raise ValueError(f"world size {world_size} is not a multiple of the local world size {local_world_size}")
    nodes = world_size // local_world_size
    node, local = divmod(rank, local_world_size)
    return [((node + i) % nodes) * local_world_size + local for i in range(1, min(replicas, nodes - 1) + 1)]


def job_address(master_addr: str | None = None) -> str:
    """The address of the interface this node uses to reach MASTER_ADDR (no packet is sent);
    127.0.0.1 when there is no MASTER_ADDR or it is this host."""
    master = master_addr if master_addr is not None else os.environ.get("MASTER_ADDR", "")
    if not master:
        return "127.0.0.1"
    try:
        infos = socket.getaddrinfo(master, 9, type=socket.SOCK_DGRAM)
        family, _, _, _, sockaddr = infos[0]
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect(sockaddr)
            return str(s.getsockname()[0])
    except (OSError, IndexError):
        return "127.0.0.1"


def _torch_save(state: Any, fh: Any) -> None:
    """torch.save without torch's CRC32 of every record where this torch allows it (the digest
    computed while writing covers every byte; torch.load does not need the CRC32). The option
    is process-wide in torch: it is off only for the duration of this call, under a lock (a
    torch.save in another thread meanwhile also skips it: its file still loads)."""
    import torch

    ser = torch.serialization
    if not hasattr(ser, "set_crc32_options"):
        torch.save(state, fh)
        return
    with _CRC_LOCK:
        before = ser.get_crc32_options()
        ser.set_crc32_options(False)
        try:
            torch.save(state, fh)
        finally:
            ser.set_crc32_options(before)


_CRC_LOCK = threading.Lock()


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else default


class LocalCheckpointer:
    """Frequent node-local checkpoints of this rank's shard, copied to peers on other nodes.

    Construct on every rank (each starts its peer server and publishes its address); call `save`
    every N steps and `load_latest` at start-up on every rank (collective when a process group
    is up). See the module docstring for the layout and the protocol.

    rank, world_size: from the process group, else RANK / WORLD_SIZE. local_world_size: ranks per
    node (LOCAL_WORLD_SIZE, as torchrun sets it), which decides what "another node" is.
    replicas: how many next nodes keep a copy (0: none). store: a key-value store shared by the
    job's ranks, where each rank publishes its server's address and a random token; or peers:
    {rank: "host:port"} with a `token` shared by all. timeout_s bounds every socket wait (a
    transfer also gets size / 10 MB/s); lookup_s bounds the wait for a peer's address.
    """

    def __init__(self, local_dir: str | os.PathLike[str], *, keep_last: int = 2, events: EventWriter | None = None,
                 async_save: bool = False, replicas: int = 1, store: Any = None,
                 peers: Mapping[int, str] | None = None, bind_host: str | None = None, port: int = 0,
                 token: str | None = None, rank: int | None = None, world_size: int | None = None,
                 local_world_size: int | None = None, timeout_s: float = 30.0, lookup_s: float = 10.0) -> None:
        if keep_last < 1 or replicas < 0:
            raise ValueError("keep_last must be at least 1 and replicas at least 0")
        dist = _dist()
        self.rank = rank if rank is not None else (dist.get_rank() if dist else _env_int("RANK", 0))
        self.world_size = world_size if world_size is not None else (
            dist.get_world_size() if dist else _env_int("WORLD_SIZE", 1))
        self.local_world_size = local_world_size or _env_int("LOCAL_WORLD_SIZE", 1)
        self.local_dir = Path(local_dir)
        self.own_dir = self.local_dir / f"rank{self.rank}"
        self.keep_last, self.events, self.async_save = keep_last, events, async_save
        self.timeout_s, self.lookup_s = timeout_s, lookup_s
        self.targets = ring_targets(self.rank, self.world_size, self.local_world_size, replicas) if replicas else []
        self.store = store
        self.peers = {int(r): a for r, a in (peers or {}).items()}
        self.token = token if token is not None else ("" if store is None else secrets.token_hex(16))
        self.stats: dict[str, float] = {}
        self._key_prefix = f"{KEY_PREFIX}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        self._pool: dict[tuple[Any, ...], Any] = {}
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._reported: set[tuple[str, str]] = set()
        self._closed = False
        self._last_load: dict[str, Any] = {}
        self._last_saved: int | None = None
        self._dir_lock = threading.Lock()
        self._copy = _CopyQueue(self)
        self.own_dir.mkdir(parents=True, exist_ok=True)
        pc.clean_leftovers(self.own_dir)
        self.server = self._start_server(bind_host or job_address(), port)
        self._publish_address()

    # ------------------------------------------------------------------ public

    @property
    def address(self) -> str:
        """host:port of this rank's peer server ('' when it could not start)."""
        return self.server.address if self.server is not None else ""

    def save(self, step: int, state: Mapping[str, Any]) -> None:
        """Save this rank's `state` as local checkpoint `step` (not collective), then copy it to
        the peers in the background. Sync: returns when the shard's bytes are fsynced (on a
        journaling filesystem that commits the whole step; the manifest and folder fsyncs follow
        in the background, before the copy and before any older step is removed). Async:
        returns once `state` is copied to CPU memory. A local write that fails raises
        `CheckpointError` (async: from the next `save` or `wait`); a failed copy is only an event."""
        if self._closed:
            raise CheckpointError("local checkpointer is closed")
        step = int(step)
        t0 = time.perf_counter()
        self.wait()
        if not self.async_save:
            self._save_now(step, state)
            self.stats.update(blocking_s=time.perf_counter() - t0)
            return
        snapshot = snapshot_to_cpu(state, self._pool)
        self._thread = threading.Thread(target=self._background, args=(step, snapshot),
                                        name=f"localckpt-save-{step}", daemon=True)
        self._thread.start()
        self.stats.update(blocking_s=time.perf_counter() - t0)

    def wait(self, timeout: float | None = None) -> None:
        """Wait for an in-flight async local write; raise `CheckpointError` if it failed."""
        join_background(self, timeout, "local checkpoint save")

    def wait_copies(self, timeout: float) -> bool:
        """Wait until no copy to a peer is pending or in flight; False when `timeout` passed first."""
        return self._copy.idle(timeout)

    def local_steps(self) -> list[int]:
        """Steps of this rank's valid local checkpoints (manifest and size; newest first)."""
        out = []
        for step, folder in pc.step_folders(self.own_dir):
            man, why = pc.validate_local(folder, self.rank)
            if man is None:
                self._report_invalid(step, folder, why)
            else:
                out.append(step)
        return out

    def restorable(self) -> dict[int, list[int | None]]:
        """{step: where it can be restored from}: None for the local folder, then the ranks
        holding a copy (asked over TCP; a peer that does not answer is reported and left out)."""
        where: dict[int, list[int | None]] = {s: [None] for s in self.local_steps()}
        for holder in self.targets:
            try:
                steps = pc.list_steps(*self._peer(holder), self.rank, self.timeout_s)
            except (pc.PeerError, ValueError) as exc:
                self._warn_once("list", str(holder), f"copies held by rank {holder} not listed: {exc}",
                                {"peer_rank": holder, "error": str(exc)})
                continue
            for s in steps:
                where.setdefault(s, []).append(holder)
        return where

    def agree_step(self, steps: list[int] | None = None, group: Any = None) -> int | None:
        """The newest step every rank can restore: the largest step in every rank's `steps`
        (default: `restorable()`). Collective (all_gather of the lists) when a process group is
        up and the world has more than one rank; otherwise this rank's newest."""
        mine = sorted(self.restorable() if steps is None else steps)
        lists = [mine]
        dist = _dist()
        if dist is not None and self.world_size > 1:
            lists = [None] * self.world_size  # type: ignore[list-item]
            dist.all_gather_object(lists, mine, group=group)
        common = set(lists[0]).intersection(*map(set, lists[1:])) if lists else set()
        return max(common) if common else None

    def load_latest(self, map_location: Any = "cpu", weights_only: bool = True,
                    group: Any = None) -> tuple[int, Any] | None:
        """(step, this rank's state) of the newest step every rank restores, or None. Collective
        when a process group is up; ranks fall back together when one cannot load a step."""
        self.wait()
        where = self.restorable()
        excluded: set[int] = set()
        for _ in range(len(where) + 1):
            step = self.agree_step([s for s in where if s not in excluded], group=group)
            if step is None:
                return None
            state, source, why = self._load_step(step, where.get(step, []), map_location, weights_only)
            if self._all_ok(why is None, group):
                with self._dir_lock:
                    self._last_saved = step
                self._rotate()  # newer local steps are of an abandoned timeline
                self._emit(Status.PASS, f"resumed from local checkpoint step {step} ({source})", step=step,
                           facts={"step": step, "restored_from": source, **self._last_load})
                return step, state
            if why is not None:
                self._emit(Status.WARN, f"local checkpoint step {step} not restored: {why}", step=step,
                           evidence=[why], facts={"step": step, "reason": why},
                           remedy="an older step is tried on every rank")
            excluded.add(step)
        return None

    def close(self) -> None:
        """Wait for an in-flight local write (raising its error), stop the copy thread (a copy in
        flight gets `timeout_s`) and the peer server."""
        if self._closed:
            return
        try:
            self.wait()
        finally:
            self._closed = True
            self._copy.stop(self.timeout_s)
            if self.server is not None:
                self.server.close()

    def __enter__(self) -> LocalCheckpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ save internals

    def _background(self, step: int, snapshot: Mapping[str, Any]) -> None:
        try:
            self._save_now(step, snapshot)
        except BaseException as exc:
            if not isinstance(exc, CheckpointError):
                self._emit(Status.ERROR, f"local checkpoint step {step} not saved: {type(exc).__name__}: {exc}",
                           step=step, facts={"step": step, "error": repr(exc)})
            self._error = exc

    def _save_now(self, step: int, state: Mapping[str, Any]) -> None:
        t0 = time.perf_counter()
        staging = self.own_dir / f"{STAGING_PREFIX}{step}-{secrets.token_hex(6)}"
        try:
            staging.mkdir(parents=True)
            with open(staging / _shard_name(self.rank), "xb", buffering=0) as raw:
                hf = PieceHashingFile(raw)  # hashed on several cores while written, the disk write started
                _torch_save(state, hf)
                man = pc.make_manifest(step, self.rank, self.world_size, hf.hash.hexdigest(), hf.size)
                with self._dir_lock:
                    folder = pc.publish(staging, self.own_dir, step, man, unsynced=[raw.fileno()],
                                        settle_now=False)  # settled in the background, before the copy
                    self._last_saved = step
        except Exception as exc:
            _remove_tree(staging)
            why = f"{type(exc).__name__}: {exc}"
            self._emit(Status.ERROR, f"local checkpoint step {step} not saved: {why}", step=step,
                       evidence=[why], facts={"step": step, "error": why, "path": str(self.own_dir)},
                       remedy=f"check free space and health of {self.local_dir}; the previous local "
                              "checkpoint and the shared checkpoints stay valid")
            raise CheckpointError(f"local checkpoint step {step} not saved: {why}") from exc
        secs = time.perf_counter() - t0
        size = hf.size
        self.stats.update(write_s=secs, bytes=float(size))
        self._emit(Status.PASS, f"local checkpoint step {step} saved ({size / 1e6:.1f} MB in {secs:.3f} s)",
                   step=step, facts={"step": step, "bytes": size, "seconds": round(secs, 4), "where": "local",
                                     "path": str(folder), "async": self.async_save})
        self._copy.submit(step, folder, man)  # the copies, then the rotation, in the background

    def _settle(self, step: int, folder: Path) -> bool:
        """The remaining fsyncs of a save; False (with an event) when they failed."""
        try:
            pc.settle(folder, self.own_dir)
            return True
        except OSError as exc:
            self._emit(Status.WARN, f"local checkpoint step {step} not made durable: {exc}", step=step,
                       evidence=[repr(exc)], facts={"step": step, "path": str(folder), "error": str(exc)},
                       remedy=f"check {self.local_dir}; the step is neither copied nor are older ones removed")
            return False

    def _rotate(self) -> None:
        """Rotation of this rank's folder, relative to the newest save (a save in progress is
        never touched: the folder lock orders rotation with the saves' renames)."""
        try:
            with self._dir_lock:
                if self._last_saved is None:
                    return
                trash = pc.set_aside(self.own_dir, self.keep_last, self._last_saved)
            for folder in trash:
                _remove_tree(folder)
        except OSError as exc:
            self._warn_once("rotate", str(exc), f"rotation of {self.own_dir} failed: {exc}", {"error": str(exc)},
                            remedy=f"free space in {self.local_dir}")

    # ------------------------------------------------------------------ load internals

    def _load_step(self, step: int, sources: list[int | None], map_location: Any,
                   weights_only: bool) -> tuple[Any, str, str | None]:
        """(state, where from, None) or (None, '', why not): local first, then each holder."""
        whys = []
        for src in sources or [None]:
            t0 = time.perf_counter()
            try:
                if src is None:
                    folder, where = pc.step_dir(self.own_dir, step), "local"
                else:
                    folder, where = self._fetch(src, step), f"peer rank {src} ({self._addr_text(src)})"
                state, size = self._read_shard(folder, step, map_location, weights_only)
            except (pc.PeerError, CheckpointError, ValueError, OSError) as exc:
                whys.append(f"{'local' if src is None else f'peer rank {src}'}: {exc}")
                continue
            self._last_load = {"bytes": size, "seconds": round(time.perf_counter() - t0, 4)}
            return state, where, None
        return None, "", "; ".join(whys)

    def _read_shard(self, folder: Path, step: int, map_location: Any, weights_only: bool) -> tuple[Any, int]:
        import torch

        man, why = pc.validate_local(folder, self.rank)
        if man is None:
            raise CheckpointError(why)
        name = _shard_name(self.rank)
        meta = man["files"][name]
        data = (folder / name).read_bytes()
        digest = digest_bytes(data)
        if len(data) != meta["size"] or digest != meta["sha256"]:
            raise CheckpointError(f"{folder / name}: sha256 {digest[:16]}... != {meta['sha256'][:16]}... "
                                  "in the manifest")
        try:
            return torch.load(io.BytesIO(data), map_location=map_location, weights_only=weights_only), len(data)
        except Exception as exc:
            raise CheckpointError(f"{folder / name} does not load: {type(exc).__name__}: {exc}") from exc

    def _fetch(self, holder: int, step: int) -> Path:
        """Fetch this rank's copy of `step` from `holder` into the local folder (replacing a bad one)."""
        staging = self.own_dir / f"{STAGING_PREFIX}{step}-{secrets.token_hex(6)}"
        staging.mkdir(parents=True)
        try:
            man = pc.get(*self._peer(holder), self.rank, step, staging, self.timeout_s)
            return pc.publish_received(staging, self.own_dir, step, man, _shard_name(self.rank))
        except BaseException:
            _remove_tree(staging)
            raise

    def _all_ok(self, ok: bool, group: Any) -> bool:
        dist = _dist()
        if dist is None or self.world_size <= 1:
            return ok
        oks: list[Any] = [None] * self.world_size
        dist.all_gather_object(oks, ok, group=group)
        return all(oks)

    # ------------------------------------------------------------------ addresses

    def _store_key(self, rank: int) -> str:
        return f"{self._key_prefix}/rank{rank}"

    def _start_server(self, host: str, port: int) -> pc.PeerServer | None:
        """This rank's peer server; when it cannot listen, an error event and local saves only."""
        try:
            return pc.PeerServer(self.local_dir, host, port, token=self.token, keep_last=self.keep_last,
                                 timeout_s=self.timeout_s, report=self._server_report)
        except OSError as exc:
            self._emit(Status.ERROR, f"peer checkpoint server not started on {host}:{port}: {exc}",
                       evidence=[repr(exc)], facts={"host": host, "port": port, "error": str(exc)},
                       remedy="give bind_host= an address of this node (and a free port); local saves go on, "
                              "but no peer can keep its copy here")
            return None

    def _publish_address(self) -> None:
        if self.store is None or self.server is None:
            return
        value = json.dumps({"host": self.server.host, "port": self.server.port, "token": self.token,
                            "node": socket.gethostname()})
        try:
            self.store.set(self._store_key(self.rank), value)
        except Exception as exc:  # without it peers cannot send here: reported, training goes on
            self._warn_once("publish", "", f"peer server address not published: {exc}", {"error": str(exc)})

    def _peer(self, rank: int) -> tuple[tuple[str, int], str]:
        """((host, port), token) of `rank`'s peer server."""
        if rank in self.peers:
            return pc.parse_addr(self.peers[rank]), self.token
        if self.store is None:
            raise pc.PeerError(f"no address for rank {rank}: give store= or peers=")
        info = self._lookup(rank)
        if info.get("node") == socket.gethostname():
            self._warn_once("same-node", str(rank), f"rank {rank} that keeps this rank's copy runs on this "
                            "node: the copy does not survive losing the node",
                            {"peer_rank": rank}, remedy="set LOCAL_WORLD_SIZE (torchrun does) or local_world_size=")
        return (str(info["host"]), int(info["port"])), str(info.get("token", ""))

    def _addr_text(self, rank: int) -> str:
        try:
            (host, port), _ = self._peer(rank)
        except (pc.PeerError, ValueError):
            return "?"
        return f"{host}:{port}"

    def _lookup(self, rank: int) -> dict[str, Any]:
        """The published address of `rank`, waiting at most `lookup_s` for it to appear."""
        key = self._store_key(rank)
        box: list[Any] = []
        check = getattr(self.store, "check", None)
        deadline = time.monotonic() + self.lookup_s
        if callable(check):
            while not check([key]):
                if time.monotonic() > deadline:
                    raise pc.PeerError(f"rank {rank} published no address within {self.lookup_s:g} s")
                time.sleep(0.05)
        getter = threading.Thread(target=lambda: box.append(self.store.get(key)), daemon=True)
        getter.start()
        getter.join(max(0.1, deadline - time.monotonic()))
        if not box:
            raise pc.PeerError(f"rank {rank} published no address within {self.lookup_s:g} s")
        raw = box[0]
        try:
            info = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
        except (ValueError, AttributeError) as exc:
            raise pc.PeerError(f"the address of rank {rank} in the store is malformed: {exc}") from exc
        if not isinstance(info, dict) or not info.get("host") or not isinstance(info.get("port"), int):
            raise pc.PeerError(f"the address of rank {rank} in the store is malformed: {raw!r:.200}")
        return info

    # ------------------------------------------------------------------ events

    def _server_report(self, summary: str, facts: dict[str, Any]) -> None:
        self._emit(Status.WARN, summary, facts=facts, remedy="check the network link and memory of both nodes")

    def _warn_once(self, kind: str, key: str, summary: str, facts: dict[str, Any], remedy: str = "") -> None:
        if (kind, key) in self._reported:
            return
        self._reported.add((kind, key))
        self._emit(Status.WARN, summary, facts=facts, remedy=remedy)

    def _report_invalid(self, step: int, folder: Path, why: str) -> None:
        self._warn_once("invalid", f"{folder}:{why}", f"local checkpoint step {step} skipped: {why}",
                        {"step": step, "path": str(folder), "reason": why},
                        remedy="an older checkpoint or a peer's copy is used")

    def _emit(self, status: Status, summary: str, **kw: Any) -> None:
        emit_guarded(self.events, CHECK, status, summary, what="local checkpoint", **kw)


class _CopyQueue:
    """One daemon thread that sends the newest pending local checkpoint to every target rank;
    a newer save replaces a copy not yet started (a slow link skips steps, never queues them)."""

    def __init__(self, owner: LocalCheckpointer) -> None:
        self.owner = owner
        self.skipped = 0
        self._cv = threading.Condition()
        self._pending: tuple[int, Path, dict[str, Any]] | None = None
        self._busy = False
        self._stopping = False
        self._thread: threading.Thread | None = None

    def submit(self, step: int, folder: Path, man: dict[str, Any]) -> None:
        with self._cv:
            if self._pending is not None:
                self.skipped += 1
            self._pending = (step, folder, man)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="localckpt-copy", daemon=True)
                self._thread.start()
            self._cv.notify_all()

    def idle(self, timeout: float) -> bool:
        with self._cv:
            return self._cv.wait_for(lambda: self._pending is None and not self._busy, timeout)

    def stop(self, timeout: float) -> None:
        """Send what is pending, then end the thread (waiting at most `timeout`)."""
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
            th = self._thread
        if th is not None:
            th.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._pending is not None or self._stopping)
                job, self._pending = self._pending, None
                if job is None:
                    return
                self._busy = True
            try:
                if self.owner._settle(job[0], job[1]):
                    for target in self.owner.targets:
                        self._send(target, *job)
                    self.owner._rotate()
            finally:
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()

    def _send(self, target: int, step: int, folder: Path, man: dict[str, Any]) -> None:
        owner = self.owner
        t0 = time.perf_counter()
        size = man["files"][_shard_name(owner.rank)]["size"]
        peer = "?"
        try:
            addr, token = owner._peer(target)
            peer = f"{addr[0]}:{addr[1]}"
            pc.put(addr, token, folder, man, owner.timeout_s)
        except Exception as exc:  # a failed copy is an event; training goes on
            why = f"{type(exc).__name__}: {exc}" if not isinstance(exc, pc.PeerError) else str(exc)
            owner._emit(Status.WARN, f"copy of local checkpoint step {step} to rank {target} ({peer}) failed: {why}",
                        step=step, evidence=[why], facts={"step": step, "peer_rank": target, "peer": peer,
                                                          "where": "peer", "error": why},
                        remedy="the local checkpoint is kept; check the peer node and the link to it "
                               "(the next save tries again)")
            return
        secs = time.perf_counter() - t0
        owner._emit(Status.PASS, f"local checkpoint step {step} copied to rank {target} ({peer}) "
                                 f"in {secs:.3f} s", step=step,
                    facts={"step": step, "bytes": size, "seconds": round(secs, 4), "peer_rank": target,
                           "peer": peer, "where": "peer", "skipped_before": self.skipped})


def restore(local: LocalCheckpointer, shared: Any = None, map_location: Any = "cpu",
            weights_only: bool = True) -> tuple[int, Any, str] | None:
    """(step, state, "local" or "shared") of the newest checkpoint of the two tiers, or None.

    `local` is asked for the newest step every rank can restore (`agree_step`); `shared`, a
    `CheckpointManager` on shared storage, for its newest complete checkpoint (the smallest any
    rank sees, so that every rank decides alike). The newer is loaded; when it cannot be, the
    other. Collective when a process group is up: call it on every rank.
    """
    local_step = local.agree_step()
    shared_step = None
    if shared is not None:
        info = shared.latest(verify=False)
        seen = [info.step if info is not None else -1]
        dist = _dist()
        if dist is not None and local.world_size > 1:
            seen = [None] * local.world_size  # type: ignore[list-item]
            dist.all_gather_object(seen, info.step if info is not None else -1)
        shared_step = min(seen) if min(seen) >= 0 else None
    if shared_step is not None and (local_step is None or shared_step > local_step):
        got = shared.load_latest(map_location=map_location, weights_only=weights_only)
        if got is not None and (local_step is None or got[0] >= local_step):
            return got[0], got[1], "shared"
    loaded = local.load_latest(map_location=map_location, weights_only=weights_only)
    if loaded is not None:
        return loaded[0], loaded[1], "local"
    if shared is not None and shared_step is not None and local_step is None:
        return None  # the shared one was tried first and did not load
    got = shared.load_latest(map_location=map_location, weights_only=weights_only) if shared is not None else None
    return (got[0], got[1], "shared") if got is not None else None
