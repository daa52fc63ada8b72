"""The kernel's IPVS table: generic netlink, its wire format, /proc/net/ip_vs, connections.
"""
