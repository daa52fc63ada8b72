"""Pause-frame (flow control) knobs (`ethtool -A`): `eth0:autoneg`, `eth0:rx`, `eth0:tx`,
value on/off.

Pause autonegotiation decides rx/tx on some drivers: the e1000e keeps rx on while autoneg
is on (it takes `-A rx off` and reads back on), so a profile turns autoneg off before it
sets rx/tx (the resolver orders autoneg first; rollback restores in reverse). Changing
pause renegotiates the link on several drivers: the knob is disruptive (the management-link
guard asks before it).
"""

from __future__ import annotations

from typing import ClassVar, Optional

from lbtune.errors import BadInput
from lbtune.host.host import Host
from lbtune.host.net.nicparams import on_off, parse_on_off
from lbtune.tune.knob import KnobError
from lbtune.tune.knobs.coalesce import NicParamKnob, driver_of
from lbtune.tune.knobs.common import split_dev
from lbtune.tune.knobs.features import on_off_value


class PauseKnob(NicParamKnob):
    kind = "pause"
    note = "link renegotiation"
    disruptive = True
    FIELDS: ClassVar[tuple[str, ...]] = ("autoneg", "rx", "tx")

    def __init__(self, obj: str) -> None:
        super().__init__(obj)
        self.dev, self.field = split_dev(obj, self.kind)
        if self.field not in self.FIELDS:
            raise BadInput(f"{self.kind} {obj!r}: field must be one of {', '.join(self.FIELDS)}")

    def read(self, host: Host) -> Optional[str]:
        p = host.ethtool.pause(self.dev)
        return None if p is None else on_off(getattr(p, self.field))

    def normalize(self, value: str) -> str:
        flag = parse_on_off(value)
        return " ".join(value.split()) if flag is None else on_off(flag)

    def unsettable(self, host: Host) -> Optional[str]:
        if host.ethtool.pause(self.dev) is None:
            return f"{self.dev} ({driver_of(host, self.dev)}) has no pause frame settings"
        return None

    def check(self, host: Host, value: str) -> None:
        on_off_value(value, self.ident)

    def write(self, host: Host, value: str) -> None:
        try:
            wanted = on_off_value(value, self.ident)
        except BadInput as e:
            raise KnobError(str(e)) from None
        try:
            host.ethtool.set_pause(self.dev, **{self.field: wanted})
        except OSError as e:
            raise KnobError(f"{self.ident}={on_off(wanted)}: {e.strerror or e}") from None
