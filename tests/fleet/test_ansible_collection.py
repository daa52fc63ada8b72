"""The Ansible collection (ansible/ansible_collections/lbtune/fleet) run by the real
`ansible-playbook` against throwaway network namespaces as hosts (connection local).

Each namespace is one inventory host (`netns` host variable). What the tasks did is read back
from the kernel (`/proc/sys/net` inside the namespace), not only from Ansible's report:
check mode changes nothing, a second run reports changed=false, `state: absent` restores the
values, a failed apply fails the task with lbtune's message and leaves the values as they were.
"""

from __future__ import annotations

import itertools
import os
import pathlib
import shutil
import subprocess
from typing import Iterator

import pytest

from tests.fleet.ansible_run import BIN, COLLECTIONS, playbook

_ids = itertools.count()

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None,
    reason="needs root and iproute2 (namespaces as Ansible hosts)",
)

PROFILE = """\
[profile]
name = "fleet-web"
description = "per-namespace sysctls for the playbook tests"

[sysctl]
"net.core.somaxconn" = { value = 8192, reason = "deep accept queue" }
"net.ipv4.tcp_fin_timeout" = { value = 20, reason = "fewer FIN_WAIT2 sockets" }
"""

# The second value is refused by the kernel (low end above the high end): the apply must fail
# after the first change and restore it.
BAD_PROFILE = """\
[profile]
name = "fleet-bad"
description = "an apply the kernel refuses half-way"

[sysctl]
"net.core.somaxconn" = { value = 9000, reason = "changed first, then restored" }
"net.ipv4.ip_local_port_range" = { value = "60000 20000", reason = "refused by the kernel" }
"""


def sysctl(ns: str, key: str) -> str:
    path = "/proc/sys/" + key.replace(".", "/")
    out = subprocess.run(["ip", "netns", "exec", ns, "cat", path], check=True,
                         capture_output=True, text=True).stdout
    return " ".join(out.split())


