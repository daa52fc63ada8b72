"""The monitor's sampler keeps the live root's /proc files open between samples
(lbtune.observe.keptfiles): a file read again from its kept descriptor holds what a fresh
open reads, is not opened again, is opened again when its descriptor fails, and is closed
once a sample no longer reads it. Only reads of the running machine's /proc (nothing is
written)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lbtune.errors import MalformedHostFile
from lbtune.host.fs import HostFS
from lbtune.host.host import Host
from lbtune.observe.keptfiles import KeptProcFS
from lbtune.observe.sampler import Sampler

SNMP = "/proc/net/snmp"


def _heads(text: str | None) -> list[str]:
    """The header lines of /proc/net/snmp (the names: they do not move between reads)."""
    assert text is not None
    return text.splitlines()[::2]


def _opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    opened: list[str] = []
    real = os.open

    def counting(path: str, *a: object, **k: object) -> int:
        opened.append(path)
        return real(path, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", counting)
    return opened


def test_a_kept_file_reads_as_a_fresh_open_and_is_not_opened_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fs = KeptProcFS()
    fresh = HostFS("/").read(SNMP)
    opened = _opens(monkeypatch)
    first = fs.read(SNMP)
    assert opened == [SNMP] and fs.kept == (SNMP,)
    for _ in range(3):
        assert _heads(fs.read(SNMP)) == _heads(first) == _heads(fresh)
    assert opened == [SNMP]  # opened once
    uptime = [float((fs.read("/proc/uptime") or "").split()[0]) for _ in range(2)]
    assert uptime[1] >= uptime[0] > 0  # produced afresh by every read, not a stale copy
    fs.close()
    assert fs.kept == ()


def test_a_failed_descriptor_is_opened_again_and_a_file_not_read_is_closed() -> None:
    fs = KeptProcFS()
    assert fs.read(SNMP) is not None
    os.close(fs._fds[SNMP])  # the descriptor fails from now on (EBADF)
    assert _heads(fs.read(SNMP)) == _heads(HostFS("/").read(SNMP))
    assert fs.kept == (SNMP,)
    fs.sweep()
    assert fs.kept == (SNMP,)  # read since the last sweep
    fs.read("/proc/uptime")
    fs.sweep()
    assert fs.kept == ("/proc/uptime",)  # SNMP was not read in between: closed
    fs.close()


def test_absent_limited_and_other_files_are_read_as_hostfs_reads_them() -> None:
    fs = KeptProcFS()
    assert fs.read("/proc/net/no-such-file") is None
    assert fs.kept == ()
    with pytest.raises(MalformedHostFile, match="larger than"):
        fs.read(SNMP, limit=16)
    assert fs.kept == ()
    assert fs.read("/proc/sys/kernel/osrelease") == HostFS("/").read("/proc/sys/kernel/osrelease")
    sysfs = "/sys/kernel/mm/transparent_hugepage/enabled"
    if os.path.exists(sysfs):
        assert fs.read(sysfs) == HostFS("/").read(sysfs)
    assert all(p.startswith("/proc/") for p in fs.kept)
    fs.close()


def test_only_a_live_sampler_that_asks_keeps_files(tmp_path: Path) -> None:
    live = Host.open("/")
    keeping = Sampler(live, keep_files=True)
    plain = Sampler(live)
    assert isinstance(keeping.fs, KeptProcFS) and plain.fs is live.fs
    a, b = keeping.take(), plain.take()
    assert set(a.snmp.values) == set(b.snmp.values)
    assert a.missing == b.missing
    kept = keeping.fs.kept  # type: ignore[attr-defined]
    assert SNMP in kept and "/proc/net/netstat" in kept
    keeping.take()
    assert keeping.fs.kept == kept  # type: ignore[attr-defined]
    (tmp_path / "proc").mkdir()
    tree = Sampler(Host.open(str(tmp_path)), keep_files=True)
    assert type(tree.fs) is HostFS


def test_ethtool_requests_in_one_socket_block_share_a_socket_and_read_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket

    from lbtune.host.net import ethtool as et

    devs = sorted(os.listdir("/sys/class/net")) or ["lo"]
    live = et.LiveEthtool()
    alone = [live.driver_info(d) for d in devs]
    made: list[object] = []
    real = socket.socket

    def counting(*a: object, **k: object) -> socket.socket:
        s = real(*a, **k)  # type: ignore[arg-type]
        made.append(s)
        return s

    monkeypatch.setattr(et.socket, "socket", counting)
    with et.one_socket():
        shared = [live.driver_info(d) for d in devs]
        with et.one_socket():  # nested: the same socket
            assert live.driver_info(devs[0]) == alone[0]
    assert shared == alone
    assert len(made) == 1 and made[0].fileno() == -1  # one socket, closed after the block
    live.driver_info(devs[0])
    assert len(made) == 2  # outside a block: a socket per request, as before


def test_the_monitors_sampler_reads_every_nic_on_one_socket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket

    from lbtune.host.net import ethtool as et

    made: list[int] = []
    real = socket.socket

    def counting(family: int = -1, *a: object, **k: object) -> socket.socket:
        if family == socket.AF_INET:
            made.append(family)
        return real(family, *a, **k)  # type: ignore[arg-type]

    live = Host.open("/")
    keeping, plain = Sampler(live, keep_files=True), Sampler(live)
    a, b = keeping.take(), plain.take()
    assert set(a.nics) == set(b.nics)
    assert {n: v.driver for n, v in a.nics.items()} == {n: v.driver for n, v in b.nics.items()}
    monkeypatch.setattr(et.socket, "socket", counting)
    keeping.take()
    assert len(made) <= 1  # one for every NIC's requests (none without a NIC)
