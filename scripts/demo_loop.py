"""The loop of docs/diagnose.md, for real: faults -> diagnose -> profile -> apply -> quiet.

Run as root from the repository (`.venv/bin/python scripts/demo_loop.py OUTDIR`): it makes
a throwaway network namespace `lbtune-demo`, sets three faults up in it with the test fault
library (a listener limited by a tiny net.core.somaxconn, strict rp_filter on an asymmetric
path, a TIME_WAIT table of 4 buckets), and runs the commands a user would, printing each
with its real output: `diagnose --write-profile`, the profile, `plan`, `apply`, the
application restart, the same load in a second `diagnose`, `verify`, `rollback`. The first
window's HTML report is rendered to OUTDIR/diagnose-report.png with chromium (the picture in
the docs). The namespace is removed at the end; the host is not touched.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.browser import screenshot
from tests.conftest import run_cli
from tests.netns import faults as F

NS = "lbtune-demo"


def show(title: str, res: object, cmd: str) -> None:
    out = getattr(res, "stdout", "") + getattr(res, "stderr", "")
    print(f"$ {cmd}\n{out.rstrip()}\n(exit {getattr(res, 'exit_code', '?')})\n", flush=True)


def window_with(bgs: list[F.Background], args: list[str], at: list[float]) -> object:
    box: dict[str, object] = {}
    t = threading.Thread(target=lambda: box.setdefault("res", run_cli(*args)))
    t.start()
    for bg, delay in zip(bgs, at):
        bg.trigger(after=delay)
    t.join(120)
    for bg in bgs:
        bg.truth()
    return box["res"]


def main(outdir: str) -> int:
    out = Path(outdir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("COLUMNS", "100")
    os.environ["LBTUNE_STATE_DIR"] = str(out / "state")
    profile = out / "fix.toml"
    report = out / "report.html"
    for p in (profile, report):
        p.unlink(missing_ok=True)
    subprocess.run(["ip", "netns", "add", NS], check=True)
    try:
        with ExitStack() as stack:
            # the TIME_WAIT server listens before somaxconn is lowered for the other one
            faults = [
                F.TimeWaitOverflow(port=8081, max_tw=4, conns=30),
                F.RpFilterDrop(packets=50, mode=1),
                F.ListenOverflow(port=8080, backlog=128, clients=20, somaxconn=4),
            ]
            bgs = [stack.enter_context(F.Background(NS, f)) for f in faults]
            at = [3.4, 2.3, 1.2]
            html = ["--netns", NS, "diagnose", "-d", "5", "--format", "html", "-o", str(report)]
            text = ["--netns", NS, "diagnose", "-d", "5", "--write-profile", str(profile)]
            # the HTML report and the text report of the same faults, one window each
            window_with(bgs, html, at)
            res = window_with(bgs, text, at)
            show("diagnose", res, f"lbtune --netns {NS} diagnose -d 5 --write-profile fix.toml")
            print(f"$ cat fix.toml\n{profile.read_text()}")
            show("plan", run_cli("--netns", NS, "plan", str(profile)),
                 f"lbtune --netns {NS} plan fix.toml")  # fmt: skip
            show("apply", run_cli("--netns", NS, "apply", str(profile), "--yes"),
                 f"lbtune --netns {NS} apply fix.toml")  # fmt: skip
            bgs[2].restart()  # the listener takes the new somaxconn when it listens again
            print("(the application restarts: its listener takes somaxconn at listen())\n")
            res = window_with(bgs, ["--netns", NS, "diagnose", "-d", "5"], at)
            show("again", res, f"lbtune --netns {NS} diagnose -d 5")
            show("verify", run_cli("--netns", NS, "verify", str(profile)),
                 f"lbtune --netns {NS} verify fix.toml")  # fmt: skip
            show("rollback", run_cli("--netns", NS, "rollback"), f"lbtune --netns {NS} rollback")
    finally:
        subprocess.run(["ip", "netns", "del", NS], check=False)
    time.sleep(0.1)
    screenshot(report, out / "diagnose-report.png", width=1100, height=1700)
    print(f"picture: {out / 'diagnose-report.png'}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: scripts/demo_loop.py OUTDIR")
    sys.exit(main(sys.argv[1]))
