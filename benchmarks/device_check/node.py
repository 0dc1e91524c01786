"""Step 1 of the device check: `preflight node` against the real driver.

Runs every nvidia-smi command the registered probes use (each alternative command on its own,
so every format the parsers read is captured), a few more nvidia-smi outputs the parsers read
(EXTRA: the default table, `-q -x`, `nvlink -e`) and the NVML probe (libnvidia-ml through ctypes),
saving their raw outputs as `<dir>/captures/<probe>[.<n>].out` (argv, rc, stderr and time of each
in `<dir>/captures.json`);
then `preflight node --json` on this machine, and `preflight analyze` over the captures. It
fails when a probe's tool did not answer, NVML did not initialise, a check that runs one of these
probes is ERROR (another's, such as an unreadable kernel log, is recorded only), or any
finding says output was not read (an unread line, an unrecognised or unreadable output).

    python benchmarks/device_check/node.py --dir OUT      # --plan: print the commands only
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[2]))  # after a shim (shim.py)

from benchmarks.device_check.common import FAIL, PASS, Step, child_env  # noqa: E402

# finding codes that say a producer's output was not read: the parsers missed a format
UNREAD = re.compile(r"/(unread-error|unreadable-output|unreadable-row|not-recognised|unrecognised)")
# nvidia-smi outputs no probe runs but the parsers read (analyze): captured too, the real formats
EXTRA = (("nvidia-smi-table", ["nvidia-smi"]), ("nvidia-smi-q-xml", ["nvidia-smi", "-q", "-x"]),
         ("nvidia-smi-nvlink-errors", ["nvidia-smi", "nvlink", "-e"]))
NODE_TIMEOUT = 30.0


def gpu_probes() -> list[Any]:
    """The registered probes that run nvidia-smi, and the NVML probe, by name (registry order)."""
    from preflight import registry as reg

    seen: dict[str, Any] = {}
    for check in reg.load().checks.values():
        for probe in check.probes_for_safe():
            if probe.name == "nvml" or any(cmd and cmd[0] == "nvidia-smi" for cmd in probe.commands):
                seen.setdefault(probe.name, probe)
    return list(seen.values())


def gpu_checks() -> set[str]:
    """The checks that run one of those probes: their ERROR means the driver's tools or their
    parsing failed (gpu.xid's, say, is the kernel log's: not this step's concern)."""
    from preflight import registry as reg

    names = {p.name for p in gpu_probes()}
    return {c.id for c in reg.load().checks.values() if names & {p.name for p in c.probes_for_safe()}}


def shown(argv: tuple[str, ...] | list[str]) -> str:
    """A command line to print: the NVML probe's inline program is shortened."""
    if len(argv) == 3 and argv[1] == "-c" and len(argv[2]) > 80:
        return f"{shlex.quote(argv[0])} -c '<preflight/nvml_probe.py, {len(argv[2])} chars>'"
    return shlex.join(argv)


def plan() -> int:
    for probe in gpu_probes():
        for cmd in probe.commands:
            print(f"    probe {probe.name}: {shown(cmd)}")
    for name, cmd in EXTRA:
        print(f"    extra {name}: {shown(cmd)}")
    print(f"    {sys.executable} -m preflight.cli node --json -o OUT/node-report")
    print(f"    {sys.executable} -m preflight.cli analyze OUT/captures/*.out --json -o OUT/analyze-report"
          "    (the captures that printed something)")
    return 0


def capture_all(step: Step, folder: Path) -> list[str]:
    """Run each command of each GPU probe; save the outputs; the problems found."""
    from preflight.probe_runner import Probe, run_probe

    problems: list[str] = []
    index: list[dict[str, Any]] = []
    folder.mkdir(parents=True, exist_ok=True)
    runs = [(probe, n, cmd, False) for probe in gpu_probes() for n, cmd in enumerate(probe.commands)]
    runs += [(Probe.of(name, cmd, timeout=20), 0, tuple(cmd), True) for name, cmd in EXTRA]
    for probe, n, cmd, extra in runs:
        one = Probe(name=probe.name, commands=(cmd,), timeout=probe.timeout, env=probe.env)
        res = run_probe(one)
        stem = probe.name if n == 0 else f"{probe.name}.{n}"
        # the command a probe runs first is saved whatever it printed; an alternative or an extra
        # only when it succeeded (a driver without that command prints no format to read)
        saved = (n == 0 and not extra) or res.state == "ok"
        if saved:
            (folder / f"{stem}.out").write_text(res.stdout)
        step.commands.append(shown(cmd))
        entry = {"probe": probe.name, "file": f"{stem}.out" if saved else None, "argv": shown(cmd),
                 "extra": extra, "state": res.state, "rc": res.rc, "duration_s": round(res.duration, 3),
                 "bytes": len(res.stdout), "reason": res.reason, "stderr": res.stderr[-2000:]}
        index.append(entry)
        if n == 0 and not extra and res.state != "ok":  # the first command is the one the probe runs
            problems.append(f"{probe.name}: `{shown(cmd)}` {res.state}: {res.reason or res.stderr[:200]}")
    (folder.parent / "captures.json").write_text(json.dumps(index, indent=1))
    step.figures["captures"] = index
    return problems


def read_nvml(step: Step, folder: Path) -> list[str]:
    try:
        doc = json.loads((folder / "nvml.out").read_text())
    except (OSError, ValueError) as exc:
        return [f"the NVML probe printed no JSON: {exc}"]
    gpus = doc.get("gpus") or []
    step.figures["nvml"] = {"ok": doc.get("ok"), "library": doc.get("library"), "driver": doc.get("driver"),
                            "nvml_version": doc.get("nvml_version"),
                            "cuda_driver_version": doc.get("cuda_driver_version"), "gpus": len(gpus),
                            "names": sorted({str(g.get("name")) for g in gpus}),
                            "field_errors": {str(g.get("index")): g["errors"] for g in gpus if g.get("errors")}}
    if not doc.get("ok"):
        return [f"NVML: {doc.get('error_type')}: {doc.get('error')}"]
    if not gpus:
        return ["NVML initialised but listed no GPU"]
    return []


def codes_of(results: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(str(r.get("check")), str(c)) for r in results for c in (r.get("facts") or {}).get("codes") or []]


def run_node(step: Step, folder: Path) -> list[str]:
    argv = [sys.executable, "-m", "preflight.cli", "node", "--json", "-o", str(folder / "node-report")]
    p = step.run(argv, NODE_TIMEOUT, env=child_env(), log=folder / "node.log")
    if isinstance(p, str):
        return [f"preflight node: {p}"]
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        return [f"preflight node (rc {p.returncode}) printed no JSON report: {p.stderr.strip()[-300:]}"]
    results = doc.get("results") or []
    step.figures["node"] = {"rc": p.returncode, "verdict": doc.get("verdict"), "profiles": doc.get("profiles"),
                            "duration_s": doc.get("duration_s"),
                            "checks": {str(r.get("check")): r.get("status") for r in results},
                            "summaries": {str(r.get("check")): r.get("summary") for r in results},
                            "codes": sorted({c for _, c in codes_of(results)})}
    gpu = gpu_checks()
    problems = [f"{r['check']} is ERROR: {r.get('summary')}" for r in results
                if r.get("status") == "error" and r.get("check") in gpu]
    unread = [(check, code) for check, code in codes_of(results) if UNREAD.search(code)]
    problems += [f"{check}: {code} (output not read)" for check, code in unread if check in gpu]
    step.figures["node"]["other_unread"] = [f"{check}: {code}" for check, code in unread if check not in gpu]
    if "Traceback" in p.stderr:
        problems.append("preflight node printed a traceback (see node.log)")
    return problems


def run_analyze(step: Step, folder: Path) -> list[str]:
    """The captures graded again by content (no file names used): every format recognised. An
    empty output (`nvidia-smi nvlink -s` on a GPU without NVLink) is no format: left out."""
    files = sorted(f for f in (folder / "captures").glob("*.out") if f.stat().st_size)
    if not files:
        return ["no capture printed anything to analyze"]
    argv = [sys.executable, "-m", "preflight.cli", "analyze", *map(str, files), "--json", "-o",
            str(folder / "analyze-report")]
    p = step.run(argv, NODE_TIMEOUT, env=child_env(), log=folder / "analyze.log")
    if isinstance(p, str):
        return [f"preflight analyze: {p}"]
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        return [f"preflight analyze (rc {p.returncode}) printed no JSON report: {p.stderr.strip()[-300:]}"]
    results = doc.get("results") or []
    unread = [f"{check}: {code}" for check, code in codes_of(results) if UNREAD.search(code)]
    said = " ".join(f"{r.get('summary')} {r.get('evidence')}" for r in results
                    if any(UNREAD.search(c) for _, c in codes_of([r])))
    for entry in step.figures.get("captures", []):
        entry["parsed_by_analyze"] = None if not (entry["bytes"] and entry["file"]) else entry["file"] not in said
    step.figures["analyze"] = {"rc": p.returncode, "verdict": doc.get("verdict"),
                               "checks": {str(r.get("check")): r.get("status") for r in results}, "unread": unread}
    return [f"analyze of the captures: {u} (output not read)" for u in unread]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", type=Path)
    ap.add_argument("--plan", action="store_true")
    a = ap.parse_args()
    if a.plan or a.dir is None:
        return plan()
    step = Step("node", a.dir)
    problems = capture_all(step, a.dir / "captures")
    problems += read_nvml(step, a.dir / "captures")
    problems += run_node(step, a.dir)
    problems += run_analyze(step, a.dir)
    step.figures["problems"] = problems
    return step.done(FAIL if problems else PASS, "; ".join(problems[:6]))


if __name__ == "__main__":
    sys.exit(main())
