"""The package's shape, kept true by reading its source: no import cycles, a CLI that only
parses arguments and calls public engine functions, each outside system behind one adapter,
functions a reader can hold, and the README's architecture section naming real modules."""

from __future__ import annotations

import ast
import importlib
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
BODY_MAX = 60  # lines of a product function's body (after its docstring)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "checks":  # installed as preflight.checks
        parts = ["preflight", "checks", *parts[1:]]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    files = [*(ROOT / "preflight").rglob("*.py"), *(ROOT / "checks").rglob("*.py")]
    return {_module_name(p): p for p in sorted(files)}


MODULES = _sources()
TREES = {name: ast.parse(path.read_text(), filename=str(path)) for name, path in MODULES.items()}


def _imported(module: str, node: ast.Import | ast.ImportFrom) -> Iterator[tuple[str, str]]:
    """(the package module imported, the name taken from it or '') for one import statement."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name, ""
        return
    base = node.module or ""
    if node.level:
        pkg = module.split(".") if MODULES[module].name == "__init__.py" else module.split(".")[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        base = ".".join([*pkg, base] if base else pkg)
    for alias in node.names:
        yield base, alias.name


def _own(name: str) -> str:
    """The longest package module that `name` falls in ('' when outside the package)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _graph() -> dict[str, set[str]]:
    """module -> the package modules it imports, function-local imports included."""
    graph: dict[str, set[str]] = {}
    for module, tree in TREES.items():
        deps: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for base, name in _imported(module, node):
                    target = _own(f"{base}.{name}" if name else base)
                    if target and target != module:
                        deps.add(target)
        graph[module] = deps
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_import_graph_has_no_cycles() -> None:
    assert _cycles(_graph()) == []


def test_only_the_cli_imports_the_cli() -> None:
    bad = sorted(m for m, deps in _graph().items()
                 if not m.startswith("preflight.cli") and any(d.startswith("preflight.cli") for d in deps))
    assert bad == []


def _cli_modules() -> list[str]:
    return [m for m in MODULES if m == "preflight.cli" or m.startswith("preflight.cli.")]


def test_the_cli_is_a_package_of_command_modules() -> None:
    assert MODULES["preflight.cli"].name == "__init__.py"
    assert len(_cli_modules()) > 3


def test_the_cli_uses_only_public_names_of_the_engine() -> None:
    """The CLI may import anything public; a private name (`_x`) of another part is the sign
    of engine work done in the command layer."""
    bad = []
    for module in _cli_modules():
        tree = TREES[module]
        aliases: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for base, name in _imported(module, node):
                    target = f"{base}.{name}" if name else base
                    if not target.startswith("preflight.") or target.startswith("preflight.cli"):
                        continue
                    if name.startswith("_") or any(p.startswith("_") for p in base.split(".")):
                        bad.append(f"{module}: imports {target}")
                    if isinstance(node, ast.ImportFrom) and _own(target) == target:
                        aliases.add(next(a.asname or a.name for a in node.names if a.name == name))
                if isinstance(node, ast.Import):
                    aliases.update((a.asname or a.name).split(".")[0] for a in node.names)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and isinstance(node.value, ast.Name) and node.value.id in aliases):
                bad.append(f"{module}:{node.lineno}: {node.value.id}.{node.attr}")
    assert bad == []


def test_no_importlib_in_the_cli() -> None:
    assert [m for m in _cli_modules() if "importlib" in MODULES[m].read_text()] == []


