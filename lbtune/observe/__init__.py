"""Counters and probes: typed samples of what the kernel counts (see model.py)."""
