"""The X710 (i40e) fixture host: show, lb-dr's NIC families planned, applied, verified and
rolled back byte for byte, and i40e's one-input-set-per-flow-type rule for flow rules:
predicted at plan time (the rule is planned as unsettable, with the reason), refused by the
recordings as the driver refuses it. No qemu NIC has ntuple rules: this is proven on the
recorded tree only (tests/data/hosts/supermicro-x710-i40e/README.md names the sources)."""

from __future__ import annotations

import errno
import pathlib

import pytest

from lbtune.host.fs import HostFS
from lbtune.host.host import Host
from lbtune.host.net.ethtool import EthtoolIoctlError
from lbtune.host.net.rss import NtupleRule
from tests.conftest import X710, copy_host, run_cli

PORT, IDLE = "enp49s0f0", "enp49s0f1"
NET = "sos_commands/networking"
ADMIN = NtupleRule(7423, "tcp4", (("dst-port", "9100"),), 0)  # the administrator's rule


def files(root: pathlib.Path) -> dict[str, bytes]:
    """Every file of the tree but lbtune's own state (journals, the lock)."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink() and "var/lib/lbtune" not in str(p)
    }


def _profile(tmp_path: pathlib.Path, body: str, name: str = "t") -> str:
    p = tmp_path / f"{name}.toml"
    p.write_text(f'[profile]\nname = "{name}"\ndescription = "test"\n\n{body}')
    return str(p)


def _rules(root: pathlib.Path, dev: str = PORT) -> tuple[NtupleRule, ...]:
    rules = Host(HostFS(str(root))).ethtool.ntuple_rules(dev)
    assert rules is not None
    return rules


def test_show_prints_every_nic_family_of_the_i40e_port(hosts):
    r = run_cli("--root", str(hosts / X710), "show", "--iface", PORT)
    assert r.exit_code == 0, r.stderr
    out = r.stdout
    assert f"{PORT}  physical  driver i40e  pci 0000:31:00.0" in out
    assert "  rings rx 512/4096 tx 512/4096  channels combined 16/16 other 1/1" in out
    assert (
        "  coalesce adaptive-rx on, adaptive-tx on, rx-usecs 50, rx-frames-irq 256, "
        "tx-usecs 50, tx-frames-irq 256, rx-usecs-high 0, tx-usecs-high 0\n"
    ) in out
    assert "  pause autoneg off rx off tx off\n" in out
    assert "gro on, lro off*, " in out and "ntuple on, rxhash on" in out  # no LRO on i40e
    assert (
        "  rss hash tcp4 sdfn udp4 sdfn tcp6 sdfn udp6 sdfn  table 16 queues, 32 of 512 "
        "entries each  toeplitz\n"
    ) in out
    assert "  flow rule 7423: flow-type tcp4 dst-port 9100 action 0\n" in out
    j = run_cli("--root", str(hosts / X710), "show", "--json", "--iface", PORT, "--iface", IDLE)
    nics = {n["name"]: n for n in j.json["nics"]}
    rss = nics[PORT]["rss"]
    assert rss["table_size"] == 512 and rss["rings"] == 16 and rss["hfunc"] == "toeplitz"
    assert len(rss["key"].split(":")) == 52  # I40E_HKEY_ARRAY_SIZE
    assert nics[IDLE]["rss"]["rules"] == []
    assert nics[PORT]["features"]["rx-lro"] == {"active": False, "fixed": True,
                                                "requested": None}  # fmt: skip
    assert nics[PORT]["pause"] == {"autoneg": False, "rx": False, "tx": False}


def test_lb_dr_plans_applies_verifies_and_rolls_back_the_nic_families(tmp_path):
    root = copy_host(tmp_path, X710)
    pristine = copy_host(tmp_path, X710, dest="pristine")
    before = files(root)
    plan = run_cli("--json", "--root", str(root), "plan", "lb-dr", "--iface", PORT)
    assert plan.exit_code == 0, plan.stderr
    by = {(c["kind"], c["object"]): c for c in plan.json["changes"]}
    # 14 data cores (2-15) and a control queue: 15 channels, RSS over queues 0-13 only
    ch = by[("channels", f"{PORT}:combined")]
    assert (ch["current"], ch["desired"], ch["action"]) == ("16", "15", "change")
    assert by[("rss_indir", PORT)]["desired"] == "weight" + " 1" * 14
    assert {by[("rss_hash", f"{PORT}:{f}")]["action"] for f in ("tcp4", "udp4", "tcp6",
                                                                "udp6")} == {"ok"}  # fmt: skip
    # features, coalescing and pause are what lb-dr wants already on i40e (no LRO at all,
    # ntuple on by default, adaptive moderation, no pause on this link): planned, nothing to do
    for kind, obj in (("feature", "rx-lro"), ("feature", "rx-ntuple-filter"),
                      ("feature", "rx-gro"), ("coalesce", "adaptive-rx"), ("pause", "autoneg"),
                      ("pause", "rx"), ("pause", "tx")):  # fmt: skip
        assert by[(kind, f"{PORT}:{obj}")]["action"] == "ok", (kind, obj)
    # the rules at the last free slots of i40e's table (7424: 7423 is the administrator's);
    # src-port 179 would need another tcp4 input set than the administrator's rule: planned
    # as unsettable with the reason, never written
    rules = {o: c for (k, o), c in by.items() if k == "ntuple"}
    assert {o: c["desired"] for o, c in rules.items() if c["action"] == "change"} == {
        f"{PORT}:7422": "flow-type tcp4 dst-port 179 action 14",
        f"{PORT}:7421": "flow-type tcp4 dst-port 22 action 14",
    }
    (skipped,) = [c for c in rules.values() if c["action"] == "missing"]
    assert skipped["desired"] == "flow-type tcp4 src-port 179 action 14"
    assert skipped["note"].endswith(
        "i40e needs every tcp4 rule to compare the same fields: rule 7423 compares dst-port, "
        "this one src-port"
    )
    r = run_cli("--json", "--root", str(root), "apply", "lb-dr", "--iface", PORT, "--yes")
    assert r.exit_code == 0, r.stderr
    assert _rules(root) == (
        NtupleRule(7421, "tcp4", (("dst-port", "22"),), 14),
        NtupleRule(7422, "tcp4", (("dst-port", "179"),), 14),
        ADMIN,
    )
    assert "Combined:\t15" in (root / NET / f"ethtool_-l_{PORT}").read_text()
    assert run_cli("--root", str(root), "verify", "lb-dr", "--iface", PORT).exit_code == 0
    again = run_cli("--json", "--root", str(root), "plan", "lb-dr", "--iface", PORT)
    assert [c for c in again.json["changes"] if c["action"] == "change"] == []
    assert run_cli("--root", str(root), "rollback").exit_code == 0
    assert files(root) == before == files(pristine)  # byte for byte
    assert _rules(root) == (ADMIN,)


def test_coalesce_features_pause_and_hash_round_trip_on_the_recordings(tmp_path):
    root = copy_host(tmp_path, X710)
    before = files(root)
    prof = _profile(
        tmp_path,
        f"[nic.{PORT}]\n"
        'coalesce.adaptive-rx = { value = "off", reason = "r" }\n'
        'coalesce.rx-usecs = { value = 20, reason = "r" }\n'
        'features.rx-udp-gro-forwarding = { value = "on", reason = "r" }\n'
        'pause.rx = { value = "on", reason = "r" }\n'
        'pause.tx = { value = "on", reason = "r" }\n'
        'rss_hash = { udp4 = "sd", reason = "r" }\n',
    )
    r = run_cli("--root", str(root), "apply", prof)
    assert r.exit_code == 0, r.stderr
    c = (root / NET / f"ethtool_-c_{PORT}").read_text()
    assert "Adaptive RX: off  TX: on\n" in c and "\nrx-usecs: 20\n" in c
    assert "rx-udp-gro-forwarding: on\n" in (root / NET / f"ethtool_-k_{PORT}").read_text()
    assert (root / NET / f"ethtool_-a_{PORT}").read_text().endswith("RX:\t\ton\nTX:\t\ton\n")
    host = Host(HostFS(str(root)))
    assert host.ethtool.rx_flow_hash(PORT, "udp4") == "sd"
    assert run_cli("--root", str(root), "verify", prof).exit_code == 0
    assert run_cli("--root", str(root), "rollback").exit_code == 0
    assert files(root) == before


RULES = (
    "flow-type tcp4 dst-ip 10.0.0.1 dst-port 80",  # tcp4 already compares dst-port only (7423)
    "flow-type udp4 src-port 53",  # the first udp4 rule sets udp4's input set
    "flow-type udp4 dst-port 53",  # ... so this one cannot compare dst-port instead
    "flow-type tcp4 dst-port 443",  # the same fields as 7423: taken
    "flow-type tcp6 src-ip 2001:db8::1 m ::ffff",  # partial masks: i40e compares whole fields
    "flow-type udp4 src-port 123",  # the same fields as the planned udp4 rule: taken
)


def test_input_set_refusals_are_predicted_at_plan_time(tmp_path):
    root = copy_host(tmp_path, X710)
    body = f"[nic.{PORT}]\nflow_rules = {{ rules = {list(RULES)!r}, queue = 1, reason = 'r' }}\n"
    prof = _profile(tmp_path, body.replace("'", '"'))
    r = run_cli("--json", "--root", str(root), "plan", prof)
    assert r.exit_code == 0, r.stderr
    rows = [(c["object"], c["action"], c.get("note", "")) for c in r.json["changes"]]
    assert [(o, a) for o, a, _ in rows] == [
        (f"{PORT}:0", "missing"),
        (f"{PORT}:7422", "change"),
        (f"{PORT}:2", "missing"),
        (f"{PORT}:7421", "change"),
        (f"{PORT}:4", "missing"),
        (f"{PORT}:7420", "change"),
    ]
    notes = [n for _, a, n in rows if a == "missing"]
    assert "rule 7423 compares dst-port, this one dst-ip, dst-port" in notes[0]
    assert "rule 7422 compares src-port, this one dst-port" in notes[1]
    assert "i40e matches whole fields only (a mask on src-ip)" in notes[2]
    r = run_cli("--root", str(root), "apply", prof)
    assert r.exit_code == 0, r.stderr
    assert [x.location for x in _rules(root)] == [7420, 7421, 7422, 7423]
    assert run_cli("--root", str(root), "rollback").exit_code == 0
    assert _rules(root) == (ADMIN,)


@pytest.mark.parametrize(
    ("rule", "err"),
    [
        (NtupleRule(7000, "tcp4", (("src-port", "179"),), 1), errno.EOPNOTSUPP),  # input set
        (NtupleRule(7000, "tcp4", (("dst-port", "9100"),), 1), errno.EINVAL),  # same match
        (NtupleRule(7000, "tcp4", (("dst-port", "80"), ("tos", "0x10")), 1), errno.EOPNOTSUPP),
        (NtupleRule(7000, "ip4", (("l4proto", "112"),), 1), errno.EINVAL),  # no L4 protocol
        (NtupleRule(7424, "tcp4", (("dst-port", "80"),), 1), errno.EINVAL),  # beyond the table
    ],
)
def test_the_recording_refuses_rules_as_i40e_does(tmp_path, rule, err):
    """What lbtune predicts is also what the recorded source does, as i40e_add_fdir_ethtool()
    does: a write that bypasses the plan fails the same way, and changes nothing."""
    root = copy_host(tmp_path, X710)
    before = files(root)
    with pytest.raises(EthtoolIoctlError) as e:
        Host(HostFS(str(root))).ethtool.add_ntuple_rule(PORT, rule)
    assert e.value.errno == err
    assert files(root) == before


def test_the_idle_port_takes_a_first_rule_of_any_input_set(tmp_path):
    """No rule on the port: the first tcp4 rule sets the input set, the next one of other
    fields is refused, and rules of another flow type are independent."""
    root = copy_host(tmp_path, X710)
    eth = Host(HostFS(str(root))).ethtool
    assert eth.add_ntuple_rule(IDLE, NtupleRule(-1, "tcp4", (("src-port", "179"),), 0)) == 7423
    with pytest.raises(EthtoolIoctlError):
        eth.add_ntuple_rule(IDLE, NtupleRule(-1, "tcp4", (("dst-port", "179"),), 0))
    assert eth.add_ntuple_rule(IDLE, NtupleRule(-1, "udp4", (("dst-port", "53"),), 0)) == 7422
    assert [x.location for x in _rules(root, IDLE)] == [7422, 7423]


def test_compare_names_what_lb_dr_changed_on_the_i40e_port(tmp_path):
    a = copy_host(tmp_path, X710, dest="a")
    b = copy_host(tmp_path, X710, dest="b")
    assert run_cli("--root", str(b), "apply", "lb-dr", "--iface", PORT, "--yes").exit_code == 0
    r = run_cli("compare", str(a), str(b), "--json")
    assert r.exit_code == 1, r.stderr
    diffs = {(d["area"], d["object"]): (d["template"], d["value"])
             for d in r.json["hosts"][0]["differences"] if d["area"] != "sysctl"}  # fmt: skip
    assert diffs == {
        ("channels", PORT): ("combined=16", "combined=15"),
        ("rings", PORT): ("rx=512 tx=512", "rx=4096 tx=4096"),
        ("rss table", PORT): (
            "16 queues, 32 of 512 entries each",
            "queue:entries 0-13:36-37 14:0 of 512",
        ),
        ("flow rules", PORT): (
            "flow-type tcp4 dst-port 9100 action 0",
            "flow-type tcp4 dst-port 22 action 14; flow-type tcp4 dst-port 179 action 14; "
            "flow-type tcp4 dst-port 9100 action 0",
        ),
    }
