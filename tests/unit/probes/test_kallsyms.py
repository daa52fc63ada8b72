"""Symbolizing drop locations from kallsyms text."""

from __future__ import annotations

import os

import pytest

from lbtune.host.fs import HostFS
from lbtune.host.trace.kallsyms import Kallsyms, read_kallsyms

TEXT = """\
ffffffff81000000 T _stext
ffffffff81a00000 T tcp_v4_rcv
ffffffff81a00500 t tcp_v4_fill_cb
ffffffff81b00000 D some_data
ffffffff81b00000 W weak_fn
ffffffffc0100000 t nf_hook_slow_mod\t[nf_conntrack]
0000000000000000 T hidden
garbage line
zzzz T bad_address
"""


def test_names_with_offsets_and_modules():
    k = Kallsyms.parse(TEXT)
    assert k.available
    assert k.name(0xFFFFFFFF81A00091) == "tcp_v4_rcv+0x91"
    assert k.name(0xFFFFFFFF81A00500) == "tcp_v4_fill_cb+0x0"
    assert k.name(0xFFFFFFFF81B00010) == "weak_fn+0x10"  # data symbols are not code
    assert k.name(0xFFFFFFFFC0100004) == "nf_hook_slow_mod+0x4 [nf_conntrack]"
    assert k.name(0x1000) == "0x1000"  # below every symbol
    assert k.lookup(0xFFFFFFFF81A00091)[0].name == "tcp_v4_rcv"


def test_hidden_addresses_mean_unavailable():
    k = Kallsyms.parse("0000000000000000 T tcp_v4_rcv\n0000000000000000 t x\n")
    assert not k.available
    assert k.name(0xFFFFFFFF81A00091) == "0xffffffff81a00091"


def test_missing_file(tmp_path):
    assert not read_kallsyms(HostFS(str(tmp_path))).available


@pytest.mark.skipif(os.geteuid() != 0, reason="kallsyms addresses need root")
def test_the_running_kernel():
    k = read_kallsyms(HostFS("/"))
    with open("/proc/kallsyms") as f:
        addr = next(int(a, 16) for a, t, n, *_ in (ln.split() for ln in f) if n == "tcp_v4_rcv")
    assert k.name(addr + 0x10) == "tcp_v4_rcv+0x10"
