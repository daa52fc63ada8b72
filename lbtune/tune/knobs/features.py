"""Feature (offload) knobs (`ethtool -K`), one kernel feature each.

Object `eth0:rx-lro` by the kernel's feature name (`ethtool -k`'s indented names and
lbtune.host.net.nicparams); value on/off. ethtool's aliases (gro, lro, tso, ...) are resolved
to kernel names before knobs are made (lbtune.tune.profile.resolve), so a journal names what
was actually changed. A feature the kernel does not have on this device is "unsettable"; a
fixed one ("[fixed]": the driver cannot change it) is refused at plan time when the profile
wants it changed, and planned as already right when it is at the wanted value.
"""

from __future__ import annotations

from typing import Optional

from lbtune.errors import BadInput
from lbtune.host.host import Host
from lbtune.host.net.nicparams import Feature, is_feature_name, on_off, parse_on_off
from lbtune.tune.knob import KnobError
from lbtune.tune.knobs.coalesce import NicParamKnob, driver_of
from lbtune.tune.knobs.common import split_dev


def on_off_value(value: str, what: str) -> bool:
    flag = parse_on_off(value)
    if flag is None:
        raise BadInput(f"{what}: {value!r} is not on or off")
    return flag


class FeatureKnob(NicParamKnob):
    """`ethtool -K DEV FEATURE on|off`. Some drivers reset the NIC for LRO or hw GRO
    (ixgbe, mlx5 re-create their queues); the kernel may keep a feature off that another
    one depends on, which the read-back catches."""

    kind = "feature"
    # set by the resolver: a fixed feature a role section asks the other way is planned as
    # unsettable with this reason (a section naming the interface is refused instead)
    skip: Optional[str] = None

    def __init__(self, obj: str) -> None:
        super().__init__(obj)
        self.dev, self.feature = split_dev(obj, self.kind)
        if not is_feature_name(self.feature):
            raise BadInput(f"{self.kind} {obj!r}: {self.feature!r} is not a feature name")

    def _state(self, host: Host) -> Optional[Feature]:
        feats = host.ethtool.features(self.dev)
        return None if feats is None else feats.get(self.feature)

    def read(self, host: Host) -> Optional[str]:
        f = self._state(host)
        return None if f is None else on_off(f.active)

    def normalize(self, value: str) -> str:
        flag = parse_on_off(value)
        return " ".join(value.split()) if flag is None else on_off(flag)

    def unsettable(self, host: Host) -> Optional[str]:
        if self.skip is not None:
            return self.skip
        if host.ethtool.features(self.dev) is None:
            return f"{self.dev} ({driver_of(host, self.dev)}) reports no features"
        if self._state(host) is None:
            return f"{self.dev} ({driver_of(host, self.dev)}) has no feature {self.feature}"
        return None

    def check(self, host: Host, value: str) -> None:
        wanted = on_off_value(value, self.ident)
        if self.skip is not None:
            return  # planned as unsettable, never written
        f = self._state(host)
        if f is not None and f.fixed and f.active != wanted:
            raise BadInput(
                f"{self.ident} = {on_off(wanted)}: {self.feature} is fixed {on_off(f.active)} "
                f"on {self.dev} ({driver_of(host, self.dev)}): the driver cannot change it"
            )

    def write(self, host: Host, value: str) -> None:
        try:
            wanted = on_off_value(value, self.ident)
        except BadInput as e:
            raise KnobError(str(e)) from None
        try:
            host.ethtool.set_features(self.dev, {self.feature: wanted})
        except OSError as e:
            raise KnobError(f"{self.ident}={on_off(wanted)}: {e.strerror or e}") from None
