"""Benchmark: the downtime measure (preflight.runtime.downtime) against the truth, and its cost.

The lost time of an interruption runs from the last good moment to the moment training passed
the failed step again (the gap until training again plus the steps redone from the checkpoint).

  (a) accuracy, real torchrun `--max-restarts 1`, 2 gloo ranks, rank 1 signalled from outside:
      example  examples/train_resilient.py `--save-every 20 --step-delay 0.05 --step-timeout 3`
               (it writes no runtime.downtime event: only triage measures it), SIGKILL (as the
               OOM killer would) or SIGSTOP (rank 0's watchdog fires, names rank 1, ends it);
      readme   the README's program as written (`Resilience(..., save_every=50)`, steps at full
               speed), SIGKILL (its 60 s step timeout leaves SIGSTOP out); it writes the
               runtime's own runtime.downtime event once past the failed step.
      Where: "early", rank 1 is signalled a random moment (within one step) after it completed
      the 6th step past a checkpoint (steps 25 / 55 completed); "mid", half-way to the next one
      (steps 30 / 75).
      The truth is observed outside the runtime's records: the bench runs each rank's program
      through itself (`--wrap`), which installs a global torch optimizer post-step hook that
      appends (time, steps) to a file per process after every `optimizer.step()`, then runs the
      program unchanged. The absolute step comes from the process's start event (its pid and
      start_step). Resolution: exact per step; the kill is triggered by polling that file every
      2 ms. (The runtime's heartbeat files are rewritten every 0.375-0.5 s, too coarse.)
        start: the end of the last step rank 1 completed before the signal (k);
        end:   the moment the restarted job completed step k+1, the step rank 1 had been
               running (the last restarted rank's hook);
        true = end - start; "sig" = end - the signal.
      The measures: the runtime's runtime.downtime event (readme), `preflight triage --run-dir`
      on the run directory alone, its downtime incident (its "source" says whether it took the
      runtime's event), and for readme also triage over a copy of the run directory without
      the runtime's event (the after-the-fact measure: the passing moment interpolated at the
      next attempt's pace). error = measured - true.
  (b) cost at a restart: `last_good(run_dir)` over a run directory of R ranks with N events each
      (straggler and checkpoint events, a hang record, heartbeats), as a restarting rank calls it
      before training (each events file read from its tail; events of kinds it does not need are
      skipped unparsed); and `incidents()` over the same files (every event parsed: it needs the
      steps of all events to place the passing moment). Each measured in a process of its own;
      with `--against DIR` (another version's tree: `git archive REV preflight | tar -x -C DIR`)
      both versions over the same files, in ABBA order, two blocks.

    .venv/bin/python benchmarks/bench_downtime.py [--runs 2] [--events 20000,100000] [--no-64]
                                                  [--keep DIR] [--only example|readme|cost] [--against DIR]

About 5 minutes with the defaults on a 2-core VM.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import runpy
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from preflight.runtime import downtime as dt  # noqa: E402
from preflight.runtime.events import read_events  # noqa: E402

EXAMPLE = ROOT / "examples" / "train_resilient.py"
STEPS_ENV = "BENCH_DOWNTIME_STEPS_DIR"
# program: (arguments after the run directory, steps per checkpoint, kill points: steps completed)
PROGRAMS: dict[str, dict[str, Any]] = {
    "example": {"save_every": 20, "where": {"early": 25, "mid": 30}, "signals": ("SIGKILL", "SIGSTOP"),
                "after": 0.05},  # its step ends with a 50 ms sleep after optimizer.step()
    "readme": {"save_every": 50, "where": {"early": 55, "mid": 75}, "signals": ("SIGKILL",), "after": 0.0},
}


# ----- inside each rank: the step clock, outside the runtime ----------------------------------


def wrap(argv: list[str]) -> None:
    """Run the program `argv[0]` with arguments `argv[1:]`, appending "<time> <steps>" to
    $BENCH_DOWNTIME_STEPS_DIR/steps-rank<R>-pid<P>.txt after every optimizer step."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    out = Path(os.environ[STEPS_ENV]) / f"steps-rank{os.environ.get('RANK', '0')}-pid{os.getpid()}.txt"
    fh = out.open("a", buffering=1)
    count = [0]

    def after(*_: Any) -> None:
        count[0] += 1
        fh.write(f"{time.time():.6f} {count[0]}\n")

    register_optimizer_step_post_hook(after)
    sys.argv = list(argv)
    runpy.run_path(argv[0], run_name="__main__")


