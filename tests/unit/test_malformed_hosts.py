"""Host trees whose kernel files are not in the kernel's format fail with the file's path."""

from __future__ import annotations

import pytest

from lbtune.errors import BadInput, ExitCode, MalformedHostFile
from lbtune.host.fs import HostFS
from lbtune.host.host import Host
from lbtune.host.inventory import discover_host
from lbtune.host.kernel.cputopology import discover_cpus
from tests.conftest import HOSTS


def test_garbage_cpu_online_names_the_file():
    root = HOSTS / "broken-sysfs"
    with pytest.raises(MalformedHostFile) as e:
        discover_host(Host.open(str(root)))
    path = str(root / "sys/devices/system/cpu/online")
    assert e.value.path == path
    assert str(e.value).startswith(path + ": ")
    assert "'x'" in str(e.value)
    assert e.value.exit_code == ExitCode.USAGE


def test_non_numeric_mtu_names_the_file():
    root = HOSTS / "broken-nic-mtu"
    fs = HostFS(str(root))
    assert discover_cpus(fs).online == frozenset({0})  # the rest of the tree is fine
    with pytest.raises(MalformedHostFile) as e:
        discover_host(Host.open(str(root)))
    assert e.value.path == str(root / "sys/class/net/eth0/mtu")
    assert "1500 bytes" in str(e.value)


def test_root_that_is_not_a_directory(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(BadInput, match="not a directory"):
        Host.open(str(f))


def test_empty_tree_has_no_cpus(tmp_path):
    with pytest.raises(MalformedHostFile, match="no CPUs found"):
        discover_cpus(HostFS(str(tmp_path)))


@pytest.mark.parametrize(
    ("kpath", "text", "reader"),
    [
        ("/sys/devices/system/cpu/isolated", "2-", "read_cpulist"),
        ("/proc/irq/30/smp_affinity", "ff,zz", "read_cpumask"),
        ("/sys/class/net/eth0/ifindex", "two", "read_int"),
    ],
)
def test_readers_report_the_path(tmp_path, kpath, text, reader):
    p = tmp_path / kpath.lstrip("/")
    p.parent.mkdir(parents=True)
    p.write_text(text + "\n")
    with pytest.raises(MalformedHostFile) as e:
        getattr(HostFS(str(tmp_path)), reader)(kpath)
    assert e.value.path == str(p)


def test_read_int_dir(tmp_path):
    from lbtune.errors import MalformedHostFile
    from lbtune.host.fs import HostFS

    d = tmp_path / "sys/class/net/eth0/statistics"
    d.mkdir(parents=True)
    (d / "rx_packets").write_text("12\n")
    (d / "tx_packets").write_text("7\n")
    (tmp_path / "secret").write_text("99\n")
    (d / "rx_dropped").symlink_to(tmp_path / "secret")  # never followed
    fs = HostFS(str(tmp_path))
    assert fs.read_int_dir("/sys/class/net/eth0/statistics") == {"rx_packets": 12, "tx_packets": 7}
    assert fs.read_int_dir("/sys/class/net/eth9/statistics") == {}
    (d / "rx_errors").write_text("lots\n")
    with pytest.raises(MalformedHostFile, match="rx_errors"):
        fs.read_int_dir("/sys/class/net/eth0/statistics")


def test_read_clock_reads_this_machine():
    from lbtune.host.kernel.timesync import ClockState, read_clock

    state = read_clock()  # modes = 0: reads only
    assert isinstance(state, ClockState)
    assert ("not synchronised" in state.detail) is (not state.synced)
