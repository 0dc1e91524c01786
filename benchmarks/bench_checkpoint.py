"""Benchmark: checkpoint save throughput against a raw write + fsync of the same bytes, and the
time an async save blocks the training loop against a sync save.

A save does more than write the bytes: torch.save serialization, sha256 of every byte (hashed
in a second thread while the same bytes are written), fsync of the shard, the staging folder
and the parent, the rename, the manifest (temp + fsync + rename) and the rotation of the
previous checkpoint. The raw baseline writes the same number of bytes in 16 MiB pieces to a
new file and fsyncs it; a second baseline also starts each piece's disk write at once, as the
checkpoint writer does, to show the cost of the checkpoint's own work. Runs alternate between the two so that both see the same disk state;
the table shows medians. Target: save throughput at least 80% of raw.

    .venv/bin/python benchmarks/bench_checkpoint.py [--mb 512] [--repeat 5] [--dir /path/on/the/disk]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from preflight.runtime.checkpoint import CheckpointManager, _start_writeback  # noqa: E402

PIECE = 16 << 20


def make_state(total_mb: int) -> dict[str, object]:
    """A model-like state: 8 tensors of equal size plus small entries."""
    n = total_mb * (1 << 20) // 4 // 8
    g = torch.Generator().manual_seed(0)
    return {"model": {f"layer{i}.weight": torch.randn(n, generator=g) for i in range(8)},
            "step": 0, "rng": torch.get_rng_state()}


def raw_write(path: Path, data: memoryview, early: bool = False) -> float:
    """Write `data` in 16 MiB pieces and fsync; `early` starts each piece's disk write at once
    (as the checkpoint writer does), which lets the device work while the next piece is copied."""
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        for off in range(0, len(data), PIECE):
            piece = data[off:off + PIECE]
            n = len(piece)
            while len(piece):
                piece = piece[os.write(fd, piece):]
            if early:
                _start_writeback(fd, off, n)
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - t0


def machine(directory: Path) -> list[str]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    try:
        fs = subprocess.run(["stat", "-f", "-c", "%T", str(directory)], capture_output=True, text=True,
                            timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        fs = "?"
    load = os.getloadavg()[0]
    return [f"cpu: {os.cpu_count()} x {cpu}; memory {mem:.0f} GiB; load average {load:.1f}",
            f"target: {directory} ({fs}); python {platform.python_version()}; torch {torch.__version__}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=512, help="state size in MiB")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", type=Path, default=None, help="where to write (default: a temporary folder)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    base = Path(tempfile.mkdtemp(prefix="bench-ckpt-", dir=args.dir))
    try:
        state = make_state(args.mb)
        sync = CheckpointManager(base / "sync", keep_last=1)
        asy = CheckpointManager(base / "async", keep_last=1, async_save=True)
        sync.save(0, state)  # warm-up: allocator, page cache, first files
        shard = next((base / "sync").glob("step-*/rank0.pt"))
        nbytes = shard.stat().st_size
        data = memoryview(bytearray(shard.read_bytes()))
        raw_s, early_s, save_s, sync_block, async_block, async_total = [], [], [], [], [], []
        asy.save(0, state)
        asy.wait()
        for i in range(1, args.repeat + 1):
            raw_s.append(raw_write(base / f"raw-{i}.bin", data))
            (base / f"raw-{i}.bin").unlink()
            early_s.append(raw_write(base / f"early-{i}.bin", data, early=True))
            (base / f"early-{i}.bin").unlink()
            sync.save(i, state)
            save_s.append(sync.stats["blocking_s"])
            sync_block.append(sync.stats["blocking_s"])
            t0 = time.perf_counter()
            asy.save(i, state)
            async_block.append(asy.stats["blocking_s"])
            asy.wait()
            async_total.append(time.perf_counter() - t0)
        sync.close()
        asy.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)

    med = statistics.median
    raw_gbs = nbytes / med(raw_s) / 1e9
    save_gbs = nbytes / med(save_s) / 1e9
    early_gbs = nbytes / med(early_s) / 1e9
    rows = [
        ("raw write + fsync", f"{med(raw_s) * 1e3:8.1f} ms", f"{raw_gbs:6.2f} GB/s", "100%"),
        ("raw write + early writeback + fsync", f"{med(early_s) * 1e3:8.1f} ms", f"{early_gbs:6.2f} GB/s",
         f"{100 * early_gbs / raw_gbs:.0f}%"),
        ("CheckpointManager.save (sync, blocking)", f"{med(save_s) * 1e3:8.1f} ms", f"{save_gbs:6.2f} GB/s",
         f"{100 * save_gbs / raw_gbs:.0f}%"),
        ("async save: blocking (copy to CPU)", f"{med(async_block) * 1e3:8.1f} ms", "", ""),
        ("async save: blocking + background", f"{med(async_total) * 1e3:8.1f} ms", "", ""),
    ]
    print(f"checkpoint of {nbytes / 2**20:.0f} MiB, one rank, median of {args.repeat}")
    for line in machine(args.dir or Path(tempfile.gettempdir())):
        print(line)
    w = max(len(r[0]) for r in rows)
    print(f"| {'what':<{w}} | {'time':>11} | {'throughput':>10} | {'of raw':>6} |")
    print(f"|{'-' * (w + 2)}|{'-' * 13}|{'-' * 12}|{'-' * 8}|")
    for r in rows:
        print(f"| {r[0]:<{w}} | {r[1]:>11} | {r[2]:>10} | {r[3]:>6} |")
    ratio = save_gbs / raw_gbs
    print(f"save/raw throughput {ratio:.0%} (target >= 80%): {'ok' if ratio >= 0.8 else 'BELOW TARGET'}; "
          f"against raw with early writeback {save_gbs / early_gbs:.0%}; "
          f"async blocks {med(async_block) / med(sync_block):.1%} of a sync save")


if __name__ == "__main__":
    main()
