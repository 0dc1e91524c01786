"""Benchmark: the controller's cost at fleet scale (issue 31), before and after, with a chart.

Parts (run all, or name some):

- `analyze`: `preflight analyze <dir> [--jobs J]` over N replayed per-node folders (gpu0001,
  ...; the files of examples/captures/healthy-node, one node in 50 from faulty-node, hard
  links so 10,000 nodes cost no disk), N = 1, 10, 100, 1,000 and 10,000 (10,000 for the tree
  after only; `--no-10k` leaves it out). Each run is the CLI as its console script starts it
  (`from preflight.cli import main; main()`) under a small wrapper that records, at exit, the
  main process's own rusage and that of the children it waited for (a process pool's
  workers); the benchmark takes the whole run's CPU (user + system, the process and every
  child it reaped) from os.wait4, and the wall from start to exit. Every run is checked: the
  exit code (1 when the mix holds a faulty node), the verdict and the blocking nodes (exactly
  the faulty ones); and the reports of `--jobs 1` and `--jobs 2` (report.json, report.md,
  the bad-nodes file, the console) are compared byte for byte, the run's start time and
  duration masked (the only fields that differ between two runs of one command).
- `before`: the same runs on the tree at `--before REF` (default 80a51c4, the commit before
  issue 31), a git worktree at /tmp/bench_fleet_before (reused when it is there; nothing is
  removed), run with cwd and PYTHONPATH that tree and a link preflight/checks -> ../checks
  (the editable install maps preflight.checks to this checkout's checks/ otherwise). Its
  10,000-node figure is a projection (the cost per added node between its two largest
  sizes), not a run.
- `run`: `preflight run` over real ssh and srun, 1 vs 16 nodes with instant fake tools, from
  benchmarks/bench_fanout.py --mode run --json.
- `startup`: `preflight --help` and a GO `preflight prologue` (instant fake tools, --dry-run)
  against `python -c pass`, interleaved rounds, median of the per-round differences (11
  rounds); plus benchmarks/bench_startup.py --json and bench_node.py --json where they offer it.
- `history`: benchmarks/bench_history.py --fleet --json where it offers it.

Always recorded: date, platform, CPU count, a 10M-iteration Python loop, load average before
and after. Writes a Markdown table (stdout and --out), an SVG chart (--svg; log-log: controller
CPU per node and wall against N, before and after) and the figures as JSON (--json-out).

    .venv/bin/python benchmarks/bench_fleet.py [PART ...] [--repeat 3] [--sizes 1,10,100,1000]
        [--no-10k] [--before 80a51c4] [--out reports/bench_fleet.md] [--svg reports/bench_fleet.svg]
    .venv/bin/python benchmarks/bench_fleet.py --quick        # smoke run: analyze of 1 and 2 nodes
    .venv/bin/python benchmarks/bench_fleet.py run startup history --reuse   # add parts to the saved figures
    .venv/bin/python benchmarks/bench_fleet.py --render       # table and chart again from the saved figures
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HEALTHY = ROOT / "examples" / "captures" / "healthy-node"
FAULTY = ROOT / "examples" / "captures" / "faulty-node"
BEFORE_REF = "80a51c4"
BEFORE_DIR = Path("/tmp/bench_fleet_before")
FAULTY_EVERY, FAULTY_AT = 50, 2  # node i (from 1) is faulty when i % 50 == 2: gpu0002, gpu0052, ...
SIZES = (1, 10, 100, 1000)
BIG = 10_000
PARTS = ("analyze", "before", "run", "startup", "history")
RUN_TIMEOUT_S = 3600.0
RUN_MISSING = "run figures: benchmarks/bench_fanout.py --json not available"

# The CLI as its console script starts it, under a wrapper that writes, at exit, the main
# process's own rusage and its reaped children's (a pool's workers) to the file in argv[1].
WRAP = """\
import atexit, json, os, resource, sys
_out, _pid = sys.argv[1], os.getpid()
def _report():
    if os.getpid() != _pid:
        return
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(_out, "w") as f:
        json.dump({"self_cpu": s.ru_utime + s.ru_stime, "self_maxrss_kb": s.ru_maxrss,
                   "children_cpu": c.ru_utime + c.ru_stime, "children_maxrss_kb": c.ru_maxrss}, f)
