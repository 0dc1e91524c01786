"""Plan, collect and grade: the run and node commands' engine.

plan (which probes each node needs) -> transport (captures) -> grade (results). Grading is
`grading.grade_node`, the same function analyze, triage and the sweep use: it never raises (a
probe that timed out is ERROR naming the probe, a missing tool is SKIP or FAIL where the profile
requires it, a fault inside a parser or grader is ERROR with the exception's message). A check
whose probe planning raises is ERROR too (`planning_error`), and `--deadline` is one time for
both collection phases (`Transport.start_clock`).

What the commands call: `load_config` (the site config), `plan_run` (checks, nodes, transport,
the MTU peer ring and the cross-node checks, decided before any node is touched), `check_nodes`
(`preflight node`), `run_checks` (`preflight run`: the checks, then the collective sweep when
they pass, with as many ranks per node as GPUs found), `sweep_command` (`preflight sweep`),
`check_table` and `profile_list`/`show_profile`. Bad operator input raises UsageError.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from preflight import facts as result_facts
from preflight import interrupt, rootcause
from preflight import profile as profiles
from preflight.arrivals import Arrivals
from preflight.grading import FactStore, grade_cluster, grade_node
from preflight.model import CLUSTER, Capture, CaptureState, Result, Status, is_node
from preflight.probes import DEFAULT_TIMEOUT, Probe
from preflight.profile import Profile
from preflight.registry import (
    Check,
    ClusterCheck,
    FactSource,
    Options,
    PlanContext,
    Registry,
)
from preflight.transport.base import NodeOutcome, ProgressFn, Transport, stalled

if TYPE_CHECKING:
    from preflight.report.base import Report
    from preflight.sweep.run import SweepOptions, SweepRun

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - python 3.10
    import tomli as tomllib

# Hooks set by the GPU and NCCL checks: a node's facts -> (gpu model, gpu count), for profile
# auto-detection.
ProfileHint = Callable[[FactSource], "tuple[str | None, int | None]"]
_profile_hints: list[ProfileHint] = []
DETECT_PROBES: list[Probe] = []
CHECK_TIMEOUTS = "check_timeouts"  # Options.extra key: check id -> seconds for that check's probes


def register_profile_hint(fn: ProfileHint, probes: Sequence[Probe] = ()) -> None:
    _profile_hints.append(fn)
    DETECT_PROBES.extend(probes)


PROFILE_DETECT_CHECK = "profile.detect"  # the result of a node whose profile detection failed


def detect_profile_name(store: FactSource, extra_dirs: tuple[Path, ...] = (),
                        faults: list[str] | None = None) -> str:
    """The profile a node's facts point at ("generic" when none does). A hint that raises is
    passed over; `faults` (when given) receives "<hint>: <exception type>: <message>" for each."""
    for hint in _profile_hints:
        try:
            model, count = hint(store)
        except Exception as exc:
            if faults is not None:
                faults.append(f"{getattr(hint, '__module__', '?')}.{getattr(hint, '__name__', 'hint')}: "
                              f"{type(exc).__name__}: {exc}")
            continue
        if model:
            return profiles.autodetect(model, count, extra_dirs)
    return "generic"


def profile_fault_result(node: str, profile: str, faults: Sequence[str]) -> Result:
    """ERROR for a node whose profile detection raised: it was graded with `profile`, which may
    not be the one its hardware needs."""
    return Result(check=PROFILE_DETECT_CHECK, node=node, status=Status.ERROR,
                  summary=f"profile detection failed internally ({faults[0]}); graded with profile {profile}",
                  evidence=list(faults),
                  remedy="give --profile for these nodes, and report this as a preflight bug with the captures")


def select(registry: Registry, only: Sequence[str] = (), skip: Sequence[str] = (), node_only: bool = False,
           mode: str = "run") -> list[Check]:
    """The checks to run: `only`/`skip` take ids or family prefixes (`gpu`, `net.mtu`)."""

    def hit(cid: str, pats: Sequence[str]) -> bool:
        return any(cid == p or cid.startswith(p.rstrip(".") + ".") for p in pats)

    chosen = []
    for c in sorted(registry.checks.values(), key=lambda c: c.id):
        if only and not hit(c.id, only):
            continue
        if skip and hit(c.id, skip):
            continue
        if mode == "run" and not c.in_run:
            continue
        if node_only and not c.node_local:
            continue
        chosen.append(c)
    return chosen


@dataclass
class NodePlan:
    node: str
    per_check: dict[str, list[Probe]] = field(default_factory=dict)
    # check id -> "<exception type>: <message>" for a check whose probe planning raised: that
    # check is ERROR on this node (never graded on no probes, never SKIP)
    failed: dict[str, str] = field(default_factory=dict)

    def probes(self) -> list[Probe]:
        seen: dict[str, Probe] = {}
        for ps in self.per_check.values():
            for p in ps:
                have = seen.get(p.name)
                if have is None or p.timeout > have.timeout:  # shared: the longest of its checks' timeouts
                    seen[p.name] = p
        return list(seen.values())


def plan_node(checks: Iterable[Check], node: str, profile: Profile, options: Options) -> NodePlan:
    """The probes each check needs on `node`. Probes that keep the default timeout take the
    run's `--probe-timeout` instead; a check with a configured timeout (the site config's
    `check_timeouts`, in `options.extra`) gives it to all of its probes."""
    ctx = PlanContext(node=node, profile=profile, options=options)
    plan = NodePlan(node=node)
    for c in checks:
        try:
            probes = c.probes_for(ctx)
        except Exception as exc:  # a bug in one check's planning: that check is ERROR, the others run
            plan.failed[c.id] = f"{type(exc).__name__}: {exc}"
            plan.per_check[c.id] = []
            continue
        if options.probe_timeout != DEFAULT_TIMEOUT:
            probes = [replace(p, timeout=options.probe_timeout) if p.timeout == DEFAULT_TIMEOUT else p
                      for p in probes]
        configured = options.extra.get(CHECK_TIMEOUTS, {}).get(c.id)
        if configured:
            probes = [replace(p, timeout=configured) for p in probes]
        plan.per_check[c.id] = probes
    return plan


def planning_error(check: Check, node: str, why: str) -> Result:
    """The result of a check whose probe planning raised `why` on `node`: ERROR naming the
    exception (a check that cannot say which probes it needs has no evidence to pass on)."""
    where = "" if check.origin == "builtin" else f" (site check {check.origin})"
    return Result(check=check.id, node=node, status=Status.ERROR,
                  summary=f"check {check.id} failed internally while planning its probes: {why}",
                  evidence=[f"{check.id}{where}: planning its probes raised {why}"],
                  remedy="report this as a preflight bug (a site check: to its author) with this message and "
                         "the profile in use: planning reads only the profile, the node and the run's options")


def node_error_results(outcome: NodeOutcome, checks: Iterable[Check]) -> list[Result]:
    """A node that could not be reached: every check is ERROR for that node, with the reason."""
    return [Result(check=c.id, node=outcome.node, status=Status.ERROR,
                   summary=f"node not checked: {outcome.error}", evidence=[outcome.error],
                   remedy=f"make {outcome.node} reachable, or drain it")
            for c in checks]


@dataclass
class _Run:
    """What the phases of one `run` share: the nodes' options, plans, bundles and outcomes."""

    registry: Registry
    checks: list[Check]
    nodes: list[str]
    options: Options
    node_opts: dict[str, Options]
    fixed: Profile | None
    extra_dirs: tuple[Path, ...]
    cluster_checks: list[ClusterCheck]
    peer_map: dict[str, list[str]]
    plans: dict[str, NodePlan] = field(default_factory=dict)
    outcomes: dict[str, NodeOutcome] = field(default_factory=dict)
    used: dict[str, Profile] = field(default_factory=dict)
    stores: dict[str, FactStore] = field(default_factory=dict)
    profile_faults: dict[str, list[str]] = field(default_factory=dict)  # node -> profile hints that raised
    hinted: dict[str, FactStore] = field(default_factory=dict)  # node -> the facts its profile was detected from

    @property
    def dynamic(self) -> list[Check]:
        return [c for c in self.checks if callable(c.probes)]


