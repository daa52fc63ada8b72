"""Coalescing, feature and pause knobs and profile keys on copies of the fixture trees: plan,
apply, read back, verify, rollback byte for byte, refusals (exit 2, one line, the driver's
supported set named), ethtool's aliases, lint, show and compare."""

from __future__ import annotations

import pathlib

import pytest

from lbtune.errors import BadInput
from lbtune.host.host import Host
from lbtune.tune.knobs import CoalesceKnob, FeatureKnob, PauseKnob
from lbtune.tune.registry import knob_from_record
from tests.conftest import DELL, TINY, copy_host

NET = "sos_commands/networking"


def files(root: pathlib.Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink() and "var/lib/lbtune" not in str(p)
    }


def profile(tmp_path: pathlib.Path, section: str, body: str, role: str = "") -> str:
    path = tmp_path / "p.toml"
    role_line = f'role = "{role}"\n' if role else ""
    path.write_text(f'[profile]\nname = "p"\n{role_line}\n[nic.{section}]\n{body}')
    return str(path)


# ------------------------------------------------------------------ knobs


def test_kinds_rebuild_from_their_object_and_refuse_bad_ones() -> None:
    for kind, obj in (("coalesce", "eth0:rx-usecs"), ("feature", "eth0:rx-lro"),
                      ("pause", "eth0:autoneg")):  # fmt: skip
        k = knob_from_record(kind, obj)
        assert (k.kind, k.obj, k.interface, k.per_netns) == (kind, obj, "eth0", True)
    for cls, obj in (
        (CoalesceKnob, "eth0:rx-usec"),  # not ethtool's name
        (CoalesceKnob, "eth0"),
        (FeatureKnob, "eth0:RX LRO"),
        (FeatureKnob, "../x:rx-lro"),
        (PauseKnob, "eth0:both"),
    ):
        with pytest.raises(BadInput):
            cls(obj)


def test_knobs_read_write_and_restore_a_recording(tmp_path: pathlib.Path) -> None:
    root = copy_host(tmp_path, TINY)
    before = files(root)
    host = Host.open(str(root))
    usecs, gro, rx = CoalesceKnob("eth0:rx-usecs"), FeatureKnob("eth0:gro"), PauseKnob("eth0:rx")
    # an alias is not a kernel name: the knob for it reads nothing (resolve maps aliases)
    assert gro.read(host) is None and FeatureKnob("eth0:rx-gro").read(host) == "on"
    gro = FeatureKnob("eth0:rx-gro")
    originals = [(k, k.read(host)) for k in (usecs, gro, rx)]
    assert [v for _, v in originals] == ["3", "on", "on"]
    usecs.write(host, "100")
    gro.write(host, "off")
    rx.write(host, "off")
    assert (usecs.read(host), gro.read(host), rx.read(host)) == ("100", "off", "off")
    assert usecs.same("0100", "100") and rx.same("OFF", "off")
    for k, v in reversed(originals):
        k.restore(host, v)
    assert files(root) == before


def test_unsupported_and_fixed_are_said_with_the_drivers_set(tmp_path: pathlib.Path) -> None:
    host = Host.open(str(copy_host(tmp_path, TINY)))
    why = CoalesceKnob("eth0:rx-usecs-high").unsettable(host)
    assert why == "rx-usecs-high is not supported by e1000 (eth0); it supports: rx-usecs"
    assert CoalesceKnob("veth0:rx-usecs").unsettable(host) == (
        "veth0 (veth) has no interrupt coalescing settings"
    )
    assert PauseKnob("veth0:rx").unsettable(host) == "veth0 (veth) has no pause frame settings"
    assert FeatureKnob("eth0:rx-udp-gro-forwarding").unsettable(host) is None
    lro = FeatureKnob("eth0:rx-lro")
    lro.check(host, "off")  # fixed off, asked off: nothing to change
    with pytest.raises(BadInput, match=r"rx-lro is fixed off on eth0 \(e1000\)"):
        lro.check(host, "on")
    with pytest.raises(BadInput, match="not on or off"):
        PauseKnob("eth0:tx").check(host, "maybe")
    with pytest.raises(BadInput, match="not a count"):
        CoalesceKnob("eth0:rx-usecs").check(host, "4294967296")


