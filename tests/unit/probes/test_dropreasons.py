"""Drop-reason names come from the running kernel: table, BTF, subsystems, never guessed."""

from __future__ import annotations

import pathlib

from lbtune.host.trace.btf import BtfEnum, parse_enums
from lbtune.host.trace.tracefs import parse_format
from lbtune.observe.dropreasons import resolve_drop_reasons

DATA = pathlib.Path(__file__).resolve().parents[2] / "data"


def table(kernel: str) -> dict[int, str]:
    path = DATA / "tracefs" / kernel / "events" / "skb" / "kfree_skb" / "format"
    return parse_format(path.read_text(), "skb", "kfree_skb").symbols("reason")


def btf() -> list[BtfEnum]:
    return parse_enums((DATA / "btf" / "vmlinux-6.18-drop-reasons.btf").read_bytes())


def test_618_table_and_btf_agree_and_btf_adds_the_non_drops():
    r = resolve_drop_reasons(table("linux-6.18"), btf())
    assert r.source == "tracepoint format + BTF"
    assert r.name(3) == "NO_SOCKET" and r.name(4) == "SOCKET_CLOSE"
    assert r.value("NOT_DROPPED_YET") == 0 and r.value("CONSUMED") == 1
    assert r.value("TCP_LISTEN_OVERFLOW") == 40
    assert r.name(12345) == "reason 12345"
    # Every table name is what the BTF enum says for the same number.
    btf_only = resolve_drop_reasons({}, btf())
    for value, name in table("linux-6.18").items():
        if name != "MAX":  # the table prints the enum's end marker; it is not a reason
            assert btf_only.name(value) == name


def test_table_only_and_nothing():
    r = resolve_drop_reasons(table("linux-6.18"), [])
    assert r.source == "tracepoint format" and r.name(3) == "NO_SOCKET"
    assert r.value("CONSUMED") is None  # the 6.18 table has no non-drops
    none = resolve_drop_reasons({}, [])
    assert none.source == "none" and none.name(3) == "reason 3"


def test_517_numbering_from_its_own_enum():
    # 5.17: NOT_SPECIFIED is 0 (a drop) and there is no NOT_DROPPED_YET or CONSUMED.
    enum = BtfEnum("skb_drop_reason", (
        ("SKB_DROP_REASON_NOT_SPECIFIED", 0), ("SKB_DROP_REASON_NO_SOCKET", 1),
        ("SKB_DROP_REASON_PKT_TOO_SMALL", 2), ("SKB_DROP_REASON_TCP_CSUM", 3),
        ("SKB_DROP_REASON_SOCKET_FILTER", 4), ("SKB_DROP_REASON_UDP_CSUM", 5),
        ("SKB_DROP_REASON_MAX", 6)))  # fmt: skip
    r = resolve_drop_reasons(table("linux-5.17-synthetic"), [enum])
    assert r.source == "BTF"
    assert r.name(0) == "NOT_SPECIFIED" and r.name(2) == "PKT_TOO_SMALL"
    assert r.value("NOT_DROPPED_YET") is None and r.value("CONSUMED") is None
    assert r.name(6) == "reason 6"  # _MAX is not a reason


def test_subsystem_reasons_from_module_enums():
    ovs = BtfEnum("ovs_drop_reason", (("__OVS_DROP_REASON", 2 << 16),
                                      ("OVS_DROP_LAST_ACTION", (2 << 16) + 1),
                                      ("OVS_DROP_ACTION_ERROR", (2 << 16) + 2)))  # fmt: skip
    unrelated = BtfEnum("other", (("X", (2 << 16) + 1),))  # no subsystem base: ignored
    r = resolve_drop_reasons(table("linux-6.18"), [*btf(), unrelated, ovs])
    assert r.name((2 << 16) + 1) == "OPENVSWITCH:OVS_DROP_LAST_ACTION"
    assert r.name((1 << 16) + 7) == "MAC80211_UNUSABLE:reason 7"  # subsystem known, name not
    assert r.subsys_shift == 16
