"""The site configuration through the real CLI: precedence (flag > environment > config file >
built-in) for the profile, the history store and --only/--skip; the kill switch; per-check
timeouts; unknown config keys and unknown profile keys.

Site checks loaded from a temporary folder (as an operator adds them) read fake tools that
print real-format lines; a wrapper in front of a tool records every invocation, so a check the
config switched off is proven never to have run its probe.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import fakes, scenarios

SITE_CHECKS = '''
from preflight.model import Status
from preflight.probes import Probe
from preflight.registry import Check, register, register_parser


def lines(doc):
    return [ln.text.strip() for ln in doc.lines if ln.text.strip()]


register_parser("alpha", lines)
register_parser("beta", lines)


def grade_alpha(ctx):
    got = ctx.facts("alpha")
    want = ctx.profile.get("site.alpha_state") or "READY"
    if got == [want]:
        return ctx.result(Status.PASS, f"alpha-tool says {want}")
    return ctx.result(Status.FAIL, f"alpha-tool says {got}, the profile expects {want}",
                      remedy="look at alpha")


def grade_beta(ctx):
    ok = ctx.facts("beta") == ["OK"]
    return ctx.result(Status.PASS if ok else Status.FAIL, "beta-tool OK" if ok else "beta-tool not OK")


register(Check(id="site.alpha", title="Alpha", grade=grade_alpha,
               probes=(Probe.of("alpha", ["alpha-tool", "--state"]),),
               profile_keys={"site.alpha_state": str}, catches="alpha state"))
register(Check(id="site.beta", title="Beta", grade=grade_beta,
               probes=(Probe.of("beta", ["beta-tool", "--status"]),), catches="beta status"))
'''

CONFIG_ENV = ("PREFLIGHT_CONFIG", "PREFLIGHT_PROFILE", "PREFLIGHT_HISTORY", "PREFLIGHT_ONLY", "PREFLIGHT_SKIP")


def record_calls(tool: Path, log: Path) -> None:
    """Put a line into `log` before every run of the fake tool."""
    shebang, rest = tool.read_text().split("\n", 1)
    tool.write_text(f'{shebang}\necho "$*" >> {log}\n{rest}')


def calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


class Site:
    """A temporary site: check folder, profile folder, fake tools (recorded), a config file."""

    def __init__(self, tmp: Path, alpha: list[dict] | None = None, beta: list[dict] | None = None) -> None:
        self.tmp = tmp
        self.checks = tmp / "site-checks"
        self.checks.mkdir()
        (self.checks / "site.py").write_text(SITE_CHECKS)
        self.profiles = tmp / "profiles"
        self.profiles.mkdir()
        for name in ("cfgprof", "envprof", "flagprof"):
            self.profile(name, "")
        self.bin = fakes.install(tmp / "bin", ["alpha-tool", "beta-tool"])
        for tool in ("alpha-tool", "beta-tool"):
            self.record_calls(self.bin / tool)
        self.scenario = fakes.scenario(tmp / "sc", {
            "alpha-tool": alpha or [{"match": "--state", "text": "READY\n"}],
            "beta-tool": beta or [{"match": "--status", "text": "OK\n"}]})
        self.config = tmp / "etc" / "config.toml"
        self.config.parent.mkdir()

    def record_calls(self, tool: Path) -> None:
        record_calls(tool, self.tmp / f"calls-{tool.name}.log")

    def calls(self, tool: str) -> list[str]:
        return calls(self.tmp / f"calls-{tool}.log")

    def profile(self, name: str, body: str) -> Path:
        path = self.profiles / f"{name}.toml"
        path.write_text(f'[profile]\nname = "{name}"\nextends = "generic"\n{body}')
        return path

    def write_config(self, text: str) -> None:
        self.config.write_text(f'checks_dirs = ["{self.checks}"]\nprofile_dirs = ["{self.profiles}"]\n{text}')

    def env(self, **extra: str) -> dict[str, str]:
        env = fakes.env_for(self.bin, self.scenario)
        for key in CONFIG_ENV:
            env.pop(key, None)
        env["PREFLIGHT_CONFIG"] = str(self.config)
        env["PREFLIGHT_HISTORY"] = "off"
        env["XDG_DATA_HOME"] = str(self.tmp / "data")
        env.update(extra)
        return env


@pytest.fixture()
def site(tmp_path: Path) -> Iterator[Site]:
    s = Site(tmp_path)
    s.write_config("")
    yield s


def cli(args: list[str], env: dict[str, str], cwd: Path | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([sys.executable, "-m", "preflight.cli", *args], capture_output=True, text=True, env=env,
                       cwd=cwd, timeout=timeout)
    assert "Traceback" not in p.stderr, p.stderr
    return p


def node_json(site: Site, args: list[str], env: dict[str, str]) -> dict:
    p = cli(["node", "--json", *args], env, cwd=site.tmp)
    assert p.returncode in (0, 1), p.stderr
    return json.loads(p.stdout)


def by_check(doc: dict) -> dict[str, dict]:
    return {r["check"]: r for r in doc["results"]}


# ---- precedence: flag > environment > config file > built-in -----------------------------------


def test_profile_precedence_flag_env_config_builtin(site: Site) -> None:
    only = ["--only", "site.beta"]
    site.write_config("")
    doc = node_json(site, only, site.env())
    assert set(doc["profiles"].values()) == {"generic"}  # built-in "auto": no GPU found here -> generic
    site.write_config('profile = "cfgprof"\n')
    doc = node_json(site, only, site.env())
    assert set(doc["profiles"].values()) == {"cfgprof"}
    doc = node_json(site, only, site.env(PREFLIGHT_PROFILE="envprof"))
    assert set(doc["profiles"].values()) == {"envprof"}
    doc = node_json(site, [*only, "--profile", "flagprof"], site.env(PREFLIGHT_PROFILE="envprof"))
    assert set(doc["profiles"].values()) == {"flagprof"}
    # `--profile auto` given on the command line is a flag too: it wins over the pinned profile
    doc = node_json(site, [*only, "--profile", "auto"], site.env(PREFLIGHT_PROFILE="envprof"))
    assert set(doc["profiles"].values()) == {"generic"}
    # an empty environment variable is not a setting: the config file decides
    doc = node_json(site, only, site.env(PREFLIGHT_PROFILE=""))
    assert set(doc["profiles"].values()) == {"cfgprof"}


def test_pinned_profile_grades_the_run(site: Site) -> None:
    """The config's profile is the one the checks grade against, not only its name."""
    site.profile("strict", '[site]\nalpha_state = "DRAINED"\n')
    site.write_config('profile = "strict"\n')
    p = cli(["node", "--json", "--only", "site.alpha"], site.env(), cwd=site.tmp)
    doc = json.loads(p.stdout)
    assert p.returncode == 1 and doc["verdict"] == "NO-GO"
    assert "the profile expects DRAINED" in by_check(doc)["site.alpha"]["summary"]


