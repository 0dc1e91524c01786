"""Node pairs: which pairs to measure, and which node or link a set of pair results blames.

Pure (no torch, no I/O): the ranks run it to agree on the next round, the launcher runs it
again on the collected results to write the verdict.

Isolation without O(N^2) runs: measure disjoint pairs (ring neighbours: every node is in
two pairs, two or three rounds for any N). A node with a good pair is cleared. A node whose
every pair is bad while a partner is cleared is the culprit. A suspect with no cleared
partner yet is re-paired with a cleared node it has not met; a bad pair of two cleared
nodes is a bad link. An extra round costs one pair per unresolved suspect, so the total
stays about N + suspects pairs, not N^2.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from preflight.model import LINK_SEP

Pair = tuple[str, str]


def ring_rounds(nodes: list[str]) -> list[list[Pair]]:
    """Ring neighbour pairs (i, i+1), grouped into rounds of disjoint pairs."""
    n = len(nodes)
    if n < 2:
        return []
    if n == 2:
        return [[(nodes[0], nodes[1])]]
    edges = [(nodes[i], nodes[(i + 1) % n]) for i in range(n)]
    if n % 2 == 0:
        return [edges[0::2], edges[1::2]]
    return [edges[0:n - 1:2], edges[1:n - 1:2], [edges[n - 1]]]


def all_pair_rounds(nodes: list[str]) -> list[list[Pair]]:
    """Every pair once, in rounds of disjoint pairs (the circle method)."""
    names: list[str | None] = list(nodes)
    if len(names) < 2:
        return []
    if len(names) % 2:
        names.append(None)
    n = len(names)
    rounds: list[list[Pair]] = []
    for _ in range(n - 1):
        rnd = []
        for i in range(n // 2):
            a, b = names[i], names[n - 1 - i]
            if a is not None and b is not None:
                rnd.append((a, b))
        rounds.append(rnd)
        names = [names[0], names[-1], *names[1:-1]]
    return rounds


def key(a: str, b: str) -> str:
    return f"{a}{LINK_SEP}{b}" if a <= b else f"{b}{LINK_SEP}{a}"


@dataclass
class PairVerdict:
    good: bool
    reason: str
    kind: str = "ok"  # ok | slow | stalled (stalled, error, missing: no result)


def merged(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One result per pair: a pair measured twice (a retest) keeps its best completed run."""
    best: dict[str, dict[str, Any]] = {}
    for r in results:
        k = key(r["a"], r["b"])
        old = best.get(k)
        if old is None:
            best[k] = r
        elif r.get("status") == "ok" and (old.get("status") != "ok"
                                          or float(r.get("bw_gbps") or 0) > float(old.get("bw_gbps") or 0)):
            best[k] = {**r, "tries": int(old.get("tries", 1)) + 1}
        else:
            best[k] = {**old, "tries": int(old.get("tries", 1)) + 1}
    return list(best.values())


def classify(results: list[dict[str, Any]], min_gbps: float = 0.0, slow_ratio: float = 0.5) -> dict[str, PairVerdict]:
    """Each measured pair good or bad: stalled/failed, under the absolute floor, or under
    slow_ratio x the median bandwidth of the pairs that completed."""
    results = merged(results)
    done = [r["bw_gbps"] for r in results if r.get("status") == "ok" and isinstance(r.get("bw_gbps"), (int, float))]
    median = statistics.median(done) if done else 0.0
    out: dict[str, PairVerdict] = {}
    for r in results:
        k = key(r["a"], r["b"])
        st = r.get("status")
        if st != "ok":
            where = f" at {r['stalled_bytes']} B" if r.get("stalled_bytes") else ""
            out[k] = PairVerdict(False, f"{st}{where}: {r.get('error') or 'no result'}", "stalled")
            continue
        bw = float(r.get("bw_gbps") or 0.0)
        if min_gbps and bw < min_gbps:
            out[k] = PairVerdict(False, f"{bw:.4g} GB/s under the floor {min_gbps:g} GB/s", "slow")
        elif slow_ratio and median and bw < slow_ratio * median:
            out[k] = PairVerdict(False, f"{bw:.4g} GB/s under {slow_ratio:g} x the median pair {median:.4g} GB/s",
                                 "slow")
        else:
            out[k] = PairVerdict(True, f"{bw:.4g} GB/s")
    return out


