"""Every profile line a finding proposes is a profile value lbtune takes as written.

For EVERY rule, fixture host trees (copies, with the counters that make the rule fire written
over them in the kernel's own formats) are diagnosed with `lbtune --root COPY diagnose
--json --rule RULE`; each fix's profile lines, pasted alone into a file, must load with
`load_profile` (value, mode and the finding's one-line reason), say the same value and mode
as the fix, lint clean (`lint_profile`, against that host's inventory too) and resolve on
the host. A fix that `lbtune apply` makes (scope profile, or host from a namespace) has
lines; one made elsewhere (application, platform, manual) has none. A rule has lines in
some case exactly when the registry says its findings can carry a profile fix
(`Rule.profile_fix`); the rules without one are listed, with why, in tests/fixloops.py.
"""

from __future__ import annotations

import pathlib
from typing import Any, Callable

import pytest

from lbtune.diagnose.rules import RULES
from lbtune.host.host import Host
from lbtune.host.inventory import discover_host
from lbtune.tune.lint import lint_profile
from lbtune.tune.profile import load_profile, resolve
from tests.conftest import AWS, DELL, HOSTS, KVM, TINY, copy_host, run_cli
from tests.fixloops import NO_PROFILE_FIX

Files = Callable[[], dict[str, str]]


def netstat(host: str, **counters: int) -> dict[str, str]:
    """/proc/net/netstat of fixture `host` with TcpExt/IpExt `counters` set (name=value)."""
    lines = (HOSTS / host / "proc/net/netstat").read_text().splitlines()
    out = []
    for head, vals in zip(lines[::2], lines[1::2]):
        group, names = head.split(":", 1)
        values = vals.split(":", 1)[1].split()
        for i, name in enumerate(names.split()):
            if name in counters:
                values[i] = str(counters.pop(name))
        out += [head, f"{group}: " + " ".join(values)]
    assert not counters, f"not in {host}'s netstat: {counters}"
    return {"/proc/net/netstat": "\n".join(out) + "\n"}


def snmp(host: str, **counters: int) -> dict[str, str]:
    """/proc/net/snmp of fixture `host` with `counters` set (`Udp__NoPorts=5`)."""
    lines = (HOSTS / host / "proc/net/snmp").read_text().splitlines()
    want = {k.replace("__", "."): v for k, v in counters.items()}
    out = []
    for head, vals in zip(lines[::2], lines[1::2]):
        group, names = head.split(":", 1)
        values = vals.split(":", 1)[1].split()
        for i, name in enumerate(names.split()):
            if f"{group}.{name}" in want:
                values[i] = str(want.pop(f"{group}.{name}"))
        out += [head, f"{group}: " + " ".join(values)]
    assert not want, f"not in {host}'s snmp: {want}"
    return {"/proc/net/snmp": "\n".join(out) + "\n"}


def sysctls(**values: str) -> dict[str, str]:
    """/proc/sys files: `net__ipv4__tcp_syncookies="0"` (dots written as __)."""
    return {"/proc/sys/" + k.replace("__", "/"): v + "\n" for k, v in values.items()}


def net_rx_on_one_cpu(host: str, cpu: int) -> dict[str, str]:
    """/proc/softirqs with nearly every NET_RX on `cpu`."""
    lines = (HOSTS / host / "proc/softirqs").read_text().splitlines()
    out = []
    for line in lines:
        if line.strip().startswith("NET_RX:"):
            label, counts = line.split(":", 1)
            n = len(counts.split())
            line = (
                label
                + ":"
                + "".join(f" {(90_000_000 if i == cpu else 1_000):>10}" for i in range(n))
            )
        out.append(line)
    return {"/proc/softirqs": "\n".join(out) + "\n"}


NET = "/sos_commands/networking"


