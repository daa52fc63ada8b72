"""`lbtune lab` on the command line without booting anything: bad input, no lab up."""

from __future__ import annotations

import pytest

from tests.conftest import run_cli


@pytest.fixture(autouse=True)
def _private_run_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LBTUNE_LAB_RUN_DIR", str(tmp_path / "run"))


@pytest.mark.parametrize(
    "args, words",
    [
        (["--weights", "1,x"], "--weights"),
        (["--servers", "2", "--weights", "1,2,3"], "3 weights for 2"),
        (["--servers", "0"], "--servers 0"),
        (["--duration", "0"], "--duration"),
        (["--scheduler", "fastest"], "not an IPVS scheduler"),
        (["--mode", "proxy", "--scheduler", "mh"], "HAProxy"),
        (["--mode", "proxy", "--fault", "wrong-arp"], "--mode dr"),
        (["--threads", "8", "--connections", "4"], "--connections"),
    ],
)
def test_bad_options_are_one_line_exit_2_before_any_boot(args, words):
    r = run_cli("lab", "run", *args)
    assert r.exit_code == 2, r.stderr
    assert words in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_lab_run_refuses_netns_and_root():
    r = run_cli("--netns", "lab-x", "lab", "run")
    assert r.exit_code == 2 and "own namespaces" in r.stderr


def test_down_and_status_with_no_lab_up():
    r = run_cli("lab", "down", "--json")
    assert r.exit_code == 0 and r.json == {"stopped": False}
    r = run_cli("lab", "status", "--json")
    assert r.exit_code == 0 and r.json["up"] is False


def test_stale_state_file_is_not_a_lab(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "lab-up.json").write_text('{"supervisor": 1, "workdir": "/nonexistent"}')
    r = run_cli("lab", "status")
    assert r.exit_code == 0 and "no lab is up" in r.stdout
    assert not (run / "lab-up.json").exists()


def test_scenario_refuses_to_run_outside_the_lab_kernel():
    from lbtune.lab.experiments.scenario import ScenarioConfig, run_scenario
    from lbtune.lab.guests.uml import LabUnavailable

    with pytest.raises(LabUnavailable):
        run_scenario(ScenarioConfig())
