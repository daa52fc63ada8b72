"""Runs inside the lab guest: the memoized no-op of `lbtune ipvs apply` (lbtune.host.ipvs.memo)
against real IPVS, each step a fresh `python -m lbtune` process as a user runs it.

A run is told to have been answered from the memo when it imported no click (the full
run's command line): `-X importtime` lists every import on stderr. Each step returns what
a test needs: exit code, stdout, whether the memo answered, and the table afterwards.
"""

from __future__ import annotations

import fcntl
import glob
import os
import re
import socket
import subprocess
import sys
from typing import Any

VIP = "10.77.0.1"
CLICK = re.compile(r"^import time:.*\|\s+click$", re.M)  # click imported, at any depth


def head(vip: str, dev: str) -> str:
    """A director config's part before its services: VIP on `dev`, a sysctl, a timeout
    (tests/lab/guest/ipvs_serve.py uses it too)."""
    return f"""[director]
drain_timeout = 0

[[vip]]
address = "{vip}"
dev = "{dev}"

[sysctl]
"net.ipv4.vs.expire_nodest_conn" = 1

[timeouts]
tcp = 600
"""


CONFIG = head(VIP, "noop0")


def config(weight: int = 3) -> str:
    out = [CONFIG]
    for port in range(8000, 8010):
        out.append(f'[[service]]\naddress = "{VIP}"\nport = {port}\nscheduler = "wrr"\n')
        for r in range(1, 4):
            w = weight if (port, r) == (8000, 1) else r
            out.append(f'[[service.real_server]]\naddress = "10.78.0.{r}"\nweight = {w}\n')
    return "".join(out)


def lbtune(path: str, *extra: str, env: dict[str, str] | None = None,
           cmd: str = "apply") -> dict[str, Any]:
    head = ["--json"] if path == "--json" else []  # `lbtune --json ipvs apply CONFIG`
    if head:
        path, extra = extra[0], extra[1:]
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "lbtune", *head, "ipvs",
                        cmd, path, *extra], capture_output=True, text=True, timeout=300,
                       env=env)  # fmt: skip
    err = [ln for ln in p.stderr.splitlines() if not ln.startswith("import time:")]
    return {"code": p.returncode, "out": p.stdout, "err": "\n".join(err),
            "memo": p.returncode == 0 and not CLICK.search(p.stderr)}


def table() -> str:
    return subprocess.run(["ipvsadm", "-Ln"], capture_output=True, text=True, check=True).stdout


def run(state: str) -> dict[str, Any]:
    for m in ("ip_vs", "ip_vs_wrr", "dummy"):
        subprocess.run(["modprobe", m], check=True)
    subprocess.run(["ip", "link", "add", "noop0", "type", "dummy"], check=True)
    subprocess.run(["ip", "link", "set", "noop0", "up"], check=True)
    os.environ["LBTUNE_STATE_DIR"] = state
    path = "/tmp/noop.toml"
    with open(path, "w") as f:
        f.write(config())
    out: dict[str, Any] = {}
    out["first"] = lbtune(path, "--json")
    out["full"] = lbtune(path, "--json")
    out["full_text"] = lbtune(path)
    out["memo"] = lbtune(path, "--json")
    out["memo_text"] = lbtune(path)
    out["memo_json_first"] = lbtune("--json", path)
    # `ipvs plan` (Ansible's check mode) from the same record; --debug forces the full run
    for name, head, extra in (("json", (path,), ("--json",)), ("text", (path,), ()),
                              ("json_first", ("--json", path), ())):  # fmt: skip
        out[f"plan_{name}_memo"] = lbtune(*head, *extra, cmd="plan")
        out[f"plan_{name}_full"] = lbtune(*head, *extra, "--debug", cmd="plan")
    memo_files = glob.glob(f"{state}/hosts/*/ipvs-noop.memo")
    out["memo_mode"] = [oct(os.stat(p).st_mode & 0o777) for p in memo_files]

    # connections come and go: their counts are not settings
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex((VIP, 8001))  # IPVS schedules the SYN: an inactive connection entry
    out["conns_table"] = table()
    out["with_connection"] = lbtune(path, "--json")
    s.close()

    def drift(name: str, *argv: str) -> None:
        subprocess.run(list(argv), check=True)
        out[f"{name}_plan"] = lbtune(path, "--json", cmd="plan")  # shows it, changes nothing
        out[f"{name}_repair"] = lbtune(path, "--json")
        out[f"{name}_after"] = lbtune(path, "--json")
        out[f"{name}_memo"] = lbtune(path, "--json")

    drift("weight", "ipvsadm", "-e", "-t", f"{VIP}:8002", "-r", "10.78.0.2:8002", "-g", "-w", "9")
    drift("sysctl", "sysctl", "-qw", "net.ipv4.vs.expire_nodest_conn=0")
    drift("timeout", "ipvsadm", "--set", "900", "0", "0")
    drift("vip", "ip", "addr", "del", f"{VIP}/32", "dev", "noop0")
    drift("scheduler", "ipvsadm", "-E", "-t", f"{VIP}:8003", "-s", "rr")
    drift("server_added", "ipvsadm", "-a", "-t", f"{VIP}:8004", "-r", "10.78.0.9:8004", "-g")

    # a leftover temp file of a killed journal save: the full run clears it
    jdir = glob.glob(f"{state}/hosts/*/journal")[0]
    with open(f"{jdir}/000099.json.lbtune-tmp-999999", "w") as f:
        f.write("{")
    out["temp_repair"] = lbtune(path, "--json")
    out["temp_after"] = lbtune(path, "--json")
    out["temp_left"] = sorted(os.listdir(jdir))

    # another run holds the lock: the full run reports it (exit 6), never the memo
    lock = glob.glob(f"{state}/hosts/*/lock")[0]
    fd = os.open(lock, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    out["locked"] = lbtune(path, "--json")
    holder = os.pread(fd, 64, 0)
    out["locked_plan"] = lbtune(path, "--json", cmd="plan")  # neither plan takes the lock
    out["lock_untouched"] = os.pread(fd, 64, 0) == holder
    os.close(fd)
    out["unlocked"] = lbtune(path, "--json")

    # a memo that is not root's own, or garbage
    memo = memo_files[0]
    os.chmod(memo, 0o644)
    out["memo_0644"] = lbtune(path, "--json")
    with open(memo, "wb") as f:
        f.write(b"\xff" * 100)
    os.chmod(memo, 0o600)
    out["memo_garbage"] = lbtune(path, "--json")
    out["memo_rewritten"] = lbtune(path, "--json")

    # the config edited: one weight
    with open(path, "w") as f:
        f.write(config(weight=5))
    out["edited"] = lbtune(path, "--json")
    out["edited_after"] = lbtune(path, "--json")
    out["edited_memo"] = lbtune(path, "--json")

    # the same run with other options or another environment: the full run
    out["verbose"] = lbtune(path, "-v")
    out["bad_env"] = lbtune(path, "--json", env=dict(os.environ, LBTUNE_DEBUG="maybe"))
    out["tty_width"] = lbtune(path, env=dict(os.environ, COLUMNS="20"))
    out["missing"] = lbtune("/tmp/no-such.toml", "--json")
    out["final_table"] = table()
    return out
