"""`diagnose` with the eBPF probes, in a throwaway namespace, against a real listen overflow.

The probes compile in the background while the counter window runs; the burst is made once
they are attached ("attached" from `probe_status`), and the window is held open (its
progress callback waits) until the burst is over, so the loss is inside both the counter
window and the probes' part of it. The accept-queue finding must then carry the kernel's own
drop reason, TCP_LISTEN_OVERFLOW, with a count equal to the ListenOverflows counter's
movement (every overflow of this burst happens at the final ACK, and each is one drop).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from lbtune.host.host import Host
from tests.conftest import needs_bcc
from tests.netns.conftest import in_netns, ip
from tests.netns.probe_traffic import kernel_drop_reason, listen_overflow_burst

pytestmark = needs_bcc
# Seconds the burst waits for the probes to attach (and the window for the burst): the vm
# tier, where bcc compiles under TCG, reuses `_diagnose_overflow` with a longer wait.
WAIT = 120.0


def _diagnose_overflow(netns: str) -> Any:
    from lbtune.diagnose.report import diagnose
    from lbtune.diagnose.view import report_view

    ip("link", "set", "lo", "up")
    attached, burst_done, report_done = threading.Event(), threading.Event(), threading.Event()
    box: dict[str, Any] = {}

    def status(text: str) -> None:
        if text == "attached":
            attached.set()

    def burst() -> None:
        try:
            if not attached.wait(WAIT):
                return
            with listen_overflow_burst() as n:
                box["clients"] = n
                burst_done.set()
                report_done.wait(WAIT)  # the full listener is still there at the window's end
        finally:
            burst_done.set()

    def progress(elapsed: float, total: float) -> None:
        burst_done.wait(WAIT)  # hold the window open until the loss has happened

    t = threading.Thread(target=burst)
    t.start()
    try:
        report = diagnose(
            Host.open("/", netns=netns), 0.5, progress=progress,
            rules=["accept-queue-overflow"], probe_status=status,
        )  # fmt: skip
    finally:
        report_done.set()
        t.join(30)
    if report.probes is not None and report.probes.status == "ran":
        names = {d.reason for d in report.probes.drops}
    else:
        names = set()
    return report, report_view(report).document(), box.get("clients"), names


def test_accept_queue_finding_carries_the_kernels_drop_reason_and_count(netns):
    # Only the kernel itself may excuse a missing reason: a probe that saw nothing fails.
    if kernel_drop_reason("TCP_LISTEN_OVERFLOW") is None:
        pytest.skip("capability: this kernel has no TCP_LISTEN_OVERFLOW drop reason (< 6.15); "
                    "the vm tier asserts that path on 6.1 (tests/vm/test_probes_vm.py)")
    report, doc, clients, _names = in_netns(netns, _diagnose_overflow, netns)
    assert report.probes.status == "ran", report.probes
    assert doc["probes"]["status"] == "ran" and doc["probes"]["drops_scope"] == "host"
    (f,) = [f for f in doc["findings"] if f["rule"] == "accept-queue-overflow"]
    counters = {e["counter"]: e["value"] for e in f["evidence"]}
    overflows = counters["TcpExt.ListenOverflows"]
    reason = "kernel drop TCP_LISTEN_OVERFLOW"
    kernel = [e for e in f["evidence"] if e["counter"].startswith(reason)]
    assert kernel, f["evidence"]
    assert overflows >= clients > 0
    # The kernel's reason, where it dropped them, and as many as the counter says.
    assert sum(e["value"] for e in kernel) == overflows, f["evidence"]
    assert all("tcp_v6_rcv" in e["counter"] or "tcp_check_req" in e["counter"] for e in kernel)
    assert all(e["source"] == "probe drops (host-wide)" for e in kernel)
    assert "TCP_LISTEN_OVERFLOW" in f["cause"]
    # The finding names the listener that overflowed (still open when the window closed).
    assert f["object"] == "tcp [::1]:18090"
    assert doc["probes"]["seconds"] > 0


def test_the_probes_load_while_the_window_already_runs(netns):
    """The window does not wait for the compile: the probes' loader is held at its first step
    until the window has opened and closed, so the report must say the probes were not ready
    (still compiling, take a longer --duration), and nothing stays loaded afterwards."""
    from tests.netns.probe_traffic import lbtune_programs

    def run(ns: str) -> Any:
        from lbtune.diagnose.report import diagnose

        host = Host.open("/", netns=ns)
        events: list[str] = []
        closed = threading.Event()

        def progress(elapsed: float, total: float) -> None:
            if "window opened" not in events:
                events.append("window opened")
            if elapsed >= total:
                events.append("window closed")
                closed.set()

        def status(text: str) -> None:
            if "held" not in events:  # the loader thread's first step: hold it
                events.append("held")
                # a window that waited for the compile would never close: give up, and the
                # order of the events below fails the test
                events.append("released" if closed.wait(60) else "window never closed")
            events.append(f"probes: {text}")

        report = diagnose(host, 0.05, progress=progress, rules=["accept-queue-overflow"],
                          probe_status=status)  # fmt: skip
        return report.probes, events, report.seconds

    before = lbtune_programs()
    probes, events, seconds = in_netns(netns, run, netns)
    # The window opened and closed while the probes were still held at their first step.
    assert "window opened" in events and "released" in events, events
    assert events.index("window closed") < events.index("released"), events
    assert not any(e.startswith("probes: attached") for e in events), events
    assert seconds is not None and seconds >= 0.05
    assert probes.status == "not-ready", probes
    assert "still compiling" in probes.missing and "--duration" in probes.fix
    assert lbtune_programs() == before
