"""Every result id that can appear in a report is registered: the checks, the cross-node checks,
and the ids the sweep, triage, the runtime layer and analyze emit (`registry.EMITTED`)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from preflight import engine, registry

ROOT = Path(__file__).resolve().parents[1]


def _emitted_ids() -> dict[str, str]:
    """Result ids written as literals in the product: `Result(check="...")`, `check="..."`
    keywords and `*CHECK = "..."` constants (id -> the file that names it)."""
    out: dict[str, str] = {}
    for path in sorted([*(ROOT / "preflight").rglob("*.py"), *(ROOT / "checks").rglob("*.py")]):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg == "check" and isinstance(node.value, ast.Constant) \
                    and isinstance(node.value.value, str):
                out.setdefault(node.value.value, str(path.relative_to(ROOT)))
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                    and isinstance(node.value.value, str):
                for t in node.targets:
                    if isinstance(t, ast.Name) and t.id.endswith("CHECK"):
                        out.setdefault(node.value.value, str(path.relative_to(ROOT)))
    return out


def test_every_emitted_result_id_is_registered() -> None:
    found = _emitted_ids()
    assert {"nccl.pingpong", "triage.verdict", "runtime.watchdog", "analyze.node"} <= set(found)
    known = set(registry.load().known_ids())
    # "*" is history's "every check of the node" in a flapping record, not a result id
    missing = {i: where for i, where in found.items() if i not in known and i != "*"}
    assert not missing, missing


def test_the_list_shows_emitted_ids_with_their_kind() -> None:
    rows = {r["id"]: r for r in engine.check_table([], engine.load_config())}
    assert rows["nccl.pingpong"]["scope"] == "sweep" and rows["triage.verdict"]["scope"] == "triage"
    assert rows["runtime.straggler"]["scope"] == "runtime" and rows["gpu.xid"]["scope"] == "node"
    assert all(r["catches"] for i, r in rows.items() if i in {e.id for e in registry.EMITTED})


def test_only_and_skip_patterns_resolve_over_every_known_id() -> None:
    reg = registry.load()
    runtime = reg.matches(["runtime"])
    assert "runtime.watchdog" in runtime and all(i.startswith("runtime.") for i in runtime)
    assert reg.matches(["nccl.pingpong"]) == ["nccl.pingpong"]
    assert reg.matches(["nope"]) == []
    assert reg.kind_of("nccl.pingpong") == "sweep" and reg.kind_of("cluster.mtu") == "cluster"
    assert reg.kind_of("gpu.xid") == "node" and reg.kind_of("nope") == ""


def test_an_emitted_id_cannot_shadow_a_check() -> None:
    reg = registry.Registry()
    reg.register(registry.Check(id="site.thing", title="t", grade=lambda ctx: []))
    try:
        reg.register_emitted(registry.Emitted("site.thing", "t", "runtime"))
    except registry.RegistryError as exc:
        assert "already a check" in str(exc)
    else:
        raise AssertionError("an emitted id shadowing a check was accepted")
    assert reg.register_emitted(registry.Emitted("site.event", "t", "runtime")).id in reg.known_ids()


def test_only_naming_an_emitted_id_says_which_command_reports_it() -> None:
    reg = registry.load()
    assert reg.not_probed(["nccl.pingpong"]) == "nccl.pingpong is reported by `preflight sweep`, not probed on nodes"
    assert reg.not_probed(["runtime.loss"]) == \
        "runtime.loss is reported by the runtime layer inside a training job, not probed on nodes"
    assert reg.not_probed(["gpu.xid"]) == "" and reg.not_probed(["no.such.check"]) == ""
    with pytest.raises(engine.UsageError, match="nccl.pingpong is reported by `preflight sweep`"):
        engine.plan_run(engine.CheckRequest(only=["nccl.pingpong"]), engine.load_config())
