"""BTF enum reading: the recorded 6.18 drop-reason enums, split (module) BTF, hostile blobs."""

from __future__ import annotations

import os
import pathlib
import struct

import pytest

from lbtune.host.fs import HostFS
from lbtune.host.trace.btf import BtfError, blob_strings, kernel_enums, parse_enums
from tests.data.btf.record import write_enums

BTF = pathlib.Path(__file__).resolve().parents[2] / "data" / "btf"


def recorded() -> bytes:
    return (BTF / "vmlinux-6.18-drop-reasons.btf").read_bytes()


def test_recorded_drop_reason_enums():
    enums = {e.name: e for e in parse_enums(recorded())}
    core = enums["skb_drop_reason"].value_names()
    assert core[0] == "SKB_NOT_DROPPED_YET" and core[1] == "SKB_CONSUMED"
    assert core[3] == "SKB_DROP_REASON_NO_SOCKET"
    assert core[4] == "SKB_DROP_REASON_SOCKET_CLOSE"  # PKT_TOO_SMALL on 6.5: never a table
    sub = enums["skb_drop_reason_subsys"].value_names()
    assert sub[1] == "SKB_DROP_REASON_SUBSYS_MAC80211_UNUSABLE"


def test_split_module_btf_resolves_strings_against_its_base():
    base = recorded()
    base_len = len(blob_strings(base).data)
    module = write_enums([("ovs_drop_reason", [("__OVS_DROP_REASON", 2 << 16),
                                               ("OVS_DROP_LAST_ACTION", (2 << 16) + 1)])],
                         base_strings=base_len)  # fmt: skip
    (enum,) = parse_enums(module, blob_strings(base))
    assert enum.name == "ovs_drop_reason"
    assert enum.members[1] == ("OVS_DROP_LAST_ACTION", (2 << 16) + 1)


def test_other_kinds_are_skipped_by_their_size():
    # An INT (4 extra bytes) and a STRUCT with two members (2 x 12) before the enum.
    extra = struct.pack("<III", 0, (1 << 24), 4) + struct.pack("<I", 32)
    extra += struct.pack("<III", 0, (4 << 24) | 2, 8) + bytes(24)
    blob = write_enums([("e", [("A", 7)])], extra_types=extra)
    assert [(e.name, e.members) for e in parse_enums(blob)] == [("e", (("A", 7),))]


def test_signed_enum_values():
    blob = write_enums([("netdev_tx", [("__NETDEV_TX_MIN", -(2**31)), ("NETDEV_TX_OK", 0)])])
    assert parse_enums(blob)[0].members[0][1] == -(2**31)


@pytest.mark.parametrize(
    "blob",
    [
        b"",
        b"\x00" * 24,  # no magic
        struct.pack("<HBBIIIII", 0xEB9F, 2, 0, 24, 0, 0, 0, 0),  # version 2
        struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, 100, 100, 1),  # sections past the end
        struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, 12, 12, 1)
        + struct.pack("<III", 0, 31 << 24, 0) + b"\0",  # unknown kind
        struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, 12, 12, 1)
        + struct.pack("<III", 0, (6 << 24) | 5, 4) + b"\0",  # enum members missing
        struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, 20, 20, 1)
        + struct.pack("<IIIIi", 99, (6 << 24) | 1, 4, 0, 1) + b"\0",  # name outside strings
    ],
)
def test_hostile_blobs_raise_btf_error(blob):
    with pytest.raises(BtfError):
        parse_enums(blob)


def test_kernel_enums_of_a_tree(tmp_path):
    d = tmp_path / "sys" / "kernel" / "btf"
    d.mkdir(parents=True)
    (d / "vmlinux").write_bytes(recorded())
    (d / "broken_module").write_bytes(b"not btf")
    names = {e.name for e in kernel_enums(HostFS(str(tmp_path)))}
    assert "skb_drop_reason" in names
    assert kernel_enums(HostFS(str(tmp_path / "sys"))) == []  # no BTF: nothing, no error


@pytest.mark.skipif(
    not os.path.exists("/sys/kernel/btf/vmlinux"), reason="capability: kernel without BTF"
)
def test_the_running_kernels_btf_parses_completely():
    enums = kernel_enums(HostFS("/"))
    assert any(e.name == "skb_drop_reason" for e in enums)
    assert len(enums) > 100


# ------------------------------------------------------------------------------ struct layouts


