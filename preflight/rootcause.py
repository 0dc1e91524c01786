"""One cause is one result: folding the results that share a root cause on a node.

A node without nvidia-smi fails six GPU checks for one reason; a node that could not be reached
is ERROR in every check for one reason. Once a run's results are final, `fold` keeps one result
per such cause and node (on the most fundamental check) and turns every other result that only
repeats it into SKIP "depends on <check>: <cause>", whose evidence names the root result. The
causes folded:

- the node could not be reached (`node not checked: ...`): one ERROR under `node.reachable`;
- a tool that is missing (the captures of the same tool MISSING): the check that owns the tool
  (gpu.driver for nvidia-smi) keeps the FAIL (or SKIP), with the package that brings the tool;
- output that never arrived for the same reason (captures LOST with one cause);
- a tool that hung (its captures TIMEOUT, or killed by the run's deadline while still running):
  one ERROR on the check that owns the tool, "nvidia-smi did not finish within 20 s (hung)";
  when two or more of a node's tools hung, one ERROR under `node.responsive` naming each (a node
  whose tools all hang is one cause: a hung driver, kernel or file system);
- output lost behind a FAIL that explains the loss (the MTU black hole at a node, whose ssh or
  srun connection stalled: `net.mtu` with `explains_lost`): the lost output is folded into that
  FAIL, and says what happened to it ("output lost: the ssh connection to n2 stalled behind the
  MTU black hole at n2"), not a dependency on another check;
- a driver that is not loaded, or whose library and kernel module differ: gpu.driver keeps it,
  the checks whose output is the same nvidia-smi / NVML error message depend on it;
- a GPU that does not answer the driver (fallen off the bus): gpu.inventory keeps it, the checks
  whose only finding is that same GPU missing from their listing (nvlink, topo) depend on it.

Nothing is hidden: the root keeps the worst status of what it folds, so the verdict and the
blocking nodes do not change, and every dependent keeps its facts, plus `depends_on` (the root's
check) and `own_status` (what it said before the fold; its summary is in the evidence). Pure: results and captures
in, results out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from preflight import lazyre
from preflight.findings import coded_result
from preflight.model import Capture, CaptureState, Result, Status
from preflight.parsers.nvsmi_errors import errors_in

NODE_CHECK = "node.reachable"  # the root of a node that could not be reached
RESPONSIVE_CHECK = "node.responsive"  # the root of a node on which several tools hung
NODE_LEVEL = (NODE_CHECK, RESPONSIVE_CHECK, "analyze.node")  # results about the node itself, never folded into one
TIMED_OUT = "run.probe/timed-out"  # the finding code of a check whose probe timed out
OUTPUT_LOST = "run.probe/output-lost"  # the finding code of a check whose probe's output never came back
EXPLAINS_LOST = "explains_lost"  # a FAIL's fact: it explains why the node's output was lost
CONNECTION_STALLED = "connection_stalled"  # the black hole's fact: the run's connection to the node stalled
OLD_SSH_STALLED = "ssh_stalled"  # its name in results written before it was named for any transport
_TIMED_OUT_PROBE = lazyre.compile(r"^probe (\S+) timed out after ")
_STILL_RUNNING = "was still running"  # a deadline's LOST capture of a probe it killed (local transport)
_NOT_TOOLS = ("sh", "bash", "env", "timeout")  # a probe run through these is its own tool
DRIVER_CHECK = "gpu.driver"
INVENTORY_CHECK = "gpu.inventory"  # the root of a GPU that does not answer the driver
NOT_CHECKED = "node not checked: "
DEPENDS = "depends on "
# nvidia-smi / NVML messages that mean no GPU tool can read anything on the node
DRIVER_KINDS = ("no_driver", "version_mismatch", "library_missing", "nvml_init")
# the check that owns a tool: the root when several checks lack it
TOOL_OWNER = {"nvidia-smi": DRIVER_CHECK, "ibstat": "ib.hca", "ibv_devinfo": "ib.hca", "ofed_info": "ib.hca",
              "systemctl": "fabric.manager", "ip": "net.nic", "ping": "net.mtu", "dmesg": "gpu.xid",
              "journalctl": "gpu.xid", "nvml": DRIVER_CHECK, "chronyc": "node.clock", "ntpq": "node.clock",
              "ntpstat": "node.clock", "timedatectl": "node.clock", "date": "node.clock"}


def probe_tool(probe: str, argv: Sequence[str]) -> str:
    """The tool a probe runs: its command's name (`nvidia-smi`), `nvml` for the NVML probe
    (whatever interpreter runs it), the probe's own name for a shell or python snippet."""
    if probe == "nvml":
        return "nvml"
    name = argv[0].rsplit("/", 1)[-1] if argv else ""
    if not name or name in _NOT_TOOLS or name.startswith("python"):
        return probe
    return name