def _runs(db: Path) -> list[str]:
    if not db.exists():
        return []
    with sqlite3.connect(db) as con:
        return [r[0] for r in con.execute("SELECT command FROM runs ORDER BY id")]


def test_history_target_precedence(site: Site) -> None:
    cfg_db, env_db, flag_db = site.tmp / "etc" / "cfg.db", site.tmp / "env.db", site.tmp / "flag.db"
    default_db = site.tmp / "data" / "preflight" / "history.db"
    only = ["--only", "site.beta"]
    env = site.env()
    del env["PREFLIGHT_HISTORY"]
    node_json(site, only, env)
    assert len(_runs(default_db)) == 1  # built-in default
    site.write_config('history = "cfg.db"\n')  # a file path: relative to the config file's folder
    node_json(site, only, env)
    assert len(_runs(cfg_db)) == 1 and len(_runs(default_db)) == 1
    node_json(site, only, {**env, "PREFLIGHT_HISTORY": f"sqlite:///{env_db}"})
    assert len(_runs(env_db)) == 1 and len(_runs(cfg_db)) == 1
    node_json(site, [*only, "--history", str(flag_db)], {**env, "PREFLIGHT_HISTORY": f"sqlite:///{env_db}"})
    assert len(_runs(flag_db)) == 1 and len(_runs(env_db)) == 1 and len(_runs(cfg_db)) == 1
    # the history commands read the same store: the config's, without a flag
    p = cli(["history", "--json", "--since", "all"], env, cwd=site.tmp)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["runs"] == 1  # the config's store holds one run (the others went elsewhere)
    # history switched off in the config: nothing recorded anywhere new
    site.write_config('history = "off"\n')
    node_json(site, only, env)
    assert len(_runs(cfg_db)) == 1 and len(_runs(default_db)) == 1


