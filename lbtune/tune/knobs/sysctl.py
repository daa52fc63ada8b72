"""The sysctl knob: one `/proc/sys/<dotted key>` value (key validation in host/kernel/sysctl.py)."""

from __future__ import annotations

from typing import Optional

from lbtune.errors import BadInput
from lbtune.host.host import Host
from lbtune.host.kernel.sysctl import sysctl_path
from lbtune.tune.knob import Knob, KnobError

MAX_VALUE_LEN = 4096


class SysctlKnob(Knob):
    kind = "sysctl"

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.path = sysctl_path(key)

    @property
    def per_netns(self) -> bool:  # type: ignore[override]
        # net.* entries visible inside a namespace are that namespace's own; fs., vm.,
        # kernel. are global even when read from inside one.
        return self.obj.startswith("net.")

    def netns_scoped(self, host: Host) -> bool:
        # Global net.* entries (net.core.rmem_max, ...) show up read-only (0444) inside a
        # namespace, and some (net.core.netdev_max_backlog) not at all: they are the host's,
        # not the namespace's.
        if not self.per_netns:
            return False
        mode = host.fs.file_mode(self.path)
        if mode is None:
            return not self.hidden_host_global(host)
        return bool(mode & 0o222)

    def hidden_host_global(self, host: Host) -> bool:
        """True for a host-global `net.*` key a namespace's view does not show.

        Live (`--netns`): the host's own namespace has it. In a namespace's capture, which
        holds only the namespace's view: its directory is there (`net/core`) and it is not
        a per-interface key (`net.ipv4.conf.eth9.*` is absent because eth9 is)."""
        if host.view_netns is None:
            return False
        if host.is_live:
            return host.read_host_view(self.path) is not None
        parts = self.obj.split(".")
        if len(parts) > 2 and parts[2] in ("conf", "neigh"):
            return False
        return host.fs.isdir(self.path.rpartition("/")[0])

    def host_value(self, host: Host) -> Optional[str]:
        """The host's value of a host-global key seen from a namespace's view: the
        namespace shows it (fs.*, read-only net.*), or the host's own view does."""
        value = host.fs.read(self.path)
        if value is None:
            value = host.read_host_view(self.path)
        return value

    @property
    def interface(self) -> Optional[str]:
        parts = self.obj.split(".")
        if len(parts) >= 5 and parts[0] == "net" and parts[2] in ("conf", "neigh"):
            name = parts[3].replace("/", ".")
            return None if name in ("all", "default") else name
        return None

    def read(self, host: Host) -> Optional[str]:
        return host.fs.read(self.path)

    def check(self, host: Host, value: str) -> None:
        if len(value) > MAX_VALUE_LEN or "\n" in value or "\0" in value:
            raise BadInput(f"sysctl {self.obj}: value must be one short line")
        real = host.fs.realpath(self.path)
        if not real.startswith("/proc/sys/"):
            raise BadInput(f"sysctl {self.obj}: resolves outside /proc/sys; refusing")
        # An absent key (older kernel, module not loaded) is planned as "missing", not fatal;
        # but one that is one typo away from a key this kernel has is an error naming both.
        if not host.fs.exists(self.path):
            near = self.near_miss(host)
            if near is not None:
                raise BadInput(
                    f"sysctl {self.obj}: no such sysctl on this host; did you mean {near}?"
                )

    def unknown(self, host: Host) -> Optional[str]:
        """Why this key cannot be a sysctl of this host, or None.

        A key whose directory exists but which is itself absent (`net.core.somaxcon`,
        `net.core.zz1`) is unknown: this kernel does not have it. A key whose whole family is
        absent (`net.sctp.*` without the sctp module, `net.ipv4.conf.eth9.*` without eth9)
        is not: it is planned as missing. Only the host's own namespace is judged: a
        namespace shows only some of the host's net.* entries (a namespace's capture too).
        """
        if host.view_netns is not None or host.fs.exists(self.path):
            return None
        if not host.fs.isdir(self.path.rpartition("/")[0]):
            return None
        near = self.near_miss(host)
        hint = f"; did you mean {near}?" if near else ""
        return f"sysctl {self.obj}: no such sysctl on this host{hint}"

    def near_miss(self, host: Host) -> Optional[str]:
        """A key of this host that `obj` is most likely a misspelling of, or None."""
        import difflib

        parent, _, leaf = self.path.rpartition("/")
        if not host.fs.isdir(parent):
            return None  # the whole family is absent (module not loaded): not a typo
        match = difflib.get_close_matches(leaf, host.fs.listdir(parent), n=1, cutoff=0.85)
        if not match:
            return None
        return self.obj.rpartition(".")[0] + "." + match[0]

    def write(self, host: Host, value: str) -> None:
        try:
            host.fs.write_attr(self.path, value)
        except OSError as e:
            raise KnobError(f"sysctl {self.obj}={value}: {e.strerror or e}") from None
