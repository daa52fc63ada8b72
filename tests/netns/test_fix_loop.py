"""The loop, end to end in a namespace: fault -> diagnose -> profile -> apply -> quiet counter.

For every rule whose fix is a per-namespace knob: the fault (tests/netns/faults.py) is set
up in a throwaway namespace and triggered inside `lbtune --netns NS diagnose --duration 2
--json --write-profile P.toml`; the rule must fire and the profile must hold its fix (and
lint clean). The control: before anything is applied, the SAME load once more (the
application restarted first where the loop restarts it) moves the fault's counter again
(for the gauge, ephemeral-ports: the connect() error happens again), and every part of it
is counted, arrived or lost, so a still counter after the fix is the fix's doing and not a
fault that stops by itself. `lbtune --netns NS plan P.toml` shows the change, `apply P.toml`
makes it; the application restarts where its limit is fixed at listen() time (as the
finding says); the SAME load is triggered again inside a second diagnose window: a second
kernel counter the load itself moves (the fault's `arrival`: Tcp.PassiveOpens,
Udp.NoPorts...) proves it arrived, and the fault's kernel counter does not move (the
fault's own reading, not lbtune's) and the rule stays quiet. `verify` exits 0, and
`rollback` gives every per-namespace sysctl back the value it had before the apply (read
with `ip netns exec`, not by lbtune). The loops are declared in LOOPS (each names its rule:
tests/fixloops.py counts them from there).

Rules whose fix is not a per-namespace knob are not here: host-global sysctls
(netdev_max_backlog, netdev_budget, nf_conntrack_max, tcp_max_orphans, tcp_mem,
rmem_default) run the same loop in the UML lab (tests/lab/test_fix_loop_lab.py); fixes
made in the application, the platform or by hand have no profile to apply.
"""

from __future__ import annotations

import contextlib
import importlib
import pathlib
from dataclasses import dataclass
from typing import Any, Callable, Optional

import pytest

from lbtune.tune.lint import lint_profile
from lbtune.tune.profile import load_profile
from tests.conftest import CliResult, run_cli
from tests.fixloops import FixLoop
from tests.netns import faults as F
from tests.netns.test_tune_cli_netns import ns_sysctls

DURATION = 2


@pytest.fixture(scope="module", autouse=True)
def _preimport() -> None:
    with contextlib.suppress(ImportError):
        importlib.import_module("lbtune.cli.diagnose")


@dataclass(frozen=True)
class Loop(FixLoop):
    fault: Callable[[], F.Fault]
    counter: Optional[str]  # the fault's kernel counter that must stop moving
    keys: tuple[str, ...]  # profile keys the written profile must set (and apply changes)
    restart: bool = False  # the limit is taken at listen(): restart the application
    # Counters only (--no-probes): with the probes attaching while the window runs, the
    # stalled receiver's backlog often did not fill on the loaded 2-CPU machine (its
    # segments were collapsed instead); without them, and outside diagnose, it filled in
    # every run. The cause is not known yet (the probes are tested on their own elsewhere)
    no_probes: bool = False


