"""`--load` lint: each rule fires on the command it is about and stays quiet otherwise."""

from __future__ import annotations

import pathlib

import pytest

from lbtune.diagnose.loadlint import (
    LoadFacts,
    lint_load,
    parse_load,
    parse_port_list,
    planned_connections,
    read_load_facts,
    split_command,
)
from lbtune.diagnose.loadlint.rules import HOST_RULES
from lbtune.errors import BadInput, MalformedHostFile
from lbtune.host.fs import HostFS
from lbtune.host.net.sockdiag import ListenSocket
from tests.conftest import DELL, HOSTS, KVM, copy_host

# A client with the kernel's default port range and a large open-file limit.
CLIENT = LoadFacts(port_range=(32768, 60999), tw_reuse=2, nofile_soft=1048576)
# A web server whose port 80 listener has a backlog of 128.
SERVER = LoadFacts(
    port_range=(32768, 60999), somaxconn=4096, max_tw_buckets=8192, backlogs={80: 128}
)


def rules(command: str, role: str = "client", facts: LoadFacts = CLIENT) -> dict[str, str]:
    return {i.rule: i.level for i in lint_load(command, role, facts)}


def issue(command: str, rule: str, role: str = "client", facts: LoadFacts = CLIENT):  # type: ignore[no-untyped-def]
    hits = [i for i in lint_load(command, role, facts) if i.rule == rule]
    assert len(hits) == 1, [i.rule for i in lint_load(command, role, facts)]
    return hits[0]


# ------------------------------------------------------------------ ab


def test_ab_without_c_and_k_gives_two_findings() -> None:
    found = lint_load("ab -n 1000 http://x/", "client", CLIENT)
    assert {(i.rule, i.level) for i in found} == {
        ("ab-no-concurrency", "fail"),
        ("ab-no-keepalive", "warn"),
    }
    for i in found:
        assert i.why and i.fix and i.tool == "ab"
    assert "1000 requests" in issue("ab -n 1000 http://x/", "ab-no-keepalive").reason


def test_ab_with_keepalive_and_concurrency_is_clean() -> None:
    assert rules("ab -k -c 100 -n 100000 http://x/") == {}
    assert rules("ab -kc100 -n100000 http://x/") == {}  # clustered flags, attached values
    assert rules("ab -k -c 10 -t 30 http://x/") == {}  # -t implies -n 50000


def test_ab_refuses_more_concurrency_than_requests_or_its_maximum() -> None:
    # ab's -n defaults to 1: `ab -k -c 100 URL` exits with an error before sending anything.
    assert rules("ab -k -c 100 http://x/") == {"ab-concurrency-above-requests": "fail"}
    wide = LoadFacts(port_range=(1024, 65535), nofile_soft=1048576)
    assert rules("ab -k -c 30000 -n 1000000 http://x/", facts=wide) == {
        "ab-concurrency-max": "fail"
    }


def test_ab_without_keepalive_runs_out_of_ports_over_a_long_run() -> None:
    i = issue("ab -c 100 -n 100000 http://x/", "time-wait-exhausts-ports")
    assert i.level == "warn" and "100000" in i.reason and "28232" in i.reason
    assert "time-wait-exhausts-ports" not in rules("ab -c 100 -n 20000 http://x/")


# ------------------------------------------------------------------ wrk


def test_wrk_connections_above_a_16384_port_range_fail() -> None:
    facts = LoadFacts(port_range=(49152, 65535), nofile_soft=1048576)
    i = issue("wrk -t4 -c20000 -d30s http://x/", "connections-above-ports", facts=facts)
    assert i.level == "fail"
    assert "20000" in i.reason and "16384" in i.reason and "49152-65535" in i.reason
    assert "EADDRNOTAVAIL" in i.why
    # the default range has 28232 ports: 20000 fit (but use 70%, below the 80% warning)
    assert rules("wrk -t4 -c20000 -d30s http://x/") == {}


def test_wrk_reserved_ports_shrink_the_range() -> None:
    facts = LoadFacts(port_range=(32768, 60999), reserved_ports=10000, nofile_soft=1048576)
    assert (
        "18232" in issue("wrk -t4 -c20000 http://x/", "connections-above-ports", facts=facts).reason
    )


