"""Code that runs inside a lab guest.

The agent loop, the namespace door (shell), the lab network, servers, load, DR configuration
and the guest-side checks.
"""