def _argv_heads(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """The program of every literal command line: the first item of a list or tuple of strings."""
    for node in ast.walk(tree):
        if isinstance(node, ast.List | ast.Tuple) and node.elts:
            head = node.elts[0]
            if isinstance(head, ast.Constant) and isinstance(head.value, str):
                yield node.lineno, head.value


SLURM_TOOLS = {"scontrol", "sinfo", "sacct", "squeue", "sbatch", "salloc", "sacctmgr"}


def test_slurm_tools_are_run_only_by_the_slurm_adapter() -> None:
    bad = [f"{m}:{line}: {prog}" for m, tree in TREES.items() if m != "preflight.slurm"
           for line, prog in _argv_heads(tree) if prog in SLURM_TOOLS]
    assert bad == []


def test_no_ssh_client_is_run_as_a_process() -> None:
    """One SSH stack: every connection goes through the paramiko transport."""
    bad = [f"{m}:{line}" for m, tree in TREES.items() for line, prog in _argv_heads(tree)
           if prog in ("ssh", "/usr/bin/ssh", "scp", "sftp")]
    assert bad == []


def test_no_transport_method_is_looked_up_by_name() -> None:
    pattern = re.compile(r"getattr\(\s*(self\.)?_?\w*transport\w*\s*,")
    bad = [m for m, path in MODULES.items() if pattern.search(path.read_text())]
    assert bad == []


def _body_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    body = fn.body
    if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str) and len(body) > 1):
        body = body[1:]
    return (fn.end_lineno or fn.lineno) - body[0].lineno + 1


def test_no_product_function_is_longer_than_a_screen() -> None:
    long = sorted(f"{m}:{node.lineno} {node.name} ({_body_lines(node)} lines)"
                  for m, tree in TREES.items() for node in ast.walk(tree)
                  if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _body_lines(node) > BODY_MAX)
    assert long == []


def _readme_modules() -> list[str]:
    """Module paths the README's architecture section names (`preflight/...py` or `preflight.x`)."""
    text = (ROOT / "README.md").read_text()
    start = text.find("## Architecture")
    assert start >= 0, "README has no '## Architecture' section"
    end = text.find("\n## ", start + 1)
    section = text[start:end if end > 0 else None]
    names = set()
    for path in re.findall(r"`((?:preflight|checks)/[\w/]+\.py)`", section):
        names.add(_module_name(ROOT / path))
    for dotted in re.findall(r"`(preflight(?:\.\w+)+)`", section):
        names.add(_own(dotted) or dotted)
    return sorted(names)


def test_the_readme_architecture_names_modules_that_exist() -> None:
    names = _readme_modules()
    assert len(names) >= 10
    for name in names:
        assert name in MODULES, f"README names {name}, which is not a module of the package"
        importlib.import_module(name)


def test_the_readme_names_one_place_for_each_kind_of_change() -> None:
    text = (ROOT / "README.md").read_text()
    section = text[text.find("## Architecture"):]
    for change in ("a new check", "a new transport", "a new output format", "a new parser"):
        assert re.search(rf"\*\*{change}\*\*", section, re.IGNORECASE), change


