"""Real `lbtune apply` processes killed at every change index, and real races of two applies
(hardening issue items 5 and 6; issue 20 items 15, 16 and 19).

A process paused at change i (`tests/lbtune_paused.py`, which runs the real CLI with a fault
hook: it writes i to a FIFO and waits) gets SIGKILL, SIGTERM or SIGINT. SIGTERM and SIGINT
restore by themselves and exit 4; after SIGKILL `lbtune rollback` restores. Either way the
fixture copy must be byte-identical to a pristine copy (`diff -r`), with no directory or
`*.lbtune-tmp-PID` file left over from --persist. The kill points cover every change of the
lb-dr plan, the point before the persistence files and the point after them; a signal after
the commit leaves the apply standing with exit 0; SIGKILL inside every atomic file write
leaves no temp file once rollback (or the next apply) ran.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys

import pytest

from tests.conftest import DELL, KVM, copy_host

IFACE = "ens1f0np0"
APPLY = ["apply", "lb-dr", "--iface", IFACE, "--yes", "--persist"]
PAUSED = pathlib.Path(__file__).resolve().parent.parent / "lbtune_paused.py"


def lbtune(root: pathlib.Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "lbtune", "--root", str(root), *args]


def paused(point: str, fifo: pathlib.Path, root: pathlib.Path, *args: str) -> list[str]:
    """`lbtune --root ROOT ARGS` through the test wrapper, pausing at POINT."""
    return [sys.executable, str(PAUSED), point, str(fifo), "--root", str(root), *args]


def env(state: pathlib.Path) -> dict[str, str]:
    e = dict(os.environ)
    e["LBTUNE_STATE_DIR"] = str(state)
    return e


def temps(*dirs: pathlib.Path) -> list[str]:
    return [str(p) for d in dirs for p in d.rglob("*.lbtune-tmp-*")]


def nic_faults() -> dict[str, str]:
    """The data port as a director someone tuned by hand: LRO on and adaptive interrupt
    moderation off, so lb-dr changes a feature and a coalescing value there too (and pause,
    which the fixture has on)."""
    from tests.conftest import HOSTS

    rec = HOSTS / DELL / "sos_commands" / "networking"
    k = (rec / f"ethtool_-k_{IFACE}").read_text()
    c = (rec / f"ethtool_-c_{IFACE}").read_text()
    assert "large-receive-offload: off\n" in k and "Adaptive RX: on  TX: on\n" in c
    return {
        f"/sos_commands/networking/ethtool_-k_{IFACE}": k.replace(
            "large-receive-offload: off\n", "large-receive-offload: on\n"
        ),
        f"/sos_commands/networking/ethtool_-c_{IFACE}": c.replace(
            "Adaptive RX: on  TX: on\n", "Adaptive RX: off  TX: on\n"
        ),
    }


def diff(a: pathlib.Path, b: pathlib.Path) -> str:
    p = subprocess.run(["diff", "-r", "--no-dereference", str(a), str(b)],
                       capture_output=True, text=True, check=False)  # fmt: skip
    return p.stdout + p.stderr


@pytest.fixture(scope="module")
def trees(tmp_path_factory):  # type: ignore[no-untyped-def]
    base = tmp_path_factory.mktemp("signals")
    pristine = copy_host(base, DELL, nic_faults(), dest="pristine")
    work = copy_host(base, DELL, nic_faults(), dest="work")
    state = base / "state"
    plan = subprocess.run(lbtune(work, "plan", "lb-dr", "--iface", IFACE, "--json"),
                          capture_output=True, text=True, env=env(state), check=True)  # fmt: skip
    changes = [c for c in json.loads(plan.stdout)["changes"] if c["action"] == "change"]
    # the NIC families are among the change points (every one is killed at below)
    assert {"feature", "coalesce", "pause"} <= {c["kind"] for c in changes}, changes
    return pristine, work, state, len(changes)


def start_paused(work: pathlib.Path, state: pathlib.Path, point: str, *args: str
                 ) -> tuple[subprocess.Popen[str], str]:  # fmt: skip
    """Start `lbtune apply` paused at `point`; (process, what it wrote: the point or end)."""
    fifo = work.parent / "pause"
    if fifo.exists():
        fifo.unlink()
    os.mkfifo(fifo)
    proc = subprocess.Popen(paused(point, fifo, work, *(args or APPLY)), env=env(state),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        with open(fifo) as f:  # blocks until the process reached `point` (or ended)
            said = f.read().strip()
    except BaseException:
        proc.kill()
        raise
    finally:
        fifo.unlink()
    return proc, said


def kill_at(work: pathlib.Path, state: pathlib.Path, index: int, sig: int) -> int:
    proc, said = start_paused(work, state, str(index))
    try:
        assert said == str(index)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
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


# ------------------------------------------------------------------ issue 20 item 16


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_after_the_commit_leaves_the_apply_reported_not_killed(trees, sig):  # type: ignore[no-untyped-def]
    pristine, work, state, _ = trees
    proc, said = start_paused(work, state, "committed", *APPLY, "--json")
    try:
        assert said == "committed"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, (proc.returncode, err)
    jid = json.loads(out)["journal"]
    assert err.count("\n") == 1 and signal.Signals(sig).name in err and jid in err, err
    assert "stays applied" in err
    hist = subprocess.run(lbtune(work, "history", "--json"), env=env(state),
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert json.loads(hist.stdout)["journals"][-1]["state"] == "applied"
    rb = subprocess.run(lbtune(work, "rollback"), env=env(state), capture_output=True,
                        text=True, check=False)  # fmt: skip
    assert rb.returncode == 0, rb.stderr
    assert diff(pristine, work) == ""


# ------------------------------------------------------------------ issue 20 item 15


def test_killed_inside_every_file_write_leaves_no_temp_file(trees):  # type: ignore[no-untyped-def]
    pristine, work, state, _ = trees
    k = 0
    while True:
        proc, said = start_paused(work, state, f"write:{k}")
        if said == "end":
            assert proc.wait(timeout=60) == 0
            rb = subprocess.run(lbtune(work, "rollback"), env=env(state),
                                capture_output=True, text=True, check=False)  # fmt: skip
            assert rb.returncode == 0, rb.stderr
            break
        proc.kill()
        proc.wait(timeout=60)
        assert temps(work, state), f"write {k}: the kill left no temp file (no positive control)"
        rb = subprocess.run(lbtune(work, "rollback"), env=env(state), capture_output=True,
                            text=True, check=False)  # fmt: skip
        if rb.returncode == 2:  # killed in the journal's first save: no journal yet
            assert "nothing to roll back" in rb.stderr, rb.stderr
        else:
            assert rb.returncode == 0, rb.stderr
        assert temps(work, state) == [], f"write {k}: rollback left temp files"
        assert diff(pristine, work) == "", f"write {k}: not restored"
        k += 1
    assert k >= 8, k  # journal saves and the three persistence files


def test_the_next_apply_removes_a_dead_runs_temp_file(trees):  # type: ignore[no-untyped-def]
    pristine, work, state, _ = trees
    proc, said = start_paused(work, state, "write:0")  # the journal's first save
    assert said == "write:0"
    proc.kill()
    proc.wait(timeout=60)
    (left,) = temps(state)
    assert left.endswith(f".lbtune-tmp-{proc.pid}")
    ok = subprocess.run(lbtune(work, *APPLY), env=env(state), capture_output=True, text=True,
                        check=False)  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert temps(work, state) == []
    assert subprocess.run(lbtune(work, "rollback"), env=env(state),
                          capture_output=True, check=False).returncode == 0  # fmt: skip
    assert diff(pristine, work) == ""
