"""Mutation testing of a parser or grader module against its own unit tests.

    .venv/bin/python benchmarks/mutation.py preflight/parsers/ping.py --tests tests/parsers/test_network_parsers.py
    .venv/bin/python benchmarks/mutation.py --all            # every module of MODULES below, a table
    .venv/bin/python benchmarks/mutation.py checks/xid.py --tests tests/checks/test_xid.py --survivors

A mutant is the module with one small change a wrong line of code would make: a comparison
flipped or loosened (== !=, < <=, in / not in, is / is not), `and` for `or`, a `not` dropped, an
arithmetic operator swapped, a number off by one, a string altered, True for False, `break` for
`continue`. It is killed when one of the tests fails (or hangs past the time limit); a mutant
that every test passes survived: a wrong line that no test notices. The score is killed /
(killed + survived).

How it runs (the same scheme as mutmut 3, written here for this project's layout): pytest
collects the tests once; each mutant runs in a forked child that patches the mutated functions'
code into the loaded module (`__code__`, defaults, module constants), runs the tests and stops at
the first failure. Lines no test executes are counted as survivors without running.
Docstrings, type annotations, `__all__`, `register...(...)` calls and `Probe.of(...)` declarations
(data the running registry already holds: a mutant of them would change nothing the tests can
reach), titles and `catches`, and the literal text of f-strings (messages) are not mutated: a wrong word in them is not a wrong line
of code. A line marked `# pragma: no mutate` is not mutated either: for an equivalent mutant
only (a cache size, a display limit), with the reason on the line.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import os
import random
import signal
import sys
import time
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# module -> its own unit tests beyond those that import it (see own_tests)
EXTRA_TESTS: dict[str, list[str]] = {
    "preflight/grading.py": ["tests/test_grading.py", "tests/test_silent_paths.py", "tests/test_engine_cli.py"],
    "checks/hang_fr.py": ["tests/checks/test_hang.py"],
    "preflight/parsers/torch_elastic.py": ["tests/checks/test_hang_elastic.py"],
    "preflight/parsers/nvsmi_qreport.py": ["tests/parsers/test_nvsmi_q.py", "tests/parsers/test_nvsmi_xml.py",
                                          "tests/checks/test_gpu_health.py"],
    "preflight/findings.py": ["tests/test_findings.py"],
    "preflight/policy.py": ["tests/test_policy.py"],
}


def own_tests(module: str) -> list[str]:
    """The unit tests of a parser or grader module: the files of tests/parsers and tests/checks
    that import it, and EXTRA_TESTS."""
    import re

    path = Path(module)
    name, pkg = path.stem, ("parsers" if path.parent.name == "parsers" else "checks")
    pat = re.compile(rf"(preflight\.{pkg}\.{name}\b|from preflight\.{pkg} import [^\n]*\b{name}\b|"
                     rf"from preflight\.{pkg} import \([^)]*\b{name}\b)")
    found = [str(t.relative_to(ROOT)) for d in ("tests/parsers", "tests/checks")
             for t in sorted((ROOT / d).glob("test_*.py")) if pat.search(t.read_text(encoding="utf-8"))]
    return list(dict.fromkeys(found + EXTRA_TESTS.get(module, [])))


def _modules() -> dict[str, list[str]]:
    """Every parser and grader module with its unit tests (the full run, --all)."""
    paths = sorted([*(ROOT / "preflight" / "parsers").glob("*.py"), *(ROOT / "checks").glob("*.py")])
    mods = [str(p.relative_to(ROOT)) for p in paths if p.name != "__init__.py"]
    mods += ["preflight/grading.py", "preflight/findings.py", "preflight/policy.py"]
    return {m: own_tests(m) for m in mods}


MODULES = _modules()

_CMP_SWAP: dict[type, type] = {
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
    ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}
_BIN_SWAP: dict[type, type] = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Div,
    ast.Mod: ast.Div, ast.Pow: ast.Mult, ast.LShift: ast.RShift, ast.RShift: ast.LShift, ast.BitOr: ast.BitAnd,
    ast.BitAnd: ast.BitOr, ast.BitXor: ast.BitOr,
}
_SKIP_CALLS = {"register", "Check", "ClusterCheck", "register_format", "Format", "getLogger", "TypeVar"}


@dataclass
class Mutant:
    index: int
    line: int
    col: int
    what: str
    in_function: bool = True  # False: module level, run at import (always executed)


def _module_name(path: Path) -> str:
    rel = path.resolve().relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[0] == "checks":  # installed as preflight.checks
        parts = ["preflight", *parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _skipped_nodes(tree: ast.AST) -> set[int]:
    """ids of nodes not to mutate: docstrings, annotations, __all__, registration metadata."""
    skip: set[int] = set()

    def mark(node: ast.AST | None) -> None:
        if node is not None:
            for n in ast.walk(node):
                skip.add(id(n))

    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            mark(body[0])
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            mark(node.returns)
            for a in [*node.args.args, *node.args.kwonlyargs, *node.args.posonlyargs, node.args.vararg,
                      node.args.kwarg]:
                if a is not None:
                    mark(a.annotation)
            for dec in node.decorator_list:
                mark(dec)
        if isinstance(node, ast.AnnAssign):
            mark(node.annotation)
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            mark(node)
        if isinstance(node, ast.Call):
            fn = node.func
            name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
            if name.startswith("register") or (name == "of" and isinstance(fn, ast.Attribute)
                                               and isinstance(fn.value, ast.Name) and fn.value.id == "Probe"):
                mark(node)  # registration and probe declarations: data the running registry already holds
            elif name in _SKIP_CALLS:
                for kw in node.keywords:
                    if kw.arg in ("title", "catches", "description"):
                        mark(kw.value)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            mark(node)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            mark(node)
    return skip


def _points(tree: ast.AST) -> Iterator[tuple[ast.AST, str, Any]]:
    """(node, description, how) for every mutation point."""
    skip = _skipped_nodes(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                new = _CMP_SWAP.get(type(op))
                if new is not None:
                    yield node, f"{type(op).__name__} -> {new.__name__}", ("cmp", i, new)
        elif isinstance(node, ast.BoolOp):
            new = ast.Or if isinstance(node.op, ast.And) else ast.And
            yield node, f"{type(node.op).__name__} -> {new.__name__}", ("boolop", new)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)):
            yield node, f"drop {type(node.op).__name__}", ("unary",)
        elif isinstance(node, (ast.BinOp, ast.AugAssign)):
            new = _BIN_SWAP.get(type(node.op))
            if new is not None and not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod)
                                        and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str)):
                yield node, f"{type(node.op).__name__} -> {new.__name__}", ("binop", new)
        elif isinstance(node, ast.Constant):
            v = node.value
            if isinstance(v, bool):
                yield node, f"{v} -> {not v}", ("const", not v)
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                yield node, f"{v!r} -> {v + 1!r}", ("const", v + 1)
            elif isinstance(v, str) and v:
                yield node, f"string {v[:30]!r} altered", ("const", "XX" + v + "XX")
        elif isinstance(node, ast.Break):
            yield node, "break -> continue", ("swap_kw", ast.Continue)
        elif isinstance(node, ast.Continue):
            yield node, "continue -> break", ("swap_kw", ast.Break)


def _in_fstring(tree: ast.AST) -> set[int]:
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            for v in node.values:
                if isinstance(v, ast.Constant):
                    out.add(id(v))
                if isinstance(v, ast.FormattedValue) and v.format_spec is not None:
                    for n in ast.walk(v.format_spec):
                        out.add(id(n))
    return out


def _function_nodes(tree: ast.AST) -> set[int]:
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for stmt in (node.body if isinstance(node.body, list) else [node.body]):
                for n in ast.walk(stmt):
                    out.add(id(n))
    return out


def _no_mutate(source: str) -> set[int]:
    """Lines marked `# pragma: no mutate` (an equivalent mutant, the reason on the line)."""
    return {i for i, ln in enumerate(source.splitlines(), 1) if "pragma: no mutate" in ln}


def mutants(source: str) -> list[Mutant]:
    tree = ast.parse(source)
    fstr = _in_fstring(tree)
    inside = _function_nodes(tree)
    quiet = _no_mutate(source)
    out = []
    for node, what, _how in _points(tree):
        if id(node) in fstr or getattr(node, "lineno", 0) in quiet:
            continue  # literal parts of an f-string (messages), and format specs
        out.append(Mutant(len(out), getattr(node, "lineno", 0), getattr(node, "col_offset", 0), what,
                          id(node) in inside))
    return out


def mutated_tree(source: str, index: int) -> ast.Module:
    tree = ast.parse(source)
    fstr = _in_fstring(tree)
    quiet = _no_mutate(source)
    k = 0
    for node, _what, how in _points(tree):
        if id(node) in fstr or getattr(node, "lineno", 0) in quiet:
            continue
        if k == index:
            _apply(tree, node, how)
            return ast.fix_missing_locations(tree)
        k += 1
    raise IndexError(index)


def _apply(tree: ast.Module, node: ast.AST, how: tuple) -> None:
    kind = how[0]
    if kind == "cmp":
        node.ops[how[1]] = how[2]()  # type: ignore[attr-defined]
    elif kind == "boolop":
        node.op = how[1]()  # type: ignore[attr-defined]
    elif kind == "binop":
        node.op = how[1]()  # type: ignore[attr-defined]
    elif kind == "const":
        node.value = how[1]  # type: ignore[attr-defined]
    elif kind in ("unary", "swap_kw"):
        for parent in ast.walk(tree):
            for field, value in ast.iter_fields(parent):
                if value is node:
                    setattr(parent, field, node.operand if kind == "unary" else how[1]())  # type: ignore[attr-defined]
                    return
                if isinstance(value, list):
                    for i, item in enumerate(value):
                        if item is node:
                            value[i] = node.operand if kind == "unary" else how[1]()  # type: ignore[attr-defined]
                            ast.copy_location(value[i], node)
                            return


# ---------------------------------------------------------------------------------------------
# Patching a loaded module with a mutant's code


def _patch_function(old: types.FunctionType, new: types.FunctionType) -> None:
    if old.__code__ is not new.__code__:
        old.__code__ = new.__code__
    old.__defaults__ = new.__defaults__
    old.__kwdefaults__ = new.__kwdefaults__


def _patch_class(old: type, new: type, seen: set[int]) -> None:
    if id(old) in seen:
        return
    seen.add(id(old))
    for name, value in vars(new).items():
        if name in ("__dict__", "__weakref__", "__module__", "__qualname__", "__doc__"):
            continue
        cur = vars(old).get(name)
        if isinstance(value, types.FunctionType) and isinstance(cur, types.FunctionType):
            _patch_function(cur, value)
        elif isinstance(value, (staticmethod, classmethod)) and isinstance(cur, type(value)):
            _patch_function(cur.__func__, value.__func__)  # type: ignore[arg-type]
        elif isinstance(value, property) and isinstance(cur, property):
            for a in ("fget", "fset", "fdel"):
                f_old, f_new = getattr(cur, a), getattr(value, a)
                if isinstance(f_old, types.FunctionType) and isinstance(f_new, types.FunctionType):
                    _patch_function(f_old, f_new)
        elif isinstance(value, type) and isinstance(cur, type):
            _patch_class(cur, value, seen)
        elif not name.startswith("__") and not isinstance(value, types.FunctionType):
            try:
                setattr(old, name, value)
            except (AttributeError, TypeError):
                pass


def patch_module(module: types.ModuleType, tree: ast.Module) -> None:
    """Load the mutant's code into the running module: functions and methods keep their
    identity (the registry and other modules hold them), their code is the mutant's."""
    code = compile(tree, module.__file__ or "<mutant>", "exec")
    ns: dict[str, Any] = {"__name__": module.__name__, "__file__": module.__file__,
                          "__package__": module.__package__, "__spec__": module.__spec__}
    # registration calls in the mutant would register twice: they are quiet while it loads
    import preflight.engine as engine_mod
    import preflight.registry as registry_mod

    saved = [(m, n, getattr(m, n)) for m in (registry_mod, engine_mod) for n in dir(m)
             if n.startswith("register") and callable(getattr(m, n))]
    for m, n, _f in saved:
        setattr(m, n, lambda *a, **k: a[0] if a else None)
    try:
        exec(code, ns)
    finally:
        for m, n, f in saved:
            setattr(m, n, f)
    seen: set[int] = set()
    for name, value in ns.items():
        if name.startswith("__"):
            continue
        cur = module.__dict__.get(name)
        if isinstance(value, types.FunctionType) and isinstance(cur, types.FunctionType):
            if value.__module__ == module.__name__ and cur.__module__ == module.__name__:
                _patch_function(cur, value)
        elif isinstance(value, type) and isinstance(cur, type):
            if cur.__module__ == module.__name__:
                _patch_class(cur, value, seen)
        elif isinstance(value, types.ModuleType):
            continue
        elif isinstance(cur, (types.FunctionType, type)):
            continue
        else:
            module.__dict__[name] = value