@pytest.mark.parametrize("command", [["--help"], ["node", "--help"]])
def test_the_cli_does_not_import_heavy_modules_for_help(command: list[str]) -> None:
    """Start-up stays cheap: asking for help must not load pandas, paramiko, torch or tabulate
    (the time itself is measured in benchmarks/bench_startup.py)."""
    import subprocess

    code = ("import sys; from preflight.cli import main; sys.argv = ['preflight', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "heavy = sorted(m for m in ('pandas', 'paramiko', 'torch', 'tabulate', 'numpy') if m in sys.modules)\n"
            "print('HEAVY', ','.join(heavy))")
    p = subprocess.run([sys.executable, "-c", code, *command], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "HEAVY \n" in p.stdout or p.stdout.rstrip().endswith("HEAVY"), p.stdout[-500:]


LIGHT_PATH_HEAVY = ("pandas", "paramiko", "torch", "tabulate", "numpy", "rich")
_REPORT_LOADED = (
    "from preflight import lazyre\n"
    f"print('HEAVY', sorted(m for m in sys.modules if m.split('.')[0] in {LIGHT_PATH_HEAVY!r}), file=sys.stderr)\n"
    "print('PATTERNS', sorted(lazyre.compiled_origins()), len(lazyre._CREATED), file=sys.stderr)\n"
    "print('MODULES', sorted(m for m in sys.modules if m.startswith('preflight.')), file=sys.stderr)\n")


def _loaded(args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[int, dict[str, Any]]:
    """Run `preflight ARGS` in a fresh interpreter; its exit code and what it had loaded: heavy
    third-party modules, the modules of each lazy pattern it compiled, preflight's modules."""
    import subprocess

    code = ("import sys, runpy\nsys.argv = ['preflight', *sys.argv[1:]]\nrc = 0\n"
            "try:\n    runpy.run_module('preflight.cli', run_name='__main__')\n"
            "except SystemExit as exc:\n    rc = exc.code\n" + _REPORT_LOADED + "print('RC', rc, file=sys.stderr)\n")
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120,
                       env=env, cwd=cwd or ROOT)
    seen = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in p.stderr.splitlines()
            if line.split(" ", 1)[0] in ("HEAVY", "PATTERNS", "MODULES", "RC")}
    assert set(seen) == {"HEAVY", "PATTERNS", "MODULES", "RC"}, p.stderr[-2000:]
    import ast as _ast

    patterns = seen["PATTERNS"].rsplit(" ", 1)
    return int(seen["RC"]), {"heavy": _ast.literal_eval(seen["HEAVY"]), "patterns": _ast.literal_eval(patterns[0]),
                             "created": int(patterns[1]), "modules": _ast.literal_eval(seen["MODULES"])}


@pytest.mark.parametrize("command", [["--help"], ["node", "--help"], ["prologue", "--help"]])
def test_help_loads_no_heavy_module_no_engine_and_compiles_no_pattern(command: list[str]) -> None:
    """`--help` is the command line alone: no third-party heavyweight (rich included), none of the
    engine, grading, framing or parsers, not one regular expression compiled."""
    rc, got = _loaded(command)
    assert rc == 0
    assert got["heavy"] == []
    assert got["patterns"] == []
    engine_side = [m for m in got["modules"] if m.split(".")[1] in ("engine", "grading", "framing", "registry", "parsers")]
    assert engine_side == []


def test_a_go_prologue_loads_no_heavy_module_and_only_the_patterns_it_reads(tmp_path: Path) -> None:
    """The prologue gate (`--only gpu.xid`, a clean kernel log): no pandas, torch, paramiko, numpy,
    rich or tabulate, and no regular expressions of parsers its checks do not read."""
    from tests import fakes
    from tests.slurm.test_slurm import KMSG_CLEAN

    bin_dir = fakes.install(tmp_path / "bin", ["dmesg", "nvidia-smi"])
    fakes.scenario(tmp_path / "sc", {"dmesg": [{"match": ".*", "stdout": "kmsg.txt"}]}, {"kmsg.txt": KMSG_CLEAN})
    env = fakes.env_for(bin_dir, tmp_path / "sc")
    env.update(SLURMD_NODENAME="gpu017", XDG_DATA_HOME=str(tmp_path / "data"))
    rc, got = _loaded(["prologue", "--only", "gpu.xid", "--no-drain"], env=env, cwd=tmp_path)
    assert rc == 0
    assert got["heavy"] == []
    unread = {f"preflight.parsers.{m}" for m in ("nccl_log", "nccl_tests", "torch_hang", "torch_log", "flight_recorder",
                                                 "ping", "systemd", "ib", "fabricmanager", "torch_elastic", "ras")}
    assert sorted(set(got["patterns"]) & unread) == []
    assert 0 < len(got["patterns"]) < got["created"] // 4


# ---- the node side: what runs on a node needs nothing of ours installed -----------------------

NODE_SIDE = ("preflight.probe_runner", "preflight.nvml_probe", "preflight.triage.gather")


