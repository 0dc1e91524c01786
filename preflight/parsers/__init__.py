"""Parsers: one pure module per tool output; text in (framed documents), typed facts out.

Each module declares `FORMATS` (how analyze recognises its output by content) and `PARSERS`
(probe name -> parse function). No I/O, no grading: graders in `checks/` read the facts.
Every module of this package except `base` is registered when a registry loads (not at CLI
start-up, so the prologue path stays light).
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any


def modules() -> list[str]:
    """The parser module names of this package."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name != "base" and not m.name.startswith("_"))


def register_all(registry: Any) -> None:
    """Register every built-in parser and format with `registry`."""
    for name in modules():
        mod = importlib.import_module(f"{__name__}.{name}")
        for fmt in getattr(mod, "FORMATS", ()):
            registry.register_format(fmt)
        for spec in getattr(mod, "PARSERS", ()):
            registry.register_parser(spec.probe, spec.parse, spec.prefix)
