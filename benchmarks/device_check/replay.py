"""Step 4 of the device check: replay with the CUDA RNG state.

A model with dropout on the GPU (deterministic algorithms on) trains STEPS steps through
`Replay(audit_every=1)`: every step is replayed from its saved RNG state (CPU and CUDA) and its
loss and gradients digested bit for bit twice. It passes when every replay gave the same digest
(no SuspectHardware) and a control shows the test can fail: the same step run twice *without*
restoring the CUDA RNG state gives different dropout masks, hence a different digest. With two
GPUs or more the same runs under torchrun on NCCL with 2 ranks (the digests exchanged).

    python benchmarks/device_check/replay.py --dir OUT       # --plan: the commands
    (a rank: replay.py --rank-out FILE [--device cuda|cpu])
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[2]))  # after a shim (shim.py)

from benchmarks.device_check.common import FAIL, NEEDS_TWO, PASS, Step, child_env, cuda_state, tail  # noqa: E402

STEPS = 8
RUN_TIMEOUT = 37.0


def rank_main(out: Path, device: str) -> int:
    """One rank: STEPS audited steps, then the control; rank 0 writes the figures."""
    import torch

    from preflight.runtime.replay import Replay, SuspectHardware, digest

    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "cuda":
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
        torch.use_deterministic_algorithms(True)
    else:
        dev = torch.device("cpu")
    if world > 1:
        import torch.distributed as dist

        dist.init_process_group("nccl" if device == "cuda" else "gloo")
    rank = int(os.environ.get("RANK", "0"))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Dropout(0.5),
                                torch.nn.Linear(1024, 1)).to(dev)
    torch.manual_seed(1 + rank)
    if dev.type == "cuda":
        torch.cuda.manual_seed(1 + rank)
    x = torch.randn(512, 256, device=dev)

    def compute() -> Any:
        loss = (model(x) - 1.0).pow(2).mean()  # dropout draws from the device's RNG
        loss.backward()
        return loss

    replay = Replay(audit_every=1, record_history=False, rank=rank, on_spike="report")
    figures: dict[str, Any] = {"device": str(dev), "world": world, "steps": STEPS}
    same = 0
    try:
        for i in range(STEPS):
            outcome = replay.step(i, compute, model)
            mine = next((r for r in outcome.ranks or [] if r.get("rank") == rank), {})
            same += int(mine.get("first") is not None and mine.get("first") == mine.get("second"))
    except SuspectHardware as exc:
        figures["suspect"] = str(exc)
    figures.update({"replays": len(replay.replays), "bitwise_same": same})
    # the control: the same step twice without restoring the RNG state
    digests = []
    for _ in range(2):
        for p in model.parameters():
            p.grad = None
        loss = compute()
        digests.append(digest(float(loss), list(model.parameters())))
    figures["control_differs"] = digests[0] != digests[1]
    if dev.type == "cuda":
        figures["gpu"] = torch.cuda.get_device_name(dev)
    if world > 1:
        import torch.distributed as dist

        dist.destroy_process_group()
    if rank == 0:
        out.write_text(json.dumps(figures, indent=1))
    return 0


def commands(out: Path, world: int, device: str) -> list[str]:
    me = str(Path(__file__).resolve())
    if world == 1:
        return [sys.executable, me, "--rank-out", str(out), "--device", device]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(world), me,
            "--rank-out", str(out), "--device", device]


def judge(doc: dict[str, Any], label: str) -> list[str]:
    problems = []
    if doc.get("suspect"):
        problems.append(f"{label}: a replay differed: {doc['suspect']}")
    elif doc.get("bitwise_same") != STEPS:
        problems.append(f"{label}: {doc.get('bitwise_same')} of {STEPS} replays bitwise the same")
    if not doc.get("control_differs"):
        problems.append(f"{label}: the control without the RNG restore gave the same digest: dropout did not "
                        "draw from the RNG, so the test proves nothing")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", type=Path)
    ap.add_argument("--plan", action="store_true")
    ap.add_argument("--rank-out", type=Path)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    a = ap.parse_args()
    if a.rank_out is not None:
        return rank_main(a.rank_out, a.device)
    if a.plan or a.dir is None:
        for world in (1, 2):
            print("    " + shlex.join(commands(Path(f"OUT/replay-{world}.json"), world, "cuda"))
                  + ("    (2 GPUs or more)" if world == 2 else ""))
        return 0
    step = Step("replay", a.dir)
    if a.device == "cuda":
        gpus, why = cuda_state()
        step.figures["gpus"] = gpus
        if not gpus:
            return step.done(FAIL, why or "torch sees no GPU")
    else:
        gpus = 1
    problems: list[str] = []
    skipped = ""
    env = child_env(CUBLAS_WORKSPACE_CONFIG=":4096:8", OMP_NUM_THREADS="1")
    for world in (1, 2):
        if world > gpus:
            skipped = f"{NEEDS_TWO}: the 2-rank NCCL replay (digests exchanged) was not run"
            step.figures[f"world{world}"] = f"skipped: {NEEDS_TWO}"
            continue
        out = a.dir / f"replay-{world}.json"
        p = step.run(commands(out, world, a.device), RUN_TIMEOUT, env=env, log=a.dir / f"replay-{world}.log")
        if isinstance(p, str):
            problems.append(f"world {world}: {p}")
            continue
        try:
            doc = json.loads(out.read_text())
        except (OSError, ValueError):
            problems.append(f"world {world}: rc {p.returncode}, no figures: {tail(p.stderr, 4)}")
            continue
        step.figures[f"world{world}"] = doc
        problems += judge(doc, f"world {world}")
    if problems:
        return step.done(FAIL, "; ".join(problems[:4]))
    step.figures["partial"] = skipped
    return step.done(PASS, skipped)


if __name__ == "__main__":
    sys.exit(main())
