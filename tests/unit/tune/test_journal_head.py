"""`StateDir.interrupted` tells a finished journal from its first bytes, and still finds an
interrupted one in any layout (a journal written by another version, odd profile names)."""

from __future__ import annotations

import json
import pathlib

import pytest

from lbtune.host.host import Host
from lbtune.tune.journal import APPLIED, APPLYING, KnobRecord, StateDir


@pytest.fixture
def state(tmp_path: pathlib.Path) -> StateDir:
    root = tmp_path / "root"
    (root / "proc/sys/kernel").mkdir(parents=True)
    (root / "proc/sys/kernel/hostname").write_text("testhost\n")
    return StateDir(Host.open(str(root)), override=str(tmp_path / "state"))


PROFILES = ["ipvs /etc/lb.toml", 'odd "name", "state":"applied"', "tab\there ünïcode \\"]


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("final", [APPLIED, APPLYING])
def test_newest_journal_state_as_written(state, profile, final):
    j = state.new_journal(profile, [KnobRecord("sysctl", "net.core.somaxconn", "1", "2")])
    j.state = final
    j.save()
    found = state.interrupted()
    assert (found is not None) == (final == APPLYING)
    if found is not None:
        assert found.id == j.id and found.profile == profile


def test_an_interrupted_journal_in_another_layout_is_found(state, tmp_path):
    j = state.new_journal("p", [])
    path = pathlib.Path(state.fs.path(state.journal_kdir)) / f"{j.id}.json"
    doc = json.loads(path.read_text())
    doc.pop("digest")  # as an older lbtune wrote it: no digest, fields in another order
    path.write_text(json.dumps({"state": doc.pop("state"), **doc}, indent=2))
    assert doc and json.loads(path.read_text())["state"] == APPLYING
    found = state.interrupted()
    assert found is not None and found.id == j.id
