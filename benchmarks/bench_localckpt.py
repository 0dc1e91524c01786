"""Benchmark: a local checkpoint save against a raw write + fsync of the same bytes, per size; the
peer copy over loopback and the restore from a peer after the local folder is deleted.

A local save is torch.save into a staging folder through the sha256-while-writing file (no
second pass over the data), fsync, the manifest (temp + fsync + rename), the rename of the
folder, the parent's fsync and the rotation. The raw baseline writes the bytes that save
produces (serialized once beforehand) in 16 MiB pieces to a new file and fsyncs it; a second
baseline also starts each piece's disk write at once. Raw and save alternate, and which goes
first alternates, so both see the same disk state; the ratio is the median of the paired
ratios. Target: save <= 1.2x raw.

The copy: a second LocalCheckpointer in this process stands for the peer node (its server on
127.0.0.1); "copy" is from the end of the save to the copy's arrival, verified and renamed.
"restore from peer" is `load_latest()` after the local folder is removed: list, fetch, verify,
write back locally, torch.load.

    .venv/bin/python benchmarks/bench_localckpt.py [--sizes 8,64,256] [--repeat 7] [--dir /path/on/the/disk]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402
from bench_checkpoint import machine, make_state, raw_write  # noqa: E402

from preflight.runtime.checkpoint import _HashingFile  # noqa: E402
from preflight.runtime.localckpt import LocalCheckpointer, _torch_save  # noqa: E402
from preflight.runtime.piecehash import PieceHashingFile  # noqa: E402


def hashed_write(path: Path, state: object, pieces: bool) -> float:
    """torch.save through a hash-while-writing file, then fsync: one sha256 stream
    (CheckpointManager's writer) or the pieces hashed on several cores (the local writer)."""
    t0 = time.perf_counter()
    with open(path, "xb", buffering=0) as raw:
        if pieces:
            pf = PieceHashingFile(raw)
            _torch_save(state, pf)
            pf.hash.hexdigest()
        else:
            hf = _HashingFile(raw)
            _torch_save(state, hf)
            hf.sha.hexdigest()
        os.fsync(raw.fileno())
    return time.perf_counter() - t0


def measure_size(base: Path, mb: int, repeat: int) -> dict[str, float]:
    state = make_state(mb)
    buf = io.BytesIO()
    torch.save(state, buf)
    data = memoryview(buf.getbuffer())
    peer = LocalCheckpointer(base / "peer", rank=1, world_size=2, local_world_size=1, keep_last=1, token="b")
    lc = LocalCheckpointer(base / "local", rank=0, world_size=2, local_world_size=1, keep_last=1, token="b",
                           peers={1: peer.address})
    raw_s, early_s, save_s, ratios, copy_s, sha_s, async_s = [], [], [], [], [], [], []
    stream_s: list[float] = []
    pieces_s: list[float] = []
    try:
        lc.save(0, state)  # warm-up: allocator, page cache, first files, the connection
        lc.wait_copies(120)
        for i in range(1, repeat + 1):
            order = ("raw", "save") if i % 2 else ("save", "raw")
            got: dict[str, float] = {}
            for what in order:
                if what == "raw":
                    got["raw"] = raw_write(base / f"raw-{i}.bin", data)
                    (base / f"raw-{i}.bin").unlink()
                else:
                    t0 = time.perf_counter()
                    lc.save(i, state)
                    t1 = time.perf_counter()
                    got["save"] = t1 - t0
                    if not lc.wait_copies(300):
                        raise RuntimeError("copy did not finish")
                    copy_s.append(time.perf_counter() - t1)
            raw_s.append(got["raw"])
            save_s.append(got["save"])
            ratios.append(got["save"] / got["raw"])
            t0 = time.perf_counter()
            hashlib.sha256(data).digest()
            sha_s.append(time.perf_counter() - t0)
            early_s.append(raw_write(base / f"early-{i}.bin", data, early=True))
            (base / f"early-{i}.bin").unlink()
            for pieces in ((False, True) if i % 2 else (True, False)):  # which goes first alternates
                (pieces_s if pieces else stream_s).append(hashed_write(base / f"h-{i}.bin", state, pieces))
                (base / f"h-{i}.bin").unlink()
        asy = LocalCheckpointer(base / "async", rank=0, world_size=1, keep_last=1, async_save=True)
        try:
            for i in range(repeat + 1):
                t0 = time.perf_counter()
                asy.save(i, state)
                if i:  # the first fills the snapshot buffers
                    async_s.append(time.perf_counter() - t0)
                asy.wait()
        finally:
            asy.close()
        shutil.rmtree(base / "local" / "rank0")
        t0 = time.perf_counter()
        restored = lc.load_latest()
        restore_s = time.perf_counter() - t0
        if restored is None or restored[0] != repeat:
            raise RuntimeError(f"restore from the peer gave {restored and restored[0]}")
    finally:
        lc.close()
        peer.close()
        shutil.rmtree(base / "local", ignore_errors=True)
        shutil.rmtree(base / "peer", ignore_errors=True)
        shutil.rmtree(base / "async", ignore_errors=True)
    med = statistics.median
    return {"bytes": len(data), "raw": med(raw_s), "early": med(early_s), "save": med(save_s),
            "ratio": med(ratios), "worst": max(ratios), "sha": med(sha_s), "async": med(async_s),
            "stream": med(stream_s), "pieces": med(pieces_s), "copy": med(copy_s), "restore": restore_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="8,64,256", help="state sizes in MiB, comma-separated")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--dir", type=Path, default=None, help="where to write (default: a temporary folder)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    base = Path(tempfile.mkdtemp(prefix="bench-localckpt-", dir=args.dir))
    load_before = os.getloadavg()[0]
    rows = []
    try:
        for mb in (int(s) for s in args.sizes.split(",")):
            rows.append((mb, measure_size(base, mb, args.repeat)))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"local checkpoint save vs raw write + fsync, one rank, {args.repeat} alternating pairs per size; "
          f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    for line in machine(args.dir or Path(tempfile.gettempdir())):
        print(line)
    print("| size | raw write + fsync | raw + early writeback | sha256 alone | local save | save/raw (median, worst) "
          "| async save: blocking | copy to peer (loopback) | restore from peer |")
    print("|---|---|---|---|---|---|---|---|---|")
    ok = True
    for mb, r in rows:
        ok = ok and r["ratio"] <= 1.2
        gbs = r["bytes"] / r["copy"] / 1e9
        print(f"| {mb} MiB | {r['raw'] * 1e3:.1f} ms | {r['early'] * 1e3:.1f} ms | {r['sha'] * 1e3:.1f} ms "
              f"| {r['save'] * 1e3:.1f} ms "
              f"| {r['ratio']:.2f}x ({r['worst']:.2f}x) | {r['async'] * 1e3:.1f} ms "
              f"| {r['copy'] * 1e3:.1f} ms ({gbs:.2f} GB/s) "
              f"| {r['restore'] * 1e3:.1f} ms |")
    print(f"target: save <= 1.2x raw at every size: {'ok' if ok else 'NOT MET'}")
    print()
    print("| size | torch.save + hash while writing + fsync: one sha256 stream | sha256 by pieces on several cores |")
    print("|---|---|---|")
    for mb, r in rows:
        print(f"| {mb} MiB | {r['stream'] * 1e3:.1f} ms | {r['pieces'] * 1e3:.1f} ms |")


if __name__ == "__main__":
    main()
