"""The only layer that touches the machine: files under a root, netlink, commands."""
