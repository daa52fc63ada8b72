"""A knob is one setting on one object: read it, compare it, write it, restore it.

Every kind (sysctl, ring sizes, IRQ affinity, ...) is a `Knob` subclass. Values cross the
engine as text in the form the kernel prints them, so the journal can restore exactly what
was there; `normalize` says when two texts mean the same value.
"""

from __future__ import annotations

import abc
from typing import ClassVar, Mapping, Optional

from lbtune.host.host import Host


class KnobError(Exception):
    """Reading or writing a knob failed on this host (the kernel refused, device gone...)."""


class Knob(abc.ABC):
    """One setting of one object on a host."""

    kind: ClassVar[str]  # "sysctl", "ring", ...
    # What applying this knob does beyond the value: "link reset", "reboot required".
    note: ClassVar[str] = ""
    # True when changing it can drop the management link (needs --yes on that interface).
    disruptive: ClassVar[bool] = False
    # True when the setting belongs to a network namespace (a device or a net.* sysctl in it);
    # host-global knobs are never changed by `--netns` runs.
    per_netns: bool = False

    def __init__(self, obj: str) -> None:
        self.obj = obj

    def netns_scoped(self, host: Host) -> bool:
        """True when a `--netns` run may change this knob (it belongs to the namespace)."""
        return self.per_netns

    def host_value(self, host: Host) -> Optional[str]:
        """The host's value of this host-global knob, read from a namespace's view; None
        when that view cannot tell (the default: only sysctls say)."""
        return None

    @property
    def ident(self) -> str:
        """Stable identity used in plans and journals: `kind:object`."""
        return f"{self.kind}:{self.obj}"

    @property
    def interface(self) -> Optional[str]:
        """The network interface this knob acts on, if any (for the management-link guard)."""
        return None

    def queue_of(self) -> Optional[tuple[str, str, int]]:
        """(device, "rx"|"tx", index) for a per-queue knob, else None."""
        return None

    def queues_after(self, value: str) -> dict[tuple[str, str], int]:
        """Queue counts that writing `value` leaves, by (device, "rx"|"tx"): what a channel
        change creates, so the plan can include per-queue knobs for queues not there yet."""
        return {}

    @abc.abstractmethod
    def read(self, host: Host) -> Optional[str]:
        """Current value as text; None when the object does not exist or is unsupported."""

    @abc.abstractmethod
    def write(self, host: Host, value: str) -> None:
        """Set the value; raise KnobError when the kernel refuses."""

    def normalize(self, value: str) -> str:
        """Canonical text for comparisons (whitespace-insensitive by default)."""
        return " ".join(value.split())

    def same(self, a: Optional[str], b: Optional[str]) -> bool:
        if a is None or b is None:
            return a is b
        return self.normalize(a) == self.normalize(b)

    def unsettable(self, host: Host) -> Optional[str]:
        """Why this host can never take a value for this knob (its driver cannot change it),
        or None. Planned and verified as "missing" with this reason, whatever the value."""
        return None

    def check(self, host: Host, value: str) -> None:
        """Refuse a value that is unsafe or out of range before anything is written.

        Raises lbtune.errors.BadInput. The default accepts anything the kind can parse.
        """
        return None

    def check_planned(
        self, host: Host, value: str, planned: Mapping[tuple[str, str], int]
    ) -> None:
        """`check` with the queue counts the plan's channel changes leave, by (device,
        "rx"|"tx"): for knobs that point at queues (an RSS table, a flow rule)."""
        self.check(host, value)

    def prepare_restore(self, host: Host, original: Optional[str]) -> None:
        """Called for every knob of a rollback before any is restored (before the channel
        counts come back): undo what would make the kernel refuse those (rss_indir)."""
        return None

    def restore(self, host: Host, original: Optional[str]) -> None:
        """Put back what the journal recorded. A knob whose object did not exist is left."""
        if original is not None:
            self.write(host, original)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.ident}>"
