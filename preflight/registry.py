"""The check registry: declarations, parsers, content formats for analyze, and discovery.

A check declares its id, title, the probes it needs, the inputs it grades (probe names whose
facts it reads), the profile keys it reads (with their types, used to validate profiles) and a
grade function. The grade function reads facts, never text: each probe's output is parsed
once by the parser registered for that probe (`preflight.parsers` for the built-in tools).
Built-in checks live in the `preflight.checks` package (the repository's `checks/` folder);
site checks are plain Python files in a folder given by `--checks-dir` or the config file,
loaded without editing the package. Each file calls `register(...)`, and for a tool of its
own `register_parser(...)` / `register_format(...)`.
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

from preflight import policy
from preflight.model import CaptureState, Result, Status, prove
from preflight.parsers.base import Format, Parser, ParserSpec
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
    inputs: tuple[str, ...] = ()  # probes whose facts it grades (analyze grades it when one is present)
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

    def probes_for_safe(self) -> list[Probe]:
        return [] if callable(self.probes) else list(self.probes)

    def reads(self) -> tuple[str, ...]:
        """The probes whose facts the check grades."""
        return self.inputs or tuple(self.static_probe_names())


@dataclass(frozen=True)
class Input:
    """What a grader may know of a probe's run besides its facts (never its text): whether it
    ran, its exit code, whether the output was cut, and where it came from."""

    probe: str
    argv: tuple[str, ...] = ()
    state: CaptureState = CaptureState.OK
    rc: int | None = None
    truncated: bool = False
    timeout: float = 0.0
    reason: str = ""
    source: str = ""
    command: str = ""  # the command line as typed (analyze: the prompt above the output)
    excerpt: bool = False  # a fragment: grep-filtered, elided or cut by the one who pasted it
    filter: tuple[str, ...] = ()  # grep patterns the output was piped through

    @property
    def ok(self) -> bool:
        return self.state is CaptureState.OK

    @property
    def tool(self) -> str:
        return self.argv[0] if self.argv else self.probe

    @property
    def cmdline(self) -> str:
        return self.command or " ".join(self.argv) or self.probe


class FactSource:
    """Where a check context gets parsed facts (implemented by `preflight.grading.FactStore`)."""

    def facts(self, probe: str) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def input(self, probe: str) -> Input | None:  # pragma: no cover - interface
        raise NotImplementedError


@dataclass
class CheckContext:
    """What a grade function sees: the inputs' facts and run metadata, the profile, the options."""

    check: Check
    node: str
    store: FactSource
    profile: Profile
    options: Options

    def input(self, name: str) -> Input | None:
        """The run of probe `name` if it ran (any exit code), else None."""
        i = self.store.input(name)
        return i if i is not None and i.ok else None

    def attempt(self, name: str) -> Input | None:
        """The run of probe `name` in any state (missing tool, timeout, ...), None if never planned."""
        return self.store.input(name)

    def facts(self, name: str) -> Any:
        """The parsed facts of probe `name`, None when it did not run (or has no output)."""
        if self.input(name) is None:
            return None
        return self.store.facts(name)

    def sources(self) -> str:
        names = list(self.check.inputs) or [p.name for p in self.check.probes_for_safe()]
        srcs = []
        for n in names:
            i = self.store.input(n)
            if i is not None and i.source:
                srcs.append(i.source)
        return ", ".join(dict.fromkeys(srcs))

    def result(
        self,
        status: Status,
        summary: str,
        evidence: Iterable[str] = (),
        remedy: str = "",
        facts: dict[str, Any] | None = None,
        source: str | None = None,
    ) -> Result:
        return Result(
            check=self.check.id,
            node=self.node,
            status=status,
            summary=summary,
            evidence=[str(e) for e in evidence],
            remedy=remedy,
            facts=facts or {},
            source=self.sources() if source is None else source,
        )

    def finding(
        self,
        code: str,
        summary: str,
        evidence: Iterable[str] = (),
        remedy: str = "",
        facts: dict[str, Any] | None = None,
        source: str | None = None,
        proof: str | Sequence[str] = "",
    ) -> Result:
        """A result that is one finding of policy code `code`: its status is the policy's
        (the table's, or the site's override), and the result carries the code. `proof`: what
        the evidence line that proves it holds, put first (`preflight.model.prove`)."""

        ev = prove((str(e) for e in evidence), proof)
        facts = dict(facts or {})
        status = policy.status(code)
        policy.code_facts([code] if status is not Status.PASS else [], facts, ev,
                   passed=[code] if status is Status.PASS else [])
        return self.result(status, summary, ev, remedy, facts, source)


