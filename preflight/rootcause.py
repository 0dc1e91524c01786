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

from preflight.model import Capture, CaptureState, Result, Status
from preflight.parsers.nvsmi_errors import errors_in

NODE_CHECK = "node.reachable"  # the root of a node that could not be reached
NODE_LEVEL = (NODE_CHECK, "analyze.node")  # results about the node itself, never folded into one
DRIVER_CHECK = "gpu.driver"
INVENTORY_CHECK = "gpu.inventory"  # the root of a GPU that does not answer the driver
NOT_CHECKED = "node not checked: "
DEPENDS = "depends on "
# nvidia-smi / NVML messages that mean no GPU tool can read anything on the node
DRIVER_KINDS = ("no_driver", "version_mismatch", "library_missing", "nvml_init")
# the check that owns a tool: the root when several checks lack it
TOOL_OWNER = {"nvidia-smi": DRIVER_CHECK, "ibstat": "ib.hca", "ibv_devinfo": "ib.hca", "ofed_info": "ib.hca",
              "systemctl": "fabric.manager", "ip": "net.nic", "ping": "net.mtu", "dmesg": "gpu.xid",
              "journalctl": "gpu.xid"}


@dataclass(frozen=True)
class Cause:
    """What a group of results on one node shares: `kind` (unreachable, missing, lost,
    driver), `key` (the tool, the reason, the error kinds) and a short phrase for the
    dependents' summaries."""

    kind: str
    key: str
    short: str


def is_dependent(r: Result) -> bool:
    """A result folded into another one's root cause (SKIP "depends on ...")."""
    return r.status is Status.SKIP and bool(r.facts.get("depends_on")) and r.summary.startswith(DEPENDS)


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
            for p, new in zip(positions, replaced, strict=True):
                out[p] = new
            if cause.kind == "unreachable":
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
    for finder in (_unreachable, _inputs, _driver, _gpu_lost):
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
            groups.setdefault(("lost", cap.reason), []).append(i)
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
    return [(Cause("driver", ",".join(sorted(kinds)), first.summary), members)]


def _lost_gpus(r: Result) -> set[str]:
    return {e.pci for e in errors_in([r.summary, *r.evidence]) if e.kind == "gpu_lost" and e.pci}


def _only_about(r: Result, pcis: set[str]) -> bool:
    """Every finding in the result's summary names one of these GPUs (nothing else to say)."""
    parts = [p.strip() for p in r.summary.split("; ") if p.strip()]
    text = [p.lower() for p in parts]
    ids = {p.lower() for p in pcis} | {p.lower().rsplit(".", 1)[0] for p in pcis}
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
    prefer = {"missing": TOOL_OWNER.get(cause.key, DRIVER_CHECK), "gpu_lost": INVENTORY_CHECK}.get(
        cause.kind, DRIVER_CHECK)
    return next((r for r in candidates if r.check == prefer), candidates[0])


def _root(cause: Cause, node: str, members: list[Result]) -> tuple[Result, list[Result]]:
    """The group's root result, and what each member becomes: the root itself, or a SKIP
    that depends on it."""
    if cause.kind == "unreachable":
        first = members[0]
        picked: Result | None = None
        root = Result(check=NODE_CHECK, node=node, status=Status.ERROR, summary=first.summary,
                      evidence=list(first.evidence), remedy=first.remedy, source=first.source)
    else:
        picked = _pick_root(cause, members)
        root = replace(picked, evidence=list(picked.evidence), facts=dict(picked.facts))
    names = sorted({r.check for r in members if r is not picked})
    root.facts["dependents"] = names
    head = f"{root.check} on {node}: {root.status.value.upper()} {root.summary}"
    return root, [root if r is picked else replace(
        r, status=Status.SKIP, summary=f"{DEPENDS}{root.check}: {cause.short}",
        evidence=[head] + ([] if r.summary == root.summary else [f"was: {r.status.value.upper()} {r.summary}"]),
        remedy=f"see {root.check} on {node}", facts={**r.facts, "depends_on": root.check,
                                                     "own_status": r.status.value}) for r in members]
