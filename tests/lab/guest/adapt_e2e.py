"""Runs inside the lab guest: `lbtune ipvs adapt` against real IPVS, real agents, real nginx.

The adaptive experiment's bed (lbtune.lab.experiments.adaptive: three real servers, rs3 with a
quarter
of the others' egress), wlc applied by `lbtune ipvs apply`, adapt polling every 0.5 s, and
the mixed wrk load in the background. Then, one change at a time, what IPVS holds:

1. under load: rs3 (slow) gets a lower weight than rs1;
2. rs3's agent killed: rs3 back to its configured weight (x scale), adapt still running;
3. nginx on rs1 and rs2 stopped: their agents say down, weight 0 in the kernel;
4. nginx on rs3 stopped too and its agent restarted: every server down, never all 0;
5. adapt stopped (SIGTERM): the configured weights (1) are back.

Every wait polls the kernel for at most 30 s and records what it saw; the host-side test
(tests/lab/test_adapt_lab.py) judges.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from typing import Any, Callable

from lbtune.lab.experiments.adaptive import (
    RUN_DIR,
    STATE_DIR,
    AdaptiveConfig,
    _Experiment,
    _lbtune,
    wrk_script,
)
from lbtune.lab.progress import ProgressWriter

RS1, RS2, RS3 = "10.77.0.11", "10.77.0.12", "10.77.0.13"


def run() -> dict[str, Any]:
    os.makedirs(STATE_DIR, exist_ok=True)
    os.makedirs(RUN_DIR, exist_ok=True)
    exp = _Experiment(AdaptiveConfig(rates=(60, 60, 15), schemes=("adapt",), duration=60),
                      ProgressWriter())  # fmt: skip
    out: dict[str, Any] = {"steps": {}}
    procs: list[subprocess.Popen[str]] = []
    try:
        exp.build()
        exp.apply("wlc")
        out["configured"] = exp.kernel_weights()
        env = dict(os.environ, LBTUNE_STATE_DIR=STATE_DIR)
        adapt = subprocess.Popen(
            _lbtune(exp.director.netns, "ipvs", "adapt", exp.config_path, "--json",
                    "--interval", "0.5", "--timeout", "2"),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=env)  # fmt: skip
        procs.append(adapt)
        log: list[dict[str, Any]] = []

        def read() -> None:
            assert adapt.stdout is not None
            for line in adapt.stdout:
                try:
                    log.append(json.loads(line))
                except ValueError:
                    log.append({"raw": line})

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        script = f"{RUN_DIR}/mix.lua"
        with open(script, "w", encoding="utf-8") as fh:
            fh.write(wrk_script())
        wrk = exp.shell.spawn(["wrk", "-t", "1", "-c", "24", "-d", "120s", "-s", script,
                               "--timeout", "10s", f"http://{exp.topo.vip}/"],
                              exp.topo.client.netns)  # fmt: skip
        procs.append(wrk)

        def wait(name: str, pred: Callable[[dict[str, int]], bool]) -> None:
            deadline = time.monotonic() + 30
            seen = exp.kernel_weights()
            while not pred(seen) and time.monotonic() < deadline:
                time.sleep(0.5)
                seen = exp.kernel_weights()
            out["steps"][name] = {"weights": seen, "reached": pred(seen),
                                  "adapt_running": adapt.poll() is None}  # fmt: skip

        wait("unequal", lambda w: 0 < w.get(RS3, 0) < w.get(RS1, 0) / 2)
        exp.node_agents[2].kill()
        exp.node_agents[2].wait()
        wait("agent_gone", lambda w: w.get(RS3) == 100)
        exp.web[0].stop()
        exp.web[1].stop()
        wait("two_down", lambda w: w.get(RS1) == 0 and w.get(RS2) == 0)
        exp.web[2].stop()
        exp.node_agents[2] = exp.start_node_agent(exp.node_agent_argv[2], "rs3")
        wait("all_down", lambda w: all(v > 0 for v in w.values())
             and any(e.get("reason", "").startswith("every server down") for e in log))
        adapt.terminate()
        adapt.wait(timeout=20)
        reader.join(timeout=5)
        out["after_exit"] = exp.kernel_weights()
        out["adapt_exit"] = adapt.returncode
        out["log"] = log
        out["stderr"] = adapt.stderr.read() if adapt.stderr else ""
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        exp.teardown()
    return out
