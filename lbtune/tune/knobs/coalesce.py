"""Interrupt coalescing knobs (`ethtool -C`), one parameter each.

Object `eth0:rx-usecs` (ethtool's parameter names: rx-usecs, rx-frames, tx-usecs, tx-frames,
adaptive-rx, adaptive-tx, ... lbtune.host.net.nicparams.COALESCE_ATTRS); value a count, or
on/off for adaptive-rx/-tx and cqe-mode-rx/-tx. The driver's supported set comes from the
kernel (the parameters its ethtool netlink answer carries): a parameter outside it is
"unsettable" here, with the set named, and a profile section naming the interface refuses
it at resolve time (lbtune.tune.profile.resolve).
"""

from __future__ import annotations

from typing import Optional

from lbtune.errors import BadInput
from lbtune.host.host import Host
from lbtune.host.net.nicparams import (
    COALESCE_ATTRS,
    COALESCE_FLAGS,
    U32_MAX,
    on_off,
    parse_on_off,
)
from lbtune.tune.knob import Knob, KnobError
from lbtune.tune.knobs.common import split_dev


def driver_of(host: Host, dev: str) -> str:
    """The driver's name for messages (`e1000e`), else the device's."""
    info = host.ethtool.driver_info(dev)
    if info is not None and info.driver:
        return info.driver
    return host.fs.readlink_name(f"/sys/class/net/{dev}/device/driver") or dev


class NicParamKnob(Knob):
    """A per-device ethtool setting: lives in the device's namespace, names its interface."""

    per_netns = True
    dev: str

    @property
    def interface(self) -> Optional[str]:
        return self.dev


def coalesce_value(name: str, value: str, what: str) -> int:
    """A coalescing value as the kernel takes it: on/off (1/0) for the flags, a u32 count."""
    text = value.strip()
    if name in COALESCE_FLAGS:
        flag = parse_on_off(text)
        if flag is None:
            raise BadInput(f"{what}: {value!r} is not on or off")
        return int(flag)
    if not text.isdigit() or not text.isascii() or int(text) > U32_MAX:
        raise BadInput(f"{what}: {value!r} is not a count from 0 to {U32_MAX}")
    return int(text)


def coalesce_unsupported(host: Host, dev: str, param: str) -> Optional[str]:
    """Why `dev`'s driver cannot take `param`, naming what it supports; None when it can."""
    c = host.ethtool.coalesce(dev)
    if c is None:
        return f"{dev} ({driver_of(host, dev)}) has no interrupt coalescing settings"
    if param in c.names:
        return None
    return (
        f"{param} is not supported by {driver_of(host, dev)} ({dev}); "
        f"it supports: {', '.join(c.names) or 'nothing'}"
    )


class CoalesceKnob(NicParamKnob):
    """`ethtool -C DEV PARAM N`: no link reset on the drivers lbtune has seen."""

    kind = "coalesce"

    def __init__(self, obj: str) -> None:
        super().__init__(obj)
        self.dev, self.param = split_dev(obj, self.kind)
        if self.param not in COALESCE_ATTRS:
            raise BadInput(
                f"{self.kind} {obj!r}: {self.param!r} is not a coalescing parameter "
                f"(ethtool's names: {', '.join(COALESCE_ATTRS)})"
            )

    def read(self, host: Host) -> Optional[str]:
        c = host.ethtool.coalesce(self.dev)
        v = None if c is None else c.get(self.param)
        if v is None:
            return None
        return on_off(bool(v)) if self.param in COALESCE_FLAGS else str(v)

    def normalize(self, value: str) -> str:
        try:
            n = coalesce_value(self.param, value, self.ident)
        except BadInput:
            return " ".join(value.split())
        return on_off(bool(n)) if self.param in COALESCE_FLAGS else str(n)

    def unsettable(self, host: Host) -> Optional[str]:
        return coalesce_unsupported(host, self.dev, self.param)

    def check(self, host: Host, value: str) -> None:
        coalesce_value(self.param, value, self.ident)

    def write(self, host: Host, value: str) -> None:
        try:
            n = coalesce_value(self.param, value, self.ident)
        except BadInput as e:
            raise KnobError(str(e)) from None
        try:
            host.ethtool.set_coalesce(self.dev, {self.param: n})
        except OSError as e:
            raise KnobError(f"{self.ident}={value.strip()}: {e.strerror or e}") from None
