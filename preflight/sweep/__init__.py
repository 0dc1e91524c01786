"""Distributed collective sweep: all-reduce bandwidth/latency, ping-pong, bad-node isolation."""