def recorded(host: str, name: str, **values: str) -> dict[str, str]:
    """A recorded `ethtool` output of fixture `host` (`ethtool_-S_eno1`) with the lines
    `key: value` of `values` rewritten (keys as ethtool prints them; `__` for a space and
    `_` kept: pass them as a dict to use other characters)."""
    lines = (HOSTS / host / NET.lstrip("/") / name).read_text().splitlines()
    out = []
    for line in lines:
        key = line.split(":", 1)[0].strip()
        if key in values:
            indent = line[: len(line) - len(line.lstrip())]
            line = f"{indent}{key}: {values.pop(key)}"
        out.append(line)
    assert not values, f"not in {host}'s {name}: {values}"
    return {f"{NET}/{name}": "\n".join(out) + "\n"}


def irq_on_cpu(host: str, irq: int, cpu: int, count: int) -> dict[str, str]:
    """/proc/interrupts of fixture `host` with IRQ `irq` at `count` on CPU `cpu`."""
    lines = (HOSTS / host / "proc/interrupts").read_text().splitlines()
    out = []
    for line in lines:
        head, _, rest = line.partition(":")
        if head.strip() == str(irq):
            fields = rest.split()
            n = len(lines[0].split())  # the CPU columns
            fields[cpu] = str(count)
            line = f"{head}:" + "".join(f" {f:>10}" for f in fields[:n]) + " " + " ".join(
                fields[n:])
        out.append(line)
    return {"/proc/interrupts": "\n".join(out) + "\n"}


# ens1f0np0 (mlx5, flow control on) sent pause frames since boot
PAUSE_SENT = lambda: recorded(DELL, "ethtool_-S_ens1f0np0", tx_pause_ctrl_phy="184223")  # noqa: E731
# LRO on ens1f0np0 of a host that forwards
LRO_FORWARDING = lambda: {  # noqa: E731
    **recorded(DELL, "ethtool_-k_ens1f0np0", **{"large-receive-offload": "on"}),
    **sysctls(net__ipv4__ip_forward="1"),
}
# ens1f0np0's queue 5 vector (IRQ 101, on CPU 41, which squeezes) at ~25,000 interrupts a
# second since boot, with adaptive coalescing off and rx-usecs 0
COALESCING_OFF = lambda: {  # noqa: E731
    **recorded(DELL, "ethtool_-c_ens1f0np0", **{"Adaptive RX": "off  TX: on", "rx-usecs": "0"}),
    **irq_on_cpu(DELL, 101, 41, 9_000_000_000),
}

def via_setters(host: str, change: Callable[[Any], None]) -> dict[str, str]:
    """The recorded ethtool files of fixture `host` as its recorded setters rewrite them
    (`change(ethtool)` on a scratch copy): the kernel's own layout, as `lbtune apply` would
    leave a host tree."""
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp) / host
        shutil.copytree(HOSTS / host, root, symlinks=True)
        h = Host.open(str(root))
        try:
            change(h.ethtool)
        finally:
            h.close()
        out = {}
        for f in sorted((root / NET.lstrip("/")).iterdir()):
            orig = HOSTS / host / NET.lstrip("/") / f.name
            if not orig.exists() or orig.read_text() != f.read_text():
                out[f"{NET}/{f.name}"] = f.read_text()
        return out


def _skewed_eno1() -> dict[str, str]:
    """eno1 (ixgbe, udp4/udp6 hashed on `sd`) with rx queue 0 at 90 % of its packets."""
    return recorded(DELL, "ethtool_-S_eno1", rx_queue_0_packets="80000000000")


def _table_from_before_ethtool_l(eth: Any) -> None:
    # ens1f0np0's table set with `ethtool -X equal 12` (a user table), then `ethtool -L
    # combined 24`: the driver keeps a user's table, and queues 12-23 get nothing
    eth.set_rxfh("ens1f0np0", indir=[i % 12 for i in range(256)])


def _ssh_to_queue_23_also_in_the_table(eth: Any) -> None:
    # the control queue of ens1f0np0 (ssh steered to queue 23) is in the RSS table too
    from lbtune.host.net.rss import NtupleRule

    eth.add_ntuple_rule("ens1f0np0", NtupleRule(-1, "tcp4", (("dst-port", "22"),), 23))