# ---------------------------------------------------------------------------------------------
# Running


class _Runner:
    """A pytest plugin: collects once, then runs the tests against each mutant in a child."""

    def __init__(self, module: str, path: Path, indexes: list[int], limit: float, covered_only: bool) -> None:
        self.module, self.path, self.indexes, self.limit = module, path, indexes, limit
        self.covered_only = covered_only
        self.results: dict[int, str] = {}
        self.baseline = 0.0
        self.failed_baseline = ""
        self.covered: set[int] = set()

    def _run_items(self, session: Any, stop_first: bool = True) -> int:
        failures = 0
        items = session.items
        for i, item in enumerate(items):
            nxt = items[i + 1] if i + 1 < len(items) else None
            reports = _run_one(item, nxt)
            if any(r.failed for r in reports):
                failures += 1
                if stop_first:
                    return failures
        return failures

    def _child(self, session: Any, index: int | None) -> int:
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, 1)
                os.dup2(devnull, 2)
                if index is not None:
                    mod = importlib.import_module(self.module)
                    patch_module(mod, mutated_tree(self.path.read_text(encoding="utf-8"), index))
                else:
                    _trace_lines(str(self.path), self.covered_file)
                code = 1 if self._run_items(session, stop_first=index is not None) else 0
                if index is None:
                    _dump_trace(self.covered_file)
            except BaseException:
                code = 2
            os._exit(code)
        return pid

    def _wait(self, pid: int, limit: float) -> int | None:
        end = time.monotonic() + limit
        while time.monotonic() < end:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.005)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return None

    def pytest_runtestloop(self, session: Any) -> bool:
        self.covered_file = f"/tmp/mutation-cover-{os.getpid()}.json"
        t0 = time.monotonic()
        code = self._wait(self._child(session, None), 600)
        self.baseline = time.monotonic() - t0
        if code != 0:
            self.failed_baseline = f"the tests do not pass on the unmutated module (exit {code})"
            return True
        try:
            self.covered = set(json.loads(Path(self.covered_file).read_text()))
        finally:
            Path(self.covered_file).unlink(missing_ok=True)
        limit = self.limit or max(10.0, self.baseline * 4 + 5)
        by = {m.index: m for m in mutants(self.path.read_text(encoding="utf-8"))}
        for index in self.indexes:
            m = by[index]
            if self.covered_only and m.in_function and m.line not in self.covered:
                self.results[index] = "survived (no test runs this line)"
                continue
            code = self._wait(self._child(session, index), limit)
            self.results[index] = ("killed (timeout)" if code is None else "killed" if code == 1 else
                                   "survived" if code == 0 else "error")
        return True