# ------------------------------------------------------------------ profiles through the CLI


def test_role_section_plans_unsupported_as_unsettable(cli, tmp_path: pathlib.Path) -> None:
    root = copy_host(tmp_path, DELL)
    p = profile(tmp_path, '"data"', 'coalesce.rx-usecs-high = { value = 50, reason = "r" }\n'
                'coalesce.rx-usecs = { value = 50, reason = "r" }\n')  # fmt: skip
    r = cli("--root", str(root), "plan", p, "--iface", "eno1", "--json")
    assert r.exit_code == 0, r.stderr
    by = {c["object"]: c for c in r.json["changes"]}
    assert by["eno1:rx-usecs-high"]["action"] == "missing"
    assert "it supports: rx-usecs, tx-usecs, tx-frames-irq" in by["eno1:rx-usecs-high"]["note"]
    assert (by["eno1:rx-usecs"]["current"], by["eno1:rx-usecs"]["desired"]) == ("1", "50")


def test_role_section_plans_a_fixed_feature_asked_the_other_way_as_unsettable(
    cli, tmp_path: pathlib.Path
) -> None:
    # a role profile is portable: ntuple on for its flow rules, where a NIC (ixgbe's hw GRO
    # here, a veth's ntuple in the lab) has it fixed off, is skipped, not a refusal
    root = copy_host(tmp_path, DELL)
    p = profile(tmp_path, '"data"', 'features.rx-gro-hw = { value = "on", reason = "r" }\n')
    r = cli("--root", str(root), "plan", p, "--iface", "eno1", "--json")
    assert r.exit_code == 0, r.stderr
    (row,) = [c for c in r.json["changes"] if c["object"] == "eno1:rx-gro-hw"]
    assert row["action"] == "missing", row
    assert "rx-gro-hw is fixed off on eno1 (ixgbe)" in row["note"], row
    r = cli("--root", str(root), "apply", p, "--iface", "eno1", "--yes", "--json")
    assert r.exit_code == 0 and r.json["changed"] == 0, (r.stderr, r.json)


@pytest.mark.parametrize(
    "body, message",
    [
        (
            'coalesce.rx-usecs-high = { value = 50, reason = "r" }',
            "p: nic.eno1.coalesce.rx-usecs-high: rx-usecs-high is not supported by ixgbe "
            "(eno1); it supports: rx-usecs, tx-usecs, tx-frames-irq",
        ),
        (
            'features.rx-gro-hw = { value = "on", reason = "r" }',
            "p: nic.eno1.features.rx-gro-hw: rx-gro-hw is fixed off on eno1 (ixgbe): the driver "
            "cannot change it",
        ),
        (
            'features.tls-hw-tx-offload = { value = true, reason = "r" }',
            "tls-hw-tx-offload is fixed off on eno1 (ixgbe)",
        ),
        (
            'features.warp = { value = "on", reason = "r" }',
            "p: nic.eno1.features.warp: eno1 (ixgbe) has no feature warp",
        ),
        (
            'coalesce.rx-usec = { value = 5, reason = "r" }',
            "nic.eno1.coalesce.rx-usec: not a coalescing parameter (ethtool's names: rx-usecs",
        ),
        ('pause.both = { value = "on", reason = "r" }', "unknown pause field"),
        ('features.lro = { value = 1, reason = "r" }', "expected on/off (or true/false)"),
    ],
)
def test_refusals_exit_2_in_one_line_and_change_nothing(cli, tmp_path, body, message) -> None:
    root = copy_host(tmp_path, DELL)
    before = files(root)
    p = profile(tmp_path, "eno1", body + "\n")
    for verb in (["plan", p], ["apply", p, "--yes"]):
        r = cli("--root", str(root), *verb)
        assert r.exit_code == 2, r.stdout + r.stderr
        assert message in r.stderr and r.stderr.count("\n") == 1, r.stderr
        assert "unknown coalesce parameter" not in r.stderr
    assert files(root) == before


