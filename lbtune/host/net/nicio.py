"""The running kernel's coalescing, features and pause settings (LiveEthtool's readers and
writers for lbtune.host.net.nicparams).

- coalescing: the ethtool generic-netlink family (ETHTOOL_MSG_COALESCE_GET/SET, 5.6+). The
  kernel leaves a parameter out of its answer when the driver does not support it (and it is
  0), so the answer names the driver's supported set; the ioctl cannot tell a supported 0 from
  an unsupported one. Without the family (a kernel built without ETHTOOL_NETLINK) the
  ETHTOOL_GCOALESCE ioctl is read, every parameter reported.
- features: SIOCETHTOOL ETHTOOL_GSSET_INFO/GSTRINGS (ETH_SS_FEATURES) for the kernel's names,
  ETHTOOL_GFEATURES for available (changeable), requested, active and never-changed bits,
  ETHTOOL_SFEATURES to change them.
- pause: ETHTOOL_GPAUSEPARAM / ETHTOOL_SPAUSEPARAM.

`ioctl(dev, payload) -> reply` is lbtune.host.net.ethtool.ethtool_ioctl (passed in, so this
module does not import its caller).
"""

from __future__ import annotations

import errno
import struct
import sys
from typing import Callable, Mapping, Optional

from lbtune.host.net import netlink as nl
from lbtune.host.net.nicparams import (
    COALESCE_ATTRS,
    COALESCE_FLAGS,
    COALESCE_ORDER,
    COALESCE_PARAMS,
    U32_MAX,
    Coalesce,
    Feature,
    Features,
    Pause,
)

Ioctl = Callable[[str, bytes], bytes]

ETHTOOL_GCOALESCE, ETHTOOL_SCOALESCE = 0x0E, 0x0F
ETHTOOL_GPAUSEPARAM, ETHTOOL_SPAUSEPARAM = 0x12, 0x13
ETHTOOL_GSTRINGS = 0x1B
ETHTOOL_GSSET_INFO = 0x37
ETHTOOL_GFEATURES, ETHTOOL_SFEATURES = 0x3A, 0x3B
ETH_SS_FEATURES = 4
ETH_GSTRING_LEN = 32

# include/uapi/linux/ethtool_netlink.h
ETHTOOL_GENL_NAME = "ethtool"
ETHTOOL_MSG_COALESCE_GET, ETHTOOL_MSG_COALESCE_SET = 19, 20
ETHTOOL_A_COALESCE_HEADER = 1
ETHTOOL_A_HEADER_DEV_NAME = 2

# struct ethtool_coalesce: cmd then 22 u32 in this order (include/uapi/linux/ethtool.h)
_IOCTL_COALESCE_ORDER = (
    "rx-usecs", "rx-frames", "rx-usecs-irq", "rx-frames-irq",
    "tx-usecs", "tx-frames", "tx-usecs-irq", "tx-frames-irq",
    "stats-block-usecs", "adaptive-rx", "adaptive-tx", "pkt-rate-low",
    "rx-usecs-low", "rx-frames-low", "tx-usecs-low", "tx-frames-low",
    "pkt-rate-high", "rx-usecs-high", "rx-frames-high", "tx-usecs-high",
    "tx-frames-high", "sample-interval",
)  # fmt: skip
_COALESCE = struct.Struct("=23I")
_PAUSE = struct.Struct("=4I")


def _genl_header(dev: str) -> bytes:
    return nl.attr(
        ETHTOOL_A_COALESCE_HEADER | nl.NLA_F_NESTED,
        nl.attr(ETHTOOL_A_HEADER_DEV_NAME, dev.encode() + b"\0"),
    )


def _ethtool_genl(sock: nl.Netlink) -> Optional[int]:
    try:
        return sock.family(ETHTOOL_GENL_NAME)
    except OSError as e:
        if e.errno == errno.ENOENT:
            return None
        raise


def _check_dev(dev: str) -> None:
    name = dev.encode()
    if not name or len(name) >= 16 or b"/" in name or b"\0" in name:
        raise OSError(errno.EINVAL, f"{dev!r}: not an interface name")