LOOPS = [
    # somaxconn (4) is the limit of a listener that asked for 128: raise it, restart
    Loop(
        "accept-queue-overflow",
        lambda: F.ListenOverflow(port=18180, backlog=128, clients=20, somaxconn=4),
        "TcpExt.ListenOverflows",
        ("sysctl.net.core.somaxconn",),
        restart=True,
    ),
    # syncookies off: the full SYN queue drops; with them on it answers with cookies
    Loop(
        "syn-queue-full",
        lambda: F.SynQueueFull(cookies=False, port=18181, backlog=4, syns=40),
        "TcpExt.TCPReqQFullDrop",
        ("sysctl.net.ipv4.tcp_syncookies",),
    ),
    # cookies answer because somaxconn (4) bounds the SYN queue: raise it, restart
    Loop(
        "syn-cookies",
        lambda: F.SynQueueFull(cookies=True, port=18182, backlog=128, syns=40, somaxconn=4),
        "TcpExt.TCPReqQFullDoCookies",
        ("sysctl.net.core.somaxconn",),
        restart=True,
    ),
    Loop(
        "rp-filter-drop",
        lambda: F.RpFilterDrop(packets=50, mode=1),
        "TcpExt.IPReversePathFilter",
        ("sysctl.net.ipv4.conf.all.rp_filter", "sysctl.net.ipv4.conf.ra0.rp_filter"),
    ),
    Loop(
        "timewait-overflow",
        lambda: F.TimeWaitOverflow(port=18183, max_tw=4, conns=30),
        "TcpExt.TCPTimeWaitOverflow",
        ("sysctl.net.ipv4.tcp_max_tw_buckets",),
    ),
    # an autotuned receiver under a tiny tcp_rmem: one-byte segments collapse its queue;
    # the fix raises tcp_rmem's maximum, the buffer grows instead (the arrival: the bytes
    # that reached the receiver, all of them)
    Loop(
        "rcvbuf-prune",
        lambda: F.TcpRmemPrune(port=18185),
        "TcpExt.TCPRcvCollapsed",
        ("sysctl.net.ipv4.tcp_rmem",),
    ),
    # an autotuned receiver stalled in recv() (a userfaultfd page) while one-byte segments
    # arrive: its backlog overflows; the fix raises tcp_rmem's default (the maximum alone
    # does not: the limit is the buffer as it is, measured); accepted sockets take the
    # buffer of their listener, so the application restarts
    Loop(
        "socket-backlog-drop",
        lambda: F.SocketBacklogFull(port=18186),
        "TcpExt.TCPBacklogDrop",
        ("sysctl.net.ipv4.tcp_rmem",),
        restart=True,
        no_probes=True,
    ),
    # a gauge: every port of the range held and one connect() failing; then room again
    Loop(
        "ephemeral-ports",
        lambda: F.PortRangeExhausted(ports=10, port=18184),
        None,
        ("sysctl.net.ipv4.ip_local_port_range",),
    ),
]


def diagnose_while(netns: str, bg: F.Background, *extra: str) -> tuple[CliResult, F.Truth]:
    """A diagnose window in the namespace with the fault triggered inside it: by conditions
    (F.trigger_in_window: after the window's first sample; its last waits for the fault)."""
    args = ["--netns", netns, "diagnose", "--duration", str(DURATION), "--json", *extra]
    with F.trigger_in_window(bg):
        res = run_cli(*args)  # forked (--netns): the child inherits the sampler hook
    return res, bg.truth()


def lost(loop: Loop, truth: F.Truth) -> int:
    """What the load lost by the fault's own reading: its counter's movement, or for the
    gauge (no counter) the connect() calls that failed."""
    if loop.counter is None:
        return sum(truth.details["connect_errors"].values())
    assert loop.counter in truth.after, truth  # the fault read it
    return truth.delta(loop.counter)


def assert_control(loop: Loop, truth: F.Truth) -> None:
    """The same load without the fix: the fault bites again, and every part of the load is
    counted, arrived (the arrival counter) or lost (the fault's counter)."""
    if loop.counter is None:
        assert truth.details["connect_errors"].get("EADDRNOTAVAIL", 0) >= 1, truth.details
    assert lost(loop, truth) > 0, (loop.counter, truth)
    assert truth.arrival and truth.attempted > 0, truth
    counted = truth.delta(truth.arrival) + lost(loop, truth)
    assert counted >= truth.attempted, (truth.arrival, counted, truth)


def hits(res: CliResult, rule: str) -> list[dict[str, Any]]:
    assert res.exit_code in (0, 1), res.stderr
    return [f for f in res.json["findings"] if f["rule"] == rule]


