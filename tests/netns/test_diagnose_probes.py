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
from tests.netns.conftest import in_netns, ip
from tests.netns.probe_traffic import listen_overflow_burst

pytest.importorskip("bcc", reason="the probes need bcc (python3-bpfcc; `make setup`)")


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
            if not attached.wait(120):
                return
            with listen_overflow_burst() as n:
                box["clients"] = n
                burst_done.set()
                report_done.wait(120)  # the full listener is still there at the window's end
        finally:
            burst_done.set()

    def progress(elapsed: float, total: float) -> None:
        burst_done.wait(120)  # hold the window open until the loss has happened

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
    report, doc, clients, _names = in_netns(netns, _diagnose_overflow, netns)
    assert report.probes.status == "ran", report.probes
    assert doc["probes"]["status"] == "ran" and doc["probes"]["drops_scope"] == "host"
    (f,) = [f for f in doc["findings"] if f["rule"] == "accept-queue-overflow"]
    counters = {e["counter"]: e["value"] for e in f["evidence"]}
    overflows = counters["TcpExt.ListenOverflows"]
    reason = "kernel drop TCP_LISTEN_OVERFLOW"
    kernel = [e for e in f["evidence"] if e["counter"].startswith(reason)]
    if not kernel and "TCP_LISTEN_OVERFLOW" not in str(doc["probes"]):
        pytest.skip("this kernel has no TCP_LISTEN_OVERFLOW drop reason (< 6.15)")
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
    """A window shorter than the compile: the report says the probes were not ready, the
    window was not delayed by the compile, and nothing stays loaded."""
    import time

    from tests.netns.probe_traffic import lbtune_programs

    def run(ns: str) -> Any:
        from lbtune.diagnose.report import diagnose

        host = Host.open("/", netns=ns)
        opened: list[float] = []

        def progress(elapsed: float, total: float) -> None:
            opened.append(time.monotonic())

        start = time.monotonic()
        report = diagnose(host, 0.05, progress=progress, rules=["accept-queue-overflow"])
        return report.probes, opened[0] - start, report.seconds

    before = lbtune_programs()
    probes, window_opened_after, seconds = in_netns(netns, run, netns)
    # The window opened at once, not after a compile of seconds.
    assert window_opened_after < 1.0
    assert seconds is not None and seconds < 1.0
    assert probes.status in ("not-ready", "ran")
    if probes.status == "not-ready":
        assert "still compiling" in probes.missing and "--duration" in probes.fix
    assert lbtune_programs() == before
