"""What every step of the device check shares: its record, the torch/CUDA probe, subprocesses.

A step program writes one record, `<dir>/steps/<step>.json`:
    {"step", "status": "pass"|"fail"|"skipped", "reason", "duration_s", "commands": [argv...],
     "figures": {...}}
`reason` says why for fail and skipped ("needs 2 GPUs: ..."). The driver (device_check.sh)
bounds each step with `timeout`; a step that left no record is failed by `combine.py`.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PASS, FAIL, SKIPPED = "pass", "fail", "skipped"
NEEDS_TWO = "needs 2 GPUs"


class Step:
    """One step's record, written once by `done`. Each child runs in a session of its own
    (`live`), ended as a whole on a timeout and when the driver's `timeout` sends SIGTERM (the
    record then says so), so no rank outlives its step."""

    def __init__(self, name: str, folder: Path) -> None:
        self.name = name
        self.folder = folder
        self.started = time.monotonic()
        self.commands: list[str] = []
        self.figures: dict[str, Any] = {}
        self.live: set[int] = set()
        (folder / "steps").mkdir(parents=True, exist_ok=True)
        signal.signal(signal.SIGTERM, self._terminated)

    def _terminated(self, signum: int, frame: Any) -> None:
        self.kill_live()
        self.done(FAIL, f"stopped by signal {signum} (the step's time limit) after "
                        f"{time.monotonic() - self.started:.0f} s")
        os._exit(124)

    def kill_live(self) -> None:
        """End every child session of this step: commands run here, and probes that
        `preflight.probe_runner` still runs in this process (each leads its own group)."""
        runner = sys.modules.get("preflight.probe_runner")
        try:
            self.live.update(p.pid for p in list(getattr(runner, "LIVE", ())))
        except RuntimeError:  # changed while copied: the probes' own timeouts still end them
            pass
        for pgid in list(self.live):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except OSError:
                pass
            self.live.discard(pgid)

    def popen(self, argv: list[str], **kw: Any) -> subprocess.Popen[Any]:
        # run in the step's folder: `python -m` puts its working directory first on the path
        p = subprocess.Popen(argv, cwd=self.folder, start_new_session=True, **kw)
        self.live.add(p.pid)
        return p

    def run(self, argv: list[str], timeout: float, env: dict[str, str] | None = None,
            log: Path | None = None) -> subprocess.CompletedProcess[str] | str:
        """Run a command (recorded); the completed process, or why it did not complete."""
        self.commands.append(shlex.join(argv))
        try:
            p = self.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        except OSError as exc:
            return f"{argv[0]}: {exc}"
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_live()
            out, err = p.communicate()
            if log is not None:
                log.write_text(_text(out) + _text(err))
            return f"{shlex.join(argv[:4])} ... timed out after {timeout:g} s"
        finally:
            self.live.discard(p.pid)
        if log is not None:
            log.write_text(out + ("\n--- stderr ---\n" + err if err else ""))
        return subprocess.CompletedProcess(argv, p.returncode, out, err)

    def done(self, status: str, reason: str = "") -> int:
        rec = {"step": self.name, "status": status, "reason": reason,
               "duration_s": round(time.monotonic() - self.started, 3), "commands": self.commands,
               "figures": self.figures}
        path = self.folder / "steps" / f"{self.name}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(rec, indent=1, default=str))
        tmp.replace(path)
        return 0


def _text(b: bytes | str | None) -> str:
    if b is None:
        return ""
    return b if isinstance(b, str) else b.decode(errors="replace")


def cuda_state() -> tuple[int, str]:
    """(GPUs torch sees, "" ) or (0, why torch cannot use CUDA here)."""
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - any import failure is the cause to report
        return 0, f"torch cannot be imported by {sys.executable}: {type(exc).__name__}: {exc}"
    if not torch.cuda.is_available():
        return 0, (f"torch {torch.__version__} (built for CUDA {torch.version.cuda}) in {sys.executable} "
                   "cannot use CUDA: torch.cuda.is_available() is False")
    return torch.cuda.device_count(), ""


def child_env(**extra: str) -> dict[str, str]:
    """This environment for a child: preflight importable, no leftovers of an outer launcher."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "SLURM_"))}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    # the checkout last: a shim first on the path (shim.py) must win over its preflight/ folder
    env["PYTHONPATH"] = f"{env['PYTHONPATH']}:{ROOT}" if env.get("PYTHONPATH") else str(ROOT)
    env.setdefault("PREFLIGHT_HISTORY", "off")
    env.update(extra)
    return env


def tail(text: str, lines: int = 8) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])
