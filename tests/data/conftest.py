"""tests/data holds fixture data, not tests: keep pytest's collection out of it.

The host trees under hosts/ contain sysfs-style relative symlinks that point back up the tree
(`.../0000:98:00.0/net/ens1f0np0/device -> ../../../0000:98:00.0`), as the kernel's do. A walk
that follows symlinks never finishes there, and pytest's directory collection follows them.
"""

collect_ignore_glob = ["*"]
