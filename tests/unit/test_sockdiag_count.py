"""sock_diag counting on recorded bytes: the request lbtune sends (with its port filter
program) against what `ss` sends for the same filter, and the answer counter (fast strided
path and message walk) on a dump the kernel sent.

Recorded on Linux 6.18 in a throwaway namespace: three connections to 127.0.0.1:80 (plus a
listener on 127.0.0.1:80 and one on [::1]:80), the IPv4 dump of ESTABLISHED sockets with
local port 80: one datagram of three 124-byte answers, then NLMSG_DONE alone."""

from __future__ import annotations

import errno
import socket
import struct

import pytest

from lbtune.host.net import netlink, sockdiag

# iproute2 6.1.0: `strace -e sendmsg -xx ss -Htn state established '( sport >= :80 and
# sport <= :80 )'` sends, after its nlmsghdr, struct inet_diag_req_v2 (IPv4, TCP, no
# extension, 1 << TCP_ESTABLISHED, zero sockid), the attribute header "\x14\x00\x01\x00"
# (20 bytes, INET_DIAG_REQ_BYTECODE) and 16 bytes of program (strace shows them as a
# nlmsghdr: nlmsg_len=1312770 type=0 flags=0x50 seq=788483 pid=5242880; the same bytes).
SS_REQUEST_V4_PORT80 = (
    bytes([socket.AF_INET, socket.IPPROTO_TCP, 0, 0]) + struct.pack("=I", 1 << 1) + bytes(48)
    + b"\x14\x00\x01\x00"
    + struct.pack("=IHHII", 1312770, 0, 0x50, 788483, 5242880)
)  # fmt: skip

ANSWER = bytes.fromhex(
    "7c0000001400020001000000ea1b0000020100000050982e7f0000010000000000000000000000007f0000"
    "01000000000000000000000000000000007e0501000000000000000000000000000000000000000000d86b"
    "0300050008000000000008000f00000000000c001500010000000000000006001600520000007c00000014"
    "00020001000000ea1b000002010000005098287f0000010000000000000000000000007f00000100000000"
    "0000000000000000000000007f0501000000000000000000000000000000000000000000d76b0300050008"
    "000000000008000f00000000000c001500010000000000000006001600520000007c000000140002000100"
    "0000ea1b000002010000005098307f0000010000000000000000000000007f000001000000000000000000"
    "00000000000000800501000000000000000000000000000000000000000000d96b03000500080000000000"
    "08000f00000000000c00150001000000000000000600160052000000"
)
DONE = bytes.fromhex("140000000300020001000000ea1b000000000000")
SEQ = 1


def count(data: bytes, seq: int = SEQ) -> tuple[int, bool]:
    return netlink.count_datagram(memoryview(bytearray(data)), sockdiag.SOCK_DIAG_BY_FAMILY, seq)


def test_the_request_is_what_ss_sends_for_the_same_filter():
    req = sockdiag.diag_request(socket.AF_INET, socket.IPPROTO_TCP, 1 << sockdiag.TCP_ESTABLISHED,
                                0, sockdiag.port_bytecode(80, 80))  # fmt: skip
    assert req == SS_REQUEST_V4_PORT80


def test_the_port_program_reads_back_as_two_comparisons():
    ops = list(struct.iter_unpack("=BBH", sockdiag.port_bytecode(1024, 65535)))
    assert ops == [(sockdiag.INET_DIAG_BC_S_GE, 8, 20), (0, 0, 1024),
                   (sockdiag.INET_DIAG_BC_S_LE, 8, 12), (0, 0, 65535)]  # fmt: skip
    for low, high in ((-1, 5), (9, 8), (0, 65536)):
        with pytest.raises(ValueError):
            sockdiag.port_bytecode(low, high)


def test_a_request_without_a_program_has_no_attribute():
    req = sockdiag.diag_request(socket.AF_INET6, socket.IPPROTO_TCP, sockdiag.ALL_STATES)
    assert len(req) == 56 and req[0] == socket.AF_INET6