def test_wrk_near_the_port_range_warns() -> None:
    assert rules("wrk -t4 -c25000 http://x/") == {"connections-near-ports": "warn"}


def test_wrk_connection_counts_take_metric_suffixes() -> None:
    assert parse_load("wrk -t2 -c1k http://x/")[0].connections == 1000
    assert parse_load("wrk --connections=2K --threads 2 http://x/")[0].connections == 2000
    assert parse_load("wrk -t 2 -c 1m http://x/")[0].connections == 1000000
    assert parse_load("wrk http://x/")[0].connections == 10  # wrk's default
    with pytest.raises(BadInput, match="not a number"):
        parse_load("wrk -c lots http://x/")


def test_wrk_fewer_connections_than_threads_fails() -> None:
    assert rules("wrk -t8 -c4 http://x/") == {"wrk-connections-below-threads": "fail"}
    assert rules("wrk -t4 -c4 http://x/") == {}
    assert rules("wrk -c1 http://x/") == {"wrk-connections-below-threads": "fail"}  # 2 threads


def test_wrk_connections_above_the_server_backlog_fail_on_the_server() -> None:
    i = issue("wrk -t4 -c1000 http://vip/", "connections-above-backlog", role="web", facts=SERVER)
    assert i.level == "fail" and "port 80" in i.reason and "128" in i.reason
    assert "4096" in i.reason  # somaxconn named
    assert rules("wrk -t4 -c100 http://vip/", "web", SERVER) == {}
    # another port: that listener is not known
    assert rules("wrk -t4 -c1000 http://vip:8080/", "web", SERVER) == {}
    # on the client the backlog facts are not this host's
    assert "connections-above-backlog" not in rules("wrk -t4 -c1000 http://vip/", "client", SERVER)


def test_server_role_does_not_apply_client_limits() -> None:
    facts = LoadFacts(port_range=(49152, 65535), nofile_soft=1024)
    assert rules("wrk -t4 -c50000 http://x:81/", "web", facts) == {}


def test_wrk_open_file_limit_on_the_client() -> None:
    facts = LoadFacts(port_range=(1024, 65535), nofile_soft=1024)
    i = issue("wrk -t4 -c2000 http://x/", "connections-above-nofile", facts=facts)
    assert i.level == "fail" and "2000" in i.reason and "1024" in i.reason
    assert rules("wrk -t4 -c500 http://x/", facts=facts) == {}
    # `ulimit -n` earlier on the line raises the limit for the generator
    assert rules("ulimit -n 65536 && wrk -t4 -c2000 http://x/", facts=facts) == {}


def test_wrk_connection_close_header_and_wrk2_rate() -> None:
    assert rules("wrk -t2 -c10 -H 'Connection: close' http://x/") == {"no-keepalive": "warn"}
    assert rules("wrk2 -t2 -c100 http://x/") == {"wrk2-no-rate": "fail"}
    assert rules("wrk2 -t2 -c100 -R 2000 http://x/") == {}
    # a fixed rate without keep-alive: 2000/s x 60 s TIME_WAIT > 28232 ports
    r = rules("wrk2 -t2 -c100 -R2k -H 'Connection: close' http://x/")
    assert r == {"no-keepalive": "warn", "time-wait-exhausts-ports": "fail"}


# ------------------------------------------------------------------ httperf


def test_httperf_with_hog_is_clean() -> None:
    assert rules("httperf --hog --server x --num-conns 1000 --rate 100") == {}
    assert rules("httperf --ho --server=x --num-conns=1000 --rate=100") == {}  # unique prefix


def test_httperf_without_hog() -> None:
    i = issue("httperf --server x --num-conns 100000 --rate 1000", "httperf-no-hog")
    assert i.level == "fail" and "1024-5000" in i.reason and "3977" in i.reason
    assert "60000" in i.reason or "100000" in i.reason
    # the kernel's port range is not what httperf uses then: no second port finding
    assert rules("httperf --server x --num-conns 100000 --rate 1000") == {"httperf-no-hog": "fail"}
    assert rules("httperf --server x --num-conns 10") == {"httperf-no-hog": "warn"}