def test_only_and_skip_precedence(site: Site) -> None:
    env = site.env()
    site.write_config('only = ["site"]\nskip = ["site.beta"]\n')
    assert set(by_check(node_json(site, [], env))) == {"site.alpha"}
    # the environment replaces the file's lists
    got = node_json(site, [], {**env, "PREFLIGHT_ONLY": "site.beta,site.alpha", "PREFLIGHT_SKIP": "site.alpha"})
    assert set(by_check(got)) == {"site.beta"}
    # one of them set replaces both of the file's lists (its skip of site.beta goes too)
    got = node_json(site, [], {**env, "PREFLIGHT_ONLY": "site"})
    assert set(by_check(got)) == {"site.alpha", "site.beta"}
    # flags replace the environment's and the file's lists, both of them
    got = node_json(site, ["--only", "site", "--skip", "site.alpha"], {**env, "PREFLIGHT_ONLY": "site.alpha"})
    assert set(by_check(got)) == {"site.beta"}
    got = node_json(site, ["--only", "site.beta"], {**env, "PREFLIGHT_SKIP": "site.beta"})
    assert set(by_check(got)) == {"site.beta"}
    got = node_json(site, ["--skip", "gpu", "--skip", "net", "--skip", "ib", "--skip", "fabric", "--skip", "node"],
                    env)
    assert set(by_check(got)) == {"site.alpha", "site.beta"}
    # built-in: every check (a no-GPU machine still lists the GPU checks)
    site.write_config("")
    assert {"site.alpha", "site.beta", "gpu.inventory"} <= set(by_check(node_json(site, [], env)))


# ---- the prologue honours the pinned profile ---------------------------------------------------


def test_prologue_uses_the_config_profile(tmp_path: Path) -> None:
    """A healthy 8xH100 node is GO under its detected profile; a site whose config pins a
    16-GPU profile must get NO-GO from the prologue on the same node."""
    bin_dir = fakes.install(tmp_path / "bin", scenarios.TOOLS)
    env = fakes.env_for(bin_dir, scenarios.healthy_h100(tmp_path / "sc"))
    for key in CONFIG_ENV:
        env.pop(key, None)
    scenarios.nvml_env(env)
    env.update(SLURMD_NODENAME="gpu017", XDG_DATA_HOME=str(tmp_path / "data"))
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "h100-16x.toml").write_text('[profile]\nname = "h100-16x"\nextends = "h100-sxm-8x"\n'
                                            '[gpu]\ncount = { value = 16, source = "site: 16-GPU nodes" }\n')
    config = tmp_path / "config.toml"
    config.write_text('history = "off"\n')
    env["PREFLIGHT_CONFIG"] = str(config)
    args = ["prologue", "--only", "gpu.inventory", "--no-drain", "--budget", "60"]
    p = cli(args, env, cwd=tmp_path)
    assert p.returncode == 0 and "gpu017: GO" in p.stdout, p.stdout + p.stderr
    config.write_text(f'history = "off"\nprofile = "h100-16x"\nprofile_dirs = ["{profiles}"]\n')
    p = cli(args, env, cwd=tmp_path)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "gpu017: NO-GO" in p.stdout and "FAIL gpu.inventory" in p.stdout