def get_coalesce(dev: str, ioctl: Ioctl) -> Optional[Coalesce]:
    """The driver's supported coalescing parameters with their values; None when the driver
    has no coalescing (EOPNOTSUPP) or the device is gone."""
    _check_dev(dev)
    sock = nl.Netlink(nl.NETLINK_GENERIC)
    try:
        fam = _ethtool_genl(sock)
        if fam is None:
            return _ioctl_coalesce(dev, ioctl)
        payload = nl.GENLMSGHDR.pack(ETHTOOL_MSG_COALESCE_GET, 1, 0) + _genl_header(dev)
        try:
            bodies = sock.talk(fam, nl.NLM_F_REQUEST | nl.NLM_F_ACK, payload)
        except OSError as e:
            if e.errno in (errno.EOPNOTSUPP, errno.ENODEV, errno.ENOENT):
                return None
            raise
    finally:
        sock.close()
    for body in bodies:
        return decode_coalesce(nl.parse_attrs(body, nl.GENLMSGHDR.size))
    return None


def decode_coalesce(attrs: Mapping[int, bytes]) -> Coalesce:
    """A COALESCE_GET_REPLY's attributes as a Coalesce (present attributes = supported)."""
    values = []
    for name in COALESCE_ORDER:
        atype, flag = COALESCE_ATTRS[name]
        raw = attrs.get(atype)
        if raw is None:
            continue
        if flag:
            values.append((name, 1 if raw[:1] not in (b"", b"\0") else 0))
        elif len(raw) >= 4:
            values.append((name, int.from_bytes(raw[:4], sys.byteorder)))
    return Coalesce(tuple(values))


def _ioctl_coalesce(dev: str, ioctl: Ioctl) -> Optional[Coalesce]:
    try:
        raw = ioctl(dev, _COALESCE.pack(ETHTOOL_GCOALESCE, *([0] * 22)))
    except OSError:
        return None
    fields = _COALESCE.unpack(raw[: _COALESCE.size])[1:]
    got = dict(zip(_IOCTL_COALESCE_ORDER, fields))
    return Coalesce(tuple((n, got[n]) for n in COALESCE_PARAMS if n in got))


def set_coalesce(dev: str, changes: Mapping[str, int], ioctl: Ioctl) -> None:
    """Change only the given parameters (COALESCE_SET carries just them); the kernel refuses
    one the driver does not support (EOPNOTSUPP) and the driver a value it cannot take."""
    _check_dev(dev)
    for name, value in changes.items():
        if name not in COALESCE_ATTRS:
            raise OSError(errno.EINVAL, f"{dev}: {name}: not a coalescing parameter")
        if not 0 <= value <= (1 if name in COALESCE_FLAGS else U32_MAX):
            raise OSError(errno.EINVAL, f"{dev}: {name}={value}: out of range")
    sock = nl.Netlink(nl.NETLINK_GENERIC, ext_ack=True)
    try:
        fam = _ethtool_genl(sock)
        if fam is None:
            _ioctl_set_coalesce(dev, changes, ioctl)
            return
        body = _genl_header(dev)
        for name, value in changes.items():
            atype, flag = COALESCE_ATTRS[name]
            body += nl.attr(atype, bytes([value]) if flag else value.to_bytes(4, sys.byteorder))
        payload = nl.GENLMSGHDR.pack(ETHTOOL_MSG_COALESCE_SET, 1, 0) + body
        sock.talk(fam, nl.NLM_F_REQUEST | nl.NLM_F_ACK, payload)
    finally:
        sock.close()


def _ioctl_set_coalesce(dev: str, changes: Mapping[str, int], ioctl: Ioctl) -> None:
    raw = ioctl(dev, _COALESCE.pack(ETHTOOL_GCOALESCE, *([0] * 22)))
    f = list(_COALESCE.unpack(raw[: _COALESCE.size]))
    for name, value in changes.items():
        if name not in _IOCTL_COALESCE_ORDER:
            raise OSError(errno.EOPNOTSUPP, f"{dev}: {name}: Operation not supported")
        f[1 + _IOCTL_COALESCE_ORDER.index(name)] = value
    f[0] = ETHTOOL_SCOALESCE
    ioctl(dev, _COALESCE.pack(*f))


# ------------------------------------------------------------------ features


