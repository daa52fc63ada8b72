"""The common real server is checked by a fast path: it gives the same real server (key and
settings included) or the same error as the general checks, which an explicit
`forward = "dr"` (the service's default) forces."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lbtune.errors import BadInput
from lbtune.ipvs.config import parse_config

addresses = st.sampled_from(["10.0.0.11", "192.0.2.255", "0.0.0.0", "010.0.0.1", "10.0.0",
                             "[10.0.0.1]", " 10.0.0.1", "2001:db8::1", "256.1.1.1", "", 7])
ints = st.one_of(st.integers(-2, 70000), st.sampled_from([True, "80", 1.0]))
reals = st.fixed_dictionaries({"address": addresses}, optional={
    "port": st.one_of(st.just(80), ints), "weight": ints,
    "agent": st.sampled_from(["", "none", "http://x/", "ftp://x"]),
    "upper": st.integers(0, 5), "bogus": st.just(1)})
services = st.fixed_dictionaries({"address": st.sampled_from(["10.0.0.100", "2001:db8::9"]),
                                  "port": st.just(80)},
                                 optional={"protocol": st.sampled_from(["tcp", "fwmark"])})


def outcome(doc: dict[str, Any]) -> Any:
    try:
        cfg = parse_config(doc, "t.toml")
    except BadInput as e:
        return str(e)
    return [(rs, rs.key, rs.settings) for s in cfg.services for rs in s.servers]


@settings(max_examples=400, deadline=None)
@given(services, st.lists(reals, max_size=3))
def test_fast_path_agrees_with_the_general_checks(svc, servers):
    if svc.get("protocol") == "fwmark":
        svc = {"protocol": "fwmark", "fwmark": 1}
    fast = {"service": [{**svc, "real_server": servers}]}
    general = {"service": [{**svc, "real_server": [{**r, "forward": "dr"} for r in servers]}]}
    assert outcome(fast) == outcome(general)
