"""Hypothesis: any document, however hostile, is a config or one BadInput line, never a crash."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lbtune.errors import BadInput
from lbtune.ipvs.config import parse_config, parse_config_text

scalars = st.one_of(
    st.integers(min_value=-(2**64), max_value=2**64), st.booleans(), st.floats(),
    st.text(max_size=40), st.sampled_from(["10.0.0.1", "2001:db8::1", "eth0", "rr", "sh-port",
                                           "fwmark", "inet6", "udp", "tcp", "dr", "ops", ""]),
)
keys = st.sampled_from(["protocol", "address", "port", "fwmark", "family", "scheduler", "flags",
                        "persistence", "persistence_netmask", "forward", "real_server",
                        "weight", "upper", "lower", "dev", "prefix", "prune", "drain_timeout",
                        "tcp", "tcpfin", "udp", "conn_reuse_mode", "x"])
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=5)), max_leaves=20)
documents = st.dictionaries(
    st.sampled_from(["director", "timeouts", "sysctl", "vip", "service", "other"]),
    values, max_size=5)


def _ok_or_bad_input(fn: Any, *args: Any) -> None:
    try:
        fn(*args)
    except BadInput as e:
        assert "\n" not in str(e) and str(e)


@settings(max_examples=400, deadline=None)
@given(documents)
def test_any_document_parses_or_says_why(doc):
    _ok_or_bad_input(parse_config, doc, "fuzz.toml")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_text_parses_or_says_why(text):
    _ok_or_bad_input(parse_config_text, text, "fuzz.toml")


real = st.fixed_dictionaries({"address": st.sampled_from(["10.0.0.11", "2001:db8::11", "x"])},
                             optional={"port": st.integers(-1, 70000),
                                       "weight": st.integers(-5, 70000),
                                       "upper": st.integers(-1, 5), "lower": st.integers(-1, 5),
                                       "forward": st.sampled_from(["dr", "tunnel", "nat"])})
service = st.fixed_dictionaries(
    {"address": st.sampled_from(["10.0.0.1", "2001:db8::1"]), "port": st.integers(0, 70000)},
    optional={"protocol": st.sampled_from(["tcp", "udp", "sctp", "fwmark", "gre"]),
              "scheduler": st.sampled_from(["rr", "wrr", "sh", "mh", "zz"]),
              "flags": st.lists(st.sampled_from(["sh-port", "mh-port", "ops", "flag-3", "x"])),
              "persistence": st.integers(-1, 10**8),
              "persistence_netmask": st.integers(0, 200),
              "real_server": st.lists(real, max_size=3)})


@settings(max_examples=400, deadline=None)
@given(st.lists(service, max_size=4))
def test_near_valid_services_parse_or_say_why(services):
    _ok_or_bad_input(parse_config, {"service": services}, "fuzz.toml")