def _start(registry: Registry, checks: list[Check], nodes: list[str], profile_name: str, options: Options,
           extra_dirs: tuple[Path, ...], peer_map: dict[str, list[str]], cluster_checks: list[ClusterCheck]) -> _Run:
    fixed: Profile | None = None
    if profile_name != "auto":
        fixed = profiles.load(profile_name, extra_dirs)
        profiles.validate(fixed, registry.profile_schema())
    node_opts = {n: replace(options, peers=list(peer_map.get(n, options.peers))) for n in nodes}
    return _Run(registry=registry, checks=checks, nodes=nodes, options=options, node_opts=node_opts, fixed=fixed,
                extra_dirs=extra_dirs, peer_map=peer_map,
                cluster_checks=[c for c in cluster_checks if len(nodes) >= c.min_nodes])


def _phase1_bundles(st: _Run) -> dict[str, list[Probe]]:
    """The probes every check declares statically, the cross-node checks' probes and (with no
    fixed profile) the profile-detection probes, each once per node."""
    generic = st.fixed or profiles.load("generic", st.extra_dirs)
    static = [c for c in st.checks if not callable(c.probes)]
    bundles: dict[str, list[Probe]] = {}
    for n in st.nodes:
        st.plans[n] = plan_node(static, n, generic, st.node_opts[n])
        timeouts = st.options.extra.get(CHECK_TIMEOUTS, {})
        planned = st.plans[n].probes() + [replace(p, timeout=timeouts[cc.id]) if cc.id in timeouts else p
                                          for cc in st.cluster_checks for p in cc.probes]
        unique: dict[str, Probe] = {}
        for p in planned:
            unique.setdefault(p.name, p)
        names = set(unique)
        bundles[n] = list(unique.values()) + ([] if st.fixed else [p for p in DETECT_PROBES if p.name not in names])
    return bundles


def _profiles_and_phase2(st: _Run) -> dict[str, list[Probe]]:
    """Each node's profile (fixed, or detected from its phase-1 facts), and the probes that
    depend on it or on the peers, never a probe already run."""
    schema = st.registry.profile_schema()
    phase2: dict[str, list[Probe]] = {}
    for n in st.nodes:
        out = st.outcomes.setdefault(n, NodeOutcome(node=n, error="no result from transport"))
        if st.fixed is not None:
            st.used[n] = st.fixed
        else:
            hint_store = st.hinted[n] = FactStore(st.registry, captures=out.captures)
            faults: list[str] = []
            st.used[n] = profiles.load(detect_profile_name(hint_store, st.extra_dirs, faults), st.extra_dirs)
            if faults:
                st.profile_faults[n] = faults
            profiles.validate(st.used[n], schema)
        if st.dynamic and not out.error:
            dplan = plan_node(st.dynamic, n, st.used[n], st.node_opts[n])
            st.plans[n].per_check.update(dplan.per_check)
            st.plans[n].failed.update(dplan.failed)
            phase2[n] = [p for p in dplan.probes() if p.name not in out.captures]
    return {n: ps for n, ps in phase2.items() if ps}


def _merge(st: _Run, more: dict[str, NodeOutcome]) -> None:
    for n, o in more.items():
        st.outcomes[n].captures.update(o.captures)
        if o.error and not st.outcomes[n].error:
            st.outcomes[n].error = o.error
            st.outcomes[n].detail = o.detail


def _grade_node(st: _Run, n: str) -> list[Result]:
    out = st.outcomes[n]
    if out.error and not out.captures:
        st.stores[n] = FactStore(st.registry, captures=out.captures)
        return node_error_results(out, st.checks)
    if out.error and st.dynamic:  # phase 2 was not sent to a node whose connection failed
        dplan = plan_node(st.dynamic, n, st.used[n], st.node_opts[n])
        for cid, probes in dplan.per_check.items():
            st.plans[n].per_check.setdefault(cid, probes)
        for cid, why in dplan.failed.items():
            st.plans[n].failed.setdefault(cid, why)
    _mark_lost(out, st.plans[n], [p for cc in st.cluster_checks for p in cc.probes])
    hinted = st.hinted.pop(n, None)  # the listings parsed for the profile are not parsed again
    st.stores[n] = hinted.with_captures(out.captures) if hinted else FactStore(st.registry, captures=out.captures)
    failed = st.plans[n].failed
    ran = {c.id: [pr.name for pr in st.plans[n].per_check.get(c.id, [])] for c in st.checks}
    got = [planning_error(c, n, failed[c.id]) for c in st.checks if c.id in failed]
    got += grade_node([c for c in st.checks if c.id not in failed], n, st.stores[n], st.used[n], st.node_opts[n],
                      ran)
    if n in st.profile_faults:
        got.append(profile_fault_result(n, st.used[n].name, st.profile_faults[n]))
    if out.error:  # partial captures: say why the rest is missing
        for r in got:
            if r.status in (Status.SKIP, Status.ERROR):
                r.evidence.append(f"node fault: {out.error}")
    return got


def run(
    registry: Registry,
    checks: list[Check],
    nodes: list[str],
    transport: Transport,
    profile_name: str = "auto",
    options: Options | None = None,
    extra_profile_dirs: tuple[Path, ...] = (),
    progress: ProgressFn | None = None,
    peers: dict[str, list[str]] | Callable[[list[str]], dict[str, list[str]]] | None = None,
    cluster_checks: list[ClusterCheck] | None = None,
    addresses: dict[str, str] | None = None,
    until: float | None = None,
) -> tuple[list[Result], dict[str, Profile]]:
    """Collect and grade `checks` on `nodes`, then the cross-node checks.

    `peers` gives each node the peers it pings (MTU path), or is a function of the nodes that
    answered phase 1 (so an unreachable node is left out of the ring); `addresses` maps a peer
    address back to its node name. Both collection phases end by one time: `until` (a
    time.monotonic() value), else the transport's deadline counted from now; a probe cut off
    by it is ERROR naming the probe and the deadline. Returns the results and the profile used
    per node."""
    options = options or Options()
    transport.start_clock(until)
    peer_map: dict[str, list[str]] = {} if callable(peers) else dict(peers or {})
    st = _start(registry, checks, nodes, profile_name, options, extra_profile_dirs, peer_map, cluster_checks or [])
    # Phase 1: the probes every check declares statically (plus the profile-detection probe).
    bundles = _phase1_bundles(st)
    _expect(progress, bundles, st)
    arrivals = Arrivals(progress)  # the controller's times around each capture (node.clock's bracket)
    received = _Received(arrivals)  # what came back, kept should a signal end the collection
    phases = [bundles]
    try:
        with interrupt.armed():
            st.outcomes = _collect(transport, bundles, received.phase(arrivals))
        _report_failed(progress, st.outcomes)
        if callable(peers):
            # a node that sent anything back is in the ring, and one whose SSH session stalled past
            # the TCP connect (its bundle too large for the path): that is what the pings must find
            st.peer_map = peers([n for n in nodes if n in st.outcomes and (st.outcomes[n].captures
                                                                           or stalled(st.outcomes[n].detail))])
            for n in nodes:
                st.node_opts[n].peers = list(st.peer_map.get(n, []))
        # Phase 2: probes that depend on the profile or the peers (e.g. MTU pings).
        phase2 = _profiles_and_phase2(st)
        if phase2:
            phases.append(phase2)
            _expect(progress, phase2, st)
            with interrupt.armed():
                more = _collect(transport, phase2, received.phase(arrivals))
            _report_failed(progress, more)
            _merge(st, more)
    except interrupt.Interrupted:
        _interrupted(st, transport, received, phases)
    pending = [n for n in nodes if st.outcomes[n].error == interrupt.WHY]
    results: list[Result] = []
    for n in nodes:
        results.extend(_grade_node(st, n))
    if st.cluster_checks:
        results = grade_cluster(st.cluster_checks, nodes, st.stores, results, st.used, arrivals.into(options), st.peer_map,
                                addresses or {}, node_errors={n: st.outcomes[n].error for n in nodes},
                                node_detail={n: {"transport": transport.name, **st.outcomes[n].detail} for n in nodes})
    results = complete(results, nodes, [c.id for c in st.checks], [c.id for c in st.cluster_checks],
                       {n: st.outcomes[n].error for n in nodes})
    # one result per shared cause and node (a missing tool, a dead driver, an unreachable node)
    results = rootcause.fold(results, {n: st.outcomes[n].captures for n in nodes})
    if interrupt.signum():
        interrupt.note(nodes, [n for n in nodes if not st.outcomes[n].error], pending)
        _tag_interrupted(results)
    return results, st.used