def _run_one(item: Any, nextitem: Any) -> list[Any]:
    from _pytest.runner import runtestprotocol

    return runtestprotocol(item, nextitem=nextitem, log=False)


_LINES: set[int] = set()


def _trace_lines(filename: str, _out: str) -> None:
    def local(frame: types.FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            _LINES.add(frame.f_lineno)
        return local

    def glob(frame: types.FrameType, event: str, arg: Any) -> Any:
        if frame.f_code.co_filename == filename:
            _LINES.add(frame.f_lineno)
            return local
        return None

    import threading

    sys.settrace(glob)
    threading.settrace(glob)


def _dump_trace(out: str) -> None:
    sys.settrace(None)
    Path(out).write_text(json.dumps(sorted(_LINES)))


@dataclass
class Outcome:
    module: str
    total: int
    killed: int
    survived: int
    errors: int
    seconds: float
    survivors: list[str]
    problem: str = ""

    @property
    def score(self) -> float:
        done = self.killed + self.survived
        return 100.0 * self.killed / done if done else 0.0


def run(path: Path, tests: list[str], sample: int = 0, seed: int = 0, limit: float = 0.0,
        covered_only: bool = True, select: str = "") -> Outcome:
    import pytest

    path = path.resolve()
    source = path.read_text(encoding="utf-8")
    ms = mutants(source)
    indexes = [m.index for m in ms]
    if sample and sample < len(indexes):
        indexes = sorted(random.Random(seed).sample(indexes, sample))
    runner = _Runner(_module_name(path), path, indexes, limit, covered_only)
    t0 = time.monotonic()
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        pytest.main([*tests, "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--no-header", "-x",
                     "-o", "addopts=", *(["-k", select] if select else [])], plugins=[runner])
    finally:
        os.chdir(cwd)
    by = {m.index: m for m in ms}
    killed = sum(1 for r in runner.results.values() if r.startswith("killed"))
    survived = sum(1 for r in runner.results.values() if r.startswith("survived"))
    errors = sum(1 for r in runner.results.values() if r == "error")
    surv = [f"{path.relative_to(ROOT)}:{by[i].line}: {by[i].what}" + ("" if r == "survived" else f" [{r}]")
            for i, r in sorted(runner.results.items()) if r.startswith("survived")]
    return Outcome(str(path.relative_to(ROOT)), len(indexes), killed, survived, errors, time.monotonic() - t0, surv,
                   runner.failed_baseline)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("module", nargs="?", help="the module to mutate (a path: preflight/parsers/ping.py)")
    ap.add_argument("--tests", nargs="+", default=[], help="its unit tests (files or node ids)")
    ap.add_argument("-k", dest="select", default="", help="pytest -k expression selecting tests")
    ap.add_argument("--all", action="store_true", help="every module of MODULES, one table")
    ap.add_argument("--sample", type=int, default=0, help="a random sample of this many mutants")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=0.0, help="seconds per mutant (default: 4x the tests + 5)")
    ap.add_argument("--survivors", action="store_true", help="list the surviving mutants")
    ap.add_argument("--json", type=Path, help="write the outcome(s) here")
    a = ap.parse_args()
    if a.all:
        targets = list(MODULES.items())
    elif a.module:
        tests = a.tests or MODULES.get(a.module, [])
        if not tests:
            ap.error(f"give --tests for {a.module} (it is not in MODULES)")
        targets = [(a.module, tests)]
    else:
        ap.error("give a module or --all")
    outcomes = []
    for mod, tests in targets:
        o = run(ROOT / mod, tests, a.sample, a.seed, a.timeout, select=a.select)
        outcomes.append(o)
        sys.stdout.write(f"{o.module:40s} mutants {o.total:5d}  killed {o.killed:5d}  survived {o.survived:4d}  "
                         f"errors {o.errors:3d}  score {o.score:5.1f}%  ({o.seconds:.0f} s)"
                         + (f"  PROBLEM: {o.problem}" if o.problem else "") + "\n")
        if a.survivors:
            for s in o.survivors:
                sys.stdout.write(f"    {s}\n")
        sys.stdout.flush()
    if a.json:
        a.json.write_text(json.dumps([o.__dict__ | {"score": round(o.score, 1)} for o in outcomes], indent=2))


if __name__ == "__main__":
    main()
