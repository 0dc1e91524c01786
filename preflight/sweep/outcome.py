"""From the ranks' events to Results: the sweep table, the pair matrix, the culprit.

Pure (events + profile -> results). The all-reduce rows are written out as an nccl-tests
table and graded by the very `nccl.allreduce` grader that grades nccl-tests files in
`analyze`, so a sweep and an all_reduce_perf run of the same numbers get the same verdict.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from preflight import lazyre
from preflight.model import CLUSTER, Capture, CaptureState, Result, Status
from preflight.parsers.nccl_tests import NcclTestRow, NcclTests
from preflight.profile import Profile
from preflight.sweep import pairs as pairmod
from preflight.sweep.launch import STALLED, Failure, Launched
from preflight.sweep.spec import NCCL_TESTS_DTYPE, SweepSpec

GROUP = CLUSTER  # the node label of group-level results


@dataclass
class SweepOutcome:
    spec: SweepSpec
    nodes: list[str]
    rows: list[dict[str, Any]] = field(default_factory=list)
    pairs: list[dict[str, Any]] = field(default_factory=list)
    stalls: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    deadline_hits: list[dict[str, Any]] = field(default_factory=list)
    ranks: dict[int, dict[str, Any]] = field(default_factory=dict)  # rank -> hello event
    in_flight: dict[int, dict[str, Any]] = field(default_factory=dict)  # rank -> begin without end
    done: set[int] = field(default_factory=set)
    logs: list[str] = field(default_factory=list)
    raw: dict[str, list[str]] = field(default_factory=dict)
    started_nodes: set[str] = field(default_factory=set)
    timed_out: bool = False
    seconds: float = 0.0
    world: int = 0
    agents: dict[str, dict[str, Any]] = field(default_factory=dict)  # node -> its agent's first line
    failures: list[Failure] = field(default_factory=list)  # nodes whose agent could not start or was lost

    @property
    def hosts(self) -> list[str]:
        return list(dict.fromkeys(h["node"] for _, h in sorted(self.ranks.items())))

    def node_of(self, rank: int | None) -> str:
        if rank is None or rank not in self.ranks:
            return "?"
        return str(self.ranks[rank]["node"])


def _on_agent(out: SweepOutcome, ev: dict[str, Any]) -> None:
    out.started_nodes.add(str(ev.get("node")))


def _on_hello(out: SweepOutcome, ev: dict[str, Any]) -> None:
    if isinstance(ev.get("rank"), int):
        out.ranks[ev["rank"]] = ev
        out.world = max(out.world, int(ev.get("world") or 0))
        out.started_nodes.add(str(ev.get("node")))


def _on_begin(out: SweepOutcome, ev: dict[str, Any]) -> None:
    if isinstance(ev.get("rank"), int):
        out.in_flight[ev["rank"]] = ev


def _on_end(out: SweepOutcome, ev: dict[str, Any]) -> None:
    if isinstance(ev.get("rank"), int):
        out.in_flight.pop(ev["rank"], None)


def _on_stall(out: SweepOutcome, ev: dict[str, Any]) -> None:
    out.stalls.append(ev)
    _on_end(out, ev)


def _on_agent_kill(out: SweepOutcome, ev: dict[str, Any]) -> None:
    if "deadline" in str(ev.get("reason", "")):
        out.deadline_hits.append({**ev, "phase": "agent"})  # the node agent cut its ranks off


def _on_done(out: SweepOutcome, ev: dict[str, Any]) -> None:
    if isinstance(ev.get("rank"), int):
        out.done.add(ev["rank"])


def _on_log(out: SweepOutcome, ev: dict[str, Any]) -> None:
    out.logs.append(str(ev.get("line", "")))


# what each event of the ranks and agents adds to the outcome
_ON_EVENT: dict[str, Callable[[SweepOutcome, dict[str, Any]], None]] = {
    "agent": _on_agent, "hello": _on_hello, "begin": _on_begin, "end": _on_end,
    "row": lambda out, ev: out.rows.append(ev), "stall": _on_stall,
    "error": lambda out, ev: out.errors.append(ev), "deadline": lambda out, ev: out.deadline_hits.append(ev),
    "agent_kill": _on_agent_kill, "done": _on_done, "pair": lambda out, ev: out.pairs.append(ev), "log": _on_log,
}


def collect(launched: Launched, spec: SweepSpec, nodes: list[str]) -> SweepOutcome:
    """The launch's events gathered into one outcome (rows sorted by size)."""
    out = SweepOutcome(spec=spec, nodes=list(nodes), raw=launched.raw, timed_out=launched.timed_out,
                       seconds=launched.seconds, agents=dict(launched.agents), failures=list(launched.failures))
    for ev in launched.events:
        on = _ON_EVENT.get(str(ev.get("ev")))
        if on is not None:
            on(out, ev)
    out.rows.sort(key=lambda r: r["bytes"])
    if not out.nodes:
        out.nodes = out.hosts
    return out


