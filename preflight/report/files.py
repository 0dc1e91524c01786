"""The report files: report.json, report.md, junit.xml and report.html in one folder."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from preflight.report.base import Report

FORMATS = ("json", "md", "junit", "html")
FILE_NAMES = {"json": "report.json", "md": "report.md", "junit": "junit.xml", "html": "report.html"}


def _render(fmt: str, report: Report) -> str:
    if fmt == "json":
        return report.to_json() + "\n"
    if fmt == "md":
        from preflight.report.markdown import render as md

        return md(report)
    if fmt == "junit":
        from preflight.report.junit import render as junit

        return junit(report)
    from preflight.report.html import render as html

    return html(report)


def write_all(report: Report, out_dir: Path, formats: Sequence[str] = FORMATS) -> dict[str, Path]:
    """Write the report files into out_dir; returns format -> path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for fmt in FORMATS:
        if fmt in formats:
            path = out_dir / FILE_NAMES[fmt]
            if fmt == "json":  # written as it is made: the largest file, never held whole
                with path.open("w", encoding="utf-8") as fh:
                    fh.writelines(report.json_chunks())
                    fh.write("\n")
            else:
                path.write_text(_render(fmt, report), encoding="utf-8")
            written[fmt] = path
    return written
