"""softnet_stat: hex columns, CPU id from column 13, offline CPUs, older kernels."""

from __future__ import annotations

import os
import pathlib

import pytest

from lbtune.errors import MalformedHostFile
from lbtune.host.fs import HostFS
from lbtune.observe.softnet import parse_softnet, read_softnet
from tests.conftest import DELL, HOSTS, TINY


def line(cols: list[int]) -> str:
    return " ".join(f"{c:08x}" for c in cols)


def row13(cpu: int, processed: int, dropped: int, squeeze: int, rps: int = 0) -> str:
    return line([processed, dropped, squeeze, 0, 0, 0, 0, 0, 0, rps, 7, 2, cpu])


def test_cpu_id_from_column_13_with_offline_cpu() -> None:
    # CPU 1 offline: the second line belongs to CPU 2; only column 13 says so.
    text = "\n".join([row13(0, 0x1000, 0, 0), row13(2, 0x2000, 5, 9), row13(3, 0x10, 0, 0)])
    rows = parse_softnet(text, "softnet_stat")
    assert [r.cpu for r in rows] == [0, 2, 3]
    cpu2 = rows[1]
    assert (cpu2.processed, cpu2.dropped, cpu2.time_squeeze) == (0x2000, 5, 9)
    assert (cpu2.flow_limit, cpu2.backlog_len) == (7, 2)
    # column 13 wins over a (wrong) online list
    assert [r.cpu for r in parse_softnet(text, "s", online=[0, 1, 2])] == [0, 2, 3]


def test_15_columns_of_recent_kernels() -> None:
    # 6.x adds input_qlen and process_qlen after the CPU id (this machine's 6.18 format)
    text = (
        "000000e2 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 "
        "00000000 00000000 00000000 00000000 00000000 00000000\n"
        "00002bea 00000000 00000001 00000000 00000000 00000000 00000000 00000000 00000000 "
        "00000000 00000000 00000000 00000001 00000000 00000000\n"
    )
    rows = parse_softnet(text, "s")
    assert [(r.cpu, r.processed, r.time_squeeze) for r in rows] == [(0, 0xE2, 0), (1, 0x2BEA, 1)]


def test_old_kernel_without_cpu_id_maps_lines_to_online_cpus() -> None:
    # 11 columns (before 5.10): no id. CPU 1 offline -> line 2 is CPU 2, line 3 CPU 3.
    text = "\n".join(
        line([p, d, s, 0, 0, 0, 0, 0, 0, 0, 0]) for p, d, s in ((1, 0, 0), (2, 4, 6), (3, 0, 0))
    )
    rows = parse_softnet(text, "s", online=[3, 0, 2])  # order of `online` does not matter
    assert [(r.cpu, r.dropped, r.time_squeeze) for r in rows] == [(0, 0, 0), (2, 4, 6), (3, 0, 0)]
    assert all(r.backlog_len is None for r in rows)
    # without the online list, the line number is all there is
    assert [r.cpu for r in parse_softnet(text, "s")] == [0, 1, 2]
    # 10 columns (before flow limits, 3.x): flow_limit reads 0
    ten = line([5, 1, 2, 0, 0, 0, 0, 0, 0, 9])
    assert parse_softnet(ten, "s")[0].flow_limit == 0
    assert parse_softnet(ten, "s")[0].received_rps == 9


def test_old_kernel_more_lines_than_online_cpus() -> None:
    text = "\n".join(line([1] * 11) for _ in range(3))
    with pytest.raises(MalformedHostFile, match="3 lines but only 2 online CPUs"):
        parse_softnet(text, "s", online=[0, 2])


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("00000001 00000002 00000003\n", "3 columns"),
        (row13(0, 1, 0, 0).replace("00000001", "0000000g", 1), "not hexadecimal"),
        (row13(0, 1, 0, 0)[:-8] + "zzzzzzzz", "not hexadecimal"),
    ],
)
def test_malformed(text: str, problem: str) -> None:
    with pytest.raises(MalformedHostFile, match=problem) as e:
        parse_softnet(text, "/h/proc/net/softnet_stat")
    assert e.value.path == "/h/proc/net/softnet_stat"


def test_empty_and_absent(tmp_path: pathlib.Path) -> None:
    assert parse_softnet("", "s") == ()
    assert read_softnet(HostFS(str(tmp_path))) == ()


def test_read_old_format_uses_online_file(tmp_path: pathlib.Path) -> None:
    (tmp_path / "proc/net").mkdir(parents=True)
    (tmp_path / "sys/devices/system/cpu").mkdir(parents=True)
    (tmp_path / "sys/devices/system/cpu/online").write_text("0,2-3\n")
    (tmp_path / "proc/net/softnet_stat").write_text(
        "\n".join(line([i, i, 0, 0, 0, 0, 0, 0, 0, 0, 0]) for i in range(3)) + "\n"
    )
    assert [r.cpu for r in read_softnet(HostFS(str(tmp_path)))] == [0, 2, 3]


@pytest.mark.skipif(not os.path.exists("/proc/net/softnet_stat"), reason="no /proc/net")
def test_this_machine() -> None:
    rows = read_softnet(HostFS("/"))
    online = HostFS("/").read_cpulist("/sys/devices/system/cpu/online")
    assert rows and online is not None
    assert {r.cpu for r in rows} == set(online)


def test_fixture_r750_node1_drops() -> None:
    rows = {r.cpu: r for r in read_softnet(HostFS(str(HOSTS / DELL)))}
    assert sorted(rows) == list(range(48))
    assert {c for c, r in rows.items() if r.dropped} == {20, 41}  # both on node 1
    assert {c for c, r in rows.items() if r.time_squeeze} >= {12, 13, 14, 20, 41, 47}


def test_fixture_tiny_only_online_cpu() -> None:
    # possible 0-1, online 0: one line, CPU 0
    rows = read_softnet(HostFS(str(HOSTS / TINY)))
    assert [(r.cpu, r.dropped > 0, r.time_squeeze > 0) for r in rows] == [(0, True, True)]
