#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: lbtune developers
# Apache License 2.0 (see the lbtune repository's LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: lbtune_ipvs
short_description: Reconcile an IPVS director with an lbtune director config
description:
  - Reconciles the kernel's IPVS table with an lbtune director config (TOML) using
    C(lbtune ipvs apply) - level-triggered, edits in place, never flushes, drains a removed
    real server before deleting it, journaled and rolled back on any failure.
  - C(state=absent) removes the config's services (drained first) and VIPs with
    C(lbtune ipvs teardown).
  - Check mode runs C(lbtune ipvs plan) and changes nothing. Diff mode shows each
    operation's object before and after.
  - Manual drift in the kernel's table is repaired on the next run, unlike a keepalived
    reload, which compares configs, not the kernel.
version_added: "0.1.0"
author:
  - lbtune developers (!UNKNOWN)
options:
  config:
    description:
      - Path of the director config on the managed host (see lbtune's docs/ipvs.md).
    type: path
    required: true
  state:
    description:
      - C(present) reconciles the table with the config; C(absent) tears the config's
        services and VIPs down.
    type: str
    choices: [present, absent]
    default: present
extends_documentation_fragment:
  - lbtune.fleet.lbtune
notes:
  - Needs lbtune and a kernel with IPVS on the managed host, and root. I(root) is refused
    by lbtune, since IPVS is the running kernel's.
  - Supports C(check_mode) and C(diff_mode).
seealso:
  - module: lbtune.fleet.lbtune_profile
"""

EXAMPLES = r"""
- name: Director table as configured
  lbtune.fleet.lbtune_ipvs:
    config: /etc/lbtune/director.toml

- name: Take the director's services down (drained first)
  lbtune.fleet.lbtune_ipvs:
    config: /etc/lbtune/director.toml
    state: absent
"""

RETURN = r"""
operations:
  description: How many IPVS operations were (or, in check mode, would be) made.
  returned: always
  type: int
  sample: 3
unchanged:
  description: Objects already as the config wants them.
  returned: always
  type: int
changes:
  description: The operations - op (add, edit, drain, delete, set), kind, object, current
    and desired.
  returned: always
  type: list
  elements: dict
warnings_lbtune:
  description: lbtune's warnings about the config against this host.
  returned: always
  type: list
  elements: str
journal:
  description: The journal id of the change, for C(lbtune rollback).
  returned: when something changed
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.lbtune.fleet.plugins.module_utils.lbtune_cli import (
    COMMON_ARGS,
    Lbtune,
    LbtuneError,
    diff_of,
)


def _short(row):
    return dict((k, row.get(k)) for k in ("op", "kind", "object", "current", "desired"))


def main():
    spec = dict(
        config=dict(type="path", required=True),
        state=dict(type="str", choices=["present", "absent"], default="present"),
    )
    spec.update(COMMON_ARGS)
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    p = module.params
    teardown = p["state"] == "absent"
    try:
        lb = Lbtune(module)
        if module.check_mode:
            _rc, doc = lb.run(["ipvs", "plan", p["config"]] + (["--teardown"] if teardown else []))
        else:
            # apply and teardown are level-triggered and report what they changed, so one
            # run does it (a repeated apply that finds nothing to change is answered from
            # lbtune's record of the last one: docs/ipvs.md "Performance")
            _rc, doc = lb.run(["ipvs", "teardown" if teardown else "apply", p["config"]])
    except LbtuneError as exc:
        module.fail_json(msg=exc.message, rc=exc.rc)
    rows = [r for r in doc.get("changes", []) if r.get("action") == "change"]
    result = dict(
        changed=bool(doc.get("operations")),
        operations=doc.get("operations", 0),
        unchanged=doc.get("unchanged", 0),
        changes=[_short(r) for r in rows],
        warnings_lbtune=doc.get("warnings", []),
    )
    if doc.get("journal"):
        result["journal"] = doc["journal"]
    if module._diff:
        result["diff"] = diff_of(rows, "current", "desired", "ipvs %s" % p["config"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
