"""`lbtune --netns NS diagnose` against real faults made in that namespace, end to end.

Each scenario sets a fault up in a throwaway namespace (tests/netns/faults.py), starts two
`lbtune diagnose --duration 2` runs in the namespace at once (one --json, one text: they
sample the same window), and triggers the fault DELAY seconds later in a forked child of its
own, so the loss happens inside the window. The JSON finding must name the rule, the object,
a count inside the fault's ground-truth range and the fix (knob, current, desired); the text
report must show the same title, object and fix. An idle namespace gives no findings.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from typing import Any, Optional

import pytest

from tests.conftest import CliResult, run_cli
from tests.netns import faults as F

DURATION = 2
# The diagnose children need a moment (fork, join the namespace, first sample) before their
# window opens; every trigger takes < 0.2 s, so it lands well inside [DELAY, DURATION].
DELAY = 0.8


@pytest.fixture(scope="module", autouse=True)
def _preimport() -> None:
    # Import the command before forking so that the children start sampling at once.
    with contextlib.suppress(ImportError):
        importlib.import_module("lbtune.cli.diagnose")


def diagnose_during(netns: str, fault: F.Fault) -> tuple[CliResult, CliResult, F.Truth]:
    """(JSON run, text run, truth) of two diagnose windows with the fault triggered inside."""
    # Counters only: these scenarios test the rules (tests/netns/test_diagnose_probes.py
    # tests the probes' part), and a compile per run would cost the shared CPUs seconds.
    args = ["--netns", netns, "diagnose", "--duration", str(DURATION), "--no-probes"]
    box: dict[str, Any] = {}

    def json_run() -> None:
        try:
            box["json"] = run_cli(*args, "--json")
        except BaseException as e:  # surfaced below
            box["error"] = e

    with F.Background(netns, fault) as bg:
        t = threading.Thread(target=json_run)
        t.start()
        bg.trigger(after=DELAY)
        text = run_cli(*args)
        t.join(30)
        truth = bg.truth()
    if "error" in box:
        raise box["error"]
    return box["json"], text, truth


def findings_of(res: CliResult) -> list[dict[str, Any]]:
    """The findings of a JSON run; its exit status must be 1 with findings, 0 without."""
    assert res.exit_code in (0, 1), f"exit {res.exit_code}: {res.stderr}"
    doc = res.json
    assert isinstance(doc.get("findings"), list), doc
    assert res.exit_code == (1 if doc["findings"] else 0), (res.exit_code, doc["findings"])
    return list(doc["findings"])


def the_finding(res: CliResult, rule: str, obj: Optional[str] = None) -> dict[str, Any]:
    """The one finding of `rule` (whose object contains `obj`); exit status 1 with findings."""
    fs = findings_of(res)
    hits = [f for f in fs if f["rule"] == rule and (obj is None or obj in f["object"])]
    assert len(hits) == 1, (rule, obj, [(f["rule"], f["object"], f["count"]) for f in fs])
    assert res.exit_code == 1, "findings must give exit status 1"
    f = hits[0]
    for key in ("title", "level", "cause", "unit", "evidence", "fixes"):
        assert f.get(key), (key, f)
    for fix in f["fixes"]:  # a fix that changes nothing is noise
        if fix.get("current") is not None and fix.get("desired") is not None:
            assert str(fix["current"]) != str(fix["desired"]), f"no-op fix {fix}"
    return f


def assert_count(f: dict[str, Any], truth: F.Truth, res: CliResult) -> None:
    """count inside the truth, rate = count / window, the main counter among the evidence.

    The window is the one the report states: on a busy machine (namespaces being torn down
    hold the kernel's rtnl lock) a sample can take seconds, so the window can be longer than
    --duration; the rate must follow the real window, whatever its length."""
    assert truth.lo <= truth.delta() <= truth.hi, truth  # the fault itself did what it says
    assert truth.lo <= f["count"] <= truth.hi, (
        f"{f['rule']}: count {f['count']} outside the truth {truth.lo}..{truth.hi} "
        f"(kernel counted {truth.delta()} during the trigger)"
    )
    window = res.json["window_seconds"]
    assert window >= DURATION, window
    expected_rate = f["count"] / window
    assert f["rate"] is not None and abs(f["rate"] - expected_rate) <= 0.2 * expected_rate, f
    if truth.counter.startswith(("TcpExt.", "Udp.")):
        ev = [e for e in f["evidence"] if e["counter"] == truth.counter]
        assert ev and truth.lo <= ev[0]["value"] <= truth.hi, (truth.counter, f["evidence"])


def assert_steady(f: dict[str, Any], truth: F.Truth, res: CliResult) -> None:
    """A steady stream over about the window: the kernel counted every packet sent, the
    finding at most that many, at a rate above the rules' noise floor (warn or fail)."""
    from lbtune.diagnose.rules.closed_port import NOISE_PER_S

    assert truth.delta() == truth.attempted, truth
    assert 0 < f["count"] <= truth.attempted, (f["count"], truth)
    assert f["rate"] >= NOISE_PER_S and f["level"] in ("warn", "fail"), f
    # (for TCP: no connection was aborted in the namespace, so every reset is one of these)
    ev = [e["value"] for e in f["evidence"] if e["counter"] == truth.counter]
    assert ev == [f["count"]], f["evidence"]


def fix_with(f: dict[str, Any], *words: str) -> dict[str, Any]:
    """The first fix whose knob mentions one of `words`."""
    for fix in f["fixes"]:
        if any(w in (fix.get("knob") or "") for w in words):
            return fix  # type: ignore[no-any-return]
    raise AssertionError(f"no fix about {words}: {[x.get('knob') for x in f['fixes']]}")


def sysctls_proposed(f: dict[str, Any]) -> set[str]:
    """The sysctls a finding's fixes would change."""
    return {x["knob"].split()[1] for x in f["fixes"] if x["knob"].startswith("sysctl ")}


def as_int(value: Any) -> int:
    return int(str(value).split()[0])


def assert_text(text: CliResult, f: dict[str, Any], fix: dict[str, Any]) -> None:
    """The text report shows the finding's title, object and the fix (knob and value)."""
    assert text.exit_code == 1, text.stderr
    out = text.stdout
    shown = [f["title"], f["object"], fix["knob"]]
    shown += [str(fix[k]) for k in ("current", "desired") if fix.get(k) is not None]
    for what in shown:
        assert what in out, f"text output lacks {what!r}:\n{out}"


# --------------------------------------------------------------------------- scenarios


def test_accept_queue_overflow_on_a_slow_accept_server(netns):
    js, text, truth = diagnose_during(netns, F.ListenOverflow(port=18080, backlog=2, clients=20))
    f = the_finding(js, "accept-queue-overflow", ":18080")
    assert_count(f, truth, js)
    # min(backlog 2, somaxconn 4096): the application's backlog is the limit
    fix = fix_with(f, "backlog")
    assert as_int(fix["current"]) == 2
    assert as_int(fix["desired"]) > 2
    # somaxconn (4096) is not the limit: the fix is the application's, and no sysctl is offered
    assert fix["scope"] == "application", fix
    assert sysctls_proposed(f) == set(), f["fixes"]
    assert "not a number of connections" in f["cause"] and f["unit"] == "handshake packets"
    assert_text(text, f, fix)


def _listen_backlog_fix(f: dict[str, Any], truth: F.Truth) -> dict[str, Any]:
    """The SYN queue of a listener holds min(listen() backlog, somaxconn) + 1 requests.

    Measured on this kernel (6.18): with backlog 4, raising net.ipv4.tcp_max_syn_backlog from
    2048 to 8192 leaves TCPReqQFullDrop at 35 of 40 SYNs; a backlog of 64 makes it 0. So the fix
    that works names the listen backlog (somaxconn is 4096, not the limit).
    """
    fixes = [x for x in f["fixes"] if "backlog" in x["knob"] and "syn_backlog" not in x["knob"]]
    assert fixes, f"no listen-backlog fix: {[x['knob'] for x in f['fixes']]}"
    fix = fixes[0]
    assert as_int(fix["current"]) == as_int(truth.knobs["backlog"]), fix
    assert as_int(fix["desired"]) > as_int(truth.knobs["backlog"]), fix
    assert fix["scope"] == "application", fix
    # neither somaxconn nor tcp_max_syn_backlog is the limit here: neither is proposed
    assert not sysctls_proposed(f) & {"net.core.somaxconn", "net.ipv4.tcp_max_syn_backlog"}, f
    return fix


def test_syn_queue_full_without_syncookies(netns):
    js, text, truth = diagnose_during(netns, F.SynQueueFull(cookies=False, backlog=4, syns=40))
    # the listener's own drop counter (sock_diag, `ss -tlm` d) moves with every SYN dropped
    f = the_finding(js, "syn-queue-full", ":18081")
    assert_count(f, truth, js)
    fix = _listen_backlog_fix(f, truth)
    assert_text(text, f, fix)


def test_syn_cookies_when_the_syn_queue_is_full(netns):
    js, text, truth = diagnose_during(netns, F.SynQueueFull(cookies=True, backlog=4, syns=40))
    findings = findings_of(js)
    assert not [x for x in findings if x["rule"] == "syn-queue-full"], findings
    # no drops here; the listener is the one whose SYN-RECV requests (`ss -tn state syn-recv`)
    # reach its backlog + 1
    f = the_finding(js, "syn-cookies", ":18081")
    assert_count(f, truth, js)
    fix = _listen_backlog_fix(f, truth)
    assert_text(text, f, fix)


def test_udp_receive_buffer_errors(netns):
    js, text, truth = diagnose_during(netns, F.UdpRcvbufErrors(port=15353, rcvbuf=4096))
    f = the_finding(js, "udp-rcvbuf-errors")
    assert f["object"] == "udp 127.0.0.1:15353", f["object"]
    assert_count(f, truth, js)
    fix = fix_with(f, "rmem_max", "SO_RCVBUF", "rcvbuf")
    current = truth.knobs["net.core.rmem_max" if "rmem_max" in fix["knob"] else "SO_RCVBUF"]
    assert as_int(fix["current"]) == as_int(current), fix
    assert fix["desired"] is not None and as_int(fix["desired"]) > as_int(truth.knobs["SO_RCVBUF"])
    # the application pinned SO_RCVBUF: its own setting is the fix, rmem_default is not
    assert fix["scope"] == "application" and "SO_RCVBUF" in fix["knob"], fix
    assert "net.core.rmem_default" not in sysctls_proposed(f), f["fixes"]
    assert_text(text, f, fix)


def test_rp_filter_strict_on_an_asymmetric_path(netns):
    js, text, truth = diagnose_during(netns, F.RpFilterDrop(packets=50, mode=1))
    f = the_finding(js, "rp-filter-drop", "ra0")  # the packets came in on ra0
    assert_count(f, truth, js)
    knobs = {x["knob"]: x for x in f["fixes"]}
    for key in ("net.ipv4.conf.all.rp_filter", "net.ipv4.conf.ra0.rp_filter"):
        fix = next((x for k, x in knobs.items() if key in k), None)
        assert fix is not None, (key, list(knobs))
        assert str(fix["current"]) == "1", fix
        assert str(fix["desired"]) in ("0", "2"), fix
    assert_text(text, f, fix_with(f, "conf.all.rp_filter"))


def test_qdisc_drops_through_tbf_on_a_veth(netns):
    js, text, truth = diagnose_during(netns, F.QdiscDrops(packets=300, dev="qd0"))
    f = the_finding(js, "qdisc-drop", "qd0")
    assert "tbf" in f["object"], f["object"]
    assert_count(f, truth, js)
    fix = fix_with(f, "qd0", "qdisc", "tbf", "txqueuelen")
    # what to raise has a value now: the shaper's rate/burst/limit (1mbit, 1600 B, 5 ms)
    assert fix["current"] is not None, fix
    # the shaper drops by design: txqueuelen is not its limit and is not proposed
    assert not [x for x in f["fixes"] if "txqueuelen" in x["knob"]], f["fixes"]
    assert fix["scope"] == "manual", fix
    assert_text(text, f, fix)


def test_timewait_bucket_overflow(netns):
    js, text, truth = diagnose_during(netns, F.TimeWaitOverflow(max_tw=4, conns=30))
    f = the_finding(js, "timewait-overflow")
    assert_count(f, truth, js)
    fix = fix_with(f, "net.ipv4.tcp_max_tw_buckets")
    assert as_int(fix["current"]) == 4
    assert as_int(fix["desired"]) > 4
    assert_text(text, f, fix)


def test_idle_namespace_has_no_findings(netns):
    js, text, _truth = diagnose_during(netns, F.Idle())
    assert findings_of(js) == [], js.stdout
    assert js.exit_code == 0
    assert text.exit_code == 0, text.stdout + text.stderr
    # a window of seconds says so on stderr, whatever the format (stdout stays the report)
    for run in (js, text):
        assert run.stderr == f"lbtune: sampling the counters for {DURATION} s\n", run.stderr


# ------------------------------------------------------------ the sysctl is not the cause


def test_rcvbuf_prune_with_so_rcvbuf_pinned_by_the_application(netns):
    """The application fixed SO_RCVBUF and does not read: raising tcp_rmem would change
    nothing, so the finding names the socket's port and puts the fix in the application."""
    js, text, truth = diagnose_during(netns, F.PinnedRcvbufPrune(port=18090, rcvbuf=2048))
    assert truth.delta() >= 1, truth  # the kernel pruned
    f = the_finding(js, "rcvbuf-prune", ":18090")
    assert f["object"] == "tcp 127.0.0.1:18090", f["object"]
    assert "SO_RCVBUF" in f["title"] and "tcp_rmem does not apply" in f["cause"], f
    assert "net.ipv4.tcp_rmem" not in sysctls_proposed(f), f["fixes"]
    fix = fix_with(f, "SO_RCVBUF")
    assert fix["scope"] == "application"
    assert as_int(fix["current"]) == as_int(truth.knobs["SO_RCVBUF"]), (fix, truth.knobs)
    assert f["count"] >= 1 and f["rate"] is not None
    # no other rcvbuf-prune finding blames tcp_rmem for it
    assert [x["object"] for x in findings_of(js) if x["rule"] == "rcvbuf-prune"] == [f["object"]]
    assert_text(text, f, fix)


def test_udp_socket_without_so_rcvbuf_gets_rmem_default(netns):
    """No SO_RCVBUF: the socket has net.core.rmem_default, so that sysctl is the fix, and
    in a namespace it is the host's (read-only here): a host fix, not `lbtune --netns apply`."""
    js, text, truth = diagnose_during(netns, F.UdpDefaultRcvbuf(port=15354))
    f = the_finding(js, "udp-rcvbuf-errors", ":15354")
    assert_count(f, truth, js)
    fix = fix_with(f, "net.core.rmem_default")
    assert as_int(fix["current"]) == as_int(truth.knobs["net.core.rmem_default"]), fix
    assert as_int(fix["desired"]) > as_int(fix["current"])
    assert fix["scope"] == "host" and "set it on the host" in fix["note"], fix
    assert not [x for x in f["fixes"] if "SO_RCVBUF of" in x["knob"]], f["fixes"]
    assert_text(text, f, fix)


def test_port_range_used_up_is_exhausted_not_nearly(netns):
    """Every port of the range held and connect() failing: "exhausted", a reading (no
    per-second rate), counted in ports."""
    js, text, truth = diagnose_during(netns, F.PortRangeExhausted(ports=10))
    assert truth.details["connect_errors"] == {"EADDRNOTAVAIL": 1}, truth.details
    f = the_finding(js, "ephemeral-ports")
    assert f["title"] == "Ephemeral ports exhausted", f["title"]
    assert f["level"] == "fail" and f["count"] == 10 and f["unit"] == "ports in use"
    assert f["gauge"] is True and f["rate"] is None, f
    fix = fix_with(f, "ip_local_port_range")
    assert fix["current"] == truth.knobs["net.ipv4.ip_local_port_range"], fix
    assert any(x["scope"] == "application" for x in f["fixes"]), f["fixes"]
    assert_text(text, f, fix)


def test_udp_datagrams_to_a_closed_port_without_probes(netns):
    """300 datagrams to a port with no socket: `diagnose` used to say "No packet loss" and
    exit 0. Counters only (--no-probes): the finding says the port is unknown."""
    js, text, truth = diagnose_during(netns, F.UdpNoPort(port=15354, datagrams=400, seconds=2))
    f = the_finding(js, "udp-no-port")
    assert f["object"] == "udp port unknown", f["object"]
    assert_steady(f, truth, js)
    assert "run with the probes" in f["cause"]
    fix = fix_with(f, "nothing listens on the udp")
    assert fix["scope"] == "application" and fix["knob"] == "nothing listens on the udp port", fix
    assert fix["command"] == f"ip netns exec {netns} ss -ulpn", fix  # the namespace's sockets
    assert any("VIP" in x["knob"] and "lo" in x["note"] for x in f["fixes"]), f["fixes"]
    assert text.exit_code == 1 and "UDP datagrams to a port nothing listens on" in text.stdout
    assert "No packet loss" not in text.stdout


def test_tcp_syns_to_a_closed_port_without_probes(netns):
    js, text, truth = diagnose_during(netns, F.TcpNoListener(port=18090, connects=300, seconds=2))
    f = the_finding(js, "tcp-no-listener")
    assert f["object"] == "tcp port unknown", f["object"]
    assert_steady(f, truth, js)
    fix = fix_with(f, "nothing listens on the tcp")
    assert fix["scope"] == "application", fix
    assert text.exit_code == 1 and "TCP resets for segments no socket takes" in text.stdout


def test_dr_traffic_to_a_vip_that_is_not_on_lo(netns):
    """A DR real server whose VIP is not on lo drops the director's traffic as "not my
    address" (Ip.InAddrErrors): the finding says so and gives the VIP-on-lo fix."""
    js, text, truth = diagnose_during(netns, F.VipNotOnLo(datagrams=400, seconds=2))
    f = the_finding(js, "addr-not-local")
    assert_steady(f, truth, js)
    fix = fix_with(f, "VIP on lo")
    assert fix["scope"] == "manual" and "arp_ignore" in fix["note"], fix
    assert fix["command"].startswith(f"ip netns exec {netns} ip addr add VIP/32 dev lo"), fix
    assert text.exit_code == 1 and "not this host's" in text.stdout