# ---- the kill switch ---------------------------------------------------------------------------


def test_disabled_check_is_skip_and_its_probe_never_runs(site: Site) -> None:
    site.write_config('disabled_checks = ["site.alpha"]\n')
    doc = node_json(site, ["--only", "site"], site.env())
    alpha, beta = by_check(doc)["site.alpha"], by_check(doc)["site.beta"]
    assert alpha["status"] == "skip" and alpha["summary"] == f"disabled by config ({site.config})"
    assert beta["status"] == "pass" and doc["verdict"] == "GO"
    assert site.calls("alpha-tool") == [] and site.calls("beta-tool") == ["--status"]
    # --only cannot switch it back on: the kill switch wins
    doc = node_json(site, ["--only", "site.alpha", "--only", "site.beta"], site.env())
    assert by_check(doc)["site.alpha"]["status"] == "skip" and site.calls("alpha-tool") == []
    # only disabled checks selected: nothing would be checked, so no verdict (exit 2, one line)
    p = cli(["node", "--only", "site.alpha"], site.env(), cwd=site.tmp)
    assert p.returncode == 2 and "every check selected is disabled by config" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    # a family disables every check in it; the prologue reports it too
    site.write_config('disabled_checks = ["site"]\n')
    p = cli(["prologue", "--json", "--only", "site", "--only", "gpu.xid", "--no-drain", "--node", "gpu017"],
            site.env(), cwd=site.tmp)
    doc = json.loads(p.stdout)
    assert {r["check"]: (r["status"], r["node"]) for r in doc["results"] if r["check"].startswith("site.")} == \
        {"site.alpha": ("skip", "gpu017"), "site.beta": ("skip", "gpu017")}
    assert site.calls("alpha-tool") == [] and site.calls("beta-tool") == ["--status"] * 2  # the two runs above


@pytest.mark.real
def test_disabled_checks_are_skip_on_every_node_and_once_for_the_cluster(tmp_path: Path) -> None:
    """Over SSH to a two-node namespace cluster: a disabled node check is SKIP for each node, a
    disabled cross-node check one SKIP for the cluster, and the disabled check's tool never runs."""
    from tests.conftest import need
    from tests.netcluster import NetCluster, prerequisites

    need(not prerequisites(), f"namespace cluster prerequisites: {prerequisites()}")
    c = NetCluster(2, tmp_path / "cluster", prefix="cf", subnet="10.72.0")
    c.up(scenarios.TOOLS)
    try:
        for node in c.nodes:
            scenarios.healthy_h100(node.home / "scenario")
            record_calls(node.home / "bin" / "ibstat", node.home / "ibstat-calls.log")
        config = tmp_path / "config.toml"
        config.write_text('disabled_checks = ["ib.hca", "cluster.versions"]\nhistory = "off"\n')
        env = {k: v for k, v in os.environ.items() if k not in CONFIG_ENV}
        env["PREFLIGHT_CONFIG"] = str(config)
        p = c.client(sys.executable, "-m", "preflight.cli", "run", "--hosts", "n[1-2]", "--ssh-config",
                     str(c.ssh_config), "--transport", "ssh", "--connect-timeout", "5", "--command-timeout", "30",
                     "--json", "--no-report", "--no-sweep", "--profile", "h100-sxm-8x", check=False, timeout=180,
                     env=env)
    finally:
        c.down()
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    for check, nodes in (("ib.hca", ("n1", "n2")), ("cluster.versions", ("cluster",))):
        got = [(r["node"], r["status"], r["summary"]) for r in doc["results"] if r["check"] == check]
        assert got == [(n, "skip", f"disabled by config ({config})") for n in nodes], check
    assert all(calls(node.home / "ibstat-calls.log") == [] for node in c.nodes)
    assert {r["node"] for r in doc["results"] if r["check"] == "gpu.xid" and r["status"] == "pass"} == {"n1", "n2"}
    assert p.returncode == 0 and doc["verdict"] == "GO", [r for r in doc["results"] if r["status"] != "pass"]