# ----------------------------------------------------------------------------------------
# the nccl-tests table of the sweep's rows


def nccl_tests_facts(out: SweepOutcome) -> NcclTests:
    """The sweep's measurements as the facts an nccl-tests table gives (out-of-place columns)."""
    spec = out.spec
    dtype = NCCL_TESTS_DTYPE.get(spec.dtype, spec.dtype)
    facts = NcclTests(header=f"# preflight sweep: {spec.backend}, {spec.min_bytes}..{spec.max_bytes} B, "
                             f"factor {spec.factor}, {spec.iters} iters", backend=spec.backend)
    for r, h in sorted(out.ranks.items()):
        facts.ranks.append({"rank": r, "group": 0, "pid": int(h.get("pid") or 0), "host": str(h.get("node")),
                            "device": int(h.get("local_rank") or 0), "bus": str(h.get("device", "")),
                            "model": str(h.get("model", ""))})
    for row in out.rows:
        facts.rows.append(NcclTestRow(bytes=int(row["bytes"]), count=int(row["count"]), dtype=dtype,
                                      time_us=round(row["time_us"], 2), algbw=round(row["algbw"], 2),
                                      busbw=round(row["busbw"], 2),  # the precision all_reduce_perf prints
                                      wrong=int(row.get("wrong") or 0),
                                      line=f"{row['bytes']} B: {row['time_us']:.2f} us, algbw {row['algbw']:.2f}, "
                                           f"busbw {row['busbw']:.2f} GB/s, {int(row.get('wrong') or 0)} wrong"))
    if out.rows:
        wrong = sum(int(r.get("wrong") or 0) for r in out.rows)
        facts.oob_values = wrong
        facts.avg_busbw = round(sum(round(r["busbw"], 2) for r in out.rows) / len(out.rows), 4)
    return facts


def effective_profile(profile: Profile, expect_busbw: float | None = None, expect_min_bytes: int | None = None,
                      expect_warn_busbw: float | None = None) -> Profile:
    """The profile with operator overrides (--expect-busbw ...) applied to both tables, each
    override keeping its provenance."""
    if expect_busbw is None and expect_min_bytes is None and expect_warn_busbw is None:
        return profile
    values = dict(profile.values)
    sources = dict(profile.sources)
    for table in ("single_node", "multi_node"):
        if expect_busbw is not None:
            k = f"nccl.allreduce.{table}.peak_busbw_fail"
            values[k] = float(expect_busbw)
            sources[k] = "--expect-busbw on the command line"
            kw = f"nccl.allreduce.{table}.peak_busbw_warn"
            values[kw] = float(expect_warn_busbw if expect_warn_busbw is not None else expect_busbw)
            sources[kw] = "--expect-warn-busbw on the command line" if expect_warn_busbw is not None else \
                "--expect-busbw on the command line"
    if expect_min_bytes is not None:
        values["nccl.allreduce.peak_min_bytes"] = int(expect_min_bytes)
        sources["nccl.allreduce.peak_min_bytes"] = "--expect-min-bytes on the command line"
    return Profile(name=profile.name + "+overrides", description=profile.description, values=values,
                   sources=sources, match=profile.match, path=profile.path)


