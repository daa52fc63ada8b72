"""host/ipvs/table.py and host/ipvs/wire.py without a kernel: message layouts, decoding, and how
a pipelined batch reports each failure. Real IPVS is exercised in tests/lab/."""

from __future__ import annotations

import errno
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lbtune.errors import BadInput
from lbtune.host.ipvs import table as I
from lbtune.host.ipvs import wire as W
from lbtune.host.net.netlink import (
    NLM_F_ACK,
    NLM_F_ACK_TLVS,
    NLM_F_CAPPED,
    NLMSG_ERROR,
    NLMSGERR_ATTR_MSG,
    NLMSGHDR,
    error_of,
    parse_attrs,
)


def reply(body_attrs: bytes, cmd: int = W.CMD_GET_SERVICE) -> bytes:
    """A reply body as the kernel builds it: genl header, then attributes."""
    return W.GENLMSGHDR.pack(cmd, 1, 0) + body_attrs


@pytest.mark.parametrize(
    ("key", "settings"),
    [
        (W.ServiceKey.of("tcp", "10.0.0.1", 80), W.ServiceSettings("wrr")),
        (W.ServiceKey.of("udp", "10.0.0.1", 53),
         W.ServiceSettings("sh", W.F_ONEPACKET | W.F_SCHED1 | W.F_SCHED2)),
        (W.ServiceKey.of("tcp", "2001:db8::1", 443),
         W.ServiceSettings("rr", W.F_PERSISTENT, 300, 64)),
        (W.ServiceKey.of("sctp", "192.0.2.7", 3868), W.ServiceSettings("lc", 0, 0, 24)),
        (W.ServiceKey.mark(7, 6), W.ServiceSettings("mh", W.F_SCHED2, 0, 128, "sip")),
    ],
)
def test_service_attributes_decode_back(key, settings):
    svc = W.decode_service(reply(W.service_attrs(key, settings)))
    assert svc is not None
    assert svc.key == key and svc.settings == settings


def test_netmask_is_a_be32_mask_for_ipv4_and_a_prefix_for_ipv6():
    v4 = parse_attrs(parse_attrs(W.service_attrs(W.ServiceKey.of("tcp", "10.0.0.1", 80),
                                                  W.ServiceSettings("rr", 0, 0, 24)))[1])
    assert v4[W.SVC_NETMASK] == bytes([255, 255, 255, 0])
    v6 = parse_attrs(parse_attrs(W.service_attrs(W.ServiceKey.of("tcp", "2001:db8::1", 80),
                                                  W.ServiceSettings("rr", 0, 0, 64)))[1])
    assert struct.unpack("=I", v6[W.SVC_NETMASK]) == (64,)


def test_edit_sends_the_complete_destination():
    op = W.edit_dest_op(W.ServiceKey.of("tcp", "10.0.0.1", 80), W.DestKey.of("10.0.0.2", 80),
                        W.DestSettings(0, "dr", 100, 50))
    top = parse_attrs(op.attrs)
    dest = parse_attrs(top[W.CMD_ATTR_DEST])
    assert {a: struct.unpack("=I", dest[a])[0] for a in (W.DEST_FWD_METHOD, W.DEST_WEIGHT,
                                                          W.DEST_U_THRESH, W.DEST_L_THRESH)} == {
        W.DEST_FWD_METHOD: 3, W.DEST_WEIGHT: 0, W.DEST_U_THRESH: 100, W.DEST_L_THRESH: 50}
    assert dest[W.DEST_PORT] == b"\x00\x50"  # network order
    assert W.CMD_ATTR_SERVICE in top


def test_destination_with_counters_decodes():
    stats = b"".join(W._attr(i, struct.pack("=Q", i * 10)) for i in range(1, 11))
    attrs = W._dest_attrs(W.DestKey.of("2001:db8::2", 80), W.DestSettings(5, "dr", 9, 3))
    inner = parse_attrs(attrs)[W.CMD_ATTR_DEST] + W._u32(W.DEST_ACTIVE_CONNS, 4) + \
        W._u32(W.DEST_INACT_CONNS, 6) + W._nested(W.DEST_STATS64, [stats])
    d = W.decode_dest(reply(W._attr(W.CMD_ATTR_DEST, inner), W.CMD_GET_DEST), 6)
    assert d is not None
    assert d.key.ident == "[2001:db8::2]:80"
    assert d.settings == W.DestSettings(5, "dr", 9, 3)
    assert (d.active, d.inactive) == (4, 6)
    assert d.counters.conns == 10 and d.counters.outbps == 100


@given(st.sampled_from(["tcp", "udp", "sctp"]),
       st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6)), st.integers(0, 65535))
def test_service_idents_round_trip(proto, addr, port):
    key = W.ServiceKey.of(proto, str(addr), port)
    assert W.ServiceKey.parse(key.ident) == key


@pytest.mark.parametrize("bad", ["tcp:10.0.0.1", "tcp:2001:db8::1:80", "gre:10.0.0.1:1",
                                 "fwmark:x", "fwmark:1:inet9", "tcp:10.0.0.1:65536", "tcp"])
def test_bad_service_idents_are_bad_input(bad):
    with pytest.raises(BadInput):
        W.ServiceKey.parse(bad)


