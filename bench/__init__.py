"""Benchmarks: figures printed, never asserted. `make bench` runs them (see README)."""
