"""NIC knobs: ring sizes and channel counts (ethtool), and the transmit queue length.

Objects: `ring` `eth0:rx` | `eth0:tx` (descriptors; link reset); `channels`
`eth0:combined` | `:rx` | `:tx` | `:other` (queue count; link reset); `txqueuelen` `eth0`.
"""

from __future__ import annotations

from typing import ClassVar, Optional

from lbtune.errors import BadInput
from lbtune.host.host import Host
from lbtune.host.net.ifname import check_ifname
from lbtune.tune.knob import KnobError
from lbtune.tune.knobs.common import NET_SYS, AttrKnob, IntValued, parse_count, split_dev


class RingKnob(IntValued):
    """`ethtool -G DEV rx|tx N`; most drivers reset the link."""

    per_netns = True  # the device lives in the namespace

    kind = "ring"
    note = "link reset"
    disruptive = True
    FIELDS: ClassVar[tuple[str, ...]] = ("rx", "tx")

    def __init__(self, obj: str) -> None:
        super().__init__(obj)
        self.dev, self.field = split_dev(obj, self.kind)
        if self.field not in self.FIELDS:
            raise BadInput(f"{self.kind} {obj!r}: field must be one of {', '.join(self.FIELDS)}")

    @property
    def interface(self) -> Optional[str]:
        return self.dev

    def _values(self, host: Host) -> tuple[Optional[int], Optional[int]]:
        r = host.ethtool.rings(self.dev)
        if r is None:
            return None, None
        return getattr(r, self.field), getattr(r, self.field + "_max")

    def read(self, host: Host) -> Optional[str]:
        cur, _ = self._values(host)
        return None if cur is None else str(cur)

    def unsettable(self, host: Host) -> Optional[str]:
        from lbtune.host.net.nic import NET_SYS as CLASS_NET
        from lbtune.host.net.nic import ring_fixed_reason

        driver = host.fs.readlink_name(f"{CLASS_NET}/{self.dev}/device/driver")
        return ring_fixed_reason(host.fs, self.dev, host.ethtool.rings(self.dev), driver)

    def check(self, host: Host, value: str) -> None:
        if self.unsettable(host) is not None:
            return  # planned as "unsettable", never written: any value is the same
        n = parse_count(value, self.ident)
        _, top = self._values(host)
        if n < 1:
            raise BadInput(f"{self.ident}: {n} is below 1")
        if top is not None and n > top:
            raise BadInput(f"{self.ident}: {n} is beyond the driver maximum {top}")

    def _set(self, host: Host, n: int) -> None:
        host.ethtool.set_rings(self.dev, **{self.field: n})

    def write(self, host: Host, value: str) -> None:
        try:
            n = int(value.strip())
        except ValueError:
            raise KnobError(f"{self.ident}: not an integer: {value!r}") from None
        try:
            self._set(host, n)
        except OSError as e:
            raise KnobError(f"{self.ident}={n}: {e.strerror or e}") from None


class ChannelsKnob(RingKnob):
    """`ethtool -L DEV combined|rx|tx|other N`; resets the queues (and usually the link).

    `combined` must stay >= 1; rx/tx/other may be 0 (drivers with both kinds).
    """

    kind = "channels"
    FIELDS: ClassVar[tuple[str, ...]] = ("combined", "rx", "tx", "other")

    def unsettable(self, host: Host) -> Optional[str]:
        return None

    def _values(self, host: Host) -> tuple[Optional[int], Optional[int]]:
        c = host.ethtool.channels(self.dev)
        if c is None:
            return None, None
        return getattr(c, self.field), getattr(c, self.field + "_max")

    def check(self, host: Host, value: str) -> None:
        n = parse_count(value, self.ident)
        _, top = self._values(host)
        if self.field == "combined" and n < 1:
            raise BadInput(f"{self.ident}: {n} is below 1")
        if top is not None and n > top:
            raise BadInput(f"{self.ident}: {n} is beyond the driver maximum {top}")

    def _set(self, host: Host, n: int) -> None:
        host.ethtool.set_channels(self.dev, **{self.field: n})

    def queues_after(self, value: str) -> dict[tuple[str, str], int]:
        text = value.strip()
        if not text.isdigit() or self.field == "other":
            return {}
        n = int(text)
        dirs = ("rx", "tx") if self.field == "combined" else (self.field,)
        return {(self.dev, d): n for d in dirs}


class TxqueuelenKnob(IntValued, AttrKnob):
    per_netns = True  # the device lives in the namespace
    kind = "txqueuelen"

    def __init__(self, obj: str) -> None:
        super().__init__(obj)
        self.dev = check_ifname(obj, self.kind)
        self.path = f"{NET_SYS}/{self.dev}/tx_queue_len"

    @property
    def interface(self) -> Optional[str]:
        return self.dev

    def check(self, host: Host, value: str) -> None:
        if parse_count(value, self.ident) > 0xFFFFFFFF:
            raise BadInput(f"{self.ident}: {value} is out of range")
