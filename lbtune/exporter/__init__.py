"""The Prometheus exporter: the monitor's pipeline without a screen, as /metrics or a textfile."""
