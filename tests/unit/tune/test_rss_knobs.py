"""RSS hash fields, indirection table, key and ntuple rules as knobs, on fixture trees that
behave like hosts: plan, apply, read back, rollback byte for byte, refusals at plan time
(exit 2, one line, naming what the driver has), and rule tracking: lbtune deletes the rules
it added and never touches others. ntuple is proven here only: no qemu NIC has it."""

from __future__ import annotations

import pathlib

import pytest

from lbtune.errors import BadInput
from lbtune.host.fs import HostFS
from lbtune.host.host import Host
from lbtune.host.net.rss import NtupleRule
from lbtune.tune.knob import KnobError
from lbtune.tune.knobs.ntuple import NtupleKnob
from lbtune.tune.knobs.rss import RssHashKnob, RssIndirKnob, RssKeyKnob
from tests.conftest import AWS, DELL, KVM, TINY, copy_host, run_cli

NET = "sos_commands/networking"


def _profile(tmp_path: pathlib.Path, body: str, name: str = "t") -> str:
    p = tmp_path / f"{name}.toml"
    p.write_text(f'[profile]\nname = "{name}"\ndescription = "test"\n\n{body}')
    return str(p)


def _snapshot(root: pathlib.Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (root / NET).iterdir()}


def test_hash_fields_plan_apply_verify_rollback(tmp_path):
    root = copy_host(tmp_path, DELL)
    before = _snapshot(root)
    prof = _profile(tmp_path, '[nic.eno1]\nrss_hash = { udp4 = "sdfn", udp6 = "sdfn", '
                    'tcp4 = "sdfn", reason = "4-tuple" }\n')  # fmt: skip
    r = run_cli("--json", "--root", str(root), "plan", prof)
    assert r.exit_code == 0, r.stderr
    rows = {c["object"]: c for c in r.json["changes"]}
    assert rows["eno1:udp4"]["current"] == "sd" and rows["eno1:udp4"]["action"] == "change"
    assert rows["eno1:tcp4"]["action"] == "ok"
    r = run_cli("--root", str(root), "apply", prof)
    assert r.exit_code == 0, r.stderr
    host = Host(HostFS(str(root)))
    assert host.ethtool.rx_flow_hash("eno1", "udp4") == "sdfn"
    lines = (root / NET / "ethtool_-n_eno1_rx-flow-hash_udp4").read_text().splitlines()
    assert lines[1:] == [
        "IP SA", "IP DA", "L4 bytes 0 & 1 [TCP/UDP src port]",
        "L4 bytes 2 & 3 [TCP/UDP dst port]", "",
    ]  # fmt: skip
    assert run_cli("--root", str(root), "verify", prof).exit_code == 0
    assert run_cli("--root", str(root), "rollback").exit_code == 0
    assert _snapshot(root) == before


def test_indirection_and_key_round_trip(tmp_path):
    root = copy_host(tmp_path, DELL)
    before = _snapshot(root)
    key = ":".join(["6d", "5a"] * 20)
    prof = _profile(
        tmp_path,
        '[nic.eno1]\nrss_indir = { value = "weight 0 1 1 1", reason = "queue 0 for control" }\n'
        f'rss_key = {{ value = "{key}", reason = "the key a peer uses" }}\n',
    )
    assert run_cli("--root", str(root), "apply", prof).exit_code == 0
    host = Host(HostFS(str(root)))
    r = host.ethtool.rxfh("eno1")
    assert r is not None and r.key == bytes.fromhex(key.replace(":", ""))
    # 512 entries over weights 0 1 1 1, as ethtool fills them: queue 1 gets 0-169
    assert set(r.indir) == {1, 2, 3} and r.indir.count(1) == 170
    assert RssIndirKnob("eno1").read(host) == "weight 0 1 1 1"
    assert run_cli("--root", str(root), "rollback").exit_code == 0
    assert _snapshot(root) == before