def test_apply_verify_rollback_byte_for_byte_with_aliases(cli, tmp_path: pathlib.Path) -> None:
    root = copy_host(tmp_path, DELL)
    before = files(root)
    body = (
        'features.tso = { value = "off", reason = "a group alias: its changeable members" }\n'
        'features.lro = { value = "on", reason = "r" }\n'
        'coalesce.adaptive-rx = { value = "off", reason = "r" }\n'
        'coalesce.rx-usecs = { value = 64, reason = "r" }\n'
        'pause.autoneg = { value = "on", reason = "r" }\n'
        'pause.tx = { value = "off", reason = "r" }\n'
    )
    p = profile(tmp_path, "ens1f0np0", body)
    plan = cli("--root", str(root), "plan", p, "--json")
    rows = {(c["kind"], c["object"]): c for c in plan.json["changes"]}
    assert {o for k, o in rows if k == "feature"} == {
        "ens1f0np0:tx-tcp-segmentation", "ens1f0np0:tx-tcp-ecn-segmentation",
        "ens1f0np0:tx-tcp-mangleid-segmentation", "ens1f0np0:tx-tcp6-segmentation",
        "ens1f0np0:rx-lro",
    }  # fmt: skip
    order = [c["kind"] + ":" + c["object"].split(":")[1] for c in plan.json["changes"]]
    assert order.index("coalesce:adaptive-rx") < order.index("coalesce:rx-usecs")
    assert order.index("pause:autoneg") < order.index("pause:tx")
    r = cli("--root", str(root), "apply", p, "--yes", "--json")
    assert r.exit_code == 0, r.stderr
    rec = root / NET
    assert "large-receive-offload: on\n" in (rec / "ethtool_-k_ens1f0np0").read_text()
    assert "tcp-segmentation-offload: off\n" in (rec / "ethtool_-k_ens1f0np0").read_text()
    c = (rec / "ethtool_-c_ens1f0np0").read_text()
    assert "Adaptive RX: off  TX: on\n" in c and "\nrx-usecs: 64\n" in c
    assert cli("--root", str(root), "verify", p).exit_code == 0
    again = cli("--root", str(root), "plan", p, "--json")
    assert [x for x in again.json["changes"] if x["action"] == "change"] == []
    assert cli("--root", str(root), "rollback").exit_code == 0
    assert files(root) == before
    assert cli("--root", str(root), "verify", p).exit_code == 1  # drift again


def test_persist_writes_the_boot_unit_for_them_and_rollback_removes_it(cli, tmp_path) -> None:
    root = copy_host(tmp_path, DELL)
    before = files(root)
    p = profile(tmp_path, "eno1", 'features.lro = { value = "on", reason = "r" }\n')
    r = cli("--root", str(root), "apply", p, "--persist", "--yes")
    assert r.exit_code == 0, r.stderr
    unit = (root / "etc/systemd/system/lbtune-boot.service").read_text()
    assert "--boot" in unit and "p.toml" in unit
    assert cli("--root", str(root), "rollback").exit_code == 0
    assert files(root) == before


def test_lb_dr_plans_the_nic_families_on_the_data_port(cli, hosts) -> None:
    r = cli("--root", str(hosts / DELL), "plan", "lb-dr", "--iface", "eno1", "--json")
    assert r.exit_code == 0, r.stderr
    by = {(c["kind"], c["object"]): c for c in r.json["changes"]}
    assert by[("feature", "eno1:rx-lro")]["action"] == "ok"
    assert by[("feature", "eno1:rx-gro")]["action"] == "ok"
    assert by[("coalesce", "eno1:adaptive-rx")]["action"] == "missing"  # ixgbe has none
    assert [by[("pause", f"eno1:{f}")]["action"] for f in ("autoneg", "rx", "tx")] == ["change"] * 3
    assert all(c["reason"] for c in r.json["changes"])


# ------------------------------------------------------------------ lint, show, compare


