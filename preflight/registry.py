"""The check registry: declarations, content formats for analyze, and discovery.

A check declares its id, title, the probes it needs, the profile keys it reads (with their
types, used to validate profiles) and a grade function. Built-in checks live in the
`preflight.checks` package (the repository's `checks/` folder); site checks are plain
Python files in a folder given by `--checks-dir` or the config file, loaded without
editing the package. Each file calls `register(...)` / `register_format(...)`.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from preflight.model import Capture, Result, Status
from preflight.probes import Probe
from preflight.profile import Profile


class RegistryError(Exception):
    """A check or site folder that cannot be loaded; the CLI reports it with exit code 2."""


@dataclass
class Options:
    """Run-wide settings a check may read."""

    peers: list[str] = field(default_factory=list)
    xid_since: datetime | None = None
    mode: str = "run"  # "run" (probes ran here) or "analyze" (captures read from files)
    probe_timeout: float = 10.0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class PlanContext:
    node: str
    profile: Profile
    options: Options


ProbeSpec = Sequence[Probe] | Callable[[PlanContext], Sequence[Probe]]
Grade = Callable[["CheckContext"], Result | Iterable[Result]]


@dataclass(frozen=True)
class Check:
    id: str
    title: str
    grade: Grade
    probes: ProbeSpec = ()
    required: tuple[str, ...] = ()  # probe names without which nothing can be graded
    profile_keys: dict[str, Any] = field(default_factory=dict)  # dotted key -> type(s)
    formats: tuple[str, ...] = ()  # capture kinds graded in analyze
    catches: str = ""  # one line for `preflight list` and the README
    node_local: bool = True  # part of `preflight node` / `prologue`
    in_run: bool = True  # part of `preflight run` (False: analyze-only for now)
    origin: str = "builtin"

    def probes_for(self, ctx: PlanContext) -> list[Probe]:
        spec = self.probes
        if callable(spec):
            return list(spec(ctx))
        return list(spec)

    def static_probe_names(self) -> list[str]:
        if callable(self.probes):
            return []
        return [p.name for p in self.probes]


@dataclass(frozen=True)
class Format:
    """A kind of captured text that analyze recognises by content.

    `detect` looks at the text (the first 256 KiB) and says whether it is this kind; the file
    then becomes the capture of probe `probe_name`. A file may match several formats (a
    training log with NCCL INFO lines and a watchdog timeout feeds two checks)."""

    name: str
    detect: Callable[[str], bool]
    description: str = ""
    priority: int = 50
    probe: str = ""  # the probe the file stands in for (default: `name`)

    @property
    def probe_name(self) -> str:
        return self.probe or self.name


@dataclass
class CheckContext:
    check: Check
    node: str
    captures: dict[str, Capture]
    profile: Profile
    options: Options

    def capture(self, name: str) -> Capture | None:
        """The capture of probe `name` if it ran (any exit code), else None."""
        cap = self.captures.get(name)
        return cap if cap is not None and cap.ok else None

    def any_capture(self, *names: str) -> Capture | None:
        for n in names:
            c = self.capture(n)
            if c is not None:
                return c
        return None

    def result(
        self,
        status: Status,
        summary: str,
        evidence: Iterable[str] = (),
        remedy: str = "",
        facts: dict[str, Any] | None = None,
        source: str | None = None,
    ) -> Result:
        if source is None:
            srcs = [c.source for c in self.captures.values() if c.source]
            source = ", ".join(dict.fromkeys(srcs))
        return Result(
            check=self.check.id,
            node=self.node,
            status=status,
            summary=summary,
            evidence=[str(e) for e in evidence],
            remedy=remedy,
            facts=facts or {},
            source=source,
        )


@dataclass
class ClusterContext:
    """What a cross-node check sees: every node's captures and results, and node faults."""

    nodes: list[str]
    captures: dict[str, dict[str, Capture]]  # node -> probe -> capture
    results: list[Result]  # the node-level results graded so far
    node_errors: dict[str, str]  # node -> why it could not be checked ("" when fine)
    node_detail: dict[str, dict[str, str]]  # node -> transport detail (e.g. ssh stage)
    profile: Profile
    options: Options
    peers: dict[str, list[str]] = field(default_factory=dict)  # node -> the peers it pinged
    addresses: dict[str, str] = field(default_factory=dict)  # peer address -> node name

    def result_of(self, check: str, node: str) -> Result | None:
        for r in self.results:
            if r.check == check and r.node == node:
                return r
        return None