def test_httperf_time_wait_accounting() -> None:
    cmd = "httperf --hog --server x --num-conns 100000 --rate 1000"
    i = issue(cmd, "time-wait-exhausts-ports")
    assert i.level == "fail" and "60000" in i.reason and "28232" in i.reason
    reuse = LoadFacts(port_range=(32768, 60999), tw_reuse=1, nofile_soft=1048576)
    assert rules(cmd, facts=reuse) == {"time-wait-exhausts-ports": "warn"}
    # keep-alive calls do not change the connection rate: httperf closes each after its calls
    assert rules(cmd + " --num-calls 10") == {"time-wait-exhausts-ports": "fail"}
    # on the server, TIME_WAIT fills tcp_max_tw_buckets instead (8192 here)
    assert rules(cmd, "web", SERVER) == {"time-wait-buckets": "warn"}


# ------------------------------------------------------------------ vegeta


VEGETA = 'echo "GET http://x/" | vegeta attack -rate=50000 -duration=30s | vegeta report'


def test_vegeta_rate_without_file_descriptors_fails() -> None:
    facts = LoadFacts(port_range=(32768, 60999), nofile_soft=1024, nofile_hard=4096)
    i = issue(VEGETA, "vegeta-nofile", facts=facts)
    assert i.level == "fail"
    assert "50000" in i.reason and "1024" in i.reason and "12500" in i.reason
    assert "too many open files" in i.why
    assert rules(VEGETA) == {}  # with 1048576 descriptors


def test_vegeta_moderate_rate_warns_and_workers_bound_it() -> None:
    facts = LoadFacts(nofile_soft=1024)
    assert rules("vegeta attack -rate 2000 -targets t.txt", facts=facts) == {
        "vegeta-nofile": "warn"
    }
    assert rules("vegeta attack -rate=500/1s", facts=facts) == {}
    assert rules("vegeta attack -rate=50000 -max-workers=500", facts=facts) == {}
    assert rules("ulimit -n 100000; vegeta attack -rate=50000", facts=facts) == {}


def test_vegeta_rate_forms() -> None:
    assert parse_load("vegeta attack -rate=100/1ms")[0].rate == pytest.approx(100000)
    assert parse_load("vegeta attack --rate 60/1m")[0].rate == pytest.approx(1)
    assert parse_load("vegeta attack")[0].rate == pytest.approx(50)  # vegeta's default
    assert parse_load(VEGETA)[0].port == 80
    with pytest.raises(BadInput, match="not a rate"):
        parse_load("vegeta attack -rate=fast")


def test_vegeta_rate_zero_needs_max_workers() -> None:
    assert rules("vegeta attack -rate=0") == {"vegeta-rate-zero": "fail"}
    assert rules("vegeta attack -rate=0 -max-workers=100") == {}
    assert rules("vegeta attack -keepalive=false -rate 10") == {"no-keepalive": "warn"}


# ------------------------------------------------------------------ hey, h2load, oha


def test_hey_h2load_oha() -> None:
    assert rules("hey -n 10 -c 50 http://x/") == {"hey-requests-below-workers": "fail"}
    assert rules("hey -n 100000 -c 50 http://x/") == {}
    r = rules("hey -z 60s -c 50 -q 100 -disable-keepalive http://x/")
    assert r == {"no-keepalive": "warn", "time-wait-exhausts-ports": "fail"}  # 5000/s
    assert rules("h2load -c 2 -t 4 -n 1000 https://x/") == {"h2load-clients-below-threads": "fail"}
    assert rules("h2load -c 100 -n 10 https://x/") == {"h2load-requests-below-clients": "fail"}
    assert rules("h2load -n 1000 https://x/") == {"h2load-one-client": "warn"}
    assert rules("h2load -c 100 -t 4 -n 100000 https://x/") == {}
    assert rules("oha -z 30s -c 200 http://x/") == {}
    assert rules("oha --disable-keepalive -n 1000 http://x/") == {"no-keepalive": "warn"}


# ------------------------------------------------------------------ splitting and errors