atexit.register(_report)
sys.argv = ["preflight", *sys.argv[2:]]
from preflight.cli import main
main()
"""


# ----- machine ---------------------------------------------------------------------------------


def loop_time() -> float:
    """Seconds for a 10M-iteration Python loop (`i += 1`): the yardstick for CPU figures."""
    i = 0
    start = time.perf_counter()
    for _ in range(10_000_000):
        i += 1
    return time.perf_counter() - start


def machine() -> dict[str, Any]:
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "platform": platform.platform(), "node": platform.node(), "machine": platform.machine(),
            "python": platform.python_version(), "cpus": os.cpu_count(), "loop_10m_s": round(loop_time(), 3),
            "load_before": list(os.getloadavg())}


# ----- fleet folders ---------------------------------------------------------------------------


def node_name(i: int, n: int) -> str:
    return f"gpu{i:0{max(4, len(str(n)))}d}"


def is_faulty(i: int) -> bool:
    return i % FAULTY_EVERY == FAULTY_AT


def build_fleet(root: Path, n: int, healthy: Path = HEALTHY, faulty: Path = FAULTY) -> tuple[list[str], list[str]]:
    """N per-node folders under root whose files are hard links to one copy of each capture
    (copied under root first, so the links never cross file systems); (all names, faulty names)."""
    src = root / ".captures"
    copies: dict[str, list[Path]] = {}
    for kind, folder in (("healthy", healthy), ("faulty", faulty)):
        dest = src / kind
        dest.mkdir(parents=True, exist_ok=True)
        copies[kind] = []
        for f in sorted(folder.iterdir()):
            if f.is_file():
                shutil.copyfile(f, dest / f.name)
                copies[kind].append(dest / f.name)
    fleet = root / "fleet"
    fleet.mkdir(parents=True, exist_ok=True)
    names, bad = [], []
    for i in range(1, n + 1):
        name = node_name(i, n)
        names.append(name)
        kind = "faulty" if is_faulty(i) else "healthy"
        if kind == "faulty":
            bad.append(name)
        d = fleet / name
        d.mkdir()
        for f in copies[kind]:
            os.link(f, d / f.name)
    return names, bad


# ----- trees -----------------------------------------------------------------------------------


@dataclass
class Tree:
    """A checkout to run the CLI from: its root (cwd and first on sys.path) and environment."""

    label: str
    root: Path
    env: dict[str, str] = field(default_factory=dict)
    jobs: bool = False  # whether its `analyze` has --jobs

    def argv(self, rusage_file: Path, *args: str) -> list[str]:
        return [sys.executable, "-c", WRAP, str(rusage_file), *args]


def _base_env() -> dict[str, str]:
    env = dict(os.environ)
    for k in ("PYTHONPATH", "PREFLIGHT_HISTORY", "PREFLIGHT_PROFILE", "PREFLIGHT_DEBUG"):
        env.pop(k, None)
    return env


def _has_option(tree: Tree, command: list[str], option: str) -> bool:
    p = subprocess.run([sys.executable, "-m", "preflight.cli", *command, "--help"], cwd=tree.root, env=tree.env,
                       capture_output=True, text=True, timeout=120)
    return p.returncode == 0 and re.search(rf"(^|\s){re.escape(option)}\b", p.stdout) is not None


def _check_imports(tree: Tree) -> None:
    """The tree's preflight and preflight.checks are the tree's own (not this checkout's)."""
    code = "import preflight, preflight.checks; print(preflight.__file__); print(preflight.checks.__file__)"
    p = subprocess.run([sys.executable, "-c", code], cwd=tree.root, env=tree.env, capture_output=True, text=True,
                       timeout=120)
    files = p.stdout.split()
    root = str(tree.root.resolve())
    if p.returncode != 0 or len(files) != 2 or not all(str(Path(f).resolve()).startswith(root) for f in files):
        raise SystemExit(f"{tree.label}: preflight does not import from {tree.root}: {p.stdout} {p.stderr[-400:]}")


def tree_after() -> Tree:
    t = Tree("after", ROOT, _base_env())
    t.jobs = _has_option(t, ["analyze"], "--jobs")
    return t


def tree_before(ref: str, where: Path = BEFORE_DIR) -> Tree:
    """A worktree of `ref` at `where` (made once, then reused as it is)."""
    want = subprocess.run(["git", "-C", str(ROOT), "rev-parse", f"{ref}^{{commit}}"], capture_output=True,
                          text=True, check=True).stdout.strip()
    if not where.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(where), want], check=True,
                       capture_output=True, text=True)
    have = subprocess.run(["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    if have != want:
        raise SystemExit(f"{where} holds {have[:12] or 'no checkout'}, not {ref} ({want[:12]}); "
                         "move it away or pass another --before-dir")
    link = where / "preflight" / "checks"
    if not link.exists():
        link.symlink_to("../checks", target_is_directory=True)
    env = _base_env()
    env["PYTHONPATH"] = str(where)
    t = Tree(f"before ({ref})", where, env)
    _check_imports(t)
    t.jobs = _has_option(t, ["analyze"], "--jobs")
    return t


# ----- one measured run ------------------------------------------------------------------------


def measure(tree: Tree, args: list[str], out_dir: Path, timeout: float | None = None) -> dict[str, Any]:
    """Run the CLI with args, its console to out_dir/console.txt; wall, CPU (os.wait4: the
    process and the children it reaped), the main process's and its children's peak RSS."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rusage_file = out_dir / "rusage.json"
    rusage_file.unlink(missing_ok=True)
    timeout = RUN_TIMEOUT_S if timeout is None else timeout
    with open(out_dir / "console.txt", "wb") as out, open(out_dir / "stderr.txt", "wb") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(tree.argv(rusage_file, *args), cwd=tree.root, env=tree.env, stdout=out, stderr=err)
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - start > timeout:
                proc.kill()
                pid, status, ru = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    own: dict[str, Any] = {}
    if rusage_file.exists():
        own = json.loads(rusage_file.read_text())
    return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "rc": proc.returncode,
            "maxrss_mb": ru.ru_maxrss / 1024,  # the larger of the main process and its children
            "main_maxrss_mb": own["self_maxrss_kb"] / 1024 if own else None,
            "children_maxrss_mb": own["children_maxrss_kb"] / 1024 if own else None,
            "children_cpu": own.get("children_cpu"), "stderr": (out_dir / "stderr.txt").read_text(errors="replace")[-600:]}


# ----- report checks ---------------------------------------------------------------------------


def report_head(path: Path) -> dict[str, Any]:
    """report.json's fields before its results, read without loading every result."""
    head: list[str] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip().startswith('"results"'):
                text = "".join(head).rstrip().rstrip(",") + "}"
                return dict(json.loads(text))
            head.append(line)
    return dict(json.loads("".join(head)))


def check_report(out_dir: Path, rc: int, names: list[str], faulty: list[str]) -> list[str]:
    """What is wrong with a run's outcome for this mix (nothing: [])."""
    problems = []
    want_rc, want_verdict = (1, "NO-GO") if faulty else (0, "GO")
    if rc != want_rc:
        problems.append(f"exit code {rc}, expected {want_rc}")
    try:
        head = report_head(out_dir / "report.json")
    except (OSError, ValueError) as exc:
        return [*problems, f"no readable report.json ({exc})"]
    if head.get("verdict") != want_verdict:
        problems.append(f"verdict {head.get('verdict')}, expected {want_verdict}")
    if sorted(head.get("bad_nodes", [])) != sorted(faulty):
        got = sorted(head.get("bad_nodes", []))
        problems.append(f"blocking nodes {got[:5]}{'...' if len(got) > 5 else ''} ({len(got)}), "
                        f"expected {sorted(faulty)[:5]} ({len(faulty)})")
    if sorted(head.get("nodes", [])) != sorted(names):
        problems.append(f"{len(head.get('nodes', []))} nodes in the report, expected {len(names)}")
    return problems


# Lines that differ between two runs of one command: its start time, its duration, its folder.
MASKS = (
    (re.compile(r'^(\s*"started": )"[^"]*"'), r'\1"*"'),
    (re.compile(r'^(\s*"duration_s": )[-0-9.eE+]+'), r"\1*"),
    (re.compile(r"^- started: .*, took .* s$"), "- started: *"),
    (re.compile(r"^reports: .*$"), "reports: *"),
)
COMPARED = ("report.json", "report.md", "bad-nodes.txt", "console.txt")


def _masked(line: str) -> str:
    for rx, repl in MASKS:
        line = rx.sub(repl, line)
    return line


def compare_outputs(a: Path, b: Path, files: tuple[str, ...] = COMPARED) -> list[str]:
    """Each differing file with its first differing line; [] when byte-identical once masked."""
    diffs = []
    for name in files:
        fa, fb = a / name, b / name
        if not fa.exists() or not fb.exists():
            diffs.append(f"{name}: missing in {a if not fa.exists() else b}")
            continue
        with open(fa, "rb") as x, open(fb, "rb") as y:
            for n, (la, lb) in enumerate(zip(x, y, strict=False), 1):
                if la != lb and _masked(la.decode(errors="replace")) != _masked(lb.decode(errors="replace")):
                    diffs.append(f"{name} line {n}: {la[:120]!r} != {lb[:120]!r}")
                    break
            else:
                if x.read(1) != y.read(1):
                    diffs.append(f"{name}: one file is longer")
    return diffs


# ----- part: analyze ---------------------------------------------------------------------------


@dataclass
class Config:
    label: str  # series name
    tree: Tree
    jobs: int | None

    def out_dir(self, tmp: Path, rep: int) -> Path:
        return tmp / "out" / f"{re.sub(r'[^A-Za-z0-9]+', '_', self.label)}_{rep}"

    def args(self, fleet: Path, out: Path) -> list[str]:
        extra = ["--jobs", str(self.jobs)] if self.jobs is not None else []
        return ["analyze", str(fleet), "-o", str(out), "--history", "off", "--bad-nodes", str(out / "bad-nodes.txt"),
                *extra]


def configs_for(trees: list[Tree]) -> list[Config]:
    out = []
    for t in trees:
        if t.jobs:
            out += [Config(f"{t.label}, --jobs 1", t, 1), Config(f"{t.label}, --jobs 2", t, 2)]
        else:
            out.append(Config(t.label, t, None))
    return out


def part_analyze(configs: list[Config], sizes: list[int], repeat: int, big: int | None,
                 log: Any = print, big_repeat: int | None = None, timeout: float = RUN_TIMEOUT_S) -> dict[str, Any]:
    """Every config at every size (the big size for the trees after only), runs interleaved."""
    series: dict[str, dict[str, Any]] = {c.label: {"points": {}} for c in configs}
    identity: dict[str, Any] = {}
    problems: list[str] = []
    all_sizes = [*sizes, *([big] if big else [])]
    for n in all_sizes:
        todo = [c for c in configs if n in sizes or not c.tree.label.startswith("before")]
        with tempfile.TemporaryDirectory(prefix="bench_fleet_") as tmp:
            t0 = time.perf_counter()
            names, faulty = build_fleet(Path(tmp), n)
            log(f"# {n} nodes ({len(faulty)} faulty) built in {time.perf_counter() - t0:.1f} s")
            runs: dict[str, list[dict[str, Any]]] = {c.label: [] for c in todo}
            for rep in range(repeat if n in sizes or big_repeat is None else big_repeat):
                for c in todo:
                    out = c.out_dir(Path(tmp), rep)
                    r = measure(c.tree, c.args(Path(tmp) / "fleet", out), out, timeout)
                    bad = check_report(out, r["rc"], names, faulty)
                    if bad:
                        problems.append(f"{c.label}, {n} nodes: " + "; ".join(bad) + (f" | {r['stderr']}" if r["stderr"] else ""))
                    r["ok"] = not bad
                    runs[c.label].append(r)
                    log(f"  {c.label:28s} N={n:<6d} rep {rep + 1}: wall {r['wall']:.2f} s, cpu {r['cpu']:.2f} s, "
                        f"rc {r['rc']}{'' if not bad else ' PROBLEM: ' + '; '.join(bad)}")
                for c in todo:  # keep the first repeat's reports (for the jobs comparison) only
                    if rep > 0:
                        shutil.rmtree(c.out_dir(Path(tmp), rep), ignore_errors=True)
            for c in todo:
                rs = runs[c.label]
                series[c.label]["points"][str(n)] = summarize(rs, n)
            for t in {c.tree.label: c.tree for c in todo}.values():
                pair = [c for c in todo if c.tree is t and c.jobs in (1, 2)]
                if len(pair) == 2:
                    a, b = (c.out_dir(Path(tmp), 0) for c in pair)
                    diffs = compare_outputs(a, b)
                    identity[f"{t.label}/{n}"] = diffs
                    if diffs:
                        problems.append(f"{t.label}, {n} nodes: --jobs 1 and --jobs 2 reports differ: {diffs[0]}")
    return {"series": series, "identity": identity, "problems": problems, "sizes": all_sizes,
            "faulty_rule": f"node i (from 1) faulty when i % {FAULTY_EVERY} == {FAULTY_AT}", "repeat": repeat}


def merge_analyze(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The sizes and series of an earlier run that this one did not measure, kept; this run's
    figures win where both have a size. Problems are this run's and those of the kept sizes."""
    out = dict(new)
    series = {name: {"points": dict(s["points"]), **{k: v for k, v in s.items() if k != "points"}}
              for name, s in old.get("series", {}).items()}
    for name, s in new["series"].items():
        merged = series.setdefault(name, {"points": {}})
        merged["points"].update(s["points"])
        merged.update({k: v for k, v in s.items() if k != "points"})
    out["series"] = series
    out["identity"] = {**old.get("identity", {}), **new["identity"]}
    redone = set(new["sizes"])
    out["problems"] = [p for p in old.get("problems", []) if not any(f", {n} nodes:" in p for n in redone)]
    out["problems"] += new["problems"]
    out["sizes"] = sorted(set(old.get("sizes", [])) | redone)
    return out


def summarize(runs: list[dict[str, Any]], n: int) -> dict[str, Any]:
    def med(key: str) -> float | None:
        vals = [r[key] for r in runs if r.get(key) is not None]
        return statistics.median(vals) if vals else None

    cpu = med("cpu") or 0.0
    return {"n": n, "wall": med("wall"), "cpu": cpu, "cpu_per_node_ms": cpu / n * 1000, "maxrss_mb": med("maxrss_mb"),
            "main_maxrss_mb": med("main_maxrss_mb"), "children_maxrss_mb": med("children_maxrss_mb"),
            "children_cpu": med("children_cpu"), "ok": all(r["ok"] for r in runs), "runs": len(runs),
            "walls": [round(r["wall"], 3) for r in runs], "cpus": [round(r["cpu"], 3) for r in runs]}


def project(points: dict[str, Any], n_to: int) -> dict[str, Any] | None:
    """CPU and wall at n_to on the line through the two largest sizes measured (the cost per
    added node between them; start-up is paid once), or in proportion from a single size."""
    sizes = sorted(int(k) for k, p in points.items() if p.get("wall") and p.get("cpu"))
    if not sizes:
        return None
    hi = points[str(sizes[-1])]
    if len(sizes) == 1:
        k = n_to / sizes[-1]
        cpu, wall = hi["cpu"] * k, hi["wall"] * k
    else:
        lo = points[str(sizes[-2])]
        span = sizes[-1] - sizes[-2]
        cpu = hi["cpu"] + (hi["cpu"] - lo["cpu"]) / span * (n_to - sizes[-1])
        wall = hi["wall"] + (hi["wall"] - lo["wall"]) / span * (n_to - sizes[-1])
    return {"n": n_to, "cpu": cpu, "wall": wall, "cpu_per_node_ms": cpu / n_to * 1000, "projected": True}


# ----- parts run by other benchmarks -------------------------------------------------------------


def _offers(script: str, *options: str) -> bool:
    path = ROOT / "benchmarks" / script
    if not path.exists():
        return False
    p = subprocess.run([sys.executable, str(path), "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    return p.returncode == 0 and all(re.search(rf"(^|\s|\[){re.escape(o)}\b", p.stdout) for o in options)


def _json_of(argv: list[str], timeout: float) -> dict[str, Any]:
    p = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    text = p.stdout
    try:
        return dict(json.loads(text[text.index("{"):]))
    except ValueError:
        return {"error": f"{' '.join(argv)}: rc {p.returncode}, no JSON: {(p.stderr or text)[-400:]}"}


def part_run(repeat: int, nodes: int = 16, transports: tuple[str, ...] = ("ssh", "srun")) -> dict[str, Any]:
    """`preflight run` over ssh and srun, 1 vs 16 nodes, from bench_fanout.py --mode run --json."""
    if not _offers("bench_fanout.py", "--json", "--mode"):
        return {"message": RUN_MISSING}
    out: dict[str, Any] = {}
    for transport in transports:
        try:
            out[transport] = _json_of(["benchmarks/bench_fanout.py", "--mode", "run", "--transport", transport,
                                       "--nodes", str(nodes), "--repeat", str(repeat), "--json"], timeout=3600)
        except subprocess.TimeoutExpired:
            out[transport] = {"error": "timed out after 3600 s"}
    return out


def part_history() -> dict[str, Any]:
    """bench_history.py --fleet's figures per store backend: its JSON, or its printed table
    when it has no --json."""
    if not _offers("bench_history.py", "--fleet"):
        return {"message": "history figures: benchmarks/bench_history.py --fleet --json not available"}
    as_json = _offers("bench_history.py", "--json")
    out: dict[str, Any] = {}
    for backend in (("sqlite", "postgres") if _offers("bench_history.py", "--backend") else ("default",)):
        argv = ["benchmarks/bench_history.py", "--fleet", *(["--backend", backend] if backend != "default" else [])]
        try:
            if as_json:
                out[backend] = _json_of([*argv, "--json"], timeout=3600)
                continue
            p = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=3600)
            out[backend] = ({"text": p.stdout.strip()} if p.returncode == 0 else
                            {"error": f"{' '.join(argv)}: rc {p.returncode}: {(p.stderr or p.stdout)[-400:]}"})
        except subprocess.TimeoutExpired:
            out[backend] = {"error": f"{' '.join(argv)} timed out after 3600 s"}
    return out


def _verdict(text: str) -> str:
    try:
        return str(json.loads(text[text.index("{"):]).get("verdict", ""))
    except ValueError:
        return ""


def part_startup(trees: list[Tree], rounds: int = 11) -> dict[str, Any]:
    """Interleaved rounds of `python -c pass`, `preflight --help` (console script and -m) and a
    GO `preflight prologue` (instant fake tools, dry run) per tree; medians of the per-round
    differences to the bare interpreter; and the start-up benchmarks' own JSON where offered."""
    sys.path.insert(0, str(ROOT))
    from tests import fakes
    from tests.fakes import fake_nvml
    from tests.scenarios import TOOLS, healthy_h100

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench_fleet_") as tmp:
        bin_dir = fakes.install(Path(tmp) / "bin", TOOLS)
        fake_env = fake_nvml.with_library(fakes.env_for(bin_dir, healthy_h100(Path(tmp) / "sc"), delay=0.0))
        fake_env.pop("PREFLIGHT_CONFIG", None)
        commands: dict[str, tuple[list[str], dict[str, str], Path, int]] = {
            "python -c pass": ([sys.executable, "-c", "pass"], _base_env(), ROOT, 0)}
        for t in trees:
            commands[f"{t.label}: python -m preflight.cli --help"] = (
                [sys.executable, "-m", "preflight.cli", "--help"], t.env, t.root, 0)
            if t.root == ROOT and (ROOT / ".venv" / "bin" / "preflight").exists():
                commands[f"{t.label}: .venv/bin/preflight --help"] = (
                    [str(ROOT / ".venv" / "bin" / "preflight"), "--help"], t.env, t.root, 0)
            penv = {**fake_env, **{k: v for k, v in t.env.items() if k == "PYTHONPATH"}}
            commands[f"{t.label}: prologue (GO, instant tools)"] = (
                [sys.executable, "-m", "preflight.cli", "prologue", "--dry-run", "--json", "--history", "off",
                 "--node", "gpu0001", "--profile", "h100-sxm-8x"], penv, t.root, 0)
        times: dict[str, list[float]] = {k: [] for k in commands}
        failures: dict[str, str] = {}
        for r in range(rounds + 1):  # the first round warms caches and is not counted
            for name, (argv, env, cwd, want) in commands.items():
                t0 = time.perf_counter()
                p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
                took = time.perf_counter() - t0
                if p.returncode != want:
                    failures[name] = f"rc {p.returncode}: {(p.stderr or p.stdout)[-300:]}"
                elif "prologue" in name and _verdict(p.stdout) != "GO":  # a dry run exits 0 on NO-GO too
                    failures[name] = f"verdict {_verdict(p.stdout) or 'missing'}: {p.stdout[-300:]}"
                if r:
                    times[name].append(took)
    bare = times["python -c pass"]
    rows = {}
    for name, ts in times.items():
        rows[name] = {"median_s": statistics.median(ts),
                      "over_python_s": statistics.median(a - b for a, b in zip(ts, bare, strict=True))}
    out["own"] = {"rounds": rounds, "rows": rows, "failures": failures}
    if _offers("bench_startup.py", "--json"):
        out["bench_startup"] = _json_of(["benchmarks/bench_startup.py", "--json", "--repeat", str(rounds)], timeout=900)
    if _offers("bench_node.py", "--json"):
        out["bench_node"] = _json_of(["benchmarks/bench_node.py", "--json"], timeout=900)
    return out


# ----- chart -------------------------------------------------------------------------------------

COLOURS = ("#c0392b", "#1f5fbf", "#2e8b57", "#8e44ad", "#d35400", "#16a085", "#7f8c8d")
PW, PH = 440, 350  # one panel
ML, MR, MT, MB = 64, 14, 54, 46


@dataclass
class LogAxes:
    """Decades x0..x1 of N and y0..y1 of the value, in one panel whose left edge is at `left`."""

    x0: int
    x1: int
    y0: int
    y1: int
    left: float

    def px(self, x: float) -> float:
        return self.left + ML + (math.log10(x) - self.x0) / (self.x1 - self.x0) * (PW - ML - MR)

    def py(self, v: float) -> float:
        lv = min(self.y1, max(self.y0, math.log10(v)))
        return MT + (self.y1 - lv) / (self.y1 - self.y0) * (PH - MT - MB)


def _decades(values: list[float]) -> tuple[int, int]:
    vals = [v for v in values if v and v > 0]
    if not vals:
        return 0, 1
    lo, hi = math.floor(math.log10(min(vals))), math.ceil(math.log10(max(vals)))
    return lo, hi if hi > lo else lo + 1


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if v >= 1 else f"{v:g}"


def _panel(left: float, title: str, ylabel: str, series: list[dict[str, Any]], key: str) -> list[str]:
    xs = [p["n"] for s in series for p in s["points"]]
    ys = [p[key] for s in series for p in s["points"] if p.get(key)]
    ax = LogAxes(*_decades(xs), *_decades(ys), left=left)
    out = [f'<g class="panel" data-quantity="{escape(key)}">',
           f'<text x="{left + PW / 2}" y="{MT - 14}" text-anchor="middle" font-size="13">{escape(title)}</text>',
           f'<line x1="{left + ML}" y1="{PH - MB}" x2="{left + PW - MR}" y2="{PH - MB}" stroke="black"/>',
           f'<line x1="{left + ML}" y1="{MT}" x2="{left + ML}" y2="{PH - MB}" stroke="black"/>']
    for e in range(ax.x0, ax.x1 + 1):
        x = ax.px(10.0 ** e)
        out.append(f'<line class="xtick" x1="{x:.1f}" x2="{x:.1f}" y1="{MT}" y2="{PH - MB}" stroke="#e3e3e3"/>')
        out.append(f'<text class="xlabel" x="{x:.1f}" y="{PH - MB + 16}" text-anchor="middle">{_fmt(10.0 ** e)}</text>')
    for e in range(ax.y0, ax.y1 + 1):
        y = ax.py(10.0 ** e)
        out.append(f'<line class="ytick" x1="{left + ML}" x2="{left + PW - MR}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e3e3e3"/>')
        out.append(f'<text class="ylabel" x="{left + ML - 6}" y="{y + 4:.1f}" text-anchor="end">{_fmt(10.0 ** e)}</text>')
    out.append(f'<text x="{left + ML + (PW - ML - MR) / 2}" y="{PH - 12}" text-anchor="middle">nodes (log scale)</text>')
    out.append(f'<text x="{left + 14}" y="{MT + (PH - MT - MB) / 2}" text-anchor="middle" '
               f'transform="rotate(-90 {left + 14} {MT + (PH - MT - MB) / 2})">{escape(ylabel)} (log scale)</text>')
    for s in series:
        pts = [p for p in s["points"] if p.get(key) and p[key] > 0]
        measured = [p for p in pts if not p.get("projected")]
        name, colour = escape(s["name"]), s["colour"]
        if measured:
            d = " ".join(f"{'M' if i == 0 else 'L'}{ax.px(p['n']):.1f},{ax.py(p[key]):.1f}" for i, p in enumerate(measured))
            out.append(f'<path class="series" data-series="{name}" d="{d}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for p in pts:
            if p.get("projected") and measured:
                last = measured[-1]
                out.append(f'<path class="projection" data-series="{name}" d="M{ax.px(last["n"]):.1f},'
                           f'{ax.py(last[key]):.1f} L{ax.px(p["n"]):.1f},{ax.py(p[key]):.1f}" fill="none" '
                           f'stroke="{colour}" stroke-width="1.5" stroke-dasharray="5 4"/>')
            fill = "white" if p.get("projected") else colour
            out.append(f'<circle cx="{ax.px(p["n"]):.1f}" cy="{ax.py(p[key]):.1f}" r="3.5" fill="{fill}" stroke="{colour}">'
                       f'<title>{name}: {p["n"]} nodes, {p[key]:.4g}{" (projected)" if p.get("projected") else ""}'
                       "</title></circle>")
    out.append("</g>")
    return out


def fleet_svg(series: list[dict[str, Any]], title: str) -> str:
    """Two log-log panels, controller CPU per node (ms) and wall (s) against N, one line per
    series (dashed to a hollow point: a projection). series: [{name, points: [{n, cpu_per_node_ms, wall, projected?}]}]"""
    series = [dict(s, colour=s.get("colour") or COLOURS[i % len(COLOURS)]) for i, s in enumerate(series)]
    width, legend_h = 2 * PW + 20, 18 * max(1, len(series)) + 10
    height = PH + legend_h
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
           'font-size="11">', f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="16" text-anchor="middle" font-size="14">{escape(title)}</text>']
    if not any(s["points"] for s in series):
        out.append('<text x="20" y="60">no data</text></svg>')
        return "\n".join(out) + "\n"
    out += _panel(0, "controller CPU per node", "CPU per node (ms)", series, "cpu_per_node_ms")
    out += _panel(PW + 20, "wall time", "wall (s)", series, "wall")
    for i, s in enumerate(series):
        y = PH + 14 + 18 * i
        out.append(f'<line x1="{ML}" x2="{ML + 24}" y1="{y - 4}" y2="{y - 4}" stroke="{s["colour"]}" stroke-width="2"/>'
                   f'<text class="legend" x="{ML + 30}" y="{y}">{escape(s["name"])}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def chart_series(data: dict[str, Any]) -> list[dict[str, Any]]:
    series = []
    an = data.get("analyze") or {}
    for name, s in an.get("series", {}).items():
        pts = [p for _, p in sorted(s["points"].items(), key=lambda kv: int(kv[0]))]
        if s.get("projection"):
            pts.append(s["projection"])
        series.append({"name": f"analyze, {name}", "points": pts})
    run = data.get("run") or {}
    for transport in ("ssh", "srun"):
        med = (run.get(transport) or {}).get("median") or {}
        pts = [{"n": int(c), "wall": m.get("wall"), "cpu_per_node_ms": (m["cpu"] / int(c) * 1000 if m.get("cpu") else None)}
               for c, m in sorted(med.items(), key=lambda kv: int(kv[0]))]
        if pts:
            series.append({"name": f"run over {transport}, after", "points": pts})
    return series


# ----- table -------------------------------------------------------------------------------------


def _f(v: Any, fmt: str = ".2f") -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def markdown(data: dict[str, Any]) -> str:
    m = data["machine"]
    lines = [f"### Fleet benchmark (`benchmarks/bench_fleet.py`), {m['date']}", "",
             f"- machine: {m['platform']}, {m['cpus']} CPUs, Python {m['python']}"]
    for inv in data.get("invocations", [m]):
        lines.append(f"- {inv['date']} ({', '.join(inv.get('parts', [])) or 'all'}): a 10M-iteration Python loop takes "
                     f"{inv['loop_10m_s']:.2f} s; load average (1, 5, 15 min) before "
                     f"{', '.join(f'{x:.2f}' for x in inv['load_before'])}, after "
                     f"{', '.join(f'{x:.2f}' for x in inv.get('load_after', []))}")
    lines.append("")
    an = data.get("analyze")
    if an:
        lines += [f"#### `preflight analyze` of N per-node folders (medians; {an['faulty_rule']})", "",
                  "| tree | N | CPU per node (ms) | CPU (s) | wall (s) | peak RSS main (MB) | peak RSS workers (MB) | outcome |",
                  "|---|---:|---:|---:|---:|---:|---:|---|"]
        for name, s in an["series"].items():
            for _, p in sorted(s["points"].items(), key=lambda kv: int(kv[0])):
                lines.append(f"| {name} | {p['n']:,} | {_f(p['cpu_per_node_ms'], '.1f')} | {_f(p['cpu'])} | {_f(p['wall'])} | "
                             f"{_f(p['main_maxrss_mb'], '.0f')} | {_f(p['children_maxrss_mb'], '.0f')} | "
                             f"{'as expected' if p['ok'] else 'WRONG'} ({p['runs']} run{'s' if p['runs'] > 1 else ''}) |")
            if s.get("projection"):
                p = s["projection"]
                lines.append(f"| {name} | {p['n']:,} (projected) | {_f(p['cpu_per_node_ms'], '.1f')} | {_f(p['cpu'])} | "
                             f"{_f(p['wall'])} | | | projected: the cost per added node between the two largest sizes |")
        lines.append("")
        ratios = _ratios(an)
        if ratios:
            lines += ratios + [""]
        for key, diffs in an.get("identity", {}).items():
            tree, n = key.rsplit("/", 1)
            lines.append(f"- {tree}, {_nodes(int(n))}: `--jobs 1` and `--jobs 2` reports (report.json, report.md, "
                         f"bad-nodes, console; start time and duration masked) "
                         + ("byte-identical" if not diffs else f"DIFFER: {diffs[0]}"))
        for p in an.get("problems", []):
            lines.append(f"- PROBLEM: {p}")
        lines.append("")
    run = data.get("run")
    if run:
        counts = sorted({int(c) for fig in run.values() if isinstance(fig, dict) for c in fig.get("median", {})})
        vs = " vs ".join(map(str, counts)) or "1 vs 16"
        lines += [f"#### `preflight run`, {vs} nodes, instant fake tools (benchmarks/bench_fanout.py --mode run)", ""]
        if "message" in run:
            lines += [run["message"], ""]
        else:
            lines += ["| transport | N | wall (s) | controller CPU (s) | CPU per added node (ms) | wall N/1 | peak RSS (MB) | verdicts |",
                      "|---|---:|---:|---:|---:|---:|---:|---|"]
            for transport, fig in run.items():
                if "error" in fig or "median" not in fig:
                    lines.append(f"| {transport} | | | | | | | {fig.get('error', 'no figures')} |")
                    continue
                for c, mm in sorted(fig["median"].items(), key=lambda kv: int(kv[0])):
                    lines.append(f"| {transport} | {c} | {_f(mm.get('wall'))} | {_f(mm.get('cpu'))} | "
                                 f"{_f(mm.get('cpu_per_added_node_ms'), '.1f')} | {_f(mm.get('wall_ratio'))} | "
                                 f"{_f((mm.get('maxrss_kb') or 0) / 1024 or None, '.0f')} | {', '.join(mm.get('verdicts', []))} |")
            lines.append("")
    st = data.get("startup")
    if st:
        own = st["own"]
        lines += [f"#### Start-up (interleaved rounds, median of {own['rounds']}; differences paired per round)", "",
                  "| command | median wall (s) | over `python -c pass` (s) |", "|---|---:|---:|"]
        for name, r in own["rows"].items():
            lines.append(f"| {name} | {r['median_s']:.3f} | {r['over_python_s']:+.3f} |")
        for name, why in own.get("failures", {}).items():
            lines.append(f"- PROBLEM: {name}: {why}")
        lines.append("")
        for script in ("bench_startup", "bench_node"):
            if script in st:
                lines += [f"`benchmarks/{script}.py --json`:", "", *_flat(st[script]), ""]
    hi = data.get("history")
    if hi:
        lines += ["#### History at fleet size (benchmarks/bench_history.py --fleet --json)", ""]
        if "message" in hi:
            lines += [hi["message"], ""]
        for backend, fig in hi.items():
            if isinstance(fig, dict):
                lines += [f"{backend}:", "", *([fig["text"]] if "text" in fig else _flat(fig)), ""]
    return "\n".join(lines).rstrip() + "\n"


def _nodes(n: int) -> str:
    return f"{n:,} node{'' if n == 1 else 's'}"


def _ratios(an: dict[str, Any]) -> list[str]:
    """Before over after (CPU, wall) at each size both trees ran."""
    names = list(an["series"])
    before = [n for n in names if n.startswith("before")]
    after = [n for n in names if n.startswith("after")]
    out = []
    for b in before:
        bp = an["series"][b]["points"]
        for a in after:
            ap = an["series"][a]["points"]
            parts = [f"{_nodes(int(k))}: CPU {bp[k]['cpu'] / ap[k]['cpu']:.2f}x, wall {bp[k]['wall'] / ap[k]['wall']:.2f}x"
                     for k in sorted(set(bp) & set(ap), key=int) if ap[k]["cpu"] and ap[k]["wall"]]
            if parts:
                out.append(f"- before / after ({b} / {a}): " + "; ".join(parts))
    return out


def _flat(d: Any, prefix: str = "") -> list[str]:
    """Numbers and short strings of a JSON document as `- path: value` lines."""
    out: list[str] = []
    if isinstance(d, dict):
        for k, v in d.items():
            out += _flat(v, f"{prefix}{k}." if prefix or k else "")
    elif isinstance(d, list):
        if all(isinstance(x, (int, float)) for x in d) and len(d) <= 12:
            out.append(f"- {prefix.rstrip('.')}: {', '.join(_f(x, '.4g') for x in d)}")
        else:
            for i, v in enumerate(d[:20]):
                out += _flat(v, f"{prefix}{i}.")
    elif isinstance(d, float):
        out.append(f"- {prefix.rstrip('.')}: {d:.4g}")
    elif isinstance(d, (int, str, bool)) and len(str(d)) <= 200:
        out.append(f"- {prefix.rstrip('.')}: {d}")
    return out


# ----- main --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("parts", nargs="*", help=f"parts to run: {', '.join(PARTS)} (default: all)")
    ap.add_argument("--quick", action="store_true", help="smoke run: analyze of 1 and 2 nodes, once, the tree after")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="node counts for analyze")
    ap.add_argument("--big", type=int, default=BIG, help="the extra size for the tree after only")
    ap.add_argument("--no-10k", action="store_true", help="leave the big size out")
    ap.add_argument("--timeout", type=float, default=RUN_TIMEOUT_S, help="seconds one analyze run may take")
    ap.add_argument("--big-repeat", type=int, default=None, help="runs at the big size (default: --repeat)")
    ap.add_argument("--before", default=BEFORE_REF, help="the commit to compare against")
    ap.add_argument("--before-dir", type=Path, default=BEFORE_DIR)
    ap.add_argument("--rounds", type=int, default=11, help="start-up rounds")
    ap.add_argument("--run-nodes", type=int, default=16, help="the run part's larger node count (against 1)")
    ap.add_argument("--run-transports", default="ssh,srun")
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "bench_fleet.md")
    ap.add_argument("--svg", type=Path, default=ROOT / "reports" / "bench_fleet.svg")
    ap.add_argument("--json-out", type=Path, default=ROOT / "reports" / "bench_fleet.json")
    ap.add_argument("--reuse", action="store_true", help="keep the parts of --json-out that this run does not redo")
    ap.add_argument("--render", action="store_true", help="measure nothing: write the table and chart from --json-out")
    args = ap.parse_args(argv)
    unknown = [p for p in args.parts if p not in PARTS]
    if unknown:
        ap.error(f"unknown part(s) {', '.join(unknown)}; parts are {', '.join(PARTS)}")
    parts = list(args.parts) or (["analyze"] if args.quick else list(PARTS))
    sizes = [1, 2] if args.quick else [int(x) for x in args.sizes.split(",") if x.strip()]
    repeat = 1 if args.quick else args.repeat
    big = None if (args.quick or args.no_10k) else args.big

    data: dict[str, Any] = {}
    if (args.reuse or args.render) and args.json_out.exists():
        data = json.loads(args.json_out.read_text())
    if args.render:
        if not data:
            ap.error(f"--render: no figures in {args.json_out}")
        write_outputs(data, args.out, args.svg, None)
        return 0
    data["machine"] = machine()
    data["machine"]["parts"] = parts
    data["invocations"] = [*data.get("invocations", []), data["machine"]]
    log = (lambda s: print(s, file=sys.stderr, flush=True))  # noqa: E731
    after = tree_after()
    trees = [after]
    if "before" in parts or "startup" in parts:  # start-up compares both trees too
        trees.insert(0, tree_before(args.before, args.before_dir))
    if "analyze" in parts or "before" in parts:
        chosen = [t for t in trees if ("before" in parts and t is not after) or ("analyze" in parts and t is after)]
        an = part_analyze(configs_for(chosen), sizes, repeat, big, log, args.big_repeat, args.timeout)
        if args.reuse and data.get("analyze"):
            an = merge_analyze(data["analyze"], an)
        for name, s in an["series"].items():  # the tree before is projected to --big even with --no-10k
            measured = sorted(int(k) for k in s["points"])
            if name.startswith("before") and measured and measured[-1] < args.big:
                s["projection"] = project(s["points"], args.big)
        data["analyze"] = an
    if "run" in parts:
        data["run"] = part_run(repeat, args.run_nodes, tuple(t for t in args.run_transports.split(",") if t))
    if "startup" in parts:
        data["startup"] = part_startup(trees, args.rounds)
    if "history" in parts:
        data["history"] = part_history()
    data["machine"]["load_after"] = list(os.getloadavg())
    write_outputs(data, args.out, args.svg, args.json_out)
    an = data.get("analyze") or {}
    return 1 if an.get("problems") else 0


def write_outputs(data: dict[str, Any], out: Path, svg: Path, json_out: Path | None) -> None:
    """The table on stdout and in `out`, the chart in `svg`, the figures in `json_out`."""
    text = markdown(data)
    sys.stdout.write(text)
    files = [(out, text), (svg, fleet_svg(chart_series(data), "preflight at fleet scale: controller cost against nodes "
                                                              "(log-log)"))]
    if json_out is not None:
        files.append((json_out, json.dumps(data, indent=1) + "\n"))
    for path, content in files:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    print(f"wrote {', '.join(str(p) for p, _ in files)}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
