"""Plan, collect and grade: the run and node commands' engine.

plan (which probes each node needs) -> transport (captures) -> grade (results). Grading is
`grading.grade_node`, the same function analyze, triage and the sweep use: it never raises (a
probe that timed out is ERROR naming the probe, a missing tool is SKIP or FAIL where the profile
requires it, a fault inside a parser or grader is ERROR with the exception's message).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from preflight import profile as profiles
from preflight.grading import FactStore, grade_cluster, grade_node
from preflight.model import Capture, CaptureState, Result, Status
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
from preflight.transport.base import NodeOutcome, ProgressFn, Transport

# Hooks set by the GPU and NCCL checks: a node's facts -> (gpu model, gpu count), for profile
# auto-detection.
ProfileHint = Callable[[FactSource], "tuple[str | None, int | None]"]
_profile_hints: list[ProfileHint] = []
DETECT_PROBES: list[Probe] = []


def register_profile_hint(fn: ProfileHint, probes: Sequence[Probe] = ()) -> None:
    _profile_hints.append(fn)
    DETECT_PROBES.extend(probes)


def detect_profile_name(store: FactSource, extra_dirs: tuple = ()) -> str:
    for hint in _profile_hints:
        try:
            model, count = hint(store)
        except Exception:
            continue
        if model:
            return profiles.autodetect(model, count, extra_dirs)
    return "generic"


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

    def probes(self) -> list[Probe]:
        seen: dict[str, Probe] = {}
        for ps in self.per_check.values():
            for p in ps:
                seen.setdefault(p.name, p)
        return list(seen.values())


def plan_node(checks: Iterable[Check], node: str, profile: Profile, options: Options) -> NodePlan:
    """The probes each check needs on `node`. Probes that keep the default timeout take the
    run's `--probe-timeout` instead."""
    ctx = PlanContext(node=node, profile=profile, options=options)
    plan = NodePlan(node=node)
    for c in checks:
        try:
            probes = c.probes_for(ctx)
        except Exception:
            probes = []
        if options.probe_timeout != DEFAULT_TIMEOUT:
            probes = [replace(p, timeout=options.probe_timeout) if p.timeout == DEFAULT_TIMEOUT else p
                      for p in probes]
        plan.per_check[c.id] = probes
    return plan


def node_error_results(outcome: NodeOutcome, checks: Iterable[Check]) -> list[Result]:
    """A node that could not be reached: every check is ERROR for that node, with the reason."""
    return [Result(check=c.id, node=outcome.node, status=Status.ERROR,
                   summary=f"node not checked: {outcome.error}", evidence=[outcome.error],
                   remedy=f"make {outcome.node} reachable, or drain it")
            for c in checks]


