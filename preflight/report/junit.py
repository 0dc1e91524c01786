"""JUnit XML: one testcase per check and node, so CI systems can gate on the run.

The XML says what the verdict says: every FAIL is a `<failure type="fail">`, every ERROR an
`<error>`, and with --warn-as-fail every WARN a `<failure type="warn">` (otherwise a WARN is a
passing testcase with its summary in `<system-out>`). A GO report has failures=0 errors=0.
The root `<testsuites>` carries the totals (tests, failures, errors, skipped), the run's start
as an ISO 8601 `timestamp` and its `time`; each node's `<testsuite>` carries the same.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Sequence

from preflight.model import Result, Status
from preflight.report.base import Report, natural


def _outcome(r: Result, warn_as_fail: bool) -> str:
    """'failure', 'error', 'skipped', 'warn' (passes, with a note) or 'pass'."""
    if r.status is Status.FAIL or (r.status is Status.WARN and warn_as_fail):
        return "failure"
    return {Status.ERROR: "error", Status.SKIP: "skipped", Status.WARN: "warn"}.get(r.status, "pass")


def _totals(rs: Sequence[Result], warn_as_fail: bool) -> dict[str, str]:
    kinds = [_outcome(r, warn_as_fail) for r in rs]
    return {"tests": str(len(rs)), "failures": str(kinds.count("failure")), "errors": str(kinds.count("error")),
            "skipped": str(kinds.count("skipped"))}


def _case(suite: ET.Element, node: str, r: Result, warn_as_fail: bool) -> None:
    case = ET.SubElement(suite, "testcase", classname=f"preflight.{node}", name=r.check)  # no per-check time
    body = "\n".join([r.summary, *r.evidence, *([f"remedy: {r.remedy}"] if r.remedy else [])])
    kind = _outcome(r, warn_as_fail)
    if kind == "failure":
        ET.SubElement(case, "failure", message=r.summary, type=r.status.value).text = body
    elif kind == "error":
        ET.SubElement(case, "error", message=r.summary, type="error").text = body
    elif kind == "skipped":
        ET.SubElement(case, "skipped", message=r.summary)
    elif kind == "warn":
        ET.SubElement(case, "system-out").text = "WARN: " + body


def render(report: Report) -> str:
    by_node: dict[str, list[Result]] = defaultdict(list)
    for r in report.results:
        by_node[r.node].append(r)
    warn_as_fail = report.warn_as_fail
    stamp = {"timestamp": report.started} if report.started else {}
    run_time = f"{report.duration_s:.3f}"
    suites = ET.Element("testsuites", {"name": f"preflight {report.command}",
                                       **_totals(report.results, warn_as_fail), "time": run_time, **stamp})
    for node in sorted(by_node, key=natural):
        rs = sorted(by_node[node], key=lambda r: r.check)
        # nodes are checked in parallel: each node's suite spans the run
        suite = ET.SubElement(suites, "testsuite", {"name": node, **_totals(rs, warn_as_fail), "time": run_time,
                                                    **stamp})
        for r in rs:
            _case(suite, node, r, warn_as_fail)
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
