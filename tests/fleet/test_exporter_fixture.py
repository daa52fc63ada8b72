"""`lbtune exporter` on fixture trees: the series budget, bounded labels, opt-ins, sources
that cannot be read, counters as accumulated window deltas, and `promtool check metrics`
on every output."""

from __future__ import annotations

import json
import re
import sys

import pytest

from lbtune.exporter.collect import Exporter
from lbtune.exporter.series import Collection, Options, Totals, counter_deltas
from lbtune.host.host import Host
from lbtune.host.runtime import Runtime
from lbtune.observe.sampler import Sampler
from lbtune.observe.window import Window
from tests.conftest import DELL, HOSTS, TINY, copy_host, run_cli
from tests.fleet.conftest import REPO, check_metrics, parse

BUDGET = 1000  # series by default on the 48-CPU, 2-NIC fixture (docs/fleet.md)


def _export(root, *args: str) -> str:
    r = run_cli("--root", str(root), "exporter", "--once", *args)
    assert r.exit_code == 0, r.stderr
    check_metrics(r.stdout)
    return r.stdout


def _series(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_default_series_fit_the_budget_on_the_48_cpu_fixture_and_docs_state_the_count():
    text = _export(HOSTS / DELL)
    n = len(_series(text))
    assert n <= BUDGET
    m = parse(text)
    # 48 CPUs x 3 softnet counters, every drop cause, the NICs, the findings.
    assert len(m["lbtune_softnet_dropped_total"]) == 48
    assert len(m["lbtune_drops_total"]) == 12
    devices = {dict(k)["device"] for k in m["lbtune_nic_drops_total"]}
    assert devices == {"eno1", "ens1f0np0", "ens1f1np1"}
    assert "lbtune_nic_queue_packets_total" not in m  # per-queue is opt-in
    assert "lbtune_softnet_received_rps_total" not in m  # so are RPS and flow limit
    assert m["lbtune_up"] == {frozenset(): 1.0}
    assert m["lbtune_drops_total"][frozenset({("cause", "accept_queue")})] == 48211
    finding = frozenset({("rule", "accept-queue-overflow"), ("level", "fail"),
                         ("object", "tcp 0.0.0.0:80")})  # fmt: skip
    assert m["lbtune_finding"][finding] == 1.0
    docs = (REPO / "docs" / "fleet.md").read_text()
    assert f"**{n} series**" in docs, f"docs/fleet.md must state the count: {n} series"


def test_every_opt_in_at_once_stays_bounded_and_docs_state_the_count():
    text = _export(HOSTS / DELL, "--softnet-all", "--queues", "eno1,ens1f0np0,ens1f1np1",
                   "--listeners", "100")  # fmt: skip
    n = len(_series(text))
    m = parse(text)
    assert len(m["lbtune_softnet_received_rps_total"]) == 48
    assert {dict(k)["device"] for k in m["lbtune_nic_queue_packets_total"]} == {
        "eno1", "ens1f0np0", "ens1f1np1"}
    assert n <= 2 * BUDGET
    docs = (REPO / "docs" / "fleet.md").read_text()
    assert f"**{n} series** with every opt-in" in docs


def test_per_queue_series_only_for_the_interfaces_named():
    m = parse(_export(HOSTS / DELL, "--queues", "ens1f0np0"))
    devices = {dict(k)["device"] for k in m["lbtune_nic_queue_packets_total"]}
    assert devices == {"ens1f0np0"}
    r = run_cli("--root", str(HOSTS / DELL), "exporter", "--once", "--queues", "nosuch0")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "nosuch0" in r.stderr


def test_listeners_are_the_fullest_n_and_bounded():
    m = parse(_export(HOSTS / DELL, "--listeners", "2"))
    fill = m["lbtune_listen_queue_fill_ratio"]
    assert len(fill) == 2
    assert fill[frozenset({("listener", "0.0.0.0:80")})] > 1.0  # 129 queued over 128
    assert len(m["lbtune_listen_drops_total"]) == 2
    for bad in ("101", "-1"):
        r = run_cli("--root", str(HOSTS / DELL), "exporter", "--once", "--listeners", bad)
        assert r.exit_code == 2 and "--listeners" in r.stderr


def test_profile_drift_is_the_drifted_knob_count_of_verify():
    args = ("--root", str(HOSTS / DELL))
    verify = run_cli(*args, "verify", "lb-dr", "--iface", "ens1f0np0", "--json")
    drifted = sum(1 for k in verify.json["knobs"] if k["status"] in ("drift", "missing"))
    assert drifted > 0
    m = parse(_export(HOSTS / DELL, "--profile", "lb-dr", "--iface", "ens1f0np0"))
    assert m["lbtune_profile_in_sync"] == {frozenset({("profile", "lb-dr")}): 0.0}
    assert m["lbtune_profile_drifted_knobs"] == {frozenset({("profile", "lb-dr")}): drifted}
    r = run_cli(*args, "exporter", "--once", "--profile", "no-such-profile")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1


def test_an_unreadable_source_is_reported_down_and_has_no_series(tmp_path):
    """softnet_stat there but unreadable: down (0). nf_conntrack not loaded (its files
    absent) and no IPVS (not a director): the host does not have them, which is not a
    failure: no `lbtune_source_up` series at all, like their other series."""
    root = copy_host(tmp_path, DELL)
    for path in ("proc/net/stat/nf_conntrack", "proc/sys/net/netfilter/nf_conntrack_count",
                 "proc/sys/net/netfilter/nf_conntrack_max"):  # fmt: skip
        (root / path).unlink(missing_ok=True)
    (root / "proc/net/softnet_stat").write_text("garbage\n")
    assert parse(_export(root))["lbtune_source_up"][frozenset({("source", "ipvs")})] == 1.0
    (root / "proc/net/ip_vs_stats").unlink()  # not a director
    m = parse(_export(root))
    up = {dict(k)["source"]: v for k, v in m["lbtune_source_up"].items()}
    assert up["softnet"] == 0.0 and up["snmp"] == 1.0
    assert "conntrack" not in up and "ipvs" not in up
    assert set(up.values()) == {0.0, 1.0} and [s for s, v in up.items() if v == 0] == ["softnet"]
    assert not any(k.startswith("lbtune_conntrack") for k in m)
    assert not any(k.startswith("lbtune_softnet") for k in m)
    causes = {dict(k)["cause"] for k in m["lbtune_drops_total"]}
    assert "conntrack" not in causes and "cpu_backlog" not in causes  # absent, not zero
    assert "accept_queue" in causes


def test_textfile_is_written_whole_and_nothing_else_is_left(tmp_path):
    out = tmp_path / "textfile"
    out.mkdir()
    r = run_cli("--root", str(HOSTS / TINY), "exporter", "--textfile", str(out), "--once")
    assert r.exit_code == 0, r.stderr
    assert [p.name for p in out.iterdir()] == ["lbtune.prom"]
    check_metrics((out / "lbtune.prom").read_text())
    r = run_cli("--root", str(HOSTS / TINY), "exporter", "--textfile", str(tmp_path / "no"))
    assert r.exit_code == 2 and "not a directory" in r.stderr


@pytest.mark.parametrize("args", [
    ("--listen", "nowhere"), ("--listen", "127.0.0.1:70000"), ("--listen", "host:80"),
    ("--interval", "0"), ("--min-interval", "2h"), ("--drop-locations",),
    ("--textfile", "/tmp", "--listen", "127.0.0.1:1"),
])  # fmt: skip
def test_bad_options_are_one_line_and_exit_2(args):
    r = run_cli("--root", str(HOSTS / TINY), "exporter", "--once", *args)
    assert r.exit_code == 2, (args, r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_without_prometheus_client_exit_3_with_the_install_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import fails
    r = run_cli("--root", str(HOSTS / TINY), "exporter", "--once", "--json")
    assert r.exit_code == 3
    err = json.loads(r.stdout)["error"]["message"]
    assert "prometheus_client" in err and "lbtune[exporter]" in err


# ----------------------------------------------------------------------- counters (pure)


def _sample(tmp_path, name: str, noports: int):
    """A real sample of the tiny fixture with Udp NoPorts set to `noports`."""
    root = copy_host(tmp_path, TINY, dest=name)
    snmp = (root / "proc/net/snmp").read_text()
    lines = snmp.splitlines()
    for i in range(0, len(lines) - 1, 2):
        if lines[i].startswith("Udp: ") and lines[i + 1].startswith("Udp: "):
            head, vals = lines[i].split(), lines[i + 1].split()
            vals[head.index("NoPorts")] = str(noports)
            lines[i + 1] = " ".join(vals)
    (root / "proc/net/snmp").write_text("\n".join(lines) + "\n")
    return Sampler(Host.open(str(root))).take()


def test_counters_are_window_deltas_seeded_since_boot_and_never_go_back(tmp_path):
    a, b, c = (_sample(tmp_path, n, v) for n, v in (("a", 100), ("b", 130), ("c", 7)))
    totals = Totals()
    key = ("lbtune_drops_total", ("udp_no_port",))
    seen = []
    for w in (Window(None, a), Window(a, b), Window(b, c)):
        col = Collection(w, ())
        totals.add(counter_deltas(col, Options(), totals), {k for k, _ in [key]})
        seen.append(totals.values[key])
    # since boot 100, then +30, then the counter reset to 7: counted from zero, +7
    assert seen == [100, 130, 137]


def test_scrapes_of_a_recorded_tree_report_its_counters_once_not_summed_per_scrape():
    """`lbtune --root TREE exporter` serving HTTP: each scrape reads the same capture since
    boot, so a counter is the capture's value at every scrape (it used to grow by the whole
    since-boot count per scrape: 25382, 50764, 76146 ...)."""
    exp = Exporter(Runtime(root=str(HOSTS / DELL)), min_interval=0)
    try:
        texts = [exp.scrape().text.decode() for _ in range(3)]
    finally:
        exp.close()
    counters = [{line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
                 for line in _series(t) if line.split("{")[0].endswith("_total")}
                for t in texts]  # fmt: skip
    drops = 'lbtune_drops_total{cause="nic_ring"}'
    assert counters[0][drops] > 0
    assert counters[0] == counters[1] == counters[2]


def test_exporter_help_lists_in_the_readme():
    readme = (REPO / "README.md").read_text()
    assert re.search(r"\|\s*`lbtune exporter", readme)


def test_every_drop_cause_and_series_family_is_documented():
    from lbtune.exporter.series import COUNTER_FAMILIES
    from lbtune.observe.dropcauses import DROP_CAUSES

    docs = (REPO / "docs" / "fleet.md").read_text()
    slugs = [c.slug for c in DROP_CAUSES]
    assert len(set(slugs)) == len(slugs)
    assert [s for s in slugs if f"`{s}`" not in docs] == []
    short = {f.replace("lbtune_softnet_", "_") for f in COUNTER_FAMILIES}  # softnet rows abridge
    missing = [f for f in sorted(short) if f.startswith("lbtune_") and f"`{f}`" not in docs]
    assert missing == []


def test_findings_by_level_and_the_finding_series_are_named_apart():
    """`lbtune_findings` and `lbtune_finding` differed by one letter: the count per level is
    `lbtune_findings_by_level` now (a gauge: not `_total`, and `_count` is reserved)."""
    m = parse(_export(HOSTS / DELL))
    assert "lbtune_findings" not in m
    by_level = {dict(k)["level"]: v for k, v in m["lbtune_findings_by_level"].items()}
    assert by_level == {"fail": 9.0, "warn": 5.0, "info": 0.0}
    assert len(m["lbtune_finding"]) == 12  # 14 findings, two with the same labels


def test_a_finding_without_a_port_is_labelled_by_its_protocol():
    """Counters alone cannot name the port of `udp-no-port`: the finding says "udp port
    unknown"; its label value is the protocol alone, `udp` (as `tcp` for timewait)."""
    from lbtune.diagnose.finding import Finding
    from lbtune.exporter.series import families
    from lbtune.vocab import Level

    host = Host.open(str(HOSTS / DELL))
    sample = Sampler(host, None).take()
    found = [Finding("udp-no-port", "UDP datagrams to a port nothing listens on", Level.WARN,
                     "udp port unknown", "", 220, "datagrams", 73.1, (), ()),
             Finding("tcp-no-port", "TCP segments to a port nothing listens on", Level.WARN,
                     "tcp 10.0.0.5:443", "", 50, "segments", 20.0, (), ())]  # fmt: skip
    fams = {f.name: f for f in families(Collection(Window(None, sample), found), Options(),
                                        Totals())}  # fmt: skip
    objects = {labels[2] for labels, _ in fams["lbtune_finding"].samples}
    assert objects == {"udp", "tcp 10.0.0.5:443"}


def test_host_wide_series_are_left_out_of_a_namespace_unless_asked(tmp_path):
    """softnet_stat (and the cpu_backlog cause made of it) are the host's, whatever the
    namespace: an exporter per namespace repeated them. In a namespace's view (a capture of
    one here; `--netns` live) they are left out; `--host-series` puts them back."""
    root = copy_host(tmp_path, DELL)
    (root / "lbtune-capture.json").write_text(json.dumps({"netns": "web1"}))
    m = parse(_export(root))
    assert not any(k.startswith("lbtune_softnet") for k in m)
    causes = {dict(k)["cause"] for k in m["lbtune_drops_total"]}
    assert "cpu_backlog" not in causes and "accept_queue" in causes
    up = {dict(k)["source"]: v for k, v in m["lbtune_source_up"].items()}
    assert "softnet" not in up
    m = parse(_export(root, "--host-series"))
    assert len(m["lbtune_softnet_dropped_total"]) == 48
    assert m["lbtune_drops_total"][frozenset({("cause", "cpu_backlog")})] == 94551
    m = parse(_export(HOSTS / DELL))  # the host's own view: always there
    assert len(m["lbtune_softnet_dropped_total"]) == 48


def _with_stat(host: str, dev: str, **values: int) -> dict[str, str]:
    """`ethtool -S DEV` of fixture `host` with the named counters set."""
    path = f"/sos_commands/networking/ethtool_-S_{dev}"
    lines = (HOSTS / host / path.lstrip("/")).read_text().splitlines()
    out = []
    for line in lines:
        name = line.split(":", 1)[0].strip()
        if name in values:
            line = f"     {name}: {values.pop(name)}"
        out.append(line)
    assert not values, f"not in {dev}'s statistics: {values}"
    return {path: "\n".join(out) + "\n"}


def test_pause_frames_are_summed_per_direction_from_the_driver_s_own_names(tmp_path):
    # ixgbe (eno1): xon + xoff per direction; mlx5 (ens1f0np0): the physical port's counter
    files = {**_with_stat(DELL, "eno1", tx_flow_control_xon=7, tx_flow_control_xoff=35,
                          rx_flow_control_xoff=2),
             **_with_stat(DELL, "ens1f0np0", rx_pause_ctrl_phy=900)}  # fmt: skip
    m = parse(_export(copy_host(tmp_path, DELL, files)))
    pause = {(dict(k)["device"], dict(k)["direction"]): v
             for k, v in m["lbtune_nic_pause_frames_total"].items()}  # fmt: skip
    assert pause[("eno1", "tx")] == 42 and pause[("eno1", "rx")] == 2
    assert pause[("ens1f0np0", "rx")] == 900 and pause[("ens1f0np0", "tx")] == 0
    # a driver without pause counters has no series (the cloud ena fixture)
    from tests.conftest import AWS

    assert "lbtune_nic_pause_frames_total" not in parse(_export(HOSTS / AWS))


def test_rss_spread_gauges_from_the_recorded_tables(tmp_path):
    m = parse(_export(HOSTS / DELL))
    queues = {dict(k)["device"]: v for k, v in m["lbtune_nic_rss_queues"].items()}
    assert queues == {"eno1": 16, "ens1f0np0": 24, "ens1f1np1": 48}
    ratio = m["lbtune_nic_rss_busiest_queue_ratio"][frozenset({("device", "eno1")})]
    assert ratio == 1 / 16  # 512 entries, i % 16
    # a table kept over half the queues: the busiest queue holds twice the even share
    from tests.unit.diagnose.test_fix_profiles import via_setters

    def half(eth) -> None:  # type: ignore[no-untyped-def]
        eth.set_rxfh("ens1f0np0", indir=[i % 12 for i in range(256)])

    m = parse(_export(copy_host(tmp_path, DELL, via_setters(DELL, half))))
    key = frozenset({("device", "ens1f0np0")})
    assert m["lbtune_nic_rss_queues"][key] == 12
    assert m["lbtune_nic_rss_busiest_queue_ratio"][key] == round(22 / 256, 6)
    # virtio-net without RSS (a table of size 0): no gauge
    from tests.conftest import KVM

    assert "lbtune_nic_rss_queues" not in parse(_export(HOSTS / KVM))


def test_rss_spread_of_an_indirection_table() -> None:
    from lbtune.exporter.series import rss_spread
    from lbtune.host.net.rss import Rxfh

    assert rss_spread(Rxfh(indir=(0, 1, 2, 3) * 32)) == (4, 0.25)
    assert rss_spread(Rxfh(indir=(0,) * 96 + (1,) * 32)) == (2, 0.75)
    assert rss_spread(Rxfh(indir=())) is None and rss_spread(None) is None