@dataclass
class Isolation:
    culprits: dict[str, list[str]] = field(default_factory=dict)  # node -> evidence
    links: dict[str, str] = field(default_factory=dict)  # "a<->b" -> reason
    cleared: list[str] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)
    systemic: bool = False  # every measured pair is bad: no healthy reference
    bad_pairs: dict[str, str] = field(default_factory=dict)
    pairs: int = 0


def analyse(nodes: list[str], results: list[dict[str, Any]], min_gbps: float = 0.0,
            slow_ratio: float = 0.5) -> Isolation:
    verdicts = classify(results, min_gbps, slow_ratio)
    results = merged(results)
    partners: dict[str, list[tuple[str, PairVerdict]]] = {n: [] for n in nodes}
    for r in results:
        v = verdicts[key(r["a"], r["b"])]
        partners.setdefault(r["a"], []).append((r["b"], v))
        partners.setdefault(r["b"], []).append((r["a"], v))
    cleared = {n for n, ps in partners.items() if any(v.good for _, v in ps)}
    iso = Isolation(cleared=sorted(cleared), pairs=len(results),
                    bad_pairs={k: v.reason for k, v in verdicts.items() if not v.good})
    for n in nodes:
        ps = partners.get(n, [])
        if not ps or n in cleared:
            continue
        against_cleared = [(p, v) for p, v in ps if p in cleared]
        if against_cleared:
            iso.culprits[n] = [f"{key(n, p)}: {v.reason}" for p, v in ps]
        else:
            iso.unresolved.append(n)
    for r in results:
        a, b = r["a"], r["b"]
        v = verdicts[key(a, b)]
        if not v.good and a in cleared and b in cleared:
            iso.links[key(a, b)] = v.reason
    iso.systemic = bool(results) and not cleared
    return iso


def next_round(nodes: list[str], results: list[dict[str, Any]], min_gbps: float = 0.0,
               slow_ratio: float = 0.5) -> list[Pair]:
    """Disjoint pairs for the next round, empty when nothing is left to learn: first a
    second try of each pair that was slow (not stalled) once, so noise does not blame a
    node; then each unresolved suspect with a cleared node it has not met (or, with none
    cleared, with another node)."""
    verdicts = classify(results, min_gbps, slow_ratio)
    tries: dict[str, int] = {}
    for r in results:
        tries[key(r["a"], r["b"])] = tries.get(key(r["a"], r["b"]), 0) + 1
    busy: set[str] = set()
    out: list[Pair] = []
    for r in merged(results):
        k = key(r["a"], r["b"])
        v = verdicts[k]
        if v.kind == "slow" and tries[k] == 1 and r["a"] not in busy and r["b"] not in busy:
            out.append((r["a"], r["b"]))
            busy.update((r["a"], r["b"]))
    if out:
        return out
    iso = analyse(nodes, results, min_gbps, slow_ratio)
    if not iso.unresolved:
        return []
    refs = [n for n in nodes if n in set(iso.cleared)]
    for s in iso.unresolved:
        pool = refs or [n for n in nodes if n != s]
        for p in pool:
            if p not in busy and s not in busy and p != s and key(s, p) not in tries:
                out.append((p, s) if nodes.index(p) < nodes.index(s) else (s, p))
                busy.update((s, p))
                break
    return out


def matrix(nodes: list[str], results: list[dict[str, Any]], field_name: str = "bw_gbps") -> list[list[str]]:
    """Rows of the pair matrix (first column the node), cells the value or the status."""
    by = {key(r["a"], r["b"]): r for r in merged(results)}
    rows = []
    for a in nodes:
        row = [a]
        for b in nodes:
            r = by.get(key(a, b)) if a != b else None
            if a == b:
                row.append("-")
            elif r is None:
                row.append("")
            elif r.get("status") != "ok":
                row.append(str(r.get("status")))
            else:
                v = r.get(field_name)
                row.append(f"{v:.4g}" if isinstance(v, (int, float)) else "?")
        rows.append(row)
    return rows
