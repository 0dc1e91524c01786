"""preflight: cluster preflight and diagnostics for GPU training clusters."""

__version__ = "0.1.0"
VERSION = __version__  # the public name the command line reads
