"""The severity policy: one table of finding codes, the graders' codes all in it, a site's
override through the real CLI, `preflight explain`, the generated reference page and README
table, and the NO-EVIDENCE verdict when nothing was graded."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from preflight import policy, reference
from preflight.findings import Findings
from preflight.model import Status
from tests.conftest import ROOT

CODE_LITERAL = re.compile(r"""["']([a-z][a-z0-9_]*(?:\.[a-z0-9_]+)+/[a-z0-9]+(?:-[a-z0-9]+)*)["']""")
GRADER_SOURCES = sorted([*(ROOT / "checks").glob("*.py"), ROOT / "preflight" / "grading.py",
                         ROOT / "preflight" / "analyze.py"])
ENGINE_CHECKS = ("run.", "analyze.")


def cli(args: list[str], env: dict[str, str] | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    e = dict(os.environ)
    e.pop("PREFLIGHT_CONFIG", None)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "preflight.cli", *args], capture_output=True, text=True, env=e,
                          input=stdin, timeout=120)


# ---------------------------------------------------------------------------------------------
# The table


def test_the_packaged_table_loads_and_every_code_belongs_to_a_check(registry) -> None:  # noqa: ANN001
    pol = policy.load()
    assert pol.codes, "the policy table is empty"
    known = set(registry.checks) | set(registry.cluster_checks) | set(registry.emitted)
    for code, c in pol.codes.items():
        assert policy.CODE_RE.match(code)
        assert c.check in known or c.check.startswith(ENGINE_CHECKS), f"{code}: no check {c.check}"
        assert len(c.means) > 20 and len(c.reason) > 20 and len(c.source) > 10, f"{code}: say more"


# Findings.unread(check, ...) names the code `<check>/unread-error`; check is a literal or a module constant
UNREAD_CALL = re.compile(r"""\.unread\(\s*(?:["']([a-z][a-z0-9_]*(?:\.[a-z0-9_]+)+)["']|([A-Z_]+)\b)""")


