"""Fake tool installation for tests: a bin folder of real executables printing captures."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

FAKE_TOOL = Path(__file__).with_name("fake_tool.py")
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def install(bin_dir: Path, tools: list[str]) -> Path:
    """Put an executable for each tool into bin_dir (a wrapper running fake_tool.py)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for tool in tools:
        target = bin_dir / tool
        target.write_text(f"#!/bin/sh\nPREFLIGHT_FAKE_TOOL={tool} exec {sys.executable} {FAKE_TOOL} \"$@\"\n")
        target.chmod(0o755)
    return bin_dir


def scenario(folder: Path, spec: dict[str, list[dict]], files: dict[str, str | Path] | None = None) -> Path:
    """Write a scenario: spec maps tool -> rules; files maps name -> text or a fixture path."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in (files or {}).items():
        dest = folder / name
        if isinstance(content, Path):
            shutil.copyfile(content, dest)
        else:
            dest.write_text(content)
    for tool, rules in spec.items():
        (folder / f"{tool}.json").write_text(json.dumps({"rules": rules}))
    if "nvml.json" in (files or {}):  # the fake libnvidia-ml reads its flat form
        from tests.fakes import fake_nvml

        fake_nvml.write_data(folder)
    return folder


def env_for(bin_dir: Path, scenario_dir: Path, delay: float = 0.0, keep_path: bool = True) -> dict[str, str]:
    """Environment with the fake tools first on PATH (or only them, keep_path=False)."""
    env = dict(os.environ)
    base = env.get("PATH", "") if keep_path else "/usr/bin:/bin"
    env["PATH"] = f"{bin_dir}:{base}"
    env["PREFLIGHT_FAKE_DIR"] = str(scenario_dir)
    env["PREFLIGHT_FAKE_DELAY"] = str(delay)
    return env
