"""Grading: the one function that grades a node's captures, the go/no-go verdict, exit codes.

`grade_node` is where run, analyze, triage and the sweep meet: captures (or framed documents,
or measured facts) go in, each probe's output is parsed once, every check's grader reads the
facts with the node's profile, and results come out. `decide` turns results into GO / NO-GO.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from preflight.framing import Doc, normalise
from preflight.model import CLUSTER, Capture, CaptureState, Result, Status, real_nodes
from preflight.profile import Profile
from preflight.registry import (
    Check,
    CheckContext,
    ClusterCheck,
    ClusterContext,
    FactSource,
    Input,
    Options,
    Registry,
)

GO = "GO"
NO_GO = "NO-GO"
NO_EVIDENCE = "NO-EVIDENCE"  # nothing was graded: every result is SKIP (or there is none)
INTERRUPTED = "INTERRUPTED"  # a signal (SIGINT, SIGTERM) ended the run: what finished is reported, not GO

EXIT_GO = 0
EXIT_NO_GO = 1
EXIT_USAGE = 2  # could not run: bad arguments, bad profile, broken site check
EXIT_NO_EVIDENCE = 3  # nothing graded: not GO, not NO-GO (a file nothing recognises, every check skipped)
EXIT_SIGNAL_BASE = 128  # interrupted: 128 + the signal (130 for SIGINT, 143 for SIGTERM), as a shell says it

BLOCKING = (Status.FAIL, Status.ERROR)


@dataclass
class Verdict:
    verdict: str
    counts: dict[str, int] = field(default_factory=dict)
    blocking: list[Result] = field(default_factory=list)  # the results that made it NO-GO
    bad_nodes: list[str] = field(default_factory=list)
    signal: int = 0  # INTERRUPTED: the signal that ended the run

    @property
    def exit_code(self) -> int:
        if self.verdict == INTERRUPTED:
            return EXIT_SIGNAL_BASE + self.signal
        return {GO: EXIT_GO, NO_EVIDENCE: EXIT_NO_EVIDENCE}.get(self.verdict, EXIT_NO_GO)


def interrupted(verdict: Verdict, signum: int) -> Verdict:
    """The verdict of a run that signal `signum` ended: INTERRUPTED, whatever was found. The
    results the interruption itself made ERROR (facts `interrupted`) block nothing and name no
    bad node: a node that was cut off is not known to be bad; a FAIL found before stays."""
    blocking = [r for r in verdict.blocking if not r.facts.get("interrupted")]
    return Verdict(verdict=INTERRUPTED, counts=dict(verdict.counts), blocking=blocking,
                   bad_nodes=real_nodes(r.node for r in blocking), signal=signum)


def decide(results: Iterable[Result], warn_as_fail: bool = False) -> Verdict:
    """NO-GO when a node has a FAIL or ERROR (or a WARN, with warn_as_fail); else GO when
    something was graded (a PASS or a WARN), else NO-EVIDENCE: absence of evidence is not GO."""
    results = list(results)
    blocking_statuses = BLOCKING + ((Status.WARN,) if warn_as_fail else ())
    blocking = [r for r in results if r.status in blocking_statuses]
    counts = Counter(r.status.value for r in results)
    graded = any(r.status in (Status.PASS, Status.WARN) for r in results)
    return Verdict(
        verdict=NO_GO if blocking else GO if graded else NO_EVIDENCE,
        counts={s.value: counts.get(s.value, 0) for s in Status},
        blocking=sorted(blocking, key=lambda r: (-r.status.rank, r.node, r.check)),
        bad_nodes=real_nodes(r.node for r in blocking),
    )


def ordered(results: Iterable[Result]) -> list[Result]:
    """Failures first, then by node and check: the order every report uses."""
    return sorted(results, key=lambda r: (-r.status.rank, r.node, r.check))


# ---------------------------------------------------------------------------------------------
# Grading a node: captures -> framing -> parsers -> facts -> graders -> results


class FactStore(FactSource):
    """One node's inputs and their facts, parsed on first use and kept.

    An input is a probe's capture (run, triage), one or more framed documents (analyze: a file
    or the part of a paste under one prompt), or facts given directly (the sweep's measured
    rows). Text is framed (`preflight.framing`) and handed to the parser registered for the
    probe; a probe without a parser gets its framed document as facts."""

    def __init__(self, registry: Registry, captures: Mapping[str, Capture] | None = None,
                 docs: Mapping[str, Sequence[Doc]] | None = None, facts: Mapping[str, Any] | None = None,
                 inputs: Mapping[str, Input] | None = None) -> None:
        self.registry = registry
        self.captures: dict[str, Capture] = dict(captures or {})
        self.docs: dict[str, list[Doc]] = {k: list(v) for k, v in (docs or {}).items()}
        self._facts: dict[str, Any] = dict(facts or {})
        self._inputs: dict[str, Input] = dict(inputs or {})
        for name in list(self.captures) + list(self.docs) + list(self._facts):
            if name not in self._inputs:
                self._inputs[name] = self._make_input(name)

    def with_captures(self, captures: Mapping[str, Capture]) -> FactStore:
        """A store of these captures that keeps what this one parsed from the very same
        captures (a node's phase-1 listings, parsed to detect its profile, are not parsed again
        after phase 2 added its captures)."""
        same = [k for k, cap in captures.items() if self.captures.get(k) is cap and k in self._facts]
        return FactStore(self.registry, captures=captures, facts={k: self._facts[k] for k in same})

    def _make_input(self, name: str) -> Input:
        cap = self.captures.get(name)
        docs = self.docs.get(name, [])
        command = " ; ".join(dict.fromkeys(d.command for d in docs if d.command))
        filt = tuple(dict.fromkeys(p for d in docs for p in d.filter))
        excerpt = any(d.excerpt or d.filter for d in docs)
        if cap is not None:
            return Input(probe=name, argv=tuple(cap.argv), state=cap.state, rc=cap.rc, truncated=cap.truncated,
                         timeout=cap.timeout, reason=cap.reason, source=cap.source or f"probe:{name}",
                         command=command or " ".join(cap.argv), excerpt=excerpt, filter=filt)
        source = ", ".join(dict.fromkeys(d.origin for d in docs if d.origin))
        return Input(probe=name, argv=tuple(command.split()[:1]) if command else (), state=CaptureState.OK, rc=0,
                     source=source, command=command, excerpt=excerpt, filter=filt)

    def names(self) -> list[str]:
        return list(self._inputs)

    def input(self, probe: str) -> Input | None:
        return self._inputs.get(probe)

    def doc(self, probe: str) -> Doc | None:
        """The framed text of a probe's input (one document, even from several parts)."""
        docs = self.docs.get(probe)
        if docs:
            return docs[0] if len(docs) == 1 else Doc.join(docs)
        cap = self.captures.get(probe)
        if cap is None or not cap.ok:
            return None
        d = Doc(normalise(cap.text), command=" ".join(cap.argv), origin=cap.source)
        self.docs[probe] = [d]
        return d

    def facts(self, probe: str) -> Any:
        if probe in self._facts:
            return self._facts[probe]
        doc = self.doc(probe)
        if doc is None:
            return None
        parse = self.registry.parser_for(probe)
        value = parse(doc) if parse is not None else doc
        self._facts[probe] = value
        return value