def _steps_of(path: Path) -> list[tuple[float, int]]:
    out = []
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        parts = line.split()
        if len(parts) == 2:
            try:
                out.append((float(parts[0]), int(parts[1])))
            except ValueError:  # a line torn by the kill: left out, and said
                print(f"{path}: unreadable step line {line!r} left out", file=sys.stderr)
    return out


# ----- (a) one run ----------------------------------------------------------------------------


def _env(steps_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "SLURM_", "NCCL_", "RANK",
                                                                    "WORLD_SIZE", "MASTER_", "LOCAL_RANK"))}
    env.update({"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo",
                "CUDA_VISIBLE_DEVICES": "", "PREFLIGHT_HISTORY": "off", "PYTHONUNBUFFERED": "1",
                STEPS_ENV: str(steps_dir)})
    return env


def _readme_program(dest: Path) -> Path:
    import re

    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Runtime resilience layer"):]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    if match is None:
        raise SystemExit("the README's runtime section has no python block")
    dest.write_text(match.group(1))
    return dest


def _kill_when(steps_dir: Path, proc: subprocess.Popen[bytes], done: int, sig: int, pace: float,
               rng: random.Random) -> tuple[float, int] | None:
    """Signal rank 1 a random moment within one step after it completed `done` steps (first
    attempt); (time sent, pid)."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        files = list(steps_dir.glob("steps-rank1-pid*.txt"))
        if files:
            got = _steps_of(files[0])
            if got and got[-1][1] >= done:
                time.sleep(rng.uniform(0.0, pace))
                pid = int(files[0].name.rsplit("pid", 1)[1].split(".")[0])
                sent = time.time()
                os.kill(pid, sig)
                return sent, pid
        time.sleep(0.002)
    return None


def _pace(steps_dir: Path, proc: subprocess.Popen[bytes], n: int = 20, timeout: float = 180.0) -> float | None:
    """The median of rank 1's first `n` step times (None when it never got there)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        files = list(steps_dir.glob("steps-rank1-pid*.txt"))
        got = _steps_of(files[0]) if files else []
        if len(got) > n:
            return statistics.median(b[0] - a[0] for a, b in zip(got[:n], got[1:n + 1], strict=True))
        time.sleep(0.01)
    return None


def _starts(run: Path) -> dict[int, tuple[int, int, float]]:
    """pid -> (rank, start_step, time) of each process's start event."""
    out = {}
    for e in read_events(run):
        f = e.get("facts") or {}
        if e.get("check") == "runtime.train" and "start_step" in f and "restart" in f and "pid" in f:
            out[int(f["pid"])] = (int(e["rank"]), int(f["start_step"]), float(e["time"]))
    return out


def truth(run: Path, steps_dir: Path, sent: float, pid: int, after: float = 0.0) -> dict[str, Any]:
    """The true lost time: from the end of the last step the killed rank completed before the
    signal (k) to the moment the restarted job completed step k+1. A step ends `after` seconds
    after its optimizer.step() (what the program does after it, a fixed sleep)."""
    starts = _starts(run)
    if pid not in starts:
        return {"error": f"no start event of the killed pid {pid}"}
    steps = {int(p.name.rsplit("pid", 1)[1].split(".")[0]): _steps_of(p) for p in steps_dir.glob("steps-rank*.txt")}
    first = starts[pid][1]
    before = [(t + after, first + c - 1) for t, c in steps.get(pid, []) if t + after < sent]
    if not before:
        return {"error": "the killed rank completed no step before the signal"}
    t_k, k = before[-1]
    later = [p for p, (_, _, t) in starts.items() if t > sent]
    if not later:
        return {"error": "no restarted rank"}
    ends = []
    resumed = None
    for p in later:
        start = starts[p][1]
        resumed = start
        hit = [t + after for t, c in steps.get(p, []) if start + c - 1 == k + 1]
        if not hit:
            return {"error": f"restarted pid {p} never completed step {k + 1}"}
        ends.append(hit[0])
    end = max(ends)
    return {"k": k, "failed": k + 1, "resumed": resumed, "redone": (k + 1) - resumed if resumed is not None else None,
            "true_s": end - t_k, "sig_s": end - sent, "end": end, "t_k": t_k, "sent": sent}


