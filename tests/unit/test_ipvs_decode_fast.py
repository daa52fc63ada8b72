"""A destination decoded without statistics (what a reconcile reads) carries the same values
as the full decode, for the kernel's layouts and for odd ones (attributes out of order,
repeated, truncated, unknown)."""

from __future__ import annotations

import socket
import struct
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from lbtune.host.ipvs import wire as W

A = W._attr


def kernel_dest(addr: str, family: int, port: int, fwd: int, weight: int, u: int, lo: int,
                active: int, tunnel: bool) -> list[bytes]:
    """The attributes of a destination in the order ip_vs_genl_fill_dest puts them."""
    af = socket.AF_INET if family == 4 else socket.AF_INET6
    stats = b"".join(A(i, struct.pack("=Q", i)) for i in range(1, 11))
    out = [A(W.DEST_ADDR, socket.inet_pton(af, addr).ljust(16, b"\0")),
           A(W.DEST_PORT, struct.pack("!H", port)), A(W.DEST_FWD_METHOD, struct.pack("=I", fwd)),
           A(W.DEST_WEIGHT, struct.pack("=I", weight))]  # fmt: skip
    if tunnel:  # IPVS_DEST_ATTR_TUN_TYPE, _PORT, _FLAGS (5.2+)
        out += [A(13, b"\0"), A(14, b"\0\0"), A(15, b"\0\0")]
    out += [A(W.DEST_U_THRESH, struct.pack("=I", u)), A(W.DEST_L_THRESH, struct.pack("=I", lo)),
            A(W.DEST_ACTIVE_CONNS, struct.pack("=I", active)),
            A(W.DEST_INACT_CONNS, struct.pack("=I", 2)),
            A(W.DEST_PERSIST_CONNS, struct.pack("=I", 1)),
            A(W.DEST_ADDR_FAMILY, struct.pack("=H", af)),
            W._nested(W.DEST_STATS, [stats]), W._nested(W.DEST_STATS64, [stats])]  # fmt: skip
    return out


def body(attrs: list[bytes]) -> bytes:
    return W.GENLMSGHDR.pack(W.CMD_GET_DEST, 1, 0) + W._nested(W.CMD_ATTR_DEST, attrs)


def same_without_counters(raw: bytes, family: int) -> None:
    full = W.decode_dest(raw, family, counters=True)
    fast = W.decode_dest(raw, family, counters=False)
    assert (full is None) == (fast is None)
    if full is not None:
        assert fast == replace(full, counters=W.Counters())


dests = st.tuples(
    st.sampled_from([("10.0.0.1", 4), ("192.0.2.255", 4), ("2001:db8::2", 6)]),
    st.integers(0, 65535), st.integers(0, 7), st.integers(0, 2**32 - 1),
    st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1),
    st.booleans(),
)


@given(dests, st.randoms(use_true_random=False), st.integers(0, 3))
def test_kernel_layouts_and_shuffled_repeated_or_cut_ones(d, rnd, mode):
    (addr, family), *rest = d
    attrs = kernel_dest(addr, family, *rest)
    if mode == 1:
        rnd.shuffle(attrs)
    elif mode == 2:  # a repeated attribute: the later one wins in both
        attrs.append(A(W.DEST_WEIGHT, struct.pack("=I", 77)))
    elif mode == 3:  # cut short in the middle of an attribute
        raw = body(attrs)
        same_without_counters(raw[: rnd.randrange(W.GENLMSGHDR.size, len(raw))], family)
        return
    same_without_counters(body(attrs), family)


@given(st.binary(max_size=120))
def test_any_bytes(raw):
    same_without_counters(W.GENLMSGHDR.pack(W.CMD_GET_DEST, 1, 0) + raw, 4)
