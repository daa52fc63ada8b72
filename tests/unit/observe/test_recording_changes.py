"""A recording of format /2 holds each tick after the first as what changed since the tick
before: it reads back into the very ticks written (sources that come and go, lists that
grow, probes that start and stop), keeps what did not change as the objects it had, and a
change that does not fit is one line naming its line and place. Format /1 is still read.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import json
import random
from typing import Any, Optional

import pytest

from lbtune.diagnose.rules import sample_spec
from lbtune.host.host import Host
from lbtune.observe.model import Sample, SnmpCounters
from lbtune.observe.probes import DropCount, NapiCount, ProbeSample
from lbtune.observe.recording import (
    Malformed,
    RecordingHeader,
    RecordingWriter,
    changes,
    encode,
    read_recording,
)
from lbtune.observe.sampler import Sampler
from lbtune.tui.feed import monitor_rules
from tests.conftest import DELL, HOSTS


@pytest.fixture(scope="module")
def sample() -> Sample:
    host = Host.open(str(HOSTS / DELL))
    return Sampler(host, None, sample_spec(monitor_rules())).take()


def _probes(n: int) -> ProbeSample:
    return ProbeSample(("drops", "napi"), 1.0,
                       (DropCount("NO_SOCKET", 2, "__udp4_lib_rcv+0x5b4", "__udp4_lib_rcv",
                                  "IPv4", 7 + n),),
                       0, "host", (), (NapiCount("eth0", 0, "0xff", 1, 3, 2 + n, 9, 0, 0, 64),),
                       0, ())  # fmt: skip


def _ticks(first: Sample) -> list[tuple[Sample, Optional[ProbeSample]]]:
    """A tick sequence where every kind of change happens once."""
    s0 = first
    values = dict(s0.snmp.values)
    values["Udp.NoPorts"] = values.get("Udp.NoPorts", 0) + 5
    s1 = dataclasses.replace(s0, monotonic=s0.monotonic + 1, snmp=SnmpCounters(values))
    gone = next(iter(s0.nics))
    s2 = dataclasses.replace(s1, monotonic=s1.monotonic + 1,
                             nics={k: v for k, v in s1.nics.items() if k != gone},
                             conntrack=None, listen=s1.listen[:1])  # fmt: skip
    s3 = dataclasses.replace(s2, monotonic=s2.monotonic + 1, nics=s0.nics,
                             conntrack=s0.conntrack, listen=s0.listen,
                             missing={"ipvs": "no ip_vs here"})  # fmt: skip
    s4 = dataclasses.replace(s3, monotonic=s3.monotonic + 1, uptime=None, missing={})
    return [(s0, None), (s1, _probes(1)), (s2, _probes(2)), (s3, None), (s4, _probes(4)),
            (s4, _probes(4))]  # fmt: skip


def _write(ticks: list[tuple[Sample, Optional[ProbeSample]]], header: RecordingHeader) -> str:
    out = io.StringIO()
    w = RecordingWriter(out, header)
    for sample, probes in ticks:
        w.write(sample, probes)
    return out.getvalue()


def _header() -> RecordingHeader:
    host = Host.open(str(HOSTS / DELL))
    from lbtune.host.inventory import discover_host

    inv = discover_host(host)
    return RecordingHeader("lb1", "6.1", None, 1.0, inv.cpus, {n.name: n for n in inv.nics})


def _read(text: str) -> list[tuple[Sample, Optional[ProbeSample]]]:
    _header, ticks = read_recording(io.StringIO(text), "t.rec")
    return [(t.sample, t.probes) for t in ticks]


def test_changes_read_back_into_the_very_ticks_written(sample):
    ticks = _ticks(sample)
    text = _write(ticks, _header())
    lines = text.splitlines()
    assert json.loads(lines[0])["format"] == "lbtune-monitor-recording/2"
    assert "sample" in json.loads(lines[1])
    assert all(set(json.loads(line)) == {"change"} for line in lines[2:])
    assert all(len(line) < len(lines[1]) / 4 for line in lines[2:])  # (a 48-CPU tick)
    assert json.loads(lines[-1])["change"] == {}  # nothing changed: an empty change
    assert _read(text) == ticks


def test_what_did_not_change_is_kept_as_it_was(sample):
    back = _read(_write(_ticks(sample), _header()))
    (a, _), (b, _) = back[0], back[1]
    assert b.snmp.values["Udp.NoPorts"] == a.snmp.values["Udp.NoPorts"] + 5
    assert b.nics is a.nics and b.interrupts is a.interrupts and b.softnet is a.softnet
    assert b.snmp is not a.snmp


def test_a_changed_row_is_a_copy_with_no_dict_of_its_own(sample):
    """A row of a frozen dataclass whose counters changed is copied field by field: the
    copy equals the row written, and neither it nor the row it was copied from gets an
    instance dict (on CPython a dict is materialised by `__dict__` and is then one more
    object per row for the garbage collector, for as long as the monitor keeps the sample)."""
    import gc

    name, nic = next((k, v) for k, v in sample.nics.items() if v.queues)
    row = nic.queues[0]
    moved = dataclasses.replace(row, packets=(row.packets or 0) + 7, bytes=(row.bytes or 0) + 9)
    nic2 = dataclasses.replace(nic, queues=(moved, *nic.queues[1:]))
    s1 = dataclasses.replace(sample, monotonic=sample.monotonic + 1,
                             nics={**sample.nics, name: nic2})  # fmt: skip
    back = _read(_write([(sample, None), (s1, None)], _header()))
    (a, _), (b, _) = back
    assert b == s1
    old, new = a.nics[name].queues[0], b.nics[name].queues[0]
    assert new == moved and new is not old and type(new) is type(row)
    assert b.nics[name].queues[1] is a.nics[name].queues[1]  # unchanged: the same object
    for r in (old, new):
        assert not [x for x in gc.get_referents(r) if type(x) is dict and x is not r.extra]


def test_changes_of_equal_values_are_none_and_types_count():
    assert changes({"a": [1, {"b": 2}]}, {"a": [1, {"b": 2}]}) is None
    assert changes({"a": 1}, {"a": True}) == {"a": [True]}
    assert changes({"a": 1}, {"a": 1.0}) == {"a": [1.0]}
    assert changes({"a": [1, 2]}, {"a": [1, 2, 3]}) == {"a": [[1, 2, 3]]}
    assert changes({"a": [1, 2]}, {"a": [1, 5]}) == {"a": {"1": [5]}}
    assert changes({"a": 1, "b": 2}, {"b": 2, "c": None}) == {"a": [], "c": [None]}


def test_format_1_recordings_still_read(sample):
    ticks = _ticks(sample)[:3]
    head = {"format": "lbtune-monitor-recording/1", **encode(_header())}
    lines = [json.dumps(head)] + [
        json.dumps({"sample": encode(s), "probes": None if p is None else encode(p)})
        for s, p in ticks
    ]
    assert _read("\n".join(lines) + "\n") == ticks


def _with(sample: Sample, change: Any) -> str:
    out = io.StringIO()
    RecordingWriter(out, _header()).write(sample, None)
    return out.getvalue() + json.dumps({"change": change}) + "\n"


def test_a_rows_changed_counts_keep_its_cpus_and_a_cpu_added_is_read(sample):
    """A changed IRQ row's counts are a copy of its numbers with the CPUs' tuple of the
    read it came from (shared by every row); a CPU added or removed reads the row whole."""
    irq, line = next((i, v) for i, v in sample.interrupts.items() if len(v.counts) == 48)
    cpu = line.counts.cpus[5]
    moved = {"sample": {"interrupts": {str(irq): {"counts": {str(cpu): [line.counts[cpu] + 9]}}}}}
    (_, _), (b, _) = _read(_with(sample, moved))
    counts = b.interrupts[irq].counts
    assert counts[cpu] == line.counts[cpu] + 9 and counts.cpus is line.counts.cpus
    assert dict(counts) == {**line.counts, cpu: line.counts[cpu] + 9}
    assert line.counts[cpu] != counts[cpu]  # (the row it was copied from is as it was)
    added = {"sample": {"interrupts": {str(irq): {"counts": {"999": [4]}}}}}
    (_, _), (b, _) = _read(_with(sample, added))
    assert dict(b.interrupts[irq].counts) == {**line.counts, 999: 4}
    gone = {"sample": {"interrupts": {str(irq): {"counts": {str(cpu): []}}}}}
    (_, _), (b, _) = _read(_with(sample, gone))
    assert cpu not in b.interrupts[irq].counts and len(b.interrupts[irq].counts) == 47


@pytest.mark.parametrize(
    "change, message",
    [
        ("x", "t.rec line 3: change: expected a change"),
        ({"sample": {"monotonic": ["soon"]}}, "line 3: change.sample.monotonic: expected a number"),
        ({"sample": {"monotonic": [1, 2]}}, "change.sample.monotonic: expected [value] (one item)"),
        ({"sample": {"monotonic": {"x": [1]}}},
         "change.sample.monotonic: a change of parts of a value that has none"),
        ({"sample": {"nics": {"nope0": {"driver": ["x"]}}}},
         "change.sample.nics[nope0]: nothing to change"),
        ({"sample": {"nics": {"nope0": []}}}, "change.sample.nics[nope0]: nothing to remove"),
        ({"sample": {"softnet": {"999": {"processed": [1]}}}},
         "change.sample.softnet: no item '999' to change (the list has 48)"),
        ({"sample": {"softnet": {"²": {"processed": [1]}}}}, "no item '²' to change"),
        ({"sample": {"softnet": {"0": {"processed": [-1.5]}}}},
         "change.sample.softnet[0].processed: expected an integer"),
        ({"sample": {"interrupts": {"x1": [None]}}},
         "change.sample.interrupts: key 'x1' is not an integer"),
        ({"probes": {"drops": {"0": {"count": [1]}}}}, "change.probes: a change of parts of null"),
        ({"sample": {"softnet": {"0": "x"}}}, "change.sample.softnet[0]: expected a change"),
        ({"sample": {"interrupts": {"62": {"counts": {"0": [2**70]}}}}},
         "change.sample.interrupts[62].counts: a count out of range"),
        ({"sample": {"interrupts": {"62": {"counts": {"0": ["x"]}}}}},
         "change.sample.interrupts[62].counts[0]: expected an integer"),
        ({"sample": {"interrupts": {"62": {"counts": {"999": []}}}}},
         "change.sample.interrupts[62].counts: no '999' to remove"),
    ],
)  # fmt: skip
def test_a_change_that_does_not_fit_is_one_line_naming_its_place(sample, change, message):
    with pytest.raises(Malformed) as e:
        _read(_with(sample, change))
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_a_change_before_any_whole_tick_is_refused():
    head = {"format": "lbtune-monitor-recording/2", **encode(_header())}
    text = json.dumps(head) + "\n" + json.dumps({"change": {}}) + "\n"
    with pytest.raises(Malformed, match=r"t\.rec line 2: a change, but no whole tick before it"):
        _read(text)


def _paths(doc: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    items: Any = ()
    if isinstance(doc, dict):
        items = doc.items()
    elif isinstance(doc, list):
        items = enumerate(doc)
    for k, v in items:
        out.append((*prefix, str(k)))
        out.extend(_paths(v, (*prefix, str(k))))
    return out


def test_random_changes_at_every_place_are_applied_or_one_line_errors(sample):
    """Hostile changes: any place of a 48-CPU tick (or a key next to it that is not there)
    given any kind of value or change; each is applied or refused as Malformed, never
    another exception, and the tick it was applied to is left as it was."""
    from lbtune.observe.recording import RecordedTick, apply_change

    rng = random.Random(33)  # noqa: S311 (test data)
    tick = RecordedTick(sample, _probes(1))
    before = copy.deepcopy(tick)
    places = _paths({"sample": encode(sample), "probes": encode(tick.probes)})
    assert len(places) > 10_000
    values: list[Any] = [None, True, 1, -1, 1.5, "x", [], [1], [1, 2], {}, {"a": [1]}, [[1]],
                         [None], ["x"], [{}], [[]], [-5], [1.5], [{"a": 1}]]  # fmt: skip
    refused = 0
    for _ in range(3000):
        place = rng.choice(places)
        if rng.random() < 0.2:
            place = (*place[:-1], rng.choice(["zz", "999", "-1", "01", "²", ""]))
        change: Any = rng.choice(values)
        for key in reversed(place):
            change = {key: change}
        try:
            apply_change(RecordedTick, tick, change, "t: ")
        except Malformed as e:
            refused += 1
            assert "\n" not in str(e) and str(e).startswith("t: ")
    assert 0 < refused < 3000
    assert tick == before