def grade_check(check: Check, node: str, store: FactStore, profile: Profile, options: Options,
                planned: Sequence[str] | None = None) -> list[Result]:
    """One check on one node. Never raises: a probe that timed out is ERROR naming the probe, a
    missing tool is SKIP (FAIL where the profile requires the tool), a fault inside a parser or
    a grade function is ERROR with the exception's message."""
    ctx = CheckContext(check=check, node=node, store=store, profile=profile, options=options)
    if options.mode == "run":
        ungraded = _inputs_unusable(ctx, store, list(planned or []))
        if ungraded is not None:
            return [ungraded]
    try:
        out = check.grade(ctx)
        results = [out] if isinstance(out, Result) else list(out)
    except Exception as exc:  # a bug in one check must not lose the others' results
        return [ctx.finding("run.check/internal-fault", f"check {check.id} failed internally: {type(exc).__name__}: {exc}",
                           evidence=[f"{type(exc).__name__}: {exc}"],
                           remedy="report this as a preflight bug, with the captures (preflight analyze reproduces it)")]
    for r in results:
        r.check = r.check or check.id
        r.node = r.node or node
    return results


def _inputs_unusable(ctx: CheckContext, store: FactStore, planned: list[str]) -> Result | None:
    """Absence of evidence is not evidence: the result of a check one of whose probes' output
    did not come back (lost, timed out, not started, a tool missing), in place of its grade;
    None when every input it needs is there."""
    check = ctx.check
    needed = set(check.required or planned)  # without a declaration every probe it ran is needed
    for name in dict.fromkeys([*check.required, *planned]):
        inp = store.input(name)
        if inp is None:
            if name in planned:
                return ctx.finding("run.probe/output-lost", f"output lost: no capture of probe {name} came back",
                                  evidence=[f"probe {name}: planned, never received"],
                                  remedy=f"run `preflight run --hosts {ctx.node} --only {check.id}` again; "
                                         "if it repeats, report it with the transport in use")
            continue
        if inp.state is CaptureState.MISSING and name not in needed:
            continue  # an optional tool: the check grades from the others
        ungraded = _input_unusable(ctx, store, name, inp)
        if ungraded is not None:
            return ungraded
    return None


# Where a probe's tool comes from: the remedy for a missing tool names the package.
TOOL_PACKAGES = {
    "nvidia-smi": "it comes with the NVIDIA driver (nvidia-driver-<version> or cuda-drivers; nvidia-utils-<version> "
                  "on Debian/Ubuntu, nvidia-driver-cuda on RHEL)",
    "ibstat": "package infiniband-diags (rdma-core's diagnostics; part of MLNX_OFED / DOCA-OFED)",
    "ibv_devinfo": "package ibverbs-utils (libibverbs-utils on RHEL; part of MLNX_OFED / DOCA-OFED)",
    "ofed_info": "it comes with MLNX_OFED / DOCA-OFED (the distribution's rdma-core has none)",
    "ip": "package iproute2 (iproute on RHEL)",
    "ping": "package iputils-ping (iputils on RHEL)",
    "ethtool": "package ethtool",
    "dmesg": "package util-linux",
    "journalctl": "systemd",
    "systemctl": "systemd",
    "dcgmi": "package datacenter-gpu-manager",
}


