"""Transports: run bundles of probes on nodes and give back captures per node."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from preflight.transport.base import NodeOutcome, Transport

KINDS = ("auto", "local", "ssh", "srun")


def choose_kind(kind: str, nodes: Sequence[str] | None, in_allocation: bool = True,
                env: Mapping[str, str] | None = None) -> str:
    """The transport to use: `kind` itself, or for "auto" the one rule: srun inside a Slurm
    allocation (SLURM_JOB_ID set, unless the caller says `in_allocation=False`), else ssh when
    nodes are given, else local. Raises ValueError for a kind that is not one of KINDS."""
    if kind not in KINDS:
        raise ValueError(f"transport {kind!r}: use {', '.join(KINDS)}")
    if kind != "auto":
        return kind
    environ = os.environ if env is None else env
    if in_allocation and environ.get("SLURM_JOB_ID"):
        return "srun"
    return "ssh" if nodes else "local"


__all__ = ["KINDS", "NodeOutcome", "Transport", "choose_kind"]