@pytest.mark.parametrize("loop", LOOPS, ids=[lp.rule for lp in LOOPS])
def test_fault_diagnose_profile_apply_and_the_counter_stops(
    netns: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, loop: Loop
) -> None:
    monkeypatch.setenv("LBTUNE_STATE_DIR", str(tmp_path / "state"))
    profile = tmp_path / "fix.toml"
    with F.Background(netns, loop.fault()) as bg:
        # 1. the fault, diagnosed, written as a profile
        probes = ("--no-probes",) if loop.no_probes else ()
        first, truth = diagnose_while(netns, bg, "--write-profile", str(profile), *probes)
        found = hits(first, loop.rule)
        assert found, (loop.rule, [f["rule"] for f in first.json["findings"]], first.stderr)
        if loop.counter is not None:
            assert truth.delta() > 0, truth  # the kernel counted the fault
        else:
            assert truth.details["connect_errors"] == {"EADDRNOTAVAIL": 1}, truth.details
        proposed = {fx["key"] for f in found for fx in f["fixes"] if fx["scope"] == "profile"}
        # the one-off commands act on the namespace when pasted as printed
        for fx in (fx for f in found for fx in f["fixes"] if fx["scope"] == "profile"):
            assert fx["command"].startswith(f"ip netns exec {netns} "), fx
        assert set(loop.keys) <= proposed, (loop.keys, found[0]["fixes"])
        prof = load_profile(str(profile))
        settings = dict(prof.settings())
        assert set(loop.keys) <= set(settings), (loop.keys, list(settings))
        assert lint_profile(prof) == []

        # 2. the control: the same load again without the fix (no diagnose window: the
        # counters are the fault's own readings) still moves the fault's counter
        if loop.restart:
            bg.restart()
        bg.trigger()
        assert_control(loop, bg.truth())

        # 3. plan shows the change, apply makes it
        plan = run_cli("--netns", netns, "plan", str(profile), "--json")
        assert plan.exit_code == 0, plan.stderr
        changing = {c["key"] for c in plan.json["changes"] if c["action"] == "change"}
        assert set(loop.keys) <= changing, (loop.keys, plan.json["changes"])
        before = ns_sysctls(netns)
        applied = run_cli("--netns", netns, "apply", str(profile), "--yes", "--json")
        assert applied.exit_code == 0, applied.stderr
        assert applied.json["changed"] >= len(loop.keys)
        if loop.restart:
            bg.restart()

        # 4. the same load again: it arrived (the positive control moved by at least what
        # was sent), yet the fault's counter does not move and the rule is quiet
        second, truth2 = diagnose_while(netns, bg, *probes)
        assert truth2.arrival and truth2.attempted > 0, truth2
        arrived = truth2.delta(truth2.arrival)
        assert arrived >= truth2.attempted, (truth2.arrival, arrived, truth2.attempted)
        if loop.counter is not None:
            assert loop.counter in truth2.after, truth2  # the fault read it again
            moved = truth2.after.get(loop.counter, 0) - truth2.before.get(loop.counter, 0)
            assert moved == 0, (loop.counter, truth2.before, truth2.after)
        else:
            assert truth2.details["connect_errors"] == {}, truth2.details
        assert hits(second, loop.rule) == [], hits(second, loop.rule)

        # 5. verify, then rollback gives back what the namespace had before the apply
        verify = run_cli("--netns", netns, "verify", str(profile))
        assert verify.exit_code == 0, verify.stdout + verify.stderr
        rollback = run_cli("--netns", netns, "rollback")
        assert rollback.exit_code == 0, rollback.stderr
        assert ns_sysctls(netns) == before


