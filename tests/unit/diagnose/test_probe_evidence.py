"""The probes' evidence on findings: a pure function of findings and one ProbeSample."""

from __future__ import annotations

from lbtune.diagnose.finding import Evidence, Finding
from lbtune.diagnose.probe_evidence import RAN, ProbeRun, explain, ran
from lbtune.observe.probes import DropCount, NapiCount, ProbeSample
from lbtune.vocab import Level


def _finding(rule: str, obj: str) -> Finding:
    return Finding(rule, "t", Level.FAIL, obj, "cause.", 10, "packets", 1.0,
                   (Evidence("c", 10, 1.0, "s"),), ())  # fmt: skip


def _drop(reason: str, function: str, count: int, code: int | None = 1) -> DropCount:
    return DropCount(reason, code, f"{function}+0x10", function, "IPv4", count)


def _napi(cpu: int, exhausted: int, queue: int = 2) -> NapiCount:
    return NapiCount("eth0", 0, "0xff", queue, cpu, 100, 3000, exhausted, 0, 64)


def _sample(drops=(), napi=()) -> ProbeSample:  # type: ignore[no-untyped-def]
    return ProbeSample(("drops", "napi"), 2.0, tuple(drops), 0, "host", (), tuple(napi), 0, ())


def test_the_accept_queue_finding_gets_the_kernels_reason_and_nothing_else_does():
    s = _sample([_drop("TCP_LISTEN_OVERFLOW", "tcp_v4_rcv", 8), _drop("NO_SOCKET", "x", 50)])
    acc, udp = explain([_finding("accept-queue-overflow", "tcp 0.0.0.0:80"),
                        _finding("udp-rcvbuf-errors", "udp 0.0.0.0:53")], s)  # fmt: skip
    (ev,) = acc.evidence[1:]
    assert ev.counter == "kernel drop TCP_LISTEN_OVERFLOW tcp_v4_rcv+0x10 (IPv4)"
    assert (ev.value, ev.rate, ev.source) == (8, 4.0, "probe drops (host-wide)")
    assert "TCP_LISTEN_OVERFLOW" in acc.cause
    assert udp.evidence == (Evidence("c", 10, 1.0, "s"),) and udp.cause == "cause."


def test_kernels_without_reasons_match_by_function():
    s = _sample([_drop("", "enqueue_to_backlog", 5, None)])
    (f,) = explain([_finding("cpu-backlog-drop", "cpu 1")], s)
    assert f.evidence[-1].value == 5 and "at enqueue_to_backlog+0x10" in f.evidence[-1].counter


def test_more_than_three_locations_are_summed_in_one_row():
    drops = [_drop("SOCKET_RCVBUFF", f"f{i}", 10 - i) for i in range(5)]
    (f,) = explain([_finding("udp-rcvbuf-errors", "udp *:53")], _sample(drops))
    assert [e.value for e in f.evidence[1:]] == [10, 9, 8, 7 + 6]


def test_time_squeeze_gets_the_napi_instances_exhausted_on_its_cpu():
    s = _sample(napi=[_napi(1, 7), _napi(3, 9), _napi(1, 0, queue=5)])
    (f,) = explain([_finding("time-squeeze", "cpu 1")], s)
    (ev,) = f.evidence[1:]
    assert ev.counter.startswith("napi eth0 queue 2 cpu 1 budget exhausted (7 of 100 polls")
    assert ev.source == "probe napi" and "napi probe" in f.cause


def test_the_run_line_says_how_much_of_the_window_the_probes_covered():
    run = ran(_sample([_drop("NO_SOCKET", "x", 3)]), 10.0)
    assert run.status == RAN and run.drops_total == 3
    assert run.line == "drops, napi ran for 2.0 s of the 10.0 s window (drops host-wide)"
    assert run.document()["drops"][0]["reason"] == "NO_SOCKET"
    assert "run lbtune as root" in ProbeRun("unavailable", missing="not root",
                                            fix="run lbtune as root").line  # fmt: skip
