"""A recorded tick decodes into the very sample that was recorded, and a value that does not
fit is named by its place in the tick (the 48-CPU fixture: every type a sample holds)."""

from __future__ import annotations

import copy
import json
from typing import Any, Callable, Optional

import pytest

from lbtune.diagnose.rules import sample_spec
from lbtune.host.host import Host
from lbtune.observe.model import Sample
from lbtune.observe.probes import DropCount, NapiCount, ProbeSample
from lbtune.observe.recording import Malformed, decode, encode
from lbtune.observe.sampler import Sampler
from lbtune.tui.feed import monitor_rules
from tests.conftest import DELL, HOSTS


@pytest.fixture(scope="module")
def sample() -> Sample:
    host = Host.open(str(HOSTS / DELL))
    return Sampler(host, None, sample_spec(monitor_rules())).take()


def test_a_big_hosts_sample_reads_back_equal(sample):
    data = json.loads(json.dumps(encode(sample)))  # what a recording's line holds
    back = decode(Sample, data, "t: sample")
    assert back == sample
    assert len(back.interrupts) > 100 and all(type(k) is int for k in back.interrupts)
    assert back.nics["ens1f0np0"].queues == sample.nics["ens1f0np0"].queues


def test_probe_counts_read_back_equal():
    probes = ProbeSample(("drops", "napi"), 1.0,
                         (DropCount("NO_SOCKET", 2, "__udp4_lib_rcv+0x5b4", "__udp4_lib_rcv",
                                    "IPv4", 7),),
                         0, "host", (), (NapiCount("eth0", 0, "0xff", 1, 3, 2, 9, 0, 0, 64),),
                         0, ())  # fmt: skip
    data = json.loads(json.dumps(encode(probes)))
    assert decode(Optional[ProbeSample], data) == probes
    assert decode(Optional[ProbeSample], None) is None


def _set(path: list[Any], value: Any) -> Callable[[Any], None]:
    def change(doc: Any) -> None:
        for p in path[:-1]:
            doc = doc[p]
        doc[path[-1]] = value

    return change


def _key(path: list[Any], key: str) -> Callable[[Any], None]:
    def change(doc: Any) -> None:
        for p in path:
            doc = doc[p]
        doc[key] = next(iter(doc.values()))

    return change


def _drop(path: list[Any]) -> Callable[[Any], None]:
    def change(doc: Any) -> None:
        for p in path[:-1]:
            doc = doc[p]
        del doc[path[-1]]

    return change


@pytest.mark.parametrize(
    "change, message",
    [
        (_set(["monotonic"], "soon"), "t: sample.monotonic: expected a number"),
        (_set(["nics", "ens1f0np0", "queues", 3, "packets"], "many"),
         "t: sample.nics[ens1f0np0].queues[3].packets: expected an integer"),
        (_set(["nics", "ens1f0np0", "queues", 3, "packets"], True),
         "t: sample.nics[ens1f0np0].queues[3].packets: expected an integer"),
        (_set(["softnet", 2], [1, 2]), "t: sample.softnet[2]: expected an object for SoftnetCpu"),
        (_drop(["softnet", 0, "cpu"]), "t: sample.softnet[0]: no cpu"),
        (_key(["interrupts"], "x1"), "t: sample.interrupts: key 'x1' is not an integer"),
        (_set(["snmp", "values", "Udp.NoPorts"], 1.5),
         "t: sample.snmp.values[Udp.NoPorts]: expected an integer"),
        (_set(["softnet"], {}), "t: sample.softnet: expected a list"),
        (_set(["missing"], []), "t: sample.missing: expected an object"),
        (_set(["config_readonly"], [1]), "t: sample.config_readonly: expected a string"),
        (_set(["interrupts", "62", "counts", "0"], 2**70),
         "t: sample.interrupts[62].counts: a count out of range"),
        (_set(["interrupts", "62", "counts", "0"], "x"),
         "t: sample.interrupts[62].counts[0]: expected an integer"),
        (_set(["interrupts", "62", "counts", "0"], False),
         "t: sample.interrupts[62].counts[0]: expected an integer"),
        (_key(["interrupts", "62", "counts"], "01"),
         "t: sample.interrupts[62].counts: a CPU named twice"),
        (_set(["interrupts", "62", "counts"], [1]),
         "t: sample.interrupts[62].counts: expected an object"),
    ],
)  # fmt: skip
def test_a_value_that_does_not_fit_is_named_by_its_place(sample, change, message):
    data = json.loads(json.dumps(encode(sample)))
    bad = copy.deepcopy(data)
    change(bad)
    with pytest.raises(Malformed) as e:
        decode(Sample, bad, "t: sample")
    assert str(e.value) == message
    assert decode(Sample, data, "t: sample") == sample  # (the decoders kept nothing of it)
