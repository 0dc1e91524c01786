"""sha256 by pieces, hashed on several cores while the bytes are written (stdlib only).

One sha256 stream runs at about 2 GB/s on a core with SHA extensions, slower than a node's NVMe
drives: a checkpoint hashed as one stream is bound by the hash, not the disk. Here the bytes are
cut at fixed file offsets into pieces (`PIECE`, 4 MiB); each piece gets its own sha256, computed
by a small pool of daemon threads (hashlib releases the GIL), and the digest of the whole is the
sha256 of the pieces' digests in order. Anyone holding the bytes computes the same value,
whatever the sizes of the writes that produced them: the writer, a receiver reading a socket,
a loader reading the file.

`PieceHashingFile` is the write-only file torch.save writes into: every buffer is hashed while it
is written and its disk write started, and is fully hashed before `write` returns (the caller's
memory is never read afterwards).
"""

from __future__ import annotations

import hashlib
import io
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

from preflight.runtime.checkpoint import _start_writeback

PIECE = 4 << 20
ALGORITHM = "sha256-pieces-4MiB"  # the name recorded in a manifest
_INLINE = 1 << 18  # smaller updates are hashed in the caller's thread
_WRITE = 16 << 20  # the disk write is started after each this many bytes


class _Pool:
    """Daemon worker threads running short tasks; `run` returns a function that waits for it."""

    def __init__(self, workers: int) -> None:
        self._q: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...], threading.Event]] = queue.SimpleQueue()
        for i in range(workers):
            threading.Thread(target=self._work, name=f"piecehash-{i}", daemon=True).start()

    def _work(self) -> None:
        while True:
            fn, args, done = self._q.get()
            try:
                fn(*args)
            except Exception:  # hashing memory does not fail; never let a worker die
                pass
            finally:
                done.set()

    def run(self, fn: Callable[..., Any], *args: Any) -> threading.Event:
        done = threading.Event()
        self._q.put((fn, args, done))
        return done


_pool: _Pool | None = None
_pool_lock = threading.Lock()


def _get_pool() -> _Pool:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = _Pool(max(1, min(8, os.cpu_count() or 1)))
        return _pool


def _forget_pool_in_child() -> None:
    """A forked child (a DataLoader worker, a forked rank) has none of the parent's threads: work
    handed to the parent's pool would wait forever. The child starts a pool of its own."""
    global _pool, _pool_lock
    _pool = None
    _pool_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_pool_in_child)


_spares: list[bytearray] = []  # piece buffers kept between streams (fresh memory costs page faults)
_spares_lock = threading.Lock()
_MAX_SPARES = 8


def _spare_buffer(size: int) -> bytearray:
    with _spares_lock:
        for i, buf in enumerate(_spares):
            if len(buf) == size:
                return _spares.pop(i)
    return bytearray(size)


def _return_buffers(bufs: list[bytearray]) -> None:
    with _spares_lock:
        _spares.extend(bufs[: max(0, _MAX_SPARES - len(_spares))])


