"""Tracepoint format parsing on recorded (6.18) and synthetic (5.15, 5.17) format files."""

from __future__ import annotations

import pathlib

import pytest

from lbtune.host.fs import HostFS
from lbtune.host.trace.tracefs import (
    FormatError,
    parse_format,
    parse_print_symbolic,
    read_format,
    tracefs_dir,
)

TRACEFS = pathlib.Path(__file__).resolve().parents[2] / "data" / "tracefs"


def fmt(kernel: str, system: str, event: str):  # type: ignore[no-untyped-def]
    text = (TRACEFS / kernel / "events" / system / event / "format").read_text()
    return parse_format(text, system, event)


def test_kfree_skb_618_layout_and_reason_table():
    f = fmt("linux-6.18", "skb", "kfree_skb")
    assert f.id == 2310 and f.name == "skb:kfree_skb"
    assert [(x.name, x.offset, x.size) for x in f.fields] == [
        ("skbaddr", 8, 8), ("location", 16, 8), ("rx_sk", 24, 8), ("protocol", 32, 2),
        ("reason", 36, 4),
    ]  # fmt: skip
    assert f.field("reason").ctype == "enum skb_drop_reason"
    table = f.symbols("reason")
    # The table starts at NOT_SPECIFIED: the non-drops (0, 1) are not in it on 6.18.
    assert table[2] == "NOT_SPECIFIED" and table[3] == "NO_SOCKET" and table[4] == "SOCKET_CLOSE"
    assert 0 not in table and 1 not in table
    assert "TCP_LISTEN_OVERFLOW" in table.values()
    assert len(table) > 100


def test_data_loc_name_and_common_fields_dropped():
    f = fmt("linux-6.18", "net", "netif_receive_skb_entry")
    name = f.field("name")
    assert name.data_loc and name.ctype == "char[]" and name.array is None
    assert (name.offset, name.size) == (8, 4)
    assert f.field("queue_mapping").offset == 16
    assert not any(x.name.startswith("common_") for x in f.fields)
    napi = fmt("linux-6.18", "napi", "napi_poll")
    assert napi.field("dev_name").data_loc
    assert napi.field("work").signed and napi.field("budget").size == 4


def test_rx_entry_events_share_one_layout():
    layouts = {
        event: [(x.name, x.offset, x.size) for x in fmt("linux-6.18", "net", event).fields]
        for event in ("netif_receive_skb_entry", "napi_gro_receive_entry", "napi_gro_frags_entry",
                      "netif_receive_skb_list_entry", "netif_rx_entry")
    }  # fmt: skip
    assert len({tuple(v) for v in layouts.values()}) == 1


def test_synthetic_old_kernels():
    old = fmt("linux-5.15-synthetic", "skb", "kfree_skb")
    assert old.field("reason") is None and old.field("protocol").offset == 24
    assert old.symbols("reason") == {}
    # 5.17-5.19: the table holds enum names, not numbers: no usable table.
    mid = fmt("linux-5.17-synthetic", "skb", "kfree_skb")
    assert mid.field("reason").offset == 28
    assert mid.symbols("reason") == {}


def test_print_symbolic_parsing():
    pf = ('"x %s y %s", __print_symbolic(REC->a, { 1, "ONE" }, {0x10,"SIXTEEN"}), '
          '__print_symbolic(REC->b, { -1, "MINUS" })')  # fmt: skip
    assert parse_print_symbolic(pf, "a") == {1: "ONE", 16: "SIXTEEN"}
    assert parse_print_symbolic(pf, "b") == {-1: "MINUS"}
    assert parse_print_symbolic(pf, "c") == {}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "name: x\nID: 1\n",  # no format section
        "name: x\nID: one\nformat:\n\tfield:int a;\toffset:8;\tsize:4;\tsigned:1;\n",
        "name: x\nformat:\n\tfield:int a;\toffset:eight;\tsize:4;\tsigned:1;\n",
        "name: x\nformat:\n\tfield:;\toffset:8;\tsize:4;\tsigned:1;\n",
        "name: x\nformat:\n\tfield:char a[N];\toffset:8;\tsize:4;\tsigned:1;\n",
        "\x00\xff garbage",
    ],
)
def test_malformed_formats_are_format_errors(text):
    with pytest.raises(FormatError):
        parse_format(text, "s", "e")


def test_read_format_from_a_tree(tmp_path):
    root = tmp_path / "root"
    events = root / "sys" / "kernel" / "tracing" / "events" / "skb" / "kfree_skb"
    events.mkdir(parents=True)
    src = TRACEFS / "linux-6.18" / "events" / "skb" / "kfree_skb" / "format"
    (events / "format").write_text(src.read_text())
    fs = HostFS(str(root))
    assert tracefs_dir(fs) == "/sys/kernel/tracing"
    assert read_format(fs, "skb", "kfree_skb").field("reason") is not None
    assert read_format(fs, "skb", "no_such_event") is None
    assert tracefs_dir(HostFS(str(tmp_path))) is None
    assert read_format(HostFS(str(tmp_path)), "skb", "kfree_skb") is None