@pytest.mark.parametrize(
    ("tree", "body", "message"),
    [
        (DELL, 'rss_indir = { value = "equal 17", reason = "r" }',
         "eno1: 'equal 17' points at queue 16, but eno1 has 16 receive ring(s) (queues 0-15)"),
        (DELL, 'rss_key = { value = "01:02", reason = "r" }',
         "rss_key:eno1: 2 bytes, but eno1's key has 40"),
        (DELL, 'flow_rules = { rules = ["flow-type tcp4 dst-port 22"], queue = 16, reason = "r" }',
         "action 16: eno1 has 16 receive ring(s) (queues 0-15, or -1 to drop)"),
    ],
)  # fmt: skip
def test_refusals_at_plan_time_name_what_the_driver_has(tmp_path, tree, body, message):
    root = copy_host(tmp_path, tree)
    before = _snapshot(root)
    r = run_cli("--root", str(root), "plan", _profile(tmp_path, f"[nic.eno1]\n{body}\n"))
    assert r.exit_code == 2
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert _snapshot(root) == before


def test_hash_fields_a_flow_type_cannot_take_are_refused_by_the_profile(tmp_path):
    r = run_cli("--root", str(copy_host(tmp_path, DELL)), "plan", _profile(
        tmp_path, '[nic.eno1]\nrss_hash = { esp4 = "sdfn", reason = "r" }\n'))  # fmt: skip
    assert r.exit_code == 2 and "not hash fields esp4 can take" in r.stderr


@pytest.mark.parametrize(
    ("tree", "dev", "why"),
    [
        (KVM, "ens3", "ens3 has no RSS indirection table"),
        (TINY, "eth0", "eth0 has no RSS indirection table"),
    ],
)
def test_a_nic_without_a_table_plans_as_unsettable(tmp_path, tree, dev, why):
    prof = _profile(tmp_path, f'[nic.{dev}]\nrss_indir = {{ value = "equal 2", reason = "r" }}\n')
    r = run_cli("--json", "--root", str(copy_host(tmp_path, tree)), "plan", prof)
    assert r.exit_code == 0, r.stderr
    (row,) = r.json["changes"]
    assert row["action"] == "missing" and why in row["note"]


def test_virtio_without_rss_cannot_take_hash_fields(tmp_path):
    """virtio_net without VIRTIO_NET_F_RSS refuses SRXFH (EINVAL): planned unsettable, not
    applied and rolled back."""
    prof = _profile(tmp_path, '[nic.ens3]\nrss_hash = { udp4 = "sdfn", reason = "r" }\n')
    r = run_cli("--json", "--root", str(copy_host(tmp_path, KVM)), "plan", prof)
    (row,) = r.json["changes"]
    assert row["action"] == "missing" and "no RSS" in row["note"]


RULES = '[nic.ens1f0np0]\nflow_rules = { rules = ["flow-type tcp4 dst-port 179", ' \
    '"flow-type tcp4 dst-port 22"], queue = 5, reason = "control traffic" }\n'


def test_rules_are_added_at_free_locations_and_only_they_are_rolled_back(tmp_path):
    root = copy_host(tmp_path, DELL)
    before = _snapshot(root)
    prof = _profile(tmp_path, RULES)
    r = run_cli("--json", "--root", str(root), "plan", prof)
    assert [(c["object"], c["current"], c["desired"]) for c in r.json["changes"]] == [
        ("ens1f0np0:1022", "absent", "flow-type tcp4 dst-port 179 action 5"),
        ("ens1f0np0:1021", "absent", "flow-type tcp4 dst-port 22 action 5"),
    ]  # 1023 holds the administrator's rule
    assert run_cli("--root", str(root), "apply", prof).exit_code == 0
    host = Host(HostFS(str(root)))
    rules = host.ethtool.ntuple_rules("ens1f0np0")
    assert rules is not None and [r.location for r in rules] == [1021, 1022, 1023]
    # verify and a second apply find lbtune's rules where the journal says they are
    assert run_cli("--root", str(root), "verify", prof).exit_code == 0
    r = run_cli("--json", "--root", str(root), "plan", prof)
    assert {c["action"] for c in r.json["changes"]} == {"ok"}
    # someone adds a rule after the apply: rollback leaves it (and the admin's) alone
    host.ethtool.add_ntuple_rule("ens1f0np0", NtupleRule(7, "udp4", (("dst-port", "53"),), 2))
    assert run_cli("--root", str(root), "rollback").exit_code == 0
    rules = host.ethtool.ntuple_rules("ens1f0np0")
    assert rules is not None and [r.location for r in rules] == [7, 1023]
    host.ethtool.delete_ntuple_rule("ens1f0np0", 7)
    assert _snapshot(root) == before