def test_disabled_sweep(site: Site) -> None:
    """`nccl.allreduce` in the kill switch: `run` reports the sweep as SKIP; asked for the sweep
    alone, nothing would be checked (exit 2)."""
    site.write_config('disabled_checks = ["nccl.allreduce"]\n')
    p = cli(["run", "--json", "--no-report", "--skip", "gpu", "--skip", "net", "--skip", "ib", "--skip", "fabric",
             "--sweep-nproc", "2"], site.env(), cwd=site.tmp)
    doc = json.loads(p.stdout)
    sweep = by_check(doc)["nccl.allreduce"]
    assert sweep["status"] == "skip" and f"disabled by config ({site.config})" in sweep["summary"]
    assert p.returncode == 0 and doc["verdict"] == "GO"
    for args in (["run", "--sweep-only"], ["sweep", "--nproc", "2", "--no-report"]):
        p = cli(args, site.env(), cwd=site.tmp)
        assert p.returncode == 2 and "nccl.allreduce) is disabled by config" in p.stderr, (args, p.stderr)


def test_disabled_names_an_unknown_check(site: Site) -> None:
    site.write_config('disabled_checks = ["site.alhpa"]\n')
    p = cli(["node", "--only", "site"], site.env(), cwd=site.tmp)
    assert p.returncode == 2 and "disabled_checks names unknown check 'site.alhpa'" in p.stderr
    assert "did you mean site.alpha?" in p.stderr and str(site.config) in p.stderr


# ---- per-check timeouts ------------------------------------------------------------------------


def test_check_timeout_kills_a_hanging_tool_at_the_configured_time(tmp_path: Path) -> None:
    site = Site(tmp_path, alpha=[{"match": "--state", "hang": True}])
    site.write_config('[check_timeouts]\n"site.alpha" = 1.5\n')
    doc = node_json(site, ["--only", "site"], site.env())
    alpha = by_check(doc)["site.alpha"]
    assert alpha["status"] == "error" and "probe alpha timed out after 1.5 s" in alpha["summary"]
    assert by_check(doc)["site.beta"]["status"] == "pass"
    assert site.calls("alpha-tool") == ["--state"]
    # the configured timeout replaces --probe-timeout for that check
    doc = node_json(site, ["--only", "site", "--probe-timeout", "30"], site.env())
    assert "timed out after 1.5 s" in by_check(doc)["site.alpha"]["summary"]


@pytest.mark.parametrize("text,needle", [
    ('[check_timeouts]\n"site.alpah" = 3\n', "check_timeouts names unknown check 'site.alpah' (did you mean "
                                             "site.alpha?)"),
    ('[check_timeouts]\n"site.alpha" = "soon"\n', "check_timeouts.site.alpha = 'soon'"),
    ('[check_timeouts]\n"site.alpha" = -1\n', "check_timeouts.site.alpha = -1"),
    ('check_timeouts = 5\n', "check_timeouts must be a table of check id = seconds"),
])
def test_bad_check_timeouts_are_exit_2(site: Site, text: str, needle: str) -> None:
    site.write_config(text)
    p = cli(["node", "--only", "site"], site.env(), cwd=site.tmp)
    assert p.returncode == 2 and needle in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


# ---- unknown keys ------------------------------------------------------------------------------


