"""The one output path: `emit(report, sinks)`.

Every command builds a Report and hands it here with the sinks its flags and the site config
chose (`choose_sinks`): the history store, report files (JSON, Markdown, JUnit, HTML, or a
command's own set), a Prometheus textfile, the bad-node hostlist (`--bad-nodes`), and standard
output (the JSON document or the console table). A sink that cannot write raises OutputError
(one line, exit code 2); the history sink never raises (a store failure is a warning: the
verdict matters more).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from preflight.report.base import Report, default_out_dir
from preflight.report.files import write_all

Writer = Callable[[Report, Path], "dict[str, Path]"]


class OutputError(Exception):
    """A report could not be written where the operator asked."""


class Sink(Protocol):
    def write(self, report: Report) -> list[Path]:
        """Put the report out; returns the files written (for the `reports:` line)."""


@dataclass
class HistorySink:
    """The results store: `url` (None: $PREFLIGHT_HISTORY, else the default; 'off': nothing)."""

    url: str | None = None
    command: str | None = None

    def write(self, report: Report) -> list[Path]:
        from preflight.history import maybe_record

        maybe_record(report, self.url, self.command)  # never raises
        return []


@dataclass
class FilesSink:
    """Report files in a folder (default reports/<timestamp>/): report.json, report.md,
    junit.xml and report.html, or what `writer` writes (a command's own files)."""

    out_dir: Path | None = None
    writer: Writer = write_all

    def write(self, report: Report) -> list[Path]:
        target = self.out_dir or default_out_dir()
        try:
            return list(self.writer(report, target).values())
        except OSError as exc:
            raise OutputError(f"cannot write reports to {target}: {exc.strerror or exc}") from None


@dataclass
class PrometheusSink:
    """A node_exporter textfile (.prom), written atomically. `warn_only`: a textfile that cannot
    be written is a warning on stderr, not a failure (the Slurm gate: metrics must not drain a
    node that passed)."""

    path: Path
    warn_only: bool = False

    def write(self, report: Report) -> list[Path]:
        from preflight.report.prometheus import render, write_textfile

        try:
            return [write_textfile(render(report), self.path)]
        except OSError as exc:
            line = f"cannot write {self.path}: {exc.strerror or exc}"
            if not self.warn_only:
                raise OutputError(line) from None
            sys.stderr.write(f"preflight: warning: {line} (metrics not written)\n")
            return []


@dataclass
class BadNodesSink:
    """The NO-GO nodes for the scheduler: one Slurm hostlist line (`gpu[003,017-018],login2`),
    newline-terminated, written atomically (temp file, then rename); an empty file when no node
    is bad, so a pipeline can always read it. Real nodes only: a result about the nodes together
    (a cross-node check, the sweep) makes the verdict NO-GO but names no node here."""

    path: Path

    def write(self, report: Report) -> list[Path]:
        from preflight.report.prometheus import write_textfile

        line = report.bad_hostlist()
        try:
            return [write_textfile(line + "\n" if line else "", self.path)]
        except OSError as exc:
            raise OutputError(f"cannot write the bad-node list {self.path}: {exc.strerror or exc}") from None


@dataclass
class JsonSink:
    """The JSON document on standard output (`text` makes a command's own document)."""

    text: Callable[[Report], str] | None = None

    def write(self, report: Report) -> list[Path]:
        if self.text:
            sys.stdout.write(self.text(report) + "\n")
        else:
            sys.stdout.writelines(report.json_chunks())
            sys.stdout.write("\n")
        return []


@dataclass
class ConsoleSink:
    """The human report on the terminal (`render` draws a command's own)."""

    render: Callable[[Report], None] | None = None
    failures_only: bool = False  # -q: only FAIL, ERROR and the verdict
    per_node: bool = False  # --per-node: one line per node and finding

    def write(self, report: Report) -> list[Path]:
        if self.render is not None:
            self.render(report)
        else:
            from preflight.report.console import render

            render(report, failures_only=self.failures_only, per_node=self.per_node)
        return []


class Announce:
    """The `reports: <files>` line on stderr, naming the report files the sinks before it
    wrote (none, no line: the files the operator named, a metrics textfile or the bad-node
    list, are where they were asked to be)."""


def emit(report: Report, sinks: Sequence[Sink | Announce]) -> list[Path]:
    """Hand the report to every sink in order; returns the files written."""
    written: list[Path] = []
    reports: list[Path] = []
    for sink in sinks:
        if isinstance(sink, Announce):
            if reports:
                sys.stderr.write("reports: " + ", ".join(str(p) for p in reports) + "\n")
            continue
        files = sink.write(report)
        written += files
        if isinstance(sink, FilesSink):
            reports += files
    return written


@dataclass
class Output:
    """What the flags and the site config ask for."""

    as_json: bool = False
    out: Path | None = None  # report folder (None: reports/<timestamp>/)
    write_files: bool = False
    quiet: bool = False  # no console table (the command prints its own lines)
    history: str | None = None  # store URL; 'off' records nothing
    prometheus: Path | None = None  # a textfile for node_exporter
    metrics_warn_only: bool = False  # a textfile that cannot be written is a warning (the prologue)
    bad_nodes: Path | None = None  # the NO-GO nodes as one hostlist line (--bad-nodes)
    announce_with_json: bool = False  # name the files written even when stdout carries JSON
    failures_only: bool = False  # -q: the console shows only FAIL, ERROR and the verdict
    per_node: bool = False  # --per-node: one console line per node and finding


def choose_sinks(output: Output, writer: Writer = write_all, render: Callable[[Report], None] | None = None,
                 json_text: Callable[[Report], str] | None = None,
                 command: str | None = None) -> list[Sink | Announce]:
    """The sinks for `output`, in the order they run: history, files, metrics, stdout, the
    `reports:` line. `writer`, `render` and `json_text` give a command its own files and texts."""
    sinks: list[Sink | Announce] = [HistorySink(output.history, command)]
    if output.write_files:
        sinks.append(FilesSink(output.out, writer))
    if output.prometheus is not None:
        sinks.append(PrometheusSink(output.prometheus, output.metrics_warn_only))
    if output.bad_nodes is not None:
        sinks.append(BadNodesSink(output.bad_nodes))
    if output.as_json:
        sinks.append(JsonSink(json_text))
    elif not output.quiet:
        sinks.append(ConsoleSink(render, output.failures_only, output.per_node))
    if output.announce_with_json or not output.as_json:
        sinks.append(Announce())
    return sinks
