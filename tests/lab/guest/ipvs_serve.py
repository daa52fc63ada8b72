"""Runs inside the lab guest: `lbtune ipvs serve` (the resident reconciler) against real IPVS,
every client a fresh `python -m lbtune` process as a user runs it.

Each scenario starts from one table and applies one config twice over: once through the
server, and once as the one-shot full run (with LBTUNE_DEBUG=0 set, which the server
declines because its own LBTUNE_* differ, and without the no-op record), the host put
back to the same start before each. A test compares the two: exit code, stdout and
stderr (journal ids aside), and the table after (`ipvsadm -Ln`, settings only). Between
scenarios the table is changed behind the server's back (the start is applied by the
one-shot run), so what the server kept of the table is tested against drift on every step.

A run was served when its process imported no click (`-X importtime`) and the server logged
it; the server's log is returned too.
"""

from __future__ import annotations

import fcntl
import glob
import os
import re
import signal
import subprocess
import sys
import time
from typing import Any, Optional

from tests.lab.guest.ipvs_noop import head

VIP = "10.79.0.1"
CLICK = re.compile(r"^import time:.*\|\s+click$", re.M)
JOURNAL = re.compile(r"\b\d{6}-\d{8}T\d{6}\b")  # a journal's id (lbtune.tune.journal)
HEAD = head(VIP, "serve0")


def config(weights: Optional[dict[tuple[int, int], int]] = None, services: int = 12,
           reals: int = 3, scheduler: Optional[dict[int, str]] = None, extra_real: int = 0,
           head_last: bool = False, drop_real: Optional[tuple[int, int]] = None) -> str:
    weights, scheduler = weights or {}, scheduler or {}
    out = [] if head_last else [HEAD]
    for port in range(8000, 8000 + services):
        out.append(f'[[service]]\naddress = "{VIP}"\nport = {port}\n'
                   f'scheduler = "{scheduler.get(port, "wrr")}"\n')
        for r in range(1, reals + 1 + (extra_real if port == 8001 else 0)):
            if drop_real == (port, r):
                continue
            out.append(f'[[service.real_server]]\naddress = "10.80.0.{r}"\n'
                       f'weight = {weights.get((port, r), r)}\n')
    if head_last:
        out.append(HEAD)
    return "".join(out)


def table() -> str:
    p = subprocess.run(["ipvsadm", "-Ln"], capture_output=True, text=True, check=True)
    return p.stdout


class Serve:
    def __init__(self, log: str) -> None:
        self.log = log
        self.proc: Optional[subprocess.Popen[bytes]] = None

    def start(self) -> None:
        started = self.text().count("listening on") if os.path.exists(self.log) else 0
        with open(self.log, "ab") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "lbtune", "ipvs", "serve"],
                                         stderr=err, stdout=subprocess.DEVNULL)
        for _ in range(300):
            if self.text().count("listening on") > started:
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError(f"the server did not start: {self.text()}")

    def text(self) -> str:
        with open(self.log) as f:
            return f.read()

    def stop(self) -> Any:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            ps = subprocess.run(["ps", "axfo", "pid,stat,wchan:20,args"], capture_output=True,
                                text=True).stdout
            self.proc.kill()
            return f"no exit 60 s after SIGTERM:\n{ps}"


def lbtune(path: str, *extra: str, env: Optional[dict[str, str]] = None,
           server: Optional[Serve] = None) -> dict[str, Any]:
    before = server.text().count("lbtune ipvs serve: apply") if server else 0
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "lbtune", "ipvs", "apply",
                        path, *extra], capture_output=True, text=True, timeout=300, env=env)
    err = "\n".join(ln for ln in p.stderr.splitlines() if not ln.startswith("import time:"))
    after = server.text().count("lbtune ipvs serve: apply") if server else 0
    return {"code": p.returncode, "out": p.stdout, "err": err,
            "served": after == before + 1 and not CLICK.search(p.stderr),
            "click": bool(CLICK.search(p.stderr))}


ONESHOT: dict[str, str] = {}


def norm(step: dict[str, Any]) -> dict[str, Any]:
    """The step without its journal's id (each apply names its own)."""
    return {"code": step["code"], "out": JOURNAL.sub("JOURNAL", step["out"]),
            "err": JOURNAL.sub("JOURNAL", step["err"])}