def _triage(run: Path, steps_dir: Path) -> list[dict[str, Any]]:
    p = subprocess.run([sys.executable, "-m", "preflight.cli", "triage", "--run-dir", str(run), "--no-node-checks",
                        "--json"], capture_output=True, text=True, timeout=180, cwd=ROOT, env=_env(steps_dir))
    try:
        return list(json.loads(p.stdout)["downtime"]["incidents"])
    except (ValueError, KeyError, TypeError):
        return [{"error": f"triage rc {p.returncode}: {p.stderr.strip()[-200:]}"}]


def _without_downtime(run: Path, dest: Path) -> Path:
    """A copy of the run directory's records without the runtime's runtime.downtime events."""
    dest.mkdir(parents=True)
    for f in run.iterdir():
        if f.is_file() and f.name.startswith("events-rank"):
            keep = [ln for ln in f.read_text(errors="replace").splitlines(True) if '"runtime.downtime"' not in ln]
            (dest / f.name).write_text("".join(keep))
        elif f.is_file() and f.suffix == ".json" or f.name == "preempted":
            shutil.copy2(f, dest / f.name)
    return dest


def _pick(n: dict[str, Any], true: dict[str, Any]) -> dict[str, Any]:
    return {"lost_s": n.get("lost_s"), "error_s": (n["lost_s"] - true["true_s"]) if n.get("lost_s") is not None else None,
            "from_step": n.get("from_step"), "resumed": n.get("resumed_step"), "redone": n.get("steps_redone"),
            "cause": n.get("cause"), "ranks": n.get("ranks"), "source": n.get("source", "runtime"),
            "redo_s": n.get("redo_s"), "last_good": n.get("last_good"), "passed": n.get("passed_failed_step_at"),
            "start_off_s": n["last_good"] - true["t_k"] if n.get("last_good") is not None else None,
            "end_off_s": n["passed_failed_step_at"] - true["end"] if n.get("passed_failed_step_at") else None}


