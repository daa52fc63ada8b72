"""lbtune: host tuning and packet-drop diagnostics for Linux load-balancer and web hosts."""

__version__ = "0.1.0"