@dataclass(frozen=True)
class ClusterCheck:
    """A check across all nodes of a run (version equality, MTU path matrix, ...). It may
    return results for the node `cluster` and results that replace a node-level result of
    the same check and node (e.g. a jumbo loss explained by a peer's link)."""

    id: str
    title: str
    grade: Callable[[ClusterContext], Iterable[Result]]
    probes: tuple[Probe, ...] = ()
    catches: str = ""
    min_nodes: int = 2
    origin: str = "builtin"


class Registry:
    def __init__(self) -> None:
        self.checks: dict[str, Check] = {}
        self.cluster_checks: dict[str, ClusterCheck] = {}
        self.formats: dict[str, Format] = {}
        self._loaded_builtin = False
        self._loaded_dirs: set[Path] = set()
        self._origin = "builtin"

    def register(self, check: Check) -> Check:
        if check.id in self.checks and self.checks[check.id].grade is not check.grade:
            raise RegistryError(f"check id {check.id!r} is declared twice ({self._origin})")
        if self._origin != "builtin":
            check = Check(**{**check.__dict__, "origin": self._origin})
        self.checks[check.id] = check
        return check

    def register_cluster(self, check: ClusterCheck) -> ClusterCheck:
        if check.id in self.cluster_checks and self.cluster_checks[check.id].grade is not check.grade:
            raise RegistryError(f"cluster check id {check.id!r} is declared twice ({self._origin})")
        self.cluster_checks[check.id] = check
        return check

    def register_format(self, fmt: Format) -> Format:
        self.formats[fmt.name] = fmt
        return fmt

    def profile_schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {"tools.required": list}
        for c in self.checks.values():
            schema.update(c.profile_keys)
        return schema

    def load_builtin(self) -> None:
        if self._loaded_builtin:
            return
        self._loaded_builtin = True
        import preflight.checks as pkg

        for mod in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
            if mod.name.startswith("_"):
                continue
            importlib.import_module(f"preflight.checks.{mod.name}")

    def load_dir(self, folder: Path) -> None:
        folder = folder.expanduser().resolve()
        if folder in self._loaded_dirs:
            return
        if not folder.is_dir():
            raise RegistryError(f"checks folder {folder} does not exist")
        self._loaded_dirs.add(folder)
        for path in sorted(folder.glob("*.py")):
            if path.name.startswith("_"):
                continue
            modname = f"preflight_site_{abs(hash(str(folder))) % 10**8}_{path.stem}"
            spec = importlib.util.spec_from_file_location(modname, path)
            if spec is None or spec.loader is None:
                raise RegistryError(f"site check {path} cannot be imported")
            module = importlib.util.module_from_spec(spec)
            sys.modules[modname] = module
            self._origin = str(path)
            try:
                spec.loader.exec_module(module)
            except RegistryError:
                raise
            except Exception as exc:  # a broken site file must not crash the run with a traceback
                raise RegistryError(f"site check {path} failed to load: {type(exc).__name__}: {exc}") from None
            finally:
                self._origin = "builtin"


REGISTRY = Registry()


def register(check: Check) -> Check:
    """Add a check to the global registry (used by built-in and site check modules)."""
    return REGISTRY.register(check)


def register_format(fmt: Format) -> Format:
    return REGISTRY.register_format(fmt)


def register_cluster(check: ClusterCheck) -> ClusterCheck:
    return REGISTRY.register_cluster(check)


def load(checks_dirs: Sequence[Path] = ()) -> Registry:
    REGISTRY.load_builtin()
    for d in checks_dirs:
        REGISTRY.load_dir(Path(d))
    return REGISTRY