def accuracy_run(program: str, signame: str, where: str, rng: random.Random, keep: Path | None) -> dict[str, Any]:
    spec = PROGRAMS[program]
    sig = getattr(signal, signame)
    tmp = Path(tempfile.mkdtemp(prefix=f"dt-{program}-{signame}-{where}-", dir=keep))
    try:
        run, steps_dir = tmp / "run", tmp / "steps"
        steps_dir.mkdir()
        if program == "example":
            target = [str(EXAMPLE), "--run-dir", str(run), "--steps", "60", "--save-every", "20",
                      "--step-delay", "0.05", "--step-timeout", "3"]
        else:
            target = [str(_readme_program(tmp / "train.py")), str(run), "200"]
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "--max-restarts", "1", "--monitor-interval", "0.1", str(Path(__file__).resolve()), "--wrap", *target]
        with open(tmp / "torchrun.log", "wb") as log:
            proc = subprocess.Popen(cmd, env=_env(steps_dir), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        try:
            pace = _pace(steps_dir, proc)
            if pace is None:
                return {"error": f"rank 1 did not complete 21 steps; torchrun exit {proc.poll()}"}
            kill = _kill_when(steps_dir, proc, spec["where"][where], sig, pace, rng)
            rc = proc.wait(timeout=240)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        if kill is None:
            return {"error": "the signal was not sent"}
        if rc != 0:
            return {"error": f"torchrun exit {rc}"}
        true = truth(run, steps_dir, *kill, after=spec["after"])
        if "error" in true:
            return true
        out: dict[str, Any] = {"true": true, "pace_s": pace}
        runtime = [e for e in read_events(run) if e.get("check") == dt.CHECK]
        if runtime:
            out["runtime"] = _pick({**runtime[0]["facts"], "source": "runtime event"}, true)
        tri = _triage(run, steps_dir)
        out["triage"] = [_pick(n, true) if "error" not in n else n for n in tri]
        if runtime:
            bare = _without_downtime(run, tmp / "run-without-event")
            out["triage_bare"] = [_pick(n, true) if "error" not in n else n for n in _triage(bare, steps_dir)]
        out["dir"] = str(tmp) if keep else ""
        return out
    finally:
        if keep is None:
            shutil.rmtree(tmp, ignore_errors=True)


def _big_run_dir(root: Path, per_rank: int, ranks: int, needed_every: int) -> None:
    root.mkdir(parents=True)
    t0 = time.time() - per_rank * 0.2 - 100
    for r in range(ranks):
        with (root / f"events-rank{r}.jsonl").open("w") as fh:
            for i in range(per_rank):
                check = "runtime.checkpoint" if i % needed_every == 0 else "runtime.straggler"
                fh.write(json.dumps({"check": check, "node": f"n{r + 1}", "status": "pass", "summary": "x" * 60,
                                     "evidence": ["e" * 40], "remedy": "", "facts": {"score": 1.0, "step": i},
                                     "source": "runtime", "time": t0 + i * 0.2, "rank": r, "step": i}) + "\n")
        (root / f"heartbeat-rank{r}.json").write_text(json.dumps({
            "rank": r, "host": f"n{r + 1}", "pid": 1, "step": per_rank, "section": "step",
            "section_elapsed_s": 4.0, "time": t0 + per_rank * 0.2 + 4, "state": "running"}))
    (root / "hang-rank0.json").write_text(json.dumps({
        "rank": 0, "host": "n1", "section": "step", "step": per_rank, "elapsed_s": 3.5, "time": t0 + per_rank * 0.2 + 3.5,
        "suspects": [2]}))


_MEASURE = r"""
import json, statistics, sys, time
sys.path.insert(0, sys.argv[1])
from preflight.runtime import downtime as dt
lg, inc = [], []
for _ in range(int(sys.argv[3])):
    t = time.perf_counter()
    got = dt.last_good(sys.argv[2])
    lg.append(time.perf_counter() - t)
    assert got is not None and got.cause == "hang", got
    t = time.perf_counter()
    dt.incidents(dt.read_run_dir(sys.argv[2]))
    inc.append(time.perf_counter() - t)
print(json.dumps([statistics.median(lg), statistics.median(inc), dt.__file__]))
"""


def _measure(code: Path, root: Path, reps: int) -> tuple[float, float]:
    """(last_good s, incidents s), medians of `reps`, by the preflight tree under `code`, in a
    process of its own."""
    out = subprocess.run([sys.executable, "-c", _MEASURE, str(code), str(root), str(reps)], capture_output=True,
                         text=True, timeout=900, cwd="/")
    try:
        lg, inc, where = json.loads(out.stdout)
    except ValueError:
        raise SystemExit(f"measuring with {code} failed: {out.stderr.strip()[-400:]}") from None
    if not str(where).startswith(str(code)):
        raise SystemExit(f"{code}: imported {where} instead")
    return float(lg), float(inc)


def cost(per_rank: int, ranks: int = 4, needed_every: int = 10, reps: int = 3,
         against: Path | None = None) -> dict[str, float]:
    """Median times of last_good and incidents over one generated run directory; with `against`
    (another version's tree), the two versions measured in ABBA order, two blocks."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "run"
        _big_run_dir(root, per_rank, ranks, needed_every)
        size = sum(p.stat().st_size for p in root.iterdir())
        got: dict[str, list[tuple[float, float]]] = {"now": [], "other": []}
        order = ("now", "other", "other", "now") * 2 if against is not None else ("now",)
        for which in order:
            got[which].append(_measure(ROOT if which == "now" else against or ROOT, root, reps))
        out = {"mb": size / 1e6}
        for which, vals in got.items():
            if vals:
                prefix = "" if which == "now" else "other_"
                out[prefix + "last_good_s"] = statistics.median(v[0] for v in vals)
                out[prefix + "incidents_s"] = statistics.median(v[1] for v in vals)
        return out


def _fmt(m: dict[str, Any] | None) -> str:
    if not m or m.get("lost_s") is None:
        return f"{'-':>22}"
    return f"{m['lost_s']:7.2f} {m['error_s']:+6.2f} {m['from_step']!s:>3}/{m['redone']!s:>3}"


def _median_err(rows: list[dict[str, Any]], key: str) -> str:
    errs = []
    for r in rows:
        m = r.get(key)
        m = m[0] if isinstance(m, list) and m else m
        if isinstance(m, dict) and m.get("error_s") is not None:
            errs.append(m["error_s"])
    if not errs:
        return "-"
    return f"median {statistics.median(errs):+.3f} s, range {min(errs):+.3f}..{max(errs):+.3f} s (n={len(errs)})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--events", default="20000,100000")
    ap.add_argument("--no-64", action="store_true", help="leave out the 64-rank rows of (b)")
    ap.add_argument("--keep", type=Path, default=None, help="keep each run's directory under DIR")
    ap.add_argument("--only", choices=("example", "readme", "cost"), default=None)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--against", type=Path, default=None,
                    help="(b): also measure the preflight tree under DIR (another version: git archive REV preflight), "
                         "ABBA with this one, each in a process of its own")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    if a.keep is not None:
        a.keep.mkdir(parents=True, exist_ok=True)
    print(f"load average {Path('/proc/loadavg').read_text().split()[:3]}", flush=True)
    rows: list[dict[str, Any]] = []
    if a.only != "cost":
        print("(a) accuracy: torchrun --max-restarts 1, 2 gloo ranks, rank 1 signalled from outside")
        print("    true: end of the last step rank 1 completed before the signal (k) -> the restarted job completed "
              "step k+1 (optimizer hooks, exact per step)")
        print("    each measure: lost s, error s (measured - true), failed step / steps redone")
        print(f"{'program':7} {'signal':7} {'where':5} {'run':>3} {'step ms':>7} {'cause':7} "
              f"{'k+1':>3} {'redo':>4} {'true s':>6} {'sig s':>6} | {'runtime event':22} | {'triage':22} | "
              f"{'triage w/o event':22} | triage source")
    for program, spec in PROGRAMS.items():
        if a.only not in (None, program):
            continue
        for signame in spec["signals"]:
            for where in spec["where"]:
                for i in range(a.runs):
                    t0 = time.monotonic()
                    r = accuracy_run(program, signame, where, rng, a.keep)
                    r.update(program=program, signal=signame, where=where)
                    rows.append(r)
                    if "error" in r:
                        print(f"{program:7} {signame:7} {where:5} {i + 1:>3} {r['error']}", flush=True)
                        continue
                    tr, tri = r["true"], (r["triage"] or [{}])
                    cause = (r.get("runtime") or tri[0]).get("cause")
                    print(f"{program:7} {signame:7} {where:5} {i + 1:>3} {1e3 * r['pace_s']:7.1f} {cause!s:7} "
                          f"{tr['failed']:>3} {tr['redone']:>4} {tr['true_s']:6.2f} {tr['sig_s']:6.2f} | "
                          f"{_fmt(r.get('runtime'))} | {_fmt(tri[0])} | {_fmt((r.get('triage_bare') or [None])[0])} | "
                          f"{tri[0].get('source')}; {len(tri)} incident(s); {time.monotonic() - t0:.0f} s "
                          f"{r.get('dir', '')}", flush=True)
                    parts = []
                    for key, label in (("runtime", "runtime"), ("triage", "triage"), ("triage_bare", "w/o event")):
                        m = r.get(key)
                        m = m[0] if isinstance(m, list) and m else m
                        if isinstance(m, dict) and m.get("start_off_s") is not None:
                            end = f"{m['end_off_s']:+.3f}" if m.get("end_off_s") is not None else "?"
                            parts.append(f"{label}: start {m['start_off_s']:+.3f} end {end}")
                    print(f"{'':27} signal {tr['sent'] - tr['t_k']:+.3f} s after k's end; " + "; ".join(parts),
                          flush=True)
        print(f"  {program}: runtime {_median_err([r for r in rows if r['program'] == program], 'runtime')}; "
              f"triage {_median_err([r for r in rows if r['program'] == program], 'triage')}; "
              f"triage w/o event {_median_err([r for r in rows if r['program'] == program], 'triage_bare')}",
              flush=True)
    if a.only not in (None, "cost"):
        return
    print("\n(b) cost: R ranks, N events each; 'needed' = the share of checkpoint/exit/... events among the "
          "stragglers' (median of 3)")
    head = f"{'ranks':>5} {'events/rank':>11} {'needed':>6} {'files MB':>8} {'last_good ms':>12} {'incidents ms':>12}"
    if a.against is not None:
        head += f" | {a.against} (ABBA, 2 blocks): {'last_good ms':>12} {'incidents ms':>12}"
    print(head)
    cases = [(4, int(x), 10) for x in a.events.split(",")] + [(4, 100000, 1)]
    if not a.no_64:
        cases += [(64, 20000, 10), (64, 20000, 1)]
    for ranks, n, every in cases:
        c = cost(n, ranks, every, against=a.against)
        line = (f"{ranks:>5} {n:>11} {f'1/{every}':>6} {c['mb']:8.1f} {1e3 * c['last_good_s']:12.1f} "
                f"{1e3 * c['incidents_s']:12.1f}")
        if "other_last_good_s" in c:
            line += (f" | {1e3 * c['other_last_good_s']:12.1f} {1e3 * c['other_incidents_s']:12.1f} "
                     f"(now/other: x{c['last_good_s'] / c['other_last_good_s']:.2f}, "
                     f"x{c['incidents_s'] / c['other_incidents_s']:.2f})")
        print(line, flush=True)
    print(f"load average {Path('/proc/loadavg').read_text().split()[:3]}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--wrap":
        wrap(sys.argv[2:])
    else:
        main()
