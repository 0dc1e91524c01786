"""History across jobs: the results store, flapping and lemon nodes, flap damping, baselines.

- `store`: every run's results in SQLite (default, one file per host) or PostgreSQL (fleet);
- `analysis`: failure counts, flapping and lemon nodes, bandwidth against a node's own past;
- `damping`: drain soft failures after K failing runs in a row, hard faults at once, resume
  after M passing runs;
- `baseline`: expected values learned from a fleet run (robust outlier removal) as a profile.

`maybe_record(report, url)` is the hook the commands call after building a report: it never
raises into the caller; a store failure is one warning line on stderr.
"""

from __future__ import annotations

import sys
from typing import Any

from preflight.history.damping import Damping, Decision, decide
from preflight.history.store import HistoryError, Store, describe, open_store, resolve_url


def record(report_or_results: Any, command: str | None = None, url: str | None = None, **kw: Any) -> int:
    """Record one run into the store at `url` (None: the default); returns the run id.
    Raises HistoryError (also when recording is switched off)."""
    with open_store(url) as store:
        return store.record(report_or_results, command, **kw)


def maybe_record(report: Any, history_url: str | None, command: str | None = None,
                 timeout: float = 5.0) -> int | None:
    """Record `report` unless history is off; never raises: a failure is a warning on stderr."""
    try:
        url = resolve_url(history_url)
        if url is None:
            return None
        with open_store(url, timeout=timeout) as store:
            return store.record(report, command)
    except Exception as exc:  # the caller's verdict matters more than its record
        where = describe(history_url) if history_url else "the default store"
        sys.stderr.write(f"preflight: warning: run not recorded in history ({where}): {exc}\n")
        return None


__all__ = ["Damping", "Decision", "HistoryError", "Store", "decide", "maybe_record", "open_store", "record",
           "resolve_url"]