class _Received:
    """The run's progress callback in front of `Arrivals`: keeps each node's captures as they
    come back, until `freeze` (the run was interrupted: later captures are of killed probes)."""

    def __init__(self, inner: ProgressFn) -> None:
        self.inner = inner
        self.captures: dict[str, dict[str, Capture]] = {}
        self.frozen = False
        self._lock = threading.Lock()

    def phase(self, arrivals: Arrivals) -> _Received:
        arrivals.phase()
        return self

    def __call__(self, node: str, capture: Capture) -> None:
        with self._lock:
            if self.frozen:
                return
            self.captures.setdefault(node, {}).setdefault(capture.probe, capture)
        self.inner(node, capture)

    def freeze(self) -> dict[str, dict[str, Capture]]:
        with self._lock:
            self.frozen = True
            return {n: dict(c) for n, c in self.captures.items()}


def _interrupted(st: _Run, transport: Transport, received: _Received,
                 phases: list[dict[str, list[Probe]]]) -> None:
    """A signal ended the collection: what came back stays, every probe still running is
    ended (the transport's abort). A node that had not sent back every probe sent to it is
    pending: its outcome's error is `interrupt.WHY` (its checks ERROR with that cause). A node
    that had answered phase 1 when the signal came gets its phase-2 probes (never sent) as LOST
    with that cause."""
    got = received.freeze()
    transport.abort()
    for n in st.nodes:
        out = st.outcomes.get(n)
        if out is None:
            out = st.outcomes[n] = NodeOutcome(node=n)
        for name, cap in got.get(n, {}).items():
            out.captures.setdefault(name, cap)
        sent = {p.name for bundle in phases for p in bundle.get(n, [])}
        if not out.error and not sent <= set(out.captures):
            out.error = interrupt.WHY
            out.detail = {"kind": "interrupted"}
    if len(phases) == 1:  # the profiles the nodes' grading needs; phase 2 is not sent
        for n, probes in _profiles_and_phase2(st).items():
            for p in probes:
                st.outcomes[n].captures.setdefault(p.name, Capture(
                    probe=p.name, argv=list(p.commands[0]) if p.commands else [], state=CaptureState.LOST,
                    reason=f"{interrupt.WHY}: not sent", timeout=p.timeout, source=f"probe:{p.name}"))


def _tag_interrupted(results: list[Result]) -> None:
    """Mark the ERRORs that the interruption made (saying so): they block nothing; the
    verdict is INTERRUPTED."""
    for r in results:
        if r.status is Status.ERROR and interrupt.WHY in " ".join([r.summary, *map(str, r.evidence)]):
            r.facts["interrupted"] = True


def _collect(transport: Transport, bundles: dict[str, list[Probe]], progress: ProgressFn | None
             ) -> dict[str, NodeOutcome]:
    """The transport's outcomes, one per node of `bundles`: a transport that raises (a bug: it
    must not) or leaves a node out makes those nodes' outcome an error naming that."""
    try:
        got = dict(transport.collect(bundles, progress))
    except Exception as exc:
        why = f"the {transport.name} transport failed: {type(exc).__name__}: {exc}"
        return {n: NodeOutcome(node=n, error=why) for n in bundles}
    for n in bundles:
        got.setdefault(n, NodeOutcome(node=n, error=f"no result from the {transport.name} transport"))
    return got


def missing_result(check: str, node: str, node_error: str = "") -> Result:
    """ERROR for a planned (node, check) that no grader gave a result for."""
    from preflight.findings import coded_result

    why = f" ({node_error})" if node_error else ""
    where = "the cluster" if node == CLUSTER else node
    return coded_result("run.result/missing", check, node, f"no result: {check} said nothing about {where}{why}",
                        [f"{check} on {where}: planned, no result graded"],
                        "report this as a preflight bug, with the report and the captures", source="engine")


def complete(results: list[Result], nodes: Sequence[str], checks: Sequence[str], cluster_checks: Sequence[str],
             node_errors: Mapping[str, str] | None = None) -> list[Result]:
    """Exactly one result per planned (node, check), whatever was lost on the way.

    Planned: every node check on every node; a cross-node check that speaks about nodes
    (cluster.versions, cluster.nccl_env: it gave a result for at least one node) on every node,
    and one that speaks about the nodes together (cluster.mtu, cluster.nodes, or any whose
    only result is on `cluster`, e.g. its internal fault) once, on `cluster`. A (node, check)
    with no result gets ERROR `run.result/missing`; a second result for the same (node, check)
    is merged into the first (the worst status kept, the other's summary in its evidence), so
    no finding is hidden and none counts twice."""
    errors = node_errors or {}
    out: list[Result] = []
    seen: dict[tuple[str, str], Result] = {}
    for r in results:
        key = (r.node, r.check)
        if key in seen:
            _merge_into(seen[key], r)
            continue
        seen[key] = r
        out.append(r)
    for cid in cluster_checks:
        on_nodes = any((n, cid) in seen for n in nodes)
        for n in (nodes if on_nodes else [CLUSTER]):
            if (n, cid) not in seen:
                out.append(missing_result(cid, n, errors.get(n, "")))
    for n in nodes:
        out.extend(missing_result(cid, n, errors.get(n, "")) for cid in checks if (n, cid) not in seen)
    return out


def _merge_into(first: Result, other: Result) -> None:
    """`other` (a second result of the same check and node) folded into `first`."""
    if other.status.rank > first.status.rank:
        first.evidence.insert(0, f"was: {first.status.value.upper()} {first.summary}")
        first.status, first.summary, first.remedy = other.status, other.summary, other.remedy or first.remedy
    else:
        first.evidence.append(f"also: {other.status.value.upper()} {other.summary}")
    codes = [*first.facts.get("codes", []), *other.facts.get("codes", [])]
    if codes:
        first.facts["codes"] = list(dict.fromkeys(codes))


