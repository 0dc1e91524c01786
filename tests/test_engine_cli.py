"""The engine and CLI end to end, with a site check folder and real subprocesses.

These tests use only a site check (loaded from a temporary folder, as an operator would) so
they exercise the registry, probes, engine, verdict, reports and exit codes on their own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import fakes

SITE_CHECK = '''
from dataclasses import dataclass

from preflight.model import Status
from preflight.probes import Probe
from preflight.registry import Check, register, register_parser

PROBE = Probe.of("site-tool", ["site-tool", "--status"])


@dataclass
class SiteStatus:
    ok: bool
    lines: list


def parse(doc):
    lines = [ln.text for ln in doc.lines if ln.text.strip()]
    return SiteStatus(ok=lines == ["OK"], lines=lines)


def grade(ctx):
    run = ctx.input("site-tool")
    facts = ctx.facts("site-tool")
    if run.rc != 0:
        return ctx.result(Status.FAIL, f"site-tool exited {run.rc}", evidence=facts.lines[-3:],
                          remedy="look at the site tool")
    if facts.ok:
        return ctx.result(Status.PASS, "site tool OK", facts={"lines": len(facts.lines)})
    return ctx.result(Status.ERROR, "site-tool printed something unrecognised", evidence=facts.lines[:3])


register_parser("site-tool", parse)


def crash(ctx):
    raise ValueError("boom in a site grader")


register(Check(id="site.demo", title="Site demo", grade=grade, probes=(PROBE,),
               profile_keys={"site.enabled": bool}, catches="the site tool's own status"))
register(Check(id="site.crash", title="Crashing", grade=crash, probes=(), in_run=True))
'''


@pytest.fixture()
def site(tmp_path: Path) -> dict:
    checks = tmp_path / "site-checks"
    checks.mkdir()
    (checks / "demo.py").write_text(SITE_CHECK)
    bin_dir = fakes.install(tmp_path / "bin", ["site-tool"])
    return {"checks": checks, "bin": bin_dir, "tmp": tmp_path}


def cli(args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "preflight.cli", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=timeout)


def scenario_env(site: dict, rules: list[dict]) -> dict[str, str]:
    sc = fakes.scenario(site["tmp"] / "sc", {"site-tool": rules})
    return fakes.env_for(site["bin"], sc)


def run_site(site: dict, rules: list[dict], extra: list[str] = ()) -> tuple[subprocess.CompletedProcess, dict]:
    env = scenario_env(site, rules)
    p = cli(["run", "--profile", "generic", "--checks-dir", str(site["checks"]), "--only", "site",
             "--json", "--no-report", *extra], env=env)
    assert "Traceback" not in p.stderr, p.stderr
    return p, json.loads(p.stdout)


def by_check(doc: dict) -> dict:
    return {r["check"]: r for r in doc["results"]}


def test_site_check_listed(site: dict) -> None:
    p = cli(["list", "--checks-dir", str(site["checks"]), "--json"])
    rows = {r["id"]: r for r in json.loads(p.stdout)["checks"]}
    assert rows["site.demo"]["probes"] == "site-tool"
    assert rows["site.demo"]["origin"].endswith("demo.py")


def test_pass_gives_go_exit_0(site: dict) -> None:
    p, doc = run_site(site, [{"match": "--status", "text": "OK\n"}], ["--skip", "site.crash"])
    assert p.returncode == 0 and doc["verdict"] == "GO"
    assert by_check(doc)["site.demo"]["status"] == "pass"


def test_grader_crash_is_error_not_traceback(site: dict) -> None:
    p, doc = run_site(site, [{"match": "--status", "text": "OK\n"}])
    r = by_check(doc)["site.crash"]
    assert r["status"] == "error" and "boom in a site grader" in r["summary"]
    assert p.returncode == 1 and doc["verdict"] == "NO-GO"


def test_hung_tool_is_error_naming_probe_and_timeout(site: dict) -> None:
    start = time.monotonic()
    p, doc = run_site(site, [{"match": "--status", "hang": True}], ["--probe-timeout", "1", "--skip", "site.crash"])
    assert time.monotonic() - start < 15
    r = by_check(doc)["site.demo"]
    assert r["status"] == "error"
    assert "site-tool" in r["summary"] and "timed out after 1 s" in r["summary"]
    assert p.returncode == 1


def test_missing_tool_is_skip_or_fail_when_required(site: dict) -> None:
    env = dict(os.environ)
    p = cli(["run", "--profile", "generic", "--checks-dir", str(site["checks"]), "--only", "site.demo",
             "--json", "--no-report"], env=env)
    r = by_check(json.loads(p.stdout))["site.demo"]
    assert r["status"] == "skip" and "site-tool not found" in r["summary"]
    assert p.returncode == 3  # the only check skipped: nothing graded is NO-EVIDENCE, not GO
    prof = site["tmp"] / "strict.toml"
    prof.write_text('[profile]\nname = "strict"\nextends = "generic"\n[tools]\nrequired = ["site-tool"]\n')
    p = cli(["run", "--profile", str(prof), "--checks-dir", str(site["checks"]), "--only", "site.demo",
             "--json", "--no-report"], env=env)
    r = by_check(json.loads(p.stdout))["site.demo"]
    assert r["status"] == "fail" and "requires it" in r["summary"]
    assert p.returncode == 1


def test_nonzero_exit_and_garbage_are_results(site: dict) -> None:
    _, doc = run_site(site, [{"match": "--status", "text": "partial\n", "stderr": "fatal: bus error\n", "rc": 255}],
                      ["--skip", "site.crash"])
    r = by_check(doc)["site.demo"]
    assert r["status"] == "fail" and "exited 255" in r["summary"] and "fatal: bus error" in r["evidence"]
    _, doc = run_site(site, [{"match": "--status", "text": "\x1b[31m%%%%\n\x00\x01garbage\n"}], ["--skip", "site.crash"])
    assert by_check(doc)["site.demo"]["status"] == "error"


def test_100mb_of_output_is_capped(site: dict) -> None:
    start = time.monotonic()
    _, doc = run_site(site, [{"match": "--status", "bytes": 100 * 1024 * 1024}], ["--skip", "site.crash"])
    r = by_check(doc)["site.demo"]
    assert r["status"] == "error"  # garbage, graded as such, not a hang or a memory blow-up
    assert time.monotonic() - start < 60


@pytest.mark.parametrize("content,needle", [
    ("[gpu\ncount = 8\n", "not valid TOML"),
    ('[profile]\nname = "x"\nextends = "generic"\n[gpu]\ncount = "eight"\n', "gpu.count = 'eight': expected integer"),
    ('[profile]\nname = "x"\nextends = "nope"\n', "unknown profile 'nope'"),
    ('[profile]\nname = "x"\nextends = "x"\n', "circular"),
])
def test_malformed_profile_is_exit_2_with_message(site: dict, content: str, needle: str) -> None:
    prof = site["tmp"] / "x.toml"
    prof.write_text(content)
    p = cli(["run", "--profile", str(prof), "--only", "site", "--checks-dir", str(site["checks"]), "--no-report"])
    assert p.returncode == 2, p.stderr
    assert needle in p.stderr and "Traceback" not in p.stderr


def test_profile_schema_includes_site_keys(site: dict) -> None:
    prof = site["tmp"] / "site.toml"
    prof.write_text('[profile]\nname = "site"\nextends = "generic"\n[site]\nenabled = "yes"\n')
    p = cli(["run", "--profile", str(prof), "--only", "site", "--checks-dir", str(site["checks"]), "--no-report"])
    assert p.returncode == 2 and "site.enabled = 'yes': expected true/false" in p.stderr


def test_broken_site_check_and_bad_folder_are_exit_2(site: dict) -> None:
    bad = site["tmp"] / "broken"
    bad.mkdir()
    (bad / "oops.py").write_text("import nonexistent_module_xyz\n")
    p = cli(["list", "--checks-dir", str(bad)])
    assert p.returncode == 2 and "oops.py failed to load" in p.stderr and "Traceback" not in p.stderr
    p = cli(["list", "--checks-dir", str(site["tmp"] / "nowhere")])
    assert p.returncode == 2 and "does not exist" in p.stderr


def test_bad_arguments_are_exit_2(site: dict) -> None:
    assert cli(["run", "--no-such-flag"]).returncode == 2
    p = cli(["run", "--only", "site", "--checks-dir", str(site["checks"]), "--xid-since", "yesterday-ish"])
    assert p.returncode == 2 and "--xid-since" in p.stderr
    p = cli(["run", "--only", "no.such.check"])
    assert p.returncode == 2 and "unknown check 'no.such.check'" in p.stderr


def test_reports_written(site: dict) -> None:
    env = scenario_env(site, [{"match": "--status", "text": "bad\n", "rc": 1}])
    out = site["tmp"] / "out"
    p = cli(["run", "--profile", "generic", "--checks-dir", str(site["checks"]), "--only", "site.demo",
             "--out", str(out)], env=env)
    assert p.returncode == 1
    doc = json.loads((out / "report.json").read_text())
    assert doc["verdict"] == "NO-GO" and doc["results"][0]["check"] == "site.demo"
    md = (out / "report.md").read_text()
    assert "NO-GO" in md and "site-tool exited 1" in md
    import xml.etree.ElementTree as ET

    root = ET.parse(out / "junit.xml").getroot()
    case = root.find(".//testcase[@name='site.demo']")
    assert case is not None and case.find("failure") is not None
    assert "NO-GO" in p.stdout


def test_default_report_folder(site: dict) -> None:
    env = scenario_env(site, [{"match": "--status", "text": "OK\n"}])
    p = cli(["run", "--profile", "generic", "--checks-dir", str(site["checks"]), "--only", "site.demo"],
            env=env, cwd=site["tmp"])
    assert p.returncode == 0
    found = list((site["tmp"] / "reports").glob("*/report.json"))
    assert len(found) == 1


def test_config_file_adds_site_checks(site: dict) -> None:
    cfg = site["tmp"] / "config.toml"
    cfg.write_text(f'checks_dirs = ["{site["checks"]}"]\n')
    env = dict(os.environ, PREFLIGHT_CONFIG=str(cfg))
    p = cli(["list", "--json"], env=env)
    doc = json.loads(p.stdout)
    assert doc["schema_version"] == 1 and "site.demo" in {r["id"] for r in doc["checks"]}


def test_config_file_chooses_a_prometheus_sink(site: dict) -> None:
    cfg = site["tmp"] / "config.toml"
    cfg.write_text(f'checks_dirs = ["{site["checks"]}"]\nprometheus_textfile = "metrics/preflight.prom"\n')
    env = dict(scenario_env(site, [{"match": "--status", "text": "OK\n"}]), PREFLIGHT_CONFIG=str(cfg),
               PREFLIGHT_HISTORY="off")
    p = cli(["node", "--profile", "generic", "--only", "site.demo", "--json"], env=env)
    assert p.returncode == 0, p.stderr
    text = (site["tmp"] / "metrics" / "preflight.prom").read_text()
    assert 'preflight_check_ok{check="site.demo",node=' in text and 'preflight_verdict_go{command="node"} 1.0' in text
    cfg.write_text('prometheus_textfile = ["not", "a", "file"]\n')
    bad = cli(["node", "--only", "site.demo"], env=env)
    assert bad.returncode == 2 and "prometheus_textfile" in bad.stderr and "Traceback" not in bad.stderr


def test_analyze_unrecognised_content_is_reported_not_guessed(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("lunch at noon\nnothing to see\n")
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01\x02" * 100)
    (tmp_path / "empty.log").write_text("")
    p = cli(["analyze", str(tmp_path), "--json"])
    doc = json.loads(p.stdout)
    unknown = [r for r in doc["results"] if r["check"] == "analyze.unrecognised"]
    assert len(unknown) == 3 and all(r["status"] == "skip" for r in unknown)
    assert {Path(r["source"]).name for r in unknown} == {"notes.txt", "blob.bin", "empty.log"}
    assert {r["facts"]["codes"][0] for r in unknown} == {"analyze.unrecognised/not-recognised",
                                                         "analyze.unrecognised/unreadable"}
    assert p.returncode == 3 and doc["verdict"] == "NO-EVIDENCE"  # nothing graded is not GO
    assert cli(["analyze", str(tmp_path / "missing")]).returncode == 2


def test_node_progress_counts_done_failed_pending() -> None:
    from preflight.model import Capture, CaptureState
    from preflight.report.progress import NodeProgress

    lines: list[str] = []
    prog = NodeProgress(lines.append)
    prog.expect({"n1": 2, "n2": 2, "n3": 1})
    assert prog.line().startswith("nodes: 0 done, 0 failed, 3 pending")
    ok = Capture("p", ["p"], CaptureState.OK)
    prog("n1", ok)
    prog("n1", Capture("q", ["q"], CaptureState.TIMEOUT))
    prog.node_failed("n3")
    assert prog.line() == "nodes: 1 done, 1 failed, 1 pending (2 of 5 probe results, 1 probe(s) not ok)"
    prog("n2", ok)
    prog("n2", ok)
    assert lines[-1].startswith("nodes: 2 done, 1 failed, 0 pending")


def test_analyze_reads_a_bundle_archive(tmp_path: Path) -> None:
    """A tar.gz of per-node folders (as `preflight collect` writes) is analysed in place;
    members escaping the archive are ignored."""
    import io
    import tarfile

    from tests.scenarios import CLEAN_DMESG, XID79

    bundle = tmp_path / "job42.tar.gz"
    with tarfile.open(bundle, "w:gz") as tar:
        for name, text in (("bundle/n1/kernel-log.out", CLEAN_DMESG), ("bundle/n3/kernel-log.out", CLEAN_DMESG + XID79),
                           ("../escape.txt", "nope")):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    p = cli(["analyze", str(bundle), "--json"])
    doc = json.loads(p.stdout)
    xid = {r["node"]: r for r in doc["results"] if r["check"] == "gpu.xid"}
    assert xid["n3"]["status"] == "fail" and xid["n1"]["status"] == "pass"
    assert xid["n3"]["source"].startswith(f"{bundle}!")
    assert not (tmp_path.parent / "escape.txt").exists()
    (tmp_path / "broken.tar.gz").write_bytes(b"\x1f\x8b" + b"\x00" * 50)
    p = cli(["analyze", str(tmp_path / "broken.tar.gz"), "--json"])
    assert "Traceback" not in p.stderr and p.returncode == 3  # NO-EVIDENCE: nothing in it could be graded
    assert json.loads(p.stdout)["verdict"] == "NO-EVIDENCE"


@pytest.mark.parametrize("command", [["run", "--hosts", "n1"], ["collect", "--hosts", "n1"]])
def test_a_concurrency_under_one_is_refused(command):
    """`--concurrency 0` (or less) is a usage error (exit 2) naming the option, not a run at width 1."""
    p = cli([*command, "--concurrency", "0"])
    assert p.returncode == 2
    assert "--concurrency" in p.stderr and "greater than or equal to 1" in p.stderr
