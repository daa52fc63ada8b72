"""Code that runs inside a lab guest, whichever backend booted it.

The guest agent (the one request loop of both backends), the entry point of a call, the lab's
shell (commands in a namespace go through lbtune.host.net.netns.netns_argv), the lab network,
servers, load, DR configuration, the VIP check, the failover client and the guest-side checks.
"""
