"""Cross-node checks: what only shows between nodes.

- `cluster.versions`: driver, CUDA, NCCL, OFED, HCA firmware and kernel equal on every node;
  the majority is the reference, the odd node out is named.
- `cluster.nccl_env`: identical NCCL_* / TORCH_NCCL_* environment on every node.
- `cluster.mtu`: the MTU path matrix from every node's DF pings to its peers; the node
  whose link drops jumbo frames is named (a jumbo loss seen by its peers is their symptom,
  not their fault), and an ssh or srun connection that stalled next to it (after key
  exchange, or while the probes ran) is recognised as the same black hole. A node left with no
  peer to ping because no other node answered says so, naming those nodes (SKIP where it has no
  data-plane interface whose MTU it could read instead).
- `cluster.nodes`: the expected node count answered.
Graders read every node's parsed facts (`ClusterContext.facts`) and node-level results.

Every node of the run has exactly one result of each per-node comparison (versions, NCCL
environment), whatever was lost: a node that sent nothing back is ERROR "node not checked"
(folded under node.reachable), a node whose inputs were lost or timed out is ERROR naming the
probe unless what did arrive already proves a difference (FAIL). The path matrix and the node
count are one result on `cluster`, also when no path could be measured (SKIP).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from preflight.findings import coded_result, prove
from preflight.inventory import compress
from preflight.model import CLUSTER, CaptureState, Result, Status
from preflight.probes import Probe
from preflight.registry import ClusterCheck, ClusterContext, register_cluster
from preflight.transport.base import stalled

from .network import PROBE_ENV

PROBE_OFED = Probe.of("ofed", ["ofed_info", "-s"], timeout=5)
PROBE_KERNEL = Probe.of("uname-r", ["uname", "-r"], timeout=5)
# Library files carry the full NCCL version in their name (libnccl.so.2.21.5).
PROBE_NCCL_LIBS = Probe.of(
    "nccl-libs",
    ["sh", "-c", "ls -1 /usr/lib/x86_64-linux-gnu/libnccl.so.* /usr/lib/aarch64-linux-gnu/libnccl.so.* "
                 "/usr/lib64/libnccl.so.* /usr/local/lib/libnccl.so.* /usr/local/cuda/lib64/libnccl.so.* "
                 "2>/dev/null; true"],
    timeout=5,
)

MTU_FAULTS = ("silent_loss", "frag_needed")
VERSION_INPUTS = ("nvidia-smi-q", "nvidia-smi-query", "nccl-libs", "ofed", "ibstat", "uname-r")
ENV_INPUTS = (PROBE_ENV.name,)


def not_checked(ctx: ClusterContext, check: str, node: str, probes: Iterable[str]) -> Result | None:
    """ERROR for a node that sent nothing back (no capture of `probes`, not even a lost one: the
    node-level checks' own words, so the results fold under node.reachable); else None."""
    err = ctx.node_errors.get(node)
    if not err or any(ctx.input(node, p) is not None for p in probes):
        return None
    return Result(check=check, node=node, status=Status.ERROR, summary=f"node not checked: {err}", evidence=[err],
                  remedy=f"make {node} reachable, or drain it", source="cross-node")


def inputs_gone(ctx: ClusterContext, check: str, node: str, probes: Iterable[str]) -> Result | None:
    """ERROR for a node one of whose inputs was sent but did not come back usable (lost, timed
    out, not started), worded as the node-level checks word it so the results fold with theirs;
    None when every input it ran is there (a tool that is not installed is no loss)."""
    for name in probes:
        i = ctx.input(node, name)
        if i is None or i.state in (CaptureState.OK, CaptureState.MISSING):
            continue
        rerun = f"{check} was not compared on {node}: fix the cause and run it again"
        if i.state is CaptureState.TIMEOUT:
            return coded_result("run.probe/timed-out", check, node, f"probe {name} timed out after {i.timeout:g} s",
                                [i.reason], rerun, source=i.source)
        if i.state is CaptureState.FAILED:
            return coded_result("run.probe/not-started", check, node, f"probe {name} could not run: {i.reason}",
                                [i.reason], rerun, source=i.source)
        return coded_result("run.probe/output-lost", check, node, f"output lost: {i.reason}",
                            [f"probe {name}: sent, its output never came back", i.reason], rerun, source=i.source)
    return None


def _value(ctx: ClusterContext, node: str, probe: str) -> str | None:
    """A version parsed from one probe (`parsers.versions.Version`), when the probe ran cleanly."""
    run = ctx.input(node, probe)
    v: Any = ctx.facts(node, probe)
    if run is None or not run.ok or run.rc not in (0, None) or v is None:
        return None
    return getattr(v, "value", None)


def node_versions(ctx: ClusterContext, node: str) -> dict[str, str]:
    vals: dict[str, str | None] = {}
    drv = ctx.result_of("gpu.driver", node)
    inv = ctx.result_of("gpu.inventory", node)
    facts = drv.facts if drv else {}
    seen = inv.facts if inv else {}
    q: Any = ctx.facts(node, "nvidia-smi-q")
    vals["driver"] = facts.get("driver") or (getattr(q, "driver", "") or None) or seen.get("driver") or None
    vals["cuda"] = facts.get("cuda") or (getattr(q, "cuda", "") or None) or seen.get("cuda_version") or None
    vals["nccl"] = _value(ctx, node, "nccl-libs")
    vals["ofed"] = _value(ctx, node, "ofed")
    ib: Any = ctx.facts(node, "ibstat")
    fws = sorted({p.firmware for p in getattr(ib, "ports", []) if p.firmware})
    vals["hca_firmware"] = ",".join(fws) or None
    vals["kernel"] = _value(ctx, node, "uname-r")
    return {k: str(v) for k, v in vals.items() if v}


def _majority(values: dict[str, str]) -> tuple[str | None, bool]:
    """(reference value, clear) where clear means one value holds a strict plurality."""
    counts = Counter(values.values()).most_common()
    if not counts:
        return None, True
    if len(counts) > 1 and counts[0][1] == counts[1][1]:
        return counts[0][0], False
    return counts[0][0], True


def grade_versions(ctx: ClusterContext) -> Iterable[Result]:
    unchecked = {n: r for n in ctx.nodes if (r := not_checked(ctx, "cluster.versions", n, VERSION_INPUTS)) is not None}
    nodes = [n for n in ctx.nodes if n not in unchecked]
    per_node = {n: node_versions(ctx, n) for n in nodes}
    items = sorted({k for v in per_node.values() for k in v})
    problems: dict[str, list[str]] = {n: [] for n in nodes}
    reference: dict[str, str] = {}
    for item in items:
        values = {n: per_node[n][item] for n in nodes if item in per_node[n]}
        ref, clear = _majority(values)
        if ref is None or len(set(values.values())) == 1:
            if ref is not None:
                reference[item] = ref
            continue
        reference[item] = ref
        groups = Counter(values.values())
        for n, v in values.items():
            if v != ref or not clear:
                others = ", ".join(f"{val} on {cnt} node(s)" for val, cnt in groups.items() if val != v)
                problems[n].append(f"{item} {v} differs from {'the majority ' + ref if clear else others}")
    out = []
    for n in ctx.nodes:
        if n in unchecked:
            out.append(unchecked[n])
            continue
        facts = {"versions": per_node[n], "reference": reference}
        gone = inputs_gone(ctx, "cluster.versions", n, VERSION_INPUTS)
        if gone is not None and not problems[n]:  # what arrived agrees, what did not may differ
            out.append(gone)
        elif problems[n]:
            out.append(coded_result(
                "cluster.versions/version-differs", "cluster.versions", n, "; ".join(problems[n]),
                prove([f"{n}: {k}={v}" for k, v in sorted(per_node[n].items())],  # the differing item first
                      sorted((f": {p.split()[0]}=" for p in problems[n]), key=lambda t: "driver" not in t))
                + [f"majority: {k}={v}" for k, v in sorted(reference.items())],
                f"bring {n} to the fleet's versions (reinstall the driver/OFED/NCCL packages, "
                "update firmware with mlxfwmanager) or drain it", facts, "cross-node"))
        elif per_node[n]:
            what = ", ".join(f"{k} {v}" for k, v in sorted(per_node[n].items()))
            out.append(Result(check="cluster.versions", node=n, status=Status.PASS,
                              summary=f"same as the other nodes: {what}", facts=facts, source="cross-node"))
        else:
            out.append(coded_result("cluster.versions/not-reported", "cluster.versions", n,
                                    "no versions reported: nothing to compare", facts=facts, source="cross-node"))
    return out


def nccl_env(ctx: ClusterContext, node: str) -> dict[str, str] | None:
    """The NCCL_* / TORCH_NCCL_* variables of a node's environment; None when not captured."""
    env: Any = ctx.facts(node, "env")
    if env is None:
        return None
    return {k: v for k, v in getattr(env, "vars", {}).items() if re.fullmatch(r"(?:NCCL_|TORCH_NCCL_)[A-Z0-9_]+", k)}


def _no_shell(ctx: ClusterContext, node: str) -> Result | None:
    """SKIP for a node whose environment probe's tool (sh) is not there: nothing to compare."""
    i = ctx.input(node, PROBE_ENV.name)
    if i is None or i.state is not CaptureState.MISSING:
        return None
    return coded_result("run.tool/missing", "cluster.nccl_env", node, f"{i.tool} not found; cluster.nccl_env not checked",
                        [i.reason], source=i.source)


def grade_nccl_env(ctx: ClusterContext) -> Iterable[Result]:
    envs = {n: e for n in ctx.nodes if (e := nccl_env(ctx, n)) is not None}
    # a node whose environment was sent but did not come back (a node never asked for it, as
    # in analyze, is not compared)
    unusable = [not_checked(ctx, "cluster.nccl_env", n, ENV_INPUTS) or inputs_gone(ctx, "cluster.nccl_env", n, ENV_INPUTS)
                or _no_shell(ctx, n) for n in ctx.nodes if n not in envs]
    nodes = list(envs)
    keys = sorted({k for e in envs.values() for k in e})
    reference: dict[str, str | None] = {}
    for k in keys:
        vals = Counter(envs[n].get(k) for n in nodes)
        reference[k] = vals.most_common(1)[0][0]
    out = []
    for n in nodes:
        diffs = []
        for k in keys:
            mine, ref = envs[n].get(k), reference[k]
            if mine != ref:
                diffs.append(f"{k}={mine if mine is not None else '(unset)'} where the others have "
                             f"{ref if ref is not None else '(unset)'}")
        if diffs:
            out.append(coded_result("cluster.nccl_env/env-differs", "cluster.nccl_env", n,
                                    f"NCCL environment differs from the other nodes: {diffs[0]}"
                                    + (f" (+{len(diffs) - 1} more)" if len(diffs) > 1 else ""),
                                    diffs[:20],
                                    "set the same NCCL_* / TORCH_NCCL_* variables on every node "
                                    "(job script or /etc/nccl.conf); a single differing rank can hang init",
                                    {"env": envs[n], "differences": diffs}, "cross-node"))
        else:
            out.append(Result(check="cluster.nccl_env", node=n, status=Status.PASS,
                              summary=f"same {len(envs[n])} NCCL variable(s) as every other node",
                              facts={"env": envs[n]}, source="cross-node"))
    out.extend(r for r in unusable if r is not None)
    return out


def _stalled(ctx: ClusterContext, node: str) -> bool:
    return stalled(ctx.node_detail.get(node, {}))


@dataclass
class _MtuPaths:
    """Every node's jumbo pings to its peers, as links between node names."""

    links: list[tuple[str, str, str, dict]]  # (src, dst, outcome, peer facts)
    size: Any  # the DF ping size

    @property
    def matrix(self) -> dict[str, dict[str, str]]:
        matrix: dict[str, dict[str, str]] = {}
        for src, dst, outcome, _ in self.links:
            matrix.setdefault(src, {})[dst] = outcome
        return matrix

    @property
    def bad(self) -> list[tuple[str, str, str]]:
        return [(s, d, o) for s, d, o, _ in self.links if o in MTU_FAULTS]


def _mtu_paths(ctx: ClusterContext) -> _MtuPaths:
    paths = _MtuPaths([], None)
    for n in ctx.nodes:
        r = ctx.result_of("net.mtu", n)
        if r is None:
            continue
        paths.size = paths.size or r.facts.get("size")
        for p in r.facts.get("peers", []) or []:
            dst = ctx.addresses.get(str(p.get("peer")), str(p.get("peer")))
            paths.links.append((n, dst, str(p.get("outcome")), p))
    return paths


def _culprits(ctx: ClusterContext, bad: list[tuple[str, str, str]]) -> list[str]:
    """The nodes on the most failing links; for one failing link, the end whose connection stalled."""
    incidence: Counter[str] = Counter()
    for s, d, _ in bad:
        incidence[s] += 1
        incidence[d] += 1
    if not incidence:
        return []
    top = max(incidence.values())
    culprits = [n for n, c in incidence.items() if c == top]
    if len(culprits) > 1:
        # one failing link: the end whose connection stalled (or that could not be reached) is the one
        marked = [n for n in culprits if _stalled(ctx, n) or ctx.node_errors.get(n)]
        if marked:
            culprits = marked
    return culprits


def _culprit_result(ctx: ClusterContext, c: str, paths: _MtuPaths) -> Result:
    mine = [(s, d, o) for s, d, o in paths.bad if c in (s, d)]
    outcome = Counter(o for _, _, o in mine).most_common(1)[0][0]
    stalled = _stalled(ctx, c)
    transport = ctx.node_detail.get(c, {}).get("transport", "")
    evidence = [f"{s} -> {d}: {o} ({paths.size}-byte DF ping)" for s, d, o in mine]
    for s, d, _o, p in paths.links:
        if c in (s, d) and (s, d, _o) in mine and p.get("reason"):
            evidence.append(f"{s} -> {d}: {p['reason']}")
    if stalled:
        evidence.append(f"{c}: {ctx.node_errors.get(c) or 'SSH stalled after key exchange'}")
    stage = ctx.node_detail.get(c, {}).get("stage", "")
    err = ctx.node_errors.get(c) or ""
    how = ("SSH to it stalled after key exchange" if stage in ("kex", "auth")
           else "the command sent to it never got through" if "never acknowledged" in err
           else "its probe output stalled in transit")
    summary = (f"jumbo frames to and from {c} are dropped ({outcome}): "
               + ", ".join(f"{s}->{d}" for s, d, _ in mine)
               + "; small pings pass" + (f"; {how} (same MTU black hole)" if stalled else ""))
    return coded_result("net.mtu/black-hole-at-node", "net.mtu", c, summary, evidence,
                        remedy=f"fix the MTU on {c}'s link (switch port or NIC) to match the fabric, or drain {c}",
                        facts={"outcome": outcome, "size": paths.size, "links": [list(x) for x in mine],
                               "connection_stalled": stalled, **({"transport": transport} if stalled and transport
                                                                 else {}),
                               "culprit": True, "explains_lost": stalled},
                        source="cross-node")


def _explained(ctx: ClusterContext, n: str, culprits: list[str], matrix: dict[str, dict[str, str]]) -> Result | None:
    """A PASS for a peer whose only jumbo losses lead to a culprit (it is not at fault itself)."""
    r = ctx.result_of("net.mtu", n)
    if r is None or r.status is Status.PASS:
        return None
    peers = r.facts.get("peers", []) or []
    other = [p for p in peers if p.get("outcome") != "ok"
             and ctx.addresses.get(str(p.get("peer")), str(p.get("peer"))) not in culprits]
    if not peers or other:
        return None
    towards = sorted({ctx.addresses.get(str(p.get("peer")), str(p.get("peer"))) for p in peers
                      if p.get("outcome") != "ok"})
    return Result(check="net.mtu", node=n, status=Status.PASS,
                  summary=f"jumbo path fine; losses only towards {', '.join(towards)}, whose link is at fault",
                  evidence=[f"{n} -> {t}: {matrix.get(n, {}).get(t)}" for t in towards],
                  facts={**r.facts, "outcome": "ok", "explained_by": towards}, source="cross-node")


def _no_peer_answered(ctx: ClusterContext, n: str) -> Result | None:
    """net.mtu of a node that pinged no peer because none answered (the ring is drawn over the
    nodes that answered), graded without peers as if none had been asked for: its SKIP "no
    Ethernet data-plane interface up" becomes SKIP naming the nodes that sent nothing back (the
    reason the path went untested), its PASS of the configured MTU says the same in place of "no
    peers given". None for any other node (a finding on the configured MTU stands as it is)."""
    r = ctx.result_of("net.mtu", n)
    silent = [m for m in ctx.nodes if m != n and ctx.node_errors.get(m)]
    if r is None or ctx.peers.get(n) or not silent:
        return None
    hosts = compress(silent)
    why = [f"{m}: {ctx.node_errors[m]}" for m in silent][:10]  # pragma: no mutate (a display limit)
    if "net.mtu/no-data-nic" in (r.facts.get("codes") or []):
        return coded_result("net.mtu/no-peer-answered", "net.mtu", n,
                            f"no peer answered: {hosts} sent nothing back, so no jumbo path was pinged; MTU not graded",
                            why + list(r.evidence), f"make {hosts} answer (see node.reachable), then run again to "
                            "test the jumbo path", {"unanswered": silent}, "cross-node")
    if r.status is Status.PASS and r.facts.get("outcome") == "ok" and r.facts.get("peers") == [] \
            and r.facts.get("interfaces"):
        names = ", ".join(str(i.get("name")) for i in r.facts["interfaces"])
        return replace(r, summary=f"data-plane MTU {r.facts.get('mtu')} on {names} (no peer answered: {hosts} sent "
                       "nothing back; path not tested)", evidence=list(r.evidence) + why,
                       facts={**r.facts, "unanswered": silent}, source="cross-node")
    return None


def grade_mtu(ctx: ClusterContext) -> Iterable[Result]:
    paths = _mtu_paths(ctx)
    if not paths.links:
        alone = [s for n in ctx.nodes if (s := _no_peer_answered(ctx, n)) is not None]
        said = {s.node: s for s in alone}
        unmeasured = [f"{n}: net.mtu {r.status.value.upper()} {r.summary}" for n in ctx.nodes
                      if (r := said.get(n) or ctx.result_of("net.mtu", n)) is not None and r.status is not Status.PASS]
        return alone + [coded_result("cluster.mtu/not-measured", "cluster.mtu", CLUSTER,
                             "no jumbo path between the nodes was measured: nothing to compare",
                             unmeasured[:30] or ["no node's net.mtu pinged a peer"],
                             "see net.mtu on each node (its pings did not run or did not come back)",
                             source="cross-node")]
    matrix, bad = paths.matrix, paths.bad
    culprits = _culprits(ctx, bad)
    out = [_culprit_result(ctx, c, paths) for c in culprits]
    for n in ctx.nodes:
        explained = _explained(ctx, n, culprits, matrix) if n not in culprits else None
        if explained is not None:
            out.append(explained)
    facts = {"matrix": matrix, "culprits": culprits, "size": paths.size}
    if culprits:
        out.append(coded_result("cluster.mtu/black-hole", "cluster.mtu", CLUSTER,
                                f"MTU black hole at {', '.join(culprits)}",
                                [f"{s} -> {d}: {o}" for s, d, o in bad][:30], remedy="see net.mtu on the named node(s)",
                                facts=facts, source="cross-node"))
    else:
        out.append(Result(check="cluster.mtu", node=CLUSTER, status=Status.PASS,
                          summary=f"{len(paths.links)} node-to-peer jumbo path(s) tested", facts=facts,
                          source="cross-node"))
    return out


def grade_nodes(ctx: ClusterContext) -> Iterable[Result]:
    want = ctx.options.extra.get("expect_nodes")
    if not want:
        return []
    ok = [n for n in ctx.nodes if not ctx.node_errors.get(n)]
    missing = [n for n in ctx.nodes if ctx.node_errors.get(n)]
    if len(ok) >= int(want):
        return [Result(check="cluster.nodes", node=CLUSTER, status=Status.PASS,
                       summary=f"{len(ok)} of {want} expected nodes answered", facts={"expected": want, "ok": ok})]
    return [coded_result("cluster.nodes/short", "cluster.nodes", CLUSTER,
                         f"only {len(ok)} of {want} expected nodes answered",
                         [f"{n}: {ctx.node_errors[n]}" for n in missing],
                         "fix or replace the missing nodes before launching; the job would start short",
                         {"expected": want, "ok": ok, "missing": missing})]


register_cluster(ClusterCheck(id="cluster.versions", title="Same versions on every node", grade=grade_versions,
                              probes=(PROBE_OFED, PROBE_KERNEL, PROBE_NCCL_LIBS),
                              catches="a node with another driver, CUDA, NCCL, OFED, HCA firmware or kernel"))
register_cluster(ClusterCheck(id="cluster.nccl_env", title="Identical NCCL environment", grade=grade_nccl_env,
                              probes=(PROBE_ENV,),
                              catches="NCCL_* / TORCH_NCCL_* set differently on one node"))
register_cluster(ClusterCheck(id="cluster.mtu", title="MTU path matrix", grade=grade_mtu,
                              catches="the node whose link drops jumbo frames (silent loss, frag needed), "
                                      "an ssh or srun connection that stalls behind it"))
register_cluster(ClusterCheck(id="cluster.nodes", title="Expected node count", grade=grade_nodes, min_nodes=1,
                              catches="an allocation that came up short"))
