"""lbtune.lab.experiments.cluster_stats and the cluster lab's configs, without a guest."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Optional

import pytest

from lbtune.errors import BadInput
from lbtune.ipvs.config import parse_config_text
from lbtune.ipvs.failover import failover_findings
from lbtune.lab.experiments.cluster import ClusterLabConfig, cluster_toml, router_conf
from lbtune.lab.experiments.cluster_stats import (
    ClientLog,
    ClusterEvent,
    ClusterResult,
    event_rows,
    result_from_json,
)
from lbtune.lab.inguest.labnet import plan_topology
from tests.conftest import run_cli


def _log(conns: list[tuple[int, float, Optional[float]]],
         probes: list[tuple[float, int]]) -> ClientLog:
    return ClientLog.from_json({
        "probes": [[t, ok, 0.01] for t, ok in probes],
        "conns": [{"port": p, "opened": o, "broken": b, "reason": "reset" if b else ""}
                  for p, o, b in conns]})  # fmt: skip


def test_rows_split_the_connections_by_who_carried_them_at_the_event() -> None:
    log = _log([(1001, 1.0, None), (1002, 1.0, 10.2), (1003, 1.0, None), (1004, 1.0, 30.0),
                (1005, 12.0, None)],  # opened after the first event: not counted there
               [(9.9, 1), (10.1, 0), (10.3, 0), (10.6, 1), (20.1, 1)])
    kill = ClusterEvent(10.0, "kill", "dir1", 0.4,
                        before={1001: "dir1", 1002: "dir1", 1003: "dir2", 1004: "dir3"},
                        after={1001: "dir2", 1002: "dir3", 1003: "dir3", 1004: "dir3"},
                        paths_before=3, paths_after=2)  # fmt: skip
    add = ClusterEvent(20.0, "add", "dir4", 3.0, before={1001: "dir2"}, after={1001: "dir2"},
                       paths_before=2, paths_after=3)  # fmt: skip
    rows = event_rows(log, [kill, add], end=40.0)
    k, a = rows
    assert (k.kind, k.director, k.paths) == ("kill", "dir1", "3 -> 2")
    # window [9.5, 19.5): three probes, two failed
    assert (k.failed, k.probes) == (2, 4)
    assert (k.carried_dir, k.broken_dir) == (2, 1)
    assert (k.carried_others, k.broken_others) == (2, 0)  # 1004 broke after the window
    assert k.moved == 3 and k.reasons == ("reset",)
    # the add: 1002 is gone; 1004 broke in its window; only 1001 had a known carrier
    assert (a.carried_others, a.broken_others, a.unknown, a.moved) == (4, 1, 3, 0)


def test_the_result_fails_on_breaks_only_for_the_stateless_recipe() -> None:
    log = _log([(1001, 1.0, 10.2)], [(10.1, 1)])
    ev = ClusterEvent(10.0, "kill", "dir1", 0.4, before={1001: "dir1"}, after={1001: "dir2"})
    rows = event_rows(log, [ev], end=20.0)
    mh = ClusterResult.build({"scheduler": "mh", "sloppy": True}, rows, "", {}, "6.1")
    assert not mh.ok and "1 established connection(s) broke with mh" in mh.reason
    wlc = ClusterResult.build({"scheduler": "wlc", "sloppy": False}, rows, "", {}, "6.1")
    assert wlc.ok and not wlc.stateless
    assert result_from_json(wlc.to_json()) == wlc
    never = ClusterEvent(10.0, "kill", "dir1", None, before={1001: "dir1"})
    bad = ClusterResult.build({"scheduler": "wlc"}, event_rows(log, [never], 20.0), "", {}, "")
    assert not bad.ok and bad.reason == "event 1: the router's table did not change"


@pytest.mark.parametrize("scheduler,sloppy,breaks", [("mh", True, 0), ("wlc", False, 2)])
def test_the_lab_config_is_what_plan_judges(scheduler: str, sloppy: bool, breaks: int) -> None:
    topo = plan_topology(2, directors=4)
    cfg = parse_config_text(cluster_toml(ClusterLabConfig(scheduler=scheduler, sloppy=sloppy),
                                         topo), "lab")  # fmt: skip
    found = [f for f in failover_findings(cfg) if f.level == "breaks"]
    assert len(found) == breaks, found


@pytest.mark.skipif(shutil.which("bird") is None, reason="bird not installed (make setup)")
@pytest.mark.parametrize("bfd", [True, False])
def test_the_routers_bird_config_parses(tmp_path: Path, bfd: bool) -> None:
    conf = tmp_path / "router.conf"
    conf.write_text(router_conf(ClusterLabConfig(bfd=bfd), plan_topology(2, directors=4)))
    assert subprocess.run(["bird", "-p", "-c", str(conf)], capture_output=True).returncode == 0
    assert ("bfd on;" in conf.read_text()) is bfd


@pytest.mark.parametrize("kw,said", [
    ({"directors": 4}, "--directors 4: 2 or 3"),
    ({"kills": 10}, "--kills 10: 0 to 9"),
    ({"scheduler": "rr"}, "--scheduler rr: one of mh, wlc"),
    ({"kills": 0, "add_drain": False}, "nothing to do"),
    ({"throughput": 0.5}, "--throughput 0.5: 0 \\(none\\) or 1 to 60 s"),
])
def test_bad_settings_are_refused(kw: dict[str, object], said: str) -> None:
    with pytest.raises(BadInput, match=said):
        ClusterLabConfig(**kw)  # type: ignore[arg-type]


def test_the_cli_refuses_bad_input_with_exit_2() -> None:
    r = run_cli("lab", "cluster", "--kills", "10")
    assert r.exit_code == 2 and "--kills 10: 0 to 9" in r.stderr and "Traceback" not in r.stderr