@dataclass(frozen=True)
class Cause:
    """What a group of results on one node shares: `kind` (unreachable, missing, lost,
    driver), `key` (the tool, the reason, the error kinds) and a short phrase for the
    dependents' summaries."""

    kind: str
    key: str
    short: str
    summary: str = ""  # the root's summary when the cause words it (a hung tool), else the root's own
    evidence: tuple[str, ...] = ()


def is_dependent(r: Result) -> bool:
    """A result folded into another one's root cause (SKIP "depends on ...", or output lost
    behind the FAIL that explains the loss): it names the root (`depends_on`) and keeps what it
    said before the fold (`own_status`)."""
    return r.status is Status.SKIP and bool(r.facts.get("depends_on")) and (
        r.summary.startswith(DEPENDS) or bool(r.facts.get("own_status")))


def connection_stalled(facts: Mapping[str, object]) -> tuple[bool, str]:
    """(whether the run's connection to the node stalled, the transport that carried it: "ssh",
    "srun", or "" when not told) from a black hole's facts; a result of an older run says
    `ssh_stalled` (its transport then was ssh)."""
    if CONNECTION_STALLED in facts:
        return bool(facts[CONNECTION_STALLED]), str(facts.get("transport") or "") if facts[CONNECTION_STALLED] else ""
    old = bool(facts.get(OLD_SSH_STALLED))
    return old, "ssh" if old else ""


def fold(results: Sequence[Result], captures: Mapping[str, Mapping[str, Capture]] | None = None) -> list[Result]:
    """`results` with each node's shared causes folded (order kept, the `node.reachable` root
    in place of the first result it folds). `captures`: each node's captures by probe."""
    by_node: dict[str, list[int]] = {}
    for i, r in enumerate(results):
        if r.node and r.node not in ("cluster", "job") and "<->" not in r.node and "," not in r.node:
            by_node.setdefault(r.node, []).append(i)
    out: list[Result] = list(results)
    extra: dict[int, Result] = {}
    for node, idx in by_node.items():
        groups = _groups([results[i] for i in idx], (captures or {}).get(node, {}))
        for cause, members in groups:
            positions = [idx[m] for m in members]
            root, replaced = _root(cause, node, [results[p] for p in positions])
            for p, new in zip(positions, replaced, strict=True):  # pragma: no mutate (same length by construction)
                out[p] = new
            if cause.kind in ("unreachable", "hung_node"):
                extra[positions[0]] = root
    folded: list[Result] = []
    for i, r in enumerate(out):
        if i in extra:
            folded.append(extra[i])
        folded.append(r)
    return folded


def _groups(results: list[Result], captures: Mapping[str, Capture]) -> list[tuple[Cause, list[int]]]:
    """The causes shared by two or more of a node's results (any number for an unreachable
    node, whose ERROR is always under node.reachable), each with those results' indexes
    (a result belongs to one cause at most: unreachable, then missing tools, lost output, the
    driver)."""
    taken: set[int] = set()
    found: list[tuple[Cause, list[int]]] = []
    for finder in (_explained_loss, _unreachable, _hung, _inputs, _driver, _gpu_lost):
        for cause, members in finder(results, captures, taken):
            if len(members) >= 2 or cause.kind == "unreachable":  # an unreachable node: node.reachable always
                found.append((cause, members))
                taken.update(members)
    return found


Grouping = list[tuple[Cause, list[int]]]


def _unreachable(results: list[Result], captures: Mapping[str, Capture], taken: set[int]) -> Grouping:
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(results):
        if i not in taken and r.status is Status.ERROR and r.summary.startswith(NOT_CHECKED) \
                and r.check not in NODE_LEVEL:
            groups.setdefault(r.summary, []).append(i)
    return [(Cause("unreachable", s, "node not checked"), m) for s, m in groups.items()]


def _is_lost(r: Result) -> bool:
    """An ERROR only because output did not arrive: the node not checked, or a probe's output lost."""
    return r.status is Status.ERROR and r.check not in NODE_LEVEL and (
        r.summary.startswith(NOT_CHECKED) or OUTPUT_LOST in (r.facts.get("codes") or []))


def _explained_loss(results: list[Result], captures: Mapping[str, Capture], taken: set[int]) -> Grouping:
    """A FAIL that explains why the node's output was lost (the MTU black hole at the node whose
    SSH session stalled), and the results that are ERROR only for that lost output."""
    root = next((i for i, r in enumerate(results) if i not in taken and r.status is Status.FAIL
                 and r.facts.get(EXPLAINS_LOST)), None)
    if root is None:
        return []
    members = [root] + [i for i, r in enumerate(results) if i != root and i not in taken and _is_lost(r)]
    node = results[root].node
    stalled, transport = connection_stalled(results[root].facts)
    short = (f"output lost: the {transport + ' ' if transport else ''}connection to {node} stalled behind the MTU "
             f"black hole at {node}" if stalled else f"output lost behind {results[root].check} on {node}")
    return [(Cause("explained", results[root].check, short), members)]


