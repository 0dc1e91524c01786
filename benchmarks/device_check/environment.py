"""What the device check runs with: python, torch and CUDA, the driver, preflight's imports.

    python environment.py OUT.json     # prints one summary line; never fails

A missing import is said here once (the steps then fail with it as their cause).
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[2]))  # after a shim (shim.py)


def nccl_version(torch: Any) -> str | None:
    """NCCL's version as torch was built with it (a tuple in newer torch, an int in older)."""
    try:
        v = torch.cuda.nccl.version()
    except Exception:  # noqa: BLE001 - no NCCL (a CPU build) or no GPU
        return None
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def probe() -> dict[str, Any]:
    env: dict[str, Any] = {"python": sys.executable, "python_version": platform.python_version(),
                           "platform": platform.platform(), "pythonpath": os.environ.get("PYTHONPATH", "")}
    try:
        import torch

        env.update({"torch": torch.__version__, "torch_cuda": torch.version.cuda,
                    "nccl": nccl_version(torch),
                    "cuda_available": torch.cuda.is_available(),
                    "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0,
                    "gpu_names": sorted({torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())})
                    if torch.cuda.is_available() else []})
    except Exception as exc:  # noqa: BLE001 - said, not raised
        env["torch_error"] = f"{type(exc).__name__}: {exc}"
    try:
        importlib.import_module("preflight.cli")
        env["preflight_cli"] = "ok"
    except Exception as exc:  # noqa: BLE001
        env["preflight_cli"] = f"{type(exc).__name__}: {exc}"
    return env


def main() -> int:
    env = probe()
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(json.dumps(env, indent=1))
    torch_part = (f"torch {env['torch']} (CUDA {env['torch_cuda']}, NCCL {env.get('nccl')}), {env['gpus']} GPU(s) "
                  f"{', '.join(env['gpu_names'])}" if "torch" in env else f"no torch: {env.get('torch_error')}")
    print(f"python {env['python_version']} {env['python']}; {torch_part}; preflight CLI imports: "
          f"{env['preflight_cli']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