PFIFO_FAST = {
    "/sos_commands/networking/tc_-s_qdisc_show": (
        "qdisc noqueue 0: dev lo root refcnt 2 \n"
        " Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0) \n"
        " backlog 0b 0p requeues 0\n"
        "qdisc pfifo_fast 0: dev ens3 root refcnt 2 bands 3 "
        "priomap 1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1\n"
        " Sent 81407303713 bytes 148000558 pkt (dropped 5123, overlimits 0 requeues 18) \n"
        " backlog 0b 0p requeues 18\n"
    )
}

# rule -> cases: (fixture host, files written over its copy)
CASES: dict[str, list[tuple[str, Files]]] = {
    # the application's backlog is the limit; then somaxconn is (the listener asked for more)
    "accept-queue-overflow": [(DELL, dict), (DELL, lambda: sysctls(net__core__somaxconn="128"))],
    "syn-queue-full": [
        (
            DELL,
            lambda: {
                **netstat(DELL, TCPReqQFullDrop=500),
                **sysctls(net__ipv4__tcp_syncookies="0", net__ipv4__tcp_max_syn_backlog="128"),
            },
        )
    ],
    "syn-cookies": [
        (DELL, lambda: netstat(DELL, TCPReqQFullDoCookies=40, SyncookiesSent=40)),
        (
            DELL,
            lambda: {
                **netstat(DELL, TCPReqQFullDoCookies=40, SyncookiesSent=40),
                **sysctls(net__core__somaxconn="128"),
            },
        ),
    ],
    "socket-backlog-drop": [(DELL, lambda: netstat(DELL, TCPBacklogDrop=30))],
    "rcvbuf-prune": [(DELL, lambda: netstat(DELL, PruneCalled=7, RcvPruned=5))],
    # SO_RCVBUF set by rsyslogd (8192); then the same socket with rmem_default's size
    "udp-rcvbuf-errors": [(KVM, dict), (KVM, lambda: sysctls(net__core__rmem_default="8192"))],
    "cpu-backlog-drop": [(DELL, dict), (TINY, dict)],
    "time-squeeze": [(DELL, dict)],
    "irq-imbalance": [(DELL, lambda: net_rx_on_one_cpu(DELL, 13))],
    # eno1's queue 2 vector back on isolated CPU 2 (the fixture's irqbalance had moved it)
    "irq-placement": [
        (
            DELL,
            lambda: {
                "/proc/irq/48/smp_affinity_list": "2\n",
                "/proc/irq/48/effective_affinity_list": "2\n",
                "/proc/irq/48/smp_affinity": "0000,00000004\n",
                "/proc/irq/48/effective_affinity": "0000,00000004\n",
            },
        )
    ],
    "nic-rx-drop": [(DELL, dict), (KVM, dict), (TINY, dict)],
    "nic-policer": [(AWS, dict)],
    "conntrack-full": [(DELL, dict)],
    "conntrack-insert-failed": [(DELL, dict)],
    # strict on eno1 only, strict on all, loose everywhere (drops: no route back at all)
    "rp-filter-drop": [
        (
            DELL,
            lambda: {
                **netstat(DELL, IPReversePathFilter=9),
                **sysctls(
                    net__ipv4__conf__all__rp_filter="0", net__ipv4__conf__eno1__rp_filter="1"
                ),
            },
        ),
        (
            DELL,
            lambda: {
                **netstat(DELL, IPReversePathFilter=9),
                **sysctls(net__ipv4__conf__all__rp_filter="1"),
            },
        ),
        (DELL, lambda: netstat(DELL, IPReversePathFilter=9)),
    ],
    "timewait-overflow": [(DELL, dict)],
    "orphan-overflow": [
        (
            DELL,
            lambda: {
                **netstat(DELL, TCPAbortOnMemory=12),
                **sysctls(net__ipv4__tcp_max_orphans="4096"),
            },
        )
    ],
    "tcp-memory-pressure": [(DELL, lambda: netstat(DELL, TCPMemoryPressures=3))],
    "ephemeral-ports": [(DELL, dict)],
    # fq_codel (its own limit: by hand), then a pfifo_fast root (txqueuelen is its limit)
    "qdisc-drop": [(DELL, dict), (KVM, lambda: PFIFO_FAST)],
    # since boot: a tenth of the datagrams / connection attempts went to closed ports
    "udp-no-port": [(DELL, lambda: snmp(DELL, Udp__NoPorts=900000))],
    "tcp-no-listener": [(DELL, lambda: snmp(DELL, Tcp__OutRsts=40000000))],
    "addr-not-local": [(DELL, lambda: snmp(DELL, Ip__InAddrErrors=4000000000))],
    "pause-frames": [(DELL, PAUSE_SENT)],
    "lro-on-forwarding-host": [(DELL, LRO_FORWARDING)],
    "coalescing": [(DELL, COALESCING_OFF)],
    "rss-hash-l3-only": [(DELL, _skewed_eno1)],
    "rss-indirection-gap": [
        (DELL, lambda: via_setters(DELL, _table_from_before_ethtool_l)),
        (DELL, lambda: via_setters(DELL, _ssh_to_queue_23_also_in_the_table)),
    ],
}