@pytest.fixture(autouse=True)
def state_dir(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """lbtune's journals and lock in the test's directory (the playbooks' modules inherit
    the environment), never the host's /var/lib/lbtune: a namespace's journal directory
    there outlived the namespace."""
    state = tmp_path / "lbtune-state"
    monkeypatch.setenv("LBTUNE_STATE_DIR", str(state))
    return state


@pytest.fixture
def namespaces() -> Iterator[list[str]]:
    names = [f"lbt-ans{os.getpid()}-{next(_ids)}" for _ in range(2)]
    try:
        for n in names:
            subprocess.run(["ip", "netns", "add", n], check=True, capture_output=True)
        yield names
    finally:
        for n in names:
            subprocess.run(["ip", "netns", "del", n], check=False, capture_output=True)


def profile_task(profile: pathlib.Path, state: str = "present") -> str:
    return f"""\
- name: lbtune profile
  lbtune.fleet.lbtune_profile:
    profile: {profile}
    state: {state}
    netns: "{{{{ ns }}}}"
    executable: {BIN / 'lbtune'}
  register: r
"""


def test_check_apply_idempotent_rollback(tmp_path: pathlib.Path, namespaces: list[str],
                                         state_dir: pathlib.Path) -> None:
    prof = tmp_path / "fleet-web.toml"
    prof.write_text(PROFILE)
    before = {n: (sysctl(n, "net.core.somaxconn"), sysctl(n, "net.ipv4.tcp_fin_timeout"))
              for n in namespaces}
    assert all(b != ("8192", "20") for b in before.values())

    # --check --diff: reports the change with each knob before/after, changes nothing.
    res = playbook(tmp_path / "check", profile_task(prof), namespaces, "--check", "--diff")
    assert res["rc"] == 0, res["out"]
    for n in namespaces:
        assert res["recap"][n]["changed"] == 1, res["out"]
        r = res["r"][n]
        assert r["changed"] is True
        assert {c["object"] for c in r["changes"]} == {"net.core.somaxconn",
                                                      "net.ipv4.tcp_fin_timeout"}
        assert f"sysctl net.core.somaxconn = {before[n][0]}" in r["diff"]["before"]
        assert "sysctl net.core.somaxconn = 8192" in r["diff"]["after"]
        assert (sysctl(n, "net.core.somaxconn"), sysctl(n, "net.ipv4.tcp_fin_timeout")) \
            == before[n]
    assert "+sysctl net.core.somaxconn = 8192" in res["out"]  # the diff Ansible printed

    # Apply: changed, values in the kernel, a journal id returned.
    res = playbook(tmp_path / "apply", profile_task(prof), namespaces)
    assert res["rc"] == 0, res["out"]
    for n in namespaces:
        assert res["recap"][n]["changed"] == 1
        assert res["r"][n]["journal"]
        assert sysctl(n, "net.core.somaxconn") == "8192"
        assert sysctl(n, "net.ipv4.tcp_fin_timeout") == "20"

    # The journals are in the test's state directory, not the host's.
    assert len(list(state_dir.glob("hosts/*/netns-lbt-ans*/journal/*.json"))) == 2
    assert not any(os.path.exists(f"/var/lib/lbtune/netns-{n}") for n in namespaces)

    # Idempotence: the second run changes nothing.
    res = playbook(tmp_path / "again", profile_task(prof), namespaces)
    assert res["rc"] == 0, res["out"]
    for n in namespaces:
        assert res["recap"][n]["changed"] == 0, res["out"]
        assert res["r"][n]["changes"] == []

    # state=absent in check mode: would roll back, changes nothing.
    res = playbook(tmp_path / "absent-check", profile_task(prof, "absent"), namespaces,
                   "--check", "--diff")
    assert res["rc"] == 0, res["out"]
    for n in namespaces:
        assert res["recap"][n]["changed"] == 1
        assert "sysctl net.core.somaxconn = 8192" in res["r"][n]["diff"]["before"]
        assert sysctl(n, "net.core.somaxconn") == "8192"

    # state=absent: the original values are back; a second absent changes nothing.
    res = playbook(tmp_path / "absent", profile_task(prof, "absent"), namespaces)
    assert res["rc"] == 0, res["out"]
    for n in namespaces:
        assert res["recap"][n]["changed"] == 1
        assert (sysctl(n, "net.core.somaxconn"), sysctl(n, "net.ipv4.tcp_fin_timeout")) \
            == before[n]
    res = playbook(tmp_path / "absent-again", profile_task(prof, "absent"), namespaces)
    assert res["rc"] == 0, res["out"]
    assert all(res["recap"][n]["changed"] == 0 for n in namespaces), res["out"]


def test_host_global_knobs_in_a_namespace_are_listed_not_skipped(
    tmp_path: pathlib.Path, namespaces: list[str]
) -> None:
    """The shipped `web` profile in a namespace: its host-global knobs (fs.file-max...) are
    not applied there and are listed as such; the task itself still runs and reports."""
    ns = namespaces[:1]
    res = playbook(tmp_path / "web", profile_task(pathlib.Path("web")), ns, "--check")
    assert res["rc"] == 0, res["out"]
    assert res["recap"][ns[0]]["skipped"] == 0, res["out"]
    assert res["recap"][ns[0]]["changed"] == 1
    r = res["r"][ns[0]]
    why = {k["object"]: k["why"] for k in r["not_applied"]}
    assert why["fs.file-max"] == "host-global: not changed from a namespace"


def test_failed_apply_fails_the_task_and_changes_nothing(
    tmp_path: pathlib.Path, namespaces: list[str]
) -> None:
    prof = tmp_path / "fleet-bad.toml"
    prof.write_text(BAD_PROFILE)
    ns = namespaces[:1]
    before = (sysctl(ns[0], "net.core.somaxconn"), sysctl(ns[0], "net.ipv4.ip_local_port_range"))
    res = playbook(tmp_path / "bad", profile_task(prof), ns)
    assert res["rc"] != 0
    assert res["recap"][ns[0]]["failed"] == 1, res["out"]
    # The task's message is lbtune's one line, not a traceback.
    assert "ip_local_port_range" in res["out"], res["out"]
    assert "Traceback" not in res["out"]
    after = (sysctl(ns[0], "net.core.somaxconn"), sysctl(ns[0], "net.ipv4.ip_local_port_range"))
    assert after == before


def test_absent_refuses_when_another_profile_came_after(
    tmp_path: pathlib.Path, namespaces: list[str]
) -> None:
    first = tmp_path / "fleet-web.toml"
    first.write_text(PROFILE)
    second = tmp_path / "fleet-two.toml"
    second.write_text(PROFILE.replace("fleet-web", "fleet-two").replace("8192", "8000"))
    ns = namespaces[:1]
    assert playbook(tmp_path / "a1", profile_task(first), ns)["rc"] == 0
    assert playbook(tmp_path / "a2", profile_task(second), ns)["rc"] == 0
    res = playbook(tmp_path / "rm1", profile_task(first, "absent"), ns)
    assert res["rc"] != 0
    assert "roll those back first" in res["out"], res["out"]
    assert sysctl(ns[0], "net.core.somaxconn") == "8000"  # nothing rolled back


def test_facts_report_topology_and_findings(tmp_path: pathlib.Path, namespaces: list[str]) -> None:
    task = f"""\
- name: lbtune facts
  lbtune.fleet.lbtune_facts:
    netns: "{{{{ ns }}}}"
    findings_window: 1
    executable: {BIN / 'lbtune'}
  register: r
"""
    res = playbook(tmp_path / "facts", task, namespaces[:1], "--check")
    assert res["rc"] == 0, res["out"]
    facts = res["r"][namespaces[0]]["ansible_facts"]["lbtune"]
    assert facts["topology"]["netns"] == namespaces[0]
    assert facts["topology"]["cpus"]["cpus"]  # every online CPU, by node
    assert facts["findings"] == []  # an idle namespace drops nothing
    assert facts["findings_window"] == 1
    assert res["recap"][namespaces[0]]["changed"] == 0


def test_collection_installs_with_ansible_galaxy(tmp_path: pathlib.Path) -> None:
    """`ansible-galaxy collection install` from the repository's directory, as users do."""
    env = dict(os.environ, ANSIBLE_HOME=str(tmp_path / "home"), ANSIBLE_NOCOLOR="1")
    src = COLLECTIONS / "ansible_collections" / "lbtune" / "fleet"
    proc = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "install", str(src),
                           "-p", str(tmp_path / "cols")], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    installed = tmp_path / "cols" / "ansible_collections" / "lbtune" / "fleet"
    assert (installed / "plugins" / "modules" / "lbtune_profile.py").is_file()
    doc = subprocess.run([str(BIN / "ansible-doc"), "-t", "module", "lbtune.fleet.lbtune_profile"],
                         capture_output=True, text=True, timeout=120,
                         env=dict(env, ANSIBLE_COLLECTIONS_PATH=str(tmp_path / "cols")))
    assert doc.returncode == 0, doc.stderr
    assert "check_mode" in doc.stdout or "Check mode" in doc.stdout


