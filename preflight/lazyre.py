"""Regular expressions compiled on first use.

The parsers, framing and graders hold several hundred module-level patterns; compiling them all
when a module is imported costs more than a node run's real work, and a run uses few of them.
`compile(pattern, flags)` gives an object that behaves as `re.compile(pattern, flags)` does for
the methods the code calls (search, match, fullmatch, finditer, findall, sub, subn, split,
scanner and every attribute such as flags, groups, groupindex) and compiles the pattern the
first time one of them is used. After that the compiled pattern's own bound methods are stored
on the object, so a hot loop pays no more than it would with the compiled pattern.

`pattern` is answered without compiling (patterns are often built from another's `.pattern`).
A lazy pattern is not an `re.Pattern` instance: hand `re.search(...)` and friends the pattern
string, or call the object's own method. `compile_all()` compiles every lazy pattern created so
far (the tests use it to check that none is malformed); `compiled_origins()` names the modules
whose patterns a process has used.
"""

from __future__ import annotations

import re
import sys
from typing import Any, cast

_METHODS = ("search", "match", "fullmatch", "finditer", "findall", "sub", "subn", "split", "scanner")
_CREATED: list[LazyPattern] = []


class LazyPattern:
    """A pattern and its flags, compiled by `re.compile` on first use."""

    def __init__(self, pattern: str, flags: int = 0, origin: str = "") -> None:
        self._args = (pattern, flags)
        self.origin = origin  # the module that made it
        _CREATED.append(self)

    def _load(self) -> re.Pattern[str]:
        rx = self.__dict__.get("_rx")
        if rx is None:
            rx = re.compile(*self._args)
            for name in _METHODS:  # instance attributes: later calls go straight to the compiled pattern
                self.__dict__[name] = getattr(rx, name)
            self.__dict__["_rx"] = rx
        return rx

    @property
    def pattern(self) -> str:
        return self._args[0]

    def search(self, *args: Any, **kwargs: Any) -> Any:
        return self._load().search(*args, **kwargs)

    def match(self, *args: Any, **kwargs: Any) -> Any:
        return self._load().match(*args, **kwargs)

    def fullmatch(self, *args: Any, **kwargs: Any) -> Any:
        return self._load().fullmatch(*args, **kwargs)

    def finditer(self, *args: Any, **kwargs: Any) -> Any:
        return self._load().finditer(*args, **kwargs)

    def findall(self, *args: Any, **kwargs: Any) -> Any:
        return self._load().findall(*args, **kwargs)

    def sub(self, *args: Any, **kwargs: Any) -> Any:
        return self._load().sub(*args, **kwargs)

    def subn(self, *args: Any, **kwargs: Any) -> Any:
        return self._load().subn(*args, **kwargs)

    def split(self, *args: Any, **kwargs: Any) -> Any:
        return self._load().split(*args, **kwargs)

    def scanner(self, *args: Any, **kwargs: Any) -> Any:
        return self._load().scanner(*args, **kwargs)  # type: ignore[attr-defined]  # not in the stubs

    def __getattr__(self, name: str) -> Any:  # flags, groups, groupindex, ...
        if name.startswith("__") or name in ("_args", "_rx", "origin"):
            raise AttributeError(name)
        return getattr(self._load(), name)

    def __reduce__(self) -> tuple[Any, ...]:
        return (compile, self._args)

    def __repr__(self) -> str:
        return repr(self._load())


def compile(pattern: str, flags: int | re.RegexFlag = 0) -> re.Pattern[str]:  # noqa: A001 - re's name, on purpose
    """`re.compile(pattern, flags)`, compiled when first used (typed as the pattern it stands for)."""
    return cast("re.Pattern[str]", LazyPattern(pattern, int(flags), sys._getframe(1).f_globals.get("__name__", "")))


def compiled_origins() -> list[str]:
    """The module of each lazy pattern compiled so far (one entry per pattern)."""
    return [lazy.origin for lazy in _CREATED if "_rx" in lazy.__dict__]


def compile_all(origins: tuple[str, ...] = ()) -> int:
    """Compile every lazy pattern created so far (only those made by modules whose names start
    with one of `origins`, where given); the count. A malformed one raises re.error."""
    chosen = [lazy for lazy in _CREATED if not origins or lazy.origin.startswith(origins)]
    for lazy in chosen:
        lazy._load()
    return len(chosen)
