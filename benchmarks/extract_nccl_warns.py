"""Every WARN(...) format string of an NCCL release, with its file:line, into a data file.

    python benchmarks/extract_nccl_warns.py --git-dir /path/to/nccl.git --tag v2.30.7-1 \
        > tests/fixtures/nccl/warn-formats.txt

Reads the tag's `src/` tree straight from a bare git directory (`git show TAG:path`) and, in each
C/C++/CUDA file, finds the calls of NCCL's `WARN(fmt, ...)` macro (src/include/debug.h): a call
may span lines, its format may be several concatenated literals, a literal joined with a
`<inttypes.h>` macro (`"%" PRIu64`), a stringified macro parameter (`#name "() failed"`) or a
macro parameter between literals (`"Call to " name " failed : %s"` in checks.h's SYSCHECK):
inside a `#define`, a parameter stands for a string the call site passes and is written `%s`.
A WARN whose format is not a literal at all (`WARN("%s", buf)` is a literal; `WARN(msg)` is not)
is written with the format `<non-literal: EXPR>`.

Output: a header of `#` lines (tag, command, counts), then one line per call:
`path:line<TAB>format`, the format with backslash escapes kept as in the source (`\\n`, `\\"`).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass

SOURCES = (".cc", ".cu", ".c", ".h", ".cpp", ".hpp", ".cuh", ".in")
# generators that write C source (src/device/symmetric/generate.py): their WARN calls sit in string literals
GENERATORS = (".py",)
_GENERATED_WARN = re.compile(r'(?<![\w#])WARN\s*\(\s*"((?:[^"\\]|\\.)*)"')
# <inttypes.h> conversion macros: the length and conversion they expand to on LP64 Linux
_INTTYPES = re.compile(r"^PRI([diouxX])(8|16|32|64|PTR|MAX)$")
_WARN = re.compile(r"(?<![\w#])WARN\s*\(")
_DEFINE = re.compile(r"[ \t]*#[ \t]*define[ \t]+(\w+)\(([^)]*)\)")


@dataclass
class Warn:
    path: str
    line: int
    fmt: str


def blank_comments(text: str, literals: bool = False) -> str:
    """The text with comments replaced by spaces (newlines kept); with `literals`, the insides of
    string and char literals too (where a call may be searched for), else those are untouched."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            if literals:
                out[i + 1:j] = ["\n" if ch == "\n" else " " for ch in text[i + 1:j]]
            i = j + 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out[i:j] = " " * (j - i)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out[i:j] = ["\n" if ch == "\n" else " " for ch in text[i:j]]
            i = j
        else:
            i += 1
    return "".join(out)


def _call_args(text: str, start: int) -> str:
    """The text between the parenthesis at `start` and its match (literals may hold parentheses)."""
    depth, i, n = 0, start, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return text[start + 1:i]
        i += 1
    return text[start + 1:]


def _first_arg(args: str) -> str:
    """The first top-level argument of an argument list."""
    depth, i, n = 0, 0, len(args)
    while i < n:
        c = args[i]
        if c in "\"'":
            j = i + 1
            while j < n and args[j] != c:
                j += 2 if args[j] == "\\" else 1
            i = j + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            return args[:i]
        i += 1
    return args


_TOKEN = re.compile(r'\s*(?:"(?P<lit>(?:[^"\\]|\\.)*)"|#\s*(?P<str>\w+)|(?P<id>[A-Za-z_]\w*))', re.S)


def format_of(arg: str, params: frozenset[str]) -> str:
    """The format a WARN's first argument spells: its literals joined, `PRIu64` as `lu`, a macro
    parameter (or a stringified one) as `%s`; `<non-literal: ...>` when it is not made of those."""
    pos, parts, literal = 0, [], False
    arg = arg.strip()
    while pos < len(arg):
        m = _TOKEN.match(arg, pos)
        if m is None:
            return f"<non-literal: {' '.join(arg.split())}>"
        if m.group("lit") is not None:
            parts.append(m.group("lit"))
            literal = True
        elif m.group("str"):
            parts.append("%s")
        else:
            name = m.group("id")
            mi = _INTTYPES.match(name)
            if mi:
                parts.append(("l" if mi.group(2) in ("64", "PTR", "MAX") else "") + mi.group(1))
            elif name in params:
                parts.append("%s")
            else:
                return f"<non-literal: {' '.join(arg.split())}>"
        pos = m.end()
    return "".join(parts) if literal else f"<non-literal: {' '.join(arg.split())}>"


def _macro_params(text: str, offset: int) -> frozenset[str]:
    """The parameters of the `#define NAME(a, b)` whose (continued) body holds `offset`, if any."""
    line_start = text.rfind("\n", 0, offset) + 1
    # walk back over continued lines (their newline is preceded by a backslash)
    while line_start > 1 and text[line_start - 2] == "\\":
        line_start = text.rfind("\n", 0, line_start - 1) + 1
    m = _DEFINE.match(text, line_start)
    if m is None:
        return frozenset()
    return frozenset(p.strip().removesuffix("...").strip() for p in m.group(2).split(",") if p.strip())


def warns_in(path: str, text: str) -> list[Warn]:
    clean = blank_comments(text)
    joined = clean.replace("\\\n", "  ")  # continued macro lines, offsets unchanged
    code = blank_comments(text, literals=True)  # where calls are: not inside a literal
    out = []
    for m in _WARN.finditer(code):
        line_start = joined.rfind("\n", 0, m.start()) + 1
        if re.match(r"\s*#\s*define\s+WARN\b", joined[line_start:m.end()]):
            continue  # the macro's own definition
        args = _call_args(joined, m.end() - 1)
        fmt = format_of(_first_arg(args), _macro_params(clean, m.start()))
        out.append(Warn(path, text.count("\n", 0, m.start()) + 1, fmt))
    return out


def generated_warns_in(path: str, text: str) -> list[Warn]:
    """WARN calls a generator script emits as C text: the literal format of each, on its line."""
    return [Warn(path, n, m.group(1)) for n, line in enumerate(text.splitlines(), 1)
            for m in _GENERATED_WARN.finditer(line)]


def _git(git_dir: str, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", git_dir, *args], check=True, capture_output=True,
                          text=True, errors="replace").stdout


def extract(git_dir: str, tag: str, root: str = "src") -> list[Warn]:
    files = [p for p in _git(git_dir, "ls-tree", "-r", "--name-only", tag, root).splitlines()
             if p.endswith(SOURCES + GENERATORS)]
    out: list[Warn] = []
    for path in sorted(files):
        read = generated_warns_in if path.endswith(GENERATORS) else warns_in
        out.extend(read(path, _git(git_dir, "show", f"{tag}:{path}")))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--git-dir", required=True, help="a clone (bare or not) of github.com/NVIDIA/nccl")
    ap.add_argument("--tag", required=True, help="the release tag, e.g. v2.30.7-1")
    ns = ap.parse_args(argv)
    warns = extract(ns.git_dir, ns.tag)
    literal = sum(not w.fmt.startswith("<non-literal") for w in warns)
    print(f"# NCCL {ns.tag}: every WARN(...) format under src/ (file:line<TAB>format)")
    print(f"# made by: python benchmarks/extract_nccl_warns.py --git-dir <nccl.git> --tag {ns.tag}")
    print(f"# {len(warns)} calls, {literal} with a literal format, {len({w.fmt for w in warns})} distinct formats")
    for w in warns:
        print(f"{w.path}:{w.line}\t{w.fmt}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