def group_floor(profile: Profile, multi_node: bool) -> tuple[float, int]:
    """(fail floor busbw GB/s, from which size) for the ranks' decision to isolate."""
    table = "multi_node" if multi_node else "single_node"
    fail = profile.get(f"nccl.allreduce.{table}.peak_busbw_fail") or 0.0
    return float(fail), int(profile.get("nccl.allreduce.peak_min_bytes") or 0)


def expected_row(row: dict[str, Any], profile: Profile, multi_node: bool) -> tuple[str, Status]:
    """The expectation shown next to a row, and the row's own status against it."""
    table = "multi_node" if multi_node else "single_node"
    parts: list[str] = []
    status = Status.PASS
    if int(row.get("wrong") or 0):
        status = Status.FAIL
    peak_min = int(profile.get("nccl.allreduce.peak_min_bytes") or 0)
    warn = profile.get(f"nccl.allreduce.{table}.peak_busbw_warn")
    fail = profile.get(f"nccl.allreduce.{table}.peak_busbw_fail")
    if row["bytes"] >= peak_min and (warn or fail):
        parts.append(f">= {warn or fail:g} GB/s" + (f" (fail < {fail:g})" if fail and warn and fail != warn else ""))
        if fail and row["busbw"] < float(fail):
            status = Status.FAIL
        elif warn and row["busbw"] < float(warn) and status is Status.PASS:
            status = Status.WARN
    tcp_min = int(profile.get("nccl.allreduce.tcp_fallback_min_bytes") or 0)
    tcp_bw = float(profile.get("nccl.allreduce.tcp_fallback_max_busbw") or 0)
    if tcp_min and tcp_bw and row["bytes"] >= tcp_min and row["busbw"] < tcp_bw:
        parts.append(f"TCP-fallback signature (< {tcp_bw:g} GB/s)")
        status = Status.FAIL
    for entry in profile.get(f"nccl.allreduce.{table}.sizes") or []:
        if isinstance(entry, dict) and int(entry.get("bytes", -1)) == row["bytes"] and "max_time_us" in entry:
            parts.append(f"<= {float(entry['max_time_us']):g} us")
            if row["time_us"] > float(entry["max_time_us"]) and status is Status.PASS:
                status = Status.WARN
    return "; ".join(parts) or "-", status


# ----------------------------------------------------------------------------------------
# grading


def _ranks_text(ranks: list[int], out: SweepOutcome) -> str:
    by: dict[str, list[int]] = {}
    for r in sorted(ranks):
        by.setdefault(out.node_of(r), []).append(r)
    return ", ".join(f"{n} (rank{'s' if len(rs) > 1 else ''} {','.join(map(str, rs))})" for n, rs in by.items())


def _fmt(b: int) -> str:
    for unit, div in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if b >= div and b % div == 0:
            return f"{b // div} {unit}"
    return f"{b} B"


def grade(out: SweepOutcome, profile: Profile, registry: Any = None) -> tuple[list[Result], pairmod.Isolation]:
    """Results of a sweep: nccl.allreduce, nccl.pingpong (group + named culprits),
    nccl.transport, and ERROR for nodes that never started."""
    from preflight import registry as regmod

    reg = registry or regmod.load()
    if out.failures:
        return launch_failures(out), pairmod.Isolation()
    multi = len(out.hosts) > 1 if out.ranks else len(out.nodes) > 1
    results = _not_started(out)
    iso = pairmod.analyse(out.nodes if out.nodes else out.hosts, out.pairs, out.spec.pair_min_gbps,
                          out.spec.pair_slow_ratio)
    if out.spec.allreduce:
        results += _allreduce(out, profile, reg, iso, multi, unstarted=bool(results))
    results += _pingpong_results(out, iso)
    results.append(_transport(out, profile, reg))
    return results, iso