class PieceHash:
    """sha256 over fixed pieces of a byte stream, the pieces hashed in parallel.

    Whole pieces of a large `start(data)` are hashed straight from `data` (waited for by the
    function `start` returns). The other bytes (small writes, the ends of large ones) are copied
    into a piece buffer, hashed in the background once the piece is complete: a few buffers are
    in flight at most, so a stream of small writes is hashed on several cores too."""

    def __init__(self, piece: int = PIECE, buffers: int = 4) -> None:
        self.piece = piece
        self.size = 0
        self._slots: list[list[bytes]] = []  # each piece's digest, in order, filled by the hasher
        self._buf: bytearray | None = None
        self._cur_len = 0
        self._free: list[bytearray] = []
        self._busy: list[tuple[threading.Event, bytearray]] = []
        self._buffers_left = buffers
        self._final: str | None = None

    @staticmethod
    def _hash_into(slot: list[bytes], data: Any) -> None:
        slot.append(hashlib.sha256(data).digest())

    def _take_buffer(self) -> bytearray:
        while self._busy and self._busy[0][0].is_set():
            self._free.append(self._busy.pop(0)[1])
        if self._free:
            return self._free.pop()
        if self._buffers_left:
            self._buffers_left -= 1
            return _spare_buffer(self.piece)
        done, buf = self._busy.pop(0)  # the oldest piece in flight: wait for its hash
        done.wait()
        return buf

    def _submit_buffer(self) -> None:
        buf, n = self._buf, self._cur_len
        assert buf is not None
        slot: list[bytes] = []
        self._slots.append(slot)
        if n < _INLINE:
            self._hash_into(slot, memoryview(buf)[:n])
            self._free.append(buf)
        else:
            self._busy.append((_get_pool().run(self._hash_into, slot, memoryview(buf)[:n]), buf))
        self._buf, self._cur_len = None, 0

    def _copy_in(self, view: memoryview) -> None:
        """Append `view` (at most what the current piece lacks) to the piece buffer."""
        if self._buf is None:
            self._buf = self._take_buffer()
        self._buf[self._cur_len:self._cur_len + len(view)] = view
        self._cur_len += len(view)
        if self._cur_len == self.piece:
            self._submit_buffer()

    def start(self, data: Any) -> Callable[[], None]:
        """Start hashing `data` (the next bytes of the stream); returns the function that waits
        until no hashing reads `data` any more. Call it before the next `start` and before
        `data` changes."""
        view = memoryview(data).cast("B")
        n = len(view)
        self.size += n
        pos = min(n, self.piece - self._cur_len) if self._cur_len else 0
        if pos:
            self._copy_in(view[:pos])
        tasks: list[threading.Event] = []
        while n - pos >= self.piece:
            slot: list[bytes] = []
            self._slots.append(slot)
            tasks.append(_get_pool().run(self._hash_into, slot, view[pos:pos + self.piece]))
            pos += self.piece
        while pos < n:
            take = min(n - pos, self.piece - self._cur_len)
            self._copy_in(view[pos:pos + take])
            pos += take

        def wait() -> None:
            for t in tasks:
                t.wait()

        return wait

    def update(self, data: Any) -> None:
        self.start(data)()

    def hexdigest(self) -> str:
        """The digest of the stream so far; ends it (no `start` afterwards)."""
        if self._final is None:
            if self._cur_len:
                self._submit_buffer()
            for done, _ in self._busy:
                done.wait()
            _return_buffers(self._free + [buf for _, buf in self._busy] + ([self._buf] if self._buf else []))
            self._free, self._busy, self._buf = [], [], None
            parts = [slot[0] for slot in self._slots] or [hashlib.sha256(b"").digest()]
            self._final = hashlib.sha256(b"".join(parts)).hexdigest()
        return self._final


def digest_bytes(data: Any, piece: int = PIECE) -> str:
    """The piece digest of bytes in memory (hashed in parallel)."""
    h = PieceHash(piece)
    h.update(data)
    return h.hexdigest()


class PieceHashingFile:
    """A write-only file that computes the piece digest while writing: a buffer's pieces are
    hashed by the pool while the same bytes are written and their disk write started."""

    def __init__(self, raw: io.FileIO) -> None:
        self.raw = raw
        self.fd = raw.fileno()
        self.hash = PieceHash()
        self.size = 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        wait = self.hash.start(view)
        try:
            for off in range(0, len(view), _WRITE):
                part = view[off:off + _WRITE]
                while len(part):
                    n = self.raw.write(part)
                    if not n:
                        raise OSError(f"short write to {self.raw.name}")
                    part = part[n:]
                if len(view) >= _INLINE:
                    _start_writeback(self.fd, self.size + off, min(_WRITE, len(view) - off))
        finally:
            wait()
        self.size += len(view)
        return len(view)

    def flush(self) -> None:
        self.raw.flush()