def test_a_rule_of_someone_else_is_never_replaced(tmp_path):
    root = copy_host(tmp_path, DELL)
    # the administrator's rule steers UDP 4789 to queue 3; a profile wanting queue 5 is refused
    prof = _profile(tmp_path, '[nic.ens1f0np0]\nflow_rules = { rules = ["flow-type udp4 '
                    'dst-port 4789"], queue = 5, reason = "r" }\n')  # fmt: skip
    r = run_cli("--root", str(root), "plan", prof)
    assert r.exit_code == 2
    assert "rule 1023 already steers flow-type udp4 dst-port 4789 elsewhere" in r.stderr
    # with the same queue it is adopted as it is: nothing to do, nothing journaled
    same = _profile(tmp_path, '[nic.ens1f0np0]\nflow_rules = { rules = ["flow-type udp4 '
                    'dst-port 4789"], queue = 3, reason = "r" }\n', "same")  # fmt: skip
    r = run_cli("--json", "--root", str(root), "plan", same)
    assert [(c["object"], c["action"]) for c in r.json["changes"]] == [("ens1f0np0:1023", "ok")]
    # a write that finds its location taken (a rule added after the plan) fails, not replaces
    host = Host(HostFS(str(root)))
    knob = NtupleKnob("ens1f0np0:1023")
    with pytest.raises(KnobError, match="holds another rule now"):
        knob.write(host, "flow-type tcp4 dst-port 22 action 1")
    assert host.ethtool.ntuple_rules("ens1f0np0") == (
        NtupleRule(1023, "udp4", (("dst-port", "4789"),), 3),
    )


def test_rules_on_a_nic_without_ntuple_plan_as_unsettable(tmp_path):
    prof = _profile(tmp_path, '[nic.ens5]\nflow_rules = { rules = ["flow-type tcp4 dst-port 22"]'
                    ', queue = 0, reason = "r" }\n')  # fmt: skip
    r = run_cli("--json", "--root", str(copy_host(tmp_path, AWS)), "plan", prof)
    (row,) = r.json["changes"]
    assert row["action"] == "missing" and "no ntuple flow rules" in row["note"]


def test_rollback_puts_a_table_back_before_fewer_channels(tmp_path):
    """A table lbtune set pins the queues it names: the kernel refuses fewer channels while
    it does. Rollback gives the driver its default table first, then the channels, then the
    original table only if the default is not it already (byte for byte either way)."""
    root = copy_host(tmp_path, DELL)
    before = _snapshot(root)
    prof = _profile(tmp_path, '[nic.ens1f0np0]\nchannels = { value = 32, reason = "r" }\n'
                    'rss_indir = { value = "weight 1 0 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1'
                    ' 1 1 1 1 1 1 1 1 1", reason = "r" }\n')  # fmt: skip
    r = run_cli("--root", str(root), "apply", prof, "--yes")
    assert r.exit_code == 0, r.stderr
    host = Host(HostFS(str(root)))
    rx = host.ethtool.rxfh("ens1f0np0")
    assert rx is not None and rx.rings == 32 and max(rx.indir) == 31 and 1 not in rx.indir
    assert run_cli("--root", str(root), "rollback").exit_code == 0
    assert _snapshot(root) == before


def test_knob_objects_are_parsed_strictly():
    for bad, cls in (
        ("eth0", RssHashKnob), ("eth0:udp9", RssHashKnob), ("../x", RssIndirKnob),
        ("eth0:x", NtupleKnob), ("eth0:-1", NtupleKnob), ("eth0:99999999999", NtupleKnob),
        ("a b", RssKeyKnob),
    ):  # fmt: skip
        with pytest.raises(BadInput):
            cls(bad)
    assert NtupleKnob("eth0:1022").location == 1022
    k = RssHashKnob("eth0:udp4")
    assert k.same("nfds", "sdfn") and not k.same("sd", "sdfn")
    n = NtupleKnob("eth0:1")
    assert n.same("flow-type tcp4 dst-port 0xb3 action 1", "flow-type  tcp4 dst-port 179 action 1")
