"""preflight.lazyre: a pattern compiled on first use answers exactly as `re.compile` would."""

from __future__ import annotations

import importlib
import pickle
import pkgutil
import re

import pytest

from preflight import lazyre

CASES = [
    (r"(?P<host>[\w.-]+): (?P<msg>.*)", 0, ["gpu001: Xid 79", "no colon here", "a: b\nc: d", ""]),
    (r"^\s*(\d+)\s+(\w+)$", re.M, ["  12 ab\n3 c\nx", "12 ab", "nothing"]),
    (r"link (?:is )?down", re.I, ["eth0: Link is DOWN", "LINK DOWN link down", "up"]),
    (r",\s*", 0, ["a, b,c", "", "no commas"]),
]


@pytest.mark.parametrize("pattern,flags,texts", CASES)
def test_every_method_answers_as_re_does(pattern: str, flags: int, texts: list[str]) -> None:
    for text in texts:
        lazy, real = lazyre.compile(pattern, flags), re.compile(pattern, flags)
        for method in ("search", "match", "fullmatch"):
            a, b = getattr(lazy, method)(text), getattr(real, method)(text)
            assert (a and (a.span(), a.groups(), a.groupdict())) == (b and (b.span(), b.groups(), b.groupdict()))
        assert [m.span() for m in lazy.finditer(text)] == [m.span() for m in real.finditer(text)]
        assert lazy.findall(text) == real.findall(text)
        assert lazy.sub("<x>", text) == real.sub("<x>", text)
        assert lazy.subn(lambda m: m.group(0).upper(), text, 1) == real.subn(lambda m: m.group(0).upper(), text, 1)
        assert lazy.split(text, maxsplit=1) == real.split(text, maxsplit=1)
        a, b = lazy.search(text, 1), real.search(text, 1)
        assert (a and a.span()) == (b and b.span())
        scan_a, scan_b = lazy.scanner(text), real.scanner(text)
        a, b = scan_a.search(), scan_b.search()
        assert (a and a.span()) == (b and b.span())


def test_attributes_and_pattern() -> None:
    lazy, real = lazyre.compile(r"(?P<a>x)(y)", re.I), re.compile(r"(?P<a>x)(y)", re.I)
    assert lazy.pattern == real.pattern
    assert "_rx" not in lazy.__dict__  # .pattern does not compile
    assert (lazy.flags, lazy.groups, dict(lazy.groupindex)) == (real.flags, real.groups, dict(real.groupindex))
    assert repr(lazy) == repr(real)


def test_compiled_once_on_first_use_then_the_compiled_methods_are_used() -> None:
    lazy = lazyre.compile(r"ab+")
    assert "_rx" not in lazy.__dict__
    assert lazy.search("xabbb").group(0) == "abbb"
    compiled = lazy.__dict__["_rx"]
    assert isinstance(compiled, re.Pattern)
    assert lazy.search == compiled.search  # an instance attribute now: no wrapper call per use
    assert lazy.match("abc").group(0) == "ab"
    assert lazy.__dict__["_rx"] is compiled
    assert "tests.test_lazyre" in lazyre.compiled_origins()


def test_a_malformed_pattern_raises_at_first_use() -> None:
    lazy = lazyre.compile(r"(unclosed")
    with pytest.raises(re.error):
        lazy.search("x")


def test_a_lazy_pattern_survives_pickling() -> None:
    lazy = lazyre.compile(r"\d+", re.A)
    back = pickle.loads(pickle.dumps(lazy))
    assert back.pattern == r"\d+" and back.flags == re.compile(r"\d+", re.A).flags
    assert back.findall("a1 b22") == ["1", "22"]


def test_every_module_level_pattern_of_the_package_compiles() -> None:
    import checks
    import preflight

    # the check modules under the name the registry imports them by (preflight.checks.<name>): a
    # second copy named checks.<name> would register every check again next to a loaded registry
    for path, prefix in ((preflight.__path__, "preflight."), (checks.__path__, "preflight.checks.")):
        for info in pkgutil.walk_packages(path, prefix):
            if not info.name.endswith("__main__"):
                importlib.import_module(info.name)
    assert lazyre.compile_all(("preflight.", "checks.")) > 500  # the parsers' and framing's tables