def test_counts_the_recorded_answers_at_once_and_the_done_after():
    assert ANSWER[:4] == b"\x7c\x00\x00\x00" and len(ANSWER) == 3 * 124
    assert count(ANSWER) == (3, False)
    assert count(DONE) == (0, True)
    assert count(ANSWER + DONE) == (3, True)  # the kernel may put DONE behind the last answer


def test_a_datagram_of_unequal_answers_is_walked_with_the_same_count():
    # A 4-byte attribute more on the second answer (as a kTLS socket's ULP info would be).
    first, second, third = ANSWER[:124], bytearray(ANSWER[124:248]), ANSWER[248:]
    second[0:4] = struct.pack("=I", 128)
    longer = bytes(second) + b"\x08\x00\x0e\x00"  # an attribute of 4 bytes more
    assert count(first + longer + third + DONE) == (3, True)


def test_other_sequence_numbers_and_types_are_not_counted():
    other_seq = bytearray(ANSWER[:124])
    other_seq[8:12] = struct.pack("=I", 7)
    noop = struct.pack("=IHHII", 16, netlink.NLMSG_NOOP, 0, SEQ, 0)
    assert count(ANSWER[:124] + bytes(other_seq) + noop + DONE) == (1, True)


def test_kernel_errors_and_bad_lengths_raise():
    err = struct.pack("=IHHII", 20, netlink.NLMSG_ERROR, 0, SEQ, 0) + struct.pack("=i", -1)
    with pytest.raises(OSError) as e:
        count(err)
    assert e.value.errno == errno.EPERM
    failed_done = DONE[:16] + struct.pack("=i", -errno.EINTR)
    with pytest.raises(OSError) as e:
        count(ANSWER + failed_done)
    assert e.value.errno == errno.EINTR
    with pytest.raises(OSError) as e:
        count(ANSWER[:200])  # the second answer cut short
    assert e.value.errno == errno.EBADMSG
    zero = bytearray(ANSWER)
    zero[124:128] = b"\x00\x00\x00\x00"
    with pytest.raises(OSError):
        count(bytes(zero))


PROC_TCP = """\\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F90 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:9C40 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0000000000000000 20 4 30 10 -1
   3: 0100007F:1F91 0100007F:9C41 01 00000000:00000000 00:00000000 00000000     0        0 4 1 0000000000000000 20 4 30 10 -1
   4: 0100007F:1F90 0100007F:9C42 06 00000000:00000000 03:00000A00 00000000     0        0 0 3 0000000000000000
"""  # noqa: E501
PROC_TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:1F90 00000000000000000000000001000000:A000 01 00000000:00000000 00:00000000 00000000     0        0 5 1 0000000000000000 20 4 30 10 -1
"""  # noqa: E501


def test_proc_fallback_counts_established_on_the_local_port_only(tmp_path):
    v4, v6 = tmp_path / "tcp", tmp_path / "tcp6"
    v4.write_text(PROC_TCP)
    v6.write_text(PROC_TCP6)
    # the listener (0A), the client end (local 9C40), the other port and TIME_WAIT (06) are out
    assert sockdiag.count_established_proc([str(v4), str(v6)], 8080) == 2
    assert sockdiag.count_established_proc([str(v4)], 8081) == 1
    with pytest.raises(OSError):
        sockdiag.count_established_proc([str(tmp_path / "gone")], 8080)


def test_proc_fallback_reads_past_its_chunk_size(tmp_path):
    line = "   1: 0100007F:1F90 0100007F:9C40 01 00000000:00000000 00:00000000 00000000\n"
    big = tmp_path / "tcp"
    big.write_text(PROC_TCP.splitlines(keepends=True)[0] + line * 40_000)  # 3 MB
    assert big.stat().st_size > 1 << 20
    assert sockdiag.count_established_proc([str(big)], 8080) == 40_000
