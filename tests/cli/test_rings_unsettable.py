"""Rings a driver cannot change are planned the same way for `rings = "max"` and a number
(issue 19 item 2): one "missing" row per direction with the reason "unsettable: ...", plan
and apply exit 0 and change nothing, verify lists them as missing. Before, "max" on such a
NIC was an error and a number a bare "missing" (or an error above a virtio maximum).

Fixture trees: the 4-vCPU virtio VM (virtio_net on 6.1 whose negotiated features lack
VIRTIO_F_RING_RESET: its rings are the virtqueues QEMU sized) and the veth of the tiny host
(`ethtool -g` not supported); the mlx5 of the Dell tree stays settable. The live case, veth
in a namespace, is tests/netns/test_rings_unsettable_netns.py."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from tests.conftest import DELL, KVM, TINY, copy_host, run_cli

VALUES = ('"max"', "4096", "128")


def ring_profile(tmp_path: pathlib.Path, dev: str, value: str) -> str:
    name = f"rings-{value.strip(chr(34))}"
    p = tmp_path / f"{name}.toml"
    p.write_text(f'[profile]\nname = "{name}"\n[nic."{dev}"]\n'
                 f'rings = {{ value = {value}, reason = "r" }}\n')  # fmt: skip
    return str(p)


def ring_rows(res: Any) -> list[tuple[str, str, str]]:
    assert res.exit_code == 0, (res.exit_code, res.stdout, res.stderr)
    return [(c["object"], c["action"], c["note"]) for c in res.json["changes"]
            if c["kind"] == "ring"]  # fmt: skip


@pytest.mark.parametrize(
    ("tree", "dev", "why"),
    [
        (KVM, "ens3", "unsettable: virtio_net without VIRTIO_F_RING_RESET"),
        (TINY, "veth0", "unsettable: the driver reports no ring sizes"),
    ],
)
def test_unsettable_rings_plan_the_same_for_max_and_a_number(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, tree: str, dev: str, why: str
) -> None:
    monkeypatch.setenv("LBTUNE_STATE_DIR", str(tmp_path / "state"))
    root = str(copy_host(tmp_path, tree))
    outcomes = set()
    for value in VALUES:
        prof = ring_profile(tmp_path, dev, value)
        rows = ring_rows(run_cli("--root", root, "plan", prof, "--json"))
        assert [(o, a) for o, a, _ in rows] == [(f"{dev}:rx", "missing"), (f"{dev}:tx", "missing")]
        assert all(n.startswith(why) for _, _, n in rows), rows
        text = run_cli("--root", root, "plan", prof)
        assert text.exit_code == 0 and why in text.stdout and "0 change(s)" in text.stdout
        applied = run_cli("--root", root, "apply", prof, "--yes")
        assert applied.exit_code == 0, applied.stderr
        assert "nothing to change" in applied.stdout
        verify = run_cli("--root", root, "verify", prof, "--json")
        assert verify.exit_code == 0, verify.stdout + verify.stderr
        lint = run_cli("--root", root, "profile", "lint", prof, "--json")
        assert lint.exit_code == 0, lint.stdout
        outcomes.add((tuple(rows), plan_code := text.exit_code, applied.exit_code))
        assert plan_code == 0
    assert len(outcomes) == 1, outcomes  # "max", 4096 and 128: one outcome


def test_settable_rings_still_plan_a_change_and_refuse_above_the_maximum(
    tmp_path: pathlib.Path,
) -> None:
    root = str(copy_host(tmp_path, DELL))
    rows = ring_rows(run_cli("--root", root, "plan", ring_profile(tmp_path, "ens1f0np0", '"max"'),
                             "--json"))  # fmt: skip
    assert [(o, a) for o, a, _ in rows] == [("ens1f0np0:rx", "change"), ("ens1f0np0:tx", "change")]
    assert all(n == "link reset" for _, _, n in rows)
    over = run_cli("--root", root, "plan", ring_profile(tmp_path, "ens1f0np0", "16384"))
    assert over.exit_code == 2 and "ring max is 8192" in over.stderr
