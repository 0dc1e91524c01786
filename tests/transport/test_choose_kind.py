"""The one "auto" transport rule, and the Transport defaults every transport inherits."""

from __future__ import annotations

import pytest

from preflight.transport import KINDS, choose_kind
from preflight.transport.local import LocalTransport

IN_JOB = {"SLURM_JOB_ID": "4242"}


@pytest.mark.parametrize("nodes,env,in_allocation,kind", [
    (["n1", "n2"], IN_JOB, True, "srun"),  # inside an allocation: srun, with or without nodes
    (None, IN_JOB, True, "srun"),
    (["n1", "n2"], IN_JOB, False, "ssh"),  # the caller opted out of the allocation
    (None, IN_JOB, False, "local"),
    (["n1"], {}, True, "ssh"),  # nodes, no allocation: ssh
    ([], {}, True, "local"),  # nothing: this machine
    (None, {"SLURM_JOB_ID": ""}, True, "local"),
])
def test_auto(nodes: list[str] | None, env: dict[str, str], in_allocation: bool, kind: str) -> None:
    assert choose_kind("auto", nodes, in_allocation, env=env) == kind


def test_auto_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    assert choose_kind("auto", ["n1"]) == "srun"
    monkeypatch.delenv("SLURM_JOB_ID")
    assert choose_kind("auto", ["n1"]) == "ssh"


def test_named_kinds_are_kept_and_unknown_ones_refused() -> None:
    for kind in ("local", "ssh", "srun"):
        assert choose_kind(kind, None, env=IN_JOB) == kind
    assert set(KINDS) == {"auto", "local", "ssh", "srun"}
    for bad in ("mpi", "SSH", ""):
        with pytest.raises(ValueError, match="use auto, local, ssh, srun"):
            choose_kind(bad, ["n1"])


def test_transport_defaults() -> None:
    t = LocalTransport()
    assert t.resolve_addresses(["a", "b", "a"]) == {"a": "a", "b": "b"}
    assert t.resolve_addresses([]) == {}
    t.close()
    t.close()  # idempotent