def _not_started(out: SweepOutcome) -> list[Result]:
    """ERROR for each node that never started a rank."""
    results = []
    for n in out.nodes:
        if n not in out.started_nodes:
            lines = (out.raw.get(n) or out.raw.get("srun") or [])[-6:]
            results.append(Result(check="nccl.allreduce", node=n, status=Status.ERROR,
                                  summary=f"could not start the sweep's ranks on {n}",
                                  evidence=lines or ["no output from the launch"],
                                  remedy=f"check that {n} is reachable (ssh {n} true), runs python3 with torch "
                                         "and preflight importable; then rerun the sweep",
                                  source="sweep"))
    return results


def _graded_table(out: SweepOutcome, profile: Profile, reg: Any) -> Result | None:
    """The nccl-tests grader's result over the sweep's rows (None: no rows, or no grader)."""
    from preflight.grading import FactStore, grade_node
    from preflight.registry import Options

    check = reg.checks.get("nccl.allreduce")
    if check is None or not out.rows:
        return None
    store = FactStore(reg, facts={"nccl-tests": nccl_tests_facts(out)})
    return grade_node([check], GROUP, store, profile, Options(mode="run"))[0]


def _allreduce_facts(out: SweepOutcome, profile: Profile, multi: bool) -> dict[str, Any]:
    """The all-reduce result's facts: each row with its expectation and status, the averages."""
    rows_facts = []
    for row in out.rows:
        exp, st = expected_row(row, profile, multi)
        rows_facts.append({k: row.get(k) for k in ("bytes", "count", "dtype", "time_us", "median_us", "p99_us",
                                                   "min_us", "algbw", "busbw", "wrong")}
                          | {"expected": exp, "status": st.value})
    busbws = [r["busbw"] for r in out.rows]
    return {
        "avg_busbw": round(sum(busbws) / len(busbws), 6) if busbws else None,
        "peak_busbw": max(busbws) if busbws else None,
        "rows": rows_facts, "backend": out.spec.backend, "dtype": out.spec.dtype, "world": out.world,
        "hosts": out.hosts, "table": "multi_node" if multi else "single_node",
    }


def _allreduce(out: SweepOutcome, profile: Profile, reg: Any, iso: pairmod.Isolation, multi: bool,
               unstarted: bool) -> list[Result]:
    """nccl.allreduce of the group: a stall where the sweep stopped, else the graded table (with
    the isolation's culprits and the ranks' errors), else ERROR when nothing was measured (unless
    a node that never started already says why)."""
    ar = _graded_table(out, profile, reg)
    facts = _allreduce_facts(out, profile, multi)
    stuck = _stuck(out)
    if stuck:
        return [_stall_result(out, stuck, iso, facts)]
    if ar is not None:
        ar.facts = {**ar.facts, **facts, "graded_from": "nccl-tests table of the sweep rows"}
        if ar.status in (Status.FAIL, Status.WARN) and (iso.culprits or iso.links):
            ar.summary += f"; isolation names {', '.join([*iso.culprits, *iso.links])}"
        elif ar.status in (Status.FAIL, Status.WARN) and out.pairs and not iso.bad_pairs:
            ar.evidence.append("every node pair passed ping-pong: no single node or link to blame "
                               "(suspect the switch, the collective algorithm or the NCCL environment)")
        ar.source = "sweep"
        if out.errors:
            ar.status = Status.FAIL
            ar.evidence += [f"rank {e.get('rank')} ({out.node_of(e.get('rank'))}): {e.get('error')}"
                            for e in out.errors[:5]]
        return [ar]
    if unstarted:
        return []
    return [Result(check="nccl.allreduce", node=GROUP, status=Status.ERROR,
                   summary="the sweep measured nothing",
                   evidence=[*(f"rank {e.get('rank')}: {e.get('error')}" for e in out.errors[:5]),
                             *[ln for ls in out.raw.values() for ln in ls][-5:]],
                   remedy="read the errors above; run `preflight sweep --nproc 2` on one node first",
                   facts=facts, source="sweep")]


