"""Transports: run bundles of probes on nodes and give back captures per node."""

from preflight.transport.base import NodeOutcome, Transport

__all__ = ["NodeOutcome", "Transport"]
