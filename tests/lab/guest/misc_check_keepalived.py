"""Runs inside the lab guest: `lbtune ipvs agent --misc-check` as Debian's keepalived runs it.

One virtual server, one real server per case, each with a MISC_CHECK (`misc_dynamic`,
`inhibit_on_failure`: a failed server stays in the table at weight 0) whose script runs
`lbtune --netns NS ipvs agent --misc-check URL` against a server of tests.hostile_http in the
namespace NS (so the check only reaches it when `--netns` is honoured). keepalived sets each
real server's IPVS weight from the exit code; this reads what it set (`ipvsadm -Ln`) and
what it logged about each check (succeeded, failed with its exit status, or timed out).
The host-side test (tests/lab/test_misc_check_keepalived_lab.py) judges.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lbtune.lab.inguest.balancer import load_ipvs_modules
from lbtune.lab.inguest.shell import Shell

REPO = Path(__file__).resolve().parents[3]
NS = "mcrs"
VIP = "10.9.0.1"
CONFIGURED = 5  # the configured weight: what a check that keeps the weight leaves
BASE_PORT = 18400
TIMEOUT = "10"  # --timeout: the fetch's total deadline
MISC_TIMEOUT = 90  # keepalived kills a check after this (the drip cases end long before)

# name -> (server kind, URL or "" for the server's, extra arguments)
CASES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "good": ("good", "", ()),
    "unknown": ("unknown", "", ()),
    "down": ("down", "", ()),
    "bad_status": ("bad_status", "", ()),
    "http09": ("http09", "", ()),
    "huge_headers": ("huge_headers", "", ()),
    "deep_json": ("deep_json", "", ()),
    "deep_json_small": ("deep_json_small", "", ()),
    "not_json": ("not_json", "", ()),
    "drip_header": ("drip_header", "", ()),
    "drip_body": ("drip_body", "", ()),
    "control_char_url": ("good", "CTRL", ()),
    "bad_ipv6_url": ("good", "http://[::1/", ()),
    "timeout_inf": ("good", "", ("--timeout", "inf")),
    "timeout_1e300": ("good", "", ("--timeout", "1e300")),
    "usage_error": ("good", "", ("--timeout", "abc")),
}


def _script(path: Path, url: str, extra: tuple[str, ...]) -> None:
    argv = [sys.executable, "-m", "lbtune", "--netns", NS, "ipvs", "agent", "--misc-check"]
    if url.endswith("CTRL"):  # a URL with a control character (\001) in its path
        lines = [f"url=$(printf '{url[:-4]}\\001x')",
                 "exec " + " ".join(map(shlex.quote, argv)) + ' "$url" '
                 + " ".join(map(shlex.quote, ("--timeout", TIMEOUT, *extra)))]  # fmt: skip
    else:
        lines = ["exec " + " ".join(map(shlex.quote, [*argv, url, "--timeout", TIMEOUT,
                                                      *extra]))]  # fmt: skip
    # from the checkout's top, so `-m lbtune` is the lbtune of the tree under test
    path.write_text("#!/bin/sh\ncd " + shlex.quote(str(REPO)) + "\n" + "\n".join(lines) + "\n")
    path.chmod(0o700)


def _config(work: Path, rs: dict[str, str]) -> str:
    out = ["global_defs {", "    script_user root", "    enable_script_security", "}",
           f"virtual_server {VIP} 80 {{",
           "    delay_loop 300", "    lb_algo wrr", "    lb_kind DR", "    protocol TCP"]
    for name, addr in rs.items():
        out += [f"    real_server {addr} 80 {{", f"        weight {CONFIGURED}",
                "        inhibit_on_failure", "        MISC_CHECK {",
                f'            misc_path "{work}/case-{name}.sh"',
                f"            misc_timeout {MISC_TIMEOUT}", "            misc_dynamic",
                "            warmup 0", "        }", "    }"]  # fmt: skip
    out.append("}")
    return "\n".join(out) + "\n"


def _weights() -> dict[str, int]:
    out = subprocess.run(["ipvsadm", "-L", "-n"], capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    found = {}
    for line in out.splitlines():
        w = line.split()
        if len(w) >= 4 and w[0] == "->" and w[3].isdigit() and ":" in w[1]:
            found[w[1].rsplit(":", 1)[0]] = int(w[3])
    return found


def run() -> dict[str, Any]:
    shell = Shell()
    load_ipvs_modules("wrr", shell)
    shell.check(["ip", "netns", "add", NS])
    shell.check(["ip", "-n", NS, "link", "set", "lo", "up"])
    work = Path(tempfile.mkdtemp(prefix="misc-check-"))
    kinds = sorted({kind for kind, _url, _x in CASES.values()})
    port = {k: BASE_PORT + i for i, k in enumerate(kinds)}
    servers = subprocess.Popen(
        ["ip", "netns", "exec", NS, sys.executable, "-m", "tests.hostile_http",
         *(f"{k}:{p}" for k, p in port.items())],
        cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert servers.stdout is not None and servers.stdout.readline().strip() == "ready"
    rs = {name: f"10.9.1.{i + 1}" for i, name in enumerate(CASES)}
    for name, (kind, url, extra) in CASES.items():
        own = f"http://127.0.0.1:{port[kind]}/"
        _script(work / f"case-{name}.sh", url.replace("CTRL", own + "CTRL") if url == "CTRL"
                else (url or own), extra)  # fmt: skip
    conf = work / "keepalived.conf"
    conf.write_text(_config(work, rs))
    log_path = work / "keepalived.log"
    with open(log_path, "wb") as log:
        ka = subprocess.Popen(["keepalived", "-n", "-l", "-D", "-C", "-f", str(conf),
                               "-p", f"{work}/k.pid", "-c", f"{work}/c.pid",
                               "-r", f"{work}/v.pid"], stdin=subprocess.DEVNULL, stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    results: dict[str, str] = {}
    # keepalived 2.2: "Misc check for [[RS]:tcp:80 VS [VIP]:tcp:80] by [SCRIPT] succeeded."
    pattern = re.compile(r"Misc check .* by \[([^\]]*)\] (.*)$")
    guard = time.monotonic() + 2 * MISC_TIMEOUT + 120
    try:
        while len(results) < len(CASES) and time.monotonic() < guard and ka.poll() is None:
            time.sleep(1)
            for line in log_path.read_text(errors="replace").splitlines():
                m = pattern.search(line)
                if m:
                    name = Path(m.group(1)).name[len("case-"):-len(".sh")]
                    results.setdefault(name, m.group(2))
        time.sleep(1)  # the weight is set before the log line; one more moment for ipvsadm
        table = _weights()
    finally:
        if ka.poll() is None:
            os.killpg(ka.pid, signal.SIGTERM)
            try:
                ka.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(ka.pid, signal.SIGKILL)
                ka.wait()
        servers.kill()
        servers.wait()
        subprocess.run(["ipvsadm", "-C"], check=False)
        subprocess.run(["ip", "netns", "del", NS], check=False)
    log_text = log_path.read_text(errors="replace")
    return {
        "configured": CONFIGURED,
        "weights": {name: table.get(addr) for name, addr in rs.items()},
        "results": results,
        "log": log_text[-6000:],
    }
