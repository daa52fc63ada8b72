"""`lbtune lab cluster` in the lab kernel: three directors behind an ECMP router, one killed
like a dead host and brought back, one added and one drained.

One run with the stateless recipe (mh, sloppy TCP, no sync) is shared by the kill, return,
add and drain tests; one control run (wlc, no sloppy TCP) shows that the same events do
break established connections without it, so the zeros above are not the client failing
to see breaks. What must hold, not how fast: the figures are bench/cluster.py's.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Iterator

import pytest

from lbtune.lab.guests.session import processes_naming
from lbtune.lab.guests.uml import LabKernel
from tests.conftest import run_cli

pytestmark = pytest.mark.lab

# one kill (and return), the add and the drain; 16 keep-alive connections, so the killed
# director carries some of them (12 would miss it once in ~130 runs)
FAST = ("--kills", "1", "--settle", "1.5", "--keepalive", "16", "--throughput", "2",
        "--json")


def _rows(r: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(w["kind"], w["director"], w["took_s"], w["carried_dir"], w["broken_dir"],
             w["carried_others"], w["broken_others"], w["moved"], w["reasons"])
            for w in r.get("rows", [])]  # fmt: skip


def _cluster(tmp: Path, *args: str) -> tuple[int, dict[str, Any], str, Path]:
    work = tmp / "tmp"
    work.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tempfile, "tempdir", str(work))
        mp.setenv("LBTUNE_LAB_RUN_DIR", str(tmp / "run"))
        r = run_cli("lab", "cluster", *args)
    return r.exit_code, (r.json if r.stdout.strip() else {}), r.stderr, work


@pytest.fixture(scope="module")
def stateless(lab_kernel: LabKernel,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:  # fmt: skip
    code, r, err, work = _cluster(tmp_path_factory.mktemp("mh"), *FAST)
    assert code == 0, (r.get("reason"), _rows(r), r.get("router_log"), err[-2000:])
    # nothing left behind: UML, BIRD, the gates, nginx and the client went with the guest
    assert processes_naming(str(work)) == []
    yield r


@pytest.fixture(scope="module")
def control(lab_kernel: LabKernel,
            tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # fmt: skip
    code, r, err, _ = _cluster(tmp_path_factory.mktemp("wlc"), "--scheduler", "wlc",
                               "--no-sloppy", "--no-add-drain", "--throughput", "0",
                               *FAST)  # fmt: skip
    assert code == 0, (r.get("reason"), _rows(r), r.get("router_log"), err[-2000:])
    return r


def _row(r: dict[str, Any], kind: str) -> dict[str, Any]:
    rows = [w for w in r["rows"] if w["kind"] == kind]
    assert len(rows) == 1, _rows(r)
    return rows[0]


def test_the_directors_run_what_the_users_commands_wrote(stateless: dict[str, Any]) -> None:
    assert stateless["ok"] and stateless["reason"] == "" and stateless["stateless"]
    assert [w["kind"] for w in stateless["rows"]] == ["kill", "return", "add", "drain"]
    conf = stateless["configs"]["dir1"]
    assert conf.startswith("# lbtune ipvs export --format bird --director dir1")
    assert "router id 10.77.0.2;" in conf and "neighbor 10.77.0.1 as 65000;" in conf
    assert "bfd on;" in conf and "hold time 3;" in conf
    assert "merge paths on;" in stateless["configs"]["router"]
    # wrk went through the three active directors, then through one alone, without a failure
    tp = stateless["throughput"]
    assert tp["directors"] == 3 and tp["rps"] > 0 and tp["one_rps"] > 0, tp


def test_a_killed_director_breaks_no_established_connection(stateless: dict[str, Any]) -> None:
    kill = _row(stateless, "kill")
    assert kill["director"] == "dir1" and kill["paths"] == "3 -> 2", kill
    # BFD (100 ms x 5) took the dead director out of the router's route within a second
    assert kill["took_s"] is not None and kill["took_s"] < 1.0, kill
    # it carried some of the keep-alive connections; they moved and none broke, nor any of
    # the survivors' (the router's rehash moves some of theirs too)
    assert kill["carried_dir"] > 0 and kill["broken_dir"] == 0, kill
    assert kill["carried_others"] > 0 and kill["broken_others"] == 0, kill
    assert kill["moved"] >= kill["carried_dir"], kill
    # new connections hashed to the dead director failed until the router knew
    assert kill["failed"] > 0 and kill["probes"] > kill["failed"], kill
    back = _row(stateless, "return")
    assert back["paths"] == "2 -> 3" and back["broken_others"] == 0 and back["moved"] > 0, back


def test_adding_and_draining_a_director_break_nothing(stateless: dict[str, Any]) -> None:
    add = _row(stateless, "add")
    assert add["director"] == "dir4" and add["paths"] == "3 -> 4", add
    assert add["took_s"] is not None and add["moved"] > 0, add
    assert add["broken_dir"] + add["broken_others"] == 0 and add["failed"] == 0, add
    drain = _row(stateless, "drain")
    assert drain["director"] in ("dir1", "dir2", "dir3") and drain["paths"] == "4 -> 3", drain
    # the drained director (the one carrying the most) still runs: its flows moved, none broke
    assert drain["carried_dir"] > 0 and drain["moved"] >= drain["carried_dir"], drain
    assert drain["broken_dir"] + drain["broken_others"] == 0 and drain["failed"] == 0, drain


def test_the_control_wlc_without_sloppy_tcp_breaks_the_dead_directors_connections(
    control: dict[str, Any],
) -> None:
    assert not control["stateless"]
    assert [w["kind"] for w in control["rows"]] == ["kill", "return"]
    kill = _row(control, "kill")
    assert kill["took_s"] is not None and kill["paths"] == "3 -> 2", kill
    # a survivor without sloppy TCP has no entry for a moved flow: its stack resets it
    assert kill["carried_dir"] > 0 and kill["broken_dir"] == kill["carried_dir"], kill
    assert any("reset" in reason for reason in kill["reasons"]), kill
