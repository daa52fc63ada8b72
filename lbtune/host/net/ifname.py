"""What lbtune accepts as a network interface name, defined once for every layer.

The kernel (`dev_valid_name`) allows up to 15 bytes, anything but `/`, `:` and white space,
and not `.` or `..`. lbtune accepts the common subset: letters, digits and `_ - . @`
(`@` appears in names like `vlan@bond0` some tools create), first character not `-`, `.`
or `@`, so a name can never be read as an option, a path component or a sysctl separator.
In sysctl keys a `.` in an interface name is written `/` (sysctl(8)); see host/kernel/sysctl.py.
"""

from __future__ import annotations

import re

from lbtune.errors import BadInput

IFNAME_PATTERN = r"[A-Za-z0-9_][A-Za-z0-9_\-.@]{0,14}"
_IFNAME = re.compile(IFNAME_PATTERN)


def is_ifname(name: object) -> bool:
    """True when `name` is an interface name lbtune accepts."""
    return isinstance(name, str) and bool(_IFNAME.fullmatch(name)) and name not in (".", "..")


def check_ifname(name: object, what: str) -> str:
    """`name` when it is an interface name; BadInput("WHAT: 'x' is not an interface name")."""
    if not is_ifname(name):
        raise BadInput(f"{what}: {name!r} is not an interface name")
    assert isinstance(name, str)
    return name
