"""Options several commands share say what they do: `--probe-timeout`'s help against the
registry's real per-probe limits; `--per-node` on every command that prints findings."""

from __future__ import annotations

import inspect
import typing

from preflight import engine, profile
from preflight.cli import checks as cli_checks
from preflight.cli import options as opt
from preflight.probes import DEFAULT_TIMEOUT
from preflight.registry import Options


def _help(alias: object) -> str:
    return str(typing.get_args(alias)[1].help)


def _planned(probe_timeout: float = DEFAULT_TIMEOUT) -> dict[str, float]:
    """Every probe of every check, planned for a node with a peer under each built-in profile
    that plans more probes: probe name -> its timeout."""
    reg = engine.load_registry([], engine.Config())
    got: dict[str, float] = {}
    for name in ("generic", "h100-sxm-8x"):
        plan = engine.plan_node(engine.select(reg, mode="all"), "n1", profile.load(name),
                                Options(peers=["n2"], probe_timeout=probe_timeout))
        assert not plan.failed, plan.failed
        got.update({p.name: p.timeout for p in plan.probes()})
    return got


def test_probe_timeout_help_says_the_default_and_the_real_range_of_the_probes_own_limits() -> None:
    # before: "Seconds before a hung probe is killed." while a hung `nvidia-smi -q` is killed at 20 s
    text = _help(opt.TimeoutOpt)
    own = {n: t for n, t in _planned().items() if t != DEFAULT_TIMEOUT}
    longest = max(own.values())
    assert f"default {DEFAULT_TIMEOUT:g} s" in text, text
    assert f"from {min(own.values()):g} s" in text, text
    names = sorted(n for n, t in own.items() if t == longest)
    assert f"up to {longest:g} s ({', '.join(names)})" in text, text
    for command in (cli_checks.run, cli_checks.node):
        assert inspect.signature(command).parameters["probe_timeout"].default == DEFAULT_TIMEOUT


def test_probe_timeout_replaces_only_the_default_limit() -> None:
    default, given = _planned(), _planned(probe_timeout=3.0)
    assert {n for n, t in default.items() if t == DEFAULT_TIMEOUT}  # some probes take the option
    for name, t in default.items():
        assert given[name] == (3.0 if t == DEFAULT_TIMEOUT else t), name
