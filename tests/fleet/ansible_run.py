"""Run the collection's modules with the real `ansible-playbook` (connection local, one
inventory host per network namespace); used on the host and inside the lab guest."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[2]
COLLECTIONS = REPO / "ansible"
BIN = pathlib.Path(sys.executable).parent


def playbook(tmp: pathlib.Path, tasks: str, hosts: list[str], *flags: str,
             keep: tuple[str, ...] = (), interpreter: str = "/usr/bin/python3",
             path: str = "") -> dict[str, Any]:
    """Run `ansible-playbook` with `tasks` on one local host per namespace. The registered
    `r` (or, with `keep`, a dict of those registered names) is written to
    RESULTS/<host>.json; returns the exit code, output, recap and those results.
    `interpreter` is the hosts' `ansible_python_interpreter`; `path` the PATH the modules
    see (default: the venv's bin, where this lbtune is, then the caller's PATH)."""
    kept = "r" if not keep else "{" + ", ".join(f"'{k}': {k}" for k in keep) + "}"
    tmp.mkdir(parents=True, exist_ok=True)
    results = tmp / "results"
    results.mkdir(exist_ok=True)
    inv = tmp / "inventory.ini"
    inv.write_text("".join(
        f"{n} ansible_connection=local ansible_python_interpreter={interpreter} ns={n}\n"
        for n in hosts))
    play = tmp / "play.yml"
    body = "\n".join("    " + line if line else "" for line in tasks.splitlines())
    play.write_text(f"""\
- hosts: all
  gather_facts: false
  tasks:
{body}
    - name: keep the result
      ansible.builtin.copy:
        content: "{{{{ {kept} | to_json }}}}"
        dest: "{results}/{{{{ inventory_hostname }}}}.json"
      check_mode: false
      diff: false
      changed_when: false
""")
    env = dict(os.environ, **settings(tmp),
               PATH=path or f"{BIN}:{os.environ.get('PATH', '')}")
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inv), str(play), *flags],
                          capture_output=True, text=True, env=env, timeout=300)
    got = {p.stem: json.loads(p.read_text()) for p in results.glob("*.json")}
    return {"rc": proc.returncode, "out": proc.stdout + proc.stderr,
            "recap": recap(proc.stdout), "r": got}


def settings(tmp: pathlib.Path) -> dict[str, str]:
    """The ANSIBLE_* environment of a run: this checkout's collections, state under tmp."""
    return {"ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS),
            "ANSIBLE_HOME": str(tmp / "ansible-home"),
            "ANSIBLE_LOCAL_TEMP": str(tmp / "ansible-tmp"),
            "ANSIBLE_REMOTE_TEMP": str(tmp / "ansible-tmp"),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_RETRY_FILES_ENABLED": "0"}


def recap(stdout: str) -> dict[str, dict[str, int]]:
    """The PLAY RECAP of an `ansible-playbook` run: host -> ok, changed, failed, skipped."""
    got = {}
    for m in re.finditer(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+"
                         r"failed=(\d+)\s+skipped=(\d+)", stdout, re.M):
        got[m.group(1)] = {"ok": int(m.group(2)), "changed": int(m.group(3)),
                           "failed": int(m.group(5)), "skipped": int(m.group(6))}
    return got