def run(state: str) -> dict[str, Any]:
    for m in ("ip_vs", "ip_vs_wrr", "ip_vs_rr", "dummy"):
        subprocess.run(["modprobe", m], check=True)
    subprocess.run(["ip", "link", "add", "serve0", "type", "dummy"], check=True)
    subprocess.run(["ip", "link", "set", "serve0", "up"], check=True)
    os.environ["LBTUNE_STATE_DIR"] = state
    os.chdir("/tmp")
    global ONESHOT
    # A client the server declines (its LBTUNE_* are not the server's), with the same
    # output as a plain run (LBTUNE_DEBUG only adds tracebacks): the one-shot full run.
    ONESHOT = dict(os.environ, LBTUNE_DEBUG="0")
    server = Serve("/tmp/serve.log")
    server.start()
    out: dict[str, Any] = {}
    start_path, path = "/tmp/start.toml", "serve.toml"  # relative: the client's directory

    def write(p: str, text: str) -> None:
        with open(p, "w") as f:
            f.write(text)

    def scenario(name: str, start: Optional[str], target: str, *extra: str,
                 by_hand: Optional[list[list[str]]] = None) -> None:
        """`target` applied through the server and by the one-shot run, each from `start`
        (None: an empty table) with `by_hand` changes made after it."""
        results = []
        for served in (True, False):
            subprocess.run(["ipvsadm", "-C"], check=True)
            subprocess.run(["ipvsadm", "--set", "900", "120", "300"], check=True)
            subprocess.run(["sysctl", "-qw", "net.ipv4.vs.expire_nodest_conn=0"], check=True)
            subprocess.run(["ip", "addr", "flush", "dev", "serve0"], check=True)
            if start is not None:
                write(start_path, start)
                first = lbtune(start_path, "--json", "--debug")
                assert first["code"] == 0, first
            for argv in by_hand or []:
                subprocess.run(argv, check=True)
            write(path, target)
            for memo in glob.glob(f"{state}/hosts/*/ipvs-noop.memo"):
                os.unlink(memo)  # the one-shot run is the full one, never the record's
            step = (lbtune(path, *extra, server=server) if served
                    else lbtune(path, *extra, env=ONESHOT))
            step["table"] = table()
            results.append(step)
        out[name] = {"served": results[0], "oneshot": results[1],
                     "same": norm(results[0]) == norm(results[1])
                     and results[0]["table"] == results[1]["table"]}

    base = config()
    scenario("first", None, base, "--json")
    scenario("first_text", None, base)
    scenario("noop", base, base, "--json")
    scenario("noop_text", base, base)
    # a no-op twice through the server: the second reuses the first's decoded table
    for n in (1, 2):
        out[f"noop_again_{n}"] = lbtune(path, "--json", server=server)
    scenario("weight", base, config(weights={(8003, 2): 9}), "--json")
    scenario("weight_text", base, config(weights={(8003, 2): 9}))
    scenario("real_added", base, config(extra_real=1), "--json")
    scenario("real_removed", base, config(drop_real=(8004, 2)), "--json")
    scenario("service_removed", base, config(services=11), "--json")
    scenario("service_added", base, config(services=13), "--json")
    scenario("scheduler", base, config(scheduler={8005: "rr"}), "--json")
    scenario("head_last", base, config(head_last=True, weights={(8006, 1): 4}), "--json")
    # drift behind the server's back, on services the config does not change
    scenario("drift_weight", base, base, "--json", by_hand=[
        ["ipvsadm", "-e", "-t", f"{VIP}:8007", "-r", "10.80.0.2:8007", "-g", "-w", "7"]])
    scenario("drift_real", base, base, "--json", by_hand=[
        ["ipvsadm", "-a", "-t", f"{VIP}:8008", "-r", "10.80.0.9:8008", "-g"]])
    scenario("drift_and_edit", base, config(weights={(8003, 2): 9}), "--json", by_hand=[
        ["ipvsadm", "-E", "-t", f"{VIP}:8009", "-s", "rr"]])
    scenario("bad_toml", base, base + "[[service]\n", "--json")
    scenario("bad_key", base, base.replace('scheduler = "wrr"', 'schedulr = "wrr"', 1))
    scenario("duplicate", base, base + base[base.index("[[service]]"):], "--json")

    # another run holds the lock: exit 6 through the server too
    lock = glob.glob(f"{state}/hosts/*/lock")[0]
    fd = os.open(lock, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    write(path, config(weights={(8002, 3): 8}))
    out["locked_served"] = lbtune(path, "--json", server=server)
    out["locked_oneshot"] = lbtune(path, "--json", env=ONESHOT)
    os.close(fd)
    # a client whose LBTUNE_* differ from the server's: declined, run by the client itself
    out["other_env"] = lbtune(path, "--json", server=server, env=ONESHOT)
    out["log_declined"] = "declined: the client's LBTUNE_* variables" in server.text()
    # the server killed: its socket stays, a client runs the apply itself
    assert server.proc is not None
    server.proc.kill()
    server.proc.wait()
    write(path, config(weights={(8002, 3): 6}))
    out["dead_server"] = lbtune(path, "--json", server=server)
    out["dead_socket_left"] = bool(glob.glob(f"{state}/hosts/*/ipvs.sock"))
    server.start()  # a new server takes the dead one's place
    try:
        second = subprocess.run([sys.executable, "-m", "lbtune", "ipvs", "serve"],
                                capture_output=True, text=True, timeout=60)
        out["second_server"] = {"code": second.returncode, "err": second.stderr}
    except subprocess.TimeoutExpired as e:
        out["second_server"] = {"code": None, "err": str(e.stderr)}
    write(path, config(weights={(8002, 3): 5}))
    out["restarted"] = lbtune(path, "--json", server=server)
    out["stop_code"] = server.stop()
    out["socket_after_stop"] = glob.glob(f"{state}/hosts/*/ipvs.sock")
    out["log"] = server.text()
    out["final_table"] = table()
    return out
