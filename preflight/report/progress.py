"""A live `nodes: done, failed, pending (probe results so far of all expected)` line on stderr
while probes run (terminals only): the progress sink the commands hand to the engine.

A run collects in phases (the probes every check declares, then those that depend on the
profile or the peers); each phase adds to the expected counts, so the probe count is one count
across the phases (`12 of 40`, then `40 of 56`), never back to 0."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class NodeProgress:
    """Counts per node: done (every probe back), failed (a node-level fault), pending. The
    engine tells it what each node's bundle holds and which nodes failed; `line()` is the text."""

    def __init__(self, on_change: Callable[[str], Any] | None = None) -> None:
        self.expected: dict[str, int] = {}
        self.seen: dict[str, int] = {}
        self.failed: set[str] = set()
        self.probes_failed = 0
        self.total = 0  # probes expected, every phase together
        self.on_change = on_change

    def expect(self, bundles: dict[str, int]) -> None:
        """A phase's probes per node, on top of what earlier phases expected."""
        for node, n in bundles.items():
            self.expected[node] = self.seen.get(node, 0) + n
            self.total += n
        self._changed()

    def __call__(self, node: str, capture: Any) -> None:
        self.seen[node] = self.seen.get(node, 0) + 1
        if not capture.ok:
            self.probes_failed += 1
        self._changed()

    def node_failed(self, node: str) -> None:
        self.failed.add(node)
        self._changed()

    def line(self) -> str:
        done = [n for n, want in self.expected.items() if n not in self.failed and self.seen.get(n, 0) >= want]
        pending = len(self.expected) - len(done) - len(self.failed)
        probes = sum(self.seen.values())
        extra = f", {self.probes_failed} probe(s) not ok" if self.probes_failed else ""
        return (f"nodes: {len(done)} done, {len(self.failed)} failed, {pending} pending "
                f"({probes} of {self.total} probe results{extra})")

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self.line())


@contextmanager
def live_progress(enabled: bool = True) -> Iterator[NodeProgress | None]:
    """A NodeProgress drawn as a transient spinner line on stderr, or None off a terminal."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn

    prog = Progress(SpinnerColumn(), TextColumn("{task.description}"), console=Console(stderr=True), transient=True)
    task = prog.add_task("running probes", total=None)
    prog.start()
    try:
        yield NodeProgress(lambda text: prog.update(task, description=text))
    finally:
        prog.stop()