def test_flag_names_round_trip_per_scheduler():
    for sched, names in (("sh", ["sh-fallback", "sh-port"]), ("mh", ["mh-fallback", "mh-port"]),
                         ("rr", ["flag-1", "flag-2", "flag-3"])):
        flags = W.parse_flags(names, sched)
        assert W.flag_names(flags, sched) == names
    with pytest.raises(BadInput, match="scheduler wrr"):
        W.parse_flags(["sh-port"], "wrr")


# -- pipelined batches: one answer per failure, one ack at the end ----------------------


class FakeKernel:
    """Answers a batch the way netlink does: an NLMSG_ERROR for each failing message, and
    an ack (error 0) for the one that asked for it; one datagram per answer."""

    def __init__(self, fail: dict[int, int]) -> None:
        self.fail = fail  # message index in the batch -> errno
        self.out: list[bytes] = []
        self.sent: list[bytes] = []

    def send(self, data: bytes) -> int:
        self.sent.append(data)
        offset, i = 0, 0
        while offset < len(data):
            length, _t, flags, seq, _pid = NLMSGHDR.unpack_from(data, offset)
            code = self.fail.get(i, 0)
            if code or flags & NLM_F_ACK:
                body = struct.pack("=i", -code) + data[offset:offset + NLMSGHDR.size]
                self.out.append(NLMSGHDR.pack(NLMSGHDR.size + len(body), NLMSG_ERROR,
                                              NLM_F_CAPPED, seq, 0) + body)
            offset += (length + 3) & ~3
            i += 1
        return len(data)

    def recv(self, _n: int) -> bytes:
        return self.out.pop(0)


def socket_with(kernel: FakeKernel) -> I.IpvsSocket:
    sock = I.IpvsSocket.__new__(I.IpvsSocket)
    sock.sock = kernel  # type: ignore[assignment]
    sock._seq = 0
    sock.family_id = 0x20
    return sock


def test_a_batch_asks_for_one_ack_and_reports_each_failure():
    key = W.ServiceKey.of("tcp", "10.0.0.1", 80)
    ops = [W.add_dest_op(key, W.DestKey.of(f"10.0.1.{i}", 80), W.DestSettings()) for i in range(6)]
    kernel = FakeKernel({2: errno.EEXIST, 4: errno.ENOENT})
    errors = socket_with(kernel).execute(ops)
    assert len(kernel.sent) == 1  # one sendmsg for the whole batch
    assert [e.errno if e else None for e in errors] == [None, None, errno.EEXIST, None,
                                                        errno.ENOENT, None]
    assert str(errors[2]) == "add real server 10.0.1.2:80 to tcp:10.0.0.1:80: File exists"


def test_a_failing_last_message_still_ends_the_batch():
    key = W.ServiceKey.of("tcp", "10.0.0.1", 80)
    ops = [W.delete_service_op(key)] * 3
    errors = socket_with(FakeKernel({2: errno.ESRCH})).execute(ops)
    assert [e.errno if e else None for e in errors] == [None, None, errno.ESRCH]


def test_large_batches_are_split_below_the_send_buffer():
    key = W.ServiceKey.of("tcp", "10.0.0.1", 80)
    ops = [W.add_dest_op(key, W.DestKey.of(f"10.{i // 250}.0.{i % 250}", 80), W.DestSettings())
           for i in range(5000)]
    kernel = FakeKernel({})
    assert socket_with(kernel).execute(ops) == [None] * 5000
    assert len(kernel.sent) > 1 and max(len(d) for d in kernel.sent) < 212992


def test_extended_ack_text_is_kept():
    msg = W._attr(NLMSGERR_ATTR_MSG, b"Unknown scheduler\0")
    body = struct.pack("=i", -errno.ENOENT) + NLMSGHDR.pack(16, 0, 0, 1, 0) + msg
    code, text = error_of(body, NLM_F_CAPPED | NLM_F_ACK_TLVS)
    assert code == errno.ENOENT and text == "No such file or directory (Unknown scheduler)"


def test_schedulers_from_the_modules_directory(tmp_path):
    from lbtune.host.fs import HostFS

    (tmp_path / "proc/sys/kernel").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/osrelease").write_text("6.1.0-test\n")
    mods = tmp_path / "lib/modules/6.1.0-test"
    mods.mkdir(parents=True)
    (mods / "modules.dep").write_text(
        "kernel/net/netfilter/ipvs/ip_vs_rr.ko.xz: kernel/net/netfilter/ipvs/ip_vs.ko.xz\n"
        "kernel/net/netfilter/ipvs/ip_vs_wrr.ko: kernel/net/netfilter/ipvs/ip_vs.ko\n"
        "kernel/net/netfilter/ipvs/ip_vs_ftp.ko: kernel/net/netfilter/ipvs/ip_vs.ko\n")
    (mods / "modules.builtin").write_text("kernel/net/netfilter/ipvs/ip_vs_sh.ko\n")
    assert I.available_schedulers(HostFS(str(tmp_path))) == {"rr", "wrr", "sh"}
    (mods / "modules.dep").unlink()
    (mods / "modules.builtin").unlink()
    assert I.available_schedulers(HostFS(str(tmp_path))) is None  # cannot tell: no guess