# A host set up with `make setup`: lbtune is CHECKOUT/.venv/bin/lbtune, on no PATH.
BARE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
TABBED = """\
[profile]
name = "fleet-tabs"
description = "a value the kernel prints with tabs"

[sysctl]
"net.ipv4.tcp_rmem" = { value = "4097 131073 7000001", reason = "tabs; no kernel default" }
"""


def task_without_executable(profile: pathlib.Path) -> str:
    return f"""\
- name: lbtune profile
  lbtune.fleet.lbtune_profile:
    profile: {profile}
    netns: "{{{{ ns }}}}"
  register: r
  ignore_errors: true
"""


def test_lbtune_off_path_is_found_beside_the_interpreter(tmp_path: pathlib.Path,
                                                         namespaces: list[str]) -> None:
    """docs/fleet.md's playbook on a host where lbtune is only in the venv `make setup`
    made: with that venv's Python as the interpreter, no `executable:` is needed; the
    values come back as plain strings (the kernel prints tcp_rmem with tabs)."""
    assert shutil.which("lbtune", path=BARE_PATH) is None  # the case this test is about
    prof = tmp_path / "fleet-tabs.toml"
    prof.write_text(TABBED)
    ns = namespaces[:1]
    interp = str(BIN / "python")  # the venv's own, as `make setup` makes it
    res = playbook(tmp_path / "venv", task_without_executable(prof), ns, "--check",
                   interpreter=interp, path=BARE_PATH)
    assert res["rc"] == 0, res["out"]
    r = res["r"][ns[0]]
    assert not r.get("failed"), r
    (row,) = r["changes"]
    assert row["object"] == "net.ipv4.tcp_rmem" and row["desired"] == "4097 131073 7000001"
    assert row["current"] == sysctl(ns[0], "net.ipv4.tcp_rmem")
    assert "\t" not in row["current"]