@dataclass
class ClusterContext:
    """What a cross-node check sees: every node's captures and results, and node faults."""

    nodes: list[str]
    stores: dict[str, FactSource]  # node -> its parsed facts
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

    def facts(self, node: str, probe: str) -> Any:
        """A node's parsed facts of probe `probe`; None when it did not run there."""
        store = self.stores.get(node)
        if store is None:
            return None
        i = store.input(probe)
        if i is None or not i.ok:
            return None
        return store.facts(probe)

    def input(self, node: str, probe: str) -> Input | None:
        store = self.stores.get(node)
        return store.input(probe) if store is not None else None


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


@dataclass(frozen=True)
class Emitted:
    """A result id that no node or cross-node check grades: the collective sweep's, triage's,
    the runtime layer's and analyze's own results. Listed by `preflight list` with its kind,
    accepted by `--only`/`--skip`; never planned as a node probe."""

    id: str
    title: str
    kind: str  # "sweep", "triage", "runtime" or "analyze": the command that emits it
    catches: str = ""
    origin: str = "builtin"


# Every result id emitted outside a registered check (tests/test_registry_ids.py holds the
# emitters to this list).
EMITTED: tuple[Emitted, ...] = (
    Emitted("nccl.pingpong", "Pairwise NCCL bandwidth", "sweep",
            "node pairs whose point-to-point bandwidth is under the floor, and the node they share"),
    Emitted("triage.verdict", "Hang triage verdict", "triage",
            "the rank, node and cause of a hung or crashed job, from its logs, flight recorder and node checks"),
    Emitted("triage.collect", "Triage bundle collection", "triage",
            "nodes whose logs and captures could not be collected into the triage bundle"),
    Emitted("runtime.watchdog", "Hang watchdog", "runtime",
            "a rank whose section (step, checkpoint, ...) ran past its timeout, or whose peers stopped progressing"),
    Emitted("runtime.loss", "Loss guard", "runtime", "the first non-finite loss, loss spikes"),
    Emitted("runtime.replay", "Step replay", "runtime",
            "a NaN or spike whose step, run again from the same inputs, differs (suspect hardware: the node) "
            "or repeats (the data or the model)"),
    Emitted("runtime.preemption", "Preemption handler", "runtime",
            "a stop signal on any rank, and the step boundary at which every rank stopped"),
    Emitted("runtime.crash", "Crash record", "runtime", "an uncaught exception that ended a rank"),
    Emitted("runtime.exit", "Rank exit", "runtime", "how a rank ended (exit code or signal)"),
    Emitted("runtime.train", "Training progress", "runtime",
            "where each rank started or resumed (step, checkpoint tier), finished, or stopped for a preemption"),
    Emitted("runtime.restart", "In-process restart", "runtime",
            "ranks lost to a collective fault, fenced, and the group re-formed without a process restart "
            "(or the fallback to the launcher's restart)"),
    Emitted("runtime.nccl_env", "NCCL environment across ranks", "runtime",
            "NCCL / torch.distributed variables that differ between the ranks of one job"),
    Emitted("runtime.checkpoint", "Checkpoint integrity", "runtime",
            "checkpoint saves and loads that fail verification (a shard missing or corrupt)"),
    Emitted("runtime.straggler", "Straggler detection", "runtime",
            "ranks whose step times stay slower than their peers' over several intervals"),
    Emitted("runtime.downtime", "Cost of downtime", "runtime",
            "the time, GPU-hours and money an interruption cost (last good step to training past the failed "
            "step again), its cause and nodes"),
    Emitted("analyze.node", "Analyze: node not gradable", "analyze",
            "a node whose pasted captures could not be read"),
    Emitted("analyze.unrecognised", "Analyze: unrecognised input", "analyze",
            "pasted text that matches no known tool's output"),
    Emitted("node.reachable", "Node reachable", "run",
            "a node that could not be reached or logged in to: one ERROR with the cause, its checks SKIP "
            "\"depends on node.reachable\""),
    Emitted("node.responsive", "Node tools responsive", "run",
            "a node on which two or more tools hung (nvidia-smi, ibstat, ...): one ERROR naming each tool, "
            "the checks that needed them SKIP \"depends on node.responsive\""),
    Emitted("profile.detect", "Profile detection", "run",
            "a node whose profile detection failed inside a check's hint: ERROR naming the exception, "
            "not a silent fall-back to the generic profile"),
)