def _mark_lost(out: NodeOutcome, plan: NodePlan, extra: Sequence[Probe] = ()) -> None:
    """Every planned probe (the checks' and `extra`, the cross-node checks') is present
    afterwards: what did not come back is a LOST capture whose reason is the cause (the node's
    fault, or the transport's silence), so the checks that needed it are ERROR with that cause
    instead of being graded on empty output."""
    cause = out.error or "the transport returned no capture for it"
    for probe in [*plan.probes(), *extra]:
        if probe.name not in out.captures:
            out.captures[probe.name] = Capture(probe=probe.name, argv=list(probe.commands[0]) if probe.commands else [],
                                               state=CaptureState.LOST, reason=cause, timeout=probe.timeout,
                                               source=f"probe:{probe.name}")


def _expect(progress: object, bundles: dict[str, list[Probe]], st: _Run) -> None:
    """Tell a progress display (if it wants to know) how many probes each node will send,
    which probes each check needs (`planned`: node -> check id -> probe names) and the tool
    each probe runs (`probe_tools`: probe name -> tool, as rootcause names it)."""
    expect = getattr(progress, "expect", None)
    if callable(expect):
        expect({n: len(ps) for n, ps in bundles.items()})
    planned = getattr(progress, "planned", None)
    if callable(planned):
        planned({n: {cid: [p.name for p in ps] for cid, ps in plan.per_check.items()} for n, plan in st.plans.items()})
    tools = getattr(progress, "probe_tools", None)
    if callable(tools):
        tools({p.name: rootcause.probe_tool(p.name, list(p.commands[0]) if p.commands else [])
               for ps in bundles.values() for p in ps})


def _report_failed(progress: object, outcomes: dict[str, NodeOutcome]) -> None:
    failed = getattr(progress, "node_failed", None)
    if callable(failed):
        for n, o in outcomes.items():
            if o.error:
                failed(n)




# ---- the commands' engine: configuration, planning a run, the sweep after the checks -------------


class UsageError(Exception):
    """Bad input from the operator: reported in one line, exit code 2."""


CONFIG_KEYS: dict[str, str] = {
    "profile": "a profile name or TOML file",
    "checks_dirs": "a list of folders",
    "profile_dirs": "a list of folders",
    "prometheus_textfile": "a file name",
    "disabled_checks": "a list of check ids or families",
    "check_timeouts": "a table of check id = seconds",
    "history": "a store URL, a file path or \"off\"",
    "only": "a list of check ids or families",
    "skip": "a list of check ids or families",
    "finding_status": "a table of finding code = status (pass, warn, fail, skip or error)",
    "gpu_hour_cost": "a price per GPU-hour, a number 0 or more",
    "currency": "a short currency label (\"$\", \"EUR\")",
}
ENV_PROFILE, ENV_HISTORY, ENV_ONLY, ENV_SKIP = "PREFLIGHT_PROFILE", "PREFLIGHT_HISTORY", "PREFLIGHT_ONLY", "PREFLIGHT_SKIP"


def _env(name: str) -> str | None:
    """An environment setting; unset or empty is not given."""
    value = os.environ.get(name, "").strip()
    return value or None


def _env_list(name: str) -> list[str] | None:
    value = _env(name)
    return None if value is None else [v.strip() for v in value.split(",") if v.strip()]


def _hit(check_id: str, patterns: Sequence[str]) -> bool:
    return any(check_id == p or check_id.startswith(p.rstrip(".") + ".") for p in patterns)


@dataclass
class Config:
    """Site configuration: $PREFLIGHT_CONFIG, else /etc/preflight/config.toml (optional).

    Every setting a command takes from it is resolved by one method here, with one order of
    precedence: the command-line flag, else the environment (PREFLIGHT_PROFILE,
    PREFLIGHT_HISTORY, PREFLIGHT_ONLY, PREFLIGHT_SKIP), else this file, else the built-in
    default. `disabled_checks` (a fleet kill switch) and `check_timeouts` have no flag."""

    checks_dirs: list[Path] = field(default_factory=list)
    profile_dirs: list[Path] = field(default_factory=list)
    profile: str = "auto"
    path: str = ""
    prometheus: Path | None = None  # a node_exporter textfile every run, node and prologue report goes to
    disabled_checks: list[str] = field(default_factory=list)  # ids or families never run
    check_timeouts: dict[str, float] = field(default_factory=dict)  # check id -> its probes' timeout (s)
    history: str | None = None  # results store URL, file or "off"
    only: list[str] = field(default_factory=list)
    skip: list[str] = field(default_factory=list)
    finding_status: dict[str, str] = field(default_factory=dict)  # finding code -> status (the site's policy)
    gpu_hour_cost: float | None = None  # money per GPU-hour: downtime in triage, history and the runtime
    currency: str = "$"

    def resolve_profile(self, flag: str | None) -> str:
        """The profile: --profile, else $PREFLIGHT_PROFILE, else the file's, else auto."""
        return flag or _env(ENV_PROFILE) or self.profile or "auto"

    def resolve_history(self, flag: str | None) -> str | None:
        """The results store: --history, else $PREFLIGHT_HISTORY, else the file's; None is the
        built-in default (~/.local/share/preflight/history.db)."""
        return flag or _env(ENV_HISTORY) or self.history

    def resolve_selection(self, only: Sequence[str] | None, skip: Sequence[str] | None
                          ) -> tuple[list[str], list[str]]:
        """(only, skip): the selection comes whole from one place. --only or --skip on the
        command line replace both lists below them; else $PREFLIGHT_ONLY / $PREFLIGHT_SKIP
        (comma lists; either one set replaces both of the file's); else the file's."""
        if only or skip:
            return list(only or []), list(skip or [])
        env_only, env_skip = _env_list(ENV_ONLY), _env_list(ENV_SKIP)
        if env_only is not None or env_skip is not None:
            return env_only or [], env_skip or []
        return list(self.only), list(self.skip)

    def disabled(self, check_id: str) -> bool:
        """Whether the fleet's kill switch (`disabled_checks`) covers this check."""
        return _hit(check_id, self.disabled_checks)

    def disabled_reason(self) -> str:
        return f"disabled by config ({self.path})"

    def validate_ids(self, registry: Registry, only: Sequence[str] | None = None,
                     skip: Sequence[str] | None = None) -> None:
        """`disabled_checks` and `check_timeouts` name checks the registry knows; else a
        UsageError naming the id and the file. Given the command's --only/--skip flags (empty
        lists when none), the selection is checked too (`_validate_selection`)."""
        known = set(registry.checks) | set(registry.cluster_checks)
        for cid in self.check_timeouts:
            if cid not in known:
                raise UsageError(f"config file {self.path}: check_timeouts names unknown check {cid!r}"
                                 f"{_did_you_mean(cid, known)} (see `preflight list`)")
        for pat in self.disabled_checks:
            if not registry.matches([pat]):
                raise UsageError(f"config file {self.path}: disabled_checks names unknown check {pat!r}"
                                 f"{_did_you_mean(pat, registry.known_ids())} (see `preflight list`)")
        if only is not None or skip is not None:
            self._validate_selection(registry, only, skip)

    def _validate_selection(self, registry: Registry, only: Sequence[str] | None, skip: Sequence[str] | None
                            ) -> None:
        """Every id of the selection (the flags, the environment's lists, the file's `only` and
        `skip`, even when replaced) is a check id, a family or an id another command reports;
        else a UsageError naming each unknown one, where it came from, and the closest known id."""
        in_file = f"config file {self.path}: "
        lists = [(in_file + "only", self.only), (in_file + "skip", self.skip)]
        if only or skip:
            lists += [("--only", list(only or [])), ("--skip", list(skip or []))]
        elif _env_list(ENV_ONLY) is not None or _env_list(ENV_SKIP) is not None:
            lists += [(f"${ENV_ONLY}", _env_list(ENV_ONLY) or []), (f"${ENV_SKIP}", _env_list(ENV_SKIP) or [])]
        problems = [f"{where} names {_unknown_id(registry, pat)}"
                    for where, pats in lists for pat in dict.fromkeys(pats) if not registry.matches([pat])]
        if problems:
            raise UsageError("; ".join(problems) + " (see `preflight list`)")