def _layout_blob() -> bytes:
    """A BTF blob shaped like the kernel's where the queues probe reads it: sk_buff's `dev`
    inside an anonymous union of anonymous structs, a bitfield (kflag), typedefs and const
    on the way to sizes, net_device's `name` a char array, and a tracepoint typedef."""
    strings = bytearray(b"\0")

    def s(text: str) -> int:
        strings.extend(text.encode() + b"\0")
        return len(strings) - len(text) - 1

    types = bytearray()

    def t(name: int, kind: int, vlen: int, size: int, extra: bytes = b"", kflag: int = 0) -> None:
        types.extend(struct.pack("<III", name, (kflag << 31) | (kind << 24) | vlen, size) + extra)

    def members(*ms: tuple[str, int, int]) -> bytes:
        return b"".join(struct.pack("<III", s(n) if n else 0, tid, off) for n, tid, off in ms)

    t(s("unsigned short"), 1, 0, 2, struct.pack("<I", 16))  # 1: INT u16
    t(s("unsigned int"), 1, 0, 4, struct.pack("<I", 32))  # 2: INT u32
    t(s("char"), 1, 0, 1, struct.pack("<I", 8))  # 3: INT char
    t(s("__u16"), 8, 0, 1)  # 4: TYPEDEF __u16 -> 1
    t(0, 10, 0, 2)  # 5: CONST unsigned int
    t(0, 2, 0, 9)  # 6: PTR -> 9 (net_device)
    t(0, 3, 0, 0, struct.pack("<III", 3, 2, 16))  # 7: ARRAY char[16]
    t(0, 2, 0, 8)  # 8: PTR -> 8 (itself, a next pointer)
    t(s("net_device"), 4, 2, 320, members(("ifindex", 2, 224 * 8), ("name", 7, 280 * 8)))  # 9
    t(0, 4, 3, 24, members(("next", 8, 0), ("prev", 8, 64), ("dev", 6, 128)))  # 10: anon struct
    t(0, 5, 2, 24, members(("", 10, 0), ("dev_scratch", 2, 128)))  # 11: anon union
    t(s("sk_buff"), 4, 4, 232, members(("", 11, 0), ("len", 5, 112 * 8),
                                       ("queue_mapping", 4, 124 * 8),
                                       ("cloned", 1, (1 << 24) | (126 * 8))), kflag=1)  # 12
    t(s("btf_trace_netif_rx_entry"), 8, 0, 6)  # 13: TYPEDEF (the type does not matter here)
    header = struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(types), len(types), len(strings))
    return header + bytes(types) + bytes(strings)


def test_struct_members_through_anonymous_unions_typedefs_and_arrays():
    from lbtune.host.trace.btf import KIND_STRUCT, KIND_TYPEDEF, BtfTypes

    btf = BtfTypes(_layout_blob())
    assert btf.member("sk_buff", "dev") == (16, 8)  # union -> struct -> pointer
    assert btf.member("sk_buff", "len") == (112, 4)  # through const
    assert btf.member("sk_buff", "queue_mapping") == (124, 2)  # through a typedef
    assert btf.member("net_device", "name") == (280, 16)  # char[16]
    assert btf.member("sk_buff", "cloned") is None  # a bitfield: not whole bytes
    assert btf.member("sk_buff", "napi_id") is None and btf.member("nope", "len") is None
    assert btf.type_id(KIND_TYPEDEF, "btf_trace_netif_rx_entry") == 13
    assert btf.type_id(KIND_STRUCT, "sk_buff") == 12
    assert btf.type_id(KIND_TYPEDEF, "btf_trace_netif_receive_skb_entry") is None


def test_struct_layouts_refuse_hostile_blobs():
    from lbtune.host.trace.btf import BtfTypes

    with pytest.raises(BtfError):
        BtfTypes(_layout_blob()[:40])


@pytest.mark.skipif(
    not os.path.exists("/sys/kernel/btf/vmlinux"), reason="capability: kernel without BTF"
)
def test_the_running_kernels_sk_buff_layout():
    from lbtune.host.trace.btf import BtfTypes

    btf = BtfTypes(pathlib.Path("/sys/kernel/btf/vmlinux").read_bytes())
    assert btf.member("sk_buff", "dev") is not None
    assert btf.member("sk_buff", "len")[1] == 4 and btf.member("net_device", "name")[1] == 16
