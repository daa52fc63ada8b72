"""The kernel's IPVS table: generic netlink, its wire format, /proc/net/ip_vs, connections,
and the record of a no-op apply that a repeated one is checked against.
"""
