"""The probes' final C, generated from recorded tracepoint formats, and the checks before it."""

from __future__ import annotations

import pathlib
import re

import pytest

from lbtune.host.trace.tracefs import TpField, TracepointFormat, parse_format
from lbtune.observe.probe_source import (
    NEEDS,
    RX_EVENTS,
    args_struct,
    build_source,
    check_needs,
    probes_dir,
)

TRACEFS = pathlib.Path(__file__).resolve().parents[2] / "data" / "tracefs"
DEFINES = {"LBT_IF_SLOTS": 8, "LBT_Q_SLOTS": 9, "LBT_D_REASON": None}


def formats(kernel: str = "linux-6.18") -> dict[str, TracepointFormat | None]:
    out: dict[str, TracepointFormat | None] = {}
    for needs in NEEDS.values():
        for need in needs:
            path = TRACEFS / kernel / "events" / need.system / need.event / "format"
            out[need.name] = (
                parse_format(path.read_text(), need.system, need.event) if path.exists() else None
            )
    return out


def test_every_probe_is_satisfied_on_618():
    assert check_needs(["drops", "queues", "napi"], formats()) == []


def test_missing_tracepoints_and_fields_are_named():
    f = formats()
    f["napi:napi_poll"] = None
    problems = check_needs(["napi"], f)
    assert problems == ["napi: tracepoint napi:napi_poll is not in this kernel"]
    kfree = f["skb:kfree_skb"]
    assert kfree is not None
    f["skb:kfree_skb"] = TracepointFormat("skb", "kfree_skb", 1, tuple(
        x for x in kfree.fields if x.name != "location"), "")  # fmt: skip
    assert check_needs(["drops"], f) == ["drops: tracepoint skb:kfree_skb has no field location"]
    for event, _ in RX_EVENTS:
        f[f"net:{event}"] = None
    (rx,) = check_needs(["queues"], f)
    assert rx.startswith("queues: none of the rx entry tracepoints")


def test_device_name_must_be_a_data_loc_string():
    f = formats()
    xmit = f["net:net_dev_start_xmit"]
    assert xmit is not None
    fields = tuple(
        TpField("name", "char", x.offset, 16, False, array=16) if x.name == "name" else x
        for x in xmit.fields
    )
    f["net:net_dev_start_xmit"] = TracepointFormat("net", "net_dev_start_xmit", 1, fields, "")
    assert check_needs(["queues"], f) == [
        "queues: net:net_dev_start_xmit field name is not a __data_loc string here"
    ]


def test_drops_work_without_reason_on_515():
    f = formats("linux-5.15-synthetic")
    assert check_needs(["drops"], f) == []


def test_args_struct_matches_the_kernels_offsets():
    kfree = formats()["skb:kfree_skb"]
    assert kfree is not None
    text = args_struct(kfree)
    assert "struct lbt_args_skb_kfree_skb {" in text
    assert "u64 location;" in text and "u16 protocol;" in text and "u32 reason;" in text
    # 2 bytes of padding between protocol (32..34) and reason (36).
    assert re.search(r"u16 protocol;.*\n\tu8 __lbt_pad\d+\[2\];\n\tu32 reason;", text)
    assert '__builtin_offsetof(struct lbt_args_skb_kfree_skb, reason) == 36' in text
    napi = formats()["napi:napi_poll"]
    assert napi is not None
    napi_text = args_struct(napi)
    assert "u32 dev_name; /* __data_loc char[]" in napi_text and "s32 work;" in napi_text


def test_args_struct_refuses_overlap_and_wraps_odd_fields():
    f = TracepointFormat("s", "e", 1, (
        TpField("a", "u32", 8, 4, False), TpField("b", "u32", 10, 4, False)), "")  # fmt: skip
    with pytest.raises(ValueError, match="overlaps"):
        args_struct(f)
    fields = (
        TpField("mac", "u8", 8, 6, False, array=6),
        TpField("x", "u32", 14, 4, False),
        TpField("int", "int", 20, 4, True),
        TpField("addr", "__u8", 24, 16, False),
    )
    odd = TracepointFormat("s", "e", 1, fields, "")
    text = args_struct(odd)
    assert "u8 mac[6];" in text and "u8 x[4];" in text  # unaligned: bytes, not a u32
    assert "s32 int;" in text and "u8 addr[16];" in text