def test_a_profile_of_host_global_fixes_only_is_refused_in_the_namespace(
    netns: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A UDP socket at net.core.rmem_default overflows: the written profile's only value is
    rmem_default, host-global. plan and apply in the namespace used to print "nothing to
    change" and exit 0 while the drops went on: now they name the skipped knob, how to set it
    on the host, and exit 3. Nothing changes, in the namespace or on the host."""
    monkeypatch.setenv("LBTUNE_STATE_DIR", str(tmp_path / "state"))
    profile = tmp_path / "fix.toml"
    host_rmem = pathlib.Path("/proc/sys/net/core/rmem_default").read_text()
    fault = F.UdpRcvbufErrors(port=15356, rcvbuf=0, datagrams=600, size=1400)
    with F.Background(netns, fault) as bg:
        # the burst is over in milliseconds: on a loaded machine a window may open after it,
        # so the same load is tried again until a window holds it (at most 3 times)
        for _ in range(3):
            first, truth = diagnose_while(
                netns, bg, "--write-profile", str(profile), "--force", "--rule", "udp-rcvbuf-errors"
            )
            assert truth.delta() > 0, truth
            if hits(first, "udp-rcvbuf-errors"):
                break
    (f,) = hits(first, "udp-rcvbuf-errors")
    (fx,) = [x for x in f["fixes"] if x["key"] == "sysctl.net.core.rmem_default"]
    # host-global: the fix is the host's, its command is typed on the host
    assert fx["scope"] == "host" and fx["command"].startswith("sysctl -w net.core.rmem_default=")
    settings = dict(load_profile(str(profile)).settings())
    assert list(settings) == ["sysctl.net.core.rmem_default"], list(settings)
    before = ns_sysctls(netns)
    for verb in ("plan", "apply"):
        res = run_cli("--netns", netns, verb, str(profile), *(["--yes"] if verb == "apply" else []))
        assert res.exit_code == 3, (verb, res.exit_code, res.stdout, res.stderr)
        assert "nothing to change" not in res.stdout
        err = res.stderr
        assert "nothing in it can be applied from a namespace" in err, err
        assert f"namespace {netns} cannot change it: net.core.rmem_default" in err, err
        assert f"sysctl -w net.core.rmem_default={fx['desired']}" in err, err
        assert err.count("\n") == 1, err  # one line
    assert ns_sysctls(netns) == before
    assert pathlib.Path("/proc/sys/net/core/rmem_default").read_text() == host_rmem


def test_skipped_host_global_values_are_named_by_plan_and_apply(
    netns: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some values the namespace takes, one it cannot: applied, and the skipped one named."""
    monkeypatch.setenv("LBTUNE_STATE_DIR", str(tmp_path / "state"))
    profile = tmp_path / "mixed.toml"
    profile.write_text(
        '[profile]\nname = "mixed"\ndescription = "one per-netns value, one host-global"\n'
        '[sysctl]\n"net.core.somaxconn" = { value = 4242, reason = "test" }\n'
        '"net.core.rmem_default" = { value = 4194304, mode = "raise", reason = "test" }\n'
    )
    plan = run_cli("--netns", netns, "plan", str(profile))
    assert plan.exit_code == 0, plan.stderr
    line = f"1 skipped: host-global, namespace {netns} cannot change it: net.core.rmem_default"
    assert line in plan.stdout, plan.stdout
    applied = run_cli("--netns", netns, "apply", str(profile), "--yes")
    assert applied.exit_code == 0, applied.stderr
    assert line in applied.stdout and "(on the host: sysctl -w" in applied.stdout
    assert ns_sysctls(netns)["/proc/sys/net/core/somaxconn"].strip() == "4242"
    assert run_cli("--netns", netns, "rollback").exit_code == 0


def test_a_socket_that_pins_so_rcvbuf_is_not_fixed_by_tcp_rmem(
    netns: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backlog fault again, but the application pins SO_RCVBUF (2048, 4608 in effect,
    below tcp_rmem's default 131072): the finding names the port and the application, and
    proposes no tcp_rmem. And tcp_rmem would indeed not help: a profile raising its default
    and maximum is applied, the application restarted, the same load drops again."""
    monkeypatch.setenv("LBTUNE_STATE_DIR", str(tmp_path / "state"))
    written = tmp_path / "fix.toml"
    port = 18187
    fault = F.SocketBacklogFull(port=port, rmem="4096 131072 6291456", pin=2048)
    with F.Background(netns, fault) as bg:
        # --no-probes: as the socket-backlog-drop loop (Loop.no_probes)
        first, truth = diagnose_while(netns, bg, "--write-profile", str(written), "--no-probes")
        assert truth.delta() > 0, truth  # the kernel dropped from the backlog
        found = hits(first, "socket-backlog-drop")
        assert [f["object"] for f in found] == [f"tcp 127.0.0.1:{port}"], found
        (f,) = found
        assert {x["scope"] for x in f["fixes"]} == {"application"}, f["fixes"]
        assert not any("tcp_rmem" in x["knob"] for x in f["fixes"]), f["fixes"]
        if written.exists():  # other findings may write one: never with tcp_rmem
            assert "sysctl.net.ipv4.tcp_rmem" not in dict(load_profile(str(written)).settings())

        # the sysctl lbtune did not propose, applied anyway: the drops go on
        prof = tmp_path / "rmem.toml"
        prof.write_text('[profile]\nname = "rmem"\n[sysctl]\n"net.ipv4.tcp_rmem" = '
                        '{ value = "4096 262144 16777216", reason = "test" }\n')  # fmt: skip
        before = ns_sysctls(netns)
        applied = run_cli("--netns", netns, "apply", str(prof), "--yes", "--json")
        assert applied.exit_code == 0 and applied.json["changed"] == 1, applied.stderr
        bg.restart()
        second, truth2 = diagnose_while(netns, bg, "--no-probes")
        assert truth2.delta(truth2.arrival) >= truth2.attempted > 0, truth2
        assert truth2.delta() > 0, truth2  # dropped again: tcp_rmem is not the cause
        assert [x["object"] for x in hits(second, "socket-backlog-drop")] == [
            f"tcp 127.0.0.1:{port}"
        ]
        assert run_cli("--netns", netns, "rollback").exit_code == 0
        assert ns_sysctls(netns) == before