def _hung_capture(r: Result, captures: Mapping[str, Capture]) -> Capture | None:
    """The capture of the hung tool a result is ERROR for: its probe timed out, or the run's
    deadline killed it while it was still running; None for any other result."""
    if r.status is not Status.ERROR:
        return None
    codes = r.facts.get("codes") or []
    if TIMED_OUT in codes:
        m = _TIMED_OUT_PROBE.match(r.summary)
        cap = captures.get(m.group(1)) if m else None
        return cap if cap is not None and cap.state is CaptureState.TIMEOUT else None
    if OUTPUT_LOST in codes:
        cap = _by_source(captures).get(r.source)
        return cap if cap is not None and cap.state is CaptureState.LOST and _STILL_RUNNING in cap.reason else None
    return None


def _hung_words(tool: str, caps: list[Capture]) -> tuple[str, tuple[str, ...]]:
    """(what the tool's hang says, its evidence) from the captures of its calls that hung."""
    longest = max((c.timeout for c in caps), default=0.0)  # pragma: no mutate (a hung tool has a capture)
    within = f" within {longest:g} s" if longest else ""
    probes = sorted({c.probe for c in caps})
    calls = f"probe {probes[0]} timed out" if len(probes) == 1 else f"probes {', '.join(probes)} timed out"
    return f"{tool} did not finish{within} (hung): {calls}", tuple(dict.fromkeys(c.reason for c in caps if c.reason))


def _hung(results: list[Result], captures: Mapping[str, Capture], taken: set[int]) -> Grouping:
    """Results that are ERROR because a tool hung, by tool; two or more tools hung on the node
    are one cause, under node.responsive."""
    members: dict[str, list[int]] = {}
    caps: dict[str, dict[str, Capture]] = {}
    for i, r in enumerate(results):
        cap = None if i in taken else _hung_capture(r, captures)
        if cap is not None:
            tool = probe_tool(cap.probe, cap.argv)
            members.setdefault(tool, []).append(i)
            caps.setdefault(tool, {})[cap.probe] = cap
    words = {tool: _hung_words(tool, list(caps[tool].values())) for tool in members}
    if len(members) < 2:
        return [(Cause("hung", tool, f"{tool} hung", *words[tool]), m) for tool, m in members.items()]
    tools = sorted(members)
    every = [c for t in tools for c in caps[t].values()]
    limits = ", ".join(f"{t} {max(c.timeout for c in caps[t].values()):g} s" for t in tools)
    summary = f"{len(tools)} tools hung (none of their calls finished within its timeout): {limits}"
    evidence = tuple(words[t][0] for t in tools) + tuple(dict.fromkeys(c.reason for c in every))
    return [(Cause("hung_node", ",".join(tools), f"{', '.join(tools)} hung", summary, evidence),
             sorted(i for m in members.values() for i in m))]


def _by_source(captures: Mapping[str, Capture]) -> dict[str, Capture]:
    return {(c.source or f"probe:{name}"): c for name, c in captures.items()}


def _inputs(results: list[Result], captures: Mapping[str, Capture], taken: set[int]) -> Grouping:
    """Results graded on nothing because the same tool is missing, or the same output was
    lost for the same reason (the result's source is that capture)."""
    sources = _by_source(captures)
    groups: dict[tuple[str, str], list[int]] = {}
    for i, r in enumerate(results):
        cap = sources.get(r.source)
        if i in taken or cap is None or r.status is Status.PASS:
            continue
        if cap.state is CaptureState.MISSING:
            tool = cap.argv[0] if cap.argv else cap.probe
            groups.setdefault(("missing", tool.rsplit("/", 1)[-1]), []).append(i)
        elif cap.state is CaptureState.LOST and r.status is Status.ERROR:
            groups.setdefault(("lost", cap.reason), []).append(i)  # pragma: no mutate (only "missing" is told apart)
    return [(Cause(kind, key, f"{key} is missing" if kind == "missing" else "output lost"), m)
            for (kind, key), m in groups.items()]


def _driver_kinds(r: Result) -> set[str]:
    return {e.kind for e in errors_in([r.summary, *r.evidence]) if e.kind in DRIVER_KINDS}


def _failed(results: list[Result], taken: set[int], check: str) -> int | None:
    """The index of `check`'s FAIL or ERROR not yet folded, or None."""
    return next((i for i, r in enumerate(results) if i not in taken and r.check == check
                 and r.status in (Status.FAIL, Status.ERROR)), None)


