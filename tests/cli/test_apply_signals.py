"""Real `lbtune apply` processes killed at every change index, and real races of two applies
(hardening issue items 5 and 6).

A process paused at change i (the LBTUNE_TEST_PAUSE hook: it writes i to a FIFO and waits)
gets SIGKILL, SIGTERM or SIGINT. SIGTERM and SIGINT restore by themselves and exit 4;
after SIGKILL `lbtune rollback` restores. Either way the fixture copy must be byte-identical
to a pristine copy (`diff -r`), with no directory or `*.lbtune-tmp-PID` file left over from
--persist. The kill points cover every change of the lb-dr plan, the point before the
persistence files and the point after them.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
from typing import Optional

import pytest

from tests.conftest import DELL, KVM, copy_host

IFACE = "ens1f0np0"
APPLY = ["apply", "lb-dr", "--iface", IFACE, "--yes", "--persist"]


def lbtune(root: pathlib.Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "lbtune", "--root", str(root), *args]


def env(state: pathlib.Path, pause: Optional[str] = None) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k != "LBTUNE_TEST_PAUSE"}
    e["LBTUNE_STATE_DIR"] = str(state)
    if pause is not None:
        e["LBTUNE_TEST_PAUSE"] = pause
    return e


def diff(a: pathlib.Path, b: pathlib.Path) -> str:
    p = subprocess.run(["diff", "-r", "--no-dereference", str(a), str(b)],
                       capture_output=True, text=True, check=False)  # fmt: skip
    return p.stdout + p.stderr


@pytest.fixture(scope="module")
def trees(tmp_path_factory):  # type: ignore[no-untyped-def]
    base = tmp_path_factory.mktemp("signals")
    pristine = copy_host(base, DELL, dest="pristine")
    work = copy_host(base, DELL, dest="work")
    state = base / "state"
    plan = subprocess.run(lbtune(work, "plan", "lb-dr", "--iface", IFACE, "--json"),
                          capture_output=True, text=True, env=env(state), check=True)  # fmt: skip
    import json

    n = sum(1 for c in json.loads(plan.stdout)["changes"] if c["action"] == "change")
    return pristine, work, state, n


def kill_at(work: pathlib.Path, state: pathlib.Path, index: int, sig: int) -> int:
    fifo = work.parent / f"pause-{index}"
    if fifo.exists():
        fifo.unlink()
    os.mkfifo(fifo)
    proc = subprocess.Popen(lbtune(work, *APPLY), env=env(state, f"{index}:{fifo}"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        with open(fifo) as f:  # blocks until the process reached change `index`
            assert f.read().strip() == str(index)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        fifo.unlink()
    if sig != signal.SIGKILL:
        assert err.count("\n") == 1 and "interrupted" in err and "restored" in err, err
    return proc.returncode


def test_plan_has_enough_kill_points(trees):  # type: ignore[no-untyped-def]
    _, _, _, n = trees
    assert n >= 20


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT],
                         ids=["SIGKILL", "SIGTERM", "SIGINT"])  # fmt: skip
def test_killed_at_every_change_restores_byte_for_byte(trees, sig):  # type: ignore[no-untyped-def]
    pristine, work, state, n = trees
    identical = 0
    for index in range(n + 2):  # every change, before persisting, after persisting
        code = kill_at(work, state, index, sig)
        if sig == signal.SIGKILL:
            assert code == -signal.SIGKILL
            rb = subprocess.run(lbtune(work, "rollback"), capture_output=True, text=True,
                                env=env(state), check=False)  # fmt: skip
            assert rb.returncode == 0, rb.stderr
        else:
            assert code == 4, f"index {index}: exit {code}"
        d = diff(pristine, work)
        assert d == "", f"not restored after {sig!r} at change {index}:\n{d[:2000]}"
        identical += 1
    assert identical == n + 2


def test_twenty_races_of_two_applies_apply_once(tmp_path):
    root = copy_host(tmp_path, KVM)
    state = tmp_path / "state"
    prof = tmp_path / "race.toml"
    prof.write_text('[profile]\nname = "race"\n[sysctl]\n'
                    '"net.core.somaxconn" = { value = 8192, reason = "r" }\n'
                    '"vm.swappiness" = { value = 7, reason = "r" }\n')  # fmt: skip
    for _ in range(20):
        procs = [subprocess.Popen(lbtune(root, "apply", str(prof), "--json"), env=env(state),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]  # fmt: skip
        results = [(p.wait(timeout=60), p.stdout.read(), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
        applied = [r for r in results if r[0] == 0 and '"journal": "' in r[1]]
        others = [r for r in results if r not in applied]
        assert len(applied) == 1, results
        (code, out, _err) = others[0]
        assert code == 6 or (code == 0 and '"journal": null' in out), others
        rb = subprocess.run(lbtune(root, "rollback"), env=env(state), capture_output=True,
                            text=True, check=False)  # fmt: skip
        assert rb.returncode == 0, rb.stderr
    history = subprocess.run(lbtune(root, "history", "--json"), env=env(state),
                             capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert history.count('"rolled-back"') == 20 and '"applied"' not in history