def _stall_result(out: SweepOutcome, stuck: dict[str, Any], iso: pairmod.Isolation,
                  facts: dict[str, Any]) -> Result:
    """FAIL: the all-reduce stopped at a size, on the ranks that never finished it."""
    size = stuck["bytes"]
    ranks_txt = _ranks_text(stuck["ranks"], out)
    blame = f"; isolation names {', '.join(iso.culprits)}" if iso.culprits else ""
    blame += f"; bad link {', '.join(iso.links)}" if iso.links else ""
    ev = [f"{_fmt(size) if isinstance(size, int) else size} all-reduce: {stuck['how']} on {ranks_txt}"]
    ev += [f"rank {s.get('rank')} ({out.node_of(s.get('rank'))}): {s.get('error', '')}"
           for s in (out.stalls + out.errors)[:6]]
    facts.update(stalled_bytes=size, stuck_ranks=stuck["ranks"],
                 stuck_nodes=sorted({out.node_of(r) for r in stuck["ranks"]}))
    if out.rows:
        last = out.rows[-1]
        ev.append(f"last completed size {_fmt(last['bytes'])}: {last['time_us']:.1f} us, "
                  f"busbw {last['busbw']:.4g} GB/s")
    return Result(
        check="nccl.allreduce", node=GROUP, status=Status.FAIL,
        summary=f"all-reduce stalled at {_fmt(size) if isinstance(size, int) else size} "
                f"({stuck['how']}){blame}",
        evidence=ev,
        remedy="a node or link drops large frames or hangs: drain the node isolation names; check its MTU "
               "end to end (ping -M do -s 8972), its NIC/cable and the switch port",
        facts=facts, source="sweep")


NO_TORCH = "torch is not installed for this python"


def launch_failures(out: SweepOutcome) -> list[Result]:
    """A launch that ended because nodes could not start their agents (or lost them).

    When no node could import torch, the sweep is SKIP: the environment it was pointed at has
    no torch, which says nothing about the cluster (the remedy names --sweep-python). Any
    other failure is an ERROR of the node it happened on, with the launcher's own message; the
    group row says the sweep was not measured and why, never a stall it did not see."""
    fails = out.failures
    with_torch = sorted(n for n, a in out.agents.items() if a.get("torch"))
    names = ", ".join(f.node for f in fails)
    if all(f.cause == NO_TORCH for f in fails) and not with_torch:
        pythons = sorted({str(out.agents.get(f.node, {}).get("python") or "") for f in fails} - {""})
        where = f" ({', '.join(pythons)})" if pythons else ""
        return [Result(check="nccl.allreduce", node=GROUP, status=Status.SKIP,
                       summary=f"collective sweep not run: torch is not importable by the python that would run the "
                               f"ranks{where} on {names}",
                       evidence=[f"{f.node}: {f.message}" for f in fails][:8],
                       remedy="the ranks run under the training job's python: point the sweep at it with "
                              "--sweep-python PATH (`preflight run`) or --python PATH (`preflight sweep`), e.g. "
                              "the job's venv/bin/python, or install torch for that python",
                       facts={"reason": "no-torch", "nodes": [f.node for f in fails], "pythons": pythons},
                       source="sweep")]
    results: list[Result] = []
    for f in fails:
        lines = [ln for ln in f.lines if ln.strip() and ln.strip() != f.message][-5:]
        when = "lost during the sweep" if f.started else "could not start"
        results.append(Result(
            check="nccl.allreduce", node=f.node, status=Status.ERROR,
            summary=f"sweep agent {when} on {f.node} after {f.after_s:.1f} s: {f.summary()}",
            evidence=[f"{f.node}: {f.message}", *lines] + ([f"exit code {f.rc}"] if f.rc is not None else []),
            remedy=failure_remedy(f), facts={"cause": f.cause, "message": f.message, "rc": f.rc, "after_s": f.after_s,
                                             "started": f.started}, source="sweep"))
    fine = [n for n in out.nodes if n not in {f.node for f in fails}]
    results.append(Result(
        check="nccl.allreduce", node=GROUP, status=Status.SKIP,
        summary=f"not measured: the sweep stopped after {out.seconds:.1f} s because {names} "
                f"{'was' if len(fails) == 1 else 'were'} not able to take part ({fails[0].summary()})",
        evidence=[f"{f.node}: {f.summary()}" for f in fails][:8]
        + ([f"answered: {', '.join(n for n in fine if n in out.agents)}"] if fine else []),
        remedy="fix or drain the named node(s), then rerun the sweep",
        facts={"reason": "launch-failed", "failed": [f.node for f in fails], "rows_measured": len(out.rows)}, source="sweep"))
    return results


