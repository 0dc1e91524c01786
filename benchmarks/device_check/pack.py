"""Copy the third-party packages preflight's CLI imports into one folder, for a GPU machine
whose python has torch but not preflight's dependencies (and no network to install them).

    python pack.py DIR      # DIR/site holds the packages, DIR/python the interpreter they fit

device_check.sh puts DIR/site on PYTHONPATH (DEVICE_CHECK_DEPS=DIR, default
reports/device-check-deps) when the interpreter's cache tag (cpython-311, ...) matches:
compiled extensions (pydantic_core) only load in the python version they were built for.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OURS = {"preflight", "checks", "benchmarks", "tests", "torch"}


# what the check runs: the node checks, analyze, a sweep's launch (its ranks import torch only)
RUNS = (["node", "--json", "-o", "{tmp}/n"], ["analyze", str(ROOT / "tests" / "fixtures" / "nvidia-smi-q"), "--json",
                                             "-o", "{tmp}/a"], ["sweep", "--help"], ["list"])
def third_party() -> dict[str, Path]:
    """Top-level name -> the package folder or module file of every non-stdlib module that
    preflight's commands import (each run in a child, its modules listed at exit)."""
    import os
    import subprocess
    import tempfile

    purelib = {Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib")}
    found: dict[str, Path] = {}
    names: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, PREFLIGHT_HISTORY="off", PYTHONPATH=str(ROOT))
        for args in RUNS:  # -X importtime names every module imported, on stderr
            p = subprocess.run([sys.executable, "-X", "importtime", "-m", "preflight.cli",
                                *(a.format(tmp=tmp) for a in args)], env=env, cwd=tmp, capture_output=True,
                               text=True, timeout=120)
            names |= {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in p.stderr.splitlines()
                      if line.startswith("import time:") and line.count("|") == 2}
    for top in sorted(names):
        if top in OURS or top in sys.stdlib_module_names or top.startswith("_"):
            continue
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            continue
        if spec is None or not spec.origin or spec.origin in ("built-in", "frozen"):
            continue
        path = Path(spec.origin).resolve()
        where = path.parent if path.name == "__init__.py" else path
        if any(base in where.parents for base in purelib):
            found[top] = where
    return found


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "reports" / "device-check-deps"
    site = out / "site"
    if site.exists():
        shutil.rmtree(site)
    site.mkdir(parents=True)
    found = third_party()
    for src in sorted(found.values()):
        if src.is_dir():
            shutil.copytree(src, site / src.name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, site / src.name)
    (out / "python.json").write_text(json.dumps({"cache_tag": sys.implementation.cache_tag,
                                                 "version": sys.version.split()[0], "packages": sorted(found)}))
    size = sum(f.stat().st_size for f in site.rglob("*") if f.is_file())
    print(f"{len(found)} package(s), {size / 2**20:.1f} MiB, for {sys.implementation.cache_tag}: "
          f"{', '.join(sorted(found))} -> {site}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
