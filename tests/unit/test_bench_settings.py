"""`make bench` reproduces the committed results with the committed settings: every bench
script's argparse defaults (and its settings kept as module constants) are the settings its
bench/results/*.json records, and the Makefile's bench target runs every bench script."""

from __future__ import annotations

import ast
import json
import pathlib
from typing import Any

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"

# script -> (results file, {argparse option: meta key})
SETTINGS = {
    "run.py": ("startup.json", {"rounds": "rounds"}),
    "completion.py": ("completion.json", {"rounds": "rounds"}),
    "tune.py": ("tune.json", {"rounds": "rounds"}),
    "diagnose.py": ("diagnose.json", {"rounds": "rounds", "ticks": "ticks_per_round"}),
    "lab.py": ("lab.json", {"rounds": "rounds", "duration": "duration", "servers": "servers"}),
    "probes.py": ("probes.json", {"rounds": "rounds", "seconds": "seconds",
                                  "workloads": "workloads"}),
    "ipvs.py": ("ipvs.json", {"rounds": "rounds", "big-rounds": "big_rounds"}),
    "monitor.py": ("monitor.json", {"seconds": "seconds", "warmup": "warmup", "rate": "udp_rate"}),
    "monitor_replay.py": ("monitor_replay.json", {"seconds": "seconds", "warmup": "warmup",
                                                  "seed": "seed", "rounds": "rounds",
                                                  "long-minutes": "long_minutes"}),
    "adapt.py": (
        "adapt.json",
        {"rounds": "rounds", "duration": "duration", "connections": "connections",
         "rates": "rates_mbit"},
    ),
    "failover.py": ("failover.json", {"kills": "kills"}),
    "cluster.py": ("cluster.json", {"kills": "kills"}),
    "agent_scale.py": ("agent_scale.json", {"rounds": "rounds", "count": "connections"}),
    "receive_faults.py": ("receive_faults.json", {"rounds": "rounds"}),
    "vm.py": ("vm.json", {"rounds": "rounds"}),
    "lab_up_vm.py": ("lab_up_vm.json", {}),
    "exporter.py": ("exporter.json", {"rounds": "rounds", "pause": "pause"}),
    "watch_profile.py": ("watch_profile.json", {"seconds": "seconds", "warmup": "warmup",
                                                "rate": "udp_rate", "calls": "calls",
                                                "rounds": "rounds"}),
    "ansible.py": ("ansible.json", {"rounds": "rounds", "hosts": "hosts"}),
    "vm_rx.py": ("vm_rx.json", {"=WINDOW": "window_seconds"}),
    "vm_apply.py": ("vm_apply.json", {}),
    "nic_spread.py": ("nic_spread.json", {"rounds": "rounds", "flows": "flows"}),
    "nic_apply.py": ("nic_apply.json", {"rounds": "rounds"}),
    "ipvs_profile.py": (
        "ipvs_profile.json",
        {"services": "services", "reals": "real_servers", "=REPEAT": "rounds"},
    ),
    "vm_soak.py": ("vm_soak.json", {"guests": "guests", "minutes": "minutes", "load": "load",
                                    "arms": "arms"}),
    "units.py": ("units.json", {}),
    "monitor_memory.py": ("monitor_memory.json", {"samples": "samples", "seed": "seed"}),
    "suite.py": ("suite.json", {}),
}
# Not measuring scripts: the results' writer and the stale check.
HELPERS = {"results_io.py", "check.py"}


def argparse_defaults(script: pathlib.Path) -> dict[str, Any]:
    """`--name` -> the literal default of each `add_argument` call in the script."""
    out: dict[str, Any] = {}
    for node in ast.walk(ast.parse(script.read_text())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument" and node.args
                and isinstance(node.args[0], ast.Constant)):  # fmt: skip
            for kw in node.keywords:
                if kw.arg == "default":
                    try:
                        value = ast.literal_eval(kw.value)
                    except ValueError:  # computed (an output path): not a setting
                        continue
                    out[str(node.args[0].value).lstrip("-")] = value
    for node in ast.parse(script.read_text()).body:  # settings kept as module constants
        name = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if isinstance(name, ast.Name) and name.id.isupper():
            try:
                out["=" + name.id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return out


@pytest.mark.parametrize("script", sorted(SETTINGS))
def test_bench_defaults_are_the_committed_results_settings(script: str) -> None:
    results, keys = SETTINGS[script]
    meta = json.loads((BENCH / "results" / results).read_text())["meta"]
    defaults = argparse_defaults(BENCH / script)
    for option, key in keys.items():
        default = defaults[option]
        if option == "rates":  # "60,60,15" on the command line, a list in the results
            default = [int(x) for x in default.split(",")]
        if option == "workloads":  # "a,b" on the command line, a list in the results
            default = default.split(",")
        assert default == meta[key], (script, option, default, results, meta[key])


def test_every_bench_script_has_its_settings_checked() -> None:
    scripts = {p.name for p in BENCH.glob("*.py")} - HELPERS
    assert scripts == set(SETTINGS)


def _target(name: str) -> str:
    text = (ROOT / "Makefile").read_text()
    return text.split(f"\n{name}:", 1)[1].split("\n\n", 1)[0]


def test_make_bench_runs_every_script() -> None:
    bench = _target("bench")
    for script in SETTINGS:
        if script == "suite.py":  # it runs `make test`: its own target
            assert "bench/suite.py" in _target("bench-suite")
            assert "bench/suite.py" not in bench
        else:
            assert f"bench/{script}" in bench, script
