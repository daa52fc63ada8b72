"""The monitor's findings over a sliding window, and the `w` report's sockets and charts.

`FrameBuilder` (the feed worker's half of the monitor) fed scripted ticks of a fixture tree:
a finding stays on screen while its window still holds the drops, a reading (a gauge) is held
until quiet for the window, and a report written after the load has ended still names the
socket that dropped (with its SO_RCVBUF fix, not the host-wide rmem defaults) and carries the
same charts as `diagnose --format html`.
"""

from __future__ import annotations

import dataclasses

from lbtune.diagnose.render import render_html
from lbtune.diagnose.view import report_view
from lbtune.host.net.sockdiag import UdpSocket
from lbtune.observe.model import SnmpCounters
from lbtune.tui.frame import JUDGE_SECONDS, Frame, FrameBuilder
from lbtune.tui.lines import plain
from lbtune.tui.panels import findings as findings_panel
from tests.conftest import KVM
from tests.tui.conftest import FIXED_TIME, Script, tick


def _rules(frame: Frame) -> list[str]:
    return [f.rule for f in frame.findings]


def _panel(frame: Frame) -> str:
    return "\n".join(plain(ln) for ln in findings_panel.render(frame, False, 100))


def test_an_accept_queue_finding_stays_while_the_window_holds_its_overflows():
    script = Script(KVM)
    b = FrameBuilder(script.host)
    b.frame(tick(script.step()))
    first = b.frame(tick(script.step(snmp={"TcpExt.ListenOverflows": 50},
                                     listen={80: (129, 50)})))  # fmt: skip
    assert "accept-queue-overflow" in _rules(first)
    # The queue stays full, nothing more overflows: the finding holds (its count is the
    # window's), for as long as the window still reaches back to the overflows.
    quiet = [b.frame(tick(script.step(listen={80: (129, 0)}))) for _ in range(9)]
    for f in quiet:
        assert "accept-queue-overflow" in _rules(f), _panel(f)
        (shown,) = [v for v in f.findings if v.object == "tcp 0.0.0.0:80"]
        assert shown.finding.count == 50
    assert quiet[-1].judged == JUDGE_SECONDS
    assert f"over the last {JUDGE_SECONDS:g} s" in findings_panel.TITLE
    gone = b.frame(tick(script.step(listen={80: (129, 0)})))  # 10 s without an overflow
    assert "accept-queue-overflow" not in _rules(gone)
    assert "No packet loss or limit reached in the last 10 s." in _panel(gone)


def test_a_reading_is_held_until_quiet_for_the_window():
    script = Script(KVM)
    b = FrameBuilder(script.host)
    b.frame(tick(script.step()))
    full = b.frame(tick(script.step(conntrack=64_000)))  # of 65,536: a gauge finding
    assert "conntrack-full" in _rules(full) and full.quiet == (0.0,)
    held = [b.frame(tick(script.step(conntrack=1_000))) for _ in range(9)]
    for n, f in enumerate(held, 1):
        assert "conntrack-full" in _rules(f)
        assert f.quiet == (float(n),)
        assert f"quiet {n} s" in _panel(f)
    gone = b.frame(tick(script.step(conntrack=1_000)))
    assert "conntrack-full" not in _rules(gone)


def _udp_drops(script: Script, sock: UdpSocket, drops: int) -> None:
    """The next tick's sample with `sock` as given and Udp.RcvbufErrors up by `drops`."""
    s = script.sample
    snmp = dict(s.snmp.values)
    snmp["Udp.RcvbufErrors"] = snmp.get("Udp.RcvbufErrors", 0) + drops
    others = tuple(u for u in s.udp if u.port != sock.port)
    script.sample = dataclasses.replace(s, snmp=SnmpCounters(snmp), udp=(*others, sock))


def _gone(script: Script, port: int) -> None:
    s = script.sample
    script.sample = dataclasses.replace(s, udp=tuple(u for u in s.udp if u.port != port))


def test_a_report_after_the_load_names_the_gone_socket_and_draws_the_charts():
    script = Script(KVM)
    b = FrameBuilder(script.host)
    sock = UdpSocket(4, "0.0.0.0", 5353, 0, rcvbuf=425984, drops=0, inode=4242)
    _udp_drops(script, sock, 0)
    b.frame(tick(script.step()))
    for n in (400, 300):  # the server drops, on a CPU that also drops backlog
        _udp_drops(script, dataclasses.replace(sock, drops=(sock.drops or 0) + n), n)
        sock = dataclasses.replace(sock, drops=(sock.drops or 0) + n)
        b.frame(tick(script.step(softnet={1: (5000, 20, 3)})))
    _gone(script, 5353)  # the load ends: the server closes its socket
    b.frame(tick(script.step()))
    report = b.report(60.0, "off", FIXED_TIME)
    (f,) = [f for f in report.findings if f.rule == "udp-rcvbuf-errors"]
    assert f.object == "udp 0.0.0.0:5353" and f.count == 700, f
    assert "not known" not in f.cause
    fixes = " ".join(x.knob for x in f.fixes)
    assert "SO_RCVBUF" in fixes and "rmem_default" not in fixes, fixes
    html = render_html(report_view(report))
    assert "softnet dropped per CPU" in html and html.count("<svg") >= 3
    # The per-tick series of the evidence (the sparklines) came with the window.
    assert any(s.values for s in report.series.values())


def test_windows_start_at_the_newest_sample_old_enough_over_a_long_history():
    """Over many kept samples (and ticks of uneven length) the findings judge the last
    JUDGE_SECONDS, a report of N seconds starts at the newest kept sample at least N old,
    and a report longer than what is kept covers all of it."""
    script = Script(KVM)
    b = FrameBuilder(script.host)
    start = script.sample.monotonic
    b.frame(tick(script.step()))
    lengths = [1.0, 2.5, 0.5, 1.0, 3.0] * 12  # 60 ticks, 96 s
    frames = [b.frame(tick(script.step(seconds=s))) for s in lengths]
    newest = script.sample.monotonic
    kept = [start, start + 1.0]  # the sample before the first tick, then each tick's
    for s in lengths:
        kept.append(kept[-1] + s)

    def expected(seconds: float) -> float:
        old = [t for t in kept[:-1] if newest - t >= seconds]
        return newest - (old[-1] if old else kept[0])

    assert frames[-1].judged == expected(JUDGE_SECONDS) >= JUDGE_SECONDS
    for seconds in (5.0, 20.0, 47.5, 90.0, 600.0):
        assert b.report(seconds, "off", FIXED_TIME).seconds == round(expected(seconds), 3)
    assert b.report(600.0, "off", FIXED_TIME).seconds == round(newest - start, 3)