def test_lbtune_nowhere_fails_saying_how_to_name_it(tmp_path: pathlib.Path,
                                                    namespaces: list[str]) -> None:
    """The system Python, lbtune on no PATH and no `executable:`: the task fails with one
    line that says what to set, instead of `Failed to find required executable`."""
    prof = tmp_path / "fleet-web.toml"
    prof.write_text(PROFILE)
    ns = namespaces[:1]
    res = playbook(tmp_path / "none", task_without_executable(prof), ns, "--check",
                   interpreter="/usr/bin/python3", path=BARE_PATH)
    r = res["r"][ns[0]]
    assert r.get("failed") is True, res["out"]
    msg = r["msg"]
    assert "executable" in msg and ".venv/bin/lbtune" in msg, msg
    assert "ansible_python_interpreter" in msg and "\n" not in msg, msg


def ipvs_task(config: pathlib.Path) -> str:
    return f"""\
- name: lbtune ipvs
  lbtune.fleet.lbtune_ipvs:
    config: {config}
    netns: "{{{{ ns }}}}"
    executable: {BIN / 'lbtune'}
  register: r
  ignore_errors: true
"""


def test_lbtune_ipvs_deploys_a_cluster_config_and_reports_its_failover_findings(
        tmp_path: pathlib.Path, namespaces: list[str]) -> None:
    """A director config with [cluster] needs nothing new from the module: check mode plans
    it (this kernel has no IPVS: the table rows are planned, not applied) and hands back
    lbtune's stateless-failover findings; a hostile [cluster] value fails the task with
    lbtune's one line."""
    from tests.unit.ipvs.test_bird_export import CLUSTER, SERVICES

    cfg = tmp_path / "cluster.toml"
    cfg.write_text((SERVICES + CLUSTER).replace('scheduler = "mh"\nflags = ["mh-fallback"]',
                                                'scheduler = "wlc"'))
    res = playbook(tmp_path / "check", ipvs_task(cfg), namespaces[:1], "--check")
    r = res["r"][namespaces[0]]
    assert not r.get("failed"), res["out"]
    assert r["changed"] is True
    found = [w for w in r["warnings_lbtune"] if w.startswith("stateless failover breaks: ")]
    assert len(found) == 1 and "tcp:10.0.0.101:443: wlc picks" in found[0], r

    bad = tmp_path / "bad.toml"
    bad.write_text((SERVICES + CLUSTER).replace('name = "dir2"', 'name = "dir2;}"'))
    res = playbook(tmp_path / "bad", ipvs_task(bad), namespaces[:1], "--check")
    r = res["r"][namespaces[0]]
    assert r.get("failed") is True, res["out"]
    assert "name = 'dir2;}': one word of letters" in r["msg"], r
