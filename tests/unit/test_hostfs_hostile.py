"""HostFS on a hostile tree: FIFOs and devices where files belong never block a read and are
never replaced by a write."""

from __future__ import annotations

import os

import pytest

from lbtune.errors import BadInput
from lbtune.host.fs import HostFS


@pytest.fixture
def tree(tmp_path):  # type: ignore[no-untyped-def]
    (tmp_path / "proc/sys/net/core").mkdir(parents=True)
    os.mkfifo(tmp_path / "proc/sys/net/core/somaxconn")
    stats = tmp_path / "sys/class/net/eth0/statistics"
    stats.mkdir(parents=True)
    (stats / "rx_packets").write_text("5\n")
    os.mkfifo(stats / "rx_dropped")
    (tmp_path / "etc").mkdir()
    os.symlink("/dev/zero", tmp_path / "etc" / "zero")  # resolves inside the root: absent
    return tmp_path


def test_a_fifo_reads_as_unreadable_and_never_blocks(tree):
    fs = HostFS(str(tree))
    assert fs.read("/proc/sys/net/core/somaxconn") is None
    with pytest.raises(BadInput, match="not a regular file"):
        fs.read_bytes("/proc/sys/net/core/somaxconn")
    assert fs.read_int_dir("/sys/class/net/eth0/statistics").get("rx_packets") == 5


def test_a_device_is_never_read_whole_nor_replaced():
    fs = HostFS("/")
    assert fs.read("/dev/zero") is None
    with pytest.raises(BadInput, match="not a regular file"):
        fs.read_bytes("/dev/zero")
    with pytest.raises(BadInput, match="not a regular file; refusing to replace"):
        fs.write_file("/dev/null", b"x")  # would have renamed a file over the device
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")


def test_a_fifo_is_not_replaced_by_a_write(tree):
    fs = HostFS(str(tree))
    with pytest.raises(BadInput, match="refusing to replace"):
        fs.write_file("/proc/sys/net/core/somaxconn", b"1\n")
    assert (tree / "proc/sys/net/core/somaxconn").is_fifo()


def test_a_link_to_a_device_in_a_counter_directory_is_left_out(tmp_path):
    stats = tmp_path / "sys/class/net/eth0/statistics"
    stats.mkdir(parents=True)
    (stats / "tx_packets").write_text("7\n")
    os.symlink("/dev/zero", stats / "rx_bytes")  # a link: refused (ELOOP), never read
    assert HostFS(str(tmp_path)).read_int_dir("/sys/class/net/eth0/statistics") == {
        "tx_packets": 7}


def test_an_attribute_hard_linked_outside_the_root_is_replaced_not_written(tmp_path):
    """Issue 20 item 10: a hard link in a tree must not carry a write to the file outside."""
    root = tmp_path / "root"
    (root / "proc/sys/net/core").mkdir(parents=True)
    outside = tmp_path / "precious"
    outside.write_text("128\n")
    os.chmod(outside, 0o640)
    attr = root / "proc/sys/net/core/somaxconn"
    os.link(outside, attr)
    fs = HostFS(str(root))
    fs.write_attr("/proc/sys/net/core/somaxconn", "8192")
    assert outside.read_text() == "128\n" and os.stat(outside).st_nlink == 1
    assert attr.read_text() == "8192\n"  # the tree's own copy, line ending kept
    assert os.stat(attr).st_mode & 0o7777 == 0o640 and os.stat(attr).st_nlink == 1
    assert [p.name for p in attr.parent.iterdir()] == ["somaxconn"]  # no temp left
    fs.write_attr("/proc/sys/net/core/somaxconn", "128")
    assert attr.read_text() == "128\n" and outside.read_text() == "128\n"


def test_only_temps_of_dead_writers_are_removed(tmp_path):
    """Issue 20 item 15: `FILE.lbtune-tmp-PID` of a writer that is gone (or whose PID now
    belongs to a process started after the temp was written) is removed; a live writer's
    temp is left alone."""
    import subprocess
    import sys

    d = tmp_path / "etc/sysctl.d"
    d.mkdir(parents=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (d / f"a.conf.lbtune-tmp-{dead.pid}").write_text("x")
        (d / f"b.conf.lbtune-tmp-{live.pid}").write_text("x")  # written after live started
        reused = d / f"c.conf.lbtune-tmp-{live.pid}"
        reused.write_text("x")
        os.utime(reused, (1_000_000, 1_000_000))  # 1970: before `live` started
        (d / "keep.conf").write_text("x")
        (d / "not-a-temp.lbtune-tmp-x").write_text("x")
        HostFS(str(tmp_path)).remove_dead_temps("/etc/sysctl.d")
        assert sorted(p.name for p in d.iterdir()) == [
            f"b.conf.lbtune-tmp-{live.pid}", "keep.conf", "not-a-temp.lbtune-tmp-x"]
    finally:
        live.kill()
        live.wait()
    HostFS(str(tmp_path)).remove_stale_temps("/etc/sysctl.d/b.conf")
    assert sorted(p.name for p in d.iterdir()) == ["keep.conf", "not-a-temp.lbtune-tmp-x"]


def test_a_link_resolved_once_follows_lbtunes_own_changes(tmp_path):
    """A tree's links are resolved once (a tree changes only through lbtune): a link read
    again reads the same place, one lbtune replaces reads its new target, and a link
    leading outside the root stays outside on every read."""
    for dev in ("a", "b"):
        (tmp_path / f"sys/devices/{dev}/eth0").mkdir(parents=True)
        (tmp_path / f"sys/devices/{dev}/eth0/mtu").write_text(f"{1500 if dev == 'a' else 9000}\n")
    (tmp_path / "sys/class/net").mkdir(parents=True)
    os.symlink("../../devices/a/eth0", tmp_path / "sys/class/net/eth0")
    os.symlink("/../../..", tmp_path / "sys/class/net/out")
    fs = HostFS(str(tmp_path))
    for _ in range(2):
        assert fs.isdir("/sys/class/net/eth0") and fs.read_int("/sys/class/net/eth0/mtu") == 1500
        assert fs.realpath("/sys/class/net/eth0") == "/sys/devices/a/eth0"
        assert fs.realpath("/sys/class/net/out") == "/.lbtune-outside-root"
        assert not fs.isdir("/sys/class/net/out")
    fs.remove_file("/sys/class/net/eth0")
    assert not fs.isdir("/sys/class/net/eth0") and fs.read("/sys/class/net/eth0/mtu") is None
    fs.symlink("../../devices/b/eth0", "/sys/class/net/eth0")
    assert fs.read_int("/sys/class/net/eth0/mtu") == 9000
    assert fs.realpath("/sys/class/net/eth0") == "/sys/devices/b/eth0"