def run(
    registry: Registry,
    checks: list[Check],
    nodes: list[str],
    transport: Transport,
    profile_name: str = "auto",
    options: Options | None = None,
    extra_profile_dirs: tuple = (),
    progress: ProgressFn | None = None,
    peers: dict[str, list[str]] | Callable[[list[str]], dict[str, list[str]]] | None = None,
    cluster_checks: list[ClusterCheck] | None = None,
    addresses: dict[str, str] | None = None,
) -> tuple[list[Result], dict[str, Profile]]:
    """Collect and grade `checks` on `nodes`, then the cross-node checks.

    `peers` gives each node the peers it pings (MTU path), or is a function of the nodes that
    answered phase 1 (so an unreachable node is left out of the ring); `addresses` maps a peer
    address back to its node name. Returns the results and the profile used per node."""
    options = options or Options()
    peer_fn = peers if callable(peers) else None
    peer_map: dict[str, list[str]] = {} if callable(peers) else dict(peers or {})
    cluster_checks = [c for c in (cluster_checks or []) if len(nodes) >= c.min_nodes]
    node_opts = {n: replace(options, peers=list(peer_map.get(n, options.peers))) for n in nodes}
    schema = registry.profile_schema()
    fixed: Profile | None = None
    if profile_name != "auto":
        fixed = profiles.load(profile_name, extra_profile_dirs)
        profiles.validate(fixed, schema)
    # Phase 1: the probes every check declares statically (plus the profile-detection probe).
    generic = fixed or profiles.load("generic", extra_profile_dirs)
    plans = {n: plan_node([c for c in checks if not callable(c.probes)], n, generic, node_opts[n]) for n in nodes}
    bundles: dict[str, list[Probe]] = {}
    for n in nodes:
        planned = plans[n].probes() + [p for cc in cluster_checks for p in cc.probes]
        names: set[str] = set()
        unique = []
        for p in planned:
            if p.name not in names:
                names.add(p.name)
                unique.append(p)
        bundles[n] = unique + ([] if fixed else [p for p in DETECT_PROBES if p.name not in names])
    _expect(progress, bundles)
    outcomes = transport.collect(bundles, progress)
    _report_failed(progress, outcomes)
    if peer_fn is not None:
        # a node that sent anything back is in the ring (a stalled one is what the pings must find)
        answered = [n for n in nodes if n in outcomes and outcomes[n].captures]
        peer_map = peer_fn(answered)
        for n in nodes:
            node_opts[n].peers = list(peer_map.get(n, []))
    used: dict[str, Profile] = {}
    results: list[Result] = []
    dynamic = [c for c in checks if callable(c.probes)]
    phase2: dict[str, list[Probe]] = {}
    for n in nodes:
        out = outcomes.setdefault(n, NodeOutcome(node=n, error="no result from transport"))
        if fixed is not None:
            used[n] = fixed
        else:
            hint_store = FactStore(registry, captures=out.captures)
            used[n] = profiles.load(detect_profile_name(hint_store, extra_profile_dirs), extra_profile_dirs)
            profiles.validate(used[n], schema)
        if dynamic and not out.error:
            dplan = plan_node(dynamic, n, used[n], node_opts[n])
            plans[n].per_check.update(dplan.per_check)
            phase2[n] = [p for p in dplan.probes() if p.name not in out.captures]  # never run a probe twice
    # Phase 2: probes that depend on the profile or the peers (e.g. MTU pings).
    if any(phase2.values()):
        _expect(progress, {n: ps for n, ps in phase2.items() if ps})
        more = transport.collect({n: ps for n, ps in phase2.items() if ps}, progress)
        _report_failed(progress, more)
        for n, o in more.items():
            outcomes[n].captures.update(o.captures)
            if o.error and not outcomes[n].error:
                outcomes[n].error = o.error
                outcomes[n].detail = o.detail
    stores: dict[str, FactStore] = {}
    for n in nodes:
        out = outcomes[n]
        if out.error and not out.captures:
            stores[n] = FactStore(registry, captures=out.captures)
            results.extend(node_error_results(out, checks))
            continue
        if out.error and dynamic:  # phase 2 was not sent to a node whose connection failed
            dplan = plan_node(dynamic, n, used[n], node_opts[n])
            for cid, probes in dplan.per_check.items():
                plans[n].per_check.setdefault(cid, probes)
        _mark_lost(out, plans[n])
        stores[n] = FactStore(registry, captures=out.captures)
        ran = {c.id: [pr.name for pr in plans[n].per_check.get(c.id, [])] for c in checks}
        got = grade_node(checks, n, stores[n], used[n], node_opts[n], ran)
        if out.error:  # partial captures: say why the rest is missing
            for r in got:
                if r.status in (Status.SKIP, Status.ERROR):
                    r.evidence.append(f"node fault: {out.error}")
        results.extend(got)
    if cluster_checks:
        results = grade_cluster(cluster_checks, nodes, stores, results, used, options, peer_map, addresses or {},
                                node_errors={n: outcomes[n].error for n in nodes},
                                node_detail={n: dict(outcomes[n].detail) for n in nodes})
    return results, used


def _mark_lost(out: NodeOutcome, plan: NodePlan) -> None:
    """Every planned probe is present afterwards: what did not come back is a LOST capture
    whose reason is the cause (the node's fault, or the transport's silence), so the checks
    that needed it are ERROR with that cause instead of being graded on empty output."""
    cause = out.error or "the transport returned no capture for it"
    for probe in plan.probes():
        if probe.name not in out.captures:
            out.captures[probe.name] = Capture(probe=probe.name, argv=list(probe.commands[0]) if probe.commands else [],
                                               state=CaptureState.LOST, reason=cause, timeout=probe.timeout,
                                               source=f"probe:{probe.name}")


def _expect(progress: object, bundles: dict[str, list[Probe]]) -> None:
    """Tell a progress display (if it wants to know) how many probes each node will send."""
    expect = getattr(progress, "expect", None)
    if callable(expect):
        expect({n: len(ps) for n, ps in bundles.items()})


def _report_failed(progress: object, outcomes: dict[str, NodeOutcome]) -> None:
    failed = getattr(progress, "node_failed", None)
    if callable(failed):
        for n, o in outcomes.items():
            if o.error:
                failed(n)


