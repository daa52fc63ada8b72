"""Ansible benchmark: `lbtune.fleet.lbtune_profile` over N namespaces as Ansible hosts, against
`ansible.posix.sysctl` setting the same sysctls on the same hosts.

Usage: python bench/ansible.py [--hosts N] [--rounds R] [--out FILE]   (root; makes namespaces)

Each host is a throwaway network namespace (connection local, forks 5). lbtune's module takes
the namespace as its `netns` option; ansible.posix.sysctl has none, so its hosts run their
modules inside the namespace through the interpreter (a wrapper that runs
`ip netns exec NS /usr/bin/python3`), writing a sysctl file under a temporary directory
(never the host's /etc) without a reload.
Both set the same per-namespace sysctls (one ansible.posix.sysctl task per key: that module
sets one key). Per round, fresh namespaces; the first run changes every host, the second
finds nothing to change. Reported: wall time per host (the playbook's wall time / N), median
over rounds, and the ratio lbtune / ansible.posix.sysctl in the same run.

ansible.posix is not part of ansible-core: it is taken from the `ansible` package on the
package index (downloaded once into bench/.cache, only its ansible/posix collection kept).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile

from results_io import run_meta, write_markdown

MEASURES = (  # the code whose changes make this script's result stale (bench/check.py)
    "@cli",  # the command line every run starts (bench/check.py GROUPS)
    "lbtune/tune",
    "profiles",
    "ansible",
)

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
BIN = pathlib.Path(sys.executable).parent
CACHE = HERE / ".cache"
ANSIBLE_PKG = "ansible>=11,<12"  # its ansible.posix runs on ansible-core 2.16-2.19
SYSCTLS = {"net.core.somaxconn": "8192", "net.ipv4.tcp_fin_timeout": "20",
           "net.ipv4.tcp_max_syn_backlog": "8192", "net.ipv4.tcp_slow_start_after_idle": "0"}


def posix_collection() -> pathlib.Path:
    """A directory holding ansible_collections/ansible/posix (from the `ansible` wheel)."""
    dest = CACHE / "ansible-posix"
    if (dest / "ansible_collections" / "ansible" / "posix").is_dir():
        return dest
    CACHE.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp,
                        ANSIBLE_PKG], check=True)
        [wheel] = pathlib.Path(tmp).glob("ansible-*.whl")
        with zipfile.ZipFile(wheel) as z:
            names = [n for n in z.namelist()
                     if n.startswith("ansible_collections/ansible/posix/")]
            z.extractall(dest, names)
    return dest


def profile(tmp: pathlib.Path) -> pathlib.Path:
    p = tmp / "bench-fleet.toml"
    lines = ['[profile]\nname = "bench-fleet"\ndescription = "bench"\n[sysctl]']
    lines += [f'"{k}" = {{ value = "{v}", reason = "bench" }}' for k, v in SYSCTLS.items()]
    p.write_text("\n".join(lines) + "\n")
    return p


def run_play(tmp: pathlib.Path, inventory: str, play: str, collections: str) -> float:
    inv = tmp / "inv.ini"
    inv.write_text(inventory)
    pb = tmp / "play.yml"
    pb.write_text(play)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections, ANSIBLE_HOME=str(tmp / "home"),
               ANSIBLE_LOCAL_TEMP=str(tmp / "t"), ANSIBLE_REMOTE_TEMP=str(tmp / "t"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_FORKS="5", ANSIBLE_HOST_KEY_CHECKING="0")
    t0 = time.perf_counter()
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inv), str(pb)],
                          capture_output=True, text=True, env=env, timeout=600)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"playbook failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    return elapsed


def lbtune_case(tmp: pathlib.Path, names: list[str]) -> str:
    inv = "".join(f"{n} ansible_connection=local ansible_python_interpreter=/usr/bin/python3 "
                  f"ns={n}\n" for n in names)
    play = f"""\
- hosts: all
  gather_facts: false
  tasks:
    - lbtune.fleet.lbtune_profile:
        profile: {profile(tmp)}
        netns: "{{{{ ns }}}}"
        executable: {BIN / 'lbtune'}
