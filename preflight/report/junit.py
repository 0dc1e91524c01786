"""JUnit XML: one testcase per check and node, so CI systems can gate on the run."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import defaultdict

from preflight.model import Status
from preflight.report.base import Report


def render(report: Report) -> str:
    by_node: dict[str, list] = defaultdict(list)
    for r in report.results:
        by_node[r.node].append(r)
    suites = ET.Element("testsuites", name=f"preflight {report.command}",
                        tests=str(len(report.results)), time=f"{report.duration_s:.3f}")
    for node in sorted(by_node):
        rs = sorted(by_node[node], key=lambda r: r.check)
        suite = ET.SubElement(
            suites, "testsuite", name=node, tests=str(len(rs)),
            failures=str(sum(r.status is Status.FAIL for r in rs)),
            errors=str(sum(r.status is Status.ERROR for r in rs)),
            skipped=str(sum(r.status is Status.SKIP for r in rs)),
        )
        for r in rs:
            case = ET.SubElement(suite, "testcase", classname=f"preflight.{node}", name=r.check)
            body = "\n".join([r.summary, *r.evidence, *([f"remedy: {r.remedy}"] if r.remedy else [])])
            if r.status is Status.FAIL:
                ET.SubElement(case, "failure", message=r.summary, type="fail").text = body
            elif r.status is Status.ERROR:
                ET.SubElement(case, "error", message=r.summary, type="error").text = body
            elif r.status is Status.SKIP:
                ET.SubElement(case, "skipped", message=r.summary)
            elif r.status is Status.WARN:
                ET.SubElement(case, "system-out").text = "WARN: " + body
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
