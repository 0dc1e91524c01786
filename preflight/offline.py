"""Grading captured files (`preflight analyze`): the same checks over tool outputs and logs
copied from nodes; preflight.analyze classifies and grades them."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from preflight.engine import Config, UsageError, load_registry
from preflight.registry import Options
from preflight.report.base import Report
from preflight.rootcause import fold


def analyze_paths(paths: Sequence[Path], cfg: Config, profile: str = "auto", checks_dirs: Sequence[Path] = (),
                  xid_since: datetime | None = None, warn_as_fail: bool = False, jobs: int | None = 1) -> Report:
    """`preflight analyze`: grade captured outputs and logs with the same checks, in `jobs`
    processes (None: the usable CPUs)."""
    from preflight.analyze import analyze

    missing = [str(p) for p in paths if str(p) != "-" and not (p.exists() or p.is_symlink())]
    if missing:
        raise UsageError(f"no such file or folder: {', '.join(missing)}")
    reg = load_registry(checks_dirs, cfg)
    start = time.monotonic()
    results = analyze(reg, list(paths), profile_name=profile, options=Options(xid_since=xid_since),
                      extra_profile_dirs=tuple(cfg.profile_dirs), jobs=jobs)
    results = fold(results)  # a dead driver pasted once is one finding, not one per check
    return Report.build("analyze", results, warn_as_fail, duration_s=time.monotonic() - start)