def _unknown_id(registry: Registry, pat: str) -> str:
    """How an id no check answers to is named: a finding code for what it is, else the closest
    known id or family."""
    check = pat.split("/", 1)[0]
    if "/" in pat and registry.matches([check]):
        return f"finding code {pat!r}, not a check: give its check {check} (or a family)"
    ids = registry.known_ids()
    families = {i.rsplit(".", k)[0] for i in ids for k in range(1, i.count(".") + 1)}
    return f"unknown check {pat!r}{_did_you_mean(pat, [*ids, *families])}"


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def load_config() -> Config:
    """The site configuration; a named file that is missing or malformed, an unknown key or a
    value of the wrong type is a UsageError naming the key and the file."""
    path = Path(os.environ.get("PREFLIGHT_CONFIG", "/etc/preflight/config.toml"))
    if not path.is_file():
        if "PREFLIGHT_CONFIG" in os.environ:
            raise UsageError(f"config file {path} (PREFLIGHT_CONFIG) does not exist")
        return Config()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except Exception as exc:
        raise UsageError(f"config file {path}: {exc}") from None
    return _config_from(data, path)


def _config_from(data: dict[str, object], path: Path) -> Config:
    for key in data:
        if key not in CONFIG_KEYS:
            raise UsageError(f"config file {path}: unknown key {key!r}{_did_you_mean(key, CONFIG_KEYS)} "
                             f"(known: {', '.join(CONFIG_KEYS)})")
    base = path.parent

    def text(key: str) -> str | None:
        value = data.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise UsageError(f"config file {path}: {key} must be {CONFIG_KEYS[key]}")
        return value if isinstance(value, str) else None

    def strings(key: str) -> list[str]:
        value = data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            raise UsageError(f"config file {path}: {key} must be {CONFIG_KEYS[key]}")
        return [v.strip() for v in value]

    prom, history = text("prometheus_textfile"), text("history")
    cost, currency = _price(data, path)
    return Config(
        checks_dirs=[base / Path(p) for p in strings("checks_dirs")],
        profile_dirs=[base / Path(p) for p in strings("profile_dirs")],
        profile=text("profile") or "auto", path=str(path),
        prometheus=base / Path(prom) if prom else None,
        disabled_checks=strings("disabled_checks"),
        check_timeouts=_timeouts(data.get("check_timeouts", {}), path),
        history=_history_target(history, base) if history else None,
        only=strings("only"), skip=strings("skip"),
        finding_status=_finding_status(data.get("finding_status", {}), path),
        gpu_hour_cost=cost, currency=currency,
    )


def _price(data: dict[str, object], path: Path) -> tuple[float | None, str]:
    """(gpu_hour_cost, currency): the price that turns downtime's GPU-hours into money."""
    from preflight.runtime.downtime import check_price

    cost, currency, problem = check_price(data.get("gpu_hour_cost"), data.get("currency"))
    if problem:
        raise UsageError(f"config file {path}: {problem}")
    return cost, currency


def _finding_status(value: object, path: Path) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise UsageError(f"config file {path}: finding_status must be {CONFIG_KEYS['finding_status']}")
    return {str(k): v for k, v in value.items()}


def _timeouts(value: object, path: Path) -> dict[str, float]:
    if not isinstance(value, dict):
        raise UsageError(f"config file {path}: check_timeouts must be {CONFIG_KEYS['check_timeouts']}")
    out: dict[str, float] = {}
    for cid, secs in value.items():
        if isinstance(secs, bool) or not isinstance(secs, (int, float)) or not 0 < secs <= 86400:
            raise UsageError(f"config file {path}: check_timeouts.{cid} = {secs!r}: give seconds, "
                             "a number over 0")
        out[cid] = float(secs)
    return out


def _history_target(value: str, base: Path) -> str:
    """A store URL or "off" as written; a file path relative to the config file's folder."""
    from preflight.history.store import OFF

    value = value.strip()
    if "://" in value or value.lower() in OFF:
        return value
    return str(base / Path(value).expanduser())


def load_registry(checks_dirs: Sequence[Path] | None, cfg: Config) -> Registry:
    """The built-in checks plus the site's (config) and the command line's check folders."""
    from preflight import policy, registry

    dirs = [*cfg.checks_dirs, *(checks_dirs or [])]
    reg = registry.load(dirs)
    tables = [d / "policy.toml" for d in dirs if (d / "policy.toml").is_file()]
    if not tables and not cfg.finding_status:
        policy.use(None)  # the built-in table
        return reg
    try:
        pol = policy.load(tables)
        if cfg.finding_status:
            pol = pol.with_overrides(cfg.finding_status, f"config file {cfg.path}")
    except policy.PolicyError as exc:
        raise UsageError(str(exc)) from None
    policy.use(pol)
    return reg


def select_nodes(hosts: str | None, partition: str | None = None, nodelist: str | None = None,
                 exclude: str | None = None) -> list[str] | None:
    """--hosts, or --partition/--nodelist through Slurm, or the allocation's nodes; None = this
    node. `exclude` (--exclude, a hostlist or @file) takes nodes out of that list afterwards."""
    from preflight import inventory, slurm

    nodes: list[str] | None
    try:
        if hosts:
            nodes = inventory.parse_hosts(hosts)
        elif partition or nodelist:
            nodes = slurm.hostnames(partition=partition, nodelist=nodelist)
        else:
            nodes = inventory.from_environment()
    except inventory.HostlistError as exc:
        raise UsageError(str(exc)) from None
    return nodes if exclude is None else exclude_nodes(nodes, exclude)


def _stderr_line(text: str) -> None:
    sys.stderr.write(text + "\n")


def exclude_nodes(nodes: list[str] | None, exclude: str, warn: Callable[[str], None] = _stderr_line) -> list[str]:
    """`nodes` without those of the `--exclude` hostlist; a usage error when the hostlist is
    malformed, when there is no node list to take them from, or when no node is left. Nodes
    it names that are not in the list are one warning line (`warn`, stderr by default): a
    typo there would otherwise leave the node meant to be excluded in the run, unsaid."""
    from preflight import inventory

    try:
        gone = inventory.parse_hosts(exclude)
    except inventory.HostlistError as exc:
        raise UsageError(f"--exclude {exclude!r}: {exc}") from None
    if nodes is None:
        raise UsageError("--exclude needs a node list: give --hosts, --partition or --nodelist, or run inside "
                         "an allocation")
    left = inventory.difference(nodes, gone)
    unknown = inventory.difference(gone, nodes)
    if unknown:
        warn(f"preflight: --exclude names {inventory.compress(unknown)}, not among the nodes checked")
    if not left:
        raise UsageError(f"--exclude {exclude!r} leaves no node of the {len(nodes)} selected "
                         f"({inventory.compress(nodes)})")
    return left


@dataclass
class TransportOptions:
    """How to reach nodes: the ssh and srun settings a command line gives."""

    ssh_config: Path | None = None
    accept_new: bool = False
    concurrency: int = 64
    connect_timeout: float | None = None  # None: each host's ssh_config ConnectTimeout, else 10 s
    command_timeout: float = 60.0
    deadline: float | None = None
    partition: str | None = None
    ssh_handshakes: int = 8  # SSH handshakes at once per server address (under sshd's MaxStartups)

    def check(self) -> None:
        if self.ssh_config is not None and not self.ssh_config.is_file():
            raise UsageError(f"--ssh-config {self.ssh_config}: no such file")