def test_one_source_for_all_probes_and_what_it_attaches():
    c_dir = probes_dir()
    assert c_dir is not None
    src = build_source(["napi", "drops", "queues"], formats(), DEFINES, c_dir, "test")
    text = src.text
    assert text.startswith("/* test */")
    assert "#define LBT_D_REASON\n" in text and "#define LBT_Q_SLOTS 9" in text
    assert "#define LBT_NAPI_LABEL(qm) lbt_napi_label(qm)" in text
    for name in ("lbtune.bpf.h", "napi.bpf.c", "queues.bpf.c", "drops.bpf.c"):
        assert f"/* ---- probes/{name} ---- */" in text
    # napi's queue labels ride on the queues handlers: no separate napi rx programs.
    attach = {(a.probe, a.tracepoint, a.function) for a in src.attach}
    assert ("drops", "skb:kfree_skb", "lbt_drops_kfree_skb") in attach
    assert ("napi", "napi:napi_poll", "lbt_napi_napi_poll") in attach
    assert not [a for a in src.attach if a.probe == "napi" and a.tracepoint.startswith("net:")]
    rx = sorted(a.tracepoint for a in src.attach if a.probe == "queues")
    assert rx == sorted(["net:net_dev_start_xmit"] + [f"net:{e}" for e, _ in RX_EVENTS])
    assert "LBT_QUEUES_RX(netif_rx_entry, 0)" in text
    assert "LBT_QUEUES_RX(napi_gro_receive_entry, 1)" in text
    # Every function attached is defined (directly or by a handler macro line).
    for a in src.attach:
        event = a.tracepoint.split(":")[1]
        assert f"int {a.function}(" in text or f"({event}," in text or f"({event})" in text


def test_typed_rx_entries_read_no_record_and_attach_by_btf_id():
    c_dir = probes_dir()
    assert c_dir is not None
    typed = {"netif_rx_entry": 101, "napi_gro_receive_entry": 102}
    src = build_source(["napi", "queues"], formats(), DEFINES, c_dir, typed=typed)
    by_tp = {a.tracepoint: a for a in src.attach if a.probe == "queues"}
    assert by_tp["net:netif_rx_entry"].btf_id == 101
    assert by_tp["net:napi_gro_receive_entry"].btf_id == 102
    # the others stay tracepoint programs on their records, tx among them
    assert by_tp["net:net_dev_start_xmit"].btf_id is None
    assert by_tp["net:netif_receive_skb_entry"].btf_id is None
    text = src.text
    assert "LBT_QUEUES_RX_BTF(netif_rx_entry, 0)" in text
    assert "LBT_QUEUES_RX_BTF(napi_gro_receive_entry, 1)" in text
    assert "LBT_QUEUES_RX(netif_receive_skb_entry, 1)" in text
    assert "struct lbt_args_net_netif_rx_entry {" not in text  # no record read
    assert "struct lbt_args_net_net_dev_start_xmit {" in text
    # napi's labels still ride on the queues handlers
    assert not [a for a in src.attach if a.probe == "napi" and a.tracepoint.startswith("net:")]


def test_napi_alone_labels_from_napi_context_entries_only():
    c_dir = probes_dir()
    assert c_dir is not None
    src = build_source(["napi"], formats(), DEFINES, c_dir)
    label_tps = sorted(a.tracepoint for a in src.attach if a.tracepoint.startswith("net:"))
    assert label_tps == sorted(f"net:{e}" for e, napi in RX_EVENTS if napi)
    assert "queues.bpf.c" not in src.text and "LBT_NAPI_RX(napi_gro_receive_entry)" in src.text


def test_drops_alone_without_napi_label():
    c_dir = probes_dir()
    assert c_dir is not None
    src = build_source(["drops"], formats("linux-5.15-synthetic"), {}, c_dir)
    assert [a.function for a in src.attach] == ["lbt_drops_kfree_skb"]
    assert "#define LBT_NAPI_LABEL(qm) do { } while (0)" in src.text
    assert "u32 reason; /*" not in src.text  # the 5.15 record has no reason


def test_perfect_hash_separates_every_name_and_is_deterministic():
    from lbtune.observe.probe_source import name_words, perfect_hash

    for names in (["eth0"], ["eth0", "eth1", "lo", "(no_device)"],
                  [f"ens{i}f{j}np{j}" for i in range(16) for j in range(4)],
                  [f"veth{i:011d}" for i in range(255)]):  # fmt: skip
        h = perfect_hash(names)
        assert len({h.slot(n) for n in names}) == len(names)
        assert h.size >= len(names) and h == perfect_hash(list(reversed(names)))
        assert all(0 <= h.slot(n) < h.size for n in names)
    # The words the C compares: NUL-padded bytes, little-endian.
    assert name_words("eth0") == (int.from_bytes(b"eth0\0\0\0\0", "little"), 0)
    assert name_words("a" * 15)[1] == int.from_bytes(b"aaaaaaa\0", "little")
    for bad in ("", "a" * 16):
        with pytest.raises(ValueError):
            name_words(bad)
