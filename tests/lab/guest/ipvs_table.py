"""Runs inside the lab guest: the IPVS table alone (no traffic), in the init namespace.

`export` re-imported with `ipvsadm -R` rebuilds the same table (thresholds, flags,
persistence, fwmark and IPv6 services, timeouts), and fuzzed configs never crash lbtune nor
change the kernel unless they are valid.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

from tests.conftest import run_cli

RICH = """
[timeouts]
tcp = 600
tcpfin = 40
udp = 90

[sysctl]
expire_nodest_conn = 1

[[vip]]
address = "10.7.0.1"
dev = "lo"

[[vip]]
address = "2001:db8::1"
dev = "lo"

[[service]]
address = "10.7.0.1"
port = 80
scheduler = "wrr"
persistence = 300
persistence_netmask = 24
  [[service.real_server]]
  address = "10.7.1.1"
  weight = 3
  upper = 1000
  lower = 800
  [[service.real_server]]
  address = "10.7.1.2"
  weight = 0

[[service]]
protocol = "udp"
address = "10.7.0.1"
port = 53
scheduler = "sh"
flags = ["sh-port", "sh-fallback", "ops"]
  [[service.real_server]]
  address = "10.7.1.1"

[[service]]
protocol = "sctp"
address = "10.7.0.1"
port = 3868
scheduler = "lc"
  [[service.real_server]]
  address = "10.7.1.3"

[[service]]
address = "2001:db8::1"
port = 443
scheduler = "mh"
flags = ["mh-port"]
persistence = 60
persistence_netmask = 64
  [[service.real_server]]
  address = "2001:db8::11"
  weight = 7

[[service]]
protocol = "fwmark"
fwmark = 7
scheduler = "rr"
  [[service.real_server]]
  address = "10.7.1.4"

[[service]]
protocol = "fwmark"
fwmark = 8
family = "inet6"
scheduler = "rr"
  [[service.real_server]]
  address = "2001:db8::12"
"""


def sh(*argv: str, stdin: str = "") -> str:
    return subprocess.run(list(argv), input=stdin, capture_output=True, text=True,
                          check=True).stdout


def snapshot() -> dict[str, Any]:
    """The kernel's table as lbtune reads it (every field), the timeouts, and ipvsadm -S."""
    r = run_cli("ipvs", "status", "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json
    services = [{k: v for k, v in s.items()
                 if k not in ("counters", "active", "inactive")} for s in doc["services"]]
    for s in services:
        s["real_servers"] = [{k: v for k, v in x.items()
                              if k not in ("counters", "active", "inactive", "persistent")}
                             for x in s["real_servers"]]
    addrs = sh("ip", "-br", "addr", "show", "dev", "lo")
    return {"services": services, "timeouts": doc["timeouts"],
            "saved": sh("ipvsadm", "-S", "-n"), "lo": addrs}


def export_round_trip() -> dict[str, Any]:
    with open("/tmp/rich.toml", "w") as f:
        f.write(RICH)
    out: dict[str, Any] = {"apply": run_cli("ipvs", "apply", "/tmp/rich.toml").stderr}
    out["applied"] = snapshot()
    exp = run_cli("ipvs", "export", "/tmp/rich.toml")
    out["export"] = exp.stdout
    exp_kernel = run_cli("ipvs", "export")
    out["export_kernel"] = exp_kernel.stdout
    sh("ipvsadm", "-C")
    sh("ipvsadm", "--set", "900", "120", "300")  # back to the defaults before the restore
    out["flushed"] = snapshot()
    out["restore"] = subprocess.run(["ipvsadm", "-R"], input=exp.stdout, capture_output=True,
                                    text=True, check=False).returncode
    out["restored"] = snapshot()
    again = run_cli("ipvs", "apply", "/tmp/rich.toml", "--json")
    out["again"] = again.json["operations"] if again.exit_code == 0 else again.stderr
    return out


# -- fuzz ----------------------------------------------------------------------------------


def toml(doc: Any, path: tuple[str, ...] = ()) -> str:
    """A small TOML writer for the fuzzer's documents (tables, arrays of tables, values)."""
    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v) if v == v and v not in (float("inf"), float("-inf")) else "nan"
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return "{" + ", ".join(f"{json.dumps(k)} = {value(x)}" for k, x in v.items()) + "}"

    lines, tables = [], []
    for k, v in doc.items():
        if isinstance(v, dict) and v:
            tables.append((k, v, False))
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            tables.append((k, v, True))
        else:
            lines.append(f"{json.dumps(k)} = {value(v)}")
    for k, v, many in tables:
        name = ".".join(json.dumps(p) for p in (*path, k))
        for item in (v if many else [v]):
            lines.append(f"\n[[{name}]]" if many else f"\n[{name}]")
            lines.append(toml(item, (*path, k)))
    return "\n".join(lines)


def fuzz(examples: int) -> dict[str, Any]:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from tests.unit.ipvs.test_config_fuzz import documents, service

    base = "/tmp/base.toml"
    with open(base, "w") as f:
        f.write(RICH)
    assert run_cli("ipvs", "apply", base).exit_code == 0
    before = snapshot()
    seen: dict[str, int] = {}
    problems: list[dict[str, Any]] = []
    # the kernel's state after a refused document, which is also the state before the next
    # one (nothing runs in between): snapshot() costs three reads, most documents are refused
    last: list[dict[str, Any]] = []

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.one_of(documents, st.lists(service, min_size=1, max_size=3).map(
        lambda s: {"service": s, "vip": [{"address": "10.7.0.1", "dev": "lo"}]})))
    def one(doc: Any) -> None:
        text = toml(doc)
        with open("/tmp/fuzz.toml", "w") as f:
            f.write(text)
        prev = last.pop() if last else snapshot()
        r = run_cli("ipvs", "apply", "/tmp/fuzz.toml")
        seen[str(r.exit_code)] = seen.get(str(r.exit_code), 0) + 1
        bad = "Traceback" in r.stderr or r.exit_code not in (0, 2, 4)
        if r.exit_code != 0:
            last.append(snapshot())
            if last[0] != prev:
                bad = True
        if bad:
            problems.append({"config": text, "code": r.exit_code, "stderr": r.stderr[-500:]})
        if r.exit_code == 0:  # a valid document: put the base table back for the next one
            assert run_cli("ipvs", "apply", base).exit_code == 0

    one()
    after = snapshot()
    return {"exit_codes": seen, "problems": problems[:5], "n_problems": len(problems),
            "unchanged": {k: after[k] == before[k] for k in ("services", "timeouts", "saved")}}


def run(examples: int) -> dict[str, Any]:
    subprocess.run(["modprobe", "ip_vs"], check=True)
    import os

    os.environ["LBTUNE_STATE_DIR"] = "/tmp/lbtune-state"
    return {"export": export_round_trip(), "fuzz": fuzz(examples)}