def _literals(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    checks = set()
    for literal, name in UNREAD_CALL.findall(text):
        const = re.search(rf"""^{name}(?:: str)? = ["']([a-z0-9_.]+)["']""", text, re.M) if name else None
        checks.add(literal or (const.group(1) if const else f"<{name} not a module constant>"))
    return set(CODE_LITERAL.findall(text)) | {f"{c}/unread-error" for c in checks}


def test_every_code_a_grader_names_is_in_the_table() -> None:
    table = set(policy.load().codes)
    missing = {f"{p.relative_to(ROOT)}: {c}" for p in GRADER_SOURCES for c in _literals(p)
               if c.split("/")[0].count(".") >= 1 and c not in table and not c.startswith(("preflight.", "checks."))}
    assert not missing, f"codes named by graders but missing from the policy table: {sorted(missing)}"


def test_every_code_in_the_table_is_named_by_a_grader() -> None:
    named = set().union(*(_literals(p) for p in GRADER_SOURCES))
    named |= set().union(*(_literals(p) for p in (ROOT / "preflight").rglob("*.py")))
    stale = sorted(set(policy.load().codes) - named)
    assert not stale, f"codes in the table that no grader emits (stale): {stale}"


def test_built_in_graders_name_a_code_for_every_finding() -> None:
    legacy = []
    for p in GRADER_SOURCES:
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"\.add\(\s*Status\.", line) or re.search(
                    r"ctx\.result\(\s*Status\.(FAIL|WARN|ERROR|SKIP)\b", line):
                legacy.append(f"{p.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not legacy, "findings without a code (use Findings.add(code, ...) / ctx.finding(code, ...)):\n" + \
        "\n".join(legacy)


@pytest.mark.parametrize(("text", "why"), [
    ('["gpu.xid/Bad_Code"]\nstatus="fail"\nmeans="x"\nreason="y"\nsource="z"', "is not a code"),
    ('["gpu.xid/ok"]\nstatus="fail"\nmeans="x"\nreason="y"', "source must be"),
    ('["gpu.xid/ok"]\nstatus="fatal"\nmeans="x"\nreason="y"\nsource="z"', "is not pass, warn"),
    ('["gpu.xid/ok"]\nstatus="fail"\nmeans="x"\nreason="y"\nsource="z"\nseverity="high"', "unknown field"),
    ('"gpu.xid/ok" = 3', "must be a table"),
    ('[broken', "t.toml"),
])
def test_a_malformed_table_names_the_code_and_the_field(text: str, why: str) -> None:
    with pytest.raises(policy.PolicyError, match=re.escape(why)):
        policy.parse_table(text, "t.toml")


def test_a_code_defined_twice_is_refused(tmp_path: Path) -> None:
    some = next(iter(policy.load().codes))
    extra = tmp_path / "policy.toml"
    extra.write_text(f'["{some}"]\nstatus="warn"\nmeans="m"\nreason="r"\nsource="s"\n')
    with pytest.raises(policy.PolicyError, match="already defined"):
        policy.load([extra])


def test_findings_take_their_status_from_the_active_policy() -> None:
    codes = {"t.x/soft": policy.Code("t.x/soft", Status.WARN, "m", "r", "s"),
             "t.x/hard": policy.Code("t.x/hard", Status.FAIL, "m", "r", "s")}
    base = policy.Policy(codes)
    token = policy.use(base)
    try:
        f = Findings()
        f.add("t.x/soft", "a soft one")
        f.add("t.x/hard", "a hard one")
        assert [x.status for x in f.items] == [Status.WARN, Status.FAIL] and f.codes() == ["t.x/hard", "t.x/soft"]
        with pytest.raises(policy.UnknownCode):
            f.add("t.x/nope", "no such code")
    finally:
        policy.reset(token)
    site = base.with_overrides({"t.x/hard": "pass"}, "config file /etc/site.toml")
    token = policy.use(site)
    try:
        f = Findings()
        f.add("t.x/hard", "a hard one, tolerated here")
        assert not f.items and f.notes == ["a hard one, tolerated here"] and f.passed == ["t.x/hard"]
    finally:
        policy.reset(token)
    with pytest.raises(policy.PolicyError, match="did you mean t.x/hard"):
        base.with_overrides({"t.x/hardd": "pass"}, "cfg")
    with pytest.raises(policy.PolicyError, match="give pass, warn"):
        base.with_overrides({"t.x/hard": "ignore"}, "cfg")


# ---------------------------------------------------------------------------------------------
# A site's override, through the real CLI


def _config(tmp_path: Path, body: str) -> dict[str, str]:
    cfg = tmp_path / "config.toml"
    cfg.write_text(body)
    return {"PREFLIGHT_CONFIG": str(cfg)}


def test_a_site_override_changes_the_status_and_the_result_says_so(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("lunch at noon\n")
    plain = cli(["analyze", str(notes), "--json"])
    assert plain.returncode == 3 and json.loads(plain.stdout)["results"][0]["status"] == "skip"
    env = _config(tmp_path, '[finding_status]\n"analyze.unrecognised/not-recognised" = "fail"\n')
    p = cli(["analyze", str(notes), "--json"], env)
    doc = json.loads(p.stdout)
    [r] = doc["results"]
    assert p.returncode == 1 and doc["verdict"] == "NO-GO" and r["status"] == "fail"
    assert r["facts"]["overrides"] == {"analyze.unrecognised/not-recognised":
                                       f"skip -> fail (config file {tmp_path / 'config.toml'})"}
    assert any(e.startswith("site policy: analyze.unrecognised/not-recognised is FAIL here (table: SKIP")
               for e in r["evidence"])


def test_a_site_can_tolerate_a_missing_required_tool(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path)}  # no nvidia-smi, no tool at all
    base = cli(["node", "--profile", "generic", "--only", "gpu.driver", "--json"], env)
    [r] = [x for x in json.loads(base.stdout)["results"] if x["check"] == "gpu.driver"]
    assert r["status"] == "fail" and r["facts"]["codes"] == ["run.tool/missing-required"]
    env |= _config(tmp_path, '[finding_status]\n"run.tool/missing-required" = "warn"\n')
    p = cli(["node", "--profile", "generic", "--only", "gpu.driver", "--json"], env)
    [r] = [x for x in json.loads(p.stdout)["results"] if x["check"] == "gpu.driver"]
    assert r["status"] == "warn" and "run.tool/missing-required" in r["facts"]["overrides"]
    assert p.returncode == 0 and json.loads(p.stdout)["verdict"] == "GO"


def test_an_override_naming_an_unknown_code_is_exit_2(tmp_path: Path) -> None:
    env = _config(tmp_path, '[finding_status]\n"run.tool/missing-requird" = "warn"\n')
    p = cli(["analyze", "-"], env, stdin="x\n")
    assert p.returncode == 2 and "unknown code 'run.tool/missing-requird'" in p.stderr
    assert "did you mean run.tool/missing-required" in p.stderr and "Traceback" not in p.stderr
    env = _config(tmp_path, 'finding_status = "pass"\n')
    p = cli(["analyze", "-"], env, stdin="x\n")
    assert p.returncode == 2 and "finding_status must be" in p.stderr


# ---------------------------------------------------------------------------------------------
# explain, the reference page, the README table


def test_explain_prints_an_entry_and_the_sites_status(tmp_path: Path) -> None:
    p = cli(["explain", "run.probe/timed-out"])
    c = policy.load().codes["run.probe/timed-out"]
    assert p.returncode == 0
    assert p.stdout == (f"run.probe/timed-out\n  status: ERROR\n  means:  {c.means}\n  why:    {c.reason}\n"
                        f"  source: {c.source}\n")
    env = _config(tmp_path, '[finding_status]\n"run.probe/timed-out" = "warn"\n')
    p = cli(["explain", "run.probe/timed-out"], env)
    assert "status: WARN at this site (table: ERROR; config file" in p.stdout
    doc = json.loads(cli(["explain", "run", "--json"]).stdout)
    assert {c["code"] for c in doc["codes"]} == {k for k in policy.load().codes if k.startswith("run.")}
    assert all(c["check"].startswith("run.") for c in doc["codes"])


def test_explain_of_an_unknown_code_is_exit_2_with_a_suggestion() -> None:
    p = cli(["explain", "run.probe/timed-ot"])
    assert p.returncode == 2 and "did you mean run.probe/timed-out?" in p.stderr


def test_the_reference_page_is_generated_from_the_table() -> None:
    page = ROOT / "checks" / "policy.md"
    p = cli(["explain", "--markdown"])
    assert p.returncode == 0 and p.stdout.startswith(reference.PAGE_TITLE)
    assert page.read_text(encoding="utf-8") == p.stdout, \
        "checks/policy.md is stale: .venv/bin/preflight explain --markdown > checks/policy.md"
    for code in policy.load().codes:
        assert f"`{code}`" in p.stdout


def test_the_readme_check_table_is_generated_from_the_table() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    p = cli(["explain", "--readme"])
    assert p.returncode == 0 and p.stdout.startswith(reference.README_BEGIN)
    assert p.stdout in readme, "README's check table is stale: replace it with `preflight explain --readme`"


# ---------------------------------------------------------------------------------------------
# Nothing graded is not GO


@pytest.mark.parametrize("what", ["/dev/zero", "unrecognised", "empty"])
def test_analyze_of_nothing_gradable_is_no_evidence_exit_3(tmp_path: Path, what: str) -> None:
    target = what
    if what != "/dev/zero":
        f = tmp_path / "capture.txt"
        f.write_text("" if what == "empty" else "the quick brown fox\njumps over the lazy dog\n")
        target = str(f)
    p = cli(["analyze", target])
    assert p.returncode == 3, p.stdout + p.stderr
    assert "NO-EVIDENCE" in p.stdout and "nothing was graded" in p.stdout
    doc = json.loads(cli(["analyze", target, "--json"]).stdout)
    assert doc["verdict"] == "NO-EVIDENCE" and doc["counts"]["skip"] == 1


# ---------------------------------------------------------------------------------------------
# Every non-PASS result a built-in grader gives carries its codes


def _graded_everything() -> list:
    from preflight import registry
    from preflight.analyze import analyze

    roots = [ROOT / "tests" / "fixtures", ROOT / "examples" / "captures"]
    from tests.conftest import CORPUS

    if CORPUS.is_dir():
        roots.append(CORPUS)
    out = []
    for root in roots:
        for folder in sorted({p.parent for p in root.rglob("*") if p.is_file()}):
            out.extend(analyze(registry.load(), [folder], profile_name="auto"))
    return out


def test_every_non_pass_result_carries_a_code_from_the_table() -> None:
    table = policy.load().codes
    uncoded, unknown = [], []
    for r in _graded_everything():
        status = r.facts.get("own_status", r.status.value)
        if status == "pass" or r.facts.get("depends_on"):
            continue
        codes = r.facts.get("codes", [])
        if not codes:
            uncoded.append(f"{r.check} {status}: {r.summary[:100]} ({r.source[-60:]})")
        unknown += [c for c in codes if c not in table]
    assert not unknown, f"codes not in the table: {sorted(set(unknown))}"
    assert not uncoded, f"{len(uncoded)} results without a code:\n" + "\n".join(sorted(set(uncoded))[:40])


def test_a_prologue_that_graded_nothing_neither_drains_nor_fails_the_job(tmp_path: Path) -> None:
    """Every check skipped (no ibstat, not required by the generic profile): NO-EVIDENCE, exit 0,
    and scontrol is never asked to drain (nothing proved the node bad)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "scontrol.log"
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {log}\nexit 0\n')
    (bin_dir / "scontrol").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURMD_NODENAME": "gpu017", "PREFLIGHT_HISTORY": "off"}
    p = cli(["prologue", "--profile", "generic", "--only", "ib.hca", "--budget", "30"], env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "gpu017: NO-EVIDENCE" in p.stdout, p.stdout
    assert "drain" not in (log.read_text() if log.exists() else "")


# ---------------------------------------------------------------------------------------------
# In-process: the pieces a result is built from


def _pol() -> policy.Policy:
    return policy.Policy({"t.x/soft": policy.Code("t.x/soft", Status.WARN, "m", "r", "s", "t.toml"),
                          "t.x/hard": policy.Code("t.x/hard", Status.FAIL, "m", "r", "s", "t.toml"),
                          "t.y/note": policy.Code("t.y/note", Status.PASS, "m", "r", "s", "t.toml")})


def test_a_code_names_its_check() -> None:
    c = _pol().codes["t.x/soft"]
    assert c.check == "t.x" and policy.Code("a.b.c/d-e", Status.FAIL, "", "", "").check == "a.b.c"
    assert [x.code for x in _pol().for_check("t.x")] == ["t.x/hard", "t.x/soft"]
    assert _pol().for_check("t") == []


def test_an_override_to_the_tables_own_status_is_not_an_override() -> None:
    pol = _pol().with_overrides({"t.x/soft": "warn", "t.x/hard": "error"}, "cfg")
    assert pol.override("t.x/soft") is None and pol.status("t.x/soft") is Status.WARN
    o = pol.override("t.x/hard")
    assert o is not None and o.status is Status.ERROR and o.origin == "cfg" and pol.status("t.x/hard") is Status.ERROR
    assert pol.with_overrides({"t.y/note": " FAIL "}, "cfg2").status("t.y/note") is Status.FAIL
    with pytest.raises(policy.PolicyError, match=r"^cfg: finding_status names unknown code 't.z/x' \(see `preflight explain`\)$"):
        pol.with_overrides({"t.z/x": "pass"}, "cfg")
    with pytest.raises(policy.UnknownCode, match="'t.z/x' is not in the policy table"):
        pol.status("t.z/x")


def test_code_facts_records_codes_once_and_each_override() -> None:
    token = policy.use(_pol().with_overrides({"t.x/hard": "warn", "t.y/note": "fail"}, "config file c.toml"))
    try:
        facts: dict = {"codes": ["t.x/soft"]}
        ev = ["an evidence line"]
        policy.code_facts(["t.x/hard", "", "t.x/hard", "t.x/soft"], facts, ev, passed=["t.y/note"])
        assert facts["codes"] == ["t.x/soft", "t.x/hard"]
        assert facts["overrides"] == {"t.x/hard": "fail -> warn (config file c.toml)",
                                      "t.y/note": "pass -> fail (config file c.toml)"}
        assert ev == ["an evidence line",
                      "site policy: t.x/hard is WARN here (table: FAIL; config file c.toml)",
                      "site policy: t.y/note is FAIL here (table: PASS; config file c.toml)"]
        policy.code_facts(["t.x/hard"], facts, ev)
        assert len(ev) == 3, "an override line is said once"
        empty: dict = {}
        policy.code_facts([], empty, [])
        assert empty == {}
    finally:
        policy.reset(token)


def test_the_active_policy_is_the_table_unless_a_command_installs_one() -> None:
    assert isinstance(policy.builtin(), policy.Policy) and policy.builtin().codes
    assert policy.active() is policy.builtin() and policy.builtin() is policy.builtin()
    token = policy.use(_pol())
    try:
        assert policy.status("t.x/hard") is Status.FAIL and policy.active() is not policy.builtin()
    finally:
        policy.reset(token)
    assert policy.active() is policy.builtin()
    assert [p.name for p in policy.packaged_tables()] == ["policy.toml"]
    assert policy.packaged_tables()[0].is_file()


def test_malformed_table_messages_in_full() -> None:
    with pytest.raises(policy.PolicyError, match=r"^t.toml: a.b/c: means must be what the finding is, one sentence$"):
        policy.parse_table('["a.b/c"]\nstatus="fail"\nmeans=" "\nreason="r"\nsource="s"', "t.toml")
    with pytest.raises(policy.PolicyError, match=r"^t.toml: a.b/c: reason must be why it has this status$"):
        policy.parse_table('["a.b/c"]\nstatus="fail"\nmeans="m"\nsource="s"', "t.toml")
    with pytest.raises(policy.PolicyError, match=r"the vendor document or source it follows$"):
        policy.parse_table('["a.b/c"]\nstatus="fail"\nmeans="m"\nreason="r"\nsource=1', "t.toml")
    with pytest.raises(policy.PolicyError, match=r"unknown field 'x' \(fields: status, means, reason, source\)$"):
        policy.parse_table('["a.b/c"]\nstatus="fail"\nmeans="m"\nreason="r"\nsource="s"\nx="y"', "t.toml")
    with pytest.raises(policy.PolicyError, match=r"must be a table with status, means, reason, source$"):
        policy.parse_table('"a.b/c" = 1', "t.toml")
    ok = policy.parse_table('["a.b/c"]\nstatus=" Warn "\nmeans=" m "\nreason="r "\nsource=" s"', "t.toml")
    assert ok == {"a.b/c": policy.Code("a.b/c", Status.WARN, "m", "r", "s", "t.toml")}
    for bad in ("a/b", "A.b/c", "a.b/c_d", "a.b/-c", "a.b/c-", "a.b/c/d", " a.b/c"):
        assert not policy.CODE_RE.match(bad), bad
    for good in ("a.b/c", "gpu.xid/reset-required", "run.probe/timed-out", "a_b.c_d/e1-f2"):
        assert policy.CODE_RE.match(good), good


def test_reference_lookup_entry_page_and_table_in_process() -> None:
    pol = _pol().with_overrides({"t.x/soft": "fail"}, "config file c.toml")
    assert [c.code for c in reference.lookup(pol, "t.x/soft")] == ["t.x/soft"]
    assert [c.code for c in reference.lookup(pol, "t.x")] == ["t.x/hard", "t.x/soft"]
    assert [c.code for c in reference.lookup(pol, "t")] == ["t.x/hard", "t.x/soft", "t.y/note"]
    assert [c.code for c in reference.lookup(pol, "t.")] == ["t.x/hard", "t.x/soft", "t.y/note"]
    assert reference.lookup(pol, "t.z") == [] and reference.lookup(pol, "t.x/") != []
    assert reference.suggestion(pol, "t.x/sofft") == " (did you mean t.x/soft?)"
    assert reference.suggestion(pol, "zzzzzz") == ""
    assert reference.entry_text(pol, pol.codes["t.x/soft"]) == (
        "t.x/soft\n  status: FAIL at this site (table: WARN; config file c.toml)\n  means:  m\n  why:    r\n"
        "  source: s\n")
    assert reference.entry_text(pol, pol.codes["t.x/hard"]).startswith("t.x/hard\n  status: FAIL\n")
    assert reference.entry_json(pol, pol.codes["t.x/soft"]) == {
        "code": "t.x/soft", "check": "t.x", "status": "fail", "table_status": "warn", "means": "m", "reason": "r",
        "source": "s", "override": "config file c.toml"}
    assert reference.entry_json(pol, pol.codes["t.x/hard"])["override"] is None
    page = reference.markdown_page(pol, {"t.x": "what x catches | with a bar"})
    assert page.startswith(reference.PAGE_TITLE + "\n\n") and page.endswith("\n") and not page.endswith("\n\n")
    assert "3 codes over 2 checks: 1 FAIL, 1 WARN, 1 PASS.\n" in page
    assert "## t.x\n\nwhat x catches \\| with a bar\n\n| code | status | means | why this status | source |\n" in page
    assert page.index("`t.x/hard`") < page.index("`t.x/soft`") < page.index("## t.y") < page.index("`t.y/note`")
    assert "| `t.x/hard` | FAIL | m | r | s |" in page and "## t.y\n\n| code |" in page
    assert reference.PAGE_TITLE == "# Finding codes" and page.startswith("# Finding codes\n\nEvery finding a grader")
    assert reference.README_BEGIN == "<!-- checks table: generated by `preflight explain --readme` -->"
    assert reference.README_END == "<!-- end of checks table -->"
    assert "| code | status | means | why this status | source |\n|---|---|---|---|---|\n| `t.x/hard`" in page
    assert page.endswith("| `t.y/note` | PASS | m | r | s |\n") and "| s |\n\n## t.y\n" in page
    five = policy.Policy({c: policy.Code(c, s, "m", "r", "s") for c, s in (
        ("t.x/a-pass", Status.PASS), ("t.x/b-skip", Status.SKIP), ("t.x/c-warn", Status.WARN),
        ("t.x/d-error", Status.ERROR), ("t.x/e-fail", Status.FAIL))})
    assert [c.code for c in reference.lookup(five, "t.x")] == ["t.x/e-fail", "t.x/d-error", "t.x/c-warn",
                                                               "t.x/b-skip", "t.x/a-pass"]
    table = reference.readme_table(pol, [{"id": "t.x", "scope": "node", "catches": "a\nb"},
                                         {"id": "t.q", "scope": "run", "catches": "c"}])
    assert table == (f"{reference.README_BEGIN}\n\n| id | scope | catches | findings |\n|---|---|---|---|\n"
                     "| `t.x` | node | a b | 1 FAIL, 1 WARN |\n| `t.q` | run | c | - |\n\n"
                     f"{reference.README_END}\n")
