"""Netlink and the links of this network namespace.

The plain-socket netlink client, addresses, routes, link and queue counters, qdiscs, sockets
(sock_diag), ethtool, NICs, interface names, the management path, entering a namespace.
"""