_TARGET = lazyre.compile(r"\(((?:\d{1,3}\.){3}\d{1,3}|\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):(\d+)\)")


def _path_to(f: Failure) -> str:
    """The node's address as the launcher's message names it (`node2 (10.1.0.2:22)`), else its name."""
    m = _TARGET.search(f.message)
    return m.group(1).strip("[]") if m else f.node


def failure_remedy(f: Failure) -> str:
    """What to do about one node's agent that could not start or was lost, by its cause; an
    SSH session that stalled past the handshake names the path and the check that finds the
    node whose link drops jumbo frames (net.mtu)."""
    addr = _path_to(f)
    if f.cause == STALLED:
        return (f"large packets between this machine and {f.node}" + (f" ({addr})" if addr != f.node else "")
                + " are dropped (an MTU black hole: the SSH handshake's small packets got through, then the session "
                f"stalled): check the MTU of every hop of that path (ping -M do -s 8972 {addr} must answer) and run "
                "`preflight run --only net.mtu` over these nodes (its path matrix names the node whose link drops "
                f"jumbo frames); drain {f.node} until it is fixed")
    return {
        "host key refused": f"{f.node}'s host key does not match known_hosts: if the node was reinstalled, "
                            f"verify and update its key (ssh-keygen -R {f.node}; ssh {f.node}), else "
                            "investigate before trusting it",
        NO_TORCH: f"install torch for the python the sweep uses on {f.node}, or point the sweep at the job's "
                  "python (--sweep-python PATH / --python PATH); every node needs the same environment",
        "output stalled": f"check {f.node}'s path MTU end to end (ping -M do -s 8972 {addr}; net.mtu of "
                          "`preflight run --only net.mtu` over these nodes names the node whose link drops jumbo "
                          "frames), its NIC and switch port, and whether the node hangs",
        "no answer": f"check that {f.node} answers (ssh {f.node} true) and is not hung; check its path MTU",
        "ssh connection timed out": f"check that {f.node} is up and that this machine reaches it "
                                    f"(ssh {f.node} true; ping {addr})",
        "node unreachable": f"check that {f.node} is up and routed from this machine (ping {addr})",
        "ssh connection refused (sshd not running?)": f"start sshd on {f.node}, or drain it",
        "unknown host name": f"check the name {f.node} (DNS, /etc/hosts, the ssh configuration's HostName)",
        "ssh login refused": f"check the key and the user the sweep logs in to {f.node} with (ssh {f.node} true)",
    }.get(f.cause, f"check that {f.node} is reachable (ssh {f.node} true) and runs the sweep's python with "
                   "torch and preflight importable; then rerun the sweep")