def test_every_rule_has_a_case() -> None:
    assert set(CASES) == {r.id for r in RULES}
    assert set(NO_PROFILE_FIX) == {r.id for r in RULES if not r.profile_fix}


def _findings(tmp_path: pathlib.Path, rule: str, host: str, files: Files) -> tuple[Any, Any]:
    """The rule's findings on the fixture (a copy when files change it), and the inventory."""
    over = files()
    root = copy_host(tmp_path, host, over) if over else HOSTS / host
    res = run_cli("--root", str(root), "diagnose", "--json", "--rule", rule)
    assert res.exit_code == 1, res.stdout + res.stderr
    found = [f for f in res.json["findings"] if f["rule"] == rule]
    assert found, f"{rule} did not fire on {host}"
    h = Host.open(str(root))
    try:
        return found, discover_host(h)
    finally:
        h.close()


def _check_snippet(tmp_path: pathlib.Path, fix: dict[str, Any], inv: Any) -> None:
    """The fix's lines alone in a file: load, same values, lint clean, resolve here."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "snippet.toml"
    path.write_text("\n".join(fix["profile"]) + "\n")
    prof = load_profile(str(path))
    settings = dict(prof.settings())
    assert fix["key"] in settings, (fix["key"], list(settings))
    assert len(settings) == len(fix["profile"]), settings
    for line in fix["profile"]:
        assert 'reason = "' in line and line.count("\n") == 0, line
    main = settings[fix["key"]]
    if fix["key"].startswith("sysctl."):
        # the profile's value is what the fix says is needed, and a limit is only raised
        assert main.value == fix["desired"], (main.value, fix)
        assert main.mode.value in ("raise", "set"), main
    assert all(s.reason for s in settings.values())
    assert lint_profile(prof) == [], fix["profile"]
    iface = "eno1" if prof.needs_iface else None
    assert lint_profile(prof, inv, iface) == [], fix["profile"]
    resolve(prof, inv, iface)  # BadInput if the host cannot take it


@pytest.mark.parametrize("rule", sorted(CASES))
def test_profile_lines_of_every_rule_load_and_lint_clean(tmp_path: pathlib.Path, rule: str) -> None:
    with_lines = 0
    for i, (host, files) in enumerate(CASES[rule]):
        findings, inv = _findings(tmp_path / f"case{i}", rule, host, files)
        for f in findings:
            assert f["fixes"], f"{rule}: a finding must say what fixes it: {f['title']}"
            for fix in f["fixes"]:
                makes = fix["scope"] in ("profile", "host")
                assert bool(fix["profile"]) == makes, (rule, fix)
                if fix["profile"]:
                    with_lines += 1
                    _check_snippet(tmp_path / f"case{i}", fix, inv)
    (declared,) = [r.profile_fix for r in RULES if r.id == rule]
    if declared:
        assert with_lines > 0, f"{rule}: profile_fix=True, but no fix with a profile line"
    else:
        assert with_lines == 0, f"{rule}: profile_fix=False, yet a fix with a profile line"
        assert NO_PROFILE_FIX.get(rule), f"{rule}: no reason in tests/fixloops.NO_PROFILE_FIX"