def transport_kind(kind: str, nodes: Sequence[str] | None, in_allocation: bool = True) -> str:
    """The transport kind for `kind` (auto: the one rule of preflight.transport.choose_kind)."""
    from preflight.transport import choose_kind

    try:
        return choose_kind(kind, nodes, in_allocation)
    except ValueError:
        raise UsageError(f"--transport {kind!r}: use auto, local, ssh or srun") from None


def make_transport(kind: str, nodes: Sequence[str], o: TransportOptions) -> Transport:
    """A transport of `kind` (auto resolved) for `nodes`."""
    kind = transport_kind(kind, nodes)
    if kind == "ssh":
        from preflight.transport.ssh import SSHTransport

        return SSHTransport(ssh_config=o.ssh_config, concurrency=o.concurrency, connect_timeout=o.connect_timeout,
                            command_timeout=o.command_timeout, deadline=o.deadline,
                            accept_new_host_keys=o.accept_new, handshakes_per_server=o.ssh_handshakes)
    if kind == "srun":
        from preflight.transport.srun import SrunTransport

        return SrunTransport(deadline=o.deadline, partition=o.partition)
    from preflight.transport.local import LocalTransport

    return LocalTransport(deadline=o.deadline)


@dataclass
class CheckRequest:
    """A run of the checks as the operator asked for it (`preflight run` / `preflight node`)."""

    command: str = "run"
    node_only: bool = False
    profile: str | None = None  # None: not given (Config.resolve_profile decides)
    checks_dirs: list[Path] = field(default_factory=list)
    only: list[str] = field(default_factory=list)  # empty: not given (the environment or config may set it)
    skip: list[str] = field(default_factory=list)
    xid_since: datetime | None = None
    probe_timeout: float = DEFAULT_TIMEOUT
    peers: list[str] = field(default_factory=list)
    nodes: list[str] | None = None  # None: this node
    transport: str = "auto"
    transport_options: TransportOptions = field(default_factory=TransportOptions)
    mtu_all_pairs: bool = False
    expect_nodes: int | None = None
    warn_as_fail: bool = False


@dataclass
class RunPlan:
    """Everything `run` needs, decided before any node is touched."""

    registry: Registry
    checks: list[Check]
    nodes: list[str]
    transport: Transport
    options: Options
    profile: str
    profile_dirs: tuple[Path, ...]
    peers: Callable[[list[str]], dict[str, list[str]]] | None = None
    addresses: dict[str, str] = field(default_factory=dict)  # peer address -> node
    cluster_checks: list[ClusterCheck] = field(default_factory=list)
    until: float | None = None  # time.monotonic() by which the collection ends (--deadline), None: unbounded
    disabled: list[str] = field(default_factory=list)  # selected, but switched off by the site config
    disabled_reason: str = ""


def effective(req: CheckRequest, cfg: Config) -> CheckRequest:
    """The request with its profile and --only/--skip lists resolved: the flag, else the
    environment, else the site config, else the built-in default."""
    only, skip = cfg.resolve_selection(req.only, req.skip)
    return replace(req, profile=cfg.resolve_profile(req.profile), only=only, skip=skip)


def split_disabled(checks: Sequence[Check], cfg: Config) -> tuple[list[Check], list[str]]:
    """(the checks to run, the ids of those the site config's `disabled_checks` switches off).
    The kill switch wins over --only: a fleet-wide decision is not undone by one command line."""
    return [c for c in checks if not cfg.disabled(c.id)], [c.id for c in checks if cfg.disabled(c.id)]


def disabled_results(check_ids: Sequence[str], nodes: Sequence[str], reason: str,
                     cross_node: Iterable[str] = ()) -> list[Result]:
    """One SKIP per node and disabled check, one for the cluster when the check is one of
    `cross_node` (a comparison across the nodes): switched off checks show in every report."""
    cross = set(cross_node)
    return [Result(check=cid, node=n, status=Status.SKIP, summary=reason,
                   evidence=["disabled_checks in the site config: not run on any node"],
                   facts={"reason": "disabled"}, source="config")
            for cid in check_ids for n in ([CLUSTER] if cid in cross else nodes)]


def run_end(o: TransportOptions, start: float | None = None) -> float | None:
    """The time.monotonic() at which a run with these options must be done (--deadline
    seconds from `start`, default now); None without --deadline. A deadline that is not a
    positive number of seconds is a UsageError."""
    if o.deadline is None:
        return None
    if not o.deadline > 0 or o.deadline == float("inf"):
        raise UsageError(f"--deadline {o.deadline:g}: give a positive number of seconds")
    return (time.monotonic() if start is None else start) + float(o.deadline)


def _wanted(check_id: str, only: Sequence[str]) -> bool:
    """`--only` names a cross-node check by its id or family; `--only net.mtu` also selects
    cluster.mtu (the path matrix is the MTU check's cross-node half)."""
    if any(check_id == p or check_id.startswith(p.rstrip(".") + ".") for p in only):
        return True
    halves = {"cluster.mtu": "net.mtu", "cluster.clock": "node.clock"}  # a node check's cross-node half
    return check_id in halves and any(halves[check_id].startswith(p) for p in only)


def _nodes_and_transport(req: CheckRequest) -> tuple[list[str], Transport, bool]:
    """The nodes to run on and the transport to reach them; True when they are remote."""
    from preflight.transport.local import LocalTransport, local_node_name

    nodes, kind = req.nodes, req.transport
    if not nodes:
        if kind not in ("auto", "local"):
            raise UsageError(f"--transport {kind} needs nodes (--hosts, --partition/--nodelist or an allocation)")
        return [local_node_name()], LocalTransport(deadline=req.transport_options.deadline), False
    if kind == "local" and len(nodes) > 1:
        raise UsageError("--transport local runs on this node only; use ssh or srun for several hosts")
    from preflight.sweep.run import is_this_node

    chosen = transport_kind(kind, nodes)
    if kind == "auto" and chosen == "ssh" and is_this_node(nodes):
        chosen = "local"  # --hosts naming this machine alone: never SSH to ourselves
    tr = make_transport(chosen, nodes, req.transport_options)
    return nodes, tr, not isinstance(tr, LocalTransport)


def _peer_ring(nodes: list[str], transport: Transport, all_pairs: bool
               ) -> tuple[Callable[[list[str]], dict[str, list[str]]], dict[str, str]]:
    """The MTU path pings: each node's peers (ring neighbours, or every other node), drawn over
    the nodes that answered, by the address its peers reach it at; and address -> node."""
    from preflight import inventory

    resolved = transport.resolve_addresses(nodes)
    addr = {n: resolved.get(n) or n for n in nodes}

    def peers(answered: list[str]) -> dict[str, list[str]]:
        pairs = inventory.all_pairs(answered) if all_pairs else inventory.ring_peers(answered)
        return {n: [addr[p] for p in ps] for n, ps in pairs.items()}

    return peers, {a: n for n, a in addr.items()}


