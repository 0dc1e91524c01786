"""Unknown check ids in a selection (--only, --skip, $PREFLIGHT_ONLY / $PREFLIGHT_SKIP, the
config's `only` / `skip`) stop the command with exit 2 before any probe runs, naming each
unknown id and the closest known one; families, check ids and site checks stay valid.

Through the real CLI, with the site checks of tests/test_config.py: their fake tools record
every invocation, so "nothing ran" is proven, not assumed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_config import Site, by_check, cli

TOOLS = ("alpha-tool", "beta-tool")


@pytest.fixture()
def site(tmp_path: Path) -> Iterator[Site]:
    s = Site(tmp_path)
    s.write_config("")
    yield s


def refused(site: Site, args: list[str], env: dict[str, str] | None = None) -> str:
    """The command stops with exit 2, one line on stderr, and no probe ran."""
    p = cli(args, env or site.env(), cwd=site.tmp)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert all(site.calls(t) == [] for t in TOOLS), [site.calls(t) for t in TOOLS]
    return p.stderr


def test_node_skip_typo_is_refused_and_nothing_runs(site: Site) -> None:
    # before: exit 0, GO, site.alpha ran although the operator meant to skip it
    err = refused(site, ["node", "--only", "site", "--skip", "site.alpa"])
    assert "'site.alpa'" in err and "did you mean site.alpha?" in err and "--skip" in err


def test_node_only_typo_beside_a_known_id_is_not_dropped(site: Site) -> None:
    # before: the typo was dropped in silence and site.beta ran alone
    err = refused(site, ["node", "--only", "site.beta", "--only", "gpu.xd"])
    assert "'gpu.xd'" in err and "did you mean gpu.xid?" in err


def test_only_typo_alone_is_named(site: Site) -> None:
    # before: "no check selected (see `preflight list`)", the id not named
    err = refused(site, ["node", "--only", "gpu.xd"])
    assert "'gpu.xd'" in err and "did you mean gpu.xid?" in err and "no check selected" not in err


def test_each_unknown_id_is_named_once(site: Site) -> None:
    err = refused(site, ["node", "--only", "site", "--only", "zzzz", "--skip", "gpu.xd", "--skip", "site.bta"])
    assert err.count("\n") == 1  # one line
    assert "'zzzz'" in err and "'gpu.xd'" in err and "'site.bta'" in err
    assert "did you mean site.beta?" in err and "did you mean gpu.xid?" in err


def test_run_skip_typo_is_refused(site: Site) -> None:
    # before: `run ... --skip gpu.xd` said GO, exit 0, and the check still ran
    err = refused(site, ["run", "--transport", "local", "--no-sweep", "--no-report",
                         "--only", "site", "--skip", "site.alpa"])
    assert "did you mean site.alpha?" in err


def test_prologue_typo_is_refused_without_a_drain(site: Site) -> None:
    err = refused(site, ["prologue", "--dry-run", "--only", "site", "--skip", "gpu.xd"])
    assert "'gpu.xd'" in err and "did you mean gpu.xid?" in err


def test_environment_lists_are_checked(site: Site) -> None:
    err = refused(site, ["node"], site.env(PREFLIGHT_SKIP="site.alpa"))
    assert "$PREFLIGHT_SKIP" in err and "did you mean site.alpha?" in err
    err = refused(site, ["node"], site.env(PREFLIGHT_ONLY="site.beta,gpu.xd"))
    assert "$PREFLIGHT_ONLY" in err and "did you mean gpu.xid?" in err


def test_config_lists_are_checked(site: Site) -> None:
    site.write_config('only = ["site"]\nskip = ["site.alpa"]\n')
    err = refused(site, ["node"])
    assert str(site.config) in err and "skip" in err and "did you mean site.alpha?" in err
    # a flag replaces the file's lists, but a typo in the file is still a typo
    err = refused(site, ["node", "--only", "site.beta"])
    assert "did you mean site.alpha?" in err


def test_a_finding_code_is_named_for_what_it_is(site: Site) -> None:
    err = refused(site, ["node", "--skip", "gpu.inventory/mig-enabled"])
    assert "finding code" in err and "gpu.inventory" in err


def test_families_ids_and_site_checks_stay_valid(site: Site) -> None:
    p = cli(["node", "--json", "--only", "site", "--skip", "gpu", "--skip", "net.mtu", "--skip", "site.alpha",
             "--skip", "gpu."], site.env(), cwd=site.tmp)
    assert p.returncode == 0, p.stderr
    assert set(by_check(json.loads(p.stdout))) == {"site.beta"}
    # an id another command reports is known: the existing message says which command
    p = cli(["node", "--only", "runtime.loss"], site.env(), cwd=site.tmp)
    assert p.returncode == 2 and "not probed on nodes" in p.stderr, p.stderr


def test_explain_names_an_unknown_id_and_knows_site_checks(site: Site) -> None:
    p = cli(["explain", "gpu.xd"], site.env(), cwd=site.tmp)
    assert p.returncode == 2 and "'gpu.xd'" in p.stderr and "did you mean gpu.xid?" in p.stderr, p.stderr
    p = cli(["explain", "site.alph", "--checks-dir", str(site.checks)], site.env(), cwd=site.tmp)
    assert p.returncode == 2 and "did you mean site.alpha?" in p.stderr, p.stderr
    # a site check, or an id another command reports, is known though it has no code in the table
    # (before: exit 2, "no finding code or check 'site.alpha'")
    for name in ("site.alpha", "site", "runtime.loss"):
        p = cli(["explain", name, "--checks-dir", str(site.checks)], site.env(), cwd=site.tmp)
        assert p.returncode == 0 and "no finding codes in the policy table" in p.stdout, (name, p.stdout, p.stderr)


def test_run_names_where_the_unknown_id_came_from_and_checks_it_before_a_sweep_only_run(site: Site) -> None:
    err = refused(site, ["run", "--transport", "local", "--no-sweep", "--no-report"],
                  site.env(PREFLIGHT_SKIP="site.alpa"))
    assert "$PREFLIGHT_SKIP names unknown check 'site.alpa'" in err, err
    # before: NO-EVIDENCE, exit 3, the id never looked at
    err = refused(site, ["run", "--transport", "local", "--sweep-only", "--no-report", "--only", "gpu.xd"])
    assert "did you mean gpu.xid?" in err