def test_lint_takes_the_ethtool_values_apart(cli, tmp_path: pathlib.Path) -> None:
    body = (
        'features.lro = { value = "on", reason = "runbook: ethtool -K lro on" }\n'
        'features.gro = { value = "off", reason = "runbook: ethtool -K gro off" }\n'
        'coalesce.rx-usecs = { value = 0, reason = "runbook: InterruptThrottleRate=0" }\n'
        'pause.tx = { value = "on", reason = "runbook: ethtool -A tx on" }\n'
    )
    r = cli("profile", "lint", profile(tmp_path, '"data"', body, role="lb-dr"), "--json")
    found = {f["key"]: f for f in r.json["findings"]}
    assert found["nic.data.features.lro"]["level"] == "fail"
    assert "dev_disable_lro" in found["nic.data.features.lro"]["reason"]
    assert found["nic.data.features.gro"]["level"] == "warn"
    assert "one interrupt per packet" in found["nic.data.coalesce.rx-usecs"]["reason"]
    assert found["nic.data.pause.tx"]["level"] == "warn"
    assert r.exit_code == 1
    quiet = cli("profile", "lint", "lb-dr", "--json")
    assert not [f for f in quiet.json["findings"] if ".features." in f["key"]
                or ".pause." in f["key"] or ".coalesce." in f["key"]]  # fmt: skip


def test_show_prints_them_per_nic(cli, hosts) -> None:
    r = cli("--root", str(hosts / DELL), "show", "--iface", "eno1")
    assert "  coalesce rx-usecs 1, tx-usecs 0, tx-frames-irq 256\n" in r.stdout
    assert "  pause autoneg on rx on tx on\n" in r.stdout
    assert "gro on, lro off, " in r.stdout and "rx-gro-hw off*" in r.stdout
    j = cli("--root", str(hosts / TINY), "show", "--json", "--iface", "eth0", "--iface", "veth0")
    nics = {n["name"]: n for n in j.json["nics"]}
    assert nics["eth0"]["coalesce"] == {"rx-usecs": 3}
    assert nics["eth0"]["features"]["rx-lro"] == {"active": False, "fixed": True,
                                                  "requested": None}  # fmt: skip
    assert nics["eth0"]["pause"] == {"autoneg": True, "rx": True, "tx": True}
    assert nics["veth0"]["coalesce"] is None and nics["veth0"]["pause"] is None


def test_compare_names_the_knob_that_differs(cli, tmp_path: pathlib.Path) -> None:
    a = copy_host(tmp_path, DELL, dest="a")
    k = (a / NET / "ethtool_-k_ens1f0np0").read_text()
    b = copy_host(tmp_path, DELL, {f"/{NET}/ethtool_-k_ens1f0np0": k.replace(
        "large-receive-offload: off", "large-receive-offload: on")}, dest="b")  # fmt: skip
    r = cli("compare", str(b), "--against", str(a), "--json")
    text = r.stdout
    assert "ens1f0np0:rx-lro" in text, text
    assert "eno1:rx-lro" not in text and "rx-gro-hw" not in text  # same / fixed: no noise


@pytest.mark.parametrize(
    "flag, text",
    [
        ("k", "Features for eth0:\nrx-gro: maybe\n"),
        ("k", "\x00\xff garbage"),
        ("c", "Coalesce parameters for eth0:\nrx-usecs: 99999999999\n"),
        ("a", "Pause parameters for eth0:\nRX: on\n"),
    ],
)
def test_a_malformed_recording_is_one_line_exit_2_everywhere(cli, tmp_path, flag, text) -> None:
    root = copy_host(tmp_path, TINY, {f"/{NET}/ethtool_-{flag}_eth0": text})
    before = files(root)
    p = profile(tmp_path, "eth0", 'features.gro = { value = "off", reason = "r" }\n'
                'coalesce.rx-usecs = { value = 10, reason = "r" }\n'
                'pause.tx = { value = "off", reason = "r" }\n')  # fmt: skip
    other = copy_host(tmp_path, TINY, dest="other")
    for args in (["show"], ["plan", p], ["apply", p, "--yes"], ["compare", str(root), str(other)]):
        r = cli("--root", str(root), *args) if args[0] != "compare" else cli(*args)
        assert r.exit_code == 2, (args, r.stdout, r.stderr)
        assert f"ethtool_-{flag}_eth0" in r.stderr and r.stderr.count("\n") == 1, r.stderr
        assert "Traceback" not in r.stderr
    assert files(root) == before