def _stuck(out: SweepOutcome) -> dict[str, Any] | None:
    """Where the all-reduce stopped: a process-group timeout, the deadline, or ranks cut off."""
    hits = [d for d in out.deadline_hits if d.get("phase") == "allreduce"]
    if out.stalls:
        sizes = [s.get("bytes") for s in out.stalls if s.get("phase") == "allreduce"]
        if sizes:
            # a peer cut off at the deadline also makes the others' collective fail: name the
            # bound that really ended it
            how = (f"deadline {out.spec.deadline_s:g} s" if (out.deadline_hits or out.timed_out)
                   else f"process-group timeout {out.spec.op_timeout_s:g} s")
            return {"bytes": min(b for b in sizes if isinstance(b, int)), "how": how,
                    "ranks": sorted({int(s["rank"]) for s in out.stalls})}
    if hits:
        return {"bytes": hits[0].get("bytes"), "how": f"deadline {out.spec.deadline_s:g} s",
                "ranks": sorted({int(d["rank"]) for d in hits})}
    if out.timed_out:
        stuck = [r for r, ev in out.in_flight.items() if ev.get("phase") == "allreduce"]
        if stuck:
            return {"bytes": out.in_flight[stuck[0]].get("bytes"), "how": f"killed at the deadline "
                    f"{out.spec.deadline_s:g} s", "ranks": sorted(stuck)}
    # ranks that stopped before the last size without saying why are a stall too, never a pass
    planned = out.spec.sizes() if out.spec.allreduce else []
    measured = {int(r["bytes"]) for r in out.rows}
    unfinished = sorted(set(range(out.world)) - out.done) if out.world else []
    if planned and unfinished and len(measured) < len(planned):
        left = [b for b in planned if b not in measured]
        how = (f"deadline {out.spec.deadline_s:g} s" if (out.deadline_hits or out.timed_out)
               else "ranks ended before finishing")
        return {"bytes": left[0], "how": how, "ranks": unfinished}
    return None


