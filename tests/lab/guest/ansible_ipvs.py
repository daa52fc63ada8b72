"""Runs inside the lab guest: the collection's `lbtune_ipvs` module driven by the real
`ansible-playbook` against the director namespace of a DR test bed (real IPVS).

One playbook (Ansible starts slowly on the guest's one CPU), one task per phase: check mode
(nothing in the table), apply, a second run (changed=false), manual drift with ipvsadm
repaired by the next run, `state: absent` (torn down) and absent again; the kernel's table
is read with ipvsadm after each phase.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

from tests.fleet.ansible_run import BIN, playbook
from tests.lab.guest.dr_lab import VIP, Bed, config, rs_addr, write

PHASES = ("check", "apply", "again", "drift", "repair", "absent", "absent_again")


def run() -> dict[str, Any]:
    bed = Bed(n_real=2)
    tmp = pathlib.Path("/tmp/ansible-ipvs")
    tmp.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HOME", str(tmp))
    cfg = write(str(tmp / "director.toml"), config(weights={1: 1, 2: 1}))

    def module(name: str, state: str, check: bool = False) -> str:
        return f"""\
- name: {name}
  lbtune.fleet.lbtune_ipvs:
    config: {cfg}
    state: {state}
    netns: "{{{{ ns }}}}"
    executable: {BIN / 'lbtune'}
  check_mode: {str(check).lower()}
  register: {name}
"""

    def command(name: str, *argv: str) -> str:
        args = "".join(f"      - \"{a}\"\n" for a in ("ip", "netns", "exec", "{{ ns }}", *argv))
        return f"""\
- name: {name}
  ansible.builtin.command:
    argv:
{args}  changed_when: false
  check_mode: false
  register: {name}
"""

    table = ("ipvsadm", "-Ln")
    tasks = "".join([
        module("check", "present", check=True), command("t_check", *table),
        module("apply", "present"), command("t_apply", *table),
        module("again", "present"),
        command("drift", "ipvsadm", "-e", "-t", f"{VIP}:80", "-r", f"{rs_addr(1)}:80",
                "-g", "-w", "7"),
        command("t_drift", *table),
        module("repair", "present"), command("t_repair", *table),
        module("absent", "absent"), command("t_absent", *table),
        module("absent_again", "absent"),
    ])
    keep = (*PHASES, "t_check", "t_apply", "t_drift", "t_repair", "t_absent")
    try:
        res = playbook(tmp, tasks, ["dir"], "--diff", keep=keep)
    finally:
        bed.close()
    return {"vip": VIP, "rs": [rs_addr(1), rs_addr(2)], "rc": res["rc"], "out": res["out"],
            "r": res["r"].get("dir", {})}
