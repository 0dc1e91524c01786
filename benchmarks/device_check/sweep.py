"""Step 2 of the device check: `preflight sweep` on NCCL across the local GPUs against a bare
torch.distributed all-reduce loop on the same sizes (allreduce.py).

Figures: both tables (bytes, time_us, busbw GB/s) and their ratio per size (sweep / bare).
It fails when either run fails, a size is missing or reduced wrongly, or the sweep's busbw is
under RATIO_FLOOR of the bare loop's at a bandwidth-bound size (>= BIG bytes): the sweep would
then report a healthy fabric as slow. With one GPU (NCCL allows one rank per GPU) it runs the
sweep with one rank (the launch and NCCL start-up; no bandwidth by definition) and is skipped:
needs 2 GPUs.

    python benchmarks/device_check/sweep.py --dir OUT [--max-bytes 1G]     # --plan: the commands
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[2]))  # after a shim (shim.py)

from benchmarks.device_check.common import FAIL, NEEDS_TWO, PASS, SKIPPED, Step, child_env, cuda_state, tail  # noqa: E402,E501

HERE = Path(__file__).resolve().parent
RATIO_FLOOR = 0.8  # the sweep's per-iteration synchronisation costs little once a message takes > 1 ms
BIG = 64 << 20
WARMUP, ITERS = 5, 20
RUN_TIMEOUT = 75.0


def commands(nproc: int, max_bytes: str, out: Path, sizes: str, backend: str = "nccl") -> tuple[list[str], list[str]]:
    sweep = [sys.executable, "-m", "preflight.cli", "sweep", "--nproc", str(nproc), "--backend", backend,
             "--min-bytes", "8", "--max-bytes", max_bytes, "--factor", "4", "--warmup", str(WARMUP), "--iters",
             str(ITERS), "--pingpong", "none", "--deadline", str(int(RUN_TIMEOUT - 20)), "--json", "-o",
             str(out / "sweep-report")]
    bare = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
            str(HERE / "allreduce.py"), str(out / "bare-allreduce.json"), sizes, str(WARMUP), str(ITERS)]
    return sweep, bare


def sizes_for(max_bytes: str) -> list[int]:
    from preflight.cli.options import size
    from preflight.sweep.spec import message_sizes

    return message_sizes(8, size(max_bytes), 4, 4)


def sweep_rows(step: Step, argv: list[str], out: Path) -> tuple[list[dict[str, Any]], str, dict[str, Any]]:
    p = step.run(argv, RUN_TIMEOUT, env=child_env(), log=out / "sweep.log")
    if isinstance(p, str):
        return [], f"preflight sweep: {p}", {}
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        return [], f"preflight sweep (rc {p.returncode}) printed no JSON report: {tail(p.stderr, 4)}", {}
    results = {str(r.get("check")): r for r in doc.get("results") or []}
    info = {"rc": p.returncode, "verdict": doc.get("verdict"),
            "checks": {k: [r.get("status"), r.get("summary")] for k, r in results.items()}}
    allreduce = results.get("nccl.allreduce") or {}
    rows = (allreduce.get("facts") or {}).get("rows") or []
    return rows, "", info


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", type=Path)
    ap.add_argument("--max-bytes", default="1G")
    ap.add_argument("--plan", action="store_true")
    ap.add_argument("--backend", default="nccl", help="gloo: --nproc CPU ranks, to try the plumbing without a GPU")
    ap.add_argument("--nproc", type=int, default=2, help="with --backend gloo")
    a = ap.parse_args()
    if a.plan or a.dir is None:
        sizes = ",".join(map(str, sizes_for(a.max_bytes)))
        for argv in commands(8, a.max_bytes, Path("OUT"), sizes):
            print("    " + " ".join(argv) + "    (--nproc: the GPUs torch sees; 1 GPU: the sweep alone)")
        return 0
    step = Step("sweep", a.dir)
    if a.backend == "gloo":
        gpus = a.nproc
    else:
        gpus, why = cuda_state()
        step.figures["gpus"] = gpus
        if not gpus:
            return step.done(FAIL, why or "torch sees no GPU")
    step.figures["backend"] = a.backend
    sizes = sizes_for(a.max_bytes)
    sweep_argv, bare_argv = commands(gpus, a.max_bytes, a.dir, ",".join(map(str, sizes)), a.backend)
    rows, err, info = sweep_rows(step, sweep_argv, a.dir)
    step.figures["sweep"] = info
    if gpus < 2:
        if err:
            return step.done(FAIL, f"one-rank NCCL sweep: {err}")
        status = (info.get("checks", {}).get("nccl.allreduce") or ["?"])[0]
        if status not in ("skip", "pass"):
            return step.done(FAIL, f"one-rank NCCL sweep: nccl.allreduce {status}: {info}")
        return step.done(SKIPPED, f"{NEEDS_TWO}: bus bandwidth needs two ranks on two GPUs; the one-rank NCCL "
                                  f"sweep ran (nccl.allreduce {status})")
    if err:
        return step.done(FAIL, err)
    extra = {"CUDA_VISIBLE_DEVICES": "", "GLOO_SOCKET_IFNAME": "lo"} if a.backend == "gloo" else {}
    p = step.run(bare_argv, RUN_TIMEOUT, env=child_env(OMP_NUM_THREADS="1", DEVICE_CHECK_BACKEND=a.backend, **extra),
                 log=a.dir / "bare-allreduce.log")
    if isinstance(p, str):
        return step.done(FAIL, f"bare all-reduce loop: {p}")
    try:
        bare = json.loads((a.dir / "bare-allreduce.json").read_text())["rows"]
    except (OSError, ValueError, KeyError) as exc:
        return step.done(FAIL, f"bare all-reduce loop (rc {p.returncode}) wrote no table ({exc}): "
                               f"{tail(p.stderr, 4)}")
    problems = []
    by_size = {int(r["bytes"]): r for r in rows}
    table = []
    for b in bare:
        s = by_size.get(int(b["bytes"]))
        if s is None:
            problems.append(f"the sweep has no row for {b['bytes']} bytes")
            continue
        ratio = s["busbw"] / b["busbw"] if b["busbw"] > 0 else None
        table.append({"bytes": b["bytes"], "sweep_busbw": s["busbw"], "bare_busbw": b["busbw"],
                      "sweep_time_us": s["time_us"], "bare_time_us": b["time_us"], "ratio": ratio,
                      "wrong": s.get("wrong", 0)})
        if s.get("wrong"):
            problems.append(f"{s['wrong']} element(s) reduced wrongly at {b['bytes']} bytes")
        if b["bytes"] >= BIG and (ratio is None or ratio < RATIO_FLOOR):
            problems.append(f"sweep busbw {s['busbw']:.1f} GB/s is {ratio or 0:.2f} of the bare loop's "
                            f"{b['busbw']:.1f} GB/s at {b['bytes']} bytes (floor {RATIO_FLOOR})")
    step.figures.update({"world": gpus, "table": table, "ratio_floor": RATIO_FLOOR,
                         "peak_sweep_busbw": max((r["sweep_busbw"] for r in table), default=0.0),
                         "peak_bare_busbw": max((r["bare_busbw"] for r in table), default=0.0)})
    if not table:
        problems.append("no size measured by both")
    return step.done(FAIL if problems else PASS, "; ".join(problems[:4]))


if __name__ == "__main__":
    sys.exit(main())
