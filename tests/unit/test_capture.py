"""`lbtune capture`: ethtool formatters, capture/unpack/`--root` round trips, hostile tarballs.

Capturing the live host only reads it; everything is written below pytest's tmp_path.
"""

from __future__ import annotations

import io
import json
import os
import pathlib
import stat
import tarfile
from typing import Any

import pytest

from lbtune.errors import BadInput
from lbtune.host.capture.manifest import MANIFEST, read_manifest
from lbtune.host.capture.write import unpack_capture, write_capture
from lbtune.host.fs import HostFS
from lbtune.host.host import Host
from lbtune.host.identity import machine_hash
from lbtune.host.net.ethtool import (
    RecordedEthtool,
    format_ethtool_g,
    format_ethtool_i,
    format_ethtool_l,
    format_ethtool_S,
    parse_ethtool_g,
    parse_ethtool_i,
    parse_ethtool_l,
    parse_ethtool_S,
)
from tests.conftest import HOSTS, run_cli

TREES = sorted(
    p.name for p in HOSTS.iterdir() if (p / "sos_commands").is_dir() and p.name != "broken-sysfs"
)
SHOW_TREES = [t for t in TREES if not t.startswith("broken")]


def _recordings() -> list[tuple[str, str, str]]:
    """(tree, flag, dev) of every recorded ethtool run that holds data (not an error text)."""
    out = []
    for tree in TREES:
        src = RecordedEthtool(HostFS(str(HOSTS / tree)))
        recorded = HOSTS / tree / "sos_commands" / "networking"
        for f in sorted(recorded.glob("ethtool_-[iglSkca]_*")):
            flag, _, dev = f.name[len("ethtool_-") :].partition("_")
            read = {"i": src.driver_info, "g": src.rings, "l": src.channels, "S": src.stats}
            read.update({"c": src.coalesce, "k": src.features, "a": src.pause})
            if read[flag](dev) is not None:
                out.append((tree, flag, dev))
    return out


# ------------------------------------------------------------------ ethtool formatters


@pytest.mark.parametrize(("tree", "flag", "dev"), _recordings())
def test_ethtool_formatters_round_trip_fixture_recordings(tree: str, flag: str, dev: str) -> None:
    src = RecordedEthtool(HostFS(str(HOSTS / tree)))
    text = (HOSTS / tree / "sos_commands" / "networking" / f"ethtool_-{flag}_{dev}").read_text()
    if flag == "i":
        info = src.driver_info(dev)
        assert info is not None
        out = format_ethtool_i(info)
        assert parse_ethtool_i(out) == info
        # Every line printed is one of ethtool's own lines, in ethtool's order.
        lines = text.splitlines()
        where = [lines.index(x) for x in out.splitlines()]
        assert where == sorted(where)
    elif flag == "g":
        rings = src.rings(dev)
        assert rings is not None
        out = format_ethtool_g(rings, dev)
        assert parse_ethtool_g(out) == rings
        # ethtool 6.1's layout; the recording adds lines lbtune does not keep (RX Buf Len...).
        assert text.startswith(out)
    elif flag in ("c", "k", "a"):
        from lbtune.host.net import nicparams as np

        value = {"c": src.coalesce, "k": src.features, "a": src.pause}[flag](dev)
        fmt = {"c": np.format_ethtool_c, "k": np.format_ethtool_k, "a": np.format_ethtool_a}
        parse = {"c": np.parse_ethtool_c, "k": np.parse_ethtool_k, "a": np.parse_ethtool_a}
        out = fmt[flag](value, dev)  # type: ignore[operator]
        assert parse[flag](out) == value  # type: ignore[operator]
        assert out == text  # ethtool 6.1's layout, byte for byte
    elif flag == "l":
        chans = src.channels(dev)
        assert chans is not None
        out = format_ethtool_l(chans, dev)
        assert parse_ethtool_l(out) == chans
        assert out == text
    else:
        stats = src.stats(dev)
        assert stats is not None
        out = format_ethtool_S(stats)
        assert parse_ethtool_S(out) == stats
        assert out == text


def test_round_trip_covers_every_kind_of_recording() -> None:
    """The parametrized test above must cover -i, -g, -l, -S, -c, -k and -a, on several
    drivers."""
    recs = _recordings()
    assert {flag for _, flag, _ in recs} == {"i", "g", "l", "S", "c", "k", "a"}
    assert len({tree for tree, _, _ in recs}) >= 4


