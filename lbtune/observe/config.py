"""Configuration values read into a sample: the sysctls and sysfs attributes rules judge by.

A rule that compares a counter with a limit (`net.core.somaxconn`, a device's
`tx_queue_len`) must see the limit as it was when the counters were read, not as it is when
the report is printed. So the limits travel in the `Sample`: whoever builds the sampler
names the kernel paths it needs (the diagnose rules declare theirs), and every `take()`
reads them. A `*` path component stands for every entry of that directory
(`/proc/sys/net/ipv4/conf/*/rp_filter`).

A file that is there but read-only is recorded too: inside a network namespace the
host-global `net.*` sysctls show up read-only (and some not at all), so a fix that changes
one cannot be made from the namespace.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Iterable, Mapping

from lbtune.host.fs import HostFS


@dataclass(frozen=True)
class ConfigValues:
    """Values of configuration files by kernel path; absent files are simply not in it."""

    values: Mapping[str, str]  # kernel path -> text, whitespace runs folded to one space
    readonly: frozenset[str]  # the paths among them that cannot be written here


def expand(fs: HostFS, pattern: str) -> list[str]:
    """Kernel paths matching `pattern`, where one component may be `*` (a directory's
    entries, in sorted order); a pattern without `*` is returned as is."""
    parts = pattern.split("/")
    if "*" not in parts:
        return [pattern]
    i = parts.index("*")
    head, tail = "/".join(parts[:i]) or "/", "/".join(parts[i + 1 :])
    out: list[str] = []
    for name in fs.listdir(head):
        out.extend(expand(fs, posixpath.join(head, name, tail) if tail else f"{head}/{name}"))
    return out


def read_config(fs: HostFS, patterns: Iterable[str]) -> ConfigValues:
    """Read every file `patterns` names below `fs` (see `expand`)."""
    values: dict[str, str] = {}
    readonly: set[str] = set()
    for pattern in patterns:
        for path in expand(fs, pattern):
            if path in values:
                continue
            text = fs.read(path)
            if text is None:
                continue
            values[path] = " ".join(text.split())
            mode = fs.file_mode(path)
            if mode is not None and not mode & 0o222:
                readonly.add(path)
    return ConfigValues(values, frozenset(readonly))
