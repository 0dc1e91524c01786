"""preflight: cluster preflight and diagnostics for GPU training clusters."""

__version__ = "0.1.0"