class Registry:
    def __init__(self) -> None:
        self.checks: dict[str, Check] = {}
        self.cluster_checks: dict[str, ClusterCheck] = {}
        self.emitted: dict[str, Emitted] = {e.id: e for e in EMITTED}
        self.formats: dict[str, Format] = {}
        self.parsers: dict[str, ParserSpec] = {}
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

    def register_emitted(self, entry: Emitted) -> Emitted:
        """A result id a site plugin emits without a check (shown by `preflight list`)."""
        if entry.id in self.checks or entry.id in self.cluster_checks:
            raise RegistryError(f"result id {entry.id!r} is already a check ({self._origin})")
        if self._origin != "builtin":
            entry = Emitted(**{**entry.__dict__, "origin": self._origin})
        self.emitted[entry.id] = entry
        return entry

    def known_ids(self) -> list[str]:
        """Every result id that can appear in a report: checks, cross-node checks and the ids
        the sweep, triage, the runtime layer and analyze emit."""
        return sorted({*self.checks, *self.cluster_checks, *self.emitted})

    def kind_of(self, result_id: str) -> str:
        """"node", "run", "analyze", "cluster", or an emitted id's kind; "" for an unknown id."""
        c = self.checks.get(result_id)
        if c is not None:
            return "node" if c.node_local else ("run" if c.in_run else "analyze")
        if result_id in self.cluster_checks:
            return "cluster"
        e = self.emitted.get(result_id)
        return e.kind if e is not None else ""

    def matches(self, patterns: Sequence[str]) -> list[str]:
        """The known ids an `--only`/`--skip` list names (by id or family prefix, like `select`)."""
        return [i for i in self.known_ids()
                if any(i == p or i.startswith(p.rstrip(".") + ".") for p in patterns)]

    def not_probed(self, patterns: Sequence[str]) -> str:
        """For an `--only` list that selects no check: the ids it names that another command
        emits, and which command ("" when it names none)."""
        named = [i for i in self.matches(patterns) if i in self.emitted]
        if not named:
            return ""
        by = {"runtime": "the runtime layer inside a training job"}
        sources = [by.get(k, f"`preflight {k}`") for k in sorted({self.emitted[i].kind for i in named})]
        return f"{', '.join(named)} {'is' if len(named) == 1 else 'are'} reported by {' and '.join(sources)}, " \
               "not probed on nodes"

    def emitted_rows(self) -> list[dict[str, object]]:
        """`preflight list` rows for the emitted ids (the shape of `engine.check_table`'s rows)."""
        return [{"id": e.id, "title": e.title, "probes": "-", "profile_keys": [], "inputs": [], "scope": e.kind,
                 "catches": e.catches, "origin": e.origin} for e in sorted(self.emitted.values(), key=lambda e: e.id)]

    def register_format(self, fmt: Format) -> Format:
        self.formats[fmt.name] = fmt
        return fmt

    def register_parser(self, probe: str, parse: Parser, prefix: bool = False) -> None:
        self.parsers[probe] = ParserSpec(probe=probe, parse=parse, prefix=prefix)

    def parser_for(self, probe: str) -> Parser | None:
        spec = self.parsers.get(probe)
        if spec is not None:
            return spec.parse
        for p in self.parsers.values():
            if p.prefix and probe.startswith(p.probe):
                return p.parse
        return None

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
        from preflight import parsers

        parsers.register_all(self)

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


def register_parser(probe: str, parse: Parser, prefix: bool = False) -> None:
    """Parse the output of probe `probe` (a site tool) into facts with `parse(doc)`."""
    REGISTRY.register_parser(probe, parse, prefix)


def register_cluster(check: ClusterCheck) -> ClusterCheck:
    return REGISTRY.register_cluster(check)


def register_emitted(entry: Emitted) -> Emitted:
    return REGISTRY.register_emitted(entry)


def load(checks_dirs: Sequence[Path] = ()) -> Registry:
    REGISTRY.load_builtin()
    for d in checks_dirs:
        REGISTRY.load_dir(Path(d))
    return REGISTRY