def _driver(results: list[Result], captures: Mapping[str, Capture], taken: set[int]) -> Grouping:
    """gpu.driver failed because the driver is not usable, and other checks' results carry the
    same nvidia-smi / NVML message."""
    root = _failed(results, taken, DRIVER_CHECK)
    if root is None:
        return []
    kinds = _driver_kinds(results[root])
    if not kinds:
        return []
    members = [root] + [i for i, r in enumerate(results) if i != root and i not in taken
                        and r.status in (Status.FAIL, Status.ERROR, Status.SKIP) and _driver_kinds(r) & kinds]
    first = next(e for e in errors_in([results[root].summary, *results[root].evidence]) if e.kind in kinds)
    return [(Cause("driver", ",".join(sorted(kinds)), first.summary), members)]  # pragma: no mutate (kind, key unread)


def _lost_gpus(r: Result) -> set[str]:
    return {e.pci for e in errors_in([r.summary, *r.evidence]) if e.kind == "gpu_lost" and e.pci}


def _only_about(r: Result, pcis: set[str]) -> bool:
    """Every finding in the result's summary names one of these GPUs (nothing else to say)."""
    parts = [p.strip() for p in r.summary.split("; ") if p.strip()]
    text = [p.lower() for p in parts]
    ids = {p.lower() for p in pcis} | {p.lower().rsplit(".", 1)[0] for p in pcis}  # pragma: no mutate (pci_id: no function)
    return bool(parts) and all(any(i in t for i in ids) for t in text)


def _gpu_lost(results: list[Result], captures: Mapping[str, Capture], taken: set[int]) -> Grouping:
    """gpu.inventory found GPUs that do not answer the driver, and other checks' only finding
    is that those GPUs are missing from their own listing."""
    root = _failed(results, taken, INVENTORY_CHECK)
    if root is None:
        return []
    lost = _lost_gpus(results[root])
    if not lost:
        return []
    members = [root] + [i for i, r in enumerate(results) if i != root and i not in taken
                        and r.status in (Status.FAIL, Status.ERROR) and r.check != "gpu.xid"
                        and _lost_gpus(r) and _lost_gpus(r) <= lost and _only_about(r, lost)]
    short = f"GPU {', '.join(sorted(lost))} does not answer the driver"
    return [(Cause("gpu_lost", ",".join(sorted(lost)), short), members)]


def _pick_root(cause: Cause, members: list[Result]) -> Result:
    """The most fundamental result of a group: the worst status, then the tool's owner (or
    gpu.driver), then the first check by id."""
    worst = max(r.status.rank for r in members)
    candidates = sorted((r for r in members if r.status.rank == worst), key=lambda r: r.check)
    prefer = {"missing": TOOL_OWNER.get(cause.key, DRIVER_CHECK), "hung": TOOL_OWNER.get(cause.key, DRIVER_CHECK),
              "gpu_lost": INVENTORY_CHECK, "explained": cause.key}.get(cause.kind, DRIVER_CHECK)
    return next((r for r in candidates if r.check == prefer), candidates[0])


def _root(cause: Cause, node: str, members: list[Result]) -> tuple[Result, list[Result]]:
    """The group's root result, and what each member becomes: the root itself, or a SKIP
    that depends on it."""
    picked: Result | None = None
    if cause.kind == "unreachable":
        first = members[0]
        root = Result(check=NODE_CHECK, node=node, status=Status.ERROR, summary=first.summary,
                      evidence=list(first.evidence), remedy=first.remedy, source=first.source)
    elif cause.kind == "hung_node":
        root = coded_result("node.responsive/tools-hung", RESPONSIVE_CHECK, node, cause.summary,
                            list(cause.evidence), remedy=f"run the tools by hand on {node}: several tools that hang "
                            "together usually mean a hung driver, kernel or file system (check dmesg; reset the GPU "
                            "or reboot the node)", facts={"tools": cause.key.split(",")})
        root.status = max([root.status, *(r.status for r in members)], key=lambda s: s.rank)
    else:
        picked = _pick_root(cause, members)
        root = replace(picked, evidence=list(picked.evidence), facts=dict(picked.facts))
        if cause.summary:
            root.summary, root.evidence = cause.summary, list(cause.evidence)
            root.facts["tool"] = cause.key
    names = sorted({r.check for r in members if r is not picked})
    root.facts["dependents"] = names
    head = f"{root.check} on {node}: {root.status.value.upper()} {root.summary}"
    # output lost behind the FAIL that explains it says what happened to it; the rest depend on the root
    label = cause.short if cause.kind == "explained" else f"{DEPENDS}{root.check}: {cause.short}"
    return root, [root if r is picked else replace(
        r, status=Status.SKIP, summary=label,
        evidence=[head] + ([] if r.summary == root.summary else [f"was: {r.status.value.upper()} {r.summary}"]),
        remedy=f"see {root.check} on {node}", facts={**r.facts, "depends_on": root.check,
                                                     "own_status": r.status.value}) for r in members]