def test_wrappers_are_looked_through() -> None:
    for cmd in (
        "sudo taskset -c 0-3 wrk -t8 -c4 http://x/",
        "taskset 0xf wrk -t8 -c4 http://x/",
        "ip netns exec client wrk -t8 -c4 http://x/",
        "FOO=1 numactl -N 0 -m 0 nice -n 5 wrk -t8 -c4 http://x/",
        "/usr/local/bin/wrk -t8 -c4 http://x/",
        "timeout 60 wrk -t8 -c4 http://x/",
    ):
        assert rules(cmd) == {"wrk-connections-below-threads": "fail"}, cmd


def test_split_keeps_quoted_pipes_and_splits_lists() -> None:
    assert split_command("wrk -H 'a|b' http://x/") == [["wrk", "-H", "a|b", "http://x/"]]
    assert split_command("a; b && c || d | e") == [["a"], ["b"], ["c"], ["d"], ["e"]]


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("", "empty command"),
        ("wrk -H 'Host: x", "cannot split"),
        ("curl http://x/", "no load generator"),
        ("vegeta report", "no load generator"),
        ("ab -n", "needs a value"),
        ("ab -c many http://x/", "not a number"),
    ],
)
def test_bad_commands_are_bad_input(command: str, message: str) -> None:
    with pytest.raises(BadInput, match=message):
        lint_load(command, "client", CLIENT)


def test_planned_connections() -> None:
    assert planned_connections(parse_load("wrk -t2 -c300 http://x/")) == 300
    assert (
        planned_connections(parse_load("wrk -t2 -c300 http://x/; ab -c 50 -n 99 http://y/")) == 350
    )
    assert planned_connections(parse_load("vegeta attack -rate 4000")) == 1000  # 4000/s x 250 ms
    assert planned_connections(parse_load("vegeta attack -rate 4000 -max-workers 300")) == 300
    assert planned_connections(parse_load("httperf --hog --server x --rate 400")) == 100
    assert planned_connections(parse_load("httperf --hog --server x")) is None


# ------------------------------------------------------------------ facts from a host tree


def test_read_load_facts_from_fixture_tree() -> None:
    fs = HostFS(str(HOSTS / DELL))
    listeners = [
        ListenSocket(4, "0.0.0.0", 80, 0, 511),
        ListenSocket(6, "::", 80, 0, 128),
        ListenSocket(4, "0.0.0.0", 443, 0, 4096),
    ]
    f = read_load_facts(fs, listeners, nofile=(1024, 524288))
    assert f.port_range == (32768, 60999)
    assert f.ephemeral_ports == 28232
    assert f.somaxconn == 4096
    assert f.backlogs == {80: 128, 443: 4096}  # the smaller of the v4 and v6 listener
    assert (f.nofile_soft, f.nofile_hard) == (1024, 524288)


def test_reserved_ports_count_inside_the_range(tmp_path: pathlib.Path) -> None:
    root = copy_host(tmp_path, KVM)
    (root / "proc/sys/net/ipv4/ip_local_reserved_ports").write_text("8080,40000-40999\n")
    f = read_load_facts(HostFS(str(root)))
    assert f.reserved_ports == 1000 and f.ephemeral_ports == 27232
    (root / "proc/sys/net/ipv4/ip_local_reserved_ports").write_text("40000-3\n")
    with pytest.raises(MalformedHostFile):
        read_load_facts(HostFS(str(root)))
    (root / "proc/sys/net/ipv4/ip_local_port_range").write_text("32768\n")
    with pytest.raises(MalformedHostFile, match="two ports"):
        read_load_facts(HostFS(str(root)))


def test_parse_port_list() -> None:
    assert parse_port_list("") == frozenset()
    assert parse_port_list("1,3-5") == {1, 3, 4, 5}
    with pytest.raises(ValueError):
        parse_port_list("5-3")


def test_every_host_rule_is_registered_once_and_documented() -> None:
    ids = [i for r in HOST_RULES for i in r.ids]
    assert len(ids) == len(set(ids)) and len(ids) >= 7
    text = (pathlib.Path(__file__).resolve().parents[3] / "docs" / "checklist.md").read_text()
    for rule_id in ids:
        assert f"| `{rule_id}`" in text, rule_id
