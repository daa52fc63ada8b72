"""The collection's role lbtune.fleet.deploy refuses bad variables in one message, before
anything reaches the host. Run by the real `ansible-playbook` (connection local) in check mode
with a package path that does not exist, so a check that let a case through could still change
nothing here. What the role does on a host is proven against a system booted with systemd
(tests/fleet/test_ansible_deploy_nspawn.py: check, deploy, idempotence, a changed option's
restart)."""

from __future__ import annotations

import json
import pathlib
import re

import pytest

from tests.fleet.ansible_run import playbook

DEB = "/nonexistent/lbtune_0.1.0_all.deb"
CASES = {  # variables: the one message they fail with
    "quote": ({"lbtune_agent": True, "lbtune_agent_options": '--port "80"'},
              "lbtune.fleet.deploy: lbtune_agent_options has a double quote, a backslash or a "
              "line break (one line of options, as after the command)"),
    "line-break": ({"lbtune_exporter_options": "--listen 0.0.0.0:9178\nX=1"},
                   "lbtune.fleet.deploy: lbtune_exporter_options has a double quote, a "
                   "backslash or a line break (one line of options, as after the command)"),
    "adapt-name": ({"lbtune_adapt": ["web", "../etc/x"]},
                   "lbtune.fleet.deploy: lbtune_adapt: '../etc/x' is not the NAME of a config "
                   "/etc/lbtune/ipvs/NAME.toml"),
    "not-a-deb": ({"lbtune_deb": "/tmp/lbtune.tar.gz"},
                  "lbtune.fleet.deploy: lbtune_deb: /tmp/lbtune.tar.gz is not a .deb file"),
    "remote-nothing": ({"lbtune_deb": "", "lbtune_deb_remote": True},
                       "lbtune.fleet.deploy: lbtune_deb_remote is true but lbtune_deb names "
                       "nothing"),
    "not-a-bool": ({"lbtune_agent": "maybe"},
                   "Validation of arguments failed:\nargument 'lbtune_agent' is of type str "
                   "and we were unable to convert to bool"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_bad_variables_fail_in_one_message_before_any_change(
        tmp_path: pathlib.Path, case: str) -> None:  # fmt: skip
    variables, message = CASES[case]
    variables = {"lbtune_deb": DEB, **variables}
    tasks = f"""\
- name: deploy
  ansible.builtin.include_role:
    name: lbtune.fleet.deploy
  vars: {json.dumps(variables)}
"""
    run = playbook(tmp_path, tasks, ["h"], "--check")
    assert run["rc"] == 2, run["out"]
    assert run["recap"]["h"]["failed"] == 1 and run["recap"]["h"]["changed"] == 0, run["out"]
    assert message in run["out"], run["out"]
    assert "Traceback" not in run["out"], run["out"]
    # the failure is the first task that reaches the host: nothing ran after it
    assert not re.search(r"TASK \[lbtune\.fleet\.deploy : (Copy|Install|Write|Enable)",
                         run["out"]), run["out"]
