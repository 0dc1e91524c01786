"""Triage after hangs and crashes: collect, correlate, attribute."""