def tool_package(tool: str) -> str:
    """Where `tool` comes from, for a remedy ("install nvidia-smi on gpu016: ...")."""
    name = tool.rsplit("/", 1)[-1]  # pragma: no mutate (the last part: maxsplit 1 or 2 agree)
    return TOOL_PACKAGES.get(name, "the package that provides it (see the check's documentation)")


def _input_unusable(ctx: CheckContext, store: FactStore, name: str, inp: Input) -> Result | None:
    """The check's result when this needed input is lost, timed out, failed or missing."""
    check, node = ctx.check, ctx.node
    if inp.state is CaptureState.LOST:
        return ctx.finding("run.probe/output-lost", f"output lost: {inp.reason}",
                          evidence=[f"probe {name}: sent, its output never came back", inp.reason],
                          remedy=f"{check.id} was not graded on {node}: fix the cause and run it again",
                          source=inp.source)
    if inp.state is CaptureState.TIMEOUT:
        cap = store.captures.get(name)
        tail = cap.stdout.splitlines()[-3:] if cap is not None else []
        return ctx.finding("run.probe/timed-out", f"probe {name} timed out after {inp.timeout:g} s",
                          evidence=[inp.reason, *tail],
                          remedy=f"run `{inp.cmdline}` by hand on {node}; a hung tool often "
                                 "means a hung driver or GPU (check dmesg, reset or reboot)")
    if inp.state is CaptureState.FAILED:
        return ctx.finding("run.probe/not-started", f"probe {name} could not run: {inp.reason}", evidence=[inp.reason])
    if inp.state is CaptureState.MISSING:
        tool = inp.tool
        if ctx.profile.requires_tool(tool):
            return ctx.finding("run.tool/missing-required", f"{tool} is missing and profile {ctx.profile.name} requires it",
                              evidence=[inp.reason], remedy=f"install {tool} on {node}: {tool_package(tool)}",
                              source=inp.source)
        return ctx.finding("run.tool/missing", f"{tool} not found; {check.id} not checked", evidence=[inp.reason],
                          source=inp.source)
    return None


def grade_node(checks: Iterable[Check], node: str, store: FactStore, profile: Profile, options: Options,
               planned: Mapping[str, Sequence[str]] | None = None) -> list[Result]:
    """The one function that grades a node: every check over the node's facts with a profile.

    `run`, `analyze`, `triage` and the sweep all come here. In analyze mode a check is graded
    only when one of its inputs is present; `planned` gives, per check, the probes it ran."""
    results: list[Result] = []
    present = set(store.names())
    for check in checks:
        if options.mode == "analyze" and not present & set(check.reads()):
            continue
        results.extend(grade_check(check, node, store, profile, options, (planned or {}).get(check.id)))
    return results


def majority_profile(used: Mapping[str, Profile]) -> Profile | None:
    """The profile most nodes were graded with (cluster checks use it)."""
    names = [p.name for p in used.values()]
    if not names:
        return None
    top = max(set(names), key=names.count)
    return next(p for p in used.values() if p.name == top)


def grade_cluster(cluster_checks: Iterable[ClusterCheck], nodes: Sequence[str], stores: Mapping[str, FactStore],
                  results: list[Result], used: Mapping[str, Profile], options: Options,
                  peers: Mapping[str, list[str]], addresses: Mapping[str, str],
                  node_errors: Mapping[str, str] | None = None,
                  node_detail: Mapping[str, dict[str, Any]] | None = None) -> list[Result]:
    """The cross-node checks over every node's facts and results; their result for a (check,
    node) replaces the node-level one. Never raises: a fault in a cluster check is ERROR."""
    from preflight import profile as profiles

    ctx = ClusterContext(
        nodes=list(nodes),
        stores=dict(stores),
        results=results,
        node_errors={n: (node_errors or {}).get(n, "") for n in nodes},
        node_detail={n: dict((node_detail or {}).get(n, {})) for n in nodes},
        profile=majority_profile(used) or profiles.load("generic"),
        options=options,
        peers=dict(peers),
        addresses=dict(addresses),
    )
    out = list(results)
    for cc in cluster_checks:
        try:
            produced = list(cc.grade(ctx))
        except Exception as exc:  # a bug in one cluster check must not lose the node results
            produced = [Result(check=cc.id, node=CLUSTER, status=Status.ERROR,
                               summary=f"cluster check {cc.id} failed internally: {type(exc).__name__}: {exc}",
                               evidence=[f"{cc.id} ({cc.origin}): {type(exc).__name__}: {exc}"],
                               remedy="report this as a preflight bug, with the node captures")]
        for r in produced:
            for i, old in enumerate(out):
                if old.check == r.check and old.node == r.node:
                    out[i] = r
                    break
            else:
                out.append(r)
        ctx.results = out
    return out