def plan_run(req: CheckRequest, cfg: Config) -> RunPlan:
    """Pick the checks, the nodes and the transport, the peer ring and the cross-node checks.
    Raises UsageError for what cannot run (no check selected, a transport without nodes)."""
    until = run_end(req.transport_options)  # the deadline counts from here: address look-ups included
    flags = req.only, req.skip
    req = effective(req, cfg)
    reg = load_registry(req.checks_dirs, cfg)
    cfg.validate_ids(reg, *flags)
    checks, disabled = split_disabled(select(reg, req.only, req.skip, node_only=req.node_only), cfg)
    if not checks and disabled:
        raise UsageError(f"every check selected is {cfg.disabled_reason()}: {', '.join(disabled)}")
    if not checks:
        why = reg.not_probed(req.only)
        raise UsageError("no check selected" + (f": {why}" if why else "") + " (see `preflight list`)")
    opts = Options(peers=list(req.peers), xid_since=req.xid_since, probe_timeout=req.probe_timeout)
    if req.expect_nodes:
        opts.extra["expect_nodes"] = req.expect_nodes
    if cfg.check_timeouts:
        opts.extra[CHECK_TIMEOUTS] = dict(cfg.check_timeouts)
    nodes, tr, remote = _nodes_and_transport(req)
    plan = RunPlan(registry=reg, checks=checks, nodes=nodes, transport=tr, options=opts,
                   profile=cfg.resolve_profile(req.profile), profile_dirs=tuple(cfg.profile_dirs),
                   disabled=disabled, disabled_reason=cfg.disabled_reason(), until=until)
    if remote and len(nodes) > 1:
        plan.peers, plan.addresses = _peer_ring(nodes, tr, req.mtu_all_pairs)
        plan.cluster_checks = list(reg.cluster_checks.values()) if not req.node_only else []
    elif req.expect_nodes:
        plan.cluster_checks = [c for c in reg.cluster_checks.values() if c.id == "cluster.nodes"]
    if not req.expect_nodes:  # the node count is graded only against an expected count
        plan.cluster_checks = [c for c in plan.cluster_checks if c.id != "cluster.nodes"]
    if req.only:
        plan.cluster_checks = [c for c in plan.cluster_checks if _wanted(c.id, req.only)]
    if req.skip:  # `--skip node.clock` skips its cross-node half too
        plan.cluster_checks = [c for c in plan.cluster_checks if not _wanted(c.id, req.skip)]
    plan.disabled += [c.id for c in plan.cluster_checks if cfg.disabled(c.id)]
    plan.cluster_checks = [c for c in plan.cluster_checks if not cfg.disabled(c.id)]
    return plan


def execute(plan: RunPlan, command: str, progress: ProgressFn | None = None, warn_as_fail: bool = False) -> Report:
    """Run a plan and build its report; the transport is closed whatever happens."""
    from preflight.report.base import Report

    start = time.monotonic()
    try:
        results, used = run(plan.registry, plan.checks, plan.nodes, plan.transport, profile_name=plan.profile,
                            options=plan.options, extra_profile_dirs=plan.profile_dirs, progress=progress,
                            peers=plan.peers, cluster_checks=plan.cluster_checks, addresses=plan.addresses,
                            until=plan.until)
    finally:
        plan.transport.close()
    results += disabled_results(plan.disabled, plan.nodes, plan.disabled_reason, plan.registry.cluster_checks)
    return mark_interrupted(Report.build(command, results, warn_as_fail, profiles={n: p.name for n, p in used.items()},
                                         duration_s=time.monotonic() - start, nodes=plan.nodes))


def mark_interrupted(report: Report) -> Report:
    """The report with the verdict INTERRUPTED when a signal ended the command's run."""
    from preflight.grading import interrupted

    signum = interrupt.signum()
    if signum:
        report.verdict = interrupted(report.verdict, signum)
    return report


def check_nodes(req: CheckRequest, cfg: Config, progress: ProgressFn | None = None) -> Report:
    """`preflight node` (and the checks of `preflight run`): plan, collect, grade, report."""
    return execute(plan_run(req, cfg), req.command, progress, req.warn_as_fail)


@dataclass
class SweepRequest:
    """The collective sweep after the checks (`preflight run --sweep-*`)."""

    enabled: bool = True
    forced: bool = False  # --sweep-only: run it whatever the checks say (there are none)
    nproc: int = 0  # ranks per node; 0: one per GPU found
    max_bytes: int | None = None
    deadline: float = 600.0
    python: str = ""
    backend: str = "auto"
    profile: str | None = None  # default: the checks' profile

    def check(self) -> None:
        """Bad sweep options are usage errors before anything runs."""
        from preflight.sweep.launch import LaunchError, check_python

        if self.backend not in ("auto", "nccl", "gloo"):
            raise UsageError(f"--sweep-backend {self.backend!r}: use auto, nccl or gloo")
        if self.python:
            try:
                check_python(self.python)
            except LaunchError as exc:
                raise UsageError(f"--sweep-python: {exc}") from None


def _sweep_skipped(why: str) -> list[Result]:
    return [Result(check="nccl.allreduce", node=CLUSTER, status=Status.SKIP, summary=why, source="sweep")]


def _ranks_per_node(results: Sequence[Result], asked: int) -> int:
    """--sweep-nproc, else the fewest GPUs any node's gpu.inventory found (0: none found)."""
    if asked:
        return asked
    counts = [result_facts.gpu_count(r) or 0 for r in results if r.check == "gpu.inventory"]
    return min(counts) if counts else 0


def sweep_after_checks(results: Sequence[Result], nodes: Sequence[str] | None, req: CheckRequest,
                       sweep: SweepRequest, cfg: Config, until: float | None = None) -> list[Result]:
    """The collective sweep, once the node checks pass (or with --sweep-only).

    This node alone (no --hosts, --transport local, or a node list that is only this machine's
    name, as in a one-node allocation run on the node) is swept locally with one rank per GPU
    found; never over SSH to itself. Several nodes: one agent per node over ssh, or srun in an
    allocation. A python without torch makes the sweep SKIP, naming --sweep-python. The sweep
    is not started once the run's --deadline (`until`) has passed: it is ERROR saying so."""
    from preflight.grading import NO_GO, decide
    from preflight.sweep.run import SweepOptions, is_this_node, run_sweep

    if not sweep.forced and decide(results).verdict == NO_GO:
        return _sweep_skipped("node checks failed: collective sweep not run (fix or drain the named nodes first)")
    if until is not None and time.monotonic() >= until:
        deadline = req.transport_options.deadline
        return [Result(check="nccl.allreduce", node=CLUSTER, status=Status.ERROR, source="sweep",
                       summary=f"collective sweep not run: the {deadline:g} s --deadline of the run had passed",
                       evidence=[f"--deadline {deadline:g}: passed before the sweep could start"],
                       remedy="give --deadline room for the checks and the sweep (the sweep itself is bounded "
                              "by --sweep-deadline)")]
    nproc = _ranks_per_node(results, sweep.nproc)
    sweep.check()
    targets = list(nodes or [])
    local = req.transport == "local" or not targets or is_this_node(targets)
    if local and nproc < 2:
        return _sweep_skipped(f"{'one rank' if nproc == 1 else 'no GPU count'} on this node: nothing to all-reduce "
                              "with (give --sweep-nproc N, or --hosts for several nodes)")
    o = req.transport_options
    opts = SweepOptions(nproc_per_node=max(nproc, 1), max_bytes=sweep.max_bytes, deadline_s=sweep.deadline,
                        profile=sweep.profile or cfg.resolve_profile(req.profile), profile_dirs=tuple(cfg.profile_dirs),
                        connect_timeout=o.connect_timeout, accept_new=o.accept_new,
                        partition=o.partition, python=sweep.python, backend=sweep.backend)
    if local:
        from preflight.transport.local import local_node_name

        return run_sweep([local_node_name()], "local", None, opts)
    return run_sweep(targets, transport_kind(req.transport, targets), o.ssh_config, opts)