def _feature_names(dev: str, ioctl: Ioctl) -> list[str]:
    raw = ioctl(dev, struct.pack("=IIQI", ETHTOOL_GSSET_INFO, 0, 1 << ETH_SS_FEATURES, 0))
    (mask,) = struct.unpack_from("=Q", raw, 8)
    if not mask & (1 << ETH_SS_FEATURES):
        return []
    (n,) = struct.unpack_from("=I", raw, 16)
    req = struct.pack("=III", ETHTOOL_GSTRINGS, ETH_SS_FEATURES, n) + bytes(n * ETH_GSTRING_LEN)
    names_raw = ioctl(dev, req)
    return [
        names_raw[12 + i * ETH_GSTRING_LEN : 12 + (i + 1) * ETH_GSTRING_LEN]
        .split(b"\0", 1)[0]
        .decode(errors="replace")
        for i in range(n)
    ]


def _blocks(n: int) -> int:
    return (n + 31) // 32


def get_features(dev: str, ioctl: Ioctl) -> Optional[Features]:
    """Every named feature of `dev`: active, fixed (not changeable by the driver, or one the
    kernel never changes), requested (what was asked for)."""
    try:
        names = _feature_names(dev, ioctl)
        if not names:
            return None
        size = _blocks(len(names))
        raw = ioctl(dev, struct.pack("=II", ETHTOOL_GFEATURES, size) + bytes(16 * size))
    except OSError as e:
        if e.errno in (errno.EOPNOTSUPP, errno.ENODEV, errno.EINVAL):
            return None
        raise
    blocks = [struct.unpack_from("=4I", raw, 8 + 16 * i) for i in range(size)]
    out = []
    for i, name in enumerate(names):
        if not name:
            continue  # a bit without a name (an unused one): ethtool skips it too
        available, requested, active, never = blocks[i // 32]
        bit = 1 << (i % 32)
        out.append(
            Feature(
                name,
                active=bool(active & bit),
                fixed=not (available & bit) or bool(never & bit),
                requested=bool(requested & bit),
            )
        )
    return Features(tuple(out))


def set_features(dev: str, changes: Mapping[str, bool], ioctl: Ioctl) -> None:
    """Request the given features on/off (ETHTOOL_SFEATURES); EINVAL for a name the kernel
    does not have, EOPNOTSUPP for one the driver cannot change. The kernel may still keep
    a requested feature off (a dependency): the caller reads back."""
    names = _feature_names(dev, ioctl)
    size = _blocks(len(names))
    valid = [0] * size
    wanted = [0] * size
    current = get_features(dev, ioctl)
    fixed = {f.name for f in current.entries if f.fixed} if current else set()
    for name, on in changes.items():
        if name not in names:
            raise OSError(errno.EINVAL, f"{dev}: no feature {name!r}")
        if name in fixed:
            raise OSError(errno.EOPNOTSUPP, f"{dev}: {name} is fixed")
        i = names.index(name)
        valid[i // 32] |= 1 << (i % 32)
        if on:
            wanted[i // 32] |= 1 << (i % 32)
    body = b"".join(struct.pack("=II", v, w) for v, w in zip(valid, wanted))
    ioctl(dev, struct.pack("=II", ETHTOOL_SFEATURES, size) + body)


# ------------------------------------------------------------------ pause


def get_pause(dev: str, ioctl: Ioctl) -> Optional[Pause]:
    try:
        raw = ioctl(dev, _PAUSE.pack(ETHTOOL_GPAUSEPARAM, 0, 0, 0))
    except OSError as e:
        if e.errno in (errno.EOPNOTSUPP, errno.ENODEV, errno.EINVAL):
            return None
        raise
    _, autoneg, rx, tx = _PAUSE.unpack(raw[: _PAUSE.size])
    return Pause(bool(autoneg), bool(rx), bool(tx))


def set_pause(
    dev: str, ioctl: Ioctl, autoneg: Optional[bool], rx: Optional[bool], tx: Optional[bool]
) -> None:
    """Read-modify-write of struct ethtool_pauseparam, as `ethtool -A` does."""
    raw = ioctl(dev, _PAUSE.pack(ETHTOOL_GPAUSEPARAM, 0, 0, 0))
    f = list(_PAUSE.unpack(raw[: _PAUSE.size]))
    for i, v in ((1, autoneg), (2, rx), (3, tx)):
        if v is not None:
            f[i] = int(v)
    f[0] = ETHTOOL_SPAUSEPARAM
    ioctl(dev, _PAUSE.pack(*f))
