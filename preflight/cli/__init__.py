"""The `preflight` command line: one module per command group, each command parsing its
arguments, calling one engine function and handing the report to the output path
(`preflight.report.emit`).

Exit codes: 0 GO, 1 NO-GO, 2 could not run (bad arguments, bad profile, broken site check),
3 NO-EVIDENCE, 128 + the signal (130, 143) when SIGINT or SIGTERM ended a run (INTERRUPTED).
The node/prologue path imports neither torch nor pandas; heavy modules load lazily.
"""

from __future__ import annotations

import os
import sys

from preflight.cli.app import app

# isort: off
# the command modules, in the order `preflight --help` lists their commands
from preflight.cli import checks, sweep, history, triage, slurm
# isort: on

COMMAND_MODULES = (checks, sweep, history, triage, slurm)  # each registers its commands on `app`


def _known_failure(exc: Exception) -> bool:
    """Failures of the operator's input or setting, reported in one line."""
    from preflight.engine import UsageError
    from preflight.profile import ProfileError
    from preflight.registry import RegistryError
    from preflight.report.emit import OutputError

    return isinstance(exc, (UsageError, ProfileError, RegistryError, OutputError))


def main() -> None:
    """Entry point: known failures become one clear line and exit code 2, never a traceback."""
    try:
        app(standalone_mode=True)
    except KeyboardInterrupt:
        sys.stderr.write("preflight: interrupted\n")
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as exc:
        from preflight.grading import EXIT_USAGE

        if _known_failure(exc):
            sys.stderr.write(f"preflight: {exc}\n")
            sys.exit(EXIT_USAGE)
        if os.environ.get("PREFLIGHT_DEBUG"):  # last line of defence: one line, not a traceback
            raise
        sys.stderr.write(f"preflight: internal error: {type(exc).__name__}: {exc} "
                         "(PREFLIGHT_DEBUG=1 shows the traceback)\n")
        sys.exit(EXIT_USAGE)


__all__ = ["app", "main"]
