#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: lbtune developers
# Apache License 2.0 (see the lbtune repository's LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: lbtune_facts
short_description: Gather a host's tuning facts and current drop findings with lbtune
description:
  - Returns the host's topology as lbtune sees it (CPUs by NUMA node, isolated CPUs, each
    NIC with driver, rings, channels and every queue's IRQ and CPUs, irqbalance) from
    C(lbtune show), and the current findings of a short C(lbtune diagnose) window
    (where packets die, why, and the fix).
  - Changes nothing; runs in check mode too.
version_added: "0.1.0"
author:
  - lbtune developers (!UNKNOWN)
options:
  findings_window:
    description:
      - Seconds of counters C(lbtune diagnose) samples for the findings; C(0) skips them.
    type: int
    default: 2
  iface:
    description:
      - Only these interfaces in the topology facts.
    type: list
    elements: str
extends_documentation_fragment:
  - lbtune.fleet.lbtune
notes:
  - Supports C(check_mode).
"""

EXAMPLES = r"""
- name: Gather lbtune facts
  lbtune.fleet.lbtune_facts:

- name: Hosts that drop packets
  ansible.builtin.debug:
    msg: "{{ ansible_facts.lbtune.findings | map(attribute='title') | list }}"
  when: ansible_facts.lbtune.findings | length > 0
"""

RETURN = r"""
ansible_facts:
  description: Facts under C(lbtune).
  returned: always
  type: dict
  contains:
    lbtune:
      description: C(topology) (lbtune show's JSON), C(findings) (lbtune diagnose's
        findings, empty when skipped) and C(findings_window) (seconds sampled).
      type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.lbtune.fleet.plugins.module_utils.lbtune_cli import (
    COMMON_ARGS,
    Lbtune,
    LbtuneError,
)


def main():
    spec = dict(
        findings_window=dict(type="int", default=2),
        iface=dict(type="list", elements="str"),
    )
    spec.update(COMMON_ARGS)
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    p = module.params
    if p["findings_window"] < 0:
        module.fail_json(msg="findings_window must be 0 or more seconds")
    show = ["show"]
    for name in p.get("iface") or []:
        show += ["--iface", name]
    try:
        lb = Lbtune(module)
        _rc, topology = lb.run(show)
        findings = []
        if p["findings_window"]:
            # diagnose exits 1 when it reports findings: that is a result, not a failure.
            _rc, report = lb.run(["diagnose", "--duration", str(p["findings_window"]),
                                  "--no-probes"], ok_codes=(0, 1))
            findings = report.get("findings", [])
    except LbtuneError as exc:
        module.fail_json(msg=exc.message, rc=exc.rc)
    facts = dict(lbtune=dict(topology=topology, findings=findings,
                             findings_window=p["findings_window"]))
    module.exit_json(changed=False, ansible_facts=facts)


if __name__ == "__main__":
    main()