"""
    return inv + "\0" + play


def posix_case(tmp: pathlib.Path, names: list[str]) -> str:
    for n in names:  # the interpreter runs Python inside the host's namespace
        wrapper = tmp / f"python-{n}"
        wrapper.write_text(f'#!/bin/sh\nexec ip netns exec {n} /usr/bin/python3 "$@"\n')
        wrapper.chmod(0o755)
    inv = "".join(f"{n} ansible_connection=local ansible_python_interpreter={tmp}/python-{n}\n"
                  for n in names)
    tasks = "".join(f"""\
    - ansible.posix.sysctl:
        name: {k}
        value: "{v}"
        sysctl_set: true
        reload: false
        sysctl_file: "{tmp}/sysctl-{{{{ inventory_hostname }}}}.conf"
""" for k, v in SYSCTLS.items())
    return inv + "\0" + f"- hosts: all\n  gather_facts: false\n  tasks:\n{tasks}"


def namespaces(n: int, tag: str) -> list[str]:
    names = [f"lbtb-{os.getpid()}-{tag}-{i}" for i in range(n)]
    for name in names:
        subprocess.run(["ip", "netns", "add", name], check=True)
    return names


def drop(names: list[str]) -> None:
    for name in names:
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)


def check_values(names: list[str]) -> None:
    for n in names:
        for k, v in SYSCTLS.items():
            path = "/proc/sys/" + k.replace(".", "/")
            got = subprocess.run(["ip", "netns", "exec", n, "cat", path], capture_output=True,
                                 text=True, check=True).stdout.split()
            if got != v.split():
                raise SystemExit(f"{n}: {k} = {got}, not {v}: the case did not do its work")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(HERE / "results" / "ansible.json"))
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench/ansible.py needs root (network namespaces)")
    posix = posix_collection()
    collections = f"{ROOT / 'ansible'}:{posix}"
    times: dict[str, list[float]] = {k: [] for k in
                                     ("lbtune first", "lbtune again", "posix first", "posix again")}
    for r in range(a.rounds):
        for case, build in (("lbtune", lbtune_case), ("posix", posix_case)):
            with tempfile.TemporaryDirectory() as d:
                tmp = pathlib.Path(d)
                names = namespaces(a.hosts, f"{case}{r}")
                try:
                    inv, play = build(tmp, names).split("\0")
                    times[f"{case} first"].append(run_play(tmp, inv, play, collections) / a.hosts)
                    check_values(names)
                    times[f"{case} again"].append(run_play(tmp, inv, play, collections) / a.hosts)
                finally:
                    drop(names)
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in times.items()}
    results = [
        {"case": "first run (every host changes)", "lbtune_s_per_host": med["lbtune first"],
         "posix_s_per_host": med["posix first"],
         "ratio": med["lbtune first"] / med["posix first"]},
        {"case": "second run (nothing to change)", "lbtune_s_per_host": med["lbtune again"],
         "posix_s_per_host": med["posix again"],
         "ratio": med["lbtune again"] / med["posix again"]},
    ]
    out = pathlib.Path(a.out)
    meta = run_meta(a.rounds, hosts=a.hosts, forks=5, sysctls=len(SYSCTLS),
                    ansible_core=subprocess.run([str(BIN / "ansible"), "--version"],
                                                capture_output=True, text=True
                                                ).stdout.splitlines()[0],
                    raw=times)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    write_markdown(
        out,
        [f"# lbtune_profile vs ansible.posix.sysctl ({a.hosts} namespaces as hosts, "
         f"{len(SYSCTLS)} sysctls, forks 5, median of {a.rounds} rounds; bench/ansible.py)"],
        [("case", "l"), ("lbtune_profile s/host", "r"), ("ansible.posix.sysctl s/host", "r"),
         ("ratio", "r")],
        [[r["case"], f"{r['lbtune_s_per_host']:.3f}", f"{r['posix_s_per_host']:.3f}",
          f"{r['ratio']:.2f}x"] for r in results],
    )
    shutil.rmtree(CACHE / "tmp", ignore_errors=True)


if __name__ == "__main__":
    main()
