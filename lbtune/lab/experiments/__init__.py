"""Guest-side experiments: the scenario, director failover, adaptive weights."""
