"""A bundle's verdict: a job that a launcher restarted is judged attempt by attempt
(`preflight.triage.restarts`), any other by the rules of `preflight.triage.attribute`; the
verdict as a `triage.verdict` result beside the node checks' results."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from preflight.model import JOB, Result, Status
from preflight.runtime.story import Story
from preflight.triage import restarts
from preflight.triage.attribute import CHECK, Verdict, decide, read_bundle_facts
from preflight.triage.collect import Bundle
from preflight.triage.downtime import story_of


def triage(bundle: Bundle, registry: Any | None = None, since: datetime | None = None,
           told: Story | None = None) -> tuple[Verdict, list[Result]]:
    """Bundle -> (verdict, results: the verdict as a Result plus the node checks' results).
    `told`: the story of the bundle's run, when already read (`triage.downtime.story_of`)."""
    if since is None and bundle.job.get("start"):
        try:
            since = datetime.fromisoformat(str(bundle.job["start"]))
        except ValueError:
            since = None
    facts = read_bundle_facts(bundle, registry, since)
    told = told if told is not None else story_of(bundle)
    verdict = restarts.decide_attempts(bundle, facts, told, since)
    if verdict is None:
        last = told.attempts[-1] if told.attempts else None
        verdict = restarts.choose(decide(facts, bundle.job), last, facts, bundle.job)
        verdict.story = told.to_dict()
        verdict.recovery = verdict.recovery or {"restarts": 0, "attempts": len(told.attempts),
                                                "recovered": told.recovered, "state": told.state,
                                                "story": told.line()}
    status = {"none": Status.PASS, "slowdown": Status.WARN, "unknown": Status.ERROR}.get(verdict.category,
                                                                                       Status.FAIL)
    # the culprits' nodes (a rank whose node is not known names none), else the job
    node = ",".join(c["node"] for c in verdict.culprits if c["node"] != "unknown") or JOB
    res = Result(check=CHECK, node=node, status=status, summary=f"[{verdict.category}] {verdict.summary}",
                 evidence=verdict.evidence[:30], remedy=verdict.action, facts=verdict.to_dict(),
                 source=bundle.source or "collect")
    return verdict, [res, *facts.node_results]