def run_checks(req: CheckRequest, sweep: SweepRequest, cfg: Config, progress: ProgressFn | None = None) -> Report:
    """`preflight run`: the node and cross-node checks, then (when they pass) the collective
    sweep, in one report."""
    from preflight.report.base import Report

    # the selection named as given (a flag, a variable, the file) before anything runs, --sweep-only too
    cfg.validate_ids(load_registry(req.checks_dirs, cfg), req.only, req.skip)
    req = effective(req, cfg)
    req.transport_options.check()
    if not sweep.enabled and sweep.forced:
        raise UsageError("--no-sweep and --sweep-only exclude each other")
    if sweep.forced and cfg.disabled("nccl.allreduce"):
        raise UsageError(f"--sweep-only: the collective sweep (nccl.allreduce) is {cfg.disabled_reason()}")
    sweep.check()
    if sweep.enabled and sweep.profile:
        show_profile(sweep.profile, cfg)  # a broken --sweep-profile stops the run before any node is touched
    start = time.monotonic()
    until = run_end(req.transport_options, start)
    results: list[Result] = []
    profiles_used: dict[str, str] = {}
    nodes = req.nodes
    if not sweep.forced:
        checked = check_nodes(replace(req, warn_as_fail=False), cfg, progress)
        results, profiles_used, nodes = list(checked.results), checked.profiles, checked.nodes
    if sweep.enabled and not req.only and cfg.disabled("nccl.allreduce"):
        results.extend(_sweep_skipped(f"collective sweep (nccl.allreduce) {cfg.disabled_reason()}"))
    elif sweep.enabled and not req.only and interrupt.signum():
        results.extend(_sweep_skipped(f"{interrupt.WHY}: collective sweep not run"))
    elif sweep.enabled and not req.only:
        try:
            with interrupt.armed():
                results.extend(sweep_after_checks(results, nodes, req, sweep, cfg, until))
        except interrupt.Interrupted:
            results.extend(_sweep_skipped(f"collective sweep {interrupt.WHY}"))
            answered = [n for n in nodes or [] if is_node(n)]
            interrupt.note(answered, answered, [])
    return mark_interrupted(Report.build(req.command, results, req.warn_as_fail, profiles_used,
                                         time.monotonic() - start, nodes or sorted({r.node for r in results})))


def check_table(checks_dirs: Sequence[Path], cfg: Config) -> list[dict[str, object]]:
    """`preflight list`: one row per registered check and cross-node check."""
    reg = load_registry(checks_dirs, cfg)
    rows: list[dict[str, object]] = []
    for c in sorted(reg.checks.values(), key=lambda c: c.id):
        probes = "dynamic" if callable(c.probes) else ", ".join(c.static_probe_names()) or "-"
        where = "node" if c.node_local else ("run" if c.in_run else "analyze")
        rows.append({"id": c.id, "title": c.title, "probes": probes, "profile_keys": sorted(c.profile_keys),
                     "inputs": list(c.inputs), "scope": where, "catches": c.catches, "origin": c.origin})
    for cc in sorted(reg.cluster_checks.values(), key=lambda c: c.id):
        rows.append({"id": cc.id, "title": cc.title, "probes": ", ".join(p.name for p in cc.probes) or "-",
                     "profile_keys": [], "formats": [], "scope": "cluster", "catches": cc.catches,
                     "origin": cc.origin})
    rows.extend(reg.emitted_rows())  # sweep, triage, runtime and analyze results: listed, not node probes
    return rows


def show_profile(name: str, cfg: Config) -> Profile:
    """One profile, loaded and validated against every registered check's keys."""
    p = profiles.load(name, tuple(cfg.profile_dirs))
    profiles.validate(p, load_registry(None, cfg).profile_schema())
    return p


def profile_list(cfg: Config) -> list[tuple[str, str, Path]]:
    """(name, description, file) of every profile; a broken one says why in its description."""
    dirs = tuple(cfg.profile_dirs)
    out = []
    for name, path in profiles.available(dirs).items():
        try:
            desc = profiles.load(name, dirs).description
        except profiles.ProfileError as exc:
            desc = f"(broken: {exc})"
        out.append((name, desc, path))
    return out


@dataclass
class SweepReport:
    """`preflight sweep`: the report and the sweep's own pages (sweep.md, the busbw chart)."""

    report: Report
    run: SweepRun

    def write(self, report: Report, folder: Path) -> dict[str, Path]:
        from preflight.report.files import write_all
        from preflight.sweep import report as pages

        written = write_all(report, folder)
        written.update(pages.write(folder, self.run.outcome, self.run.results, self.run.profile, written))
        return written

    def console(self, report: Report, per_node: bool = False) -> None:
        from preflight.report.console import render
        from preflight.sweep import report as pages

        render(report, per_node=per_node)
        if self.run.outcome.rows:
            sys.stdout.write(pages.markdown(self.run.outcome, self.run.results, self.run.profile, None))

    def no_torch(self) -> str | None:
        """Asked for a sweep and none could run for want of torch: the message (not a GO)."""
        r = next((r for r in self.run.results if r.facts.get("reason") == "no-torch"), None)
        return f"{r.summary}; {r.remedy}" if r is not None else None


def _allocation_nodes() -> list[str]:
    from preflight import inventory

    try:
        return inventory.from_environment() or []
    except inventory.HostlistError as exc:
        raise UsageError(str(exc)) from None


def sweep_launch(kind: str, nodes: list[str], nproc: int | None, nproc_per_node: int) -> tuple[str, list[str], int]:
    """(transport kind, nodes, ranks per node) of a sweep: --nproc is a local launch; auto is
    srun in an allocation without --hosts, ssh with --hosts, else local."""
    if nproc is not None:
        if nodes:
            raise UsageError("--nproc runs on this machine; use --nproc-per-node with --hosts")
        return "local", nodes, nproc
    kind = transport_kind(kind, nodes, in_allocation=not nodes)  # --hosts inside an allocation: ssh
    if kind == "srun" and not nodes:
        nodes = _allocation_nodes()
        if not nodes:
            raise UsageError("--transport srun needs an allocation (SLURM_JOB_NODELIST) or --hosts")
    if kind == "ssh" and not nodes:
        raise UsageError("--transport ssh needs --hosts")
    return kind, nodes, nproc_per_node


def sweep_command(nodes: list[str], kind: str, nproc: int | None, ssh_config: Path | None, options: SweepOptions,
                  cfg: Config, warn_as_fail: bool = False) -> SweepReport:
    """`preflight sweep`: launch the collective sweep where asked, grade it, report it."""
    from preflight.report.base import Report
    from preflight.sweep.launch import LaunchError
    from preflight.sweep.run import sweep
    from preflight.sweep.spec import SpecError

    kind, nodes, options.nproc_per_node = sweep_launch(kind, nodes, nproc, options.nproc_per_node)
    if ssh_config is not None and not ssh_config.is_file():
        raise UsageError(f"--ssh-config {ssh_config}: no such file")
    if cfg.disabled("nccl.allreduce"):
        raise UsageError(f"the collective sweep (nccl.allreduce) is {cfg.disabled_reason()}")
    options.profile = cfg.resolve_profile(options.profile)
    if options.profile != "auto":
        show_profile(options.profile, cfg)  # loaded and validated before anything is launched
    options.profile_dirs = tuple(cfg.profile_dirs)
    start = time.monotonic()
    try:
        run = sweep(nodes, kind, ssh_config, options)
    except (LaunchError, SpecError) as exc:
        raise UsageError(str(exc)) from None
    report = Report.build("sweep", run.results, warn_as_fail, profiles=dict.fromkeys(run.outcome.nodes,
                                                                                      run.profile.name),
                          duration_s=time.monotonic() - start, nodes=run.outcome.nodes)
    return SweepReport(report=report, run=run)
