"""Sockets to other programs: HTTP, one TCP/UDP exchange, ARP, the `ipvs serve` socket.
"""