def _shipped_modules() -> dict[str, str]:
    """module -> where it is shipped: every `module_text(X)` call, X resolved through the calling
    module's own imports."""
    shipped: dict[str, str] = {}
    for module, tree in TREES.items():
        names: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for base, name in _imported(module, node):
                    alias = next(a.asname or a.name for a in node.names if a.name == name)
                    names[alias] = f"{base}.{name}"
            elif isinstance(node, ast.Import):
                names.update({(a.asname or a.name): a.name for a in node.names})
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "module_text"
                    and node.args and isinstance(node.args[0], ast.Name)):
                shipped[names.get(node.args[0].id, node.args[0].id)] = f"{module}:{node.lineno}"
    return shipped


def test_every_module_shipped_to_a_node_is_a_node_side_module() -> None:
    shipped = _shipped_modules()
    assert set(NODE_SIDE) <= set(shipped), shipped  # the runner, the NVML probe, triage's gatherer
    assert {m: where for m, where in shipped.items() if m not in NODE_SIDE} == {}


@pytest.mark.parametrize("module", NODE_SIDE)
def test_a_node_side_module_imports_only_the_standard_library(module: str) -> None:
    """Shipped verbatim as `python3 -c <text>` to a node whose python has nothing of ours."""
    names = set()
    for node in ast.walk(TREES[module]):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{module}: relative import"
            names.add((node.module or "").split(".")[0])
    assert names <= set(sys.stdlib_module_names) | {"__future__"}, sorted(names - set(sys.stdlib_module_names))


@pytest.mark.parametrize("module", NODE_SIDE)
def test_a_node_side_module_runs_from_its_text_alone(module: str) -> None:
    """`python -I -S -c <text>`: no site packages, no PYTHONPATH, nothing of preflight; it must
    at least load (given no arguments, it exits on its own terms, never with an ImportError)."""
    import subprocess

    text = MODULES[module].read_text()
    p = subprocess.run([sys.executable, "-I", "-S", "-c", text], capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin"})
    assert "ImportError" not in p.stderr and "ModuleNotFoundError" not in p.stderr, p.stderr[-2000:]
    assert "Traceback" not in p.stderr, p.stderr[-2000:]


_RUN_DIR_RECORDS = re.compile(r"^(events|heartbeat|hang|crash)-(rank)?|^preempted$")
# modules that parse JSON of another kind beside writing a record: (module, what they parse)
_OTHER_JSON = {"preflight.runtime.watchdog": "a flight-recorder dump's entries (its own JSON dump format)"}


def _parses_json(tree: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("loads", "load")
               and isinstance(n.func.value, ast.Name) and n.func.value.id == "json" for n in ast.walk(tree))


def _names_records(tree: ast.AST) -> bool:
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str) and _RUN_DIR_RECORDS.search(n.value)
               for n in ast.walk(tree))


def _record_parsers(trees: dict[str, ast.AST]) -> list[str]:
    return sorted(m for m, tree in trees.items() if _names_records(tree) and _parses_json(tree))


def test_a_run_directory_has_one_reader() -> None:
    """The records of a run directory (events, heartbeats, hang and crash records, the marker) are
    parsed by preflight.runtime.story alone: triage, the downtime, history, the watchdog's peer
    heartbeats, the crash records and the marker all take them from it."""
    others = [m for m in _record_parsers(TREES) if m != "preflight.runtime.story" and m not in _OTHER_JSON]
    assert others == []
    assert "preflight.runtime.story" in _record_parsers(TREES)


def test_the_one_reader_check_finds_a_second_parser() -> None:
    second = ast.parse("import json\ndef read(p):\n    return json.loads((p / 'hang-rank0.json').read_text())\n")
    assert _record_parsers({"m": second}) == ["m"]
    assert _record_parsers({"m": ast.parse("def f(p):\n    return p.loads('heartbeat-rank0.json')\n")}) == []
    assert _record_parsers({"m": ast.parse("import json\nx = json.loads('{}')\n")}) == []