def test_format_none_prints_na_and_parses_back() -> None:
    from lbtune.host.net.ethtool import Channels, RingSizes

    r = RingSizes(rx=0, tx=None, rx_max=4096, tx_max=None)
    assert parse_ethtool_g(format_ethtool_g(r)) == r
    c = Channels(combined=3, combined_max=8, other=1, other_max=1)
    text = format_ethtool_l(c, "eth9")
    assert text.startswith("Channel parameters for eth9:\nPre-set maximums:\nRX:\t\tn/a\n")
    assert parse_ethtool_l(text) == c
    assert parse_ethtool_S(format_ethtool_S({})) == {}


# ------------------------------------------------------------------ capture round trips


def _members(tarball: pathlib.Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(tarball) as tar:
        return {m.name: m for m in tar.getmembers()}


def _capture_fixture(tree: str, tmp_path: pathlib.Path) -> tuple[Any, pathlib.Path]:
    out = tmp_path / "c.tar.gz"
    result = write_capture(Host.open(str(HOSTS / tree)), str(out))
    root = unpack_capture(str(out), str(tmp_path / "u"))
    return result, pathlib.Path(root)


@pytest.mark.parametrize("tree", SHOW_TREES)
def test_capture_of_fixture_tree_shows_the_same(tree: str, tmp_path: pathlib.Path) -> None:
    """A capture keeps everything `show` reads: sysfs links, queues, IRQs, ethtool, irqbalance."""
    result, root = _capture_fixture(tree, tmp_path)
    assert result.files > 100
    want = run_cli("--root", str(HOSTS / tree), "show", "--json")
    got = run_cli("--root", str(root), "show", "--json")
    assert want.exit_code == got.exit_code == 0, got.stderr
    assert got.json == want.json


@pytest.mark.parametrize("tree", SHOW_TREES)
def test_capture_of_fixture_tree_samples_the_same(tree: str, tmp_path: pathlib.Path) -> None:
    """Every counter source the sampler reads is in the capture, with the same values."""
    from lbtune.observe.sampler import Sampler

    _, root = _capture_fixture(tree, tmp_path)
    want = Sampler(Host.open(str(HOSTS / tree))).take()
    got = Sampler(Host.open(str(root))).take()
    assert got == want


def test_fixture_capture_keeps_kernel_links_and_modes(tmp_path: pathlib.Path) -> None:
    _, root = _capture_fixture("dell-r750-mlx5-ixgbe", tmp_path)
    fixture = HOSTS / "dell-r750-mlx5-ixgbe"
    for link in ("sys/class/net/eno1", "sys/class/net/ens1f0np0"):
        assert os.readlink(root / link) == os.readlink(fixture / link)
    dev = os.path.realpath(fixture / "sys/class/net/ens1f0np0/device")
    rel = os.path.relpath(dev, fixture)
    assert os.readlink(root / rel / "driver") == os.readlink(fixture / rel / "driver")
    msi = sorted(os.listdir(fixture / rel / "msi_irqs"))
    assert msi and sorted(os.listdir(root / rel / "msi_irqs")) == msi
    # irqbalance's pid: only its /proc/PID/comm is kept, not every process's.
    pids = [p for p in os.listdir(root / "proc") if p.isdigit()]
    assert [(root / "proc" / p / "comm").read_text().strip() for p in pids] == ["irqbalance"]


def test_fixture_capture_keeps_the_kernels_link_text(tmp_path: pathlib.Path) -> None:
    # virtio-net's `device` is `../../../virtio1` (kernfs goes up to the common ancestor),
    # not the shorter `../..` a normalizing copy would write.
    _, root = _capture_fixture("kvm-virtio-4vcpu", tmp_path)
    fixture = HOSTS / "kvm-virtio-4vcpu"
    netdev = os.path.relpath(os.path.realpath(fixture / "sys/class/net/ens3"), fixture)
    assert os.readlink(fixture / netdev / "device") == "../../../virtio1"
    assert os.readlink(root / netdev / "device") == "../../../virtio1"


def test_two_captures_have_the_same_file_set(tmp_path: pathlib.Path) -> None:
    host = Host.open(str(HOSTS / "kvm-virtio-4vcpu"))
    write_capture(host, str(tmp_path / "a.tgz"))
    write_capture(host, str(tmp_path / "b.tgz"))
    a, b = _members(tmp_path / "a.tgz"), _members(tmp_path / "b.tgz")
    assert set(a) == set(b)


def test_live_capture_round_trips_show(tmp_path: pathlib.Path) -> None:
    """This machine: capture, unpack, `--root` sees the same CPUs and NICs as the live host."""
    out = tmp_path / "live.tar.gz"
    r = run_cli("capture", "-o", str(out), "--json")
    assert r.exit_code == 0, r.stderr
    live = run_cli("show", "--json")
    root = unpack_capture(str(out), str(tmp_path / "u"))
    offline = run_cli("--root", root, "show", "--json")
    assert live.exit_code == offline.exit_code == 0, offline.stderr

    def stable(doc: dict[str, Any]) -> dict[str, Any]:
        # Interrupt counts keep moving between the two reads; everything else must match.
        for nic in doc["nics"]:
            for q in nic["irqs"]:
                q.pop("count")
        return {k: doc[k] for k in ("hostname", "kernel", "cpus", "nics")}

    assert stable(offline.json) == stable(live.json)
    info = r.json
    assert info["bytes"] == out.stat().st_size < 1 << 20  # "well under 1 MB"
    members = _members(out)
    assert info["files"] == sum(1 for m in members.values() if m.isreg())


def test_live_capture_has_every_sampler_source_and_diagnoses(tmp_path: pathlib.Path) -> None:
    from lbtune.observe.sampler import Sampler

    out = tmp_path / "c.tar.gz"
    live = Sampler(Host.open("/")).take()
    write_capture(Host.open("/"), str(out))
    root = unpack_capture(str(out), str(tmp_path / "u"))
    offline = Sampler(Host.open(root)).take()
    assert dict(offline.missing) == dict(live.missing)
    assert set(offline.nics) == set(live.nics)
    assert set(offline.snmp.values) == set(live.snmp.values)
    assert [c.cpu for c in offline.softnet] == [c.cpu for c in live.softnet]
    assert {(s.addr, s.port) for s in offline.listen} == {(s.addr, s.port) for s in live.listen}
    assert [(q.dev, q.kind) for q in offline.qdiscs] == [(q.dev, q.kind) for q in live.qdiscs]
    assert offline.uptime is not None and live.uptime is not None
    assert 0 <= offline.uptime - live.uptime < 60
    r = run_cli("--root", root, "diagnose", "--json")
    assert r.exit_code == (1 if r.json["findings"] else 0), r.stderr
    assert (r.json["mode"], r.json["root"]) == ("capture", root)


def test_live_capture_manifest_and_contents(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "c.tar.gz"
    result = write_capture(Host.open("/"), str(out))
    members = _members(out)
    root = pathlib.Path(unpack_capture(str(out), str(tmp_path / "u")))
    manifest = read_manifest(HostFS(str(root)))
    assert manifest is not None
    assert manifest["lbtune_version"]
    assert manifest["uptime"] == float((root / "proc/uptime").read_text().split()[0]) > 0
    boot_id = pathlib.Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert manifest["boot_id"] == boot_id
    # a digest of /etc/machine-id (confidential per machine-id(5)), never the id itself
    if os.path.exists("/etc/machine-id"):
        machine_id = pathlib.Path("/etc/machine-id").read_text().strip()
        assert manifest["machine"] == machine_hash(machine_id) and machine_id not in str(manifest)
    else:
        assert manifest["machine"] is None
    assert manifest["hostname"] == result.hostname == os.uname().nodename
    assert manifest["kernel"] == os.uname().release
    regular = {n for n, m in members.items() if m.isreg()}
    assert set(manifest["files"]) | {MANIFEST} == regular
    assert set(manifest["links"]) == {n for n, m in members.items() if m.issym()}
    for path in ("proc/net/snmp", "proc/net/netstat", "proc/net/softnet_stat", "proc/interrupts",
                 "proc/softirqs", "proc/sys/net/core/somaxconn", "proc/cmdline",
                 "sys/devices/system/cpu/online"):  # fmt: skip
        assert path in regular, path
    for name in os.listdir("/sys/class/net"):
        assert members[f"sys/class/net/{name}"].issym()
        assert members[f"sys/class/net/{name}"].linkname == os.readlink(f"/sys/class/net/{name}")
    # Content is read, not copied by the 4096 bytes sysfs reports.
    assert (root / "sys/devices/system/cpu/online").read_text() == pathlib.Path(
        "/sys/devices/system/cpu/online"
    ).read_text()
    skipped = {s["path"]: s["reason"] for s in manifest["skipped"]}
    assert skipped.get("/proc/sys/net/ipv4/route/flush") == "write-only"
    assert "proc/sys/net/ipv4/tcp_fastopen_key" not in members
    assert "secret" in skipped["/proc/sys/net/ipv4/tcp_fastopen_key"]
    # read-only sysctls stay read-only (lbtune reads "host-global inside a netns" from the mode)
    assert stat.S_IMODE(os.stat(root / "proc/sys/kernel/osrelease").st_mode) == 0o444
    # every name is relative and plain
    for name in members:
        assert not name.startswith("/") and ".." not in name.split("/")


def test_capture_never_follows_links_out_of_the_set(tmp_path: pathlib.Path) -> None:
    """A host tree whose /etc links to secrets elsewhere: the links are skipped, not followed."""
    host_root = tmp_path / "host"
    sysctl_d = host_root / "etc" / "sysctl.d"
    sysctl_d.mkdir(parents=True)
    (host_root / "proc").mkdir()
    (host_root / "proc" / "uptime").write_text("12.5 3.0\n")
    (host_root / "etc" / "shadow").write_text("root:SECRET\n")
    (tmp_path / "outside").write_text("OUTSIDE\n")
    (sysctl_d / "10-ok.conf").write_text("net.core.somaxconn = 4096\n")
    (sysctl_d / "20-abs.conf").symlink_to("/etc/shadow")
    (sysctl_d / "30-rel.conf").symlink_to("../shadow")
    (sysctl_d / "40-up.conf").symlink_to("../../../outside")
    (sysctl_d / "50-proc.conf").symlink_to("/proc/self/environ")
    (sysctl_d / "60-fine.conf").symlink_to("10-ok.conf")
    out = tmp_path / "c.tgz"
    result = write_capture(Host.open(str(host_root)), str(out))
    with tarfile.open(out) as tar:
        blob = b"".join(
            f.read() for m in tar.getmembers() if m.isreg() and (f := tar.extractfile(m))
        )
        names = set(tar.getnames())
    assert b"SECRET" not in blob and b"OUTSIDE" not in blob
    assert "etc/sysctl.d/10-ok.conf" in names and "etc/sysctl.d/60-fine.conf" in names
    skipped = {s.path: s.reason for s in result.skipped}
    for bad in ("20-abs.conf", "30-rel.conf", "40-up.conf", "50-proc.conf"):
        assert f"etc/sysctl.d/{bad}" not in names
        assert "leads out of the capture" in skipped[f"/etc/sysctl.d/{bad}"]


# ------------------------------------------------------------------ unpack_capture safety


def _tar(path: pathlib.Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> str:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            if info.isreg():
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return str(path)


def _file(name: str, data: bytes = b"x\n") -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def _special(name: str, kind: bytes, linkname: str = "") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info, b""


HOSTILE = {
    "absolute": [_file("/tmp/lbtune-evil")],
    "dotdot": [_file("proc/../../lbtune-evil")],
    "leading dotdot": [_file("../lbtune-evil")],
    "symlink to /etc": [_special("etc", tarfile.SYMTYPE, "/etc")],
    "relative symlink out": [_special("proc/x", tarfile.SYMTYPE, "../../outside")],
    "chained symlinks out": [
        _special("a", tarfile.SYMTYPE, "b/c"),
        _special("b", tarfile.SYMTYPE, "."),
        _special("b2", tarfile.SYMTYPE, "a/../.."),
    ],
    "write below a symlink": [
        _special("proc", tarfile.SYMTYPE, "sys"),
        _file("proc/cmdline"),
    ],
    "hard link out": [_special("h", tarfile.LNKTYPE, "/etc/passwd")],
    "char device": [_special("sys/null", tarfile.CHRTYPE)],
    "block device": [_special("sys/sda", tarfile.BLKTYPE)],
    "fifo": [_special("proc/fifo", tarfile.FIFOTYPE)],
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_unpack_rejects_hostile_tarballs(case: str, tmp_path: pathlib.Path) -> None:
    tarball = _tar(tmp_path / "evil.tgz", HOSTILE[case])
    dest = tmp_path / "sub" / "dest"
    with pytest.raises(BadInput):
        unpack_capture(tarball, str(dest))
    # Nothing landed anywhere: not outside dest, and no half-extracted dest either.
    assert {p.name for p in tmp_path.iterdir()} <= {"evil.tgz", "sub"}
    assert not dest.exists()
    assert not os.path.lexists("/tmp/lbtune-evil")


def test_unpack_catches_a_link_that_only_escapes_through_another_link(
    tmp_path: pathlib.Path,
) -> None:
    # Each link looks inside on its own: d1/d2/l -> ../../a is "a"; m -> d1/d2/l/../.. is
    # "d1" written out. But l really is "a", so m is a/../.. = the directory above dest.
    tarball = _tar(
        tmp_path / "t.tgz",
        [
            _special("d1/d2", tarfile.DIRTYPE),
            _special("a", tarfile.DIRTYPE),
            _special("d1/d2/l", tarfile.SYMTYPE, "../../a"),
            _special("m", tarfile.SYMTYPE, "d1/d2/l/../.."),
        ],
    )
    with pytest.raises(BadInput, match="resolves outside"):
        unpack_capture(tarball, str(tmp_path / "dest"))
    assert not (tmp_path / "dest").exists()  # a failed unpack leaves nothing behind


def test_unpack_accepts_a_plain_tree_and_finds_a_sosreport_top_dir(tmp_path: pathlib.Path) -> None:
    tarball = _tar(
        tmp_path / "sos.tar.gz",
        [
            _special("sosreport-h-1/", tarfile.DIRTYPE),
            _file("sosreport-h-1/proc/cmdline", b"ro\n"),
            _special("sosreport-h-1/sys/class/net/eth0", tarfile.SYMTYPE, "../../devices/x/eth0"),
            _file("sosreport-h-1/sys/devices/x/eth0/mtu", b"1500\n"),
            _special(
                "sosreport-h-1/sys/devices/x/eth0/hl",
                tarfile.LNKTYPE,
                "sosreport-h-1/sys/devices/x/eth0/mtu",
            ),
        ],
    )
    root = unpack_capture(tarball, str(tmp_path / "d"))
    assert root == str(tmp_path / "d" / "sosreport-h-1")
    assert HostFS(root).read("/sys/class/net/eth0/mtu") == "1500"
    assert HostFS(root).read("/sys/devices/x/eth0/hl") == "1500"


def test_unpack_refuses_nonempty_dest_and_non_tarballs(tmp_path: pathlib.Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "keep").write_text("")
    good = _tar(tmp_path / "g.tgz", [_file("proc/cmdline")])
    with pytest.raises(BadInput, match="not empty"):
        unpack_capture(good, str(tmp_path / "d"))
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not a tarball at all")
    with pytest.raises(BadInput):
        unpack_capture(str(junk), str(tmp_path / "e"))
    with pytest.raises(BadInput, match="no such file"):
        unpack_capture(str(tmp_path / "missing.tgz"), str(tmp_path / "f"))


# ------------------------------------------------------------------ CLI


def test_cli_refuses_existing_output_unless_forced(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "c.tar.gz"
    out.write_bytes(b"precious")
    r = run_cli("capture", "-o", str(out))
    assert r.exit_code == 2 and "--force" in r.stderr and r.stderr.count("\n") == 1
    assert out.read_bytes() == b"precious"
    r = run_cli("capture", "-o", str(out), "--force")
    assert r.exit_code == 0, r.stderr
    assert "files" in r.stdout and str(out) in r.stdout
    assert tarfile.is_tarfile(out)
    assert [p.name for p in tmp_path.iterdir()] == ["c.tar.gz"]  # no temp file left behind


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--root", str(HOSTS / "kvm-virtio-4vcpu"), "capture", "-o", "{tmp}/x.tgz"], "--root"),
        (["capture", "-o", "{tmp}/no/such/dir/x.tgz"], "does not exist"),
        (["capture", "-o", "{tmp}"], "is a directory"),
        (["capture"], "-o"),
    ],
)
def test_cli_bad_paths_are_usage_errors(
    args: list[str], message: str, tmp_path: pathlib.Path
) -> None:
    r = run_cli(*[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert r.exit_code == 2
    assert message in r.stderr
    assert "Traceback" not in r.stderr
    assert not list(tmp_path.iterdir())


def test_cli_json_reports_size_count_and_skips(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "c.tgz"
    r = run_cli("capture", "-o", str(out), "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json
    assert doc["output"] == str(out) and doc["bytes"] == out.stat().st_size
    assert doc["files"] > 50 and doc["links"] >= 1
    assert all(set(s) == {"path", "reason"} for s in doc["skipped"])
    assert doc["netns"] is None and doc["uptime"] > 0
    json.dumps(doc)
