"""Reports: every output reads the same Report (results, verdict, context).

- `base`: the Report itself and the default report folder;
- `files`: report.json, report.md (`markdown`), junit.xml (`junit`), report.html (`html`);
- `console`: the rich table on a terminal; `prometheus`: node_exporter textfile metrics;
- `history_console`: the history summary's tables; `progress`: the live nodes-done line on stderr;
- `emit`: the one output path, `emit(report, sinks)`, every command hands its report to.
"""

from __future__ import annotations

from preflight.report.base import Report, default_out_dir
from preflight.report.files import write_all

__all__ = ["Report", "default_out_dir", "write_all"]