def _pingpong_results(out: SweepOutcome, iso: pairmod.Isolation) -> list[Result]:
    nodes = out.nodes or out.hosts
    if len(nodes) < 2 or (not out.pairs and out.spec.pingpong == "none"):
        return []
    facts = {"pairs": out.pairs, "nodes": nodes,
             "matrix_bw_gbps": pairmod.matrix(nodes, out.pairs, "bw_gbps"),
             "matrix_lat_us": pairmod.matrix(nodes, out.pairs, "lat_us"),
             "culprits": sorted(iso.culprits), "links": sorted(iso.links), "cleared": iso.cleared,
             "unresolved": iso.unresolved, "bad_pairs": iso.bad_pairs}
    if not out.pairs:
        return [Result(check="nccl.pingpong", node=GROUP, status=Status.ERROR,
                       summary="no node pair was measured (the ranks stopped before the ping-pong)",
                       evidence=[f"rank {e.get('rank')}: {e.get('error')}" for e in out.errors[:5]],
                       remedy="rerun with a longer --deadline; read the all-reduce result first",
                       facts=facts, source="sweep")]
    res: list[Result] = []
    best = pairmod.merged(out.pairs)
    ok = [p for p in best if p.get("status") == "ok"]
    pair_ev = [_pair_line(p) for p in best]
    if not iso.bad_pairs:
        bws = sorted(p.get("bw_gbps") or 0.0 for p in ok)
        lats = sorted(p.get("lat_us") or 0.0 for p in ok)
        res.append(Result(check="nccl.pingpong", node=GROUP, status=Status.PASS,
                          summary=f"{len(ok)} node pair(s): send/recv {bws[0]:.4g}-{bws[-1]:.4g} GB/s, "
                                  f"latency {lats[0]:.1f}-{lats[-1]:.1f} us",
                          evidence=pair_ev[:8], facts=facts, source="sweep"))
        return res
    if iso.culprits or iso.links:
        named = [*iso.culprits, *iso.links]
        summary = f"bad {'node' if iso.culprits else 'link'}(s): {', '.join(named)}"
    elif iso.systemic:
        summary = f"every measured pair is bad ({len(best)} pairs): no healthy node to compare with"
    else:
        summary = f"{len(iso.bad_pairs)} bad pair(s); unresolved: {', '.join(iso.unresolved)}"
    res.append(Result(check="nccl.pingpong", node=GROUP, status=Status.FAIL, summary=summary,
                      evidence=[f"{k}: {v}" for k, v in iso.bad_pairs.items()] + pair_ev[:12],
                      remedy="drain the named node(s) and check their NIC, cable, switch port and MTU; for a bad "
                             "link check the path between the two nodes" if (iso.culprits or iso.links) else
                      "the fabric or the configuration is common to all nodes: check the switch, MTU and "
                      "NCCL/GLOO interface settings",
                      facts=facts, source="sweep"))
    for n, ev in iso.culprits.items():
        partners_ok = [p for p in ok if n not in (p["a"], p["b"])]
        ref = ""
        if partners_ok:
            bws = sorted(p.get("bw_gbps") or 0.0 for p in partners_ok)
            ref = f" while pairs without it reach {bws[len(bws) // 2]:.4g} GB/s"
        res.append(Result(check="nccl.pingpong", node=n, status=Status.FAIL,
                          summary=f"{n} is the bad node: every pair with it is slow or stalls{ref}",
                          evidence=ev, remedy=f"drain {n}; check its NIC (link speed, errors), cable, switch port "
                                              "and MTU (a jumbo black hole stalls large messages only)",
                          facts={"node": n, "pairs": [p for p in best if n in (p["a"], p["b"])]},
                          source="sweep"))
    for link, why in iso.links.items():
        res.append(Result(check="nccl.pingpong", node=link, status=Status.FAIL,
                          summary=f"link {link} is bad while both nodes pass with others: {why}",
                          evidence=[f"{link}: {why}"],
                          remedy="check the path between these two nodes (switch ports, routing, ACLs, MTU)",
                          facts={"link": link}, source="sweep"))
    return res


def _pair_line(p: dict[str, Any]) -> str:
    k = pairmod.key(p["a"], p["b"])
    if p.get("status") != "ok":
        at = f" at {_fmt(p['stalled_bytes'])}" if isinstance(p.get("stalled_bytes"), int) else ""
        return f"{k}: {p.get('status')}{at} ({str(p.get('error', ''))[:160]})"
    tries = f" (best of {p['tries']} tries)" if int(p.get("tries") or 1) > 1 else ""
    return (f"{k}: {_fmt(int(p.get('bytes') or 0))} send/recv {float(p.get('bw_gbps') or 0):.4g} GB/s{tries}, "
            f"8 B latency {float(p.get('lat_us') or 0):.1f} us")


def _transport(out: SweepOutcome, profile: Profile, reg: Any) -> Result:
    from preflight.grading import FactStore, grade_node
    from preflight.registry import Options

    if out.spec.backend != "nccl":
        return Result(check="nccl.transport", node=GROUP, status=Status.SKIP,
                      summary="not applicable: the sweep ran on gloo (CPU), NCCL chose no transport",
                      facts={"net": None, "backend": out.spec.backend}, source="sweep")
    check = reg.checks.get("nccl.transport")
    text = "\n".join(out.logs)
    cap = Capture(probe="nccl-log", argv=["preflight", "sweep"], state=CaptureState.OK, stdout=text, rc=0,
                  source="sweep (NCCL_DEBUG=INFO of every rank)")
    if check is None:
        return Result(check="nccl.transport", node=GROUP, status=Status.SKIP, summary="nccl.transport not loaded")
    r = grade_node([check], GROUP, FactStore(reg, captures={"nccl-log": cap}), profile, Options(mode="run"))[0]
    r.source = "sweep"
    return r