@pytest.mark.parametrize("text,needle", [
    ('profle = "generic"\n', "unknown key 'profle' (did you mean profile?)"),
    ('[history_store]\nurl = "x"\n', "unknown key 'history_store'"),
    ('disabled_checks = "site.alpha"\n', "disabled_checks must be a list of check ids or families"),
    ('only = [1, 2]\n', "only must be a list of check ids or families"),
    ('history = 5\n', "history must be a store URL"),
    ('profile = ["a"]\n', "profile must be a profile name or TOML file"),
])
def test_unknown_or_mistyped_config_key_is_exit_2(site: Site, text: str, needle: str) -> None:
    site.write_config(text)
    for args in (["node", "--only", "site"], ["list"], ["history", "--json"]):
        p = cli(args, site.env(), cwd=site.tmp)
        assert p.returncode == 2, (args, p.stderr)
        assert needle in p.stderr and str(site.config) in p.stderr
        assert len(p.stderr.strip().splitlines()) == 1


def test_unknown_profile_key_is_exit_2_through_every_command(site: Site) -> None:
    bad = site.profile("typo", '[gpu]\ncuont = 8\n')
    needle = "unknown key gpu.cuont (did you mean gpu.count?)"
    env = site.env()
    for args in (["node", "--only", "site", "--profile", "typo"],
                 ["run", "--only", "site", "--no-report", "--profile", str(bad)],
                 ["prologue", "--only", "site", "--no-drain", "--node", "gpu017", "--profile", "typo"],
                 ["profiles", "--show", "typo"],
                 ["sweep", "--nproc", "2", "--profile", "typo", "--no-report"]):
        p = cli(args, env, cwd=site.tmp)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert needle in p.stderr and len(p.stderr.strip().splitlines()) == 1, (args, p.stderr)
    # pinned in the config: the same error
    site.write_config('profile = "typo"\n')
    p = cli(["node", "--only", "site"], env, cwd=site.tmp)
    assert p.returncode == 2 and needle in p.stderr


def test_profiles_that_must_keep_validating(site: Site, registry) -> None:
    """Shipped profiles, a learned profile, sub-tables, site checks' keys, provenance."""
    from preflight import profile as profiles
    from preflight.history.baseline import Fit, Learned, profile_toml

    for name in profiles.available():
        profiles.validate(profiles.load(name), registry.profile_schema())
    fit = Fit(center=350.0, spread=5.0, kept={"n1": 350.0}, dropped={}, iterations=1, method="mad")
    learned = profile_toml([Learned(table="single_node", fit=fit, warn=335.0, fail=262.5, source="learned")],
                           "fleet", "h100-sxm-8x")
    (site.profiles / "fleet.toml").write_text(learned)
    profiles.validate(profiles.load("fleet", (site.profiles,)), registry.profile_schema())
    mine = site.profile("mine", '[nvlink.model_links]\n"X100" = 18\n'
                                '[nccl.allreduce]\nsource = "site measurements"\nnote = "2026"\n'
                                '[gpu]\ncount = { value = 4, source = "site runbook", note = "4-GPU nodes" }\n')
    profiles.validate(profiles.load(str(mine)), registry.profile_schema())
    # a site check's own keys: known where the site's checks are loaded (the config's checks_dirs)
    site.profile("sitekeys", '[site]\nalpha_state = { value = "UP", source = "site runbook" }\n')
    p = cli(["profiles", "--show", "sitekeys"], site.env(), cwd=site.tmp)
    assert p.returncode == 0 and "site.alpha_state = 'UP'    # site runbook" in p.stdout, p.stderr
    site.config.write_text(f'profile_dirs = ["{site.profiles}"]\n')
    p = cli(["profiles", "--show", "sitekeys"], site.env(), cwd=site.tmp)
    assert p.returncode == 2 and "unknown key site.alpha_state" in p.stderr


def test_named_config_file_that_is_missing_is_exit_2(site: Site) -> None:
    p = cli(["node", "--only", "site.beta"], site.env(PREFLIGHT_CONFIG=str(site.tmp / "nope.toml")))
    assert p.returncode == 2 and "nope.toml (PREFLIGHT_CONFIG) does not exist" in p.stderr
