"""Reports: every output reads the same Report (results, verdict, context).

- `base`: the Report itself and the default report folder;
- `files`: report.json, report.md (`markdown`), junit.xml (`junit`), report.html (`html`);
- `console`: the rich table on a terminal; `prometheus`: node_exporter textfile metrics;
- `history_console`: the history summary's tables; `progress`: the live nodes-done line on stderr;
- `emit`: the one output path, `emit(report, sinks)`, every command hands its report to.

The names below load on first use, so that importing one light submodule (`progress`) does not
load the grading and framing modules behind `base`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from preflight.report.base import Report, default_out_dir
    from preflight.report.files import write_all

_LAZY = {"Report": "preflight.report.base", "default_out_dir": "preflight.report.base",
         "write_all": "preflight.report.files"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'preflight.report' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = ["Report", "default_out_dir", "write_all"]
