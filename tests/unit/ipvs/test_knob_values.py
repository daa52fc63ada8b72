"""IPVS knob objects and values: what the journal stores must parse back to the same thing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lbtune.errors import BadInput
from lbtune.host.ipvs.table import (
    F_ONEPACKET,
    F_PERSISTENT,
    F_SCHED1,
    DestSettings,
    ServiceSettings,
)
from lbtune.tune.knobs.ipvs import (
    AddressKnob,
    IpvsDestKnob,
    IpvsDrainKnob,
    IpvsServiceKnob,
    IpvsTimeoutKnob,
    dest_text,
    parse_dest_text,
    parse_service_text,
    service_text,
)
from lbtune.tune.registry import knob_from_record

services = st.builds(
    ServiceSettings,
    st.sampled_from(["rr", "wrr", "sh", "mh", "lc"]),
    st.sampled_from([0, F_PERSISTENT, F_ONEPACKET, F_SCHED1, F_PERSISTENT | F_SCHED1]),
    st.integers(0, 2147483), st.integers(1, 32), st.sampled_from(["", "sip"]))
dests = st.builds(DestSettings, st.integers(0, 65535), st.sampled_from(["dr", "tunnel", "masq"]),
                  st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1))


@given(services)
def test_service_values_round_trip(s):
    assert parse_service_text(4, service_text(4, s), "t") == s


@given(dests)
def test_dest_values_round_trip(d):
    assert parse_dest_text(dest_text(d), "t") == d


@pytest.mark.parametrize(("kind", "obj"), [
    ("ipvs_service", "tcp:10.0.0.1:80"), ("ipvs_service", "fwmark:3:inet6"),
    ("ipvs_dest", "tcp:[2001:db8::1]:443/[2001:db8::2]:443"),
    ("ipvs_drain", "udp:10.0.0.1:53/10.0.0.2:53"), ("ipvs_timeout", "tcpfin"),
    ("address", "lo:2001:db8::1/128"), ("address", "eth0:10.0.0.100/32"),
])
def test_journal_records_rebuild_the_knob(kind, obj):
    knob = knob_from_record(kind, obj)
    assert (knob.kind, knob.obj) == (kind, obj)


@pytest.mark.parametrize(("cls", "obj"), [
    (IpvsServiceKnob, "tcp:10.0.0.1"), (IpvsDestKnob, "tcp:10.0.0.1:80"),
    (IpvsDestKnob, "tcp:10.0.0.1:80/x:80"), (IpvsTimeoutKnob, "icmp"),
    (AddressKnob, "lo:10.0.0.1"), (AddressKnob, "10.0.0.1/32"), (AddressKnob, "lo:10.0.0.1/33"),
    (AddressKnob, "lo:nope/32"),
])
def test_damaged_journal_objects_are_bad_input(cls, obj):
    with pytest.raises(BadInput):
        cls(obj)


def test_values_compare_by_meaning_not_spelling():
    d = IpvsDestKnob("tcp:10.0.0.1:80/10.0.0.2:80")
    assert d.same("weight=1   fwd=dr", "fwd=dr weight=1")
    assert d.same("absent", " absent ")
    assert not d.same("absent", "weight=1 fwd=dr")
    drain = IpvsDrainKnob("tcp:10.0.0.1:80/10.0.0.2:80")
    assert drain.same(None, "0")  # drained, then deleted by the same plan: done
    assert not drain.same(None, "3")


@pytest.mark.parametrize("value", ["weight=1 weight=2", "weight=70000", "fwd=nat", "x=1", "w"])
def test_bad_dest_values(value):
    with pytest.raises(BadInput):
        IpvsDestKnob("tcp:10.0.0.1:80/10.0.0.2:80").check(None, value)  # type: ignore[arg-type]
